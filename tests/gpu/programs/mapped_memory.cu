// Mapped pinned memory: cudaHostAlloc(cudaHostAllocMapped) with
// cudaHostGetDevicePointer, a kernel writing host memory directly; a
// cudaMallocHost pointer passed straight to a kernel (unified addressing);
// cudaHostRegister(cudaHostRegisterMapped) of an ordinary buffer.
#include <stdint.h>
#include <stdlib.h>

#include "test_util.h"

__global__ void fill(int *a, int n, int base)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        a[i] = base + i;
}

static int filled(const int *a, int n, int base)
{
    for (int i = 0; i < n; i++)
        if (a[i] != base + i)
            return 0;
    return 1;
}

int main(void)
{
    int can_map = 0, same_ptr = 0;
    CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
    if (!can_map) {
        printf("host memory cannot be mapped by this device: skipped\n");
        return 0;
    }
    CHECK(cudaDeviceGetAttribute(&same_ptr, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
    printf("canMapHostMemory: %d canUseHostPointerForRegisteredMem: %d\n", can_map, same_ptr);

    const int n = 1 << 18;
    int *h = NULL, *d = NULL;
    CHECK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer(&d, h, 0));
    printf("device pointer == host pointer: %d\n", d == h);
    unsigned flags = 0;
    CHECK(cudaHostGetFlags(&flags, h));
    printf("mapped flag: %d\n", (flags & cudaHostAllocMapped) != 0);
    fill<<<128, 256>>>(d, n, 7);
    CHECK(cudaDeviceSynchronize());
    expect(filled(h, n, 7), "kernel writes cudaHostAllocMapped memory");

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, h));
    printf("pointer: type %d devicePointer==ptr %d hostPointer==ptr %d\n", (int)pa.type,
           pa.devicePointer == (void *)h, pa.hostPointer == (void *)h);

    int *pinned = NULL;
    CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    fill<<<128, 256>>>(pinned, n, 100);
    CHECK(cudaDeviceSynchronize());
    expect(filled(pinned, n, 100), "kernel writes cudaMallocHost memory through its pointer");

    size_t bytes = n * sizeof(int);
    int *reg = (int *)aligned_alloc(4096, bytes);
    int *reg_d = NULL;
    CHECK(cudaHostRegister(reg, bytes, cudaHostRegisterMapped));
    CHECK(cudaHostGetDevicePointer(&reg_d, reg, 0));
    printf("registered device pointer == host pointer: %d\n", reg_d == reg);
    fill<<<128, 256>>>(reg_d, n, -5);
    CHECK(cudaDeviceSynchronize());
    expect(filled(reg, n, -5), "kernel writes cudaHostRegisterMapped memory");
    CHECK(cudaHostUnregister(reg));
    expect(filled(reg, n, -5), "the bytes stay after cudaHostUnregister");

    free(reg);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFreeHost(h));
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
