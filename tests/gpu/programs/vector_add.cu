// vector_add: classic c = a + b on 1M floats, several launches with different
// launch shapes, verified exactly against the CPU (float addition is exact
// IEEE on both sides, so results must match bit for bit).
//
// stdout: deterministic results only.  stderr: timings.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"

static unsigned int rng_state = 12345u;
static float rand_float(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 256.0f - 128.0f; // [-128,128)
}

// one element per thread, bounds checked
__global__ void vec_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// grid-stride loop, c += a (accumulate)
__global__ void vec_acc(const float *a, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += gridDim.x * blockDim.x)
        c[i] = c[i] + a[i];
}

static int compare(const char *what, const float *got, const float *want, int n)
{
    int bad = 0;
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    if (bad) {
        printf("FAIL %s: %d mismatches, first at %d (got %g want %g)\n", what,
               bad, first, got[first], want[first]);
        return 1;
    }
    printf("PASS %s\n", what);
    return 0;
}

int main(void)
{
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    int failures = 0;
    double t0 = now_s();

    float *ha = (float *)malloc(bytes);
    float *hb = (float *)malloc(bytes);
    float *hc = (float *)malloc(bytes);
    float *ref = (float *)malloc(bytes);
    if (!ha || !hb || !hc || !ref) {
        printf("FAIL host malloc\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        ha[i] = rand_float();
        hb[i] = rand_float();
    }

    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));

    // 1) c = a + b with several block sizes
    const int block_sizes[] = {32, 128, 256, 1024};
    for (int k = 0; k < 4; k++) {
        int bs = block_sizes[k];
        CHECK(cudaMemset(dc, 0, bytes));
        vec_add<<<(n + bs - 1) / bs, bs>>>(da, db, dc, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            ref[i] = ha[i] + hb[i];
        char what[64];
        snprintf(what, sizeof what, "vec_add block=%d", bs);
        failures += compare(what, hc, ref, n);
    }

    // 2) partial length (n - 7) must leave the tail untouched
    {
        const int m = n - 7;
        CHECK(cudaMemset(dc, 0, bytes));
        vec_add<<<(m + 255) / 256, 256>>>(da, db, dc, m);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            ref[i] = i < m ? ha[i] + hb[i] : 0.0f;
        failures += compare("vec_add partial n-7", hc, ref, n);
    }

    // 3) ten back-to-back accumulating launches (grid-stride, small grid)
    {
        CHECK(cudaMemcpy(dc, db, bytes, cudaMemcpyDeviceToDevice));
        for (int i = 0; i < n; i++)
            ref[i] = hb[i];
        for (int it = 0; it < 10; it++) {
            vec_acc<<<64 + it, 256>>>(da, dc, n);
            CHECK(cudaGetLastError());
            for (int i = 0; i < n; i++)
                ref[i] = ref[i] + ha[i];
        }
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
        failures += compare("vec_acc x10", hc, ref, n);
    }

    // print a deterministic checksum of the final vector
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += hc[i];
    printf("checksum %.6f\n", sum);

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
    free(ref);

    fprintf(stderr, "vector_add: %.3f s\n", now_s() - t0);
    printf("%s vector_add\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
