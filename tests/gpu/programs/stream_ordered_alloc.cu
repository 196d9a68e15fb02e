// stream_ordered_alloc: the stream-ordered allocator beyond one stream,
// each result checked against the host:
//   - cudaMallocAsync / cudaFreeAsync in a ring of 4 streams chained by
//     events (allocated on one stream, written there, read and freed on the
//     next), also on the legacy and per-thread default streams;
//   - a pool made with cudaMemPoolCreate and a maximum size: allocations up to
//     it, one past it fails; release threshold, the three reuse policies set
//     and read back; used/reserved current and high-water marks, the marks
//     reset; cudaMemPoolTrimTo; cudaMemPoolSetAccess/GetAccess on the device;
//   - cudaDeviceSetMemPool / cudaDeviceGetMemPool: cudaMallocAsync then takes
//     from the pool made current, until the default pool is set back;
//   - cudaMallocAsync / cudaFreeAsync inside a stream capture (graph memory
//     nodes): the graph replayed with new input, an allocation left to the
//     launch and freed after it, cudaGraphInstantiateFlagAutoFreeOnLaunch,
//     cudaDeviceGetGraphMemAttribute and cudaDeviceGraphMemTrim.
// Only booleans and values fixed by the program are printed.
#include <stdint.h>
#include <string.h>
#include "test_util.h"

__global__ void fill(int *p, int n, int base)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = base + i;
}

__global__ void add_into(const int *src, int *dst, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] += src[i] * k;
}

static int check_ramp(const int *h, int n, long long mul, long long add)
{
    for (int i = 0; i < n; i++)
        if (h[i] != (int)(mul * i + add))
            return 0;
    return 1;
}

// Stream k allocates, fills with k*1000+i and records; stream k+1 waits, adds
// it into the accumulator and frees it.
static void ring_of_streams(void)
{
    const int nstreams = 4, n = 1 << 18;
    cudaStream_t st[nstreams];
    cudaEvent_t ev[nstreams];
    for (int k = 0; k < nstreams; k++) {
        CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    }
    int *acc;
    CHECK(cudaMallocAsync(&acc, n * sizeof(int), st[0]));
    CHECK(cudaMemsetAsync(acc, 0, n * sizeof(int), st[0]));
    CHECK(cudaEventRecord(ev[0], st[0]));
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < nstreams; k++) {
            int next = (k + 1) % nstreams;
            int *tmp;
            CHECK(cudaStreamWaitEvent(st[k], ev[(k + nstreams - 1) % nstreams], 0));
            CHECK(cudaMallocAsync(&tmp, n * sizeof(int), st[k]));
            fill<<<64, 256, 0, st[k]>>>(tmp, n, k * 1000);
            CHECK(cudaEventRecord(ev[k], st[k]));
            CHECK(cudaStreamWaitEvent(st[next], ev[k], 0));
            add_into<<<64, 256, 0, st[next]>>>(tmp, acc, n, 1);
            CHECK(cudaFreeAsync(tmp, st[next])); // freed on another stream than its allocation
            CHECK(cudaEventRecord(ev[k], st[next]));
        }
    }
    int *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaStreamSynchronize(st[0]));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h, acc, n * sizeof(int), cudaMemcpyDeviceToHost));
    // 3 rounds x sum over k of (k*1000 + i) = 12 i + 3 * 6000
    expect(check_ramp(h, n, 12, 18000), "cudaMallocAsync/cudaFreeAsync across a ring of 4 streams");
    CHECK(cudaFreeAsync(acc, st[1]));

    // the legacy default stream and the per-thread default stream
    int *a, *b;
    CHECK(cudaMallocAsync(&a, n * sizeof(int), 0));
    fill<<<64, 256>>>(a, n, 5);
    CHECK(cudaMallocAsync(&b, n * sizeof(int), cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(0));
    CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, cudaStreamPerThread));
    CHECK(cudaFreeAsync(a, cudaStreamPerThread));
    CHECK(cudaMemcpyAsync(h, b, n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CHECK(cudaFreeAsync(b, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    expect(check_ramp(h, n, 1, 5), "cudaMallocAsync on the legacy and per-thread default streams");
    free(h);
    for (int k = 0; k < nstreams; k++) {
        CHECK(cudaStreamDestroy(st[k]));
        CHECK(cudaEventDestroy(ev[k]));
    }
}

static uint64_t pool_u64(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static int pool_int(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
    int v = -1;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static cudaMemPool_t make_pool(size_t max_size)
{
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    props.maxSize = max_size;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    return pool;
}

static void explicit_pool(void)
{
    const size_t MiB = 1 << 20;
    cudaMemPool_t pool = make_pool(64 * MiB);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    uint64_t keep = UINT64_MAX; // keep everything reserved across synchronisations
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    expect(pool_u64(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX,
           "release threshold read back");
    cudaMemPoolAttr reuse[3] = {cudaMemPoolReuseFollowEventDependencies,
                                cudaMemPoolReuseAllowOpportunistic,
                                cudaMemPoolReuseAllowInternalDependencies};
    int defaults[3], zero = 0, one = 1;
    for (int i = 0; i < 3; i++) {
        defaults[i] = pool_int(pool, reuse[i]);
        CHECK(cudaMemPoolSetAttribute(pool, reuse[i], &zero));
    }
    printf("reuse policies by default: %d %d %d\n", defaults[0], defaults[1], defaults[2]);
    expect(pool_int(pool, reuse[0]) == 0 && pool_int(pool, reuse[1]) == 0 &&
               pool_int(pool, reuse[2]) == 0,
           "reuse policies switched off and read back");
    for (int i = 0; i < 3; i++)
        CHECK(cudaMemPoolSetAttribute(pool, reuse[i], &one));

    // three 16 MiB blocks fit in 64 MiB, a fourth of 32 MiB does not
    int *blk[3];
    const int n = (int)(16 * MiB / sizeof(int));
    for (int i = 0; i < 3; i++) {
        CHECK(cudaMallocFromPoolAsync((void **)&blk[i], 16 * MiB, pool, s));
        fill<<<128, 256, 0, s>>>(blk[i], n, i * 7);
    }
    void *too_big = NULL;
    cudaError_t err = cudaMallocFromPoolAsync(&too_big, 32 * MiB, pool, s);
    printf("allocation past the pool's maximum size -> %s\n", cudaGetErrorName(err));
    cudaGetLastError();
    int *h = (int *)malloc(16 * MiB);
    bool filled = true;
    for (int i = 0; i < 3; i++) {
        CHECK(cudaMemcpyAsync(h, blk[i], 16 * MiB, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        filled = filled && check_ramp(h, n, 1, i * 7);
    }
    expect(filled, "cudaMallocFromPoolAsync blocks hold their kernels' data");
    uint64_t used = pool_u64(pool, cudaMemPoolAttrUsedMemCurrent);
    uint64_t reserved = pool_u64(pool, cudaMemPoolAttrReservedMemCurrent);
    expect(used >= 48 * MiB && reserved >= used && reserved <= 64 * MiB,
           "used 48 MiB <= reserved <= 64 MiB");
    for (int i = 0; i < 3; i++)
        CHECK(cudaFreeAsync(blk[i], s));
    CHECK(cudaStreamSynchronize(s));
    expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "used memory back to 0 after frees");
    expect(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent) == reserved,
           "reserved memory kept under the release threshold");
    expect(pool_u64(pool, cudaMemPoolAttrUsedMemHigh) >= 48 * MiB, "used high-water mark >= 48 MiB");
    uint64_t zero64 = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero64));
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero64));
    expect(pool_u64(pool, cudaMemPoolAttrUsedMemHigh) == 0, "used high-water mark reset to current");
    expect(pool_u64(pool, cudaMemPoolAttrReservedMemHigh) == reserved,
           "reserved high-water mark reset to current");

    // trimming keeps at least what is asked, then releases everything
    CHECK(cudaMemPoolTrimTo(pool, 16 * MiB));
    uint64_t after_keep = pool_u64(pool, cudaMemPoolAttrReservedMemCurrent);
    CHECK(cudaMemPoolTrimTo(pool, 0));
    expect(after_keep >= 16 * MiB && after_keep <= reserved, "cudaMemPoolTrimTo(16 MiB) keeps 16 MiB");
    expect(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent) == 0, "cudaMemPoolTrimTo(0) releases all");

    // access of the device itself
    cudaMemAccessDesc desc;
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = 0;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
    cudaMemAccessFlags flags;
    cudaMemLocation loc = desc.location;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
    printf("pool access of device 0: %s\n",
           flags == cudaMemAccessFlagsProtReadWrite ? "read-write" : "other");

    // the pool made the device's current one serves cudaMallocAsync
    cudaMemPool_t def, cur;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    expect(cur == def, "the current pool is the default pool at first");
    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaDeviceGetMemPool(&cur, 0));
    expect(cur == pool, "cudaDeviceGetMemPool returns the pool set");
    int *p;
    CHECK(cudaMallocAsync(&p, 8 * MiB, s));
    fill<<<64, 256, 0, s>>>(p, (int)(8 * MiB / sizeof(int)), 11);
    CHECK(cudaStreamSynchronize(s));
    expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) >= 8 * MiB,
           "cudaMallocAsync took from the current pool");
    CHECK(cudaMemcpy(h, p, 8 * MiB, cudaMemcpyDeviceToHost));
    expect(check_ramp(h, (int)(8 * MiB / sizeof(int)), 1, 11), "its memory holds the kernel's data");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaDeviceSetMemPool(0, def));
    CHECK(cudaMallocAsync(&p, 4 * MiB, s));
    CHECK(cudaStreamSynchronize(s));
    expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) == 0,
           "after setting the default pool back, the pool is not used");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    free(h);
}

// Captured: allocate, fill from the input, scale into the output, free.
static void captured_allocations(void)
{
    const int n = 1 << 16;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *in, *out;
    CHECK(cudaMalloc(&in, n * sizeof(int)));
    CHECK(cudaMalloc(&out, n * sizeof(int)));
    int *h = (int *)malloc(n * sizeof(int));

    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    int *tmp;
    CHECK(cudaMallocAsync(&tmp, n * sizeof(int), s));
    CHECK(cudaMemsetAsync(tmp, 0, n * sizeof(int), s));
    add_into<<<64, 256, 0, s>>>(in, tmp, n, 3);
    CHECK(cudaMemcpyAsync(out, tmp, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaFreeAsync(tmp, s));
    CHECK(cudaStreamEndCapture(s, &g));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    printf("captured graph: %zu nodes\n", nodes);
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    bool ok = true;
    for (int rep = 0; rep < 5; rep++) {
        fill<<<64, 256, 0, s>>>(in, n, rep * 100);
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaMemcpyAsync(h, out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        ok = ok && check_ramp(h, n, 3, rep * 300);
    }
    expect(ok, "graph with captured alloc/free nodes replayed 5 times");
    uint64_t used = 0, reserved = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    expect(reserved >= used, "graph memory: reserved >= used");
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));

    // an allocation the graph leaves live: used after the launch, freed
    // outside it; with auto-free the graph may be launched again before that
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int *live;
    CHECK(cudaMallocAsync(&live, n * sizeof(int), s));
    fill<<<64, 256, 0, s>>>(live, n, 42);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaMemcpyAsync(h, live, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    ok = check_ramp(h, n, 1, 42);
    CHECK(cudaGraphLaunch(ge, s)); // frees the first launch's allocation, allocates again
    CHECK(cudaMemcpyAsync(h, live, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    ok = ok && check_ramp(h, n, 1, 42);
    expect(ok, "graph allocation left live after the launch, auto-freed on relaunch");
    CHECK(cudaFreeAsync(live, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaDeviceGraphMemTrim(0));
    uint64_t high = 0, zero = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
    expect(high >= (uint64_t)n * sizeof(int), "graph memory used high-water mark");
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    expect(used == 0, "no graph memory in use after the frees");

    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaStreamDestroy(s));
    free(h);
}

int main(void)
{
    double t0 = now_s();
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    printf("memory pools supported: %d\n", supported);
    ring_of_streams();
    explicit_pool();
    captured_allocations();
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "stream_ordered_alloc: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}
