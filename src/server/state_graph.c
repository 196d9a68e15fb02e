/* CUDA graphs in a checkpoint (state_graph.h, docs/state-format.md). */
#include "state_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "flyt_log.h"
#include "state_format.h"

/* ---- recording hooks ---- */

void flyt_state_graph_owned(struct flyt_hentry *graph) { graph->u.graph |= FLYT_GRAPH_OWNED; }

static int owned(const struct flyt_hentry *graph) { return (graph->u.graph & FLYT_GRAPH_OWNED) != 0; }

static void drop_recipe(flyt_session *s, struct flyt_hentry *exec)
{
    if (exec->u.exec.recipe)
        FLYT_BCALL(s, graph_destroy, exec->u.exec.recipe);
    exec->u.exec.recipe = NULL;
}

/* The exec stands for graph as it is now: a clone keeps that, since the
 * program may change or destroy the graph (PyTorch destroys it). */
static void take_recipe(flyt_session *s, struct flyt_hentry *exec, uint64_t graph_id, flyt_bhandle graph)
{
    drop_recipe(s, exec);
    exec->u.exec.graph = graph_id;
    if (FLYT_BCALL(s, graph_clone, graph, &exec->u.exec.recipe) != CUDA_SUCCESS)
        exec->u.exec.recipe = NULL; /* a checkpoint then refuses the exec */
}

void flyt_state_graph_instantiated(flyt_session *s, struct flyt_hentry *exec, uint64_t graph_id,
                                   flyt_bhandle graph, uint64_t flags)
{
    exec->u.exec.flags = flags;
    take_recipe(s, exec, graph_id, graph);
}

void flyt_state_graph_exec_updated(flyt_session *s, struct flyt_hentry *exec, uint64_t graph_id,
                                   flyt_bhandle graph)
{
    take_recipe(s, exec, graph_id, graph);
}

void flyt_state_graph_exec_changed(flyt_session *s, uint64_t exec_id)
{
    struct flyt_hentry *e = flyt_handles_get(&s->handles, exec_id, FLYT_H_GRAPH_EXEC);
    if (e)
        e->u.exec.changed = 1;
}

void flyt_state_graph_exec_gone(flyt_session *s, struct flyt_hentry *exec) { drop_recipe(s, exec); }

/* Kernel node attributes (set by plain calls, or captured from launches
 * with attributes) are not read back here: once a session may have some,
 * its kernel nodes are refused (one session per process, as state.c's
 * request state). */
static int attrs_set;

void flyt_state_graph_attrs_seen(void) { attrs_set = 1; }

void flyt_state_graph_call_note(flyt_session *s, uint32_t id, const uint64_t *args)
{
    if (id == FLYT_CALL_cuGraphNodeSetEnabled)
        flyt_state_graph_exec_changed(s, args[0]);
    else if (id == FLYT_CALL_cuGraphKernelNodeSetAttribute || id == FLYT_CALL_cuGraphKernelNodeCopyAttributes)
        attrs_set = 1;
}

int flyt_state_graph_section(uint32_t type)
{
    return type == FLYT_SS_GRAPH || type == FLYT_SS_GRAPH_EXEC;
}

/* ---- capture: a graph body into a growing buffer ---- */

struct buf {
    unsigned char *p;
    size_t         n, cap;
    int            oom;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *more = realloc(b->p, cap);
        if (more == NULL) {
            b->oom = 1;
            return;
        }
        b->p = more;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* What a body's serialization needs: the session's ids by backend handle. */
struct walk {
    flyt_session *s;
    flyt_hash     ids;   /* backend handle -> entry (nodes, events, functions, owned graphs) */
    int           named; /* 0: ids of nodes and child graphs left out (comparing bodies) */
    const char   *why;   /* what refused it */
};

static int index_entry(struct flyt_hentry *e, void *arg)
{
    struct walk *w = arg;
    int owned_graph = e->type == FLYT_H_GRAPH && owned(e);
    if (e->bh == NULL || (e->type != FLYT_H_GRAPH_NODE && e->type != FLYT_H_EVENT &&
                          e->type != FLYT_H_FUNC && !owned_graph))
        return 0;
    uint64_t key = (uint64_t)(uintptr_t)e->bh;
    flyt_hash_slot *slot = flyt_hash_find(&w->ids, key);
    if (slot == NULL && (slot = flyt_hash_insert(&w->ids, key)) == NULL)
        return 1;
    /* Two entries on one handle: one outlived its object (a child graph's
     * node, its parent destroyed) whose memory the driver gave to a new one,
     * named later: the larger id (client ids are above the server's). */
    const struct flyt_hentry *had = slot->value.ptr;
    if (had == NULL || had->id < e->id)
        slot->value.ptr = e;
    return 0;
}

static int walk_init(struct walk *w, flyt_session *s, int named)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->named = named;
    flyt_hash_init(&w->ids);
    return flyt_handles_foreach(&s->handles, index_entry, w) ? -1 : 0;
}

static uint64_t id_by(struct walk *w, flyt_bhandle bh, enum flyt_htype type)
{
    flyt_hash_slot *slot = bh ? flyt_hash_find(&w->ids, (uint64_t)(uintptr_t)bh) : NULL;
    const struct flyt_hentry *e = slot ? slot->value.ptr : NULL;
    return e && e->type == type ? e->id : 0;
}

static const char *kind_name(unsigned type)
{
    switch (type) {
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "memory allocation node";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "memory free node";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional node";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "external semaphore signal node";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "external semaphore wait node";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "batch memory operation node";
    default: return "node of an unknown kind";
    }
}

/* A node's parameters made the client's ids; NULL, or why it cannot be. */
static const char *name_node(struct walk *w, flyt_gnode *p, void *host_arg)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_MEMSET: return NULL;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return p->dst_region || p->src_region ? "memcpy node with host memory" : NULL;
    case CU_GRAPH_NODE_TYPE_HOST:
        if (p->value != (uint64_t)(uintptr_t)flyt_host_func_run || host_arg == NULL)
            return "host node of no client function";
        p->value = ((const struct flyt_cb_msg *)host_arg)->callback_id;
        return NULL;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        p->value = id_by(w, (flyt_bhandle)(uintptr_t)p->value, FLYT_H_EVENT);
        return p->value ? NULL : "event node of an event the client does not hold";
    case CU_GRAPH_NODE_TYPE_KERNEL:
        p->func = id_by(w, (flyt_bhandle)(uintptr_t)p->func, FLYT_H_FUNC);
        return p->func ? NULL : "kernel node of a function the session did not load";
    case CU_GRAPH_NODE_TYPE_GRAPH: return NULL; /* value: the child graph, written after it */
    default: return kind_name(p->type);
    }
}

/* The graph's nodes (in the backend's order) or its edges (pairs). */
static flyt_bhandle *list(flyt_session *s, flyt_bhandle graph, unsigned which, size_t *n)
{
    *n = 0;
    if (FLYT_BCALL(s, graph_nodes, graph, which, NULL, n) != CUDA_SUCCESS)
        return NULL;
    size_t per = which == FLYT_GNODES_EDGES ? 2 : 1, have = *n;
    flyt_bhandle *out = calloc(have * per + 1, sizeof *out);
    if (out && FLYT_BCALL(s, graph_nodes, graph, which, out, &have) != CUDA_SUCCESS) {
        free(out);
        return NULL;
    }
    *n = have;
    return out;
}

static size_t index_of(const flyt_bhandle *nodes, size_t n, flyt_bhandle node)
{
    for (size_t i = 0; i < n; i++)
        if (nodes[i] == node)
            return i;
    return n;
}

static int write_body(struct walk *w, struct buf *b, flyt_bhandle graph, uint64_t id, int depth);

static int write_node(struct walk *w, struct buf *b, flyt_bhandle node, int depth)
{
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8] = {0};
    struct flyt_state_gnode rec = {0};
    void *host_arg = NULL;
    CUresult r = FLYT_BCALL(w->s, graph_node_get, node, &rec.p, params, &host_arg);
    if (r != CUDA_SUCCESS) {
        w->why = rec.p.type == CU_GRAPH_NODE_TYPE_MEMCPY ? "memcpy node of arrays or 3D extents"
                                                         : "node whose parameters cannot be read";
        return -1;
    }
    if ((w->why = name_node(w, &rec.p, host_arg)) != NULL)
        return -1;
    if (rec.p.type == CU_GRAPH_NODE_TYPE_KERNEL && attrs_set) {
        w->why = "kernel node that may have launch attributes (cuGraphKernelNodeSetAttribute, or "
                 "cuLaunchKernelEx during a capture), which are not carried";
        return -1;
    }
    flyt_bhandle child = (flyt_bhandle)(uintptr_t)rec.p.value;
    if (rec.p.type == CU_GRAPH_NODE_TYPE_GRAPH)
        rec.p.value = 0;
    rec.id = w->named ? id_by(w, node, FLYT_H_GRAPH_NODE) : 0;
    put(b, &rec, sizeof rec);
    if (rec.p.type == CU_GRAPH_NODE_TYPE_KERNEL)
        put(b, params, (rec.p.param_bytes + 7u) & ~7u);
    if (rec.p.type != CU_GRAPH_NODE_TYPE_GRAPH)
        return 0;
    if (depth >= FLYT_STATE_GRAPH_DEPTH) {
        w->why = "child graphs nested too deep";
        return -1;
    }
    return write_body(w, b, child, w->named ? id_by(w, child, FLYT_H_GRAPH) : 0, depth + 1);
}

static int by_edge(const void *a, const void *b)
{
    const struct flyt_state_gedge *x = a, *y = b;
    if (x->to != y->to)
        return (x->to > y->to) - (x->to < y->to);
    return (x->from > y->from) - (x->from < y->from);
}

static int write_body(struct walk *w, struct buf *b, flyt_bhandle graph, uint64_t id, int depth)
{
    size_t n = 0, ne = 0;
    flyt_bhandle *nodes = list(w->s, graph, FLYT_GNODES_ALL, &n);
    flyt_bhandle *edges = nodes ? list(w->s, graph, FLYT_GNODES_EDGES, &ne) : NULL;
    int rc = edges && n <= FLYT_MAX_GRAPH_NODES && ne <= FLYT_MAX_GRAPH_NODES ? 0 : -1;
    if (rc)
        w->why = "node list that cannot be read";
    struct flyt_state_graph g = {.id = id, .nnodes = (uint32_t)n, .nedges = (uint32_t)ne};
    if (rc == 0)
        put(b, &g, sizeof g);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = write_node(w, b, nodes[i], depth);
    struct flyt_state_gedge *es = rc == 0 ? calloc(ne + 1, sizeof *es) : NULL;
    for (size_t i = 0; es && i < ne; i++)
        es[i] = (struct flyt_state_gedge){(uint32_t)index_of(nodes, n, edges[2 * i]),
                                          (uint32_t)index_of(nodes, n, edges[2 * i + 1])};
    if (es && ne > 1) /* one order for the same edges, whatever order the driver lists them in */
        qsort(es, ne, sizeof *es, by_edge);
    if (es)
        put(b, es, ne * sizeof *es);
    else if (rc == 0)
        b->oom = 1;
    free(es);
    free(nodes);
    free(edges);
    if (rc == 0 && b->oom) {
        w->why = "body too large for memory";
        rc = -1;
    }
    return rc;
}

static void walk_end(struct walk *w) { flyt_hash_free(&w->ids); }

/* The graph's body (named: with the client's ids) into b; NULL or why not. */
static const char *body_of(flyt_session *s, flyt_bhandle graph, uint64_t id, int named, struct buf *b)
{
    struct walk w;
    const char *why = "body too large for memory";
    if (walk_init(&w, s, named) == 0)
        why = write_body(&w, b, graph, id, 0) == 0 ? NULL : w.why;
    walk_end(&w);
    return why;
}

/* An exec is restored from its graph when that graph still holds what the
 * exec was made of (so node ids given to exec updates still match), else
 * from its recipe when the graph is gone. *from_graph: which. */
static const char *exec_plan(flyt_session *s, const struct flyt_hentry *e, int *from_graph)
{
    const struct flyt_exec_info *x = &e->u.exec;
    if (x->changed)
        return "executable graph changed in place (cuGraphExec*SetParams, cuGraphNodeSetEnabled)";
    if (x->recipe == NULL)
        return "executable graph of no recorded graph";
    struct flyt_hentry *g = flyt_handles_get(&s->handles, x->graph, FLYT_H_GRAPH);
    *from_graph = g != NULL && !owned(g);
    struct buf a = {0}, b = {0};
    const char *why = body_of(s, x->recipe, 0, 0, &a);
    if (why == NULL && *from_graph) {
        why = body_of(s, g->bh, 0, 0, &b);
        if (why == NULL && (a.n != b.n || memcmp(a.p, b.p, a.n) != 0))
            why = "executable graph whose graph changed after instantiation";
    }
    free(a.p);
    free(b.p);
    return why;
}

const char *flyt_state_graph_refused(flyt_session *s, const struct flyt_hentry *e)
{
    static char why[160];
    const char *r = NULL;
    int from_graph = 0;
    struct buf b = {0};
    if (e->type == FLYT_H_GRAPH_EXEC)
        r = exec_plan(s, e, &from_graph);
    else if (e->type == FLYT_H_GRAPH && !owned(e))
        r = body_of(s, e->bh, e->id, 1, &b);
    free(b.p);
    if (r == NULL)
        return NULL;
    int whole = strncmp(r, "executable graph", 16) == 0; /* else a node's or the body's */
    snprintf(why, sizeof why, "CUDA %s%s", e->type == FLYT_H_GRAPH ? "graph with a "
                                           : whole                 ? ""
                                                                   : "executable graph with a ", r);
    return why;
}

/* ---- capture: the sections ---- */

static int put_section(struct flyt_swriter *sw, uint32_t type, const void *rec, size_t len,
                       const struct buf *body)
{
    struct flyt_state_section sec = {type, 0, len + body->n};
    return flyt_sw_put(sw, &sec, sizeof sec) || flyt_sw_put(sw, rec, len) ||
                   (body->n && flyt_sw_put(sw, body->p, body->n))
               ? -1
               : 0;
}

struct collect {
    struct flyt_hentry **list;
    size_t               n, cap;
    enum flyt_htype      type;
};

static int collect_one(struct flyt_hentry *e, void *arg)
{
    struct collect *c = arg;
    if (e->type != c->type || (e->type == FLYT_H_GRAPH && owned(e)))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct flyt_hentry **l = realloc(c->list, cap * sizeof *l);
        if (l == NULL)
            return 1;
        c->list = l;
        c->cap = cap;
    }
    c->list[c->n++] = e;
    return 0;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(struct flyt_hentry *const *)a)->id, y = (*(struct flyt_hentry *const *)b)->id;
    return (x > y) - (x < y);
}

static CUresult write_kind(flyt_session *s, struct flyt_swriter *sw, enum flyt_htype type)
{
    struct collect c = {.type = type};
    CUresult r = flyt_handles_foreach(&s->handles, collect_one, &c) ? CUDA_ERROR_OUT_OF_MEMORY
                                                                     : CUDA_SUCCESS;
    if (c.n > 1)
        qsort(c.list, c.n, sizeof *c.list, by_id);
    for (size_t i = 0; r == CUDA_SUCCESS && i < c.n; i++) {
        struct flyt_hentry *e = c.list[i];
        struct buf b = {0};
        const char *why;
        if (type == FLYT_H_GRAPH) {
            why = body_of(s, e->bh, e->id, 1, &b);
            if (why == NULL && put_section(sw, FLYT_SS_GRAPH, NULL, 0, &b) != 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
        } else {
            int from_graph = 0;
            struct flyt_state_gexec rec = {e->id, e->u.exec.graph, e->u.exec.flags};
            why = exec_plan(s, e, &from_graph);
            if (why == NULL && !from_graph) {
                rec.graph = 0;
                why = body_of(s, e->u.exec.recipe, 0, 0, &b);
            }
            if (why == NULL && put_section(sw, FLYT_SS_GRAPH_EXEC, &rec, sizeof rec, &b) != 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
        }
        if (why != NULL) { /* check_capturable looked already: it changed since? */
            flyt_warn("checkpoint: object %llu: %s", (unsigned long long)e->id, why);
            r = CUDA_ERROR_NOT_SUPPORTED;
        }
        free(b.p);
    }
    free(c.list);
    return r;
}

CUresult flyt_state_graph_write(flyt_session *s, struct flyt_swriter *sw)
{
    CUresult r = write_kind(s, sw, FLYT_H_GRAPH);
    return r == CUDA_SUCCESS ? write_kind(s, sw, FLYT_H_GRAPH_EXEC) : r;
}

/* ---- restore ---- */

struct reader {
    const unsigned char *p;
    uint64_t             left;
};

static int take(struct reader *rd, void *out, uint64_t n)
{
    if (rd->left < n)
        return -1;
    if (out)
        memcpy(out, rd->p, (size_t)n);
    rd->p += n;
    rd->left -= n;
    return 0;
}

/* An entry under exactly id, wherever the file puts it: graph sections
 * come last, so their server ids are not in ascending order with the rest. */
static struct flyt_hentry *add_any(flyt_session *s, uint64_t id, enum flyt_htype type, flyt_bhandle bh)
{
    if (id >= FLYT_CLIENT_IDS)
        return flyt_handles_add_id(&s->handles, id, type, bh);
    if (id <= 2 || flyt_hash_find(&s->handles.map, id))
        return NULL;
    uint64_t keep = s->handles.next_id;
    s->handles.next_id = id;
    struct flyt_hentry *e = flyt_handles_add(&s->handles, type, bh);
    s->handles.next_id = keep > id ? keep : id + 1;
    return e;
}

struct restore {
    flyt_session *s;
    const char   *why;
    uint64_t      bad_id; /* an id the why names */
};

static CUresult read_body(struct restore *rs, struct reader *rd, flyt_bhandle graph, int depth,
                          int named);

/* A node's parameters as graph_add_node takes them (handles looked up). */
static CUresult unname_node(struct restore *rs, flyt_gnode *p, const uint64_t *params, void **host_arg)
{
    flyt_session *s = rs->s;
    flyt_bhandle bh = NULL;
    CUresult r = CUDA_SUCCESS;
    (void)params;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_MEMSET: return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMCPY: return p->dst_region || p->src_region ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_HOST:
        *host_arg = flyt_host_func_msg(s, NULL, 1, p->value);
        return *host_arg ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        r = flyt_lookup(s, p->value, FLYT_H_EVENT, &bh);
        p->value = (uint64_t)(uintptr_t)bh;
        return r;
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        struct flyt_hentry *f = flyt_handles_get(&s->handles, p->func, FLYT_H_FUNC);
        if (f == NULL || p->param_bytes != f->u.func.param_bytes)
            return CUDA_ERROR_INVALID_HANDLE;
        p->func = (uint64_t)(uintptr_t)f->bh;
        return CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* One node into graph; a child graph node's body is built in a graph of
 * its own first, which the node copies. */
static CUresult read_node(struct restore *rs, struct reader *rd, flyt_bhandle graph, int depth,
                          int named, flyt_bhandle *node, uint64_t *id, flyt_bhandle *scratch)
{
    flyt_session *s = rs->s;
    struct flyt_state_gnode rec;
    uint64_t params[(FLYT_MAX_PARAM_BYTES + 7) / 8] = {0};
    if (take(rd, &rec, sizeof rec) != 0 || rec.p.param_bytes > FLYT_MAX_PARAM_BYTES ||
        (rec.p.type == CU_GRAPH_NODE_TYPE_KERNEL &&
         take(rd, params, (rec.p.param_bytes + 7u) & ~7u) != 0)) {
        rs->why = "a graph node is cut short";
        return CUDA_ERROR_INVALID_VALUE;
    }
    *id = named ? rec.id : 0;
    void *host_arg = NULL;
    CUresult r;
    if (rec.p.type == CU_GRAPH_NODE_TYPE_GRAPH) {
        if (depth >= FLYT_STATE_GRAPH_DEPTH) {
            rs->why = "child graphs nested too deep";
            return CUDA_ERROR_INVALID_VALUE;
        }
        r = FLYT_BCALL(s, graph_create, 0, scratch);
        if (r == CUDA_SUCCESS)
            r = read_body(rs, rd, *scratch, depth + 1, 0);
        rec.p.value = (uint64_t)(uintptr_t)*scratch;
    } else {
        r = unname_node(rs, &rec.p, params, &host_arg);
    }
    uint64_t out[FLYT_MAX_COND_BODIES] = {0};
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, graph_add_node, graph, NULL, 0, &rec.p, params, flyt_host_func_run,
                       host_arg, node, out);
    if (r != CUDA_SUCCESS && rs->why == NULL) {
        rs->why = "a graph node cannot be made again";
        rs->bad_id = rec.id;
    }
    return r;
}

/* The ids the client holds for a child graph node's graph and its nodes:
 * the node's own copy lists its nodes in the order the body did. */
static CUresult name_child(struct restore *rs, struct reader *copy, flyt_bhandle node)
{
    flyt_session *s = rs->s;
    flyt_bhandle child = NULL;
    CUresult r = FLYT_BCALL(s, graph_node_misc, FLYT_GNODE_CHILD_GRAPH, node, NULL, &child);
    if (r != CUDA_SUCCESS)
        return r;
    /* read the body again, this time adding nothing: only its ids */
    struct flyt_state_graph g;
    if (take(copy, &g, sizeof g) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (g.id) {
        struct flyt_hentry *e = add_any(s, g.id, FLYT_H_GRAPH, child);
        if (e == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        flyt_state_graph_owned(e);
    }
    size_t n = 0;
    flyt_bhandle *nodes = list(s, child, FLYT_GNODES_ALL, &n);
    if (nodes == NULL || n != g.nnodes) {
        free(nodes);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        struct flyt_state_gnode rec;
        if (take(copy, &rec, sizeof rec) != 0 ||
            (rec.p.type == CU_GRAPH_NODE_TYPE_KERNEL && take(copy, NULL, (rec.p.param_bytes + 7u) & ~7u)))
            r = CUDA_ERROR_INVALID_VALUE;
        struct flyt_hentry *e = r == CUDA_SUCCESS && rec.id ? add_any(s, rec.id, FLYT_H_GRAPH_NODE, nodes[i])
                                                            : NULL;
        if (r == CUDA_SUCCESS && rec.id && e == NULL)
            r = CUDA_ERROR_INVALID_VALUE;
        if (e)
            e->u.graph = g.id;
        if (r == CUDA_SUCCESS && rec.p.type == CU_GRAPH_NODE_TYPE_GRAPH)
            r = name_child(rs, copy, nodes[i]);
    }
    free(nodes);
    if (r == CUDA_SUCCESS && take(copy, NULL, (uint64_t)g.nedges * sizeof(struct flyt_state_gedge)))
        r = CUDA_ERROR_INVALID_VALUE;
    return r;
}

/* named: the ids in the body are the client's (a GRAPH section's top level). */
static CUresult read_body(struct restore *rs, struct reader *rd, flyt_bhandle graph, int depth,
                          int named)
{
    struct flyt_state_graph g;
    if (take(rd, &g, sizeof g) != 0 || g.nnodes > FLYT_MAX_GRAPH_NODES || g.nedges > FLYT_MAX_GRAPH_NODES) {
        rs->why = "a graph body is malformed";
        return CUDA_ERROR_INVALID_VALUE;
    }
    flyt_bhandle *nodes = calloc((size_t)g.nnodes + 1, sizeof *nodes);
    CUresult r = nodes ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < g.nnodes; i++) {
        struct reader again = *rd; /* a child's body, read a second time for its ids */
        flyt_bhandle scratch = NULL;
        uint64_t id = 0;
        r = read_node(rs, rd, graph, depth, named, &nodes[i], &id, &scratch);
        if (r == CUDA_SUCCESS && named && id) {
            struct flyt_hentry *e = add_any(rs->s, id, FLYT_H_GRAPH_NODE, nodes[i]);
            if (e)
                e->u.graph = g.id;
            else
                r = CUDA_ERROR_INVALID_VALUE, rs->why = "a graph node's id is taken", rs->bad_id = id;
        }
        if (r == CUDA_SUCCESS && scratch && named) {
            struct flyt_state_gnode rec;
            take(&again, &rec, sizeof rec);
            r = name_child(rs, &again, nodes[i]);
            if (r != CUDA_SUCCESS)
                rs->why = "a child graph's nodes do not match their ids";
        }
        if (scratch)
            FLYT_BCALL(rs->s, graph_destroy, scratch);
    }
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < g.nedges; i++) {
        struct flyt_state_gedge e;
        if (take(rd, &e, sizeof e) != 0 || e.from >= g.nnodes || e.to >= g.nnodes) {
            rs->why = "a graph edge is malformed";
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            r = FLYT_BCALL(rs->s, graph_add_deps, graph, &nodes[e.from], &nodes[e.to], 1, 0);
            if (r != CUDA_SUCCESS)
                rs->why = "a graph edge cannot be made again";
        }
    }
    free(nodes);
    return r;
}

static CUresult restore_graph(struct restore *rs, struct reader *rd)
{
    struct flyt_state_graph g;
    if (rd->left < sizeof g) {
        rs->why = "a graph section is cut short";
        return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(&g, rd->p, sizeof g);
    rs->bad_id = g.id;
    flyt_bhandle graph = NULL;
    CUresult r = FLYT_BCALL(rs->s, graph_create, 0, &graph);
    struct flyt_hentry *e = r == CUDA_SUCCESS ? add_any(rs->s, g.id, FLYT_H_GRAPH, graph) : NULL;
    if (e == NULL) {
        if (graph)
            FLYT_BCALL(rs->s, graph_destroy, graph);
        rs->why = "a graph cannot be made again under its id";
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    }
    r = read_body(rs, rd, graph, 0, 1);
    if (r == CUDA_SUCCESS && rd->left != 0) {
        rs->why = "a graph section has bytes after its body";
        r = CUDA_ERROR_INVALID_VALUE;
    }
    return r;
}

static CUresult restore_exec(struct restore *rs, struct reader *rd)
{
    flyt_session *s = rs->s;
    struct flyt_state_gexec x;
    if (take(rd, &x, sizeof x) != 0) {
        rs->why = "an executable graph section is cut short";
        return CUDA_ERROR_INVALID_VALUE;
    }
    rs->bad_id = x.id;
    flyt_bhandle graph = NULL, scratch = NULL, exec = NULL, bad = NULL;
    CUresult r;
    if (x.graph) {
        r = flyt_lookup(s, x.graph, FLYT_H_GRAPH, &graph);
    } else {
        r = FLYT_BCALL(s, graph_create, 0, &scratch);
        if (r == CUDA_SUCCESS)
            r = read_body(rs, rd, scratch, 0, 0);
        graph = scratch;
    }
    if (r == CUDA_SUCCESS && rd->left != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = FLYT_BCALL(s, graph_instantiate, graph, x.flags, NULL, &exec, &bad);
    struct flyt_hentry *e = r == CUDA_SUCCESS ? add_any(s, x.id, FLYT_H_GRAPH_EXEC, exec) : NULL;
    if (e == NULL && exec)
        FLYT_BCALL(s, exec_destroy, exec);
    if (e)
        flyt_state_graph_instantiated(s, e, x.graph, graph, x.flags);
    if (scratch)
        FLYT_BCALL(s, graph_destroy, scratch);
    if (e == NULL) {
        if (rs->why == NULL)
            rs->why = "an executable graph cannot be instantiated again";
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult flyt_state_graph_restore(flyt_session *s, uint32_t type, const unsigned char *p,
                                  uint64_t len, char *err, size_t errlen)
{
    struct restore rs = {s, NULL, 0};
    struct reader rd = {p, len};
    CUresult r = type == FLYT_SS_GRAPH ? restore_graph(&rs, &rd) : restore_exec(&rs, &rd);
    if (r != CUDA_SUCCESS)
        snprintf(err, errlen, "%s (id %llu): CUDA error %d", rs.why ? rs.why : "a graph section fails",
                 (unsigned long long)rs.bad_id, (int)r);
    return r;
}
