/*
 * A large copy there and back (64 MiB H2D, then D2H) must come back intact;
 * then the copy bandwidth of each direction, the median of REPS timed runs,
 * on one line to stderr (stdout keeps only deterministic checks). Run over
 * plain TCP and TLS by run_tls.sh, which prints both.
 * usage: test_copy_bw [MIB [REPS]]
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"

#define CUDA_OK(call) CHECK_EQ((call), cudaSuccess, "%s", #call)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* MiB/s of the median of reps copies of n bytes. */
static double median_rate(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                          int reps)
{
    double secs[64];
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        if (cudaMemcpy(dst, src, n, kind) != cudaSuccess)
            return 0;
        secs[i] = now() - t0;
    }
    qsort(secs, (size_t)reps, sizeof secs[0], by_value);
    return (double)n / (1 << 20) / secs[reps / 2];
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (mib == 0 || reps < 1 || reps > 64)
        return 2;
    size_t n = mib << 20;
    unsigned char *h = malloc(n), *back = malloc(n);
    CHECK(h != NULL && back != NULL, "host buffers");
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        h[i] = (unsigned char)x;
    }
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, n));
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(h, back, n, "%zu MiB H2D then D2H round trip", mib);

    double h2d = median_rate(d, h, n, cudaMemcpyHostToDevice, reps);
    double d2h = median_rate(back, d, n, cudaMemcpyDeviceToHost, reps);
    CHECK(h2d > 0 && d2h > 0, "timed copies succeed");
    CHECK_MEM_EQ(h, back, n, "the timed copies too");
    fprintf(stderr, "RESULT copy_%zuMiB h2d_MiBps=%.0f d2h_MiBps=%.0f (median of %d)\n", mib, h2d,
            d2h, reps);
    CUDA_OK(cudaFree(d));
    free(h);
    free(back);
    return check_done();
}
