// rdc_main.cu: separate compilation (-rdc=true).  A kernel here calls a
// __device__ function and uses __device__ variables defined in rdc_lib.cu;
// the host accesses those variables through their symbols and launches a
// kernel defined in rdc_lib.cu.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "test_util.h"

extern __device__ int lib_counter;
extern __device__ float lib_scale;
extern __device__ int lib_table[16];
extern __device__ float lib_transform(float x, int i);
extern __global__ void lib_kernel(float *data, int n);

__device__ int main_calls; // defined here, used only here

__global__ void main_kernel(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = lib_transform(in[i], i);
    if (i == 0)
        main_calls += 1;
}

int main(void)
{
    double t0 = now_s();
    int failures = 0;
    const int n = 10000;
    float *hin = (float *)malloc(n * sizeof(float));
    float *hout = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++)
        hin[i] = (float)((i * 7919) % 1000) / 8.0f;
    int table[16];
    for (int k = 0; k < 16; k++)
        table[k] = k * k - 40;

    float init_scale = 0;
    CHECK(cudaMemcpyFromSymbol(&init_scale, lib_scale, sizeof init_scale));
    printf("lib_scale initial value: %g\n", init_scale);
    if (init_scale != 2.5f)
        failures++;
    CHECK(cudaMemcpyToSymbol(lib_table, table, sizeof table));
    int zero = 0;
    CHECK(cudaMemcpyToSymbol(lib_counter, &zero, sizeof zero));

    float *din, *dout;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    CHECK(cudaMemcpy(din, hin, n * sizeof(float), cudaMemcpyHostToDevice));

    for (int round = 0; round < 2; round++) {
        float scale = round == 0 ? 2.5f : -0.5f;
        CHECK(cudaMemcpyToSymbol(lib_scale, &scale, sizeof scale));
        main_kernel<<<(n + 255) / 256, 256>>>(din, dout, n);
        CHECK(cudaGetLastError());
        lib_kernel<<<(n + 127) / 128, 128>>>(dout, n); // defined in rdc_lib.cu
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(hout, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            float want = (hin[i] * scale + (float)table[i % 16]) + 1.0f;
            if (hout[i] != want)
                bad++;
        }
        printf("%s round %d (scale %g): %d mismatches\n", bad ? "FAIL" : "PASS",
               round, scale, bad);
        if (bad)
            failures++;
    }

    int counter = 0, calls = 0;
    CHECK(cudaMemcpyFromSymbol(&counter, lib_counter, sizeof counter));
    CHECK(cudaMemcpyFromSymbol(&calls, main_calls, sizeof calls));
    printf("lib_counter = %d (want %d), main_calls = %d\n", counter, 2 * n, calls);
    if (counter != 2 * n || calls != 2)
        failures++;

    void *addr = NULL;
    size_t sz = 0;
    CHECK(cudaGetSymbolAddress(&addr, lib_table));
    CHECK(cudaGetSymbolSize(&sz, lib_table));
    printf("lib_table size %zu, address non-null: %s\n", sz, addr ? "yes" : "no");

    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    free(hin);
    free(hout);
    fprintf(stderr, "rdc: %.3f s\n", now_s() - t0);
    printf("%s rdc\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
