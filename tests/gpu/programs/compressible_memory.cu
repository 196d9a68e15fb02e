/* Compressible memory as NVIDIA's cudaCompressibleMemory sample makes it:
 * where the device says it supports generic compression, cuMemCreate with
 * allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC, mapped and
 * used by kernels and copies; the properties read back from the handle (and
 * from a handle retained by address) say whether the driver granted
 * compression, which the program prints. A plain allocation beside it reads
 * back uncompressed. Devices without support print one line. */
#include <cuda.h>
#include <cuda_runtime.h>

#include "test_util.h"

#define N (1 << 20)

__global__ void pattern(int *v, int n, int seed)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = (i & 255) == 0 ? seed + i : 0; /* mostly zeros: compresses well */
}

__global__ void add_from(int *dst, const int *src, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] += src[i];
}

struct Mapping {
    CUmemGenericAllocationHandle handle;
    CUdeviceptr ptr;
    size_t size;
};

static CUmemAllocationProp props(unsigned char compression)
{
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.allocFlags.compressionType = compression;
    return p;
}

static Mapping map_new(unsigned char compression)
{
    CUmemAllocationProp p = props(compression);
    size_t granularity = 0;
    DRV(cuMemGetAllocationGranularity(&granularity, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    Mapping m;
    m.size = (N * sizeof(int) + granularity - 1) / granularity * granularity;
    DRV(cuMemCreate(&m.handle, m.size, &p, 0));
    DRV(cuMemAddressReserve(&m.ptr, m.size, 0, 0, 0));
    DRV(cuMemMap(m.ptr, m.size, 0, m.handle, 0));
    CUmemAccessDesc access = {};
    access.location = p.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemSetAccess(m.ptr, m.size, &access, 1));
    return m;
}

static void unmap(Mapping m)
{
    DRV(cuMemUnmap(m.ptr, m.size));
    DRV(cuMemRelease(m.handle));
    DRV(cuMemAddressFree(m.ptr, m.size));
}

static unsigned char granted(CUmemGenericAllocationHandle h)
{
    CUmemAllocationProp p = {};
    DRV(cuMemGetAllocationPropertiesFromHandle(&p, h));
    return p.allocFlags.compressionType;
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    int supported = 0;
    DRV(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED, dev));
    if (!supported) {
        printf("compression not supported\n");
        return 0;
    }
    Mapping compressed = map_new(CU_MEM_ALLOCATION_COMP_GENERIC);
    Mapping plain = map_new(CU_MEM_ALLOCATION_COMP_NONE);
    unsigned char got = granted(compressed.handle);
    printf("compressible allocation granted compression: %s\n",
           got == CU_MEM_ALLOCATION_COMP_GENERIC ? "yes" : "no");
    expect(granted(plain.handle) == CU_MEM_ALLOCATION_COMP_NONE, "plain allocation reads back uncompressed");
    CUmemGenericAllocationHandle retained;
    DRV(cuMemRetainAllocationHandle(&retained, (void *)(compressed.ptr + 4096)));
    expect(granted(retained) == got, "handle retained by address reads back the same compression");
    DRV(cuMemRelease(retained));

    int *c = (int *)compressed.ptr, *p = (int *)plain.ptr;
    pattern<<<256, 256>>>(c, N, 11);
    pattern<<<256, 256>>>(p, N, 100);
    add_from<<<256, 256>>>(p, c, N);  /* plain += compressed */
    add_from<<<256, 256>>>(c, p, N);  /* compressed += plain */
    CHECK(cudaGetLastError());
    static int host[N];
    CHECK(cudaMemcpy(host, c, sizeof host, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int base = (i & 255) == 0 ? 1 : 0;
        bad += host[i] != base * ((11 + i) * 2 + 100 + i);
    }
    expect(bad == 0, "kernels read and write compressible memory");
    CHECK(cudaMemset(c, 0, N * sizeof(int)));
    CHECK(cudaMemcpy(p, c, N * sizeof(int), cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(host, p, sizeof host, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += host[i] != 0;
    expect(bad == 0, "memset and device copy out of compressible memory");
    unmap(compressed);
    unmap(plain);
    printf("%s\n", failures ? "compressible_memory: FAILED" : "compressible_memory: all checks passed");
    return failures ? 1 : 0;
}
