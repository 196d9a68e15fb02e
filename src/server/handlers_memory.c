/* MEM_* allocation ops, POINTER_ATTRS and memory pools. */
#include "session.h"

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
    c->result = FLYT_BCALL(s, mem_alloc, r->size, &dptr);
    rep->value = dptr;
    return FLYT_CONT;
}

int handle_MEM_FREE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    c->result = FLYT_BCALL(s, mem_free, r->handle);
    return FLYT_CONT;
}

int handle_MEM_ALLOC_PITCH(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_pitch *r = c->req;
    flyt_rep_u64_pair *rep = c->rep;
    uint64_t dptr = 0, pitch = 0;
    c->result = FLYT_BCALL(s, mem_alloc_pitch, r->width_bytes, r->height, &dptr, &pitch);
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
    c->result = FLYT_BCALL(s, mem_alloc_async, r->size, pool, stream, &dptr);
    rep->value = dptr;
    return FLYT_CONT;
}

int handle_MEM_FREE_ASYNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_mem_free_async *r = c->req;
    flyt_bhandle stream;
    c->result = flyt_lookup_stream(s, r->stream, &stream);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, mem_free_async, r->dptr, stream);
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
    c->result = FLYT_BCALL(s, pool_create, r->max_size, &pool);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    rep->value = publish(s, c, FLYT_H_POOL, pool);
    if (rep->value == 0)
        FLYT_BCALL(s, pool_destroy, pool);
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
