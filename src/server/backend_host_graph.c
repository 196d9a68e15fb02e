/* Graphs of the host test backend (backend_host_graph.h). */
#include "backend_host_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hg_node {
    flyt_gnode         p;
    flyt_host_func_cb  fn;
    void              *arg;
    struct hg_graph   *child; /* a child graph node's own copy */
    struct hg_graph  **bodies; /* a conditional node's p.rows body graphs */
    struct hg_node   **deps;
    size_t             ndeps;
    size_t             index; /* place in its graph */
    struct hg_graph   *owner;
};

/* A reference a graph holds on a user object. */
struct hg_uref {
    struct hg_uobj *obj;
    unsigned        count;
};

struct hg_graph {
    struct hg_node **nodes;
    size_t           n, cap;
    struct hg_uref  *urefs;
    size_t           nurefs;
};

struct hg_uobj {
    unsigned          refs;
    flyt_host_func_cb destroy;
    void             *arg;
};

struct hg_graph *hg_graph_new(void) { return calloc(1, sizeof(struct hg_graph)); }

static void node_free(struct hg_node *n)
{
    for (uint64_t i = 0; n->bodies && i < n->p.rows; i++)
        hg_graph_free(n->bodies[i]);
    free(n->bodies);
    hg_graph_free(n->child);
    free(n->deps);
    free(n);
}

void hg_graph_free(struct hg_graph *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->n; i++)
        node_free(g->nodes[i]);
    for (size_t i = 0; i < g->nurefs; i++)
        hg_uobj_release(g->urefs[i].obj, g->urefs[i].count);
    free(g->urefs);
    free(g->nodes);
    free(g);
}

static int owns(const struct hg_graph *g, const struct hg_node *n)
{
    return n && n->index < g->n && g->nodes[n->index] == n;
}

static CUresult append(struct hg_graph *g, struct hg_node *n)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct hg_node **more = realloc(g->nodes, cap * sizeof *more);
        if (more == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = more;
        g->cap = cap;
    }
    n->index = g->n;
    n->owner = g;
    g->nodes[g->n++] = n;
    return CUDA_SUCCESS;
}

static CUresult set_deps(struct hg_node *n, struct hg_node *const *deps, size_t ndeps)
{
    struct hg_node **d = calloc(ndeps + 1, sizeof *d);
    if (d == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ndeps)
        memcpy(d, deps, ndeps * sizeof *d);
    free(n->deps);
    n->deps = d;
    n->ndeps = ndeps;
    return CUDA_SUCCESS;
}

/* ---- conditional handles: the host backend's value holds what a launch
 * needs (kernels, which would set it, do not run here) ---- */

uint64_t hg_cond_handle(uint32_t serial, unsigned default_value, unsigned flags)
{
    return (uint64_t)serial << 40 | (uint64_t)(flags & CU_GRAPH_COND_ASSIGN_DEFAULT) << 32 | default_value;
}

/* The condition's value at a launch: the default when it is assigned,
 * else 0 (nothing here sets it). */
static unsigned cond_value(uint64_t handle)
{
    return handle >> 32 & CU_GRAPH_COND_ASSIGN_DEFAULT ? (unsigned)handle : 0;
}

static int cond_valid(const flyt_gnode *p)
{
    if (p->value >> 40 == 0 || p->rows == 0)
        return 0; /* not a handle of this backend */
    switch (p->elem_size) {
    case CU_GRAPH_COND_TYPE_IF: return p->rows <= 2;
    case CU_GRAPH_COND_TYPE_WHILE: return p->rows == 1;
    case CU_GRAPH_COND_TYPE_SWITCH: return 1;
    default: return 0;
    }
}

struct hg_graph *hg_body(const struct hg_node *n, uint64_t i)
{
    return n->bodies && i < n->p.rows ? n->bodies[i] : NULL;
}

CUresult hg_add(struct hg_graph *g, struct hg_node *const *deps, size_t ndeps, const flyt_gnode *p,
                flyt_host_func_cb fn, void *arg, struct hg_node **out)
{
    for (size_t i = 0; i < ndeps; i++)
        if (!owns(g, deps[i]))
            return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_GRAPH:
        break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        if (!cond_valid(p))
            return CUDA_ERROR_INVALID_VALUE;
        break;
    default:
        return CUDA_ERROR_NOT_SUPPORTED; /* kernels and memory nodes need a GPU */
    }
    struct hg_node *n = calloc(1, sizeof *n);
    if (n == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->p = *p;
    n->fn = fn;
    n->arg = arg;
    CUresult r = CUDA_SUCCESS;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH &&
        (n->child = hg_graph_clone((const struct hg_graph *)(uintptr_t)p->value)) == NULL)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        n->bodies = calloc(p->rows, sizeof *n->bodies);
        for (uint64_t i = 0; n->bodies && i < p->rows; i++)
            if ((n->bodies[i] = hg_graph_new()) == NULL)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        if (n->bodies == NULL)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        r = set_deps(n, deps, ndeps);
    if (r == CUDA_SUCCESS)
        r = append(g, n);
    if (r != CUDA_SUCCESS) {
        node_free(n);
        return r;
    }
    *out = n;
    return CUDA_SUCCESS;
}

struct hg_graph *hg_graph_clone(const struct hg_graph *g)
{
    struct hg_graph *c = hg_graph_new();
    for (size_t i = 0; c && g && i < g->n; i++) {
        const struct hg_node *o = g->nodes[i];
        struct hg_node **deps = calloc(o->ndeps + 1, sizeof *deps);
        struct hg_node *n = NULL;
        for (size_t d = 0; deps && d < o->ndeps; d++)
            deps[d] = c->nodes[o->deps[d]->index];
        flyt_gnode p = o->p;
        if (o->child)
            p.value = (uint64_t)(uintptr_t)o->child;
        CUresult r = deps ? hg_add(c, deps, o->ndeps, &p, o->fn, o->arg, &n) : CUDA_ERROR_OUT_OF_MEMORY;
        free(deps);
        for (uint64_t b = 0; r == CUDA_SUCCESS && o->bodies && b < o->p.rows; b++) {
            hg_graph_free(n->bodies[b]);
            if ((n->bodies[b] = hg_graph_clone(o->bodies[b])) == NULL)
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r != CUDA_SUCCESS) {
            hg_graph_free(c);
            return NULL;
        }
    }
    for (size_t i = 0; c && g && i < g->nurefs; i++) /* the copy holds references too */
        if (hg_graph_retain(c, g->urefs[i].obj, g->urefs[i].count, 0) != CUDA_SUCCESS) {
            hg_graph_free(c);
            return NULL;
        }
    return c;
}

CUresult hg_add_deps(struct hg_graph *g, struct hg_node *const *from, struct hg_node *const *to,
                     size_t n, int remove)
{
    for (size_t i = 0; i < n; i++) {
        /* a dependency on a later node would break the running order */
        if (!owns(g, from[i]) || !owns(g, to[i]) || from[i]->index >= to[i]->index)
            return remove ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    }
    for (size_t i = 0; i < n; i++) {
        struct hg_node *t = to[i];
        size_t k = 0;
        while (k < t->ndeps && t->deps[k] != from[i])
            k++;
        if (remove && k == t->ndeps)
            return CUDA_ERROR_INVALID_VALUE;
        if (remove) {
            t->deps[k] = t->deps[--t->ndeps];
            continue;
        }
        if (k < t->ndeps)
            continue; /* already there */
        struct hg_node **more = realloc(t->deps, (t->ndeps + 2) * sizeof *more);
        if (more == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        t->deps = more;
        t->deps[t->ndeps++] = from[i];
    }
    return CUDA_SUCCESS;
}

unsigned hg_node_type(const struct hg_node *n) { return n->p.type; }

void hg_node_get(const struct hg_node *n, flyt_gnode *p, flyt_host_func_cb *fn, void **arg)
{
    *p = n->p;
    if (n->child)
        p->value = (uint64_t)(uintptr_t)n->child;
    *fn = n->fn;
    *arg = n->arg;
}

CUresult hg_node_set(struct hg_node *n, const flyt_gnode *p, flyt_host_func_cb fn, void *arg)
{
    if (p->type != n->p.type)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->child) { /* an exec's child graph node takes a copy of the new graph */
        struct hg_graph *c = hg_graph_clone((const struct hg_graph *)(uintptr_t)p->value);
        if (c == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!hg_same_shape(c, n->child)) {
            hg_graph_free(c);
            return CUDA_ERROR_INVALID_VALUE;
        }
        hg_graph_free(n->child);
        n->child = c;
    }
    n->p = *p;
    if (p->type == CU_GRAPH_NODE_TYPE_HOST) {
        n->fn = fn;
        n->arg = arg;
    }
    return CUDA_SUCCESS;
}

struct hg_node *hg_same_node(const struct hg_graph *g, const struct hg_node *n)
{
    if (n->index >= g->n || g->nodes[n->index]->p.type != n->p.type)
        return NULL;
    return g->nodes[n->index];
}

void hg_destroy_node(struct hg_node *n)
{
    struct hg_graph *g = n->owner;
    for (size_t i = n->index + 1; i < g->n; i++) {
        g->nodes[i - 1] = g->nodes[i];
        g->nodes[i - 1]->index = i - 1;
    }
    g->n--;
    for (size_t i = 0; i < g->n; i++) { /* and every edge from it */
        struct hg_node *x = g->nodes[i];
        for (size_t d = 0; d < x->ndeps;)
            if (x->deps[d] == n)
                x->deps[d] = x->deps[--x->ndeps];
            else
                d++;
    }
    node_free(n);
}

void hg_node_edges(const struct hg_node *n, unsigned which, flyt_bhandle *out, size_t *count)
{
    size_t room = *count, k = 0;
    if (which == FLYT_GNODES_DEPS) {
        for (; k < n->ndeps; k++)
            if (out && k < room)
                out[k] = n->deps[k];
    } else {
        for (size_t i = 0; i < n->owner->n; i++) {
            struct hg_node *x = n->owner->nodes[i];
            for (size_t d = 0; d < x->ndeps; d++)
                if (x->deps[d] == n) {
                    if (out && k < room)
                        out[k] = x;
                    k++;
                }
        }
    }
    *count = out && k > room ? room : k;
}

void hg_nodes(const struct hg_graph *g, unsigned which, flyt_bhandle *out, size_t *n)
{
    size_t room = *n, count = 0;
    for (size_t i = 0; i < g->n; i++) {
        struct hg_node *x = g->nodes[i];
        if (which == FLYT_GNODES_EDGES) {
            for (size_t d = 0; d < x->ndeps; d++, count++)
                if (out && count < room) {
                    out[2 * count] = x->deps[d];
                    out[2 * count + 1] = x;
                }
            continue;
        }
        if (which == FLYT_GNODES_ROOTS && x->ndeps)
            continue;
        if (out && count < room)
            out[count] = x;
        count++;
    }
    *n = out && count > room ? room : count;
}

static const char *kind_name(unsigned type)
{
    switch (type) {
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "CONDITIONAL";
    default: return "GRAPH";
    }
}

char *hg_dot(const struct hg_graph *g)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return NULL;
    fprintf(f, "digraph flyt_host_graph {\n");
    for (size_t i = 0; i < g->n; i++)
        fprintf(f, "  n%zu [label=\"%s\"];\n", i, kind_name(g->nodes[i]->p.type));
    for (size_t i = 0; i < g->n; i++)
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
            fprintf(f, "  n%zu -> n%zu;\n", g->nodes[i]->deps[d]->index, i);
    fprintf(f, "}\n");
    fclose(f);
    return text;
}

int hg_same_shape(const struct hg_graph *a, const struct hg_graph *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const struct hg_node *x = a->nodes[i], *y = b->nodes[i];
        if (x->p.type != y->p.type || x->ndeps != y->ndeps)
            return 0;
        for (size_t d = 0; d < x->ndeps; d++)
            if (x->deps[d]->index != y->deps[d]->index)
                return 0;
    }
    return 1;
}

static void run_copy(const flyt_gnode *p)
{
    for (uint64_t i = 0; i < p->rows; i++)
        memmove((char *)(uintptr_t)(p->dst + i * p->dst_pitch),
                (const char *)(uintptr_t)(p->src + i * p->src_pitch), p->width);
}

static void run_memset(const flyt_gnode *p)
{
    unsigned es = p->elem_size ? p->elem_size : 1;
    uint32_t v = (uint32_t)p->value;
    for (uint64_t i = 0; i < p->rows; i++) {
        char *row = (char *)(uintptr_t)(p->dst + i * p->dst_pitch);
        for (uint64_t x = 0; x + es <= p->width; x += es)
            memcpy(row + x, &v, es); /* little-endian: the low bytes */
    }
}

static void run_conditional(const struct hg_node *n, void (*record_event)(void *event))
{
    unsigned v = cond_value(n->p.value);
    switch (n->p.elem_size) {
    case CU_GRAPH_COND_TYPE_IF:
        if (v || n->p.rows == 2)
            hg_run(n->bodies[v ? 0 : 1], record_event);
        break;
    case CU_GRAPH_COND_TYPE_SWITCH:
        if (v < n->p.rows)
            hg_run(n->bodies[v], record_event);
        break;
    default: /* WHILE: no kernel here can clear a set condition, so its body runs once */
        if (v)
            hg_run(n->bodies[0], record_event);
        break;
    }
}

void hg_run(const struct hg_graph *g, void (*record_event)(void *event))
{
    for (size_t i = 0; i < g->n; i++) {
        const struct hg_node *n = g->nodes[i];
        switch (n->p.type) {
        case CU_GRAPH_NODE_TYPE_MEMCPY: run_copy(&n->p); break;
        case CU_GRAPH_NODE_TYPE_MEMSET: run_memset(&n->p); break;
        case CU_GRAPH_NODE_TYPE_HOST: n->fn(n->arg); break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD: record_event((void *)(uintptr_t)n->p.value); break;
        case CU_GRAPH_NODE_TYPE_GRAPH: hg_run(n->child, record_event); break;
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: run_conditional(n, record_event); break;
        default: break; /* empty, event wait: everything before has run */
        }
    }
}

/* ---- capture ---- */

int hg_capturing(const struct hg_cap *c)
{
    return c->sess && !c->sess->ended && !c->sess->invalid;
}

CUresult hg_cap_begin(struct hg_cap *c, uint64_t id, struct hg_graph *into, struct hg_node *const *deps,
                      size_t ndeps)
{
    if (c->sess && !c->sess->ended)
        return CUDA_ERROR_ILLEGAL_STATE;
    for (size_t i = 0; into && i < ndeps; i++)
        if (!owns(into, deps[i]))
            return CUDA_ERROR_INVALID_VALUE;
    hg_cap_drop(c);
    struct hg_session *s = calloc(1, sizeof *s);
    if (s == NULL || (s->graph = into ? into : hg_graph_new()) == NULL) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->id = id;
    s->refs = 1;
    s->borrowed = into != NULL;
    c->sess = s;
    CUresult r = hg_cap_set_deps(c, deps, ndeps, 0);
    if (r != CUDA_SUCCESS)
        hg_cap_drop(c);
    return r;
}

CUresult hg_cap_record(struct hg_cap *c, const flyt_gnode *p, flyt_host_func_cb fn, void *arg)
{
    struct hg_node *n;
    CUresult r = hg_add(c->sess->graph, c->deps, c->ndeps, p, fn, arg, &n);
    if (r == CUDA_SUCCESS)
        r = hg_cap_set_deps(c, &n, 1, 0);
    if (r != CUDA_SUCCESS)
        c->sess->invalid = 1; /* as the driver invalidates a capture that failed */
    return r;
}

CUresult hg_cap_set_deps(struct hg_cap *c, struct hg_node *const *deps, size_t n, int add)
{
    size_t keep = add ? c->ndeps : 0;
    struct hg_node **d = calloc(keep + n + 1, sizeof *d);
    if (d == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (keep)
        memcpy(d, c->deps, keep * sizeof *d);
    if (n)
        memcpy(d + keep, deps, n * sizeof *d);
    free(c->deps);
    c->deps = d;
    c->ndeps = keep + n;
    return CUDA_SUCCESS;
}

void hg_cap_drop(struct hg_cap *c)
{
    /* its graph is not freed here: the backend's graph set holds it from the capture's
     * begin (or the program's graph it captures into), also while it is open, and a
     * backend closing with a capture open frees it once, from that set */
    if (c->sess && --c->sess->refs == 0)
        free(c->sess);
    free(c->deps);
    memset(c, 0, sizeof *c);
}

CUresult hg_cap_copy(struct hg_cap *dst, const struct hg_cap *src)
{
    if (dst == src)
        return CUDA_SUCCESS;
    hg_cap_drop(dst);
    if (src->sess == NULL)
        return CUDA_SUCCESS;
    CUresult r = hg_cap_set_deps(dst, src->deps, src->ndeps, 0);
    if (r != CUDA_SUCCESS)
        return r;
    dst->sess = src->sess;
    dst->sess->refs++;
    return CUDA_SUCCESS;
}

CUresult hg_cap_merge(struct hg_cap *dst, const struct hg_cap *src)
{
    if (dst->sess != src->sess)
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    return hg_cap_set_deps(dst, src->deps, src->ndeps, 1);
}

/* ---- user objects ---- */

CUresult hg_uobj_new(flyt_host_func_cb destroy, void *arg, unsigned refs, struct hg_uobj **out)
{
    struct hg_uobj *o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (struct hg_uobj){.refs = refs, .destroy = destroy, .arg = arg};
    *out = o;
    return CUDA_SUCCESS;
}

void hg_uobj_retain(struct hg_uobj *o, unsigned count) { o->refs += count; }

CUresult hg_uobj_release(struct hg_uobj *o, unsigned count)
{
    if (count > o->refs)
        return CUDA_ERROR_INVALID_VALUE; /* CUDA leaves this undefined */
    o->refs -= count;
    if (o->refs == 0) {
        o->destroy(o->arg);
        free(o);
    }
    return CUDA_SUCCESS;
}

CUresult hg_graph_retain(struct hg_graph *g, struct hg_uobj *o, unsigned count, int move)
{
    size_t i = 0;
    while (i < g->nurefs && g->urefs[i].obj != o)
        i++;
    if (i == g->nurefs) {
        struct hg_uref *more = realloc(g->urefs, (g->nurefs + 1) * sizeof *more);
        if (more == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->urefs = more;
        g->urefs[g->nurefs++] = (struct hg_uref){o, 0};
    }
    g->urefs[i].count += count;
    if (!move)
        hg_uobj_retain(o, count);
    return CUDA_SUCCESS;
}

CUresult hg_graph_release(struct hg_graph *g, struct hg_uobj *o, unsigned count)
{
    size_t i = 0;
    while (i < g->nurefs && g->urefs[i].obj != o)
        i++;
    if (i == g->nurefs || count > g->urefs[i].count)
        return CUDA_ERROR_INVALID_VALUE;
    g->urefs[i].count -= count;
    if (g->urefs[i].count == 0)
        g->urefs[i] = g->urefs[--g->nurefs];
    return hg_uobj_release(o, count);
}

void hg_uobj_forget(struct hg_uobj *o) { free(o); }
