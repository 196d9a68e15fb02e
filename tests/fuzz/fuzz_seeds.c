/*
 * Writes the session target's seed corpus into DIR: for every op of
 * flyt_ops.def one frame with its request zeroed (and for CALL one per call
 * id), and a few sequences a client really sends (an allocation;
 * a stream with a client-chosen id, synchronised and destroyed). libFuzzer
 * mutates from these; the replay runs them in CI.
 * usage: fuzz_seeds DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_proto.h"

static unsigned char seq_buf[1 << 16];
static size_t seq_len;

static void frame(uint16_t op, uint16_t flags, const void *req, size_t len)
{
    struct flyt_frame_hdr h = {(uint32_t)len, op, flags, (uint32_t)(seq_len + 2), 0};
    memcpy(seq_buf + seq_len, &h, sizeof h);
    memcpy(seq_buf + seq_len + sizeof h, req, len);
    seq_len += sizeof h + len;
}

static void write_seed(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(seq_buf, 1, seq_len, f) != seq_len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    seq_len = 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    static const unsigned char zeros[4096];
    char name[96];
#define FLYT_OP(op_name, num, req, rep, fl)                        \
    frame(num, 0, zeros, sizeof(req) <= sizeof zeros ? sizeof(req) : 0); \
    write_seed(dir, "op-" #op_name);
#include "flyt_ops.def"
#undef FLYT_OP
    for (uint32_t id = 1; id < 64; id++) {
        flyt_req_call call = {.id = id};
        frame(FLYT_OP_CALL, 0, &call, sizeof call);
        snprintf(name, sizeof name, "call-%u", id);
        write_seed(dir, name);
    }

    /* an allocation (its address is the backend's: later frames cannot know it) */
    flyt_req_mem_alloc alloc = {.size = 4096};
    frame(FLYT_OP_MEM_ALLOC, 0, &alloc, sizeof alloc);
    write_seed(dir, "seq-alloc");

    /* a stream and an event with client-chosen ids, recorded and synchronised */
    flyt_req_stream_create sc;
    memset(&sc, 0, sizeof sc);
    sc.id = FLYT_CLIENT_IDS + 1;
    frame(FLYT_OP_STREAM_CREATE, FLYT_F_NOREPLY, &sc, sizeof sc);
    flyt_req_handle sync = {.handle = FLYT_CLIENT_IDS + 1};
    frame(FLYT_OP_STREAM_SYNC, 0, &sync, sizeof sync);
    frame(FLYT_OP_STREAM_DESTROY, 0, &sync, sizeof sync);
    write_seed(dir, "seq-stream");

    /* a graph, a conditional IF/ELSE node with two client-chosen bodies, a
     * user object the graph takes, and the graph destroyed */
    flyt_req_graph_create gc = {.graph = FLYT_CLIENT_IDS + 2};
    frame(FLYT_OP_GRAPH_CREATE, FLYT_F_NOREPLY, &gc, sizeof gc);
    struct {
        flyt_req_graph_node req;
        flyt_gnode p;
        uint64_t bodies[2];
    } cond = {{.graph = FLYT_CLIENT_IDS + 2, .node = FLYT_CLIENT_IDS + 3},
              {.type = FLYT_GNODE_TYPE_CONDITIONAL, .value = 1ull << 40 | 1ull << 32 | 1, .rows = 2},
              {FLYT_CLIENT_IDS + 4, FLYT_CLIENT_IDS + 5}};
    frame(FLYT_OP_GRAPH_ADD_NODE, 0, &cond, sizeof cond);
    flyt_req_user_object uo = {.object = FLYT_CLIENT_IDS + 6, .callback = 1, .refs = 1, .flags = 1};
    frame(FLYT_OP_USER_OBJECT_CREATE, FLYT_F_NOREPLY, &uo, sizeof uo);
    flyt_req_capture_to_graph ctg = {.stream = FLYT_CLIENT_IDS + 1, .graph = FLYT_CLIENT_IDS + 4};
    frame(FLYT_OP_CAPTURE_TO_GRAPH, 0, &ctg, sizeof ctg);
    flyt_req_handle gd = {.handle = FLYT_CLIENT_IDS + 2};
    frame(FLYT_OP_GRAPH_DESTROY, FLYT_F_NOREPLY, &gd, sizeof gd);
    write_seed(dir, "seq-graph-conditional");

    /* an interprocess event exported, and a handle of a session that is not
     * there opened (IPC: the broker is asked and cannot be reached) */
    flyt_req_event_create ec = {.flags = 0x6 /* INTERPROCESS | DISABLE_TIMING */,
                                .id = FLYT_CLIENT_IDS + 7};
    frame(FLYT_OP_EVENT_CREATE, FLYT_F_NOREPLY, &ec, sizeof ec);
    flyt_req_handle ex = {.handle = FLYT_CLIENT_IDS + 7};
    frame(FLYT_OP_IPC_EVENT_EXPORT, 0, &ex, sizeof ex);
    flyt_req_ipc_open op = {.id = FLYT_CLIENT_IDS + 8};
    static const uint64_t foreign[4] = {0x3143504954594c46ull, 2ull | 1ull << 32, 1, 1};
    memcpy(op.handle, foreign, sizeof foreign);
    frame(FLYT_OP_IPC_EVENT_OPEN, 0, &op, sizeof op);
    write_seed(dir, "seq-ipc-event");

    /* a shareable pool exported, an allocation of it exported, and a pool
     * handle of a session that is not there imported */
    flyt_req_pool_create pc = {.handle_types = 1 /* POSIX descriptors */};
    frame(FLYT_OP_POOL_CREATE, 0, &pc, sizeof pc);
    flyt_req_handle pe = {.handle = 1}; /* the server's first id */
    frame(FLYT_OP_IPC_POOL_EXPORT, 0, &pe, sizeof pe);
    flyt_req_mem_alloc ma = {.size = 4096, .pool = 1};
    frame(FLYT_OP_MEM_ALLOC_ASYNC, 0, &ma, sizeof ma);
    flyt_req_handle xe = {.handle = 0x7f0000000000ull};
    frame(FLYT_OP_IPC_PTR_EXPORT, 0, &xe, sizeof xe);
    flyt_req_ipc_open pi = {0};
    static const uint64_t foreign_pool[4] = {0x3143504954594c46ull, 4ull | 1ull << 32, 1, 1};
    memcpy(pi.handle, foreign_pool, sizeof foreign_pool);
    frame(FLYT_OP_IPC_POOL_IMPORT, 0, &pi, sizeof pi);
    pi.id = 1;
    pi.handle[8] = 5; /* an allocation's handle, into pool 1 */
    frame(FLYT_OP_IPC_PTR_IMPORT, 0, &pi, sizeof pi);
    write_seed(dir, "seq-ipc-pool");
    return 0;
}
