// streams_events: streams with flags and priorities, cross-stream dependencies
// through events, event/stream queries, elapsed time, the legacy default
// stream (0 and cudaStreamLegacy) and cudaStreamPerThread.
//
// Dependencies are checked with "slow producer / fast consumer" kernel pairs:
// if the ordering were not enforced, the consumer would read stale data.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "test_util.h"

__device__ static unsigned long long gtime_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// spin for `ns` nanoseconds, then write buf[i] = value + i
__global__ void slow_fill(int *buf, int n, int value, unsigned long long ns)
{
    if (threadIdx.x == 0) {
        unsigned long long start = gtime_ns();
        while (gtime_ns() - start < ns) {
        }
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        buf[i] = value + i;
}

// dst[i] = src[i] * 2 + add
__global__ void transform(const int *src, int *dst, int n, int add)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        dst[i] = src[i] * 2 + add;
}

static int check_buf(const int *dev, int n, int base, int mul, int add)
{
    int *h = (int *)malloc(n * sizeof(int));
    CHECK(cudaMemcpy(h, dev, n * sizeof(int), cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int i = 0; i < n; i++)
        if (h[i] != (base + i) * mul + add) {
            ok = 0;
            break;
        }
    free(h);
    return ok;
}

int main(void)
{
    const int n = 1 << 16;
    const unsigned long long SLOW = 30ull * 1000 * 1000; // 30 ms
    double t0 = now_s();

    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("priority range: least=%d greatest=%d\n", least, greatest);

    cudaStream_t s_nb, s_hi, s_lo, s_plain;
    CHECK(cudaStreamCreateWithFlags(&s_nb, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&s_hi, cudaStreamNonBlocking, greatest));
    CHECK(cudaStreamCreateWithPriority(&s_lo, cudaStreamDefault, least));
    CHECK(cudaStreamCreate(&s_plain));

    // flags / priorities read back
    {
        unsigned int f1, f2, f3, f4;
        int p1, p2, p3, p4;
        CHECK(cudaStreamGetFlags(s_nb, &f1));
        CHECK(cudaStreamGetFlags(s_hi, &f2));
        CHECK(cudaStreamGetFlags(s_lo, &f3));
        CHECK(cudaStreamGetFlags(s_plain, &f4));
        CHECK(cudaStreamGetPriority(s_nb, &p1));
        CHECK(cudaStreamGetPriority(s_hi, &p2));
        CHECK(cudaStreamGetPriority(s_lo, &p3));
        CHECK(cudaStreamGetPriority(s_plain, &p4));
        printf("stream flags: %u %u %u %u\n", f1, f2, f3, f4);
        printf("stream priorities: %d %d %d %d\n", p1, p2, p3, p4);
        expect(f1 == cudaStreamNonBlocking && f2 == cudaStreamNonBlocking &&
                   f3 == cudaStreamDefault && f4 == cudaStreamDefault,
               "stream flags read back");
        expect(p2 == greatest && p3 == least, "stream priorities read back");
    }

    int *a, *b, *c, *d;
    CHECK(cudaMalloc(&a, n * sizeof(int)));
    CHECK(cudaMalloc(&b, n * sizeof(int)));
    CHECK(cudaMalloc(&c, n * sizeof(int)));
    CHECK(cudaMalloc(&d, n * sizeof(int)));

    // ---- chain across three streams with cudaStreamWaitEvent
    cudaEvent_t e1, e2, e3, tstart, tstop, e_notiming, e_block;
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventCreateWithFlags(&e2, cudaEventDefault));
    CHECK(cudaEventCreateWithFlags(&e3, cudaEventBlockingSync));
    CHECK(cudaEventCreate(&tstart));
    CHECK(cudaEventCreate(&tstop));
    CHECK(cudaEventCreateWithFlags(&e_notiming, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&e_block,
                                   cudaEventBlockingSync | cudaEventDisableTiming));

    // a never-recorded event is complete
    printf("query of unrecorded event: %s\n", cudaGetErrorName(cudaEventQuery(e1)));

    CHECK(cudaEventRecord(tstart, s_nb));
    slow_fill<<<64, 256, 0, s_nb>>>(a, n, 1000, SLOW);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e1, s_nb));
    // while s_nb is busy, the event and stream must report not ready
    cudaError_t q_ev = cudaEventQuery(e1);
    cudaError_t q_st = cudaStreamQuery(s_nb);
    printf("event query while busy: %s\n", cudaGetErrorName(q_ev));
    printf("stream query while busy: %s\n", cudaGetErrorName(q_st));
    printf("last error after NotReady queries: %s\n",
           cudaGetErrorName(cudaGetLastError()));

    CHECK(cudaStreamWaitEvent(s_hi, e1, 0));
    transform<<<64, 256, 0, s_hi>>>(a, b, n, 1); // b = 2a + 1
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e2, s_hi));
    CHECK(cudaStreamWaitEvent(s_lo, e2, cudaEventWaitDefault));
    transform<<<64, 256, 0, s_lo>>>(b, c, n, 3); // c = 2b + 3 = 4a + 5
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e3, s_lo));
    CHECK(cudaEventRecord(tstop, s_lo));
    CHECK(cudaEventSynchronize(e3));
    printf("event query after sync: %s\n", cudaGetErrorName(cudaEventQuery(e3)));
    printf("stream query after sync: %s\n", cudaGetErrorName(cudaStreamQuery(s_lo)));
    expect(check_buf(b, n, 1000, 2, 1), "cross-stream wait: s_nb -> s_hi");
    expect(check_buf(c, n, 1000, 4, 5), "cross-stream wait: s_hi -> s_lo");

    CHECK(cudaEventSynchronize(tstop));
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, tstart, tstop));
    fprintf(stderr, "elapsed between events: %.3f ms\n", ms);
    printf("elapsed time >= 0: %s\n", ms >= 0.0f ? "yes" : "no");
    expect(ms >= 0.0f, "cudaEventElapsedTime");

    // elapsed time on an event without timing must fail
    CHECK(cudaEventRecord(e_notiming, s_lo));
    CHECK(cudaEventSynchronize(e_notiming));
    cudaError_t et = cudaEventElapsedTime(&ms, tstart, e_notiming);
    printf("elapsed time with DisableTiming event: %s\n", cudaGetErrorName(et));
    printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));

    // blocking-sync event + wait of a stream on an event from the same stream
    CHECK(cudaEventRecord(e_block, s_plain));
    CHECK(cudaStreamWaitEvent(s_plain, e_block, 0));
    CHECK(cudaEventSynchronize(e_block));
    expect(cudaEventQuery(e_block) == cudaSuccess, "blocking-sync event completes");

    // ---- legacy default stream synchronises with blocking streams
    // slow producer in a blocking stream, consumer in stream 0
    CHECK(cudaMemset(a, 0, n * sizeof(int)));
    CHECK(cudaMemset(b, 0, n * sizeof(int)));
    slow_fill<<<64, 256, 0, s_plain>>>(a, n, 7, SLOW);
    CHECK(cudaGetLastError());
    transform<<<64, 256, 0, 0>>>(a, b, n, 0); // b = 2a
    CHECK(cudaGetLastError());
    // and a consumer of stream 0 in another blocking stream
    transform<<<64, 256, 0, s_lo>>>(b, c, n, 1); // c = 4a + 1
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s_lo));
    expect(check_buf(b, n, 7, 2, 0), "legacy stream 0 waits for blocking stream");
    expect(check_buf(c, n, 7, 4, 1), "blocking stream waits for legacy stream 0");

    // same with the explicit cudaStreamLegacy handle
    CHECK(cudaMemset(b, 0, n * sizeof(int)));
    slow_fill<<<64, 256, 0, s_plain>>>(a, n, 11, SLOW);
    CHECK(cudaGetLastError());
    transform<<<64, 256, 0, cudaStreamLegacy>>>(a, b, n, 5);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    expect(check_buf(b, n, 11, 2, 5), "cudaStreamLegacy waits for blocking stream");
    printf("cudaStreamQuery(cudaStreamLegacy): %s\n",
           cudaGetErrorName(cudaStreamQuery(cudaStreamLegacy)));
    printf("cudaStreamQuery(0): %s\n", cudaGetErrorName(cudaStreamQuery(0)));

    // ---- per-thread default stream
    CHECK(cudaMemset(d, 0, n * sizeof(int)));
    slow_fill<<<64, 256, 0, cudaStreamPerThread>>>(a, n, 21, SLOW / 3);
    CHECK(cudaGetLastError());
    transform<<<64, 256, 0, cudaStreamPerThread>>>(a, d, n, 2);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(e1, cudaStreamPerThread));
    CHECK(cudaStreamWaitEvent(s_nb, e1, 0));
    transform<<<64, 256, 0, s_nb>>>(d, c, n, 0); // c = 4a + 4
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    printf("cudaStreamQuery(cudaStreamPerThread): %s\n",
           cudaGetErrorName(cudaStreamQuery(cudaStreamPerThread)));
    expect(check_buf(d, n, 21, 2, 2), "cudaStreamPerThread ordering");
    CHECK(cudaStreamSynchronize(s_nb));
    expect(check_buf(c, n, 21, 4, 4), "wait on event recorded in per-thread stream");

    // ---- many events recorded in sequence on one stream, all complete
    {
        cudaEvent_t evs[16];
        for (int i = 0; i < 16; i++) {
            CHECK(cudaEventCreateWithFlags(&evs[i], cudaEventDisableTiming));
            transform<<<8, 128, 0, s_hi>>>(a, b, n, i);
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(evs[i], s_hi));
        }
        CHECK(cudaEventSynchronize(evs[15]));
        int all = 1;
        for (int i = 0; i < 16; i++) {
            if (cudaEventQuery(evs[i]) != cudaSuccess)
                all = 0;
            CHECK(cudaEventDestroy(evs[i]));
        }
        expect(all, "earlier events complete once the last one is");
        expect(check_buf(b, n, 21, 2, 15), "last transform on s_hi wins");
    }

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaEventDestroy(e2));
    CHECK(cudaEventDestroy(e3));
    CHECK(cudaEventDestroy(tstart));
    CHECK(cudaEventDestroy(tstop));
    CHECK(cudaEventDestroy(e_notiming));
    CHECK(cudaEventDestroy(e_block));
    CHECK(cudaStreamDestroy(s_nb));
    CHECK(cudaStreamDestroy(s_hi));
    CHECK(cudaStreamDestroy(s_lo));
    CHECK(cudaStreamDestroy(s_plain));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    CHECK(cudaFree(d));

    fprintf(stderr, "streams_events: %.3f s\n", now_s() - t0);
    printf("%s streams_events\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
