/* Virtual memory management as PyTorch's expandable segments use it: one
 * large reserved range, physical chunks mapped into it as it grows, read
 * and written by kernels across chunk borders, a chunk unmapped and another
 * mapped in its place, retain/release, properties, access flags, and the
 * errors of a map over a mapped range and of a free while mapped. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "test_util.h"

__global__ void fill(uint32_t *p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)i * 2654435761u + seed;
}

__global__ void sum(const uint32_t *p, size_t n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += p[i];
    atomicAdd(out, s);
}

static unsigned long long expected_sum(size_t n, uint32_t seed)
{
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++)
        s += (uint32_t)((uint32_t)i * 2654435761u + seed);
    return s;
}

static unsigned long long device_sum(CUdeviceptr p, size_t n, unsigned long long *d_out)
{
    unsigned long long s = 0;
    CHECK(cudaMemset(d_out, 0, sizeof s));
    sum<<<64, 256>>>((const uint32_t *)p, n, d_out);
    CHECK(cudaMemcpy(&s, d_out, sizeof s, cudaMemcpyDeviceToHost));
    return s;
}

int main(void)
{
    CHECK(cudaFree(0));
    int vmm = 0;
    DRV(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    printf("virtual memory management supported: %d\n", vmm);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("granularity %zu KiB\n", gran >> 10);

    enum { CHUNKS = 8 };
    CUdeviceptr va = 0;
    DRV(cuMemAddressReserve(&va, CHUNKS * gran, 0, 0, 0));
    CUmemGenericAllocationHandle h[CHUNKS];
    CUmemAccessDesc rw;
    memset(&rw, 0, sizeof rw);
    rw.location = prop.location;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    /* grows chunk by chunk, as an expandable segment does */
    for (int i = 0; i < 4; i++) {
        DRV(cuMemCreate(&h[i], gran, &prop, 0));
        DRV(cuMemMap(va + i * gran, gran, 0, h[i], 0));
        DRV(cuMemSetAccess(va + i * gran, gran, &rw, 1));
    }
    unsigned long long *d_out;
    CHECK(cudaMalloc(&d_out, sizeof *d_out));
    size_t n = 4 * gran / sizeof(uint32_t);
    fill<<<128, 256>>>((uint32_t *)va, n, 7);
    CHECK(cudaGetLastError());
    expect(device_sum(va, n, d_out) == expected_sum(n, 7), "kernels across four mapped chunks");

    uint32_t *host = (uint32_t *)malloc(gran);
    CHECK(cudaMemcpy(host, (void *)(va + gran - 8), 16, cudaMemcpyDeviceToHost));
    size_t at = (gran - 8) / 4;
    expect(host[0] == (uint32_t)at * 2654435761u + 7 && host[3] == (uint32_t)(at + 3) * 2654435761u + 7,
           "a copy across a chunk border");

    /* shrink: the third chunk goes, a new one takes its place */
    DRV(cuMemUnmap(va + 2 * gran, gran));
    DRV(cuMemRelease(h[2]));
    DRV(cuMemCreate(&h[2], gran, &prop, 0));
    DRV(cuMemMap(va + 2 * gran, gran, 0, h[2], 0));
    DRV(cuMemSetAccess(va + 2 * gran, gran, &rw, 1));
    CHECK(cudaMemset((void *)(va + 2 * gran), 0, gran));
    unsigned long long s = device_sum(va, n, d_out);
    unsigned long long want = expected_sum(n, 7);
    for (size_t i = 2 * gran / 4; i < 3 * gran / 4; i++)
        want -= (uint32_t)((uint32_t)i * 2654435761u + 7);
    expect(s == want, "a chunk replaced in place");

    CUmemGenericAllocationHandle again = 0;
    DRV(cuMemRetainAllocationHandle(&again, (void *)(va + gran + 100)));
    expect(again == h[1], "retain names the mapped chunk");
    DRV(cuMemRelease(again));
    CUmemAllocationProp got;
    DRV(cuMemGetAllocationPropertiesFromHandle(&got, h[3]));
    expect(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.id == 0,
           "properties from a handle");
    unsigned long long flags = 0;
    DRV(cuMemGetAccess(&flags, &prop.location, va + 3 * gran));
    expect(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access flags read back");
    unsigned type = 0;
    DRV(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 5));
    expect(type == CU_MEMORYTYPE_DEVICE, "a mapped address is device memory");

    const char *name = NULL;
    CUresult r = cuMemMap(va, gran, 0, h[3], 0);
    cuGetErrorName(r, &name);
    printf("map over a mapped chunk: %s\n", name ? name : "?");

    for (int i = 0; i < 4; i++)
        DRV(cuMemUnmap(va + i * gran, gran));
    for (int i = 0; i < 4; i++)
        DRV(cuMemRelease(h[i]));
    DRV(cuMemAddressFree(va, CHUNKS * gran));
    CHECK(cudaFree(d_out));
    free(host);
    printf("%s vmm\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
