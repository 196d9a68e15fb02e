/* cuBLAS and cuBLASLt: SGEMM, DGEMM (transposed A), a half-precision
 * GemmEx, a strided batched SGEMM, device pointer mode, level-1 calls and a
 * cublasLt matmul with a bias+ReLU epilogue.  All inputs are small integers,
 * so every product is exact in fp32/fp16 and compared exactly with the host. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <math.h>
#include <vector>

#include "test_util.h"

static const int M = 96, N = 80, K = 112;

static double a_val(int i, int k, int b) { return ((i * 7 + k * 3 + b) % 9) - 4; }
static double b_val(int k, int j, int b) { return ((k * 5 + j * 11 + 2 * b) % 7) - 3; }
static double c_val(int i, int j) { return ((i + j) % 5) - 2; }

/* C = alpha * A(MxK) * B(KxN) + beta * C, column-major, in double. */
static std::vector<double> host_gemm(int batch, double alpha, double beta)
{
    std::vector<double> c((size_t)M * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += a_val(i, k, batch) * b_val(k, j, batch);
            c[(size_t)j * M + i] = alpha * s + beta * c_val(i, j);
        }
    return c;
}

template <typename T>
static int compare(const T *got, const std::vector<double> &want, const char *what)
{
    long long sum = 0;
    int bad = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if ((double)got[i] != want[i])
            bad++;
        sum += (long long)llround((double)got[i]);
    }
    printf("%s: checksum %lld c[0]=%g c[last]=%g mismatches %d\n", what, sum,
           (double)got[0], (double)got[want.size() - 1], bad);
    return bad == 0;
}

int main(void)
{
    const double t0 = now_s();
    const float alpha = 2.0f, beta = -1.0f;
    const size_t szA = (size_t)M * K, szB = (size_t)K * N, szC = (size_t)M * N;
    std::vector<float> hA(szA), hB(szB), hC(szC), hOut(szC);
    std::vector<double> hAd(szA), hAtd(szA), hBd(szB), hCd(szC), hOutd(szC);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < M; i++) {
            hA[(size_t)k * M + i] = (float)a_val(i, k, 0);
            hAtd[(size_t)i * K + k] = a_val(i, k, 0); /* stored K x M for op(A) = T */
        }
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++)
            hB[(size_t)j * K + k] = (float)b_val(k, j, 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++)
            hC[(size_t)j * M + i] = (float)c_val(i, j);
    for (size_t i = 0; i < szB; i++)
        hBd[i] = hB[i];
    for (size_t i = 0; i < szC; i++)
        hCd[i] = hC[i];
    const std::vector<double> ref = host_gemm(0, alpha, beta);

    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered after cudaMemcpy */
    BLAS(cublasSetStream(h, stream));

    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, szA * sizeof(float)));
    CHECK(cudaMalloc(&dB, szB * sizeof(float)));
    CHECK(cudaMalloc(&dC, szC * sizeof(float)));
    CHECK(cudaMemcpy(dA, hA.data(), szA * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, hB.data(), szB * sizeof(float), cudaMemcpyHostToDevice));

    /* SGEMM, no transposes */
    CHECK(cudaMemcpy(dC, hC.data(), szC * sizeof(float), cudaMemcpyHostToDevice));
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dA, M, dB, K, &beta, dC, M));
    CHECK(cudaMemcpyAsync(hOut.data(), dC, szC * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    expect(compare(hOut.data(), ref, "sgemm NN 96x80x112"), "sgemm matches the host");

    /* SGEMM with alpha/beta read from device memory */
    float *dScalars;
    const float hScalars[2] = {alpha, beta};
    CHECK(cudaMalloc(&dScalars, sizeof hScalars));
    CHECK(cudaMemcpy(dScalars, hScalars, sizeof hScalars, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC, hC.data(), szC * sizeof(float), cudaMemcpyHostToDevice));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, dScalars, dA, M, dB, K,
                     dScalars + 1, dC, M));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(hOut.data(), dC, szC * sizeof(float), cudaMemcpyDeviceToHost));
    expect(compare(hOut.data(), ref, "sgemm device scalars"), "sgemm with device alpha/beta");

    /* DGEMM with op(A) = A^T */
    double *dAt, *dBd, *dCd;
    const double alphad = 2.0, betad = -1.0;
    CHECK(cudaMalloc(&dAt, szA * sizeof(double)));
    CHECK(cudaMalloc(&dBd, szB * sizeof(double)));
    CHECK(cudaMalloc(&dCd, szC * sizeof(double)));
    CHECK(cudaMemcpy(dAt, hAtd.data(), szA * sizeof(double), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dBd, hBd.data(), szB * sizeof(double), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dCd, hCd.data(), szC * sizeof(double), cudaMemcpyHostToDevice));
    BLAS(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alphad, dAt, K, dBd, K, &betad, dCd, M));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(hOutd.data(), dCd, szC * sizeof(double), cudaMemcpyDeviceToHost));
    expect(compare(hOutd.data(), ref, "dgemm TN 96x80x112"), "dgemm matches the host");

    /* GemmEx: fp16 A and B, fp32 C, fp32 compute */
    std::vector<__half> hAh(szA), hBh(szB);
    for (size_t i = 0; i < szA; i++)
        hAh[i] = __float2half(hA[i]);
    for (size_t i = 0; i < szB; i++)
        hBh[i] = __float2half(hB[i]);
    __half *dAh, *dBh;
    CHECK(cudaMalloc(&dAh, szA * sizeof(__half)));
    CHECK(cudaMalloc(&dBh, szB * sizeof(__half)));
    CHECK(cudaMemcpy(dAh, hAh.data(), szA * sizeof(__half), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dBh, hBh.data(), szB * sizeof(__half), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC, hC.data(), szC * sizeof(float), cudaMemcpyHostToDevice));
    BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dAh, CUDA_R_16F, M, dBh,
                      CUDA_R_16F, K, &beta, dC, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(hOut.data(), dC, szC * sizeof(float), cudaMemcpyDeviceToHost));
    expect(compare(hOut.data(), ref, "gemmex f16 x f16 -> f32"), "gemmex (fp16 inputs) matches the host");

    /* Strided batched SGEMM, 3 different problems */
    const int batches = 3;
    std::vector<float> hAb(szA * batches), hBb(szB * batches), hCb(szC * batches), hOutb(szC * batches);
    for (int b = 0; b < batches; b++) {
        for (int k = 0; k < K; k++)
            for (int i = 0; i < M; i++)
                hAb[b * szA + (size_t)k * M + i] = (float)a_val(i, k, b);
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++)
                hBb[b * szB + (size_t)j * K + k] = (float)b_val(k, j, b);
        for (size_t i = 0; i < szC; i++)
            hCb[b * szC + i] = hC[i];
    }
    float *dAb, *dBb, *dCb;
    CHECK(cudaMalloc(&dAb, hAb.size() * sizeof(float)));
    CHECK(cudaMalloc(&dBb, hBb.size() * sizeof(float)));
    CHECK(cudaMalloc(&dCb, hCb.size() * sizeof(float)));
    CHECK(cudaMemcpy(dAb, hAb.data(), hAb.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dBb, hBb.data(), hBb.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dCb, hCb.data(), hCb.size() * sizeof(float), cudaMemcpyHostToDevice));
    BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, dAb, M, szA, dBb,
                                   K, szB, &beta, dCb, M, szC, batches));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(hOutb.data(), dCb, hOutb.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int batched_ok = 1;
    for (int b = 0; b < batches; b++) {
        char what[64];
        snprintf(what, sizeof what, "sgemm strided batch %d", b);
        batched_ok &= compare(hOutb.data() + b * szC, host_gemm(b, alpha, beta), what);
    }
    expect(batched_ok, "strided batched sgemm matches the host");

    /* Level 1: dot product and index of the largest magnitude, host results */
    float dot = 0;
    int amax = 0;
    BLAS(cublasSdot(h, K, dA, M, dB, 1, &dot)); /* row 0 of A . column 0 of B */
    double dot_ref = 0;
    for (int k = 0; k < K; k++)
        dot_ref += a_val(0, k, 0) * b_val(k, 0, 0);
    BLAS(cublasIsamax(h, (int)szC, dC, 1, &amax));
    int amax_ref = 1;
    for (size_t i = 1; i < szC; i++)
        if (fabs(ref[i]) > fabs(ref[amax_ref - 1]))
            amax_ref = (int)i + 1;
    printf("sdot = %g (host %g), isamax = %d (host %d)\n", dot, dot_ref, amax, amax_ref);
    expect(dot == dot_ref && amax == amax_ref, "sdot and isamax match the host");

    /* cublasLt: D = relu(alpha * A * B + beta * C + bias) */
    cublasLtHandle_t lt;
    BLAS(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    BLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t no_t = CUBLAS_OP_N;
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no_t, sizeof no_t));
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no_t, sizeof no_t));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    std::vector<float> hBias(M);
    for (int i = 0; i < M; i++)
        hBias[i] = (float)((i % 13) - 6) * 8.0f;
    float *dBias, *dD;
    CHECK(cudaMalloc(&dBias, M * sizeof(float)));
    CHECK(cudaMalloc(&dD, szC * sizeof(float)));
    CHECK(cudaMemcpy(dBias, hBias.data(), M * sizeof(float), cudaMemcpyHostToDevice));
    BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dBias, sizeof dBias));
    cublasLtMatrixLayout_t la, lb, lc;
    BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M));
    BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
    BLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
    cublasLtMatmulPreference_t pref;
    BLAS(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws_size = 4u << 20;
    BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws_size, sizeof ws_size));
    void *dWs;
    CHECK(cudaMalloc(&dWs, ws_size));
    cublasLtMatmulHeuristicResult_t heur[4];
    int nheur = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, heur, &nheur) !=
        CUBLAS_STATUS_SUCCESS)
        nheur = 0;
    printf("cublasLt heuristic found an algorithm: %s\n", nheur >= 1 ? "yes" : "no");
    int lt_ok = 0;
    if (nheur >= 1) {
        CHECK(cudaMemcpy(dC, hC.data(), szC * sizeof(float), cudaMemcpyHostToDevice));
        BLAS(cublasLtMatmul(lt, op, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, lc, &heur[0].algo,
                            dWs, ws_size, stream));
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaMemcpy(hOut.data(), dD, szC * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<double> lt_ref(ref);
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                double v = lt_ref[(size_t)j * M + i] + hBias[i];
                lt_ref[(size_t)j * M + i] = v > 0 ? v : 0;
            }
        lt_ok = compare(hOut.data(), lt_ref, "cublasLt matmul relu(AB+C+bias)");
    }
    expect(lt_ok, "cublasLt matmul with bias+relu epilogue matches the host");

    BLAS(cublasLtMatmulPreferenceDestroy(pref));
    BLAS(cublasLtMatrixLayoutDestroy(la));
    BLAS(cublasLtMatrixLayoutDestroy(lb));
    BLAS(cublasLtMatrixLayoutDestroy(lc));
    BLAS(cublasLtMatmulDescDestroy(op));
    BLAS(cublasLtDestroy(lt));
    BLAS(cublasDestroy(h));
    void *bufs[] = {dA, dB, dC, dScalars, dAt, dBd, dCd, dAh, dBh, dAb, dBb, dCb, dBias, dD, dWs};
    for (void *p : bufs)
        CHECK(cudaFree(p));
    CHECK(cudaStreamDestroy(stream));

    fprintf(stderr, "cublas_gemm: %.3f s\n", now_s() - t0);
    printf("%s cublas_gemm\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
