// CUDA arrays, textures and surfaces: 1D/2D/3D arrays of several channel
// formats, layered and cubemap arrays, a mipmapped array filled level by
// level, texture objects (point and linear filtering, normalized
// coordinates, address modes, pitch2D and linear resources), surface writes
// and reads, and copies to and from arrays of every kind. Results are exact
// integers or checksums of float bits: native and Flyt must print the same.
#include <cuda.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "test_util.h"

// ---- kernels ----

__global__ void fetch_1d(cudaTextureObject_t t, float *out, int n, float shift)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1D<float>(t, i + shift);
}

// Samples a grid of normalized coordinates from -0.5 to 1.5 (address modes matter).
__global__ void sample_2d(cudaTextureObject_t t, float4 *out, int n)
{
    int x = threadIdx.x, y = blockIdx.x;
    float u = -0.5f + 2.0f * x / (n - 1), v = -0.5f + 2.0f * y / (n - 1);
    out[y * n + x] = tex2D<float4>(t, u, v);
}

__global__ void sample_half2(cudaTextureObject_t t, float2 *out, int w, int h)
{
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float2>(t, x + 0.5f, y + 0.5f);
}

__global__ void fetch_3d(cudaTextureObject_t t, int *out, int w, int h, int d)
{
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    if (x < w)
        out[(z * h + y) * w + x] = tex3D<int>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void fetch_layered(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = threadIdx.x, y = blockIdx.x, layer = blockIdx.y;
    out[(layer * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, layer);
}

__global__ void fetch_cube(cudaTextureObject_t t, float *out)
{
    const float dir[6][3] = {{1, 0, 0}, {-1, 0, 0}, {0, 1, 0}, {0, -1, 0}, {0, 0, 1}, {0, 0, -1}};
    int f = threadIdx.x;
    if (f < 6)
        out[f] = texCubemap<float>(t, dir[f][0], dir[f][1], dir[f][2]);
}

__global__ void fetch_lod(cudaTextureObject_t t, float *out, int levels)
{
    int l = threadIdx.x;
    if (l < levels)
        out[l] = tex2DLod<float>(t, 0.5f, 0.5f, (float)l);
}

__global__ void fetch_pitch2d(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

__global__ void fetch_linear(cudaTextureObject_t t, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1Dfetch<int>(t, i);
}

__global__ void surf_write(cudaSurfaceObject_t s, int w, int h)
{
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h)
        surf2Dwrite(x * 1000 + y, s, x * (int)sizeof(int), y);
}

__global__ void surf_add(cudaSurfaceObject_t s, int w, int h, int add)
{
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) {
        int v = surf2Dread<int>(s, x * (int)sizeof(int), y);
        surf2Dwrite(v + add, s, x * (int)sizeof(int), y);
    }
}

// ---- helpers ----

static uint32_t bits_sum(const void *p, size_t bytes)
{
    const uint32_t *w = (const uint32_t *)p;
    uint32_t sum = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        sum = sum * 31u + w[i];
    return sum;
}

static cudaTextureObject_t make_tex(const cudaResourceDesc *res, cudaTextureAddressMode mode,
                                    cudaTextureFilterMode filter, cudaTextureReadMode read,
                                    int normalized)
{
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
    td.filterMode = filter;
    td.readMode = read;
    td.normalizedCoords = normalized;
    td.borderColor[0] = 0.25f;
    td.borderColor[3] = 1.0f;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, res, &td, NULL));
    return t;
}

static cudaResourceDesc array_res(cudaArray_t a)
{
    cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a;
    return r;
}

// ---- tests ----

static void test_1d_float(void)
{
    enum { N = 300 };
    float host[N], out[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)(i * 3 % 17) - 4.0f;
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &cd, N, 0));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, host, N * 4, N * 4, 1, cudaMemcpyHostToDevice));
    cudaResourceDesc res = array_res(a);
    float *d;
    CHECK(cudaMalloc(&d, N * 4));
    cudaTextureObject_t point = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    fetch_1d<<<(N + 127) / 128, 128>>>(point, d, N, 0.5f);
    CHECK(cudaMemcpy(out, d, N * 4, cudaMemcpyDeviceToHost));
    expect(memcmp(out, host, sizeof out) == 0, "1D float array, point filtering reads every element");
    cudaTextureObject_t lin = make_tex(&res, cudaAddressModeClamp, cudaFilterModeLinear, cudaReadModeElementType, 0);
    fetch_1d<<<(N + 127) / 128, 128>>>(lin, d, N, 0.75f);
    CHECK(cudaMemcpy(out, d, N * 4, cudaMemcpyDeviceToHost));
    printf("1D linear filtering checksum %08x\n", bits_sum(out, sizeof out));
    CHECK(cudaDestroyTextureObject(point));
    CHECK(cudaDestroyTextureObject(lin));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
}

static void test_2d_uchar4(void)
{
    enum { W = 24, H = 16, S = 32 };
    static uchar4 host[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = make_uchar4(x * 10, y * 15, (x ^ y) * 7, 255 - x - y);
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<uchar4>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &cd, W, H));
    // device -> array, through a pitched allocation
    void *dp;
    size_t pitch;
    CHECK(cudaMallocPitch(&dp, &pitch, W * 4, H));
    CHECK(cudaMemcpy2D(dp, pitch, host, W * 4, W * 4, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, dp, pitch, W * 4, H, cudaMemcpyDeviceToDevice));
    cudaResourceDesc res = array_res(a);
    float4 *d;
    static float4 out[S * S];
    CHECK(cudaMalloc(&d, sizeof out));
    const cudaTextureAddressMode modes[] = {cudaAddressModeWrap, cudaAddressModeClamp,
                                            cudaAddressModeMirror, cudaAddressModeBorder};
    const char *names[] = {"wrap", "clamp", "mirror", "border"};
    for (int m = 0; m < 4; m++)
        for (int f = 0; f < 2; f++) {
            cudaTextureObject_t t = make_tex(&res, modes[m], f ? cudaFilterModeLinear : cudaFilterModePoint,
                                             cudaReadModeNormalizedFloat, 1);
            sample_2d<<<S, S>>>(t, d, S);
            CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
            printf("2D uchar4 normalized, %s, %s filtering: checksum %08x\n", names[m],
                   f ? "linear" : "point", bits_sum(out, sizeof out));
            CHECK(cudaDestroyTextureObject(t));
        }
    // array -> device -> host, array -> array -> host
    static uchar4 back[H][W];
    CHECK(cudaMemset2D(dp, pitch, 0, W * 4, H));
    CHECK(cudaMemcpy2DFromArray(dp, pitch, a, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2D(back, W * 4, dp, pitch, W * 4, H, cudaMemcpyDeviceToHost));
    expect(memcmp(back, host, sizeof back) == 0, "2D uchar4: device -> array -> device");
    cudaArray_t b;
    CHECK(cudaMallocArray(&b, &cd, W, H));
    CHECK(cudaMemcpy2DArrayToArray(b, 4, 2, a, 0, 0, (W - 1) * 4, H - 2, cudaMemcpyDeviceToDevice));
    memset(back, 0, sizeof back);
    CHECK(cudaMemcpy2DFromArray(back, W * 4, b, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    int same = 1;
    for (int y = 0; y < H - 2; y++)
        same &= memcmp(&back[y + 2][1], &host[y][0], (W - 1) * 4) == 0;
    expect(same, "2D uchar4: array -> array at an offset");
    CHECK(cudaFree(dp));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
}

static void test_half2(void)
{
    enum { W = 16, H = 8 };
    static __half2 host[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = __floats2half2_rn(x * 0.25f - 1.0f, y * 0.5f);
    cudaChannelFormatDesc cd = cudaCreateChannelDescHalf2();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &cd, W, H));
    __half2 *pinned;
    CHECK(cudaMallocHost(&pinned, sizeof host));
    memcpy(pinned, host, sizeof host);
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, pinned, W * 4, W * 4, H, cudaMemcpyHostToDevice, st));
    CHECK(cudaStreamSynchronize(st));
    cudaResourceDesc res = array_res(a);
    cudaTextureObject_t t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    float2 *d;
    static float2 out[H * W];
    CHECK(cudaMalloc(&d, sizeof out));
    sample_half2<<<H, W>>>(t, d, W, H);
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    int same = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            same &= out[y * W + x].x == x * 0.25f - 1.0f && out[y * W + x].y == y * 0.5f;
    expect(same, "half2 array read as float2");
    memset(pinned, 0, sizeof host);
    CHECK(cudaMemcpy2DFromArrayAsync(pinned, W * 4, a, 0, 0, W * 4, H, cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    expect(memcmp(pinned, host, sizeof host) == 0, "half2 array -> pinned host, async");
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
}

static cudaMemcpy3DParms host_to_array(void *host, size_t w_bytes, size_t h, cudaArray_t a,
                                       cudaExtent extent, cudaPos dst_pos)
{
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(host, w_bytes, w_bytes, h);
    p.dstArray = a;
    p.dstPos = dst_pos;
    p.extent = extent;
    p.kind = cudaMemcpyHostToDevice;
    return p;
}

static void test_3d_int(void)
{
    enum { W = 12, H = 8, D = 5 };
    static int host[D][H][W], out[D][H][W], box[2][3][4];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                host[z][y][x] = z * 10000 + y * 100 + x;
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<int>();
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(W, H, D)));
    cudaMemcpy3DParms p = host_to_array(host, W * 4, H, a, make_cudaExtent(W, H, D), make_cudaPos(0, 0, 0));
    CHECK(cudaMemcpy3D(&p));
    // a box at (x 3, y 2, z 1) overwritten from the host
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 4; x++)
                host[z + 1][y + 2][x + 3] = box[z][y][x] = -(z * 100 + y * 10 + x);
    p = host_to_array(box, 16, 3, a, make_cudaExtent(4, 3, 2), make_cudaPos(3, 2, 1));
    CHECK(cudaMemcpy3DAsync(&p, 0));
    cudaResourceDesc res = array_res(a);
    cudaTextureObject_t t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    int *d;
    CHECK(cudaMalloc(&d, sizeof out));
    fetch_3d<<<dim3(H, D), 32>>>(t, d, W, H, D);
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    expect(memcmp(out, host, sizeof out) == 0, "3D int array with a box at an offset, read by tex3D");
    // array -> host of a box at an offset
    static int back[2][3][4];
    memset(&p, 0, sizeof p);
    p.srcArray = a;
    p.srcPos = make_cudaPos(3, 2, 1);
    p.dstPtr = make_cudaPitchedPtr(back, 16, 4, 3);
    p.extent = make_cudaExtent(4, 3, 2);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    expect(memcmp(back, box, sizeof box) == 0, "3D array -> host of a box at an offset");
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    printf("3D array info: %zux%zux%zu, %d bits x, flags %u\n", ext.width, ext.height, ext.depth, got.x, flags);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
}

static void test_layered_and_cubemap(void)
{
    enum { W = 8, H = 8, L = 3 };
    static float host[L][H][W], out[L][H][W];
    for (int l = 0; l < L; l++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                host[l][y][x] = l * 100.0f + y * 8 + x;
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(W, H, L), cudaArrayLayered));
    cudaMemcpy3DParms p = host_to_array(host, W * 4, H, a, make_cudaExtent(W, H, L), make_cudaPos(0, 0, 0));
    CHECK(cudaMemcpy3D(&p));
    cudaResourceDesc res = array_res(a);
    cudaTextureObject_t t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    float *d;
    CHECK(cudaMalloc(&d, sizeof out));
    fetch_layered<<<dim3(H, L), W>>>(t, d, W, H);
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    expect(memcmp(out, host, sizeof out) == 0, "layered 2D array, every layer");
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeArray(a));

    static float faces[6][H][W];
    for (int f = 0; f < 6; f++)
        for (int i = 0; i < H * W; i++)
            faces[f][i / W][i % W] = f * 10 + 1.0f;
    CHECK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(W, W, 6), cudaArrayCubemap));
    p = host_to_array(faces, W * 4, H, a, make_cudaExtent(W, W, 6), make_cudaPos(0, 0, 0));
    CHECK(cudaMemcpy3D(&p));
    res = array_res(a);
    t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 1);
    float cube[6];
    fetch_cube<<<1, 32>>>(t, d);
    CHECK(cudaMemcpy(cube, d, sizeof cube, cudaMemcpyDeviceToHost));
    printf("cubemap faces +x -x +y -y +z -z: %g %g %g %g %g %g\n", cube[0], cube[1], cube[2], cube[3],
           cube[4], cube[5]);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
}

static void test_mipmap(void)
{
    enum { S = 32, LEVELS = 4 };
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaMipmappedArray_t m;
    CHECK(cudaMallocMipmappedArray(&m, &cd, make_cudaExtent(S, S, 0), LEVELS));
    static float level[S * S];
    for (int l = 0; l < LEVELS; l++) {
        cudaArray_t a;
        CHECK(cudaGetMipmappedArrayLevel(&a, m, l));
        int s = S >> l;
        for (int i = 0; i < s * s; i++)
            level[i] = (l + 1) * 1.5f;
        CHECK(cudaMemcpy2DToArray(a, 0, 0, level, s * 4, s * 4, s, cudaMemcpyHostToDevice));
        cudaExtent ext;
        CHECK(cudaArrayGetInfo(NULL, &ext, NULL, a));
        printf("mipmap level %d: %zux%zu\n", l, ext.width, ext.height);
    }
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeMipmappedArray;
    res.res.mipmap.mipmap = m;
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.mipmapFilterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    td.maxMipmapLevelClamp = LEVELS - 1;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &td, NULL));
    float *d, out[LEVELS];
    CHECK(cudaMalloc(&d, sizeof out));
    fetch_lod<<<1, 32>>>(t, d, LEVELS);
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    printf("mipmap tex2DLod levels 0..3: %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d));
    CHECK(cudaFreeMipmappedArray(m));
}

static void test_linear_resources(void)
{
    enum { W = 40, H = 10, N = 1000 };
    static float host[H][W], out[H * W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            host[y][x] = y * 0.5f + x;
    float *dp;
    size_t pitch;
    CHECK(cudaMallocPitch(&dp, &pitch, W * 4, H));
    CHECK(cudaMemcpy2D(dp, pitch, host, W * 4, W * 4, H, cudaMemcpyHostToDevice));
    cudaResourceDesc res;
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypePitch2D;
    res.res.pitch2D.devPtr = dp;
    res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    res.res.pitch2D.width = W;
    res.res.pitch2D.height = H;
    res.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    float *d;
    CHECK(cudaMalloc(&d, sizeof out));
    fetch_pitch2d<<<H, 64>>>(t, d, W, H);
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    expect(memcmp(out, host, sizeof out) == 0, "pitch2D linear texture");
    cudaResourceDesc got;
    CHECK(cudaGetTextureObjectResourceDesc(&got, t));
    expect(got.resType == cudaResourceTypePitch2D && got.res.pitch2D.devPtr == dp &&
               got.res.pitch2D.pitchInBytes == pitch,
           "the texture object's resource comes back");
    CHECK(cudaDestroyTextureObject(t));

    static int ints[N], iout[N];
    for (int i = 0; i < N; i++)
        ints[i] = i * i - 5000;
    int *di, *dout;
    CHECK(cudaMalloc(&di, sizeof ints));
    CHECK(cudaMalloc(&dout, sizeof ints));
    CHECK(cudaMemcpy(di, ints, sizeof ints, cudaMemcpyHostToDevice));
    memset(&res, 0, sizeof res);
    res.resType = cudaResourceTypeLinear;
    res.res.linear.devPtr = di;
    res.res.linear.desc = cudaCreateChannelDesc<int>();
    res.res.linear.sizeInBytes = sizeof ints;
    t = make_tex(&res, cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    fetch_linear<<<(N + 255) / 256, 256>>>(t, dout, N);
    CHECK(cudaMemcpy(iout, dout, sizeof iout, cudaMemcpyDeviceToHost));
    expect(memcmp(iout, ints, sizeof ints) == 0, "linear texture, tex1Dfetch<int>");
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(di));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(d));
}

static void test_surface(void)
{
    enum { W = 20, H = 12 };
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<int>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &cd, W, H, cudaArraySurfaceLoadStore));
    cudaResourceDesc res = array_res(a);
    cudaSurfaceObject_t s;
    CHECK(cudaCreateSurfaceObject(&s, &res));
    surf_write<<<H, 32>>>(s, W, H);
    surf_add<<<H, 32>>>(s, W, H, 7);
    static int out[H][W];
    CHECK(cudaMemcpy2DFromArray(out, W * 4, a, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    int same = 1;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            same &= out[y][x] == x * 1000 + y + 7;
    expect(same, "surf2Dwrite then surf2Dread/write, read back by a copy");
    cudaResourceDesc got;
    CHECK(cudaGetSurfaceObjectResourceDesc(&got, s));
    expect(got.resType == cudaResourceTypeArray && got.res.array.array == a, "the surface's resource");
    CHECK(cudaDestroySurfaceObject(s));
    CHECK(cudaFreeArray(a));
}

// The driver's 1D array copies, through cudaGetDriverEntryPointByVersion
// (the program does not link libcuda itself, so no cuGetErrorName).
#define DCALL(call)                                                          \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS) {                                            \
            printf("FAIL line %d: %s -> CUresult %d\n", __LINE__, #call, (int)r_); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
typedef CUresult (*htoa_fn)(CUarray, size_t, const void *, size_t);
typedef CUresult (*atoh_fn)(void *, CUarray, size_t, size_t);
typedef CUresult (*atod_fn)(CUdeviceptr, CUarray, size_t, size_t);
typedef CUresult (*dtoa_fn)(CUarray, size_t, CUdeviceptr, size_t);
typedef CUresult (*atoa_fn)(CUarray, size_t, CUarray, size_t, size_t);

static void *driver_fn(const char *name)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
    if (fn == NULL || q != cudaDriverEntryPointSuccess) {
        printf("FAIL no driver entry point %s\n", name);
        exit(1);
    }
    return fn;
}

static void test_driver_1d_copies(void)
{
    enum { W = 512, N = 1024, OFF = 64 };
    htoa_fn htoa = (htoa_fn)driver_fn("cuMemcpyHtoA");
    atoh_fn atoh = (atoh_fn)driver_fn("cuMemcpyAtoH");
    atod_fn atod = (atod_fn)driver_fn("cuMemcpyAtoD");
    dtoa_fn dtoa = (dtoa_fn)driver_fn("cuMemcpyDtoA");
    atoa_fn atoa = (atoa_fn)driver_fn("cuMemcpyAtoA");
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<ushort2>();
    cudaArray_t a, b;
    CHECK(cudaMallocArray(&a, &cd, W, 0));
    CHECK(cudaMallocArray(&b, &cd, W, 0));
    static unsigned char src[N], back[N];
    for (int i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 13 + 1);
    DCALL(htoa((CUarray)a, OFF, src, N));
    DCALL(atoh(back, (CUarray)a, OFF, N));
    expect(memcmp(src, back, N) == 0, "cuMemcpyHtoA / cuMemcpyAtoH at an offset");
    void *d;
    CHECK(cudaMalloc(&d, N));
    DCALL(atod((CUdeviceptr)d, (CUarray)a, OFF, N));
    DCALL(dtoa((CUarray)b, 0, (CUdeviceptr)d, N));
    DCALL(atoa((CUarray)a, 0, (CUarray)b, 0, N));
    memset(back, 0, N);
    DCALL(atoh(back, (CUarray)a, 0, N));
    expect(memcmp(src, back, N) == 0, "cuMemcpyAtoD, cuMemcpyDtoA, cuMemcpyAtoA");
    CUresult r = htoa((CUarray)a, W * 4 - 8, src, 16);
    printf("cuMemcpyHtoA past the end: %d\n", (int)r);
    CHECK(cudaFree(d));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
}

int main(void)
{
    double t0 = now_s();
    test_1d_float();
    test_2d_uchar4();
    test_half2();
    test_3d_int();
    test_layered_and_cubemap();
    test_mipmap();
    test_linear_resources();
    test_surface();
    test_driver_1d_copies();
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "textures_surfaces: %.3f s\n", now_s() - t0);
    printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
