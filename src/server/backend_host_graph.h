/*
 * Graphs of the host test backend: a graph is its nodes in the order they
 * were added (which is an order their dependencies allow, since a node can
 * only depend on nodes already there), and running it runs them in that
 * order. Streams record into a graph while they capture.
 */
#ifndef FLYT_BACKEND_HOST_GRAPH_H
#define FLYT_BACKEND_HOST_GRAPH_H

#include <cuda.h>
#include <stddef.h>

#include "backend.h"

struct hg_graph;
struct hg_node;
struct hg_uobj;

/* A capture in progress, shared by the streams that joined it. */
struct hg_session {
    struct hg_graph *graph;
    uint64_t         id;
    int              refs;  /* streams and events holding it */
    int              ended; /* its origin stream ended it */
    int              invalid;
    int              borrowed; /* the program's graph (cuStreamBeginCaptureToGraph): never freed here */
};

/* Where a stream (or an event recorded during capture) stands in one. */
struct hg_cap {
    struct hg_session *sess;
    struct hg_node   **deps;
    size_t             ndeps;
};

struct hg_graph *hg_graph_new(void);
void hg_graph_free(struct hg_graph *g);
struct hg_graph *hg_graph_clone(const struct hg_graph *g);

/* p: a translated node; fn/arg: a host node's function. child graphs are
 * cloned into the node. */
CUresult hg_add(struct hg_graph *g, struct hg_node *const *deps, size_t ndeps, const flyt_gnode *p,
                flyt_host_func_cb fn, void *arg, struct hg_node **out);
CUresult hg_add_deps(struct hg_graph *g, struct hg_node *const *from, struct hg_node *const *to,
                     size_t n, int remove);
unsigned hg_node_type(const struct hg_node *n); /* CUgraphNodeType */
/* The node's parameters (a child graph node: its own graph in value). */
void hg_node_get(const struct hg_node *n, flyt_gnode *p, flyt_host_func_cb *fn, void **arg);
/* New parameters of the node's kind (a child graph node copies the new graph). */
CUresult hg_node_set(struct hg_node *n, const flyt_gnode *p, flyt_host_func_cb fn, void *arg);
/* n's counterpart in g, a clone or an exec's copy of n's graph; NULL if none. */
struct hg_node *hg_same_node(const struct hg_graph *g, const struct hg_node *n);
void hg_destroy_node(struct hg_node *n);
/* which: FLYT_GNODES_DEPS or FLYT_GNODES_DEPENDENTS; out NULL: *count = how many */
void hg_node_edges(const struct hg_node *n, unsigned which, flyt_bhandle *out, size_t *count);
/* FLYT_GNODES_*; out NULL: *n = how many */
void hg_nodes(const struct hg_graph *g, unsigned which, flyt_bhandle *out, size_t *n);
char *hg_dot(const struct hg_graph *g);
/* Same nodes of the same kinds with the same dependencies: an exec made
 * from a can take b's parameters. */
int hg_same_shape(const struct hg_graph *a, const struct hg_graph *b);
/* record_event: what an event record node does. */
void hg_run(const struct hg_graph *g, void (*record_event)(void *event));

/* ---- capture ---- */
int hg_capturing(const struct hg_cap *c); /* active and not invalidated */
/* into: the graph to capture into, after deps (NULL: a new graph). */
CUresult hg_cap_begin(struct hg_cap *c, uint64_t id, struct hg_graph *into, struct hg_node *const *deps,
                      size_t ndeps);
/* Adds a node after the capture's current dependencies. */
CUresult hg_cap_record(struct hg_cap *c, const flyt_gnode *p, flyt_host_func_cb fn, void *arg);
/* dst takes src's place in its capture (event record, stream wait). */
CUresult hg_cap_copy(struct hg_cap *dst, const struct hg_cap *src);
/* dst also depends on src's dependencies (a capturing stream waits). */
CUresult hg_cap_merge(struct hg_cap *dst, const struct hg_cap *src);
void hg_cap_drop(struct hg_cap *c);
CUresult hg_cap_set_deps(struct hg_cap *c, struct hg_node *const *deps, size_t n, int add);

/* ---- conditional nodes ---- */
/* A conditional handle of this backend: it holds the default value and
 * whether a launch assigns it, which is all a launch here can use. */
uint64_t hg_cond_handle(uint32_t serial, unsigned default_value, unsigned flags);
/* A conditional node's body graph i (owned by the node), NULL if none. */
struct hg_graph *hg_body(const struct hg_node *n, uint64_t i);

/* ---- user objects: destroy(arg) runs when the last reference goes ---- */
CUresult hg_uobj_new(flyt_host_func_cb destroy, void *arg, unsigned refs, struct hg_uobj **out);
void hg_uobj_retain(struct hg_uobj *o, unsigned count);
void hg_uobj_forget(struct hg_uobj *o); /* frees it without its destructor */
CUresult hg_uobj_release(struct hg_uobj *o, unsigned count);
/* A graph's references, given up when it is freed and copied by clones
 * (an exec is a clone); move: the caller's references become the graph's. */
CUresult hg_graph_retain(struct hg_graph *g, struct hg_uobj *o, unsigned count, int move);
CUresult hg_graph_release(struct hg_graph *g, struct hg_uobj *o, unsigned count);

#endif
