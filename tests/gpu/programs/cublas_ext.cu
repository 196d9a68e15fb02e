/* cuBLAS beyond cublas_gemm: cublasGemmEx with bf16 inputs, fp32 inputs in
 * TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) and plain 32F, int8 -> int32; the
 * strided batched and pointer-array batched GemmEx in fp16; a cublasLt fp16
 * strided batched matmul with op(A) = A^T and a bias + ReLU
 * epilogue, on the algorithm its heuristic picks, with a workspace; cublasXt SGEMM on host memory (its own staging, then
 * with its memory pinning on). Inputs are small integers, so every product
 * is exact in each type and compared exactly with the host. */
#include <cublasLt.h>
#include <cublasXt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stdint.h>
#include <vector>

#include "test_util.h"

static const int M = 64, N = 48, K = 80, BATCH = 3;

static int a_val(int i, int k, int b) { return ((i * 7 + k * 3 + b) % 9) - 4; }
static int b_val(int k, int j, int b) { return ((k * 5 + j * 11 + 2 * b) % 7) - 3; }
static int c_val(int i, int j) { return ((i + j) % 5) - 2; }

/* alpha * A(MxK) * B(KxN) + beta * C, column-major, exact in int64. */
static std::vector<long long> host_gemm(int batch, int alpha, int beta)
{
    std::vector<long long> c((size_t)M * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            long long s = 0;
            for (int k = 0; k < K; k++)
                s += a_val(i, k, batch) * b_val(k, j, batch);
            c[(size_t)j * M + i] = alpha * s + beta * c_val(i, j);
        }
    return c;
}

/* Host matrices A (M x K), B (K x N), C (M x N) of batch b in type T. A is
 * stored transposed (K x M) when a_transposed. */
template <typename T>
static void host_inputs(int b, bool a_transposed, std::vector<T> &a, std::vector<T> &bm, std::vector<T> &c)
{
    a.resize((size_t)M * K);
    bm.resize((size_t)K * N);
    c.resize((size_t)M * N);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < M; i++)
            a[a_transposed ? (size_t)i * K + k : (size_t)k * M + i] = (T)(float)a_val(i, k, b);
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++)
            bm[(size_t)j * K + k] = (T)(float)b_val(k, j, b);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++)
            c[(size_t)j * M + i] = (T)(float)c_val(i, j);
}

/* Compares count values of got (read as double) with want; prints a checksum. */
template <typename T>
static void compare(const T *got, const long long *want, size_t count, const char *what)
{
    long long sum = 0;
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double v = (double)(float)got[i];
        bad += v != (double)want[i];
        sum += llround(v);
    }
    char line[200];
    snprintf(line, sizeof line, "%s: checksum %lld, mismatches %d", what, sum, bad);
    expect(bad == 0, line);
}

/* GemmEx of inputs in type In (cuda type in_t), fp32 C, compute type ct. */
template <typename In>
static void gemm_ex_float_out(cublasHandle_t h, cudaDataType in_t, cublasComputeType_t ct, const char *what)
{
    std::vector<In> a, b, unused;
    host_inputs<In>(0, false, a, b, unused);
    std::vector<float> a32, b32, c;
    host_inputs<float>(0, false, a32, b32, c);
    In *dA = to_device(a), *dB = to_device(b);
    float *dC = to_device(c);
    const float alpha = 2.0f, beta = -1.0f;
    BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dA, in_t, M, dB, in_t, K, &beta,
                      dC, CUDA_R_32F, M, ct, CUBLAS_GEMM_DEFAULT));
    std::vector<float> out = from_device(dC, c.size());
    compare(out.data(), host_gemm(0, 2, -1).data(), out.size(), what);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

/* int8 A^T (K x M stored) and B, int32 C, CUBLAS_COMPUTE_32I. */
static void gemm_ex_int8(cublasHandle_t h)
{
    std::vector<int8_t> a, b, unused;
    host_inputs<int8_t>(1, true, a, b, unused);
    std::vector<int32_t> c((size_t)M * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++)
            c[(size_t)j * M + i] = c_val(i, j);
    int8_t *dA = to_device(a), *dB = to_device(b);
    int32_t *dC = to_device(c);
    const int32_t alpha = 3, beta = 2;
    BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, dA, CUDA_R_8I, K, dB, CUDA_R_8I, K,
                      &beta, dC, CUDA_R_32I, M, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    std::vector<int32_t> out = from_device(dC, c.size());
    std::vector<long long> want = host_gemm(1, 3, 2);
    long long sum = 0;
    int bad = 0;
    for (size_t i = 0; i < out.size(); i++) {
        bad += out[i] != want[i];
        sum += out[i];
    }
    char line[160];
    snprintf(line, sizeof line, "GemmEx int8 -> int32 (A^T): checksum %lld, mismatches %d", sum, bad);
    expect(bad == 0, line);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

/* fp16 batches, fp32 compute and output: strided, then pointer arrays. */
static void batched_ex(cublasHandle_t h)
{
    std::vector<__half> a, b, unused, all_a, all_b;
    std::vector<float> c32, all_c, a32, b32;
    std::vector<long long> want;
    for (int bi = 0; bi < BATCH; bi++) {
        host_inputs<__half>(bi, false, a, b, unused);
        host_inputs<float>(bi, false, a32, b32, c32);
        all_a.insert(all_a.end(), a.begin(), a.end());
        all_b.insert(all_b.end(), b.begin(), b.end());
        all_c.insert(all_c.end(), c32.begin(), c32.end());
        std::vector<long long> w = host_gemm(bi, 1, 1);
        want.insert(want.end(), w.begin(), w.end());
    }
    __half *dA = to_device(all_a), *dB = to_device(all_b);
    float *dC = to_device(all_c);
    const float one = 1.0f;
    BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, CUDA_R_16F, M,
                                    (long long)M * K, dB, CUDA_R_16F, K, (long long)K * N, &one, dC,
                                    CUDA_R_32F, M, (long long)M * N, BATCH, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    std::vector<float> out = from_device(dC, all_c.size());
    compare(out.data(), want.data(), out.size(), "GemmStridedBatchedEx fp16 -> fp32, 3 batches");

    CHECK(cudaMemcpy(dC, all_c.data(), all_c.size() * sizeof(float), cudaMemcpyHostToDevice));
    const void *ha[BATCH], *hb[BATCH];
    void *hc[BATCH];
    for (int bi = 0; bi < BATCH; bi++) {
        ha[bi] = dA + (size_t)bi * M * K;
        hb[bi] = dB + (size_t)bi * K * N;
        hc[bi] = dC + (size_t)bi * M * N;
    }
    void **d_ptrs;
    CHECK(cudaMalloc(&d_ptrs, 3 * sizeof ha));
    CHECK(cudaMemcpy(d_ptrs, ha, sizeof ha, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_ptrs + BATCH, hb, sizeof hb, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_ptrs + 2 * BATCH, hc, sizeof hc, cudaMemcpyHostToDevice));
    BLAS(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (const void *const *)d_ptrs,
                             CUDA_R_16F, M, (const void *const *)(d_ptrs + BATCH), CUDA_R_16F, K, &one,
                             d_ptrs + 2 * BATCH, CUDA_R_32F, M, BATCH, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
    out = from_device(dC, all_c.size());
    compare(out.data(), want.data(), out.size(), "GemmBatchedEx fp16 -> fp32, pointer arrays");
    CHECK(cudaFree(d_ptrs));
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
}

/* cublasLt, fp16, 3 strided batches, op(A) = A^T: D = relu(A * B
 * + C + bias), on the algorithm the heuristic picks. */
static void lt_batched_transposed(cudaStream_t stream)
{
    std::vector<__half> a, b, c, all_a, all_b, all_c;
    std::vector<long long> want;
    for (int bi = 0; bi < BATCH; bi++) {
        host_inputs<__half>(bi, true, a, b, c); /* A stored transposed */
        all_a.insert(all_a.end(), a.begin(), a.end());
        all_b.insert(all_b.end(), b.begin(), b.end());
        all_c.insert(all_c.end(), c.begin(), c.end());
        std::vector<long long> w = host_gemm(bi, 1, 1);
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                long long v = w[(size_t)j * M + i] + (i % 7) - 3;
                want.push_back(v > 0 ? v : 0);
            }
    }
    std::vector<__half> bias(M);
    for (int i = 0; i < M; i++)
        bias[i] = (__half)(float)((i % 7) - 3);
    __half *dA = to_device(all_a), *dB = to_device(all_b), *dC = to_device(all_c), *dBias = to_device(bias);
    __half *dD;
    CHECK(cudaMalloc(&dD, all_c.size() * sizeof(__half)));
    size_t workspace_size = 4 << 20;
    void *workspace;
    CHECK(cudaMalloc(&workspace, workspace_size));

    cublasLtHandle_t lt;
    BLAS(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    BLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dBias, sizeof dBias));
    cublasOperation_t transpose = CUBLAS_OP_T;
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
    cublasLtMatrixLayout_t layouts[3];
    const int rows[3] = {K, K, M}, cols[3] = {M, N, N}, lds[3] = {K, K, M}; /* A stored K x M */
    for (int l = 0; l < 3; l++) {
        BLAS(cublasLtMatrixLayoutCreate(&layouts[l], CUDA_R_16F, rows[l], cols[l], lds[l]));
        int count = BATCH;
        long long stride = (long long)rows[l] * cols[l];
        BLAS(cublasLtMatrixLayoutSetAttribute(layouts[l], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        BLAS(cublasLtMatrixLayoutSetAttribute(layouts[l], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof stride));
    }
    cublasLtMatmulPreference_t pref;
    BLAS(cublasLtMatmulPreferenceCreate(&pref));
    BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_size,
                                              sizeof workspace_size));
    cublasLtMatmulHeuristicResult_t result[4];
    int returned = 0;
    BLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, layouts[0], layouts[1], layouts[2], layouts[2], pref, 4, result,
                                        &returned));
    expect(returned > 0 && result[0].state == CUBLAS_STATUS_SUCCESS, "cublasLt heuristic returns an algorithm");
    const float alpha = 1.0f, beta = 1.0f;
    BLAS(cublasLtMatmul(lt, op, &alpha, dA, layouts[0], dB, layouts[1], &beta, dC, layouts[2], dD, layouts[2],
                        &result[0].algo, workspace, workspace_size, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<__half> out = from_device(dD, all_c.size());
    compare(out.data(), want.data(), out.size(), "cublasLt fp16, 3 batches, op(A) = A^T, bias+ReLU");
    BLAS(cublasLtMatmulPreferenceDestroy(pref));
    for (int l = 0; l < 3; l++)
        BLAS(cublasLtMatrixLayoutDestroy(layouts[l]));
    BLAS(cublasLtMatmulDescDestroy(op));
    BLAS(cublasLtDestroy(lt));
    for (void *p : {(void *)dA, (void *)dB, (void *)dC, (void *)dBias, (void *)dD, workspace})
        CHECK(cudaFree(p));
}

/* cublasXt: SGEMM on host memory, tiled in blocks of 32, pinning off then on. */
static void xt_sgemm(void)
{
    cublasXtHandle_t xt;
    BLAS(cublasXtCreate(&xt));
    int devices[1] = {0};
    BLAS(cublasXtDeviceSelect(xt, 1, devices));
    BLAS(cublasXtSetBlockDim(xt, 32));
    std::vector<float> a, b, c;
    host_inputs<float>(1, false, a, b, c);
    const std::vector<long long> want = host_gemm(1, 2, -1);
    const float alpha = 2.0f, beta = -1.0f;
    for (int pin = 0; pin < 2; pin++) {
        std::vector<float> out(c);
        BLAS(cublasXtSetPinningMemMode(xt, pin ? CUBLASXT_PINNING_ENABLED : CUBLASXT_PINNING_DISABLED));
        BLAS(cublasXtSgemm(xt, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, a.data(), M, b.data(), K, &beta,
                           out.data(), M));
        compare(out.data(), want.data(), out.size(),
                pin ? "cublasXtSgemm on host memory, pinning enabled" : "cublasXtSgemm on host memory");
    }
    BLAS(cublasXtDestroy(xt));
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered after cudaMemcpy */
    BLAS(cublasSetStream(h, stream));
    void *workspace;
    CHECK(cudaMalloc(&workspace, 8 << 20));
    BLAS(cublasSetWorkspace(h, workspace, 8 << 20));

    gemm_ex_float_out<__nv_bfloat16>(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "GemmEx bf16 -> fp32");
    gemm_ex_float_out<float>(h, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "GemmEx fp32, TF32 compute");
    gemm_ex_float_out<float>(h, CUDA_R_32F, CUBLAS_COMPUTE_32F, "GemmEx fp32, 32F compute");
    gemm_ex_int8(h);
    batched_ex(h);
    lt_batched_transposed(stream);
    BLAS(cublasDestroy(h));
    CHECK(cudaFree(workspace));
    CHECK(cudaStreamDestroy(stream));
    xt_sgemm();
    printf("%s\n", failures ? "cublas_ext: FAILED" : "cublas_ext: all checks passed");
    return failures ? 1 : 0;
}
