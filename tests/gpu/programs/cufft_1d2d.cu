/* cuFFT: a batched 1D complex transform (N = 1000, not a power of two),
 * forward and inverse, and a 2D real-to-complex / complex-to-real pair, on a
 * stream.  Compared with a direct DFT on the host; printed values are rounded
 * to one decimal (spectra of integer-frequency tones are near-integers). */
#include <cufft.h>

#include <math.h>
#include <vector>

#include "test_util.h"

#define FFT(call)                                                            \
    do {                                                                     \
        cufftResult r_ = (call);                                             \
        if (r_ != CUFFT_SUCCESS) {                                           \
            printf("FAIL line %d: %s -> cufftResult %d\n", __LINE__, #call,  \
                   (int)r_);                                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static const double PI = 3.14159265358979323846;

/* Rounded to one decimal, never "-0.0". */
static double r1(double v)
{
    v = round(v * 10.0) / 10.0;
    return v == 0 ? 0.0 : v;
}

static void print_peaks(const char *what, const cufftComplex *x, int n, int stride)
{
    printf("%s peaks:", what);
    for (int k = 0; k < n; k++) {
        double re = x[k * stride].x, im = x[k * stride].y;
        if (sqrt(re * re + im * im) > 1.0)
            printf(" k=%d (%.1f,%.1f)", k, r1(re), r1(im));
    }
    printf("\n");
}

int main(void)
{
    const double t0 = now_s();
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));

    /* ---- 1D C2C, batch 2 */
    const int N = 1000, B = 2;
    std::vector<cufftComplex> hx((size_t)N * B), hy((size_t)N * B), hz((size_t)N * B);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            double t = 2 * PI * n / N;
            hx[b * N + n].x = (float)(cos(3 * t) + 0.5 * sin((17 + b) * t) + (n % 4 == 0 ? 0.25 : 0));
            hx[b * N + n].y = (float)(0.25 * cos(50 * t) - b * 0.5 * sin(7 * t));
        }
    cufftComplex *dx;
    CHECK(cudaMalloc(&dx, hx.size() * sizeof(cufftComplex)));
    CHECK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(cufftComplex), cudaMemcpyHostToDevice));

    cufftHandle p1;
    int n1[1] = {N};
    FFT(cufftPlanMany(&p1, 1, n1, NULL, 1, N, NULL, 1, N, CUFFT_C2C, B));
    FFT(cufftSetStream(p1, stream));
    size_t ws = 0;
    FFT(cufftGetSize(p1, &ws));
    fprintf(stderr, "c2c plan work area: %zu bytes\n", ws);
    FFT(cufftExecC2C(p1, dx, dx, CUFFT_FORWARD)); /* in place */
    CHECK(cudaMemcpyAsync(hy.data(), dx, hy.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));

    double maxerr = 0, maxmag = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < N; k++) {
            double re = 0, im = 0;
            for (int n = 0; n < N; n++) {
                double a = -2 * PI * (double)((long)k * n % N) / N;
                re += hx[b * N + n].x * cos(a) - hx[b * N + n].y * sin(a);
                im += hx[b * N + n].x * sin(a) + hx[b * N + n].y * cos(a);
            }
            maxerr = fmax(maxerr, fmax(fabs(re - hy[b * N + k].x), fabs(im - hy[b * N + k].y)));
            maxmag = fmax(maxmag, sqrt(re * re + im * im));
        }
    for (int b = 0; b < B; b++) {
        char what[32];
        snprintf(what, sizeof what, "c2c forward batch %d", b);
        print_peaks(what, hy.data() + b * N, N, 1);
    }
    printf("c2c forward max |X| %.1f\n", r1(maxmag));
    expect(maxerr <= 1e-3 * maxmag, "c2c forward matches the host DFT");

    FFT(cufftExecC2C(p1, dx, dx, CUFFT_INVERSE));
    CHECK(cudaMemcpyAsync(hz.data(), dx, hz.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    maxerr = 0;
    for (size_t i = 0; i < hx.size(); i++)
        maxerr = fmax(maxerr, fmax(fabs(hz[i].x / N - hx[i].x), fabs(hz[i].y / N - hx[i].y)));
    expect(maxerr <= 1e-4, "c2c inverse(forward(x)) / N == x");
    FFT(cufftDestroy(p1));

    /* ---- 2D R2C and C2R, 64 x 48 */
    const int NX = 64, NY = 48, NYH = NY / 2 + 1;
    std::vector<float> hr((size_t)NX * NY), hback((size_t)NX * NY);
    for (int x = 0; x < NX; x++)
        for (int y = 0; y < NY; y++)
            hr[x * NY + y] = (float)(2.0 * cos(2 * PI * (5.0 * x / NX + 3.0 * y / NY)) +
                                     cos(2 * PI * 9.0 * y / NY) + ((x + y) % 2 ? 0.5 : -0.5));
    float *dr;
    cufftComplex *dc;
    CHECK(cudaMalloc(&dr, hr.size() * sizeof(float)));
    CHECK(cudaMalloc(&dc, (size_t)NX * NYH * sizeof(cufftComplex)));
    CHECK(cudaMemcpy(dr, hr.data(), hr.size() * sizeof(float), cudaMemcpyHostToDevice));
    cufftHandle pf, pb;
    FFT(cufftPlan2d(&pf, NX, NY, CUFFT_R2C));
    FFT(cufftPlan2d(&pb, NX, NY, CUFFT_C2R));
    FFT(cufftSetStream(pf, stream));
    FFT(cufftSetStream(pb, stream));
    FFT(cufftExecR2C(pf, dr, dc));
    std::vector<cufftComplex> hc((size_t)NX * NYH);
    CHECK(cudaMemcpyAsync(hc.data(), dc, hc.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    maxerr = 0;
    maxmag = 0;
    printf("r2c 2d peaks:");
    for (int kx = 0; kx < NX; kx++)
        for (int ky = 0; ky < NYH; ky++) {
            double re = 0, im = 0;
            for (int x = 0; x < NX; x++)
                for (int y = 0; y < NY; y++) {
                    double a = -2 * PI * ((double)(kx * x % NX) / NX + (double)(ky * y % NY) / NY);
                    re += hr[x * NY + y] * cos(a);
                    im += hr[x * NY + y] * sin(a);
                }
            const cufftComplex g = hc[kx * NYH + ky];
            maxerr = fmax(maxerr, fmax(fabs(re - g.x), fabs(im - g.y)));
            maxmag = fmax(maxmag, sqrt(re * re + im * im));
            if (sqrt((double)g.x * g.x + (double)g.y * g.y) > 1.0)
                printf(" (%d,%d)=(%.1f,%.1f)", kx, ky, r1(g.x), r1(g.y));
        }
    printf("\n");
    expect(maxerr <= 1e-3 * maxmag, "r2c 2d matches the host DFT");

    FFT(cufftExecC2R(pb, dc, dr));
    CHECK(cudaMemcpyAsync(hback.data(), dr, hback.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    maxerr = 0;
    for (size_t i = 0; i < hr.size(); i++)
        maxerr = fmax(maxerr, fabs(hback[i] / (NX * NY) - hr[i]));
    expect(maxerr <= 1e-4, "c2r(r2c(x)) / (NX*NY) == x");

    FFT(cufftDestroy(pf));
    FFT(cufftDestroy(pb));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(dc));
    CHECK(cudaStreamDestroy(stream));

    fprintf(stderr, "cufft_1d2d: %.3f s\n", now_s() - t0);
    printf("%s cufft_1d2d\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
