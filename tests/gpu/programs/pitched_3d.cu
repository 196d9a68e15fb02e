// pitched_3d: pitched and 3D memory in every direction, each result checked
// against the host:
//   - cudaMallocPitch + cudaMemcpy2D of every kind (host to host, host to
//     device, device to device, device to host, default), sub-rectangles at
//     offsets, cudaMemset2D of an inner rectangle; a kernel reading the rows
//     through the pitch;
//   - the same with cudaMemcpy2DAsync / cudaMemset2DAsync on a stream from
//     pinned memory;
//   - cudaMalloc3D + cudaMemcpy3D host<->device and device<->3D array
//     (cudaMalloc3DArray) with positions inside both, cudaMemcpy3DAsync,
//     cudaMemset3D and cudaMemset3DAsync of an inner box;
//   - cudaMemcpy2DToArray / FromArray (and Async), cudaMemcpy2DArrayToArray;
//   - cudaMemcpyPeer / cudaMemcpyPeerAsync and cudaMemcpy3DPeer /
//     cudaMemcpy3DPeerAsync within device 0;
//   - cudaMemcpyBatchAsync there and back (two attributes), and refused on
//     the legacy stream.
// The asynchronous calls go to a blocking stream, so that the legacy
// stream's implicit synchronisation orders them with the synchronous ones.
#include <string.h>
#include "test_util.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 11);
}

// rows of w bytes: dst (pitch dp) at (dx, dy) <- src (pitch sp) at (sx, sy)
static void host_copy2d(unsigned char *dst, size_t dp, size_t dx, size_t dy,
                        const unsigned char *src, size_t sp, size_t sx, size_t sy, size_t w,
                        size_t h)
{
    for (size_t y = 0; y < h; y++)
        memcpy(dst + (dy + y) * dp + dx, src + (sy + y) * sp + sx, w);
}

// Each thread sums one row of a pitched int matrix.
__global__ void row_sums(const char *base, size_t pitch, int width, int height, long long *out)
{
    int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= height)
        return;
    const int *row = (const int *)(base + y * pitch);
    long long s = 0;
    for (int x = 0; x < width; x++)
        s += row[x];
    out[y] = s;
}

static void two_d(cudaStream_t s, bool async)
{
    const size_t W = 1000, H = 300; // bytes x rows
    size_t pitch_a, pitch_b;
    unsigned char *da, *db;
    CHECK(cudaMallocPitch((void **)&da, &pitch_a, W, H));
    CHECK(cudaMallocPitch((void **)&db, &pitch_b, W, H));
    unsigned char *src, *ref, *back;
    if (async) {
        CHECK(cudaMallocHost((void **)&src, W * H));
        CHECK(cudaMallocHost((void **)&back, W * H));
    } else {
        src = (unsigned char *)malloc(W * H);
        back = (unsigned char *)malloc(W * H);
    }
    ref = (unsigned char *)malloc(W * H);
    fill(src, W * H, async ? 3 : 1);
    memset(ref, 0, W * H);
    memset(back, 0, W * H);

#define COPY2D(d, dp, sp_, spitch, w, h, kind)                                              \
    CHECK(async ? cudaMemcpy2DAsync(d, dp, sp_, spitch, w, h, kind, s)                       \
                : cudaMemcpy2D(d, dp, sp_, spitch, w, h, kind))
    // host to host: a 500 x 100 block at (100, 20)
    COPY2D(ref + 20 * W + 100, W, src + 20 * W + 100, W, 500, 100, cudaMemcpyHostToHost);
    // whole matrix host to device, device to device at offsets, default kind back
    COPY2D(da, pitch_a, src, W, W, H, cudaMemcpyHostToDevice);
    CHECK(async ? cudaMemset2DAsync(db, pitch_b, 0x5a, W, H, s) : cudaMemset2D(db, pitch_b, 0x5a, W, H));
    COPY2D(db + 10 * pitch_b + 30, pitch_b, da + 40 * pitch_a + 60, pitch_a, 700, 200,
           cudaMemcpyDeviceToDevice);
    CHECK(async ? cudaMemset2DAsync(db + 100 * pitch_b + 200, pitch_b, 0xc3, 50, 25, s)
                : cudaMemset2D(db + 100 * pitch_b + 200, pitch_b, 0xc3, 50, 25));
    COPY2D(back, W, db, pitch_b, W, H, cudaMemcpyDefault);
    if (async)
        CHECK(cudaStreamSynchronize(s));
#undef COPY2D
    bool hh = true;
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            bool in = y >= 20 && y < 120 && x >= 100 && x < 600;
            hh = hh && ref[y * W + x] == (in ? src[y * W + x] : 0);
        }
    // what db must hold
    memset(ref, 0x5a, W * H);
    host_copy2d(ref, W, 30, 10, src, W, 60, 40, 700, 200);
    for (size_t y = 100; y < 125; y++)
        memset(ref + y * W + 200, 0xc3, 50);
    char what[80];
    snprintf(what, sizeof what, "%s host to host sub-rectangle", async ? "cudaMemcpy2DAsync" : "cudaMemcpy2D");
    expect(hh, what);
    snprintf(what, sizeof what, "%s H2D, D2D at offsets, memset, default kind back",
             async ? "cudaMemcpy2DAsync" : "cudaMemcpy2D");
    expect(memcmp(ref, back, W * H) == 0, what);

    // a kernel walks the rows of da through its pitch (as ints)
    long long *dsums, sums[H];
    CHECK(cudaMalloc(&dsums, sizeof sums));
    row_sums<<<(H + 127) / 128, 128, 0, s>>>((const char *)da, pitch_a, (int)(W / 4), (int)H, dsums);
    CHECK(cudaMemcpyAsync(sums, dsums, sizeof sums, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool rows = true;
    for (size_t y = 0; y < H; y++) {
        long long want = 0;
        for (size_t x = 0; x < W / 4; x++) {
            int v;
            memcpy(&v, src + y * W + x * 4, 4);
            want += v;
        }
        rows = rows && sums[y] == want;
    }
    expect(rows, "a kernel reads pitched rows");
    CHECK(cudaFree(dsums));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    if (async) {
        CHECK(cudaFreeHost(src));
        CHECK(cudaFreeHost(back));
    } else {
        free(src);
        free(back);
    }
    free(ref);
}

static cudaMemcpy3DParms params3d(void)
{
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    return p;
}

// A whole device volume to packed pinned host memory (async), then waits.
static void volume_to_host(unsigned char *dst, cudaPitchedPtr src, cudaExtent ext, cudaStream_t s)
{
    cudaMemcpy3DParms p = params3d();
    p.srcPtr = src;
    p.dstPtr = make_cudaPitchedPtr(dst, ext.width, ext.width, ext.height);
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&p, s));
    CHECK(cudaStreamSynchronize(s));
}

static void three_d(cudaStream_t s)
{
    const size_t X = 96, Y = 40, Z = 12; // bytes, rows, slices
    const size_t n = X * Y * Z;
    unsigned char *h, *back, *ref;
    CHECK(cudaMallocHost((void **)&h, n));
    CHECK(cudaMallocHost((void **)&back, n));
    ref = (unsigned char *)malloc(n);
    fill(h, n, 7);
    cudaExtent ext = make_cudaExtent(X, Y, Z);
    cudaPitchedPtr dv;
    CHECK(cudaMalloc3D(&dv, ext));
    cudaArray_t arr;
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<unsigned char>();
    CHECK(cudaMalloc3DArray(&arr, &ch, ext));

    // host -> device volume, whole
    cudaMemcpy3DParms p = params3d();
    p.srcPtr = make_cudaPitchedPtr(h, X, X, Y);
    p.dstPtr = dv;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    // device volume box at (16, 4, 2) -> array at (8, 10, 5), 48 x 20 x 6
    unsigned char *zeros = (unsigned char *)calloc(n, 1);
    p = params3d();
    p.srcPtr = make_cudaPitchedPtr(zeros, X, X, Y);
    p.dstArray = arr;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p)); // the array starts as zeros
    p = params3d();
    p.srcPtr = dv;
    p.srcPos = make_cudaPos(16, 4, 2);
    p.dstArray = arr;
    p.dstPos = make_cudaPos(8, 10, 5);
    p.extent = make_cudaExtent(48, 20, 6);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));
    // array -> device volume (async), whole, after an inner memset of the volume
    CHECK(cudaMemset3DAsync(dv, 0x77, ext, s));
    p = params3d();
    p.srcArray = arr;
    p.dstPtr = dv;
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3DAsync(&p, s));
    // an inner box of the volume set to 0xee: offset pointer, pitch kept
    cudaPitchedPtr inner = dv;
    inner.ptr = (char *)dv.ptr + 3 * dv.pitch * Y + 5 * dv.pitch + 7; // z 3, y 5, x 7
    CHECK(cudaMemset3DAsync(inner, 0xee, make_cudaExtent(10, 6, 4), s));
    volume_to_host(back, dv, ext, s);

    memset(ref, 0, n);
    for (size_t z = 0; z < 6; z++)
        for (size_t y = 0; y < 20; y++)
            memcpy(ref + ((5 + z) * Y + 10 + y) * X + 8, h + ((2 + z) * Y + 4 + y) * X + 16, 48);
    for (size_t z = 0; z < 4; z++)
        for (size_t y = 0; y < 6; y++)
            memset(ref + ((3 + z) * Y + 5 + y) * X + 7, 0xee, 10);
    expect(memcmp(ref, back, n) == 0,
           "cudaMemcpy3D host/device/3D array with positions, cudaMemset3D[Async] of a box");

    // array -> host directly, a box
    unsigned char box[6 * 20 * 48];
    p = params3d();
    p.srcArray = arr;
    p.srcPos = make_cudaPos(8, 10, 5);
    p.dstPtr = make_cudaPitchedPtr(box, 48, 48, 20);
    p.extent = make_cudaExtent(48, 20, 6);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    bool ok = true;
    for (size_t z = 0; z < 6; z++)
        for (size_t y = 0; y < 20; y++)
            ok = ok && memcmp(box + (z * 20 + y) * 48, h + ((2 + z) * Y + 4 + y) * X + 16, 48) == 0;
    expect(ok, "cudaMemcpy3D of an array box to the host");

    // peer copies within device 0: volume box to a second volume, 1D peer copies
    cudaPitchedPtr dv2;
    CHECK(cudaMalloc3D(&dv2, ext));
    CHECK(cudaMemset3D(dv2, 0, ext));
    p = params3d();
    p.srcPtr = make_cudaPitchedPtr(h, X, X, Y);
    p.dstPtr = dv;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaMemcpy3DPeerParms pp;
    memset(&pp, 0, sizeof pp);
    pp.srcPtr = dv;
    pp.srcPos = make_cudaPos(4, 2, 1);
    pp.srcDevice = 0;
    pp.dstPtr = dv2;
    pp.dstPos = make_cudaPos(0, 0, 0);
    pp.dstDevice = 0;
    pp.extent = make_cudaExtent(32, 8, 3);
    CHECK(cudaMemcpy3DPeer(&pp));
    pp.dstPos = make_cudaPos(40, 20, 6);
    CHECK(cudaMemcpy3DPeerAsync(&pp, s));
    volume_to_host(back, dv2, ext, s);
    memset(ref, 0, n);
    for (size_t z = 0; z < 3; z++)
        for (size_t y = 0; y < 8; y++) {
            const unsigned char *from = h + ((1 + z) * Y + 2 + y) * X + 4;
            memcpy(ref + (z * Y + y) * X, from, 32);
            memcpy(ref + ((6 + z) * Y + 20 + y) * X + 40, from, 32);
        }
    expect(memcmp(ref, back, n) == 0, "cudaMemcpy3DPeer[Async] within device 0");

    unsigned char *d1, *d2;
    CHECK(cudaMalloc(&d1, n));
    CHECK(cudaMalloc(&d2, n));
    CHECK(cudaMemcpy(d1, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyPeer(d2, 0, d1, 0, n / 2));
    CHECK(cudaMemcpyPeerAsync(d2 + n / 2, 0, d1 + n / 2, 0, n - n / 2, s));
    CHECK(cudaMemcpyAsync(back, d2, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    expect(memcmp(h, back, n) == 0, "cudaMemcpyPeer[Async] within device 0");

    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(dv.ptr));
    CHECK(cudaFree(dv2.ptr));
    CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(back));
    free(ref);
    free(zeros);
}

// 2D arrays: host -> array at an offset, array -> array, array -> device ->
// host, async from pinned memory.
static void arrays_2d(cudaStream_t s)
{
    const size_t W = 64, H = 48; // floats x rows
    cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
    cudaArray_t a, b;
    CHECK(cudaMallocArray(&a, &ch, W, H));
    CHECK(cudaMallocArray(&b, &ch, W, H));
    float *h, *back;
    CHECK(cudaMallocHost((void **)&h, W * H * sizeof(float)));
    CHECK(cudaMallocHost((void **)&back, W * H * sizeof(float)));
    for (size_t i = 0; i < W * H; i++)
        h[i] = (float)i * 0.5f;
    CHECK(cudaMemcpy2DToArray(a, 0, 0, h, W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArrayAsync(b, 0, 0, h, W * sizeof(float), W * sizeof(float), H,
                                   cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    // a's 16 x 8 block at (8, 4) into b at (40, 30)
    CHECK(cudaMemcpy2DArrayToArray(b, 40 * sizeof(float), 30, a, 8 * sizeof(float), 4,
                                   16 * sizeof(float), 8, cudaMemcpyDeviceToDevice));
    float *dpitched;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&dpitched, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2DFromArray(dpitched, pitch, b, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2DAsync(back, W * sizeof(float), dpitched, pitch, W * sizeof(float), H,
                            cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            bool in = x >= 40 && x < 56 && y >= 30 && y < 38;
            float want = in ? h[(y - 30 + 4) * W + (x - 40 + 8)] : h[y * W + x];
            ok = ok && back[y * W + x] == want;
        }
    expect(ok, "cudaMemcpy2DToArray[Async], cudaMemcpy2DArrayToArray, cudaMemcpy2DFromArray");
    memset(back, 0, W * H * sizeof(float));
    CHECK(cudaMemcpy2DFromArrayAsync(back, W * sizeof(float), a, 0, 0, W * sizeof(float), H,
                                     cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    expect(memcmp(back, h, W * H * sizeof(float)) == 0, "cudaMemcpy2DFromArrayAsync to pinned memory");
    CHECK(cudaFree(dpitched));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(back));
}

// cudaMemcpyBatchAsync: 8 host buffers to 8 device buffers in one batch
// under two attributes, then back in a second batch.
static void batch_copies(cudaStream_t s)
{
    enum { K = 8, N = 1 << 16 };
    unsigned char *h, *back, *d[K];
    CHECK(cudaMallocHost((void **)&h, K * N));
    CHECK(cudaMallocHost((void **)&back, K * N));
    fill(h, K * N, 17);
    memset(back, 0, K * N);
    void *dsts[K], *srcs[K];
    size_t sizes[K];
    for (int i = 0; i < K; i++) {
        CHECK(cudaMalloc((void **)&d[i], N));
        dsts[i] = d[i];
        srcs[i] = h + i * N;
        sizes[i] = N - i * 100; // each a different length
    }
    cudaMemcpyAttributes attrs[2];
    memset(attrs, 0, sizeof attrs);
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    size_t idxs[2] = {0, 5};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, K, attrs, idxs, 2, s));
    for (int i = 0; i < K; i++) {
        dsts[i] = back + i * N;
        srcs[i] = d[i];
    }
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, K, attrs, idxs, 1, s));
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (int i = 0; i < K; i++)
        for (size_t j = 0; j < N; j++)
            ok = ok && back[i * N + j] == (j < sizes[i] ? h[i * N + j] : 0);
    expect(ok, "cudaMemcpyBatchAsync of 8 copies there and back");
    cudaError_t err = cudaMemcpyBatchAsync(dsts, srcs, sizes, K, attrs, idxs, 2, cudaStreamLegacy);
    printf("cudaMemcpyBatchAsync on the legacy stream -> %s\n", cudaGetErrorName(err));
    cudaGetLastError();
    for (int i = 0; i < K; i++)
        CHECK(cudaFree(d[i]));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(back));
}

int main(void)
{
    double t0 = now_s();
    cudaStream_t s;
    // a blocking stream: ordered with the synchronous calls on the legacy stream
    CHECK(cudaStreamCreate(&s));
    two_d(s, false);
    two_d(s, true);
    three_d(s);
    arrays_2d(s);
    batch_copies(s);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaDeviceSynchronize());
    fprintf(stderr, "pitched_3d: %.3f s\n", now_s() - t0);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ALL PASSED", failures);
    return failures ? 1 : 0;
}
