/* What every GPU test program shares: a CHECK that ends the program on a
 * failed CUDA runtime call (DRV: a driver call, for programs that include
 * cuda.h first; RTC: an NVRTC call, after nvrtc.h), named PASS/FAIL lines,
 * and a host clock (for stderr).
 * Programs without the runtime define FLYT_TEST_NO_RUNTIME first. */
#ifndef FLYT_GPU_TEST_UTIL_H
#define FLYT_GPU_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef __cuda_cuda_h__
#define DRV(call)                                                            \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS) {                                            \
            const char *n_ = NULL;                                           \
            cuGetErrorName(r_, &n_);                                         \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   n_ ? n_ : "?");                                           \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

#ifdef __NVRTC_H__
#define RTC(call)                                                            \
    do {                                                                     \
        nvrtcResult r_ = (call);                                             \
        if (r_ != NVRTC_SUCCESS) {                                           \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   nvrtcGetErrorString(r_));                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

/* the libraries' status checks, for programs that include their headers first */
#ifdef CUBLAS_V2_H_
#define BLAS(call)                                                           \
    do {                                                                     \
        cublasStatus_t st_ = (call);                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                  \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   cublasGetStatusName(st_));                                \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

#ifdef CUSPARSE_H_
#define SPARSE(call)                                                         \
    do {                                                                     \
        cusparseStatus_t s_ = (call);                                        \
        if (s_ != CUSPARSE_STATUS_SUCCESS) {                                 \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   cusparseGetErrorName(s_));                                \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

#ifdef CUSOLVERDN_H_
#define SOLVER(call)                                                         \
    do {                                                                     \
        cusolverStatus_t s_ = (call);                                        \
        if (s_ != CUSOLVER_STATUS_SUCCESS) {                                 \
            printf("FAIL line %d: %s -> cusolverStatus %d\n", __LINE__,      \
                   #call, (int)s_);                                          \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

#ifndef FLYT_TEST_NO_RUNTIME
#include <cuda_runtime.h>
#define CHECK(call)                                                          \
    do {                                                                     \
        cudaError_t err_ = (call);                                           \
        if (err_ != cudaSuccess) {                                           \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   cudaGetErrorName(err_));                                  \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#endif

#ifdef _SYS_MMAN_H /* programs that include <sys/mman.h> first */
/* bytes of fresh anonymous memory (not malloc's), or the program ends */
static int *map_anonymous(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        printf("FAIL anonymous mmap\n");
        exit(1);
    }
    return (int *)p;
}
#endif

#if defined(_GLIBCXX_VECTOR) && !defined(FLYT_TEST_NO_RUNTIME) /* C++ programs with <vector> */
/* a device copy of h (cudaMalloc'd) */
template <typename T>
static T *to_device(const std::vector<T> &h)
{
    T *d;
    CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

/* count elements of d, copied to the host */
template <typename T>
static std::vector<T> from_device(const T *d, size_t count)
{
    std::vector<T> h(count);
    CHECK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
#endif

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
