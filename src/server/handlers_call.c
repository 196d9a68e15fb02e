/* CALL: the plain driver calls of calls.api, checked and translated here by
 * their parameters' kinds, then run by the backend. */
#include <cuda.h>
#include <string.h>

#include "calls.h"
#include "session.h"
#include "state_graph.h"
#include "stream_attrs.h"

static const struct flyt_call_desc call_descs[FLYT_CALL_LIMIT] = {
#include "flyt_calls_desc.inc"
};

const struct flyt_call_desc *flyt_call_desc(uint32_t id)
{
    return id < FLYT_CALL_LIMIT && call_descs[id].symbol != NULL ? &call_descs[id] : NULL;
}

/* Swaps the client's handle ids for the backend's handles, by kind. */
static CUresult translate_args(flyt_session *s, const struct flyt_call_desc *d, uint64_t *a)
{
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < d->nargs && r == CUDA_SUCCESS; i++) {
        flyt_bhandle bh = NULL;
        switch (d->kinds[i]) {
        case FLYT_ARG_STREAM:
            r = flyt_lookup_stream(s, a[i], &bh);
            a[i] = (uint64_t)(uintptr_t)bh;
            break;
        case FLYT_ARG_EVENT:
            r = flyt_lookup(s, a[i], FLYT_H_EVENT, &bh);
            a[i] = (uint64_t)(uintptr_t)bh;
            break;
        case FLYT_ARG_FUNC:
            r = flyt_lookup(s, a[i], FLYT_H_FUNC, &bh);
            a[i] = (uint64_t)(uintptr_t)bh;
            break;
        case FLYT_ARG_GRAPH:
        case FLYT_ARG_GEXEC:
        case FLYT_ARG_GNODE:
        case FLYT_ARG_USEROBJ:
            r = flyt_lookup(s, a[i], d->kinds[i] == FLYT_ARG_GRAPH     ? FLYT_H_GRAPH
                                     : d->kinds[i] == FLYT_ARG_GEXEC   ? FLYT_H_GRAPH_EXEC
                                     : d->kinds[i] == FLYT_ARG_USEROBJ ? FLYT_H_USER_OBJECT
                                                                       : FLYT_H_GRAPH_NODE, &bh);
            a[i] = (uint64_t)(uintptr_t)bh;
            break;
        case FLYT_ARG_DEVICE:
            r = a[i] == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
            break;
        case FLYT_ARG_CTX:
        case FLYT_ARG_IN:
        case FLYT_ARG_OUT:
            a[i] = 0;
            break;
        default:
            break;
        }
    }
    return r;
}

int handle_CALL(flyt_session *s, flyt_call *c)
{
    const flyt_req_call *r = c->req;
    const struct flyt_call_desc *d = flyt_call_desc(r->id);
    if (d == NULL)
        return flyt_violation(s, c, "no plain call has id %u", r->id);
    if (r->in_size != d->in_size)
        return flyt_violation(s, c, "%s takes %u bytes in, not %u", d->symbol, d->in_size,
                              r->in_size);
    if ((c->hdr->flags & FLYT_F_NOREPLY) && !d->async)
        return flyt_violation(s, c, "%s needs a reply", d->symbol);
    int rc = flyt_expect_data(s, c, r->in_size);
    if (rc != FLYT_CONT)
        return rc;
    _Alignas(16) unsigned char in[FLYT_CALL_MAX_BYTES], out[FLYT_CALL_MAX_BYTES];
    if (flyt_recv_data(s, c, in, r->in_size) != 0)
        return FLYT_END_IO;
    uint64_t args[FLYT_CALL_MAX_ARGS];
    memcpy(args, r->args, sizeof args);
    memset(out, 0, sizeof out);
    c->result = translate_args(s, d, args);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, call, r->id, args, in, out);
    if (c->result == CUDA_SUCCESS) {
        flyt_stream_attrs_note(s, r->id, r->args, in);
        flyt_state_graph_call_note(s, r->id, r->args);
    }
    flyt_rep_call *rep = c->rep;
    rep->out_size = d->out_size;
    if (c->result == CUDA_SUCCESS && d->out_size &&
        flyt_reply(s, c, CUDA_SUCCESS, out, d->out_size) != 0)
        return FLYT_END_IO;
    return FLYT_CONT;
}
