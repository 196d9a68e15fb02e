/*
 * NVIDIA's own libraries start up on Flyt's libcuda.so.1 over the host
 * backend, each with its own copy of the runtime calling the driver
 * directly: cuBLAS and cuBLASLt (which load kernel libraries, query
 * occupancy and clusters at handle creation), cuDNN (which JIT-loads PTX
 * and maps host memory) and cuFFT. Kernels do not run there, so only what
 * needs none is checked. Run by run_with_server.sh.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cufft.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static void test_cublas(void)
{
    cublasHandle_t h;
    int st = cublasCreate(&h);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasCreate (%d)", st);
    if (st != CUBLAS_STATUS_SUCCESS)
        return;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess && cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS,
          "cublasSetStream");
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i * 0.5f;
    float *d = NULL;
    CHECK(cudaMalloc((void **)&d, sizeof x) == cudaSuccess, "cudaMalloc");
    CHECK(cublasSetVector(64, sizeof(float), x, 1, d, 1) == CUBLAS_STATUS_SUCCESS &&
              cublasGetVector(64, sizeof(float), d, 1, y, 1) == CUBLAS_STATUS_SUCCESS &&
              memcmp(x, y, sizeof x) == 0,
          "cublasSetVector / cublasGetVector round trip");
    int version = 0;
    CHECK(cublasGetVersion(h, &version) == CUBLAS_STATUS_SUCCESS && version > 0, "cuBLAS %d", version);
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "cublasDestroy");
    cudaFree(d);
    cudaStreamDestroy(s);
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS && cublasLtDestroy(lt) == CUBLAS_STATUS_SUCCESS,
          "cublasLtCreate / cublasLtDestroy");
}

static void test_cudnn(void)
{
    cudnnHandle_t h;
    int st = cudnnCreate(&h);
    CHECK(st == CUDNN_STATUS_SUCCESS, "cudnnCreate (%d)", st);
    if (st != CUDNN_STATUS_SUCCESS)
        return;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess && cudnnSetStream(h, s) == CUDNN_STATUS_SUCCESS,
          "cudnnSetStream");
    cudnnTensorDescriptor_t t;
    CHECK(cudnnCreateTensorDescriptor(&t) == CUDNN_STATUS_SUCCESS &&
              cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 8, 8) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnDestroyTensorDescriptor(t) == CUDNN_STATUS_SUCCESS,
          "a tensor descriptor");
    CHECK(cudnnDestroy(h) == CUDNN_STATUS_SUCCESS, "cudnnDestroy");
    cudaStreamDestroy(s);
}

static void test_cufft(void)
{
    cufftHandle plan;
    CHECK(cufftCreate(&plan) == CUFFT_SUCCESS, "cufftCreate");
    int version = 0;
    CHECK(cufftGetVersion(&version) == CUFFT_SUCCESS && version > 0, "cuFFT %d", version);
    CHECK(cufftDestroy(plan) == CUFFT_SUCCESS, "cufftDestroy");
}

int main(void)
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 1, "one device");
    test_cublas();
    test_cudnn();
    test_cufft();
    return CHECK_DONE();
}
