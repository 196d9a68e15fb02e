// managed_vars: __managed__ variables, the way teaching code and samples use
// them: initial values read by host code, kernels counting into them with
// atomics, host code writing them between launches, an array larger than
// many pages, a struct, two one-byte variables side by side, copies to and
// from them by symbol, their address and pointer attributes, and work on a
// second stream. Prints results only.
#include <string.h>
#include "test_util.h"

#define BIG 100000

struct Stats {
    int count;
    float sum;
    int hist[16];
};

__managed__ int counter = 0;
__managed__ int init_value = 42;
__managed__ float weights[4] = {0.5f, 1.5f, 2.5f, 3.5f};
__managed__ unsigned long long big[BIG];
__managed__ char flag_a = 'a';
__managed__ char flag_b = 'b';
__managed__ Stats stats;

__global__ void count_up(int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        atomicAdd(&counter, 1);
}

__global__ void scale_weights(float by)
{
    if (threadIdx.x < 4)
        weights[threadIdx.x] *= by;
    if (threadIdx.x == 0) {
        flag_a = 'A';
        init_value += flag_b; // flag_b as the host set it
    }
}

__global__ void fill_big(unsigned long long mul)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < BIG)
        big[i] = (unsigned long long)i * mul + big[i];
}

__global__ void histogram(const int *data, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&stats.count, 1);
        atomicAdd(&stats.sum, (float)data[i]);
        atomicAdd(&stats.hist[data[i] & 15], 1);
    }
}

int main(void)
{
    double t0 = now_s();
    printf("initial: counter %d, init_value %d, weights %.1f %.1f %.1f %.1f, flags %c%c\n",
           counter, init_value, weights[0], weights[1], weights[2], weights[3], flag_a, flag_b);

    count_up<<<40, 256>>>(10000);
    CHECK(cudaDeviceSynchronize());
    printf("after 10000 atomic adds: counter %d\n", counter);
    counter = 500; // host writes, then the device adds to them
    count_up<<<4, 256>>>(1000);
    CHECK(cudaDeviceSynchronize());
    printf("host set 500, then 1000 adds: counter %d\n", counter);

    flag_b = 'z';
    scale_weights<<<1, 32>>>(2.0f);
    CHECK(cudaDeviceSynchronize());
    printf("scaled: weights %.1f %.1f %.1f %.1f, flags %c%c, init_value %d\n", weights[0], weights[1],
           weights[2], weights[3], flag_a, flag_b, init_value);

    for (int i = 0; i < BIG; i += 7)
        big[i] = 3; // scattered host writes over many pages
    fill_big<<<(BIG + 255) / 256, 256>>>(5);
    CHECK(cudaDeviceSynchronize());
    unsigned long long sum = 0;
    for (int i = 0; i < BIG; i++)
        sum += big[i];
    printf("big array sum %llu, big[7] %llu, big[8] %llu\n", sum, big[7], big[8]);

    int *data;
    const int n = 1 << 16;
    CHECK(cudaMalloc(&data, n * sizeof(int)));
    int *h = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        h[i] = (i * 37) % 101;
    CHECK(cudaMemcpy(data, h, n * sizeof(int), cudaMemcpyHostToDevice));
    memset(&stats, 0, sizeof stats);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    histogram<<<n / 256, 256, 0, s>>>(data, n);
    CHECK(cudaStreamSynchronize(s));
    long hsum = 0;
    for (int b = 0; b < 16; b++)
        hsum += (long)stats.hist[b] * (b + 1);
    printf("stats on a second stream: count %d, sum %.0f, weighted histogram %ld, bin 3 %d\n",
           stats.count, stats.sum, hsum, stats.hist[3]);

    int v = 7;
    CHECK(cudaMemcpyToSymbol(counter, &v, sizeof v));
    int got = 0;
    CHECK(cudaMemcpyFromSymbol(&got, init_value, sizeof got));
    printf("by symbol: counter %d, init_value read %d\n", counter, got);

    void *at = NULL;
    CHECK(cudaGetSymbolAddress(&at, big));
    struct cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, big));
    expect(at == (void *)big, "the symbol's address is where host code reaches it");
    expect(attr.type == cudaMemoryTypeManaged, "pointer attributes say managed");
    CHECK(cudaMemset(at, 0, sizeof big));
    CHECK(cudaDeviceSynchronize());
    expect(big[0] == 0 && big[BIG - 1] == 0, "a memset of the array is seen by host code");

    expect(counter == 7 && stats.count == n, "final values");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(data));
    free(h);
    fprintf(stderr, "managed_vars: %.3f s\n", now_s() - t0);
    printf("%s managed_vars\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
