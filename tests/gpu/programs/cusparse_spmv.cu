/* cuSPARSE generic API: SpMV with a CSR matrix (plain and transposed), SpMV
 * with the same matrix in COO form, and CSR -> dense conversion.  Integer
 * values, so results are exact and compared exactly with the host. */
#include <cusparse.h>

#include <vector>

#include "test_util.h"

static const int ROWS = 200, COLS = 150;

static int nonzero_at(int i, int j) { return (i * 3 + j * 7) % 11 == 0 || i == j; }
static float value_at(int i, int j) { return (float)(((i + 2 * j) % 5) - 2 + (i == j ? 5 : 0)); }

static int compare(const std::vector<float> &got, const std::vector<double> &want, const char *what)
{
    long long sum = 0;
    int bad = 0;
    for (size_t i = 0; i < want.size(); i++) {
        bad += (double)got[i] != want[i];
        sum += (long long)got[i];
    }
    printf("%s: n=%zu checksum %lld y[0]=%g y[last]=%g mismatches %d\n", what, want.size(), sum,
           got[0], got[want.size() - 1], bad);
    return bad == 0;
}

int main(void)
{
    const double t0 = now_s();
    std::vector<int> rowptr(ROWS + 1), colind, cooRow;
    std::vector<float> vals;
    for (int i = 0; i < ROWS; i++) {
        rowptr[i] = (int)vals.size();
        for (int j = 0; j < COLS; j++)
            if (nonzero_at(i, j)) {
                colind.push_back(j);
                cooRow.push_back(i);
                vals.push_back(value_at(i, j));
            }
    }
    rowptr[ROWS] = (int)vals.size();
    const int nnz = (int)vals.size();
    printf("csr %dx%d nnz %d\n", ROWS, COLS, nnz);

    std::vector<float> x(COLS), xt(ROWS), y0(ROWS), yt0(COLS);
    for (int j = 0; j < COLS; j++)
        x[j] = (float)((j % 7) - 3);
    for (int i = 0; i < ROWS; i++) {
        xt[i] = (float)((i % 5) - 2);
        y0[i] = (float)(i % 3);
    }
    for (int j = 0; j < COLS; j++)
        yt0[j] = (float)((j % 4) - 1);
    const float alpha = 2.0f, beta = 1.0f;

    std::vector<double> ref(ROWS), reft(COLS);
    for (int i = 0; i < ROWS; i++) {
        double s = 0;
        for (int j = 0; j < COLS; j++)
            if (nonzero_at(i, j))
                s += (double)value_at(i, j) * x[j];
        ref[i] = alpha * s + beta * y0[i];
    }
    for (int j = 0; j < COLS; j++) {
        double s = 0;
        for (int i = 0; i < ROWS; i++)
            if (nonzero_at(i, j))
                s += (double)value_at(i, j) * xt[i];
        reft[j] = alpha * s + beta * yt0[j];
    }

    cusparseHandle_t h;
    SPARSE(cusparseCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered after cudaMemcpy */
    SPARSE(cusparseSetStream(h, stream));

    int *dRowptr, *dCol, *dCooRow;
    float *dVals, *dX, *dXt, *dY, *dYt, *dDense;
    CHECK(cudaMalloc(&dRowptr, (ROWS + 1) * sizeof(int)));
    CHECK(cudaMalloc(&dCol, nnz * sizeof(int)));
    CHECK(cudaMalloc(&dCooRow, nnz * sizeof(int)));
    CHECK(cudaMalloc(&dVals, nnz * sizeof(float)));
    CHECK(cudaMalloc(&dX, COLS * sizeof(float)));
    CHECK(cudaMalloc(&dXt, ROWS * sizeof(float)));
    CHECK(cudaMalloc(&dY, ROWS * sizeof(float)));
    CHECK(cudaMalloc(&dYt, COLS * sizeof(float)));
    CHECK(cudaMalloc(&dDense, (size_t)ROWS * COLS * sizeof(float)));
    CHECK(cudaMemcpy(dRowptr, rowptr.data(), (ROWS + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dCol, colind.data(), nnz * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dCooRow, cooRow.data(), nnz * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dVals, vals.data(), nnz * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dX, x.data(), COLS * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dXt, xt.data(), ROWS * sizeof(float), cudaMemcpyHostToDevice));

    cusparseSpMatDescr_t csr, coo;
    cusparseDnVecDescr_t vx, vxt, vy, vyt;
    SPARSE(cusparseCreateCsr(&csr, ROWS, COLS, nnz, dRowptr, dCol, dVals, CUSPARSE_INDEX_32I,
                             CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    SPARSE(cusparseCreateCoo(&coo, ROWS, COLS, nnz, dCooRow, dCol, dVals, CUSPARSE_INDEX_32I,
                             CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    SPARSE(cusparseCreateDnVec(&vx, COLS, dX, CUDA_R_32F));
    SPARSE(cusparseCreateDnVec(&vxt, ROWS, dXt, CUDA_R_32F));
    SPARSE(cusparseCreateDnVec(&vy, ROWS, dY, CUDA_R_32F));
    SPARSE(cusparseCreateDnVec(&vyt, COLS, dYt, CUDA_R_32F));

    std::vector<float> out(ROWS), outt(COLS);
    struct Case {
        const char *name;
        cusparseSpMatDescr_t mat;
        cusparseOperation_t op;
        cusparseSpMVAlg_t alg;
    } cases[] = {
        {"spmv csr y = 2*A*x + y", csr, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_SPMV_CSR_ALG1},
        {"spmv csr alg2 y = 2*A*x + y", csr, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_SPMV_CSR_ALG2},
        {"spmv coo y = 2*A*x + y", coo, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_SPMV_COO_ALG1},
        {"spmv csr y = 2*A^T*x + y", csr, CUSPARSE_OPERATION_TRANSPOSE, CUSPARSE_SPMV_ALG_DEFAULT},
    };
    for (const Case &c : cases) {
        const int trans = c.op == CUSPARSE_OPERATION_TRANSPOSE;
        cusparseDnVecDescr_t in = trans ? vxt : vx, outv = trans ? vyt : vy;
        float *dOut = trans ? dYt : dY;
        const std::vector<float> &init = trans ? yt0 : y0;
        CHECK(cudaMemcpyAsync(dOut, init.data(), init.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
        size_t bytes = 0;
        SPARSE(cusparseSpMV_bufferSize(h, c.op, &alpha, c.mat, in, &beta, outv, CUDA_R_32F, c.alg, &bytes));
        void *buf = NULL;
        if (bytes)
            CHECK(cudaMalloc(&buf, bytes));
        SPARSE(cusparseSpMV(h, c.op, &alpha, c.mat, in, &beta, outv, CUDA_R_32F, c.alg, buf));
        std::vector<float> &res = trans ? outt : out;
        CHECK(cudaMemcpyAsync(res.data(), dOut, res.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        char what[96];
        snprintf(what, sizeof what, "%s matches the host", c.name);
        expect(compare(res, trans ? reft : ref, c.name), what);
        if (buf)
            CHECK(cudaFree(buf));
    }

    /* CSR -> dense (row-major) */
    cusparseDnMatDescr_t dense;
    SPARSE(cusparseCreateDnMat(&dense, ROWS, COLS, COLS, dDense, CUDA_R_32F, CUSPARSE_ORDER_ROW));
    size_t bytes = 0;
    SPARSE(cusparseSparseToDense_bufferSize(h, csr, dense, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, &bytes));
    void *buf = NULL;
    if (bytes)
        CHECK(cudaMalloc(&buf, bytes));
    SPARSE(cusparseSparseToDense(h, csr, dense, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, buf));
    std::vector<float> hd((size_t)ROWS * COLS);
    CHECK(cudaMemcpyAsync(hd.data(), dDense, hd.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    int bad = 0;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            bad += hd[(size_t)i * COLS + j] != (nonzero_at(i, j) ? value_at(i, j) : 0.0f);
    printf("sparse to dense: mismatches %d\n", bad);
    expect(bad == 0, "csr to dense matches the host");
    if (buf)
        CHECK(cudaFree(buf));

    SPARSE(cusparseDestroyDnMat(dense));
    SPARSE(cusparseDestroySpMat(csr));
    SPARSE(cusparseDestroySpMat(coo));
    SPARSE(cusparseDestroyDnVec(vx));
    SPARSE(cusparseDestroyDnVec(vxt));
    SPARSE(cusparseDestroyDnVec(vy));
    SPARSE(cusparseDestroyDnVec(vyt));
    SPARSE(cusparseDestroy(h));
    void *bufs[] = {dRowptr, dCol, dCooRow, dVals, dX, dXt, dY, dYt, dDense};
    for (void *p : bufs)
        CHECK(cudaFree(p));
    CHECK(cudaStreamDestroy(stream));

    fprintf(stderr, "cusparse_spmv: %.3f s\n", now_s() - t0);
    printf("%s cusparse_spmv\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
