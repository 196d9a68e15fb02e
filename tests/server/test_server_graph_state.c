/*
 * Checkpoint and restore of a session's CUDA graphs and executable graphs
 * (docs/state-format.md, GRAPH and GRAPH_EXEC) with the host backend: a
 * graph built node by node (memset, event record and wait, memcpy, empty,
 * a child graph of a memset and a memcpy, a host function), a graph captured
 * from a stream,
 * and an exec whose graph was destroyed after instantiation. An exec changed
 * in place and a conditional node refuse the checkpoint by name. A new flyt-server --restore FILE
 * holds the graphs and execs under the same ids: the node ids the client
 * holds (its own and those the server named, in the child graph and the
 * captured graph too) resolve to the restored nodes, and launching the
 * restored execs writes what the graphs say. The restored session
 * checkpoints and restores again.
 *
 * usage: test_server_graph_state PATH-TO-flyt-server
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls.h"
#include "check.h"
#include "ckpt_request.h"
#include "harness.h"
#include "state_format.h"

#define ID(n) (FLYT_CLIENT_IDS + 5000 + (n))
#define SIZE 4096u
#define HOST_CALLBACK 777u /* the client's callback id of the host node */

static char dir[64], status_path[128], state_path[128];

/* Device buffers: A, B (memset then copied), C, D (child graph), E
 * (captured), F (the exec whose graph is gone). */
enum { A, B, C, D, E, F, NBUF };
static uint64_t buf[NBUF];

enum {
    G1 = 1, N_SET, N_REC, N_WAIT, N_CPY, N_EMPTY, N_CHILD, N_HOST, /* the built graph */
    CHILD, CN_SET, CN_CPY,                             /* its child graph */
    EVENT, STREAM, G2, G3, G3_SET, X1, X2, X3, X4, G4, COND, BODY
};
static uint64_t child_id, child_nodes[2], captured_nodes[2]; /* ids the server named */

static flyt_gnode memset_node(uint64_t dst, unsigned value, unsigned elem_size)
{
    return (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_MEMSET, .dst = dst, .dst_pitch = SIZE,
                        .width = SIZE, .rows = 1, .value = value, .elem_size = elem_size};
}

static flyt_gnode copy_node(uint64_t dst, uint64_t src)
{
    return (flyt_gnode){.type = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .src = src, .dst_pitch = SIZE,
                        .src_pitch = SIZE, .width = SIZE, .rows = 1};
}

static flyt_gnode value_node(unsigned type, uint64_t value)
{
    return (flyt_gnode){.type = type, .value = value};
}

static void add_node(int fd, uint64_t graph, uint64_t node, const uint64_t *deps, uint32_t ndeps,
                     flyt_gnode p, const char *what)
{
    unsigned char data[8 * 8 + sizeof p];
    if (ndeps)
        memcpy(data, deps, ndeps * sizeof *deps);
    memcpy(data + ndeps * sizeof *deps, &p, sizeof p);
    flyt_req_graph_node r = {graph, node, ndeps, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_ADD_NODE, &r, sizeof r, data, ndeps * sizeof *deps + sizeof p, NULL),
             T_SUCCESS, "add %s", what);
}

static int handle_op(int fd, uint16_t op, uint64_t handle)
{
    flyt_req_handle r = {handle};
    return th_call(fd, op, &r, sizeof r, NULL, 0, NULL);
}

static uint64_t u64_op(int fd, uint16_t op, const void *req, size_t len, const char *what)
{
    flyt_rep_u64 rep = {0};
    CHECK_EQ(th_call_rep(fd, op, req, len, NULL, 0, &rep, sizeof rep), T_SUCCESS, "%s", what);
    return rep.value;
}

/* The ids of a graph's nodes (which = FLYT_GNODES_*); how many there are. */
static uint64_t node_ids(int fd, uint64_t graph, uint32_t which, uint64_t *out, uint32_t max)
{
    flyt_req_graph_nodes r = {graph, which, max};
    struct th_reply rep;
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_NODES, &r, sizeof r, NULL, 0, &rep), T_SUCCESS, "GRAPH_NODES");
    flyt_rep_u64 v;
    memcpy(&v, rep.body, sizeof v);
    size_t have = (rep.body_len - sizeof v) / sizeof *out;
    if (out)
        memcpy(out, rep.body + sizeof v, have * sizeof *out);
    th_reply_free(&rep);
    return v.value;
}

static void instantiate(int fd, uint64_t exec, uint64_t graph)
{
    flyt_req_graph_inst r = {exec, graph, 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_INSTANTIATE, &r, sizeof r, NULL, 0, NULL), T_SUCCESS,
             "instantiate %llu", (unsigned long long)(exec - ID(0)));
}

static void fill(int fd, int b, unsigned char v)
{
    unsigned char p[SIZE];
    memset(p, v, sizeof p);
    CHECK_EQ(th_htod(fd, buf[b], p, SIZE), T_SUCCESS, "buffer %d set to %#x", b, v);
}

static void expect(int fd, int b, unsigned char v, const char *what)
{
    unsigned char got[SIZE], want[SIZE];
    int had;
    memset(want, v, sizeof want);
    CHECK_EQ(th_dtoh(fd, buf[b], SIZE, got, &had), T_SUCCESS, "read buffer %d", b);
    CHECK_MEM_EQ(got, want, SIZE, "%s", what);
}

static void build_graph(int fd)
{
    th_say("a graph of memset, event record and wait, memcpy, empty, child graph and host nodes");
    flyt_req_event_create ev = {0, 0, ID(EVENT)};
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_CREATE, &ev, sizeof ev, NULL, 0, NULL), T_SUCCESS, "event");
    flyt_req_graph_create g = {ID(G1), 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_CREATE, &g, sizeof g, NULL, 0, NULL), T_SUCCESS, "graph");
    g.graph = ID(CHILD);
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_CREATE, &g, sizeof g, NULL, 0, NULL), T_SUCCESS, "child graph");
    uint64_t d[1];
    add_node(fd, ID(CHILD), ID(CN_SET), NULL, 0, memset_node(buf[C], 0x33333333u, 4), "child memset");
    d[0] = ID(CN_SET);
    add_node(fd, ID(CHILD), ID(CN_CPY), d, 1, copy_node(buf[D], buf[C]), "child memcpy");
    add_node(fd, ID(G1), ID(N_SET), NULL, 0, memset_node(buf[A], 0x11, 1), "memset");
    d[0] = ID(N_SET);
    add_node(fd, ID(G1), ID(N_REC), d, 1, value_node(CU_GRAPH_NODE_TYPE_EVENT_RECORD, ID(EVENT)),
             "event record");
    d[0] = ID(N_REC);
    add_node(fd, ID(G1), ID(N_WAIT), d, 1, value_node(CU_GRAPH_NODE_TYPE_WAIT_EVENT, ID(EVENT)),
             "event wait");
    d[0] = ID(N_WAIT);
    add_node(fd, ID(G1), ID(N_CPY), d, 1, copy_node(buf[B], buf[A]), "memcpy");
    d[0] = ID(N_CPY);
    add_node(fd, ID(G1), ID(N_EMPTY), d, 1, value_node(CU_GRAPH_NODE_TYPE_EMPTY, 0), "empty");
    d[0] = ID(N_EMPTY);
    add_node(fd, ID(G1), ID(N_CHILD), d, 1, value_node(CU_GRAPH_NODE_TYPE_GRAPH, ID(CHILD)), "child graph");
    d[0] = ID(N_CHILD);
    add_node(fd, ID(G1), ID(N_HOST), d, 1, value_node(CU_GRAPH_NODE_TYPE_HOST, HOST_CALLBACK), "host function");
    CHECK_EQ(handle_op(fd, FLYT_OP_GRAPH_DESTROY, ID(CHILD)), T_SUCCESS, "the child's source destroyed");
    flyt_req_graph_node_misc m = {ID(N_CHILD), 0, FLYT_GNODE_CHILD_GRAPH, 0};
    child_id = u64_op(fd, FLYT_OP_GRAPH_NODE_MISC, &m, sizeof m, "the child graph node's graph");
    CHECK_EQ(node_ids(fd, child_id, FLYT_GNODES_ALL, child_nodes, 2), 2u, "the child graph's nodes");
    instantiate(fd, ID(X1), ID(G1));
}

static void capture_graph(int fd)
{
    th_say("a graph captured from a stream: two memsets");
    flyt_req_stream_create sc = {1, 0, ID(STREAM)};
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_CREATE, &sc, sizeof sc, NULL, 0, NULL), T_SUCCESS, "stream");
    flyt_req_capture_begin cb = {ID(STREAM), ID(G2), 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_CAPTURE_BEGIN, &cb, sizeof cb, NULL, 0, NULL), T_SUCCESS, "capture");
    flyt_req_memset m = {.dst = buf[E], .pitch = SIZE, .width_bytes = SIZE, .height = 1, .depth = 1,
                         .stream = ID(STREAM), .value = 0x5a, .elem_size = 1};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL), T_SUCCESS, "captured memset");
    m.width_bytes = SIZE / 2, m.value = 0x6b6b, m.elem_size = 2;
    CHECK_EQ(th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL), T_SUCCESS, "captured memset, half");
    flyt_req_handle h = {ID(STREAM)};
    CHECK_EQ(u64_op(fd, FLYT_OP_CAPTURE_END, &h, sizeof h, "capture ends"), ID(G2), "the captured graph");
    CHECK_EQ(node_ids(fd, ID(G2), FLYT_GNODES_ALL, captured_nodes, 2), 2u, "its nodes named");
    instantiate(fd, ID(X2), ID(G2));

    th_say("an exec whose graph is destroyed after instantiation (as PyTorch does)");
    flyt_req_graph_create g = {ID(G3), 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_CREATE, &g, sizeof g, NULL, 0, NULL), T_SUCCESS, "graph");
    add_node(fd, ID(G3), ID(G3_SET), NULL, 0, memset_node(buf[F], 0x77, 1), "memset");
    instantiate(fd, ID(X3), ID(G3));
    CHECK_EQ(handle_op(fd, FLYT_OP_GRAPH_DESTROY, ID(G3)), T_SUCCESS, "its graph destroyed");
}

static int checkpoint(const char *path, char *error, size_t errlen)
{
    int result = ckpt_wait(status_path, ckpt_post(status_path, path, 0), 5000, error, errlen);
    CHECK_NE(result, -1, "the checkpoint was answered");
    return result;
}

static int set_exec_node(int fd, uint64_t exec, uint64_t node, flyt_gnode p)
{
    flyt_req_graph_node_ref r = {exec, node};
    return th_call(fd, FLYT_OP_GRAPH_NODE_SET, &r, sizeof r, &p, sizeof p, NULL);
}

static void changed_exec_refused(int fd)
{
    th_say("an exec changed in place refuses the checkpoint by name");
    instantiate(fd, ID(X4), ID(G1));
    CHECK_EQ(set_exec_node(fd, ID(X4), ID(N_SET), memset_node(buf[A], 0x44, 1)), T_SUCCESS,
             "cuGraphExecMemsetNodeSetParams");
    char error[256], bad[160];
    snprintf(bad, sizeof bad, "%s/never.state", dir);
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_NOT_SUPPORTED, "refused");
    CHECK(strstr(error, "changed in place") != NULL, "the error says why: %s", error);
    CHECK(access(bad, F_OK) != 0, "no file left");
    CHECK_EQ(handle_op(fd, FLYT_OP_EXEC_DESTROY, ID(X4)), T_SUCCESS, "that exec destroyed");
}

/* A graph with a conditional node refuses by the node's kind; once that
 * graph is destroyed, the id of its body graph the client still holds (it
 * must not use it) is no graph a checkpoint looks at. */
static void conditional_refused(int fd)
{
    th_say("a conditional node refuses the checkpoint by its kind");
    flyt_req_graph_create g = {ID(G4), 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_CREATE, &g, sizeof g, NULL, 0, NULL), T_SUCCESS, "graph");
    flyt_req_call c = {.id = FLYT_CALL_cuGraphConditionalHandleCreate, .in_size = 0,
                       .args = {0, ID(G4), 0, 1, CU_GRAPH_COND_ASSIGN_DEFAULT}};
    struct th_reply rep;
    CHECK_EQ(th_call(fd, FLYT_OP_CALL, &c, sizeof c, NULL, 0, &rep), T_SUCCESS, "conditional handle");
    uint64_t handle = 0;
    CHECK(rep.body_len >= sizeof(flyt_rep_call) + sizeof handle, "the handle comes back");
    memcpy(&handle, rep.body + sizeof(flyt_rep_call), sizeof handle);
    th_reply_free(&rep);
    flyt_gnode p = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL, .value = handle,
                    .elem_size = CU_GRAPH_COND_TYPE_IF, .rows = 1};
    unsigned char data[sizeof p + 8];
    uint64_t body = ID(BODY);
    memcpy(data, &p, sizeof p);
    memcpy(data + sizeof p, &body, sizeof body);
    flyt_req_graph_node r = {ID(G4), ID(COND), 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_GRAPH_ADD_NODE, &r, sizeof r, data, sizeof data, NULL), T_SUCCESS,
             "conditional node");
    add_node(fd, ID(BODY), ID(COND) + 100, NULL, 0, memset_node(buf[F], 0x66, 1), "a memset in its body");
    char error[256], bad[160];
    snprintf(bad, sizeof bad, "%s/never.state", dir);
    CHECK_EQ(checkpoint(bad, error, sizeof error), T_NOT_SUPPORTED, "refused");
    CHECK(strstr(error, "CUDA graph with a conditional node") != NULL, "the error names the kind: %s", error);
    CHECK_EQ(handle_op(fd, FLYT_OP_GRAPH_DESTROY, ID(G4)), T_SUCCESS, "that graph destroyed");
}

static flyt_gnode node_get(int fd, uint64_t node, const char *what)
{
    flyt_req_graph_node_ref r = {0, node};
    flyt_gnode p;
    memset(&p, 0, sizeof p);
    CHECK_EQ(th_call_rep(fd, FLYT_OP_GRAPH_NODE_GET, &r, sizeof r, NULL, 0, &p, sizeof p), T_SUCCESS,
             "%s resolves", what);
    return p;
}

static void nodes_resolve(int fd)
{
    th_say("node ids resolve to the restored nodes");
    flyt_gnode p = node_get(fd, ID(N_CPY), "the memcpy node");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_MEMCPY && p.dst == buf[B] && p.src == buf[A] && p.width == SIZE,
          "a copy of A to B");
    p = node_get(fd, ID(N_REC), "the event record node");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD && p.value == ID(EVENT), "records the event");
    p = node_get(fd, ID(N_WAIT), "the event wait node");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && p.value == ID(EVENT), "waits for the event");
    p = node_get(fd, ID(N_HOST), "the host node");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_HOST && p.value == HOST_CALLBACK, "runs the client's callback");
    p = node_get(fd, ID(N_EMPTY), "the empty node");
    CHECK_EQ(p.type, (uint32_t)CU_GRAPH_NODE_TYPE_EMPTY, "empty");
    p = node_get(fd, child_nodes[0], "the child graph's first node (a server id)");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_MEMSET && p.dst == buf[C] && p.value == 0x33333333u,
          "the child's memset");
    p = node_get(fd, child_nodes[1], "the child graph's second node");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_MEMCPY && p.dst == buf[D], "the child's memcpy");
    p = node_get(fd, captured_nodes[1], "a captured node (a server id)");
    CHECK(p.type == CU_GRAPH_NODE_TYPE_MEMSET && p.dst == buf[E] && p.elem_size == 2, "the second memset");
    flyt_req_graph_node_misc m = {ID(N_CHILD), 0, FLYT_GNODE_CHILD_GRAPH, 0};
    CHECK_EQ(u64_op(fd, FLYT_OP_GRAPH_NODE_MISC, &m, sizeof m, "the child graph node's graph"), child_id,
             "the same child graph id");
    uint64_t ids[8];
    CHECK_EQ(node_ids(fd, ID(G1), FLYT_GNODES_ALL, ids, 8), 7u, "seven nodes in the built graph");
    CHECK_EQ(ids[3], ID(N_CPY), "named by the client's ids, in order");
    CHECK_EQ(node_ids(fd, ID(G1), FLYT_GNODES_EDGES, ids, 4), 6u, "six edges");
    CHECK_EQ(node_ids(fd, ID(N_CPY), FLYT_GNODES_DEPS, ids, 1), 1u, "the copy has one dependency");
    CHECK_EQ(ids[0], ID(N_WAIT), "the event wait");
    CHECK_EQ(node_ids(fd, ID(G2), FLYT_GNODES_EDGES, NULL, 0), 1u, "the captured graph's edge");
}

static void launch(int fd, uint64_t exec)
{
    flyt_req_call c = {.id = FLYT_CALL_cuGraphLaunch, .in_size = 0, .args = {exec, ID(STREAM)}};
    CHECK_EQ(th_call(fd, FLYT_OP_CALL, &c, sizeof c, NULL, 0, NULL), T_SUCCESS, "launch");
    CHECK_EQ(handle_op(fd, FLYT_OP_STREAM_SYNC, ID(STREAM)), T_SUCCESS, "synchronize");
}

/* Buffers zeroed, the three execs launched: each wrote what its graph says. */
static void launches_work(int fd)
{
    th_say("the restored execs launch and write what their graphs say");
    for (int b = 0; b < NBUF; b++)
        fill(fd, b, 0);
    th_ncallbacks = 0;
    launch(fd, ID(X1));
    CHECK(th_ncallbacks == 1 && th_callbacks[0] == HOST_CALLBACK, "the host node ran the client's callback");
    expect(fd, A, 0x11, "A: the memset");
    expect(fd, B, 0x11, "B: the copy of A after the event wait");
    expect(fd, C, 0x33, "C: the child graph's memset");
    expect(fd, D, 0x33, "D: the child graph's copy");
    launch(fd, ID(X2));
    unsigned char got[SIZE];
    int had;
    CHECK_EQ(th_dtoh(fd, buf[E], SIZE, got, &had), T_SUCCESS, "read E");
    CHECK(got[0] == 0x6b && got[SIZE / 2 - 1] == 0x6b && got[SIZE / 2] == 0x5a && got[SIZE - 1] == 0x5a,
          "E: the captured memsets in order");
    launch(fd, ID(X3));
    expect(fd, F, 0x77, "F: the exec whose graph was destroyed");
}

struct seen {
    int graphs, execs;
};

static void section_matches(uint32_t type, const unsigned char *body, uint64_t len, void *arg)
{
    struct seen *n = arg;
    if (type == FLYT_SS_GRAPH) {
        struct flyt_state_graph g;
        memcpy(&g, body, sizeof g);
        CHECK(n->execs == 0, "graph %llu before every exec", (unsigned long long)(g.id - ID(0)));
        CHECK(g.id == ID(G1) ? g.nnodes == 7 && g.nedges == 6 : g.id == ID(G2) && g.nnodes == 2,
              "graph %llu: its nodes and edges", (unsigned long long)(g.id - ID(0)));
        n->graphs++;
    } else if (type == FLYT_SS_GRAPH_EXEC) {
        struct flyt_state_gexec x;
        memcpy(&x, body, sizeof x);
        uint64_t want = x.id == ID(X1) ? ID(G1) : x.id == ID(X2) ? ID(G2) : 0;
        CHECK_EQ(x.graph, want, "exec %llu: instantiated from %s", (unsigned long long)(x.id - ID(0)),
                 want ? "its graph" : "its own body");
        CHECK(want || len > sizeof x, "a body follows");
        n->execs++;
    }
}

/* Version 9; a GRAPH section per graph the client holds, the execs after
 * them: X1 and X2 from their graphs, X3 from its own body (G3 is gone). */
static void state_sections_match(void)
{
    th_say("the state's GRAPH and GRAPH_EXEC sections");
    struct seen n = {0};
    CHECK(ckpt_sections(state_path, section_matches, &n) >= 9u, "format version 9 or later");
    CHECK_EQ(n.graphs, 2, "two graphs (the child graph travels in its node)");
    CHECK_EQ(n.execs, 3, "three execs");
}

int main(int argc, char **argv)
{
    const char *bin;
    int fd = th_ckpt_main(argc, argv, "grst", &bin, dir, status_path, state_path);
    for (int b = 0; b < NBUF; b++)
        CHECK_EQ(th_alloc(fd, SIZE, &buf[b]), T_SUCCESS, "buffer %d", b);
    build_graph(fd);
    capture_graph(fd);
    changed_exec_refused(fd);
    conditional_refused(fd);
    launches_work(fd);
    th_say("checkpoint");
    char error[256];
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    close(fd);
    th_server_stop();
    state_sections_match();

    th_say("flyt-server --restore");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("restored session");
    nodes_resolve(fd);
    launches_work(fd);
    th_say("an exec made from its graph takes updates by the graph's node ids");
    CHECK_EQ(set_exec_node(fd, ID(X1), ID(N_SET), memset_node(buf[A], 0x22, 1)), T_SUCCESS,
             "cuGraphExecMemsetNodeSetParams on the restored exec");
    launch(fd, ID(X1));
    expect(fd, B, 0x22, "B: the copy of the updated memset");
    CHECK_EQ(handle_op(fd, FLYT_OP_EXEC_DESTROY, ID(X1)), T_SUCCESS, "that exec destroyed");
    instantiate(fd, ID(X1), ID(G1));
    th_say("the restored session checkpoints again");
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_say("and restores again");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("twice restored session");
    nodes_resolve(fd);
    launches_work(fd);
    th_post(fd, FLYT_OP_GOODBYE, NULL, 0, NULL, 0);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_ckpt_end(dir, status_path, state_path);
    printf("test_server_graph_state: all checks passed\n");
    return 0;
}
