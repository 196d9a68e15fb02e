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
    CHECK_EQ(st, CUBLAS_STATUS_SUCCESS, "cublasCreate");
    cudaStream_t s;
    CHECK_EQ(cudaStreamCreate(&s), cudaSuccess, "cublasSetStream");
    CHECK_EQ(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS, "cublasSetStream");
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i * 0.5f;
    float *d = NULL;
    CHECK_EQ(cudaMalloc((void **)&d, sizeof x), cudaSuccess, "cudaMalloc");
    CHECK_EQ(cublasSetVector(64, sizeof(float), x, 1, d, 1), CUBLAS_STATUS_SUCCESS,
             "cublasSetVector / cublasGetVector round trip");
    CHECK_EQ(cublasGetVector(64, sizeof(float), d, 1, y, 1), CUBLAS_STATUS_SUCCESS,
             "cublasSetVector / cublasGetVector round trip");
    CHECK_MEM_EQ(x, y, sizeof x, "cublasSetVector / cublasGetVector round trip");
    int version = 0;
    CHECK_EQ(cublasGetVersion(h, &version), CUBLAS_STATUS_SUCCESS, "cuBLAS %d", version);
    CHECK_GT(version, 0, "cuBLAS %d", version);
    CHECK_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS, "cublasDestroy");
    cudaFree(d);
    cudaStreamDestroy(s);
    cublasLtHandle_t lt;
    CHECK_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS, "cublasLtCreate / cublasLtDestroy");
    CHECK_EQ(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS, "cublasLtCreate / cublasLtDestroy");
}

static void test_cudnn(void)
{
    cudnnHandle_t h;
    int st = cudnnCreate(&h);
    CHECK_EQ(st, CUDNN_STATUS_SUCCESS, "cudnnCreate");
    cudaStream_t s;
    CHECK_EQ(cudaStreamCreate(&s), cudaSuccess, "cudnnSetStream");
    CHECK_EQ(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS, "cudnnSetStream");
    cudnnTensorDescriptor_t t;
    CHECK_EQ(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS, "a tensor descriptor");
    CHECK_EQ(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 8, 8), CUDNN_STATUS_SUCCESS,
             "a tensor descriptor");
    CHECK_EQ(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_SUCCESS, "a tensor descriptor");
    CHECK_EQ(cudnnDestroy(h), CUDNN_STATUS_SUCCESS, "cudnnDestroy");
    cudaStreamDestroy(s);
}

static void test_cufft(void)
{
    cufftHandle plan;
    CHECK_EQ(cufftCreate(&plan), CUFFT_SUCCESS, "cufftCreate");
    int version = 0;
    CHECK_EQ(cufftGetVersion(&version), CUFFT_SUCCESS, "cuFFT %d", version);
    CHECK_GT(version, 0, "cuFFT %d", version);
    CHECK_EQ(cufftDestroy(plan), CUFFT_SUCCESS, "cufftDestroy");
}

int main(void)
{
    int n = 0;
    CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess, "one device");
    CHECK_EQ(n, 1, "one device");
    test_cublas();
    test_cudnn();
    test_cufft();
    return check_done();
}
