/*
 * ARRAY_*, MIPMAP_*, TEX_* and SURF_*: CUDA arrays and the texture and
 * surface objects that read them. Arrays and mipmapped arrays get ids of the
 * session; texture and surface objects keep the driver's own value, which
 * the client hands to kernels as a plain parameter (after a restore the
 * driver may give another: the backend then translates the client's value,
 * docs/state-format.md), and every value that comes back is checked against
 * the session's own. What each was made of is kept for checkpoints.
 */
#include <stdlib.h>
#include <string.h>

#include "flyt_mipmap.h"
#include "session.h"
#include "state_array.h"

static CUDA_ARRAY3D_DESCRIPTOR array_desc(const flyt_req_array_create *r)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)r->width, .Height = (size_t)r->height,
                                 .Depth = (size_t)r->depth, .Format = (CUarray_format)r->format,
                                 .NumChannels = r->channels, .Flags = r->flags};
    return d;
}

/* The new object's entry, its id in rep; or the backend object destroyed again. */
static struct flyt_hentry *add_object(flyt_session *s, flyt_call *c, enum flyt_htype type,
                                      flyt_bhandle bh,
                                      CUresult (*destroy)(flyt_backend *, flyt_bhandle))
{
    struct flyt_hentry *e = flyt_handles_add(&s->handles, type, bh);
    if (e == NULL) {
        destroy(s->b, bh);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    ((flyt_rep_u64 *)c->rep)->value = e->id;
    return e;
}

int handle_ARRAY_CREATE(flyt_session *s, flyt_call *c)
{
    CUDA_ARRAY3D_DESCRIPTOR d = array_desc(c->req);
    flyt_bhandle a = NULL;
    c->result = FLYT_BCALL(s, array_create, &d, &a);
    struct flyt_hentry *e = c->result == CUDA_SUCCESS
                                ? add_object(s, c, FLYT_H_ARRAY, a, s->b->ops->array_destroy)
                                : NULL;
    if (e) {
        e->u.array.desc = *(const flyt_req_array_create *)c->req;
        e->u.array.desc.levels = 0;
    }
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
    struct flyt_hentry *e = c->result == CUDA_SUCCESS
                                ? add_object(s, c, FLYT_H_MIPMAP, m, s->b->ops->mipmap_destroy)
                                : NULL;
    if (e)
        e->u.array.desc = *r;
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

/* Level l's extent: the mipmapped array's halved l times. */
flyt_req_array_create flyt_array_level_desc(const flyt_req_array_create *m, unsigned l)
{
    CUDA_ARRAY3D_DESCRIPTOR d = flyt_mipmap_level_desc((CUDA_ARRAY3D_DESCRIPTOR[]){array_desc(m)}, l);
    return (flyt_req_array_create){.width = d.Width, .height = d.Height, .depth = d.Depth,
                                   .format = m->format, .channels = m->channels,
                                   .flags = m->flags};
}

void flyt_array_level_name(struct flyt_hentry *level, const struct flyt_hentry *mipmap,
                           unsigned l)
{
    level->u.array.mipmap = mipmap->id;
    level->u.array.level = l;
    level->u.array.desc = flyt_array_level_desc(&mipmap->u.array.desc, l);
}

int handle_MIPMAP_LEVEL(flyt_session *s, flyt_call *c)
{
    const flyt_req_mipmap_level *r = c->req;
    struct flyt_hentry *m = flyt_handles_get(&s->handles, r->mipmap, FLYT_H_MIPMAP);
    flyt_bhandle a = NULL;
    c->result = m ? FLYT_BCALL(s, mipmap_level, m->bh, r->level, &a) : CUDA_ERROR_INVALID_HANDLE;
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    struct flyt_hentry *e = add_object(s, c, FLYT_H_ARRAY, a, keep_level);
    if (e)
        flyt_array_level_name(e, m, r->level);
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

CUresult flyt_tex_make(flyt_session *s, const flyt_req_tex_create *r, uint64_t *obj)
{
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex = texture_desc(&r->tex);
    CUDA_RESOURCE_VIEW_DESC view = view_desc(&r->view);
    CUresult e = resource_desc(s, &r->res, &res);
    return e == CUDA_SUCCESS ? FLYT_BCALL(s, tex_create, &res, &tex, r->view.present ? &view : NULL, obj)
                             : e;
}

CUresult flyt_surf_make(flyt_session *s, const flyt_res_desc *r, uint64_t *obj)
{
    CUDA_RESOURCE_DESC res;
    CUresult e = resource_desc(s, r, &res);
    return e == CUDA_SUCCESS ? FLYT_BCALL(s, surf_create, &res, obj) : e;
}

struct value_query {
    uint64_t value, id;
};

/* A texture or surface object whose client value is q->value. */
static int has_value(struct flyt_hentry *e, void *arg)
{
    struct value_query *q = arg;
    if ((e->type != FLYT_H_TEXOBJ && e->type != FLYT_H_SURFOBJ) || e->u.obj.value != q->value)
        return 0;
    q->id = e->id;
    return 1;
}

static int value_held(flyt_session *s, uint64_t value)
{
    struct value_query q = {value, 0};
    return flyt_handles_foreach(&s->handles, has_value, &q);
}

CUresult flyt_obj_keep(flyt_session *s, struct flyt_hentry *e, uint64_t client,
                       const void *desc, size_t len)
{
    e->u.obj.desc = calloc(1, sizeof *e->u.obj.desc);
    if (e->u.obj.desc == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(e->u.obj.desc, desc, len);
    uint64_t now = (uint64_t)(uintptr_t)e->bh;
    CUresult r = client == now         ? CUDA_SUCCESS
               : s->b->ops->obj_alias  ? s->b->ops->obj_alias(s->b, client, now)
                                       : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        e->u.obj.value = client;
    return r;
}

/* The value the client gets for the backend's new object value: the same,
 * unless a restored object's client already holds it (the backend then
 * translates a fresh one). */
static uint64_t client_value(flyt_session *s, uint64_t value)
{
    if (!value_held(s, value))
        return value;
    uint64_t v = value | (1ull << 63);
    while (v == 0 || value_held(s, v))
        v++;
    return v;
}

static void add_value(flyt_session *s, flyt_call *c, enum flyt_htype type, uint64_t value,
                      const void *desc, size_t len, CUresult (*destroy)(flyt_backend *, uint64_t))
{
    uint64_t client = client_value(s, value);
    struct flyt_hentry *e = flyt_handles_add(&s->handles, type, (flyt_bhandle)(uintptr_t)value);
    c->result = e ? flyt_obj_keep(s, e, client, desc, len) : CUDA_ERROR_OUT_OF_MEMORY;
    if (c->result != CUDA_SUCCESS) {
        if (e)
            flyt_handles_remove(&s->handles, e->id);
        destroy(s->b, value);
        return;
    }
    ((flyt_rep_u64 *)c->rep)->value = client;
}

int handle_TEX_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_tex_create *r = c->req;
    uint64_t obj = 0;
    c->result = flyt_tex_make(s, r, &obj);
    if (c->result == CUDA_SUCCESS)
        add_value(s, c, FLYT_H_TEXOBJ, obj, r, sizeof *r, s->b->ops->tex_destroy);
    return FLYT_CONT;
}

int handle_SURF_CREATE(flyt_session *s, flyt_call *c)
{
    uint64_t obj = 0;
    c->result = flyt_surf_make(s, c->req, &obj);
    if (c->result == CUDA_SUCCESS)
        add_value(s, c, FLYT_H_SURFOBJ, obj, c->req, sizeof(flyt_res_desc), s->b->ops->surf_destroy);
    return FLYT_CONT;
}

/* Destroys an object the session made, found by the client's value. */
static int destroy_value(flyt_session *s, flyt_call *c, enum flyt_htype type,
                         CUresult (*destroy)(flyt_backend *, uint64_t))
{
    struct value_query q = {((const flyt_req_handle *)c->req)->handle, 0};
    struct flyt_hentry *e = flyt_handles_foreach(&s->handles, has_value, &q)
                                ? flyt_handles_get(&s->handles, q.id, type)
                                : NULL;
    if (e == NULL) {
        c->result = CUDA_ERROR_INVALID_HANDLE;
        return FLYT_CONT;
    }
    uint64_t now = (uint64_t)(uintptr_t)e->bh;
    c->result = destroy ? destroy(s->b, now) : CUDA_ERROR_NOT_SUPPORTED;
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (q.value != now && s->b->ops->obj_alias)
        s->b->ops->obj_alias(s->b, q.value, q.value); /* forgotten */
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
