/*
 * One graph node's parameters (docs/graphs.md): getters and setters of the
 * node kinds, the per-node exec updates, the generic cuGraphAddNode /
 * cuGraphNodeSetParams / cuGraphExecNodeSetParams, and finding, destroying
 * and inspecting nodes. The server's driver holds the parameters: a getter
 * asks it (captured nodes were never seen here), a setter sends the node's
 * parameters as GRAPH_ADD_NODE does.
 */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WIRE(h) ((uint64_t)(uintptr_t)(h))

/* ---- the wire ---- */

static CUresult node_set(uint64_t exec, CUgraphNode node, const flyt_gnode *p, const void *params)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (node == NULL || (p->type == CU_GRAPH_NODE_TYPE_KERNEL && p->param_bytes > FLYT_MAX_PARAM_BYTES))
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_node_ref req = {.exec = exec, .node = WIRE(node)};
    struct iovec data[2] = {{(void *)p, sizeof *p}, {(void *)params, (size_t)flyt_gnode_trailing(p)}};
    return flyt_call(FLYT_OP_GRAPH_NODE_SET, &req, sizeof req, data, 2, NULL);
}

/* The node's parameters if it is of type; params: room for
 * FLYT_MAX_PARAM_BYTES (kernel nodes), else NULL. */
static CUresult node_get(CUgraphNode node, CUgraphNodeType type, flyt_gnode *p, void *params)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (node == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_node_ref req = {.node = WIRE(node)};
    memset(p, 0, sizeof *p);
    struct flyt_reply_sink sink = {.rep = p, .rep_size = sizeof *p, .data = params,
                                   .data_max = params ? FLYT_MAX_PARAM_BYTES : 0};
    r = flyt_call(FLYT_OP_GRAPH_NODE_GET, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS && p->type != (uint32_t)type)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver answers a getter of another kind */
    return r;
}

static CUresult node_misc(CUgraphNode node, unsigned what, uint64_t other, uint64_t *out)
{
    CUresult r = flyt_ctx_require();
    if (r != CUDA_SUCCESS)
        return r;
    if (node == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_graph_node_misc req = {.node = WIRE(node), .other = other, .what = what};
    uint64_t value = 0;
    r = flyt_call_u64(FLYT_OP_GRAPH_NODE_MISC, &req, sizeof req, &value);
    if (out)
        *out = value;
    return r;
}

/* ---- kernel nodes ---- */

/* The kernelParams a getter hands out: the node's, valid until the next
 * getter of that node or its destruction (the driver's are valid as long
 * as the node's parameters). */
struct kparams {
    uint64_t        node;
    void          **ptrs;
    struct kparams *next;
};
static pthread_mutex_t kparams_lock = FLYT_MUTEX_INITIALIZER;
static struct kparams *kparams_list;

static void kparams_forget(uint64_t node)
{
    pthread_mutex_lock(&kparams_lock);
    for (struct kparams **pp = &kparams_list; *pp; pp = &(*pp)->next)
        if ((*pp)->node == node) {
            struct kparams *k = *pp;
            *pp = k->next;
            free(k->ptrs);
            free(k);
            break;
        }
    pthread_mutex_unlock(&kparams_lock);
}

/* One block: the pointer array, then the parameter bytes it points into. */
static void **kparams_keep(uint64_t node, const struct flyt_function *f, const void *bytes)
{
    size_t head = ((size_t)f->param_count + 1) * sizeof(void *);
    struct kparams *k = calloc(1, sizeof *k);
    char *block = malloc(head + f->param_bytes + 1);
    if (k == NULL || block == NULL) {
        free(k);
        free(block);
        return NULL;
    }
    void **ptrs = (void **)block;
    memcpy(block + head, bytes, f->param_bytes);
    for (uint32_t i = 0; i < f->param_count; i++)
        ptrs[i] = block + head + f->params[i].offset;
    ptrs[f->param_count] = NULL;
    k->node = node;
    k->ptrs = ptrs;
    kparams_forget(node);
    pthread_mutex_lock(&kparams_lock);
    k->next = kparams_list;
    kparams_list = k;
    pthread_mutex_unlock(&kparams_lock);
    return ptrs;
}

FLYT_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    uint64_t *bytes = malloc(FLYT_MAX_PARAM_BYTES);
    if (bytes == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = node_get(node, CU_GRAPH_NODE_TYPE_KERNEL, &p, bytes);
    struct flyt_function *f = r == CUDA_SUCCESS ? flyt_function_by_server_id(p.func) : NULL;
    if (r == CUDA_SUCCESS && (f == NULL || f->param_bytes != p.param_bytes))
        r = flyt_unsupported_why("cuGraphKernelNodeGetParams", "a kernel this process did not load");
    void **ptrs = r == CUDA_SUCCESS ? kparams_keep(WIRE(node), f, bytes) : NULL;
    free(bytes);
    if (r == CUDA_SUCCESS && ptrs == NULL)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS)
        return r;
    memset(out, 0, sizeof *out);
    /* one record is both the CUkernel and the CUfunction: NVIDIA's runtime,
     * which launches by CUkernel, finds its kernel by the kern field */
    out->func = (CUfunction)f;
    out->kern = (CUkernel)(void *)f;
    out->ctx = flyt_ctx_current();
    out->gridDimX = p.grid[0], out->gridDimY = p.grid[1], out->gridDimZ = p.grid[2];
    out->blockDimX = p.block[0], out->blockDimY = p.block[1], out->blockDimZ = p.block[2];
    out->sharedMemBytes = p.shared_mem;
    out->kernelParams = ptrs;
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1 *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2;
    CUresult r = cuGraphKernelNodeGetParams_v2(node, &v2);
    if (r == CUDA_SUCCESS)
        memcpy(out, &v2, sizeof *out); /* v1 is v2's first fields */
    return r;
}

static CUresult kernel_set(uint64_t exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *k)
{
    flyt_gnode p;
    struct flyt_packed pk;
    CUresult r = flyt_gnode_kernel(k, &p, &pk);
    if (r != CUDA_SUCCESS)
        return r;
    r = node_set(exec, node, &p, pk.params);
    flyt_packed_free(&pk);
    return r;
}
FLYT_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *k)
{
    return kernel_set(0, node, k);
}
FLYT_EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *k)
{
    if (k == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = flyt_kernel_params_v2(k);
    return kernel_set(0, node, &v2);
}
FLYT_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_KERNEL_NODE_PARAMS *k)
{
    return exec ? kernel_set(WIRE(exec), node, k) : CUDA_ERROR_INVALID_VALUE;
}
FLYT_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_KERNEL_NODE_PARAMS_v1 *k)
{
    if (k == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = flyt_kernel_params_v2(k);
    return cuGraphExecKernelNodeSetParams_v2(exec, node, &v2);
}

/* ---- memset, memcpy and host nodes ---- */

FLYT_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    CUresult r = node_get(node, CU_GRAPH_NODE_TYPE_MEMSET, &p, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned es = p.elem_size ? p.elem_size : 1;
    *out = (CUDA_MEMSET_NODE_PARAMS){.dst = (CUdeviceptr)p.dst, .pitch = p.rows > 1 ? p.dst_pitch : 0,
                                     .value = (unsigned)p.value, .elementSize = es,
                                     .width = p.width / es, .height = p.rows};
    return CUDA_SUCCESS;
}

static CUresult memset_set(uint64_t exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *m)
{
    flyt_gnode p;
    CUresult r = flyt_gnode_memset(m, &p);
    return r == CUDA_SUCCESS ? node_set(exec, node, &p, NULL) : r;
}
FLYT_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *m)
{
    return memset_set(0, node, m);
}
FLYT_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_MEMSET_NODE_PARAMS *m, CUcontext ctx)
{
    (void)ctx; /* the session has one context */
    return exec ? memset_set(WIRE(exec), node, m) : CUDA_ERROR_INVALID_VALUE;
}

/* One side of a copy as the program names it: host memory by its client
 * address, else a device address. */
static void copy_side_out(uint64_t region, uint64_t addr, CUmemorytype *type, const void **host,
                          CUdeviceptr *dev)
{
    if (region) {
        *type = CU_MEMORYTYPE_HOST;
        *host = (const void *)(uintptr_t)(flyt_range_region_base(region) + addr);
    } else {
        *type = CU_MEMORYTYPE_DEVICE;
        *dev = (CUdeviceptr)addr;
    }
}

FLYT_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    CUresult r = node_get(node, CU_GRAPH_NODE_TYPE_MEMCPY, &p, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    memset(out, 0, sizeof *out);
    const void *dst_host = NULL;
    copy_side_out(p.src_region, p.src, &out->srcMemoryType, &out->srcHost, &out->srcDevice);
    copy_side_out(p.dst_region, p.dst, &out->dstMemoryType, &dst_host, &out->dstDevice);
    out->dstHost = (void *)(uintptr_t)dst_host;
    out->srcPitch = p.src_pitch;
    out->dstPitch = p.dst_pitch;
    out->WidthInBytes = p.width;
    out->Height = p.rows;
    out->Depth = 1;
    return CUDA_SUCCESS;
}

static CUresult copy_set(const char *call, uint64_t exec, CUgraphNode node, const CUDA_MEMCPY3D *c)
{
    flyt_gnode p;
    CUresult r = flyt_gnode_copy(call, c, &p);
    return r == CUDA_SUCCESS ? node_set(exec, node, &p, NULL) : r;
}
FLYT_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D *c)
{
    return copy_set("cuGraphMemcpyNodeSetParams", 0, node, c);
}
FLYT_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                    const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    (void)ctx;
    return exec ? copy_set("cuGraphExecMemcpyNodeSetParams", WIRE(exec), node, c)
                : CUDA_ERROR_INVALID_VALUE;
}

FLYT_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    CUresult r = node_get(node, CU_GRAPH_NODE_TYPE_HOST, &p, NULL);
    if (r == CUDA_SUCCESS && flyt_callback_find(p.value, &out->fn, &out->userData) != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    return r;
}

static CUresult host_set(uint64_t exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *h)
{
    flyt_gnode p;
    CUresult r = flyt_gnode_host(h, &p);
    return r == CUDA_SUCCESS ? node_set(exec, node, &p, NULL) : r;
}
FLYT_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS *h)
{
    return host_set(0, node, h);
}
FLYT_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_HOST_NODE_PARAMS *h)
{
    return exec ? host_set(WIRE(exec), node, h) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- event, child graph and memory nodes ---- */

static CUresult handle_get(CUgraphNode node, CUgraphNodeType type, uint64_t *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    CUresult r = node_get(node, type, &p, NULL);
    if (r == CUDA_SUCCESS)
        *out = p.value;
    return r;
}

static CUresult handle_set(uint64_t exec, CUgraphNode node, CUgraphNodeType type, uint64_t handle)
{
    if (handle == 0)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p = {.type = type, .value = handle};
    return node_set(exec, node, &p, NULL);
}

FLYT_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent *out)
{
    return handle_get(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, (uint64_t *)out);
}
FLYT_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent *out)
{
    return handle_get(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, (uint64_t *)out);
}
FLYT_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent e)
{
    return handle_set(0, node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, WIRE(e));
}
FLYT_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent e)
{
    return handle_set(0, node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, WIRE(e));
}
FLYT_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e)
{
    return exec ? handle_set(WIRE(exec), node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, WIRE(e))
                : CUDA_ERROR_INVALID_VALUE;
}
FLYT_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e)
{
    return exec ? handle_set(WIRE(exec), node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, WIRE(e))
                : CUDA_ERROR_INVALID_VALUE;
}
FLYT_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child)
{
    return exec ? handle_set(WIRE(exec), node, CU_GRAPH_NODE_TYPE_GRAPH, WIRE(child))
                : CUDA_ERROR_INVALID_VALUE;
}

/* The child graph is the node's: the server names it, the same id each time. */
FLYT_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return node_misc(node, FLYT_GNODE_CHILD_GRAPH, 0, (uint64_t *)out);
}

FLYT_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_gnode p;
    CUresult r = node_get(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &p, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    memset(out, 0, sizeof *out); /* the device's pool, no peer access: all that is carried */
    out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out->bytesize = p.width;
    out->dptr = (CUdeviceptr)p.value;
    return CUDA_SUCCESS;
}
FLYT_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr *out)
{
    return handle_get(node, CU_GRAPH_NODE_TYPE_MEM_FREE, (uint64_t *)out);
}

/* ---- finding and destroying nodes ---- */

FLYT_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
    if (out == NULL || clone == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return node_misc(orig, FLYT_GNODE_FIND_IN_CLONE, WIRE(clone), (uint64_t *)out);
}

FLYT_EXPORT CUresult cuGraphDestroyNode(CUgraphNode node)
{
    CUresult r = node_misc(node, FLYT_GNODE_DESTROY, 0, NULL);
    if (r == CUDA_SUCCESS)
        kparams_forget(WIRE(node));
    return r;
}

/* ---- the generic forms ---- */

/* CUgraphNodeParams as the wire's node; pk: a kernel's packed parameters. */
static CUresult gnode_of(const char *call, const CUgraphNodeParams *np, flyt_gnode *p,
                         struct flyt_packed *pk)
{
    pk->params = pk->small;
    if (np == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    switch (np->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
        *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_EMPTY};
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        _Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS), "v3 is v2");
        CUDA_KERNEL_NODE_PARAMS k;
        memcpy(&k, &np->kernel, sizeof k);
        return flyt_gnode_kernel(&k, p, pk);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return np->memcpy.flags ? CUDA_ERROR_INVALID_VALUE
                                : flyt_gnode_copy(call, &np->memcpy.copyParams, p);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m2 = &np->memset;
        CUDA_MEMSET_NODE_PARAMS m = {.dst = m2->dst, .pitch = m2->pitch, .value = m2->value,
                                     .elementSize = m2->elementSize, .width = m2->width,
                                     .height = m2->height};
        return flyt_gnode_memset(&m, p);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {.fn = np->host.fn, .userData = np->host.userData};
        return flyt_gnode_host(&h, p);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (np->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return flyt_unsupported_why(call, "moving a child graph into its node");
        *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_GRAPH, .value = WIRE(np->graph.graph)};
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD, .value = WIRE(np->eventRecord.event)};
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT, .value = WIRE(np->eventWait.event)};
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        *p = (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_MEM_FREE, .value = np->free.dptr};
        return CUDA_SUCCESS;
    default:
        return flyt_unsupported_why(call, np->type == CU_GRAPH_NODE_TYPE_CONDITIONAL
                                              ? "new parameters of a conditional node"
                                              : "batch memory operation and external semaphore nodes");
    }
}

/* ---- conditional nodes ---- */

/* The body graphs of conditional nodes, handed out in phGraph_out: valid
 * as long as the process (the driver's live as long as their node). */
struct bodies {
    CUgraph       *graphs;
    struct bodies *next;
};
static pthread_mutex_t bodies_lock = FLYT_MUTEX_INITIALIZER;
static struct bodies *bodies_list;

static CUgraph *bodies_keep(size_t n)
{
    struct bodies *b = calloc(1, sizeof *b);
    CUgraph *graphs = calloc(n, sizeof *graphs);
    if (b == NULL || graphs == NULL) {
        free(b);
        free(graphs);
        return NULL;
    }
    b->graphs = graphs;
    pthread_mutex_lock(&bodies_lock);
    b->next = bodies_list;
    bodies_list = b;
    pthread_mutex_unlock(&bodies_lock);
    return graphs;
}

/* The body graphs get ids chosen here, as cuGraphCreate's: the server
 * names the driver's bodies by them. */
static CUresult add_conditional(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                CUDA_CONDITIONAL_NODE_PARAMS *c)
{
    unsigned size = c->size;
    if (c->handle == 0 || size == 0 || size > FLYT_MAX_COND_BODIES ||
        (c->type == CU_GRAPH_COND_TYPE_IF && size > 2) ||
        (c->type == CU_GRAPH_COND_TYPE_WHILE && size != 1) || c->type > CU_GRAPH_COND_TYPE_SWITCH)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t ids[FLYT_MAX_COND_BODIES];
    for (unsigned i = 0; i < size; i++)
        ids[i] = flyt_new_id();
    flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL, .value = c->handle,
                    .elem_size = (uint32_t)c->type, .rows = size};
    CUresult r = flyt_graph_add_node(node, g, deps, n, &p, ids, NULL);
    CUgraph *out = r == CUDA_SUCCESS ? bodies_keep(size) : NULL;
    if (r == CUDA_SUCCESS && out == NULL)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; out && i < size; i++)
        out[i] = (CUgraph)(uintptr_t)ids[i];
    c->phGraph_out = out;
    return r;
}

static CUresult add_generic(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                            const CUgraphEdgeData *edges, size_t n, CUgraphNodeParams *np)
{
    static const CUgraphEdgeData zero;
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp(&edges[i], &zero, sizeof zero) != 0)
            return flyt_unsupported_why("cuGraphAddNode", "edge data");
    if (np && np->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) { /* its address comes back */
        CUDA_MEM_ALLOC_NODE_PARAMS a;
        memcpy(&a, &np->alloc, sizeof a);
        CUresult r = cuGraphAddMemAllocNode(node, g, deps, n, &a);
        np->alloc.dptr = a.dptr;
        return r;
    }
    if (np && np->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return add_conditional(node, g, deps, n, &np->conditional);
    flyt_gnode p;
    struct flyt_packed pk;
    CUresult r = gnode_of("cuGraphAddNode", np, &p, &pk);
    if (r != CUDA_SUCCESS)
        return r;
    r = flyt_graph_add_node(node, g, deps, n, &p, pk.params, NULL);
    flyt_packed_free(&pk);
    return r;
}
FLYT_EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                    CUgraphNodeParams *np)
{
    return add_generic(node, g, deps, NULL, n, np);
}
FLYT_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                       const CUgraphEdgeData *edges, size_t n, CUgraphNodeParams *np)
{
    return add_generic(node, g, deps, edges, n, np);
}

static CUresult set_generic(const char *call, uint64_t exec, CUgraphNode node, CUgraphNodeParams *np)
{
    flyt_gnode p;
    struct flyt_packed pk;
    CUresult r = gnode_of(call, np, &p, &pk);
    if (r != CUDA_SUCCESS)
        return r;
    r = node_set(exec, node, &p, pk.params);
    flyt_packed_free(&pk);
    return r;
}
FLYT_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams *np)
{
    return set_generic("cuGraphNodeSetParams", 0, node, np);
}
FLYT_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *np)
{
    return exec ? set_generic("cuGraphExecNodeSetParams", WIRE(exec), node, np) : CUDA_ERROR_INVALID_VALUE;
}
