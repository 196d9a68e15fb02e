/* MEM_* allocation ops, POINTER_ATTRS and memory pools.
 *
 * With a status page (a managed server, quota.h) every allocation is charged
 * against the memory quota before the backend makes it and recorded by
 * pointer; frees give the recorded size back. A refused allocation answers
 * CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation for the application). */
#include "ipc.h"
#include "session.h"

/* The bytes a pitched allocation takes at most before the backend chooses
 * the pitch: rows rounded up to 512 bytes (what both backends use; a larger
 * real pitch is charged afterwards). 0 when it overflows. */
static uint64_t pitch_estimate(uint64_t width, uint64_t height)
{
    uint64_t row, total;
    if (width > UINT64_MAX - 511)
        return 0;
    row = (width + 511) / 512 * 512;
    if (__builtin_mul_overflow(row, height, &total))
        return 0;
    return total;
}

/* After a successful allocation of size bytes that was charged: record it,
 * or, out of memory, undo it. */
static void record_alloc(flyt_session *s, flyt_call *c, uint64_t dptr, uint64_t size)
{
    if (dptr == 0) { /* nothing was allocated (size 0) */
        flyt_quota_uncharge(&s->mem, size);
        return;
    }
    if (flyt_memtab_add(&s->mem, dptr, size) != 0) {
        FLYT_BCALL(s, mem_free, dptr);
        flyt_quota_uncharge(&s->mem, size);
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
    }
}

/* Adds a backend object to the id table: its id, or 0 with c->result set
 * when out of memory (the caller then gives the object back). */
static uint64_t publish(flyt_session *s, flyt_call *c, enum flyt_htype type, flyt_bhandle bh)
{
    struct flyt_hentry *e = flyt_handles_add(&s->handles, type, bh);
    if (e)
        return e->id;
    c->result = CUDA_ERROR_OUT_OF_MEMORY;
    return 0;
}

int handle_MEM_ALLOC(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_alloc *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    uint64_t dptr = 0;
    if (flyt_quota_charge(&s->mem, r->size) != 0) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    c->result = FLYT_BCALL(s, mem_alloc, r->size, &dptr);
    if (c->result == CUDA_SUCCESS)
        record_alloc(s, c, dptr, r->size);
    else
        flyt_quota_uncharge(&s->mem, r->size);
    rep->value = c->result == CUDA_SUCCESS ? dptr : 0;
    return FLYT_CONT;
}

int handle_MEM_FREE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = FLYT_BCALL(s, mem_free, r->handle);
    if (c->result == CUDA_SUCCESS) {
        flyt_memtab_remove(&s->mem, r->handle);
        flyt_ipc_mem_freed(s, r->handle);
    }
    return FLYT_CONT;
}

int handle_MEM_ALLOC_PITCH(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_pitch *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    uint64_t dptr = 0, pitch = 0;
    uint64_t charged = 0;
    if (flyt_quota_active()) {
        charged = pitch_estimate(r->width_bytes, r->height);
        if ((charged == 0 && r->width_bytes && r->height) ||
            flyt_quota_charge(&s->mem, charged) != 0) {
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            return FLYT_CONT;
        }
    }
    c->result = FLYT_BCALL(s, mem_alloc_pitch, r->width_bytes, r->height, &dptr, &pitch);
    if (c->result != CUDA_SUCCESS) {
        flyt_quota_uncharge(&s->mem, charged);
        dptr = pitch = 0;
    } else if (flyt_quota_active() && dptr) {
        uint64_t real;
        if (__builtin_mul_overflow(pitch, r->height, &real))
            real = UINT64_MAX;
        if (real > charged && flyt_quota_charge(&s->mem, real - charged) != 0) {
            FLYT_BCALL(s, mem_free, dptr);
            flyt_quota_uncharge(&s->mem, charged);
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
            dptr = pitch = 0;
        } else {
            if (real < charged)
                flyt_quota_uncharge(&s->mem, charged - real);
            record_alloc(s, c, dptr, real);
            if (c->result != CUDA_SUCCESS)
                dptr = pitch = 0;
        }
    } else {
        flyt_quota_uncharge(&s->mem, charged);
    }
    rep->a = dptr;
    rep->b = pitch;
    return FLYT_CONT;
}

int handle_MEM_ALLOC_ASYNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_alloc *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle stream, pool = NULL; /* pool id 0: the device's current pool */
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS && r->pool != 0)
        c->result = flyt_lookup(s, r->pool, FLYT_H_POOL, &pool);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    uint64_t dptr = 0;
    if (flyt_quota_charge(&s->mem, r->size) != 0) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    c->result = FLYT_BCALL(s, mem_alloc_async, r->size, pool, stream, &dptr);
    if (c->result == CUDA_SUCCESS)
        record_alloc(s, c, dptr, r->size);
    else
        flyt_quota_uncharge(&s->mem, r->size);
    rep->value = c->result == CUDA_SUCCESS ? dptr : 0;
    return FLYT_CONT;
}

int handle_MEM_FREE_ASYNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_free_async *r = c->req;
    flyt_bhandle stream;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, mem_free_async, r->dptr, stream);
    /* given back when the free is queued: the application cannot use it again */
    if (c->result == CUDA_SUCCESS) {
        flyt_memtab_remove(&s->mem, r->dptr);
        flyt_ipc_mem_freed(s, r->dptr);
    }
    return FLYT_CONT;
}

int handle_POINTER_ATTRS(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = FLYT_BCALL(s, pointer_attrs, r->handle, (flyt_rep_pointer_attrs *)c->rep);
    return FLYT_CONT;
}

int handle_POOL_DEFAULT(flyt_session *s, flyt_call *c)
{
    const flyt_req_device *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (r->device != 0) {
        c->result = CUDA_ERROR_INVALID_DEVICE;
        return FLYT_CONT;
    }
    /* one id for the default pool, however often it is asked for */
    if (s->default_pool_id && flyt_handles_get(&s->handles, s->default_pool_id, FLYT_H_POOL)) {
        rep->value = s->default_pool_id;
        return FLYT_CONT;
    }
    flyt_bhandle pool = NULL;
    c->result = FLYT_BCALL(s, pool_default, &pool);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    s->default_pool_id = publish(s, c, FLYT_H_POOL, pool);
    rep->value = s->default_pool_id;
    return FLYT_CONT;
}

int handle_POOL_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_pool_create *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (r->device != 0) {
        c->result = CUDA_ERROR_INVALID_DEVICE;
        return FLYT_CONT;
    }
    flyt_bhandle pool = NULL;
    c->result = FLYT_BCALL(s, pool_create, r->max_size, r->handle_types, &pool);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    rep->value = publish(s, c, FLYT_H_POOL, pool);
    if (rep->value == 0)
        FLYT_BCALL(s, pool_destroy, pool);
    else
        flyt_handles_get(&s->handles, rep->value, FLYT_H_POOL)->u.pool =
            (struct flyt_pool_info){.max_size = r->max_size, .handle_types = r->handle_types};
    return FLYT_CONT;
}

int handle_POOL_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle pool;
    c->result = flyt_lookup(s, r->handle, FLYT_H_POOL, &pool);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, pool_destroy, pool);
    if (c->result == CUDA_SUCCESS) {
        flyt_handles_remove(&s->handles, r->handle);
        flyt_ipc_pool_gone(s, r->handle);
        if (r->handle == s->default_pool_id)
            s->default_pool_id = 0;
    }
    return FLYT_CONT;
}

/* pool id 0 means the default pool here too, as for MEM_ALLOC_ASYNC */
static CUresult pool_of(flyt_session *s, uint64_t id, flyt_bhandle *pool)
{
    if (id != 0)
        return flyt_lookup(s, id, FLYT_H_POOL, pool);
    return FLYT_BCALL(s, pool_default, pool);
}

int handle_POOL_TRIM(flyt_session *s, flyt_call *c)
{
    const flyt_req_pool_attr *r = c->req;
    flyt_bhandle pool;
    c->result = pool_of(s, r->pool, &pool);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, pool_trim, pool, r->value);
    return FLYT_CONT;
}

int handle_POOL_SET_ATTR(flyt_session *s, flyt_call *c)
{
    const flyt_req_pool_attr *r = c->req;
    flyt_bhandle pool;
    c->result = pool_of(s, r->pool, &pool);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, pool_set_attr, pool, r->attr, r->value);
    return FLYT_CONT;
}

int handle_POOL_GET_ATTR(flyt_session *s, flyt_call *c)
{
    const flyt_req_pool_attr *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle pool;
    c->result = pool_of(s, r->pool, &pool);
    uint64_t v = 0;
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, pool_get_attr, pool, r->attr, &v);
    rep->value = v;
    return FLYT_CONT;
}
