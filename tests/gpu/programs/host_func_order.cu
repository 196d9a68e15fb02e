// host_func_order: work queued after a host function waits for it, as CUDA
// specifies. A host function writes pinned memory; the asynchronous copy
// after it in its stream, and the kernel after the copy, must see the value
// it wrote:
//   - 1000 rounds over 4 streams, each round's stream first waiting for the
//     event the previous round recorded on another stream,
//   - one host function that sleeps 50 ms before writing (a copy that did
//     not wait would read the old value),
//   - a cudaStreamAddCallback that writes the same way,
//   - cudaStreamSynchronize while host functions are pending.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "test_util.h"

#define NSTREAMS 4
#define ROUNDS 1000

struct Write {
    volatile int *word;
    int value;
    int sleep_us;
};

static void CUDART_CB write_word(void *arg)
{
    Write *w = (Write *)arg;
    if (w->sleep_us)
        usleep(w->sleep_us);
    *w->word = w->value;
}

static void CUDART_CB write_word_cb(cudaStream_t, cudaError_t status, void *arg)
{
    if (status == cudaSuccess)
        write_word(arg);
}

// Adds what the copy brought to the stream's sum; counts a value that is
// not the one the host function wrote.
__global__ void consume(const int *in, int expect, long long *sum, int *bad)
{
    int v = *in;
    *sum += v;
    if (v != expect)
        atomicAdd(bad, 1);
}

int main(void)
{
    cudaStream_t s[NSTREAMS];
    cudaEvent_t ev[NSTREAMS];
    int *pinned, *d_in, *d_bad;
    long long *d_sum;
    CHECK(cudaMallocHost(&pinned, NSTREAMS * sizeof(int)));
    CHECK(cudaMalloc(&d_in, NSTREAMS * sizeof(int)));
    CHECK(cudaMalloc(&d_sum, NSTREAMS * sizeof(long long)));
    CHECK(cudaMalloc(&d_bad, sizeof(int)));
    CHECK(cudaMemset(d_sum, 0, NSTREAMS * sizeof(long long)));
    CHECK(cudaMemset(d_bad, 0, sizeof(int)));
    for (int k = 0; k < NSTREAMS; k++) {
        pinned[k] = -1;
        CHECK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
    }

    static Write w[ROUNDS];
    long long want[NSTREAMS] = {0};
    for (int i = 0; i < ROUNDS; i++) {
        int k = i % NSTREAMS;
        if (i > 0)
            CHECK(cudaStreamWaitEvent(s[k], ev[(i - 1) % NSTREAMS], 0));
        w[i].word = &pinned[k];
        w[i].value = i * 7 + 3;
        w[i].sleep_us = (i % 97 == 0) ? 2000 : 0;
        CHECK(cudaLaunchHostFunc(s[k], write_word, &w[i]));
        CHECK(cudaMemcpyAsync(d_in + k, &pinned[k], sizeof(int), cudaMemcpyHostToDevice, s[k]));
        consume<<<1, 1, 0, s[k]>>>(d_in + k, w[i].value, d_sum + k, d_bad);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(ev[k], s[k]));
        want[k] += w[i].value;
    }
    CHECK(cudaDeviceSynchronize());
    long long sum[NSTREAMS];
    int bad = -1;
    CHECK(cudaMemcpy(sum, d_sum, sizeof sum, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    printf("rounds: %d over %d streams, values a kernel saw out of order: %d\n", ROUNDS,
           NSTREAMS, bad);
    expect(bad == 0, "every copy read what the host function before it wrote");
    for (int k = 0; k < NSTREAMS; k++) {
        printf("stream %d sum %lld\n", k, sum[k]);
        expect(sum[k] == want[k], "stream sum");
    }

    // a late host function: 50 ms before it writes
    Write late = {&pinned[0], 12345, 50000};
    pinned[0] = 0;
    CHECK(cudaMemset(d_bad, 0, sizeof(int)));
    CHECK(cudaLaunchHostFunc(s[0], write_word, &late));
    CHECK(cudaMemcpyAsync(d_in, &pinned[0], sizeof(int), cudaMemcpyHostToDevice, s[0]));
    consume<<<1, 1, 0, s[0]>>>(d_in, 12345, d_sum, d_bad);
    CHECK(cudaStreamSynchronize(s[0]));
    int got = 0;
    CHECK(cudaMemcpy(&got, d_in, sizeof got, cudaMemcpyDeviceToHost));
    printf("late host function (50 ms): the copy after it read %d\n", got);
    expect(got == 12345, "late host function");

    // a stream callback, same order
    Write cbw = {&pinned[1], 777, 20000};
    pinned[1] = 0;
    CHECK(cudaStreamAddCallback(s[1], write_word_cb, &cbw, 0));
    CHECK(cudaMemcpyAsync(d_in + 1, &pinned[1], sizeof(int), cudaMemcpyHostToDevice, s[1]));
    CHECK(cudaStreamSynchronize(s[1]));
    CHECK(cudaMemcpy(&got, d_in + 1, sizeof got, cudaMemcpyDeviceToHost));
    printf("stream callback: the copy after it read %d\n", got);
    expect(got == 777, "stream callback");
    CHECK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    expect(bad == 0, "late value seen by the kernel");

    for (int k = 0; k < NSTREAMS; k++) {
        CHECK(cudaStreamDestroy(s[k]));
        CHECK(cudaEventDestroy(ev[k]));
    }
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_sum));
    CHECK(cudaFree(d_bad));
    return failures ? 1 : 0;
}
