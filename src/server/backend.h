/*
 * The server's view of a GPU: a table of driver-level operations. Two
 * implementations: "cuda" (backend_cuda.c, the real GPU through the CUDA
 * driver API, loaded with dlopen so the server starts without libcuda) and
 * "host" (backend_host.c, host memory, for tests only: it runs no kernels).
 *
 * Conventions:
 * - Every operation returns a CUresult (CUDA_SUCCESS on success).
 * - Device pointers are uint64_t. Other objects are opaque flyt_bhandle
 *   values; the server's handle tables hand out ids for them and never pass
 *   a handle the backend did not create, except the three stream values
 *   FLYT_BSTREAM_DEFAULT / _LEGACY / _PER_THREAD below.
 * - Operations run on the session's one thread, except that host functions
 *   (stream_host_func) may be called back from any thread.
 * - Copies: "2D" everywhere; a 1D copy is width = n, rows = 1. Host-side
 *   buffers are always packed (pitch = width).
 */
#ifndef FLYT_BACKEND_H
#define FLYT_BACKEND_H

#include <cuda.h>
#include <driver_types.h>
#include <stddef.h>
#include <stdint.h>

#include "flyt_proto.h"

typedef void *flyt_bhandle;

#define FLYT_BSTREAM_DEFAULT    ((flyt_bhandle)(uintptr_t)0) /* the context's NULL stream */
#define FLYT_BSTREAM_LEGACY     ((flyt_bhandle)(uintptr_t)1) /* == CU_STREAM_LEGACY */
#define FLYT_BSTREAM_PER_THREAD ((flyt_bhandle)(uintptr_t)2) /* == CU_STREAM_PER_THREAD */

typedef void (*flyt_host_func_cb)(void *arg);

typedef struct flyt_backend flyt_backend;

/* One side of copy_3d, as a CUDA_MEMCPY3D side: host memory of the server
 * (a staging buffer, a shared region), a device address or an array of the
 * backend; x in bytes, pitch/height for host and device sides only. */
enum flyt_bside_kind { FLYT_BSIDE_HOST = 1, FLYT_BSIDE_DEVICE, FLYT_BSIDE_ARRAY };
struct flyt_bside {
    enum flyt_bside_kind kind;
    void                *host;
    uint64_t             dptr;
    flyt_bhandle         array;
    uint64_t             pitch, height, x, y, z;
};
struct flyt_bcopy {
    struct flyt_bside dst, src;
    uint64_t          width, height, depth; /* width in bytes */
};

/* What state_vmm reports (a checkpoint of the program's VMM objects). */
struct flyt_vmm_visit {
    CUresult (*range)(void *arg, uint64_t addr, uint64_t size);
    CUresult (*mem)(void *arg, flyt_bhandle mem, uint64_t size, const flyt_vmm_prop *prop);
    CUresult (*map)(void *arg, uint64_t addr, uint64_t size, uint64_t offset, flyt_bhandle mem,
                    unsigned access);
};

struct flyt_backend_ops {
    const char *name;
    void (*close)(flyt_backend *b); /* frees everything the session holds */

    /* device */
    CUresult (*device_count)(flyt_backend *b, int *count);
    CUresult (*device_props)(flyt_backend *b, struct cudaDeviceProp *out);
    CUresult (*device_attr)(flyt_backend *b, int attr /* CUdevice_attribute */, int *value);
    CUresult (*device_sync)(flyt_backend *b);
    CUresult (*device_reset)(flyt_backend *b); /* drops every object; stays usable */
    CUresult (*get_limit)(flyt_backend *b, int limit /* CUlimit */, uint64_t *value);
    CUresult (*set_limit)(flyt_backend *b, int limit, uint64_t value);
    CUresult (*mem_info)(flyt_backend *b, uint64_t *free_bytes, uint64_t *total_bytes);
    CUresult (*pci_bus_id)(flyt_backend *b, char *buf, int len);
    CUresult (*prio_range)(flyt_backend *b, int *least, int *greatest);
    CUresult (*get_cache_config)(flyt_backend *b, int *config /* CUfunc_cache */);
    CUresult (*set_cache_config)(flyt_backend *b, int config);
    CUresult (*get_ctx_flags)(flyt_backend *b, unsigned *flags);
    CUresult (*set_ctx_flags)(flyt_backend *b, unsigned flags);
    CUresult (*driver_version)(flyt_backend *b, int *version);
    /* The SM share (--sm-groups): from now on the session's work runs on
     * exactly the listed SM groups (the device's SMs split into groups of
     * `granularity`; group i is the i-th group of that split), and the device
     * properties and attributes report the share's SM count. Called at most
     * once, right after open; *sm_count gets the share's SMs. NULL: the
     * backend cannot (the session then fails to start). */
    CUresult (*set_sm_share)(flyt_backend *b, unsigned granularity, const int *groups, int ngroups,
                             int *sm_count);
    /* Live resize: the session's work moves to these SM groups, without a
     * restart. The caller has drained the work; streams the session made are
     * re-created in the new share with their flags and priority, and
     * remap(arg, old, now) is called for each so that the caller points its
     * ids at the new one. Memory, modules, events, pools are untouched. On
     * failure the old share stays. NULL: the backend cannot resize. */
    CUresult (*resize_sm_share)(flyt_backend *b, unsigned granularity, const int *groups,
                                int ngroups, int *sm_count,
                                void (*remap)(void *arg, flyt_bhandle old, flyt_bhandle now),
                                void *arg);

    /* memory */
    CUresult (*mem_alloc)(flyt_backend *b, uint64_t size, uint64_t *dptr);
    CUresult (*mem_free)(flyt_backend *b, uint64_t dptr);
    CUresult (*mem_alloc_pitch)(flyt_backend *b, uint64_t width, uint64_t height,
                                uint64_t *dptr, uint64_t *pitch);
    /* pool NULL: the device's current pool */
    CUresult (*mem_alloc_async)(flyt_backend *b, uint64_t size, flyt_bhandle pool,
                                flyt_bhandle stream, uint64_t *dptr);
    CUresult (*mem_free_async)(flyt_backend *b, uint64_t dptr, flyt_bhandle stream);
    CUresult (*pointer_attrs)(flyt_backend *b, uint64_t ptr, flyt_rep_pointer_attrs *out);
    CUresult (*pool_default)(flyt_backend *b, flyt_bhandle *pool);
    /* handle_types: 0, or CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (ipc_pool_export) */
    CUresult (*pool_create)(flyt_backend *b, uint64_t max_size, unsigned handle_types,
                            flyt_bhandle *pool);
    CUresult (*pool_destroy)(flyt_backend *b, flyt_bhandle pool);
    CUresult (*pool_trim)(flyt_backend *b, flyt_bhandle pool, uint64_t keep_bytes);
    CUresult (*pool_set_attr)(flyt_backend *b, flyt_bhandle pool, int attr /* CUmemPool_attribute */,
                              uint64_t value);
    CUresult (*pool_get_attr)(flyt_backend *b, flyt_bhandle pool, int attr, uint64_t *value);

    /* copies. Incoming data is read from the socket straight into a staging
     * buffer (pinned on the GPU backend), then handed to htod_2d, which owns
     * it from then on and recycles it once the copy has consumed it. */
    void *(*staging_get)(flyt_backend *b, size_t want, size_t *got); /* got >= 1, <= want */
    void (*staging_put)(flyt_backend *b, void *staging);              /* unused buffer back */
    CUresult (*htod_2d)(flyt_backend *b, uint64_t dst, uint64_t dst_pitch, void *staging,
                        uint64_t width, uint64_t rows, flyt_bhandle stream);
    /* Returns when dst holds the data (dst may be a staging buffer). */
    CUresult (*dtoh_2d)(flyt_backend *b, void *dst, uint64_t src, uint64_t src_pitch,
                        uint64_t width, uint64_t rows, flyt_bhandle stream);
    CUresult (*dtod_2d)(flyt_backend *b, uint64_t dst, uint64_t dst_pitch, uint64_t src,
                        uint64_t src_pitch, uint64_t width, uint64_t rows, flyt_bhandle stream);
    /* value repeated per elem_size (1, 2 or 4) bytes; width in bytes, a multiple of it */
    CUresult (*memset_2d)(flyt_backend *b, uint64_t dst, uint64_t pitch, uint32_t value,
                          unsigned elem_size, uint64_t width, uint64_t rows, flyt_bhandle stream);

    /* Host memory shared with the client (HOST_MAP): pinned for DMA while
     * registered; copies between it and the device are queued on the stream
     * and read or write it when they execute, as CUDA's do with pinned memory.
     * NULL ops: the backend cannot (the server then refuses HOST_MAP). */
    CUresult (*host_register)(flyt_backend *b, void *ptr, uint64_t size);
    CUresult (*host_unregister)(flyt_backend *b, void *ptr);
    /* host_register that also maps the memory for kernels (HOST_MAP_AT):
     * *dptr is the address kernels reach it at; undone by host_unregister.
     * flags: 0 or CU_MEMHOSTREGISTER_READ_ONLY (kernels only read it). */
    CUresult (*host_register_mapped)(flyt_backend *b, void *ptr, uint64_t size, unsigned flags,
                                     uint64_t *dptr);
    CUresult (*htod_host)(flyt_backend *b, uint64_t dst, const void *src, uint64_t n,
                          flyt_bhandle stream);
    CUresult (*dtoh_host)(flyt_backend *b, void *dst, uint64_t src, uint64_t n,
                          flyt_bhandle stream);

    /* Virtual memory management: address ranges reserved, physical
     * allocations created (mem), mapped into a range, made accessible to the
     * device (flags: CU_MEM_ACCESS_FLAGS_PROT_*). prop's location is the
     * session's device. NULL ops: the backend cannot. */
    CUresult (*vmm_granularity)(flyt_backend *b, const flyt_vmm_prop *prop, uint64_t *bytes);
    CUresult (*vmm_reserve)(flyt_backend *b, uint64_t size, uint64_t alignment, uint64_t addr,
                            uint64_t *ptr);
    CUresult (*vmm_free)(flyt_backend *b, uint64_t ptr, uint64_t size);
    /* *compression (when not NULL): the compression the driver granted,
     * which may be less than prop's */
    CUresult (*vmm_create)(flyt_backend *b, uint64_t size, const flyt_vmm_prop *prop,
                           flyt_bhandle *mem, uint8_t *compression);
    CUresult (*vmm_release)(flyt_backend *b, flyt_bhandle mem);
    CUresult (*vmm_map)(flyt_backend *b, uint64_t ptr, uint64_t size, uint64_t offset,
                        flyt_bhandle mem);
    CUresult (*vmm_unmap)(flyt_backend *b, uint64_t ptr, uint64_t size);
    CUresult (*vmm_set_access)(flyt_backend *b, uint64_t ptr, uint64_t size, unsigned flags);
    /* the allocation mapped at addr, with one more reference (cuMemRetainAllocationHandle) */
    CUresult (*vmm_retain)(flyt_backend *b, uint64_t addr, flyt_bhandle *mem);
    /* CUDA arrays (CUarray, CUmipmappedArray); a level belongs to its
     * mipmapped array and goes with it. copy_3d runs on the stream; wait:
     * returns only once the copy is done (its host side may then be reused). */
    CUresult (*array_create)(flyt_backend *b, const CUDA_ARRAY3D_DESCRIPTOR *d, flyt_bhandle *array);
    CUresult (*array_destroy)(flyt_backend *b, flyt_bhandle array);
    CUresult (*mipmap_create)(flyt_backend *b, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels,
                              flyt_bhandle *mipmap);
    CUresult (*mipmap_destroy)(flyt_backend *b, flyt_bhandle mipmap);
    CUresult (*mipmap_level)(flyt_backend *b, flyt_bhandle mipmap, unsigned level,
                             flyt_bhandle *array);
    CUresult (*copy_3d)(flyt_backend *b, const struct flyt_bcopy *c, flyt_bhandle stream, int wait);
    /* Texture and surface objects: res names backend arrays; view may be
     * NULL. *obj is the driver's value, which kernels receive as is. */
    CUresult (*tex_create)(flyt_backend *b, const CUDA_RESOURCE_DESC *res,
                           const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view,
                           uint64_t *obj);
    CUresult (*tex_destroy)(flyt_backend *b, uint64_t obj);
    CUresult (*surf_create)(flyt_backend *b, const CUDA_RESOURCE_DESC *res, uint64_t *obj);
    CUresult (*surf_destroy)(flyt_backend *b, uint64_t obj);

    /* streams; flags are CU_STREAM_* */
    CUresult (*stream_create)(flyt_backend *b, unsigned flags, int priority, flyt_bhandle *stream);
    CUresult (*stream_destroy)(flyt_backend *b, flyt_bhandle stream);
    CUresult (*stream_sync)(flyt_backend *b, flyt_bhandle stream);
    CUresult (*stream_query)(flyt_backend *b, flyt_bhandle stream); /* CUDA_ERROR_NOT_READY */
    CUresult (*stream_wait_event)(flyt_backend *b, flyt_bhandle stream, flyt_bhandle event,
                                  unsigned flags);
    CUresult (*stream_get_flags)(flyt_backend *b, flyt_bhandle stream, unsigned *flags);
    CUresult (*stream_get_priority)(flyt_backend *b, flyt_bhandle stream, int *priority);
    CUresult (*stream_host_func)(flyt_backend *b, flyt_bhandle stream, flyt_host_func_cb fn,
                                 void *arg);

    /* events; flags are CU_EVENT_* */
    CUresult (*event_create)(flyt_backend *b, unsigned flags, flyt_bhandle *event);
    CUresult (*event_destroy)(flyt_backend *b, flyt_bhandle event);
    CUresult (*event_record)(flyt_backend *b, flyt_bhandle event, flyt_bhandle stream,
                             unsigned flags);
    CUresult (*event_query)(flyt_backend *b, flyt_bhandle event);
    CUresult (*event_sync)(flyt_backend *b, flyt_bhandle event);
    CUresult (*event_elapsed)(flyt_backend *b, flyt_bhandle start, flyt_bhandle end, float *ms);

    /* CUDA IPC between sessions of one tenant (ipc.h). mem_export: the
     * allocation that starts at ptr (*size bytes) lies in the shareable
     * memory [unit_base, unit_base + unit_size), given as a new descriptor
     * the caller closes; mem_import maps unit_size bytes of such a
     * descriptor's memory (it stays the caller's) at a fresh address, for
     * the device to read and write; mem_unimport undoes that.
     * event_export: the bytes naming an interprocess event (created with
     * CU_EVENT_INTERPROCESS) to another process; event_import opens them as
     * a new event. NULL: the backend has no IPC. */
    CUresult (*ipc_mem_export)(flyt_backend *b, uint64_t ptr, int *fd, uint64_t *unit_base,
                               uint64_t *unit_size, uint64_t *size);
    CUresult (*ipc_mem_import)(flyt_backend *b, int fd, uint64_t unit_size, uint64_t *addr);
    CUresult (*ipc_mem_unimport)(flyt_backend *b, uint64_t addr, uint64_t unit_size);
    CUresult (*ipc_event_export)(flyt_backend *b, flyt_bhandle event,
                                 uint8_t handle[FLYT_IPC_HANDLE_BYTES]);
    CUresult (*ipc_event_import)(flyt_backend *b, const uint8_t handle[FLYT_IPC_HANDLE_BYTES],
                                 flyt_bhandle *event);
    /* vmm_export: a new descriptor of a VMM allocation (vmm_create's; the
     * caller closes it) made exportable as one, and its size; vmm_import: a
     * new VMM allocation handle for such a descriptor's memory of size bytes
     * (the descriptor stays the caller's), released with vmm_release. */
    CUresult (*ipc_vmm_export)(flyt_backend *b, flyt_bhandle mem, int *fd, uint64_t *size);
    CUresult (*ipc_vmm_import)(flyt_backend *b, int fd, uint64_t size, flyt_bhandle *mem);
    /* pool_export: a new descriptor of a pool created with POSIX handles (the
     * caller closes it; -1 where the backend needs none); pool_import: a pool
     * for such a descriptor (it stays the caller's), destroyed with
     * pool_destroy. ptr_export: what another process needs to import the
     * stream-ordered allocation starting at ptr, from such a pool: the
     * driver's bytes, and/or its memory as mem_export gives it (*fd -1 when
     * the bytes say all); and its size. ptr_import: that allocation in an
     * imported pool, at *addr, freed by mem_free or mem_free_async. */
    CUresult (*ipc_pool_export)(flyt_backend *b, flyt_bhandle pool, int *fd);
    CUresult (*ipc_pool_import)(flyt_backend *b, int fd, flyt_bhandle *pool);
    CUresult (*ipc_ptr_export)(flyt_backend *b, uint64_t ptr, uint8_t data[FLYT_IPC_HANDLE_BYTES],
                               int *fd, uint64_t *unit_base, uint64_t *unit_size, uint64_t *size);
    CUresult (*ipc_ptr_import)(flyt_backend *b, flyt_bhandle pool,
                               const uint8_t data[FLYT_IPC_HANDLE_BYTES], int fd,
                               uint64_t unit_size, uint64_t offset, uint64_t *addr);

    /* modules and kernels. image is a fatbinary (or cubin/PTX) the client sent.
     * owned: NULL, or image itself when it is malloc'd memory that the backend
     * then keeps, on success, until the module is unloaded (no copy of a
     * cuBLAS start's ~100 MB); on failure it stays the caller's. */
    CUresult (*module_load)(flyt_backend *b, const void *image, size_t size, void *owned,
                            flyt_bhandle *module);
    CUresult (*module_unload)(flyt_backend *b, flyt_bhandle module);
    CUresult (*func_get)(flyt_backend *b, flyt_bhandle module, const char *name, flyt_bhandle *func);
    /* CUDA_ERROR_INVALID_VALUE once index is past the last parameter */
    CUresult (*func_param_info)(flyt_backend *b, flyt_bhandle func, uint32_t index,
                                uint32_t *offset, uint32_t *size);
    /* Links the inputs (CUjitInputType types[i], images[i] of sizes[i]) into
     * a cubin the backend allocates with malloc; the caller frees it. The
     * JIT's info and error logs (NUL-terminated, FLYT_LINK_LOG bytes each,
     * verbose info when flags has FLYT_LINK_VERBOSE) go to logs[0], logs[1],
     * also when the link fails. */
    CUresult (*link)(flyt_backend *b, uint32_t count, const uint32_t *types,
                     const void *const *images, const size_t *sizes, const char *const *names,
                     uint32_t flags, char *const logs[2], void **cubin, size_t *cubin_size);
    /* A plain driver call of calls.api (calls.h): args already translated
     * by kind; in/out: the pointees of its in and out pointer parameters. */
    CUresult (*call)(flyt_backend *b, uint32_t id, const uint64_t *args, const void *in, void *out);
    /* Encodes (or readdresses) a tensor map as described; out: 128 bytes. */
    CUresult (*tensor_map)(flyt_backend *b, const flyt_req_tensor_map *req, uint64_t out[16]);
    /* The module's function names, NUL-terminated one after another in
     * buf (cap bytes); CUDA_ERROR_INVALID_VALUE when they do not fit. */
    CUresult (*module_func_names)(flyt_backend *b, flyt_bhandle module, char *buf, size_t cap,
                                  size_t *len, uint32_t *count);
    CUresult (*global_get)(flyt_backend *b, flyt_bhandle module, const char *name, uint64_t *dptr,
                           uint64_t *size);
    /* a __managed__ variable's address and size; CUDA_ERROR_NOT_FOUND for a plain one */
    CUresult (*managed_get)(flyt_backend *b, flyt_bhandle module, const char *name, uint64_t *dptr,
                            uint64_t *size);
    CUresult (*func_get_attr)(flyt_backend *b, flyt_bhandle func, int attr /* CUfunction_attribute */,
                              int *value);
    CUresult (*func_set_attr)(flyt_backend *b, flyt_bhandle func, int attr, int value);
    CUresult (*func_set_cache)(flyt_backend *b, flyt_bhandle func, int config);
    /* params: the packed parameter buffer (offsets from func_param_info).
     * attrs: CUlaunchAttribute-compatible entries (id, pad, 64-byte value). */
    CUresult (*launch)(flyt_backend *b, flyt_bhandle func, const uint32_t grid[3],
                       const uint32_t block[3], uint32_t shared_mem, flyt_bhandle stream,
                       const void *params, uint32_t param_bytes, const flyt_launch_attr *attrs,
                       uint32_t attr_count);
    CUresult (*occupancy)(flyt_backend *b, flyt_bhandle func, int block_size, uint64_t dyn_smem,
                          unsigned flags, int *num_blocks);
    /* cuOccupancyMaxActiveClusters (what = FLYT_CLUSTER_MAX_ACTIVE) or
     * cuOccupancyMaxPotentialClusterSize (FLYT_CLUSTER_MAX_SIZE) for a launch
     * configuration whose attributes were checked as a launch's are. */
    CUresult (*occupancy_cluster)(flyt_backend *b, flyt_bhandle func, unsigned what,
                                  const uint32_t grid[3], const uint32_t block[3],
                                  uint32_t shared_mem, const flyt_launch_attr *attrs,
                                  uint32_t attr_count, int *count);
    CUresult (*occupancy_smem)(flyt_backend *b, flyt_bhandle func, int num_blocks, int block_size,
                               uint64_t *smem);

    /* CUDA graphs (docs/graphs.md). Nodes are flyt_bhandles owned by their
     * graph. Work enqueued on a capturing stream is recorded, not run. */
    CUresult (*capture_begin)(flyt_backend *b, flyt_bhandle stream, int mode /* CUstreamCaptureMode */,
                              flyt_bhandle *graph);
    CUresult (*capture_end)(flyt_backend *b, flyt_bhandle stream, flyt_bhandle *graph);
    /* The serving thread's CUstreamCaptureMode (what calls a capture in
     * progress refuses). */
    CUresult (*capture_mode)(flyt_backend *b, int mode);
    /* *deps: the backend's array, valid until the next work on the stream */
    CUresult (*capture_info)(flyt_backend *b, flyt_bhandle stream, int *status, uint64_t *id,
                             flyt_bhandle *graph, const flyt_bhandle **deps, size_t *ndeps);
    CUresult (*capture_deps)(flyt_backend *b, flyt_bhandle stream, const flyt_bhandle *deps, size_t n,
                             unsigned flags);
    CUresult (*graph_create)(flyt_backend *b, unsigned flags, flyt_bhandle *graph);
    CUresult (*graph_destroy)(flyt_backend *b, flyt_bhandle graph);
    CUresult (*graph_clone)(flyt_backend *b, flyt_bhandle graph, flyt_bhandle *clone);
    /* err_node: the node at fault when it fails, else NULL */
    CUresult (*graph_instantiate)(flyt_backend *b, flyt_bhandle graph, uint64_t flags,
                                  flyt_bhandle upload_stream, flyt_bhandle *exec,
                                  flyt_bhandle *err_node);
    CUresult (*exec_destroy)(flyt_backend *b, flyt_bhandle exec);
    CUresult (*exec_update)(flyt_backend *b, flyt_bhandle exec, flyt_bhandle graph, int *result,
                            flyt_bhandle *err_node, flyt_bhandle *err_from);
    /* which: FLYT_GNODES_* (DEPS, DEPENDENTS: graph is a node); *n: in, room
     * in out (edges: pairs); out, how many */
    CUresult (*graph_nodes)(flyt_backend *b, flyt_bhandle graph, unsigned which, flyt_bhandle *out,
                            size_t *n);
    /* *type: the node's CUgraphNodeType */
    CUresult (*graph_node_type)(flyt_backend *b, flyt_bhandle node, unsigned *type);
    /* *text: malloc'd, NUL-terminated; the caller frees it */
    CUresult (*graph_dot)(flyt_backend *b, flyt_bhandle graph, unsigned flags, char **text);
    /* p: translated (host sides are server addresses, handles backend
     * handles); params: a kernel node's packed parameters. *dptr: a memory
     * allocation node's address; for a conditional node, room for its
     * p->rows body graphs, which the backend fills (owned by the node). */
    CUresult (*graph_add_node)(flyt_backend *b, flyt_bhandle graph, const flyt_bhandle *deps,
                               size_t ndeps, const flyt_gnode *p, const void *params,
                               flyt_host_func_cb host_fn, void *host_arg, flyt_bhandle *node,
                               uint64_t *dptr);
    CUresult (*graph_add_deps)(flyt_backend *b, flyt_bhandle graph, const flyt_bhandle *from,
                               const flyt_bhandle *to, size_t n, int remove);
    /* A node's parameters as graph_add_node takes them (backend handles,
     * server addresses; a host copy side has its region field 1); params:
     * room for FLYT_MAX_PARAM_BYTES; *host_arg: a host node's argument. */
    CUresult (*graph_node_get)(flyt_backend *b, flyt_bhandle node, flyt_gnode *p, void *params,
                               void **host_arg);
    /* exec NULL: sets the graph's node, else the exec's copy of it. */
    CUresult (*graph_node_set)(flyt_backend *b, flyt_bhandle exec, flyt_bhandle node,
                               const flyt_gnode *p, const void *params, flyt_host_func_cb host_fn,
                               void *host_arg);
    /* what: FLYT_GNODE_*; *out: the node found in the clone other, or the
     * child graph (owned by its node). */
    CUresult (*graph_node_misc)(flyt_backend *b, unsigned what, flyt_bhandle node, flyt_bhandle other,
                                flyt_bhandle *out);
    /* cuStreamBeginCaptureToGraph: the stream captures into graph, after
     * deps (default edges). */
    CUresult (*capture_to_graph)(flyt_backend *b, flyt_bhandle stream, flyt_bhandle graph,
                                 const flyt_bhandle *deps, size_t n, int mode);
    /* cuUserObjectCreate: destroy(arg) runs, on whatever thread the driver
     * chooses, once the last reference is gone. Retain and release are
     * plain calls. */
    CUresult (*user_object_create)(flyt_backend *b, flyt_host_func_cb destroy, void *arg,
                                   unsigned refs, unsigned flags, flyt_bhandle *obj);

    /* Checkpoint and restore (state.h). state_allocs calls fn for every
     * allocation of mem_alloc / mem_alloc_pitch / mem_alloc_at, in address
     * order, and returns the first result of fn that is not CUDA_SUCCESS; an
     * object the backend cannot capture makes it CUDA_ERROR_NOT_SUPPORTED
     * before any call, with its kind in *what. mem_alloc_at allocates size
     * bytes at exactly addr (CUDA_ERROR_ALREADY_MAPPED when it cannot).
     * module_image: the image the module was loaded from, the backend's
     * copy. state_arenas calls fn for every address range the backend
     * reserved for allocations, and arena_at reserves one at exactly addr
     * (a restore, before its allocations); NULL when the backend places
     * allocations without them. NULL ops: the backend cannot checkpoint. */
    CUresult (*state_allocs)(flyt_backend *b, CUresult (*fn)(void *arg, uint64_t addr, uint64_t size),
                             void *arg, const char **what);
    CUresult (*mem_alloc_at)(flyt_backend *b, uint64_t addr, uint64_t size);
    CUresult (*module_image)(flyt_backend *b, flyt_bhandle module, const void **image,
                             size_t *size);
    CUresult (*state_arenas)(flyt_backend *b, CUresult (*fn)(void *arg, uint64_t addr, uint64_t size),
                             void *arg);
    CUresult (*arena_at)(flyt_backend *b, uint64_t addr, uint64_t size);
    /* The program's VMM objects for a checkpoint: fn->range for every
     * reservation of vmm_reserve, fn->mem for every physical allocation a
     * handle or a mapping keeps alive, fn->map for every mapping with the
     * access granted on it; the first result that is not CUDA_SUCCESS is
     * returned, and what cannot be captured is CUDA_ERROR_NOT_SUPPORTED
     * (its kind in *what). A restore uses the vmm_* ops, vmm_reserve at
     * the old address as its hint: a backend grants a free hint in the
     * address space it keeps for reservations. NULL: the backend cannot. */
    CUresult (*state_vmm)(flyt_backend *b, const struct flyt_vmm_visit *fn, void *arg,
                          const char **what);
    /* Stream-ordered allocations for a checkpoint: fn for each live one
     * (mem_alloc_async's and async_alloc_at's), with the pool it was taken
     * from (NULL: the device's current pool, or one destroyed since).
     * async_alloc_at puts one back at exactly addr as the backend's own
     * memory, outside any pool (CUDA_ERROR_ALREADY_MAPPED when it cannot);
     * pool is only kept for the next capture; a later mem_free_async (or
     * mem_free) of it releases it once the stream has passed that point.
     * NULL: the backend cannot (a capture refuses such allocations).
     * async_spans comes first in a restore, after the arenas and before any
     * pool is used: ranges[i] = {addr, size} of every allocation that
     * async_alloc_at will put back (n > 0, any order); the backend keeps
     * their addresses free for them (CUDA_ERROR_ALREADY_MAPPED when it
     * cannot). It may come earlier too (a pre-copy's, before any module
     * loads): a later call reserves only what is not yet kept. NULL:
     * async_alloc_at needs nothing before. */
    CUresult (*state_async)(flyt_backend *b,
                            CUresult (*fn)(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool),
                            void *arg);
    CUresult (*async_spans)(flyt_backend *b, const uint64_t (*ranges)[2], size_t n);
    CUresult (*async_alloc_at)(flyt_backend *b, uint64_t addr, uint64_t size, flyt_bhandle pool);
    /* A restored module global is at now, not at old where the client holds
     * it: the backend translates old in copies and kernel parameters from
     * then on. NULL: the backend cannot (the restore fails). */
    CUresult (*global_alias)(flyt_backend *b, uint64_t old, uint64_t now, uint64_t size);
    /* A texture or surface object the client holds as value client is now
     * the backend's object now (a restore made it again, or its value was
     * taken): the backend translates client in 8-byte kernel parameters from
     * then on; now == client forgets it. NULL: the backend cannot. */
    CUresult (*obj_alias)(flyt_backend *b, uint64_t client, uint64_t now);
};

/* Every backend's state starts with this. */
struct flyt_backend {
    const struct flyt_backend_ops *ops;
};

/* kind: "cuda" or "host". gpu: device index. NULL with a reason in err. */
flyt_backend *flyt_backend_open(const char *kind, int gpu, char *err, size_t errlen);

flyt_backend *flyt_backend_cuda_open(int gpu, char *err, size_t errlen);
flyt_backend *flyt_backend_host_open(int gpu, char *err, size_t errlen);
/* The host backend's stand-in for device printf (backend_host_print.c):
 * prints what FLYT_HOST_BACKEND_PRINTF gives for its point-th print point. */
void flyt_host_fake_print(unsigned point);

#endif
