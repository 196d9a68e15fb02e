/*
 * Contexts, answered in the client: the session's server holds one context
 * on its one GPU, and every context the program sees (the primary one and
 * any it creates) runs its work there. What differs between them here is
 * only what the program can observe locally: identity, flags, each
 * thread's context stack and context-local storage (ctx_storage.c).
 *
 * Context records are never freed: a destroyed one is marked dead, so a
 * stale handle in another thread reads as invalid instead of freed memory.
 */
#include "client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ctx_storage.h"

#define CTX_MAGIC 0x43545846u /* "FXTC" */
#define CTX_DEAD  0x44414544u
#define STACK_DEPTH 32

struct CUctx_st {
    uint32_t magic;
    int primary;
    CUdevice device;
    unsigned flags;
    unsigned long long id;
    struct CUctx_st *next_created; /* every created context, dead or alive */
};

static struct CUctx_st primary_ctx = {.magic = CTX_MAGIC, .primary = 1, .id = 1};
static struct {
    pthread_mutex_t lock;
    int refs;       /* primary context retains not yet released */
    int flags_set;  /* flags chosen before the primary context became active */
} primary = {.lock = FLYT_MUTEX_INITIALIZER};
static atomic_ullong next_ctx_id = 2;
static struct CUctx_st *created; /* kept reachable: records are never freed */
static pthread_mutex_t created_lock = FLYT_MUTEX_INITIALIZER;

static _Thread_local CUcontext ctx_stack[STACK_DEPTH];
static _Thread_local int ctx_depth;

int flyt_ctx_valid(CUcontext ctx) { return flyt_aligned(ctx) && ctx->magic == CTX_MAGIC; }

CUcontext flyt_ctx_current(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

uint64_t flyt_ctx_id(CUcontext ctx) { return flyt_ctx_valid(ctx) ? ctx->id : 0; }

CUresult flyt_ctx_require_at(const char *where)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return flyt_trace(where, r);
    return flyt_ctx_valid(flyt_ctx_current()) ? CUDA_SUCCESS
                                              : flyt_trace(where, CUDA_ERROR_INVALID_CONTEXT);
}

static int any_context_alive(void)
{
    pthread_mutex_lock(&primary.lock);
    int alive = primary.refs > 0;
    pthread_mutex_unlock(&primary.lock);
    pthread_mutex_lock(&created_lock);
    for (struct CUctx_st *c = created; c != NULL && !alive; c = c->next_created)
        alive = c->magic == CTX_MAGIC;
    pthread_mutex_unlock(&created_lock);
    return alive;
}

/* A call on an object (an event, a stream the program created) acts in the
 * object's context, as the driver's do: a thread with no current context
 * may make it while a context lives (NVIDIA's runtime makes none current
 * for cudaEventQuery/Synchronize, e.g. in PyTorch's pin-memory thread). */
CUresult flyt_ctx_require_object_at(const char *where)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return flyt_trace(where, r);
    return flyt_ctx_valid(flyt_ctx_current()) || any_context_alive()
               ? CUDA_SUCCESS
               : flyt_trace(where, CUDA_ERROR_INVALID_CONTEXT);
}

/* NULL means the current context, as in most cuCtx* calls. */
#define resolve(ctx) resolve_at(ctx, __func__)
static CUresult resolve_at(CUcontext *ctx, const char *where)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return flyt_trace(where, r);
    if (*ctx == NULL)
        *ctx = flyt_ctx_current();
    return flyt_ctx_valid(*ctx) ? CUDA_SUCCESS : flyt_trace(where, CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- primary context ---- */

FLYT_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary.lock);
    primary.refs++;
    pthread_mutex_unlock(&primary.lock);
    *pctx = &primary_ctx;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&primary.lock);
    if (primary.refs > 0)
        primary.refs--;
    else
        r = CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&primary.lock);
    return flyt_trace(__func__, r);
}
FLYT_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

FLYT_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary.lock);
    *flags = primary_ctx.flags | CU_CTX_MAP_HOST; /* always on since CUDA 11 */
    *active = primary.refs > 0;
    pthread_mutex_unlock(&primary.lock);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                            CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                            CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_i32 req = {.value = (int32_t)(flags & CU_CTX_SCHED_MASK)};
    r = flyt_call(FLYT_OP_DEVICE_SET_FLAGS, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&primary.lock);
        primary_ctx.flags = flags;
        primary.flags_set = 1;
        pthread_mutex_unlock(&primary.lock);
    }
    return r;
}
FLYT_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* Frees everything the session holds on the GPU, as a primary context
 * reset does; libraries stay loaded here and are shipped again on use. */
FLYT_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    r = flyt_call(FLYT_OP_DEVICE_RESET, &(flyt_req_none){0}, sizeof(flyt_req_none), NULL, 0, NULL);
    flyt_range_clear_device();
    flyt_mremote_forget_all();
    flyt_pinned_remote_forget_backing();
    flyt_range_forget_regions();
    flyt_regions_forget_all();
    flyt_modules_reset();
    flyt_streams_reset();
    flyt_ctx_storage_drop(&primary_ctx);
    pthread_mutex_lock(&primary.lock);
    primary.refs = 0;
    primary_ctx.flags = 0;
    pthread_mutex_unlock(&primary.lock);
    return r;
}
FLYT_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

/* ---- created contexts ---- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx_depth >= STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (struct CUctx_st){.magic = CTX_MAGIC, .device = dev, .flags = flags,
                           .id = atomic_fetch_add(&next_ctx_id, 1)};
    pthread_mutex_lock(&created_lock);
    c->next_created = created;
    created = c;
    pthread_mutex_unlock(&created_lock);
    ctx_stack[ctx_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

FLYT_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                    unsigned int flags, CUdevice dev)
{
    if (n > 0 || params != NULL)
        return flyt_unsupported_why("cuCtxCreate_v3", "execution affinity: the operator sets the share");
    return ctx_create(pctx, flags, dev);
}

FLYT_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                    CUdevice dev)
{
    if (params != NULL && (params->execAffinityParams != NULL || params->cigParams != NULL))
        return flyt_unsupported_why("cuCtxCreate_v4", "execution affinity and CIG");
    return ctx_create(pctx, flags, dev);
}

/* Removes ctx from this thread's stack wherever it is. */
static void unstack(CUcontext ctx)
{
    int out = 0;
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] != ctx)
            ctx_stack[out++] = ctx_stack[i];
    ctx_depth = out;
}

FLYT_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flyt_ctx_valid(ctx) || ctx->primary)
        return flyt_trace(__func__, CUDA_ERROR_INVALID_CONTEXT);
    /* its work must be finished before it goes, as with a real context */
    r = flyt_call(FLYT_OP_DEVICE_SYNC, &(flyt_req_none){0}, sizeof(flyt_req_none), NULL, 0, NULL);
    flyt_ctx_storage_drop(ctx);
    unstack(ctx);
    ctx->magic = CTX_DEAD;
    return r;
}

FLYT_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flyt_ctx_valid(ctx))
        return flyt_trace(__func__, CUDA_ERROR_INVALID_CONTEXT);
    if (ctx_depth >= STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (ctx_depth == 0)
        return flyt_trace(__func__, CUDA_ERROR_INVALID_CONTEXT);
    CUcontext c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (ctx == NULL) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!flyt_ctx_valid(ctx))
        return flyt_trace(__func__, CUDA_ERROR_INVALID_CONTEXT);
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = flyt_ctx_current();
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult r = resolve(&ctx);
    if (r == CUDA_SUCCESS && device == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *device = ctx->device;
    return r;
}
FLYT_EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return cuCtxGetDevice_v2(device, NULL); }

FLYT_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult r = resolve(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    return flyt_call(FLYT_OP_DEVICE_SYNC, &(flyt_req_none){0}, sizeof(flyt_req_none), NULL, 0, NULL);
}
FLYT_EXPORT CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

FLYT_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    CUcontext ctx = NULL;
    CUresult r = resolve(&ctx);
    if (r == CUDA_SUCCESS && flags == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *flags = ctx->flags | CU_CTX_MAP_HOST; /* always on since CUDA 11 */
    return r;
}

FLYT_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    CUcontext ctx = NULL;
    CUresult r = resolve(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_i32 req = {.value = (int32_t)(flags & CU_CTX_SCHED_MASK)};
    r = flyt_call(FLYT_OP_DEVICE_SET_FLAGS, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        ctx->flags = flags;
    return r;
}

FLYT_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    CUresult r = resolve(&ctx);
    if (r == CUDA_SUCCESS && id == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *id = ctx->id;
    return r;
}

FLYT_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult r = resolve(&ctx);
    if (r == CUDA_SUCCESS && version == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *version = 3020; /* every context of the _v2 API reports this */
    return r;
}

FLYT_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_limit req = {.limit = (int32_t)limit};
    uint64_t v = 0;
    r = flyt_call_u64(FLYT_OP_DEVICE_GET_LIMIT, &req, sizeof req, &v);
    if (r == CUDA_SUCCESS)
        *value = (size_t)v;
    return r;
}

FLYT_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_limit req = {.limit = (int32_t)limit, .value = value};
    return flyt_call(FLYT_OP_DEVICE_SET_LIMIT, &req, sizeof req, NULL, 0, NULL);
}

FLYT_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_rep_i32 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_DEVICE_GET_CACHE, &(flyt_req_none){0}, sizeof(flyt_req_none), NULL, 0,
                  &sink);
    if (r == CUDA_SUCCESS)
        *config = (CUfunc_cache)rep.value;
    return r;
}

FLYT_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_i32 req = {.value = (int32_t)config};
    return flyt_call(FLYT_OP_DEVICE_SET_CACHE, &req, sizeof req, NULL, 0, NULL);
}

/* The context runs on the tenant's SMs, whatever its share: the driver of a
 * share's green context refuses this question, so it is answered here. */
FLYT_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam *param, CUexecAffinityType type)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (param == NULL || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    memset(param, 0, sizeof *param);
    param->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    param->param.smCount.val = (unsigned)flyt_device_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return CUDA_SUCCESS;
}

/* Shared-memory bank size is fixed at four bytes on every GPU CUDA 13 runs. */
FLYT_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    CUresult r = flyt_ctx_require();
    if (r == CUDA_SUCCESS && config == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return r;
}

FLYT_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    (void)config;
    return flyt_ctx_require();
}

FLYT_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    static int cached, cached_least, cached_greatest;
    if (!__atomic_load_n(&cached, __ATOMIC_ACQUIRE)) {
        flyt_rep_i32_pair rep = {0};
        struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
        r = flyt_call(FLYT_OP_DEVICE_PRIO_RANGE, &(flyt_req_none){0}, sizeof(flyt_req_none), NULL,
                      0, &sink);
        if (r != CUDA_SUCCESS)
            return r;
        cached_least = rep.a;
        cached_greatest = rep.b;
        __atomic_store_n(&cached, 1, __ATOMIC_RELEASE);
    }
    if (least)
        *least = cached_least;
    if (greatest)
        *greatest = cached_greatest;
    return CUDA_SUCCESS;
}
