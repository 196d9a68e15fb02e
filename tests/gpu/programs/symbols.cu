// symbols: __device__ and __constant__ variables (scalars, arrays, a struct,
// one in a namespace) accessed with cudaMemcpyToSymbol / FromSymbol (with
// offsets, sync and async, H2D and D2D), cudaGetSymbolAddress,
// cudaGetSymbolSize, and a kernel that reads constant memory and writes
// device variables.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"

#define NC 1024
#define ND 256

struct Params {
    int n;
    float scale;
    double bias;
    char tag[5];
};

__device__ int d_scalar;
__device__ int d_initialised = 12345;          // initial value from the image
__device__ float d_arr[ND];
__device__ double d_out[NC];
__constant__ int c_scalar;
__constant__ float c_arr[NC];
__constant__ Params c_params;
__constant__ short c_init[4] = {1, -2, 3, -4};  // initialised constant
namespace flyt_ns {
__device__ unsigned long long counter;
}

__global__ void compute(void)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c_params.n)
        d_out[i] = (double)(c_arr[i] * c_params.scale) + c_params.bias +
                   (double)d_arr[i % ND] + c_scalar;
    if (i == 0) {
        d_scalar = c_scalar * 2 + c_init[1] + c_params.tag[4];
        atomicAdd(&flyt_ns::counter, 1ull);
    }
}

int main(void)
{
    double t0 = now_s();

    // ---- sizes
    size_t sz;
    CHECK(cudaGetSymbolSize(&sz, d_scalar));
    printf("size d_scalar = %zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, d_arr));
    printf("size d_arr = %zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, d_out));
    printf("size d_out = %zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, c_arr));
    printf("size c_arr = %zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, c_params));
    printf("size c_params = %zu\n", sz);
    CHECK(cudaGetSymbolSize(&sz, flyt_ns::counter));
    printf("size flyt_ns::counter = %zu\n", sz);

    // ---- initial values from the module image
    {
        int v = 0;
        short ci[4] = {0, 0, 0, 0};
        CHECK(cudaMemcpyFromSymbol(&v, d_initialised, sizeof v));
        CHECK(cudaMemcpyFromSymbol(ci, c_init, sizeof ci));
        printf("d_initialised = %d, c_init = %d %d %d %d\n", v, ci[0], ci[1], ci[2], ci[3]);
        expect(v == 12345 && ci[0] == 1 && ci[1] == -2 && ci[2] == 3 && ci[3] == -4,
               "initialised symbols");
    }

    // ---- host data
    static float h_c[NC], h_d[ND], h_back[NC];
    unsigned int x = 99991u;
    for (int i = 0; i < NC; i++) {
        x = x * 1664525u + 1013904223u;
        h_c[i] = (float)((int)(x >> 9) % 2000) / 16.0f;
    }
    for (int i = 0; i < ND; i++) {
        x = x * 1664525u + 1013904223u;
        h_d[i] = (float)((int)(x >> 12) % 500) / 4.0f;
    }

    // ---- constant array: whole copy, then partial copy with an offset
    CHECK(cudaMemcpyToSymbol(c_arr, h_c, sizeof h_c));
    static float patch[50];
    for (int i = 0; i < 50; i++)
        patch[i] = -1.0f - i;
    CHECK(cudaMemcpyToSymbol(c_arr, patch, sizeof patch, 100 * sizeof(float)));
    memcpy(h_c + 100, patch, sizeof patch);
    CHECK(cudaMemcpyFromSymbol(h_back, c_arr, sizeof h_back));
    expect(memcmp(h_back, h_c, sizeof h_c) == 0, "cudaMemcpyToSymbol constant array with offset");
    // read back only a window with an offset
    float win[10];
    CHECK(cudaMemcpyFromSymbol(win, c_arr, sizeof win, 95 * sizeof(float)));
    expect(memcmp(win, h_c + 95, sizeof win) == 0, "cudaMemcpyFromSymbol with offset");

    // ---- scalars and struct
    int cs = 17;
    CHECK(cudaMemcpyToSymbol(c_scalar, &cs, sizeof cs));
    Params hp;
    memset(&hp, 0, sizeof hp);
    hp.n = NC;
    hp.scale = 0.5f;
    hp.bias = 1000.25;
    memcpy(hp.tag, "ABCDE", 5);
    CHECK(cudaMemcpyToSymbol(c_params, &hp, sizeof hp, 0, cudaMemcpyHostToDevice));
    unsigned long long zero = 0;
    CHECK(cudaMemcpyToSymbol(flyt_ns::counter, &zero, sizeof zero));

    // ---- device array through its symbol address (cudaMemcpy) and D2D ToSymbol
    float *d_arr_ptr = NULL;
    CHECK(cudaGetSymbolAddress((void **)&d_arr_ptr, d_arr));
    expect(d_arr_ptr != NULL, "cudaGetSymbolAddress(d_arr) non-null");
    CHECK(cudaMemcpy(d_arr_ptr, h_d, sizeof h_d, cudaMemcpyHostToDevice));
    {
        // copy elements 10..19 from a temporary device buffer to d_arr[200..209]
        float *tmp;
        CHECK(cudaMalloc(&tmp, 10 * sizeof(float)));
        float ten[10];
        for (int i = 0; i < 10; i++)
            ten[i] = 0.75f * i;
        CHECK(cudaMemcpy(tmp, ten, sizeof ten, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpyToSymbol(d_arr, tmp, sizeof ten, 200 * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
        memcpy(h_d + 200, ten, sizeof ten);
        // and D2D FromSymbol back into tmp from d_arr[0..9]
        CHECK(cudaMemcpyFromSymbol(tmp, d_arr, sizeof ten, 0, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(ten, tmp, sizeof ten, cudaMemcpyDeviceToHost));
        expect(memcmp(ten, h_d, sizeof ten) == 0, "cudaMemcpyFromSymbol D2D");
        CHECK(cudaFree(tmp));
    }
    // symbol address of a __constant__ variable is usable with cudaMemcpy
    {
        int *c_scalar_ptr = NULL;
        CHECK(cudaGetSymbolAddress((void **)&c_scalar_ptr, c_scalar));
        int back = 0;
        CHECK(cudaMemcpy(&back, c_scalar_ptr, sizeof back, cudaMemcpyDeviceToHost));
        expect(back == 17, "cudaGetSymbolAddress(__constant__) + cudaMemcpy");
    }

    // ---- kernel
    compute<<<(NC + 127) / 128, 128>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    static double h_out[NC];
    CHECK(cudaMemcpyFromSymbol(h_out, d_out, sizeof h_out));
    int ok = 1;
    for (int i = 0; i < NC; i++) {
        double want = (double)(h_c[i] * hp.scale) + hp.bias + (double)h_d[i % ND] + cs;
        if (h_out[i] != want) {
            printf("mismatch at %d: got %.17g want %.17g\n", i, h_out[i], want);
            ok = 0;
            break;
        }
    }
    expect(ok, "kernel reading __constant__ and __device__ variables");
    int ds = 0;
    unsigned long long cnt = 0;
    CHECK(cudaMemcpyFromSymbol(&ds, d_scalar, sizeof ds));
    CHECK(cudaMemcpyFromSymbol(&cnt, flyt_ns::counter, sizeof cnt));
    printf("d_scalar = %d, counter = %llu\n", ds, cnt);
    expect(ds == 17 * 2 - 2 + 'E' && cnt == 1, "kernel wrote __device__ scalars");

    // ---- async variants
    {
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        float *pin;
        CHECK(cudaMallocHost(&pin, NC * sizeof(float)));
        for (int i = 0; i < NC; i++)
            pin[i] = (float)(i * 3) - 7.0f;
        CHECK(cudaMemcpyToSymbolAsync(c_arr, pin, NC * sizeof(float), 0,
                                      cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyToSymbolAsync(d_arr, pin + 10, 20 * sizeof(float),
                                      30 * sizeof(float), cudaMemcpyHostToDevice, s));
        compute<<<(NC + 127) / 128, 128, 0, s>>>();
        CHECK(cudaGetLastError());
        double *pout;
        CHECK(cudaMallocHost(&pout, NC * sizeof(double)));
        CHECK(cudaMemcpyFromSymbolAsync(pout, d_out, NC * sizeof(double), 0,
                                        cudaMemcpyDeviceToHost, s));
        float *pd;
        CHECK(cudaMallocHost(&pd, ND * sizeof(float)));
        CHECK(cudaMemcpyFromSymbolAsync(pd, d_arr, ND * sizeof(float), 0,
                                        cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        memcpy(h_d + 30, pin + 10, 20 * sizeof(float));
        ok = memcmp(pd, h_d, ND * sizeof(float)) == 0;
        for (int i = 0; i < NC && ok; i++) {
            double want = (double)(pin[i] * hp.scale) + hp.bias + (double)h_d[i % ND] + cs;
            if (pout[i] != want)
                ok = 0;
        }
        expect(ok, "cudaMemcpyToSymbolAsync / FromSymbolAsync + kernel in stream");
        CHECK(cudaMemcpyFromSymbol(&cnt, flyt_ns::counter, sizeof cnt));
        expect(cnt == 2, "counter incremented twice");
        CHECK(cudaFreeHost(pin));
        CHECK(cudaFreeHost(pout));
        CHECK(cudaFreeHost(pd));
        CHECK(cudaStreamDestroy(s));
    }

    // ---- errors: out-of-range offset/size
    {
        float big[ND + 1];
        memset(big, 0, sizeof big);
        cudaError_t e = cudaMemcpyToSymbol(d_arr, big, sizeof big);
        printf("ToSymbol past the end: %s\n", cudaGetErrorName(e));
        printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
        e = cudaMemcpyFromSymbol(big, d_arr, 4, ND * sizeof(float));
        printf("FromSymbol at offset == size: %s\n", cudaGetErrorName(e));
        printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
        printf("cudaGetLastError again: %s\n", cudaGetErrorName(cudaGetLastError()));
    }

    fprintf(stderr, "symbols: %.3f s\n", now_s() - t0);
    printf("%s symbols\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
