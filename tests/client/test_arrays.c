/*
 * CUDA arrays, mipmapped arrays, texture and surface objects through Flyt's
 * libcuda.so.1, against a flyt-server running the host-memory test backend:
 * data round trips through arrays by every copy there is, from pageable
 * and pinned host memory, and the objects' handles and descriptors.
 * Run by run_with_server.sh (Unix socket with shared memory, and TCP).
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS, "%s", #call)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed);
}

static CUarray array_3d(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR desc = {w, h, d, f, ch, flags};
    CUarray a = NULL;
    CU_OK(cuArray3DCreate(&a, &desc));
    return a;
}

/* A 2D float array: host (pitched) -> array -> device -> host, then array ->
 * array -> host, by cuMemcpy2D, with the descriptors it was made with. */
static void test_2d(void)
{
    enum { W = 64, H = 16, PITCH = W * 4 + 36 };
    CUDA_ARRAY_DESCRIPTOR desc = {W, H, CU_AD_FORMAT_FLOAT, 1}, got;
    CUarray a = NULL, b = NULL;
    CU_OK(cuArrayCreate(&a, &desc));
    CU_OK(cuArrayCreate(&b, &desc));
    CU_OK(cuArrayGetDescriptor(&got, a));
    CHECK_EQ(got.Width, W, "cuArrayGetDescriptor gives the array's shape");
    CHECK_EQ(got.Height, H, "cuArrayGetDescriptor gives the array's shape");
    CHECK_EQ(got.Format, CU_AD_FORMAT_FLOAT, "cuArrayGetDescriptor gives the array's shape");
    CHECK_EQ(got.NumChannels, 1, "cuArrayGetDescriptor gives the array's shape");
    CUDA_ARRAY3D_DESCRIPTOR got3;
    CU_OK(cuArray3DGetDescriptor(&got3, a));
    CHECK_EQ(got3.Width, W, "and cuArray3DGetDescriptor too");
    CHECK_EQ(got3.Height, H, "and cuArray3DGetDescriptor too");
    CHECK_EQ(got3.Depth, 0, "and cuArray3DGetDescriptor too");

    static unsigned char host[H * PITCH], back[W * 4 * H], back2[W * 4 * H];
    fill(host, sizeof host, 3);
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = PITCH;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
    c.WidthInBytes = W * 4, c.Height = H;
    CU_OK(cuMemcpy2D(&c));

    CUdeviceptr d = 0;
    size_t dpitch = 0;
    CU_OK(cuMemAllocPitch(&d, &dpitch, W * 4, H, 4));
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d, c.dstPitch = dpitch;
    c.WidthInBytes = W * 4, c.Height = H;
    CU_OK(cuMemcpy2D(&c));
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = d, c.srcPitch = dpitch;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = back, c.dstPitch = W * 4;
    c.WidthInBytes = W * 4, c.Height = H;
    CU_OK(cuMemcpy2D(&c));
    int same = 1;
    for (int y = 0; y < H; y++)
        same &= memcmp(back + y * W * 4, host + y * PITCH, W * 4) == 0;
    CHECK(same, "host -> array -> device -> host comes back");

    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a, c.srcXInBytes = 8, c.srcY = 2;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = b;
    c.WidthInBytes = (W - 2) * 4, c.Height = H - 2;
    CU_OK(cuMemcpy2DAsync(&c, NULL));
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = b;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = back2, c.dstPitch = W * 4;
    c.WidthInBytes = W * 4, c.Height = H;
    CU_OK(cuMemcpy2DUnaligned(&c));
    same = 1;
    for (int y = 0; y < H - 2; y++)
        same &= memcmp(back2 + y * W * 4, host + (y + 2) * PITCH + 8, (W - 2) * 4) == 0;
    CHECK(same, "array -> array at an offset -> host comes back");

    c.WidthInBytes = W * 4 + 4; /* past the array's row */
    CHECK_EQ(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE, "a copy past the array's row is refused");
    CU_OK(cuMemFree(d));
    CU_OK(cuArrayDestroy(a));
    CU_OK(cuArrayDestroy(b));
}

/* A 1D uchar4 array through the HtoA/AtoH/DtoA/AtoD/AtoA calls, from
 * pageable and pinned memory, synchronous and on a stream. */
static void test_1d(void)
{
    enum { W = 256, N = 512, OFF = 16 };
    CUDA_ARRAY_DESCRIPTOR desc = {W, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4};
    CUarray a = NULL, b = NULL;
    CU_OK(cuArrayCreate(&a, &desc));
    CU_OK(cuArrayCreate(&b, &desc));
    static unsigned char src[N], back[N];
    fill(src, N, 11);
    CU_OK(cuMemcpyHtoA(a, OFF, src, N));
    CU_OK(cuMemcpyAtoH(back, a, OFF, N));
    CHECK_MEM_EQ(src, back, N, "HtoA then AtoH at byte offset %d", OFF);

    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, N));
    CU_OK(cuMemcpyAtoD(d, a, OFF, N));
    CU_OK(cuMemcpyDtoA(b, 0, d, N));
    CU_OK(cuMemcpyAtoA(a, 0, b, 0, N));
    memset(back, 0, N);
    CU_OK(cuMemcpyAtoH(back, a, 0, N));
    CHECK_MEM_EQ(src, back, N, "AtoD, DtoA, AtoA carry the data");

    unsigned char *pinned = NULL;
    CU_OK(cuMemHostAlloc((void **)&pinned, 2 * N, 0));
    CUstream st = NULL;
    CU_OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    fill(pinned, N, 29);
    CU_OK(cuMemcpyHtoAAsync(b, 8, pinned, N, st));
    CU_OK(cuMemcpyAtoHAsync(pinned + N, b, 8, N, st));
    CU_OK(cuStreamSynchronize(st));
    CHECK_MEM_EQ(pinned, pinned + N, N, "HtoAAsync/AtoHAsync from and to pinned memory");
    CU_OK(cuMemcpyHtoAAsync(b, 0, src, N, st));
    CU_OK(cuMemcpyAtoHAsync(back, b, 0, N, st));
    CU_OK(cuStreamSynchronize(st));
    CHECK_MEM_EQ(src, back, N, "and from and to pageable memory");
    CHECK_EQ(cuMemcpyHtoA(a, W * 4 - 4, src, 8), CUDA_ERROR_INVALID_VALUE, "past the end is refused");
    CHECK_EQ(cuMemcpyHtoA(NULL, 0, src, 8), CUDA_ERROR_INVALID_HANDLE, "a NULL array is no array");
    CU_OK(cuStreamDestroy(st));
    CU_OK(cuMemFreeHost(pinned));
    CU_OK(cuMemFree(d));
    CU_OK(cuArrayDestroy(a));
    CU_OK(cuArrayDestroy(b));
}

/* Copies a box of the host volume vol (w x h x d ints) into array a at
 * (x, y, z) and reads the whole array back. */
static void box_3d(CUarray a, const int *box, size_t bw, size_t bh, size_t bd, size_t x, size_t y,
                   size_t z)
{
    CUDA_MEMCPY3D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = box, c.srcPitch = bw * 4, c.srcHeight = bh;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = a;
    c.dstXInBytes = x * 4, c.dstY = y, c.dstZ = z;
    c.WidthInBytes = bw * 4, c.Height = bh, c.Depth = bd;
    CU_OK(cuMemcpy3D(&c));
}

static void read_3d(CUarray a, int *vol, size_t w, size_t h, size_t d)
{
    CUDA_MEMCPY3D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = vol, c.dstPitch = w * 4, c.dstHeight = h;
    c.WidthInBytes = w * 4, c.Height = h, c.Depth = d;
    CU_OK(cuMemcpy3DAsync(&c, NULL));
    CU_OK(cuStreamSynchronize(NULL));
}

/* Whether vol (zeroed array of w x h) holds box at (x, y, z) and nothing else. */
static int holds_box(const int *vol, size_t w, size_t h, size_t d, const int *box, size_t bw,
                     size_t bh, size_t bd, size_t x, size_t y, size_t z)
{
    for (size_t k = 0; k < d; k++)
        for (size_t j = 0; j < h; j++)
            for (size_t i = 0; i < w; i++) {
                int in = i >= x && i < x + bw && j >= y && j < y + bh && k >= z && k < z + bd;
                int want = in ? box[((k - z) * bh + (j - y)) * bw + (i - x)] : 0;
                if (vol[(k * h + j) * w + i] != want)
                    return 0;
            }
    return 1;
}

static void test_3d_layered_cubemap(void)
{
    static int box[3 * 4 * 2], vol[8 * 8 * 6];
    for (int i = 0; i < 3 * 4 * 2; i++)
        box[i] = 1000 + i;
    CUarray a = array_3d(8, 8, 4, CU_AD_FORMAT_SIGNED_INT32, 1, 0);
    box_3d(a, box, 3, 4, 2, 2, 1, 1);
    memset(vol, 0xff, sizeof vol);
    read_3d(a, vol, 8, 8, 4);
    CHECK(holds_box(vol, 8, 8, 4, box, 3, 4, 2, 2, 1, 1), "3D: a 3x4x2 box at (2,1,1) lands there");
    CU_OK(cuArrayDestroy(a));

    CUarray layered = array_3d(8, 8, 3, CU_AD_FORMAT_SIGNED_INT32, 1, CUDA_ARRAY3D_LAYERED);
    box_3d(layered, box, 3, 4, 1, 5, 4, 2);
    read_3d(layered, vol, 8, 8, 3);
    CHECK(holds_box(vol, 8, 8, 3, box, 3, 4, 1, 5, 4, 2), "layered: a box into layer 2 lands there");
    CUDA_ARRAY3D_DESCRIPTOR got;
    CU_OK(cuArray3DGetDescriptor(&got, layered));
    CHECK_EQ(got.Depth, 3, "layered descriptor");
    CHECK_EQ(got.Flags, CUDA_ARRAY3D_LAYERED, "layered descriptor");
    CU_OK(cuArrayDestroy(layered));

    CUarray cube = array_3d(8, 8, 6, CU_AD_FORMAT_SIGNED_INT32, 1, CUDA_ARRAY3D_CUBEMAP);
    box_3d(cube, box, 3, 4, 2, 0, 0, 4);
    read_3d(cube, vol, 8, 8, 6);
    CHECK(holds_box(vol, 8, 8, 6, box, 3, 4, 2, 0, 0, 4), "cubemap: faces 4 and 5");
    CU_OK(cuArrayDestroy(cube));

    CUDA_ARRAY3D_DESCRIPTOR bad = {8, 4, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP};
    CUarray none = NULL;
    CHECK_EQ(cuArray3DCreate(&none, &bad), CUDA_ERROR_INVALID_VALUE, "a cubemap must be square");
}

static void test_mipmap(void)
{
    CUDA_ARRAY3D_DESCRIPTOR desc = {16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmipmappedArray m = NULL;
    CU_OK(cuMipmappedArrayCreate(&m, &desc, 3));
    CUarray l1 = NULL, l1b = NULL, l2 = NULL;
    CU_OK(cuMipmappedArrayGetLevel(&l1, m, 1));
    CU_OK(cuMipmappedArrayGetLevel(&l1b, m, 1));
    CU_OK(cuMipmappedArrayGetLevel(&l2, m, 2));
    CHECK_EQ(l1, l1b, "a level is one array");
    CHECK_NE(l1, l2, "a level is one array");
    CUDA_ARRAY3D_DESCRIPTOR got;
    CU_OK(cuArray3DGetDescriptor(&got, l2));
    CHECK_EQ(got.Width, 4, "level 2 of 16x16 is 4x4 (%zux%zu)", got.Width, got.Height);
    CHECK_EQ(got.Height, 4, "level 2 of 16x16 is 4x4 (%zux%zu)", got.Width, got.Height);
    CHECK_EQ(cuMipmappedArrayGetLevel(&l2, m, 3), CUDA_ERROR_INVALID_VALUE, "there is no level 3");
    float in[16], out[16];
    for (int i = 0; i < 16; i++)
        in[i] = (float)i * 0.5f;
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = in, c.srcPitch = 16;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = l2;
    c.WidthInBytes = 16, c.Height = 4;
    CU_OK(cuMemcpy2D(&c));
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = l2;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = out, c.dstPitch = 16;
    c.WidthInBytes = 16, c.Height = 4;
    CU_OK(cuMemcpy2D(&c));
    CHECK_MEM_EQ(in, out, sizeof in, "a level filled by a copy comes back");
    CHECK_EQ(cuArrayDestroy(l1), CUDA_ERROR_INVALID_HANDLE, "a level is not destroyed alone");
    CU_OK(cuMipmappedArrayDestroy(m));
}

static void test_objects(void)
{
    CUarray a = array_3d(32, 32, 0, CU_AD_FORMAT_HALF, 2, 0);
    CUarray s = array_3d(32, 32, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, CUDA_ARRAY3D_SURFACE_LDST);
    CUDA_RESOURCE_DESC res = {0};
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = a;
    CUDA_TEXTURE_DESC tex = {0};
    tex.addressMode[0] = CU_TR_ADDRESS_MODE_CLAMP, tex.addressMode[1] = CU_TR_ADDRESS_MODE_WRAP;
    tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
    tex.flags = CU_TRSF_NORMALIZED_COORDINATES;
    tex.borderColor[2] = 0.25f;
    CUtexObject t1 = 0, t2 = 0;
    CU_OK(cuTexObjectCreate(&t1, &res, &tex, NULL));
    CU_OK(cuTexObjectCreate(&t2, &res, &tex, NULL));
    CHECK_NE(t1, 0, "texture objects are distinct values");
    CHECK_NE(t2, 0, "texture objects are distinct values");
    CHECK_NE(t1, t2, "texture objects are distinct values");
    CUDA_RESOURCE_DESC rgot;
    CUDA_TEXTURE_DESC tgot;
    CU_OK(cuTexObjectGetResourceDesc(&rgot, t1));
    CU_OK(cuTexObjectGetTextureDesc(&tgot, t1));
    CHECK_EQ(rgot.resType, CU_RESOURCE_TYPE_ARRAY, "a texture object's descriptors come back");
    CHECK_EQ(rgot.res.array.hArray, a, "a texture object's descriptors come back");
    CHECK_EQ(tgot.filterMode, CU_TR_FILTER_MODE_LINEAR, "a texture object's descriptors come back");
    CHECK_EQ(tgot.addressMode[1], CU_TR_ADDRESS_MODE_WRAP, "a texture object's descriptors come back");
    CHECK(tgot.borderColor[2] == 0.25f, "a texture object's descriptors come back");
    CU_OK(cuTexObjectDestroy(t1));
    CHECK_EQ(cuTexObjectDestroy(t1), CUDA_ERROR_INVALID_HANDLE, "a destroyed texture object is gone");
    CHECK_EQ(cuTexObjectDestroy(t2 + 1000), CUDA_ERROR_INVALID_HANDLE, "a value never made is refused");

    CUsurfObject so = 0;
    CHECK_EQ(cuSurfObjectCreate(&so, &res), CUDA_ERROR_INVALID_VALUE, "a surface needs SURFACE_LDST");
    res.res.array.hArray = s;
    CU_OK(cuSurfObjectCreate(&so, &res));
    CU_OK(cuSurfObjectGetResourceDesc(&rgot, so));
    CHECK_EQ(rgot.res.array.hArray, s, "a surface object's resource comes back");
    CHECK(cuTexObjectDestroy(so) == CUDA_ERROR_INVALID_HANDLE || so == t2,
          "a surface object is no texture object");
    CU_OK(cuSurfObjectDestroy(so));

    CUdeviceptr d = 0;
    size_t pitch = 0;
    CU_OK(cuMemAllocPitch(&d, &pitch, 64 * 4, 8, 4));
    CUDA_RESOURCE_DESC lin = {0};
    lin.resType = CU_RESOURCE_TYPE_PITCH2D;
    lin.res.pitch2D.devPtr = d, lin.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    lin.res.pitch2D.numChannels = 1, lin.res.pitch2D.width = 64, lin.res.pitch2D.height = 8;
    lin.res.pitch2D.pitchInBytes = pitch;
    CUDA_RESOURCE_VIEW_DESC view = {0};
    view.format = CU_RES_VIEW_FORMAT_FLOAT_1X32, view.width = 64, view.height = 8;
    CUtexObject tp = 0;
    CU_OK(cuTexObjectCreate(&tp, &lin, &tex, &view));
    CUDA_RESOURCE_VIEW_DESC vgot;
    CU_OK(cuTexObjectGetResourceViewDesc(&vgot, tp));
    CHECK_EQ(vgot.width, 64, "the view comes back");
    CHECK_EQ(vgot.format, CU_RES_VIEW_FORMAT_FLOAT_1X32, "the view comes back");
    CU_OK(cuTexObjectDestroy(tp));
    lin.res.pitch2D.height = 9000;
    CHECK_NE(cuTexObjectCreate(&tp, &lin, &tex, NULL), CUDA_SUCCESS,
             "pitch2D past the allocation is refused");
    CUDA_RESOURCE_DESC lr = {0};
    lr.resType = CU_RESOURCE_TYPE_LINEAR;
    lr.res.linear.devPtr = d, lr.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT32;
    lr.res.linear.numChannels = 1, lr.res.linear.sizeInBytes = pitch * 8;
    CU_OK(cuTexObjectCreate(&tp, &lr, &tex, NULL));
    CU_OK(cuTexObjectDestroy(tp));
    CU_OK(cuMemFree(d));
    CU_OK(cuArrayDestroy(a));
    CU_OK(cuArrayDestroy(s));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    test_2d();
    test_1d();
    test_3d_layered_cubemap();
    test_mipmap();
    test_objects();
    CU_OK(cuDevicePrimaryCtxRelease(dev));
    return check_done();
}
