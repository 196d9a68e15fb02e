/*
 * Typed id tables: the ids a session hands to its client for the backend's
 * streams, events, modules, functions and memory pools. The client never sees
 * a backend handle, and a backend never receives a handle it did not create:
 * every id the client sends is looked up here, by type, first.
 *
 * Ids are 64-bit, unique within a session and never reused (a counter), and
 * never 0, 1 or 2 (those stream ids have fixed meanings). One hash map holds
 * every type, so an id of the wrong type is simply "not found".
 */
#ifndef FLYT_HANDLES_H
#define FLYT_HANDLES_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "flyt_hash.h"
#include "flyt_proto.h"

enum flyt_htype {
    FLYT_H_STREAM = 1,
    FLYT_H_EVENT,
    FLYT_H_MODULE,
    FLYT_H_FUNC,
    FLYT_H_POOL,
    FLYT_H_REGION, /* client memory shared through HOST_MAP */
    FLYT_H_VMEM,   /* a physical allocation of cuMemCreate */
    FLYT_H_ARRAY,  /* a CUDA array, or a level of a mipmapped array */
    FLYT_H_MIPMAP,
    FLYT_H_TEXOBJ, /* bh: the backend's CUtexObject value; u.obj.value: the client's */
    FLYT_H_SURFOBJ,
    FLYT_H_GRAPH,
    FLYT_H_GRAPH_EXEC,
    FLYT_H_GRAPH_NODE, /* owned by its graph: forgotten with it */
    FLYT_H_USER_OBJECT, /* cuUserObjectCreate's (the driver frees one with its last reference) */
};

struct flyt_module_info {
    uint8_t  sha256[32]; /* content hash of the image it was loaded from */
    uint32_t refs;       /* MODULE_LOADs of this hash not yet unloaded */
    uint64_t image_size; /* bytes of its image, counted in the session's image_bytes_live */
};

struct flyt_func_info {
    uint64_t    module;      /* id of the module it came from */
    uint32_t    param_count;
    uint32_t    param_bytes; /* max(offset + size), 0 without parameters */
    flyt_param *params;      /* param_count entries, owned by the entry */
    const char *name;        /* NUL-terminated, inside the params block (freed with it): a
                              * checkpoint recreates the function by it */
};

struct flyt_region_info {
    void    *base;   /* where the server mapped it; NULL: detached (restored, not remapped yet) */
    uint64_t size;
    uint64_t addr;   /* HOST_MAP_AT: the client's address (base, when attached); 0: HOST_MAP */
    uint8_t  mapped;      /* registered device-mapped (HOST_MAP_AT) */
    uint8_t  warned;      /* detached: its refusal was logged once */
    uint8_t  placeholder; /* detached and mapped: addr holds our PROT_NONE reservation */
    uint8_t  read_only;   /* mapped for the GPU's reads only (CU_MEMHOSTREGISTER_READ_ONLY) */
};

struct flyt_vmem_info {
    uint64_t size;     /* charged against the quota until the last release */
    uint32_t refs;     /* cuMemCreate and each cuMemRetainAllocationHandle */
    uint32_t imported; /* another session's (IPC_VMM_IMPORT): not charged here */
};

/* A pool as created (cuMemPoolCreate) or opened (IPC_POOL_IMPORT). */
struct flyt_pool_info {
    uint64_t max_size;     /* cuMemPoolCreate's maxSize */
    uint32_t handle_types; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: shareable */
    uint32_t imported;     /* another session's pool */
    uint64_t origin;       /* imported: the nonce of its session's IPC broker (ipc.h) */
    uint64_t token;        /* imported: its export's token there */
};

/* An array or a mipmapped array as created, kept for checkpoints. */
struct flyt_array_info {
    uint64_t mipmap;         /* a level: id of its mipmapped array, else 0 */
    uint32_t level;          /* a level: its index there */
    uint32_t pad;
    flyt_req_array_create desc; /* a level: its own extent; a mipmapped array: levels */
};

/* A texture or surface object: the value the client holds (the backend's,
 * unless a restore or a collision with a restored value gave it another,
 * which the backend translates in kernel parameters), and what it was made
 * of, kept for checkpoints. */
struct flyt_obj_info {
    uint64_t             value;
    flyt_req_tex_create *desc; /* owned; a surface object's: res alone */
};

/* An executable graph: what a checkpoint instantiates again (state_graph.c). */
struct flyt_exec_info {
    uint64_t     graph;   /* the graph it was made from or last updated with */
    uint64_t     flags;   /* its instantiate flags */
    flyt_bhandle recipe;  /* a clone of that graph then (NULL: out of memory) */
    uint32_t     changed; /* a node was changed in the exec itself */
};

struct flyt_hentry {
    uint64_t        id;
    enum flyt_htype type;
    flyt_bhandle    bh;
    union {
        struct flyt_module_info module;
        struct flyt_func_info   func;
        struct flyt_region_info region;
        struct flyt_vmem_info   vmem;
        struct flyt_array_info  array;
        struct flyt_obj_info    obj;
        uint64_t                graph; /* a node: its graph id; a graph: the stream capturing it, or 0
                                        * (and the FLYT_GRAPH_OWNED bit) */
        struct flyt_exec_info   exec;
        struct flyt_pool_info   pool;
        uint32_t                event_flags; /* an event: its CU_EVENT_* flags (for a checkpoint) */
    } u;
};

/* A graph entry's u.graph bit: the graph is owned by a node (a child graph,
 * a conditional body), so a checkpoint carries it with its node. Stream
 * ids, server's or client's (from FLYT_CLIENT_IDS up), never reach it. */
#define FLYT_GRAPH_OWNED (1ull << 61)

typedef struct {
    flyt_hash map; /* id -> struct flyt_hentry * */
    uint64_t  next_id;
} flyt_handles;

void flyt_handles_init(flyt_handles *t);
/* Drops every entry (backend objects are the caller's business). */
void flyt_handles_clear(flyt_handles *t);

/* A new entry with a fresh id and zeroed payload; NULL when out of memory.
 * Entry pointers stay valid until the entry is removed. */
struct flyt_hentry *flyt_handles_add(flyt_handles *t, enum flyt_htype type, flyt_bhandle bh);
/* The same with the id the client chose: NULL when it is below
 * FLYT_CLIENT_IDS or already names an entry (or out of memory). */
struct flyt_hentry *flyt_handles_add_id(flyt_handles *t, uint64_t id, enum flyt_htype type,
                                        flyt_bhandle bh);
/* NULL when the id is unknown or names an object of another type. Inline:
 * every call looks its ids up. */
static inline struct flyt_hentry *flyt_handles_get(flyt_handles *t, uint64_t id,
                                                   enum flyt_htype type)
{
    flyt_hash_slot *s = flyt_hash_find(&t->map, id);
    struct flyt_hentry *e = s ? s->value.ptr : NULL;
    return e && e->type == type ? e : NULL;
}
/* 0 when removed, -1 when not there. */
int flyt_handles_remove(flyt_handles *t, uint64_t id);

/* Calls fn on every entry until it returns non-zero; that value is returned.
 * fn must not add or remove entries. */
int flyt_handles_foreach(flyt_handles *t, int (*fn)(struct flyt_hentry *e, void *arg), void *arg);
/* Removes every entry pred accepts; returns how many. */
size_t flyt_handles_remove_if(flyt_handles *t, int (*pred)(const struct flyt_hentry *e, void *arg),
                              void *arg);

#endif
