// memcpy_variants: every memcpy / memset flavour of the runtime API.
//   - cudaMemcpy H2D/D2H/D2D/H2H/Default, pageable and pinned host memory
//     (cudaMallocHost, cudaHostAlloc, cudaHostRegister), sizes 1 B .. 64 MiB
//   - cudaMemcpyAsync in all directions
//   - cudaMallocPitch + cudaMemcpy2D / cudaMemcpy2DAsync in all directions
//   - cudaMalloc3D + cudaMemcpy3D / cudaMemcpy3DAsync with offsets
//   - cudaMemset / 2D / 3D and their Async variants
//   - cudaMallocAsync / cudaFreeAsync and an explicit memory pool
//   - cudaPointerGetAttributes, cudaMemGetInfo
// Every result is verified byte for byte on the host.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "test_util.h"

// deterministic byte pattern, different for every (seed, index)
static void fill(void *p, size_t n, uint32_t seed)
{
    unsigned char *b = (unsigned char *)p;
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (unsigned char)(x >> 3);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL host malloc\n");
        exit(1);
    }
    return p;
}

static const char *memtype_name(enum cudaMemoryType t)
{
    switch (t) {
    case cudaMemoryTypeUnregistered: return "Unregistered";
    case cudaMemoryTypeHost: return "Host";
    case cudaMemoryTypeDevice: return "Device";
    case cudaMemoryTypeManaged: return "Managed";
    default: return "?";
    }
}

// ------------------------------------------------------------- 1D copies
static void test_1d_sync(void)
{
    const size_t sizes[] = {1, 3, 7, 64, 1000, 4101, (1u << 20) + 3, 64u << 20};
    const int nsizes = sizeof sizes / sizeof sizes[0];
    for (int k = 0; k < nsizes; k++) {
        size_t n = sizes[k];
        unsigned char *src = (unsigned char *)xmalloc(n);
        unsigned char *dst = (unsigned char *)xmalloc(n);
        unsigned char *dst2 = (unsigned char *)xmalloc(n);
        fill(src, n, (uint32_t)k + 1);
        memset(dst, 0, n);
        void *d1, *d2;
        CHECK(cudaMalloc(&d1, n));
        CHECK(cudaMalloc(&d2, n));
        CHECK(cudaMemcpy(d1, src, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(dst, d2, n, cudaMemcpyDeviceToHost));
        int ok = memcmp(src, dst, n) == 0;
        // H2H through the runtime
        memset(dst2, 0, n);
        CHECK(cudaMemcpy(dst2, dst, n, cudaMemcpyHostToHost));
        ok = ok && memcmp(src, dst2, n) == 0;
        // cudaMemcpyDefault: direction inferred from the pointers
        fill(src, n, (uint32_t)k + 100);
        memset(dst, 0, n);
        CHECK(cudaMemcpy(d2, src, n, cudaMemcpyDefault));
        CHECK(cudaMemcpy(d1, d2, n, cudaMemcpyDefault));
        CHECK(cudaMemcpy(dst, d1, n, cudaMemcpyDefault));
        ok = ok && memcmp(src, dst, n) == 0;
        char what[96];
        snprintf(what, sizeof what, "cudaMemcpy pageable H2D/D2D/D2H/H2H/Default %zu bytes", n);
        expect(ok, what);
        CHECK(cudaFree(d1));
        CHECK(cudaFree(d2));
        free(src);
        free(dst);
        free(dst2);
    }
}

// partial copies into the middle of buffers (offsets), guard bytes untouched
static void test_1d_offsets(void)
{
    const size_t n = 10000;
    unsigned char *src = (unsigned char *)xmalloc(n);
    unsigned char *dst = (unsigned char *)xmalloc(n);
    unsigned char *ref = (unsigned char *)xmalloc(n);
    fill(src, n, 77);
    unsigned char *d;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemset(d, 0x5A, n));
    CHECK(cudaMemcpy(d + 13, src + 101, 4321, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d + 5000, d + 13, 999, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(dst, d, n, cudaMemcpyDeviceToHost));
    memset(ref, 0x5A, n);
    memcpy(ref + 13, src + 101, 4321);
    memmove(ref + 5000, ref + 13, 999);
    expect(memcmp(dst, ref, n) == 0, "cudaMemcpy with offsets, guard bytes intact");
    memset(dst, 0xEE, n);
    memcpy(ref, dst, n);
    CHECK(cudaMemcpy(dst + 7, d + 5000, 999, cudaMemcpyDeviceToHost));
    memcpy(ref + 7, src + 101, 999);
    expect(memcmp(dst, ref, n) == 0, "cudaMemcpy D2H into middle of host buffer");
    // zero-size copy is a no-op
    CHECK(cudaMemcpy(d, src, 0, cudaMemcpyHostToDevice));
    CHECK(cudaFree(d));
    free(src);
    free(dst);
    free(ref);
}

static void test_pinned(void)
{
    const size_t n = (8u << 20) + 17;
    unsigned char *p1, *p2, *p3;
    CHECK(cudaMallocHost(&p1, n));
    CHECK(cudaHostAlloc(&p2, n, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&p3, n, cudaHostAllocPortable));
    unsigned int flags = 0xFFFF;
    CHECK(cudaHostGetFlags(&flags, p3));
    printf("cudaHostGetFlags(portable alloc) & portable: %u\n",
           flags & cudaHostAllocPortable);

    // registered pageable memory
    const size_t rn = 3u << 20;
    unsigned char *reg = (unsigned char *)aligned_alloc(4096, rn);
    if (!reg) {
        printf("FAIL aligned_alloc\n");
        exit(1);
    }
    CHECK(cudaHostRegister(reg, rn, cudaHostRegisterDefault));

    unsigned char *d1, *d2;
    CHECK(cudaMalloc(&d1, n));
    CHECK(cudaMalloc(&d2, n));

    fill(p1, n, 5);
    memset(p2, 0, n);
    CHECK(cudaMemcpy(d1, p1, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(p2, d2, n, cudaMemcpyDeviceToHost));
    expect(memcmp(p1, p2, n) == 0, "cudaMemcpy cudaMallocHost -> dev -> cudaHostAlloc");
    memset(p3, 0, n);
    CHECK(cudaMemcpy(p3, p2, n, cudaMemcpyHostToHost));
    expect(memcmp(p1, p3, n) == 0, "cudaMemcpy H2H pinned -> pinned(portable)");
    memset(p3, 0, n);
    CHECK(cudaMemcpy(p3, d1, n, cudaMemcpyDefault));
    expect(memcmp(p1, p3, n) == 0, "cudaMemcpy Default dev -> pinned");

    fill(reg, rn, 6);
    CHECK(cudaMemcpy(d1, reg, rn, cudaMemcpyHostToDevice));
    memset(reg, 0, rn);
    CHECK(cudaMemcpy(reg, d1, rn, cudaMemcpyDeviceToHost));
    fill(p1, rn, 6);
    expect(memcmp(p1, reg, rn) == 0, "cudaMemcpy with cudaHostRegister'ed memory");

    // pointer attributes
    cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, d1));
    printf("attributes(device ptr): type=%s device=%d\n", memtype_name(at.type), at.device);
    expect(at.type == cudaMemoryTypeDevice && at.devicePointer == (void *)d1,
           "device pointer attributes");
    CHECK(cudaPointerGetAttributes(&at, d1 + 100));
    expect(at.type == cudaMemoryTypeDevice, "interior device pointer attributes");
    CHECK(cudaPointerGetAttributes(&at, p1));
    printf("attributes(cudaMallocHost ptr): type=%s\n", memtype_name(at.type));
    expect(at.type == cudaMemoryTypeHost && at.hostPointer == (void *)p1,
           "pinned pointer attributes");
    CHECK(cudaPointerGetAttributes(&at, p2));
    printf("attributes(cudaHostAlloc ptr): type=%s\n", memtype_name(at.type));
    CHECK(cudaPointerGetAttributes(&at, reg));
    printf("attributes(registered ptr): type=%s\n", memtype_name(at.type));
    unsigned char *pageable = (unsigned char *)xmalloc(1000);
    CHECK(cudaPointerGetAttributes(&at, pageable));
    printf("attributes(pageable ptr): type=%s\n", memtype_name(at.type));
    expect(at.type == cudaMemoryTypeUnregistered, "pageable pointer attributes");
    free(pageable);

    CHECK(cudaHostUnregister(reg));
    CHECK(cudaPointerGetAttributes(&at, reg));
    printf("attributes(unregistered ptr): type=%s\n", memtype_name(at.type));
    free(reg);

    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFreeHost(p1));
    CHECK(cudaFreeHost(p2));
    CHECK(cudaFreeHost(p3));
}

static void test_async(void)
{
    const size_t sizes[] = {5, 4096, (2u << 20) + 1, 16u << 20};
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        unsigned char *pin_src, *pin_dst;
        CHECK(cudaMallocHost(&pin_src, n));
        CHECK(cudaHostAlloc(&pin_dst, n, cudaHostAllocDefault));
        unsigned char *pg_src = (unsigned char *)xmalloc(n);
        unsigned char *pg_dst = (unsigned char *)xmalloc(n);
        unsigned char *d1, *d2;
        CHECK(cudaMalloc(&d1, n));
        CHECK(cudaMalloc(&d2, n));

        // pinned, explicit kinds
        fill(pin_src, n, 200 + k);
        memset(pin_dst, 0, n);
        CHECK(cudaMemcpyAsync(d1, pin_src, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaMemcpyAsync(pin_dst, d2, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        int ok = memcmp(pin_src, pin_dst, n) == 0;
        // H2H async between pinned buffers
        memset(pin_dst, 0, n);
        CHECK(cudaMemcpyAsync(pin_dst, pin_src, n, cudaMemcpyHostToHost, s));
        CHECK(cudaStreamSynchronize(s));
        ok = ok && memcmp(pin_src, pin_dst, n) == 0;
        // cudaMemcpyDefault async
        fill(pin_src, n, 300 + k);
        memset(pin_dst, 0, n);
        CHECK(cudaMemcpyAsync(d2, pin_src, n, cudaMemcpyDefault, s));
        CHECK(cudaMemcpyAsync(d1, d2, n, cudaMemcpyDefault, s));
        CHECK(cudaMemcpyAsync(pin_dst, d1, n, cudaMemcpyDefault, s));
        CHECK(cudaStreamSynchronize(s));
        ok = ok && memcmp(pin_src, pin_dst, n) == 0;
        // pageable memory with async copies (legal; staged by the runtime)
        fill(pg_src, n, 400 + k);
        memset(pg_dst, 0, n);
        CHECK(cudaMemcpyAsync(d1, pg_src, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(pg_dst, d1, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        ok = ok && memcmp(pg_src, pg_dst, n) == 0;
        // async on the legacy default stream
        fill(pin_src, n, 500 + k);
        CHECK(cudaMemcpyAsync(d2, pin_src, n, cudaMemcpyHostToDevice, 0));
        CHECK(cudaMemcpyAsync(pin_dst, d2, n, cudaMemcpyDeviceToHost, 0));
        CHECK(cudaStreamSynchronize(0));
        ok = ok && memcmp(pin_src, pin_dst, n) == 0;

        char what[80];
        snprintf(what, sizeof what, "cudaMemcpyAsync all directions %zu bytes", n);
        expect(ok, what);
        CHECK(cudaFree(d1));
        CHECK(cudaFree(d2));
        CHECK(cudaFreeHost(pin_src));
        CHECK(cudaFreeHost(pin_dst));
        free(pg_src);
        free(pg_dst);
    }
    CHECK(cudaStreamDestroy(s));
}

// ------------------------------------------------------------- 2D copies
static void test_2d(void)
{
    const size_t W = 1001, H = 37;           // bytes per row, rows
    const size_t hp_src = W + 13, hp_dst = W + 29; // host pitches
    size_t pitch1 = 0, pitch2 = 0;
    unsigned char *d1, *d2;
    CHECK(cudaMallocPitch((void **)&d1, &pitch1, W, H));
    CHECK(cudaMallocPitch((void **)&d2, &pitch2, W + 100, H + 5));
    printf("cudaMallocPitch pitch >= width: %s, pitch %% 32 == 0: %s\n",
           pitch1 >= W ? "yes" : "no", pitch1 % 32 == 0 ? "yes" : "no");
    unsigned char *hs = (unsigned char *)xmalloc(hp_src * H);
    unsigned char *hd = (unsigned char *)xmalloc(hp_dst * (H + 5));
    unsigned char *ref = (unsigned char *)xmalloc(hp_dst * (H + 5));
    fill(hs, hp_src * H, 900);

    // H2D full rectangle, D2D into an offset position of the second
    // allocation, D2H into a host buffer with a different pitch
    CHECK(cudaMemset2D(d2, pitch2, 0x11, W + 100, H + 5));
    CHECK(cudaMemcpy2D(d1, pitch1, hs, hp_src, W, H, cudaMemcpyHostToDevice));
    const size_t ox = 50, oy = 3; // offset (bytes, rows) in d2
    CHECK(cudaMemcpy2D(d2 + oy * pitch2 + ox, pitch2, d1, pitch1, W, H,
                       cudaMemcpyDeviceToDevice));
    memset(hd, 0xCC, hp_dst * (H + 5));
    CHECK(cudaMemcpy2D(hd, hp_dst, d2, pitch2, W + 100 > hp_dst ? hp_dst : W + 100,
                       H + 5, cudaMemcpyDeviceToHost));
    // model
    size_t wcopy = W + 100 > hp_dst ? hp_dst : W + 100;
    memset(ref, 0xCC, hp_dst * (H + 5));
    for (size_t y = 0; y < H + 5; y++)
        for (size_t x = 0; x < wcopy; x++) {
            unsigned char v = 0x11;
            if (y >= oy && y < oy + H && x >= ox && x < ox + W)
                v = hs[(y - oy) * hp_src + (x - ox)];
            ref[y * hp_dst + x] = v;
        }
    expect(memcmp(hd, ref, hp_dst * (H + 5)) == 0,
           "cudaMemcpy2D H2D, D2D (offset), D2H (other pitch)");

    // H2H 2D and Default 2D
    unsigned char *hh = (unsigned char *)xmalloc(hp_dst * H);
    memset(hh, 0, hp_dst * H);
    CHECK(cudaMemcpy2D(hh, hp_dst, hs, hp_src, W, H, cudaMemcpyHostToHost));
    int ok = 1;
    for (size_t y = 0; y < H; y++)
        ok = ok && memcmp(hh + y * hp_dst, hs + y * hp_src, W) == 0;
    expect(ok, "cudaMemcpy2D H2H");
    memset(hh, 0, hp_dst * H);
    CHECK(cudaMemcpy2D(d1, pitch1, hs, hp_src, W, H, cudaMemcpyDefault));
    CHECK(cudaMemcpy2D(hh, hp_dst, d1, pitch1, W, H, cudaMemcpyDefault));
    ok = 1;
    for (size_t y = 0; y < H; y++)
        ok = ok && memcmp(hh + y * hp_dst, hs + y * hp_src, W) == 0;
    expect(ok, "cudaMemcpy2D Default");

    // sub-rectangle D2H: 17 x 9 block at (x=100, y=20) of d1
    {
        unsigned char sub[17 * 9];
        CHECK(cudaMemcpy2D(sub, 17, d1 + 20 * pitch1 + 100, pitch1, 17, 9,
                           cudaMemcpyDeviceToHost));
        ok = 1;
        for (int y = 0; y < 9; y++)
            ok = ok && memcmp(sub + y * 17, hs + (20 + y) * hp_src + 100, 17) == 0;
        expect(ok, "cudaMemcpy2D sub-rectangle D2H");
    }

    // async 2D variants on a stream with pinned memory
    {
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        unsigned char *ps, *pd;
        CHECK(cudaMallocHost(&ps, hp_src * H));
        CHECK(cudaMallocHost(&pd, hp_dst * H));
        fill(ps, hp_src * H, 901);
        memset(pd, 0, hp_dst * H);
        CHECK(cudaMemcpy2DAsync(d1, pitch1, ps, hp_src, W, H, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpy2DAsync(d2, pitch2, d1, pitch1, W, H, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaMemcpy2DAsync(pd, hp_dst, d2, pitch2, W, H, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        ok = 1;
        for (size_t y = 0; y < H; y++)
            ok = ok && memcmp(pd + y * hp_dst, ps + y * hp_src, W) == 0;
        memset(pd, 0, hp_dst * H);
        CHECK(cudaMemcpy2DAsync(pd, hp_dst, ps, hp_src, W, H, cudaMemcpyHostToHost, s));
        CHECK(cudaStreamSynchronize(s));
        for (size_t y = 0; y < H; y++)
            ok = ok && memcmp(pd + y * hp_dst, ps + y * hp_src, W) == 0;
        fill(ps, hp_src * H, 902);
        memset(pd, 0, hp_dst * H);
        CHECK(cudaMemcpy2DAsync(d1, pitch1, ps, hp_src, W, H, cudaMemcpyDefault, s));
        CHECK(cudaMemcpy2DAsync(pd, hp_dst, d1, pitch1, W, H, cudaMemcpyDefault, s));
        CHECK(cudaStreamSynchronize(s));
        for (size_t y = 0; y < H; y++)
            ok = ok && memcmp(pd + y * hp_dst, ps + y * hp_src, W) == 0;
        CHECK(cudaFreeHost(ps));
        CHECK(cudaFreeHost(pd));
        CHECK(cudaStreamDestroy(s));
        expect(ok, "cudaMemcpy2DAsync H2D/D2D/D2H/H2H/Default");
    }

    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    free(hs);
    free(hd);
    free(ref);
    free(hh);
}

// ------------------------------------------------------------- 3D copies
// byte (x, y, z) of a pitched volume
#define AT3(base, pitch, ysize, x, y, z) \
    ((base)[(size_t)(z) * (pitch) * (ysize) + (size_t)(y) * (pitch) + (x)])

static void test_3d(void)
{
    const cudaExtent ext1 = make_cudaExtent(333, 17, 9);  // bytes, rows, slices
    const cudaExtent ext2 = make_cudaExtent(400, 20, 12);
    cudaPitchedPtr pp1, pp2;
    CHECK(cudaMalloc3D(&pp1, ext1));
    CHECK(cudaMalloc3D(&pp2, ext2));
    printf("cudaMalloc3D pitch >= width: %s, xsize=%zu ysize=%zu\n",
           pp1.pitch >= 333 ? "yes" : "no", pp1.xsize, pp1.ysize);
    CHECK(cudaMemset3D(pp1, 0x22, ext1));
    CHECK(cudaMemset3D(pp2, 0x33, ext2));

    // host source volume: pitch 350, 19 rows, 11 slices, logical width 340
    const size_t sp = 350, sy = 19, sz = 11;
    unsigned char *hs = (unsigned char *)xmalloc(sp * sy * sz);
    fill(hs, sp * sy * sz, 3000);
    // host destination volume: pitch 410, 22 rows, 12 slices
    const size_t dp = 410, dy = 22, dz = 12;
    unsigned char *hd = (unsigned char *)xmalloc(dp * dy * dz);
    unsigned char *ref = (unsigned char *)xmalloc(dp * dy * dz);

    // H2D: box 300 x 14 x 6 from src (5,2,1) to pp1 (10,1,2)
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(hs, sp, 340, sy);
    p.srcPos = make_cudaPos(5, 2, 1);
    p.dstPtr = pp1;
    p.dstPos = make_cudaPos(10, 1, 2);
    p.extent = make_cudaExtent(300, 14, 6);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));

    // D2D: all of pp1 into pp2 at (40,2,3)
    memset(&p, 0, sizeof p);
    p.srcPtr = pp1;
    p.dstPtr = pp2;
    p.dstPos = make_cudaPos(40, 2, 3);
    p.extent = ext1;
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));

    // D2H: all of pp2 into hd
    memset(hd, 0xCC, dp * dy * dz);
    memset(&p, 0, sizeof p);
    p.srcPtr = pp2;
    p.dstPtr = make_cudaPitchedPtr(hd, dp, 400, dy);
    p.extent = ext2;
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));

    // model of the three copies
    unsigned char *m1 = (unsigned char *)xmalloc(333 * 17 * 9);
    memset(m1, 0x22, 333 * 17 * 9);
    for (int z = 0; z < 6; z++)
        for (int y = 0; y < 14; y++)
            for (int x = 0; x < 300; x++)
                AT3(m1, 333, 17, 10 + x, 1 + y, 2 + z) = AT3(hs, sp, sy, 5 + x, 2 + y, 1 + z);
    memset(ref, 0xCC, dp * dy * dz);
    for (int z = 0; z < 12; z++)
        for (int y = 0; y < 20; y++)
            for (int x = 0; x < 400; x++) {
                unsigned char v = 0x33;
                if (x >= 40 && x < 40 + 333 && y >= 2 && y < 2 + 17 && z >= 3 && z < 3 + 9)
                    v = AT3(m1, 333, 17, x - 40, y - 2, z - 3);
                AT3(ref, dp, dy, x, y, z) = v;
            }
    expect(memcmp(hd, ref, dp * dy * dz) == 0,
           "cudaMemcpy3D H2D (offsets), D2D (offset), D2H");

    // cudaMemset3D on a sub-box of pp2: (7,2,1) size 50 x 5 x 3
    {
        cudaPitchedPtr sub = pp2;
        sub.ptr = (char *)pp2.ptr + 1 * pp2.pitch * pp2.ysize + 2 * pp2.pitch + 7;
        CHECK(cudaMemset3D(sub, 0x9D, make_cudaExtent(50, 5, 3)));
        memset(&p, 0, sizeof p);
        p.srcPtr = pp2;
        p.dstPtr = make_cudaPitchedPtr(hd, dp, 400, dy);
        p.extent = ext2;
        p.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&p));
        for (int z = 1; z < 4; z++)
            for (int y = 2; y < 7; y++)
                for (int x = 7; x < 57; x++)
                    AT3(ref, dp, dy, x, y, z) = 0x9D;
        expect(memcmp(hd, ref, dp * dy * dz) == 0, "cudaMemset3D sub-box");
    }

    // async variants with pinned memory: H2D, D2D, D2H, memset3DAsync
    {
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        unsigned char *ps, *pd;
        CHECK(cudaMallocHost(&ps, sp * sy * sz));
        CHECK(cudaMallocHost(&pd, dp * dy * dz));
        fill(ps, sp * sy * sz, 3001);
        CHECK(cudaMemset3DAsync(pp1, 0x44, ext1, s));
        CHECK(cudaMemset3DAsync(pp2, 0x55, ext2, s));
        memset(&p, 0, sizeof p);
        p.srcPtr = make_cudaPitchedPtr(ps, sp, 340, sy);
        p.srcPos = make_cudaPos(0, 1, 3);
        p.dstPtr = pp1;
        p.dstPos = make_cudaPos(33, 0, 0);
        p.extent = make_cudaExtent(300, 17, 8);
        p.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3DAsync(&p, s));
        memset(&p, 0, sizeof p);
        p.srcPtr = pp1;
        p.srcPos = make_cudaPos(1, 1, 1);
        p.dstPtr = pp2;
        p.dstPos = make_cudaPos(0, 0, 0);
        p.extent = make_cudaExtent(332, 16, 8);
        p.kind = cudaMemcpyDeviceToDevice;
        CHECK(cudaMemcpy3DAsync(&p, s));
        memset(pd, 0xCC, dp * dy * dz);
        memset(&p, 0, sizeof p);
        p.srcPtr = pp2;
        p.dstPtr = make_cudaPitchedPtr(pd, dp, 400, dy);
        p.dstPos = make_cudaPos(2, 1, 0);
        p.extent = make_cudaExtent(398, 20, 12);
        p.kind = cudaMemcpyDefault;
        CHECK(cudaMemcpy3DAsync(&p, s));
        CHECK(cudaStreamSynchronize(s));

        memset(m1, 0x44, 333 * 17 * 9);
        for (int z = 0; z < 8; z++)
            for (int y = 0; y < 17; y++)
                for (int x = 0; x < 300; x++)
                    AT3(m1, 333, 17, 33 + x, y, z) = AT3(ps, sp, sy, x, 1 + y, 3 + z);
        unsigned char *m2 = (unsigned char *)xmalloc(400 * 20 * 12);
        memset(m2, 0x55, 400 * 20 * 12);
        for (int z = 0; z < 8; z++)
            for (int y = 0; y < 16; y++)
                for (int x = 0; x < 332; x++)
                    AT3(m2, 400, 20, x, y, z) = AT3(m1, 333, 17, 1 + x, 1 + y, 1 + z);
        memset(ref, 0xCC, dp * dy * dz);
        for (int z = 0; z < 12; z++)
            for (int y = 0; y < 20; y++)
                for (int x = 0; x < 398; x++)
                    AT3(ref, dp, dy, 2 + x, 1 + y, z) = AT3(m2, 400, 20, x, y, z);
        expect(memcmp(pd, ref, dp * dy * dz) == 0,
               "cudaMemcpy3DAsync H2D/D2D/D2H(Default) + cudaMemset3DAsync");
        free(m2);
        CHECK(cudaFreeHost(ps));
        CHECK(cudaFreeHost(pd));
        CHECK(cudaStreamDestroy(s));
    }

    free(m1);
    free(hs);
    free(hd);
    free(ref);
    CHECK(cudaFree(pp1.ptr));
    CHECK(cudaFree(pp2.ptr));
}

// ------------------------------------------------------------- memsets
static void test_memset(void)
{
    const size_t n = 100003;
    unsigned char *d;
    CHECK(cudaMalloc(&d, n));
    unsigned char *h = (unsigned char *)xmalloc(n);
    unsigned char *ref = (unsigned char *)xmalloc(n);
    fill(ref, n, 4000);
    CHECK(cudaMemcpy(d, ref, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d + 3, 0xAB, 1001));
    memset(ref + 3, 0xAB, 1001);
    CHECK(cudaMemset(d + 50000, 0, 1)); // single byte
    ref[50000] = 0;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemsetAsync(d + 2000, 0x7F, 17, s));
    CHECK(cudaMemsetAsync(d + 60000, 0xFFFFFF01, 40000, s)); // only low byte used
    memset(ref + 2000, 0x7F, 17);
    memset(ref + 60000, 0x01, 40000);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    expect(memcmp(h, ref, n) == 0, "cudaMemset / cudaMemsetAsync with offsets");

    // 2D memsets on a pitched allocation
    const size_t W = 777, H = 33;
    size_t pitch;
    unsigned char *d2;
    CHECK(cudaMallocPitch((void **)&d2, &pitch, W, H));
    CHECK(cudaMemset2D(d2, pitch, 0, W, H));
    CHECK(cudaMemset2D(d2 + 4 * pitch + 10, pitch, 0x44, 123, 7));
    CHECK(cudaMemset2DAsync(d2 + 20 * pitch + 600, pitch, 0x66, 177, 13, s));
    CHECK(cudaStreamSynchronize(s));
    unsigned char *h2 = (unsigned char *)xmalloc(W * H);
    CHECK(cudaMemcpy2D(h2, W, d2, pitch, W, H, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            unsigned char v = 0;
            if (y >= 4 && y < 11 && x >= 10 && x < 133)
                v = 0x44;
            if (y >= 20 && y < 33 && x >= 600 && x < 777)
                v = 0x66;
            if (h2[y * W + x] != v)
                ok = 0;
        }
    expect(ok, "cudaMemset2D / cudaMemset2DAsync sub-rectangles");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(d2));
    free(h);
    free(h2);
    free(ref);
}

// ------------------------------------------------------------- stream-ordered allocation
static void test_pools(void)
{
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    printf("memory pools supported: %d\n", supported);
    if (!supported) {
        printf("SKIP pools\n");
        return;
    }
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = (4u << 20) + 9;
    unsigned char *hs, *hd;
    CHECK(cudaMallocHost(&hs, n));
    CHECK(cudaMallocHost(&hd, n));

    // default pool
    {
        unsigned char *p, *q;
        fill(hs, n, 5000);
        memset(hd, 0, n);
        CHECK(cudaMallocAsync((void **)&p, n, s));
        CHECK(cudaMallocAsync((void **)&q, n, s));
        CHECK(cudaMemcpyAsync(p, hs, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(q, p, n, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaFreeAsync(p, s));
        CHECK(cudaMemcpyAsync(hd, q, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaFreeAsync(q, s));
        CHECK(cudaStreamSynchronize(s));
        expect(memcmp(hs, hd, n) == 0, "cudaMallocAsync / cudaFreeAsync (default pool)");
        cudaMemPool_t defpool;
        CHECK(cudaDeviceGetDefaultMemPool(&defpool, 0));
        CHECK(cudaMemPoolTrimTo(defpool, 0));
    }

    // explicit pool
    {
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = 0;
        cudaMemPool_t pool;
        CHECK(cudaMemPoolCreate(&pool, &props));
        unsigned long long thr = 256ull << 20, thr_back = 0;
        CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
        CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr_back));
        expect(thr_back == thr, "pool release threshold read back");

        unsigned char *bufs[6];
        const size_t sz[6] = {1, 1000, 65536, 1u << 20, (3u << 20) + 5, n};
        for (int i = 0; i < 6; i++) {
            CHECK(cudaMallocFromPoolAsync((void **)&bufs[i], sz[i], pool, s));
            CHECK(cudaMemsetAsync(bufs[i], 0x10 + i, sz[i], s));
        }
        int ok = 1;
        for (int i = 0; i < 6; i++) {
            memset(hd, 0, sz[i]);
            CHECK(cudaMemcpyAsync(hd, bufs[i], sz[i], cudaMemcpyDeviceToHost, s));
            CHECK(cudaStreamSynchronize(s));
            for (size_t j = 0; j < sz[i]; j++)
                if (hd[j] != 0x10 + i) {
                    ok = 0;
                    break;
                }
        }
        expect(ok, "cudaMallocFromPoolAsync buffers hold their memsets");
        for (int i = 0; i < 6; i++)
            CHECK(cudaFreeAsync(bufs[i], s));
        CHECK(cudaStreamSynchronize(s));
        unsigned long long used = 1, reserved_before = 0, reserved_after = 1;
        CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
        CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved_before));
        CHECK(cudaMemPoolTrimTo(pool, 0));
        CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved_after));
        printf("pool used after free: %llu\n", used);
        printf("pool reserved before trim > 0: %s\n", reserved_before > 0 ? "yes" : "no");
        printf("pool reserved after trim: %llu\n", reserved_after);
        expect(used == 0 && reserved_after == 0, "cudaMemPoolTrimTo releases everything");
        CHECK(cudaMemPoolDestroy(pool));
    }

    CHECK(cudaFreeHost(hs));
    CHECK(cudaFreeHost(hd));
    CHECK(cudaStreamDestroy(s));
}

int main(void)
{
    double t0 = now_s();
    test_1d_sync();
    test_1d_offsets();
    test_pinned();
    test_async();
    test_2d();
    test_3d();
    test_memset();
    test_pools();

    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    expect(total_b > 0 && free_b <= total_b, "cudaMemGetInfo free <= total");

    fprintf(stderr, "memcpy_variants: %.3f s\n", now_s() - t0);
    printf("%s memcpy_variants\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
