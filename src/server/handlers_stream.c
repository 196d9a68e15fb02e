/* STREAM_* and EVENT_*: backend streams and events behind session ids. */
#include <stdlib.h>

#include "ipc.h"
#include "session.h"
#include "stream_attrs.h"

void flyt_publish_stream_event(flyt_session *s, flyt_call *c, enum flyt_htype type, flyt_bhandle bh,
                               uint64_t wanted, uint64_t *id)
{
    struct flyt_hentry *e = wanted ? flyt_handles_add_id(&s->handles, wanted, type, bh)
                                   : flyt_handles_add(&s->handles, type, bh);
    if (e) {
        *id = e->id;
        return;
    }
    if (type == FLYT_H_STREAM)
        FLYT_BCALL(s, stream_destroy, bh);
    else
        FLYT_BCALL(s, event_destroy, bh);
    /* a client id out of its range or taken is the client's mistake */
    c->result = wanted && (wanted < FLYT_CLIENT_IDS || flyt_handles_get(&s->handles, wanted, type) ||
                           flyt_handles_get(&s->handles, wanted, type == FLYT_H_STREAM ? FLYT_H_EVENT
                                                                                       : FLYT_H_STREAM))
                    ? CUDA_ERROR_INVALID_VALUE
                    : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- streams ---- */

int handle_STREAM_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_stream_create *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle st = NULL;
    c->result = FLYT_BCALL(s, stream_create, r->flags, r->priority, &st);
    if (c->result == CUDA_SUCCESS)
        flyt_publish_stream_event(s, c, FLYT_H_STREAM, st, r->id, &rep->value);
    return FLYT_CONT;
}

int handle_STREAM_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle st;
    /* the fixed streams 0/1/2 are not in the table, so they cannot be destroyed */
    c->result = flyt_lookup(s, r->handle, FLYT_H_STREAM, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_destroy, st);
    if (c->result == CUDA_SUCCESS) {
        flyt_handles_remove(&s->handles, r->handle);
        flyt_stream_attrs_forget(s, r->handle);
    }
    return FLYT_CONT;
}

int handle_STREAM_SYNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle st;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_sync, st);
    return FLYT_CONT;
}

int handle_STREAM_QUERY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle st;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_query, st);
    return FLYT_CONT;
}

int handle_STREAM_WAIT_EVENT(flyt_session *s, flyt_call *c)
{
    const flyt_req_stream_wait *r = c->req;
    flyt_bhandle st, ev;
    c->result = flyt_lookup_stream(s, r->stream, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup(s, r->event, FLYT_H_EVENT, &ev);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_wait_event, st, ev, r->flags);
    return FLYT_CONT;
}

int handle_STREAM_GET_FLAGS(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_i32 *rep = c->rep;
    flyt_bhandle st;
    unsigned flags = 0;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_get_flags, st, &flags);
    rep->value = (int32_t)flags;
    return FLYT_CONT;
}

int handle_STREAM_GET_PRIO(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_i32 *rep = c->rep;
    flyt_bhandle st;
    int prio = 0;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_get_priority, st, &prio);
    rep->value = prio;
    return FLYT_CONT;
}

/* A host function that is never enqueued is still reported (status set),
 * so that the client forgets it and waits for it no more. */
int handle_STREAM_HOST_FUNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_host_func *r = c->req;
    flyt_bhandle st = NULL;
    c->result = flyt_lookup_stream(s, r->stream, &st);
    struct flyt_cb_msg *m = c->result == CUDA_SUCCESS
                                ? flyt_host_func_msg(s, st, 0, r->callback_id)
                                : calloc(1, sizeof *m);
    if (m == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT; /* the client then waits in vain: nothing better to do */
    }
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, stream_host_func, st, flyt_host_func_run, m);
    if (c->result != CUDA_SUCCESS && !m->keep) {
        m->s = s;
        m->callback_id = r->callback_id;
        m->status = c->result;
        flyt_post_callback(m);
    }
    return FLYT_CONT;
}

/* ---- events ---- */

int handle_EVENT_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_event_create *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle ev = NULL;
    c->result = FLYT_BCALL(s, event_create, r->flags, &ev);
    if (c->result == CUDA_SUCCESS)
        flyt_publish_stream_event(s, c, FLYT_H_EVENT, ev, r->id, &rep->value);
    struct flyt_hentry *e = c->result == CUDA_SUCCESS
                                ? flyt_handles_get(&s->handles, rep->value, FLYT_H_EVENT) : NULL;
    if (e)
        e->u.event_flags = r->flags;
    return FLYT_CONT;
}

int handle_EVENT_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle ev;
    c->result = flyt_lookup(s, r->handle, FLYT_H_EVENT, &ev);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, event_destroy, ev);
    if (c->result == CUDA_SUCCESS) {
        flyt_handles_remove(&s->handles, r->handle);
        flyt_ipc_event_gone(s, r->handle);
    }
    return FLYT_CONT;
}

int handle_EVENT_RECORD(flyt_session *s, flyt_call *c)
{
    const flyt_req_event_record *r = c->req;
    flyt_bhandle ev, st;
    c->result = flyt_lookup(s, r->event, FLYT_H_EVENT, &ev);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup_stream(s, r->stream, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, event_record, ev, st, r->flags);
    return FLYT_CONT;
}

int handle_EVENT_QUERY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle ev;
    c->result = flyt_lookup(s, r->handle, FLYT_H_EVENT, &ev);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, event_query, ev);
    return FLYT_CONT;
}

int handle_EVENT_SYNC(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle ev;
    c->result = flyt_lookup(s, r->handle, FLYT_H_EVENT, &ev);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, event_sync, ev);
    return FLYT_CONT;
}

int handle_EVENT_ELAPSED(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle_pair *r = c->req;
    flyt_rep_f32 *rep = c->rep;
    flyt_bhandle start, end;
    float ms = 0;
    c->result = flyt_lookup(s, r->a, FLYT_H_EVENT, &start);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup(s, r->b, FLYT_H_EVENT, &end);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, event_elapsed, start, end, &ms);
    rep->value = ms;
    return FLYT_CONT;
}
