/*
 * Checkpoint and restore on the cuda backend without a GPU, on the fake
 * driver of fake_cuda.c (docs/state-format.md): a session's allocations
 * (small ones sharing a 2 MiB granule, larger ones across granules, a
 * pitched one) with their contents, a module and its function are
 * captured; a restored session has every allocation at its old address
 * (placed with cuMemAddressReserve's fixed hint, cuMemCreate, cuMemMap,
 * cuMemSetAccess) with its contents, the function launches on a restored
 * buffer, pointer attributes give the allocation's own range, a restored
 * buffer frees, and a second checkpoint of the restored session works. A
 * restore whose address the driver does not grant fails with
 * CUDA_ERROR_ALREADY_MAPPED, leaving nothing behind; stream-ordered
 * allocations come back at their addresses inside spans reserved over them
 * first (two spans here), or the restore fails; a module global's contents
 * are captured and its address checked at the restore. An array with its
 * contents, a texture and a surface object are restored; the restored
 * driver gives the objects other values, and kernels given the old ones get
 * the new ones.
 *
 * Sessions run in this process (a thread, over a socketpair), on a status
 * page in anonymous shared memory, which also carries the checkpoint request.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/check.h" /* before harness.h: the one set of assertions */
#include "fake_cuda.h"
#include "flyt_log.h"
#include "harness.h"
#include "quota.h"
#include "session.h"
#include "state.h"

#define QUOTA ((uint64_t)64 << 20)
#define T_ALREADY_MAPPED 208

static struct flyt_cu_api table;
static struct flyt_server_config config = {.backend_kind = "cuda", .no_peer_memory = 1,
                                           .admitted_fd = -1};
static struct {
    int fd; /* the client's end of the session's socket */
} sess;

#define NBUF 5
static const uint64_t buf_size[NBUF] = {1000, 4096, (1u << 20) + 13, (3u << 20) + 100, 0};
#define PITCH_W 1000
#define PITCH_H 7
static uint64_t buf_ptr[NBUF], pitch;
static uint64_t async_ptr; /* a stream-ordered allocation kept across the move */
static uint64_t async_far; /* another, beyond the span the first needs */
#define ASYNC_SIZE 4096
#define ASYNC_GAP  ((uint64_t)40 << 20) /* freed between them: over the 32 MiB a span covers */
static uint64_t module_id, func_id;
static char dir[64], state_path[128], state2_path[128];

static unsigned char pattern(int b, uint64_t i) { return (unsigned char)(i * 13u + (uint64_t)b * 41u + (i >> 8)); }

static int session_begin(void)
{
    flyt_rep_hello rep;
    return fake_session_begin(&table, &config, &sess.fd, &rep);
}

/* Ends the session: every driver object, VMM ones included, given back. */
static void session_end(void)
{
    fake_session_end();
    CHECK_EQ(fake_live.ctx_refs, 0, "the primary context is released");
    CHECK_EQ(fake_live.modules + fake_live.streams + fake_live.events, 0, "no module, stream, event left");
    CHECK_EQ(fake_live.allocs, 0, "no allocation left");
    CHECK_EQ(fake_live.reservations + fake_live.mappings + fake_live.handles, 0,
             "no reservation, mapping or physical allocation left");
    CHECK_EQ(flyt_quota_used_total(), 0, "the quota is given back whole");
}

static int device_count(void)
{
    flyt_req_none req = {0};
    flyt_rep_i32 rep;
    return th_call_rep(sess.fd, FLYT_OP_DEVICE_COUNT, &req, sizeof req, NULL, 0, &rep, sizeof rep);
}

/* A checkpoint request on the page for this process, served at the
 * session's next request boundary; returns its result. */
static int checkpoint(const char *path, char *error, size_t errlen)
{
    struct flyt_server_status *p = flyt_status_page();
    snprintf(p->ckpt_path, sizeof p->ckpt_path, "%s", path);
    __atomic_store_n(&p->ckpt_pid, (int32_t)getpid(), __ATOMIC_RELEASE);
    __atomic_store_n(&p->ckpt_flags, 0u, __ATOMIC_RELEASE);
    uint64_t gen = __atomic_load_n(&p->ckpt_gen, __ATOMIC_ACQUIRE) + 1;
    __atomic_store_n(&p->ckpt_gen, gen, __ATOMIC_RELEASE);
    CHECK_EQ(device_count(), T_SUCCESS, "a request: the boundary after it serves the checkpoint");
    int done = 0;
    for (int i = 0; i < 2000 && !done; i++) {
        done = __atomic_load_n(&p->ckpt_done_gen, __ATOMIC_ACQUIRE) == gen;
        struct timespec ts = {0, 5 * 1000 * 1000};
        if (!done)
            nanosleep(&ts, NULL);
    }
    CHECK(done, "the checkpoint was answered");
    snprintf(error, errlen, "%s", p->ckpt_error);
    return p->ckpt_result;
}

static int func_get(uint64_t module, const char *name, uint64_t *func)
{
    flyt_req_named req = {module, (uint32_t)strlen(name) + 1, 0};
    struct th_reply r;
    int rc = th_call(sess.fd, FLYT_OP_FUNC_GET, &req, sizeof req, name, req.name_len, &r);
    if (rc == T_SUCCESS && r.body_len >= sizeof(flyt_rep_func))
        *func = ((const flyt_rep_func *)(const void *)r.body)->func;
    th_reply_free(&r);
    return rc;
}

static uint64_t size_of(int b) { return b == NBUF - 1 ? pitch * PITCH_H : buf_size[b]; }

static void fill(int b)
{
    unsigned char *p = malloc(size_of(b));
    for (uint64_t i = 0; i < size_of(b); i++)
        p[i] = pattern(b, i);
    CHECK_EQ(th_htod(sess.fd, buf_ptr[b], p, size_of(b)), T_SUCCESS, "pattern into buffer %d", b);
    free(p);
}

/* Buffer b holds its pattern, plus `bumped` in its first FAKE_KERNEL_BYTES. */
static void check_contents(int b, int bumped)
{
    unsigned char *got = malloc(size_of(b));
    int had;
    CHECK_EQ(th_dtoh(sess.fd, buf_ptr[b], size_of(b), got, &had), T_SUCCESS, "DTOH buffer %d", b);
    uint64_t bad = UINT64_MAX;
    for (uint64_t i = 0; i < size_of(b) && bad == UINT64_MAX; i++)
        if (got[i] != (unsigned char)(pattern(b, i) + (i < FAKE_KERNEL_BYTES ? bumped : 0)))
            bad = i;
    CHECK_EQ(bad, UINT64_MAX, "buffer %d at 0x%llx holds its contents", b,
             (unsigned long long)buf_ptr[b]);
    free(got);
}

static void launch(uint64_t func, uint64_t ptr)
{
    struct {
        flyt_req_launch l;
        uint64_t arg;
    } req;
    memset(&req, 0, sizeof req);
    req.l.func = func;
    req.l.grid[0] = req.l.grid[1] = req.l.grid[2] = 1;
    req.l.block[0] = req.l.block[1] = req.l.block[2] = 1;
    req.l.param_bytes = sizeof req.arg;
    req.arg = ptr;
    CHECK_EQ(th_call(sess.fd, FLYT_OP_LAUNCH, &req.l, sizeof req.l, &req.arg, sizeof req.arg, NULL),
             T_SUCCESS, "LAUNCH");
}

static uint64_t async_alloc(uint64_t size)
{
    flyt_req_mem_alloc ar = {size, 0, 0};
    flyt_rep_u64 arep = {0};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_MEM_ALLOC_ASYNC, &ar, sizeof ar, NULL, 0, &arep, sizeof arep),
             T_SUCCESS, "MEM_ALLOC_ASYNC of %llu bytes", (unsigned long long)size);
    return arep.value;
}

static void async_free(uint64_t ptr)
{
    flyt_req_mem_free_async fr = {ptr, 0};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_MEM_FREE_ASYNC, &fr, sizeof fr, NULL, 0, NULL), T_SUCCESS,
             "MEM_FREE_ASYNC of 0x%llx", (unsigned long long)ptr);
}

static void async_fill(uint64_t ptr, unsigned char value)
{
    unsigned char bytes[ASYNC_SIZE];
    memset(bytes, value, sizeof bytes);
    CHECK_EQ(th_htod(sess.fd, ptr, bytes, sizeof bytes), T_SUCCESS, "contents of 0x%llx",
             (unsigned long long)ptr);
}

static void build_and_checkpoint(void)
{
    th_say("a session: buffers packed in a granule and across granules, a pitched one, a module");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    for (int b = 0; b < NBUF - 1; b++)
        CHECK_EQ(th_alloc(sess.fd, buf_size[b], &buf_ptr[b]), T_SUCCESS, "MEM_ALLOC %d", b);
    flyt_req_mem_pitch pr = {PITCH_W, PITCH_H};
    flyt_rep_u64_pair pp;
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_MEM_ALLOC_PITCH, &pr, sizeof pr, NULL, 0, &pp, sizeof pp),
             T_SUCCESS, "MEM_ALLOC_PITCH");
    buf_ptr[NBUF - 1] = pp.a;
    pitch = pp.b;
    CHECK_EQ(buf_ptr[1] / FAKE_GRANULE, buf_ptr[0] / FAKE_GRANULE, "two buffers share a granule");
    for (int b = 0; b < NBUF; b++)
        fill(b);
    size_t img_size;
    unsigned char *img = th_fake_fatbin(&img_size);
    CHECK_EQ(th_module_load(sess.fd, img, img_size, &module_id), T_SUCCESS, "MODULE_LOAD");
    free(img);
    CHECK_EQ(func_get(module_id, "kernel", &func_id), T_SUCCESS, "FUNC_GET");

    th_say("stream-ordered allocations, kept across the checkpoint, with a hole between them");
    async_ptr = async_alloc(ASYNC_SIZE);
    uint64_t gap = async_alloc(ASYNC_GAP);
    async_far = async_alloc(ASYNC_SIZE);
    async_fill(async_ptr, 0x5a);
    async_fill(async_far, 0x6b);
    async_free(gap);
    CHECK_GT(async_far - async_ptr, (uint64_t)32 << 20, "the second lies beyond the first's span");
    char error[256];

    th_say("the checkpoint");
    CHECK_EQ(checkpoint(state_path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    check_contents(2, 0); /* the session carries on */
    session_end();
}

/* A stream-ordered allocation answers at its old address: contents, pointer attributes. */
static void async_answers_at(uint64_t ptr, unsigned char value)
{
    unsigned char bytes[ASYNC_SIZE];
    int had;
    CHECK_EQ(th_dtoh(sess.fd, ptr, sizeof bytes, bytes, &had), T_SUCCESS,
             "the stream-ordered allocation reads at its address");
    CHECK(bytes[0] == value && bytes[ASYNC_SIZE - 1] == value, "with its contents");
    flyt_req_handle h = {ptr + 8};
    flyt_rep_pointer_attrs pa;
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_POINTER_ATTRS, &h, sizeof h, NULL, 0, &pa, sizeof pa),
             T_SUCCESS, "POINTER_ATTRS inside it");
    CHECK(pa.base == ptr && pa.size == ASYNC_SIZE && pa.device_pointer == ptr + 8,
          "its base, size and pointer");
}

static void async_answers(void)
{
    async_answers_at(async_ptr, 0x5a);
    async_answers_at(async_far, 0x6b);
}

/* The stream-ordered allocations at their addresses with their contents, in
 * two reserved spans, freed in stream order. */
/* The default pool's USED_MEM_CURRENT, as PyTorch's cudaMallocAsync backend reads its
 * memory_allocated. */
static uint64_t pool_used(void)
{
    flyt_req_pool_attr q = {0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 0, 0};
    flyt_rep_u64 v = {0};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_POOL_GET_ATTR, &q, sizeof q, NULL, 0, &v, sizeof v),
             T_SUCCESS, "POOL_GET_ATTR(USED_MEM_CURRENT) of the default pool");
    return v.value;
}

static void async_restored(void)
{
    async_answers();
    CHECK_EQ(pool_used(), 2 * ASYNC_SIZE, "the pool counts the restored allocations as used");
    CHECK_EQ(fake_live.reservations, 3, "the arena and a span over each stream-ordered allocation");
    async_free(async_ptr);
    async_free(async_far);
    async_free(async_alloc(ASYNC_SIZE));
}

/* The driver keeps the stream-ordered allocation's address (on the H100: when
 * the receiving process's own pool allocated there first): reserving its span
 * fails, so does the restore rather than put it elsewhere, nothing stays, and
 * it succeeds once the address is free. */
static void async_address_taken(struct flyt_state *st)
{
    th_say("a stream-ordered allocation whose address the driver keeps: the restore fails");
    uint64_t g = async_ptr & ~(uint64_t)(FAKE_GRANULE - 1);
    fake_cuda_occupy(g, FAKE_GRANULE, 1);
    config.restore = st;
    CHECK_EQ(session_begin(), T_ALREADY_MAPPED, "HELLO answers CUDA_ERROR_ALREADY_MAPPED");
    session_end();
    fake_cuda_occupy(g, FAKE_GRANULE, 0);
    CHECK_EQ(session_begin(), T_SUCCESS, "with the address free, HELLO restores the session");
    async_answers();
    session_end();
    config.restore = NULL;
}

/* A streamed move's pre-copy keeps the first allocation's span before the state
 * comes (backend.h, async_spans): the restore reserves only what is still missing,
 * the second allocation's span, not the first's again (the driver would place that
 * elsewhere: the restore would fail). Then a range straddling a reserved span's end
 * gets a span from that end on, and allocations end to start get one span. */
static void async_spans_kept_early(struct flyt_state *st)
{
    th_say("a pre-copy kept one stream-ordered allocation's span: the restore adds the other");
    char err[256];
    flyt_cuda_driver_use(&table);
    int before = fake_live.reservations;
    CHECK_EQ(flyt_session_preopen(&config, err, sizeof err), 0, "the backend opens: %s", err);
    flyt_backend *b = flyt_session_preopened();
    int opened = fake_live.reservations;
    const uint64_t first[1][2] = {{async_ptr, ASYNC_SIZE}};
    CHECK_EQ(b->ops->async_spans(b, first, 1), CUDA_SUCCESS, "the pre-copy's span");
    CHECK_EQ(fake_live.reservations, opened + 1, "one span reserved");
    CHECK_EQ(b->ops->async_spans(b, first, 1), CUDA_SUCCESS, "the same range again");
    CHECK_EQ(fake_live.reservations, opened + 1, "needs nothing more");
    config.restore = st;
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores the session in that backend");
    async_answers();
    CHECK_EQ(fake_live.reservations, before + 3, "the arena and a span over each allocation");

    const uint64_t straddle[1][2] = {{async_far, (uint64_t)64 << 20}};
    CHECK_EQ(b->ops->async_spans(b, straddle, 1), CUDA_SUCCESS, "a range across a span's end");
    CHECK_EQ(fake_live.reservations, before + 4, "a span from that end on");
    /* a pool's allocations run on contiguously: on the H100 a second hinted span
     * right behind the first, off a 32 MiB boundary, was refused (PyTorch on
     * cudaMallocAsync) */
    uint64_t run = (async_ptr & ~(FAKE_HINT_ALIGN - 1)) + ((uint64_t)256 << 20);
    const uint64_t touching[2][2] = {{run, (uint64_t)34 << 20}, {run + ((uint64_t)34 << 20), 4096}};
    CHECK_EQ(b->ops->async_spans(b, touching, 2), CUDA_SUCCESS, "allocations end to start");
    CHECK_EQ(fake_live.reservations, before + 5, "one span over both");
    /* one range around two kept spans: three pieces of it get spans */
    const uint64_t lone[1][2] = {{run + ((uint64_t)128 << 20), 4096}};
    CHECK_EQ(b->ops->async_spans(b, lone, 1), CUDA_SUCCESS, "a span further on");
    const uint64_t across[1][2] = {{run - ((uint64_t)64 << 20), (uint64_t)288 << 20}};
    CHECK_EQ(b->ops->async_spans(b, across, 1), CUDA_SUCCESS, "a range around both");
    CHECK_EQ(fake_live.reservations, before + 9, "a span for each of its three free pieces");
    session_end();
    config.restore = NULL;
}

/* The program's own VMM allocation (cuMemCreate as expandable segments and
 * vmm.cu use it, exportable as a descriptor): created, mapped, unmapped and
 * released through the backend's records of it. */
static void vmm_roundtrip(void)
{
    th_say("a VMM allocation of the program: create, map, unmap, release");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    flyt_req_vmm_reserve rs = {.size = 2 * FAKE_GRANULE};
    flyt_rep_u64 va = {0};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_VMM_RESERVE, &rs, sizeof rs, NULL, 0, &va, sizeof va),
             T_SUCCESS, "VMM_RESERVE");
    flyt_req_vmm_create cr = {.size = FAKE_GRANULE,
                              .prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                       .handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       .location_type = CU_MEM_LOCATION_TYPE_DEVICE}};
    flyt_rep_u64_pair mem = {0, 0};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_VMM_CREATE, &cr, sizeof cr, NULL, 0, &mem, sizeof mem),
             T_SUCCESS, "VMM_CREATE");
    flyt_req_vmm_map mp = {.ptr = va.value, .size = FAKE_GRANULE, .handle = mem.a};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_VMM_MAP, &mp, sizeof mp, NULL, 0, NULL), T_SUCCESS,
             "VMM_MAP of the new allocation");
    flyt_req_vmm_range um = {va.value, FAKE_GRANULE};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_VMM_UNMAP, &um, sizeof um, NULL, 0, NULL), T_SUCCESS,
             "VMM_UNMAP");
    flyt_req_handle rel = {mem.a};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_VMM_RELEASE, &rel, sizeof rel, NULL, 0, NULL), T_SUCCESS,
             "VMM_RELEASE");
    flyt_req_vmm_range fr = {va.value, 2 * FAKE_GRANULE};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_VMM_FREE, &fr, sizeof fr, NULL, 0, NULL), T_SUCCESS,
             "VMM_FREE");
    session_end();
}

/* An empty graph (PyTorch's CUDA graph trees capture one first) has no nodes to
 * list: the second call of the listing has room for none, which the driver refuses. */
static void empty_graph(void)
{
    th_say("an empty graph's nodes: none, no error");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    uint64_t graph = FLYT_CLIENT_IDS + 77;
    flyt_req_graph_create gc = {graph, 0, 0};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_GRAPH_CREATE, &gc, sizeof gc, NULL, 0, NULL), T_SUCCESS,
             "GRAPH_CREATE");
    flyt_req_graph_nodes gn = {graph, FLYT_GNODES_ALL, 8};
    flyt_rep_u64 n = {99};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_GRAPH_NODES, &gn, sizeof gn, NULL, 0, &n, sizeof n),
             T_SUCCESS, "GRAPH_NODES of the empty graph");
    CHECK_EQ(n.value, 0, "no nodes");
    flyt_req_handle gd = {graph};
    CHECK_EQ(th_call(sess.fd, FLYT_OP_GRAPH_DESTROY, &gd, sizeof gd, NULL, 0, NULL), T_SUCCESS,
             "GRAPH_DESTROY");
    session_end();
    CHECK_EQ(fake_live.graphs, 0, "no graph left");
}

static void restore_matches(struct flyt_state *st)
{
    th_say("the restored session: same addresses, contents, module and function");
    config.restore = st;
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores the session");
    CHECK_GT(fake_live.mappings, 0, "the allocations are VMM mappings");
    for (int b = 0; b < NBUF; b++)
        check_contents(b, 0);
    launch(func_id, buf_ptr[3]);
    CHECK_EQ(fake_live.launches, 1, "the restored function id launched the kernel");
    check_contents(3, 1);

    flyt_req_handle h = {buf_ptr[2] + 77};
    flyt_rep_pointer_attrs pa;
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_POINTER_ATTRS, &h, sizeof h, NULL, 0, &pa, sizeof pa),
             T_SUCCESS, "POINTER_ATTRS inside a restored buffer");
    CHECK_EQ(pa.base, buf_ptr[2], "its base is the allocation's, not the span's");
    CHECK_EQ(pa.size, buf_size[2], "its size too");
    async_restored();

    uint64_t fresh;
    CHECK_EQ(th_alloc(sess.fd, 8192, &fresh), T_SUCCESS, "a new allocation");
    for (int b = 0; b < NBUF; b++)
        CHECK(fresh + 8192 <= buf_ptr[b] || fresh >= buf_ptr[b] + size_of(b),
              "new allocation clear of buffer %d", b);
    CHECK_EQ(th_free(sess.fd, buf_ptr[0]), T_SUCCESS, "a restored buffer in a shared granule frees");
    check_contents(1, 0); /* its granule stays mapped for its neighbour */

    th_say("a checkpoint of the restored session");
    char error[256];
    CHECK_EQ(checkpoint(state2_path, error, sizeof error), T_SUCCESS, "second checkpoint: %s", error);
    for (int b = 1; b < NBUF; b++)
        CHECK_EQ(th_free(sess.fd, buf_ptr[b]), T_SUCCESS, "restored buffer %d frees", b);
    CHECK_EQ(th_free(sess.fd, buf_ptr[1]), T_INVALID_VALUE, "a second free of it is refused");
    CHECK_EQ(th_free(sess.fd, fresh), T_SUCCESS, "the new allocation frees");
    CHECK_LE(fake_live.mappings, 1, "every allocation is unmapped but one empty chunk");
    CHECK_EQ(fake_live.reservations, 3, "the arena and the spans stay reserved for the session");
    session_end();

    th_say("the second state restores too, without the freed buffer");
    struct flyt_state *st2 = flyt_state_open(state2_path, error, sizeof error);
    CHECK(st2 != NULL, "second state opens: %s", error);
    config.restore = st2;
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores it");
    for (int b = 1; b < NBUF; b++)
        check_contents(b, b == 3);
    session_end();
    config.restore = NULL;
    flyt_state_close(st2);
}

static void restore_refused_when_taken(struct flyt_state *st)
{
    th_say("an address the driver does not grant: the restore fails, nothing stays");
    fake_cuda_occupy(buf_ptr[3] + FAKE_GRANULE, 64, 1);
    config.restore = st;
    CHECK_EQ(session_begin(), T_ALREADY_MAPPED, "HELLO answers CUDA_ERROR_ALREADY_MAPPED");
    session_end();
    config.restore = NULL;
    fake_cuda_occupy(buf_ptr[3] + FAKE_GRANULE, 64, 0);
}

static void packing(void)
{
    th_say("small allocations share one mapped chunk; large ones map alone; all in one arena");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    enum { N = 300 };
    static uint64_t small[N];
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(th_alloc(sess.fd, 1000 + (uint64_t)i, &small[i]), T_SUCCESS, "MEM_ALLOC %d", i);
        CHECK_EQ(small[i] % 512, 0, "allocation %d is 512-byte aligned", i);
        lo = small[i] < lo ? small[i] : lo;
        hi = small[i] + 1000 + (uint64_t)i > hi ? small[i] + 1000 + (uint64_t)i : hi;
    }
    CHECK_LE(hi - lo, FAKE_GRANULE, "300 small allocations fit in one granule");
    CHECK_EQ(fake_live.mappings, 1, "with one mapping");
    uint64_t big, big2;
    CHECK_EQ(th_alloc(sess.fd, (3u << 20) + 1, &big), T_SUCCESS, "a large allocation");
    CHECK_EQ(big % FAKE_GRANULE, 0, "granule-aligned");
    CHECK_EQ(fake_live.mappings, 2, "mapped alone");
    CHECK_EQ(th_alloc(sess.fd, FAKE_GRANULE, &big2), T_SUCCESS, "another");
    CHECK(big2 >= big + (4u << 20) || big2 + FAKE_GRANULE <= big, "clear of the first");
    CHECK_EQ(fake_live.reservations, 1, "one arena holds them all");
    for (int i = 0; i < N; i++)
        CHECK_EQ(th_free(sess.fd, small[i]), T_SUCCESS, "MEM_FREE %d", i);
    CHECK_EQ(fake_live.mappings, 3, "the empty chunk stays mapped for the next small one");
    uint64_t again;
    CHECK_EQ(th_alloc(sess.fd, 64, &again), T_SUCCESS, "a small allocation again");
    CHECK_EQ(again & ~(FAKE_GRANULE - 1), lo & ~(FAKE_GRANULE - 1), "in the kept chunk");
    CHECK_EQ(fake_live.mappings, 3, "without a new mapping");
    CHECK_EQ(th_free(sess.fd, big), T_SUCCESS, "the large one frees");
    CHECK_EQ(fake_live.mappings, 2, "its mapping is gone");
    CHECK_EQ(th_free(sess.fd, big + 512), T_INVALID_VALUE, "an address inside nothing is refused");
    CHECK_EQ(th_free(sess.fd, again), T_SUCCESS, "MEM_FREE");
    CHECK_EQ(th_free(sess.fd, big2), T_SUCCESS, "MEM_FREE");
    session_end();
}

static void arena_disabled(void)
{
    th_say("FLYT_CUDA_ARENA=0: cuMemAlloc's memory, which a checkpoint refuses by name");
    setenv("FLYT_CUDA_ARENA", "0", 1);
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    uint64_t p;
    CHECK_EQ(th_alloc(sess.fd, 4096, &p), T_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(fake_live.allocs, 1, "a cuMemAlloc allocation");
    CHECK_EQ(fake_live.reservations + fake_live.mappings, 0, "no arena");
    char error[256], path[160];
    snprintf(path, sizeof path, "%s/never.state", dir);
    CHECK_EQ(checkpoint(path, error, sizeof error), T_NOT_SUPPORTED, "refused");
    CHECK(strstr(error, "FLYT_CUDA_ARENA=0") != NULL, "says why: %s", error);
    CHECK_EQ(th_free(sess.fd, p), T_SUCCESS, "MEM_FREE");
    CHECK_EQ(fake_live.allocs, 0, "freed with cuMemFree");
    session_end();
    unsetenv("FLYT_CUDA_ARENA");
}

/* GLOBAL_GET of "glob" in a new module: its address and size. */
static void global_of(uint64_t mod, uint64_t *addr, uint64_t *size)
{
    flyt_req_named g = {mod, 5, 0};
    flyt_rep_u64_pair rep = {0};
    CHECK_EQ(th_call_rep(sess.fd, FLYT_OP_GLOBAL_GET, &g, sizeof g, "glob", 5, &rep, sizeof rep),
             T_SUCCESS, "GLOBAL_GET");
    *addr = rep.a;
    *size = rep.b;
}

static void globals_restored(void)
{
    th_say("a module global: its contents captured, its address checked at the restore");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    size_t img_size;
    unsigned char *img = th_fake_fatbin(&img_size);
    uint64_t mod, addr, size;
    CHECK_EQ(th_module_load(sess.fd, img, img_size, &mod), T_SUCCESS, "MODULE_LOAD");
    free(img);
    global_of(mod, &addr, &size);
    unsigned char bytes[64], back[64];
    for (int i = 0; i < 64; i++)
        bytes[i] = (unsigned char)(i * 5 + 1);
    CHECK_EQ(size, sizeof bytes, "a 64-byte global");
    CHECK_EQ(th_htod(sess.fd, addr, bytes, sizeof bytes), T_SUCCESS, "the program sets it");
    char error[256], path[160];
    snprintf(path, sizeof path, "%s/global.state", dir);
    CHECK_EQ(checkpoint(path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    session_end();
    memset((void *)(uintptr_t)addr, 0, sizeof bytes); /* a fresh process's global */

    struct flyt_state *st = flyt_state_open(path, error, sizeof error);
    CHECK(st != NULL, "the state opens: %s", error);
    config.restore = st;
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores it");
    int had = 0;
    CHECK_EQ(th_dtoh(sess.fd, addr, sizeof back, back, &had), T_SUCCESS, "DTOH of the global");
    CHECK_MEM_EQ(back, bytes, sizeof bytes, "it holds what the program set");
    uint64_t addr2, size2;
    global_of(mod, &addr2, &size2);
    CHECK_EQ(addr2, addr, "the restored module's global is at the same address");
    session_end();

    th_say("a global the driver puts elsewhere: its old address is translated");
    fake_live.global_shift = 4096;
    memset((void *)(uintptr_t)(addr + 4096), 0, sizeof bytes);
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores it");
    CHECK_MEM_EQ((void *)(uintptr_t)(addr + 4096), bytes, sizeof bytes,
                 "the contents went to where the driver put it");
    CHECK_EQ(th_dtoh(sess.fd, addr, sizeof back, back, &had), T_SUCCESS,
             "DTOH at the address the program holds");
    CHECK_MEM_EQ(back, bytes, sizeof bytes, "reads the moved global");
    uint64_t fid;
    CHECK_EQ(func_get(mod, "kernel", &fid), T_SUCCESS, "FUNC_GET");
    launch(fid, addr); /* the old address as a kernel parameter */
    CHECK_EQ(((unsigned char *)(uintptr_t)(addr + 4096))[0], (unsigned char)(bytes[0] + 1),
             "a kernel given the old address worked on the moved global");
    session_end();
    fake_live.global_shift = 0;
    config.restore = NULL;
    flyt_state_close(st);
    unlink(path);
}

/* ARRAY_COPY of a whole 2D array of w bytes x h rows to or from device memory at dev. */
static int array_rows(uint64_t array, uint64_t dev, uint64_t w, uint64_t h, int to_array)
{
    flyt_copy_side a = {.kind = FLYT_SIDE_ARRAY, .handle = array};
    flyt_copy_side d = {.kind = FLYT_SIDE_DEVICE, .handle = dev, .pitch = w, .height = h};
    flyt_req_array_copy r = {.dst = to_array ? a : d, .src = to_array ? d : a, .width_bytes = w,
                             .height = h, .depth = 1};
    return th_call(sess.fd, FLYT_OP_ARRAY_COPY, &r, sizeof r, NULL, 0, NULL);
}

static uint64_t make(uint16_t op, const void *req, size_t len, const char *what)
{
    flyt_rep_u64 rep = {0};
    CHECK_EQ(th_call_rep(sess.fd, op, req, len, NULL, 0, &rep, sizeof rep), T_SUCCESS, "%s", what);
    return rep.value;
}

static int destroy(uint16_t op, uint64_t handle)
{
    flyt_req_handle h = {handle};
    return th_call(sess.fd, op, &h, sizeof h, NULL, 0, NULL);
}

/* An array, a texture and a surface on it: the restore's driver counts its
 * object values from elsewhere, and kernels given the old ones get the new. */
static void textures_restored(void)
{
    th_say("a texture and a surface object whose values the restored driver changes");
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO");
    flyt_req_array_create ad = {16, 4, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST, 0};
    uint64_t arr = make(FLYT_OP_ARRAY_CREATE, &ad, sizeof ad, "ARRAY_CREATE");
    unsigned char bytes[16 * 4 * 4], back[sizeof bytes];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)(i * 7 + 3);
    uint64_t dev;
    CHECK_EQ(th_alloc(sess.fd, sizeof bytes, &dev), T_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(th_htod(sess.fd, dev, bytes, sizeof bytes), T_SUCCESS, "HTOD");
    CHECK_EQ(array_rows(arr, dev, 64, 4, 1), T_SUCCESS, "into the array");
    flyt_req_tex_create tc;
    memset(&tc, 0, sizeof tc);
    tc.res.handle = arr; /* type 0: an array */
    uint64_t tex = make(FLYT_OP_TEX_CREATE, &tc, sizeof tc, "TEX_CREATE");
    uint64_t surf = make(FLYT_OP_SURF_CREATE, &tc.res, sizeof tc.res, "SURF_CREATE");
    char error[256], path[160];
    snprintf(path, sizeof path, "%s/tex.state", dir);
    CHECK_EQ(checkpoint(path, error, sizeof error), T_SUCCESS, "checkpoint: %s", error);
    CHECK_EQ(destroy(FLYT_OP_TEX_DESTROY, tex), T_SUCCESS, "TEX_DESTROY");
    CHECK_EQ(destroy(FLYT_OP_SURF_DESTROY, surf), T_SUCCESS, "SURF_DESTROY");
    CHECK_EQ(destroy(FLYT_OP_ARRAY_DESTROY, arr), T_SUCCESS, "ARRAY_DESTROY");
    session_end();

    fake_live.obj_base = 1000; /* a fresh driver's values are others */
    struct flyt_state *st = flyt_state_open(path, error, sizeof error);
    CHECK(st != NULL, "the state opens: %s", error);
    config.restore = st;
    CHECK_EQ(session_begin(), T_SUCCESS, "HELLO restores it");
    CHECK_EQ(fake_live.arrays, 1, "the array made again");
    CHECK_EQ(fake_live.objs, 2, "the texture and the surface made again");
    memset(back, 0, sizeof back);
    CHECK_EQ(th_htod(sess.fd, dev, back, sizeof back), T_SUCCESS, "the device copy cleared");
    CHECK_EQ(array_rows(arr, dev, 64, 4, 0), T_SUCCESS, "out of the restored array");
    int had;
    CHECK_EQ(th_dtoh(sess.fd, dev, sizeof back, back, &had), T_SUCCESS, "DTOH");
    CHECK_MEM_EQ(back, bytes, sizeof bytes, "the array's contents came back");
    size_t img_size;
    unsigned char *img = th_fake_fatbin(&img_size);
    uint64_t mod, fid;
    CHECK_EQ(th_module_load(sess.fd, img, img_size, &mod), T_SUCCESS, "MODULE_LOAD");
    free(img);
    CHECK_EQ(func_get(mod, "kernel", &fid), T_SUCCESS, "FUNC_GET");
    launch(fid, tex);
    CHECK(fake_live.last_param != tex && fake_live.last_param > 1000,
          "the kernel got the texture's new value 0x%llx for 0x%llx",
          (unsigned long long)fake_live.last_param, (unsigned long long)tex);
    launch(fid, surf);
    CHECK(fake_live.last_param != surf && fake_live.last_param > 1000,
          "the kernel got the surface's new value 0x%llx for 0x%llx",
          (unsigned long long)fake_live.last_param, (unsigned long long)surf);
    launch(fid, dev);
    CHECK_EQ(fake_live.last_param, dev, "a pointer parameter is left alone");
    CHECK_EQ(destroy(FLYT_OP_TEX_DESTROY, tex), T_SUCCESS, "TEX_DESTROY of the old value");
    launch(fid, surf);
    CHECK(fake_live.last_param != surf, "the surface's value is still translated");
    CHECK_EQ(destroy(FLYT_OP_SURF_DESTROY, surf), T_SUCCESS, "SURF_DESTROY of the old value");
    CHECK_EQ(fake_live.objs, 0, "both destroyed in the driver");
    CHECK_EQ(destroy(FLYT_OP_ARRAY_DESTROY, arr), T_SUCCESS, "ARRAY_DESTROY");
    CHECK_EQ(fake_live.arrays, 0, "the array destroyed in the driver");
    CHECK_EQ(th_free(sess.fd, dev), T_SUCCESS, "MEM_FREE");
    CHECK_EQ(th_call(sess.fd, FLYT_OP_MODULE_UNLOAD, &(flyt_req_handle){mod}, sizeof(flyt_req_handle),
                     NULL, 0, NULL), T_SUCCESS, "MODULE_UNLOAD");
    session_end();
    fake_live.obj_base = 0;
    config.restore = NULL;
    flyt_state_close(st);
    unlink(path);
}

int main(void)
{
    flyt_log_init("test_cuda_state", FLYT_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    th_watchdog(120);
    char err[256];
    CHECK_EQ(flyt_status_open(NULL, QUOTA, err, sizeof err), 0, "a status page with a quota");
    fake_cuda_table(&table);
    snprintf(dir, sizeof dir, "/tmp/flyt-cuda-state-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(state_path, sizeof state_path, "%s/a.state", dir);
    snprintf(state2_path, sizeof state2_path, "%s/b.state", dir);

    build_and_checkpoint();
    struct flyt_state *st = flyt_state_open(state_path, err, sizeof err);
    CHECK(st != NULL, "the state opens: %s", err);
    restore_refused_when_taken(st);
    restore_matches(st);
    async_address_taken(st);
    async_spans_kept_early(st);
    flyt_state_close(st);
    globals_restored();
    textures_restored();
    packing();
    arena_disabled();
    empty_graph();
    vmm_roundtrip();

    flyt_cuda_driver_use(NULL);
    unlink(state_path);
    unlink(state2_path);
    rmdir(dir);
    th_passed();
    printf("PASS\n");
    return 0;
}
