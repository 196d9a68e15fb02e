/*
 * What the driver prints on the server reaches the program's stdout and
 * stderr, in order with the program's own output. The host backend "prints"
 * what FLYT_HOST_BACKEND_PRINTF says at each device synchronise and memset
 * (run_device_output.sh sets it and compares this program's output with
 * what it expects). Only deterministic text goes to stdout; a failed CUDA
 * call is said on stderr and fails the run.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static void must(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorName(e));
        exit(1);
    }
}

static void sync_device(void) { must(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

static void CUDART_CB host_function(void *arg)
{
    (void)arg;
    printf("host function\n");
}

int main(void)
{
    printf("host: start\n");
    must(cudaSetDevice(0), "cudaSetDevice"); /* point 0, the server opening: stderr */
    sync_device(); /* point 1: two lines on stdout */
    printf("host: after sync 1\n");
    sync_device(); /* point 2: nothing */
    printf("host: after sync 2\n");
    sync_device(); /* point 3: a line on stderr and one on stdout */
    printf("host: after sync 3\n");
    sync_device(); /* point 4: 1 MiB */
    printf("host: after the big one\n");

    void *d = NULL;
    must(cudaMalloc(&d, 64), "cudaMalloc");
    /* point 5: a memset stands in for a launch that flushes earlier output */
    must(cudaMemsetAsync(d, 0, 64, 0), "cudaMemsetAsync");
    must(cudaLaunchHostFunc(0, host_function, NULL), "cudaLaunchHostFunc");
    sync_device(); /* point 6: nothing */
    printf("host: after the host function\n");

    must(cudaMemsetAsync(d, 0, 64, 0), "cudaMemsetAsync"); /* point 7, then no call waits */
    printf("host: last line\n");
    return 0;
}
