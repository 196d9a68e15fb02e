/*
 * CUDA arrays, mipmapped arrays, texture and surface objects of the cuda
 * backend: the driver's own calls, with the server's handles already
 * translated to the driver's. Copies with array sides are one
 * cuMemcpy3DAsync on the caller's stream.
 */
#include <string.h>

#include "backend_cuda_int.h"

CUresult flyt_cuda_array_create(flyt_backend *base, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                flyt_bhandle *array)
{
    ENTER(b, base);
    CUarray a = NULL;
    CUresult r = b->cu.cuArray3DCreate(&a, d);
    *array = a;
    return r;
}

CUresult flyt_cuda_array_destroy(flyt_backend *base, flyt_bhandle array)
{
    ENTER(b, base);
    return b->cu.cuArrayDestroy((CUarray)array);
}

CUresult flyt_cuda_mipmap_create(flyt_backend *base, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                 unsigned levels, flyt_bhandle *mipmap)
{
    ENTER(b, base);
    CUmipmappedArray m = NULL;
    CUresult r = b->cu.cuMipmappedArrayCreate(&m, d, levels);
    *mipmap = m;
    return r;
}

CUresult flyt_cuda_mipmap_destroy(flyt_backend *base, flyt_bhandle mipmap)
{
    ENTER(b, base);
    return b->cu.cuMipmappedArrayDestroy((CUmipmappedArray)mipmap);
}

CUresult flyt_cuda_mipmap_level(flyt_backend *base, flyt_bhandle mipmap, unsigned level,
                                flyt_bhandle *array)
{
    ENTER(b, base);
    CUarray a = NULL;
    CUresult r = b->cu.cuMipmappedArrayGetLevel(&a, (CUmipmappedArray)mipmap, level);
    *array = a;
    return r;
}

static CUmemorytype side_type(enum flyt_bside_kind k)
{
    return k == FLYT_BSIDE_HOST ? CU_MEMORYTYPE_HOST
         : k == FLYT_BSIDE_ARRAY ? CU_MEMORYTYPE_ARRAY : CU_MEMORYTYPE_DEVICE;
}

/* Both sides of CUDA_MEMCPY3D have the same fields under a src/dst prefix. */
#define FILL_SIDE(c, pfx, s)                                    \
    do {                                                        \
        (c)->pfx##MemoryType = side_type((s)->kind);            \
        (c)->pfx##Host = (s)->host;                             \
        (c)->pfx##Device = (CUdeviceptr)flyt_cuda_xlate(b, (s)->dptr); \
        (c)->pfx##Array = (CUarray)(s)->array;                  \
        (c)->pfx##Pitch = (size_t)(s)->pitch;                   \
        (c)->pfx##Height = (size_t)(s)->height;                 \
        (c)->pfx##XInBytes = (size_t)(s)->x;                    \
        (c)->pfx##Y = (size_t)(s)->y;                           \
        (c)->pfx##Z = (size_t)(s)->z;                           \
    } while (0)

CUresult flyt_cuda_copy_3d(flyt_backend *base, const struct flyt_bcopy *c, flyt_bhandle stream,
                           int wait)
{
    ENTER(b, base);
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    FILL_SIDE(&m, src, &c->src);
    FILL_SIDE(&m, dst, &c->dst);
    m.WidthInBytes = (size_t)c->width;
    m.Height = (size_t)c->height;
    m.Depth = (size_t)c->depth;
    CUstream st = flyt_cuda_enqueue(b, stream);
    CUresult r = b->cu.cuMemcpy3DAsync(&m, st);
    if (r == CUDA_SUCCESS && wait)
        r = b->cu.cuStreamSynchronize(st);
    return r;
}

/* Linear and pitch2D memory at a moved module global's old address is at its new one. */
static void xlate_resource(const struct flyt_cuda_backend *b, CUDA_RESOURCE_DESC *d)
{
    if (d->resType == CU_RESOURCE_TYPE_LINEAR)
        d->res.linear.devPtr = (CUdeviceptr)flyt_cuda_xlate(b, d->res.linear.devPtr);
    else if (d->resType == CU_RESOURCE_TYPE_PITCH2D)
        d->res.pitch2D.devPtr = (CUdeviceptr)flyt_cuda_xlate(b, d->res.pitch2D.devPtr);
}

CUresult flyt_cuda_tex_create(flyt_backend *base, const CUDA_RESOURCE_DESC *res,
                              const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view,
                              uint64_t *obj)
{
    ENTER(b, base);
    CUtexObject t = 0;
    CUDA_RESOURCE_DESC here = *res;
    xlate_resource(b, &here);
    CUresult r = b->cu.cuTexObjectCreate(&t, &here, tex, view);
    *obj = t;
    return r;
}

CUresult flyt_cuda_tex_destroy(flyt_backend *base, uint64_t obj)
{
    ENTER(b, base);
    return b->cu.cuTexObjectDestroy((CUtexObject)obj);
}

CUresult flyt_cuda_surf_create(flyt_backend *base, const CUDA_RESOURCE_DESC *res, uint64_t *obj)
{
    ENTER(b, base);
    CUsurfObject sobj = 0;
    CUresult r = b->cu.cuSurfObjectCreate(&sobj, res);
    *obj = sobj;
    return r;
}

CUresult flyt_cuda_surf_destroy(flyt_backend *base, uint64_t obj)
{
    ENTER(b, base);
    return b->cu.cuSurfObjectDestroy((CUsurfObject)obj);
}
