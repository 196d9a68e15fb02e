/*
 * __managed__ variables without a GPU: NVIDIA's runtime asks the driver for
 * each one it registered (cuLibraryGetManaged) and host code then reads and
 * writes it at that address. Through Flyt the address is the server's and
 * the client keeps a copy there, exchanged where CUDA hands managed memory
 * between host and device. The host backend runs no kernels and gives every
 * variable zeroed memory of its own, so this checks the exchanges through
 * copies and memsets (tests/gpu/programs/managed_vars.cu does kernels,
 * initial values and variables sharing a page on a GPU). Built with nvcc,
 * with the shared and the static runtime; run by run_with_server.sh.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define CUDA_OK(call) CHECK_EQ((call), cudaSuccess, "%s", #call)

__managed__ int counter;
__managed__ double table[2048]; /* 16 KiB: several pages */
__device__ int plain_var;

/* never launched (the host backend runs no kernels): it makes the module
 * reference the variables, as a real program's kernels do */
__global__ void touch(int v)
{
    counter += v;
    table[v] = v;
    plain_var = v;
}

int main(void)
{
    /* the first host access starts the runtime, which asks for the address */
    counter = 1234;
    table[0] = 0.5;
    table[2000] = 2.5;
    void *at = NULL;
    CUDA_OK(cudaGetSymbolAddress(&at, counter));
    CHECK(at == (void *)&counter, "the symbol's device address is where host code reaches it");
    struct cudaPointerAttributes attr;
    CUDA_OK(cudaPointerGetAttributes(&attr, &counter));
    CHECK_EQ(attr.type, cudaMemoryTypeManaged, "pointer attributes say managed (%d)", attr.type);

    /* host writes reach the device's copy */
    int got = 0;
    CUDA_OK(cudaMemcpyFromSymbol(&got, counter, sizeof got));
    CHECK_EQ(got, 1234, "the device read the host's write (%d)", got);
    double d = 0;
    CUDA_OK(cudaMemcpyFromSymbol(&d, table, sizeof d, 2000 * sizeof(double)));
    CHECK(d == 2.5, "the device read table[2000] as the host wrote it (%g)", d);

    /* device writes reach host code after the copy returned */
    int v = 99;
    CUDA_OK(cudaMemcpyToSymbol(counter, &v, sizeof v));
    CHECK_EQ(counter, 99, "host code reads the device's write (%d)", counter);
    CHECK(table[0] == 0.5 && table[2000] == 2.5, "the other variable kept the host's bytes");

    /* a memset on the device, then a synchronisation */
    void *tp = NULL;
    CUDA_OK(cudaGetSymbolAddress(&tp, table));
    CUDA_OK(cudaMemsetAsync(tp, 0, sizeof table, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(table[0] == 0 && table[2000] == 0, "the device's memset is seen after a synchronisation");

    /* host writes after that go again, without disturbing the device's */
    table[7] = 7.0;
    counter = 5;
    double row[8] = {0};
    CUDA_OK(cudaMemcpyFromSymbol(row, table, sizeof row));
    CHECK(row[7] == 7.0 && row[0] == 0, "a later host write reached the device (%g)", row[7]);
    CUDA_OK(cudaMemcpyFromSymbol(&got, counter, sizeof got));
    CHECK_EQ(got, 5, "and so did the counter (%d)", got);

    /* a copy from the variable to device memory runs on the device's copy */
    int *buf = NULL;
    CUDA_OK(cudaMalloc((void **)&buf, sizeof(int)));
    counter = 77;
    CUDA_OK(cudaMemcpy(buf, &counter, sizeof(int), cudaMemcpyDefault));
    CUDA_OK(cudaMemcpy(&got, buf, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK_EQ(got, 77, "device memory got the host's latest write (%d)", got);
    CUDA_OK(cudaFree(buf));

    /* a plain __device__ variable stays device memory */
    CUDA_OK(cudaMemcpyToSymbol(plain_var, &v, sizeof v));
    got = 0;
    CUDA_OK(cudaMemcpyFromSymbol(&got, plain_var, sizeof got));
    CHECK_EQ(got, 99, "a plain device variable (%d)", got);
    CUDA_OK(cudaPointerGetAttributes(&attr, at));
    CHECK_EQ(attr.type, cudaMemoryTypeManaged, "still managed (%d)", attr.type);

    CUDA_OK(cudaDeviceReset());
    return check_done();
}
