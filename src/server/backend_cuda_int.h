/*
 * Internals of the "cuda" backend, shared by backend_cuda*.c.
 *
 * The driver (libcuda.so.1) is loaded at run time; every driver function the
 * backend calls is listed once in FLYT_CU_FUNCS below, and the table of
 * function pointers, the dlsym names and the loader are all generated from
 * that list. Code calls the driver as `b->cu.cuMemAlloc(...)`: cuda.h
 * #defines many names to their current ABI version (cuMemAlloc ->
 * cuMemAlloc_v2), and since those macros are object-like they rename the
 * struct member and every use of it alike, while FLYT_CU_STR stringizes the
 * name after expansion, so dlsym asks for the versioned symbol
 * ("cuMemAlloc_v2"), exactly the one a program compiled against cuda.h
 * would bind to.
 */
#ifndef FLYT_BACKEND_CUDA_INT_H
#define FLYT_BACKEND_CUDA_INT_H

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) || defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "the cuda backend must see the legacy-stream driver API names (no per-thread default stream)"
#endif

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "extent.h"
#include "flyt_calls.h"
#include "flyt_hash.h"
#include "quota.h"

/* Every driver function the backend uses, by its cuda.h name. */
#define FLYT_CU_FUNCS(X)                                  \
    X(cuGetErrorName)                                     \
    X(cuGetErrorString)                                   \
    X(cuGetExportTable)                                   \
    X(cuInit)                                             \
    X(cuDriverGetVersion)                                 \
    X(cuDeviceGet)                                        \
    X(cuDeviceGetCount)                                   \
    X(cuDeviceGetName)                                    \
    X(cuDeviceTotalMem)                                   \
    X(cuDeviceGetUuid)                                    \
    X(cuDeviceGetLuid)                                    \
    X(cuDeviceGetAttribute)                               \
    X(cuDeviceGetPCIBusId)                                \
    X(cuDeviceGetDefaultMemPool)                          \
    X(cuDevicePrimaryCtxRetain)                           \
    X(cuDevicePrimaryCtxRelease)                          \
    X(cuDevicePrimaryCtxReset)                            \
    X(cuCtxSetCurrent)                                    \
    X(cuCtxSynchronize)                                   \
    X(cuCtxGetLimit)                                      \
    X(cuCtxSetLimit)                                      \
    X(cuCtxGetCacheConfig)                                \
    X(cuCtxSetCacheConfig)                                \
    X(cuCtxGetFlags)                                      \
    X(cuCtxSetFlags)                                      \
    X(cuCtxGetStreamPriorityRange)                        \
    X(cuMemGetInfo)                                       \
    X(cuMemGetAllocationGranularity)                      \
    X(cuMemAddressReserve)                                \
    X(cuMemAddressFree)                                   \
    X(cuMemCreate)                                        \
    X(cuMemRelease)                                       \
    X(cuMemMap)                                           \
    X(cuMemUnmap)                                         \
    X(cuMemSetAccess)                                     \
    X(cuMemRetainAllocationHandle)                        \
    X(cuMemExportToShareableHandle)                       \
    X(cuMemImportFromShareableHandle)                     \
    X(cuIpcGetEventHandle)                                \
    X(cuIpcOpenEventHandle)                               \
    X(cuMemGetAllocationPropertiesFromHandle)             \
    X(cuMemAlloc)                                         \
    X(cuMemFree)                                          \
    X(cuMemAllocPitch)                                    \
    X(cuMemAllocAsync)                                    \
    X(cuMemAllocFromPoolAsync)                            \
    X(cuMemFreeAsync)                                     \
    X(cuMemPoolCreate)                                    \
    X(cuMemPoolDestroy)                                   \
    X(cuMemPoolTrimTo)                                    \
    X(cuMemPoolSetAttribute)                              \
    X(cuMemPoolGetAttribute)                              \
    X(cuMemPoolExportToShareableHandle)                   \
    X(cuMemPoolImportFromShareableHandle)                 \
    X(cuMemPoolExportPointer)                             \
    X(cuMemPoolImportPointer)                             \
    X(cuPointerGetAttributes)                             \
    X(cuMemHostRegister)                                  \
    X(cuMemHostUnregister)                                \
    X(cuMemHostGetDevicePointer)                          \
    X(cuMemcpyHtoDAsync)                                  \
    X(cuMemcpyDtoHAsync)                                  \
    X(cuMemcpyDtoDAsync)                                  \
    X(cuMemcpy2DAsync)                                    \
    X(cuMemsetD8Async)                                    \
    X(cuMemsetD2D8Async)                                  \
    X(cuMemsetD2D16Async)                                 \
    X(cuMemsetD2D32Async)                                 \
    X(cuStreamCreateWithPriority)                         \
    X(cuStreamDestroy)                                    \
    X(cuStreamSynchronize)                                \
    X(cuStreamQuery)                                      \
    X(cuStreamWaitEvent)                                  \
    X(cuStreamGetFlags)                                   \
    X(cuStreamGetPriority)                                \
    X(cuLaunchHostFunc)                                   \
    X(cuEventCreate)                                      \
    X(cuEventDestroy)                                     \
    X(cuEventRecord)                                      \
    X(cuEventRecordWithFlags)                             \
    X(cuEventQuery)                                       \
    X(cuEventSynchronize)                                 \
    X(cuEventElapsedTime)                                 \
    X(cuModuleLoadData)                                   \
    X(cuModuleUnload)                                     \
    X(cuModuleGetFunction)                                \
    X(cuModuleGetGlobal)                                  \
    X(cuLinkCreate)                                       \
    X(cuTensorMapEncodeTiled)                             \
    X(cuTensorMapEncodeIm2col)                            \
    X(cuTensorMapEncodeIm2colWide)                        \
    X(cuTensorMapReplaceAddress)                          \
    X(cuLinkAddData)                                      \
    X(cuLinkComplete)                                     \
    X(cuLinkDestroy)                                      \
    X(cuModuleGetFunctionCount)                           \
    X(cuModuleEnumerateFunctions)                         \
    X(cuFuncGetName)                                      \
    X(cuFuncGetParamInfo)                                 \
    X(cuFuncGetAttribute)                                 \
    X(cuFuncSetAttribute)                                 \
    X(cuFuncSetCacheConfig)                               \
    X(cuLaunchKernelEx)                                   \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) \
    X(cuOccupancyAvailableDynamicSMemPerBlock)            \
    X(cuOccupancyMaxActiveClusters)                       \
    X(cuOccupancyMaxPotentialClusterSize)                 \
    X(cuDeviceGetDevResource)                             \
    X(cuDevSmResourceSplitByCount)                        \
    X(cuDevResourceGenerateDesc)                          \
    X(cuGreenCtxCreate)                                   \
    X(cuGreenCtxDestroy)                                  \
    X(cuCtxFromGreenCtx)                                  \
    X(cuGreenCtxStreamCreate)                             \
    X(cuArray3DCreate)                                    \
    X(cuArrayDestroy)                                     \
    X(cuMipmappedArrayCreate)                             \
    X(cuMipmappedArrayDestroy)                            \
    X(cuMipmappedArrayGetLevel)                           \
    X(cuMemcpy3DAsync)                                    \
    X(cuTexObjectCreate)                                  \
    X(cuTexObjectDestroy)                                 \
    X(cuSurfObjectCreate)                                 \
    X(cuSurfObjectDestroy)                                \
    X(cuStreamBeginCapture)                               \
    X(cuStreamIsCapturing)                                \
    X(cuThreadExchangeStreamCaptureMode)                  \
    X(cuStreamEndCapture)                                 \
    X(cuStreamGetCaptureInfo)                             \
    X(cuStreamUpdateCaptureDependencies)                  \
    X(cuGraphCreate)                                      \
    X(cuGraphDestroy)                                     \
    X(cuGraphClone)                                       \
    X(cuGraphInstantiateWithParams)                       \
    X(cuGraphExecDestroy)                                 \
    X(cuGraphExecUpdate)                                  \
    X(cuGraphGetNodes)                                    \
    X(cuGraphGetRootNodes)                                \
    X(cuGraphGetEdges)                                    \
    X(cuGraphDebugDotPrint)                               \
    X(cuGraphAddEmptyNode)                                \
    X(cuGraphAddKernelNode)                               \
    X(cuGraphAddMemsetNode)                               \
    X(cuGraphAddMemcpyNode)                               \
    X(cuGraphAddHostNode)                                 \
    X(cuGraphAddEventRecordNode)                          \
    X(cuGraphAddEventWaitNode)                            \
    X(cuGraphAddChildGraphNode)                           \
    X(cuGraphAddNode)                                     \
    X(cuStreamBeginCaptureToGraph)                        \
    X(cuUserObjectCreate)                                 \
    X(cuGraphAddMemAllocNode)                             \
    X(cuGraphAddMemFreeNode)                              \
    X(cuGraphAddDependencies)                             \
    X(cuGraphRemoveDependencies)                          \
    X(cuGraphNodeGetType)                                 \
    X(cuGraphNodeGetDependencies)                         \
    X(cuGraphNodeGetDependentNodes)                       \
    X(cuGraphNodeFindInClone)                             \
    X(cuGraphDestroyNode)                                 \
    X(cuGraphChildGraphNodeGetGraph)                      \
    X(cuGraphKernelNodeGetParams)                         \
    X(cuGraphKernelNodeSetParams)                         \
    X(cuGraphMemsetNodeGetParams)                         \
    X(cuGraphMemsetNodeSetParams)                         \
    X(cuGraphMemcpyNodeGetParams)                         \
    X(cuGraphMemcpyNodeSetParams)                         \
    X(cuGraphHostNodeGetParams)                           \
    X(cuGraphHostNodeSetParams)                           \
    X(cuGraphEventRecordNodeGetEvent)                     \
    X(cuGraphEventRecordNodeSetEvent)                     \
    X(cuGraphEventWaitNodeGetEvent)                       \
    X(cuGraphEventWaitNodeSetEvent)                       \
    X(cuGraphMemAllocNodeGetParams)                       \
    X(cuGraphMemFreeNodeGetParams)                        \
    X(cuGraphExecKernelNodeSetParams)                     \
    X(cuGraphExecMemsetNodeSetParams)                     \
    X(cuGraphExecMemcpyNodeSetParams)                     \
    X(cuGraphExecHostNodeSetParams)                       \
    X(cuGraphExecChildGraphNodeSetParams)                 \
    X(cuGraphExecEventRecordNodeSetEvent)                 \
    X(cuGraphExecEventWaitNodeSetEvent)

#define FLYT_CU_STR2(x) #x
#define FLYT_CU_STR(x)  FLYT_CU_STR2(x) /* stringize after macro expansion */

/* One typed pointer per function; the member takes the versioned name. */
#define FLYT_CU_MEMBER(fn) __typeof__(&fn) fn;
struct flyt_cu_api {
    void *lib;
    FLYT_CU_FUNCS(FLYT_CU_MEMBER)
};

/* dlsym name and member offset of every entry, in list order. */
struct flyt_cu_sym {
    const char *name;
    size_t      offset;
};
extern const struct flyt_cu_sym flyt_cu_syms[];
extern const size_t flyt_cu_nsyms;

/* ---- fault injection (tests only) ----
 * As SQLite overrides its system calls: a test runs the backend on a driver
 * table of its own (no libcuda.so.1, no GPU) and replaces entries to make the
 * driver fail where it wants. Production never calls these and pays nothing:
 * the backend calls b->cu either way. Names are cuda.h's ("cuMemAlloc") or
 * the versioned symbols ("cuMemAlloc_v2"). */
/* Backends opened from now on call a copy of table (NULL: libcuda.so.1). */
void flyt_cuda_driver_use(const struct flyt_cu_api *table);
/* Sets entry name of table to fn (the former entry in *old when old is not
 * NULL). 0, or -1 when the table has no such entry. */
int  flyt_cu_table_set(struct flyt_cu_api *table, const char *name, void *fn, void **old);
/* The same on the table of an open cuda backend. */
int  flyt_cuda_table_override(flyt_backend *b, const char *name, void *fn, void **old);

/* ---- sets of pointers (the backend's live streams, events, pools): flyt_hash keys ---- */
int   flyt_pset_add(flyt_hash *s, void *p); /* 0, or -1 on ENOMEM (or NULL) */
int   flyt_pset_del(flyt_hash *s, void *p); /* 1 when it was there */
int   flyt_pset_has(const flyt_hash *s, const void *p);
void *flyt_pset_pop(flyt_hash *s);          /* takes out any one member, NULL when empty */

/* ---- modules and functions ---- */
struct flyt_cuda_func {
    struct flyt_cuda_func *next; /* in its module */
    CUfunction             fn;
    /* parameter layout from cuFuncGetParamInfo; nparams < 0: unknown */
    int                    nparams;
    uint32_t              *poff, *psize;
};

struct flyt_cuda_module {
    struct flyt_cuda_module *prev, *next;
    CUmodule                 mod;
    struct flyt_cuda_func   *funcs;
    void                    *image;   /* the backend's copy, for a checkpoint */
    size_t                   image_size;
};

/* ---- pinned staging buffers for host-to-device copies ---- */
#define FLYT_STAGING_BYTES ((size_t)8 << 20) /* one buffer */
#define FLYT_STAGING_SLOTS 8                 /* kept; more only if all are out */

enum { STG_FREE = 0, STG_OUT, STG_BUSY };

struct flyt_staging {
    void    *mem;
    size_t   cap;
    CUevent  ev;       /* recorded after the copy that reads the buffer */
    uint64_t seq;      /* order the copies were enqueued, for waiting oldest first */
    uint8_t  state;    /* STG_* */
    uint8_t  pinned;   /* registered with the driver (page-locked) */
};

struct flyt_blocking {
    CUstream s;
    CUevent  ev;       /* recorded on s when the legacy stream must wait for it */
    uint64_t seen_gen; /* legacy_gen s last waited for */
    int      dirty;    /* work on s the legacy stream has not waited for */
};

/* ---- tenant memory (backend_cuda_mem.c) ----
 * Every cuMemAlloc / cuMemAllocPitch of the tenant is placed by Flyt in an
 * address arena it reserved itself (cuMemAddressReserve), backed through the
 * driver's virtual-memory API, so that a restore in a fresh process can
 * reserve the same arena and put every allocation back at its address (a
 * cuMemAlloc address is not granted again there: measured, 2026-11-24).
 * Allocations over half a granule get mappings of their own; smaller ones
 * are packed into chunks, one granule (2 MiB) each, mapped once. */
#define FLYT_CUDA_ARENAS 8

struct flyt_cuda_arena {
    uint64_t            base, size; /* one reservation, granularity-aligned */
    struct flyt_extents va;         /* offsets of [base, base + size) */
};

struct flyt_cuda_chunk {
    struct flyt_extents space; /* offsets inside the granule */
};

struct flyt_cuda_mem {
    struct flyt_cuda_arena arenas[FLYT_CUDA_ARENAS];
    int                    narenas;
    int                    disabled;     /* FLYT_CUDA_ARENA=0: cuMemAlloc, no checkpoint */
    int                    no_share;     /* the driver makes no memory exportable (no IPC) */
    uint64_t               gran;         /* VMM granularity, 0 until asked */
    uint64_t               arena_bytes;  /* the size of a new arena, 0 until decided */
    flyt_hash              chunks;       /* granule address -> struct flyt_cuda_chunk * */
    uint64_t               last_chunk;   /* where the last small allocation went */
    int                    empty_chunks; /* chunks kept mapped with nothing in them (0 or 1) */
    struct flyt_memtab     allocs;       /* address -> size, in the arenas */
    struct flyt_memtab     outside;      /* address -> size, cuMemAlloc's (arena disabled) */
    flyt_hash              pitches;      /* width -> the driver's pitch for it */
};

/* ---- checkpoint and restore (backend_cuda_state.c) ---- */
/* A module global a restore found elsewhere than where the client holds it
 * (the driver places module data among the host's randomised mmaps): the
 * client's address, translated in copies and kernel parameters. */
struct flyt_cuda_alias {
    uint64_t old, size, now;
};

/* The program's own VMM objects (backend_cuda_vmm.c), as a checkpoint needs them. */
struct flyt_cuda_vmem {
    uint64_t      size;
    flyt_vmm_prop prop;       /* as the client gave it */
    uint32_t      refs, maps; /* handle references, mappings: the driver frees it at 0 and 0 */
};

struct flyt_cuda_vmap {
    uint64_t                     size, offset;
    CUmemGenericAllocationHandle mem;
    unsigned                     access; /* CU_MEM_ACCESS_FLAGS_PROT_* granted */
};

struct flyt_cuda_pending {
    uint64_t addr, size;
    CUevent  done; /* recorded where the program freed it */
};

struct flyt_cuda_span {
    uint64_t base, size; /* reserved at a restore over its stream-ordered allocations */
};

struct flyt_cuda_ckpt {
    struct flyt_memtab async;   /* stream-ordered, from the driver's pools: address -> size */
    flyt_hash          async_pools; /* stream-ordered (both kinds): address -> its pool (ptr) */
    struct flyt_memtab restored;    /* stream-ordered, restored as Flyt's own: address -> size */
    flyt_hash          granules;    /* their granules: address -> references (u64) */
    struct flyt_cuda_span *spans;   /* every such granule lies in one */
    int                    nspans;
    struct flyt_cuda_pending *pending; /* restored ones freed, released once their event is done */
    int                       npending;
    struct flyt_memtab vranges; /* the program's cuMemAddressReserve ranges, in the arenas */
    flyt_hash          vmems;   /* CUmemGenericAllocationHandle -> struct flyt_cuda_vmem * */
    flyt_hash          vmaps;   /* mapped address -> struct flyt_cuda_vmap * */
    struct flyt_cuda_alias *aliases;
    int                     naliases;
    unsigned char          *kparam_copy; /* kernel parameters with aliases translated */
    uint64_t               *objs;        /* texture/surface values: client, now pairs */
    int                     nobjs;       /* pairs */
    unsigned char          *kobj_copy;   /* kernel parameters with objs translated */
};

/* ---- the backend ---- */
struct flyt_cuda_backend {
    struct flyt_backend base;
    struct flyt_cu_api  cu;
    int                 ordinal;
    CUdevice            dev;
    CUcontext           primary; /* the retained primary context, NULL when not held */
    CUcontext           ctx;     /* the context made current: primary, or the green one */
    CUresult            ctx_err; /* why ctx is NULL: what every call then returns */

    /* The SM share (set_sm_share): a green context made of the listed SM
     * groups, current instead of the primary context (backend_cuda_green.c). */
    unsigned   share_gran;
    int       *share_groups;
    int        share_n;
    int        share_sms;  /* SMs of the green context, 0 without a share */
    CUgreenCtx green;
    CUstream   pt_stream;  /* serves CU_STREAM_PER_THREAD inside the green context */

    flyt_hash streams, events, pools;
    struct flyt_cuda_module *modules;
    struct flyt_cuda_mem     mem;
    struct flyt_cuda_ckpt    ckpt;

    /* Legacy-stream semantics inside a green context (backend_cuda_legacy.c):
     * the streams the application asked to be blocking. */
    struct flyt_blocking *blocking;
    int                   nblocking, cap_blocking;
    CUevent               legacy_ev;
    uint64_t              legacy_gen; /* bumped before each piece of legacy-stream work */
    int                   captures;   /* stream captures begun here and not ended */

    void *calls[FLYT_CALL_LIMIT]; /* the plain calls' driver functions, by call id */

    struct flyt_staging *stg;
    int                  nstg, stg_cap;
    uint64_t             stg_seq;
    int                  stg_pin_warned;

    void   **kparams;     /* scratch for launches: pointers into the param buffer */
    size_t   kparams_cap;
};

/* backend_cuda_mem.c: address space of the arenas for the program's own
 * reservations (cuMemAddressReserve): at hint when it is free there, else
 * anywhere aligned to align (0: the granularity). */
CUresult flyt_cuda_va_carve(struct flyt_cuda_backend *b, uint64_t size, uint64_t align,
                            uint64_t hint, uint64_t *addr);
void flyt_cuda_va_uncarve(struct flyt_cuda_backend *b, uint64_t addr, uint64_t size);
/* backend_cuda_vmm.c: the program's mappings and handles undone (close, reset). */
void flyt_cuda_vmm_drop(struct flyt_cuda_backend *b, int live);

/* addr, or where a moved module global is now (nothing to do without aliases). */
uint64_t flyt_cuda_xlate_slow(const struct flyt_cuda_backend *b, uint64_t addr);
/* [old, old + size) is at now from here on (add), no longer (remove). */
CUresult flyt_cuda_alias_add(struct flyt_cuda_backend *b, uint64_t old, uint64_t now, uint64_t size);
void     flyt_cuda_alias_remove(struct flyt_cuda_backend *b, uint64_t old);
#define flyt_cuda_xlate(b, addr) \
    (__builtin_expect((b)->ckpt.naliases == 0, 1) ? (addr) : flyt_cuda_xlate_slow((b), (addr)))

/* Makes the primary context current on the calling thread (cheap when it is). */
CUresult flyt_cuda_ctx(struct flyt_cuda_backend *b);

static inline struct flyt_cuda_backend *cb(flyt_backend *base)
{
    return (struct flyt_cuda_backend *)base;
}

/* Common prologue of a backend operation: the backend, its context current. */
#define ENTER(b, base)                                   \
    struct flyt_cuda_backend *b = cb(base);              \
    if (!b)                                              \
        return CUDA_ERROR_INVALID_VALUE;                 \
    do {                                                 \
        CUresult enter_r_ = flyt_cuda_ctx(b);            \
        if (enter_r_ != CUDA_SUCCESS)                    \
            return enter_r_;                             \
    } while (0)

/* A kernel's parameters as cuLaunchKernelEx and kernel nodes take them. */
struct flyt_kargs {
    void **kp, **extra;
    void  *ex[5];
    size_t buf_size;
};
CUresult flyt_cuda_kernel_args(struct flyt_cuda_backend *b, const struct flyt_cuda_func *f,
                               const void *params, uint32_t param_bytes, struct flyt_kargs *ka);

/* backend_cuda_graph.c: the graph operations of the ops table */
CUresult flyt_cuda_capture_begin(flyt_backend *base, flyt_bhandle stream, int mode, flyt_bhandle *graph);
CUresult flyt_cuda_capture_end(flyt_backend *base, flyt_bhandle stream, flyt_bhandle *graph);
CUresult flyt_cuda_capture_mode(flyt_backend *base, int mode);
CUresult flyt_cuda_capture_info(flyt_backend *base, flyt_bhandle stream, int *status, uint64_t *id,
                                flyt_bhandle *graph, const flyt_bhandle **deps, size_t *ndeps);
CUresult flyt_cuda_capture_deps(flyt_backend *base, flyt_bhandle stream, const flyt_bhandle *deps,
                                size_t n, unsigned flags);
CUresult flyt_cuda_graph_create(flyt_backend *base, unsigned flags, flyt_bhandle *graph);
CUresult flyt_cuda_graph_destroy(flyt_backend *base, flyt_bhandle graph);
CUresult flyt_cuda_graph_clone(flyt_backend *base, flyt_bhandle graph, flyt_bhandle *clone);
CUresult flyt_cuda_graph_instantiate(flyt_backend *base, flyt_bhandle graph, uint64_t flags,
                                     flyt_bhandle upload_stream, flyt_bhandle *exec,
                                     flyt_bhandle *err_node);
CUresult flyt_cuda_exec_destroy(flyt_backend *base, flyt_bhandle exec);
CUresult flyt_cuda_exec_update(flyt_backend *base, flyt_bhandle exec, flyt_bhandle graph, int *result,
                               flyt_bhandle *err_node, flyt_bhandle *err_from);
CUresult flyt_cuda_graph_node_type(flyt_backend *base, flyt_bhandle node, unsigned *type);
CUresult flyt_cuda_graph_nodes(flyt_backend *base, flyt_bhandle graph, unsigned which,
                               flyt_bhandle *out, size_t *n);
CUresult flyt_cuda_graph_dot(flyt_backend *base, flyt_bhandle graph, unsigned flags, char **text);
CUresult flyt_cuda_graph_add_node(flyt_backend *base, flyt_bhandle graph, const flyt_bhandle *deps,
                                  size_t ndeps, const flyt_gnode *p, const void *params,
                                  flyt_host_func_cb host_fn, void *host_arg, flyt_bhandle *node,
                                  uint64_t *dptr);
CUresult flyt_cuda_graph_add_deps(flyt_backend *base, flyt_bhandle graph, const flyt_bhandle *from,
                                  const flyt_bhandle *to, size_t n, int remove);
CUresult flyt_cuda_graph_node_get(flyt_backend *base, flyt_bhandle node, flyt_gnode *p, void *params,
                                  void **host_arg);
CUresult flyt_cuda_graph_node_set(flyt_backend *base, flyt_bhandle exec, flyt_bhandle node,
                                  const flyt_gnode *p, const void *params, flyt_host_func_cb host_fn,
                                  void *host_arg);
CUresult flyt_cuda_capture_to_graph(flyt_backend *base, flyt_bhandle stream, flyt_bhandle graph,
                                    const flyt_bhandle *deps, size_t n, int mode);
CUresult flyt_cuda_user_object_create(flyt_backend *base, flyt_host_func_cb destroy, void *arg,
                                      unsigned refs, unsigned flags, flyt_bhandle *obj);
CUresult flyt_cuda_graph_node_misc(flyt_backend *base, unsigned what, flyt_bhandle node,
                                   flyt_bhandle other, flyt_bhandle *out);

static inline CUfunction flyt_cuda_func_handle(flyt_bhandle func)
{
    return ((struct flyt_cuda_func *)func)->fn;
}

/* The plain calls (backend_cuda_calls.c): their driver functions, found by
 * symbol at open; a driver without one answers CUDA_ERROR_NOT_SUPPORTED. */
void flyt_cuda_calls_resolve(struct flyt_cuda_backend *b);
CUresult flyt_cuda_call(flyt_backend *base, uint32_t id, const uint64_t *args, const void *in,
                        void *out);
/* Maps a stream handle (including the three special values) to a CUstream.
 * Inside a green context the per-thread default stream is a stream of that
 * green context (see backend_cuda_green.c); NULL and legacy stay as they are. */
static inline CUstream flyt_cuda_stream(const struct flyt_cuda_backend *b, flyt_bhandle s)
{
    if (s == FLYT_BSTREAM_PER_THREAD && b->pt_stream)
        return b->pt_stream;
    return (CUstream)s;
}

/* The stream to queue work on, after the implicit synchronization with the
 * legacy stream that CUDA makes and a green context does not
 * (backend_cuda_legacy.c). Use it wherever work is queued; flyt_cuda_stream
 * for queries and synchronization. */
CUstream flyt_cuda_enqueue(struct flyt_cuda_backend *b, flyt_bhandle stream);
CUresult flyt_cuda_blocking_add(struct flyt_cuda_backend *b, CUstream s);
void     flyt_cuda_blocking_del(struct flyt_cuda_backend *b, CUstream s);
int      flyt_cuda_is_blocking(struct flyt_cuda_backend *b, CUstream s);
void     flyt_cuda_blocking_clear(struct flyt_cuda_backend *b);

/* backend_cuda_green.c: builds the green context of the share (groups and
 * granularity already stored in b) and makes it current; on failure nothing
 * of it is left and the primary context is current again. */
CUresult flyt_cuda_green_build(struct flyt_cuda_backend *b);
/* Destroys the green context (and its per-thread stream); the primary
 * context stays retained. Safe when there is none. */
void     flyt_cuda_green_drop(struct flyt_cuda_backend *b);
CUresult flyt_cuda_set_sm_share(flyt_backend *base, unsigned granularity, const int *groups,
                                int ngroups, int *sm_count);
/* Live resize: a green context of the new groups replaces the current one
 * (or the primary context); the streams move to it (backend.h). */
CUresult flyt_cuda_resize_sm_share(flyt_backend *base, unsigned granularity, const int *groups,
                                   int ngroups, int *sm_count,
                                   void (*remap)(void *arg, flyt_bhandle old, flyt_bhandle now),
                                   void *arg);
/* A stream of the current share (green or primary), recorded in b->streams
 * (and as blocking when it is one); backend_cuda.c. */
CUresult flyt_cuda_stream_make(struct flyt_cuda_backend *b, unsigned flags, int priority,
                               CUstream *out);

/* backend_cuda_props.c */
CUresult flyt_cuda_device_props(flyt_backend *base, struct cudaDeviceProp *out);

/* backend_cuda_copy.c */
void    *flyt_cuda_staging_get(flyt_backend *base, size_t want, size_t *got);
void     flyt_cuda_staging_put(flyt_backend *base, void *staging);
CUresult flyt_cuda_htod_2d(flyt_backend *base, uint64_t dst, uint64_t dst_pitch, void *staging,
                           uint64_t width, uint64_t rows, flyt_bhandle stream);
CUresult flyt_cuda_dtoh_2d(flyt_backend *base, void *dst, uint64_t src, uint64_t src_pitch,
                           uint64_t width, uint64_t rows, flyt_bhandle stream);
CUresult flyt_cuda_dtod_2d(flyt_backend *base, uint64_t dst, uint64_t dst_pitch, uint64_t src,
                           uint64_t src_pitch, uint64_t width, uint64_t rows, flyt_bhandle stream);
CUresult flyt_cuda_host_register(flyt_backend *base, void *ptr, uint64_t size);
/* backend_cuda_vmm.c */
CUresult flyt_cuda_vmm_granularity(flyt_backend *base, const flyt_vmm_prop *prop, uint64_t *bytes);
CUresult flyt_cuda_vmm_reserve(flyt_backend *base, uint64_t size, uint64_t alignment, uint64_t addr,
                               uint64_t *ptr);
CUresult flyt_cuda_vmm_free(flyt_backend *base, uint64_t ptr, uint64_t size);
CUresult flyt_cuda_vmm_create(flyt_backend *base, uint64_t size, const flyt_vmm_prop *prop,
                              flyt_bhandle *mem, uint8_t *compression);
CUresult flyt_cuda_vmm_release(flyt_backend *base, flyt_bhandle mem);
CUresult flyt_cuda_vmm_map(flyt_backend *base, uint64_t ptr, uint64_t size, uint64_t offset,
                           flyt_bhandle mem);
CUresult flyt_cuda_vmm_unmap(flyt_backend *base, uint64_t ptr, uint64_t size);
CUresult flyt_cuda_vmm_set_access(flyt_backend *base, uint64_t ptr, uint64_t size, unsigned flags);
CUresult flyt_cuda_vmm_retain(flyt_backend *base, uint64_t addr, flyt_bhandle *mem);
CUresult flyt_cuda_host_unregister(flyt_backend *base, void *ptr);
CUresult flyt_cuda_host_register_mapped(flyt_backend *base, void *ptr, uint64_t size,
                                        unsigned flags, uint64_t *dptr);
CUresult flyt_cuda_htod_host(flyt_backend *base, uint64_t dst, const void *src, uint64_t n,
                             flyt_bhandle stream);
CUresult flyt_cuda_dtoh_host(flyt_backend *base, void *dst, uint64_t src, uint64_t n,
                             flyt_bhandle stream);
CUresult flyt_cuda_memset_2d(flyt_backend *base, uint64_t dst, uint64_t pitch, uint32_t value,
                             unsigned elem_size,
                             uint64_t width, uint64_t rows, flyt_bhandle stream);
/* backend_cuda_array.c: CUDA arrays, texture and surface objects */
CUresult flyt_cuda_array_create(flyt_backend *base, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                flyt_bhandle *array);
CUresult flyt_cuda_array_destroy(flyt_backend *base, flyt_bhandle array);
CUresult flyt_cuda_mipmap_create(flyt_backend *base, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                 unsigned levels, flyt_bhandle *mipmap);
CUresult flyt_cuda_mipmap_destroy(flyt_backend *base, flyt_bhandle mipmap);
CUresult flyt_cuda_mipmap_level(flyt_backend *base, flyt_bhandle mipmap, unsigned level,
                                flyt_bhandle *array);
CUresult flyt_cuda_copy_3d(flyt_backend *base, const struct flyt_bcopy *c, flyt_bhandle stream,
                           int wait);
CUresult flyt_cuda_tex_create(flyt_backend *base, const CUDA_RESOURCE_DESC *res,
                              const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view,
                              uint64_t *obj);
CUresult flyt_cuda_tex_destroy(flyt_backend *base, uint64_t obj);
CUresult flyt_cuda_surf_create(flyt_backend *base, const CUDA_RESOURCE_DESC *res, uint64_t *obj);
CUresult flyt_cuda_surf_destroy(flyt_backend *base, uint64_t obj);

/* A driver event the backend now owns (destroyed when it cannot keep it). */
CUresult flyt_cuda_event_adopt(struct flyt_cuda_backend *b, CUevent e, flyt_bhandle *event);

/* backend_cuda_vmm.c: backend.h's ipc_vmm_* */
CUresult flyt_cuda_ipc_vmm_export(flyt_backend *base, flyt_bhandle mem, int *fd, uint64_t *size);
CUresult flyt_cuda_ipc_vmm_import(flyt_backend *base, int fd, uint64_t size, flyt_bhandle *mem);

/* backend_cuda_ipc.c: backend.h's ipc_* */
CUresult flyt_cuda_ipc_mem_export(flyt_backend *base, uint64_t ptr, int *fd, uint64_t *unit_base,
                                  uint64_t *unit_size, uint64_t *size);
CUresult flyt_cuda_ipc_mem_import(flyt_backend *base, int fd, uint64_t unit_size, uint64_t *addr);
CUresult flyt_cuda_ipc_mem_unimport(flyt_backend *base, uint64_t addr, uint64_t unit_size);
CUresult flyt_cuda_ipc_event_export(flyt_backend *base, flyt_bhandle event,
                                    uint8_t handle[FLYT_IPC_HANDLE_BYTES]);
CUresult flyt_cuda_ipc_event_import(flyt_backend *base, const uint8_t handle[FLYT_IPC_HANDLE_BYTES],
                                    flyt_bhandle *event);
CUresult flyt_cuda_ipc_pool_export(flyt_backend *base, flyt_bhandle pool, int *fd);
CUresult flyt_cuda_ipc_pool_import(flyt_backend *base, int fd, flyt_bhandle *pool);
CUresult flyt_cuda_ipc_ptr_export(flyt_backend *base, uint64_t ptr, uint8_t data[FLYT_IPC_HANDLE_BYTES],
                                  int *fd, uint64_t *unit_base, uint64_t *unit_size, uint64_t *size);
CUresult flyt_cuda_ipc_ptr_import(flyt_backend *base, flyt_bhandle pool,
                                  const uint8_t data[FLYT_IPC_HANDLE_BYTES], int fd,
                                  uint64_t unit_size, uint64_t offset, uint64_t *addr);

/* backend_cuda_mem.c: tenant memory in Flyt's arenas (above). place: a new
 * allocation (*dptr); place_at: one at exactly addr, inside an arena
 * (a restore); release: frees dptr, 1 with *r its result, 0 when it is not
 * an allocation of these; range: the allocation holding ptr, 1, else 0;
 * pitch: the pitch the driver gives width bytes of cuMemAllocPitch. */
CUresult flyt_cuda_mem_place(struct flyt_cuda_backend *b, uint64_t size, uint64_t *dptr);
CUresult flyt_cuda_mem_place_at(struct flyt_cuda_backend *b, uint64_t addr, uint64_t size);
int      flyt_cuda_mem_release(struct flyt_cuda_backend *b, uint64_t dptr, CUresult *r);
int      flyt_cuda_mem_range(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *base,
                             uint64_t *size);
CUresult flyt_cuda_mem_pitch(struct flyt_cuda_backend *b, uint64_t width, uint64_t *pitch);
/* unit: the allocation that starts at ptr (*size) and the mapping holding it
 * (a small one's chunk, else its own granules); 1, or 0 when ptr starts none. */
int      flyt_cuda_mem_unit(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *unit_base,
                            uint64_t *unit_size, uint64_t *size);
/* map: device memory at [addr, addr + len), a reserved range, read-write
 * (its handle released once mapped); gran: the allocation granularity. */
CUresult flyt_cuda_mem_map(struct flyt_cuda_backend *b, uint64_t addr, uint64_t len);
CUresult flyt_cuda_mem_gran(struct flyt_cuda_backend *b, uint64_t *gran);

/* backend_cuda_ordered.c: stream-ordered allocations for a checkpoint. note:
 * one from the driver's pools (pool NULL: the current pool), forget: freed;
 * free: dptr is a restored one, 1 with *r (released once stream, NULL: the
 * device, passed this point), 0 when it is not; range: a restored one holding
 * ptr; drop: every restored one released (close, reset); reap: the freed
 * ones the device has passed released. */
int      flyt_cuda_ordered_note(struct flyt_cuda_backend *b, uint64_t dptr, uint64_t size,
                                flyt_bhandle pool);
void     flyt_cuda_ordered_forget(struct flyt_cuda_backend *b, uint64_t dptr);
int      flyt_cuda_ordered_free(struct flyt_cuda_backend *b, uint64_t dptr, CUstream stream,
                                int sync, CUresult *r);
int      flyt_cuda_ordered_range(const struct flyt_cuda_backend *b, uint64_t ptr, uint64_t *base,
                                 uint64_t *size);
/* The bytes of the live restored allocations taken from pool (the driver's pools do not
 * count them), each rounded up to whole granules when granules. */
uint64_t flyt_cuda_ordered_pool_bytes(struct flyt_cuda_backend *b, flyt_bhandle pool, int granules);
void     flyt_cuda_ordered_drop(struct flyt_cuda_backend *b);
void     flyt_cuda_ordered_reap(struct flyt_cuda_backend *b); /* frees the device passed */
CUresult flyt_cuda_state_async(flyt_backend *base,
                               CUresult (*fn)(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool),
                               void *arg);
CUresult flyt_cuda_async_spans(flyt_backend *base, const uint64_t (*ranges)[2], size_t n);
CUresult flyt_cuda_async_alloc_at(flyt_backend *base, uint64_t addr, uint64_t size, flyt_bhandle pool);
/* An arena at exactly [base, base + size) (a restore, before any allocation):
 * CUDA_ERROR_ALREADY_MAPPED when the driver offers another address. */
CUresult flyt_cuda_mem_arena_at(flyt_backend *base, uint64_t addr, uint64_t size);
CUresult flyt_cuda_mem_arenas(flyt_backend *base,
                              CUresult (*fn)(void *arg, uint64_t addr, uint64_t size), void *arg);
/* Before a context reset or close: unmaps every allocation, frees the arenas. */
void     flyt_cuda_mem_drop(struct flyt_cuda_backend *b);

/* backend_cuda_state.c: checkpoint and restore (backend.h's state_allocs,
 * mem_alloc_at, module_image). */
/* Keeps a copy of a module's image (0, or -1 out of memory). */
/* owned: image itself, malloc'd, kept without a copy (module_load's contract) */
int      flyt_cuda_state_keep_image(struct flyt_cuda_module *m, const void *image, size_t size,
                                    void *owned);
CUresult flyt_cuda_state_vmm(flyt_backend *base, const struct flyt_vmm_visit *fn, void *arg,
                             const char **what);
CUresult flyt_cuda_state_allocs(flyt_backend *base,
                                CUresult (*fn)(void *arg, uint64_t addr, uint64_t size), void *arg,
                                const char **what);
CUresult flyt_cuda_mem_alloc_at(flyt_backend *base, uint64_t addr, uint64_t size);
/* The module global the client holds at old is at now here (a restore). */
CUresult flyt_cuda_global_alias(flyt_backend *base, uint64_t old, uint64_t now, uint64_t size);
/* Kernel parameters with every 8-byte value inside a moved global translated
 * (params itself when there is nothing to translate). */
const void *flyt_cuda_params_xlate(struct flyt_cuda_backend *b, const void *params, uint32_t bytes);
/* A texture or surface object the client holds as client is now (a restore). */
CUresult flyt_cuda_obj_alias(flyt_backend *base, uint64_t client, uint64_t now);
/* Kernel parameters of f with every 8-byte parameter that holds such a client
 * value translated (params itself when there is nothing to translate). */
const void *flyt_cuda_params_xlate_objs(struct flyt_cuda_backend *b, const struct flyt_cuda_func *f,
                                        const void *params, uint32_t bytes);
/* Forgets the aliases of globals and objects (their modules or context are gone). */
void flyt_cuda_aliases_drop(struct flyt_cuda_backend *b);
CUresult flyt_cuda_module_image(flyt_backend *base, flyt_bhandle module, const void **image,
                                size_t *size);

/* Before a context reset or close: waits for every staging copy and drops
 * the driver state (events, registrations); the host memory stays, so a
 * buffer the server still holds remains valid. free_mem also frees it. */
void     flyt_cuda_staging_release(struct flyt_cuda_backend *b, int free_mem);

#endif
