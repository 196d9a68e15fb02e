/* cuSOLVER dense LU: getrf + getrs in float and double (legacy API) and the
 * 64-bit generic API (cusolverDnXgetrf/Xgetrs), on a 128x128 matrix that
 * needs row pivoting.  b = A * x_true with an integer x_true; the solutions
 * are compared with x_true and the host checks the residual of the
 * factorisation P*A = L*U itself. */
#include <cusolverDn.h>

#include <math.h>
#include <stdint.h>
#include <vector>

#include "test_util.h"

static const int NN = 128, NRHS = 3;

/* Column-major, hashed entries in [-2.75, 2.75]: partial pivoting swaps rows. */
static double a_val(int i, int j)
{
    uint32_t h = (uint32_t)i * 73856093u ^ (uint32_t)j * 19349663u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (double)((int)(h % 23) - 11) / 4.0;
}
static double x_val(int i, int r) { return (double)(((i * 5 + r * 3) % 9) - 4); }

/* max |P*A - L*U| over the matrix, from the packed LU and 1-based pivots */
template <typename T, typename P>
static double lu_residual(const std::vector<T> &lu, const std::vector<P> &ipiv)
{
    std::vector<double> pa((size_t)NN * NN);
    std::vector<int> perm(NN);
    for (int i = 0; i < NN; i++)
        perm[i] = i;
    for (int i = 0; i < NN; i++) {
        int p = (int)ipiv[i] - 1;
        int t = perm[i];
        perm[i] = perm[p];
        perm[p] = t;
    }
    for (int j = 0; j < NN; j++)
        for (int i = 0; i < NN; i++)
            pa[(size_t)j * NN + i] = a_val(perm[i], j);
    double worst = 0;
    for (int j = 0; j < NN; j++)
        for (int i = 0; i < NN; i++) {
            double s = 0;
            int kmax = i < j ? i : j;
            for (int k = 0; k <= kmax; k++) {
                double l = (k == i) ? 1.0 : lu[(size_t)k * NN + i];
                s += l * (double)lu[(size_t)j * NN + k];
            }
            worst = fmax(worst, fabs(s - pa[(size_t)j * NN + i]));
        }
    return worst;
}

template <typename P>
static void print_pivots(const char *what, const std::vector<P> &ipiv)
{
    long long sum = 0, swaps = 0;
    for (int i = 0; i < NN; i++) {
        sum += (long long)ipiv[i] * (i + 1);
        swaps += ipiv[i] != i + 1;
    }
    printf("%s: pivots %lld %lld %lld ... row swaps %lld, weighted sum %lld\n", what,
           (long long)ipiv[0], (long long)ipiv[1], (long long)ipiv[2], swaps, sum);
}

template <typename T>
static int check_solution(const char *what, const std::vector<T> &x, double tol)
{
    double err = 0;
    for (int r = 0; r < NRHS; r++)
        for (int i = 0; i < NN; i++)
            err = fmax(err, fabs((double)x[(size_t)r * NN + i] - x_val(i, r)));
    printf("%s: x[0..3] = %.2f %.2f %.2f %.2f, max error below %g: %s\n", what, (double)x[0],
           (double)x[1], (double)x[2], (double)x[3], tol, err < tol ? "yes" : "no");
    return err < tol;
}

template <typename T>
static void make_system(std::vector<T> &a, std::vector<T> &b)
{
    a.resize((size_t)NN * NN);
    b.resize((size_t)NN * NRHS);
    for (int j = 0; j < NN; j++)
        for (int i = 0; i < NN; i++)
            a[(size_t)j * NN + i] = (T)a_val(i, j);
    for (int r = 0; r < NRHS; r++)
        for (int i = 0; i < NN; i++) {
            double s = 0;
            for (int j = 0; j < NN; j++)
                s += a_val(i, j) * x_val(j, r);
            b[(size_t)r * NN + i] = (T)s;
        }
}

int main(void)
{
    const double t0 = now_s();
    cusolverDnHandle_t h;
    SOLVER(cusolverDnCreate(&h));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered after cudaMemcpy */
    SOLVER(cusolverDnSetStream(h, stream));
    int *dInfo;
    CHECK(cudaMalloc(&dInfo, sizeof(int)));

    {   /* float, legacy API */
        std::vector<float> a, b;
        make_system(a, b);
        float *dA, *dB, *dWork;
        int *dPiv, lwork = 0, info = -1;
        CHECK(cudaMalloc(&dA, a.size() * sizeof(float)));
        CHECK(cudaMalloc(&dB, b.size() * sizeof(float)));
        CHECK(cudaMalloc(&dPiv, NN * sizeof(int)));
        CHECK(cudaMemcpy(dA, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
        SOLVER(cusolverDnSgetrf_bufferSize(h, NN, NN, dA, NN, &lwork));
        CHECK(cudaMalloc(&dWork, (size_t)lwork * sizeof(float)));
        SOLVER(cusolverDnSgetrf(h, NN, NN, dA, NN, dWork, dPiv, dInfo));
        CHECK(cudaMemcpyAsync(&info, dInfo, sizeof(int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        printf("sgetrf info %d\n", info);
        std::vector<float> lu(a.size());
        std::vector<int> piv(NN);
        CHECK(cudaMemcpy(lu.data(), dA, lu.size() * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(piv.data(), dPiv, NN * sizeof(int), cudaMemcpyDeviceToHost));
        print_pivots("sgetrf", piv);
        double res = lu_residual(lu, piv);
        expect(info == 0 && res < 5e-3, "sgetrf: P*A == L*U (host check)");
        SOLVER(cusolverDnSgetrs(h, CUBLAS_OP_N, NN, NRHS, dA, NN, dPiv, dB, NN, dInfo));
        std::vector<float> x(b.size());
        CHECK(cudaMemcpyAsync(x.data(), dB, x.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(&info, dInfo, sizeof(int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        expect(info == 0 && check_solution("sgetrs", x, 1e-2), "sgetrs: A x = b solved");
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dWork));
        CHECK(cudaFree(dPiv));
    }

    {   /* double, legacy API, transposed solve checked too */
        std::vector<double> a, b;
        make_system(a, b);
        double *dA, *dB, *dWork;
        int *dPiv, lwork = 0, info = -1;
        CHECK(cudaMalloc(&dA, a.size() * sizeof(double)));
        CHECK(cudaMalloc(&dB, b.size() * sizeof(double)));
        CHECK(cudaMalloc(&dPiv, NN * sizeof(int)));
        CHECK(cudaMemcpy(dA, a.data(), a.size() * sizeof(double), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, b.data(), b.size() * sizeof(double), cudaMemcpyHostToDevice));
        SOLVER(cusolverDnDgetrf_bufferSize(h, NN, NN, dA, NN, &lwork));
        CHECK(cudaMalloc(&dWork, (size_t)lwork * sizeof(double)));
        SOLVER(cusolverDnDgetrf(h, NN, NN, dA, NN, dWork, dPiv, dInfo));
        SOLVER(cusolverDnDgetrs(h, CUBLAS_OP_N, NN, NRHS, dA, NN, dPiv, dB, NN, dInfo));
        std::vector<double> lu(a.size()), x(b.size());
        std::vector<int> piv(NN);
        CHECK(cudaMemcpyAsync(lu.data(), dA, lu.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(piv.data(), dPiv, NN * sizeof(int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(x.data(), dB, x.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(&info, dInfo, sizeof(int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        print_pivots("dgetrf", piv);
        expect(info == 0 && lu_residual(lu, piv) < 1e-10, "dgetrf: P*A == L*U (host check)");
        expect(check_solution("dgetrs", x, 1e-9), "dgetrs: A x = b solved");

        /* A^T y = c with c = A^T * x_true */
        std::vector<double> c((size_t)NN * NRHS);
        for (int r = 0; r < NRHS; r++)
            for (int i = 0; i < NN; i++) {
                double s = 0;
                for (int j = 0; j < NN; j++)
                    s += a_val(j, i) * x_val(j, r);
                c[(size_t)r * NN + i] = s;
            }
        CHECK(cudaMemcpy(dB, c.data(), c.size() * sizeof(double), cudaMemcpyHostToDevice));
        SOLVER(cusolverDnDgetrs(h, CUBLAS_OP_T, NN, NRHS, dA, NN, dPiv, dB, NN, dInfo));
        CHECK(cudaMemcpyAsync(x.data(), dB, x.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        expect(check_solution("dgetrs transposed", x, 1e-9), "dgetrs: A^T x = c solved");
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dWork));
        CHECK(cudaFree(dPiv));
    }

    {   /* double, 64-bit generic API */
        std::vector<double> a, b;
        make_system(a, b);
        cusolverDnParams_t params;
        SOLVER(cusolverDnCreateParams(&params));
        double *dA, *dB;
        int64_t *dPiv;
        int info = -1;
        CHECK(cudaMalloc(&dA, a.size() * sizeof(double)));
        CHECK(cudaMalloc(&dB, b.size() * sizeof(double)));
        CHECK(cudaMalloc(&dPiv, NN * sizeof(int64_t)));
        CHECK(cudaMemcpy(dA, a.data(), a.size() * sizeof(double), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, b.data(), b.size() * sizeof(double), cudaMemcpyHostToDevice));
        size_t dev_bytes = 0, host_bytes = 0;
        SOLVER(cusolverDnXgetrf_bufferSize(h, params, NN, NN, CUDA_R_64F, dA, NN, CUDA_R_64F,
                                           &dev_bytes, &host_bytes));
        void *dWork = NULL;
        std::vector<char> hWork(host_bytes ? host_bytes : 1);
        CHECK(cudaMalloc(&dWork, dev_bytes ? dev_bytes : 1));
        SOLVER(cusolverDnXgetrf(h, params, NN, NN, CUDA_R_64F, dA, NN, dPiv, CUDA_R_64F, dWork,
                                dev_bytes, hWork.data(), host_bytes, dInfo));
        SOLVER(cusolverDnXgetrs(h, params, CUBLAS_OP_N, NN, NRHS, CUDA_R_64F, dA, NN, dPiv,
                                CUDA_R_64F, dB, NN, dInfo));
        std::vector<double> lu(a.size()), x(b.size());
        std::vector<int64_t> piv(NN);
        CHECK(cudaMemcpyAsync(lu.data(), dA, lu.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(piv.data(), dPiv, NN * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(x.data(), dB, x.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaMemcpyAsync(&info, dInfo, sizeof(int), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        print_pivots("Xgetrf", piv);
        expect(info == 0 && lu_residual(lu, piv) < 1e-10, "Xgetrf: P*A == L*U (host check)");
        expect(check_solution("Xgetrs", x, 1e-9), "Xgetrs: A x = b solved");
        SOLVER(cusolverDnDestroyParams(params));
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dPiv));
        CHECK(cudaFree(dWork));
    }

    CHECK(cudaFree(dInfo));
    SOLVER(cusolverDnDestroy(h));
    CHECK(cudaStreamDestroy(stream));
    fprintf(stderr, "cusolver_lu: %.3f s\n", now_s() - t0);
    printf("%s cusolver_lu\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
