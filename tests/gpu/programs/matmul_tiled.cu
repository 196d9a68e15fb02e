// matmul_tiled: C = A * B with
//   - a kernel using static __shared__ tiles (TILE x TILE),
//   - a kernel using dynamic extern __shared__ memory whose size is passed
//     as the third launch parameter,
// on sizes that are not multiples of the tile, compared to a CPU reference.
//
// Inputs are small integers scaled by 1/8 so every product and partial sum is
// exactly representable: results must match the CPU bit for bit regardless
// of summation order or FMA contraction.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"

#define TILE 16

static unsigned int rng_state = 777u;
static float rand_small(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    int v = (int)((rng_state >> 16) % 17) - 8; // -8..8
    return (float)v / 8.0f;
}

// A is M x K, B is K x N, C is M x N, all row-major
__global__ void matmul_static(const float *A, const float *B, float *C, int M,
                              int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}

// same algorithm, tile size chosen at run time, tiles in dynamic shared memory
// (2 * tile * tile floats, passed as the launch's shared memory size)
__global__ void matmul_dynamic(const float *A, const float *B, float *C, int M,
                               int N, int K, int tile)
{
    extern __shared__ float smem[];
    float *As = smem;
    float *Bs = smem + tile * tile;
    int row = blockIdx.y * tile + threadIdx.y;
    int col = blockIdx.x * tile + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + tile - 1) / tile; t++) {
        int ak = t * tile + threadIdx.x;
        int bk = t * tile + threadIdx.y;
        As[threadIdx.y * tile + threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y * tile + threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < tile; k++)
            acc += As[threadIdx.y * tile + k] * Bs[k * tile + threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}

static int compare(const char *what, const float *got, const float *want,
                   int count)
{
    int bad = 0, first = -1;
    for (int i = 0; i < count; i++)
        if (got[i] != want[i]) {
            if (first < 0)
                first = i;
            bad++;
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
    const int M = 300, N = 200, K = 257;
    int failures = 0;
    double t0 = now_s();

    float *hA = (float *)malloc(sizeof(float) * M * K);
    float *hB = (float *)malloc(sizeof(float) * K * N);
    float *hC = (float *)malloc(sizeof(float) * M * N);
    float *ref = (float *)malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        hA[i] = rand_small();
    for (int i = 0; i < K * N; i++)
        hB[i] = rand_small();
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++)
                acc += (double)hA[i * K + k] * hB[k * N + j];
            ref[i * N + j] = (float)acc;
        }

    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, sizeof(float) * M * K));
    CHECK(cudaMalloc(&dB, sizeof(float) * K * N));
    CHECK(cudaMalloc(&dC, sizeof(float) * M * N));
    CHECK(cudaMemcpy(dA, hA, sizeof(float) * M * K, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, hB, sizeof(float) * K * N, cudaMemcpyHostToDevice));

    // static shared memory
    {
        CHECK(cudaMemset(dC, 0xFF, sizeof(float) * M * N)); // NaN pattern
        dim3 block(TILE, TILE);
        dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
        matmul_static<<<grid, block>>>(dA, dB, dC, M, N, K);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(hC, dC, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
        failures += compare("matmul_static tile=16", hC, ref, M * N);
    }

    // dynamic shared memory, several tile sizes (8, 16, 32)
    const int tiles[] = {8, 16, 32};
    for (int t = 0; t < 3; t++) {
        int tile = tiles[t];
        size_t shmem = 2 * tile * tile * sizeof(float);
        CHECK(cudaMemset(dC, 0xFF, sizeof(float) * M * N));
        dim3 block(tile, tile);
        dim3 grid((N + tile - 1) / tile, (M + tile - 1) / tile);
        matmul_dynamic<<<grid, block, shmem>>>(dA, dB, dC, M, N, K, tile);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(hC, dC, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
        char what[64];
        snprintf(what, sizeof what, "matmul_dynamic tile=%d shmem=%zu", tile, shmem);
        failures += compare(what, hC, ref, M * N);
    }

    // same, on a non-default stream
    {
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        CHECK(cudaMemsetAsync(dC, 0xFF, sizeof(float) * M * N, s));
        int tile = 16;
        dim3 block(tile, tile);
        dim3 grid((N + tile - 1) / tile, (M + tile - 1) / tile);
        matmul_dynamic<<<grid, block, 2 * tile * tile * sizeof(float), s>>>(
            dA, dB, dC, M, N, K, tile);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hC, dC, sizeof(float) * M * N,
                              cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaStreamDestroy(s));
        failures += compare("matmul_dynamic on stream", hC, ref, M * N);
    }

    double sum = 0.0;
    for (int i = 0; i < M * N; i++)
        sum += hC[i];
    printf("checksum %.4f\n", sum);

    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    free(hA);
    free(hB);
    free(hC);
    free(ref);
    fprintf(stderr, "matmul_tiled: %.3f s\n", now_s() - t0);
    printf("%s matmul_tiled\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
