// errors: error paths of the runtime API.  Prints the error NAME returned at
// each step; the output is compared against a native run, so what matters is
// that the sequence is reproduced exactly.  The program exits 0 if it reaches
// the end.  The last part provokes a sticky error (illegal address), after
// which the context is unusable, so it must stay last.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "test_util.h"

static void show(const char *step, cudaError_t e)
{
    printf("%-52s %s\n", step, cudaGetErrorName(e));
}

__global__ void ok_kernel(int *p)
{
    if (p)
        p[threadIdx.x] = threadIdx.x;
}

__global__ void fault_kernel(int *bad)
{
    bad[threadIdx.x] = 42; // bad == (int *)0x10: illegal address
}

int main(void)
{
    double t0 = now_s();
    cudaError_t e;
    int host_buf[16] = {0};

    // make sure the context exists so that early errors are not init errors
    show("cudaFree(NULL)", cudaFree(NULL));

    // ---- invalid free
    show("cudaFree(invalid pointer)", cudaFree((void *)0x1234));
    show("  cudaGetLastError", cudaGetLastError());
    show("  cudaGetLastError again", cudaGetLastError());

    // ---- memcpy to an invalid device pointer
    show("cudaMemcpy H2D to invalid device pointer",
         cudaMemcpy((void *)0x1000, host_buf, sizeof host_buf, cudaMemcpyHostToDevice));
    show("  cudaGetLastError", cudaGetLastError());
    show("cudaMemset on invalid device pointer", cudaMemset((void *)0x1000, 0, 64));
    show("  cudaGetLastError", cudaGetLastError());

    // ---- out of memory
    void *p = (void *)0x1;
    e = cudaMalloc(&p, (size_t)1 << 50);
    show("cudaMalloc(1 PiB)", e);
    printf("  pointer after failed cudaMalloc is NULL: %s\n", p == NULL ? "yes" : "no");
    show("  cudaGetLastError (returns and clears)", cudaGetLastError());
    show("  cudaGetLastError (now clear)", cudaGetLastError());
    show("cudaMallocHost(1 PiB)", cudaMallocHost(&p, (size_t)1 << 50));
    show("  cudaGetLastError", cudaGetLastError());

    // ---- zero-size allocation
    p = (void *)0x1;
    show("cudaMalloc(0)", cudaMalloc(&p, 0));
    printf("  pointer after cudaMalloc(0) is NULL: %s\n", p == NULL ? "yes" : "no");

    // ---- invalid launch configurations
    int *d = NULL;
    show("cudaMalloc(64 ints)", cudaMalloc(&d, 64 * sizeof(int)));
    ok_kernel<<<1, 2048>>>(d);
    show("launch <<<1, 2048>>>: cudaPeekAtLastError", cudaPeekAtLastError());
    show("  cudaGetLastError", cudaGetLastError());
    show("  cudaPeekAtLastError", cudaPeekAtLastError());
    show("  cudaGetLastError", cudaGetLastError());
    ok_kernel<<<0, 32>>>(d);
    show("launch <<<0, 32>>>: cudaGetLastError", cudaGetLastError());
    ok_kernel<<<dim3(1, 1, 1), dim3(32, 32, 2)>>>(d);
    show("launch block 32x32x2: cudaGetLastError", cudaGetLastError());
    ok_kernel<<<1, 32, 1 << 20>>>(d);
    show("launch with 1 MiB dynamic smem: cudaGetLastError", cudaGetLastError());
    ok_kernel<<<1, 64>>>(d);
    show("valid launch: cudaGetLastError", cudaGetLastError());
    show("  cudaDeviceSynchronize", cudaDeviceSynchronize());

    // ---- other invalid arguments
    show("cudaSetDevice(9999)", cudaSetDevice(9999));
    show("  cudaGetLastError", cudaGetLastError());
    cudaStream_t s;
    show("cudaStreamCreateWithFlags(bogus flags)", cudaStreamCreateWithFlags(&s, 0xF0));
    show("  cudaGetLastError", cudaGetLastError());
    show("cudaMemcpy with invalid kind",
         cudaMemcpy(d, host_buf, 16, (cudaMemcpyKind)77));
    show("  cudaGetLastError", cudaGetLastError());
    int v;
    show("cudaDeviceGetAttribute(invalid attr)",
         cudaDeviceGetAttribute(&v, (cudaDeviceAttr)99999, 0));
    show("  cudaGetLastError", cudaGetLastError());

    // ---- error strings and names (pure client-side functions)
    cudaError_t codes[] = {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                           cudaErrorInvalidConfiguration, cudaErrorIllegalAddress,
                           cudaErrorNotReady, cudaErrorInvalidDevicePointer,
                           (cudaError_t)99999};
    for (unsigned i = 0; i < sizeof codes / sizeof codes[0]; i++)
        printf("code %d: name=%s string=\"%s\"\n", (int)codes[i],
               cudaGetErrorName(codes[i]), cudaGetErrorString(codes[i]));

    // ---- sticky error: must be last
    show("cudaGetLastError before fault", cudaGetLastError());
    fault_kernel<<<1, 32>>>((int *)0x10);
    show("cudaDeviceSynchronize after faulting kernel", cudaDeviceSynchronize());
    show("  cudaGetLastError", cudaGetLastError());
    show("  cudaPeekAtLastError", cudaPeekAtLastError());
    void *q = NULL;
    show("  cudaMalloc after fault (sticky)", cudaMalloc(&q, 1024));
    show("  cudaGetLastError", cudaGetLastError());
    show("  cudaMemcpy D2H after fault",
         cudaMemcpy(host_buf, d, sizeof host_buf, cudaMemcpyDeviceToHost));
    show("  cudaDeviceSynchronize again", cudaDeviceSynchronize());

    fprintf(stderr, "errors: %.3f s\n", now_s() - t0);
    printf("reached end of errors\n");
    return 0;
}
