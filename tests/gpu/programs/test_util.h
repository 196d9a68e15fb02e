/* What every GPU test program shares: a CHECK that ends the program on a
 * failed CUDA call, named PASS/FAIL lines, and a host clock (for stderr). */
#ifndef FLYT_GPU_TEST_UTIL_H
#define FLYT_GPU_TEST_UTIL_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                          \
    do {                                                                     \
        cudaError_t err_ = (call);                                           \
        if (err_ != cudaSuccess) {                                           \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   cudaGetErrorName(err_));                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static int failures = 0;
static void expect(int ok, const char *what)
{
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok)
        failures++;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
