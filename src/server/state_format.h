/*
 * The state file's records (docs/state-format.md). Integers are
 * little-endian, records packed as declared (every field naturally aligned,
 * no padding the compiler adds): the file is read on the machine kinds Flyt
 * runs on (x86-64, aarch64), all little-endian.
 *
 *   header | section* | END section | trailer (32 bytes)
 *   section: flyt_state_section, then `length` bytes (a record and its data)
 *
 * The trailer (version 6) is SHA-256(FLYT_STATE_ROOT_TAG | body length u64 |
 * FLYT_STATE_CHUNK u64 | SHA-256 of each FLYT_STATE_CHUNK bytes of the body,
 * the last chunk shorter), the body being every byte before the trailer;
 * up to version 5 it was the SHA-256 of the body.
 */
#ifndef FLYT_STATE_FORMAT_H
#define FLYT_STATE_FORMAT_H

#include <assert.h>
#include <stdint.h>

#include "flyt_proto.h"

#define FLYT_STATE_MAGIC   0x5441545354594c46ull /* "FLYTSTAT" little-endian */
#define FLYT_STATE_VERSION 11u /* 2: the CLIENT section; 3: ARENA sections; 4: HOSTMAP; 5: GLOBAL;
                                * 6: the chunked trailer; 7: VRANGE and VMEM; 8: ARRAY, MIPMAP,
                                * TEXOBJ, SURFOBJ; 9: GRAPH, GRAPH_EXEC; 10: MEMPOOL and ASYNC;
                                * 11: HOSTMAP's read-only flag */
#define FLYT_STATE_HASH    32u /* the SHA-256 trailer */
#define FLYT_STATE_CHUNKED 6u  /* the first version with the chunked trailer */
#define FLYT_STATE_CHUNK   ((size_t)4 << 20)
#define FLYT_STATE_ROOT_TAG "FLYTSHA6" /* 8 bytes: the trailer's input starts with them */

struct flyt_state_header {
    uint64_t magic;
    uint32_t version;     /* a reader refuses a version above its own */
    uint32_t header_size; /* sizeof this struct */
    char     backend[16]; /* "host" or "cuda": a state restores on its own kind */
    uint64_t created_ns;  /* CLOCK_REALTIME at the capture */
    uint64_t reserved;
};
static_assert(sizeof(struct flyt_state_header) == 48, "state header");

enum flyt_state_stype {
    FLYT_SS_END = 0,  /* no record; last */
    FLYT_SS_SESSION,  /* flyt_state_session + int32 groups[sm_ngroups]; first, once */
    FLYT_SS_ALLOC,    /* flyt_state_alloc + size bytes of contents */
    FLYT_SS_MODULE,   /* flyt_state_module + image_size bytes of image */
    FLYT_SS_FUNC,     /* flyt_state_func + flyt_param[param_count] + name (name_len, NUL last) */
    FLYT_SS_STREAM,   /* flyt_state_stream */
    FLYT_SS_EVENT,    /* flyt_state_event */
    FLYT_SS_POOL,     /* flyt_state_pool: the id of the device's default pool */
    FLYT_SS_CLIENT,   /* flyt_state_client; right after SESSION, at most once (version 2) */
    FLYT_SS_ARENA,    /* flyt_state_arena; before every ALLOC (version 3) */
    FLYT_SS_HOSTMAP,  /* flyt_state_hostmap; among the objects, by id (version 4) */
    FLYT_SS_GLOBAL,   /* flyt_state_global + name (name_len, NUL last) + size bytes of contents;
                       * after every object (version 5) */
    FLYT_SS_VRANGE,   /* flyt_state_vrange; after the allocations, before any VMEM (version 7) */
    FLYT_SS_VMEM,     /* flyt_state_vmem + flyt_state_vmap[nmaps] + size bytes of contents;
                       * among the objects by id, those without one after them (version 7) */
    FLYT_SS_ARRAY,    /* flyt_state_array + its contents (none for a level); by id (version 8) */
    FLYT_SS_MIPMAP,   /* flyt_state_mipmap + every level's contents; by id (version 8) */
    FLYT_SS_TEXOBJ,   /* flyt_state_texobj; by id (version 8) */
    FLYT_SS_SURFOBJ,  /* flyt_state_surfobj; by id (version 8) */
    FLYT_SS_GRAPH,    /* a graph body (flyt_state_graph ...); after every object but execs (version 9) */
    FLYT_SS_GRAPH_EXEC, /* flyt_state_gexec [+ a graph body]; after the graphs (version 9) */
    FLYT_SS_MEMPOOL,  /* flyt_state_mempool; by id, in place of POOL (version 10) */
    FLYT_SS_ASYNC,    /* flyt_state_async + size bytes of contents; after every object (version 10) */
};

struct flyt_state_section {
    uint32_t type;  /* flyt_state_stype */
    uint32_t flags; /* 0 */
    uint64_t length;
};

#define FLYT_STATE_LIMITS 7 /* CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE */
/* valid bits: limit i, then the cache config, then the context flags */
#define FLYT_STATE_CACHE_VALID (1u << FLYT_STATE_LIMITS)
#define FLYT_STATE_FLAGS_VALID (1u << (FLYT_STATE_LIMITS + 1))

struct flyt_state_session {
    char     session_id[136]; /* NUL-terminated; "" standalone */
    uint64_t next_id;         /* the id table's counter */
    int32_t  deferred;        /* a failed NOREPLY result not reported yet */
    uint32_t sm_count;        /* SMs of the share, 0: the whole GPU */
    uint64_t memory_quota;    /* 0: none */
    uint64_t memory_used;     /* this session's accounted bytes */
    uint32_t sm_granularity;
    uint32_t sm_ngroups;      /* int32 group indices follow */
    uint64_t limits[FLYT_STATE_LIMITS];
    int32_t  cache_config;
    uint32_t ctx_flags;
    uint32_t valid;
    uint32_t arch; /* the GPU's compute capability, major * 10 + minor (0 in older files:
                    * not recorded): kernel images were cut to it (docs/api.md) */
};
static_assert(sizeof(struct flyt_state_session) == 248, "state session");

struct flyt_state_alloc {
    uint64_t addr, size;
};

/* An address range the backend reserved for the session's allocations:
 * reserved again, at exactly this address, before they are placed. */
struct flyt_state_arena {
    uint64_t base, size;
};

struct flyt_state_module {
    uint64_t id;
    uint8_t  sha256[32];
    uint32_t refs;
    uint32_t pad;
    uint64_t image_size;
};

#define FLYT_STATE_FUNC_ATTRS 2 /* max dynamic shared memory, preferred carveout */
struct flyt_state_func {
    uint64_t id;
    uint64_t module;
    uint32_t param_count;
    uint32_t param_bytes;
    uint32_t name_len;  /* with the NUL */
    uint32_t attr_valid; /* bit i: attrs[i] was read */
    int32_t  attrs[FLYT_STATE_FUNC_ATTRS];
};

struct flyt_state_stream {
    uint64_t id;
    uint32_t flags;
    int32_t  priority;
};

struct flyt_state_event {
    uint64_t id;
    uint32_t flags;
    uint32_t pad;
};

struct flyt_state_pool {
    uint64_t id;
};
/* Host memory the client shared (HOST_MAP, HOST_MAP_AT): its contents are
 * the client's and stay with it; a restore recreates the id detached, and the
 * client shares the memory again (HOST_REMAP) as it resumes. */
struct flyt_state_hostmap {
    uint64_t id;
    uint64_t size;
    uint64_t addr;   /* HOST_MAP_AT: the client's address; 0: HOST_MAP */
    uint32_t mapped; /* 1: device-mapped at addr (HOST_MAP_AT) */
    uint32_t flags;  /* FLYT_STATE_HOSTMAP_READ_ONLY (version 11; 0 before) */
};
#define FLYT_STATE_HOSTMAP_READ_ONLY 1u /* mapped for the GPU's reads only */
static_assert(sizeof(struct flyt_state_hostmap) == 32, "state hostmap");

/* A module global the client looked up: it must be at the same address
 * after the restore (the driver places it; the client holds the address). */
struct flyt_state_global {
    uint64_t module; /* its module's id */
    uint64_t addr, size;
    uint32_t name_len; /* NUL included */
    uint32_t pad;
};
static_assert(sizeof(struct flyt_state_global) == 32, "state global");

/* A memory pool: the device's default one (is_default: only its id and
 * attributes) or one the program created (cuMemPoolCreate on device 0). */
#define FLYT_STATE_POOL_ATTRS 4 /* CU_MEMPOOL_ATTR_REUSE_* (1..3), RELEASE_THRESHOLD (4) */
struct flyt_state_mempool {
    uint64_t id;
    uint64_t max_size;   /* 0: no limit (the driver's default) */
    uint32_t is_default;
    uint32_t attr_valid; /* bit i: attrs[i], attribute i + 1, was read */
    uint64_t attrs[FLYT_STATE_POOL_ATTRS];
};
static_assert(sizeof(struct flyt_state_mempool) == 56, "state mempool");

/* A live stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync). */
struct flyt_state_async {
    uint64_t addr, size;
    uint64_t pool; /* the id of its pool; 0: the device's current pool, or one destroyed */
};
static_assert(sizeof(struct flyt_state_async) == 24, "state async");

/* The program's own VMM reservation (cuMemAddressReserve): reserved again
 * at exactly this address. */
struct flyt_state_vrange {
    uint64_t addr, size;
};
static_assert(sizeof(struct flyt_state_vrange) == 16, "state vrange");

/* A physical allocation (cuMemCreate) with its mappings and contents. */
struct flyt_state_vmem {
    uint64_t      id;    /* the handle the client holds; 0: released, alive through its mappings */
    uint64_t      size;
    uint32_t      refs;  /* handle references: cuMemCreate and each cuMemRetainAllocationHandle */
    uint32_t      nmaps; /* flyt_state_vmap records that follow */
    flyt_vmm_prop prop;  /* as the client gave it (location 0: the session's device) */
};
static_assert(sizeof(struct flyt_state_vmem) == 48, "state vmem");

struct flyt_state_vmap {
    uint64_t addr, size, offset; /* cuMemMap(addr, size, offset, the allocation) */
    uint32_t access;             /* CU_MEM_ACCESS_FLAGS_PROT_* the device was granted */
    uint32_t pad;
};
static_assert(sizeof(struct flyt_state_vmap) == 32, "state vmap");
#define FLYT_STATE_MAX_VMAPS (1u << 20) /* mappings of one allocation */

/* A CUDA array (contents: slices of rows of width x element bytes, packed), or
 * a level of a mipmapped array (mipmap != 0; no contents: they are the
 * mipmapped array's). desc as ARRAY_CREATE gave it; a level's: its extent. */
struct flyt_state_array {
    uint64_t              id;
    uint64_t              mipmap;
    uint32_t              level;
    uint32_t              pad;
    flyt_req_array_create desc; /* levels 0 */
};
static_assert(sizeof(struct flyt_state_array) == 64, "state array");

/* A mipmapped array; then every level's contents, level 0 first. */
struct flyt_state_mipmap {
    uint64_t              id;
    flyt_req_array_create desc; /* as MIPMAP_CREATE gave it, levels included */
};
static_assert(sizeof(struct flyt_state_mipmap) == 48, "state mipmap");

/* A texture object: the value the client holds and what it was made of
 * (arrays and mipmapped arrays by id, memory by address). */
struct flyt_state_texobj {
    uint64_t            id;
    uint64_t            value;
    flyt_req_tex_create desc;
};

/* A surface object, the same with its resource alone. */
struct flyt_state_surfobj {
    uint64_t      id;
    uint64_t      value;
    flyt_res_desc res;
};

/* A graph body: this record, nnodes nodes, then nedges flyt_state_gedge.
 * A node: flyt_state_gnode, then a kernel node's param_bytes of packed
 * parameters (padded to 8 bytes), then a child graph node's own graph body.
 * Handles in the node's flyt_gnode are the client's ids (events, the
 * function, the host function's callback id; value 0 for a child graph);
 * copies and memsets name device memory only. */
struct flyt_state_graph {
    uint64_t id; /* the id the client holds for it; 0: none (a child graph nobody named) */
    uint32_t nnodes;
    uint32_t nedges;
};
static_assert(sizeof(struct flyt_state_graph) == 16, "state graph");

struct flyt_state_gnode {
    uint64_t   id; /* the node's id the client holds; 0: none */
    flyt_gnode p;
};

struct flyt_state_gedge {
    uint32_t from, to; /* indices of nodes of the same body */
};

/* An executable graph: instantiated again from graph (a GRAPH section's id),
 * or graph 0: from the body that follows (its graph was destroyed). */
struct flyt_state_gexec {
    uint64_t id;
    uint64_t graph;
    uint64_t flags; /* CUgraphInstantiate_flags */
};
static_assert(sizeof(struct flyt_state_gexec) == 24, "state gexec");
#define FLYT_STATE_GRAPH_DEPTH 32 /* child graphs nested at most this deep */

/* Where the client's request stream stood (docs/protocol.md, "Session moves"). */
struct flyt_state_client {
    uint8_t  instance[16]; /* the session's identity, given to the client in HELLO */
    uint64_t consumed;     /* request-stream bytes consumed: the client resumes there */
    uint64_t acks_ahead;   /* HOST_FUNC_DONE frames past it, counted already */
};
static_assert(sizeof(struct flyt_state_client) == 32, "state client");

#endif
