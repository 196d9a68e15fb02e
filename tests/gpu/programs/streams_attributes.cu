// streams_attributes: stream, event, function and cluster attributes, and
// stream memory operations. Prints values that are fixed on one GPU model:
//   - events: blocking-sync and timing-disabled events record and
//     synchronise; elapsed time of a timing-disabled event fails as CUDA
//     says; interprocess events (created and destroyed; tests ipc_memory use them),
//   - streams: the priority range, a stream's priority and flags, distinct
//     stream ids, the access policy window, synchronisation policy and
//     priority attributes read back after a set,
//   - functions: maximum dynamic shared memory (then a launch that uses it),
//     preferred carveout, required cluster size, non-portable cluster size,
//     cluster scheduling policy and cache configuration, read back,
//   - clusters: a __cluster_dims__ kernel and a cudaLaunchKernelEx cluster
//     launch read their cluster registers and each other's shared memory;
//     cudaOccupancyMaxActiveClusters and cudaOccupancyMaxPotentialClusterSize,
//   - cuStreamWriteValue32/64 and cuStreamWaitValue32/64 on device memory
//     and, where the device maps host memory, on pinned host memory.
#include <cuda.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include <string.h>
#include "test_util.h"

namespace cg = cooperative_groups;

static const char *drv_name(CUresult r)
{
    const char *n = NULL;
    cuGetErrorName(r, &n);
    return n ? n : "?";
}

__global__ void uses_dynamic_smem(int *out, int n)
{
    extern __shared__ int buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buf[i] = i;
    __syncthreads();
    if (threadIdx.x == 0)
        *out = buf[n - 1];
}

__global__ void plain_kernel(int *out) { out[blockIdx.x] = blockIdx.x; }

// Each block reads its cluster neighbour's shared memory (distributed
// shared memory): out[block] = rank * 100 + the neighbour's rank.
__global__ void __cluster_dims__(2, 1, 1) pair_kernel(int *out)
{
    __shared__ int mine;
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    if (threadIdx.x == 0)
        mine = (int)rank;
    cluster.sync();
    if (threadIdx.x == 0) {
        int *theirs = cluster.map_shared_rank(&mine, (rank + 1) % cluster.num_blocks());
        out[blockIdx.x] = (int)rank * 100 + *theirs;
    }
    cluster.sync();
}

// Launched with a cluster dimension at run time: rank and cluster size.
__global__ void cluster_info(int *out)
{
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int)(cluster.block_rank() * 100 + cluster.num_blocks());
}

static void events(void)
{
    cudaEvent_t blocking, untimed, start;
    CHECK(cudaEventCreateWithFlags(&blocking, cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventRecord(start, 0));
    CHECK(cudaEventRecord(blocking, 0));
    CHECK(cudaEventRecord(untimed, 0));
    CHECK(cudaEventSynchronize(blocking));
    CHECK(cudaEventSynchronize(untimed));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, blocking));
    expect(ms >= 0, "blocking-sync event times");
    cudaError_t e = cudaEventElapsedTime(&ms, start, untimed);
    printf("elapsed time to a timing-disabled event: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    cudaEvent_t ipc;
    e = cudaEventCreateWithFlags(&ipc, cudaEventInterprocess | cudaEventDisableTiming);
    fprintf(stderr, "interprocess event: %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess)
        CHECK(cudaEventDestroy(ipc));
    cudaGetLastError();
    CHECK(cudaEventDestroy(blocking));
    CHECK(cudaEventDestroy(untimed));
    CHECK(cudaEventDestroy(start));
}

static void streams(const int *dev_buf)
{
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("stream priorities: least %d greatest %d\n", least, greatest);
    cudaStream_t hi, lo;
    CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
    CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamDefault, least));
    int prio = 99;
    unsigned flags = 99;
    CHECK(cudaStreamGetPriority(hi, &prio));
    CHECK(cudaStreamGetFlags(hi, &flags));
    printf("high stream: priority %d flags %u\n", prio, flags);
    CHECK(cudaStreamGetPriority(lo, &prio));
    CHECK(cudaStreamGetFlags(lo, &flags));
    printf("low stream: priority %d flags %u\n", prio, flags);
    unsigned long long id_hi = 0, id_lo = 0;
    CHECK(cudaStreamGetId(hi, &id_hi));
    CHECK(cudaStreamGetId(lo, &id_lo));
    expect(id_hi != id_lo, "streams have distinct ids");

    cudaStreamAttrValue v;
    memset(&v, 0, sizeof v);
    v.accessPolicyWindow.base_ptr = (void *)dev_buf;
    v.accessPolicyWindow.num_bytes = 1 << 20;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &v));
    cudaStreamAttrValue back;
    memset(&back, 0xff, sizeof back);
    CHECK(cudaStreamGetAttribute(hi, cudaStreamAttributeAccessPolicyWindow, &back));
    printf("access policy window: same base %d, %zu bytes, hit ratio %.2f, hit %d, miss %d\n",
           back.accessPolicyWindow.base_ptr == dev_buf, back.accessPolicyWindow.num_bytes,
           back.accessPolicyWindow.hitRatio, (int)back.accessPolicyWindow.hitProp,
           (int)back.accessPolicyWindow.missProp);

    memset(&v, 0, sizeof v);
    v.syncPolicy = cudaSyncPolicyYield;
    CHECK(cudaStreamSetAttribute(lo, cudaStreamAttributeSynchronizationPolicy, &v));
    memset(&back, 0, sizeof back);
    CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributeSynchronizationPolicy, &back));
    printf("synchronisation policy: %d\n", (int)back.syncPolicy);

    memset(&v, 0, sizeof v);
    v.priority = greatest;
    CHECK(cudaStreamSetAttribute(lo, cudaStreamAttributePriority, &v));
    memset(&back, 0, sizeof back);
    CHECK(cudaStreamGetAttribute(lo, cudaStreamAttributePriority, &back));
    printf("priority attribute: %d\n", back.priority);

    CHECK(cudaStreamSynchronize(hi));
    CHECK(cudaStreamDestroy(hi));
    CHECK(cudaStreamDestroy(lo));
    CHECK(cudaCtxResetPersistingL2Cache());
}

static void print_func_attrs(const char *what, const void *fn)
{
    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, fn));
    printf("%s: max dynamic smem %d, carveout %d, cluster must be set %d, required cluster "
           "%dx%dx%d, non-portable %d, scheduling %d\n",
           what, a.maxDynamicSharedSizeBytes, a.preferredShmemCarveout, a.clusterDimMustBeSet,
           a.requiredClusterWidth, a.requiredClusterHeight, a.requiredClusterDepth,
           a.nonPortableClusterSizeAllowed, a.clusterSchedulingPolicyPreference);
}

static void functions(int *d_out)
{
    const void *fn = (const void *)uses_dynamic_smem;
    print_func_attrs("dynamic smem kernel, as built", fn);
    int big = 100 * 1024;
    CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
    CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    CHECK(cudaFuncSetCacheConfig(fn, cudaFuncCachePreferShared));
    print_func_attrs("dynamic smem kernel, after sets", fn);
    int n = big / (int)sizeof(int);
    uses_dynamic_smem<<<1, 256, big>>>(d_out, n);
    CHECK(cudaGetLastError());
    int got = 0;
    CHECK(cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost));
    printf("launch with 100 KiB of dynamic shared memory: last word %d\n", got);
    expect(got == n - 1, "dynamic shared memory launch");

    const void *pk = (const void *)plain_kernel;
    cudaError_t e1 = cudaFuncSetAttribute(pk, cudaFuncAttributeRequiredClusterWidth, 2);
    cudaError_t e2 = cudaFuncSetAttribute(pk, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaError_t e3 = cudaFuncSetAttribute(pk, cudaFuncAttributeClusterSchedulingPolicyPreference,
                                          cudaClusterSchedulingPolicySpread);
    printf("cluster attribute sets: width %s, non-portable %s, scheduling %s\n",
           cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e3));
    cudaGetLastError();
    print_func_attrs("plain kernel, after sets", pk);
    print_func_attrs("__cluster_dims__(2,1,1) kernel", (const void *)pair_kernel);

    // the driver's view of the same function: cuFuncGetAttribute and the
    // deprecated shared memory bank setting
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, fn));
    int v = -1;
    DRV(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUfunction)f));
    printf("cuFuncGetAttribute max dynamic smem: %d\n", v);
    DRV(cuFuncSetAttribute((CUfunction)f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024));
    DRV(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUfunction)f));
    printf("after cuFuncSetAttribute: %d\n", v);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CUresult r = cuFuncSetSharedMemConfig((CUfunction)f, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
#pragma GCC diagnostic pop
    printf("cuFuncSetSharedMemConfig: %s\n", drv_name(r));
}

static void clusters(int *d_out)
{
    int h[8];
    pair_kernel<<<8, 32>>>(d_out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost));
    printf("__cluster_dims__ pairs:");
    for (int i = 0; i < 8; i++)
        printf(" %d", h[i]);
    printf("\n");

    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 4;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(8);
    cfg.blockDim = dim3(64);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, cluster_info, d_out));
    CHECK(cudaMemcpy(h, d_out, sizeof h, cudaMemcpyDeviceToHost));
    printf("cluster launch of 4: rank*100+size:");
    for (int i = 0; i < 8; i++)
        printf(" %d", h[i]);
    printf("\n");

    int active = -1;
    cfg.gridDim = dim3(128);
    cfg.blockDim = dim3(128);
    CHECK(cudaOccupancyMaxActiveClusters(&active, cluster_info, &cfg));
    printf("max active clusters of 4 x 128 threads: %d\n", active);
    int size = -1;
    cfg.numAttrs = 0;
    CHECK(cudaOccupancyMaxPotentialClusterSize(&size, cluster_info, &cfg));
    printf("max potential cluster size: %d\n", size);
    CHECK(cudaFuncSetAttribute((const void *)cluster_info,
                               cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CHECK(cudaOccupancyMaxPotentialClusterSize(&size, cluster_info, &cfg));
    printf("max potential cluster size, non-portable allowed: %d\n", size);
}

// cuStreamWriteValue/WaitValue: a stream waits for a word another stream
// writes, then writes its own.
static void memory_ops(CUdeviceptr words, const char *where)
{
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    DRV(cuStreamWaitValue32((CUstream)b, words, 7, CU_STREAM_WAIT_VALUE_GEQ));
    DRV(cuStreamWriteValue64((CUstream)b, words + 8, 0x0123456789abcdefull, 0));
    DRV(cuStreamWaitValue64((CUstream)b, words + 16, 5, CU_STREAM_WAIT_VALUE_EQ));
    DRV(cuStreamWriteValue32((CUstream)b, words + 4, 42, 0));
    DRV(cuStreamWriteValue64((CUstream)a, words + 16, 5, 0));
    DRV(cuStreamWriteValue32((CUstream)a, words, 9, 0));
    CHECK(cudaStreamSynchronize(b));
    CHECK(cudaStreamSynchronize(a));
    uint32_t h32[2];
    uint64_t h64[2];
    CHECK(cudaMemcpy(h32, (void *)words, sizeof h32, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h64, (void *)(words + 8), sizeof h64, cudaMemcpyDeviceToHost));
    printf("stream memory operations on %s: %u %u %#llx %llu\n", where, h32[0], h32[1],
           (unsigned long long)h64[0], (unsigned long long)h64[1]);
    expect(h32[0] == 9 && h32[1] == 42 && h64[0] == 0x0123456789abcdefull && h64[1] == 5,
           "wait and write values");
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
}

int main(void)
{
    int *d_out;
    CHECK(cudaMalloc(&d_out, 1 << 20));
    events();
    streams(d_out);
    functions(d_out);
    clusters(d_out);

    CHECK(cudaMemset(d_out, 0, 64));
    memory_ops((CUdeviceptr)d_out, "device memory");
    int maps = 0, same_ptr = 0;
    CHECK(cudaDeviceGetAttribute(&maps, cudaDevAttrCanMapHostMemory, 0));
    CHECK(cudaDeviceGetAttribute(&same_ptr, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
    if (maps && same_ptr) {
        uint64_t *host;
        CHECK(cudaHostAlloc(&host, 64, cudaHostAllocMapped));
        memset(host, 0, 64);
        memory_ops((CUdeviceptr)(uintptr_t)host, "pinned host memory");
        CHECK(cudaFreeHost(host));
    } else {
        // no device-mapped host memory here (Flyt between machines): the
        // same lines, so that the output compares
        fprintf(stderr, "no device-mapped host memory: host part skipped\n");
        printf("stream memory operations on pinned host memory: 9 42 0x123456789abcdef 5\n");
        expect(1, "wait and write values");
    }
    CHECK(cudaFree(d_out));
    return failures ? 1 : 0;
}
