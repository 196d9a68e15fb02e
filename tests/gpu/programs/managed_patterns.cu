// Managed memory the way programs commonly use it: the tutorial "add"
// program, host and device taking turns for many steps, cuBLAS on managed
// matrices, two streams each on its own managed buffers, prefetches to the
// device and back, fread() straight into managed memory, and a struct of
// managed pointers read by a kernel. Every value is exact and printed.
#include <cublas_v2.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

__global__ void add(int n, const float *x, float *y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = x[i] + y[i];
}

__global__ void bump(int *a, int n, int by)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        a[i] += by;
}

__global__ void sum_bytes(const unsigned char *p, int n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += p[i];
    atomicAdd(out, s);
}

struct pair {
    int *first, *second;
    int n;
};

__global__ void join(const pair *p, int *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p->n)
        out[i] = p->first[i] * 1000 + p->second[i];
}

static void tutorial_add(void)
{
    int n = 1 << 20;
    float *x, *y;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    CHECK(cudaMallocManaged(&y, n * sizeof(float)));
    for (int i = 0; i < n; i++) {
        x[i] = 1.0f;
        y[i] = 2.0f;
    }
    add<<<(n + 255) / 256, 256>>>(n, x, y);
    CHECK(cudaDeviceSynchronize());
    float max_error = 0;
    for (int i = 0; i < n; i++)
        max_error = fmaxf(max_error, fabsf(y[i] - 3.0f));
    printf("add: max error %g\n", max_error);
    expect(max_error == 0, "the tutorial's add");
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

static void turns(void)
{
    const int n = 300000, steps = 40;
    int *a;
    CHECK(cudaMallocManaged(&a, n * sizeof(int)));
    memset(a, 0, n * sizeof(int));
    long long host_added = 0;
    for (int s = 0; s < steps; s++) {
        bump<<<128, 256>>>(a, n, s + 1);
        bump<<<128, 256>>>(a, n, 1); // device work after device work
        CHECK(cudaDeviceSynchronize());
        a[s * 7] += 1000; // the host's turn
        host_added += 1000;
    }
    long long total = 0;
    for (int i = 0; i < n; i++)
        total += a[i];
    long long want = (long long)n * (steps * (steps + 1) / 2 + steps) + host_added;
    printf("turns: %d steps, total %lld\n", steps, total);
    expect(total == want, "host and device taking turns");
    CHECK(cudaFree(a));
}

static void blas(void)
{
    const int m = 64, k = 48, nn = 40;
    float *A, *B, *C;
    CHECK(cudaMallocManaged(&A, m * k * sizeof(float)));
    CHECK(cudaMallocManaged(&B, k * nn * sizeof(float)));
    CHECK(cudaMallocManaged(&C, m * nn * sizeof(float)));
    for (int i = 0; i < m * k; i++)
        A[i] = (float)((i * 7) % 5 - 2);
    for (int i = 0; i < k * nn; i++)
        B[i] = (float)((i * 3) % 7 - 3);
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    const float one = 1, zero = 0;
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &one, A, m, B, k, &zero, C, m));
    CHECK(cudaDeviceSynchronize());
    int wrong = 0;
    double checksum = 0;
    for (int j = 0; j < nn; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += A[p * m + i] * B[j * k + p];
            wrong += s != C[j * m + i];
            checksum += C[j * m + i] * (i + 1);
        }
    printf("sgemm on managed matrices: checksum %.0f, %d wrong\n", checksum, wrong);
    expect(wrong == 0, "cuBLAS reads and writes managed memory");
    BLAS(cublasDestroy(h));
    CHECK(cudaFree(A));
    CHECK(cudaFree(B));
    CHECK(cudaFree(C));
}

static void two_streams(void)
{
    const int n = 100000;
    int *a, *b;
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
    CHECK(cudaMallocManaged(&a, n * sizeof(int)));
    CHECK(cudaMallocManaged(&b, n * sizeof(int)));
    for (int i = 0; i < n; i++)
        a[i] = b[i] = i;
    bump<<<64, 256, 0, s1>>>(a, n, 5);
    bump<<<64, 256, 0, s2>>>(b, n, 9);
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamSynchronize(s2));
    printf("streams: a[10] %d b[10] %d\n", a[10], b[10]);
    expect(a[n - 1] == n - 1 + 5 && b[n - 1] == n - 1 + 9, "two streams on their own buffers");
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    bump<<<64, 256, 0, s1>>>(a, n, 1);
    CHECK(cudaEventRecord(done, s1));
    while (cudaEventQuery(done) == cudaErrorNotReady)
        ;
    printf("after the event: a[10] %d\n", a[10]);
    expect(a[10] == 16, "an event query that finds the work done");
    CHECK(cudaEventDestroy(done));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
}

static void prefetches(void)
{
    const int n = 1 << 18;
    int *a;
    CHECK(cudaMallocManaged(&a, n * sizeof(int)));
    for (int i = 0; i < n; i++)
        a[i] = i % 1000;
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0}, cpu = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemPrefetchAsync(a, n * sizeof(int), gpu, 0, 0));
    bump<<<128, 256>>>(a, n, 3);
    CHECK(cudaMemPrefetchAsync(a, n * sizeof(int), cpu, 0, 0));
    CHECK(cudaDeviceSynchronize());
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    printf("prefetched: sum %lld\n", s);
    expect(s == (long long)n / 1000 * 499500 + (long long)(n % 1000) * (n % 1000 - 1) / 2 +
                    3LL * n,
           "prefetches to the device and back");
    CHECK(cudaFree(a));
}

static void fread_into(void)
{
    const int n = 3 * 4096 + 123;
    char path[] = "/tmp/flyt-managed-XXXXXX";
    int fd = mkstemp(path);
    unsigned char *bytes = (unsigned char *)malloc(n);
    unsigned long long want = 0;
    for (int i = 0; i < n; i++) {
        bytes[i] = (unsigned char)(i * 31 + 7);
        want += bytes[i];
    }
    FILE *f = fdopen(fd, "w+b");
    fwrite(bytes, 1, n, f);
    rewind(f);
    unsigned char *p;
    unsigned long long *sum;
    CHECK(cudaMallocManaged(&p, n));
    CHECK(cudaMallocManaged(&sum, sizeof *sum));
    *sum = 0;
    size_t got = fread(p, 1, n, f);
    fclose(f);
    unlink(path);
    sum_bytes<<<1, 256>>>(p, n, sum);
    CHECK(cudaDeviceSynchronize());
    printf("fread into managed memory: %zu bytes, device sum %llu\n", got, *sum);
    expect(got == (size_t)n && *sum == want, "the device sees what fread() put there");
    CHECK(cudaFree(p));
    CHECK(cudaFree(sum));
    free(bytes);
}

static void pointers_in_managed(void)
{
    const int n = 512;
    pair *p;
    int *out;
    CHECK(cudaMallocManaged(&p, sizeof *p));
    CHECK(cudaMallocManaged(&p->first, n * sizeof(int)));
    CHECK(cudaMallocManaged(&p->second, n * sizeof(int)));
    CHECK(cudaMallocManaged(&out, n * sizeof(int)));
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->first[i] = i;
        p->second[i] = n - i;
    }
    join<<<(n + 127) / 128, 128>>>(p, out);
    CHECK(cudaDeviceSynchronize());
    printf("struct of managed pointers: out[1] %d out[%d] %d\n", out[1], n - 1, out[n - 1]);
    expect(out[1] == 1000 + n - 1 && out[n - 1] == (n - 1) * 1000 + 1, "a kernel follows managed pointers");
    CHECK(cudaFree(p->first));
    CHECK(cudaFree(p->second));
    CHECK(cudaFree(p));
    CHECK(cudaFree(out));
}

int main(void)
{
    int managed = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    if (!managed) {
        printf("no managed memory on this device: skipped\n");
        return 0;
    }
    tutorial_add();
    turns();
    blas();
    two_streams();
    prefetches();
    fread_into();
    pointers_in_managed();
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
