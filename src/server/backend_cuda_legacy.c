/*
 * CUDA's legacy default stream inside a green context.
 *
 * Outside a green context the driver makes the legacy (NULL) stream wait for
 * every blocking stream and every blocking stream wait for it. Inside one it
 * does not: measured on an H100 (driver 580, CUDA 13.0), streams made there
 * report CU_STREAM_NON_BLOCKING and run concurrently with the legacy stream.
 * Applications rely on the implicit synchronization (a kernel on a created
 * stream reading what a cudaMemcpy on stream 0 wrote), so the backend makes
 * it itself, with pre-enqueue hooks only:
 *  - before work on a blocking stream: if the legacy stream got work since
 *    this stream last waited for it, record an event on the legacy stream
 *    and make this stream wait for it;
 *  - before work on the legacy stream: every blocking stream that got work
 *    since records an event, and the legacy stream waits for each.
 * A wait captures the event's most recent record, so one event per stream
 * is reused. Non-blocking streams are left alone, as CUDA leaves them.
 */
#include <stdlib.h>

#include "backend_cuda_int.h"

static struct flyt_blocking *find(struct flyt_cuda_backend *b, CUstream s)
{
    for (int i = 0; i < b->nblocking; i++)
        if (b->blocking[i].s == s)
            return &b->blocking[i];
    return NULL;
}

static int is_legacy(flyt_bhandle s)
{
    return s == FLYT_BSTREAM_DEFAULT || s == FLYT_BSTREAM_LEGACY;
}

CUresult flyt_cuda_blocking_add(struct flyt_cuda_backend *b, CUstream s)
{
    if (b->nblocking == b->cap_blocking) {
        int cap = b->cap_blocking ? b->cap_blocking * 2 : 16;
        struct flyt_blocking *more = realloc(b->blocking, (size_t)cap * sizeof *more);
        if (more == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        b->blocking = more;
        b->cap_blocking = cap;
    }
    CUevent ev = NULL;
    CUresult r = b->cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        return r;
    /* it has seen no legacy work yet: its first work waits for what there is */
    b->blocking[b->nblocking++] = (struct flyt_blocking){s, ev, b->legacy_gen - 1, 0};
    return CUDA_SUCCESS;
}

void flyt_cuda_blocking_del(struct flyt_cuda_backend *b, CUstream s)
{
    struct flyt_blocking *e = find(b, s);
    if (e == NULL)
        return;
    b->cu.cuEventDestroy(e->ev);
    *e = b->blocking[--b->nblocking];
}

int flyt_cuda_is_blocking(struct flyt_cuda_backend *b, CUstream s)
{
    return find(b, s) != NULL;
}

void flyt_cuda_blocking_clear(struct flyt_cuda_backend *b)
{
    for (int i = 0; i < b->nblocking; i++)
        b->cu.cuEventDestroy(b->blocking[i].ev);
    free(b->blocking);
    b->blocking = NULL;
    b->nblocking = b->cap_blocking = 0;
    if (b->legacy_ev)
        b->cu.cuEventDestroy(b->legacy_ev);
    b->legacy_ev = NULL;
}

/* A capturing stream records its work into a graph: an implicit wait for
 * the legacy stream there would tie the graph to work outside it. */
static int capturing(struct flyt_cuda_backend *b, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return b->captures > 0 && b->cu.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUstream flyt_cuda_enqueue(struct flyt_cuda_backend *b, flyt_bhandle stream)
{
    CUstream s = flyt_cuda_stream(b, stream);
    if (!b->green || capturing(b, s))
        return s;
    if (is_legacy(stream)) {
        for (int i = 0; i < b->nblocking; i++) {
            struct flyt_blocking *e = &b->blocking[i];
            if (!e->dirty || capturing(b, e->s))
                continue;
            if (b->cu.cuEventRecord(e->ev, e->s) == CUDA_SUCCESS)
                b->cu.cuStreamWaitEvent(s, e->ev, 0);
            e->dirty = 0;
        }
        b->legacy_gen++;
        return s;
    }
    struct flyt_blocking *e = find(b, s);
    if (e == NULL)
        return s; /* non-blocking: no implicit synchronization */
    if (e->seen_gen != b->legacy_gen) {
        if (b->legacy_ev == NULL && b->cu.cuEventCreate(&b->legacy_ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            b->legacy_ev = NULL;
        if (b->legacy_ev && b->cu.cuEventRecord(b->legacy_ev, (CUstream)FLYT_BSTREAM_LEGACY) == CUDA_SUCCESS)
            b->cu.cuStreamWaitEvent(s, b->legacy_ev, 0);
        e->seen_gen = b->legacy_gen;
    }
    e->dirty = 1;
    return s;
}
