/*
 * The "host" backend: a fake GPU in host memory, for tests only.
 *
 * Memory, stream, event and pool calls work; everything runs synchronously
 * on the calling thread, so streams and events are plain records, except
 * host functions: they run on a thread of their own, as the driver's do,
 * and work that must follow one waits for it (backend_host_hf.h). Modules are
 * checked for a plausible image and kept; every function and global name
 * resolves (libraries look theirs up at start-up) and occupancy is answered
 * as a Hopper SM would, but no kernel ever runs: launches, run-time linking
 * and tensor maps answer CUDA_ERROR_NOT_SUPPORTED.
 *
 * Safety: device pointers are the host addresses of real mappings, so every
 * device range a request names is checked to lie entirely inside one live
 * allocation before a byte is touched; a client cannot make the server read
 * or write anything else through this backend.
 */
#include "backend.h"
#include "backend_host_graph.h"
#include "backend_host_hf.h"
#include "flyt_calls.h"
#include "flyt_mipmap.h"
#include "flyt_parse.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static_assert(sizeof(struct cudaDeviceProp) == FLYT_DEVICE_PROP_SIZE, "cudaDeviceProp size");

#define HOST_DEFAULT_MEM   (1ull << 30)
#define HOST_STAGING_MAX   ((size_t)8 << 20)
#define HOST_STAGING_CACHE 4
#define HOST_PITCH_ALIGN   512u
#define HOST_PRIO_LEAST    0
#define HOST_PRIO_GREATEST (-5)
#define HOST_ATTR_MAX      160
#define HOST_LIMIT_COUNT   10 /* CU_LIMIT_STACK_SIZE .. CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED */
/* Staging buffers carry a header holding their capacity, so that a returned
 * buffer can serve a later request that fits. */
#define STAGING_HDR        64

/* ---- small pointer sets: the objects this backend created ---- */

typedef struct {
    void **items;
    size_t n, cap;
} ptrset;

static int set_add(ptrset *s, void *p)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        void **items = realloc(s->items, cap * sizeof *items);
        if (items == NULL)
            return -1;
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = p;
    return 0;
}

static int set_has(const ptrset *s, const void *p)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->items[i] == p)
            return 1;
    return 0;
}

static int set_del(ptrset *s, const void *p)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->items[i] == p) {
            s->items[i] = s->items[--s->n];
            return 1;
        }
    return 0;
}

/* ---- objects ---- */

struct hpool {
    uint64_t max_size; /* 0: no limit */
    uint64_t reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_* (attrs 1..3) */
    uint64_t release_threshold;
    uint64_t used, used_high;
    unsigned handle_types; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: shareable */
    int      imported;     /* another session's, opened here (ipc_pool_import) */
};

static struct hpool *new_pool(uint64_t max_size)
{
    struct hpool *p = calloc(1, sizeof *p);
    if (p) {
        p->max_size = max_size;
        p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    }
    return p;
}

struct halloc {
    uint64_t addr, size; /* an anonymous mapping; [addr, addr + size) is the client's */
    struct hpool *pool;  /* NULL unless from an async allocation */
    struct hpool *home;  /* restored stream-ordered (async_alloc_at): its pool, not charged */
    int           restored;
    struct hvmem *vmem;  /* a cuMemMap of this VMM allocation, else NULL */
    uint64_t offset;     /* VMM mappings: where in the allocation they start */
    unsigned access;     /* VMM mappings: CU_MEM_ACCESS_FLAGS_PROT_* granted */
    int exported;        /* shared for CUDA IPC: the mapping is of memfd ipc_fd */
    int ipc_fd;
    int imported;        /* another session's exported memory: IMPORT_MAPPED is not this
                          * one's to free (cuIpcCloseMemHandle), IMPORT_POOLED is (a pool's) */
};

enum { IMPORT_MAPPED = 1, IMPORT_POOLED = 2 };

/* VMM: a reserved address range, and a physical allocation (a memfd) that
 * lives while a handle or a mapping refers to it. */
struct hvrange {
    uint64_t addr, size;
};
struct hvmem {
    int fd;
    uint64_t size;
    unsigned refs, maps;
    flyt_vmm_prop prop; /* as created: a checkpoint creates it again so */
};

/* The attributes CUDA keeps on a stream (cuStreamSetAttribute) besides its
 * priority, which is the stream's own (CU_LAUNCH_ATTRIBUTE_PRIORITY). */
static const CUlaunchAttributeID host_stream_attr_ids[] = {
    CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
    CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
};
#define HOST_STREAM_ATTRS (sizeof host_stream_attr_ids / sizeof host_stream_attr_ids[0])
struct hattrs {
    CUstreamAttrValue v[HOST_STREAM_ATTRS];
};

static void attrs_default(struct hattrs *a)
{
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < HOST_STREAM_ATTRS; i++)
        if (host_stream_attr_ids[i] == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY)
            a->v[i].syncPolicy = CU_SYNC_POLICY_AUTO;
}

struct hstream {
    unsigned flags;
    int priority;
    struct hattrs attrs;
    struct hg_cap cap; /* its capture, if it captures */
};

struct hevent {
    unsigned flags;
    int recorded;
    struct timespec when;
    struct hg_cap cap; /* where a capture stood when it was recorded there */
};

/* An executable graph: its own copy of the graph. */
struct hexec {
    struct hg_graph *g;
    uint64_t flags;
};

/* A module's global variable, as this backend imagines it (below). */
struct hglobal {
    char *name;
    uint64_t dptr;
    struct hglobal *next;
};

struct hmodule {
    void *image;
    size_t size;
    struct hglobal *globals;
};

/* A CUDA array as host memory: slices (depth, layers or cubemap faces) of
 * rows of row bytes, packed. A level of a mipmapped array has its owner. */
struct hmipmap;
struct harray {
    uint64_t        row, rows, slices;
    unsigned        flags;
    struct hmipmap *owner;
    char           *mem;
};

struct hmipmap {
    unsigned        levels;
    struct harray **level;
};

struct host_backend;
static void globals_free(struct host_backend *h, struct hmodule *m);
static void arrays_free(struct host_backend *h);

struct host_backend {
    flyt_backend base;
    struct cudaDeviceProp props;
    int attr[HOST_ATTR_MAX];
    unsigned char attr_known[HOST_ATTR_MAX];
    uint64_t total, used;
    int sm_total; /* SMs of the fake device (FLYT_HOST_BACKEND_SMS, default 132) */
    int cc_major, cc_minor; /* its compute capability (FLYT_HOST_BACKEND_CC, default 9.0) */
    unsigned print_points; /* opening, device syncs and memsets so far (flyt_host_fake_print) */
    long sync_ms; /* FLYT_HOST_BACKEND_SYNC_MS: a device sync's fake kernel time, -1: forever */

    struct halloc *allocs; /* sorted by addr */
    size_t nallocs, cap_allocs;
    /* client memory registered device-mapped (HOST_MAP_AT): "kernels", i.e.
     * copies and memsets here, reach it at its address */
    struct halloc *mapped;
    size_t nmapped, cap_mapped;

    ptrset streams, events, modules, pools, graphs, execs;
    ptrset uobjs;           /* struct huobj: user objects not destroyed yet */
    uint32_t cond_serial;   /* the last conditional handle's serial */
    ptrset arrays, mipmaps; /* arrays holds the levels of mipmaps too */
    uint64_t next_obj;      /* the last texture or surface object value handed out */
    uint64_t capture_ids;
    struct hpool *default_pool;
    ptrset vranges, vmems; /* VMM: reservations; allocations with a live handle */

    uint64_t limits[HOST_LIMIT_COUNT];
    /* attributes of the NULL (= legacy) stream and of the per-thread one,
     * which a resize renews as the green context's default streams are */
    struct hattrs null_attrs, pt_attrs;
    int cache_config;
    unsigned ctx_flags;

    void *staging_cache[HOST_STAGING_CACHE];
    size_t nstaging;

    struct hf_runner *hf; /* host functions' thread */
};

#define HB(b) ((struct host_backend *)(b))

/* ---- the fake device ---- */

static void fill_props(struct host_backend *h)
{
    struct cudaDeviceProp *p = &h->props;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "Flyt host test device");
    for (int i = 0; i < 16; i++)
        p->uuid.bytes[i] = (char)(0xF0 + i);
    p->totalGlobalMem = h->total;
    p->sharedMemPerBlock = 48 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 64 << 10;
    p->major = h->cc_major;
    p->minor = h->cc_minor;
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = h->sm_total;
    p->integrated = 0;
    p->canMapHostMemory = 1;
    p->maxTexture1D = 131072;
    p->maxTexture1DMipmap = 32768;
    p->maxTexture2D[0] = 131072;
    p->maxTexture2D[1] = 65536;
    p->maxTexture2DMipmap[0] = 32768;
    p->maxTexture2DMipmap[1] = 32768;
    p->maxTexture2DLinear[0] = 131072;
    p->maxTexture2DLinear[1] = 65000;
    p->maxTexture2DLinear[2] = 2097120;
    p->maxTexture2DGather[0] = 32768;
    p->maxTexture2DGather[1] = 32768;
    p->maxTexture3D[0] = p->maxTexture3D[1] = p->maxTexture3D[2] = 16384;
    p->maxTexture3DAlt[0] = p->maxTexture3DAlt[1] = 8192;
    p->maxTexture3DAlt[2] = 32768;
    p->maxTextureCubemap = 32768;
    p->maxTexture1DLayered[0] = 32768;
    p->maxTexture1DLayered[1] = 2048;
    p->maxTexture2DLayered[0] = p->maxTexture2DLayered[1] = 32768;
    p->maxTexture2DLayered[2] = 2048;
    p->maxTextureCubemapLayered[0] = 32768;
    p->maxTextureCubemapLayered[1] = 2046;
    p->maxSurface1D = 32768;
    p->maxSurface2D[0] = 131072;
    p->maxSurface2D[1] = 65536;
    p->maxSurface3D[0] = p->maxSurface3D[1] = p->maxSurface3D[2] = 16384;
    p->maxSurface1DLayered[0] = 32768;
    p->maxSurface1DLayered[1] = 2048;
    p->maxSurface2DLayered[0] = p->maxSurface2DLayered[1] = 32768;
    p->maxSurface2DLayered[2] = 2048;
    p->maxSurfaceCubemap = 32768;
    p->maxSurfaceCubemapLayered[0] = 32768;
    p->maxSurfaceCubemapLayered[1] = 2046;
    p->surfaceAlignment = 512;
    p->concurrentKernels = 1;
    p->ECCEnabled = 0;
    p->pciBusID = 0;
    p->pciDeviceID = 0;
    p->pciDomainID = 0;
    p->tccDriver = 0;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 << 20;
    p->persistingL2CacheMaxSize = 32 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = 228 << 10;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1; /* on one machine; the client hides it between machines */
    p->isMultiGpuBoard = 0;
    p->multiGpuBoardGroupID = 0;
    p->hostNativeAtomicSupported = 0;
    p->pageableMemoryAccess = 0;
    p->concurrentManagedAccess = 1;
    p->computePreemptionSupported = 1;
    p->canUseHostPointerForRegisteredMem = 1; /* as H100: registered memory at its host address */
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = 227 << 10;
    p->pageableMemoryAccessUsesHostPageTables = 0;
    p->directManagedMemAccessFromHost = 0;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    p->hostRegisterSupported = 0;
    p->sparseCudaArraySupported = 0;
    p->hostRegisterReadOnlySupported = 1; /* as an H100 */
    p->timelineSemaphoreInteropSupported = 0;
    p->memoryPoolsSupported = 1;
    p->gpuDirectRDMASupported = 0;
    p->gpuDirectRDMAFlushWritesOptions = 0;
    p->gpuDirectRDMAWritesOrdering = 0;
    p->memoryPoolSupportedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* ipc_pool_* */
    p->deferredMappingCudaArraySupported = 0;
    p->ipcEventSupported = 1; /* interprocess events between sessions (ipc.h) */
    p->clusterLaunch = 1;
    p->unifiedFunctionPointers = 1;
    p->deviceNumaConfig = 0;
    p->deviceNumaId = -1;
    p->mpsEnabled = 0;
    p->hostNumaId = -1;
    p->gpuPciDeviceID = 0;
    p->gpuPciSubsystemID = 0;
    p->hostNumaMultinodeIpcSupported = 0;
}

static void set_attr(struct host_backend *h, int attr, long long v)
{
    if (attr > 0 && attr < HOST_ATTR_MAX) {
        h->attr[attr] = v > 2147483647 ? 2147483647 : (int)v;
        h->attr_known[attr] = 1;
    }
}

/* The CU_DEVICE_ATTRIBUTE_* answers, derived from the props. */
static void fill_attrs(struct host_backend *h)
{
    const struct cudaDeviceProp *p = &h->props;
    memset(h->attr, 0, sizeof h->attr);
    memset(h->attr_known, 0, sizeof h->attr_known);
#define A(name, v) set_attr(h, CU_DEVICE_ATTRIBUTE_##name, (long long)(v))
    A(MAX_THREADS_PER_BLOCK, p->maxThreadsPerBlock);
    A(MAX_BLOCK_DIM_X, p->maxThreadsDim[0]);
    A(MAX_BLOCK_DIM_Y, p->maxThreadsDim[1]);
    A(MAX_BLOCK_DIM_Z, p->maxThreadsDim[2]);
    A(MAX_GRID_DIM_X, p->maxGridSize[0]);
    A(MAX_GRID_DIM_Y, p->maxGridSize[1]);
    A(MAX_GRID_DIM_Z, p->maxGridSize[2]);
    A(MAX_SHARED_MEMORY_PER_BLOCK, p->sharedMemPerBlock);
    A(TOTAL_CONSTANT_MEMORY, p->totalConstMem);
    A(WARP_SIZE, p->warpSize);
    A(MAX_PITCH, p->memPitch);
    A(MAX_REGISTERS_PER_BLOCK, p->regsPerBlock);
    A(CLOCK_RATE, 1980000);
    A(TEXTURE_ALIGNMENT, p->textureAlignment);
    A(GPU_OVERLAP, 1);
    A(MULTIPROCESSOR_COUNT, p->multiProcessorCount);
    A(KERNEL_EXEC_TIMEOUT, 0);
    A(INTEGRATED, p->integrated);
    A(CAN_MAP_HOST_MEMORY, p->canMapHostMemory);
    A(COMPUTE_MODE, 0);
    A(MAXIMUM_TEXTURE1D_WIDTH, p->maxTexture1D);
    A(MAXIMUM_TEXTURE2D_WIDTH, p->maxTexture2D[0]);
    A(MAXIMUM_TEXTURE2D_HEIGHT, p->maxTexture2D[1]);
    A(MAXIMUM_TEXTURE3D_WIDTH, p->maxTexture3D[0]);
    A(MAXIMUM_TEXTURE3D_HEIGHT, p->maxTexture3D[1]);
    A(MAXIMUM_TEXTURE3D_DEPTH, p->maxTexture3D[2]);
    A(MAXIMUM_TEXTURE2D_LAYERED_WIDTH, p->maxTexture2DLayered[0]);
    A(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, p->maxTexture2DLayered[1]);
    A(MAXIMUM_TEXTURE2D_LAYERED_LAYERS, p->maxTexture2DLayered[2]);
    A(SURFACE_ALIGNMENT, p->surfaceAlignment);
    A(CONCURRENT_KERNELS, p->concurrentKernels);
    A(ECC_ENABLED, p->ECCEnabled);
    A(PCI_BUS_ID, p->pciBusID);
    A(PCI_DEVICE_ID, p->pciDeviceID);
    A(TCC_DRIVER, p->tccDriver);
    A(MEMORY_CLOCK_RATE, 2619000);
    A(GLOBAL_MEMORY_BUS_WIDTH, p->memoryBusWidth);
    A(L2_CACHE_SIZE, p->l2CacheSize);
    A(MAX_THREADS_PER_MULTIPROCESSOR, p->maxThreadsPerMultiProcessor);
    A(ASYNC_ENGINE_COUNT, p->asyncEngineCount);
    A(UNIFIED_ADDRESSING, p->unifiedAddressing);
    A(MAXIMUM_TEXTURE1D_LAYERED_WIDTH, p->maxTexture1DLayered[0]);
    A(MAXIMUM_TEXTURE1D_LAYERED_LAYERS, p->maxTexture1DLayered[1]);
    A(CAN_TEX2D_GATHER, 1);
    A(MAXIMUM_TEXTURE2D_GATHER_WIDTH, p->maxTexture2DGather[0]);
    A(MAXIMUM_TEXTURE2D_GATHER_HEIGHT, p->maxTexture2DGather[1]);
    A(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, p->maxTexture3DAlt[0]);
    A(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, p->maxTexture3DAlt[1]);
    A(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, p->maxTexture3DAlt[2]);
    A(PCI_DOMAIN_ID, p->pciDomainID);
    A(TEXTURE_PITCH_ALIGNMENT, p->texturePitchAlignment);
    A(MAXIMUM_TEXTURECUBEMAP_WIDTH, p->maxTextureCubemap);
    A(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, p->maxTextureCubemapLayered[0]);
    A(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, p->maxTextureCubemapLayered[1]);
    A(MAXIMUM_SURFACE1D_WIDTH, p->maxSurface1D);
    A(MAXIMUM_SURFACE2D_WIDTH, p->maxSurface2D[0]);
    A(MAXIMUM_SURFACE2D_HEIGHT, p->maxSurface2D[1]);
    A(MAXIMUM_SURFACE3D_WIDTH, p->maxSurface3D[0]);
    A(MAXIMUM_SURFACE3D_HEIGHT, p->maxSurface3D[1]);
    A(MAXIMUM_SURFACE3D_DEPTH, p->maxSurface3D[2]);
    A(MAXIMUM_SURFACE1D_LAYERED_WIDTH, p->maxSurface1DLayered[0]);
    A(MAXIMUM_SURFACE1D_LAYERED_LAYERS, p->maxSurface1DLayered[1]);
    A(MAXIMUM_SURFACE2D_LAYERED_WIDTH, p->maxSurface2DLayered[0]);
    A(MAXIMUM_SURFACE2D_LAYERED_HEIGHT, p->maxSurface2DLayered[1]);
    A(MAXIMUM_SURFACE2D_LAYERED_LAYERS, p->maxSurface2DLayered[2]);
    A(MAXIMUM_SURFACECUBEMAP_WIDTH, p->maxSurfaceCubemap);
    A(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, p->maxSurfaceCubemapLayered[0]);
    A(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, p->maxSurfaceCubemapLayered[1]);
    A(MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456);
    A(MAXIMUM_TEXTURE2D_LINEAR_WIDTH, p->maxTexture2DLinear[0]);
    A(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, p->maxTexture2DLinear[1]);
    A(MAXIMUM_TEXTURE2D_LINEAR_PITCH, p->maxTexture2DLinear[2]);
    A(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, p->maxTexture2DMipmap[0]);
    A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, p->maxTexture2DMipmap[1]);
    A(COMPUTE_CAPABILITY_MAJOR, p->major);
    A(COMPUTE_CAPABILITY_MINOR, p->minor);
    A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, p->maxTexture1DMipmap);
    A(STREAM_PRIORITIES_SUPPORTED, p->streamPrioritiesSupported);
    A(GLOBAL_L1_CACHE_SUPPORTED, p->globalL1CacheSupported);
    A(LOCAL_L1_CACHE_SUPPORTED, p->localL1CacheSupported);
    A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, p->sharedMemPerMultiprocessor);
    A(MAX_REGISTERS_PER_MULTIPROCESSOR, p->regsPerMultiprocessor);
    A(MANAGED_MEMORY, p->managedMemory);
    A(MULTI_GPU_BOARD, p->isMultiGpuBoard);
    A(MULTI_GPU_BOARD_GROUP_ID, p->multiGpuBoardGroupID);
    A(HOST_NATIVE_ATOMIC_SUPPORTED, p->hostNativeAtomicSupported);
    A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2);
    A(PAGEABLE_MEMORY_ACCESS, p->pageableMemoryAccess);
    A(CONCURRENT_MANAGED_ACCESS, p->concurrentManagedAccess);
    A(COMPUTE_PREEMPTION_SUPPORTED, p->computePreemptionSupported);
    A(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, p->canUseHostPointerForRegisteredMem);
    A(CAN_USE_STREAM_MEM_OPS_V1, 0);
    A(CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0);
    A(CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 0);
    A(COOPERATIVE_LAUNCH, p->cooperativeLaunch);
    A(COOPERATIVE_MULTI_DEVICE_LAUNCH, 0);
    A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, p->sharedMemPerBlockOptin);
    A(CAN_FLUSH_REMOTE_WRITES, 0);
    A(HOST_REGISTER_SUPPORTED, p->hostRegisterSupported);
    A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, p->pageableMemoryAccessUsesHostPageTables);
    A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, p->directManagedMemAccessFromHost);
    A(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1); /* reserve/create/map: host_vmm_* */
    A(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1); /* memfds, for IPC (ipc.h) */
    A(HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0);
    A(HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0);
    A(MAX_BLOCKS_PER_MULTIPROCESSOR, p->maxBlocksPerMultiProcessor);
    A(GENERIC_COMPRESSION_SUPPORTED, 0);
    A(MAX_PERSISTING_L2_CACHE_SIZE, p->persistingL2CacheMaxSize);
    A(MAX_ACCESS_POLICY_WINDOW_SIZE, p->accessPolicyMaxWindowSize);
    A(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0);
    A(RESERVED_SHARED_MEMORY_PER_BLOCK, p->reservedSharedMemPerBlock);
    A(SPARSE_CUDA_ARRAY_SUPPORTED, p->sparseCudaArraySupported);
    A(READ_ONLY_HOST_REGISTER_SUPPORTED, p->hostRegisterReadOnlySupported);
    A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, p->timelineSemaphoreInteropSupported);
    A(MEMORY_POOLS_SUPPORTED, p->memoryPoolsSupported);
    A(GPU_DIRECT_RDMA_SUPPORTED, p->gpuDirectRDMASupported);
    A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, p->gpuDirectRDMAFlushWritesOptions);
    A(GPU_DIRECT_RDMA_WRITES_ORDERING, p->gpuDirectRDMAWritesOrdering);
    A(MEMPOOL_SUPPORTED_HANDLE_TYPES, p->memoryPoolSupportedHandleTypes);
    A(CLUSTER_LAUNCH, p->clusterLaunch);
    A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, p->deferredMappingCudaArraySupported);
    A(CAN_USE_64_BIT_STREAM_MEM_OPS, 0);
    A(CAN_USE_STREAM_WAIT_VALUE_NOR, 0);
    A(DMA_BUF_SUPPORTED, 0);
    A(IPC_EVENT_SUPPORTED, p->ipcEventSupported);
    A(MEM_SYNC_DOMAIN_COUNT, 4);
    A(TENSOR_MAP_ACCESS_SUPPORTED, 1);
    A(HANDLE_TYPE_FABRIC_SUPPORTED, 0);
    A(UNIFIED_FUNCTION_POINTERS, p->unifiedFunctionPointers);
    A(NUMA_CONFIG, p->deviceNumaConfig);
    A(NUMA_ID, p->deviceNumaId);
    A(MULTICAST_SUPPORTED, 0);
    A(MPS_ENABLED, p->mpsEnabled);
    A(HOST_NUMA_ID, p->hostNumaId);
    A(D3D12_CIG_SUPPORTED, 0);
    A(MEM_DECOMPRESS_ALGORITHM_MASK, 0);
    A(MEM_DECOMPRESS_MAXIMUM_LENGTH, 0);
    A(VULKAN_CIG_SUPPORTED, 0);
    A(GPU_PCI_DEVICE_ID, p->gpuPciDeviceID);
    A(GPU_PCI_SUBSYSTEM_ID, p->gpuPciSubsystemID);
    A(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
    A(HOST_NUMA_MEMORY_POOLS_SUPPORTED, 0);
    A(HOST_NUMA_MULTINODE_IPC_SUPPORTED, p->hostNumaMultinodeIpcSupported);
    A(HOST_MEMORY_POOLS_SUPPORTED, 0);
    A(HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
    A(HOST_ALLOC_DMA_BUF_SUPPORTED, 0);
    A(ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 0);
#undef A
}

static void reset_context_state(struct host_backend *h)
{
    static const uint64_t defaults[HOST_LIMIT_COUNT] = {
        1024,      /* CU_LIMIT_STACK_SIZE */
        1 << 20,   /* CU_LIMIT_PRINTF_FIFO_SIZE */
        8 << 20,   /* CU_LIMIT_MALLOC_HEAP_SIZE */
        2,         /* CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH */
        2048,      /* CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT */
        64,        /* CU_LIMIT_MAX_L2_FETCH_GRANULARITY */
        0,         /* CU_LIMIT_PERSISTING_L2_CACHE_SIZE */
        228 << 10, /* CU_LIMIT_SHMEM_SIZE (query only) */
        0,         /* CU_LIMIT_CIG_ENABLED (query only) */
        0,         /* CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED */
    };
    memcpy(h->limits, defaults, sizeof defaults);
    attrs_default(&h->null_attrs);
    attrs_default(&h->pt_attrs);
    h->cache_config = CU_FUNC_CACHE_PREFER_NONE;
    h->ctx_flags = 0;
}

/* ---- allocation table ---- */

/* Index of the allocation containing ptr, or -1. */
static long find_alloc(const struct host_backend *h, uint64_t ptr)
{
    size_t lo = 0, hi = h->nallocs; /* first index with addr > ptr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->allocs[mid].addr <= ptr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const struct halloc *a = &h->allocs[lo - 1];
    return ptr - a->addr < a->size ? (long)(lo - 1) : -1;
}

/* Bytes spanned by a pitched region, 0 when empty; -1 when malformed. */
static int extent_2d(uint64_t pitch, uint64_t width, uint64_t rows, uint64_t *extent)
{
    *extent = 0;
    if (width == 0 || rows == 0)
        return 0;
    if (rows > 1 && pitch < width)
        return -1;
    uint64_t span;
    if (__builtin_mul_overflow(rows - 1, pitch, &span) || __builtin_add_overflow(span, width, &span))
        return -1;
    *extent = span;
    return 0;
}

/* The device-mapped client region holding ptr, or NULL. */
static const struct halloc *find_mapped(const struct host_backend *h, uint64_t ptr)
{
    for (size_t i = 0; i < h->nmapped; i++)
        if (ptr - h->mapped[i].addr < h->mapped[i].size)
            return &h->mapped[i];
    return NULL;
}

/* CUDA_SUCCESS when [ptr, ptr + len) lies inside one live allocation or
 * device-mapped host region. */
static CUresult check_range(const struct host_backend *h, uint64_t ptr, uint64_t len)
{
    long i = find_alloc(h, ptr);
    const struct halloc *a = i >= 0 ? &h->allocs[i] : find_mapped(h, ptr);
    if (a == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->vmem && a->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE; /* the GPU would fault on it */
    return len <= a->size - (ptr - a->addr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_2d(const struct host_backend *h, uint64_t ptr, uint64_t pitch, uint64_t width,
                         uint64_t rows)
{
    uint64_t extent;
    if (extent_2d(pitch, width, rows, &extent) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return extent ? check_range(h, ptr, extent) : CUDA_SUCCESS;
}

/* Room for one more entry in the allocation table: 0 or -1. */
static int table_reserve(struct host_backend *h)
{
    if (h->nallocs == h->cap_allocs) {
        size_t cap = h->cap_allocs ? h->cap_allocs * 2 : 64;
        struct halloc *n = realloc(h->allocs, cap * sizeof *n);
        if (n == NULL)
            return -1;
        h->allocs = n;
        h->cap_allocs = cap;
    }
    return 0;
}

/* Adds a entry in address order (after table_reserve). */
static void table_insert(struct host_backend *h, struct halloc a)
{
    size_t pos = h->nallocs;
    while (pos > 0 && h->allocs[pos - 1].addr > a.addr)
        pos--;
    memmove(&h->allocs[pos + 1], &h->allocs[pos], (h->nallocs - pos) * sizeof *h->allocs);
    h->allocs[pos] = a;
    h->nallocs++;
}

/* Fake device addresses come from one range far below where the kernel
 * places mappings, handed out in order across the process (a bump pointer:
 * freed ranges are not reused), so that a session restored in a fresh server
 * process (state.c) finds its addresses free. */
#define ARENA_BASE 0x7b0000000000ull
#define ARENA_END  0x7e0000000000ull
static uint64_t arena_next = ARENA_BASE;

/* A zero-filled mapping at exactly addr, or NULL when the range is taken.
 * prot PROT_NONE: a VMM reservation. */
static void *map_at_prot(uint64_t addr, uint64_t size, int prot)
{
    void *want = (void *)(uintptr_t)addr;
    void *mem = mmap(want, (size_t)size, prot,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE |
                         (prot == PROT_NONE ? MAP_NORESERVE : 0), -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    if (mem != want) { /* a kernel before 4.17 takes the address as a hint */
        munmap(mem, (size_t)size);
        return NULL;
    }
    return mem;
}

static void *map_at(uint64_t addr, uint64_t size) { return map_at_prot(addr, size, PROT_READ | PROT_WRITE); }

static uint64_t page_span(uint64_t size)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return (size + page - 1) / page * page;
}

/* Page-aligned (so 256-aligned) and zero-filled, so that no earlier contents
 * of the server's heap can leak to the client. NULL when out of memory. */
static void *map_fresh(uint64_t size)
{
    uint64_t span = page_span(size);
    for (int tries = 0; tries < 4 && span < ARENA_END - ARENA_BASE; tries++) {
        uint64_t at = __atomic_fetch_add(&arena_next, span, __ATOMIC_RELAXED);
        if (at > ARENA_END - span)
            break;
        void *mem = map_at(at, size);
        if (mem)
            return mem;
    }
    /* the range is taken (a sanitizer's layout, say): anywhere works, but a
     * restore in another process may then not find the address free */
    void *mem = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mem == MAP_FAILED ? NULL : mem;
}

/* Later fresh addresses start past [addr, addr + size). */
static void arena_skip(uint64_t addr, uint64_t size)
{
    uint64_t end = addr + page_span(size), cur = __atomic_load_n(&arena_next, __ATOMIC_RELAXED);
    while (end > cur && end <= ARENA_END &&
           !__atomic_compare_exchange_n(&arena_next, &cur, end, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* fixed: the address asked for (a restore), else 0. */
static CUresult alloc_insert(struct host_backend *h, uint64_t size, struct hpool *pool, uint64_t fixed,
                             uint64_t *dptr)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > h->total - h->used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pool && pool->max_size && (pool->used > pool->max_size || size > pool->max_size - pool->used))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (table_reserve(h) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *mem = fixed ? map_at(fixed, size) : map_fresh(size);
    if (mem == NULL)
        return fixed ? CUDA_ERROR_ALREADY_MAPPED : CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t addr = (uint64_t)(uintptr_t)mem;
    if (fixed)
        arena_skip(addr, size);
    table_insert(h, (struct halloc){.addr = addr, .size = size, .pool = pool});
    h->used += size;
    if (pool) {
        pool->used += size;
        if (pool->used > pool->used_high)
            pool->used_high = pool->used;
    }
    *dptr = addr;
    return CUDA_SUCCESS;
}

static void vmem_put(struct host_backend *h, struct hvmem *m);

static void alloc_remove(struct host_backend *h, size_t i)
{
    struct halloc a = h->allocs[i];
    if (a.vmem) { /* an unmapped range goes back to being reserved */
        mmap((void *)(uintptr_t)a.addr, (size_t)a.size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        a.vmem->maps--;
        vmem_put(h, a.vmem);
    } else {
        munmap((void *)(uintptr_t)a.addr, (size_t)a.size);
        if (!a.imported)
            h->used -= a.size;
    }
    if (a.exported)
        close(a.ipc_fd);
    if (a.pool)
        a.pool->used -= a.size;
    memmove(&h->allocs[i], &h->allocs[i + 1], (h->nallocs - i - 1) * sizeof *h->allocs);
    h->nallocs--;
}

static CUresult alloc_free(struct host_backend *h, uint64_t dptr)
{
    long i = find_alloc(h, dptr);
    if (i < 0 || h->allocs[i].addr != dptr || h->allocs[i].vmem ||
        h->allocs[i].imported == IMPORT_MAPPED)
        return CUDA_ERROR_INVALID_VALUE;
    alloc_remove(h, (size_t)i);
    return CUDA_SUCCESS;
}

/* ---- CUDA IPC (backend.h's ipc_*) ----
 * An allocation is private anonymous memory until it is first exported;
 * then its bytes move into a memfd mapped over the same addresses, which
 * another session's process maps too. */

/* a's bytes in a memfd mapped over its addresses (once), and a new descriptor of it */
static CUresult share_alloc(struct halloc *a, int *fd, uint64_t *unit_base, uint64_t *unit_size,
                            uint64_t *size)
{
    uint64_t span = page_span(a->size);
    if (!a->exported) {
        int mfd = memfd_create("flyt-host-ipc", MFD_CLOEXEC);
        if (mfd < 0 || ftruncate(mfd, (off_t)span) != 0 ||
            pwrite(mfd, (void *)(uintptr_t)a->addr, (size_t)a->size, 0) != (ssize_t)a->size ||
            mmap((void *)(uintptr_t)a->addr, (size_t)span, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, mfd, 0) == MAP_FAILED) {
            if (mfd >= 0)
                close(mfd);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        a->exported = 1;
        a->ipc_fd = mfd;
    }
    int out = fcntl(a->ipc_fd, F_DUPFD_CLOEXEC, 0);
    if (out < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *fd = out;
    *unit_base = a->addr;
    *unit_size = span;
    *size = a->size;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_mem_export(flyt_backend *b, uint64_t ptr, int *fd, uint64_t *unit_base,
                                    uint64_t *unit_size, uint64_t *size)
{
    struct host_backend *h = HB(b);
    long i = find_alloc(h, ptr);
    if (i < 0 || h->allocs[i].addr != ptr || h->allocs[i].vmem || h->allocs[i].imported ||
        h->allocs[i].pool || h->allocs[i].home)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: cuMemAlloc's memory only */
    return share_alloc(&h->allocs[i], fd, unit_base, unit_size, size);
}

/* fd's first unit_size bytes mapped at a fresh address (the table has room) */
static CUresult map_shared(int fd, uint64_t unit_size, uint64_t *addr)
{
    struct stat st;
    if (unit_size == 0 || unit_size != page_span(unit_size) || fstat(fd, &st) != 0 ||
        (uint64_t)st.st_size < unit_size)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t at = __atomic_fetch_add(&arena_next, unit_size, __ATOMIC_RELAXED);
    void *want = at <= ARENA_END - unit_size ? (void *)(uintptr_t)at : NULL;
    void *mem = want ? mmap(want, (size_t)unit_size, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0)
                     : MAP_FAILED;
    if (mem == MAP_FAILED || mem != want) { /* taken (or an old kernel's hint): anywhere */
        if (mem != MAP_FAILED)
            munmap(mem, (size_t)unit_size);
        mem = mmap(NULL, (size_t)unit_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (mem == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *addr = (uint64_t)(uintptr_t)mem;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_mem_import(flyt_backend *b, int fd, uint64_t unit_size, uint64_t *addr)
{
    struct host_backend *h = HB(b);
    if (table_reserve(h) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = map_shared(fd, unit_size, addr);
    if (r == CUDA_SUCCESS)
        table_insert(h, (struct halloc){.addr = *addr, .size = unit_size, .imported = IMPORT_MAPPED});
    return r;
}

static CUresult host_ipc_mem_unimport(flyt_backend *b, uint64_t addr, uint64_t unit_size)
{
    struct host_backend *h = HB(b);
    long i = find_alloc(h, addr);
    if (i < 0 || h->allocs[i].addr != addr || h->allocs[i].imported != IMPORT_MAPPED ||
        h->allocs[i].size != unit_size)
        return CUDA_ERROR_INVALID_VALUE;
    alloc_remove(h, (size_t)i);
    return CUDA_SUCCESS;
}

/* Shareable pools: nothing to hand over for the pool itself (this backend's
 * pools are bookkeeping); an allocation's bytes move into a memfd as
 * mem_export's, and the importer maps it as an allocation of its pool. */

static struct hpool *pool_known(struct host_backend *h, flyt_bhandle pool)
{
    return pool && set_has(&h->pools, pool) ? pool : NULL;
}

static CUresult host_ipc_pool_export(flyt_backend *b, flyt_bhandle pool, int *fd)
{
    struct hpool *p = pool_known(HB(b), pool);
    if (p == NULL || p->imported || !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: a pool created shareable */
    *fd = -1;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_pool_import(flyt_backend *b, int fd, flyt_bhandle *pool)
{
    struct host_backend *h = HB(b);
    (void)fd;
    struct hpool *p = new_pool(0);
    if (p == NULL || set_add(&h->pools, p) != 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p->imported = 1;
    *pool = p;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_ptr_export(flyt_backend *b, uint64_t ptr, uint8_t data[FLYT_IPC_HANDLE_BYTES],
                                    int *fd, uint64_t *unit_base, uint64_t *unit_size, uint64_t *size)
{
    struct host_backend *h = HB(b);
    long i = find_alloc(h, ptr);
    if (i < 0 || h->allocs[i].addr != ptr || h->allocs[i].imported || h->allocs[i].pool == NULL ||
        !(h->allocs[i].pool->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* from a shareable pool only, as the driver */
    memset(data, 0, FLYT_IPC_HANDLE_BYTES);
    return share_alloc(&h->allocs[i], fd, unit_base, unit_size, size);
}

static CUresult host_ipc_ptr_import(flyt_backend *b, flyt_bhandle pool,
                                    const uint8_t data[FLYT_IPC_HANDLE_BYTES], int fd,
                                    uint64_t unit_size, uint64_t offset, uint64_t *addr)
{
    struct host_backend *h = HB(b);
    (void)data;
    struct hpool *p = pool_known(h, pool);
    if (p == NULL || !p->imported || fd < 0 || offset >= unit_size)
        return CUDA_ERROR_INVALID_VALUE;
    if (table_reserve(h) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t at = 0;
    CUresult r = map_shared(fd, unit_size, &at);
    if (r != CUDA_SUCCESS)
        return r;
    table_insert(h, (struct halloc){.addr = at, .size = unit_size, .pool = p,
                                    .imported = IMPORT_POOLED});
    p->used += unit_size;
    *addr = at + offset;
    return CUDA_SUCCESS;
}

/* ---- object validation ---- */

static int stream_ok(const struct host_backend *h, flyt_bhandle s)
{
    return s == FLYT_BSTREAM_DEFAULT || s == FLYT_BSTREAM_LEGACY || s == FLYT_BSTREAM_PER_THREAD ||
           set_has(&h->streams, s);
}

/* A stream's place in CUDA's implicit synchronisation; the NULL stream is
 * the legacy one (as one stream: host functions' order is per stream). */
static enum hf_kind stream_kind(const struct host_backend *h, flyt_bhandle *s)
{
    if (*s == FLYT_BSTREAM_DEFAULT || *s == FLYT_BSTREAM_LEGACY) {
        *s = FLYT_BSTREAM_LEGACY;
        return HF_LEGACY;
    }
    if (*s != FLYT_BSTREAM_PER_THREAD && set_has(&h->streams, *s) &&
        (((struct hstream *)*s)->flags & CU_STREAM_NON_BLOCKING))
        return HF_NON_BLOCKING;
    return HF_BLOCKING;
}

/* stream_ok for work on the stream: it runs now, so first the host
 * functions it must follow return. */
static int stream_ready(const struct host_backend *h, flyt_bhandle s)
{
    if (!stream_ok(h, s))
        return 0;
    enum hf_kind kind = stream_kind(h, &s);
    hf_drain(h->hf, s, kind);
    return 1;
}

/* The capture a created stream records into, NULL when it runs its work. */
static struct hg_cap *capture_of(const struct host_backend *h, flyt_bhandle s)
{
    if (s == FLYT_BSTREAM_DEFAULT || s == FLYT_BSTREAM_LEGACY || s == FLYT_BSTREAM_PER_THREAD ||
        !set_has(&h->streams, s))
        return NULL;
    struct hg_cap *c = &((struct hstream *)s)->cap;
    return hg_capturing(c) ? c : NULL;
}

/* What CUDA does to a capture on a call that cannot be captured (a
 * synchronization, an allocation): the capture is invalidated. */
static CUresult capture_unsupported(struct hg_cap *c)
{
    c->sess->invalid = 1;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* Work CUDA could capture but this backend cannot (it needs a GPU): the
 * capture is invalidated all the same. */
static CUresult capture_refused(struct hg_cap *c)
{
    c->sess->invalid = 1;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* A user object: the backend forgets it before its destructor runs. */
struct huobj {
    struct host_backend *h;
    struct hg_uobj      *obj;
    flyt_host_func_cb    destroy;
    void                *arg;
};

static void huobj_free(struct huobj *u)
{
    hg_uobj_forget(u->obj);
    free(u);
}

/* Drops every object; the default pool is made afresh. */
static void drop_all(struct host_backend *h)
{
    while (h->nallocs > 0)
        alloc_remove(h, h->nallocs - 1);
    for (size_t i = 0; i < h->streams.n; i++) {
        hg_cap_drop(&((struct hstream *)h->streams.items[i])->cap);
        free(h->streams.items[i]);
    }
    for (size_t i = 0; i < h->events.n; i++) {
        hg_cap_drop(&((struct hevent *)h->events.items[i])->cap);
        free(h->events.items[i]);
    }
    for (size_t i = 0; i < h->graphs.n; i++)
        hg_graph_free(h->graphs.items[i]);
    for (size_t i = 0; i < h->execs.n; i++) {
        hg_graph_free(((struct hexec *)h->execs.items[i])->g);
        free(h->execs.items[i]);
    }
    h->graphs.n = h->execs.n = 0;
    while (h->uobjs.n > 0) /* those no graph held: gone without their destructor, as with a context */
        huobj_free(h->uobjs.items[--h->uobjs.n]);
    for (size_t i = 0; i < h->modules.n; i++) {
        struct hmodule *m = h->modules.items[i];
        globals_free(h, m);
        free(m->image);
        free(m);
    }
    for (size_t i = 0; i < h->pools.n; i++)
        free(h->pools.items[i]);
    while (h->vmems.n > 0) {
        struct hvmem *m = h->vmems.items[0];
        m->refs = 0;
        vmem_put(h, m);
    }
    for (size_t i = 0; i < h->vranges.n; i++) {
        struct hvrange *v = h->vranges.items[i];
        munmap((void *)(uintptr_t)v->addr, (size_t)v->size);
        free(v);
    }
    h->streams.n = h->events.n = h->modules.n = h->pools.n = h->vranges.n = 0;
    arrays_free(h);
    h->default_pool = NULL;
}

static int make_default_pool(struct host_backend *h)
{
    struct hpool *p = new_pool(0);
    if (p == NULL || set_add(&h->pools, p) != 0) {
        free(p);
        return -1;
    }
    h->default_pool = p;
    return 0;
}

/* ---- device ---- */

static void host_close(flyt_backend *b)
{
    struct host_backend *h = HB(b);
    hf_runner_stop(h->hf); /* what is still queued runs first */
    drop_all(h);
    free(h->allocs);
    free(h->mapped);
    free(h->streams.items);
    free(h->events.items);
    free(h->modules.items);
    free(h->pools.items);
    free(h->vranges.items);
    free(h->vmems.items);
    free(h->arrays.items);
    free(h->mipmaps.items);
    free(h->graphs.items);
    free(h->execs.items);
    free(h->uobjs.items);
    for (size_t i = 0; i < h->nstaging; i++)
        free((char *)h->staging_cache[i] - STAGING_HDR);
    free(h);
}

static CUresult host_device_count(flyt_backend *b, int *count)
{
    (void)b;
    *count = 1;
    return CUDA_SUCCESS;
}

static CUresult host_device_props(flyt_backend *b, struct cudaDeviceProp *out)
{
    *out = HB(b)->props;
    return CUDA_SUCCESS;
}

static CUresult host_device_attr(flyt_backend *b, int attr, int *value)
{
    struct host_backend *h = HB(b);
    if (attr <= 0 || attr >= HOST_ATTR_MAX || !h->attr_known[attr])
        return CUDA_ERROR_INVALID_VALUE;
    *value = h->attr[attr];
    return CUDA_SUCCESS;
}

/* A device synchronise waits for the fake kernel FLYT_HOST_BACKEND_SYNC_MS
 * says runs (a test hook: a kernel that runs long, or never ends). */
static void fake_kernel_time(long ms)
{
    while (ms < 0)
        pause();
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static CUresult host_device_sync(flyt_backend *b)
{
    hf_drain(HB(b)->hf, NULL, HF_EVERY);
    fake_kernel_time(HB(b)->sync_ms);
    flyt_host_fake_print(HB(b)->print_points++);
    return CUDA_SUCCESS;
}

static CUresult host_device_reset(flyt_backend *b)
{
    struct host_backend *h = HB(b);
    hf_drain(h->hf, NULL, HF_EVERY);
    drop_all(h);
    reset_context_state(h);
    return make_default_pool(h) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult host_get_limit(flyt_backend *b, int limit, uint64_t *value)
{
    if (limit < 0 || limit >= HOST_LIMIT_COUNT)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *value = HB(b)->limits[limit];
    return CUDA_SUCCESS;
}

static CUresult host_set_limit(flyt_backend *b, int limit, uint64_t value)
{
    struct host_backend *h = HB(b);
    if (limit < 0 || limit >= HOST_LIMIT_COUNT || limit == CU_LIMIT_SHMEM_SIZE ||
        limit == CU_LIMIT_CIG_ENABLED)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
        return CUDA_ERROR_INVALID_VALUE;
    if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE &&
        value > (uint64_t)h->props.persistingL2CacheMaxSize)
        return CUDA_ERROR_INVALID_VALUE;
    h->limits[limit] = value;
    return CUDA_SUCCESS;
}

static CUresult host_mem_info(flyt_backend *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct host_backend *h = HB(b);
    *free_bytes = h->total - h->used;
    *total_bytes = h->total;
    return CUDA_SUCCESS;
}

static CUresult host_pci_bus_id(flyt_backend *b, char *buf, int len)
{
    (void)b;
    if (buf == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)len, "0000:00:00.0");
    return CUDA_SUCCESS;
}

static CUresult host_prio_range(flyt_backend *b, int *least, int *greatest)
{
    (void)b;
    *least = HOST_PRIO_LEAST;
    *greatest = HOST_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

static CUresult host_get_cache_config(flyt_backend *b, int *config)
{
    *config = HB(b)->cache_config;
    return CUDA_SUCCESS;
}

static CUresult host_set_cache_config(flyt_backend *b, int config)
{
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    HB(b)->cache_config = config;
    return CUDA_SUCCESS;
}

static CUresult host_get_ctx_flags(flyt_backend *b, unsigned *flags)
{
    *flags = HB(b)->ctx_flags;
    return CUDA_SUCCESS;
}

static CUresult host_set_ctx_flags(flyt_backend *b, unsigned flags)
{
    if ((flags & ~(unsigned)CU_CTX_FLAGS_MASK) || (flags & CU_CTX_SCHED_MASK) > CU_CTX_SCHED_BLOCKING_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    HB(b)->ctx_flags = flags;
    return CUDA_SUCCESS;
}

/* The host backend runs no kernels: a share only changes the SM count the
 * device reports, after the same checks the cuda backend makes. */
static CUresult host_set_sm_share(flyt_backend *b, unsigned granularity, const int *groups,
                                  int ngroups, int *sm_count)
{
    struct host_backend *h = HB(b);
    if (granularity == 0 || ngroups <= 0 || !groups || !sm_count)
        return CUDA_ERROR_INVALID_VALUE;
    int avail = h->sm_total / (int)granularity;
    for (int i = 0; i < ngroups; i++) {
        if (groups[i] < 0 || groups[i] >= avail)
            return CUDA_ERROR_INVALID_VALUE;
        for (int k = 0; k < i; k++)
            if (groups[k] == groups[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    int count = ngroups * (int)granularity;
    h->props.multiProcessorCount = count;
    set_attr(h, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, count);
    *sm_count = count;
    return CUDA_SUCCESS;
}

static CUresult host_stream_create(flyt_backend *b, unsigned flags, int priority, flyt_bhandle *stream);

/* A resize moves every stream as the cuda backend does (a new stream of the
 * same flags and priority, remapped behind its id; the default streams are
 * the new context's, with default attributes), so that CI sees what a
 * resize keeps and loses. No kernels here: the SM count is all that changes. */
static CUresult host_resize_sm_share(flyt_backend *b, unsigned granularity, const int *groups,
                                     int ngroups, int *sm_count,
                                     void (*remap)(void *arg, flyt_bhandle old, flyt_bhandle now),
                                     void *arg)
{
    struct host_backend *h = HB(b);
    for (size_t i = 0; i < h->streams.n; i++)
        if (capture_of(h, h->streams.items[i])) /* its graph is tied to it: not moved */
            return CUDA_ERROR_NOT_PERMITTED;
    CUresult r = host_set_sm_share(b, granularity, groups, ngroups, sm_count);
    if (r != CUDA_SUCCESS)
        return r;
    size_t n = h->streams.n;
    struct hstream **olds = malloc((n ? n : 1) * sizeof *olds);
    if (!olds)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (n) /* no streams: items may be NULL, and memcpy's source must not be */
        memcpy(olds, h->streams.items, n * sizeof *olds);
    for (size_t k = 0; k < n && r == CUDA_SUCCESS; k++) {
        flyt_bhandle now = NULL;
        r = host_stream_create(b, olds[k]->flags, olds[k]->priority, &now);
        if (r != CUDA_SUCCESS)
            break; /* out of memory: the streams not yet moved stay as they are */
        remap(arg, olds[k], now);
        set_del(&h->streams, olds[k]);
        hg_cap_drop(&olds[k]->cap);
        free(olds[k]);
    }
    free(olds);
    if (r != CUDA_SUCCESS)
        return r;
    attrs_default(&h->null_attrs);
    attrs_default(&h->pt_attrs);
    return CUDA_SUCCESS;
}

static CUresult host_driver_version(flyt_backend *b, int *version)
{
    (void)b;
    *version = 13000;
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

static CUresult host_mem_alloc(flyt_backend *b, uint64_t size, uint64_t *dptr)
{
    return alloc_insert(HB(b), size, NULL, 0, dptr);
}

static CUresult host_mem_free(flyt_backend *b, uint64_t dptr)
{
    return alloc_free(HB(b), dptr);
}

static CUresult host_mem_alloc_pitch(flyt_backend *b, uint64_t width, uint64_t height, uint64_t *dptr,
                                     uint64_t *pitch)
{
    if (width == 0 || height == 0 || width > UINT64_MAX - HOST_PITCH_ALIGN)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = (width + HOST_PITCH_ALIGN - 1) / HOST_PITCH_ALIGN * HOST_PITCH_ALIGN, size;
    if (__builtin_mul_overflow(p, height, &size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = alloc_insert(HB(b), size, NULL, 0, dptr);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

static CUresult host_mem_alloc_async(flyt_backend *b, uint64_t size, flyt_bhandle pool,
                                     flyt_bhandle stream, uint64_t *dptr)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (capture_of(h, stream)) /* memory nodes need a GPU */
        return capture_refused(capture_of(h, stream));
    if (pool == NULL)
        pool = h->default_pool;
    else if (!set_has(&h->pools, pool))
        return CUDA_ERROR_INVALID_HANDLE;
    if (((struct hpool *)pool)->imported)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: imported pools make no allocations */
    return alloc_insert(h, size, pool, 0, dptr);
}

static CUresult host_mem_free_async(flyt_backend *b, uint64_t dptr, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (capture_of(h, stream))
        return capture_refused(capture_of(h, stream));
    return alloc_free(h, dptr);
}

static CUresult host_pointer_attrs(flyt_backend *b, uint64_t ptr, flyt_rep_pointer_attrs *out)
{
    struct host_backend *h = HB(b);
    memset(out, 0, sizeof *out);
    long i = find_alloc(h, ptr);
    if (i < 0) {
        out->type = cudaMemoryTypeUnregistered;
        out->device = cudaInvalidDeviceId;
        return CUDA_SUCCESS;
    }
    out->type = cudaMemoryTypeDevice;
    out->device = 0;
    out->device_pointer = ptr;
    out->base = h->allocs[i].addr;
    out->size = h->allocs[i].size;
    return CUDA_SUCCESS;
}

static CUresult host_pool_default(flyt_backend *b, flyt_bhandle *pool)
{
    struct host_backend *h = HB(b);
    if (h->default_pool == NULL && make_default_pool(h) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = h->default_pool;
    return CUDA_SUCCESS;
}

static CUresult host_pool_create(flyt_backend *b, uint64_t max_size, unsigned handle_types,
                                 flyt_bhandle *pool)
{
    struct host_backend *h = HB(b);
    if (handle_types & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    struct hpool *p = new_pool(max_size);
    if (p == NULL || set_add(&h->pools, p) != 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->handle_types = handle_types;
    *pool = p;
    return CUDA_SUCCESS;
}

static CUresult host_pool_destroy(flyt_backend *b, flyt_bhandle pool)
{
    struct host_backend *h = HB(b);
    if (pool == NULL || !set_has(&h->pools, pool))
        return CUDA_ERROR_INVALID_HANDLE;
    if (pool == h->default_pool)
        return CUDA_ERROR_INVALID_VALUE;
    /* As in CUDA, outstanding allocations stay valid; they just leave the pool. */
    for (size_t i = 0; i < h->nallocs; i++)
        if (h->allocs[i].pool == pool)
            h->allocs[i].pool = NULL;
    for (size_t i = 0; i < h->nallocs; i++)
        if (h->allocs[i].home == pool)
            h->allocs[i].home = NULL;
    set_del(&h->pools, pool);
    free(pool);
    return CUDA_SUCCESS;
}

static CUresult host_pool_trim(flyt_backend *b, flyt_bhandle pool, uint64_t keep_bytes)
{
    (void)keep_bytes;
    return pool && set_has(&HB(b)->pools, pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult host_pool_set_attr(flyt_backend *b, flyt_bhandle pool, int attr, uint64_t value)
{
    if (pool == NULL || !set_has(&HB(b)->pools, pool))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hpool *p = pool;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = value ? 1 : 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = value;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: /* may only be reset to zero */
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->used_high = p->used;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult host_pool_get_attr(flyt_backend *b, flyt_bhandle pool, int attr, uint64_t *value)
{
    if (pool == NULL || !set_has(&HB(b)->pools, pool))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hpool *p = pool;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *value = p->release_threshold;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: /* nothing is kept in reserve */
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *value = p->used;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *value = p->used_high;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ---- copies ---- */

static void *host_staging_get(flyt_backend *b, size_t want, size_t *got)
{
    struct host_backend *h = HB(b);
    size_t n = want == 0 ? 1 : want < HOST_STAGING_MAX ? want : HOST_STAGING_MAX;
    for (size_t i = 0; i < h->nstaging; i++) {
        void *buf = h->staging_cache[i];
        size_t cap;
        memcpy(&cap, (char *)buf - STAGING_HDR, sizeof cap);
        if (cap >= n) {
            h->staging_cache[i] = h->staging_cache[--h->nstaging];
            *got = n;
            return buf;
        }
    }
    char *raw = malloc(STAGING_HDR + n);
    if (raw == NULL)
        return NULL;
    memcpy(raw, &n, sizeof n);
    *got = n;
    return raw + STAGING_HDR;
}

static void host_staging_put(flyt_backend *b, void *staging)
{
    struct host_backend *h = HB(b);
    if (staging == NULL)
        return;
    if (h->nstaging < HOST_STAGING_CACHE) {
        h->staging_cache[h->nstaging++] = staging;
        return;
    }
    free((char *)staging - STAGING_HDR);
}

static CUresult host_htod_2d(flyt_backend *b, uint64_t dst, uint64_t dst_pitch, void *staging,
                             uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    CUresult r = stream_ready(h, stream) ? check_2d(h, dst, dst_pitch, width, rows) : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS && capture_of(h, stream))
        r = CUDA_ERROR_NOT_SUPPORTED; /* the bytes came with the request (handlers refuse it first) */
    if (r == CUDA_SUCCESS && width && rows)
        for (uint64_t i = 0; i < rows; i++)
            memcpy((char *)(uintptr_t)(dst + i * dst_pitch), (char *)staging + i * width, width);
    host_staging_put(b, staging); /* ours now, whatever happened */
    return r;
}

static CUresult host_dtoh_2d(flyt_backend *b, void *dst, uint64_t src, uint64_t src_pitch,
                             uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (capture_of(h, stream))
        return capture_unsupported(capture_of(h, stream)); /* it waits for the data */
    CUresult r = check_2d(h, src, src_pitch, width, rows);
    if (r != CUDA_SUCCESS || !width || !rows)
        return r;
    for (uint64_t i = 0; i < rows; i++)
        memcpy((char *)dst + i * width, (const char *)(uintptr_t)(src + i * src_pitch), width);
    return CUDA_SUCCESS;
}

/* Shared client memory needs no pinning here; copies run at once. */
static CUresult host_host_register(flyt_backend *b, void *ptr, uint64_t size)
{
    (void)b;
    return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The region is already at the client's address in this process: the
 * device pointer is the host pointer, as on a GPU with
 * CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM. */
static CUresult host_host_register_mapped(flyt_backend *b, void *ptr, uint64_t size, unsigned flags,
                                         uint64_t *dptr)
{
    struct host_backend *h = HB(b);
    if (!ptr || !size || (flags & ~(unsigned)CU_MEMHOSTREGISTER_READ_ONLY))
        return CUDA_ERROR_INVALID_VALUE;
    if (h->nmapped == h->cap_mapped) {
        size_t cap = h->cap_mapped ? h->cap_mapped * 2 : 16;
        struct halloc *n = realloc(h->mapped, cap * sizeof *n);
        if (n == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        h->mapped = n;
        h->cap_mapped = cap;
    }
    h->mapped[h->nmapped++] = (struct halloc){.addr = (uint64_t)(uintptr_t)ptr, .size = size};
    *dptr = (uint64_t)(uintptr_t)ptr;
    return CUDA_SUCCESS;
}

static CUresult host_host_unregister(flyt_backend *b, void *ptr)
{
    struct host_backend *h = HB(b);
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < h->nmapped; i++)
        if (h->mapped[i].addr == (uint64_t)(uintptr_t)ptr) {
            h->mapped[i] = h->mapped[--h->nmapped];
            break;
        }
    return CUDA_SUCCESS;
}

static CUresult host_htod_host(flyt_backend *b, uint64_t dst, const void *src, uint64_t n,
                               flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = check_2d(h, dst, n, n, 1);
    struct hg_cap *cap = capture_of(h, stream);
    if (r == CUDA_SUCCESS && cap) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .dst_pitch = n,
                        .src = (uint64_t)(uintptr_t)src, .src_pitch = n, .src_region = 1,
                        .width = n, .rows = 1};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    if (r == CUDA_SUCCESS && n)
        memcpy((char *)(uintptr_t)dst, src, n);
    return r;
}

static CUresult host_dtoh_host(flyt_backend *b, void *dst, uint64_t src, uint64_t n,
                               flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    struct hg_cap *cap = stream_ready(h, stream) ? capture_of(h, stream) : NULL;
    if (cap == NULL)
        return host_dtoh_2d(b, dst, src, n, n, 1, stream);
    CUresult r = check_2d(h, src, n, n, 1);
    flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = (uint64_t)(uintptr_t)dst, .dst_pitch = n,
                    .dst_region = 1, .src = src, .src_pitch = n, .width = n, .rows = 1};
    return r == CUDA_SUCCESS ? hg_cap_record(cap, &p, NULL, NULL) : r;
}

static CUresult host_dtod_2d(flyt_backend *b, uint64_t dst, uint64_t dst_pitch, uint64_t src,
                             uint64_t src_pitch, uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = check_2d(h, dst, dst_pitch, width, rows);
    if (r == CUDA_SUCCESS)
        r = check_2d(h, src, src_pitch, width, rows);
    struct hg_cap *cap = capture_of(h, stream);
    if (r == CUDA_SUCCESS && cap) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .dst_pitch = dst_pitch,
                        .src = src, .src_pitch = src_pitch, .width = width, .rows = rows};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    if (r != CUDA_SUCCESS || !width || !rows)
        return r;
    for (uint64_t i = 0; i < rows; i++)
        memmove((char *)(uintptr_t)(dst + i * dst_pitch), (const char *)(uintptr_t)(src + i * src_pitch),
                width);
    return CUDA_SUCCESS;
}

static CUresult host_memset_2d(flyt_backend *b, uint64_t dst, uint64_t pitch, uint32_t value,
                               unsigned elem_size, uint64_t width, uint64_t rows, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = check_2d(h, dst, pitch, width, rows);
    struct hg_cap *cap = capture_of(h, stream);
    if (r == CUDA_SUCCESS && cap) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_MEMSET, .elem_size = elem_size, .dst = dst,
                        .dst_pitch = pitch, .width = width, .rows = rows, .value = value};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    if (r != CUDA_SUCCESS || !width || !rows)
        return r;
    /* stands in for a launch, which flushes what earlier kernels printed */
    flyt_host_fake_print(h->print_points++);
    for (uint64_t i = 0; i < rows; i++) {
        char *row = (char *)(uintptr_t)(dst + i * pitch);
        if (elem_size == 1)
            memset(row, (int)(value & 0xff), width);
        for (uint64_t x = 0; elem_size > 1 && x + elem_size <= width; x += elem_size)
            memcpy(row + x, &value, elem_size); /* little-endian: the low bytes */
    }
    return CUDA_SUCCESS;
}

/* ---- streams ---- */

static CUresult host_stream_create(flyt_backend *b, unsigned flags, int priority, flyt_bhandle *stream)
{
    struct host_backend *h = HB(b);
    if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    struct hstream *s = malloc(sizeof *s);
    if (s == NULL || set_add(&h->streams, s) != 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* CUDA clamps priorities into the device's range. */
    if (priority > HOST_PRIO_LEAST)
        priority = HOST_PRIO_LEAST;
    if (priority < HOST_PRIO_GREATEST)
        priority = HOST_PRIO_GREATEST;
    s->flags = flags;
    s->priority = priority;
    attrs_default(&s->attrs);
    memset(&s->cap, 0, sizeof s->cap);
    *stream = s;
    return CUDA_SUCCESS;
}

static int is_created_stream(const struct host_backend *h, flyt_bhandle s)
{
    return s != FLYT_BSTREAM_DEFAULT && s != FLYT_BSTREAM_LEGACY && s != FLYT_BSTREAM_PER_THREAD &&
           set_has(&h->streams, s);
}

static CUresult host_stream_destroy(flyt_backend *b, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (!is_created_stream(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    stream_ready(h, stream); /* its host functions still run; its handle then goes */
    set_del(&h->streams, stream);
    hg_cap_drop(&((struct hstream *)stream)->cap);
    free(stream);
    return CUDA_SUCCESS;
}

static CUresult host_stream_sync(flyt_backend *b, flyt_bhandle stream)
{
    struct hg_cap *cap = capture_of(HB(b), stream);
    if (cap)
        return capture_unsupported(cap);
    return stream_ready(HB(b), stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult host_stream_query(flyt_backend *b, flyt_bhandle stream)
{
    struct host_backend *h = HB(b);
    if (stream_ok(h, stream) && !capture_of(h, stream)) {
        enum hf_kind kind = stream_kind(h, &stream);
        if (hf_pending(h->hf, stream, kind))
            return CUDA_ERROR_NOT_READY;
    }
    return host_stream_sync(b, stream);
}

static CUresult host_stream_wait_event(flyt_backend *b, flyt_bhandle stream, flyt_bhandle event,
                                       unsigned flags)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream) || event == NULL || !set_has(&h->events, event))
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct hevent *e = event;
    struct hg_cap *cap = capture_of(h, stream);
    if (hg_capturing(&e->cap) && is_created_stream(h, stream)) /* a fork or a join */
        return cap ? hg_cap_merge(cap, &e->cap) : hg_cap_copy(&((struct hstream *)stream)->cap, &e->cap);
    if (cap && (flags & CU_EVENT_WAIT_EXTERNAL)) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT, .value = (uint64_t)(uintptr_t)event};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    return CUDA_SUCCESS;
}

static CUresult host_stream_get_flags(flyt_backend *b, flyt_bhandle stream, unsigned *flags)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    *flags = is_created_stream(h, stream) ? ((struct hstream *)stream)->flags : 0;
    return CUDA_SUCCESS;
}

static CUresult host_stream_get_priority(flyt_backend *b, flyt_bhandle stream, int *priority)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    *priority = is_created_stream(h, stream) ? ((struct hstream *)stream)->priority : 0;
    return CUDA_SUCCESS;
}

/* A stream's kept attributes; NULL for a stream this backend does not have. */
static struct hattrs *attrs_of(struct host_backend *h, flyt_bhandle s)
{
    if (s == FLYT_BSTREAM_DEFAULT || s == FLYT_BSTREAM_LEGACY)
        return &h->null_attrs;
    if (s == FLYT_BSTREAM_PER_THREAD)
        return &h->pt_attrs;
    return set_has(&h->streams, s) ? &((struct hstream *)s)->attrs : NULL;
}

/* The slot of attribute id, -1 for one CUDA does not keep on streams. */
static int attr_slot(uint64_t id)
{
    for (size_t i = 0; i < HOST_STREAM_ATTRS; i++)
        if ((uint64_t)host_stream_attr_ids[i] == id)
            return (int)i;
    return -1;
}

static CUresult host_stream_set_attr(struct host_backend *h, flyt_bhandle s, uint64_t id,
                                     const CUstreamAttrValue *v)
{
    struct hattrs *a = attrs_of(h, s);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
        if (is_created_stream(h, s))
            ((struct hstream *)s)->priority = v->priority < HOST_PRIO_GREATEST ? HOST_PRIO_GREATEST
                                              : v->priority > HOST_PRIO_LEAST  ? HOST_PRIO_LEAST
                                                                               : v->priority;
        return CUDA_SUCCESS;
    }
    int slot = attr_slot(id);
    if (slot < 0)
        return CUDA_ERROR_INVALID_VALUE;
    a->v[slot] = *v;
    return CUDA_SUCCESS;
}

static CUresult host_stream_get_attr(struct host_backend *h, flyt_bhandle s, uint64_t id,
                                     CUstreamAttrValue *v)
{
    struct hattrs *a = attrs_of(h, s);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    memset(v, 0, sizeof *v);
    if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
        v->priority = is_created_stream(h, s) ? ((struct hstream *)s)->priority : 0;
        return CUDA_SUCCESS;
    }
    int slot = attr_slot(id);
    if (slot < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *v = a->v[slot];
    return CUDA_SUCCESS;
}

static CUresult host_stream_copy_attrs(struct host_backend *h, flyt_bhandle dst, flyt_bhandle src)
{
    struct hattrs *to = attrs_of(h, dst), *from = attrs_of(h, src);
    if (!to || !from)
        return CUDA_ERROR_INVALID_HANDLE;
    *to = *from;
    if (is_created_stream(h, dst))
        ((struct hstream *)dst)->priority =
            is_created_stream(h, src) ? ((struct hstream *)src)->priority : 0;
    return CUDA_SUCCESS;
}

static CUresult host_stream_host_func(flyt_backend *b, flyt_bhandle stream, flyt_host_func_cb fn,
                                      void *arg)
{
    if (!stream_ok(HB(b), stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct hg_cap *cap = capture_of(HB(b), stream);
    if (cap) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_HOST};
        return hg_cap_record(cap, &p, fn, arg);
    }
    enum hf_kind kind = stream_kind(HB(b), &stream);
    return hf_enqueue(HB(b)->hf, stream, kind, fn, arg);
}

/* ---- events ---- */

#define EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)

static CUresult host_event_create(flyt_backend *b, unsigned flags, flyt_bhandle *event)
{
    struct host_backend *h = HB(b);
    if ((flags & ~(unsigned)EVENT_FLAGS) ||
        ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    struct hevent *e = calloc(1, sizeof *e);
    if (e == NULL || set_add(&h->events, e) != 0) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->flags = flags;
    *event = e;
    return CUDA_SUCCESS;
}

static int event_ok(const struct host_backend *h, flyt_bhandle e)
{
    return e != NULL && set_has(&h->events, e);
}

static CUresult host_event_destroy(flyt_backend *b, flyt_bhandle event)
{
    struct host_backend *h = HB(b);
    if (!event_ok(h, event))
        return CUDA_ERROR_INVALID_HANDLE;
    set_del(&h->events, event);
    hg_cap_drop(&((struct hevent *)event)->cap);
    free(event);
    return CUDA_SUCCESS;
}

static CUresult host_event_record(flyt_backend *b, flyt_bhandle event, flyt_bhandle stream,
                                  unsigned flags)
{
    struct host_backend *h = HB(b);
    if (!event_ok(h, event) || !stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct hevent *e = event;
    struct hg_cap *cap = capture_of(h, stream);
    if (cap && (flags & CU_EVENT_RECORD_EXTERNAL)) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD, .value = (uint64_t)(uintptr_t)event};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    if (cap) /* where the capture stands, for the streams that will wait for it */
        return hg_cap_copy(&e->cap, cap);
    hg_cap_drop(&e->cap);
    clock_gettime(CLOCK_MONOTONIC, &e->when);
    e->recorded = 1;
    return CUDA_SUCCESS;
}

static CUresult host_event_query(flyt_backend *b, flyt_bhandle event)
{
    return event_ok(HB(b), event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult host_event_sync(flyt_backend *b, flyt_bhandle event)
{
    return event_ok(HB(b), event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* This backend runs every stream's work when it is enqueued: whatever the
 * exporting session recorded has happened, so an opened interprocess event
 * is one already reached. The handle only has to be recognised. */
static const char host_ipc_event_tag[] = "flyt host backend ipc event";

static CUresult host_ipc_event_export(flyt_backend *b, flyt_bhandle event,
                                      uint8_t handle[FLYT_IPC_HANDLE_BYTES])
{
    if (!event_ok(HB(b), event))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!(((struct hevent *)event)->flags & CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    memset(handle, 0, FLYT_IPC_HANDLE_BYTES);
    memcpy(handle, host_ipc_event_tag, sizeof host_ipc_event_tag);
    return CUDA_SUCCESS;
}

static CUresult host_ipc_event_import(flyt_backend *b, const uint8_t handle[FLYT_IPC_HANDLE_BYTES],
                                      flyt_bhandle *event)
{
    if (memcmp(handle, host_ipc_event_tag, sizeof host_ipc_event_tag) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = host_event_create(b, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, event);
    if (r == CUDA_SUCCESS)
        ((struct hevent *)*event)->recorded = 1;
    return r;
}

static CUresult host_event_elapsed(flyt_backend *b, flyt_bhandle start, flyt_bhandle end, float *ms)
{
    struct host_backend *h = HB(b);
    if (!event_ok(h, start) || !event_ok(h, end))
        return CUDA_ERROR_INVALID_HANDLE;
    const struct hevent *s = start, *e = end;
    /* As the driver does: no timing data, or never recorded. */
    if ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING || !s->recorded || !e->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    double d = (double)(e->when.tv_sec - s->when.tv_sec) * 1e3 +
               (double)(e->when.tv_nsec - s->when.tv_nsec) / 1e6;
    *ms = (float)d;
    return CUDA_SUCCESS;
}

/* ---- modules and kernels ---- */

#define FATBIN_MAGIC 0xBA55ED50u

/* A fatbinary (its header's sizes fit in `size`), an ELF image or PTX. */
static int image_plausible(const unsigned char *img, size_t size)
{
    if (size >= 16) {
        uint32_t magic;
        uint16_t hdr_size;
        uint64_t fat_size;
        memcpy(&magic, img, 4);
        memcpy(&hdr_size, img + 6, 2);
        memcpy(&fat_size, img + 8, 8);
        if (magic == FATBIN_MAGIC)
            return hdr_size >= 16 && hdr_size <= size && fat_size <= size - hdr_size;
    }
    if (size >= 64 && memcmp(img, "\x7f" "ELF", 4) == 0)
        return 1;
    /* PTX: text ending in its NUL (cuDNN loads one at cudnnCreate) */
    return img[size - 1] == '\0' && strstr((const char *)img, ".version") != NULL;
}

static CUresult host_module_load(flyt_backend *b, const void *image, size_t size, void *owned,
                                 flyt_bhandle *module)
{
    struct host_backend *h = HB(b);
    if (image == NULL || size == 0 || (owned != NULL && owned != image))
        return CUDA_ERROR_INVALID_VALUE;
    if (!image_plausible(image, size))
        return CUDA_ERROR_INVALID_IMAGE;
    struct hmodule *m = malloc(sizeof *m);
    void *copy = owned ? owned : malloc(size);
    if (m == NULL || copy == NULL || set_add(&h->modules, m) != 0) {
        free(m);
        if (copy != owned)
            free(copy);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (copy != owned)
        memcpy(copy, image, size);
    m->image = copy;
    m->size = size;
    m->globals = NULL;
    *module = m;
    return CUDA_SUCCESS;
}

static CUresult host_module_unload(flyt_backend *b, flyt_bhandle module)
{
    struct host_backend *h = HB(b);
    if (module == NULL || !set_del(&h->modules, module))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hmodule *m = module;
    globals_free(h, m);
    free(m->image);
    free(m);
    return CUDA_SUCCESS;
}

/* This backend cannot read kernel images, so every name a module is asked
 * for resolves, to one function without parameters that cannot run: the
 * lookups and attribute queries libraries make at start-up succeed, and
 * only a launch is refused. */
static char host_function;
/* The same for an entry whose PTX text declares one .u64 parameter first
 * (a pointer), so that the client's handling of parameter blocks is tested. */
static char host_function_ptr;

static int is_host_function(flyt_bhandle func)
{
    return func == &host_function || func == &host_function_ptr;
}

/* Whether module m's PTX text has ".entry NAME(.param .u64". */
static int entry_takes_u64(const struct hmodule *m, const char *name)
{
    char want[160];
    int n = snprintf(want, sizeof want, ".entry %s(.param .u64", name);
    return n > 0 && (size_t)n < sizeof want && memmem(m->image, m->size, want, (size_t)n) != NULL;
}

static CUresult host_func_get(flyt_backend *b, flyt_bhandle module, const char *name, flyt_bhandle *func)
{
    if (module == NULL || !set_has(&HB(b)->modules, module))
        return CUDA_ERROR_INVALID_HANDLE;
    if (name == NULL || func == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *func = entry_takes_u64(module, name) ? &host_function_ptr : &host_function;
    return CUDA_SUCCESS;
}

/* A module here holds no functions this backend could run. */
static CUresult host_module_func_names(flyt_backend *b, flyt_bhandle module, char *buf, size_t cap,
                                       size_t *len, uint32_t *count)
{
    (void)buf, (void)cap;
    if (module == NULL || !set_has(&HB(b)->modules, module))
        return CUDA_ERROR_INVALID_HANDLE;
    *len = 0;
    *count = 0;
    return CUDA_SUCCESS;
}

/* Like functions, every global name resolves: to zeroed memory of a size
 * large enough for the variables libraries set at start-up. */
#define HOST_GLOBAL_BYTES (64u << 10)

static CUresult host_global_get(flyt_backend *b, flyt_bhandle module, const char *name, uint64_t *dptr,
                                uint64_t *size)
{
    struct hmodule *m = module;
    if (module == NULL || !set_has(&HB(b)->modules, module))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hglobal *g = m->globals;
    while (g && strcmp(g->name, name) != 0)
        g = g->next;
    if (g == NULL) {
        g = calloc(1, sizeof *g);
        if (g == NULL || (g->name = strdup(name)) == NULL ||
            alloc_insert(HB(b), HOST_GLOBAL_BYTES, NULL, 0, &g->dptr) != CUDA_SUCCESS) {
            if (g)
                free(g->name);
            free(g);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memset((void *)(uintptr_t)g->dptr, 0, HOST_GLOBAL_BYTES);
        g->next = m->globals;
        m->globals = g;
    }
    *dptr = g->dptr;
    *size = HOST_GLOBAL_BYTES;
    return CUDA_SUCCESS;
}

static void globals_free(struct host_backend *h, struct hmodule *m)
{
    while (m->globals) {
        struct hglobal *g = m->globals;
        m->globals = g->next;
        alloc_free(h, g->dptr);
        free(g->name);
        free(g);
    }
}

static CUresult host_func_param_info(flyt_backend *b, flyt_bhandle func, uint32_t index,
                                     uint32_t *offset, uint32_t *size)
{
    (void)b;
    if (func == &host_function_ptr && index == 0) {
        *offset = 0;
        *size = 8;
        return CUDA_SUCCESS;
    }
    return is_host_function(func) ? CUDA_ERROR_INVALID_VALUE /* no (more) parameters */
                                  : CUDA_ERROR_INVALID_HANDLE;
}

/* What a small kernel of a Hopper GPU reports, built for the fake device's capability. */
static CUresult host_func_get_attr(flyt_backend *b, flyt_bhandle func, int attr, int *value)
{
    const struct host_backend *h = HB(b);
    if (!is_host_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 16; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = h->cc_major * 10 + h->cc_minor; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = 48 << 10; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = -1; break;
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

static CUresult host_func_set_attr(flyt_backend *b, flyt_bhandle func, int attr, int value)
{
    (void)b, (void)attr, (void)value;
    return is_host_function(func) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult host_func_set_cache(flyt_backend *b, flyt_bhandle func, int config)
{
    (void)b, (void)config;
    return is_host_function(func) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult host_launch(flyt_backend *b, flyt_bhandle func, const uint32_t grid[3],
                            const uint32_t block[3], uint32_t shared_mem, flyt_bhandle stream,
                            const void *params, uint32_t param_bytes, const flyt_launch_attr *attrs,
                            uint32_t attr_count)
{
    (void)b, (void)func, (void)grid, (void)block, (void)shared_mem, (void)stream;
    (void)params, (void)param_bytes, (void)attrs, (void)attr_count;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Occupancy as a Hopper SM would compute it for a kernel using only
 * threads and shared memory: 2048 threads, 32 blocks, 228 KiB per SM
 * (1 KiB of it reserved per block), 227 KiB per block at most. */
#define HOST_SM_THREADS 2048
#define HOST_SM_BLOCKS 32
#define HOST_SM_SMEM (228u << 10)
#define HOST_BLOCK_SMEM (227u << 10)

static CUresult host_occupancy(flyt_backend *b, flyt_bhandle func, int block_size, uint64_t dyn_smem,
                               unsigned flags, int *num_blocks)
{
    (void)b, (void)flags;
    if (!is_host_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (block_size <= 0 || block_size > 1024 || dyn_smem > HOST_BLOCK_SMEM)
        return CUDA_ERROR_INVALID_VALUE;
    int n = HOST_SM_THREADS / block_size;
    if (n > HOST_SM_BLOCKS)
        n = HOST_SM_BLOCKS;
    uint64_t by_smem = HOST_SM_SMEM / (dyn_smem + 1024);
    *num_blocks = by_smem < (uint64_t)n ? (int)by_smem : n;
    return CUDA_SUCCESS;
}

static CUresult host_occupancy_smem(flyt_backend *b, flyt_bhandle func, int num_blocks, int block_size,
                                    uint64_t *smem)
{
    (void)b;
    if (!is_host_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (num_blocks <= 0 || block_size <= 0 || block_size > 1024 ||
        num_blocks * block_size > HOST_SM_THREADS || num_blocks > HOST_SM_BLOCKS)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t per = HOST_SM_SMEM / (uint64_t)num_blocks - 1024;
    *smem = per < HOST_BLOCK_SMEM ? per : HOST_BLOCK_SMEM;
    return CUDA_SUCCESS;
}

/* Clusters of a Hopper GPU: at most 8 blocks portably (16 when allowed),
 * and as many clusters at once as the SMs hold one block each. */
static CUresult host_occupancy_cluster(flyt_backend *b, flyt_bhandle func, unsigned what,
                                       const uint32_t grid[3], const uint32_t block[3],
                                       uint32_t shared_mem, const flyt_launch_attr *attrs,
                                       uint32_t attr_count, int *count)
{
    (void)grid, (void)block, (void)shared_mem;
    if (!is_host_function(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (what == FLYT_CLUSTER_MAX_SIZE) {
        *count = 8;
        return CUDA_SUCCESS;
    }
    unsigned cluster = 1;
    for (uint32_t i = 0; i < attr_count; i++)
        if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            CUlaunchAttributeValue v;
            memcpy(&v, attrs[i].value, sizeof v);
            cluster = v.clusterDim.x * v.clusterDim.y * v.clusterDim.z;
        }
    *count = cluster ? HB(b)->sm_total / (int)cluster : 0;
    return CUDA_SUCCESS;
}

/* ---- graphs (backend_host_graph.c): copies, memsets, host functions,
 * events and child graphs; kernels and memory nodes need a GPU ---- */

static CUresult host_capture_begin(flyt_backend *b, flyt_bhandle stream, int mode, flyt_bhandle *graph)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!is_created_stream(h, stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct hg_cap *c = &((struct hstream *)stream)->cap;
    CUresult r = hg_cap_begin(c, ++h->capture_ids, NULL, NULL, 0);
    if (r == CUDA_SUCCESS && set_add(&h->graphs, c->sess->graph) != 0) {
        hg_cap_drop(c);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        *graph = c->sess->graph;
    return r;
}

static CUresult host_capture_end(flyt_backend *b, flyt_bhandle stream, flyt_bhandle *graph)
{
    struct host_backend *h = HB(b);
    if (!is_created_stream(h, stream))
        return stream_ok(h, stream) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_HANDLE;
    struct hg_cap *c = &((struct hstream *)stream)->cap;
    if (c->sess == NULL || c->sess->ended)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct hg_session *sess = c->sess;
    sess->ended = 1; /* the streams that joined it stop capturing too */
    *graph = sess->invalid ? NULL : sess->graph;
    if (sess->invalid && !sess->borrowed) {
        set_del(&h->graphs, sess->graph);
        hg_graph_free(sess->graph);
    }
    hg_cap_drop(c);
    return *graph ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}

static CUresult host_capture_to_graph(flyt_backend *b, flyt_bhandle stream, flyt_bhandle graph,
                                      const flyt_bhandle *deps, size_t n, int mode)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!is_created_stream(h, stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    return hg_cap_begin(&((struct hstream *)stream)->cap, ++h->capture_ids, graph,
                        (struct hg_node *const *)deps, n);
}

static void huobj_destroyed(void *arg)
{
    struct huobj *u = arg;
    set_del(&u->h->uobjs, u);
    u->destroy(u->arg);
    free(u);
}

static CUresult host_user_object_create(flyt_backend *b, flyt_host_func_cb destroy, void *arg,
                                        unsigned refs, unsigned flags, flyt_bhandle *obj)
{
    struct host_backend *h = HB(b);
    if (refs == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    struct huobj *u = calloc(1, sizeof *u);
    if (u == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *u = (struct huobj){.h = h, .destroy = destroy, .arg = arg};
    CUresult r = hg_uobj_new(huobj_destroyed, u, refs, &u->obj);
    if (r == CUDA_SUCCESS && set_add(&h->uobjs, u) != 0) {
        hg_uobj_forget(u->obj);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(u);
        return r;
    }
    *obj = u;
    return CUDA_SUCCESS;
}

/* cuUserObjectRetain/Release, cuGraphRetain/ReleaseUserObject (a: the
 * plain call's translated arguments). */
static CUresult host_user_object_ref(struct host_backend *h, uint32_t id, const uint64_t *a)
{
    int graph = id == FLYT_CALL_cuGraphRetainUserObject || id == FLYT_CALL_cuGraphReleaseUserObject;
    struct huobj *u = (struct huobj *)(uintptr_t)a[graph];
    unsigned count = (unsigned)a[graph + 1];
    if (!set_has(&h->uobjs, u) || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct hg_graph *g = (struct hg_graph *)(uintptr_t)a[0];
    switch (id) {
    case FLYT_CALL_cuUserObjectRetain: hg_uobj_retain(u->obj, count); return CUDA_SUCCESS;
    case FLYT_CALL_cuUserObjectRelease: return hg_uobj_release(u->obj, count);
    case FLYT_CALL_cuGraphRetainUserObject:
        if (a[3] & ~(uint64_t)CU_GRAPH_USER_OBJECT_MOVE)
            return CUDA_ERROR_INVALID_VALUE;
        return hg_graph_retain(g, u->obj, count, (a[3] & CU_GRAPH_USER_OBJECT_MOVE) != 0);
    default: return hg_graph_release(g, u->obj, count);
    }
}

static CUresult host_cond_handle_create(struct host_backend *h, const uint64_t *a, void *out)
{
    if (a[1] == 0 || a[4] & ~(uint64_t)CU_GRAPH_COND_ASSIGN_DEFAULT)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v = hg_cond_handle(++h->cond_serial, (unsigned)a[3], (unsigned)a[4]);
    memcpy(out, &v, sizeof v);
    return CUDA_SUCCESS;
}

static CUresult host_capture_mode(flyt_backend *b, int mode)
{
    (void)b; /* nothing here refuses calls during a capture but the stream's own */
    return mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED
               ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult host_capture_info(flyt_backend *b, flyt_bhandle stream, int *status, uint64_t *id,
                                  flyt_bhandle *graph, const flyt_bhandle **deps, size_t *ndeps)
{
    struct host_backend *h = HB(b);
    if (!stream_ok(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hg_cap *c = is_created_stream(h, stream) ? &((struct hstream *)stream)->cap : NULL;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    *id = 0;
    *graph = NULL;
    *deps = NULL;
    *ndeps = 0;
    if (c == NULL || c->sess == NULL || c->sess->ended)
        return CUDA_SUCCESS;
    *id = c->sess->id;
    if (c->sess->invalid) {
        *status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_SUCCESS;
    }
    *status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    *graph = c->sess->graph;
    *deps = (const flyt_bhandle *)c->deps;
    *ndeps = c->ndeps;
    return CUDA_SUCCESS;
}

static CUresult host_capture_deps(flyt_backend *b, flyt_bhandle stream, const flyt_bhandle *deps,
                                  size_t n, unsigned flags)
{
    struct hg_cap *c = capture_of(HB(b), stream);
    if (c == NULL)
        return CUDA_ERROR_ILLEGAL_STATE;
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        return CUDA_ERROR_INVALID_VALUE;
    return hg_cap_set_deps(c, (struct hg_node *const *)deps, n, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES);
}

static CUresult add_graph(struct host_backend *h, struct hg_graph *g, flyt_bhandle *out)
{
    if (g == NULL || set_add(&h->graphs, g) != 0) {
        hg_graph_free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = g;
    return CUDA_SUCCESS;
}

static CUresult host_graph_create(flyt_backend *b, unsigned flags, flyt_bhandle *graph)
{
    return flags ? CUDA_ERROR_INVALID_VALUE : add_graph(HB(b), hg_graph_new(), graph);
}

static CUresult host_graph_destroy(flyt_backend *b, flyt_bhandle graph)
{
    if (!set_del(&HB(b)->graphs, graph))
        return CUDA_ERROR_INVALID_VALUE;
    hg_graph_free(graph);
    return CUDA_SUCCESS;
}

static CUresult host_graph_clone(flyt_backend *b, flyt_bhandle graph, flyt_bhandle *clone)
{
    return add_graph(HB(b), hg_graph_clone(graph), clone);
}

static CUresult host_graph_instantiate(flyt_backend *b, flyt_bhandle graph, uint64_t flags,
                                       flyt_bhandle upload_stream, flyt_bhandle *exec,
                                       flyt_bhandle *err_node)
{
    struct host_backend *h = HB(b);
    *err_node = NULL;
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) && !stream_ok(h, upload_stream))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hexec *x = calloc(1, sizeof *x);
    if (x == NULL || (x->g = hg_graph_clone(graph)) == NULL || set_add(&h->execs, x) != 0) {
        if (x)
            hg_graph_free(x->g);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->flags = flags;
    *exec = x;
    return CUDA_SUCCESS;
}

static CUresult host_exec_destroy(flyt_backend *b, flyt_bhandle exec)
{
    if (!set_del(&HB(b)->execs, exec))
        return CUDA_ERROR_INVALID_VALUE;
    hg_graph_free(((struct hexec *)exec)->g);
    free(exec);
    return CUDA_SUCCESS;
}

static CUresult host_exec_update(flyt_backend *b, flyt_bhandle exec, flyt_bhandle graph, int *result,
                                 flyt_bhandle *err_node, flyt_bhandle *err_from)
{
    (void)b;
    struct hexec *x = exec;
    *err_node = *err_from = NULL;
    if (!hg_same_shape(x->g, graph)) {
        *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    struct hg_graph *g = hg_graph_clone(graph);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    hg_graph_free(x->g);
    x->g = g;
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

static CUresult host_graph_node_type(flyt_backend *b, flyt_bhandle node, unsigned *type)
{
    (void)b;
    *type = hg_node_type(node);
    return CUDA_SUCCESS;
}

static CUresult host_graph_nodes(flyt_backend *b, flyt_bhandle graph, unsigned which, flyt_bhandle *out,
                                 size_t *n)
{
    (void)b;
    if (which >= FLYT_GNODES_DEPS)
        hg_node_edges(graph, which, out, n);
    else
        hg_nodes(graph, which, out, n);
    return CUDA_SUCCESS;
}

static CUresult host_graph_dot(flyt_backend *b, flyt_bhandle graph, unsigned flags, char **text)
{
    (void)b, (void)flags;
    *text = hg_dot(graph);
    return *text ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* A node's device sides must be allocations; host sides were checked
 * against their region by the server. */
static CUresult check_node(struct host_backend *h, const flyt_gnode *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return check_2d(h, p->dst, p->dst_pitch, p->width, p->rows);
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUresult r = p->dst_region ? CUDA_SUCCESS : check_2d(h, p->dst, p->dst_pitch, p->width, p->rows);
        return r != CUDA_SUCCESS || p->src_region ? r : check_2d(h, p->src, p->src_pitch, p->width, p->rows);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return event_ok(h, (flyt_bhandle)(uintptr_t)p->value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    default:
        return CUDA_SUCCESS;
    }
}

static CUresult host_graph_add_node(flyt_backend *b, flyt_bhandle graph, const flyt_bhandle *deps,
                                    size_t ndeps, const flyt_gnode *p, const void *params,
                                    flyt_host_func_cb host_fn, void *host_arg, flyt_bhandle *node,
                                    uint64_t *dptr)
{
    (void)params;
    CUresult r = check_node(HB(b), p);
    if (r == CUDA_SUCCESS)
        r = hg_add(graph, (struct hg_node *const *)deps, ndeps, p, host_fn, host_arg,
                   (struct hg_node **)node);
    for (uint64_t i = 0; r == CUDA_SUCCESS && p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && i < p->rows; i++)
        dptr[i] = (uint64_t)(uintptr_t)hg_body(*node, i);
    return r;
}

static CUresult host_graph_add_deps(flyt_backend *b, flyt_bhandle graph, const flyt_bhandle *from,
                                    const flyt_bhandle *to, size_t n, int remove)
{
    (void)b;
    return hg_add_deps(graph, (struct hg_node *const *)from, (struct hg_node *const *)to, n, remove);
}

static CUresult host_graph_node_get(flyt_backend *b, flyt_bhandle node, flyt_gnode *p, void *params,
                                    void **host_arg)
{
    (void)b, (void)params;
    flyt_host_func_cb fn;
    hg_node_get(node, p, &fn, host_arg);
    if (p->type == CU_GRAPH_NODE_TYPE_HOST)
        p->value = (uint64_t)(uintptr_t)fn;
    if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) { /* a host side: its server address, region 1 */
        p->dst_region = p->dst_region != 0;
        p->src_region = p->src_region != 0;
    }
    return CUDA_SUCCESS;
}

static CUresult host_graph_node_set(flyt_backend *b, flyt_bhandle exec, flyt_bhandle node,
                                    const flyt_gnode *p, const void *params, flyt_host_func_cb host_fn,
                                    void *host_arg)
{
    (void)params;
    CUresult r = check_node(HB(b), p);
    if (r != CUDA_SUCCESS)
        return r;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH && exec == NULL)
        return CUDA_ERROR_INVALID_VALUE; /* only an exec's child graph node takes a new graph */
    struct hg_node *n = exec ? hg_same_node(((struct hexec *)exec)->g, node) : node;
    return n ? hg_node_set(n, p, host_fn, host_arg) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult host_graph_node_misc(flyt_backend *b, unsigned what, flyt_bhandle node,
                                     flyt_bhandle other, flyt_bhandle *out)
{
    (void)b;
    flyt_gnode p;
    flyt_host_func_cb fn;
    void *arg;
    switch (what) {
    case FLYT_GNODE_DESTROY:
        hg_destroy_node(node);
        return CUDA_SUCCESS;
    case FLYT_GNODE_FIND_IN_CLONE:
        *out = hg_same_node(other, node);
        return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        hg_node_get(node, &p, &fn, &arg);
        *out = (flyt_bhandle)(uintptr_t)p.value;
        return p.type == CU_GRAPH_NODE_TYPE_GRAPH ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
}

static void record_event_now(void *event)
{
    struct hevent *e = event;
    clock_gettime(CLOCK_MONOTONIC, &e->when);
    e->recorded = 1;
}

/* A launch runs the graph at once, or, on a capturing stream, becomes a
 * child graph node of the capture. */
static CUresult host_graph_launch(struct host_backend *h, flyt_bhandle exec, flyt_bhandle stream)
{
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    struct hexec *x = exec;
    struct hg_cap *cap = capture_of(h, stream);
    if (cap) {
        flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_GRAPH, .value = (uint64_t)(uintptr_t)x->g};
        return hg_cap_record(cap, &p, NULL, NULL);
    }
    hg_run(x->g, record_event_now);
    return CUDA_SUCCESS;
}

/* Plain calls: the stream memory operations, which this backend can do on
 * its host memory; the rest need a GPU. Work runs at once here, so a wait
 * whose condition does not hold yet would wait forever: refused. */
static CUresult host_write_value(struct host_backend *h, const uint64_t *a, unsigned size)
{
    if (!stream_ready(h, (flyt_bhandle)(uintptr_t)a[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = check_2d(h, a[1], size, size, 1);
    if (r == CUDA_SUCCESS)
        memcpy((void *)(uintptr_t)a[1], &a[2], size); /* little-endian: the low bytes */
    return r;
}

static CUresult host_wait_value(struct host_backend *h, const uint64_t *a, unsigned size)
{
    if (!stream_ready(h, (flyt_bhandle)(uintptr_t)a[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = check_2d(h, a[1], size, size, 1);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t have = 0;
    memcpy(&have, (void *)(uintptr_t)a[1], size);
    uint64_t want = size == 4 ? (uint32_t)a[2] : a[2];
    int holds;
    switch (a[3] & 0xf) {
    case CU_STREAM_WAIT_VALUE_GEQ: holds = size == 4 ? (int32_t)((uint32_t)have - (uint32_t)want) >= 0
                                                     : (int64_t)(have - want) >= 0; break;
    case CU_STREAM_WAIT_VALUE_EQ: holds = have == want; break;
    case CU_STREAM_WAIT_VALUE_AND: holds = (have & want) != 0; break;
    case CU_STREAM_WAIT_VALUE_NOR: holds = ~(have | want) != 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return holds ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult host_call(flyt_backend *b, uint32_t id, const uint64_t *a, const void *in, void *out)
{
    struct host_backend *h = HB(b);
    flyt_bhandle a0 = (flyt_bhandle)(uintptr_t)a[0], a1 = (flyt_bhandle)(uintptr_t)a[1];
    switch (id) {
    case FLYT_CALL_cuGraphLaunch: return host_graph_launch(h, a0, a1);
    case FLYT_CALL_cuGraphConditionalHandleCreate: return host_cond_handle_create(h, a, out);
    case FLYT_CALL_cuUserObjectRetain:
    case FLYT_CALL_cuUserObjectRelease:
    case FLYT_CALL_cuGraphRetainUserObject:
    case FLYT_CALL_cuGraphReleaseUserObject: return host_user_object_ref(h, id, a);
    case FLYT_CALL_cuGraphUpload: return stream_ok(h, a1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case FLYT_CALL_cuGraphNodeGetType:
        *(CUgraphNodeType *)out = (CUgraphNodeType)hg_node_type(a0);
        return CUDA_SUCCESS;
    case FLYT_CALL_cuGraphExecGetFlags:
        *(cuuint64_t *)out = ((struct hexec *)a0)->flags;
        return CUDA_SUCCESS;
    case FLYT_CALL_cuDeviceGetGraphMemAttribute:
        *(cuuint64_t *)out = 0; /* no graph memory here */
        return CUDA_SUCCESS;
    case FLYT_CALL_cuDeviceGraphMemTrim:
    case FLYT_CALL_cuDeviceSetGraphMemAttribute: return CUDA_SUCCESS;
    case FLYT_CALL_cuStreamSetAttribute: return host_stream_set_attr(h, a0, a[1], in);
    case FLYT_CALL_cuStreamGetAttribute: return host_stream_get_attr(h, a0, a[1], out);
    case FLYT_CALL_cuStreamCopyAttributes: return host_stream_copy_attrs(h, a0, a1);
    default: break;
    }
    if (capture_of(h, a0)) /* the stream memory operations: recorded nowhere here */
        return capture_refused(capture_of(h, a0));
    switch (id) {
    case FLYT_CALL_cuStreamWriteValue32_v2:
    case FLYT_CALL_cuStreamWriteValue32: return host_write_value(h, a, 4);
    case FLYT_CALL_cuStreamWriteValue64_v2:
    case FLYT_CALL_cuStreamWriteValue64: return host_write_value(h, a, 8);
    case FLYT_CALL_cuStreamWaitValue32_v2:
    case FLYT_CALL_cuStreamWaitValue32: return host_wait_value(h, a, 4);
    case FLYT_CALL_cuStreamWaitValue64_v2:
    case FLYT_CALL_cuStreamWaitValue64: return host_wait_value(h, a, 8);
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* ---- virtual memory management: reservations are PROT_NONE mappings,
 * allocations memfds mapped over them, access an mprotect ---- */

#define HOST_VMM_GRANULARITY (2ull << 20)

static int vmm_aligned(uint64_t n) { return n % HOST_VMM_GRANULARITY == 0; }

/* Frees an allocation once neither a handle nor a mapping refers to it. */
static void vmem_put(struct host_backend *h, struct hvmem *m)
{
    if (m->refs == 0)
        set_del(&h->vmems, m);
    if (m->refs == 0 && m->maps == 0) {
        close(m->fd);
        h->used -= m->size;
        free(m);
    }
}

static CUresult host_vmm_granularity(flyt_backend *b, const flyt_vmm_prop *prop, uint64_t *bytes)
{
    (void)b;
    (void)prop;
    *bytes = HOST_VMM_GRANULARITY; /* minimum and recommended alike */
    return CUDA_SUCCESS;
}

/* A PROT_NONE range anywhere, trimmed to a granularity-aligned start: 0 when out of memory. */
static uint64_t vmm_place_anywhere(uint64_t size)
{
    char *m = mmap(NULL, (size_t)(size + HOST_VMM_GRANULARITY), PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    uint64_t start = ((uint64_t)(uintptr_t)m + HOST_VMM_GRANULARITY - 1) & ~(HOST_VMM_GRANULARITY - 1);
    if (start > (uint64_t)(uintptr_t)m)
        munmap(m, (size_t)(start - (uint64_t)(uintptr_t)m));
    uint64_t tail = (uint64_t)(uintptr_t)m + size + HOST_VMM_GRANULARITY - (start + size);
    if (tail > 0)
        munmap((void *)(uintptr_t)(start + size), (size_t)tail);
    return start;
}

/* A reservation of size bytes: at hint when it is free, else in the arena of
 * fake device addresses (so that a restore in a fresh process finds it free
 * and grants it as a hint), else anywhere, as the driver may. */
static uint64_t vmm_place(uint64_t size, uint64_t hint)
{
    const uint64_t g = HOST_VMM_GRANULARITY;
    if (hint && vmm_aligned(hint) && hint + size > hint && map_at_prot(hint, size, PROT_NONE)) {
        arena_skip(hint, size);
        return hint;
    }
    for (int tries = 0; tries < 4 && size < ARENA_END - ARENA_BASE; tries++) {
        uint64_t at = (__atomic_fetch_add(&arena_next, size + g, __ATOMIC_RELAXED) + g - 1) & ~(g - 1);
        if (at > ARENA_END - size)
            break;
        if (map_at_prot(at, size, PROT_NONE))
            return at;
    }
    return vmm_place_anywhere(size);
}

static CUresult host_vmm_reserve(flyt_backend *b, uint64_t size, uint64_t alignment, uint64_t addr,
                                 uint64_t *ptr)
{
    struct host_backend *h = HB(b);
    if (size == 0 || !vmm_aligned(size) || (alignment & (alignment - 1)) != 0 ||
        alignment > HOST_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct hvrange *v = malloc(sizeof *v);
    uint64_t start = v ? vmm_place(size, addr) : 0;
    if (start == 0 || set_add(&h->vranges, v) != 0) {
        if (start)
            munmap((void *)(uintptr_t)start, (size_t)size);
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *v = (struct hvrange){start, size};
    *ptr = start;
    return CUDA_SUCCESS;
}

/* The reservation holding [ptr, ptr + size), or NULL. */
static struct hvrange *vrange_of(const struct host_backend *h, uint64_t ptr, uint64_t size)
{
    for (size_t i = 0; i < h->vranges.n; i++) {
        struct hvrange *v = h->vranges.items[i];
        if (ptr >= v->addr && size <= v->size && ptr - v->addr <= v->size - size)
            return v;
    }
    return NULL;
}

/* Index of the first table entry overlapping [ptr, ptr + size), or -1. */
static long first_overlap(const struct host_backend *h, uint64_t ptr, uint64_t size)
{
    for (size_t i = 0; i < h->nallocs; i++)
        if (h->allocs[i].addr < ptr + size && ptr < h->allocs[i].addr + h->allocs[i].size)
            return (long)i;
    return -1;
}

static CUresult host_vmm_free(flyt_backend *b, uint64_t ptr, uint64_t size)
{
    struct host_backend *h = HB(b);
    struct hvrange *v = vrange_of(h, ptr, size);
    if (v == NULL || v->addr != ptr || v->size != size || first_overlap(h, ptr, size) >= 0)
        return CUDA_ERROR_INVALID_VALUE; /* mappings must be gone first */
    munmap((void *)(uintptr_t)ptr, (size_t)size);
    set_del(&h->vranges, v);
    free(v);
    return CUDA_SUCCESS;
}

static CUresult host_vmm_create(flyt_backend *b, uint64_t size, const flyt_vmm_prop *prop,
                                flyt_bhandle *mem, uint8_t *compression)
{
    struct host_backend *h = HB(b);
    if (size == 0 || !vmm_aligned(size))
        return CUDA_ERROR_INVALID_VALUE;
    if (size > h->total - h->used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct hvmem *m = malloc(sizeof *m);
    int fd = m ? memfd_create("flyt-host-vmm", MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || set_add(&h->vmems, m) != 0) {
        if (fd >= 0)
            close(fd);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (struct hvmem){.fd = fd, .size = size, .refs = 1, .prop = *prop};
    h->used += size;
    *mem = m;
    if (compression) /* host memory compresses nothing, as a GPU without it declines */
        *compression = CU_MEM_ALLOCATION_COMP_NONE;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_vmm_export(flyt_backend *b, flyt_bhandle mem, int *fd, uint64_t *size)
{
    struct hvmem *m = mem;
    if (!set_has(&HB(b)->vmems, m) ||
        !(m->prop.handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* not created exportable */
    int out = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    if (out < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *fd = out;
    *size = m->size;
    return CUDA_SUCCESS;
}

static CUresult host_ipc_vmm_import(flyt_backend *b, int fd, uint64_t size, flyt_bhandle *mem)
{
    struct host_backend *h = HB(b);
    struct stat st;
    if (size == 0 || !vmm_aligned(size) || fstat(fd, &st) != 0 || (uint64_t)st.st_size < size)
        return CUDA_ERROR_INVALID_VALUE;
    struct hvmem *m = malloc(sizeof *m);
    int own = m ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (own < 0 || set_add(&h->vmems, m) != 0) {
        if (own >= 0)
            close(own);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    flyt_vmm_prop prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                          .handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                          .location_type = CU_MEM_LOCATION_TYPE_DEVICE};
    *m = (struct hvmem){.fd = own, .size = size, .refs = 1, .prop = prop};
    h->used += size; /* given back with the allocation (vmem_put) */
    *mem = m;
    return CUDA_SUCCESS;
}

static CUresult host_vmm_release(flyt_backend *b, flyt_bhandle mem)
{
    struct host_backend *h = HB(b);
    struct hvmem *m = mem;
    if (!set_has(&h->vmems, m))
        return CUDA_ERROR_INVALID_VALUE;
    m->refs--;
    vmem_put(h, m);
    return CUDA_SUCCESS;
}

static CUresult host_vmm_map(flyt_backend *b, uint64_t ptr, uint64_t size, uint64_t offset,
                             flyt_bhandle mem)
{
    struct host_backend *h = HB(b);
    struct hvmem *m = mem;
    if (!set_has(&h->vmems, m) || size == 0 || !vmm_aligned(ptr) || !vmm_aligned(size) ||
        !vmm_aligned(offset) || offset > m->size || size > m->size - offset ||
        vrange_of(h, ptr, size) == NULL || first_overlap(h, ptr, size) >= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (table_reserve(h) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mmap((void *)(uintptr_t)ptr, (size_t)size, PROT_NONE, MAP_SHARED | MAP_FIXED, m->fd,
             (off_t)offset) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->maps++;
    table_insert(h, (struct halloc){.addr = ptr, .size = size, .vmem = m, .offset = offset});
    return CUDA_SUCCESS;
}

/* Whether [ptr, ptr + size) is exactly a run of whole VMM mappings. */
static int whole_mappings(const struct host_backend *h, uint64_t ptr, uint64_t size)
{
    uint64_t at = ptr, end = ptr + size;
    long i = find_alloc(h, ptr);
    if (size == 0 || i < 0)
        return 0;
    for (; (size_t)i < h->nallocs && at < end; i++) {
        const struct halloc *a = &h->allocs[i];
        if (a->addr != at || a->vmem == NULL || a->size > end - at)
            return 0;
        at += a->size;
    }
    return at == end;
}

static CUresult host_vmm_unmap(flyt_backend *b, uint64_t ptr, uint64_t size)
{
    struct host_backend *h = HB(b);
    if (!whole_mappings(h, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    long i;
    while ((i = first_overlap(h, ptr, size)) >= 0)
        alloc_remove(h, (size_t)i);
    return CUDA_SUCCESS;
}

static CUresult host_vmm_set_access(flyt_backend *b, uint64_t ptr, uint64_t size, unsigned flags)
{
    struct host_backend *h = HB(b);
    if (!whole_mappings(h, ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    int prot = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
               : flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                           : PROT_NONE;
    if (mprotect((void *)(uintptr_t)ptr, (size_t)size, prot) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (long i = find_alloc(h, ptr); i >= 0 && (size_t)i < h->nallocs &&
                                      h->allocs[i].addr < ptr + size; i++)
        h->allocs[i].access = flags;
    return CUDA_SUCCESS;
}

static CUresult host_vmm_retain(flyt_backend *b, uint64_t addr, flyt_bhandle *mem)
{
    struct host_backend *h = HB(b);
    long i = find_alloc(h, addr);
    if (i < 0 || h->allocs[i].vmem == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct hvmem *m = h->allocs[i].vmem;
    if (m->refs == 0 && set_add(&h->vmems, m) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->refs++;
    *mem = m;
    return CUDA_SUCCESS;
}

/* ---- CUDA arrays, texture and surface objects ---- */

#define HOST_ARRAY_MAX   (1ull << 30)
#define HOST_ARRAY_FLAGS (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | \
                          CUDA_ARRAY3D_TEXTURE_GATHER)

/* Bytes of one element of format x channels; 0 for what this backend lacks
 * (the normalized, packed, block-compressed and YUV formats). */
static unsigned element_bytes(unsigned format, unsigned channels)
{
    return format <= CU_AD_FORMAT_FLOAT ? flyt_array_elem_bytes(format, channels) : 0;
}

/* The shape CUDA allows: 1D (height 0), 2D (depth 0), 3D; layered 1D/2D
 * (depth = layers); cubemaps square with 6 faces (per layer). */
static CUresult array_shape(const CUDA_ARRAY3D_DESCRIPTOR *d, struct harray *a)
{
    unsigned elem = element_bytes(d->Format, d->NumChannels);
    int layered = d->Flags & CUDA_ARRAY3D_LAYERED, cube = d->Flags & CUDA_ARRAY3D_CUBEMAP;
    if (d->Flags & ~HOST_ARRAY_FLAGS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (elem == 0 || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (cube && (d->Width != d->Height || d->Depth == 0 || d->Depth % 6 || (!layered && d->Depth != 6)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((layered && d->Depth == 0) || (!layered && !cube && d->Depth && !d->Height))
        return CUDA_ERROR_INVALID_VALUE;
    a->row = (uint64_t)d->Width * elem;
    a->rows = d->Height ? d->Height : 1;
    a->slices = d->Depth ? d->Depth : 1;
    a->flags = d->Flags;
    uint64_t bytes;
    if (__builtin_mul_overflow(a->row, a->rows, &bytes) ||
        __builtin_mul_overflow(bytes, a->slices, &bytes) || bytes > HOST_ARRAY_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static uint64_t array_bytes(const struct harray *a) { return a->row * a->rows * a->slices; }

static CUresult array_new(struct host_backend *h, const CUDA_ARRAY3D_DESCRIPTOR *d,
                          struct hmipmap *owner, struct harray **out)
{
    struct harray shape = {0};
    CUresult r = array_shape(d, &shape);
    if (r != CUDA_SUCCESS)
        return r;
    if (array_bytes(&shape) > h->total - h->used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct harray *a = malloc(sizeof *a);
    char *mem = calloc(1, (size_t)array_bytes(&shape));
    if (a == NULL || mem == NULL || set_add(&h->arrays, a) != 0) {
        free(a);
        free(mem);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *a = shape;
    a->mem = mem;
    a->owner = owner;
    h->used += array_bytes(a);
    *out = a;
    return CUDA_SUCCESS;
}

static void array_free(struct host_backend *h, struct harray *a)
{
    set_del(&h->arrays, a);
    h->used -= array_bytes(a);
    free(a->mem);
    free(a);
}

static void mipmap_free(struct host_backend *h, struct hmipmap *m)
{
    set_del(&h->mipmaps, m);
    for (unsigned i = 0; i < m->levels; i++)
        if (m->level[i])
            array_free(h, m->level[i]);
    free(m->level);
    free(m);
}

static void arrays_free(struct host_backend *h)
{
    while (h->mipmaps.n > 0)
        mipmap_free(h, h->mipmaps.items[h->mipmaps.n - 1]);
    while (h->arrays.n > 0)
        array_free(h, h->arrays.items[h->arrays.n - 1]);
}

static CUresult host_array_create(flyt_backend *b, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                  flyt_bhandle *array)
{
    struct harray *a = NULL;
    CUresult r = array_new(HB(b), d, NULL, &a);
    *array = a;
    return r;
}

static CUresult host_array_destroy(flyt_backend *b, flyt_bhandle array)
{
    struct host_backend *h = HB(b);
    struct harray *a = array;
    if (!set_has(&h->arrays, a) || a->owner)
        return CUDA_ERROR_INVALID_HANDLE;
    array_free(h, a);
    return CUDA_SUCCESS;
}

static CUresult host_mipmap_create(flyt_backend *b, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                   unsigned levels, flyt_bhandle *mipmap)
{
    struct host_backend *h = HB(b);
    size_t largest = d->Width > d->Height ? d->Width : d->Height;
    if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) && d->Depth > largest)
        largest = d->Depth;
    unsigned most = 1; /* levels down to 1x1: 1 + floor(log2(largest)) */
    while (most < 64 && (largest >> most))
        most++;
    if (levels == 0 || levels > most)
        return CUDA_ERROR_INVALID_VALUE;
    struct hmipmap *m = calloc(1, sizeof *m);
    if (m == NULL || (m->level = calloc(levels, sizeof *m->level)) == NULL ||
        set_add(&h->mipmaps, m) != 0) {
        if (m)
            free(m->level);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->levels = levels;
    for (unsigned l = 0; l < levels; l++) {
        CUDA_ARRAY3D_DESCRIPTOR ld = flyt_mipmap_level_desc(d, l);
        CUresult r = array_new(h, &ld, m, &m->level[l]);
        if (r != CUDA_SUCCESS) {
            mipmap_free(h, m);
            return r;
        }
    }
    *mipmap = m;
    return CUDA_SUCCESS;
}

static CUresult host_mipmap_destroy(flyt_backend *b, flyt_bhandle mipmap)
{
    struct host_backend *h = HB(b);
    if (!set_has(&h->mipmaps, mipmap))
        return CUDA_ERROR_INVALID_HANDLE;
    mipmap_free(h, mipmap);
    return CUDA_SUCCESS;
}

static CUresult host_mipmap_level(flyt_backend *b, flyt_bhandle mipmap, unsigned level,
                                  flyt_bhandle *array)
{
    struct hmipmap *m = mipmap;
    if (!set_has(&HB(b)->mipmaps, m))
        return CUDA_ERROR_INVALID_HANDLE;
    if (level >= m->levels)
        return CUDA_ERROR_INVALID_VALUE;
    *array = m->level[level];
    return CUDA_SUCCESS;
}

/* Where a copy side starts, its pitch and slice pitch, checked against what
 * it names (host sides were checked by the server). */
static CUresult side_memory(struct host_backend *h, const struct flyt_bside *s,
                            const struct flyt_bcopy *c, char **start, uint64_t *pitch,
                            uint64_t *slice)
{
    uint64_t zy, end;
    if (s->kind == FLYT_BSIDE_ARRAY) {
        const struct harray *a = s->array;
        if (!set_has(&h->arrays, a))
            return CUDA_ERROR_INVALID_HANDLE;
        if (s->x > a->row || c->width > a->row - s->x || s->y > a->rows ||
            c->height > a->rows - s->y || s->z > a->slices || c->depth > a->slices - s->z)
            return CUDA_ERROR_INVALID_VALUE;
        *pitch = a->row;
        *slice = a->row * a->rows;
        *start = a->mem + s->z * *slice + s->y * *pitch + s->x;
        return CUDA_SUCCESS;
    }
    *pitch = s->pitch;
    if (__builtin_mul_overflow(s->pitch, s->height, slice) ||
        __builtin_mul_overflow(s->z + c->depth - 1, s->height, &zy) ||
        __builtin_add_overflow(zy, s->y + c->height - 1, &zy) ||
        __builtin_mul_overflow(zy, s->pitch, &end) ||
        __builtin_add_overflow(end, s->x + c->width, &end))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = s->kind == FLYT_BSIDE_HOST ? (uint64_t)(uintptr_t)s->host : s->dptr;
    if (s->kind == FLYT_BSIDE_DEVICE && check_range(h, base, end) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    *start = (char *)(uintptr_t)(base + s->z * *slice + s->y * s->pitch + s->x);
    return CUDA_SUCCESS;
}

static CUresult host_copy_3d(flyt_backend *b, const struct flyt_bcopy *c, flyt_bhandle stream,
                             int wait)
{
    (void)wait; /* every copy here is done when it returns */
    struct host_backend *h = HB(b);
    char *dst, *src;
    uint64_t dpitch, dslice, spitch, sslice;
    if (!stream_ready(h, stream))
        return CUDA_ERROR_INVALID_HANDLE;
    if (c->width == 0 || c->height == 0 || c->depth == 0)
        return CUDA_SUCCESS;
    CUresult r = side_memory(h, &c->dst, c, &dst, &dpitch, &dslice);
    if (r == CUDA_SUCCESS)
        r = side_memory(h, &c->src, c, &src, &spitch, &sslice);
    for (uint64_t z = 0; r == CUDA_SUCCESS && z < c->depth; z++)
        for (uint64_t y = 0; y < c->height; y++)
            memmove(dst + z * dslice + y * dpitch, src + z * sslice + y * spitch, (size_t)c->width);
    return r;
}

/* A resource a texture or surface reads: what it names must exist. */
static CUresult check_resource(struct host_backend *h, const CUDA_RESOURCE_DESC *res)
{
    unsigned elem;
    switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        return set_has(&h->arrays, res->res.array.hArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        return set_has(&h->mipmaps, res->res.mipmap.hMipmappedArray) ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_LINEAR:
        elem = element_bytes(res->res.linear.format, res->res.linear.numChannels);
        if (elem == 0 || res->res.linear.sizeInBytes == 0)
            return CUDA_ERROR_INVALID_VALUE;
        return check_range(h, res->res.linear.devPtr, res->res.linear.sizeInBytes);
    case CU_RESOURCE_TYPE_PITCH2D:
        elem = element_bytes(res->res.pitch2D.format, res->res.pitch2D.numChannels);
        if (elem == 0 || res->res.pitch2D.width == 0 || res->res.pitch2D.height == 0)
            return CUDA_ERROR_INVALID_VALUE;
        return check_2d(h, res->res.pitch2D.devPtr, res->res.pitch2D.pitchInBytes,
                        (uint64_t)res->res.pitch2D.width * elem, res->res.pitch2D.height);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult host_tex_create(flyt_backend *b, const CUDA_RESOURCE_DESC *res,
                                const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view,
                                uint64_t *obj)
{
    (void)tex, (void)view;
    struct host_backend *h = HB(b);
    CUresult r = check_resource(h, res);
    if (r == CUDA_SUCCESS)
        *obj = ++h->next_obj;
    return r;
}

static CUresult host_surf_create(flyt_backend *b, const CUDA_RESOURCE_DESC *res, uint64_t *obj)
{
    struct host_backend *h = HB(b);
    if (res->resType != CU_RESOURCE_TYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_resource(h, res);
    const struct harray *a = (const struct harray *)res->res.array.hArray;
    if (r == CUDA_SUCCESS && !(a->flags & CUDA_ARRAY3D_SURFACE_LDST))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *obj = ++h->next_obj;
    return r;
}

/* No kernels run here: no parameter holds a texture or surface value to
 * translate (the session keeps the client's values for destroys). */
static CUresult host_obj_alias(flyt_backend *b, uint64_t client, uint64_t now)
{
    (void)b, (void)now;
    return client ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The server only destroys the objects it saw created. */
static CUresult host_obj_destroy(flyt_backend *b, uint64_t obj)
{
    (void)b;
    return obj ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- checkpoint and restore (state.h) ---- */

/* The first kind of object a checkpoint cannot capture yet, or NULL. */
static const char *uncapturable(const struct host_backend *h)
{
    for (size_t i = 0; i < h->modules.n; i++)
        if (((const struct hmodule *)h->modules.items[i])->globals)
            return "module global variable (cuModuleGetGlobal)";
    return NULL;
}

static int is_ordered(const struct halloc *a) { return a->pool != NULL || a->restored; }

static CUresult host_state_allocs(flyt_backend *b, CUresult (*fn)(void *arg, uint64_t addr, uint64_t size),
                                  void *arg, const char **what)
{
    struct host_backend *h = HB(b);
    *what = uncapturable(h);
    if (*what)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < h->nallocs; i++) {
        const struct halloc *a = &h->allocs[i];
        CUresult r = a->vmem || is_ordered(a) ? CUDA_SUCCESS /* state_vmm's, state_async's */
                                              : fn(arg, a->addr, a->size);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Whether allocs[i] is the first mapping of an allocation no handle refers to. */
static int first_map_of_released(const struct host_backend *h, size_t i)
{
    const struct hvmem *m = h->allocs[i].vmem;
    if (m == NULL || m->refs > 0)
        return 0;
    for (size_t j = 0; j < i; j++)
        if (h->allocs[j].vmem == m)
            return 0;
    return 1;
}

static CUresult host_state_vmm(flyt_backend *b, const struct flyt_vmm_visit *fn, void *arg,
                               const char **what)
{
    struct host_backend *h = HB(b);
    *what = NULL;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < h->vranges.n && r == CUDA_SUCCESS; i++) {
        const struct hvrange *v = h->vranges.items[i];
        r = fn->range(arg, v->addr, v->size);
    }
    for (size_t i = 0; i < h->vmems.n && r == CUDA_SUCCESS; i++) {
        struct hvmem *m = h->vmems.items[i];
        r = fn->mem(arg, m, m->size, &m->prop);
    }
    for (size_t i = 0; i < h->nallocs && r == CUDA_SUCCESS; i++)
        if (first_map_of_released(h, i))
            r = fn->mem(arg, h->allocs[i].vmem, h->allocs[i].vmem->size, &h->allocs[i].vmem->prop);
    for (size_t i = 0; i < h->nallocs && r == CUDA_SUCCESS; i++) {
        const struct halloc *a = &h->allocs[i];
        if (a->vmem)
            r = fn->map(arg, a->addr, a->size, a->offset, a->vmem, a->access);
    }
    return r;
}

static CUresult host_mem_alloc_at(flyt_backend *b, uint64_t addr, uint64_t size)
{
    uint64_t got;
    return addr ? alloc_insert(HB(b), size, NULL, addr, &got) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult host_state_async(flyt_backend *b,
                                 CUresult (*fn)(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool),
                                 void *arg)
{
    struct host_backend *h = HB(b);
    for (size_t i = 0; i < h->nallocs; i++) {
        const struct halloc *a = &h->allocs[i];
        CUresult r = is_ordered(a) ? fn(arg, a->addr, a->size, a->restored ? a->home : a->pool)
                                   : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Not in the pool: the pool's usage counters leave it out, as the cuda backend's do. */
static CUresult host_async_alloc_at(flyt_backend *b, uint64_t addr, uint64_t size, flyt_bhandle pool)
{
    struct host_backend *h = HB(b);
    if (addr == 0 || (pool && !set_has(&h->pools, pool)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t got;
    CUresult r = alloc_insert(h, size, NULL, addr, &got);
    if (r == CUDA_SUCCESS) {
        long i = find_alloc(h, addr);
        h->allocs[i].home = pool;
        h->allocs[i].restored = 1;
    }
    return r;
}

static CUresult host_module_image(flyt_backend *b, flyt_bhandle module, const void **image, size_t *size)
{
    if (module == NULL || !set_has(&HB(b)->modules, module))
        return CUDA_ERROR_INVALID_HANDLE;
    const struct hmodule *m = module;
    *image = m->image;
    *size = m->size;
    return CUDA_SUCCESS;
}

static const struct flyt_backend_ops host_ops = {
    .name = "host",
    .close = host_close,
    .device_count = host_device_count,
    .device_props = host_device_props,
    .device_attr = host_device_attr,
    .device_sync = host_device_sync,
    .device_reset = host_device_reset,
    .get_limit = host_get_limit,
    .set_limit = host_set_limit,
    .mem_info = host_mem_info,
    .pci_bus_id = host_pci_bus_id,
    .prio_range = host_prio_range,
    .get_cache_config = host_get_cache_config,
    .set_cache_config = host_set_cache_config,
    .get_ctx_flags = host_get_ctx_flags,
    .set_ctx_flags = host_set_ctx_flags,
    .driver_version = host_driver_version,
    .set_sm_share = host_set_sm_share,
    .resize_sm_share = host_resize_sm_share,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .mem_alloc_pitch = host_mem_alloc_pitch,
    .mem_alloc_async = host_mem_alloc_async,
    .mem_free_async = host_mem_free_async,
    .pointer_attrs = host_pointer_attrs,
    .pool_default = host_pool_default,
    .pool_create = host_pool_create,
    .pool_destroy = host_pool_destroy,
    .pool_trim = host_pool_trim,
    .pool_set_attr = host_pool_set_attr,
    .pool_get_attr = host_pool_get_attr,
    .staging_get = host_staging_get,
    .staging_put = host_staging_put,
    .htod_2d = host_htod_2d,
    .dtoh_2d = host_dtoh_2d,
    .dtod_2d = host_dtod_2d,
    .memset_2d = host_memset_2d,
    .vmm_granularity = host_vmm_granularity,
    .vmm_reserve = host_vmm_reserve,
    .vmm_free = host_vmm_free,
    .vmm_create = host_vmm_create,
    .vmm_release = host_vmm_release,
    .vmm_map = host_vmm_map,
    .vmm_unmap = host_vmm_unmap,
    .vmm_set_access = host_vmm_set_access,
    .vmm_retain = host_vmm_retain,
    .host_register = host_host_register,
    .host_unregister = host_host_unregister,
    .host_register_mapped = host_host_register_mapped,
    .htod_host = host_htod_host,
    .dtoh_host = host_dtoh_host,
    .array_create = host_array_create,
    .array_destroy = host_array_destroy,
    .mipmap_create = host_mipmap_create,
    .mipmap_destroy = host_mipmap_destroy,
    .mipmap_level = host_mipmap_level,
    .copy_3d = host_copy_3d,
    .tex_create = host_tex_create,
    .tex_destroy = host_obj_destroy,
    .surf_create = host_surf_create,
    .surf_destroy = host_obj_destroy,
    .obj_alias = host_obj_alias,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .stream_query = host_stream_query,
    .stream_wait_event = host_stream_wait_event,
    .stream_get_flags = host_stream_get_flags,
    .stream_get_priority = host_stream_get_priority,
    .stream_host_func = host_stream_host_func,
    .ipc_mem_export = host_ipc_mem_export,
    .ipc_mem_import = host_ipc_mem_import,
    .ipc_mem_unimport = host_ipc_mem_unimport,
    .ipc_event_export = host_ipc_event_export,
    .ipc_event_import = host_ipc_event_import,
    .ipc_vmm_export = host_ipc_vmm_export,
    .ipc_vmm_import = host_ipc_vmm_import,
    .ipc_pool_export = host_ipc_pool_export,
    .ipc_pool_import = host_ipc_pool_import,
    .ipc_ptr_export = host_ipc_ptr_export,
    .ipc_ptr_import = host_ipc_ptr_import,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .event_elapsed = host_event_elapsed,
    .module_load = host_module_load,
    .module_unload = host_module_unload,
    .func_get = host_func_get,
    .module_func_names = host_module_func_names,
    .func_param_info = host_func_param_info,
    .global_get = host_global_get,
    .managed_get = host_global_get, /* no module contents here: every name is one */
    .func_get_attr = host_func_get_attr,
    .func_set_attr = host_func_set_attr,
    .func_set_cache = host_func_set_cache,
    .launch = host_launch,
    .occupancy = host_occupancy,
    .occupancy_smem = host_occupancy_smem,
    .occupancy_cluster = host_occupancy_cluster,
    .call = host_call,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .capture_mode = host_capture_mode,
    .capture_info = host_capture_info,
    .capture_deps = host_capture_deps,
    .graph_create = host_graph_create,
    .graph_destroy = host_graph_destroy,
    .graph_clone = host_graph_clone,
    .graph_instantiate = host_graph_instantiate,
    .exec_destroy = host_exec_destroy,
    .exec_update = host_exec_update,
    .graph_nodes = host_graph_nodes,
    .graph_dot = host_graph_dot,
    .graph_node_type = host_graph_node_type,
    .graph_add_node = host_graph_add_node,
    .graph_add_deps = host_graph_add_deps,
    .graph_node_get = host_graph_node_get,
    .graph_node_set = host_graph_node_set,
    .graph_node_misc = host_graph_node_misc,
    .capture_to_graph = host_capture_to_graph,
    .user_object_create = host_user_object_create,
    .state_allocs = host_state_allocs,
    .mem_alloc_at = host_mem_alloc_at,
    .state_async = host_state_async,
    .async_alloc_at = host_async_alloc_at,
    .state_vmm = host_state_vmm,
    .module_image = host_module_image,
};

/* FLYT_HOST_BACKEND_SMS: SMs of the fake device (default 132), so that a
 * node manager in test mode can declare the fake GPU it reports. */
static int parse_sms(int *sms, char *err, size_t errlen)
{
    const char *s = getenv("FLYT_HOST_BACKEND_SMS");
    *sms = 132;
    if (s == NULL || *s == '\0')
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 1 || v > 100000 || *s < '0' || *s > '9') {
        snprintf(err, errlen, "FLYT_HOST_BACKEND_SMS must be an SM count from 1 to 100000: %s", s);
        return -1;
    }
    *sms = (int)v;
    return 0;
}

/* FLYT_HOST_BACKEND_CC: the fake device's compute capability, MAJOR.MINOR
 * (default 9.0), so that a test can have GPUs of two architectures. */
static int parse_cc(int *major, int *minor, char *err, size_t errlen)
{
    const char *s = getenv("FLYT_HOST_BACKEND_CC");
    int cc = 90;
    char why[160];
    if (s != NULL && *s != '\0' && flyt_parse_compute_capability(s, &cc, why, sizeof why) != 0) {
        snprintf(err, errlen, "FLYT_HOST_BACKEND_CC: %s", why);
        return -1;
    }
    *major = cc / 10;
    *minor = cc % 10;
    return 0;
}

/* FLYT_HOST_BACKEND_SYNC_MS (a test hook, docs/server.md): each device
 * synchronise waits this many milliseconds first, or for ever ("forever"). */
static int parse_sync_ms(long *ms, char *err, size_t errlen)
{
    const char *s = getenv("FLYT_HOST_BACKEND_SYNC_MS");
    *ms = 0;
    if (s == NULL || *s == '\0')
        return 0;
    if (strcmp(s, "forever") == 0) {
        *ms = -1;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > 3600000 || *s < '0' || *s > '9') {
        snprintf(err, errlen, "FLYT_HOST_BACKEND_SYNC_MS must be milliseconds up to 3600000, or "
                 "forever: %s", s);
        return -1;
    }
    *ms = v;
    return 0;
}

/* FLYT_HOST_BACKEND_MEM: total fake device memory in bytes (default 1 GiB). */
static int parse_total(uint64_t *total, char *err, size_t errlen)
{
    const char *s = getenv("FLYT_HOST_BACKEND_MEM");
    *total = HOST_DEFAULT_MEM;
    if (s == NULL || *s == '\0')
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v == 0 || *s < '0' || *s > '9') {
        snprintf(err, errlen, "FLYT_HOST_BACKEND_MEM must be a positive number of bytes: %s", s);
        return -1;
    }
    *total = v;
    return 0;
}

flyt_backend *flyt_backend_host_open(int gpu, char *err, size_t errlen)
{
    if (gpu != 0) {
        snprintf(err, errlen, "the host test backend has one device (0), not %d", gpu);
        return NULL;
    }
    uint64_t total;
    int sms, cc_major, cc_minor;
    long sync_ms;
    if (parse_total(&total, err, errlen) != 0 || parse_sms(&sms, err, errlen) != 0 ||
        parse_sync_ms(&sync_ms, err, errlen) != 0 || parse_cc(&cc_major, &cc_minor, err, errlen) != 0)
        return NULL;
    struct host_backend *h = calloc(1, sizeof *h);
    if (h == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->base.ops = &host_ops;
    h->total = total;
    h->sm_total = sms;
    h->cc_major = cc_major;
    h->cc_minor = cc_minor;
    h->sync_ms = sync_ms;
    fill_props(h);
    fill_attrs(h);
    reset_context_state(h);
    h->hf = hf_runner_start();
    if (h->hf == NULL || make_default_pool(h) != 0) {
        snprintf(err, errlen, "out of memory");
        host_close(&h->base);
        return NULL;
    }
    flyt_host_fake_print(h->print_points++); /* as a driver warns when it starts */
    return &h->base;
}
