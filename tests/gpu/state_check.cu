// Checkpoint and restore on a real GPU (tests/gpu/state_check.sh runs it).
//
//   state_check fill FILE    allocates buffers of 1 KiB to 64 MiB, fills them
//                            with a kernel, writes their addresses, sizes and
//                            checksums to FILE, prints READY and waits for
//                            stdin to close (the checkpoint is taken then)
//   state_check verify FILE  in a restored session: checks each buffer at its
//                            address from FILE with a kernel and a copy
//
// fill also makes two 2D float arrays, a texture object on the first and a
// surface object on the second, writes the surface from the texture with a
// kernel and sums what a second kernel reads of both; verify runs both
// kernels again with the values FILE names (the restored server made the
// objects again, maybe with other values: it translates the old ones in
// kernel parameters) and requires the same sum, before and after writing
// the surface again.
//
// Prints PASS or FAIL lines; exit 0 when every check passed. With
// STATE_CHECK_NO_KERNELS=1 buffers are filled and checked by copies alone
// (flyt-server's host backend runs no kernels: the script's logic in CI).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUF 6
static const size_t sizes[NBUF] = {1 << 10, (4 << 10) + 100, 1 << 20, (3 << 20) + 7, 16 << 20, 64 << 20};

__device__ __host__ unsigned char value(int b, size_t i)
{
    return (unsigned char)(i * 2654435761u + (size_t)b * 97u + (i >> 12));
}

__global__ void fill(unsigned char *p, size_t n, int b)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = value(b, i);
}

__global__ void check(const unsigned char *p, size_t n, int b, unsigned long long *bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != value(b, i))
            atomicAdd(bad, 1ull);
}

#define TW 64
#define TH 32

// the surface gets 3 x the texture + x
__global__ void tex_to_surf(cudaTextureObject_t t, cudaSurfaceObject_t s)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < TW && y < TH)
        surf2Dwrite(tex2D<float>(t, x + 0.5f, y + 0.5f) * 3.0f + (float)x, s, x * (int)sizeof(float), y);
}

// out gets the surface minus the texture: 2 x the texture + x
__global__ void read_both(cudaTextureObject_t t, cudaSurfaceObject_t s, float *out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < TW && y < TH)
        out[y * TW + x] = surf2Dread<float>(s, x * (int)sizeof(float), y) - tex2D<float>(t, x + 0.5f, y + 0.5f);
}

static unsigned long long checksum(const unsigned char *h, size_t n)
{
    unsigned long long s = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++)
        s = (s ^ h[i]) * 1099511628211ull;
    return s;
}

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                               \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

static int no_kernels(void)
{
    const char *e = getenv("STATE_CHECK_NO_KERNELS");
    return e && strcmp(e, "1") == 0;
}

// read_both's output, summed (sum 0: the kernel failed)
static unsigned long long read_sum(cudaTextureObject_t t, cudaSurfaceObject_t s)
{
    float *out, host[TW * TH];
    dim3 block(16, 16), grid(TW / 16, TH / 16);
    if (cudaMalloc(&out, sizeof host) != cudaSuccess)
        return 0;
    read_both<<<grid, block>>>(t, s, out);
    cudaError_t e = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(out);
    return e == cudaSuccess ? checksum((const unsigned char *)host, sizeof host) : 0;
}

static int surf_write(cudaTextureObject_t t, cudaSurfaceObject_t s)
{
    dim3 block(16, 16), grid(TW / 16, TH / 16);
    tex_to_surf<<<grid, block>>>(t, s);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return 0;
}

// The arrays, the texture and the surface; with kernels, the surface
// written and the sum read; "tex T surf S sum N" to f.
static int make_textures(FILE *f)
{
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t in, out;
    CK(cudaMallocArray(&in, &fd, TW, TH));
    CK(cudaMallocArray(&out, &fd, TW, TH, cudaArraySurfaceLoadStore));
    static float host[TW * TH];
    for (int i = 0; i < TW * TH; i++)
        host[i] = (float)((i * 37) % 101) * 0.25f;
    CK(cudaMemcpy2DToArray(in, 0, 0, host, TW * sizeof(float), TW * sizeof(float), TH,
                           cudaMemcpyHostToDevice));
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeArray;
    res.res.array.array = in;
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t;
    CK(cudaCreateTextureObject(&t, &res, &td, NULL));
    res.res.array.array = out;
    cudaSurfaceObject_t s;
    CK(cudaCreateSurfaceObject(&s, &res));
    unsigned long long sum = 0;
    if (!no_kernels()) {
        if (surf_write(t, s))
            return 1;
        sum = read_sum(t, s);
    }
    fprintf(f, "tex %llx surf %llx sum %llx\n", (unsigned long long)t, (unsigned long long)s, sum);
    return 0;
}

// The restored texture and surface, by the values the program held.
static int check_textures(FILE *f)
{
    unsigned long long t, s, sum;
    if (fscanf(f, " tex %llx surf %llx sum %llx", &t, &s, &sum) != 3) {
        printf("FAIL no texture line\n");
        return 1;
    }
    if (no_kernels())
        return 0;
    unsigned long long before = read_sum(t, s);
    if (surf_write(t, s))
        return 1;
    unsigned long long after = read_sum(t, s);
    int ok = sum != 0 && before == sum && after == sum;
    printf("%s texture and surface objects: a kernel reads the same %s the restore and after "
           "writing the surface again\n", ok ? "PASS" : "FAIL", ok ? "after" : "NOT after");
    return !ok;
}

static int do_fill(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("FAIL cannot write %s\n", path);
        return 1;
    }
    unsigned char *host = (unsigned char *)malloc(sizes[NBUF - 1]);
    for (int b = 0; b < NBUF; b++) {
        void *p;
        CK(cudaMalloc(&p, sizes[b]));
        if (no_kernels()) {
            for (size_t i = 0; i < sizes[b]; i++)
                host[i] = value(b, i);
            CK(cudaMemcpy(p, host, sizes[b], cudaMemcpyHostToDevice));
        } else {
            fill<<<256, 256>>>((unsigned char *)p, sizes[b], b);
            CK(cudaGetLastError());
        }
        CK(cudaMemcpy(host, p, sizes[b], cudaMemcpyDeviceToHost));
        fprintf(f, "%d %llx %zu %llx\n", b, (unsigned long long)(uintptr_t)p, sizes[b],
                checksum(host, sizes[b]));
    }
    if (make_textures(f))
        return 1;
    fclose(f);
    free(host);
    CK(cudaDeviceSynchronize());
    printf("READY\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) // until the script closes stdin
        ;
    return 0;
}

static int do_verify(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("FAIL cannot read %s\n", path);
        return 1;
    }
    unsigned char *host = (unsigned char *)malloc(sizes[NBUF - 1]);
    unsigned long long *bad;
    CK(cudaMalloc(&bad, sizeof *bad));
    int failed = 0, b;
    unsigned long long addr, sum;
    size_t n;
    while (fscanf(f, "%d %llx %zu %llx", &b, &addr, &n, &sum) == 4) {
        unsigned long long nbad = 0;
        if (!no_kernels()) {
            CK(cudaMemset(bad, 0, sizeof *bad));
            check<<<256, 256>>>((const unsigned char *)(uintptr_t)addr, n, b, bad);
            CK(cudaGetLastError());
            CK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        }
        // the copy through the driver API: the address is not this process's allocation
        CUresult r = cuMemcpyDtoH(host, (CUdeviceptr)addr, n);
        int ok = nbad == 0 && r == CUDA_SUCCESS && checksum(host, n) == sum;
        printf("%s buffer %d at 0x%llx (%zu bytes): kernel found %llu wrong, copy %d, checksum %s\n",
               ok ? "PASS" : "FAIL", b, addr, n, nbad, (int)r,
               r == CUDA_SUCCESS && checksum(host, n) == sum ? "equal" : "differs");
        failed |= !ok;
        // a kernel writing to it works too, then the buffer frees as the program's own
        if (!no_kernels())
            fill<<<256, 256>>>((unsigned char *)(uintptr_t)addr, n, b);
        CK(cudaDeviceSynchronize());
        cudaError_t e = cudaFree((void *)(uintptr_t)addr);
        if (e != cudaSuccess)
            printf("FAIL cudaFree of restored buffer %d: %s\n", b, cudaGetErrorString(e));
        failed |= e != cudaSuccess;
    }
    failed |= check_textures(f);
    fclose(f);
    free(host);
    printf("%s\n", failed ? "FAIL" : "PASS");
    return failed;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "fill") && strcmp(argv[1], "verify"))) {
        fprintf(stderr, "usage: %s fill|verify FILE\n", argv[0]);
        return 2;
    }
    return strcmp(argv[1], "fill") == 0 ? do_fill(argv[2]) : do_verify(argv[2]);
}
