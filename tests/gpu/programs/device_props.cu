// device_props: device management, properties, attributes, limits, flags,
// function attributes, occupancy, and the less common launch APIs
// (cudaLaunchKernelEx[C] with an attribute, cudaLaunchCooperativeKernel,
// cudaLaunchKernel, <<<>>>).  Prints device facts that are fixed for a given
// GPU + driver, never versions or anything that varies between runs.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"

namespace cg = cooperative_groups;

__global__ void simple_kernel(int *out, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = v + i;
}

// uses dynamic shared memory: sums its block's inputs through smem
__global__ void smem_kernel(const int *in, int *out, int nsmem)
{
    extern __shared__ int sm[];
    for (int i = threadIdx.x; i < nsmem; i += blockDim.x)
        sm[i] = in[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        long long s = 0;
        for (int i = 0; i < nsmem; i++)
            s += sm[i];
        out[blockIdx.x] = (int)(s & 0x7fffffff);
    }
}

// each block writes its partial sum, grid syncs, block 0 adds them up
__global__ void coop_kernel(const int *in, int *partial, int *result, int n)
{
    cg::grid_group grid = cg::this_grid();
    __shared__ int bsum;
    if (threadIdx.x == 0)
        bsum = 0;
    __syncthreads();
    for (int i = grid.thread_rank(); i < n; i += grid.size())
        atomicAdd(&bsum, in[i]);
    __syncthreads();
    if (threadIdx.x == 0)
        partial[blockIdx.x] = bsum;
    grid.sync();
    if (grid.thread_rank() == 0) {
        int s = 0;
        for (unsigned int b = 0; b < gridDim.x; b++)
            s += partial[b];
        *result = s;
    }
}

int main(void)
{
    double t0 = now_s();

    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("device count >= 1: %s\n", count >= 1 ? "yes" : "no");

    // device flags before the context exists
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    CHECK(cudaSetDevice(0));
    int dev = -1;
    CHECK(cudaGetDevice(&dev));
    printf("current device: %d\n", dev);
    unsigned int dflags = 0;
    CHECK(cudaGetDeviceFlags(&dflags));
    printf("device flags: 0x%x (schedule bits 0x%x)\n", dflags,
           dflags & cudaDeviceScheduleMask);
    expect((dflags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync,
           "cudaSetDeviceFlags / cudaGetDeviceFlags");
    cudaError_t e = cudaSetDevice(count + 5);
    printf("cudaSetDevice(invalid): %s\n", cudaGetErrorName(e));
    printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaGetDevice(&dev));
    printf("current device after failed set: %d\n", dev);

    int drv = 0, rt = 0;
    CHECK(cudaDriverGetVersion(&drv));
    CHECK(cudaRuntimeGetVersion(&rt));
    printf("driver version > 0: %s\n", drv > 0 ? "yes" : "no");
    printf("runtime version > 0: %s\n", rt > 0 ? "yes" : "no");

    // ---- properties
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("name: %s\n", p.name);
    printf("compute capability: %d.%d\n", p.major, p.minor);
    printf("multiProcessorCount: %d\n", p.multiProcessorCount);
    printf("totalGlobalMem: %zu\n", p.totalGlobalMem);
    printf("sharedMemPerBlock: %zu\n", p.sharedMemPerBlock);
    printf("sharedMemPerBlockOptin: %zu\n", p.sharedMemPerBlockOptin);
    printf("sharedMemPerMultiprocessor: %zu\n", p.sharedMemPerMultiprocessor);
    printf("regsPerBlock: %d\n", p.regsPerBlock);
    printf("warpSize: %d\n", p.warpSize);
    printf("memPitch: %zu\n", p.memPitch);
    printf("maxThreadsPerBlock: %d\n", p.maxThreadsPerBlock);
    printf("maxThreadsDim: %d %d %d\n", p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2]);
    printf("maxGridSize: %d %d %d\n", p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
    printf("totalConstMem: %zu\n", p.totalConstMem);
    printf("textureAlignment: %zu\n", p.textureAlignment);
    printf("l2CacheSize: %d\n", p.l2CacheSize);
    printf("maxThreadsPerMultiProcessor: %d\n", p.maxThreadsPerMultiProcessor);
    printf("maxBlocksPerMultiProcessor: %d\n", p.maxBlocksPerMultiProcessor);
    printf("memoryBusWidth: %d\n", p.memoryBusWidth);
    printf("concurrentKernels: %d\n", p.concurrentKernels);
    printf("asyncEngineCount: %d\n", p.asyncEngineCount);
    printf("unifiedAddressing: %d\n", p.unifiedAddressing);
    printf("integrated: %d\n", p.integrated);
    printf("cooperativeLaunch: %d\n", p.cooperativeLaunch);
    printf("streamPrioritiesSupported: %d\n", p.streamPrioritiesSupported);
    printf("memoryPoolsSupported: %d\n", p.memoryPoolsSupported);
    printf("clusterLaunch: %d\n", p.clusterLaunch);
    printf("pci: domain %d bus %d device %d\n", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    expect(p.warpSize == 32 && p.maxThreadsPerBlock >= 1024 && p.multiProcessorCount > 0,
           "basic properties sane");

    // ---- attributes (must agree with the properties)
    struct {
        cudaDeviceAttr a;
        const char *name;
    } attrs[] = {
        {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock"},
        {cudaDevAttrMaxBlockDimX, "MaxBlockDimX"},
        {cudaDevAttrMaxGridDimX, "MaxGridDimX"},
        {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock"},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, "MaxSharedMemoryPerBlockOptin"},
        {cudaDevAttrWarpSize, "WarpSize"},
        {cudaDevAttrMultiProcessorCount, "MultiProcessorCount"},
        {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor"},
        {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor"},
        {cudaDevAttrL2CacheSize, "L2CacheSize"},
        {cudaDevAttrMaxThreadsPerMultiProcessor, "MaxThreadsPerMultiProcessor"},
        {cudaDevAttrConcurrentKernels, "ConcurrentKernels"},
        {cudaDevAttrUnifiedAddressing, "UnifiedAddressing"},
        {cudaDevAttrCooperativeLaunch, "CooperativeLaunch"},
        {cudaDevAttrMemoryPoolsSupported, "MemoryPoolsSupported"},
        {cudaDevAttrGlobalMemoryBusWidth, "GlobalMemoryBusWidth"},
        {cudaDevAttrPciBusId, "PciBusId"},
        {cudaDevAttrComputeMode, "ComputeMode"},
    };
    int attr_vals[32];
    for (unsigned i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        CHECK(cudaDeviceGetAttribute(&attr_vals[i], attrs[i].a, 0));
        printf("attr %s: %d\n", attrs[i].name, attr_vals[i]);
    }
    expect(attr_vals[0] == p.maxThreadsPerBlock && attr_vals[6] == p.multiProcessorCount &&
               attr_vals[7] == p.major && attr_vals[8] == p.minor &&
               attr_vals[9] == p.l2CacheSize,
           "attributes agree with properties");
    int clk = 0;
    CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
    printf("attr ClockRate > 0: %s\n", clk > 0 ? "yes" : "no");

    // ---- PCI bus id round trip
    char pci[64];
    CHECK(cudaDeviceGetPCIBusId(pci, sizeof pci, 0));
    printf("PCI bus id: %s\n", pci);
    int dev_by_pci = -1;
    CHECK(cudaDeviceGetByPCIBusId(&dev_by_pci, pci));
    expect(dev_by_pci == 0, "cudaDeviceGetByPCIBusId round trip");

    // ---- limits
    size_t lim;
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    printf("limit stack size (default): %zu\n", lim);
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    printf("limit stack size (after set 4096): %zu\n", lim);
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
    printf("limit printf fifo (default): %zu\n", lim);
    CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 2 << 20));
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
    printf("limit printf fifo (after set 2 MiB): %zu\n", lim);
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitMallocHeapSize));
    printf("limit malloc heap (default): %zu\n", lim);

    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("stream priority range: %d .. %d\n", least, greatest);

    // ---- function attributes
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, coop_kernel));
    printf("coop_kernel: sharedSizeBytes=%zu maxThreadsPerBlock=%d binaryVersion=%d\n",
           fa.sharedSizeBytes, fa.maxThreadsPerBlock, fa.binaryVersion);
    expect(fa.sharedSizeBytes >= sizeof(int), "static shared size of coop_kernel");
    CHECK(cudaFuncGetAttributes(&fa, smem_kernel));
    printf("smem_kernel: maxDynamicSharedSizeBytes=%d (default)\n", fa.maxDynamicSharedSizeBytes);

    const int big_smem = 100 * 1024; // needs the opt-in
    int *din, *dout;
    CHECK(cudaMalloc(&din, big_smem));
    CHECK(cudaMalloc(&dout, 4096 * sizeof(int)));
    int *hin = (int *)malloc(big_smem);
    long long want = 0;
    for (int i = 0; i < big_smem / 4; i++) {
        hin[i] = (i * 37) % 1001;
        want += hin[i];
    }
    CHECK(cudaMemcpy(din, hin, big_smem, cudaMemcpyHostToDevice));
    // without the opt-in the launch must fail
    smem_kernel<<<2, 128, big_smem>>>(din, dout, big_smem / 4);
    e = cudaGetLastError();
    printf("launch with 100 KiB dynamic smem before opt-in: %s\n", cudaGetErrorName(e));
    CHECK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big_smem));
    CHECK(cudaFuncGetAttributes(&fa, smem_kernel));
    printf("smem_kernel: maxDynamicSharedSizeBytes=%d (after set)\n", fa.maxDynamicSharedSizeBytes);
    smem_kernel<<<2, 128, big_smem>>>(din, dout, big_smem / 4);
    CHECK(cudaGetLastError());
    int hout[2] = {0, 0};
    CHECK(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost));
    expect(hout[0] == (int)(want & 0x7fffffff) && hout[1] == hout[0],
           "launch with 100 KiB dynamic smem after opt-in");
    CHECK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    CHECK(cudaFuncSetCacheConfig(simple_kernel, cudaFuncCachePreferShared));
    CHECK(cudaFuncSetCacheConfig(smem_kernel, cudaFuncCachePreferL1));

    // ---- occupancy
    int nblocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nblocks, simple_kernel, 256, 0));
    printf("occupancy simple_kernel @256 threads: %d blocks/SM\n", nblocks);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nblocks, smem_kernel, 128, big_smem));
    printf("occupancy smem_kernel @128 threads + 100 KiB: %d blocks/SM\n", nblocks);
    int min_grid = 0, block = 0;
    CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, simple_kernel, 0, 0));
    printf("max potential block size simple_kernel: block=%d minGrid=%d\n", block, min_grid);
    expect(block > 0 && min_grid > 0, "cudaOccupancyMaxPotentialBlockSize");

    // ---- launch paths
    int h[256];
    // <<<>>> (push/pop call configuration)
    simple_kernel<<<2, 128>>>(dout, 5);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < 256; i++)
        ok = ok && h[i] == 5 + i;
    expect(ok, "<<<>>> launch");

    // cudaLaunchKernel
    {
        int v = 77;
        void *args[] = {&dout, &v};
        CHECK(cudaLaunchKernel((const void *)simple_kernel, dim3(4), dim3(64), args, 0, 0));
        CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
        ok = 1;
        for (int i = 0; i < 256; i++)
            ok = ok && h[i] == 77 + i;
        expect(ok, "cudaLaunchKernel");
    }

    // cudaLaunchKernelEx (C++ template) with a priority attribute
    {
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributePriority;
        at[0].val.priority = greatest;
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3(8);
        cfg.blockDim = dim3(32);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, simple_kernel, dout, 1000));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost));
        ok = 1;
        for (int i = 0; i < 256; i++)
            ok = ok && h[i] == 1000 + i;
        expect(ok, "cudaLaunchKernelEx with cudaLaunchAttributePriority");

        // cudaLaunchKernelExC with the dynamic smem kernel
        int nsm = big_smem / 4;
        void *args[] = {&din, &dout, &nsm};
        cfg.gridDim = dim3(3);
        cfg.blockDim = dim3(256);
        cfg.dynamicSmemBytes = big_smem;
        CHECK(cudaMemset(dout, 0, 3 * sizeof(int)));
        CHECK(cudaLaunchKernelExC(&cfg, (const void *)smem_kernel, args));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(h, dout, 3 * sizeof(int), cudaMemcpyDeviceToHost));
        expect(h[0] == (int)(want & 0x7fffffff) && h[1] == h[0] && h[2] == h[0],
               "cudaLaunchKernelExC with dynamic smem + attribute");
        CHECK(cudaStreamDestroy(s));
    }

    // cooperative launch with a small grid
    {
        int coop = 0;
        CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
        int per_sm = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_kernel, 128, 0));
        printf("cooperative launch supported: %d, co-resident blocks/SM >= 1: %s\n",
               coop, per_sm >= 1 ? "yes" : "no");
        const int n = 100000;
        int *cin, *partial, *result;
        CHECK(cudaMalloc(&cin, n * sizeof(int)));
        CHECK(cudaMalloc(&partial, 64 * sizeof(int)));
        CHECK(cudaMalloc(&result, sizeof(int)));
        int *hc = (int *)malloc(n * sizeof(int));
        int hwant = 0;
        for (int i = 0; i < n; i++) {
            hc[i] = (i % 13) - 6 + (i % 7);
            hwant += hc[i];
        }
        CHECK(cudaMemcpy(cin, hc, n * sizeof(int), cudaMemcpyHostToDevice));
        int nn = n;
        void *args[] = {&cin, &partial, &result, &nn};
        CHECK(cudaLaunchCooperativeKernel((const void *)coop_kernel, dim3(8), dim3(128),
                                          args, 0, 0));
        int hres = 0;
        CHECK(cudaMemcpy(&hres, result, sizeof hres, cudaMemcpyDeviceToHost));
        printf("cooperative sum: %d (want %d)\n", hres, hwant);
        expect(hres == hwant, "cudaLaunchCooperativeKernel grid.sync()");
        CHECK(cudaFree(cin));
        CHECK(cudaFree(partial));
        CHECK(cudaFree(result));
        free(hc);
    }

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    free(hin);

    // ---- device reset, then the runtime must work again
    CHECK(cudaDeviceReset());
    {
        int *d;
        CHECK(cudaMalloc(&d, 256 * sizeof(int)));
        simple_kernel<<<1, 256>>>(d, 9);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        ok = 1;
        for (int i = 0; i < 256; i++)
            ok = ok && h[i] == 9 + i;
        expect(ok, "runtime usable after cudaDeviceReset");
        CHECK(cudaGetDeviceFlags(&dflags));
        printf("device flags after reset: schedule bits 0x%x\n", dflags & cudaDeviceScheduleMask);
        CHECK(cudaFree(d));
    }

    fprintf(stderr, "device_props: %.3f s\n", now_s() - t0);
    printf("%s device_props\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
