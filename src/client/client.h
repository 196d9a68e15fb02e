/*
 * Internal interface of the client library, Flyt's drop-in libcuda.so.1.
 *
 * Modules: conn.c (the one connection to the server, its receiver and
 * callback threads), device.c (the device snapshot, init, versions),
 * context.c (contexts, each thread's current one), memory.c (allocations,
 * pools, host memory, pointer attributes), copy.c (every copy and memset),
 * stream.c (streams, events, host functions), module.c (modules, libraries,
 * kernels, globals, run-time linking), launch.c (launches, function
 * attributes, occupancy), entry.c (cuGetProcAddress, cuGetExportTable),
 * errors.c (names and strings of CUresult), device_output.c (what the
 * driver prints: device printf, assert messages), registry.c (address ranges the
 * client knows), export_tables.c and ctx_storage.c (the hidden tables).
 * Functions here use the flyt_ prefix; CUDA names are the API.
 */
#ifndef FLYT_CLIENT_H
#define FLYT_CLIENT_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "flyt_assert.h" /* FLYT_MUTEX_INITIALIZER, FLYT_ASSERT_HELD */
#include "flyt_proto.h"

#define FLYT_EXPORT __attribute__((visibility("default")))

/* ---- connection (conn.c) ---- */

/* Where a reply's pieces go. rep/rep_size: the op's reply struct. data: room
 * for trailing bytes (data_max); streamed: the reply ends with a trailer
 * whose result overrides (MEMCPY_DTOH style). */
struct flyt_reply_sink {
    void  *rep;
    size_t rep_size;
    void  *data;
    size_t data_max;
    size_t data_got;
    int    streamed;
};

/* Connects on first use and fetches the device snapshot. CUDA_SUCCESS, or
 * CUDA_ERROR_NO_DEVICE when no server can be reached (reason said once). */
CUresult flyt_connect_once(void);
/* The snapshot fetched at connect (valid once flyt_connect_once succeeded).
 * Its SM count and total memory change with the share: read them through
 * flyt_device_share (device.c), never directly. */
const flyt_rep_device_snapshot *flyt_conn_snapshot(void);
flyt_rep_device_snapshot *flyt_conn_snapshot_mut(void);
int flyt_conn_device_count(void);

/* A synchronous call: sends op with req (+ data iovecs), waits for the reply.
 * Returns the call's CUresult, or the first deferred error of earlier
 * pipelined calls when the call itself succeeded (CUDA reports those at the
 * next call that can). */
CUresult flyt_call(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                   int data_count, struct flyt_reply_sink *sink);
/* flyt_call that passes a file descriptor along (Unix sockets only). */
CUresult flyt_call_fd(uint16_t op, const void *req, size_t req_size, int fd,
                      struct flyt_reply_sink *sink);
/* A pipelined call: sends op without waiting (FLYT_F_NOREPLY). */
CUresult flyt_send_async(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                         int data_count);
/* Whether host memory can be shared with the server: a Unix-socket session
 * and FLYT_SHM not set to 0. */
int flyt_conn_shares_memory(void);
/* Whether kernel images go to the server unhashed (MODULE_LOAD has_data 2):
 * on one machine a cuBLAS start's ~100 MB cost less to send than to hash, and
 * a server without an image cache would want every image shipped anyway. */
int flyt_conn_ships_images_unhashed(void);
/* vmm.c: a VMM allocation the session holds now (created, or imported from
 * another process), with the properties cuMemGetAllocationPropertiesFromHandle says. */
void flyt_vmm_adopt(uint64_t handle, const CUmemAllocationProp *prop);
/* The protocol minor the server speaks (FLYT_MINOR_*), -1 when not connected. */
int flyt_conn_server_minor(void);
/* Hooks around every flyt_call, flyt_call_fd and flyt_send_async: before
 * sees the request first (an error fails the call unsent); after sees a
 * waited-for call's result. Set once, for the rest of the process. */
typedef CUresult (*flyt_before_hook)(uint16_t op, const void *req);
typedef void (*flyt_after_hook)(uint16_t op, CUresult r);
void flyt_conn_set_hooks(flyt_before_hook before, flyt_after_hook after);

/* Host functions and stream callbacks run on the client's callback thread,
 * in stream order, when the server reports that the stream reached them.
 * counted: a stream's host function outside any capture, which
 * flyt_host_funcs_wait waits for. */
uint64_t flyt_callback_register(CUhostFn host_fn, CUstreamCallback stream_cb, CUstream stream,
                                void *user, int counted, uint64_t wire);
/* Waits until the counted host functions of stream wire (of all streams
 * for the default and legacy streams) have run. */
void flyt_host_funcs_wait(uint64_t wire);
/* Whether some counted host function has not run yet (no lock). */
int flyt_host_funcs_pending(void);
/* A registered host function and its argument: 0, or -1 for an unknown id. */
int flyt_callback_find(uint64_t id, CUhostFn *host_fn, void **user);

/* Whether this process's session gets the driver's output (OUTPUT frames):
 * connected here (not a forked child), not lost, a server that sends it. */
int flyt_conn_gets_output(void);

/* ---- the driver's output (device_output.c, docs/device-output.md) ---- */
/* Writes what the server's driver printed on its fd (1 or 2) to the
 * program's stdout or stderr; called ahead of the reply it came before. */
void flyt_device_output(uint32_t fd, const void *buf, size_t len);

/* ---- small call helpers (conn.c) ---- */
CUresult flyt_call_u64(uint16_t op, const void *req, size_t req_size, uint64_t *out);
CUresult flyt_call_handle(uint16_t op, uint64_t handle);

/* ---- plain driver calls (calls.c; their exports are generated) ---- */

/* One call of calls.api as its generated export fills it in. */
struct flyt_generic_call {
    uint32_t    id;
    int         async;
    uint64_t    args[FLYT_CALL_MAX_ARGS];
    const void *in;
    size_t      in_size;
    void       *out;
    size_t      out_size;
    CUresult    result; /* of a failed argument translation */
};
CUresult flyt_generic_call_send(struct flyt_generic_call *call);
/* graph.c: cuGraphLaunch of an exec graph with memory allocation nodes
 * waits for the server's answer (args[0]: the exec) */
int flyt_graph_launch_waits(const struct flyt_generic_call *call);
/* Puts a CUfunction/CUkernel argument's server id in args[i]. */
CUresult flyt_call_func_arg(struct flyt_generic_call *call, int i, const void *handle);

/* ---- device and init (device.c) ---- */

/* CUDA_SUCCESS once cuInit succeeded; else what cuInit said, or
 * CUDA_ERROR_NOT_INITIALIZED before it was called. */
CUresult flyt_init_state(void);
/* Inside Flyt's NVML's calls on this thread (flyt_client_table.h): they
 * start the driver without counting as the program's cuInit. */
int flyt_in_tool_scope(void);
/* 1 once the program called cuInit itself */
int flyt_program_started(void);
/* In a forked child: cuInit not called yet. */
void flyt_init_forget(void);
/* Device ordinal check for an initialized library. */
CUresult flyt_check_device(CUdevice dev);
int flyt_device_attr(CUdevice_attribute attr);
/* The share's SM count and total memory, a consistent pair; returns the
 * share's generation (0 until the first SHARE_CHANGED), for caches of
 * answers that depend on the share. No lock. */
uint64_t flyt_device_share(int *sm_count, uint64_t *total_mem);
/* The receiver thread, on a SHARE_CHANGED frame. */
void flyt_device_share_changed(const struct flyt_msg_share *m);

/* ---- errors (errors.c) ---- */
/* FLYT_TRACE=1: every error the server answers, and the client's own
 * context errors, are said on stderr with where they arose. */
int flyt_tracing(void);
/* Says r (when an error and tracing) with where it arose; returns r. */
CUresult flyt_trace(const char *where, CUresult r);
/* 1 in a child forked after the program's cuInit, outside a tool's scope:
 * its calls are refused (CUDA_ERROR_NOT_INITIALIZED, as the driver's after
 * a fork). */
int flyt_conn_forked(void);
/* CUDA's batches name per-range settings by first index (copy.c): 1 when
 * first[0..n) starts at 0, increases and stays below count, n <= count. */
int flyt_batch_firsts_ok(const size_t *first, size_t n, size_t count);
/* Says once per name that a driver function is not carried out. */
CUresult flyt_driver_unsupported(const char *name);
/* Same, with a reason: "NAME (REASON)". */
CUresult flyt_unsupported_why(const char *name, const char *why);

/* ---- FLYT_PROFILE=1: per-op counts and waits, printed at exit (profile.c) ---- */
int  flyt_profiling(void);
/* One request of op that carried bytes; waited: it waited wait_ns for its reply. */
void flyt_profile_call(uint16_t op, uint64_t bytes, uint64_t wait_ns, int waited);
/* A kernel image of bytes hashed in ns. */
void flyt_profile_hash(uint64_t bytes, uint64_t ns);
/* A kernel image cut from before to after bytes (fatbin.c). */
void flyt_profile_trim(uint64_t before, uint64_t after);

/* ---- contexts (context.c) ---- */
/* The calling thread's current context, NULL if none. */
CUcontext flyt_ctx_current(void);
/* CUDA_SUCCESS when a context is current (the runtime always makes one);
 * where: the driver call asking, for FLYT_TRACE. */
CUresult flyt_ctx_require_at(const char *where);
#define flyt_ctx_require() flyt_ctx_require_at(__func__)
/* The same for a call on an object of a context (an event, an explicit
 * stream): any living context will do when the thread has none current. */
CUresult flyt_ctx_require_object_at(const char *where);
#define flyt_ctx_require_object() flyt_ctx_require_object_at(__func__)
int flyt_ctx_valid(CUcontext ctx);
uint64_t flyt_ctx_id(CUcontext ctx);

/* ---- streams (stream.c) ---- */
/* The wire id of a stream handle. per_thread: the call is a _ptsz/_ptds
 * variant, where stream 0 means the calling thread's default stream. */
uint64_t flyt_stream_wire(CUstream stream, int per_thread);
/* After a primary context reset: each thread's default stream is gone. */
void flyt_streams_reset(void);

/* ---- local registry (registry.c) ---- */
enum flyt_range_kind {
    FLYT_RANGE_DEVICE = 1,
    FLYT_RANGE_PINNED = 2,
    FLYT_RANGE_REGISTERED = 3,
    FLYT_RANGE_MANAGED = 4, /* host memory the server maps at the same address */
};
/* Records a range; returns its buffer id (unique, never 0). */
uint64_t flyt_range_add(enum flyt_range_kind kind, uint64_t base, uint64_t size, unsigned flags);
int flyt_range_remove(enum flyt_range_kind kind, uint64_t base); /* 0 when found */
/* Finds the range holding addr: returns its kind (0 if none) and its
 * base/size/flags; any out pointer may be NULL. */
int flyt_range_find(uint64_t addr, uint64_t *base, uint64_t *size, unsigned *flags);
/* host_maps.c: [lo, hi) lies in private anonymous read-write memory (not a
 * stack); some page of it is one NVIDIA's driver cannot pin for writing */
int flyt_maps_plain_anonymous(uint64_t lo, uint64_t hi);
int flyt_maps_unpinnable_for_write(uint64_t lo, uint64_t hi);
uint64_t flyt_range_buffer_id(uint64_t addr);
void flyt_range_clear_device(void);
/* Shared pinned memory (HOST_MAP): the server's region id of a host range. */
int flyt_range_set_region(uint64_t base, uint64_t region);
/* The region holding all of [addr, addr + n), with addr's offset in it; 0 if none. */
uint64_t flyt_range_region(uint64_t addr, uint64_t n, uint64_t *offset);
/* The client address of a region's start; 0 if none. */
uint64_t flyt_range_region_base(uint64_t region);
void flyt_range_forget_regions(void);

/* ---- the memfds of shared regions, for a restored session (regions.c) ---- */
/* Keeps a copy of the memfd of a region the server mapped (addr: HOST_MAP_AT's
 * address, device-mapped; 0: HOST_MAP) while it lives. */
void flyt_region_keep(uint64_t region, int fd, uint64_t size, uint64_t addr);
/* The receiver delivered a successful HOST_MAP(_AT) reply; its caller then
 * keeps the region (flyt_region_keep) or says it will not (not_kept). */
void flyt_region_reply_delivered(void);
void flyt_region_not_kept(void);
/* HOST_UNMAP of a region (0: none), then its memfd is closed. */
CUresult flyt_region_release(uint64_t region);
/* Closes every kept memfd (a device reset unmapped the regions). */
void flyt_regions_forget_all(void);
/* Calls fn with the HOST_REMAP request and memfd of each kept region (fn
 * NULL: none) until it returns non-zero, which is returned; *count: how many
 * are kept. */
int flyt_regions_each(int (*fn)(const flyt_req_host_remap *req, int fd, void *arg), void *arg,
                      size_t *count);

/* ---- host memory at one address in client and server (memory.c, managed.c) ---- */
/* A new memfd of len bytes mapped here and in the server at one address the
 * GPU reaches too (HOST_MAP_AT): the address and its region, or MAP_FAILED. */
void *flyt_same_address_mapping(const char *name, uint64_t len, uint64_t *region);
/* cuMemFree of a managed allocation. */
CUresult flyt_managed_free(uint64_t base);

/* ---- managed memory between machines (managed_remote.c) ---- */
/* Device memory and a private copy here at its address (*base), kept equal
 * where CUDA hands managed memory between host and device. */
CUresult flyt_mremote_alloc(size_t size, uint64_t *base);
/* 1 when base is such an allocation (freed, with *r), else 0. */
int flyt_mremote_free(uint64_t base, CUresult *r);
/* 1 when all of [p, p + n) lies in one such allocation, variable or
 * tracked host memory, with p's device address in *dev; else 0. */
int flyt_mremote_device(uint64_t p, uint64_t n, uint64_t *dev);
/* A module's managed variable at base (the device's address): a private
 * copy here at that address, kept equal the same way (its bytes only; a
 * page it shares with another variable is mapped once). Attached twice is
 * attached once. */
CUresult flyt_mremote_attach(uint64_t base, uint64_t len);
/* The variable at base is gone with its module: its copy here too. */
void flyt_mremote_detach(uint64_t base);
/* A device reset freed every allocation and variable: their copies here go. */
void flyt_mremote_forget_all(void);
/* Host memory [base, base + len) that the GPU reaches at dev (device
 * memory there now exists): kept equal from now on, host bytes first (all
 * of them are sent now). */
CUresult flyt_mremote_track(uint64_t base, uint64_t len, uint64_t dev);
/* ... no longer (it is being freed). */
void flyt_mremote_untrack(uint64_t base);

/* ---- pinned memory between machines (pinned_remote.c) ---- */
/* size bytes of zeroed pages at an address the server reserved for them;
 * NULL when the server has no VMM or no address was free here too. */
void *flyt_pinned_remote_alloc(size_t size);
/* Backs such an allocation at base with device memory (once) and keeps it
 * equal: the GPU then reaches it at base. */
CUresult flyt_pinned_remote_map(uint64_t base);
/* 1 when base is such an allocation (freed, with *r), else 0. */
int flyt_pinned_remote_free(uint64_t base, CUresult *r);
/* Backs each such allocation that a pointer-sized word of a kernel's
 * parameter block points into (unified addressing lets kernels take
 * pinned pointers without asking for a device pointer). */
CUresult flyt_pinned_remote_scan(const void *params, size_t bytes);
/* A device reset freed the device memory behind them (the reservations too). */
void flyt_pinned_remote_forget_backing(void);
/* A synchronous copy on the legacy stream between device memory at dev and
 * host memory (copy.c): to the device when to_device, else from it. */
CUresult flyt_copy_plain(int to_device, uint64_t dev, void *host, size_t n);
/* The same to the device, without waiting: the bytes are taken now, and a
 * later synchronous copy on the legacy stream finishes after it. */
CUresult flyt_copy_plain_queued(uint64_t dev, const void *host, size_t n);
/* ---- arrays (array.c) ---- */
/* The server's id of a CUarray, or CUDA_ERROR_INVALID_HANDLE. */
CUresult flyt_array_wire(CUarray a, uint64_t *id);

/* ---- modules and functions (module.c) ---- */

/* What CUfunction and CUkernel point to: one record per (module, name),
 * with the layout and attributes the server reported at lookup. */
struct flyt_module;
struct flyt_function {
    uint32_t            magic;
    struct flyt_module *module;
    char               *name;
    uint64_t            server_id;
    unsigned            gen;         /* reset generation server_id belongs to */
    uint32_t            param_count;
    uint32_t            param_bytes;
    flyt_param         *params;
    int32_t             attrs[FLYT_FUNC_ATTRS]; /* CUfunction_attribute values */
    uint32_t            settings;    /* bumped by each attribute or cache setting */
    struct flyt_function *next;
};
/* The record behind a CUfunction or CUkernel; NULL if it is not one. */
struct flyt_function *flyt_function_from(const void *handle);
/* The function's server id, shipping its module again after a reset. */
CUresult flyt_function_ready(struct flyt_function *f, uint64_t *server_id);
/* flyt_function_from and flyt_function_ready at once: the record behind a
 * CUfunction/CUkernel with its server id, or CUDA_ERROR_INVALID_HANDLE. */
CUresult flyt_function_use(const void *handle, struct flyt_function **f, uint64_t *server_id);
/* The record whose server id is id (this reset generation); NULL if none. */
struct flyt_function *flyt_function_by_server_id(uint64_t id);
/* After a primary context reset every server id is gone. */
void flyt_modules_reset(void);

/* ---- launches (launch.c) ---- */
/* A kernel's server id and its parameters packed as LAUNCH carries them. */
struct flyt_packed {
    uint64_t func;
    uint32_t bytes;
    char    *params; /* small, or malloc'd when it does not fit */
    char     small[1024];
};
/* Checks a launch of the CUfunction/CUkernel handle as cuLaunchKernel does
 * and packs its parameters (args or extra, as cuLaunchKernel takes them);
 * on success the caller frees out with flyt_packed_free. */
CUresult flyt_launch_pack(const void *handle, const unsigned grid[3], const unsigned block[3],
                          unsigned shared_mem, void **args, void **extra, struct flyt_packed *out);
void flyt_packed_free(struct flyt_packed *p);

/* ---- graphs (graph.c) ---- */
/* A new client-chosen id for a stream, event, graph, exec or node. */
uint64_t flyt_new_id(void);
/* A node's parameters as the wire carries them (graph.c): checked as the
 * driver checks them; a host node's function gets registered; a kernel
 * node's packed parameters are in pk (freed with flyt_packed_free). */
CUresult flyt_gnode_memset(const CUDA_MEMSET_NODE_PARAMS *m, flyt_gnode *p);
CUresult flyt_gnode_copy(const char *call, const CUDA_MEMCPY3D *c, flyt_gnode *p);
CUresult flyt_gnode_host(const CUDA_HOST_NODE_PARAMS *h, flyt_gnode *p);
CUresult flyt_gnode_kernel(const CUDA_KERNEL_NODE_PARAMS *k, flyt_gnode *p, struct flyt_packed *pk);
CUDA_KERNEL_NODE_PARAMS flyt_kernel_params_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *k);
/* Adds a node with an id chosen here; params: a kernel node's packed
 * parameters; *dptr (may be NULL): a memory-alloc node's address. */
CUresult flyt_graph_add_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                             const flyt_gnode *p, const void *params, uint64_t *dptr);
/* Whether some stream capture is open. */
int flyt_captures_open(void);

static inline CUdeviceptr flyt_dptr(uint64_t v) { return (CUdeviceptr)v; }
/* Handles are our records, always 8-byte aligned: anything else (NVIDIA's
 * runtime passes host function addresses to see whether they are kernels)
 * is refused before its magic is read. */
static inline int flyt_aligned(const void *p) { return p != NULL && ((uintptr_t)p & 7) == 0; }

/* Host pages, as the client maps and registers them (4 KiB on x86-64 Linux). */
#define FLYT_PAGE ((uint64_t)4096)
static inline uint64_t flyt_page_down(uint64_t p) { return p & ~(FLYT_PAGE - 1); }
static inline uint64_t flyt_page_up(uint64_t p) { return (p + FLYT_PAGE - 1) & ~(FLYT_PAGE - 1); }

#endif
