// A long-running CUDA program for tests/gpu/migrate_check.sh: it keeps
// buffers of many sizes (small ones sharing a chunk, large ones, a pitched
// one) and updates them with kernels step after step, printing a checksum
// of every buffer every 10 steps. Run natively and through Flyt with its
// session moved mid-run, the printed lines must be identical.
// usage: migrate_loop [STEPS] [SLEEP_MS]
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <unistd.h>
#include <cuda_runtime.h>

#define CK(x)                                                                           \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

__global__ void step_kernel(uint32_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = p[i] * 1664525u + 1013904223u + salt + (uint32_t)i;
}

__global__ void sum_kernel(const uint32_t *p, size_t n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += p[i] ^ (uint32_t)(i * 2654435761u);
    atomicAdd(out, s);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 200, sleep_ms = argc > 2 ? atoi(argv[2]) : 20;
    const size_t sizes[] = {256, 1000, 4096, 100000, (1u << 20) + 4, (3u << 20) + 100, 64u << 20};
    const int nbuf = sizeof sizes / sizeof sizes[0];
    uint32_t *buf[nbuf + 1];
    size_t words[nbuf + 1];
    for (int b = 0; b < nbuf; b++) {
        CK(cudaMalloc(&buf[b], sizes[b]));
        words[b] = sizes[b] / 4;
        CK(cudaMemset(buf[b], b + 1, sizes[b]));
    }
    size_t pitch;
    CK(cudaMallocPitch(&buf[nbuf], &pitch, 3000, 50));
    words[nbuf] = pitch * 50 / 4;
    CK(cudaMemset(buf[nbuf], 7, pitch * 50));
    unsigned long long *sum;
    CK(cudaMalloc(&sum, sizeof *sum));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int t = 1; t <= steps; t++) {
        for (int b = 0; b <= nbuf; b++)
            step_kernel<<<64, 256, 0, s>>>(buf[b], words[b], (uint32_t)t);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        if (t % 10 == 0) {
            printf("step %d:", t);
            for (int b = 0; b <= nbuf; b++) {
                unsigned long long h = 0;
                CK(cudaMemsetAsync(sum, 0, sizeof *sum, s));
                sum_kernel<<<64, 256, 0, s>>>(buf[b], words[b], sum);
                CK(cudaMemcpyAsync(&h, sum, sizeof h, cudaMemcpyDeviceToHost, s));
                CK(cudaStreamSynchronize(s));
                printf(" %llx", h);
            }
            printf("\n");
            fflush(stdout);
        }
        usleep(sleep_ms * 1000);
    }
    for (int b = 0; b <= nbuf; b++)
        CK(cudaFree(buf[b]));
    CK(cudaFree(sum));
    CK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}
