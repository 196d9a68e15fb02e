/*
 * Flyt wire protocol: frames, limits and the fixed part of every message.
 * docs/protocol.md is the prose version of this file; keep them together.
 *
 * A frame is a 16-byte header followed by `length` payload bytes. A request's
 * payload is the op's request struct, then (FLYT_OPF_DATA ops only) trailing
 * bytes. A reply's payload is struct flyt_reply, the op's reply struct, then
 * (FLYT_OPF_RDATA ops only) trailing bytes. All integers are little-endian,
 * structs have explicit padding, and sizes are checked with static asserts.
 */
#ifndef FLYT_PROTO_H
#define FLYT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define FLYT_PROTO_MAGIC 0x54594c46u /* "FLYT" little-endian */
#define FLYT_PROTO_MAJOR 2           /* incompatible changes bump this */
#define FLYT_PROTO_MINOR 8           /* compatible additions bump this */

/* The minor version from which a server forwards the driver's output
 * (OUTPUT frames, OUTPUT_DRAIN): only to a client that speaks it. */
#define FLYT_MINOR_DEVICE_OUTPUT 1
/* From 2 a client acknowledges each CALLBACK frame with HOST_FUNC_DONE once
 * the host function ran, and the server holds the stream until then. */
#define FLYT_MINOR_HOST_FUNC_ACK 2
/* From 3 a session can move (docs/protocol.md, "Session moves"): the HELLO
 * reply names the session instance, a server that checkpoints a session and
 * stops it says so in a SESSION_MOVED frame, a restored server says where in
 * the client's request stream it resumes, and the client has PING. */
#define FLYT_MINOR_RESUME 3
/* From 3 too (one minor for both) the server says when the session's share changed (SHARE_CHANGED). */
#define FLYT_MINOR_SHARE_CHANGED 3
/* From 4 the server takes MODULE_LOAD with has_data = 2: the image without
 * its hash, which the server computes (on one machine shipping is cheaper). */
#define FLYT_MINOR_IMAGE_UNHASHED 4
/* From 5 the server shares memory and events between the sessions of one
 * tenant (IPC_*: CUDA IPC, docs/protocol.md, "IPC"). */
#define FLYT_MINOR_IPC 5
/* From 6 also VMM allocations (IPC_VMM_*: cuMemExportToShareableHandle with
 * POSIX file descriptors and its import). */
#define FLYT_MINOR_IPC_VMM 6
/* From 7 also memory pools (IPC_POOL_*: cuMemPoolExportToShareableHandle,
 * cuMemPoolExportPointer and their imports; POOL_CREATE's handle_types). */
#define FLYT_MINOR_IPC_POOL 7
/* From 8 a module's __managed__ variables (MANAGED_GET). */
#define FLYT_MINOR_MANAGED_VAR 8

/* Limits. A frame over a limit ends the session. */
#define FLYT_MAX_PAYLOAD    (1u << 30)      /* bulk data streams through in chunks */
#define FLYT_MAX_SMALL      (64u * 1024u)   /* payload of any op without FLYT_OPF_DATA data */
#define FLYT_MAX_NAME       1024u           /* kernel / variable names incl. NUL */
#define FLYT_MAX_PARAM_BYTES 32764u         /* CUDA 13 kernel parameter block limit */
#define FLYT_MAX_PARAMS     4096u           /* kernel parameters per function */
#define FLYT_MAX_LAUNCH_ATTRS 16u
#define FLYT_MAX_FATBIN     (512u << 20)    /* one fatbinary */

/* frame flags */
#define FLYT_F_NOREPLY 0x1u /* request: do not answer; errors are deferred */
#define FLYT_F_REPLY   0x2u /* this frame is a reply to request `seq` */

/* op table flags (flyt_ops.def) */
#define FLYT_OPF_DATA  0x1u
#define FLYT_OPF_ASYNC 0x2u
#define FLYT_OPF_RDATA 0x4u

/* Server-to-client frames that answer no request. */
#define FLYT_OP_OUTPUT   101 /* payload: struct flyt_msg_output, then the bytes */
#define FLYT_OP_CALLBACK 200 /* payload: struct flyt_msg_callback */
#define FLYT_OP_SESSION_MOVED 161 /* payload: struct flyt_msg_moved; the last frame */
#define FLYT_OP_SHARE_CHANGED 166 /* payload: struct flyt_msg_share */

/* Stream ids with fixed meaning; other ids come from STREAM_CREATE. */
#define FLYT_STREAM_DEFAULT    0u
#define FLYT_STREAM_LEGACY     1u
#define FLYT_STREAM_PER_THREAD 2u

/* Error codes of the wire are CUDA driver API codes (CUresult). */
#define FLYT_ERR_PROTOCOL 999 /* CUDA_ERROR_UNKNOWN */

struct flyt_frame_hdr {
    uint32_t length; /* payload bytes after this header */
    uint16_t op;
    uint16_t flags;
    uint32_t seq;    /* chosen by the client, echoed in the reply */
    uint32_t reserved;
};

/* Leads every reply payload. */
struct flyt_reply {
    int32_t result;   /* CUresult of this call */
    int32_t deferred; /* first error of earlier NOREPLY calls, then cleared */
};

enum flyt_op {
#define FLYT_OP(name, num, req, rep, flags) FLYT_OP_##name = num,
#include "flyt_ops.def"
#undef FLYT_OP
    FLYT_OP_MAX = 256
};

/* ---- request and reply structs ---- */
typedef struct { uint8_t unused; uint8_t pad[7]; } flyt_req_none;
typedef struct { uint8_t unused; uint8_t pad[7]; } flyt_rep_none;

typedef struct {
    uint32_t magic;
    uint16_t major, minor;
    uint32_t client_pid;
    uint32_t flags;
    char     client_host[64];
} flyt_req_hello;

typedef struct {
    uint16_t major, minor;
    uint32_t server_pid;
    uint32_t device_count;
    uint32_t flags;       /* FLYT_HELLO_* */
    char     backend[32]; /* "cuda" or "host" */
    /* from 2.3 (a 2.2 client skips them): */
    uint8_t  instance[16];  /* this session's identity, kept across checkpoint and restore */
    uint64_t resume_offset; /* FLYT_HELLO_RESTORED: the request-stream byte it resumes at */
} flyt_rep_hello;

/* HELLO flags in the reply: the server admits only with a session token. */
#define FLYT_HELLO_AUTH_REQUIRED 0x1u
/* ... it serves a restored session (instance, resume_offset) to the first
 * client admitted. */
#define FLYT_HELLO_RESTORED 0x2u
/* ... it keeps kernel images across sessions (--cache-dir; from 2.4): only
 * then can a hash sent first spare shipping an image. */
#define FLYT_HELLO_IMAGE_CACHE 0x4u
/* HELLO flags in the request: the client reconnects to resume its session. */
#define FLYT_HELLO_RESUME 0x1u

/* AUTH: token_len bytes of session token follow (docs/api.md gives the
 * format). Sent right after HELLO when the server asks for it; any other
 * op before a successful AUTH ends the session. */
#define FLYT_MAX_TOKEN 512u
typedef struct { uint32_t token_len; uint32_t pad; } flyt_req_auth;

typedef struct { int32_t value; int32_t pad; } flyt_req_i32;
typedef struct { int32_t value; int32_t pad; } flyt_rep_i32;
typedef struct { int32_t a, b; } flyt_rep_i32_pair;
typedef struct { uint64_t value; } flyt_rep_u64;
typedef struct { uint64_t a, b; } flyt_rep_u64_pair;
typedef struct { float value; int32_t pad; } flyt_rep_f32;
typedef struct { uint64_t handle; } flyt_req_handle;
typedef struct { uint64_t a, b; } flyt_req_handle_pair;
typedef struct { int32_t device; int32_t pad; } flyt_req_device;
typedef struct { int32_t attr; int32_t device; } flyt_req_device_attr;
typedef struct { int32_t limit; int32_t pad; uint64_t value; } flyt_req_limit;
typedef struct { uint64_t free_bytes, total_bytes; } flyt_rep_mem_info;
typedef struct { char bus_id[64]; } flyt_rep_pci_bus_id;

/* DEVICE_SNAPSHOT: all the driver can say about the device without the GPU,
 * fetched once at connect so the client answers device queries itself. It
 * already shows the tenant's virtual GPU (its SMs and memory quota). */
#define FLYT_DEVICE_ATTRS 192u /* > CU_DEVICE_ATTRIBUTE_MAX of CUDA 13.0 */
typedef struct {
    char     name[256];
    uint8_t  uuid[16];
    uint8_t  luid[8];
    char     pci_bus_id[32];
    uint64_t total_mem;
    int32_t  driver_version;
    int32_t  attr_count;             /* entries of attrs the server filled */
    int32_t  attrs[FLYT_DEVICE_ATTRS]; /* by CUdevice_attribute; 0 where unknown */
} flyt_rep_device_snapshot;

/* struct cudaDeviceProp of CUDA 13 as bytes (1008); checked where the type is known */
#define FLYT_DEVICE_PROP_SIZE 1008u
typedef struct { uint8_t bytes[FLYT_DEVICE_PROP_SIZE]; } flyt_rep_props;

typedef struct { uint64_t size; uint64_t stream; uint64_t pool; } flyt_req_mem_alloc;
typedef struct { uint64_t width_bytes, height; } flyt_req_mem_pitch;
typedef struct { uint64_t dptr; uint64_t stream; } flyt_req_mem_free_async;
typedef struct {
    int32_t  type;    /* cudaMemoryType */
    int32_t  device;
    uint64_t device_pointer;
    uint64_t base;    /* allocation base and size, 0 when unknown */
    uint64_t size;
} flyt_rep_pointer_attrs;
/* handle_types: 0, or CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (2.7) */
typedef struct { uint64_t max_size; int32_t device; uint32_t handle_types; } flyt_req_pool_create;
typedef struct { uint64_t pool; int32_t attr; int32_t pad; uint64_t value; } flyt_req_pool_attr;

/* HTOD: `size` data bytes follow. DTOH: reply carries `size` bytes. DTOD: no data. */
typedef struct { uint64_t dst; uint64_t src; uint64_t size; uint64_t stream; } flyt_req_memcpy;

/* One side of a 3D copy. Host sides are packed by the client (pitch = width,
 * height = copy height, position 0) and their ptr is ignored. */
typedef struct { uint64_t ptr, pitch, height, x, y, z; } flyt_pitched;
enum { FLYT_DIR_HTOD = 1, FLYT_DIR_DTOH = 2, FLYT_DIR_DTOD = 3 };
typedef struct {
    uint32_t     dir;
    uint32_t     pad;
    uint64_t     stream;
    flyt_pitched dst, src;
    uint64_t     width_bytes, height, depth;
} flyt_req_memcpy_3d;

/* 3D memset: depth slices of height rows of width bytes. 1D: height = depth = 1.
 * elem_size 1, 2 or 4 (cuMemsetD8/D16/D32): value is repeated per element
 * and width_bytes is a multiple of it; 0 reads as 1. */
typedef struct {
    uint64_t dst, pitch, slice_pitch, width_bytes, height, depth, stream;
    uint32_t value;
    uint32_t elem_size;
} flyt_req_memset;

/* STREAM_CREATE / EVENT_CREATE: id, when not 0, is the handle the client
 * chose (at or above FLYT_CLIENT_IDS, unused): the creation can then be
 * pipelined, later calls naming the id before any reply. 0: the server
 * picks one and answers it. */
#define FLYT_CLIENT_IDS (1ull << 62)
typedef struct { uint32_t flags; int32_t priority; uint64_t id; } flyt_req_stream_create;
typedef struct { uint32_t flags; uint32_t pad; uint64_t id; } flyt_req_event_create;

/* IPC (docs/protocol.md, "IPC"): a handle is FLYT_IPC_HANDLE_BYTES opaque to
 * the program (CUipcMemHandle / CUipcEventHandle); the server that made it
 * reads it. IPC_MEM_OPEN: id 0; IPC_EVENT_OPEN: the event id the client
 * chose (as EVENT_CREATE's); IPC_POOL_PTR_IMPORT: the imported pool's id. */
#define FLYT_IPC_HANDLE_BYTES 64u
typedef struct { uint8_t handle[FLYT_IPC_HANDLE_BYTES]; } flyt_rep_ipc_handle;
typedef struct {
    uint8_t  handle[FLYT_IPC_HANDLE_BYTES];
    uint64_t id;
    uint32_t flags; /* IPC_MEM_OPEN: CU_IPC_MEM_* */
    uint32_t pad;
} flyt_req_ipc_open;
typedef struct { uint64_t stream, event; uint32_t flags; uint32_t pad; } flyt_req_stream_wait;
typedef struct { uint64_t stream; uint64_t callback_id; } flyt_req_host_func;
typedef struct { uint64_t event, stream; uint32_t flags; uint32_t pad; } flyt_req_event_record;

/* MODULE_LOAD: first with has_data = 0; if the server does not hold the
 * fatbinary under this hash it answers need_data = 1 and the client sends it
 * again with has_data = 1 and `size` bytes following. has_data = 2 (minor 4):
 * the bytes follow at once and sha256 is not read. */
typedef struct { uint8_t sha256[32]; uint64_t size; uint32_t has_data; uint32_t pad; } flyt_req_module_load;
typedef struct { uint64_t module; uint32_t need_data; uint32_t pad; } flyt_rep_module_load;

/* FUNC_GET / GLOBAL_GET: name_len bytes (NUL included) follow. */
typedef struct { uint64_t module; uint32_t name_len; uint32_t pad; } flyt_req_named;
/* FUNC_GET reply: param_count flyt_param entries follow. attrs: the
 * function's CUfunction_attribute values at lookup, so the client answers
 * attribute queries itself. */
#define FLYT_FUNC_ATTRS 16u /* CU_FUNC_ATTRIBUTE_MAX of CUDA 13.0 */
typedef struct {
    uint64_t func;
    uint32_t param_count;
    uint32_t param_bytes;
    int32_t  attrs[FLYT_FUNC_ATTRS];
} flyt_rep_func;
typedef struct { uint32_t offset, size; } flyt_param;

typedef struct { uint64_t func; int32_t attr; int32_t value; } flyt_req_func_attr;

/* LAUNCH: attr_count flyt_launch_attr, then param_bytes of the parameter
 * buffer laid out as FUNC_GET's offsets say. */
typedef struct {
    uint32_t id;
    uint32_t pad;
    uint8_t  value[64]; /* cudaLaunchAttributeValue / CUlaunchAttributeValue */
} flyt_launch_attr;
typedef struct {
    uint64_t func;
    uint64_t stream;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_mem;
    uint32_t attr_count;
    uint32_t param_bytes;
    uint32_t pad;
} flyt_req_launch;

typedef struct { uint64_t func; int32_t block_size; int32_t num_blocks; uint64_t dyn_smem; uint32_t flags; uint32_t pad; } flyt_req_occupancy;

/* OCCUPANCY_CLUSTER: a launch configuration as LAUNCH carries it (no
 * parameters; pad says what is asked), answered with a count. */
enum { FLYT_CLUSTER_MAX_ACTIVE = 0, FLYT_CLUSTER_MAX_SIZE = 1 };

/* LINK: run-time linking (cuLink*) on the server, which has the JIT. Data:
 * input_count inputs, each a flyt_link_input, name_len bytes of name (NUL
 * included) and size bytes of image; total_bytes covers them all. The
 * reply's value is the linked cubin's size, its bytes trail the reply. */
#define FLYT_MAX_LINK_INPUTS 256u
/* LINK: flags FLYT_LINK_VERBOSE asks the JIT for its verbose info log. The
 * reply's data, on success and on failure: the cubin (value bytes, none on
 * failure), then the info log and the error log, each NUL-terminated and
 * at most FLYT_LINK_LOG bytes with its NUL. */
enum { FLYT_LINK_VERBOSE = 1u };
#define FLYT_LINK_LOG 16384u
typedef struct { uint32_t input_count; uint32_t flags; uint64_t total_bytes; } flyt_req_link;
typedef struct { uint32_t type; uint32_t name_len; uint64_t size; } flyt_link_input;

/* TENSOR_MAP: cuTensorMapEncode* and cuTensorMapReplaceAddress, which
 * only the driver beside the GPU knows how to encode. The reply is the
 * 128-byte CUtensorMap. REPLACE: map holds the map to change. */
enum { FLYT_TMAP_TILED = 0, FLYT_TMAP_IM2COL = 1, FLYT_TMAP_IM2COL_WIDE = 2, FLYT_TMAP_REPLACE = 3 };
#define FLYT_TMAP_RANK 5u
typedef struct {
    uint32_t kind;
    uint32_t data_type;
    uint32_t rank;
    uint32_t interleave;
    uint32_t swizzle;
    uint32_t l2_promotion;
    uint32_t oob_fill;
    uint32_t wide_mode;
    uint64_t global_address;
    uint64_t global_dim[FLYT_TMAP_RANK];
    uint64_t global_strides[FLYT_TMAP_RANK - 1];
    uint32_t box_dim[FLYT_TMAP_RANK];
    uint32_t element_strides[FLYT_TMAP_RANK];
    int32_t  lower_corner[FLYT_TMAP_RANK - 2]; /* im2col; wide: [0] only */
    int32_t  upper_corner[FLYT_TMAP_RANK - 2];
    uint32_t channels_per_pixel;
    uint32_t pixels_per_column;
    uint64_t map[16];
} flyt_req_tensor_map;
typedef struct { uint64_t map[16]; } flyt_rep_tensor_map;

/* CALL: one plain driver call of calls.api (gen_calls.py writes both ends).
 * id: its call id (flyt_calls.h); args: its parameters in order, handles as
 * their wire ids, pointers as 0; in_size bytes of the in-pointer's pointee
 * follow. The reply: out_size bytes of the out-pointer's pointee trail it. */
#define FLYT_CALL_MAX_ARGS 8u
#define FLYT_CALL_MAX_BYTES 256u /* an in or out pointee */
typedef struct { uint32_t id; uint32_t in_size; uint64_t args[FLYT_CALL_MAX_ARGS]; } flyt_req_call;
typedef struct { uint32_t out_size; uint32_t pad; } flyt_rep_call;

/* VMM_*: the driver's virtual memory management (cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess, ...). Addresses and sizes travel as
 * they are; a physical allocation is named by its session id. The one
 * device of a session is location id 0 on the wire. */
typedef struct {
    uint32_t type;          /* CUmemAllocationType: PINNED */
    uint32_t handle_types;  /* CUmemAllocationHandleType mask asked for */
    uint32_t location_type; /* CUmemLocationType: DEVICE */
    int32_t  location_id;   /* 0 */
    uint8_t  compression;
    uint8_t  rdma_capable;
    uint16_t usage;
    uint32_t option;        /* VMM_GRANULARITY: CUmemAllocationGranularity_flags */
} flyt_vmm_prop;
typedef struct { uint64_t size, alignment, addr, flags; } flyt_req_vmm_reserve;
typedef struct { uint64_t ptr, size; } flyt_req_vmm_range;
typedef struct { uint64_t size, flags; flyt_vmm_prop prop; } flyt_req_vmm_create;
typedef struct { uint64_t ptr, size, offset, handle, flags; } flyt_req_vmm_map;
/* VMM_SET_ACCESS: count flyt_vmm_access entries follow (at most 64). */
#define FLYT_VMM_MAX_ACCESS 64u
typedef struct { uint64_t ptr, size; uint32_t count, pad; } flyt_req_vmm_access;
typedef struct { uint32_t location_type; int32_t location_id; uint32_t flags, pad; } flyt_vmm_access;

/* MODULE_FUNCS: the names of a module's functions, NUL-terminated one after
 * another in the reply's trailing bytes; the reply's value is their count. */
#define FLYT_MAX_MODULE_FUNCS_BYTES (4u << 20)

/* HOST_MAP: a memfd of at least `size` bytes comes with the frame
 * (SCM_RIGHTS); the server maps it, pins it for DMA and answers a region id.
 * The *_MAPPED copies then move bytes between the GPU and that shared memory
 * directly: no bytes cross the socket. Answered only when complete. */
typedef struct { uint64_t size; } flyt_req_host_map;
typedef struct { uint64_t device; uint64_t region; uint64_t offset; uint64_t size; uint64_t stream; } flyt_req_memcpy_mapped;

/* HOST_MAP_AT: as HOST_MAP, but the server maps the memfd at the client's
 * own address `addr` (page-aligned) and registers it device-mapped, so host
 * code and kernels use one pointer. Reply: a = region id, b = the device
 * pointer the driver gave (normally addr). CUDA_ERROR_ALREADY_MAPPED: the
 * address is taken in the server; the client tries another. */
/* flags: 0 or CU_MEMHOSTREGISTER_READ_ONLY (the GPU only reads it) */
typedef struct { uint64_t size; uint64_t addr; uint32_t flags; uint32_t pad; } flyt_req_host_map_at;

/* HOST_REMAP: a restored session's region `id` (recreated detached, with no
 * mapping) gets its memory back: the memfd comes with the frame, as with
 * HOST_MAP. size, addr (HOST_MAP_AT's, 0 for HOST_MAP) and mapped (1: it
 * was HOST_MAP_AT, device-mapped) must be the region's as checkpointed; a
 * mapped one is mapped at addr again and must get addr as its device
 * pointer. Sent by a resuming client before it replays; the server does not
 * count it in the request stream. */
typedef struct { uint64_t id; uint64_t size; uint64_t addr; uint32_t mapped, pad; } flyt_req_host_remap;

/* MEMCPY_HTOD_PEER / MEMCPY_DTOH_PEER: src resp. dst is an address in the
 * client process. HTOD is answered once complete, or with FLYT_PEER_ASYNC
 * once the server has read the whole buffer (the DMA may still run, as with
 * CUDA's asynchronous pageable copies); DTOH once the data is in the client's
 * buffer. CUDA_ERROR_NOT_PERMITTED: the server cannot reach the client's
 * memory (another machine, or no permission); the client then copies
 * through the socket. */
#define FLYT_PEER_ASYNC 0x1u
typedef struct { uint64_t dst, src, size, stream; uint32_t flags; uint32_t pad; } flyt_req_memcpy_peer;

/* OUTPUT_DRAIN: sent by the client as its process exits, so that what the
 * driver printed during its last pipelined calls still reaches it (the
 * reply is preceded by OUTPUT frames like any other). sync = 1: the server
 * first synchronises the device, as a context teardown at exit would. */
typedef struct { uint32_t sync; uint32_t pad; } flyt_req_output_drain;

/* server -> client, op FLYT_OP_OUTPUT, seq 0, before the reply or callback
 * frame it precedes: bytes the driver wrote to the session process's stdout
 * (fd 1) or stderr (fd 2), at most FLYT_MAX_OUTPUT_CHUNK per frame. */
#define FLYT_MAX_OUTPUT_CHUNK (64u * 1024u)
struct flyt_msg_output { uint32_t fd; uint32_t pad; };

/* server -> client, op FLYT_OP_SHARE_CHANGED, seq 0, to a client of minor
 * FLYT_MINOR_SHARE_CHANGED or later: a live resize changed what the device
 * reports (the share's SMs, the memory quota as total memory). Sent before
 * the reply to the first request the session handles on the new share. */
struct flyt_msg_share {
    uint64_t total_mem; /* cuDeviceTotalMem's answer from now on */
    int32_t  sm_count;  /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT's */
    uint32_t pad;
};
/* ---- CUDA arrays, mipmapped arrays, texture and surface objects ----
 * ARRAY_CREATE / MIPMAP_CREATE: a CUDA_ARRAY3D_DESCRIPTOR (height 0: 1D,
 * depth 0: not 3D or layered), levels for mipmaps; answered with an id. */
typedef struct {
    uint64_t width, height, depth;
    uint32_t format, channels, flags, levels;
} flyt_req_array_create;
typedef struct { uint64_t mipmap; uint32_t level; uint32_t pad; } flyt_req_mipmap_level;

/* ARRAY_COPY: a 3D copy whose sides may be arrays (CUDA_MEMCPY3D's shape).
 * A PACKED side is host memory on the client: its bytes follow the request
 * (source) or trail the reply as MEMCPY_3D's do (destination); at most one
 * side is packed. REGION: client memory shared through HOST_MAP, its base
 * `offset` bytes into the region. ARRAY: handle is an ARRAY_CREATE or
 * MIPMAP_LEVEL id; x is in bytes, z a layer or cubemap face of layered ones. */
enum { FLYT_SIDE_DEVICE = 1, FLYT_SIDE_ARRAY = 2, FLYT_SIDE_REGION = 3, FLYT_SIDE_PACKED = 4 };
typedef struct {
    uint32_t kind, pad;
    uint64_t handle; /* device address, array id or region id */
    uint64_t offset;
    uint64_t pitch, height, x, y, z;
} flyt_copy_side;
typedef struct {
    uint64_t       stream;
    flyt_copy_side dst, src;
    uint64_t       width_bytes, height, depth;
} flyt_req_array_copy;

/* CUDA_RESOURCE_DESC: handle is the array or mipmap id (ARRAY, MIPMAPPED)
 * or the device address (LINEAR: size bytes; PITCH2D: width x height
 * elements, pitch bytes apart). */
typedef struct {
    uint32_t type, flags;
    uint64_t handle;
    uint32_t format, channels;
    uint64_t size, width, height, pitch;
} flyt_res_desc;
/* CUDA_TEXTURE_DESC without its reserved words. */
typedef struct {
    uint32_t address_mode[3], filter_mode, flags, max_anisotropy, mipmap_filter_mode;
    float    mipmap_level_bias, min_mipmap_level_clamp, max_mipmap_level_clamp, border_color[4];
} flyt_tex_desc;
/* CUDA_RESOURCE_VIEW_DESC; present = 0: none given. */
typedef struct {
    uint32_t present, format;
    uint64_t width, height, depth;
    uint32_t first_mip, last_mip, first_layer, last_layer;
} flyt_view_desc;
/* TEX_CREATE / SURF_CREATE answer the driver's own CUtexObject /
 * CUsurfObject value: kernels receive it as a plain parameter. */
typedef struct { flyt_res_desc res; flyt_tex_desc tex; flyt_view_desc view; } flyt_req_tex_create;
/* ---- CUDA graphs (docs/graphs.md) ----
 * CAPTURE_BEGIN: graph is the id the client chose for the graph the capture
 * builds (the driver makes it at begin). CAPTURE_END answers that id. */
typedef struct { uint64_t stream; uint64_t graph; uint32_t mode; uint32_t pad; } flyt_req_capture_begin;
/* CAPTURE_INFO: ndeps node ids trail the reply. */
typedef struct { int32_t status; uint32_t ndeps; uint64_t capture_id; uint64_t graph; } flyt_rep_capture_info;
/* CAPTURE_DEPS: n node ids follow; flags: CU_STREAM_ADD/SET_CAPTURE_DEPENDENCIES. */
typedef struct { uint64_t stream; uint32_t n; uint32_t flags; } flyt_req_capture_deps;
typedef struct { uint64_t graph; uint32_t flags; uint32_t pad; } flyt_req_graph_create;
/* GRAPH_INSTANTIATE: upload_stream is used when flags has CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD. */
typedef struct { uint64_t exec; uint64_t graph; uint64_t flags; uint64_t upload_stream; } flyt_req_graph_inst;
/* INSTANTIATE / EXEC_UPDATE: result is CUgraphInstantiateResult resp.
 * CUgraphExecUpdateResult; node / from_node: the nodes at fault, or 0.
 * alloc_nodes (INSTANTIATE): 1 when the exec holds memory allocation nodes
 * (the client then waits for each launch of it). */
typedef struct { int32_t result; int32_t alloc_nodes; uint64_t node; uint64_t from_node; } flyt_rep_graph_info;
/* GRAPH_NODES: which = FLYT_GNODES_*; at most max ids (edges: max from/to
 * pairs) trail the reply, whose value is how many there are in all.
 * GRAPH_DOT: which = the CUgraphDebugDot_flags; the text trails the reply. */
enum { FLYT_GNODES_ALL = 0, FLYT_GNODES_ROOTS = 1, FLYT_GNODES_EDGES = 2 };
/* GRAPH_NODES of one node: graph is then the node's id. */
enum { FLYT_GNODES_DEPS = 3, FLYT_GNODES_DEPENDENTS = 4 };
#define FLYT_MAX_GRAPH_NODES (1u << 20)
#define FLYT_MAX_GRAPH_DOT   (64u << 20)
typedef struct { uint64_t graph; uint32_t which; uint32_t max; } flyt_req_graph_nodes;
/* GRAPH_ADD_NODE: node is the id the client chose; ndeps dependency node
 * ids follow, then a flyt_gnode, then (kernel nodes) param_bytes of
 * parameters packed as LAUNCH packs them. The reply's value: a memory-alloc
 * node's address. */
typedef struct { uint64_t graph; uint64_t node; uint32_t ndeps; uint32_t pad; } flyt_req_graph_node;
/* One node's parameters. Copies and memsets are 2D (width bytes x rows);
 * a copy side with a region id (HOST_MAP) is offset bytes into that region.
 * value: memset value, host node callback id, event id, child graph id,
 * freed address. Kernel nodes: func, grid, block, shared_mem, param_bytes. */
typedef struct {
    uint32_t type; /* CUgraphNodeType */
    uint32_t elem_size;
    uint64_t dst, dst_pitch, dst_region;
    uint64_t src, src_pitch, src_region;
    uint64_t width, rows;
    uint64_t value;
    uint64_t func;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_mem;
    uint32_t param_bytes;
} flyt_gnode;
/* A conditional node (CU_GRAPH_NODE_TYPE_CONDITIONAL): value is the
 * driver's own CUgraphConditionalHandle (kernels set it), elem_size the
 * CUgraphConditionalNodeType, rows the number of body graphs, whose ids
 * (chosen by the client, as for cuGraphCreate) trail GRAPH_ADD_NODE. */
#define FLYT_MAX_COND_BODIES 1024u
/* Bytes that trail a flyt_gnode: a kernel node's packed parameters, a
 * conditional node's body graph ids. */
enum { FLYT_GNODE_TYPE_KERNEL = 0, FLYT_GNODE_TYPE_CONDITIONAL = 13 }; /* CUgraphNodeType's */
static inline uint64_t flyt_gnode_trailing(const flyt_gnode *p)
{
    if (p->type == FLYT_GNODE_TYPE_KERNEL)
        return p->param_bytes;
    return p->type == FLYT_GNODE_TYPE_CONDITIONAL ? p->rows * sizeof(uint64_t) : 0;
}
/* GRAPH_ADD_DEPS: n from ids, then n to ids; remove = 1 removes them. */
typedef struct { uint64_t graph; uint32_t n; uint32_t remove; } flyt_req_graph_deps;
/* GRAPH_NODE_GET: the node's parameters as a flyt_gnode (handles as ids; a
 * host copy side as region and offset), then a kernel node's packed
 * parameters. GRAPH_NODE_SET: a flyt_gnode and a kernel node's packed
 * parameters follow; exec 0 sets the graph's node, else the exec's copy of
 * it (cuGraphExec*SetParams). */
typedef struct { uint64_t exec; uint64_t node; } flyt_req_graph_node_ref;
/* GRAPH_NODE_MISC: what = FLYT_GNODE_*; other: FIND_IN_CLONE's clone. The
 * reply's value: the node or graph found (a child graph gets an id here). */
enum { FLYT_GNODE_DESTROY = 0, FLYT_GNODE_FIND_IN_CLONE = 1, FLYT_GNODE_CHILD_GRAPH = 2 };
typedef struct { uint64_t node; uint64_t other; uint32_t what; uint32_t pad; } flyt_req_graph_node_misc;

/* CAPTURE_TO_GRAPH (cuStreamBeginCaptureToGraph): the stream captures
 * into the existing graph, after the n node ids that follow (default edges). */
typedef struct { uint64_t stream; uint64_t graph; uint32_t mode; uint32_t n; } flyt_req_capture_to_graph;
/* USER_OBJECT_CREATE: object is the id the client chose; callback the id of
 * the destructor the client registered, which the server's CALLBACK frame
 * names when the driver destroys the object (docs/graphs.md). */
typedef struct { uint64_t object; uint64_t callback; uint32_t refs; uint32_t flags; } flyt_req_user_object;

/* server -> client, op FLYT_OP_CALLBACK, seq 0 */
/* keep = 1: the callback belongs to a graph and comes again at its next
 * launch, so the client keeps it registered. */
struct flyt_msg_callback { uint64_t callback_id; int32_t status; int32_t keep; };

/* server -> client, op FLYT_OP_SESSION_MOVED, seq 0, the session's last
 * frame: it was checkpointed and stopped after consuming `consumed` bytes of
 * the client's request stream (counted from the end of the handshake). */
#define FLYT_MOVED_CHECKPOINT 1u /* FLYT_CKPT_STOP: a restore comes later */
#define FLYT_MOVED_SUSPENDED  2u /* with FLYT_CKPT_SUSPEND: preempted, restored whenever the
                                  * operator does: the client waits without a deadline */
struct flyt_msg_moved { uint64_t consumed; uint32_t reason; uint32_t pad; };

/* ---- the op table ---- */
struct flyt_op_info {
    const char *name;
    uint32_t    req_size;
    uint32_t    rep_size;
    uint32_t    flags;
};

/* NULL entry (name == NULL) for numbers no op uses. */
const struct flyt_op_info *flyt_op_info(unsigned op);
const char *flyt_op_name(unsigned op);

/* Checks a request header against the op table. Returns NULL when valid,
 * else a static string saying what is wrong. */
const char *flyt_check_request(const struct flyt_frame_hdr *h);

#endif
