/* Arrays, mipmapped arrays, texture and surface objects in a checkpoint: see state_array.h. */
#include "state_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_log.h"
#include "flyt_mipmap.h"
#include "state_format.h"

#define MAX_LEVELS 32u /* a mipmapped array of 2^32 texels a side has 33; none is near */

/* An array's contents as the state holds them: slices of rows of row bytes. */
struct shape {
    uint64_t row, rows, slices, bytes;
};

/* 0 when d describes no array whose contents a state can hold. */
static int shape_of(const flyt_req_array_create *d, struct shape *sh)
{
    unsigned elem = flyt_array_elem_bytes(d->format, d->channels);
    sh->rows = d->height ? d->height : 1;
    sh->slices = d->depth ? d->depth : 1;
    return elem != 0 && d->width != 0 && d->width <= UINT32_MAX && sh->rows <= UINT32_MAX &&
           sh->slices <= UINT32_MAX && !__builtin_mul_overflow(d->width, elem, &sh->row) &&
           !__builtin_mul_overflow(sh->row, sh->rows, &sh->bytes) &&
           !__builtin_mul_overflow(sh->bytes, sh->slices, &sh->bytes);
}

/* Every level's contents together; 0 when d is no mipmapped array a state can hold. */
static int mipmap_bytes(const flyt_req_array_create *d, uint64_t *total)
{
    *total = 0;
    if (d->levels == 0 || d->levels > MAX_LEVELS)
        return 0;
    for (unsigned l = 0; l < d->levels; l++) {
        flyt_req_array_create ld = flyt_array_level_desc(d, l);
        struct shape sh;
        if (!shape_of(&ld, &sh) || __builtin_add_overflow(*total, sh.bytes, total))
            return 0;
    }
    return 1;
}

int flyt_state_array_section(uint32_t type)
{
    return type >= FLYT_SS_ARRAY && type <= FLYT_SS_SURFOBJ;
}

int flyt_state_array_record_ok(uint32_t type, const unsigned char *p, uint64_t len)
{
    struct shape sh;
    uint64_t bytes;
    switch (type) {
    case FLYT_SS_ARRAY: {
        struct flyt_state_array r;
        if (len < sizeof r)
            return 0;
        memcpy(&r, p, sizeof r);
        if (!shape_of(&r.desc, &sh) || r.pad != 0 || r.desc.levels != 0)
            return 0;
        return len - sizeof r == (r.mipmap ? 0 : sh.bytes) && (r.mipmap || r.level == 0);
    }
    case FLYT_SS_MIPMAP: {
        struct flyt_state_mipmap r;
        if (len < sizeof r)
            return 0;
        memcpy(&r, p, sizeof r);
        return mipmap_bytes(&r.desc, &bytes) && len - sizeof r == bytes;
    }
    case FLYT_SS_TEXOBJ: {
        struct flyt_state_texobj r;
        if (len != sizeof r)
            return 0;
        memcpy(&r, p, sizeof r);
        return r.value != 0;
    }
    case FLYT_SS_SURFOBJ: {
        struct flyt_state_surfobj r;
        if (len != sizeof r)
            return 0;
        memcpy(&r, p, sizeof r);
        return r.value != 0;
    }
    }
    return 0;
}

const char *flyt_state_array_refused(const flyt_session *s, const struct flyt_hentry *e)
{
    const struct flyt_backend_ops *ops = s->b->ops;
    struct shape sh;
    uint64_t bytes;
    if (!ops->copy_3d || !ops->obj_alias)
        return "CUDA array, texture or surface object (the backend cannot restore them)";
    switch (e->type) {
    case FLYT_H_ARRAY:
        return shape_of(&e->u.array.desc, &sh) ? NULL
                                               : "CUDA array of a block-compressed or YUV format";
    case FLYT_H_MIPMAP:
        return mipmap_bytes(&e->u.array.desc, &bytes)
                   ? NULL : "mipmapped array of a block-compressed or YUV format";
    case FLYT_H_TEXOBJ:
    case FLYT_H_SURFOBJ: return e->u.obj.desc ? NULL : "texture or surface object without its descriptor";
    default: return "object of an unknown kind";
    }
}

/* ---- capture ---- */

static int put_section(struct flyt_swriter *sw, uint32_t type, const void *rec, size_t len,
                       uint64_t extra)
{
    struct flyt_state_section sec = {type, 0, len + extra};
    return flyt_sw_put(sw, &sec, sizeof sec) || flyt_sw_put(sw, rec, len) ? -1 : 0;
}

/* A copy between an array and packed host rows at (y, z) of n rows. */
static struct flyt_bcopy rows_copy(flyt_bhandle a, void *host, const struct shape *sh, uint64_t y,
                                   uint64_t z, uint64_t n, uint64_t depth, int to_host)
{
    struct flyt_bside arr = {.kind = FLYT_BSIDE_ARRAY, .array = a, .y = y, .z = z};
    struct flyt_bside mem = {.kind = FLYT_BSIDE_HOST, .host = host, .pitch = sh->row, .height = n};
    struct flyt_bcopy c = {.width = sh->row, .height = n, .depth = depth};
    c.dst = to_host ? mem : arr;
    c.src = to_host ? arr : mem;
    return c;
}

/* The array's contents, read a few rows at a time through a bounce buffer. */
static CUresult write_contents(flyt_session *s, struct flyt_swriter *sw, flyt_bhandle a,
                               const flyt_req_array_create *d)
{
    struct shape sh;
    if (!shape_of(d, &sh))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t per = FLYT_STAGING_CHUNK / sh.row ? FLYT_STAGING_CHUNK / sh.row : 1;
    if (per > sh.rows)
        per = sh.rows;
    unsigned char *buf = malloc((size_t)(per * sh.row));
    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (uint64_t z = 0; z < sh.slices && r == CUDA_SUCCESS; z++)
        for (uint64_t y = 0; y < sh.rows && r == CUDA_SUCCESS; y += per) {
            uint64_t n = sh.rows - y < per ? sh.rows - y : per;
            struct flyt_bcopy c = rows_copy(a, buf, &sh, y, z, n, 1, 1);
            r = s->b->ops->copy_3d(s->b, &c, FLYT_BSTREAM_DEFAULT, 1);
            if (r == CUDA_SUCCESS && flyt_sw_put(sw, buf, (size_t)(n * sh.row)) != 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
        }
    free(buf);
    return r;
}

static CUresult write_array(flyt_session *s, struct flyt_swriter *sw, const struct flyt_hentry *e)
{
    const struct flyt_array_info *a = &e->u.array;
    struct flyt_state_array rec = {.id = e->id, .mipmap = a->mipmap, .level = a->level,
                                   .desc = a->desc};
    struct shape sh;
    if (!shape_of(&a->desc, &sh))
        return CUDA_ERROR_INVALID_VALUE;
    if (put_section(sw, FLYT_SS_ARRAY, &rec, sizeof rec, a->mipmap ? 0 : sh.bytes) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    return a->mipmap ? CUDA_SUCCESS : write_contents(s, sw, e->bh, &a->desc);
}

/* A mipmapped array and every level's contents (levels the client never
 * fetched included: a texture reads them). */
static CUresult write_mipmap(flyt_session *s, struct flyt_swriter *sw, const struct flyt_hentry *e)
{
    struct flyt_state_mipmap rec = {.id = e->id, .desc = e->u.array.desc};
    uint64_t bytes;
    if (!mipmap_bytes(&rec.desc, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    if (put_section(sw, FLYT_SS_MIPMAP, &rec, sizeof rec, bytes) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    CUresult r = CUDA_SUCCESS;
    for (unsigned l = 0; l < rec.desc.levels && r == CUDA_SUCCESS; l++) {
        flyt_bhandle level = NULL;
        flyt_req_array_create ld = flyt_array_level_desc(&rec.desc, l);
        r = FLYT_BCALL(s, mipmap_level, e->bh, l, &level);
        if (r == CUDA_SUCCESS)
            r = write_contents(s, sw, level, &ld);
    }
    return r;
}

CUresult flyt_state_array_write(flyt_session *s, struct flyt_swriter *sw, const struct flyt_hentry *e)
{
    switch (e->type) {
    case FLYT_H_ARRAY: return write_array(s, sw, e);
    case FLYT_H_MIPMAP: return write_mipmap(s, sw, e);
    case FLYT_H_TEXOBJ: {
        struct flyt_state_texobj rec = {.id = e->id, .value = e->u.obj.value, .desc = *e->u.obj.desc};
        return put_section(sw, FLYT_SS_TEXOBJ, &rec, sizeof rec, 0) ? CUDA_ERROR_OPERATING_SYSTEM
                                                                     : CUDA_SUCCESS;
    }
    case FLYT_H_SURFOBJ: {
        struct flyt_state_surfobj rec = {.id = e->id, .value = e->u.obj.value,
                                         .res = e->u.obj.desc->res};
        return put_section(sw, FLYT_SS_SURFOBJ, &rec, sizeof rec, 0) ? CUDA_ERROR_OPERATING_SYSTEM
                                                                      : CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ---- restore ---- */

/* The contents of an array of d from data (read-only: the mapped state), a
 * slice at a time; *used: their bytes. */
static CUresult read_contents(flyt_session *s, flyt_bhandle a, const flyt_req_array_create *d,
                              const unsigned char *data, uint64_t *used)
{
    struct shape sh;
    if (!shape_of(d, &sh))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    for (uint64_t z = 0; z < sh.slices && r == CUDA_SUCCESS; z++) {
        void *slice = (void *)(uintptr_t)(data + z * sh.row * sh.rows); /* only read */
        struct flyt_bcopy c = rows_copy(a, slice, &sh, 0, z, sh.rows, 1, 0);
        r = s->b->ops->copy_3d(s->b, &c, FLYT_BSTREAM_DEFAULT, 1);
    }
    *used = sh.bytes;
    return r;
}

static CUresult restore_array(flyt_session *s, const struct flyt_state_array *r,
                              const unsigned char *tail, uint64_t *last, char *err, size_t errlen)
{
    flyt_bhandle a = NULL;
    const struct flyt_hentry *m = NULL;
    CUresult e;
    if (r->mipmap) {
        m = flyt_handles_get(&s->handles, r->mipmap, FLYT_H_MIPMAP);
        e = m ? FLYT_BCALL(s, mipmap_level, m->bh, r->level, &a) : CUDA_ERROR_INVALID_HANDLE;
    } else {
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)r->desc.width, .Height = (size_t)r->desc.height,
                                     .Depth = (size_t)r->desc.depth,
                                     .Format = (CUarray_format)r->desc.format,
                                     .NumChannels = r->desc.channels, .Flags = r->desc.flags};
        e = FLYT_BCALL(s, array_create, &d, &a);
    }
    struct flyt_hentry *h = e == CUDA_SUCCESS ? flyt_state_add_exact(s, r->id, FLYT_H_ARRAY, a, last)
                                              : NULL;
    if (h == NULL) {
        if (a && !r->mipmap)
            FLYT_BCALL(s, array_destroy, a);
        snprintf(err, errlen, "CUDA array %llu cannot be made again: CUDA error %d",
            (unsigned long long)r->id, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    if (m) {
        flyt_array_level_name(h, m, r->level);
        return CUDA_SUCCESS;
    }
    h->u.array.desc = r->desc;
    uint64_t used;
    e = read_contents(s, a, &r->desc, tail, &used);
    if (e != CUDA_SUCCESS)
        snprintf(err, errlen, "CUDA array %llu: writing its contents failed: CUDA error %d",
            (unsigned long long)r->id, (int)e);
    return e;
}

static CUresult restore_mipmap(flyt_session *s, const struct flyt_state_mipmap *r,
                               const unsigned char *tail, uint64_t *last, char *err, size_t errlen)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)r->desc.width, .Height = (size_t)r->desc.height,
                                 .Depth = (size_t)r->desc.depth,
                                 .Format = (CUarray_format)r->desc.format,
                                 .NumChannels = r->desc.channels, .Flags = r->desc.flags};
    flyt_bhandle m = NULL;
    CUresult e = FLYT_BCALL(s, mipmap_create, &d, r->desc.levels, &m);
    struct flyt_hentry *h = e == CUDA_SUCCESS ? flyt_state_add_exact(s, r->id, FLYT_H_MIPMAP, m, last)
                                              : NULL;
    if (h == NULL) {
        if (m)
            FLYT_BCALL(s, mipmap_destroy, m);
        snprintf(err, errlen, "mipmapped array %llu cannot be made again: CUDA error %d",
            (unsigned long long)r->id, (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    h->u.array.desc = r->desc;
    for (unsigned l = 0; l < r->desc.levels && e == CUDA_SUCCESS; l++) {
        flyt_bhandle level = NULL;
        flyt_req_array_create ld = flyt_array_level_desc(&r->desc, l);
        uint64_t used = 0;
        e = FLYT_BCALL(s, mipmap_level, m, l, &level);
        if (e == CUDA_SUCCESS)
            e = read_contents(s, level, &ld, tail, &used);
        tail += used;
    }
    if (e != CUDA_SUCCESS)
        snprintf(err, errlen, "mipmapped array %llu: writing its levels failed: CUDA error %d",
            (unsigned long long)r->id, (int)e);
    return e;
}

/* A texture or surface object made again from its descriptor, named by the
 * value its client holds. */
static CUresult restore_obj(flyt_session *s, uint32_t type, const unsigned char *p, uint64_t *last,
                            char *err, size_t errlen)
{
    union {
        struct flyt_state_texobj  tex;
        struct flyt_state_surfobj surf;
    } r;
    int tex = type == FLYT_SS_TEXOBJ;
    memcpy(&r, p, tex ? sizeof r.tex : sizeof r.surf);
    uint64_t id = tex ? r.tex.id : r.surf.id, client = tex ? r.tex.value : r.surf.value, obj = 0;
    CUresult e = tex ? flyt_tex_make(s, &r.tex.desc, &obj) : flyt_surf_make(s, &r.surf.res, &obj);
    struct flyt_hentry *h =
        e == CUDA_SUCCESS ? flyt_state_add_exact(s, id, tex ? FLYT_H_TEXOBJ : FLYT_H_SURFOBJ,
                                                 (flyt_bhandle)(uintptr_t)obj, last)
                          : NULL;
    if (h)
        e = tex ? flyt_obj_keep(s, h, client, &r.tex.desc, sizeof r.tex.desc)
                : flyt_obj_keep(s, h, client, &r.surf.res, sizeof r.surf.res);
    if (h == NULL || e != CUDA_SUCCESS) {
        if (h)
            flyt_handles_remove(&s->handles, id);
        if (obj)
            tex ? FLYT_BCALL(s, tex_destroy, obj) : FLYT_BCALL(s, surf_destroy, obj);
        snprintf(err, errlen, "%s object %llu (value 0x%llx) cannot be made again: CUDA error %d",
            tex ? "texture" : "surface", (unsigned long long)id, (unsigned long long)client,
            (int)(e ? e : CUDA_ERROR_INVALID_VALUE));
        return e ? e : CUDA_ERROR_INVALID_VALUE;
    }
    if (obj != client)
        flyt_info("restore: %s object 0x%llx is 0x%llx here: the old value is translated in "
                  "kernel parameters", tex ? "texture" : "surface", (unsigned long long)client,
                  (unsigned long long)obj);
    return CUDA_SUCCESS;
}

CUresult flyt_state_array_restore(flyt_session *s, uint32_t type, const unsigned char *p,
                                  uint64_t len, uint64_t *last, char *err, size_t errlen)
{
    (void)len; /* checked by flyt_state_array_record_ok */
    switch (type) {
    case FLYT_SS_ARRAY: {
        struct flyt_state_array r;
        memcpy(&r, p, sizeof r);
        return restore_array(s, &r, p + sizeof r, last, err, errlen);
    }
    case FLYT_SS_MIPMAP: {
        struct flyt_state_mipmap r;
        memcpy(&r, p, sizeof r);
        return restore_mipmap(s, &r, p + sizeof r, last, err, errlen);
    }
    default: return restore_obj(s, type, p, last, err, errlen);
    }
}
