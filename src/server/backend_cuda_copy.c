/*
 * Copies and memsets of the cuda backend, and its staging buffers.
 *
 * Host-to-device data arrives from the socket in chunks. The server reads
 * each chunk into a staging buffer (staging_get) and hands it to htod_2d,
 * which enqueues an asynchronous copy from it on the caller's stream,
 * records the buffer's event after the copy and returns at once; the buffer
 * is reused only after that event has completed. So the socket read of the
 * next chunk overlaps the DMA of the previous one, and stream order is kept:
 * anything later on the same stream (a synchronous copy back, a kernel, a
 * synchronize) sees the data.
 *
 * The buffers are host memory from mmap, page-locked with cuMemHostRegister
 * (portable), rather than cuMemHostAlloc memory: a primary context reset
 * (cudaDeviceReset) destroys all of the context's host allocations, but only
 * unregisters registered memory, so a buffer the server holds across a reset
 * stays valid; it is registered again when next handed out. Should pinning
 * fail (locked-memory limits), plain pageable memory still works: the
 * driver then copies through its own staging, only slower.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend_cuda_int.h"
#include "flyt_assert.h"
#include "flyt_log.h"


static struct flyt_staging *stg_find(struct flyt_cuda_backend *b, const void *p)
{
    for (int i = 0; i < b->nstg; i++)
        if (b->stg[i].mem == p)
            return &b->stg[i];
    return NULL;
}

/* Registers the buffer with the driver if it is not; failure leaves it pageable. */
static void stg_pin(struct flyt_cuda_backend *b, struct flyt_staging *s)
{
    if (s->pinned)
        return;
    CUresult r = b->cu.cuMemHostRegister(s->mem, s->cap, CU_MEMHOSTREGISTER_PORTABLE);
    if (r == CUDA_SUCCESS) {
        s->pinned = 1;
    } else if (!b->stg_pin_warned) {
        b->stg_pin_warned = 1;
        flyt_warn("cuda backend: cannot page-lock staging memory (CUresult %d); "
                  "host-to-device copies go through pageable memory", (int)r);
    }
}

static struct flyt_staging *stg_new(struct flyt_cuda_backend *b)
{
    if (b->nstg == b->stg_cap) {
        int ncap = b->stg_cap ? b->stg_cap * 2 : FLYT_STAGING_SLOTS;
        struct flyt_staging *n = realloc(b->stg, (size_t)ncap * sizeof *n);
        if (!n)
            return NULL;
        b->stg = n;
        b->stg_cap = ncap;
    }
    void *mem = mmap(NULL, FLYT_STAGING_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    struct flyt_staging *s = &b->stg[b->nstg++];
    memset(s, 0, sizeof *s);
    s->mem = mem;
    s->cap = FLYT_STAGING_BYTES;
    s->state = STG_FREE;
    return s;
}

void *flyt_cuda_staging_get(flyt_backend *base, size_t want, size_t *got)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return NULL;
    int live = flyt_cuda_ctx(b) == CUDA_SUCCESS;
    struct flyt_staging *pick = NULL;
    int oldest = -1; /* an index: stg_new may move the array */

    /* a free buffer, or one whose copy has finished */
    for (int i = 0; i < b->nstg && !pick; i++) {
        struct flyt_staging *s = &b->stg[i];
        if (s->state == STG_FREE)
            pick = s;
        else if (s->state == STG_BUSY) {
            if (b->cu.cuEventQuery(s->ev) != CUDA_ERROR_NOT_READY) {
                s->state = STG_FREE; /* done (or the context failed: nothing reads it) */
                pick = s;
            } else if (oldest < 0 || s->seq < b->stg[oldest].seq) {
                oldest = i;
            }
        }
    }
    /* else a new one while under the usual count */
    if (!pick && b->nstg < FLYT_STAGING_SLOTS)
        pick = stg_new(b);
    /* else wait for the oldest copy */
    if (!pick && oldest >= 0) {
        pick = &b->stg[oldest];
        b->cu.cuEventSynchronize(pick->ev); /* an error means the copy is dead too */
        pick->state = STG_FREE;
    }
    /* every buffer is out: the server holds too many; grow rather than fail */
    if (!pick) {
        flyt_warn("cuda backend: all %d staging buffers are held; adding one", b->nstg);
        pick = stg_new(b);
    }
    if (!pick) {
        flyt_error("cuda backend: out of memory for a staging buffer");
        return NULL;
    }
    if (live)
        stg_pin(b, pick);
    pick->state = STG_OUT;
    if (want == 0)
        want = 1;
    if (got)
        *got = want < pick->cap ? want : pick->cap;
    return pick->mem;
}

void flyt_cuda_staging_put(flyt_backend *base, void *staging)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !staging)
        return;
    struct flyt_staging *s = stg_find(b, staging);
    if (s && s->state == STG_OUT)
        s->state = STG_FREE;
}

void flyt_cuda_staging_release(struct flyt_cuda_backend *b, int free_mem)
{
    /* without a context the driver objects are gone already: only forget them */
    int drv = b->ctx != NULL && flyt_cuda_ctx(b) == CUDA_SUCCESS;
    for (int i = 0; i < b->nstg; i++) {
        struct flyt_staging *s = &b->stg[i];
        if (!drv) {
            s->ev = NULL;
            s->pinned = 0;
        }
        if (s->ev) {
            if (s->state == STG_BUSY)
                b->cu.cuEventSynchronize(s->ev);
            b->cu.cuEventDestroy(s->ev);
            s->ev = NULL;
        }
        if (s->state == STG_BUSY)
            s->state = STG_FREE;
        if (s->pinned) {
            b->cu.cuMemHostUnregister(s->mem);
            s->pinned = 0;
        }
        if (free_mem) {
            munmap(s->mem, s->cap);
            s->mem = NULL;
        }
    }
    if (free_mem) {
        free(b->stg);
        b->stg = NULL;
        b->nstg = b->stg_cap = 0;
    }
}

/* Fills a 2D copy descriptor; host sides are packed (pitch = width). */
static void m2d(CUDA_MEMCPY2D *c, CUmemorytype st, const void *sh, CUdeviceptr sd, size_t sp,
                CUmemorytype dt, void *dh, CUdeviceptr dd, size_t dp, size_t w, size_t h)
{
    memset(c, 0, sizeof *c);
    c->srcMemoryType = st;
    c->srcHost = sh;
    c->srcDevice = sd;
    c->srcPitch = sp;
    c->dstMemoryType = dt;
    c->dstHost = dh;
    c->dstDevice = dd;
    c->dstPitch = dp;
    c->WidthInBytes = w;
    c->Height = h;
}

static CUresult htod_enqueue(struct flyt_cuda_backend *b, uint64_t dst, uint64_t dst_pitch,
                             const void *src, uint64_t width, uint64_t rows, CUstream st)
{
    if (rows == 1)
        return b->cu.cuMemcpyHtoDAsync((CUdeviceptr)dst, src, (size_t)width, st);
    CUDA_MEMCPY2D c;
    m2d(&c, CU_MEMORYTYPE_HOST, src, 0, (size_t)width, CU_MEMORYTYPE_DEVICE, NULL,
        (CUdeviceptr)dst, (size_t)dst_pitch, (size_t)width, (size_t)rows);
    return b->cu.cuMemcpy2DAsync(&c, st);
}

CUresult flyt_cuda_htod_2d(flyt_backend *base, uint64_t dst, uint64_t dst_pitch, void *staging,
                           uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    dst = flyt_cuda_xlate(b, dst);
    CUstream st = flyt_cuda_enqueue(b, stream);
    struct flyt_staging *s = stg_find(b, staging);

    if (!s) {
        /* not one of ours: copy, and return only once the copy has read it */
        if (!staging && width && rows)
            return CUDA_ERROR_INVALID_VALUE;
        if (width == 0 || rows == 0)
            return CUDA_SUCCESS;
        r = htod_enqueue(b, dst, dst_pitch, staging, width, rows, st);
        if (r == CUDA_SUCCESS)
            r = b->cu.cuStreamSynchronize(st);
        return r;
    }

    FLYT_ASSERT(s->state == STG_OUT); /* handed out by staging_get, not yet given back */
    if (width == 0 || rows == 0) {
        s->state = STG_FREE;
        return CUDA_SUCCESS;
    }
    if (rows > s->cap / width) {
        s->state = STG_FREE;
        return CUDA_ERROR_INVALID_VALUE; /* more than the buffer holds */
    }
    r = htod_enqueue(b, dst, dst_pitch, s->mem, width, rows, st);
    if (r != CUDA_SUCCESS) {
        s->state = STG_FREE; /* nothing was enqueued */
        return r;
    }
    if (!s->ev && b->cu.cuEventCreate(&s->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        s->ev = NULL;
    if (s->ev && b->cu.cuEventRecord(s->ev, st) == CUDA_SUCCESS) {
        s->seq = ++b->stg_seq;
        s->state = STG_BUSY;
        return CUDA_SUCCESS;
    }
    /* cannot track the copy: wait for it instead */
    r = b->cu.cuStreamSynchronize(st);
    s->state = STG_FREE;
    return r;
}

CUresult flyt_cuda_dtoh_2d(flyt_backend *base, void *dst, uint64_t src, uint64_t src_pitch,
                           uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    src = flyt_cuda_xlate(b, src);
    if (width == 0 || rows == 0)
        return CUDA_SUCCESS;
    if (!dst)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream st = flyt_cuda_enqueue(b, stream);
    if (rows == 1) {
        r = b->cu.cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, (size_t)width, st);
    } else {
        CUDA_MEMCPY2D c;
        m2d(&c, CU_MEMORYTYPE_DEVICE, NULL, (CUdeviceptr)src, (size_t)src_pitch,
            CU_MEMORYTYPE_HOST, dst, 0, (size_t)width, (size_t)width, (size_t)rows);
        r = b->cu.cuMemcpy2DAsync(&c, st);
    }
    if (r != CUDA_SUCCESS)
        return r;
    return b->cu.cuStreamSynchronize(st);
}

CUresult flyt_cuda_dtod_2d(flyt_backend *base, uint64_t dst, uint64_t dst_pitch, uint64_t src,
                           uint64_t src_pitch, uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    dst = flyt_cuda_xlate(b, dst);
    src = flyt_cuda_xlate(b, src);
    if (width == 0 || rows == 0)
        return CUDA_SUCCESS;
    CUstream st = flyt_cuda_enqueue(b, stream);
    if (rows == 1)
        return b->cu.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)width, st);
    CUDA_MEMCPY2D c;
    m2d(&c, CU_MEMORYTYPE_DEVICE, NULL, (CUdeviceptr)src, (size_t)src_pitch,
        CU_MEMORYTYPE_DEVICE, NULL, (CUdeviceptr)dst, (size_t)dst_pitch, (size_t)width, (size_t)rows);
    return b->cu.cuMemcpy2DAsync(&c, st);
}

CUresult flyt_cuda_memset_2d(flyt_backend *base, uint64_t dst, uint64_t pitch, uint32_t value,
                             unsigned elem_size, uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    dst = flyt_cuda_xlate(b, dst);
    if (width == 0 || rows == 0)
        return CUDA_SUCCESS;
    CUstream st = flyt_cuda_enqueue(b, stream);
    size_t n = (size_t)(width / elem_size);
    switch (elem_size) {
    case 2:
        return b->cu.cuMemsetD2D16Async((CUdeviceptr)dst, (size_t)pitch, (unsigned short)value, n,
                                        (size_t)rows, st);
    case 4:
        return b->cu.cuMemsetD2D32Async((CUdeviceptr)dst, (size_t)pitch, value, n, (size_t)rows, st);
    default:
        if (rows == 1)
            return b->cu.cuMemsetD8Async((CUdeviceptr)dst, (unsigned char)value, n, st);
        return b->cu.cuMemsetD2D8Async((CUdeviceptr)dst, (size_t)pitch, (unsigned char)value, n,
                                       (size_t)rows, st);
    }
}

/* ---- host memory shared with the client ---- */

CUresult flyt_cuda_host_register(flyt_backend *base, void *ptr, uint64_t size)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !ptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    return b->cu.cuMemHostRegister(ptr, (size_t)size, CU_MEMHOSTREGISTER_PORTABLE);
}

/* Portable and device-mapped: kernels in every context of the session (green
 * ones too) reach the bytes, at the host address where the device allows
 * (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM). */
CUresult flyt_cuda_host_register_mapped(flyt_backend *base, void *ptr, uint64_t size,
                                        unsigned flags, uint64_t *dptr)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !ptr || size == 0 || !dptr || (flags & ~(unsigned)CU_MEMHOSTREGISTER_READ_ONLY))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    r = b->cu.cuMemHostRegister(ptr, (size_t)size,
                                CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | flags);
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr d = 0;
    r = b->cu.cuMemHostGetDevicePointer(&d, ptr, 0);
    if (r != CUDA_SUCCESS)
        b->cu.cuMemHostUnregister(ptr);
    *dptr = (uint64_t)d;
    return r;
}

CUresult flyt_cuda_host_unregister(flyt_backend *base, void *ptr)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !ptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS)
        return r;
    return b->cu.cuMemHostUnregister(ptr);
}

CUresult flyt_cuda_htod_host(flyt_backend *base, uint64_t dst, const void *src, uint64_t n,
                             flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !src)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    return b->cu.cuMemcpyHtoDAsync((CUdeviceptr)flyt_cuda_xlate(b, dst), src, (size_t)n,
                                   flyt_cuda_enqueue(b, stream));
}

CUresult flyt_cuda_dtoh_host(flyt_backend *base, void *dst, uint64_t src, uint64_t n,
                             flyt_bhandle stream)
{
    struct flyt_cuda_backend *b = cb(base);
    if (!b || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_cuda_ctx(b);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    return b->cu.cuMemcpyDtoHAsync(dst, (CUdeviceptr)flyt_cuda_xlate(b, src), (size_t)n,
                                   flyt_cuda_enqueue(b, stream));
}
