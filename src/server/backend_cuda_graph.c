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

CUresult flyt_cuda_graph_nodes(flyt_backend *base, flyt_bhandle graph, unsigned which,
                               flyt_bhandle *out, size_t *n)
{
    ENTER(b, base);
    CUgraph g = graph;
    switch (which) {
    case FLYT_GNODES_ALL: return b->cu.cuGraphGetNodes(g, (CUgraphNode *)out, n);
    case FLYT_GNODES_ROOTS: return b->cu.cuGraphGetRootNodes(g, (CUgraphNode *)out, n);
    default:
        if (out == NULL)
            return b->cu.cuGraphGetEdges(g, NULL, NULL, NULL, n);
        /* from[] then to[] in one array: the caller wants pairs, so interleave */
        size_t have = *n;
        CUgraphNode *from = calloc(have + 1, sizeof *from), *to = calloc(have + 1, sizeof *to);
        CUresult r = from && to ? b->cu.cuGraphGetEdges(g, from, to, NULL, n) : CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; r == CUDA_SUCCESS && i < have && i < *n; i++) {
            out[2 * i] = from[i];
            out[2 * i + 1] = to[i];
        }
        free(from);
        free(to);
        return r;
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

static CUresult add_copy(struct flyt_cuda_backend *b, CUgraphNode *node, CUgraph g,
                         const CUgraphNode *deps, size_t n, const flyt_gnode *p)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.dstMemoryType = p->dst_region ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcMemoryType = p->src_region ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    if (p->dst_region)
        c.dstHost = (void *)(uintptr_t)p->dst;
    else
        c.dstDevice = p->dst;
    if (p->src_region)
        c.srcHost = (const void *)(uintptr_t)p->src;
    else
        c.srcDevice = p->src;
    c.dstPitch = p->dst_pitch;
    c.srcPitch = p->src_pitch;
    c.WidthInBytes = p->width;
    c.Height = p->rows;
    c.Depth = 1;
    return b->cu.cuGraphAddMemcpyNode(node, g, deps, n, &c, b->ctx);
}

static CUresult add_kernel(struct flyt_cuda_backend *b, CUgraphNode *node, CUgraph g,
                           const CUgraphNode *deps, size_t n, const flyt_gnode *p, const void *params)
{
    struct flyt_cuda_func *f = (struct flyt_cuda_func *)(uintptr_t)p->func;
    struct flyt_kargs ka;
    CUresult r = flyt_cuda_kernel_args(b, f, params, p->param_bytes, &ka);
    if (r != CUDA_SUCCESS)
        return r;
    CUDA_KERNEL_NODE_PARAMS k;
    memset(&k, 0, sizeof k);
    k.func = f->fn;
    k.gridDimX = p->grid[0], k.gridDimY = p->grid[1], k.gridDimZ = p->grid[2];
    k.blockDimX = p->block[0], k.blockDimY = p->block[1], k.blockDimZ = p->block[2];
    k.sharedMemBytes = p->shared_mem;
    k.kernelParams = ka.kp;
    k.extra = ka.extra;
    return b->cu.cuGraphAddKernelNode(node, g, deps, n, &k);
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
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY: return b->cu.cuGraphAddEmptyNode(out, g, d, ndeps);
    case CU_GRAPH_NODE_TYPE_KERNEL: return add_kernel(b, out, g, d, ndeps, p, params);
    case CU_GRAPH_NODE_TYPE_MEMCPY: return add_copy(b, out, g, d, ndeps, p);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        unsigned es = p->elem_size ? p->elem_size : 1;
        CUDA_MEMSET_NODE_PARAMS m = {.dst = p->dst, .pitch = p->dst_pitch, .value = (unsigned)p->value,
                                     .elementSize = es, .width = p->width / es, .height = p->rows};
        return b->cu.cuGraphAddMemsetNode(out, g, d, ndeps, &m, b->ctx);
    }
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
        CUDA_MEM_ALLOC_NODE_PARAMS m;
        memset(&m, 0, sizeof m);
        m.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        m.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        m.poolProps.location.id = b->ordinal;
        m.bytesize = p->width;
        CUresult r = b->cu.cuGraphAddMemAllocNode(out, g, d, ndeps, &m);
        *dptr = m.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return b->cu.cuGraphAddMemFreeNode(out, g, d, ndeps, p->value);
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
