/*
 * CUDA graphs on the GPU: the driver's own graphs, captured from the
 * session's streams or built node by node (docs/graphs.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda_int.h"

CUresult flyt_cuda_capture_begin(flyt_backend *base, flyt_bhandle stream, int mode, flyt_bhandle *graph)
{
    ENTER(b, base);
    CUstream s = flyt_cuda_enqueue(b, stream);
    CUresult r = b->cu.cuStreamBeginCapture(s, (CUstreamCaptureMode)mode);
    if (r != CUDA_SUCCESS)
        return r;
    b->captures++;
    CUstreamCaptureStatus st;
    CUgraph g = NULL;
    r = b->cu.cuStreamGetCaptureInfo(s, &st, NULL, &g, NULL, NULL, NULL);
    *graph = g;
    return r;
}

CUresult flyt_cuda_capture_end(flyt_backend *base, flyt_bhandle stream, flyt_bhandle *graph)
{
    ENTER(b, base);
    CUgraph g = NULL;
    CUresult r = b->cu.cuStreamEndCapture(flyt_cuda_stream(b, stream), &g);
    if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_INVALID_HANDLE && b->captures > 0)
        b->captures--;
    *graph = g;
    return r;
}

CUresult flyt_cuda_capture_mode(flyt_backend *base, int mode)
{
    ENTER(b, base);
    CUstreamCaptureMode m = (CUstreamCaptureMode)mode;
    return b->cu.cuThreadExchangeStreamCaptureMode(&m);
}

CUresult flyt_cuda_capture_info(flyt_backend *base, flyt_bhandle stream, int *status, uint64_t *id,
                                flyt_bhandle *graph, const flyt_bhandle **deps, size_t *ndeps)
{
    ENTER(b, base);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    CUgraph g = NULL;
    const CUgraphNode *d = NULL;
    size_t n = 0;
    CUresult r = b->cu.cuStreamGetCaptureInfo(flyt_cuda_stream(b, stream), &st, &cid, &g, &d, NULL, &n);
    *status = (int)st;
    *id = cid;
    *graph = st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? g : NULL;
    *deps = st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (const flyt_bhandle *)d : NULL;
    *ndeps = st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? n : 0;
    return r;
}

CUresult flyt_cuda_capture_deps(flyt_backend *base, flyt_bhandle stream, const flyt_bhandle *deps,
                                size_t n, unsigned flags)
{
    ENTER(b, base);
    return b->cu.cuStreamUpdateCaptureDependencies(flyt_cuda_stream(b, stream), (CUgraphNode *)deps,
                                                   NULL, n, flags);
}

CUresult flyt_cuda_graph_create(flyt_backend *base, unsigned flags, flyt_bhandle *graph)
{
    ENTER(b, base);
    return b->cu.cuGraphCreate((CUgraph *)graph, flags);
}

CUresult flyt_cuda_graph_destroy(flyt_backend *base, flyt_bhandle graph)
{
    ENTER(b, base);
    return b->cu.cuGraphDestroy((CUgraph)graph);
}

CUresult flyt_cuda_graph_clone(flyt_backend *base, flyt_bhandle graph, flyt_bhandle *clone)
{
    ENTER(b, base);
    return b->cu.cuGraphClone((CUgraph *)clone, (CUgraph)graph);
}

CUresult flyt_cuda_graph_instantiate(flyt_backend *base, flyt_bhandle graph, uint64_t flags,
                                     flyt_bhandle upload_stream, flyt_bhandle *exec,
                                     flyt_bhandle *err_node)
{
    ENTER(b, base);
    CUDA_GRAPH_INSTANTIATE_PARAMS p = {.flags = flags};
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
        p.hUploadStream = flyt_cuda_enqueue(b, upload_stream);
    CUresult r = b->cu.cuGraphInstantiateWithParams((CUgraphExec *)exec, (CUgraph)graph, &p);
    *err_node = r == CUDA_SUCCESS ? NULL : p.hErrNode_out;
    return r;
}

CUresult flyt_cuda_exec_destroy(flyt_backend *base, flyt_bhandle exec)
{
    ENTER(b, base);
    return b->cu.cuGraphExecDestroy((CUgraphExec)exec);
}

CUresult flyt_cuda_exec_update(flyt_backend *base, flyt_bhandle exec, flyt_bhandle graph, int *result,
                               flyt_bhandle *err_node, flyt_bhandle *err_from)
{
    ENTER(b, base);
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult r = b->cu.cuGraphExecUpdate((CUgraphExec)exec, (CUgraph)graph, &info);
    *result = (int)info.result;
    *err_node = info.errorNode;
    *err_from = info.errorFromNode;
    return r;
}

CUresult flyt_cuda_graph_node_type(flyt_backend *base, flyt_bhandle node, unsigned *type)
{
    ENTER(b, base);
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    CUresult r = b->cu.cuGraphNodeGetType((CUgraphNode)node, &t);
    *type = (unsigned)t;
    return r;
}

/* One edge query with room for `have` edges and their data: the driver
 * answers CUDA_ERROR_LOSSY_QUERY to one without room for edge data when an
 * edge has some (a programmatic dependency, as PDL launches capture), even
 * when only counting, so the room is always given. */
static CUresult edges_once(struct flyt_cuda_backend *b, unsigned which, flyt_bhandle graph,
                           CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data, size_t *n)
{
    switch (which) {
    case FLYT_GNODES_DEPS:
        return b->cu.cuGraphNodeGetDependencies((CUgraphNode)graph, to, data, n);
    case FLYT_GNODES_DEPENDENTS:
        return b->cu.cuGraphNodeGetDependentNodes((CUgraphNode)graph, to, data, n);
    default: return b->cu.cuGraphGetEdges((CUgraph)graph, from, to, data, n);
    }
}

/* Edges (pairs in out) or one node's neighbours; out NULL: how many. The
 * edge data is not carried: the client reports default edges. */
static CUresult edges(struct flyt_cuda_backend *b, unsigned which, flyt_bhandle graph,
                      flyt_bhandle *out, size_t *n)
{
    size_t room = out ? *n : 64;
    for (;;) {
        CUgraphNode *from = calloc(room + 1, sizeof *from), *to = calloc(room + 1, sizeof *to);
        CUgraphEdgeData *data = calloc(room + 1, sizeof *data);
        size_t got = room;
        CUresult r = from && to && data ? edges_once(b, which, graph, from, to, data, &got)
                                        : CUDA_ERROR_OUT_OF_MEMORY;
        int pairs = which == FLYT_GNODES_EDGES;
        for (size_t i = 0; r == CUDA_SUCCESS && out && i < got && i < room; i++) {
            if (pairs)
                out[2 * i] = from[i];
            out[pairs ? 2 * i + 1 : i] = to[i];
        }
        free(from);
        free(to);
        free(data);
        /* counting: a full answer may have had more to say */
        if (r != CUDA_SUCCESS || out || got < room || room >= FLYT_MAX_GRAPH_NODES) {
            if (r == CUDA_SUCCESS)
                *n = out && got > room ? room : got; /* never more than out holds */
            return r;
        }
        room *= 8;
    }
}

CUresult flyt_cuda_graph_nodes(flyt_backend *base, flyt_bhandle graph, unsigned which,
                               flyt_bhandle *out, size_t *n)
{
    ENTER(b, base);
    CUgraph g = graph;
    if (out != NULL && *n == 0)
        return CUDA_SUCCESS; /* room for none: the driver refuses an array with a count of 0
                              * (PyTorch's CUDA graph trees capture an empty graph first) */
    switch (which) {
    case FLYT_GNODES_ALL: return b->cu.cuGraphGetNodes(g, (CUgraphNode *)out, n);
    case FLYT_GNODES_ROOTS: return b->cu.cuGraphGetRootNodes(g, (CUgraphNode *)out, n);
    default: return edges(b, which, graph, out, n);
    }
}

CUresult flyt_cuda_graph_dot(flyt_backend *base, flyt_bhandle graph, unsigned flags, char **text)
{
    ENTER(b, base);
    /* the driver only writes files: write one, read it back */
    char path[] = "/tmp/flyt-graph-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    close(fd);
    CUresult r = b->cu.cuGraphDebugDotPrint((CUgraph)graph, path, flags);
    FILE *f = r == CUDA_SUCCESS ? fopen(path, "r") : NULL;
    if (r == CUDA_SUCCESS && f == NULL)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    char *buf = NULL;
    size_t len = 0;
    if (f) {
        FILE *mem = open_memstream(&buf, &len);
        char chunk[65536];
        size_t got;
        while (mem && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
            fwrite(chunk, 1, got, mem);
        if (mem)
            fclose(mem);
        fclose(f);
        if (buf == NULL)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    unlink(path);
    *text = buf;
    return r;
}

/* ---- node parameters: the wire's flyt_gnode as the driver's structs ---- */

static void fill_copy(const flyt_gnode *p, CUDA_MEMCPY3D *c)
{
    memset(c, 0, sizeof *c);
    c->dstMemoryType = p->dst_region ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c->srcMemoryType = p->src_region ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    if (p->dst_region)
        c->dstHost = (void *)(uintptr_t)p->dst;
    else
        c->dstDevice = p->dst;
    if (p->src_region)
        c->srcHost = (const void *)(uintptr_t)p->src;
    else
        c->srcDevice = p->src;
    c->dstPitch = p->dst_pitch;
    c->srcPitch = p->src_pitch;
    c->WidthInBytes = p->width;
    c->Height = p->rows;
    c->Depth = 1;
}

static void fill_memset(const flyt_gnode *p, CUDA_MEMSET_NODE_PARAMS *m)
{
    unsigned es = p->elem_size ? p->elem_size : 1;
    memset(m, 0, sizeof *m);
    m->dst = p->dst;
    m->pitch = p->dst_pitch;
    m->value = (unsigned)p->value;
    m->elementSize = es;
    m->width = p->width / es;
    m->height = p->rows;
}

/* k points into params and b's scratch: valid until the next call. */
static CUresult fill_kernel(struct flyt_cuda_backend *b, const flyt_gnode *p, const void *params,
                            CUDA_KERNEL_NODE_PARAMS *k)
{
    struct flyt_cuda_func *f = (struct flyt_cuda_func *)(uintptr_t)p->func;
    struct flyt_kargs ka;
    CUresult r = flyt_cuda_kernel_args(b, f, params, p->param_bytes, &ka);
    if (r != CUDA_SUCCESS)
        return r;
    memset(k, 0, sizeof *k);
    k->func = f->fn;
    k->gridDimX = p->grid[0], k->gridDimY = p->grid[1], k->gridDimZ = p->grid[2];
    k->blockDimX = p->block[0], k->blockDimY = p->block[1], k->blockDimZ = p->block[2];
    k->sharedMemBytes = p->shared_mem;
    k->kernelParams = ka.kp;
    k->extra = ka.extra;
    return CUDA_SUCCESS;
}

/* The driver makes the body graphs (owned by the node): they come back in
 * bodies[p->rows]. */
static CUresult add_conditional(struct flyt_cuda_backend *b, CUgraph g, const CUgraphNode *d,
                                size_t ndeps, const flyt_gnode *p, CUgraphNode *out, uint64_t *bodies)
{
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = p->value;
    np.conditional.type = (CUgraphConditionalNodeType)p->elem_size;
    np.conditional.size = (unsigned)p->rows;
    np.conditional.ctx = b->ctx;
    CUresult r = b->cu.cuGraphAddNode(out, g, d, NULL, ndeps, &np);
    for (uint64_t i = 0; r == CUDA_SUCCESS && i < p->rows; i++)
        bodies[i] = (uint64_t)(uintptr_t)np.conditional.phGraph_out[i];
    return r;
}

CUresult flyt_cuda_graph_add_node(flyt_backend *base, flyt_bhandle graph, const flyt_bhandle *deps,
                                  size_t ndeps, const flyt_gnode *p, const void *params,
                                  flyt_host_func_cb host_fn, void *host_arg, flyt_bhandle *node,
                                  uint64_t *dptr)
{
    ENTER(b, base);
    CUgraph g = graph;
    CUgraphNode *out = (CUgraphNode *)node;
    const CUgraphNode *d = (const CUgraphNode *)deps;
    CUDA_KERNEL_NODE_PARAMS k;
    CUDA_MEMCPY3D c;
    CUDA_MEMSET_NODE_PARAMS m;
    CUresult r;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY: return b->cu.cuGraphAddEmptyNode(out, g, d, ndeps);
    case CU_GRAPH_NODE_TYPE_KERNEL:
        r = fill_kernel(b, p, params, &k);
        return r == CUDA_SUCCESS ? b->cu.cuGraphAddKernelNode(out, g, d, ndeps, &k) : r;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        fill_copy(p, &c);
        return b->cu.cuGraphAddMemcpyNode(out, g, d, ndeps, &c, b->ctx);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        fill_memset(p, &m);
        return b->cu.cuGraphAddMemsetNode(out, g, d, ndeps, &m, b->ctx);
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {.fn = (CUhostFn)host_fn, .userData = host_arg};
        return b->cu.cuGraphAddHostNode(out, g, d, ndeps, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return b->cu.cuGraphAddEventRecordNode(out, g, d, ndeps, (CUevent)(uintptr_t)p->value);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return b->cu.cuGraphAddEventWaitNode(out, g, d, ndeps, (CUevent)(uintptr_t)p->value);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return b->cu.cuGraphAddChildGraphNode(out, g, d, ndeps, (CUgraph)(uintptr_t)p->value);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS a;
        memset(&a, 0, sizeof a);
        a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.poolProps.location.id = b->ordinal;
        a.bytesize = p->width;
        r = b->cu.cuGraphAddMemAllocNode(out, g, d, ndeps, &a);
        *dptr = a.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return b->cu.cuGraphAddMemFreeNode(out, g, d, ndeps, p->value);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return add_conditional(b, g, d, ndeps, p, out, dptr);
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

CUresult flyt_cuda_graph_add_deps(flyt_backend *base, flyt_bhandle graph, const flyt_bhandle *from,
                                  const flyt_bhandle *to, size_t n, int remove)
{
    ENTER(b, base);
    const CUgraphNode *f = (const CUgraphNode *)from, *t = (const CUgraphNode *)to;
    if (remove)
        return b->cu.cuGraphRemoveDependencies((CUgraph)graph, f, t, NULL, n);
    return b->cu.cuGraphAddDependencies((CUgraph)graph, f, t, NULL, n);
}

/* ---- one node's parameters ---- */

/* The session's function the driver's kernel node runs (a CUfunction, or
 * the CUkernel a library gave). */
static struct flyt_cuda_func *func_of(struct flyt_cuda_backend *b, CUfunction fn, CUkernel kern)
{
    for (struct flyt_cuda_module *m = b->modules; m; m = m->next)
        for (struct flyt_cuda_func *f = m->funcs; f; f = f->next)
            if (f->fn == fn || (kern && f->fn == (CUfunction)kern))
                return f;
    return NULL;
}

/* A kernel node's parameters packed at the offsets of its function's
 * layout, as a launch carries them. */
static CUresult get_kernel(struct flyt_cuda_backend *b, CUgraphNode n, flyt_gnode *p, void *params)
{
    CUDA_KERNEL_NODE_PARAMS k;
    memset(&k, 0, sizeof k);
    CUresult r = b->cu.cuGraphKernelNodeGetParams(n, &k);
    if (r != CUDA_SUCCESS)
        return r;
    struct flyt_cuda_func *f = func_of(b, k.func, k.kern);
    if (f == NULL || f->nparams < 0 || (f->nparams > 0 && k.kernelParams == NULL))
        return CUDA_ERROR_NOT_SUPPORTED; /* not the session's, or no known layout */
    uint32_t bytes = 0;
    for (int i = 0; i < f->nparams; i++) {
        if ((uint64_t)f->poff[i] + f->psize[i] > FLYT_MAX_PARAM_BYTES)
            return CUDA_ERROR_NOT_SUPPORTED;
        memcpy((char *)params + f->poff[i], k.kernelParams[i], f->psize[i]);
        if (f->poff[i] + f->psize[i] > bytes)
            bytes = f->poff[i] + f->psize[i];
    }
    p->func = (uint64_t)(uintptr_t)f;
    p->grid[0] = k.gridDimX, p->grid[1] = k.gridDimY, p->grid[2] = k.gridDimZ;
    p->block[0] = k.blockDimX, p->block[1] = k.blockDimY, p->block[2] = k.blockDimZ;
    p->shared_mem = k.sharedMemBytes;
    p->param_bytes = bytes;
    return CUDA_SUCCESS;
}

/* One side of a copy: a host side keeps its server address, region 1. */
static CUresult copy_side_of(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                             size_t pitch, uint64_t *addr, uint64_t *region)
{
    if (type == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    *region = type == CU_MEMORYTYPE_HOST;
    *addr = (*region ? (uint64_t)(uintptr_t)host : (uint64_t)dev) + y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult get_copy(struct flyt_cuda_backend *b, CUgraphNode n, flyt_gnode *p)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    CUresult r = b->cu.cuGraphMemcpyNodeGetParams(n, &c);
    if (r == CUDA_SUCCESS && (c.Depth > 1 || c.srcZ || c.dstZ))
        r = CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        r = copy_side_of(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, c.dstY, c.dstPitch,
                         &p->dst, &p->dst_region);
    if (r == CUDA_SUCCESS)
        r = copy_side_of(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, c.srcY, c.srcPitch,
                         &p->src, &p->src_region);
    p->width = c.WidthInBytes;
    p->rows = c.Height ? c.Height : 1;
    p->dst_pitch = c.dstPitch ? c.dstPitch : c.WidthInBytes;
    p->src_pitch = c.srcPitch ? c.srcPitch : c.WidthInBytes;
    return r;
}

static CUresult get_memset(struct flyt_cuda_backend *b, CUgraphNode n, flyt_gnode *p)
{
    CUDA_MEMSET_NODE_PARAMS m;
    memset(&m, 0, sizeof m);
    CUresult r = b->cu.cuGraphMemsetNodeGetParams(n, &m);
    p->elem_size = m.elementSize;
    p->dst = m.dst;
    p->width = (uint64_t)m.width * m.elementSize;
    p->rows = m.height ? m.height : 1;
    p->dst_pitch = p->rows > 1 ? m.pitch : p->width;
    p->value = m.value;
    return r;
}

CUresult flyt_cuda_graph_node_get(flyt_backend *base, flyt_bhandle node, flyt_gnode *p, void *params,
                                  void **host_arg)
{
    ENTER(b, base);
    CUgraphNode n = node;
    CUgraphNodeType type;
    CUresult r = b->cu.cuGraphNodeGetType(n, &type);
    if (r != CUDA_SUCCESS)
        return r;
    memset(p, 0, sizeof *p);
    p->type = type;
    switch (type) {
    case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_KERNEL: return get_kernel(b, n, p, params);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return get_copy(b, n, p);
    case CU_GRAPH_NODE_TYPE_MEMSET: return get_memset(b, n, p);
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {0};
        r = b->cu.cuGraphHostNodeGetParams(n, &h);
        p->value = (uint64_t)(uintptr_t)h.fn;
        *host_arg = h.userData;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
        CUevent e = NULL;
        r = type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? b->cu.cuGraphEventRecordNodeGetEvent(n, &e)
                                                    : b->cu.cuGraphEventWaitNodeGetEvent(n, &e);
        p->value = (uint64_t)(uintptr_t)e;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph g = NULL;
        r = b->cu.cuGraphChildGraphNodeGetGraph(n, &g);
        p->value = (uint64_t)(uintptr_t)g;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS a;
        memset(&a, 0, sizeof a);
        r = b->cu.cuGraphMemAllocNodeGetParams(n, &a);
        p->width = a.bytesize;
        p->value = a.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
        CUdeviceptr d = 0;
        r = b->cu.cuGraphMemFreeNodeGetParams(n, &d);
        p->value = d;
        return r;
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* exec NULL: the graph's node. */
CUresult flyt_cuda_graph_node_set(flyt_backend *base, flyt_bhandle exec, flyt_bhandle node,
                                  const flyt_gnode *p, const void *params, flyt_host_func_cb host_fn,
                                  void *host_arg)
{
    ENTER(b, base);
    CUgraphExec x = exec;
    CUgraphNode n = node;
    CUDA_KERNEL_NODE_PARAMS k;
    CUDA_MEMCPY3D c;
    CUDA_MEMSET_NODE_PARAMS m;
    CUDA_HOST_NODE_PARAMS h = {.fn = (CUhostFn)host_fn, .userData = host_arg};
    CUevent e = (CUevent)(uintptr_t)p->value;
    CUresult r;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        r = fill_kernel(b, p, params, &k);
        if (r != CUDA_SUCCESS)
            return r;
        return x ? b->cu.cuGraphExecKernelNodeSetParams(x, n, &k) : b->cu.cuGraphKernelNodeSetParams(n, &k);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        fill_copy(p, &c);
        return x ? b->cu.cuGraphExecMemcpyNodeSetParams(x, n, &c, b->ctx)
                 : b->cu.cuGraphMemcpyNodeSetParams(n, &c);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        fill_memset(p, &m);
        return x ? b->cu.cuGraphExecMemsetNodeSetParams(x, n, &m, b->ctx)
                 : b->cu.cuGraphMemsetNodeSetParams(n, &m);
    case CU_GRAPH_NODE_TYPE_HOST:
        return x ? b->cu.cuGraphExecHostNodeSetParams(x, n, &h) : b->cu.cuGraphHostNodeSetParams(n, &h);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return x ? b->cu.cuGraphExecEventRecordNodeSetEvent(x, n, e)
                 : b->cu.cuGraphEventRecordNodeSetEvent(n, e);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return x ? b->cu.cuGraphExecEventWaitNodeSetEvent(x, n, e) : b->cu.cuGraphEventWaitNodeSetEvent(n, e);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        /* a graph's child graph node takes no new graph: only an exec's does */
        return x ? b->cu.cuGraphExecChildGraphNodeSetParams(x, n, (CUgraph)(uintptr_t)p->value)
                 : CUDA_ERROR_INVALID_VALUE;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult flyt_cuda_graph_node_misc(flyt_backend *base, unsigned what, flyt_bhandle node,
                                   flyt_bhandle other, flyt_bhandle *out)
{
    ENTER(b, base);
    switch (what) {
    case FLYT_GNODE_DESTROY: return b->cu.cuGraphDestroyNode((CUgraphNode)node);
    case FLYT_GNODE_FIND_IN_CLONE:
        return b->cu.cuGraphNodeFindInClone((CUgraphNode *)out, (CUgraphNode)node, (CUgraph)other);
    default: return b->cu.cuGraphChildGraphNodeGetGraph((CUgraphNode)node, (CUgraph *)out);
    }
}

CUresult flyt_cuda_capture_to_graph(flyt_backend *base, flyt_bhandle stream, flyt_bhandle graph,
                                    const flyt_bhandle *deps, size_t n, int mode)
{
    ENTER(b, base);
    CUresult r = b->cu.cuStreamBeginCaptureToGraph(flyt_cuda_enqueue(b, stream), (CUgraph)graph,
                                                   (const CUgraphNode *)deps, NULL, n,
                                                   (CUstreamCaptureMode)mode);
    if (r == CUDA_SUCCESS)
        b->captures++;
    return r;
}

CUresult flyt_cuda_user_object_create(flyt_backend *base, flyt_host_func_cb destroy, void *arg,
                                      unsigned refs, unsigned flags, flyt_bhandle *obj)
{
    ENTER(b, base);
    return b->cu.cuUserObjectCreate((CUuserObject *)obj, arg, (CUhostFn)destroy, refs, flags);
}
