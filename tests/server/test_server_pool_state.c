/*
 * Checkpoint and restore of stream-ordered allocations and memory pools
 * (docs/state-format.md, MEMPOOL and ASYNC) with the host backend: buffers
 * from the default pool and from a created pool on two streams, the pools'
 * attributes the program set; a new flyt-server --restore FILE holds the same
 * pool ids and attributes and the buffers at their addresses with their
 * contents; freeing some in stream order and allocating again works, and the
 * restored session checkpoints and restores again.
 *
 * usage: test_server_pool_state PATH-TO-flyt-server
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_request.h"
#include "harness.h"
#include "state_format.h"

#define ATTR_REUSE_OPPORTUNISTIC 2 /* CU_MEMPOOL_ATTR_* */
#define ATTR_RELEASE_THRESHOLD   4
#define ATTR_USED_MEM_CURRENT    7

static char dir[64], status_path[128], state_path[128];

static uint64_t def_pool, own_pool, streams[2];
static struct {
    uint64_t size, addr;
    int      own_pool, stream, freed;
} bufs[] = {
    {4096, 0, 0, 0, 0}, {100000, 0, 0, 1, 0}, {3 << 20, 0, 1, 0, 0}, {777, 0, 1, 1, 0},
};
#define NBUFS (sizeof bufs / sizeof bufs[0])

static unsigned char pattern(size_t buf, uint64_t i) { return (unsigned char)(i * 13u + buf * 101u + (i >> 9)); }

static int checkpoint(const char *path, char *error, size_t errlen)
{
    int result = ckpt_wait(status_path, ckpt_post(status_path, path, 0), 5000, error, errlen);
    CHECK_NE(result, -1, "the checkpoint was answered");
    return result;
}

static uint64_t call_u64(int fd, uint16_t op, const void *req, size_t len, const char *what)
{
    flyt_rep_u64 u = {0};
    CHECK_EQ(th_call_rep(fd, op, req, len, NULL, 0, &u, sizeof u), T_SUCCESS, "%s", what);
    return u.value;
}

static uint64_t pool_attr(int fd, uint64_t pool, int attr)
{
    flyt_req_pool_attr r = {pool, attr, 0, 0};
    return call_u64(fd, FLYT_OP_POOL_GET_ATTR, &r, sizeof r, "POOL_GET_ATTR");
}

static uint64_t alloc_async(int fd, uint64_t size, uint64_t pool, uint64_t stream)
{
    flyt_req_mem_alloc r = {size, stream, pool};
    return call_u64(fd, FLYT_OP_MEM_ALLOC_ASYNC, &r, sizeof r, "MEM_ALLOC_ASYNC");
}

static void fill(int fd, size_t b)
{
    unsigned char *p = malloc(bufs[b].size);
    CHECK(p != NULL, "memory");
    for (uint64_t i = 0; i < bufs[b].size; i++)
        p[i] = pattern(b, i);
    CHECK_EQ(th_htod(fd, bufs[b].addr, p, bufs[b].size), T_SUCCESS, "fill buffer %zu", b);
    free(p);
}

static void check_contents(int fd, size_t b)
{
    unsigned char *p = malloc(bufs[b].size);
    int had = 0;
    CHECK(p != NULL, "memory");
    CHECK_EQ(th_dtoh(fd, bufs[b].addr, bufs[b].size, p, &had), T_SUCCESS, "read buffer %zu", b);
    uint64_t bad = bufs[b].size;
    for (uint64_t i = 0; i < bufs[b].size && bad == bufs[b].size; i++)
        if (p[i] != pattern(b, i))
            bad = i;
    CHECK_EQ(bad, bufs[b].size, "buffer %zu at 0x%llx keeps its contents", b,
             (unsigned long long)bufs[b].addr);
    free(p);
}

static void build_session(int fd)
{
    th_say("two streams, the default pool and a created one, four stream-ordered buffers");
    for (int i = 0; i < 2; i++) {
        flyt_req_stream_create sc = {1 /* CU_STREAM_NON_BLOCKING */, 0, 0};
        streams[i] = call_u64(fd, FLYT_OP_STREAM_CREATE, &sc, sizeof sc, "STREAM_CREATE");
    }
    flyt_req_device d = {0, 0};
    def_pool = call_u64(fd, FLYT_OP_POOL_DEFAULT, &d, sizeof d, "POOL_DEFAULT");
    flyt_req_pool_create pc = {64 << 20, 0, 0};
    own_pool = call_u64(fd, FLYT_OP_POOL_CREATE, &pc, sizeof pc, "POOL_CREATE");
    flyt_req_pool_attr set[] = {{def_pool, ATTR_RELEASE_THRESHOLD, 0, 1 << 30},
                                {own_pool, ATTR_RELEASE_THRESHOLD, 0, 12345},
                                {own_pool, ATTR_REUSE_OPPORTUNISTIC, 0, 0}};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        CHECK_EQ(th_call(fd, FLYT_OP_POOL_SET_ATTR, &set[i], sizeof set[i], NULL, 0, NULL),
                 T_SUCCESS, "POOL_SET_ATTR %d", set[i].attr);
    for (size_t b = 0; b < NBUFS; b++) {
        /* the default pool by its id for one, by 0 (the current pool) for the other */
        uint64_t pool = bufs[b].own_pool ? own_pool : b == 0 ? def_pool : 0;
        bufs[b].addr = alloc_async(fd, bufs[b].size, pool, streams[bufs[b].stream]);
        CHECK(bufs[b].addr != 0, "buffer %zu allocated", b);
        fill(fd, b);
    }
}

struct seen {
    int pools, asyncs;
};

/* The MEMPOOL and ASYNC sections say what the session held. */
static void section_matches(uint32_t type, const unsigned char *body, uint64_t len, void *arg)
{
    struct seen *n = arg;
    (void)len;
    if (type == FLYT_SS_MEMPOOL) {
        struct flyt_state_mempool p;
        memcpy(&p, body, sizeof p);
        CHECK(p.id == def_pool ? p.is_default && p.attrs[ATTR_RELEASE_THRESHOLD - 1] == 1u << 30
                               : p.id == own_pool && !p.is_default && p.max_size == 64u << 20 &&
                                     p.attrs[ATTR_RELEASE_THRESHOLD - 1] == 12345,
              "pool %llu: its record", (unsigned long long)p.id);
        n->pools++;
    } else if (type == FLYT_SS_ASYNC) {
        struct flyt_state_async a;
        memcpy(&a, body, sizeof a);
        for (size_t b = 0; b < NBUFS; b++)
            if (bufs[b].addr == a.addr)
                CHECK(a.size == bufs[b].size &&
                          a.pool == (bufs[b].own_pool ? own_pool : def_pool), /* the current pool: the default */
                      "buffer %zu: its size and pool", b);
        n->asyncs++;
    }
}

static void pools_match(int fd)
{
    th_say("the pools: same ids, the attributes the program set");
    flyt_req_device d = {0, 0};
    CHECK_EQ(call_u64(fd, FLYT_OP_POOL_DEFAULT, &d, sizeof d, "POOL_DEFAULT"), def_pool,
             "the default pool keeps its id");
    CHECK_EQ(pool_attr(fd, def_pool, ATTR_RELEASE_THRESHOLD), 1ull << 30, "default pool threshold");
    CHECK_EQ(pool_attr(fd, own_pool, ATTR_RELEASE_THRESHOLD), 12345, "created pool threshold");
    CHECK_EQ(pool_attr(fd, own_pool, ATTR_REUSE_OPPORTUNISTIC), 0, "created pool reuse flag");
}

static void restored_session_matches(int fd)
{
    pools_match(fd);
    th_say("every buffer at its address with its contents");
    for (size_t b = 0; b < NBUFS; b++)
        if (!bufs[b].freed)
            check_contents(fd, b);
    flyt_rep_pointer_attrs pa = {0};
    flyt_req_handle h = {bufs[1].addr + 10};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POINTER_ATTRS, &h, sizeof h, NULL, 0, &pa, sizeof pa),
             T_SUCCESS, "POINTER_ATTRS");
    CHECK(pa.base == bufs[1].addr && pa.size == bufs[1].size, "its pointer attributes");
    CHECK_EQ(pool_attr(fd, own_pool, ATTR_USED_MEM_CURRENT), 0,
             "the created pool's usage leaves out restored allocations");
}

/* Frees buffer b in stream order, then allocates again from its pool. */
static void free_and_again(int fd, size_t b)
{
    flyt_req_mem_free_async fr = {bufs[b].addr, streams[bufs[b].stream]};
    CHECK_EQ(th_call(fd, FLYT_OP_MEM_FREE_ASYNC, &fr, sizeof fr, NULL, 0, NULL), T_SUCCESS,
             "MEM_FREE_ASYNC of restored buffer %zu", b);
    unsigned char byte;
    int had;
    CHECK_NE(th_dtoh(fd, bufs[b].addr, 1, &byte, &had), T_SUCCESS, "buffer %zu is gone", b);
    uint64_t pool = bufs[b].own_pool ? own_pool : 0;
    bufs[b].addr = alloc_async(fd, bufs[b].size, pool, streams[bufs[b].stream]);
    CHECK(bufs[b].addr != 0, "buffer %zu allocated again", b);
    fill(fd, b);
    check_contents(fd, b);
}

int main(int argc, char **argv)
{
    const char *bin;
    int fd = th_ckpt_main(argc, argv, "poolst", &bin, dir, status_path, state_path);
    build_session(fd);
    th_say("checkpoint");
    char error[256];
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    check_contents(fd, 2);
    close(fd);
    th_server_stop();
    struct seen n = {0};
    CHECK(ckpt_sections(state_path, section_matches, &n) >= 10u, "format version 10 or later");
    CHECK_EQ(n.pools, 2, "two pools");
    CHECK_EQ(n.asyncs, (int)NBUFS, "every stream-ordered buffer");

    th_say("flyt-server --restore");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("restored session");
    restored_session_matches(fd);
    th_say("frees in stream order and allocations after the restore");
    free_and_again(fd, 0);
    free_and_again(fd, 3);
    CHECK(pool_attr(fd, own_pool, ATTR_USED_MEM_CURRENT) >= bufs[3].size,
          "a new allocation counts in its pool");
    flyt_req_mem_free_async fr = {bufs[1].addr, streams[1]};
    CHECK_EQ(th_call(fd, FLYT_OP_MEM_FREE_ASYNC, &fr, sizeof fr, NULL, 0, NULL), T_SUCCESS,
             "MEM_FREE_ASYNC of restored buffer 1");
    bufs[1].freed = 1;
    th_say("the restored session checkpoints again");
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();

    th_say("and restores again");
    th_ckpt_restore(bin, status_path, state_path);
    fd = th_ckpt_resume("twice restored session");
    pools_match(fd);
    for (size_t b = 0; b < NBUFS; b++)
        if (!bufs[b].freed)
            check_contents(fd, b);
    free_and_again(fd, 2);
    flyt_req_handle ph = {own_pool};
    CHECK_EQ(th_call(fd, FLYT_OP_POOL_DESTROY, &ph, sizeof ph, NULL, 0, NULL), T_SUCCESS,
             "the restored pool is destroyed");
    th_post(fd, FLYT_OP_GOODBYE, NULL, 0, NULL, 0);
    close(fd);
    CHECK(th_server_log_clean(), "no session crashed");
    th_server_stop();
    th_ckpt_end(dir, status_path, state_path);
    printf("test_server_pool_state: all checks passed\n");
    return 0;
}
