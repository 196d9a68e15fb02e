// dynamic_parallelism: kernels launching kernels (CUDA dynamic parallelism,
// CDP2; built with -rdc=true and cudadevrt), each result checked against the
// host:
//   - every block of a parent grid launches a child grid on the default
//     (per-block) stream; the host sees the children's work after the parent;
//   - a kernel that launches itself down to depth 6;
//   - children on cudaStreamFireAndForget, then a cudaStreamTailLaunch kernel
//     that runs after the parent and all its work and sums what they wrote;
//   - device-side cudaStreamCreateWithFlags(cudaStreamNonBlocking) and
//     cudaStreamDestroy;
//   - device-side cudaGetLastError / cudaPeekAtLastError after a launch with a
//     block too large (error name printed) and after a good one;
//   - cudaLimitDevRuntimePendingLaunchCount set first and read back, then a
//     parent launching 2048 children.
#include <string.h>
#include "test_util.h"

__global__ void child_fill(int *out, int base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = base * 100000 + i;
}

__global__ void parent_per_block(int *out, int per_child)
{
    if (threadIdx.x == 0)
        child_fill<<<per_child / 64, 64>>>(out + blockIdx.x * per_child, (int)blockIdx.x + 1);
}

__global__ void recurse(int *trace, int depth, int max_depth)
{
    trace[depth] = depth * 10 + 1;
    if (depth + 1 < max_depth)
        recurse<<<1, 1>>>(trace, depth + 1, max_depth);
}

__global__ void write_slot(int *slots, int i) { slots[i] = (i + 1) * (i + 1); }

__global__ void sum_slots(const int *slots, int n, long long *sum)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += slots[i];
    *sum = s;
}

// 32 fire-and-forget children each write one slot; the tail launch sums
// them: it may only run once they all finished.
__global__ void parent_tail(int *slots, int n, long long *sum)
{
    if (threadIdx.x < n)
        write_slot<<<1, 1, 0, cudaStreamFireAndForget>>>(slots, (int)threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0)
        sum_slots<<<1, 1, 0, cudaStreamTailLaunch>>>(slots, n, sum);
}

__global__ void parent_own_stream(int *out)
{
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        out[0] = -1;
        return;
    }
    child_fill<<<4, 64, 0, s>>>(out, 7);
    cudaStreamDestroy(s); // the child still runs to completion
}

__global__ void nothing(void) {}

// codes[0]: the error of a launch with 4096 threads per block, codes[1]:
// cudaPeekAtLastError after it, codes[2]: cudaGetLastError, codes[3]:
// cudaGetLastError again, codes[4]: after a good launch.
__global__ void device_errors(int *codes)
{
    nothing<<<1, 4096>>>();
    codes[0] = (int)cudaGetLastError();
    nothing<<<1, 4096>>>();
    codes[1] = (int)cudaPeekAtLastError();
    codes[2] = (int)cudaGetLastError();
    codes[3] = (int)cudaGetLastError();
    nothing<<<1, 32>>>();
    codes[4] = (int)cudaGetLastError();
}

__global__ void many_children(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        child_fill<<<1, 64>>>(out + i * 64, i);
}

static int check_fill(const int *h, int count, int base, int start)
{
    for (int i = 0; i < count; i++)
        if (h[start + i] != base * 100000 + i)
            return 0;
    return 1;
}

int main(void)
{
    double t0 = now_s();
    // before the device runtime is in use, as CUDA wants its limits
    size_t pending = 0;
    CHECK(cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, 4096));
    CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
    printf("pending launch count limit: %zu\n", pending);
    const int blocks = 16, per_child = 1024, n = blocks * per_child;
    int *d, *h = (int *)malloc(2048 * 64 * sizeof(int));
    CHECK(cudaMalloc(&d, 2048 * 64 * sizeof(int)));

    CHECK(cudaMemset(d, 0xff, n * sizeof(int)));
    parent_per_block<<<blocks, 32>>>(d, per_child);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int b = 0; b < blocks; b++)
        ok = ok && check_fill(h, per_child, b + 1, b * per_child);
    expect(ok, "16 parent blocks each launch a child grid");

    CHECK(cudaMemset(d, 0, 8 * sizeof(int)));
    recurse<<<1, 1>>>(d, 0, 6);
    CHECK(cudaMemcpy(h, d, 8 * sizeof(int), cudaMemcpyDeviceToHost));
    printf("recursion trace:");
    for (int i = 0; i < 8; i++)
        printf(" %d", h[i]);
    printf("\n");
    ok = h[6] == 0 && h[7] == 0;
    for (int i = 0; i < 6; i++)
        ok = ok && h[i] == i * 10 + 1;
    expect(ok, "a kernel launching itself to depth 6");

    long long *dsum, sum = 0;
    CHECK(cudaMalloc(&dsum, sizeof(long long)));
    CHECK(cudaMemset(d, 0, 32 * sizeof(int)));
    parent_tail<<<1, 32>>>(d, 32, dsum);
    CHECK(cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost));
    long long want = 0;
    for (int i = 1; i <= 32; i++)
        want += i * i;
    printf("tail launch sum of fire-and-forget children: %lld\n", sum);
    expect(sum == want, "cudaStreamTailLaunch runs after the fire-and-forget children");

    CHECK(cudaMemset(d, 0, 256 * sizeof(int)));
    parent_own_stream<<<1, 1>>>(d);
    CHECK(cudaMemcpy(h, d, 256 * sizeof(int), cudaMemcpyDeviceToHost));
    expect(check_fill(h, 256, 7, 0), "a child on a device-created non-blocking stream");

    int *dcodes, codes[5];
    CHECK(cudaMalloc(&dcodes, sizeof codes));
    device_errors<<<1, 1>>>(dcodes);
    CHECK(cudaMemcpy(codes, dcodes, sizeof codes, cudaMemcpyDeviceToHost));
    printf("device-side errors: launch %s, peek %s, get %s, get again %s, after a good launch %s\n",
           cudaGetErrorName((cudaError_t)codes[0]), cudaGetErrorName((cudaError_t)codes[1]),
           cudaGetErrorName((cudaError_t)codes[2]), cudaGetErrorName((cudaError_t)codes[3]),
           cudaGetErrorName((cudaError_t)codes[4]));
    expect(codes[0] != 0 && codes[1] == codes[0] && codes[2] == codes[0] && codes[3] == 0 &&
               codes[4] == 0,
           "device-side cudaGetLastError / cudaPeekAtLastError");
    CHECK(cudaGetLastError()); // the device's errors are not the host's

    many_children<<<16, 128>>>(d, 2048);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, 2048 * 64 * sizeof(int), cudaMemcpyDeviceToHost));
    ok = true;
    for (int i = 0; i < 2048; i++)
        ok = ok && check_fill(h, 64, i, i * 64);
    expect(ok, "2048 child grids pending at once");

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d));
    CHECK(cudaFree(dsum));
    CHECK(cudaFree(dcodes));
    free(h);
    fprintf(stderr, "dynamic_parallelism: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}
