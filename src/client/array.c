/*
 * CUDA arrays, mipmapped arrays, texture and surface objects.
 *
 * CUarray and CUmipmappedArray are records of this library holding the
 * server's id and the descriptor they were made with, so descriptor queries
 * need no round trip. CUtexObject and CUsurfObject are the server driver's
 * own values: kernels take them as plain parameters, which no one could
 * translate; the server checks each one that comes back against its session.
 * Copies with array sides are in copy.c.
 */
#include "client.h"
#include "flyt_mipmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_MAGIC  0x79617261u /* "aray" */
#define MIPMAP_MAGIC 0x706d696du /* "mimp" */

struct flyt_array {
    uint32_t                magic;
    int                     level; /* a level of a mipmapped array: destroyed with it */
    uint64_t                id;
    CUDA_ARRAY3D_DESCRIPTOR desc;
};

struct flyt_mipmap {
    uint32_t                magic;
    unsigned                levels;
    uint64_t                id;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    struct flyt_array     **level; /* made on first cuMipmappedArrayGetLevel */
};

static pthread_mutex_t objects_mu = FLYT_MUTEX_INITIALIZER;

static struct flyt_array *array_from(CUarray a)
{
    struct flyt_array *r = (struct flyt_array *)a;
    return flyt_aligned(r) && r->magic == ARRAY_MAGIC ? r : NULL;
}

static struct flyt_mipmap *mipmap_from(CUmipmappedArray m)
{
    struct flyt_mipmap *r = (struct flyt_mipmap *)m;
    return flyt_aligned(r) && r->magic == MIPMAP_MAGIC ? r : NULL;
}

CUresult flyt_array_wire(CUarray a, uint64_t *id)
{
    struct flyt_array *r = array_from(a);
    if (r == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *id = r->id;
    return CUDA_SUCCESS;
}

static CUresult create(uint16_t op, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels, uint64_t *id)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_array_create req = {.width = d->Width, .height = d->Height, .depth = d->Depth,
                                 .format = (uint32_t)d->Format, .channels = d->NumChannels,
                                 .flags = d->Flags, .levels = levels};
    return flyt_call_u64(op, &req, sizeof req, id);
}

static struct flyt_array *array_record(uint64_t id, const CUDA_ARRAY3D_DESCRIPTOR *d, int level)
{
    struct flyt_array *a = malloc(sizeof *a);
    if (a)
        *a = (struct flyt_array){ARRAY_MAGIC, level, id, *d};
    return a;
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (out == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = 0;
    CUresult r = create(FLYT_OP_ARRAY_CREATE, d, 0, &id);
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_array *a = array_record(id, d, 0);
    if (a == NULL) {
        flyt_call_handle(FLYT_OP_ARRAY_DESTROY, id);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Format = d->Format,
                                  .NumChannels = d->NumChannels};
    return array_create(out, &d3);
}

FLYT_EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return array_create(out, d);
}

FLYT_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray a)
{
    struct flyt_array *r = array_from(a);
    if (r == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUDA_ARRAY_DESCRIPTOR){.Width = r->desc.Width, .Height = r->desc.Height,
                                   .Format = r->desc.Format, .NumChannels = r->desc.NumChannels};
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray a)
{
    struct flyt_array *r = array_from(a);
    if (r == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = r->desc;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuArrayDestroy(CUarray a)
{
    struct flyt_array *r = array_from(a);
    if (r == NULL || r->level)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult err = flyt_call_handle(FLYT_OP_ARRAY_DESTROY, r->id);
    if (err == CUDA_SUCCESS) {
        r->magic = 0;
        free(r);
    }
    return err;
}

/* ---- mipmapped arrays ---- */


FLYT_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                            unsigned int levels)
{
    if (out == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = 0;
    CUresult r = create(FLYT_OP_MIPMAP_CREATE, d, levels, &id);
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_mipmap *m = malloc(sizeof *m);
    struct flyt_array **level = calloc(levels ? levels : 1, sizeof *level);
    if (m == NULL || level == NULL) {
        free(m);
        free(level);
        flyt_call_handle(FLYT_OP_MIPMAP_DESTROY, id);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (struct flyt_mipmap){MIPMAP_MAGIC, levels, id, *d, level};
    *out = (CUmipmappedArray)m;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray mipmap, unsigned int l)
{
    struct flyt_mipmap *m = mipmap_from(mipmap);
    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (out == NULL || l >= m->levels)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&objects_mu);
    if (m->level[l] == NULL) {
        flyt_req_mipmap_level req = {.mipmap = m->id, .level = l};
        uint64_t id = 0;
        CUDA_ARRAY3D_DESCRIPTOR ld = flyt_mipmap_level_desc(&m->desc, l);
        r = flyt_call_u64(FLYT_OP_MIPMAP_LEVEL, &req, sizeof req, &id);
        if (r == CUDA_SUCCESS && (m->level[l] = array_record(id, &ld, 1)) == NULL)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        *out = (CUarray)m->level[l];
    pthread_mutex_unlock(&objects_mu);
    return r;
}

FLYT_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap)
{
    struct flyt_mipmap *m = mipmap_from(mipmap);
    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = flyt_call_handle(FLYT_OP_MIPMAP_DESTROY, m->id);
    if (r != CUDA_SUCCESS)
        return r;
    for (unsigned l = 0; l < m->levels; l++)
        if (m->level[l]) {
            m->level[l]->magic = 0;
            free(m->level[l]);
        }
    free(m->level);
    m->magic = 0;
    free(m);
    return CUDA_SUCCESS;
}

/* ---- texture and surface objects ---- */

/* What each object was made with, for the Get*Desc queries. */
struct object {
    uint64_t                value;
    int                     surface, has_view;
    CUDA_RESOURCE_DESC      res;
    CUDA_TEXTURE_DESC       tex;
    CUDA_RESOURCE_VIEW_DESC view;
    struct object          *next;
};
static struct object *objects;

static CUresult resource_wire(const CUDA_RESOURCE_DESC *d, flyt_res_desc *w)
{
    *w = (flyt_res_desc){.type = (uint32_t)d->resType, .flags = d->flags};
    const struct flyt_mipmap *m;
    switch (d->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        return flyt_array_wire(d->res.array.hArray, &w->handle);
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if ((m = mipmap_from(d->res.mipmap.hMipmappedArray)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        w->handle = m->id;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
        w->handle = d->res.linear.devPtr;
        w->format = (uint32_t)d->res.linear.format;
        w->channels = d->res.linear.numChannels;
        w->size = d->res.linear.sizeInBytes;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
        w->handle = d->res.pitch2D.devPtr;
        w->format = (uint32_t)d->res.pitch2D.format;
        w->channels = d->res.pitch2D.numChannels;
        w->width = d->res.pitch2D.width;
        w->height = d->res.pitch2D.height;
        w->pitch = d->res.pitch2D.pitchInBytes;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static flyt_tex_desc texture_wire(const CUDA_TEXTURE_DESC *t)
{
    flyt_tex_desc w = {.filter_mode = (uint32_t)t->filterMode, .flags = t->flags,
                       .max_anisotropy = t->maxAnisotropy,
                       .mipmap_filter_mode = (uint32_t)t->mipmapFilterMode,
                       .mipmap_level_bias = t->mipmapLevelBias,
                       .min_mipmap_level_clamp = t->minMipmapLevelClamp,
                       .max_mipmap_level_clamp = t->maxMipmapLevelClamp};
    for (int i = 0; i < 3; i++)
        w.address_mode[i] = (uint32_t)t->addressMode[i];
    memcpy(w.border_color, t->borderColor, sizeof w.border_color);
    return w;
}

static flyt_view_desc view_wire(const CUDA_RESOURCE_VIEW_DESC *v)
{
    if (v == NULL)
        return (flyt_view_desc){0};
    return (flyt_view_desc){.present = 1, .format = (uint32_t)v->format, .width = v->width,
                            .height = v->height, .depth = v->depth,
                            .first_mip = v->firstMipmapLevel, .last_mip = v->lastMipmapLevel,
                            .first_layer = v->firstLayer, .last_layer = v->lastLayer};
}

static void remember(struct object *o)
{
    pthread_mutex_lock(&objects_mu);
    o->next = objects;
    objects = o;
    pthread_mutex_unlock(&objects_mu);
}

/* A copy of what the object was made with; 0 when this library made none such. */
static int recall(uint64_t value, int surface, struct object *out)
{
    pthread_mutex_lock(&objects_mu);
    const struct object *o = objects;
    while (o && (o->value != value || o->surface != surface))
        o = o->next;
    if (o)
        *out = *o;
    pthread_mutex_unlock(&objects_mu);
    return o != NULL;
}

static void forget(uint64_t value, int surface)
{
    pthread_mutex_lock(&objects_mu);
    for (struct object **p = &objects; *p; p = &(*p)->next)
        if ((*p)->value == value && (*p)->surface == surface) {
            struct object *o = *p;
            *p = o->next;
            free(o);
            break;
        }
    pthread_mutex_unlock(&objects_mu);
}

/* Creates a texture (tex not NULL) or surface object. */
static CUresult object_create(uint64_t *out, const CUDA_RESOURCE_DESC *res,
                              const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL || res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct object *o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_tex_create req = {.view = view_wire(view)};
    r = resource_wire(res, &req.res);
    if (r == CUDA_SUCCESS && tex) {
        req.tex = texture_wire(tex);
        r = flyt_call_u64(FLYT_OP_TEX_CREATE, &req, sizeof req, &o->value);
    } else if (r == CUDA_SUCCESS) {
        r = flyt_call_u64(FLYT_OP_SURF_CREATE, &req.res, sizeof req.res, &o->value);
    }
    if (r != CUDA_SUCCESS) {
        free(o);
        return r;
    }
    o->surface = tex == NULL;
    o->res = *res;
    if (tex)
        o->tex = *tex;
    if (view) {
        o->view = *view;
        o->has_view = 1;
    }
    *out = o->value;
    remember(o);
    return CUDA_SUCCESS;
}

static CUresult object_destroy(uint64_t value, int surface)
{
    CUresult r = flyt_call_handle(surface ? FLYT_OP_SURF_DESTROY : FLYT_OP_TEX_DESTROY, value);
    if (r == CUDA_SUCCESS)
        forget(value, surface);
    return r;
}

FLYT_EXPORT CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res,
                                       const CUDA_TEXTURE_DESC *tex,
                                       const CUDA_RESOURCE_VIEW_DESC *view)
{
    if (tex == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return object_create((uint64_t *)out, res, tex, view);
}

FLYT_EXPORT CUresult cuTexObjectDestroy(CUtexObject t) { return object_destroy(t, 0); }

FLYT_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    return object_create((uint64_t *)out, res, NULL, NULL);
}

FLYT_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject s) { return object_destroy(s, 1); }

/* The record of an object this library made, for a query into out. */
static CUresult look_up(uint64_t value, int surface, const void *out, struct object *o)
{
    if (!recall(value, surface, o))
        return CUDA_ERROR_INVALID_HANDLE;
    return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FLYT_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject t)
{
    struct object o;
    CUresult r = look_up(t, 0, out, &o);
    if (r == CUDA_SUCCESS)
        *out = o.res;
    return r;
}

FLYT_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject t)
{
    struct object o;
    CUresult r = look_up(t, 0, out, &o);
    if (r == CUDA_SUCCESS)
        *out = o.tex;
    return r;
}

/* Without a view given at creation: a zeroed descriptor. */
FLYT_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject t)
{
    struct object o;
    CUresult r = look_up(t, 0, out, &o);
    if (r == CUDA_SUCCESS)
        *out = o.view;
    return r;
}

FLYT_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject s)
{
    struct object o;
    CUresult r = look_up(s, 1, out, &o);
    if (r == CUDA_SUCCESS)
        *out = o.res;
    return r;
}
