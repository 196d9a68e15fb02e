/*
 * ARRAY_*, MIPMAP_*, TEX_* and SURF_*: CUDA arrays and the texture and
 * surface objects that read them. Arrays and mipmapped arrays get ids of the
 * session; texture and surface objects keep the driver's own value, which
 * the client hands to kernels as a plain parameter, and every value that
 * comes back is checked against the session's own.
 */
#include <string.h>

#include "session.h"

static CUDA_ARRAY3D_DESCRIPTOR array_desc(const flyt_req_array_create *r)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)r->width, .Height = (size_t)r->height,
                                 .Depth = (size_t)r->depth, .Format = (CUarray_format)r->format,
                                 .NumChannels = r->channels, .Flags = r->flags};
    return d;
}

/* The new object's id in rep, or the backend object destroyed again. */
static void add_object(flyt_session *s, flyt_call *c, enum flyt_htype type, flyt_bhandle bh,
                       CUresult (*destroy)(flyt_backend *, flyt_bhandle))
{
    struct flyt_hentry *e = flyt_handles_add(&s->handles, type, bh);
    if (e == NULL) {
        destroy(s->b, bh);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    ((flyt_rep_u64 *)c->rep)->value = e->id;
}

int handle_ARRAY_CREATE(flyt_session *s, flyt_call *c)
{
    CUDA_ARRAY3D_DESCRIPTOR d = array_desc(c->req);
    flyt_bhandle a = NULL;
    c->result = FLYT_BCALL(s, array_create, &d, &a);
    if (c->result == CUDA_SUCCESS)
        add_object(s, c, FLYT_H_ARRAY, a, s->b->ops->array_destroy);
    return FLYT_CONT;
}

int handle_ARRAY_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->handle, FLYT_H_ARRAY);
    if (e == NULL || e->u.array.mipmap != 0) { /* a level goes with its mipmapped array */
        c->result = CUDA_ERROR_INVALID_HANDLE;
        return FLYT_CONT;
    }
    c->result = FLYT_BCALL(s, array_destroy, e->bh);
    if (c->result == CUDA_SUCCESS)
        flyt_handles_remove(&s->handles, r->handle);
    return FLYT_CONT;
}

int handle_MIPMAP_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_array_create *r = c->req;
    CUDA_ARRAY3D_DESCRIPTOR d = array_desc(r);
    flyt_bhandle m = NULL;
    c->result = FLYT_BCALL(s, mipmap_create, &d, r->levels, &m);
    if (c->result == CUDA_SUCCESS)
        add_object(s, c, FLYT_H_MIPMAP, m, s->b->ops->mipmap_destroy);
    return FLYT_CONT;
}

static int level_of(const struct flyt_hentry *e, void *mipmap)
{
    return e->type == FLYT_H_ARRAY && e->u.array.mipmap == *(const uint64_t *)mipmap;
}

int handle_MIPMAP_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle m;
    c->result = flyt_lookup(s, r->handle, FLYT_H_MIPMAP, &m);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, mipmap_destroy, m);
    if (c->result == CUDA_SUCCESS) {
        uint64_t id = r->handle;
        flyt_handles_remove_if(&s->handles, level_of, &id);
        flyt_handles_remove(&s->handles, id);
    }
    return FLYT_CONT;
}

/* A level is destroyed with its mipmapped array, never alone. */
static CUresult keep_level(flyt_backend *b, flyt_bhandle a)
{
    (void)b, (void)a;
    return CUDA_SUCCESS;
}

int handle_MIPMAP_LEVEL(flyt_session *s, flyt_call *c)
{
    const flyt_req_mipmap_level *r = c->req;
    flyt_bhandle m, a = NULL;
    c->result = flyt_lookup(s, r->mipmap, FLYT_H_MIPMAP, &m);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, mipmap_level, m, r->level, &a);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    add_object(s, c, FLYT_H_ARRAY, a, keep_level);
    struct flyt_hentry *e = c->result == CUDA_SUCCESS
                                ? flyt_handles_get(&s->handles, ((flyt_rep_u64 *)c->rep)->value,
                                                   FLYT_H_ARRAY)
                                : NULL;
    if (e)
        e->u.array.mipmap = r->mipmap;
    return FLYT_CONT;
}

/* ---- texture and surface objects ---- */

/* The driver's resource descriptor, its array translated; a device address
 * is checked by the driver as any copy's is. */
static CUresult resource_desc(flyt_session *s, const flyt_res_desc *w, CUDA_RESOURCE_DESC *d)
{
    memset(d, 0, sizeof *d);
    d->resType = (CUresourcetype)w->type;
    d->flags = w->flags;
    flyt_bhandle h = NULL;
    CUresult r = CUDA_SUCCESS;
    switch (w->type) {
    case CU_RESOURCE_TYPE_ARRAY:
        r = flyt_lookup(s, w->handle, FLYT_H_ARRAY, &h);
        d->res.array.hArray = (CUarray)h;
        return r;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        r = flyt_lookup(s, w->handle, FLYT_H_MIPMAP, &h);
        d->res.mipmap.hMipmappedArray = (CUmipmappedArray)h;
        return r;
    case CU_RESOURCE_TYPE_LINEAR:
        d->res.linear.devPtr = (CUdeviceptr)w->handle;
        d->res.linear.format = (CUarray_format)w->format;
        d->res.linear.numChannels = w->channels;
        d->res.linear.sizeInBytes = (size_t)w->size;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
        d->res.pitch2D.devPtr = (CUdeviceptr)w->handle;
        d->res.pitch2D.format = (CUarray_format)w->format;
        d->res.pitch2D.numChannels = w->channels;
        d->res.pitch2D.width = (size_t)w->width;
        d->res.pitch2D.height = (size_t)w->height;
        d->res.pitch2D.pitchInBytes = (size_t)w->pitch;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUDA_TEXTURE_DESC texture_desc(const flyt_tex_desc *w)
{
    CUDA_TEXTURE_DESC t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 3; i++)
        t.addressMode[i] = (CUaddress_mode)w->address_mode[i];
    t.filterMode = (CUfilter_mode)w->filter_mode;
    t.flags = w->flags;
    t.maxAnisotropy = w->max_anisotropy;
    t.mipmapFilterMode = (CUfilter_mode)w->mipmap_filter_mode;
    t.mipmapLevelBias = w->mipmap_level_bias;
    t.minMipmapLevelClamp = w->min_mipmap_level_clamp;
    t.maxMipmapLevelClamp = w->max_mipmap_level_clamp;
    memcpy(t.borderColor, w->border_color, sizeof t.borderColor);
    return t;
}

static CUDA_RESOURCE_VIEW_DESC view_desc(const flyt_view_desc *w)
{
    CUDA_RESOURCE_VIEW_DESC v;
    memset(&v, 0, sizeof v);
    v.format = (CUresourceViewFormat)w->format;
    v.width = (size_t)w->width;
    v.height = (size_t)w->height;
    v.depth = (size_t)w->depth;
    v.firstMipmapLevel = w->first_mip;
    v.lastMipmapLevel = w->last_mip;
    v.firstLayer = w->first_layer;
    v.lastLayer = w->last_layer;
    return v;
}

static void add_value(flyt_session *s, flyt_call *c, enum flyt_htype type, uint64_t value,
                      CUresult (*destroy)(flyt_backend *, uint64_t))
{
    if (flyt_handles_add(&s->handles, type, (flyt_bhandle)(uintptr_t)value) == NULL) {
        destroy(s->b, value);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    ((flyt_rep_u64 *)c->rep)->value = value;
}

int handle_TEX_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_tex_create *r = c->req;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex = texture_desc(&r->tex);
    CUDA_RESOURCE_VIEW_DESC view = view_desc(&r->view);
    uint64_t obj = 0;
    c->result = resource_desc(s, &r->res, &res);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, tex_create, &res, &tex, r->view.present ? &view : NULL, &obj);
    if (c->result == CUDA_SUCCESS)
        add_value(s, c, FLYT_H_TEXOBJ, obj, s->b->ops->tex_destroy);
    return FLYT_CONT;
}

int handle_SURF_CREATE(flyt_session *s, flyt_call *c)
{
    CUDA_RESOURCE_DESC res;
    uint64_t obj = 0;
    c->result = resource_desc(s, c->req, &res);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, surf_create, &res, &obj);
    if (c->result == CUDA_SUCCESS)
        add_value(s, c, FLYT_H_SURFOBJ, obj, s->b->ops->surf_destroy);
    return FLYT_CONT;
}

struct value_query {
    enum flyt_htype type;
    uint64_t        value, id;
};

static int has_value(struct flyt_hentry *e, void *arg)
{
    struct value_query *q = arg;
    if (e->type != q->type || (uint64_t)(uintptr_t)e->bh != q->value)
        return 0;
    q->id = e->id;
    return 1;
}

/* Destroys an object the session made, found by its driver value. */
static int destroy_value(flyt_session *s, flyt_call *c, enum flyt_htype type,
                         CUresult (*destroy)(flyt_backend *, uint64_t))
{
    struct value_query q = {type, ((const flyt_req_handle *)c->req)->handle, 0};
    if (!flyt_handles_foreach(&s->handles, has_value, &q)) {
        c->result = CUDA_ERROR_INVALID_HANDLE;
        return FLYT_CONT;
    }
    c->result = destroy ? destroy(s->b, q.value) : CUDA_ERROR_NOT_SUPPORTED;
    if (c->result == CUDA_SUCCESS)
        flyt_handles_remove(&s->handles, q.id);
    return FLYT_CONT;
}

int handle_TEX_DESTROY(flyt_session *s, flyt_call *c)
{
    return destroy_value(s, c, FLYT_H_TEXOBJ, s->b->ops->tex_destroy);
}

int handle_SURF_DESTROY(flyt_session *s, flyt_call *c)
{
    return destroy_value(s, c, FLYT_H_SURFOBJ, s->b->ops->surf_destroy);
}
