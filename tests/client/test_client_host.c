/*
 * The whole client-to-server path without a GPU: an ordinary program calls
 * the CUDA runtime API (NVIDIA's libcudart, shared or static) on Flyt's
 * libcuda.so.1, against a flyt-server
 * running the host-memory test backend. Run by run_with_server.sh.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define CUDA_OK(call) CHECK_EQ((call), cudaSuccess, "%s", #call)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static void test_device(void)
{
    int count = -1, dev = -1;
    CUDA_OK(cudaGetDeviceCount(&count));
    CHECK_EQ(count, 1, "one device (got %d)", count);
    CUDA_OK(cudaSetDevice(0));
    CHECK_EQ(cudaSetDevice(3), cudaErrorInvalidDevice, "cudaSetDevice(3) is cudaErrorInvalidDevice");
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidDevice, "last error records it");
    CHECK_EQ(cudaGetLastError(), cudaSuccess, "and cudaGetLastError cleared it");
    CUDA_OK(cudaGetDevice(&dev));
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK_STR_EQ(prop.name, "Flyt host test device", "device name '%s'", prop.name);
    /* the whole fake GPU, unless a share was given (FLYT_EXPECT_SMS) */
    const char *want_env = getenv("FLYT_EXPECT_SMS");
    int want_sms = want_env ? atoi(want_env) : 132;
    CHECK_EQ(prop.major, 9,
             "cc %d.%d, %d SMs (want %d)", prop.major, prop.minor, prop.multiProcessorCount, want_sms);
    CHECK_EQ(prop.multiProcessorCount, want_sms,
             "cc %d.%d, %d SMs (want %d)", prop.major, prop.minor, prop.multiProcessorCount, want_sms);
    int v = 0;
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    CHECK_EQ(v, want_sms, "attribute SM count %d", v);
    CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0));
    CHECK_EQ(v, 1024, "attribute max threads per block %d", v);
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    CHECK_GT(total_b, 0, "mem info %zu / %zu", free_b, total_b);
    CHECK_LE(free_b, total_b, "mem info %zu / %zu", free_b, total_b);
    int least = 1, greatest = 1;
    CUDA_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    char bus[32];
    CUDA_OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    CHECK_GT(strlen(bus), 0, "pci bus id %s", bus);
    int bydev = -1;
    CUDA_OK(cudaDeviceGetByPCIBusId(&bydev, bus));
    CHECK_EQ(bydev, 0, "device by bus id");
    int drv = 0, rt = 0;
    CUDA_OK(cudaDriverGetVersion(&drv));
    CUDA_OK(cudaRuntimeGetVersion(&rt));
    CHECK_GT(drv, 0, "versions driver %d runtime %d", drv, rt);
    CHECK_EQ(rt, CUDART_VERSION, "versions driver %d runtime %d", drv, rt);
    size_t limit = 0;
    CUDA_OK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    CUDA_OK(cudaDeviceGetLimit(&limit, cudaLimitStackSize));
    CHECK_EQ(limit, 4096, "stack limit round trip %zu", limit);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK_STR_EQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation",
                 "error names come from the headers");
    CHECK_STR_EQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument", "error strings");
}

static void test_memcpy_1d(void)
{
    const size_t n = 20u << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    fill(h, n, 1);
    void *d = NULL, *d2 = NULL;
    CUDA_OK(cudaMalloc(&d, n));
    CUDA_OK(cudaMalloc(&d2, n));
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    memset(back, 0, n);
    CUDA_OK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(h, back, n, "20 MiB H2D then D2H round trip");
    CUDA_OK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice));
    memset(back, 0, n);
    CUDA_OK(cudaMemcpy(back, d2, n, cudaMemcpyDefault));
    CHECK_MEM_EQ(h, back, n, "D2D then cudaMemcpyDefault D2H");
    /* a size whose split over the server's 3 helper threads (run_with_server.sh)
     * leaves a tail past whole pages: the last part must carry it */
    const size_t odd = (3u << 20) + 2;
    fill(h, odd, 5);
    CUDA_OK(cudaMemcpy(d, h, odd, cudaMemcpyHostToDevice));
    memset(back, 0, odd);
    CUDA_OK(cudaMemcpy(back, d, odd, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(h, back, odd, "3 MiB + 2 bytes H2D then D2H round trip");
    fill(h, 4096, 9);
    CUDA_OK(cudaMemcpy((char *)d + 100, h, 4096, cudaMemcpyDefault));
    CUDA_OK(cudaMemcpy(back, (char *)d + 100, 4096, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(h, back, 4096, "cudaMemcpyDefault H2D at an offset");
    CUDA_OK(cudaMemcpy(back, h, 100, cudaMemcpyHostToHost));
    CHECK_MEM_EQ(h, back, 100, "H2H");

    CUDA_OK(cudaMemset(d, 0x5a, 1000));
    CUDA_OK(cudaMemcpy(back, d, 1000, cudaMemcpyDeviceToHost));
    int all = 1;
    for (int i = 0; i < 1000; i++)
        all &= back[i] == 0x5a;
    CHECK(all, "cudaMemset");

    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    fill(h, n, 3);
    CUDA_OK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(d2, 7, 64, s));
    memset(back, 0, n);
    CUDA_OK(cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_MEM_EQ(h, back, n, "async H2D / D2H on a stream");
    CUDA_OK(cudaStreamDestroy(s));

    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaFree(d2));
    free(h);
    free(back);
}

/* cudaMemcpy3DPeer within the one device: the box at (8, 2, 3) of src
 * (which holds want) to the origin of another allocation. */
static void test_memcpy_3d_peer(struct cudaPitchedPtr src, struct cudaExtent ext,
                                const unsigned char *want)
{
    struct cudaPitchedPtr dst;
    CUDA_OK(cudaMalloc3D(&dst, ext));
    struct cudaMemcpy3DPeerParms p = {0};
    p.srcPtr = src;
    p.srcPos = (struct cudaPos){8, 2, 3};
    p.dstPtr = dst;
    p.extent = (struct cudaExtent){16, 4, 2};
    CUDA_OK(cudaMemcpy3DPeer(&p));
    unsigned char box[2 * 4 * 16];
    struct cudaMemcpy3DParms q = {0};
    q.srcPtr = dst;
    q.dstPtr = (struct cudaPitchedPtr){box, 16, 16, 4};
    q.extent = p.extent;
    q.kind = cudaMemcpyDeviceToHost;
    CUDA_OK(cudaMemcpy3D(&q));
    int same = 1;
    for (size_t z = 0; z < 2; z++)
        for (size_t y = 0; y < 4; y++)
            same &= memcmp(box + (z * 4 + y) * 16,
                           want + ((3 + z) * ext.height + 2 + y) * ext.width + 8, 16) == 0;
    CHECK(same, "cudaMemcpy3DPeer of an interior box within the device");
    CUDA_OK(cudaFree(dst.ptr));
}

/* cudaMemcpyBatchAsync: H2D, D2D and D2H in one batch under two attributes
 * (stream order; source read during the call), never on the legacy stream. */
static void test_memcpy_batch(void)
{
    enum { N = 4096 };
    static unsigned char src[N], back[N];
    fill(src, N, 21);
    memset(back, 0, N);
    unsigned char *a = NULL, *b = NULL;
    CUDA_OK(cudaMalloc((void **)&a, N));
    CUDA_OK(cudaMalloc((void **)&b, N));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *dsts[3] = {a, b, back};
    const void *srcs[3] = {src, a, b};
    size_t sizes[3] = {N, N, N};
    struct cudaMemcpyAttributes attrs[2] = {{0}};
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idxs[2] = {0, 1};
    /* one copy per batch: within a batch CUDA promises no order */
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaMemcpyBatchAsync(&dsts[i], &srcs[i], &sizes[i], 1, &attrs[i == 0 ? 0 : 1],
                                     idxs, 1, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_MEM_EQ(src, back, N, "cudaMemcpyBatchAsync H2D, D2D, D2H");
    CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, idxs, 2, cudaStreamLegacy),
             cudaErrorInvalidValue, "not on the legacy stream");
    cudaGetLastError();
    size_t bad_idxs[2] = {1, 0};
    CHECK_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, bad_idxs, 2, s), cudaErrorInvalidValue,
             "attribute indices must start at 0 and grow");
    cudaGetLastError();
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
}

static void test_memcpy_2d_3d(void)
{
    size_t pitch = 0;
    void *d = NULL;
    const size_t w = 300, hgt = 50;
    CUDA_OK(cudaMallocPitch(&d, &pitch, w, hgt));
    CHECK_GE(pitch, w, "pitch %zu >= width", pitch);
    unsigned char *h = malloc(400 * hgt), *back = calloc(400 * hgt, 1);
    fill(h, 400 * hgt, 5);
    CUDA_OK(cudaMemcpy2D(d, pitch, h, 400, w, hgt, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy2D(back, 400, d, pitch, w, hgt, cudaMemcpyDeviceToHost));
    int same = 1;
    for (size_t y = 0; y < hgt; y++)
        same &= memcmp(h + y * 400, back + y * 400, w) == 0;
    CHECK(same, "cudaMemcpy2D with pitched host rows");
    CHECK_EQ(cudaMemcpy2D(d, pitch, h, 10, w, hgt, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue,
             "width over pitch is cudaErrorInvalidPitchValue");
    CUDA_OK(cudaMemset2D(d, pitch, 0x11, w, hgt));
    CUDA_OK(cudaMemcpy2D(back, w, d, pitch, w, hgt, cudaMemcpyDeviceToHost));
    same = 1;
    for (size_t i = 0; i < w * hgt; i++)
        same &= back[i] == 0x11;
    CHECK(same, "cudaMemset2D");
    CUDA_OK(cudaFree(d));

    struct cudaExtent ext = {64, 16, 8};
    struct cudaPitchedPtr pp;
    CUDA_OK(cudaMalloc3D(&pp, ext));
    size_t bytes = ext.width * ext.height * ext.depth;
    unsigned char *h3 = malloc(bytes), *b3 = calloc(bytes, 1);
    fill(h3, bytes, 11);
    struct cudaMemcpy3DParms p = {0};
    p.srcPtr = (struct cudaPitchedPtr){h3, ext.width, ext.width, ext.height};
    p.dstPtr = pp;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CUDA_OK(cudaMemcpy3D(&p));
    struct cudaMemcpy3DParms q = {0};
    q.srcPtr = pp;
    q.dstPtr = (struct cudaPitchedPtr){b3, ext.width, ext.width, ext.height};
    q.extent = ext;
    q.kind = cudaMemcpyDeviceToHost;
    CUDA_OK(cudaMemcpy3D(&q));
    CHECK_MEM_EQ(h3, b3, bytes, "cudaMemcpy3D H2D then D2H");
    /* an interior box at an offset */
    struct cudaMemcpy3DParms r = {0};
    r.srcPtr = pp;
    r.srcPos = (struct cudaPos){8, 2, 3};
    r.dstPtr = (struct cudaPitchedPtr){b3, 16, 16, 4};
    r.extent = (struct cudaExtent){16, 4, 2};
    r.kind = cudaMemcpyDeviceToHost;
    memset(b3, 0, bytes);
    CUDA_OK(cudaMemcpy3D(&r));
    same = 1;
    for (size_t z = 0; z < 2; z++)
        for (size_t y = 0; y < 4; y++)
            same &= memcmp(b3 + (z * 4 + y) * 16,
                           h3 + ((3 + z) * ext.height + 2 + y) * ext.width + 8, 16) == 0;
    CHECK(same, "cudaMemcpy3D of an interior box");
    test_memcpy_3d_peer(pp, ext, h3);
    CUDA_OK(cudaMemset3D(pp, 0x22, ext));
    CUDA_OK(cudaMemcpy3D(&q));
    same = 1;
    for (size_t i = 0; i < bytes; i++)
        same &= b3[i] == 0x22;
    CHECK(same, "cudaMemset3D");
    CUDA_OK(cudaFree(pp.ptr));
    free(h);
    free(back);
    free(h3);
    free(b3);
}

static void test_host_memory(void)
{
    void *pinned = NULL, *d = NULL;
    CUDA_OK(cudaMallocHost(&pinned, 1 << 20));
    CUDA_OK(cudaMalloc(&d, 1 << 20));
    struct cudaPointerAttributes a;
    CUDA_OK(cudaPointerGetAttributes(&a, pinned));
    CHECK_EQ(a.type, cudaMemoryTypeHost, "pinned memory is cudaMemoryTypeHost (%d)", a.type);
    CUDA_OK(cudaPointerGetAttributes(&a, (char *)d + 10));
    CHECK_EQ(a.type, cudaMemoryTypeDevice, "device memory is cudaMemoryTypeDevice (%d)", a.type);
    int local = 0;
    CUDA_OK(cudaPointerGetAttributes(&a, &local));
    CHECK_EQ(a.type, cudaMemoryTypeUnregistered, "stack memory is unregistered (%d)", a.type);
    unsigned flags = 99;
    CUDA_OK(cudaHostGetFlags(&flags, pinned));
    char *buf = malloc(8192);
    CUDA_OK(cudaHostRegister(buf, 8192, cudaHostRegisterDefault));
    CUDA_OK(cudaPointerGetAttributes(&a, buf + 100));
    CHECK_EQ(a.type, cudaMemoryTypeHost, "registered memory is cudaMemoryTypeHost");
    CUDA_OK(cudaHostUnregister(buf));
    CHECK_EQ(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered, "double unregister fails");
    cudaGetLastError();
    CUDA_OK(cudaFreeHost(pinned));
    CUDA_OK(cudaFree(d));
    free(buf);
}

/* Pinned memory (shared with the server on a Unix socket): copies both ways,
 * synchronous and asynchronous, whole and at offsets. */
static void test_pinned_copies(void)
{
    const size_t n = 6u << 20;
    unsigned char *a = NULL, *b = NULL;
    void *d = NULL;
    CUDA_OK(cudaMallocHost((void **)&a, n));
    CUDA_OK(cudaHostAlloc((void **)&b, n, cudaHostAllocDefault));
    CUDA_OK(cudaMalloc(&d, n));
    fill(a, n, 21);
    memset(b, 0, n);
    CUDA_OK(cudaMemcpy(d, a, n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b, d, n, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(a, b, n, "pinned H2D then D2H");
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    fill(a, n, 22);
    memset(b, 0, n);
    CUDA_OK(cudaMemcpyAsync(d, a + 4096, n - 8192, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(b + 100, d, n - 8192, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_MEM_EQ(a + 4096, b + 100, n - 8192, "pinned async copies at offsets");
    CUDA_OK(cudaMemcpy(b, a, 4096, cudaMemcpyDefault));
    CHECK_MEM_EQ(a, b, 4096, "pinned to pinned is a host copy");
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFreeHost(a));
    CUDA_OK(cudaFreeHost(b));
    CHECK_EQ(cudaFreeHost(a), cudaErrorInvalidValue, "double cudaFreeHost fails");
    cudaGetLastError();
    CUDA_OK(cudaFree(d));
}

/* cudaDeviceSetMemPool: cudaMallocAsync takes from the pool made current. */
static void test_current_pool(cudaMemPool_t pool, cudaMemPool_t dflt, cudaStream_t s)
{
    cudaMemPool_t cur = NULL;
    CUDA_OK(cudaDeviceGetMemPool(&cur, 0));
    CHECK_EQ(cur, dflt, "the default pool is current at first");
    CHECK_EQ(cudaDeviceSetMemPool(0, NULL), cudaErrorInvalidValue, "no NULL current pool");
    cudaGetLastError();
    CUDA_OK(cudaDeviceSetMemPool(0, pool));
    CUDA_OK(cudaDeviceGetMemPool(&cur, 0));
    CHECK_EQ(cur, pool, "cudaDeviceGetMemPool returns the pool set");
    void *p = NULL;
    uint64_t used = 0;
    CUDA_OK(cudaMallocAsync(&p, 8192, s));
    CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CHECK_EQ(used, 8192, "cudaMallocAsync took from the current pool (used %llu)",
             (unsigned long long)used);
    CUDA_OK(cudaFreeAsync(p, s));
    CUDA_OK(cudaDeviceSetMemPool(0, dflt));
    CUDA_OK(cudaMallocAsync(&p, 8192, s));
    CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CHECK_EQ(used, 0, "with the default pool current again, the pool is unused");
    CUDA_OK(cudaFreeAsync(p, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaDeviceSetMemPool(0, pool)); /* current when it is destroyed */
}

static void test_pools(void)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *p = NULL;
    CUDA_OK(cudaMallocAsync(&p, 1 << 16, s));
    CHECK_NE(p, NULL, "cudaMallocAsync gave a pointer");
    CUDA_OK(cudaMemsetAsync(p, 1, 1 << 16, s));
    CUDA_OK(cudaFreeAsync(p, s));
    cudaMemPool_t pool, dflt;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&dflt, 0));
    struct cudaMemPoolProps props = {0};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CUDA_OK(cudaMemPoolCreate(&pool, &props));
    uint64_t threshold = 1 << 20, got = 0;
    CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    CHECK_EQ(got, threshold, "pool release threshold round trip");
    CUDA_OK(cudaMallocFromPoolAsync(&p, 4096, pool, s));
    CUDA_OK(cudaFreeAsync(p, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemPoolTrimTo(pool, 0));
    test_current_pool(pool, dflt, s);
    CUDA_OK(cudaMemPoolDestroy(pool));
    cudaMemPool_t cur = NULL;
    CUDA_OK(cudaDeviceGetMemPool(&cur, 0));
    CHECK_EQ(cur, dflt, "a destroyed current pool leaves the default pool current");
    CUDA_OK(cudaStreamDestroy(s));
}

static atomic_int callback_order[8];
static atomic_int callback_count;

static void host_fn(void *arg)
{
    int i = atomic_fetch_add(&callback_count, 1);
    if (i < 8)
        callback_order[i] = (int)(intptr_t)arg;
}

static void stream_cb(cudaStream_t s, cudaError_t status, void *arg)
{
    (void)s;
    if (status == cudaSuccess)
        host_fn(arg);
}

static void test_streams_events(void)
{
    cudaStream_t s;
    int lo = 0, hi = 0;
    CUDA_OK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_OK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
    unsigned flags = 0;
    int prio = 99;
    CUDA_OK(cudaStreamGetFlags(s, &flags));
    CHECK_EQ(flags, cudaStreamNonBlocking, "stream flags %u", flags);
    CUDA_OK(cudaStreamGetPriority(s, &prio));
    CHECK_EQ(prio, hi, "stream priority %d", prio);
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreateWithFlags(&b, cudaEventBlockingSync));
    CUDA_OK(cudaEventRecord(a, s));
    for (int i = 0; i < 4; i++)
        CUDA_OK(cudaLaunchHostFunc(s, host_fn, (void *)(intptr_t)i));
    CUDA_OK(cudaStreamAddCallback(s, stream_cb, (void *)(intptr_t)4, 0));
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaStreamWaitEvent(cudaStreamLegacy, b, 0));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_EQ(atomic_load(&callback_count), 5, "all 5 host functions ran before the sync returned");
    int ordered = 1;
    for (int i = 0; i < 5; i++)
        ordered &= callback_order[i] == i;
    CHECK(ordered, "host functions ran in stream order");
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventQuery(b));
    CUDA_OK(cudaStreamQuery(s));
    float ms = -1;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    CHECK(ms >= 0, "elapsed time %.3f ms", ms);
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    CUDA_OK(cudaStreamDestroy(s));
    CHECK_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle,
             "a destroyed stream is an invalid handle");
    cudaGetLastError();

    /* a callback whose flag the host polls without calling CUDA */
    atomic_store(&callback_count, 0);
    CUDA_OK(cudaLaunchHostFunc(0, host_fn, (void *)(intptr_t)7));
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (atomic_load(&callback_count) == 0 && t.tv_sec - t0.tv_sec < 5);
    CHECK_EQ(atomic_load(&callback_count), 1, "a host function runs with no CUDA call waiting");
}

static void test_errors(void)
{
    CHECK_NE(cudaFree((void *)0x1234), cudaSuccess, "cudaFree of a bogus pointer fails");
    cudaGetLastError();
    void *p = NULL;
    CHECK_EQ(cudaMalloc(&p, (size_t)1 << 50), cudaErrorMemoryAllocation, "huge cudaMalloc is OOM");
    CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation, "and is the last error");
    CHECK_EQ(cudaGetLastError(), cudaSuccess, "which is not sticky");
    char h[16];
    CHECK_NE(cudaMemcpy(h, (void *)0x10, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess,
             "copy from a bogus device pointer fails");
    CHECK_EQ(cudaMemcpy((void *)0x10, h, 0, cudaMemcpyHostToDevice), cudaSuccess,
             "a zero-byte copy succeeds");
    cudaGetLastError();
    CHECK_EQ(cudaMemcpy(h, h, 4, (enum cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection,
             "a bad copy kind is cudaErrorInvalidMemcpyDirection");
    /* NVIDIA's runtime hands a pointer it has no kernel for to the driver as
     * a kernel handle, which the driver refuses */
    CHECK_EQ(cudaLaunchKernel((const void *)test_errors, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, 0), cudaErrorInvalidResourceHandle,
             "launch of an unregistered function is cudaErrorInvalidResourceHandle");
    cudaGetLastError();
    /* a refused API says so instead of crashing (external memory: another
     * API's object, which the GPU node has no way to reach) */
    cudaExternalMemory_t ext = NULL;
    struct cudaExternalMemoryHandleDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
    desc.handle.fd = STDERR_FILENO;
    desc.size = 4096;
    CHECK_EQ(cudaImportExternalMemory(&ext, &desc), cudaErrorNotSupported,
             "unsupported API -> cudaErrorNotSupported");
    cudaGetLastError();
    cudaGraph_t g = NULL;
    CHECK_EQ(cudaGraphCreate(&g, 0), cudaSuccess, "graphs go through NVIDIA's runtime");
    CHECK_EQ(cudaGraphDestroy(g), cudaSuccess, "graphs go through NVIDIA's runtime");
}

struct worker {
    int id;
    int ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const size_t n = 1 << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    cudaStream_t s;
    void *d = NULL;
    w->ok = cudaStreamCreate(&s) == cudaSuccess && cudaMalloc(&d, n) == cudaSuccess;
    for (int round = 0; round < 20 && w->ok; round++) {
        fill(h, n, (unsigned)(w->id * 100 + round));
        w->ok &= cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s) == cudaSuccess;
        w->ok &= cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s) == cudaSuccess;
        w->ok &= cudaStreamSynchronize(s) == cudaSuccess;
        w->ok &= memcmp(h, back, n) == 0;
    }
    w->ok &= cudaFree(d) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess;
    free(h);
    free(back);
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[8];
    struct worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct worker){i, 0};
        pthread_create(&t[i], NULL, worker_main, &w[i]);
    }
    int all = 1;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        all &= w[i].ok;
    }
    CHECK(all, "8 threads copying concurrently on their own streams");
}

int main(void)
{
    test_device();
    test_memcpy_1d();
    test_memcpy_2d_3d();
    test_memcpy_batch();
    test_host_memory();
    test_pinned_copies();
    test_pools();
    test_streams_events();
    test_errors();
    test_threads();
    CUDA_OK(cudaDeviceReset());
    return check_done();
}
