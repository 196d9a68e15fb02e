/*
 * Streams, events and host callbacks. Handles the application sees are the
 * server's ids (stream ids 0, 1 and 2 are the default, legacy and per-thread
 * streams, as cudaStreamLegacy and cudaStreamPerThread already are).
 * Recording events, waits and host functions are pipelined.
 */
#include "client.h"

#include <string.h>

static cudaError_t call_u64(uint16_t op, const void *req, size_t req_size, uint64_t *out)
{
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call(op, req, req_size, NULL, 0, &sink);
    if (err == cudaSuccess)
        *out = rep.value;
    return flyt_set_error(err);
}

static cudaError_t call_i32(uint16_t op, uint64_t handle, int *out)
{
    flyt_req_handle req = {.handle = handle};
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call(op, &req, sizeof req, NULL, 0, &sink);
    if (err == cudaSuccess)
        *out = rep.value;
    return flyt_set_error(err);
}

static cudaError_t call_handle(uint16_t op, uint64_t handle)
{
    flyt_req_handle req = {.handle = handle};
    return flyt_call(op, &req, sizeof req, NULL, 0, NULL);
}

/* ---- streams ---- */

FLYT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags,
                                                     int priority)
{
    if (stream == NULL || (flags & ~cudaStreamNonBlocking))
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_stream_create req = {.flags = flags, .priority = priority};
    uint64_t id = 0;
    cudaError_t err = call_u64(FLYT_OP_STREAM_CREATE, &req, sizeof req, &id);
    if (err == cudaSuccess)
        *stream = (cudaStream_t)(uintptr_t)id;
    return err;
}

FLYT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    return cudaStreamCreateWithPriority(stream, flags, 0);
}

FLYT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithPriority(stream, cudaStreamDefault, 0);
}

FLYT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    return flyt_set_error(call_handle(FLYT_OP_STREAM_DESTROY, flyt_stream_id(stream)));
}

FLYT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return flyt_set_error(call_handle(FLYT_OP_STREAM_SYNC, flyt_stream_id(stream)));
}
FLYT_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return cudaStreamSynchronize(flyt_ptsz(stream));
}

/* cudaErrorNotReady is an answer, not an error: it is not recorded. */
FLYT_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t err = call_handle(FLYT_OP_STREAM_QUERY, flyt_stream_id(stream));
    return err == cudaErrorNotReady ? err : flyt_set_error(err);
}
FLYT_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    return cudaStreamQuery(flyt_ptsz(stream));
}

FLYT_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    flyt_req_stream_wait req = {.stream = flyt_stream_id(stream),
                                .event = (uint64_t)(uintptr_t)event, .flags = flags};
    return flyt_set_error(flyt_send_async(FLYT_OP_STREAM_WAIT_EVENT, &req, sizeof req, NULL, 0));
}
FLYT_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                 unsigned int flags)
{
    return cudaStreamWaitEvent(flyt_ptsz(stream), event, flags);
}

FLYT_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags)
{
    if (flags == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    int v = 0;
    cudaError_t err = call_i32(FLYT_OP_STREAM_GET_FLAGS, flyt_stream_id(stream), &v);
    if (err == cudaSuccess)
        *flags = (unsigned)v;
    return err;
}
FLYT_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t stream, unsigned int *flags)
{
    return cudaStreamGetFlags(flyt_ptsz(stream), flags);
}

FLYT_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority)
{
    if (priority == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    return call_i32(FLYT_OP_STREAM_GET_PRIO, flyt_stream_id(stream), priority);
}
FLYT_EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t stream, int *priority)
{
    return cudaStreamGetPriority(flyt_ptsz(stream), priority);
}

FLYT_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device)
{
    (void)stream;
    if (device == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
FLYT_EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t stream, int *device)
{
    return cudaStreamGetDevice(stream, device);
}

/* ---- host functions: they run in this process, on the callback thread,
 * when the server reports that the stream reached them ---- */

static cudaError_t host_func(cudaStream_t stream, void (*fn)(void *),
                             void (*cb)(cudaStream_t, cudaError_t, void *), void *user)
{
    if (fn == NULL && cb == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = flyt_connect_once();
    if (err != cudaSuccess)
        return flyt_set_error(err);
    uint64_t id = flyt_callback_register(fn, cb, stream, user);
    if (id == 0)
        return flyt_set_error(cudaErrorMemoryAllocation);
    flyt_req_host_func req = {.stream = flyt_stream_id(stream), .callback_id = id};
    return flyt_set_error(flyt_send_async(FLYT_OP_STREAM_HOST_FUNC, &req, sizeof req, NULL, 0));
}

FLYT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user)
{
    return host_func(stream, fn, NULL, user);
}
FLYT_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *user)
{
    return host_func(flyt_ptsz(stream), fn, NULL, user);
}
FLYT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb,
                                              void *user, unsigned int flags)
{
    if (flags != 0)
        return flyt_set_error(cudaErrorInvalidValue);
    return host_func(stream, NULL, cb, user);
}
FLYT_EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t cb,
                                                   void *user, unsigned int flags)
{
    return cudaStreamAddCallback(flyt_ptsz(stream), cb, user, flags);
}

/* ---- events ---- */

FLYT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (event == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_i32 req = {.value = (int32_t)flags};
    uint64_t id = 0;
    cudaError_t err = call_u64(FLYT_OP_EVENT_CREATE, &req, sizeof req, &id);
    if (err == cudaSuccess)
        *event = (cudaEvent_t)(uintptr_t)id;
    return err;
}

FLYT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

FLYT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    return flyt_set_error(call_handle(FLYT_OP_EVENT_DESTROY, (uint64_t)(uintptr_t)event));
}

FLYT_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                 unsigned int flags)
{
    if (event == NULL)
        return flyt_set_error(cudaErrorInvalidResourceHandle);
    flyt_req_event_record req = {.event = (uint64_t)(uintptr_t)event,
                                 .stream = flyt_stream_id(stream), .flags = flags};
    return flyt_set_error(flyt_send_async(FLYT_OP_EVENT_RECORD, &req, sizeof req, NULL, 0));
}
FLYT_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                      unsigned int flags)
{
    return cudaEventRecordWithFlags(event, flyt_ptsz(stream), flags);
}
FLYT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return cudaEventRecordWithFlags(event, stream, 0);
}
FLYT_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return cudaEventRecordWithFlags(event, flyt_ptsz(stream), 0);
}

FLYT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t err = call_handle(FLYT_OP_EVENT_QUERY, (uint64_t)(uintptr_t)event);
    return err == cudaErrorNotReady ? err : flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return flyt_set_error(call_handle(FLYT_OP_EVENT_SYNC, (uint64_t)(uintptr_t)event));
}

FLYT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (ms == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_handle_pair req = {.a = (uint64_t)(uintptr_t)start, .b = (uint64_t)(uintptr_t)end};
    flyt_rep_f32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    cudaError_t err = flyt_call(FLYT_OP_EVENT_ELAPSED, &req, sizeof req, NULL, 0, &sink);
    if (err == cudaSuccess)
        *ms = rep.value;
    return err == cudaErrorNotReady ? err : flyt_set_error(err);
}

/* ---- small local helpers CUDA exports ---- */

FLYT_EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                               enum cudaChannelFormatKind f)
{
    struct cudaChannelFormatDesc d = {x, y, z, w, f};
    return d;
}
