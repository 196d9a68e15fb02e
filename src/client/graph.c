/*
 * CUDA graphs (docs/graphs.md). The server's driver captures and runs the
 * graphs; the client names them. CUgraph, CUgraphExec and CUgraphNode are
 * wire ids: graphs, execs and the nodes the program adds get ids chosen
 * here (so creation is pipelined where nothing comes back), nodes the
 * server reports first (a graph's nodes, a capture's dependencies) get the
 * server's ids, the same each time.
 */
#include "client.h"
#include "flyt_hash.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIRE(h) ((uint64_t)(uintptr_t)(h))

/* Captures begun and not ended: while none is, no stream is capturing and
 * the capture queries are answered here. */
static atomic_int captures_open;
/* Of those, captures into a graph of the program's (cuStreamBeginCaptureToGraph),
 * whose end may name no graph: the program holds it already. */
static atomic_int captures_into;

int flyt_captures_open(void) { return atomic_load(&captures_open) > 0; }

/* ---- capture ---- */

static CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode, int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (stream == NULL && !per_thread)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    if (stream == CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    /* The begin is checked at once (a second capture of a stream fails
     * there in CUDA), so it waits for its answer. */
    flyt_req_capture_begin req = {.stream = flyt_stream_wire(stream, per_thread),
                                  .graph = flyt_new_id(), .mode = (uint32_t)mode};
    r = flyt_call(FLYT_OP_CAPTURE_BEGIN, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&captures_open, 1);
    return r;
}
FLYT_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, 0);
}
FLYT_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return begin_capture(s, mode, 1);
}
FLYT_EXPORT CUresult cuStreamBeginCapture(CUstream s)
{
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
}
FLYT_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    return begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, 1);
}

static CUresult end_capture(CUstream stream, CUgraph *graph, int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (graph == NULL && atomic_load(&captures_into) == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = 0;
    flyt_req_handle req = {.handle = flyt_stream_wire(stream, per_thread)};
    r = flyt_call_u64(FLYT_OP_CAPTURE_END, &req, sizeof req, &id);
    if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_INVALID_HANDLE &&
        atomic_load(&captures_open) > 0) {
        atomic_fetch_sub(&captures_open, 1);
        if (graph == NULL && atomic_load(&captures_into) > 0)
            atomic_fetch_sub(&captures_into, 1);
    }
    if (graph)
        *graph = r == CUDA_SUCCESS ? (CUgraph)(uintptr_t)id : NULL;
    return r;
}
static int edges_default(const CUgraphEdgeData *edges, size_t n);
static uint64_t *node_ids(const CUgraphNode *nodes, size_t n);

static CUresult capture_to_graph(CUstream stream, CUgraph g, const CUgraphNode *deps,
                                 const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode,
                                 int per_thread)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (g == NULL || (n && deps == NULL) || n > FLYT_MAX_GRAPH_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    if ((stream == NULL && !per_thread) || stream == CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!edges_default(edges, n))
        return flyt_unsupported_why("cuStreamBeginCaptureToGraph", "edge data");
    uint64_t *ids = node_ids(deps, n);
    if (ids == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_capture_to_graph req = {.stream = flyt_stream_wire(stream, per_thread), .graph = WIRE(g),
                                     .mode = (uint32_t)mode, .n = (uint32_t)n};
    struct iovec data = {ids, n * sizeof *ids};
    r = flyt_call(FLYT_OP_CAPTURE_TO_GRAPH, &req, sizeof req, &data, 1, NULL);
    free(ids);
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add(&captures_open, 1);
        atomic_fetch_add(&captures_into, 1);
    }
    return r;
}
FLYT_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                 const CUgraphEdgeData *edges, size_t n,
                                                 CUstreamCaptureMode mode)
{
    return capture_to_graph(s, g, deps, edges, n, mode, 0);
}
FLYT_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                      const CUgraphEdgeData *edges, size_t n,
                                                      CUstreamCaptureMode mode)
{
    return capture_to_graph(s, g, deps, edges, n, mode, 1);
}

FLYT_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end_capture(s, g, 0); }
FLYT_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end_capture(s, g, 1); }

/* The dependencies a capture info call hands out: valid until the thread's
 * next such call, as the driver's are until the stream's next capture. */
static _Thread_local CUgraphNode *info_deps;
static _Thread_local CUgraphEdgeData *info_edges;

static CUresult capture_info(CUstream stream, int per_thread, CUstreamCaptureStatus *status,
                             cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (atomic_load(&captures_open) == 0) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
    }
    flyt_req_handle req = {.handle = flyt_stream_wire(stream, per_thread)};
    flyt_rep_capture_info rep = {0};
    uint64_t ids[256];
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep, .data = ids,
                                   .data_max = sizeof ids};
    r = flyt_call(FLYT_OP_CAPTURE_INFO, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    if (rep.ndeps > 256)
        return flyt_unsupported_why("cuStreamGetCaptureInfo", "more than 256 capture dependencies");
    *status = (CUstreamCaptureStatus)rep.status;
    if (id)
        *id = rep.capture_id;
    if (graph)
        *graph = (CUgraph)(uintptr_t)rep.graph;
    if (ndeps)
        *ndeps = rep.ndeps;
    if (deps || edges) {
        free(info_deps);
        free(info_edges);
        info_deps = calloc(rep.ndeps + 1u, sizeof *info_deps);
        info_edges = calloc(rep.ndeps + 1u, sizeof *info_edges);
        if (info_deps == NULL || info_edges == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (uint32_t i = 0; i < rep.ndeps; i++)
            info_deps[i] = (CUgraphNode)(uintptr_t)ids[i];
        if (deps)
            *deps = info_deps;
        if (edges)
            *edges = info_edges; /* default edges: all zero */
    }
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    return capture_info(s, 0, status, NULL, NULL, NULL, NULL, NULL);
}
FLYT_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
    return capture_info(s, 1, status, NULL, NULL, NULL, NULL, NULL);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(s, 0, status, id, NULL, NULL, NULL, NULL);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *status,
                                                 cuuint64_t *id)
{
    return capture_info(s, 1, status, id, NULL, NULL, NULL, NULL);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status,
                                               cuuint64_t *id, CUgraph *graph,
                                               const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(s, 0, status, id, graph, deps, NULL, ndeps);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status,
                                                    cuuint64_t *id, CUgraph *graph,
                                                    const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(s, 1, status, id, graph, deps, NULL, ndeps);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status,
                                               cuuint64_t *id, CUgraph *graph,
                                               const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(s, 0, status, id, graph, deps, edges, ndeps);
}
FLYT_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status,
                                                    cuuint64_t *id, CUgraph *graph,
                                                    const CUgraphNode **deps,
                                                    const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(s, 1, status, id, graph, deps, edges, ndeps);
}

/* Edge data other than the default (all zero) is not carried. */
static int edges_default(const CUgraphEdgeData *edges, size_t n)
{
    static const CUgraphEdgeData zero;
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp(&edges[i], &zero, sizeof zero) != 0)
            return 0;
    return 1;
}

/* n node handles as wire ids, after the request (freed by the caller). */
static uint64_t *node_ids(const CUgraphNode *nodes, size_t n)
{
    uint64_t *ids = calloc(n + 1, sizeof *ids);
    for (size_t i = 0; ids && i < n; i++)
        ids[i] = WIRE(nodes[i]);
    return ids;
}

static CUresult update_deps(CUstream stream, int per_thread, CUgraphNode *deps,
                            const CUgraphEdgeData *edges, size_t n, unsigned flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if ((n && deps == NULL) || n > FLYT_MAX_GRAPH_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    if (!edges_default(edges, n))
        return flyt_unsupported_why("cuStreamUpdateCaptureDependencies", "edge data");
    uint64_t *ids = node_ids(deps, n);
    if (ids == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_capture_deps req = {.stream = flyt_stream_wire(stream, per_thread), .n = (uint32_t)n,
                                 .flags = flags};
    struct iovec data = {ids, n * sizeof *ids};
    r = flyt_call(FLYT_OP_CAPTURE_DEPS, &req, sizeof req, &data, 1, NULL);
    free(ids);
    return r;
}
FLYT_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, size_t n,
                                                       unsigned int flags)
{
    return update_deps(s, 0, deps, NULL, n, flags);
}
FLYT_EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode *deps, size_t n,
                                                            unsigned int flags)
{
    return update_deps(s, 1, deps, NULL, n, flags);
}
FLYT_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps,
                                                          const CUgraphEdgeData *edges, size_t n,
                                                          unsigned int flags)
{
    return update_deps(s, 0, deps, edges, n, flags);
}
FLYT_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *deps,
                                                               const CUgraphEdgeData *edges, size_t n,
                                                               unsigned int flags)
{
    return update_deps(s, 1, deps, edges, n, flags);
}

/* The thread's capture interaction mode is answered here. The server runs
 * every thread's calls on one thread, which takes the mode the client's
 * threads set last (a program guarding its allocations during a capture
 * with RELAXED, as PyTorch's allocator does, needs the server to know). */
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static atomic_int server_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
FLYT_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (mode == NULL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    if (flyt_ctx_current() != NULL &&
        atomic_exchange(&server_mode, (int)capture_mode) != (int)capture_mode) {
        flyt_req_i32 req = {.value = (int32_t)capture_mode};
        return flyt_send_async(FLYT_OP_CAPTURE_MODE, &req, sizeof req, NULL, 0);
    }
    return CUDA_SUCCESS;
}

/* ---- graphs and execs ---- */

/* Exec graphs holding memory allocation nodes: their launches wait for the
 * server's answer, as CUDA refuses a relaunch while the last launch's
 * allocation lives at the launch itself. Other launches stay pipelined. */
static flyt_hash waiting_execs;
static atomic_size_t waiting_count;
static pthread_mutex_t waiting_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult waiting_exec_add(uint64_t exec)
{
    pthread_mutex_lock(&waiting_lock);
    int ok = flyt_hash_find(&waiting_execs, exec) || flyt_hash_insert(&waiting_execs, exec);
    atomic_store(&waiting_count, flyt_hash_count(&waiting_execs));
    pthread_mutex_unlock(&waiting_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void waiting_exec_remove(uint64_t exec)
{
    if (atomic_load(&waiting_count) == 0)
        return;
    pthread_mutex_lock(&waiting_lock);
    flyt_hash_remove(&waiting_execs, exec);
    atomic_store(&waiting_count, flyt_hash_count(&waiting_execs));
    pthread_mutex_unlock(&waiting_lock);
}

int flyt_graph_launch_waits(const struct flyt_generic_call *call)
{
    if (atomic_load(&waiting_count) == 0)
        return 0;
    pthread_mutex_lock(&waiting_lock);
    int waits = flyt_hash_find(&waiting_execs, call->args[0]) != NULL;
    pthread_mutex_unlock(&waiting_lock);
    return waits;
}

FLYT_EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (graph == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_create req = {.graph = flyt_new_id()};
    r = flyt_send_async(FLYT_OP_GRAPH_CREATE, &req, sizeof req, NULL, 0);
    if (r == CUDA_SUCCESS)
        *graph = (CUgraph)(uintptr_t)req.graph;
    return r;
}

static CUresult destroy(uint16_t op, uint64_t id)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (id == 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_handle req = {.handle = id};
    return flyt_send_async(op, &req, sizeof req, NULL, 0);
}
FLYT_EXPORT CUresult cuGraphDestroy(CUgraph g) { return destroy(FLYT_OP_GRAPH_DESTROY, WIRE(g)); }
FLYT_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
    CUresult r = destroy(FLYT_OP_EXEC_DESTROY, WIRE(e));
    if (r == CUDA_SUCCESS)
        waiting_exec_remove(WIRE(e));
    return r;
}

FLYT_EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph orig)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (clone == NULL || orig == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_handle_pair req = {.a = flyt_new_id(), .b = WIRE(orig)};
    /* waited for: the driver refuses some graphs at once (those with memory
     * nodes), and a clone is rare enough for one round trip */
    r = flyt_call(FLYT_OP_GRAPH_CLONE, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        *clone = (CUgraph)(uintptr_t)req.a;
    return r;
}

static CUresult instantiate(CUgraphExec *exec, CUgraph graph, uint64_t flags, CUstream upload,
                            int per_thread, CUgraphNode *err_node, CUgraphInstantiateResult *result)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (exec == NULL || graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_inst req = {.exec = flyt_new_id(), .graph = WIRE(graph), .flags = flags,
                               .upload_stream = flyt_stream_wire(upload, per_thread)};
    flyt_rep_graph_info rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_GRAPH_INSTANTIATE, &req, sizeof req, NULL, 0, &sink);
    if (err_node)
        *err_node = (CUgraphNode)(uintptr_t)rep.node;
    if (result)
        *result = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                    : (CUgraphInstantiateResult)rep.result;
    *exec = r == CUDA_SUCCESS ? (CUgraphExec)(uintptr_t)req.exec : NULL;
    if (r == CUDA_SUCCESS && rep.alloc_nodes)
        r = waiting_exec_add(req.exec);
    return r;
}
FLYT_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    /* uploading needs a stream, which only cuGraphInstantiateWithParams
     * names: the driver refuses the flag here (measured on the H100) */
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
        return CUDA_ERROR_INVALID_VALUE;
    return instantiate(exec, g, flags, NULL, 0, NULL, NULL);
}
FLYT_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err_node,
                                           char *log, size_t log_size)
{
    if (log && log_size)
        log[0] = '\0';
    return instantiate(exec, g, 0, NULL, 0, err_node, NULL);
}
FLYT_EXPORT CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph g, CUgraphNode *err_node, char *log,
                                        size_t log_size)
{
    return cuGraphInstantiate_v2(exec, g, err_node, log, log_size);
}
static CUresult instantiate_params(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p,
                                   int per_thread)
{
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return instantiate(exec, g, p->flags, p->hUploadStream, per_thread, &p->hErrNode_out,
                       &p->result_out);
}
FLYT_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(exec, g, p, 0);
}
FLYT_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph g,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(exec, g, p, 1);
}

FLYT_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (exec == NULL || g == NULL || info == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_handle_pair req = {.a = WIRE(exec), .b = WIRE(g)};
    flyt_rep_graph_info rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_EXEC_UPDATE, &req, sizeof req, NULL, 0, &sink);
    info->result = (CUgraphExecUpdateResult)rep.result;
    info->errorNode = (CUgraphNode)(uintptr_t)rep.node;
    info->errorFromNode = (CUgraphNode)(uintptr_t)rep.from_node;
    return r;
}
FLYT_EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph g, CUgraphNode *err_node,
                                       CUgraphExecUpdateResult *result)
{
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult r = cuGraphExecUpdate_v2(exec, g, &info);
    if (err_node)
        *err_node = info.errorNode;
    if (result)
        *result = info.result;
    return r;
}

/* ---- inspection ---- */

/* which: FLYT_GNODES_*; per: ids per entry (edges: 2). out may be NULL. */
static CUresult graph_nodes(CUgraph g, unsigned which, size_t per, CUgraphNode *a, CUgraphNode *b,
                            size_t *n)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (g == NULL || n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    size_t want = a ? *n : 0;
    if (want > FLYT_MAX_GRAPH_NODES)
        want = FLYT_MAX_GRAPH_NODES;
    uint64_t *ids = calloc(want * per + 1, sizeof *ids);
    if (ids == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_graph_nodes req = {.graph = WIRE(g), .which = which, .max = (uint32_t)want};
    uint64_t total = 0;
    struct flyt_reply_sink sink = {.rep = &total, .rep_size = sizeof total, .data = ids,
                                   .data_max = (want * per + 1) * sizeof *ids};
    r = flyt_call(FLYT_OP_GRAPH_NODES, &req, sizeof req, NULL, 0, &sink);
    size_t got = total < want ? (size_t)total : want;
    for (size_t i = 0; r == CUDA_SUCCESS && i < want; i++) {
        a[i] = i < got ? (CUgraphNode)(uintptr_t)ids[i * per] : NULL;
        if (b)
            b[i] = i < got ? (CUgraphNode)(uintptr_t)ids[i * per + 1] : NULL;
    }
    if (r == CUDA_SUCCESS)
        *n = a ? got : (size_t)total;
    free(ids);
    return r;
}
FLYT_EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
    return graph_nodes(g, FLYT_GNODES_ALL, 1, nodes, NULL, n);
}
FLYT_EXPORT CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
    return graph_nodes(g, FLYT_GNODES_ROOTS, 1, nodes, NULL, n);
}
/* A node's dependencies or dependents (edge data: only the default). */
static CUresult node_edges(CUgraphNode node, unsigned which, CUgraphNode *nodes, CUgraphEdgeData *edges,
                           size_t *n)
{
    CUresult r = graph_nodes((CUgraph)node, which, 1, nodes, NULL, n);
    if (r == CUDA_SUCCESS && edges && nodes)
        memset(edges, 0, *n * sizeof *edges);
    return r;
}
FLYT_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode *deps,
                                                   CUgraphEdgeData *edges, size_t *n)
{
    return node_edges(node, FLYT_GNODES_DEPS, deps, edges, n);
}
FLYT_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, size_t *n)
{
    return node_edges(node, FLYT_GNODES_DEPS, deps, NULL, n);
}
FLYT_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode *dependents,
                                                     CUgraphEdgeData *edges, size_t *n)
{
    return node_edges(node, FLYT_GNODES_DEPENDENTS, dependents, edges, n);
}
FLYT_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *dependents, size_t *n)
{
    return node_edges(node, FLYT_GNODES_DEPENDENTS, dependents, NULL, n);
}
FLYT_EXPORT CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to,
                                        CUgraphEdgeData *edges, size_t *n)
{
    if ((from == NULL) != (to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = graph_nodes(g, FLYT_GNODES_EDGES, 2, from, to, n);
    if (r == CUDA_SUCCESS && edges && from)
        memset(edges, 0, *n * sizeof *edges); /* only default edges are carried */
    return r;
}
FLYT_EXPORT CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *n)
{
    return cuGraphGetEdges_v2(g, from, to, NULL, n);
}

FLYT_EXPORT CUresult cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (g == NULL || path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_nodes req = {.graph = WIRE(g), .which = flags};
    size_t cap = 1 << 20;
    char *text = NULL;
    uint64_t len = 0;
    for (;;) { /* grow until the whole text fits */
        char *more = realloc(text, cap);
        if (more == NULL) {
            free(text);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        text = more;
        struct flyt_reply_sink sink = {.rep = &len, .rep_size = sizeof len, .data = text,
                                       .data_max = cap};
        r = flyt_call(FLYT_OP_GRAPH_DOT, &req, sizeof req, NULL, 0, &sink);
        if (r != CUDA_SUCCESS || len <= cap || cap >= FLYT_MAX_GRAPH_DOT)
            break;
        cap = (size_t)len;
    }
    FILE *f = r == CUDA_SUCCESS ? fopen(path, "w") : NULL;
    if (r == CUDA_SUCCESS && (f == NULL || fwrite(text, 1, (size_t)len, f) != len))
        r = CUDA_ERROR_OPERATING_SYSTEM;
    if (f && fclose(f) != 0)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    free(text);
    return r;
}

/* ---- explicit construction ---- */

/* Adds a node with the id chosen here; params: a kernel node's packed
 * parameters. The answer is waited for: a bad node fails where CUDA fails. */
CUresult flyt_graph_add_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                             const flyt_gnode *p, const void *params, uint64_t *dptr)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (node == NULL || g == NULL || (ndeps && deps == NULL) || ndeps > FLYT_MAX_GRAPH_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t *ids = node_ids(deps, ndeps);
    if (ids == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_graph_node req = {.graph = WIRE(g), .node = flyt_new_id(), .ndeps = (uint32_t)ndeps};
    struct iovec data[3] = {{ids, ndeps * sizeof *ids}, {(void *)p, sizeof *p},
                            {(void *)params, (size_t)flyt_gnode_trailing(p)}};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_GRAPH_ADD_NODE, &req, sizeof req, data, 3, &sink);
    free(ids);
    if (r == CUDA_SUCCESS) {
        *node = (CUgraphNode)(uintptr_t)req.node;
        if (dptr)
            *dptr = rep.value;
    }
    return r;
}

FLYT_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n)
{
    flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_EMPTY};
    return flyt_graph_add_node(node, g, deps, n, &p, NULL, NULL);
}

CUresult flyt_gnode_memset(const CUDA_MEMSET_NODE_PARAMS *m, flyt_gnode *p)
{
    if (m == NULL || (m->elementSize != 1 && m->elementSize != 2 && m->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_MEMSET, .elem_size = m->elementSize, .dst = m->dst,
                      .dst_pitch = m->height > 1 ? m->pitch : (uint64_t)m->width * m->elementSize,
                      .width = (uint64_t)m->width * m->elementSize, .rows = m->height, .value = m->value};
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          const CUDA_MEMSET_NODE_PARAMS *m, CUcontext ctx)
{
    (void)ctx; /* the session has one context */
    flyt_gnode p;
    CUresult r = flyt_gnode_memset(m, &p);
    return r == CUDA_SUCCESS ? flyt_graph_add_node(node, g, deps, n, &p, NULL, NULL) : r;
}

/* One side of a copy node: a device address, or host memory the server
 * shares (page-locked, on a Unix socket). *ok = 0 for host memory it
 * cannot reach. */
static void copy_side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                      size_t pitch, uint64_t span, uint64_t *addr, uint64_t *region, int *ok)
{
    uint64_t a = (type == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)host : (uint64_t)dev) + y * pitch + x;
    uint64_t base = 0;
    int kind = type == CU_MEMORYTYPE_UNIFIED || type == CU_MEMORYTYPE_HOST
                   ? flyt_range_find(a, &base, NULL, NULL) : FLYT_RANGE_DEVICE;
    if (type == CU_MEMORYTYPE_DEVICE || kind == FLYT_RANGE_DEVICE) {
        *addr = a;
        *region = 0;
        return;
    }
    uint64_t offset = 0;
    *region = flyt_range_region(a, span, &offset);
    *addr = offset;
    *ok = *region != 0;
}

CUresult flyt_gnode_copy(const char *call, const CUDA_MEMCPY3D *c, flyt_gnode *p)
{
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->Depth > 1 || c->srcZ || c->dstZ || c->srcMemoryType == CU_MEMORYTYPE_ARRAY ||
        c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return flyt_unsupported_why(call, "arrays and 3D copies");
    size_t rows = c->Height ? c->Height : 1;
    size_t spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
    size_t dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_MEMCPY, .width = c->WidthInBytes, .rows = rows,
                      .src_pitch = spitch, .dst_pitch = dpitch};
    int ok = 1;
    copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, spitch,
              (rows - 1) * spitch + c->WidthInBytes, &p->src, &p->src_region, &ok);
    copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, dpitch,
              (rows - 1) * dpitch + c->WidthInBytes, &p->dst, &p->dst_region, &ok);
    if (!ok)
        return flyt_unsupported_why(call, "pageable host memory, which the server cannot reach "
                                          "when the graph runs; use cuMemHostAlloc memory on a "
                                          "Unix socket");
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    (void)ctx;
    flyt_gnode p;
    CUresult r = flyt_gnode_copy("cuGraphAddMemcpyNode", c, &p);
    return r == CUDA_SUCCESS ? flyt_graph_add_node(node, g, deps, n, &p, NULL, NULL) : r;
}

CUresult flyt_gnode_host(const CUDA_HOST_NODE_PARAMS *h, flyt_gnode *p)
{
    if (h == NULL || h->fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = flyt_callback_register(h->fn, NULL, NULL, h->userData, 0, 0);
    if (id == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_HOST, .value = id};
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                        const CUDA_HOST_NODE_PARAMS *h)
{
    flyt_gnode p;
    CUresult r = flyt_gnode_host(h, &p);
    return r == CUDA_SUCCESS ? flyt_graph_add_node(node, g, deps, n, &p, NULL, NULL) : r;
}

static CUresult add_handle_node(CUgraphNodeType type, CUgraphNode *node, CUgraph g,
                                const CUgraphNode *deps, size_t n, uint64_t handle)
{
    if (handle == 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p = {.type = type, .value = handle};
    return flyt_graph_add_node(node, g, deps, n, &p, NULL, NULL);
}
FLYT_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                               size_t n, CUevent e)
{
    return add_handle_node(CU_GRAPH_NODE_TYPE_EVENT_RECORD, node, g, deps, n, WIRE(e));
}
FLYT_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                             size_t n, CUevent e)
{
    return add_handle_node(CU_GRAPH_NODE_TYPE_WAIT_EVENT, node, g, deps, n, WIRE(e));
}
FLYT_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                              size_t n, CUgraph child)
{
    return add_handle_node(CU_GRAPH_NODE_TYPE_GRAPH, node, g, deps, n, WIRE(child));
}
FLYT_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                           size_t n, CUdeviceptr dptr)
{
    return add_handle_node(CU_GRAPH_NODE_TYPE_MEM_FREE, node, g, deps, n, dptr);
}

FLYT_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                            size_t n, CUDA_MEM_ALLOC_NODE_PARAMS *m)
{
    if (m == NULL || m->bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        m->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || m->poolProps.location.id != 0 ||
        m->accessDescCount != 0)
        return flyt_unsupported_why("cuGraphAddMemAllocNode", "pools other than the device's");
    flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC, .width = m->bytesize};
    uint64_t dptr = 0;
    CUresult r = flyt_graph_add_node(node, g, deps, n, &p, NULL, &dptr);
    if (r == CUDA_SUCCESS)
        m->dptr = (CUdeviceptr)dptr;
    return r;
}

CUresult flyt_gnode_kernel(const CUDA_KERNEL_NODE_PARAMS *k, flyt_gnode *p, struct flyt_packed *pk)
{
    if (k == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const void *fn = k->func ? (const void *)k->func : (const void *)k->kern;
    unsigned grid[3] = {k->gridDimX, k->gridDimY, k->gridDimZ};
    unsigned block[3] = {k->blockDimX, k->blockDimY, k->blockDimZ};
    CUresult r = flyt_launch_pack(fn, grid, block, k->sharedMemBytes, k->kernelParams, k->extra, pk);
    if (r != CUDA_SUCCESS)
        return r;
    *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_KERNEL, .func = pk->func,
                      .grid = {grid[0], grid[1], grid[2]}, .block = {block[0], block[1], block[2]},
                      .shared_mem = k->sharedMemBytes, .param_bytes = pk->bytes};
    return CUDA_SUCCESS;
}

CUDA_KERNEL_NODE_PARAMS flyt_kernel_params_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *k)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    memset(&v2, 0, sizeof v2);
    v2.func = k->func;
    v2.gridDimX = k->gridDimX, v2.gridDimY = k->gridDimY, v2.gridDimZ = k->gridDimZ;
    v2.blockDimX = k->blockDimX, v2.blockDimY = k->blockDimY, v2.blockDimZ = k->blockDimZ;
    v2.sharedMemBytes = k->sharedMemBytes;
    v2.kernelParams = k->kernelParams;
    v2.extra = k->extra;
    return v2;
}

FLYT_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                             size_t n, const CUDA_KERNEL_NODE_PARAMS *k)
{
    flyt_gnode p;
    struct flyt_packed pk;
    CUresult r = flyt_gnode_kernel(k, &p, &pk);
    if (r != CUDA_SUCCESS)
        return r;
    r = flyt_graph_add_node(node, g, deps, n, &p, pk.params, NULL);
    flyt_packed_free(&pk);
    return r;
}
FLYT_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          const CUDA_KERNEL_NODE_PARAMS_v1 *k)
{
    if (k == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = flyt_kernel_params_v2(k);
    return cuGraphAddKernelNode_v2(node, g, deps, n, &v2);
}

static CUresult change_deps(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                            const CUgraphEdgeData *edges, size_t n, int remove)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (g == NULL || (n && (from == NULL || to == NULL)) || n > FLYT_MAX_GRAPH_NODES)
        return CUDA_ERROR_INVALID_VALUE;
    if (!edges_default(edges, n))
        return flyt_unsupported_why(remove ? "cuGraphRemoveDependencies" : "cuGraphAddDependencies",
                                    "edge data");
    uint64_t *a = node_ids(from, n), *b = node_ids(to, n);
    flyt_req_graph_deps req = {.graph = WIRE(g), .n = (uint32_t)n, .remove = (uint32_t)remove};
    struct iovec data[2] = {{a, n * sizeof *a}, {b, n * sizeof *b}};
    r = a && b ? flyt_call(FLYT_OP_GRAPH_ADD_DEPS, &req, sizeof req, data, 2, NULL)
               : CUDA_ERROR_OUT_OF_MEMORY;
    free(a);
    free(b);
    return r;
}
FLYT_EXPORT CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                            size_t n)
{
    return change_deps(g, from, to, NULL, n, 0);
}
FLYT_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                               const CUgraphEdgeData *edges, size_t n)
{
    return change_deps(g, from, to, edges, n, 0);
}
FLYT_EXPORT CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                               size_t n)
{
    return change_deps(g, from, to, NULL, n, 1);
}
FLYT_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from,
                                                  const CUgraphNode *to, const CUgraphEdgeData *edges,
                                                  size_t n)
{
    return change_deps(g, from, to, edges, n, 1);
}

/* ---- user objects ---- */

/* The destructor is registered as a callback: the server's CALLBACK frame
 * names it when the driver destroys the object, and the client's callback
 * thread runs it once (docs/graphs.md). */
FLYT_EXPORT CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy,
                                        unsigned int refs, unsigned int flags)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (out == NULL || destroy == NULL || refs == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cb = flyt_callback_register(destroy, NULL, NULL, ptr, 0, 0);
    if (cb == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    flyt_req_user_object req = {.object = flyt_new_id(), .callback = cb, .refs = refs, .flags = flags};
    r = flyt_send_async(FLYT_OP_USER_OBJECT_CREATE, &req, sizeof req, NULL, 0);
    if (r == CUDA_SUCCESS)
        *out = (CUuserObject)(uintptr_t)req.object;
    return r;
}
_Static_assert((int)CU_GRAPH_NODE_TYPE_KERNEL == (int)FLYT_GNODE_TYPE_KERNEL &&
                   (int)CU_GRAPH_NODE_TYPE_CONDITIONAL == (int)FLYT_GNODE_TYPE_CONDITIONAL,
               "flyt_gnode_trailing names CUDA's node types");
