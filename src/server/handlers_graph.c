/*
 * CUDA graphs (docs/graphs.md): stream capture, explicit construction,
 * instantiation. Graphs, execs and the nodes the client added have ids the
 * client chose; nodes the server names first (GRAPH_NODES, CAPTURE_INFO,
 * a failed instantiate or update) get an id here, the same one each time.
 * A node id lives as long as its graph.
 */
#include <stdlib.h>
#include <string.h>

#include "flyt_log.h"
#include "session.h"
#include "state_graph.h"

/* ---- host functions of graphs ---- */

/* Runs on a driver thread when a stream or a graph reaches the host
 * function: tell the client which of its functions to run, then hold the
 * stream until the client says it ran (CUDA: work after a host function
 * waits for it). The session thread may be blocked in the driver on this
 * very host function; flyt_host_func_wait then reads the acknowledgement
 * off the socket itself (session.c). A graph's host node runs at every
 * launch, so its message is posted as a copy. */
void flyt_host_func_run(void *msg)
{
    struct flyt_cb_msg *m = msg;
    flyt_session *s = m->s;
    struct flyt_cb_msg *post = m;
    if (m->keep) {
        post = malloc(sizeof *post);
        if (post == NULL)
            return; /* the client then never runs it: nothing better to do on a driver thread */
        *post = *m;
    }
    flyt_host_func_wait(s, flyt_post_callback(post));
}

static int stream_capturing(flyt_session *s, flyt_bhandle st)
{
    if (s->captures <= 0)
        return 0;
    int status = 0;
    uint64_t id = 0;
    flyt_bhandle graph = NULL;
    const flyt_bhandle *deps = NULL;
    size_t ndeps = 0;
    return FLYT_BCALL(s, capture_info, st, &status, &id, &graph, &deps, &ndeps) == CUDA_SUCCESS &&
           status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

struct flyt_cb_msg *flyt_host_func_msg(flyt_session *s, flyt_bhandle st, int graph_node,
                                       uint64_t callback_id)
{
    struct flyt_cb_msg *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->s = s;
    m->callback_id = callback_id;
    s->hf_used = 1; /* from now on a host function may read the socket (session.c) */
    m->keep = graph_node || stream_capturing(s, st);
    if (m->keep) {
        m->next = s->kept;
        s->kept = m;
    }
    return m;
}

CUresult flyt_capture_refuse(flyt_session *s, flyt_bhandle st, const char *what)
{
    if (!stream_capturing(s, st))
        return CUDA_SUCCESS;
    flyt_warn("%s on a capturing stream: the bytes travelled with the request, so a graph "
              "launch would copy them again, not the buffer's contents then; refused "
              "(use page-locked memory on a Unix socket)", what);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- node ids ---- */

/* The id an object of the backend already has (a reverse lookup: rare
 * calls only). */
struct id_find {
    enum flyt_htype type;
    flyt_bhandle    bh;
    uint64_t        id;
};

static int id_match(struct flyt_hentry *e, void *arg)
{
    struct id_find *f = arg;
    if (e->type != f->type || e->bh != f->bh)
        return 0;
    f->id = e->id;
    return 1;
}

static uint64_t id_of(flyt_session *s, enum flyt_htype type, flyt_bhandle bh)
{
    struct id_find f = {type, bh, 0};
    return bh && flyt_handles_foreach(&s->handles, id_match, &f) ? f.id : 0;
}

/* The id of a backend node of graph (named before, or new); 0 for none
 * or out of memory. */
static uint64_t node_id(flyt_session *s, uint64_t graph, flyt_bhandle node)
{
    uint64_t id = id_of(s, FLYT_H_GRAPH_NODE, node);
    if (node == NULL || id)
        return id;
    struct flyt_hentry *e = flyt_handles_add(&s->handles, FLYT_H_GRAPH_NODE, node);
    if (e == NULL)
        return 0;
    e->u.graph = graph;
    return e->id;
}

static int node_of_graph(const struct flyt_hentry *e, void *arg)
{
    return e->type == FLYT_H_GRAPH_NODE && e->u.graph == *(const uint64_t *)arg;
}

static void forget_graph(flyt_session *s, uint64_t graph)
{
    flyt_handles_remove(&s->handles, graph);
    flyt_handles_remove_if(&s->handles, node_of_graph, &graph);
}

/* Reads n node ids from the request and looks them up. */
static int read_nodes(flyt_session *s, flyt_call *c, uint32_t n, flyt_bhandle *out)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id;
        if (flyt_recv_data(s, c, &id, sizeof id) != 0)
            return FLYT_END_IO;
        if (c->result == CUDA_SUCCESS)
            c->result = flyt_lookup(s, id, FLYT_H_GRAPH_NODE, &out[i]);
    }
    return FLYT_CONT;
}

/* A node and the id of its graph. */
static CUresult lookup_node(flyt_session *s, uint64_t id, flyt_bhandle *node, uint64_t *graph)
{
    struct flyt_hentry *e = flyt_handles_get(&s->handles, id, FLYT_H_GRAPH_NODE);
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *node = e->bh;
    *graph = e->u.graph;
    return CUDA_SUCCESS;
}

static CUresult publish(flyt_session *s, uint64_t id, enum flyt_htype type, flyt_bhandle bh)
{
    struct flyt_hentry *e = flyt_handles_add_id(&s->handles, id, type, bh);
    if (e)
        return CUDA_SUCCESS;
    if (type == FLYT_H_GRAPH_EXEC)
        FLYT_BCALL(s, exec_destroy, bh);
    else
        FLYT_BCALL(s, graph_destroy, bh);
    return id < FLYT_CLIENT_IDS || flyt_handles_get(&s->handles, id, type) ? CUDA_ERROR_INVALID_VALUE
                                                                            : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- capture ---- */

int handle_CAPTURE_BEGIN(flyt_session *s, flyt_call *c)
{
    const flyt_req_capture_begin *r = c->req;
    flyt_bhandle st, graph = NULL;
    c->result = flyt_lookup_stream(s, r->stream, &st);
    if (c->result == CUDA_SUCCESS && flyt_handles_get(&s->handles, r->graph, FLYT_H_GRAPH))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, capture_begin, st, (int)r->mode, &graph);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    s->captures++;
    /* the driver owns the graph until the capture ends; the entry remembers
     * the stream, since an invalidated capture no longer names its graph */
    struct flyt_hentry *e = flyt_handles_add_id(&s->handles, r->graph, FLYT_H_GRAPH, graph);
    if (e)
        e->u.graph = r->stream;
    else
        c->result = CUDA_ERROR_INVALID_VALUE;
    return FLYT_CONT;
}

static uint64_t graph_id(flyt_session *s, flyt_bhandle graph)
{
    return id_of(s, FLYT_H_GRAPH, graph);
}

/* A graph entry's u.graph names the stream capturing into it; this bit
 * says the graph was the program's before (cuStreamBeginCaptureToGraph),
 * so the end of the capture does not give it away. */
#define CAPTURE_INTO_EXISTING (1ull << 63)

struct capture_find {
    uint64_t stream;
    struct flyt_hentry *e;
};

static int capture_match(struct flyt_hentry *e, void *arg)
{
    struct capture_find *f = arg;
    if (e->type != FLYT_H_GRAPH || (e->u.graph & ~(CAPTURE_INTO_EXISTING | FLYT_GRAPH_OWNED)) != f->stream)
        return 0;
    f->e = e;
    return 1;
}

int handle_CAPTURE_END(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle st, graph = NULL;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    struct capture_find f = {r->handle, NULL};
    flyt_handles_foreach(&s->handles, capture_match, &f); /* the graph the capture began */
    c->result = FLYT_BCALL(s, capture_end, st, &graph);
    if (c->result == CUDA_ERROR_ILLEGAL_STATE || c->result == CUDA_ERROR_INVALID_HANDLE)
        return FLYT_CONT; /* it was not capturing */
    if (s->captures > 0)
        s->captures--;
    if (f.e == NULL)
        return FLYT_CONT;
    uint64_t id = f.e->id;
    int existing = (f.e->u.graph & CAPTURE_INTO_EXISTING) != 0;
    f.e->u.graph &= FLYT_GRAPH_OWNED;
    if (c->result != CUDA_SUCCESS && !existing)
        forget_graph(s, id); /* the driver destroyed the invalidated graph */
    else
        rep->value = id;
    return FLYT_CONT;
}

int handle_CAPTURE_TO_GRAPH(flyt_session *s, flyt_call *c)
{
    const flyt_req_capture_to_graph *r = c->req;
    if (r->n > FLYT_MAX_GRAPH_NODES)
        return flyt_violation(s, c, "%u capture dependencies", r->n);
    int rc = flyt_expect_data(s, c, (uint64_t)r->n * sizeof(uint64_t));
    if (rc != FLYT_CONT)
        return rc;
    flyt_bhandle *deps = calloc(r->n + 1u, sizeof *deps);
    if (deps == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return flyt_skip_data(s, c) ? FLYT_END_IO : FLYT_CONT;
    }
    flyt_bhandle st = NULL;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, r->graph, FLYT_H_GRAPH);
    c->result = e == NULL ? CUDA_ERROR_INVALID_VALUE : flyt_lookup_stream(s, r->stream, &st);
    rc = read_nodes(s, c, r->n, deps);
    if (rc == FLYT_CONT && c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, capture_to_graph, st, e->bh, deps, r->n, (int)r->mode);
    free(deps);
    if (rc == FLYT_CONT && c->result == CUDA_SUCCESS) {
        s->captures++;
        e->u.graph = (e->u.graph & FLYT_GRAPH_OWNED) | r->stream | CAPTURE_INTO_EXISTING;
    }
    return rc;
}

/* The client's threads share the server's one thread: it takes the mode of
 * the client thread that set one last (docs/graphs.md). */
int handle_CAPTURE_MODE(flyt_session *s, flyt_call *c)
{
    const flyt_req_i32 *r = c->req;
    c->result = FLYT_BCALL(s, capture_mode, r->value);
    return FLYT_CONT;
}

int handle_CAPTURE_INFO(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_rep_capture_info *rep = c->rep;
    flyt_bhandle st, graph = NULL;
    const flyt_bhandle *deps = NULL;
    size_t ndeps = 0;
    int status = 0;
    uint64_t cap = 0;
    c->result = flyt_lookup_stream(s, r->handle, &st);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, capture_info, st, &status, &cap, &graph, &deps, &ndeps);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (ndeps > FLYT_MAX_GRAPH_NODES)
        ndeps = FLYT_MAX_GRAPH_NODES;
    uint64_t *ids = calloc(ndeps ? ndeps : 1, sizeof *ids);
    if (ids == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    rep->status = status;
    rep->capture_id = cap;
    rep->graph = graph_id(s, graph);
    for (size_t i = 0; i < ndeps; i++)
        ids[i] = node_id(s, rep->graph, deps[i]);
    rep->ndeps = (uint32_t)ndeps;
    int rc = flyt_reply(s, c, CUDA_SUCCESS, ids, ndeps * sizeof *ids) != 0 ? FLYT_END_IO : FLYT_CONT;
    free(ids);
    return rc;
}

int handle_CAPTURE_DEPS(flyt_session *s, flyt_call *c)
{
    const flyt_req_capture_deps *r = c->req;
    if (r->n > FLYT_MAX_GRAPH_NODES)
        return flyt_violation(s, c, "%u capture dependencies", r->n);
    int rc = flyt_expect_data(s, c, (uint64_t)r->n * sizeof(uint64_t));
    if (rc != FLYT_CONT)
        return rc;
    flyt_bhandle *deps = calloc(r->n ? r->n : 1, sizeof *deps);
    flyt_bhandle st;
    c->result = deps ? flyt_lookup_stream(s, r->stream, &st) : CUDA_ERROR_OUT_OF_MEMORY;
    rc = deps ? read_nodes(s, c, r->n, deps) : flyt_skip_data(s, c) ? FLYT_END_IO : FLYT_CONT;
    if (rc == FLYT_CONT && c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, capture_deps, st, deps, r->n, r->flags);
    free(deps);
    return rc;
}

/* ---- graphs ---- */

int handle_GRAPH_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_create *r = c->req;
    flyt_bhandle graph = NULL;
    c->result = FLYT_BCALL(s, graph_create, r->flags, &graph);
    if (c->result == CUDA_SUCCESS)
        c->result = publish(s, r->graph, FLYT_H_GRAPH, graph);
    return FLYT_CONT;
}

int handle_GRAPH_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle graph;
    c->result = flyt_lookup(s, r->handle, FLYT_H_GRAPH, &graph);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_destroy, graph);
    if (c->result == CUDA_SUCCESS)
        forget_graph(s, r->handle);
    return FLYT_CONT;
}

int handle_GRAPH_CLONE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle_pair *r = c->req; /* a: the clone's id, b: the original */
    flyt_bhandle orig, clone = NULL;
    c->result = flyt_lookup(s, r->b, FLYT_H_GRAPH, &orig);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_clone, orig, &clone);
    if (c->result == CUDA_SUCCESS)
        c->result = publish(s, r->a, FLYT_H_GRAPH, clone);
    return FLYT_CONT;
}

/* Whether graph holds a memory allocation node (they are top-level only). */
static int has_alloc_nodes(flyt_session *s, flyt_bhandle graph)
{
    size_t n = 0;
    if (FLYT_BCALL(s, graph_nodes, graph, FLYT_GNODES_ALL, NULL, &n) != CUDA_SUCCESS || n == 0)
        return 0;
    flyt_bhandle *nodes = calloc(n, sizeof *nodes);
    int found = 0;
    if (nodes && FLYT_BCALL(s, graph_nodes, graph, FLYT_GNODES_ALL, nodes, &n) == CUDA_SUCCESS)
        for (size_t i = 0; i < n && !found; i++) {
            unsigned type = 0;
            found = FLYT_BCALL(s, graph_node_type, nodes[i], &type) == CUDA_SUCCESS &&
                    type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        }
    free(nodes);
    return found;
}

int handle_GRAPH_INSTANTIATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_inst *r = c->req;
    flyt_rep_graph_info *rep = c->rep;
    flyt_bhandle graph, st = NULL, exec = NULL, bad = NULL;
    c->result = flyt_lookup(s, r->graph, FLYT_H_GRAPH, &graph);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup_stream(s, r->upload_stream, &st);
    if (c->result == CUDA_SUCCESS && flyt_handles_get(&s->handles, r->exec, FLYT_H_GRAPH_EXEC))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    c->result = FLYT_BCALL(s, graph_instantiate, graph, r->flags, st, &exec, &bad);
    rep->node = node_id(s, r->graph, bad);
    rep->result = c->result == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    if (c->result == CUDA_SUCCESS)
        rep->alloc_nodes = has_alloc_nodes(s, graph);
    if (c->result == CUDA_SUCCESS)
        c->result = publish(s, r->exec, FLYT_H_GRAPH_EXEC, exec);
    if (c->result == CUDA_SUCCESS) /* what a checkpoint instantiates again */
        flyt_state_graph_instantiated(s, flyt_handles_get(&s->handles, r->exec, FLYT_H_GRAPH_EXEC),
                                      r->graph, graph, r->flags);
    return FLYT_CONT;
}

int handle_EXEC_DESTROY(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle *r = c->req;
    flyt_bhandle exec;
    c->result = flyt_lookup(s, r->handle, FLYT_H_GRAPH_EXEC, &exec);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, exec_destroy, exec);
    if (c->result == CUDA_SUCCESS) {
        flyt_state_graph_exec_gone(s, flyt_handles_get(&s->handles, r->handle, FLYT_H_GRAPH_EXEC));
        flyt_handles_remove(&s->handles, r->handle);
    }
    return FLYT_CONT;
}

int handle_EXEC_UPDATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_handle_pair *r = c->req; /* a: the exec, b: the graph */
    flyt_rep_graph_info *rep = c->rep;
    flyt_bhandle exec, graph, node = NULL, from = NULL;
    int result = 0;
    c->result = flyt_lookup(s, r->a, FLYT_H_GRAPH_EXEC, &exec);
    if (c->result == CUDA_SUCCESS)
        c->result = flyt_lookup(s, r->b, FLYT_H_GRAPH, &graph);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    c->result = FLYT_BCALL(s, exec_update, exec, graph, &result, &node, &from);
    if (c->result == CUDA_SUCCESS)
        flyt_state_graph_exec_updated(s, flyt_handles_get(&s->handles, r->a, FLYT_H_GRAPH_EXEC), r->b,
                                      graph);
    rep->result = result;
    rep->node = node_id(s, r->b, node);
    rep->from_node = node_id(s, r->b, from);
    /* the reply carries the details also when the update failed */
    if (flyt_reply(s, c, c->result, NULL, 0) != 0)
        return FLYT_END_IO;
    return FLYT_CONT;
}

int handle_GRAPH_NODES(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_nodes *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle graph;
    uint64_t owner = r->graph; /* the graph whose nodes are named */
    if (r->which > FLYT_GNODES_DEPENDENTS)
        c->result = CUDA_ERROR_INVALID_VALUE;
    else if (r->which >= FLYT_GNODES_DEPS) /* of one node: "graph" names the node */
        c->result = lookup_node(s, r->graph, &graph, &owner);
    else
        c->result = flyt_lookup(s, r->graph, FLYT_H_GRAPH, &graph);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    size_t per = r->which == FLYT_GNODES_EDGES ? 2 : 1;
    size_t n = 0;
    c->result = FLYT_BCALL(s, graph_nodes, graph, r->which, NULL, &n); /* how many */
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (n > FLYT_MAX_GRAPH_NODES)
        n = FLYT_MAX_GRAPH_NODES;
    flyt_bhandle *nodes = calloc(n * per + 1, sizeof *nodes);
    uint64_t *ids = calloc(n * per + 1, sizeof *ids);
    size_t have = n;
    c->result = nodes && ids ? FLYT_BCALL(s, graph_nodes, graph, r->which, nodes, &have)
                             : CUDA_ERROR_OUT_OF_MEMORY;
    int rc = FLYT_CONT;
    if (c->result == CUDA_SUCCESS) {
        size_t send = have < r->max ? have : r->max;
        for (size_t i = 0; i < send * per; i++)
            ids[i] = node_id(s, owner, nodes[i]);
        rep->value = have;
        if (flyt_reply(s, c, CUDA_SUCCESS, ids, send * per * sizeof *ids) != 0)
            rc = FLYT_END_IO;
    }
    free(nodes);
    free(ids);
    return rc;
}

int handle_GRAPH_DOT(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_nodes *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle graph;
    char *text = NULL;
    c->result = flyt_lookup(s, r->graph, FLYT_H_GRAPH, &graph);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_dot, graph, r->which, &text);
    int rc = FLYT_CONT;
    if (c->result == CUDA_SUCCESS) {
        size_t len = strlen(text);
        if (len > FLYT_MAX_GRAPH_DOT)
            len = FLYT_MAX_GRAPH_DOT;
        rep->value = len;
        if (flyt_reply(s, c, CUDA_SUCCESS, text, len) != 0)
            rc = FLYT_END_IO;
    }
    free(text);
    return rc;
}

/* ---- explicit construction ---- */

/* A host side of a copy node: region + offset made a server address. */
static CUresult host_side(flyt_session *s, uint64_t region, uint64_t *addr, uint64_t pitch,
                          uint64_t width, uint64_t rows)
{
    if (region == 0)
        return CUDA_SUCCESS;
    struct flyt_hentry *e = flyt_handles_get(&s->handles, region, FLYT_H_REGION);
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_region_attached(e);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t span = rows ? (rows - 1) * pitch + width : 0;
    if (pitch < width || *addr > e->u.region.size || span > e->u.region.size - *addr)
        return CUDA_ERROR_INVALID_VALUE;
    *addr += (uint64_t)(uintptr_t)e->u.region.base;
    return CUDA_SUCCESS;
}

/* Swaps the node's client ids and host sides for the server's own. */
static CUresult translate_node(flyt_session *s, flyt_gnode *p, uint64_t graph, void **host_arg)
{
    flyt_bhandle bh = NULL;
    CUresult r = CUDA_SUCCESS;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        r = host_side(s, p->dst_region, &p->dst, p->dst_pitch, p->width, p->rows);
        if (r == CUDA_SUCCESS)
            r = host_side(s, p->src_region, &p->src, p->src_pitch, p->width, p->rows);
        return r;
    case CU_GRAPH_NODE_TYPE_HOST:
        *host_arg = flyt_host_func_msg(s, NULL, 1, p->value);
        return *host_arg ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        r = flyt_lookup(s, p->value, FLYT_H_EVENT, &bh);
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        r = p->value == graph ? CUDA_ERROR_INVALID_VALUE : flyt_lookup(s, p->value, FLYT_H_GRAPH, &bh);
        break;
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        struct flyt_hentry *f = flyt_handles_get(&s->handles, p->func, FLYT_H_FUNC);
        if (f == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        if (p->param_bytes != f->u.func.param_bytes)
            return CUDA_ERROR_INVALID_VALUE; /* the kernel would read past the buffer */
        p->func = (uint64_t)(uintptr_t)f->bh;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_SUCCESS;
    }
    p->value = (uint64_t)(uintptr_t)bh;
    return r;
}

/* The flyt_gnode and a kernel node's packed parameters that trail a
 * request (params: room for FLYT_MAX_PARAM_BYTES). */
static int read_gnode(flyt_session *s, flyt_call *c, flyt_gnode *p, uint64_t *params)
{
    if (c->data_len < sizeof *p)
        return flyt_violation(s, c, "node parameters missing");
    if (flyt_recv_data(s, c, p, sizeof *p) != 0)
        return FLYT_END_IO;
    if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && (p->rows == 0 || p->rows > FLYT_MAX_COND_BODIES))
        return flyt_violation(s, c, "a conditional node of %llu bodies", (unsigned long long)p->rows);
    uint64_t pbytes = flyt_gnode_trailing(p);
    if (pbytes > FLYT_MAX_PARAM_BYTES || c->data_len != pbytes)
        return flyt_violation(s, c, "%llu node parameter bytes, %u sent", (unsigned long long)pbytes,
                              c->data_len);
    return flyt_recv_data(s, c, params, (size_t)pbytes) != 0 ? FLYT_END_IO : FLYT_CONT;
}

/* The ids the client chose for a conditional node's body graphs: its own
 * range, none in use, no two alike. */
static int bodies_free(flyt_session *s, const uint64_t *ids, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (ids[i] < FLYT_CLIENT_IDS || flyt_handles_get(&s->handles, ids[i], FLYT_H_GRAPH))
            return 0;
        for (uint64_t k = 0; k < i; k++)
            if (ids[k] == ids[i])
                return 0;
    }
    return 1;
}

int handle_GRAPH_ADD_NODE(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_node *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    if (r->ndeps > FLYT_MAX_GRAPH_NODES)
        return flyt_violation(s, c, "%u node dependencies", r->ndeps);
    if (c->data_len < (uint64_t)r->ndeps * sizeof(uint64_t) + sizeof(flyt_gnode))
        return flyt_violation(s, c, "node parameters missing");
    flyt_bhandle *deps = calloc(r->ndeps + 1u, sizeof *deps);
    flyt_gnode p;
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8];
    flyt_bhandle graph = NULL;
    c->result = deps ? flyt_lookup(s, r->graph, FLYT_H_GRAPH, &graph) : CUDA_ERROR_OUT_OF_MEMORY;
    if (c->result == CUDA_SUCCESS && flyt_handles_get(&s->handles, r->node, FLYT_H_GRAPH_NODE))
        c->result = CUDA_ERROR_INVALID_VALUE;
    int rc = deps ? read_nodes(s, c, r->ndeps, deps) : FLYT_CONT;
    if (rc != FLYT_CONT || !deps) {
        free(deps);
        return rc == FLYT_CONT ? (flyt_skip_data(s, c) ? FLYT_END_IO : FLYT_CONT) : rc;
    }
    rc = read_gnode(s, c, &p, params);
    if (rc != FLYT_CONT) {
        free(deps);
        return rc;
    }
    void *host_arg = NULL;
    flyt_bhandle node = NULL;
    uint64_t out[FLYT_MAX_COND_BODIES] = {0}; /* the address, or the body graphs */
    int cond = p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
    if (c->result == CUDA_SUCCESS && cond && !bodies_free(s, params, p.rows))
        c->result = CUDA_ERROR_INVALID_VALUE;
    if (c->result == CUDA_SUCCESS)
        c->result = translate_node(s, &p, r->graph, &host_arg);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_add_node, graph, deps, r->ndeps, &p, params,
                               flyt_host_func_run, host_arg, &node, out);
    free(deps);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    for (uint64_t i = 0; cond && i < p.rows; i++) { /* owned by the node, as a child graph */
        struct flyt_hentry *body = flyt_handles_add_id(&s->handles, params[i], FLYT_H_GRAPH,
                                                       (flyt_bhandle)(uintptr_t)out[i]);
        if (body == NULL)
            c->result = CUDA_ERROR_OUT_OF_MEMORY;
        else
            flyt_state_graph_owned(body);
    }
    struct flyt_hentry *e = flyt_handles_add_id(&s->handles, r->node, FLYT_H_GRAPH_NODE, node);
    if (e == NULL)
        c->result = CUDA_ERROR_OUT_OF_MEMORY; /* the node stays in the graph, unnamed */
    else
        e->u.graph = r->graph;
    rep->value = cond ? 0 : out[0];
    return FLYT_CONT;
}

int handle_GRAPH_ADD_DEPS(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_deps *r = c->req;
    if (r->n > FLYT_MAX_GRAPH_NODES)
        return flyt_violation(s, c, "%u dependencies", r->n);
    int rc = flyt_expect_data(s, c, (uint64_t)r->n * 2 * sizeof(uint64_t));
    if (rc != FLYT_CONT)
        return rc;
    flyt_bhandle *nodes = calloc(2 * (size_t)r->n + 1, sizeof *nodes);
    if (nodes == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return flyt_skip_data(s, c) ? FLYT_END_IO : FLYT_CONT;
    }
    flyt_bhandle graph = NULL;
    c->result = flyt_lookup(s, r->graph, FLYT_H_GRAPH, &graph);
    rc = read_nodes(s, c, 2 * r->n, nodes);
    if (rc == FLYT_CONT && c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_add_deps, graph, nodes, nodes + r->n, r->n, r->remove != 0);
    free(nodes);
    return rc;
}

/* ---- one node's parameters ---- */

struct region_find {
    uint64_t addr;
    uint64_t id, offset;
};

static int region_match(struct flyt_hentry *e, void *arg)
{
    struct region_find *f = arg;
    uint64_t base = (uint64_t)(uintptr_t)e->u.region.base;
    if (e->type != FLYT_H_REGION || base == 0 || f->addr < base || f->addr - base >= e->u.region.size)
        return 0;
    f->id = e->id;
    f->offset = f->addr - base;
    return 1;
}

/* A host side of a copy node (region 1: a server address) as the region
 * the client shared and the offset in it. */
static CUresult region_side(flyt_session *s, uint64_t *region, uint64_t *addr)
{
    if (*region == 0)
        return CUDA_SUCCESS;
    struct region_find f = {*addr, 0, 0};
    if (!flyt_handles_foreach(&s->handles, region_match, &f)) {
        flyt_warn("a copy node's host memory is not memory the client shared; its parameters "
                  "cannot be reported");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *region = f.id;
    *addr = f.offset;
    return CUDA_SUCCESS;
}

/* The id of a graph (a child graph, owned by its node, gets one here). */
static uint64_t graph_named(flyt_session *s, flyt_bhandle graph)
{
    uint64_t id = graph_id(s, graph);
    struct flyt_hentry *e = id || !graph ? NULL : flyt_handles_add(&s->handles, FLYT_H_GRAPH, graph);
    if (e)
        flyt_state_graph_owned(e);
    return e ? e->id : id;
}

/* The reverse of translate_node: backend handles and server addresses
 * made the client's ids. */
static CUresult untranslate_node(flyt_session *s, flyt_gnode *p, void *host_arg)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUresult r = region_side(s, &p->dst_region, &p->dst);
        return r == CUDA_SUCCESS ? region_side(s, &p->src_region, &p->src) : r;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        if (p->value != (uint64_t)(uintptr_t)flyt_host_func_run)
            return CUDA_ERROR_NOT_SUPPORTED; /* not a function of the client */
        p->value = ((struct flyt_cb_msg *)host_arg)->callback_id;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        p->value = id_of(s, FLYT_H_EVENT, (flyt_bhandle)(uintptr_t)p->value);
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        p->value = graph_named(s, (flyt_bhandle)(uintptr_t)p->value);
        return p->value ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    case CU_GRAPH_NODE_TYPE_KERNEL:
        p->func = id_of(s, FLYT_H_FUNC, (flyt_bhandle)(uintptr_t)p->func);
        return p->func ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_SUCCESS;
    }
}

int handle_GRAPH_NODE_GET(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_node_ref *r = c->req;
    flyt_gnode *p = c->rep;
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8];
    flyt_bhandle node;
    uint64_t graph;
    void *host_arg = NULL;
    c->result = lookup_node(s, r->node, &node, &graph);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_node_get, node, p, params, &host_arg);
    if (c->result == CUDA_SUCCESS)
        c->result = untranslate_node(s, p, host_arg);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    uint32_t n = p->type == CU_GRAPH_NODE_TYPE_KERNEL ? p->param_bytes : 0;
    return flyt_reply(s, c, CUDA_SUCCESS, params, n) != 0 ? FLYT_END_IO : FLYT_CONT;
}

int handle_GRAPH_NODE_SET(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_node_ref *r = c->req;
    flyt_gnode p;
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8];
    int rc = read_gnode(s, c, &p, params);
    if (rc != FLYT_CONT)
        return rc;
    flyt_bhandle node, exec = NULL;
    uint64_t graph;
    void *host_arg = NULL;
    c->result = lookup_node(s, r->node, &node, &graph);
    if (c->result == CUDA_SUCCESS && r->exec)
        c->result = flyt_lookup(s, r->exec, FLYT_H_GRAPH_EXEC, &exec);
    if (c->result == CUDA_SUCCESS)
        c->result = translate_node(s, &p, graph, &host_arg);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_node_set, exec, node, &p, params, flyt_host_func_run, host_arg);
    if (c->result == CUDA_SUCCESS && exec)
        flyt_state_graph_exec_changed(s, r->exec);
    return FLYT_CONT;
}

int handle_GRAPH_NODE_MISC(flyt_session *s, flyt_call *c)
{
    const flyt_req_graph_node_misc *r = c->req;
    flyt_rep_u64 *rep = c->rep;
    flyt_bhandle node, other = NULL, out = NULL;
    uint64_t graph;
    c->result = r->what > FLYT_GNODE_CHILD_GRAPH ? CUDA_ERROR_INVALID_VALUE
                                                 : lookup_node(s, r->node, &node, &graph);
    if (c->result == CUDA_SUCCESS && r->what == FLYT_GNODE_FIND_IN_CLONE)
        c->result = flyt_lookup(s, r->other, FLYT_H_GRAPH, &other);
    if (c->result == CUDA_SUCCESS)
        c->result = FLYT_BCALL(s, graph_node_misc, r->what, node, other, &out);
    if (c->result != CUDA_SUCCESS)
        return FLYT_CONT;
    if (r->what == FLYT_GNODE_DESTROY)
        flyt_handles_remove(&s->handles, r->node);
    else if (r->what == FLYT_GNODE_FIND_IN_CLONE)
        rep->value = node_id(s, r->other, out);
    else
        rep->value = graph_named(s, out);
    if (rep->value == 0 && r->what != FLYT_GNODE_DESTROY)
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
    return FLYT_CONT;
}

/* ---- user objects ---- */

/* Runs when the driver destroys a user object (on a thread of its own, or
 * in the call that dropped the last reference): the client runs the
 * program's destructor. Nothing waits for it: CUDA requires
 * CU_USER_OBJECT_NO_DESTRUCTOR_SYNC. The message stays on the session's
 * kept list; a copy goes out, and the client then forgets the callback. */
static void user_object_destroyed(void *msg)
{
    struct flyt_cb_msg *post = malloc(sizeof *post);
    if (post == NULL)
        return; /* the destructor then never runs: nothing better to do on a driver thread */
    *post = *(const struct flyt_cb_msg *)msg;
    post->keep = 0;
    flyt_post_callback(post);
}

int handle_USER_OBJECT_CREATE(flyt_session *s, flyt_call *c)
{
    const flyt_req_user_object *r = c->req;
    if (r->object < FLYT_CLIENT_IDS || flyt_handles_get(&s->handles, r->object, FLYT_H_USER_OBJECT)) {
        c->result = CUDA_ERROR_INVALID_VALUE;
        return FLYT_CONT;
    }
    struct flyt_cb_msg *m = calloc(1, sizeof *m);
    if (m == NULL) {
        c->result = CUDA_ERROR_OUT_OF_MEMORY;
        return FLYT_CONT;
    }
    m->s = s;
    m->callback_id = r->callback;
    m->next = s->kept; /* freed with the session: the driver may call it until then */
    s->kept = m;
    flyt_bhandle obj = NULL;
    c->result = FLYT_BCALL(s, user_object_create, user_object_destroyed, m, r->refs, r->flags, &obj);
    if (c->result == CUDA_SUCCESS &&
        flyt_handles_add_id(&s->handles, r->object, FLYT_H_USER_OBJECT, obj) == NULL)
        c->result = CUDA_ERROR_OUT_OF_MEMORY; /* the object stays, unnamed */
    return FLYT_CONT;
}
