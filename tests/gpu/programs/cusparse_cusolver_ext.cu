/* cuSPARSE and cuSOLVER beyond cusparse_spmv and cusolver_lu: SpGEMM
 * (CSR x CSR, the generic work-estimation / compute / copy sequence), SpSV
 * (a sparse lower-triangular solve), cusolverDnSsyevd (eigenvalues and
 * vectors of a symmetric matrix with known spectrum), cusolverDnSgesvd (a
 * matrix built from known singular values), and the 64-bit API's
 * cusolverDnXpotrf / Xpotrs (Cholesky of an SPD matrix, three right-hand
 * sides). Checked against host references, exactly where the arithmetic is
 * exact and with tolerances elsewhere; only pass/fail lines are printed. */
#include <cusolverDn.h>
#include <cusparse.h>

#include <math.h>
#include <vector>

#include "test_util.h"

struct Csr {
    int rows, cols;
    std::vector<int> offsets, columns;
    std::vector<float> values;
};

/* A CSR matrix from a dense row-major one (zeros dropped). */
static Csr to_csr(const std::vector<float> &dense, int rows, int cols)
{
    Csr m{rows, cols, {0}, {}, {}};
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++)
            if (dense[(size_t)i * cols + j] != 0.0f) {
                m.columns.push_back(j);
                m.values.push_back(dense[(size_t)i * cols + j]);
            }
        m.offsets.push_back((int)m.columns.size());
    }
    return m;
}

static cusparseSpMatDescr_t device_csr(const Csr &m, int **offsets, int **columns, float **values)
{
    *offsets = to_device(m.offsets);
    *columns = to_device(m.columns);
    *values = to_device(m.values);
    cusparseSpMatDescr_t d;
    SPARSE(cusparseCreateCsr(&d, m.rows, m.cols, (int64_t)m.values.size(), *offsets, *columns, *values,
                             CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    return d;
}

static void spgemm(cusparseHandle_t sp)
{
    const int R = 120, I = 90, C = 100;
    std::vector<float> a((size_t)R * I, 0.0f), b((size_t)I * C, 0.0f);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < I; k++)
            if ((i * 5 + k * 3) % 13 == 0)
                a[(size_t)i * I + k] = (float)((i + k) % 5 - 2);
    for (int k = 0; k < I; k++)
        for (int j = 0; j < C; j++)
            if ((k * 7 + j) % 11 == 0)
                b[(size_t)k * C + j] = (float)((k * j) % 7 - 3);
    std::vector<float> want((size_t)R * C, 0.0f);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < I; k++)
            for (int j = 0; j < C; j++)
                want[(size_t)i * C + j] += a[(size_t)i * I + k] * b[(size_t)k * C + j];

    int *ao, *ac, *bo, *bc, *co;
    float *av, *bv;
    cusparseSpMatDescr_t ma = device_csr(to_csr(a, R, I), &ao, &ac, &av);
    cusparseSpMatDescr_t mb = device_csr(to_csr(b, I, C), &bo, &bc, &bv);
    CHECK(cudaMalloc(&co, (R + 1) * sizeof(int)));
    cusparseSpMatDescr_t mc;
    SPARSE(cusparseCreateCsr(&mc, R, C, 0, co, NULL, NULL, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                             CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    cusparseSpGEMMDescr_t desc;
    SPARSE(cusparseSpGEMM_createDescr(&desc));
    const float alpha = 1.0f, beta = 0.0f;
    const cusparseOperation_t op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    size_t size1 = 0, size2 = 0;
    void *buf1 = NULL, *buf2 = NULL;
    SPARSE(cusparseSpGEMM_workEstimation(sp, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F,
                                         CUSPARSE_SPGEMM_DEFAULT, desc, &size1, NULL));
    CHECK(cudaMalloc(&buf1, size1));
    SPARSE(cusparseSpGEMM_workEstimation(sp, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F,
                                         CUSPARSE_SPGEMM_DEFAULT, desc, &size1, buf1));
    SPARSE(cusparseSpGEMM_compute(sp, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT,
                                  desc, &size2, NULL));
    CHECK(cudaMalloc(&buf2, size2));
    SPARSE(cusparseSpGEMM_compute(sp, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT,
                                  desc, &size2, buf2));
    int64_t rows = 0, cols = 0, nnz = 0;
    SPARSE(cusparseSpMatGetSize(mc, &rows, &cols, &nnz));
    int *cc;
    float *cv;
    CHECK(cudaMalloc(&cc, (nnz ? nnz : 1) * sizeof(int)));
    CHECK(cudaMalloc(&cv, (nnz ? nnz : 1) * sizeof(float)));
    SPARSE(cusparseCsrSetPointers(mc, co, cc, cv));
    SPARSE(cusparseSpGEMM_copy(sp, op, op, &alpha, ma, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, desc));

    std::vector<int> offsets = from_device(co, R + 1), columns = from_device(cc, (size_t)nnz);
    std::vector<float> values = from_device(cv, (size_t)nnz);
    std::vector<float> got((size_t)R * C, 0.0f);
    for (int i = 0; i < R; i++)
        for (int p = offsets[i]; p < offsets[i + 1]; p++)
            got[(size_t)i * C + columns[p]] += values[p];
    int bad = offsets[R] != nnz;
    for (size_t i = 0; i < got.size(); i++)
        bad += got[i] != want[i];
    expect(rows == R && cols == C && bad == 0, "SpGEMM CSR x CSR: product exact");
    SPARSE(cusparseSpGEMM_destroyDescr(desc));
    SPARSE(cusparseDestroySpMat(ma));
    SPARSE(cusparseDestroySpMat(mb));
    SPARSE(cusparseDestroySpMat(mc));
    for (void *p : {(void *)ao, (void *)ac, (void *)av, (void *)bo, (void *)bc, (void *)bv, (void *)co,
                    (void *)cc, (void *)cv, buf1, buf2})
        CHECK(cudaFree(p));
}

/* L x = b for a sparse lower-triangular L with unit and 2 on the diagonal. */
static void spsv(cusparseHandle_t sp)
{
    const int n = 500;
    std::vector<float> l((size_t)n * n, 0.0f), x_true(n), rhs(n, 0.0f);
    for (int i = 0; i < n; i++) {
        l[(size_t)i * n + i] = (i % 3 == 0) ? 2.0f : 1.0f;
        for (int j = 0; j < i; j++)
            if ((i - j) == 1 || (i * 7 + j) % 97 == 0)
                l[(size_t)i * n + j] = (float)((i + j) % 3 - 1);
        x_true[i] = (float)(i % 5 - 2);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            rhs[i] += l[(size_t)i * n + j] * x_true[j];
    int *lo, *lc;
    float *lv;
    cusparseSpMatDescr_t ml = device_csr(to_csr(l, n, n), &lo, &lc, &lv);
    cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
    cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
    SPARSE(cusparseSpMatSetAttribute(ml, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof fill));
    SPARSE(cusparseSpMatSetAttribute(ml, CUSPARSE_SPMAT_DIAG_TYPE, &diag, sizeof diag));
    float *db = to_device(rhs), *dx;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    cusparseDnVecDescr_t vb, vx;
    SPARSE(cusparseCreateDnVec(&vb, n, db, CUDA_R_32F));
    SPARSE(cusparseCreateDnVec(&vx, n, dx, CUDA_R_32F));
    cusparseSpSVDescr_t desc;
    SPARSE(cusparseSpSV_createDescr(&desc));
    const float alpha = 1.0f;
    size_t size = 0;
    SPARSE(cusparseSpSV_bufferSize(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ml, vb, vx, CUDA_R_32F,
                                   CUSPARSE_SPSV_ALG_DEFAULT, desc, &size));
    void *buf;
    CHECK(cudaMalloc(&buf, size ? size : 1));
    SPARSE(cusparseSpSV_analysis(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ml, vb, vx, CUDA_R_32F,
                                 CUSPARSE_SPSV_ALG_DEFAULT, desc, buf));
    SPARSE(cusparseSpSV_solve(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, ml, vb, vx, CUDA_R_32F,
                              CUSPARSE_SPSV_ALG_DEFAULT, desc));
    std::vector<float> x = from_device(dx, n);
    double err = 0;
    for (int i = 0; i < n; i++)
        err = fmax(err, fabs((double)x[i] - x_true[i]));
    expect(err < 1e-3, "SpSV lower-triangular solve matches the host's x");
    SPARSE(cusparseSpSV_destroyDescr(desc));
    SPARSE(cusparseDestroyDnVec(vb));
    SPARSE(cusparseDestroyDnVec(vx));
    SPARSE(cusparseDestroySpMat(ml));
    for (void *p : {(void *)lo, (void *)lc, (void *)lv, (void *)db, (void *)dx, buf})
        CHECK(cudaFree(p));
}

/* The tridiagonal (-1, 2, -1) matrix: eigenvalues 2 - 2 cos(k pi / (n + 1)). */
static void syevd(cusolverDnHandle_t dn)
{
    const int n = 64;
    std::vector<float> a((size_t)n * n, 0.0f);
    for (int i = 0; i < n; i++) {
        a[(size_t)i * n + i] = 2.0f;
        if (i + 1 < n)
            a[(size_t)i * n + i + 1] = a[(size_t)(i + 1) * n + i] = -1.0f;
    }
    float *da = to_device(a), *dw;
    int *dinfo;
    CHECK(cudaMalloc(&dw, n * sizeof(float)));
    CHECK(cudaMalloc(&dinfo, sizeof(int)));
    int lwork = 0;
    SOLVER(cusolverDnSsyevd_bufferSize(dn, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da, n, dw, &lwork));
    float *work;
    CHECK(cudaMalloc(&work, lwork * sizeof(float)));
    SOLVER(cusolverDnSsyevd(dn, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da, n, dw, work, lwork, dinfo));
    std::vector<float> w = from_device(dw, n), v = from_device(da, (size_t)n * n);
    int info = from_device(dinfo, 1)[0];
    double err = 0, residual = 0;
    for (int k = 0; k < n; k++) {
        err = fmax(err, fabs(w[k] - (2.0 - 2.0 * cos((k + 1) * M_PI / (n + 1)))));
        for (int i = 0; i < n; i++) { /* (A v_k)_i - w_k v_ik */
            double av = 2.0 * v[(size_t)k * n + i];
            if (i > 0)
                av -= v[(size_t)k * n + i - 1];
            if (i + 1 < n)
                av -= v[(size_t)k * n + i + 1];
            residual = fmax(residual, fabs(av - w[k] * v[(size_t)k * n + i]));
        }
    }
    expect(info == 0 && err < 1e-4, "syevd eigenvalues of the (-1, 2, -1) matrix, ascending");
    expect(residual < 1e-4, "syevd eigenvectors: |A v - w v| small");
    for (void *p : {(void *)da, (void *)dw, (void *)dinfo, (void *)work})
        CHECK(cudaFree(p));
}

/* Householder reflection I - 2 u u^T / u^T u applied to the columns of a (m x n, column-major). */
static void reflect(std::vector<double> &a, int m, int n, const std::vector<double> &u)
{
    double uu = 0;
    for (double x : u)
        uu += x * x;
    for (int j = 0; j < n; j++) {
        double dot = 0;
        for (int i = 0; i < m; i++)
            dot += u[i] * a[(size_t)j * m + i];
        for (int i = 0; i < m; i++)
            a[(size_t)j * m + i] -= 2.0 * dot / uu * u[i];
    }
}

/* A = H1 diag(s) H2 (H reflections): singular values s, and U S V^T = A. */
static void gesvd(cusolverDnHandle_t dn)
{
    const int m = 40, n = 24;
    std::vector<double> a((size_t)m * n, 0.0), s_true(n);
    for (int j = 0; j < n; j++)
        a[(size_t)j * m + j] = s_true[j] = 30.0 - j; /* descending, distinct */
    std::vector<double> u1(m), u2(n);
    for (int i = 0; i < m; i++)
        u1[i] = (double)((i * 3) % 7) - 2.5;
    for (int i = 0; i < n; i++)
        u2[i] = (double)((i * 5) % 9) - 3.5;
    reflect(a, m, n, u1); /* H1 diag(s) */
    std::vector<double> at((size_t)n * m);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            at[(size_t)i * n + j] = a[(size_t)j * m + i];
    reflect(at, n, m, u2); /* (H1 diag(s) H2)^T = H2 diag(s) H1^T, H2 symmetric */
    std::vector<float> af((size_t)m * n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            af[(size_t)j * m + i] = (float)at[(size_t)i * n + j];
    float *da = to_device(af), *ds, *du, *dvt;
    int *dinfo;
    CHECK(cudaMalloc(&ds, n * sizeof(float)));
    CHECK(cudaMalloc(&du, (size_t)m * m * sizeof(float)));
    CHECK(cudaMalloc(&dvt, (size_t)n * n * sizeof(float)));
    CHECK(cudaMalloc(&dinfo, sizeof(int)));
    int lwork = 0;
    SOLVER(cusolverDnSgesvd_bufferSize(dn, m, n, &lwork));
    float *work;
    CHECK(cudaMalloc(&work, lwork * sizeof(float)));
    SOLVER(cusolverDnSgesvd(dn, 'A', 'A', m, n, da, m, ds, du, m, dvt, n, work, lwork, NULL, dinfo));
    std::vector<float> s = from_device(ds, n), u = from_device(du, (size_t)m * m), vt = from_device(dvt, (size_t)n * n);
    int info = from_device(dinfo, 1)[0];
    double err = 0, recon = 0;
    for (int j = 0; j < n; j++)
        err = fmax(err, fabs(s[j] - s_true[j]));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double x = 0;
            for (int k = 0; k < n; k++)
                x += (double)u[(size_t)k * m + i] * s[k] * vt[(size_t)j * n + k];
            recon = fmax(recon, fabs(x - af[(size_t)j * m + i]));
        }
    expect(info == 0 && err < 1e-3, "gesvd singular values 30, 29, ..., 7");
    expect(recon < 1e-3, "gesvd U S V^T reproduces A");
    for (void *p : {(void *)da, (void *)ds, (void *)du, (void *)dvt, (void *)dinfo, (void *)work})
        CHECK(cudaFree(p));
}

/* 64-bit API: Cholesky of an SPD matrix and a solve with three right-hand sides, in double. */
static void xpotrf_xpotrs(cusolverDnHandle_t dn)
{
    const int64_t n = 100, nrhs = 3;
    std::vector<double> a((size_t)(n * n)), x_true((size_t)(n * nrhs)), b((size_t)(n * nrhs), 0.0);
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < n; i++)
            a[(size_t)(j * n + i)] = i == j ? 8.0 + (double)(i % 4) : (labs(i - j) <= 2 ? -1.0 : 0.0);
    for (int64_t r = 0; r < nrhs; r++)
        for (int64_t i = 0; i < n; i++) {
            x_true[(size_t)(r * n + i)] = (double)((i + 3 * r) % 7) - 3.0;
        }
    for (int64_t r = 0; r < nrhs; r++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < n; k++)
                b[(size_t)(r * n + i)] += a[(size_t)(k * n + i)] * x_true[(size_t)(r * n + k)];
    double *da = to_device(a), *db = to_device(b);
    int *dinfo;
    CHECK(cudaMalloc(&dinfo, sizeof(int)));
    cusolverDnParams_t params;
    SOLVER(cusolverDnCreateParams(&params));
    size_t device_bytes = 0, host_bytes = 0;
    SOLVER(cusolverDnXpotrf_bufferSize(dn, params, CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, da, n, CUDA_R_64F,
                                       &device_bytes, &host_bytes));
    void *dwork, *hwork = malloc(host_bytes ? host_bytes : 1);
    CHECK(cudaMalloc(&dwork, device_bytes ? device_bytes : 1));
    SOLVER(cusolverDnXpotrf(dn, params, CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, da, n, CUDA_R_64F, dwork,
                            device_bytes, hwork, host_bytes, dinfo));
    int info_f = from_device(dinfo, 1)[0];
    SOLVER(cusolverDnXpotrs(dn, params, CUBLAS_FILL_MODE_LOWER, n, nrhs, CUDA_R_64F, da, n, CUDA_R_64F, db, n,
                            dinfo));
    int info_s = from_device(dinfo, 1)[0];
    std::vector<double> x = from_device(db, b.size());
    double err = 0;
    for (size_t i = 0; i < x.size(); i++)
        err = fmax(err, fabs(x[i] - x_true[i]));
    expect(info_f == 0 && info_s == 0 && err < 1e-9, "Xpotrf + Xpotrs (64-bit API, double): x matches");
    SOLVER(cusolverDnDestroyParams(params));
    free(hwork);
    for (void *p : {(void *)da, (void *)db, (void *)dinfo, dwork})
        CHECK(cudaFree(p));
}

int main(void)
{
    CHECK(cudaSetDevice(0));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered with the cudaMemcpy calls */
    cusparseHandle_t sp;
    SPARSE(cusparseCreate(&sp));
    SPARSE(cusparseSetStream(sp, stream));
    spgemm(sp);
    spsv(sp);
    SPARSE(cusparseDestroy(sp));
    cusolverDnHandle_t dn;
    SOLVER(cusolverDnCreate(&dn));
    SOLVER(cusolverDnSetStream(dn, stream));
    syevd(dn);
    gesvd(dn);
    xpotrf_xpotrs(dn);
    SOLVER(cusolverDnDestroy(dn));
    CHECK(cudaStreamDestroy(stream));
    printf("%s\n", failures ? "cusparse_cusolver_ext: FAILED" : "cusparse_cusolver_ext: all checks passed");
    return failures ? 1 : 0;
}
