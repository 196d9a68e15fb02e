// multithread: 8 host threads, each with its own stream (thread 0 uses
// cudaStreamPerThread), concurrently doing alloc -> H2D -> kernel -> D2H ->
// free for several iterations and verifying their own results.  One thread
// leaves an error pending while the others run: last-error state must be
// per thread.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <time.h>
#include <vector>
#include "test_util.h"

#define NTHREADS 8
#define ITERS 6

// y[i] = x[i] * a + b (integer arithmetic: exact)
__global__ void axpb(const int *x, int *y, int n, int a, int b)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        y[i] = x[i] * a + b;
}

struct Result {
    int ok;
    char msg[160];
};

#define TCHECK(call)                                                         \
    do {                                                                     \
        cudaError_t err_ = (call);                                           \
        if (err_ != cudaSuccess) {                                           \
            snprintf(r->msg, sizeof r->msg, "line %d: %s -> %s", __LINE__,   \
                     #call, cudaGetErrorName(err_));                         \
            r->ok = 0;                                                       \
            return;                                                          \
        }                                                                    \
    } while (0)

static void worker(int tid, Result *r)
{
    r->ok = 1;
    strcpy(r->msg, "ok");
    TCHECK(cudaSetDevice(0));
    cudaStream_t s;
    if (tid == 0)
        s = cudaStreamPerThread;
    else
        TCHECK(cudaStreamCreateWithFlags(&s, tid % 2 ? cudaStreamNonBlocking
                                                     : cudaStreamDefault));

    // thread 3 provokes an error that stays pending while the other threads
    // launch and check their own (clean) last-error state; thread 3 sees it
    // at its first post-launch cudaGetLastError
    int saw_own_error = 0;
    if (tid == 3) {
        void *p;
        cudaError_t e = cudaMalloc(&p, (size_t)1 << 60);
        if (e != cudaErrorMemoryAllocation) {
            snprintf(r->msg, sizeof r->msg, "huge cudaMalloc gave %s", cudaGetErrorName(e));
            r->ok = 0;
            return;
        }
    }

    unsigned int seed = 1000u + tid * 7919u;
    for (int it = 0; it < ITERS; it++) {
        int n = (1 << 18) + tid * 1237 + it * 101;
        size_t bytes = n * sizeof(int);
        int *hx, *hy;
        TCHECK(cudaMallocHost(&hx, bytes));
        int *hy_pageable = (int *)malloc(bytes);
        TCHECK(cudaMallocHost(&hy, bytes));
        for (int i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            hx[i] = (int)(seed >> 8) - (1 << 23);
        }
        int *dx, *dy;
        TCHECK(cudaMalloc(&dx, bytes));
        if (it % 2)
            TCHECK(cudaMallocAsync(&dy, bytes, s));
        else
            TCHECK(cudaMalloc(&dy, bytes));
        int a = tid + 2, b = it - 3 * tid;
        TCHECK(cudaMemcpyAsync(dx, hx, bytes, cudaMemcpyHostToDevice, s));
        axpb<<<128, 256, 0, s>>>(dx, dy, n, a, b);
        cudaError_t le = cudaGetLastError();
        if (tid == 3 && it == 0 && le == cudaErrorMemoryAllocation) {
            saw_own_error = 1;
            le = cudaSuccess;
        }
        TCHECK(le);
        TCHECK(cudaMemcpyAsync(hy, dy, bytes, cudaMemcpyDeviceToHost, s));
        TCHECK(cudaStreamSynchronize(s));
        // a synchronous copy too (pageable destination)
        TCHECK(cudaMemcpy(hy_pageable, dy, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) {
            int want = hx[i] * a + b;
            if (hy[i] != want || hy_pageable[i] != want) {
                snprintf(r->msg, sizeof r->msg, "iteration %d: mismatch at %d", it, i);
                r->ok = 0;
                break;
            }
        }
        TCHECK(cudaFree(dx));
        if (it % 2)
            TCHECK(cudaFreeAsync(dy, s));
        else
            TCHECK(cudaFree(dy));
        TCHECK(cudaStreamSynchronize(s));
        TCHECK(cudaFreeHost(hx));
        TCHECK(cudaFreeHost(hy));
        free(hy_pageable);
        if (!r->ok)
            return;
    }

    if (tid == 3 && !saw_own_error) {
        snprintf(r->msg, sizeof r->msg, "own pending error not reported");
        r->ok = 0;
    }
    cudaError_t last = cudaGetLastError();
    if (last != cudaSuccess) {
        snprintf(r->msg, sizeof r->msg, "final cudaGetLastError gave %s",
                 cudaGetErrorName(last));
        r->ok = 0;
    }
    if (tid != 0)
        TCHECK(cudaStreamDestroy(s));
}

int main(void)
{
    double t0 = now_s();
    // initialise the context from the main thread first
    if (cudaFree(0) != cudaSuccess) {
        printf("FAIL cudaFree(0)\n");
        return 1;
    }
    Result results[NTHREADS];
    std::vector<std::thread> threads;
    for (int t = 0; t < NTHREADS; t++)
        threads.emplace_back(worker, t, &results[t]);
    for (auto &th : threads)
        th.join();

    int failures = 0;
    for (int t = 0; t < NTHREADS; t++) {
        printf("%s thread %d: %s\n", results[t].ok ? "PASS" : "FAIL", t, results[t].msg);
        if (!results[t].ok)
            failures++;
    }
    // the main thread has no pending error
    cudaError_t e = cudaGetLastError();
    printf("main thread cudaGetLastError: %s\n", cudaGetErrorName(e));
    if (e != cudaSuccess)
        failures++;
    cudaError_t se = cudaDeviceSynchronize();
    if (se != cudaSuccess) {
        printf("FAIL cudaDeviceSynchronize: %s\n", cudaGetErrorName(se));
        failures++;
    }
    fprintf(stderr, "multithread: %.3f s\n", now_s() - t0);
    printf("%s multithread\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
