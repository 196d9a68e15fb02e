// host_callbacks: cudaLaunchHostFunc and cudaStreamAddCallback in several
// streams.  Checks
//   - callbacks of one stream run in submission order, interleaved correctly
//     with kernels and copies (a callback sees the data of the copy that
//     preceded it in its stream),
//   - all callbacks have run when cudaStreamSynchronize / cudaDeviceSynchronize
//     return,
//   - a callback can signal the host, which polls a flag without making any
//     CUDA call (time limit 10 s).
#include <cuda_runtime.h>
#include <atomic>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "test_util.h"

__device__ static unsigned long long gtime_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_then_set(int *buf, int n, int value, unsigned long long ns)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        unsigned long long start = gtime_ns();
        while (gtime_ns() - start < ns) {
        }
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        buf[i] = value + i;
}

#define NSTREAMS 4
#define NCB 12 // callbacks per stream
#define N 4096

struct CbCtx {
    int stream;
    int index;            // expected position within its stream
    const int *host_data; // pinned buffer the preceding copy filled, or NULL
    int expect_base;      // expected host_data[i] == expect_base + i
};

static std::mutex log_mutex;
static int order_log[NSTREAMS][NCB];
static int order_count[NSTREAMS];
static int data_ok[NSTREAMS][NCB];
static std::atomic<int> total_calls(0);
static cudaError_t cb_status[NSTREAMS][NCB];

static void record(CbCtx *c)
{
    int ok = 1;
    if (c->host_data) {
        for (int i = 0; i < N; i++)
            if (c->host_data[i] != c->expect_base + i) {
                ok = 0;
                break;
            }
    }
    std::lock_guard<std::mutex> g(log_mutex);
    int pos = order_count[c->stream]++;
    if (pos < NCB)
        order_log[c->stream][pos] = c->index;
    data_ok[c->stream][c->index] = ok;
    total_calls++;
}

static void CUDART_CB host_fn(void *arg)
{
    record((CbCtx *)arg);
}

static void CUDART_CB stream_cb(cudaStream_t stream, cudaError_t status, void *arg)
{
    (void)stream;
    CbCtx *c = (CbCtx *)arg;
    cb_status[c->stream][c->index] = status;
    record(c);
}

static std::atomic<int> poll_flag(0);
static void CUDART_CB set_flag(void *arg)
{
    poll_flag.store(*(int *)arg);
}

int main(void)
{
    double t0 = now_s();
    cudaStream_t streams[NSTREAMS];
    int *dbuf[NSTREAMS];
    int *hbuf[NSTREAMS][NCB];
    static CbCtx ctx[NSTREAMS][NCB];

    for (int s = 0; s < NSTREAMS; s++) {
        if (s == 0)
            streams[s] = 0; // legacy default stream
        else if (s == 1)
            CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
        else
            CHECK(cudaStreamCreate(&streams[s]));
        CHECK(cudaMalloc(&dbuf[s], N * sizeof(int)));
        for (int k = 0; k < NCB; k++) {
            CHECK(cudaMallocHost(&hbuf[s][k], N * sizeof(int)));
            memset(hbuf[s][k], 0xFF, N * sizeof(int));
            cb_status[s][k] = cudaErrorUnknown;
        }
    }

    // enqueue: per stream, NCB rounds of kernel -> D2H copy -> callback;
    // odd rounds use cudaStreamAddCallback, even rounds cudaLaunchHostFunc.
    // The first kernel of each stream is slow so that callbacks queue up.
    for (int k = 0; k < NCB; k++) {
        for (int s = 0; s < NSTREAMS; s++) {
            int base = s * 100000 + k * 1000;
            unsigned long long ns = (k == 0) ? 20ull * 1000 * 1000 : 0;
            spin_then_set<<<4, 256, 0, streams[s]>>>(dbuf[s], N, base, ns);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpyAsync(hbuf[s][k], dbuf[s], N * sizeof(int),
                                  cudaMemcpyDeviceToHost, streams[s]));
            CbCtx *c = &ctx[s][k];
            c->stream = s;
            c->index = k;
            c->host_data = hbuf[s][k];
            c->expect_base = base;
            if (k % 2)
                CHECK(cudaStreamAddCallback(streams[s], stream_cb, c, 0));
            else
                CHECK(cudaLaunchHostFunc(streams[s], host_fn, c));
        }
    }

    // stream 1 synchronised on its own: all its callbacks must have run
    CHECK(cudaStreamSynchronize(streams[1]));
    {
        std::lock_guard<std::mutex> g(log_mutex);
        expect(order_count[1] == NCB, "all callbacks of stream 1 ran after cudaStreamSynchronize");
    }
    CHECK(cudaDeviceSynchronize());
    // the legacy stream is synchronised by cudaDeviceSynchronize as well;
    // synchronise the rest explicitly too (no-ops by now)
    for (int s = 0; s < NSTREAMS; s++)
        CHECK(cudaStreamSynchronize(streams[s]));

    int all_ran = 1, in_order = 1, data_good = 1, status_good = 1;
    {
        std::lock_guard<std::mutex> g(log_mutex);
        for (int s = 0; s < NSTREAMS; s++) {
            if (order_count[s] != NCB)
                all_ran = 0;
            for (int k = 0; k < NCB && k < order_count[s]; k++) {
                if (order_log[s][k] != k)
                    in_order = 0;
                if (!data_ok[s][k])
                    data_good = 0;
                if (k % 2 && cb_status[s][k] != cudaSuccess)
                    status_good = 0;
            }
        }
    }
    printf("callbacks run: %d of %d\n", total_calls.load(), NSTREAMS * NCB);
    expect(all_ran, "all callbacks ran after cudaDeviceSynchronize");
    expect(in_order, "callbacks ran in submission order within each stream");
    expect(data_good, "each callback saw the data of the copy before it");
    printf("cudaStreamAddCallback status: %s\n",
           cudaGetErrorName(cb_status[2][1]));
    expect(status_good, "cudaStreamAddCallback status == cudaSuccess");

    // ---- host polls a flag set by a callback, without any CUDA call
    {
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        static int value = 42;
        spin_then_set<<<1, 32, 0, s>>>(dbuf[1], 32, 0, 50ull * 1000 * 1000);
        CHECK(cudaGetLastError());
        CHECK(cudaLaunchHostFunc(s, set_flag, &value));
        double start = now_s();
        int seen = 0;
        while (now_s() - start < 10.0) {
            if (poll_flag.load() == 42) {
                seen = 1;
                break;
            }
            usleep(1000);
        }
        fprintf(stderr, "flag seen after %.3f s\n", now_s() - start);
        printf("flag set by callback seen by polling host: %s\n", seen ? "yes" : "no");
        expect(seen, "callback signalled host without a synchronising call");
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaStreamDestroy(s));
    }

    // ---- a callback in a stream that waits on an event of another stream
    {
        cudaStream_t a, b;
        cudaEvent_t ev;
        CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        poll_flag.store(0);
        static int v2 = 7;
        spin_then_set<<<1, 32, 0, a>>>(dbuf[2], 32, 5, 30ull * 1000 * 1000);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hbuf[2][0], dbuf[2], 32 * sizeof(int),
                              cudaMemcpyDeviceToHost, a));
        CHECK(cudaEventRecord(ev, a));
        CHECK(cudaStreamWaitEvent(b, ev, 0));
        CHECK(cudaLaunchHostFunc(b, set_flag, &v2));
        CHECK(cudaStreamSynchronize(b));
        int ok = poll_flag.load() == 7;
        for (int i = 0; i < 32; i++)
            if (hbuf[2][0][i] != 5 + i)
                ok = 0;
        expect(ok, "callback after cross-stream event wait");
        CHECK(cudaEventDestroy(ev));
        CHECK(cudaStreamDestroy(a));
        CHECK(cudaStreamDestroy(b));
    }

    for (int s = 0; s < NSTREAMS; s++) {
        if (streams[s])
            CHECK(cudaStreamDestroy(streams[s]));
        CHECK(cudaFree(dbuf[s]));
        for (int k = 0; k < NCB; k++)
            CHECK(cudaFreeHost(hbuf[s][k]));
    }
    fprintf(stderr, "host_callbacks: %.3f s\n", now_s() - t0);
    printf("%s host_callbacks\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
