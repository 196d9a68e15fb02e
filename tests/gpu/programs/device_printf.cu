// device_printf: what kernels print with printf reaches the program's stdout
// at each point where CUDA flushes the device's printf buffer, in the same
// place among the program's own printf lines as natively (stdout is a file
// for the runner, so fully buffered: the order shows whether device output
// goes through stdio's buffer). Each launch prints from one thread, or
// launches are serialised, so the order of device lines is deterministic.
// Flush points used: cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, a blocking cudaMemcpy, a host function after a
// printing kernel, cudaDeviceReset, and (last) none: the program returns
// while a printing kernel may still run; whether that line shows is
// whatever the native run shows (docs/device-output.md).
#include <cuda_runtime.h>
#include <stdio.h>
#include "test_util.h"

// The tags live in device memory: a host string literal is no address a
// kernel may read.
enum { T_DEFAULT, T_EVENT, T_QUEUED, T_HOST_FN, T_RESET, T_EXIT };
__device__ const char *const tags[] = {"default stream", "before an event", "queued launches",
                                       "before a host function", "before cudaDeviceReset",
                                       "at exit, never synchronised"};

__global__ void one_line(int step, float x, int tag)
{
    printf("device: step %d, x = %f, %s\n", step, x, tags[tag]);
}

// Many threads in several blocks; one chosen thread prints.
__global__ void chosen_thread(int block, int thread, int *out)
{
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    out[v] = v * 3;
    if (blockIdx.x == block && threadIdx.x == thread)
        printf("device: block %d thread %d of %d x %d, value %d (0x%x), %.3e, char %c, %s\n",
               (int)blockIdx.x, (int)threadIdx.x, (int)gridDim.x, (int)blockDim.x, v * 3,
               v * 3, v * 0.5, 'A' + (int)blockIdx.x, "formats");
}

// One thread prints many lines: far more than 4 KiB, more than 64 KiB.
__global__ void many_lines(int n)
{
    for (int i = 0; i < n; i++)
        printf("device: line %05d of %d, squared %lld, half %.1f\n", i, n, (long long)i * i,
               i * 0.5);
}

__global__ void write_and_print(int *out, int value)
{
    *out = value;
    printf("device: wrote %d before the copy back\n", value);
}

static void CUDART_CB host_function(void *arg)
{
    printf("host: host function %d runs\n", *(int *)arg);
}

int main(void)
{
    int *d = NULL, host_value = 0;
    static int callback_arg = 7;
    cudaStream_t stream;
    cudaEvent_t event;
    printf("host: start\n");
    CHECK(cudaMalloc(&d, 1024 * sizeof(int)));
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaEventCreate(&event));

    one_line<<<1, 1>>>(1, 1.5f, T_DEFAULT);
    CHECK(cudaDeviceSynchronize());
    printf("host: after cudaDeviceSynchronize\n");

    chosen_thread<<<4, 64, 0, stream>>>(2, 17, d);
    CHECK(cudaStreamSynchronize(stream));
    printf("host: after cudaStreamSynchronize\n");

    one_line<<<1, 1, 0, stream>>>(3, -0.25f, T_EVENT);
    CHECK(cudaEventRecord(event, stream));
    CHECK(cudaEventSynchronize(event));
    printf("host: after cudaEventSynchronize\n");

    write_and_print<<<1, 1>>>(d, 4242);
    CHECK(cudaMemcpy(&host_value, d, sizeof host_value, cudaMemcpyDeviceToHost));
    printf("host: copied back %d\n", host_value);

    printf("host: before 3000 device lines\n");
    many_lines<<<1, 1>>>(3000);
    CHECK(cudaDeviceSynchronize());
    printf("host: after 3000 device lines\n");

    for (int i = 0; i < 5; i++)
        one_line<<<1, 1, 0, stream>>>(10 + i, i * 0.125f, T_QUEUED);
    CHECK(cudaStreamSynchronize(stream));
    printf("host: after five queued launches\n");

    one_line<<<1, 1, 0, stream>>>(20, 2.0f, T_HOST_FN);
    CHECK(cudaLaunchHostFunc(stream, host_function, &callback_arg));
    CHECK(cudaStreamSynchronize(stream));
    printf("host: after the host function\n");

    one_line<<<1, 1>>>(30, 3.0f, T_RESET);
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaEventDestroy(event));
    CHECK(cudaFree(d));
    CHECK(cudaDeviceReset());
    printf("host: after cudaDeviceReset\n");

    one_line<<<1, 1>>>(40, 4.0f, T_EXIT);
    CHECK(cudaGetLastError());
    printf("host: returning from main\n");
    return 0;
}
