/* Host memory that kernels reach through a device pointer: cudaHostAlloc
 * with Mapped and WriteCombined (a kernel reads what the host wrote) and with
 * Mapped | Portable (a kernel writes, the host reads), cudaHostGetDevicePointer
 * and cudaHostGetFlags (printed), cudaHostRegister with Mapped on aligned
 * malloc'd memory and anonymous mmap'd memory (kernels update it in
 * place), with ReadOnly where
 * the device supports it, mapped memory as an async copy source and
 * destination, cudaHostUnregister. Needs the GPU to map the program's
 * memory: prints one "skipped" line where the device cannot (Flyt over TCP). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"

#define N (1 << 16)
#define BYTES (N * sizeof(int))

__global__ void copy_plus(int *dst, const int *src, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i] + k;
}

__global__ void add_in_place(int *v, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] += k;
}

static int *device_pointer(void *host)
{
    int *d = NULL;
    CHECK(cudaHostGetDevicePointer((void **)&d, host, 0));
    return d;
}

/* The flags, or the error: CUDA documents the call for cudaHostAlloc memory only. */
static void print_flags(const char *what, void *p)
{
    unsigned int flags = 0;
    cudaError_t e = cudaHostGetFlags(&flags, p);
    if (e == cudaSuccess)
        printf("cudaHostGetFlags(%s) = 0x%x\n", what, flags);
    else
        printf("cudaHostGetFlags(%s) -> %s\n", what, cudaGetErrorName(e));
    cudaGetLastError();
}

static int all_equal(const int *v, int base, int k)
{
    int bad = 0;
    for (int j = 0; j < N; j++)
        bad += v[j] != base + j + k;
    return bad == 0;
}

static void fill(int *v, int base)
{
    for (int j = 0; j < N; j++)
        v[j] = base + j;
}

static void allocated_mapped(int *d_tmp)
{
    int *wc, *portable;
    CHECK(cudaHostAlloc(&wc, BYTES, cudaHostAllocMapped | cudaHostAllocWriteCombined));
    CHECK(cudaHostAlloc(&portable, BYTES, cudaHostAllocMapped | cudaHostAllocPortable));
    print_flags("Mapped|WriteCombined", wc);
    print_flags("Mapped|Portable", portable);
    fill(wc, 100);
    copy_plus<<<64, 256>>>(d_tmp, device_pointer(wc), N, 1);  /* reads write-combined host memory */
    copy_plus<<<64, 256>>>(device_pointer(portable), d_tmp, N, 2); /* writes host memory */
    CHECK(cudaDeviceSynchronize());
    expect(all_equal(portable, 100, 3), "kernels read mapped write-combined memory and write mapped memory");
    CHECK(cudaFreeHost(wc));
    CHECK(cudaFreeHost(portable));

    int *plain;
    CHECK(cudaMallocHost(&plain, BYTES));
    print_flags("cudaMallocHost", plain);
    CHECK(cudaFreeHost(plain));
}

/* Registers v with flags, adds k in place with a kernel, checks, unregisters. */
static void registered_in_place(int *v, unsigned int flags, const char *what)
{
    fill(v, 7);
    CHECK(cudaHostRegister(v, BYTES, flags));
    print_flags(what, v);
    add_in_place<<<64, 256>>>(device_pointer(v), N, 5);
    CHECK(cudaDeviceSynchronize());
    char line[160];
    snprintf(line, sizeof line, "kernel updates %s in place", what);
    expect(all_equal(v, 7, 5), line);
    CHECK(cudaHostUnregister(v));
}

static void registered_mapped(void)
{
    int *aligned = (int *)aligned_alloc(4096, BYTES);
    registered_in_place(aligned, cudaHostRegisterMapped, "registered Mapped malloc");
    int *anonymous = map_anonymous(BYTES);
    registered_in_place(anonymous, cudaHostRegisterMapped | cudaHostRegisterPortable,
                        "registered Mapped|Portable anonymous mmap");


    int read_only = 0;
    CHECK(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, 0));
    printf("read-only registration supported: %d\n", read_only);
    if (read_only) {
        int *d_out;
        CHECK(cudaMalloc(&d_out, BYTES));
        fill(aligned, 40);
        CHECK(cudaHostRegister(aligned, BYTES, cudaHostRegisterMapped | cudaHostRegisterReadOnly));
        print_flags("registered Mapped|ReadOnly malloc", aligned);
        copy_plus<<<64, 256>>>(d_out, device_pointer(aligned), N, 2);
        int *out = (int *)malloc(BYTES);
        CHECK(cudaMemcpy(out, d_out, BYTES, cudaMemcpyDeviceToHost));
        expect(all_equal(out, 40, 2), "kernel reads read-only registered memory");
        free(out);
        CHECK(cudaHostUnregister(aligned));
        CHECK(cudaFree(d_out));
    }
    munmap(anonymous, BYTES);
    free(aligned);
}

/* Mapped memory as the source and destination of copies on two streams. */
static void mapped_copies(int *d_tmp)
{
    int *in, *out;
    CHECK(cudaHostAlloc(&in, BYTES, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&out, BYTES, cudaHostAllocMapped));
    fill(in, 9);
    cudaStream_t a, b;
    cudaEvent_t copied;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&copied));
    CHECK(cudaMemcpyAsync(d_tmp, in, BYTES, cudaMemcpyHostToDevice, a));
    add_in_place<<<64, 256, 0, a>>>(d_tmp, N, 1);
    CHECK(cudaEventRecord(copied, a));
    CHECK(cudaStreamWaitEvent(b, copied, 0));
    CHECK(cudaMemcpyAsync(out, d_tmp, BYTES, cudaMemcpyDeviceToHost, b));
    add_in_place<<<64, 256, 0, b>>>(device_pointer(out), N, 1); /* after the copy, on the host pages */
    CHECK(cudaStreamSynchronize(b));
    expect(all_equal(out, 9, 2), "mapped memory: async copies in both directions, then a kernel on it");
    CHECK(cudaEventDestroy(copied));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    CHECK(cudaFreeHost(in));
    CHECK(cudaFreeHost(out));
}

int main(void)
{
    int can_map = 0;
    CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
    if (!can_map) {
        printf("host memory cannot be mapped by this device: skipped\n");
        return 0;
    }
    int *d_tmp;
    CHECK(cudaMalloc(&d_tmp, BYTES));
    allocated_mapped(d_tmp);
    registered_mapped();
    mapped_copies(d_tmp);
    CHECK(cudaFree(d_tmp));
    printf("%s\n", failures ? "host_alloc_mapped: FAILED" : "host_alloc_mapped: all checks passed");
    return failures ? 1 : 0;
}
