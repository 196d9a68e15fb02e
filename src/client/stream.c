/*
 * Streams, events and host functions.
 *
 * A CUstream or CUevent the program holds is its id, chosen here. The
 * two special streams keep their CUDA values: 0 and CU_STREAM_LEGACY are
 * the legacy default stream (wire id 0 and 1). CU_STREAM_PER_THREAD, and 0
 * in a _ptsz/_ptds call, is the calling thread's own default stream: a
 * blocking stream made on the thread's first use, so that two threads'
 * default streams are distinct, as in CUDA.
 */
#include "client.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- handles chosen here ----
 * Streams and events get their ids from this counter, in the range the
 * server keeps for client-chosen ids, so creating one is a pipelined
 * message: a failure surfaces at the next call that waits, and later calls
 * naming the id fail with CUDA_ERROR_INVALID_HANDLE. */
static atomic_ullong next_id = FLYT_CLIENT_IDS;

static uint64_t new_id(void) { return atomic_fetch_add(&next_id, 1); }
uint64_t flyt_new_id(void) { return new_id(); }

/* ---- each thread's default stream ---- */

static pthread_key_t thread_stream_key;
static pthread_once_t thread_stream_once = PTHREAD_ONCE_INIT;
static _Thread_local uint64_t thread_stream;      /* its wire id, 0 until made */
static _Thread_local unsigned thread_stream_gen;  /* reset generation it belongs to */
static atomic_uint reset_gen = 1;

static void thread_stream_exit(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    if (id > FLYT_STREAM_PER_THREAD)
        flyt_call_handle(FLYT_OP_STREAM_DESTROY, id);
}

static void thread_stream_key_make(void) { pthread_key_create(&thread_stream_key, thread_stream_exit); }

static uint64_t thread_default_stream(void)
{
    if (thread_stream != 0 && thread_stream_gen == atomic_load(&reset_gen))
        return thread_stream;
    flyt_req_stream_create req = {.flags = CU_STREAM_DEFAULT, .priority = 0, .id = new_id()};
    if (flyt_send_async(FLYT_OP_STREAM_CREATE, &req, sizeof req, NULL, 0) != CUDA_SUCCESS)
        return FLYT_STREAM_PER_THREAD; /* the server's shared one still works */
    uint64_t id = req.id;
    thread_stream = id;
    thread_stream_gen = atomic_load(&reset_gen);
    pthread_once(&thread_stream_once, thread_stream_key_make);
    pthread_setspecific(thread_stream_key, (void *)(uintptr_t)id);
    return id;
}

void flyt_streams_reset(void) { atomic_fetch_add(&reset_gen, 1); }

uint64_t flyt_stream_wire(CUstream stream, int per_thread)
{
    if (stream == CU_STREAM_PER_THREAD || (stream == NULL && per_thread))
        return thread_default_stream();
    if (stream == CU_STREAM_LEGACY)
        return FLYT_STREAM_LEGACY;
    return (uint64_t)(uintptr_t)stream;
}

/* A stream the program created carries its context; the NULL, legacy and
 * per-thread streams are the current context's. */
static CUresult require_for_stream(CUstream stream)
{
    int explicit_stream = stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
    return explicit_stream ? flyt_ctx_require_object() : flyt_ctx_require();
}

/* ---- streams ---- */

FLYT_EXPORT CUresult cuStreamCreateWithPriority(CUstream *stream, unsigned int flags, int priority)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (stream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_stream_create req = {.flags = flags, .priority = priority, .id = new_id()};
    r = flyt_send_async(FLYT_OP_STREAM_CREATE, &req, sizeof req, NULL, 0);
    if (r == CUDA_SUCCESS)
        *stream = (CUstream)(uintptr_t)req.id;
    return r;
}

FLYT_EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    return cuStreamCreateWithPriority(stream, flags, 0);
}

FLYT_EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
    CUresult r = require_for_stream(stream);
    if (r != CUDA_SUCCESS)
        return r;
    if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    return flyt_call_handle(FLYT_OP_STREAM_DESTROY, (uint64_t)(uintptr_t)stream);
}
FLYT_EXPORT CUresult cuStreamDestroy(CUstream stream) { return cuStreamDestroy_v2(stream); }

static CUresult stream_op(uint16_t op, CUstream stream, int per_thread)
{
    CUresult r = require_for_stream(per_thread && stream == NULL ? CU_STREAM_PER_THREAD : stream);
    return r != CUDA_SUCCESS ? r : flyt_call_handle(op, flyt_stream_wire(stream, per_thread));
}

FLYT_EXPORT CUresult cuStreamSynchronize(CUstream s) { return stream_op(FLYT_OP_STREAM_SYNC, s, 0); }
FLYT_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return stream_op(FLYT_OP_STREAM_SYNC, s, 1); }
FLYT_EXPORT CUresult cuStreamQuery(CUstream s) { return stream_op(FLYT_OP_STREAM_QUERY, s, 0); }
FLYT_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) { return stream_op(FLYT_OP_STREAM_QUERY, s, 1); }

static CUresult wait_event(CUstream stream, CUevent event, unsigned flags, int per_thread)
{
    CUresult r = require_for_stream(per_thread && stream == NULL ? CU_STREAM_PER_THREAD : stream);
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    flyt_req_stream_wait req = {.stream = flyt_stream_wire(stream, per_thread),
                                .event = (uint64_t)(uintptr_t)event, .flags = flags};
    return flyt_send_async(FLYT_OP_STREAM_WAIT_EVENT, &req, sizeof req, NULL, 0);
}
FLYT_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    return wait_event(s, e, flags, 0);
}
FLYT_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
    return wait_event(s, e, flags, 1);
}

static CUresult stream_i32(uint16_t op, CUstream stream, int per_thread, int *out)
{
    CUresult r = require_for_stream(per_thread && stream == NULL ? CU_STREAM_PER_THREAD : stream);
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_handle req = {.handle = flyt_stream_wire(stream, per_thread)};
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(op, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS)
        *out = rep.value;
    return r;
}
FLYT_EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    return stream_i32(FLYT_OP_STREAM_GET_FLAGS, s, 0, (int *)flags);
}
FLYT_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int *flags)
{
    return stream_i32(FLYT_OP_STREAM_GET_FLAGS, s, 1, (int *)flags);
}
FLYT_EXPORT CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    return stream_i32(FLYT_OP_STREAM_GET_PRIO, s, 0, priority);
}
FLYT_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int *priority)
{
    return stream_i32(FLYT_OP_STREAM_GET_PRIO, s, 1, priority);
}

/* Every stream lives in the one context of the session. */
static CUresult stream_ctx(CUstream stream, CUcontext *ctx)
{
    (void)stream;
    CUresult r = flyt_ctx_require();
    if (r == CUDA_SUCCESS && ctx == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *ctx = flyt_ctx_current();
    return r;
}
FLYT_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx) { return stream_ctx(s, ctx); }
FLYT_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *ctx) { return stream_ctx(s, ctx); }
FLYT_EXPORT CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *ctx, CUgreenCtx *green)
{
    if (green)
        *green = NULL;
    return stream_ctx(s, ctx);
}
FLYT_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *ctx, CUgreenCtx *green)
{
    return cuStreamGetCtx_v2(s, ctx, green);
}
FLYT_EXPORT CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    (void)s;
    CUresult r = flyt_ctx_require();
    if (r == CUDA_SUCCESS && dev == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *dev = 0;
    return r;
}
FLYT_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice *dev) { return cuStreamGetDevice(s, dev); }

/* Stream ids: the wire id is unique in the session already. */
FLYT_EXPORT CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    CUresult r = flyt_ctx_require();
    if (r == CUDA_SUCCESS && id == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *id = flyt_stream_wire(s, 0);
    return r;
}
FLYT_EXPORT CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id)
{
    CUresult r = flyt_ctx_require();
    if (r == CUDA_SUCCESS && id == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *id = flyt_stream_wire(s, 1);
    return r;
}

/* ---- host functions ---- */

static CUresult host_func(CUstream stream, CUhostFn fn, CUstreamCallback cb, void *user,
                          int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (fn == NULL && cb == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t wire = flyt_stream_wire(stream, per_thread);
    uint64_t id = flyt_callback_register(fn, cb, stream, user, !flyt_captures_open(), wire);
    if (id == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_host_func req = {.stream = wire, .callback_id = id};
    return flyt_send_async(FLYT_OP_STREAM_HOST_FUNC, &req, sizeof req, NULL, 0);
}

FLYT_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user)
{
    return host_func(s, fn, NULL, user, 0);
}
FLYT_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *user)
{
    return host_func(s, fn, NULL, user, 1);
}
FLYT_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user,
                                         unsigned int flags)
{
    return flags != 0 ? CUDA_ERROR_INVALID_VALUE : host_func(s, NULL, cb, user, 0);
}
FLYT_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *user,
                                              unsigned int flags)
{
    return flags != 0 ? CUDA_ERROR_INVALID_VALUE : host_func(s, NULL, cb, user, 1);
}

/* ---- events ---- */

FLYT_EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS) ||
        ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: an interprocess event is not timed */
    flyt_req_event_create req = {.flags = flags, .id = new_id()};
    r = flyt_send_async(FLYT_OP_EVENT_CREATE, &req, sizeof req, NULL, 0);
    if (r == CUDA_SUCCESS)
        *event = (CUevent)(uintptr_t)req.id;
    return r;
}

FLYT_EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return flyt_call_handle(FLYT_OP_EVENT_DESTROY, (uint64_t)(uintptr_t)event);
}
FLYT_EXPORT CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }

static CUresult event_record(CUevent event, CUstream stream, unsigned flags, int per_thread)
{
    CUresult r = require_for_stream(per_thread && stream == NULL ? CU_STREAM_PER_THREAD : stream);
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    flyt_req_event_record req = {.event = (uint64_t)(uintptr_t)event,
                                 .stream = flyt_stream_wire(stream, per_thread), .flags = flags};
    return flyt_send_async(FLYT_OP_EVENT_RECORD, &req, sizeof req, NULL, 0);
}
FLYT_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { return event_record(e, s, 0, 0); }
FLYT_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s, 0, 1); }
FLYT_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, 0);
}
FLYT_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
    return event_record(e, s, flags, 1);
}

static CUresult event_op(uint16_t op, CUevent event)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return flyt_call_handle(op, (uint64_t)(uintptr_t)event);
}
FLYT_EXPORT CUresult cuEventQuery(CUevent e) { return event_op(FLYT_OP_EVENT_QUERY, e); }
FLYT_EXPORT CUresult cuEventSynchronize(CUevent e) { return event_op(FLYT_OP_EVENT_SYNC, e); }

FLYT_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    CUresult r = flyt_ctx_require_object();
    if (r != CUDA_SUCCESS)
        return r;
    if (ms == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (start == NULL || end == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    flyt_req_handle_pair req = {.a = (uint64_t)(uintptr_t)start, .b = (uint64_t)(uintptr_t)end};
    flyt_rep_f32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_EVENT_ELAPSED, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS)
        *ms = rep.value;
    return r;
}
FLYT_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    return cuEventElapsedTime_v2(ms, start, end);
}
