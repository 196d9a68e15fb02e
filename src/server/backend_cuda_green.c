/*
 * The SM share of the "cuda" backend: a green context made of the SM groups
 * the server was given (--sm-groups, --sm-granularity).
 *
 * Building it: the device's SM resource (cuDeviceGetDevResource) is split
 * into groups of `granularity` SMs (cuDevSmResourceSplitByCount; the split is
 * the same in every process, so group i names the same physical SMs for every
 * server on the GPU, which keeps shares disjoint); the listed groups make one
 * descriptor (cuDevResourceGenerateDesc), and cuGreenCtxCreate provisions it
 * with CU_GREEN_CTX_DEFAULT_STREAM (required). cuCtxFromGreenCtx gives the
 * CUcontext that the backend then makes current for every call, instead of
 * the primary context; memory, modules, events and pools behave as in the
 * primary context (the driver treats the converted context as the primary
 * context with the green context's resources), and kernels run on the
 * share's SMs.
 *
 * Streams inside the share (what the driver documents, and what we do):
 * - NULL stream (0) and CU_STREAM_LEGACY: while a context converted from a
 *   green context is current, these special handles name that green
 *   context's own default stream, the one CU_GREEN_CTX_DEFAULT_STREAM made
 *   (cuStreamGetGreenCtx: "special stream such as the NULL stream or
 *   CU_STREAM_LEGACY ... if the context active in the calling thread was
 *   obtained with cuCtxFromGreenCtx, that green context is returned"). The
 *   session thread always has the converted context current (flyt_cuda_ctx),
 *   so the application's default-stream work runs in the share and keeps
 *   its legacy-stream ordering. Nothing to translate.
 * - Streams the application creates: cuGreenCtxStreamCreate accepts only
 *   CU_STREAM_NON_BLOCKING, so non-blocking streams are made with it; a
 *   blocking stream (cudaStreamCreate's default) must keep its implicit
 *   synchronization with the legacy stream, so it is made with
 *   cuStreamCreateWithPriority while the converted context is current, which
 *   the driver documents as a stream of that green context.
 * - CU_STREAM_PER_THREAD: the driver does not say how it behaves under a
 *   green context (cuStreamGetCtx_v2 rejects it with INVALID_HANDLE while one
 *   is current), so it is not passed to the driver: the backend creates one
 *   blocking stream in the green context and uses it for the per-thread
 *   stream. A session has one thread, so the per-thread default stream is a
 *   single stream anyway, and a blocking stream orders against the legacy
 *   stream as the per-thread stream does.
 * tests/gpu/share_check.cu checks all of these on a GPU by the SM ids that
 * the kernel's blocks ran on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda_int.h"
#include "flyt_log.h"

static const char *errname(struct flyt_cuda_backend *b, CUresult r)
{
    const char *s = NULL;
    if (b->cu.cuGetErrorName && b->cu.cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_?";
}

void flyt_cuda_green_drop(struct flyt_cuda_backend *b)
{
    if (!b->green)
        return;
    if (b->ctx && flyt_cuda_ctx(b) == CUDA_SUCCESS) {
        b->cu.cuCtxSynchronize();
        flyt_cuda_blocking_clear(b);
        if (b->pt_stream)
            b->cu.cuStreamDestroy(b->pt_stream);
    }
    b->pt_stream = NULL;
    CUresult r = b->cu.cuGreenCtxDestroy(b->green);
    if (r != CUDA_SUCCESS)
        flyt_warn("cuda backend: destroying the green context: %s", errname(b, r));
    b->green = NULL;
    b->share_sms = 0;
    b->ctx = b->primary; /* back to the primary context, if still held */
    if (b->ctx)
        flyt_cuda_ctx(b);
}

/* "0,1,2" for the log. */
static void group_list(const int *groups, int n, char *out, size_t outlen)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < outlen; i++)
        used += (size_t)snprintf(out + used, outlen - used, "%s%d", i ? "," : "", groups[i]);
}

/* A green context of the listed groups and its converted CUcontext; nothing
 * in b changes. */
static CUresult make_green(struct flyt_cuda_backend *b, const int *sel, int nsel, unsigned gran,
                           CUgreenCtx *green_out, CUcontext *ctx_out, int *sms_out,
                           unsigned *gpu_sms)
{
    CUdevResource all;
    memset(&all, 0, sizeof all);
    CUresult r = b->cu.cuDeviceGetDevResource(b->dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) {
        flyt_error("cuda backend: cannot read the GPU's SM resource: %s", errname(b, r));
        return r;
    }
    unsigned avail = 0;
    r = b->cu.cuDevSmResourceSplitByCount(NULL, &avail, &all, NULL, 0, gran);
    if (r != CUDA_SUCCESS || avail == 0) {
        flyt_error("cuda backend: the GPU's %u SMs do not split into groups of %u: %s",
                   all.sm.smCount, gran, r != CUDA_SUCCESS ? errname(b, r) : "no group");
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
    }
    CUdevResource *groups = calloc(avail, sizeof *groups);
    CUdevResource *picked = calloc((size_t)nsel, sizeof *picked);
    if (!groups || !picked) {
        free(groups);
        free(picked);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unsigned got = avail;
    r = b->cu.cuDevSmResourceSplitByCount(groups, &got, &all, NULL, 0, gran);
    int sms = 0, logged = 0;
    for (int i = 0; r == CUDA_SUCCESS && i < nsel; i++) {
        if (sel[i] < 0 || (unsigned)sel[i] >= got) {
            flyt_error("cuda backend: SM group %d does not exist: the GPU's %u SMs split into %u "
                       "groups of %u", sel[i], all.sm.smCount, got, gran);
            r = CUDA_ERROR_INVALID_VALUE;
            logged = 1;
            break;
        }
        picked[i] = groups[sel[i]];
        sms += (int)picked[i].sm.smCount;
    }
    CUdevResourceDesc desc = NULL;
    if (r == CUDA_SUCCESS)
        r = b->cu.cuDevResourceGenerateDesc(&desc, picked, (unsigned)nsel);
    free(groups);
    free(picked);
    CUgreenCtx green = NULL;
    if (r == CUDA_SUCCESS)
        r = b->cu.cuGreenCtxCreate(&green, desc, b->dev, CU_GREEN_CTX_DEFAULT_STREAM);
    CUcontext ctx = NULL;
    if (r == CUDA_SUCCESS) {
        r = b->cu.cuCtxFromGreenCtx(&ctx, green);
        if (r != CUDA_SUCCESS)
            b->cu.cuGreenCtxDestroy(green);
    }
    if (r != CUDA_SUCCESS) {
        if (!logged)
            flyt_error("cuda backend: cannot make the green context of %d SM group(s): %s", nsel,
                       errname(b, r));
        return r;
    }
    *green_out = green;
    *ctx_out = ctx;
    *sms_out = sms;
    *gpu_sms = all.sm.smCount;
    return CUDA_SUCCESS;
}

/* The per-thread default stream of the current green context (a blocking one). */
static CUresult make_pt_stream(struct flyt_cuda_backend *b)
{
    CUresult r = b->cu.cuStreamCreateWithPriority(&b->pt_stream, CU_STREAM_DEFAULT, 0);
    if (r == CUDA_SUCCESS)
        r = flyt_cuda_blocking_add(b, b->pt_stream);
    return r;
}

CUresult flyt_cuda_green_build(struct flyt_cuda_backend *b)
{
    CUgreenCtx green = NULL;
    CUcontext ctx = NULL;
    int sms = 0;
    unsigned total = 0;
    CUresult r = make_green(b, b->share_groups, b->share_n, b->share_gran, &green, &ctx, &sms,
                            &total);
    if (r != CUDA_SUCCESS)
        return r;
    b->green = green;
    b->ctx = ctx;
    r = flyt_cuda_ctx(b);
    if (r == CUDA_SUCCESS)
        r = make_pt_stream(b);
    if (r != CUDA_SUCCESS) {
        flyt_error("cuda backend: the green context does not work: %s", errname(b, r));
        flyt_cuda_green_drop(b);
        return r;
    }
    b->share_sms = sms;
    char list[256];
    group_list(b->share_groups, b->share_n, list, sizeof list);
    flyt_info("cuda backend: green context of SM groups %s (groups of %u): %d of the GPU's %u SMs",
              list, b->share_gran, sms, total);
    return CUDA_SUCCESS;
}

CUresult flyt_cuda_set_sm_share(flyt_backend *base, unsigned granularity, const int *groups,
                                int ngroups, int *sm_count)
{
    struct flyt_cuda_backend *b = (struct flyt_cuda_backend *)base;
    if (!b || granularity == 0 || ngroups <= 0 || !groups || !sm_count)
        return CUDA_ERROR_INVALID_VALUE;
    if (b->share_n > 0 || b->green)
        return CUDA_ERROR_INVALID_VALUE; /* once per session */
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    int *copy = malloc((size_t)ngroups * sizeof *copy);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, groups, (size_t)ngroups * sizeof *copy);
    b->share_groups = copy;
    b->share_n = ngroups;
    b->share_gran = granularity;
    r = flyt_cuda_green_build(b);
    if (r != CUDA_SUCCESS) {
        free(b->share_groups);
        b->share_groups = NULL;
        b->share_n = 0;
        return r;
    }
    *sm_count = b->share_sms;
    return CUDA_SUCCESS;
}

/* ---- live resize ---- */

struct moved_stream {
    CUstream old, now;
    unsigned flags; /* as the application asked: blocking or not */
    int      priority;
};

/* The application's streams with their flags and priority. */
static CUresult streams_collect(struct flyt_cuda_backend *b, struct moved_stream **out, size_t *n)
{
    *n = 0;
    *out = calloc(b->streams.count ? b->streams.count : 1, sizeof **out);
    if (!*out)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_hash_iter it;
    flyt_hash_slot *slot;
    flyt_hash_iter_init(&b->streams, &it);
    while ((slot = flyt_hash_iter_next(&b->streams, &it)) != NULL) {
        CUstream s = (CUstream)(uintptr_t)slot->key;
        struct moved_stream *m = &(*out)[(*n)++];
        m->old = s;
        CUresult r = b->cu.cuStreamGetFlags(s, &m->flags);
        if (r == CUDA_SUCCESS)
            r = b->cu.cuStreamGetPriority(s, &m->priority);
        if (r != CUDA_SUCCESS)
            return r;
        if (b->green) /* green streams are non-blocking to the driver; what was asked: */
            m->flags = flyt_cuda_is_blocking(b, s) ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
    }
    return CUDA_SUCCESS;
}

static void stream_forget(struct flyt_cuda_backend *b, CUstream s)
{
    flyt_pset_del(&b->streams, s);
    flyt_cuda_blocking_del(b, s);
    b->cu.cuStreamDestroy(s);
}

CUresult flyt_cuda_resize_sm_share(flyt_backend *base, unsigned granularity, const int *groups,
                                   int ngroups, int *sm_count,
                                   void (*remap)(void *arg, flyt_bhandle old, flyt_bhandle now),
                                   void *arg)
{
    struct flyt_cuda_backend *b = (struct flyt_cuda_backend *)base;
    if (!b || granularity == 0 || ngroups <= 0 || !groups || !sm_count || !remap)
        return CUDA_ERROR_INVALID_VALUE;
    if (b->captures > 0) /* a capture's graph is tied to its streams: not moved */
        return CUDA_ERROR_NOT_PERMITTED;
    CUresult r = flyt_cuda_ctx(b);
    if (r == CUDA_SUCCESS)
        r = b->cu.cuCtxSynchronize(); /* the caller drained; nothing may run on the old SMs */
    if (r != CUDA_SUCCESS)
        return r;
    int *copy = malloc((size_t)ngroups * sizeof *copy);
    struct moved_stream *ms = NULL;
    size_t n = 0;
    r = copy ? streams_collect(b, &ms, &n) : CUDA_ERROR_OUT_OF_MEMORY;
    CUgreenCtx green = NULL;
    CUcontext ctx = NULL;
    int sms = 0;
    unsigned total = 0;
    if (r == CUDA_SUCCESS)
        r = make_green(b, groups, ngroups, granularity, &green, &ctx, &sms, &total);
    if (r != CUDA_SUCCESS) {
        free(copy);
        free(ms);
        return r;
    }
    memcpy(copy, groups, (size_t)ngroups * sizeof *copy);

    CUgreenCtx old_green = b->green;
    CUcontext old_ctx = b->ctx;
    CUstream old_pt = b->pt_stream;
    b->green = green;
    b->ctx = ctx;
    b->pt_stream = NULL;
    r = flyt_cuda_ctx(b);
    if (r == CUDA_SUCCESS)
        r = make_pt_stream(b);
    size_t made = 0;
    for (; r == CUDA_SUCCESS && made < n; made++)
        r = flyt_cuda_stream_make(b, ms[made].flags, ms[made].priority, &ms[made].now);
    if (r != CUDA_SUCCESS) { /* back to the old share, as it was */
        flyt_error("cuda backend: resize to %d SM group(s) failed, the share stays: %s", ngroups,
                   errname(b, r));
        for (size_t i = 0; i < made; i++)
            if (ms[i].now)
                stream_forget(b, ms[i].now);
        if (b->pt_stream) {
            flyt_cuda_blocking_del(b, b->pt_stream);
            b->cu.cuStreamDestroy(b->pt_stream);
        }
        b->green = old_green;
        b->ctx = old_ctx;
        b->pt_stream = old_pt;
        flyt_cuda_ctx(b);
        b->cu.cuGreenCtxDestroy(green);
        free(copy);
        free(ms);
        return r;
    }
    for (size_t i = 0; i < n; i++) {
        remap(arg, (flyt_bhandle)ms[i].old, (flyt_bhandle)ms[i].now);
        stream_forget(b, ms[i].old);
    }
    if (old_pt) {
        flyt_cuda_blocking_del(b, old_pt);
        b->cu.cuStreamDestroy(old_pt);
    }
    if (old_green) {
        r = b->cu.cuGreenCtxDestroy(old_green);
        if (r != CUDA_SUCCESS)
            flyt_warn("cuda backend: destroying the old green context: %s", errname(b, r));
    }
    free(b->share_groups);
    b->share_groups = copy;
    b->share_n = ngroups;
    b->share_gran = granularity;
    b->share_sms = sms;
    char list[256];
    group_list(groups, ngroups, list, sizeof list);
    flyt_info("cuda backend: resized to SM groups %s (groups of %u): %d of the GPU's %u SMs, "
              "%zu stream(s) moved", list, granularity, sms, total, n);
    *sm_count = sms;
    return CUDA_SUCCESS;
}
