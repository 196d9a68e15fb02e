/*
 * Data round trips through flyt-server and its host backend over raw
 * frames: device queries, 20 MiB copies in both directions (pipelined and
 * answered), memsets, 3D copies with pitches, device-to-device copies,
 * pools, streams, events, modules, deferred errors and device reset.
 *
 * usage: test_server_roundtrip PATH-TO-flyt-server
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1ull << 20)
#define TOTAL (256 * MiB) /* FLYT_HOST_BACKEND_MEM given to the server */
#define BIG (20 * MiB)

static int fd;
static const flyt_req_none none;

static unsigned char pat(uint64_t i, unsigned seed)
{
    return (unsigned char)((i ^ (i >> 8) ^ (i >> 17)) * 31u + seed);
}

static void fill(unsigned char *p, uint64_t n, unsigned seed)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = pat(i, seed);
}

static uint64_t first_diff(const unsigned char *a, const unsigned char *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return n;
}

/* "identical" or "first difference at byte N" */
static const char *diff_text(uint64_t d, uint64_t n)
{
    static char buf[64];
    if (d == n)
        return "identical";
    snprintf(buf, sizeof buf, "first difference at byte %llu", (unsigned long long)d);
    return buf;
}

static void mem_info(uint64_t *free_b, uint64_t *total_b)
{
    flyt_rep_mem_info mi;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_MEM_INFO, &none, sizeof none, NULL, 0, &mi, sizeof mi), 0,
             "DEVICE_MEM_INFO");
    *free_b = mi.free_bytes;
    *total_b = mi.total_bytes;
}

static void device_queries(void)
{
    th_say("device queries");
    flyt_rep_i32 v;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "DEVICE_COUNT = 1");
    CHECK_EQ(v.value, 1, "DEVICE_COUNT = 1");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DRIVER_VERSION, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "DRIVER_VERSION = %d", v.value);
    CHECK_EQ(v.value, 13000, "DRIVER_VERSION = %d", v.value);
    flyt_req_device dev = {0, 0};
    flyt_rep_props props;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_PROPS, &dev, sizeof dev, NULL, 0, &props, sizeof props), 0,
             "DEVICE_PROPS");
    char name[257];
    memcpy(name, props.bytes, 256); /* cudaDeviceProp starts with char name[256] */
    name[256] = '\0';
    CHECK_STR_EQ(name, "Flyt host test device", "device name \"%s\"", name);
    flyt_req_device_attr da = {16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_ATTR, &da, sizeof da, NULL, 0, &v, sizeof v), 0,
             "DEVICE_ATTR MULTIPROCESSOR_COUNT = %d", v.value);
    CHECK_EQ(v.value, 132, "DEVICE_ATTR MULTIPROCESSOR_COUNT = %d", v.value);
    da.attr = 75; /* COMPUTE_CAPABILITY_MAJOR */
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_ATTR, &da, sizeof da, NULL, 0, &v, sizeof v), 0,
             "DEVICE_ATTR COMPUTE_CAPABILITY_MAJOR = %d", v.value);
    CHECK_EQ(v.value, 9, "DEVICE_ATTR COMPUTE_CAPABILITY_MAJOR = %d", v.value);
    da.attr = 9999;
    int rc = th_call_rep(fd, FLYT_OP_DEVICE_ATTR, &da, sizeof da, NULL, 0, &v, sizeof v);
    CHECK_EQ(rc, T_INVALID_VALUE, "DEVICE_ATTR 9999: %d (CUDA_ERROR_INVALID_VALUE)", rc);
    flyt_rep_pci_bus_id bus;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_PCI_BUS_ID, &dev, sizeof dev, NULL, 0, &bus, sizeof bus), 0,
             "DEVICE_PCI_BUS_ID %.64s", bus.bus_id);
    CHECK(strncmp(bus.bus_id, "0000:00:00.0", sizeof bus.bus_id) == 0, "DEVICE_PCI_BUS_ID %.64s", bus.bus_id);
    flyt_rep_i32_pair pr;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_PRIO_RANGE, &none, sizeof none, NULL, 0, &pr, sizeof pr), 0,
             "DEVICE_PRIO_RANGE %d..%d", pr.a, pr.b);
    CHECK_EQ(pr.a, 0, "DEVICE_PRIO_RANGE %d..%d", pr.a, pr.b);
    CHECK_LT(pr.b, 0, "DEVICE_PRIO_RANGE %d..%d", pr.a, pr.b);
    flyt_req_limit lim = {2 /* CU_LIMIT_MALLOC_HEAP_SIZE */, 0, 16 * MiB};
    flyt_rep_u64 u;
    CHECK_EQ(th_call(fd, FLYT_OP_DEVICE_SET_LIMIT, &lim, sizeof lim, NULL, 0, NULL), 0,
             "DEVICE_SET_LIMIT / GET_LIMIT malloc heap = 16 MiB");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_GET_LIMIT, &lim, sizeof lim, NULL, 0, &u, sizeof u), 0,
             "DEVICE_SET_LIMIT / GET_LIMIT malloc heap = 16 MiB");
    CHECK_EQ(u.value, 16 * MiB, "DEVICE_SET_LIMIT / GET_LIMIT malloc heap = 16 MiB");
    uint64_t fr, tot;
    mem_info(&fr, &tot);
    CHECK_EQ(tot, TOTAL, "total %llu (FLYT_HOST_BACKEND_MEM) and all free", (unsigned long long)tot);
    CHECK_EQ(fr, TOTAL, "total %llu (FLYT_HOST_BACKEND_MEM) and all free", (unsigned long long)tot);
}

static void big_copies(void)
{
    th_say("20 MiB copies");
    unsigned char *out = malloc(BIG), *in = malloc(BIG);
    uint64_t a, fr, tot;
    CHECK_EQ(th_alloc(fd, BIG, &a), 0, "MEM_ALLOC 20 MiB at 0x%llx", (unsigned long long)a);
    CHECK_NE(a, 0, "MEM_ALLOC 20 MiB at 0x%llx", (unsigned long long)a);
    mem_info(&fr, &tot);
    CHECK_EQ(fr, TOTAL - BIG, "free memory down by 20 MiB");
    flyt_rep_pointer_attrs pa;
    flyt_req_handle ph = {a + 12345};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POINTER_ATTRS, &ph, sizeof ph, NULL, 0, &pa, sizeof pa), 0,
             "POINTER_ATTRS inside: device memory, base and size of the allocation");
    CHECK_EQ(pa.type, 2, "POINTER_ATTRS inside: device memory, base and size of the allocation");
    CHECK_EQ(pa.base, a, "POINTER_ATTRS inside: device memory, base and size of the allocation");
    CHECK_EQ(pa.size, BIG, "POINTER_ATTRS inside: device memory, base and size of the allocation");

    fill(out, BIG, 1);
    flyt_req_memcpy req = {a, 0, BIG, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_post(fd, FLYT_OP_MEMCPY_HTOD, &req, sizeof req, out, BIG), 0, "MEMCPY_HTOD 20 MiB, NOREPLY");
    CHECK_EQ(th_call(fd, FLYT_OP_DEVICE_SYNC, &none, sizeof none, NULL, 0, NULL), 0,
             "DEVICE_SYNC: success, nothing deferred");
    CHECK_EQ(th_last_deferred, 0, "DEVICE_SYNC: success, nothing deferred");
    int had;
    memset(in, 0, BIG);
    CHECK_EQ(th_dtoh(fd, a, BIG, in, &had), 0, "MEMCPY_DTOH 20 MiB");
    CHECK(had, "MEMCPY_DTOH 20 MiB");
    CHECK_EQ(first_diff(in, out, BIG), BIG, "data intact (pipelined copy)");

    fill(out, BIG, 77);
    CHECK_EQ(th_htod(fd, a, out, BIG), 0, "MEMCPY_HTOD 20 MiB with reply");
    memset(in, 0, BIG);
    CHECK_EQ(th_dtoh(fd, a, BIG, in, &had), 0, "MEMCPY_DTOH 20 MiB");
    CHECK_EQ(first_diff(in, out, BIG), BIG, "data intact (answered copy)");

    /* a piece in the middle, unaligned */
    CHECK_EQ(th_htod(fd, a + 1000003, "flyt!", 5), 0, "MEMCPY_HTOD of 5 bytes at an odd offset");
    CHECK_EQ(th_dtoh(fd, a + 1000000, 11, in, &had), 0, "read back with its neighbours unchanged");
    CHECK_MEM_EQ(in + 3, "flyt!", 5, "read back with its neighbours unchanged");
    CHECK_EQ(in[0], out[1000000], "read back with its neighbours unchanged");
    CHECK_EQ(in[10], out[1000010], "read back with its neighbours unchanged");
    memcpy(out + 1000003, "flyt!", 5);

    th_say("memset");
    flyt_req_memset ms = {a + 1000, 5000, 5000, 5000, 1, 1, FLYT_STREAM_DEFAULT, 0x5A, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMSET, &ms, sizeof ms, NULL, 0, NULL), 0,
             "MEMSET 5000 bytes of 0x5A at +1000");
    memset(out + 1000, 0x5A, 5000);
    /* 3D memset: 2 slices of 10 rows of 100 bytes, pitch 1024, slice pitch 16 KiB, at +64 KiB */
    flyt_req_memset ms3 = {a + 65536, 1024, 16384, 100, 10, 2, FLYT_STREAM_DEFAULT, 0x33, 0};
    CHECK_EQ(th_post(fd, FLYT_OP_MEMSET, &ms3, sizeof ms3, NULL, 0), 0,
             "MEMSET 100x10x2 with pitches, NOREPLY");
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 10; y++)
            memset(out + 65536 + z * 16384 + y * 1024, 0x33, 100);
    CHECK_EQ(th_dtoh(fd, a, 128 * 1024, in, &had), 0, "MEMCPY_DTOH of the first 128 KiB");
    CHECK_EQ(th_last_deferred, 0, "MEMCPY_DTOH of the first 128 KiB");
    uint64_t d = first_diff(in, out, 128 * 1024);
    CHECK_EQ(d, 128 * 1024, "memsets hit exactly their bytes (%s)", diff_text(d, 128 * 1024));

    th_say("device to device");
    uint64_t b2;
    CHECK_EQ(th_alloc(fd, BIG, &b2), 0, "second MEM_ALLOC 20 MiB");
    flyt_req_memcpy dd = {b2, a, BIG, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMCPY_DTOD, &dd, sizeof dd, NULL, 0, NULL), 0, "MEMCPY_DTOD 20 MiB");
    memset(in, 0, BIG);
    CHECK_EQ(th_dtoh(fd, b2, BIG, in, &had), 0, "the copy matches");
    CHECK_EQ(first_diff(in, out, BIG), BIG, "the copy matches");
    flyt_req_memcpy dd2 = {b2 + 10, a + 20, 1000, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_post(fd, FLYT_OP_MEMCPY_DTOD, &dd2, sizeof dd2, NULL, 0), 0,
             "MEMCPY_DTOD 1000 bytes NOREPLY");
    CHECK_EQ(th_dtoh(fd, b2 + 10, 1000, in, &had), 0, "offset copy matches");
    CHECK_EQ(th_last_deferred, 0, "offset copy matches");
    CHECK_MEM_EQ(in, out + 20, 1000, "offset copy matches");
    flyt_req_memcpy dd3 = {b2 + BIG - 10, a, 11, FLYT_STREAM_DEFAULT};
    int rc = th_call(fd, FLYT_OP_MEMCPY_DTOD, &dd3, sizeof dd3, NULL, 0, NULL);
    CHECK_NE(rc, 0, "MEMCPY_DTOD running one byte past the destination: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_DTOD running one byte past the destination: error %d", rc);

    CHECK_EQ(th_free(fd, a), 0, "MEM_FREE both");
    CHECK_EQ(th_free(fd, b2), 0, "MEM_FREE both");
    mem_info(&fr, &tot);
    CHECK_EQ(fr, TOTAL, "all memory free again");
    CHECK_NE(th_dtoh(fd, a, 16, in, &had), 0, "MEMCPY_DTOH after free: error");
    free(in);
    free(out);
}

/* MEMCPY_3D device to host: reply data as for MEMCPY_DTOH (with a trailing
 * struct flyt_reply) or without the trailer; both are accepted and told. */
static int dtoh_3d(const flyt_req_memcpy_3d *req, unsigned char *buf, uint64_t n)
{
    struct th_reply r;
    int rc = th_call(fd, FLYT_OP_MEMCPY_3D, req, sizeof *req, NULL, 0, &r);
    if (rc == -1000)
        return rc;
    const size_t head = sizeof(flyt_rep_none);
    if (r.body_len == head + n + sizeof(struct flyt_reply)) {
        struct flyt_reply tail;
        memcpy(buf, r.body + head, n);
        memcpy(&tail, r.body + head + n, sizeof tail);
        if (rc == 0)
            rc = tail.result;
        printf("        (3D D2H reply: data then a trailing result)\n");
    } else if (r.body_len == head + n) {
        memcpy(buf, r.body + head, n);
        printf("        (3D D2H reply: data, no trailing result)\n");
    } else if (r.body_len == head) {
        if (rc == 0)
            rc = -1000;
    } else {
        printf("        (3D D2H reply body %zu bytes for %llu)\n", r.body_len, (unsigned long long)n);
        rc = -1000;
    }
    th_reply_free(&r);
    return rc;
}

static void copies_3d(void)
{
    th_say("3D copies with pitches");
    flyt_req_mem_pitch mp = {1000, 64};
    flyt_rep_u64_pair pp;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_MEM_ALLOC_PITCH, &mp, sizeof mp, NULL, 0, &pp, sizeof pp), 0,
             "MEM_ALLOC_PITCH 1000x64: pitch %llu", (unsigned long long)pp.b);
    CHECK_GE(pp.b, 1000, "MEM_ALLOC_PITCH 1000x64: pitch %llu", (unsigned long long)pp.b);
    const uint64_t base = pp.a, pitch = pp.b, rows = 64;
    CHECK_EQ(pitch, 1024, "host backend pitch is width rounded up to 512");
    const uint64_t total = pitch * rows;
    unsigned char *expect = calloc(1, total), *got = malloc(total);
    int had;
    flyt_req_memset clr = {base, total, total, total, 1, 1, FLYT_STREAM_DEFAULT, 0, 0};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMSET, &clr, sizeof clr, NULL, 0, NULL), 0, "MEMSET it to 0");

    /* host -> device: a 300 x 20 box at (17, 5) */
    const uint64_t w = 300, h = 20;
    unsigned char box[300 * 20];
    fill(box, sizeof box, 9);
    flyt_req_memcpy_3d c;
    memset(&c, 0, sizeof c);
    c.dir = FLYT_DIR_HTOD;
    c.stream = FLYT_STREAM_DEFAULT;
    c.dst = (flyt_pitched){base, pitch, rows, 17, 5, 0};
    c.src = (flyt_pitched){0, w, h, 0, 0, 0};
    c.width_bytes = w;
    c.height = h;
    c.depth = 1;
    CHECK_EQ(th_call(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, box, sizeof box, NULL), 0,
             "MEMCPY_3D H2D 300x20 at (17,5)");
    for (uint64_t y = 0; y < h; y++)
        memcpy(expect + (5 + y) * pitch + 17, box + y * w, w);
    CHECK_EQ(th_dtoh(fd, base, total, got, &had), 0, "MEMCPY_DTOH of the whole pitched allocation");
    uint64_t d = first_diff(got, expect, total);
    CHECK_EQ(d, total, "rows landed at their pitch (%s)", diff_text(d, total));

    /* pipelined, depth 3: 3 slices of 8 rows of 100 bytes, slice height 16 */
    const uint64_t w3 = 100, h3 = 8, d3 = 3, slice_rows = 16;
    unsigned char vol[100 * 8 * 3];
    fill(vol, sizeof vol, 21);
    memset(&c, 0, sizeof c);
    c.dir = FLYT_DIR_HTOD;
    c.dst = (flyt_pitched){base, pitch, slice_rows, 600, 2, 1};
    c.src = (flyt_pitched){0, w3, h3, 0, 0, 0};
    c.width_bytes = w3;
    c.height = h3;
    c.depth = d3;
    CHECK_EQ(th_post(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, vol, sizeof vol), 0,
             "MEMCPY_3D H2D 100x8x3 at (600,2,1), slice height 16, NOREPLY");
    for (uint64_t z = 0; z < d3; z++)
        for (uint64_t y = 0; y < h3; y++)
            memcpy(expect + ((1 + z) * slice_rows + 2 + y) * pitch + 600, vol + (z * h3 + y) * w3, w3);
    CHECK_EQ(th_dtoh(fd, base, total, got, &had), 0, "MEMCPY_DTOH of the whole allocation");
    CHECK_EQ(th_last_deferred, 0, "MEMCPY_DTOH of the whole allocation");
    d = first_diff(got, expect, total);
    CHECK_EQ(d, total, "slices landed at their slice pitch (%s)", diff_text(d, total));

    /* device -> host of the same boxes */
    memset(&c, 0, sizeof c);
    c.dir = FLYT_DIR_DTOH;
    c.src = (flyt_pitched){base, pitch, rows, 17, 5, 0};
    c.dst = (flyt_pitched){0, w, h, 0, 0, 0};
    c.width_bytes = w;
    c.height = h;
    c.depth = 1;
    unsigned char back[300 * 20];
    memset(back, 0, sizeof back);
    CHECK_EQ(dtoh_3d(&c, back, sizeof back), 0, "MEMCPY_3D D2H 300x20 comes back");
    CHECK_MEM_EQ(back, box, sizeof box, "MEMCPY_3D D2H 300x20 comes back");
    c.src = (flyt_pitched){base, pitch, slice_rows, 600, 2, 1};
    c.dst = (flyt_pitched){0, w3, h3, 0, 0, 0};
    c.width_bytes = w3;
    c.height = h3;
    c.depth = d3;
    unsigned char vback[sizeof vol];
    CHECK_EQ(dtoh_3d(&c, vback, sizeof vback), 0, "MEMCPY_3D D2H 100x8x3 comes back");
    CHECK_MEM_EQ(vback, vol, sizeof vol, "MEMCPY_3D D2H 100x8x3 comes back");

    /* device -> device within the allocation: the 300x20 box to (0, 40) */
    memset(&c, 0, sizeof c);
    c.dir = FLYT_DIR_DTOD;
    c.src = (flyt_pitched){base, pitch, rows, 17, 5, 0};
    c.dst = (flyt_pitched){base, pitch, rows, 0, 40, 0};
    c.width_bytes = w;
    c.height = h;
    c.depth = 1;
    CHECK_EQ(th_call(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, NULL, 0, NULL), 0,
             "MEMCPY_3D D2D 300x20 to (0,40)");
    for (uint64_t y = 0; y < h; y++)
        memcpy(expect + (40 + y) * pitch, box + y * w, w);
    CHECK_EQ(th_dtoh(fd, base, total, got, &had), 0, "the box was copied");
    CHECK_EQ(first_diff(got, expect, total), total, "the box was copied");

    /* out of bounds: a box reaching row 64 of 64 */
    memset(&c, 0, sizeof c);
    c.dir = FLYT_DIR_HTOD;
    c.dst = (flyt_pitched){base, pitch, rows, 0, 50, 0};
    c.src = (flyt_pitched){0, w, h, 0, 0, 0};
    c.width_bytes = w;
    c.height = h;
    c.depth = 1;
    int rc = th_call(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, box, sizeof box, NULL);
    CHECK_NE(rc, 0, "MEMCPY_3D H2D past the allocation's end: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_3D H2D past the allocation's end: error %d", rc);
    c.dir = FLYT_DIR_DTOH;
    c.src = c.dst;
    c.dst = (flyt_pitched){0, w, h, 0, 0, 0};
    rc = dtoh_3d(&c, back, sizeof back);
    CHECK_NE(rc, 0, "MEMCPY_3D D2H past the allocation's end: error %d", rc);
    CHECK_NE(rc, -1000, "MEMCPY_3D D2H past the allocation's end: error %d", rc);
    CHECK_EQ(th_dtoh(fd, base, total, got, &had), 0, "the refused copies changed nothing");
    CHECK_EQ(first_diff(got, expect, total), total, "the refused copies changed nothing");
    CHECK_EQ(th_free(fd, base), 0, "MEM_FREE the pitched allocation");
    free(expect);
    free(got);
}

static void pools_streams_events(void)
{
    th_say("pools and async allocations");
    flyt_req_device dev = {0, 0};
    flyt_rep_u64 u;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_DEFAULT, &dev, sizeof dev, NULL, 0, &u, sizeof u), 0,
             "POOL_DEFAULT");
    uint64_t def_pool = u.value;
    flyt_req_mem_alloc ma = {4096, FLYT_STREAM_DEFAULT, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_MEM_ALLOC_ASYNC, &ma, sizeof ma, NULL, 0, &u, sizeof u), 0,
             "MEM_ALLOC_ASYNC 4096 from the current pool");
    CHECK(u.value, "MEM_ALLOC_ASYNC 4096 from the current pool");
    uint64_t ap = u.value;
    flyt_req_pool_attr pa = {def_pool, 7 /* CU_MEMPOOL_ATTR_USED_MEM_CURRENT */, 0, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_GET_ATTR, &pa, sizeof pa, NULL, 0, &u, sizeof u), 0,
             "default pool USED_MEM_CURRENT = %llu", (unsigned long long)u.value);
    CHECK_EQ(u.value, 4096, "default pool USED_MEM_CURRENT = %llu", (unsigned long long)u.value);
    CHECK_EQ(th_htod(fd, ap, "pool", 4), 0, "MEMCPY_HTOD into it");
    flyt_req_mem_free_async mf = {ap, FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_post(fd, FLYT_OP_MEM_FREE_ASYNC, &mf, sizeof mf, NULL, 0), 0, "MEM_FREE_ASYNC NOREPLY");
    flyt_req_pool_create pc = {1 * MiB, 0, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_CREATE, &pc, sizeof pc, NULL, 0, &u, sizeof u), 0,
             "POOL_CREATE max 1 MiB (nothing deferred)");
    CHECK_EQ(th_last_deferred, 0, "POOL_CREATE max 1 MiB (nothing deferred)");
    uint64_t pool = u.value;
    flyt_req_mem_alloc mb = {2 * MiB, FLYT_STREAM_DEFAULT, pool};
    int rc = th_call_rep(fd, FLYT_OP_MEM_ALLOC_ASYNC, &mb, sizeof mb, NULL, 0, &u, sizeof u);
    CHECK_EQ(rc, T_OUT_OF_MEMORY, "2 MiB from it: %d (CUDA_ERROR_OUT_OF_MEMORY)", rc);
    flyt_req_pool_attr thr = {pool, 4 /* RELEASE_THRESHOLD */, 0, 12345};
    CHECK_EQ(th_call(fd, FLYT_OP_POOL_SET_ATTR, &thr, sizeof thr, NULL, 0, NULL), 0,
             "POOL_SET_ATTR / GET_ATTR release threshold");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_POOL_GET_ATTR, &thr, sizeof thr, NULL, 0, &u, sizeof u), 0,
             "POOL_SET_ATTR / GET_ATTR release threshold");
    CHECK_EQ(u.value, 12345, "POOL_SET_ATTR / GET_ATTR release threshold");
    flyt_req_handle ph = {pool};
    CHECK_EQ(th_call(fd, FLYT_OP_POOL_DESTROY, &ph, sizeof ph, NULL, 0, NULL), 0, "POOL_DESTROY");

    th_say("streams and events");
    flyt_req_stream_create sc = {1 /* CU_STREAM_NON_BLOCKING */, -3, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_CREATE, &sc, sizeof sc, NULL, 0, &u, sizeof u), 0,
             "STREAM_CREATE: id %llu", (unsigned long long)u.value);
    CHECK_GT(u.value, 2, "STREAM_CREATE: id %llu", (unsigned long long)u.value);
    uint64_t s = u.value;
    flyt_req_handle sh = {s};
    flyt_rep_i32 v;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_GET_FLAGS, &sh, sizeof sh, NULL, 0, &v, sizeof v), 0,
             "STREAM_GET_FLAGS = 1");
    CHECK_EQ(v.value, 1, "STREAM_GET_FLAGS = 1");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_GET_PRIO, &sh, sizeof sh, NULL, 0, &v, sizeof v), 0,
             "STREAM_GET_PRIO = -3");
    CHECK_EQ(v.value, -3, "STREAM_GET_PRIO = -3");
    /* ids the client chose: creation pipelined, the id usable at once */
    flyt_req_stream_create csc = {0, 0, FLYT_CLIENT_IDS + 7};
    CHECK_EQ(th_post(fd, FLYT_OP_STREAM_CREATE, &csc, sizeof csc, NULL, 0), 0,
             "STREAM_CREATE with the client's id, NOREPLY");
    flyt_req_handle csh = {FLYT_CLIENT_IDS + 7};
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_SYNC, &csh, sizeof csh, NULL, 0, NULL), 0,
             "STREAM_SYNC of that id at once");
    CHECK_EQ(th_last_deferred, 0, "STREAM_SYNC of that id at once");
    CHECK_EQ(th_post(fd, FLYT_OP_STREAM_CREATE, &csc, sizeof csc, NULL, 0), 0,
             "the same id again: deferred CUDA_ERROR_INVALID_VALUE, the stream stays");
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_SYNC, &csh, sizeof csh, NULL, 0, NULL), 0,
             "the same id again: deferred CUDA_ERROR_INVALID_VALUE, the stream stays");
    CHECK_EQ(th_last_deferred, T_INVALID_VALUE,
             "the same id again: deferred CUDA_ERROR_INVALID_VALUE, the stream stays");
    flyt_req_event_create low = {0, 0, 12345};
    rc = th_call_rep(fd, FLYT_OP_EVENT_CREATE, &low, sizeof low, NULL, 0, &u, sizeof u);
    CHECK_EQ(rc, T_INVALID_VALUE, "EVENT_CREATE with an id below the client range: %d", rc);
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_DESTROY, &csh, sizeof csh, NULL, 0, NULL), 0, "STREAM_DESTROY of it");
    flyt_req_event_create ec = {0, 0, 0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_EVENT_CREATE, &ec, sizeof ec, NULL, 0, &u, sizeof u), 0,
             "EVENT_CREATE start");
    uint64_t e1 = u.value;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_EVENT_CREATE, &ec, sizeof ec, NULL, 0, &u, sizeof u), 0,
             "EVENT_CREATE end");
    uint64_t e2 = u.value;
    flyt_req_handle_pair el = {e1, e2};
    flyt_rep_f32 f;
    rc = th_call_rep(fd, FLYT_OP_EVENT_ELAPSED, &el, sizeof el, NULL, 0, &f, sizeof f);
    CHECK_EQ(rc, T_INVALID_HANDLE, "EVENT_ELAPSED before recording: %d (CUDA_ERROR_INVALID_HANDLE)", rc);
    flyt_req_event_record er = {e1, s, 0, 0};
    CHECK_EQ(th_post(fd, FLYT_OP_EVENT_RECORD, &er, sizeof er, NULL, 0), 0,
             "EVENT_RECORD start on the stream, NOREPLY");
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    er.event = e2;
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_RECORD, &er, sizeof er, NULL, 0, NULL), 0,
             "EVENT_RECORD end 30 ms later");
    flyt_req_stream_wait sw = {FLYT_STREAM_DEFAULT, e2, 0, 0};
    CHECK_EQ(th_post(fd, FLYT_OP_STREAM_WAIT_EVENT, &sw, sizeof sw, NULL, 0), 0, "STREAM_WAIT_EVENT NOREPLY");
    flyt_req_handle eh = {e2};
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_SYNC, &eh, sizeof eh, NULL, 0, NULL), 0,
             "EVENT_SYNC and EVENT_QUERY (nothing deferred)");
    CHECK_EQ(th_last_deferred, 0, "EVENT_SYNC and EVENT_QUERY (nothing deferred)");
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_QUERY, &eh, sizeof eh, NULL, 0, NULL), 0,
             "EVENT_SYNC and EVENT_QUERY (nothing deferred)");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_EVENT_ELAPSED, &el, sizeof el, NULL, 0, &f, sizeof f), 0,
             "EVENT_ELAPSED %.3f ms", f.value);
    CHECK(f.value >= 29.0f, "EVENT_ELAPSED %.3f ms", f.value);
    CHECK(f.value < 5000.0f, "EVENT_ELAPSED %.3f ms", f.value);
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_SYNC, &sh, sizeof sh, NULL, 0, NULL), 0,
             "STREAM_SYNC and STREAM_QUERY");
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_QUERY, &sh, sizeof sh, NULL, 0, NULL), 0,
             "STREAM_SYNC and STREAM_QUERY");
    th_ncallbacks = 0;
    flyt_req_host_func hf = {s, 4242};
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_HOST_FUNC, &hf, sizeof hf, NULL, 0, NULL), 0,
             "STREAM_HOST_FUNC callback 4242");
    hf.callback_id = 4343;
    hf.stream = FLYT_STREAM_DEFAULT;
    CHECK_EQ(th_post(fd, FLYT_OP_STREAM_HOST_FUNC, &hf, sizeof hf, NULL, 0), 0,
             "STREAM_HOST_FUNC callback 4343 on the default stream, NOREPLY");
    CHECK_EQ(th_call(fd, FLYT_OP_DEVICE_SYNC, &none, sizeof none, NULL, 0, NULL), 0, "DEVICE_SYNC");
    CHECK_EQ(th_last_deferred, 0, "DEVICE_SYNC");
    CHECK_EQ(th_ncallbacks, 2,
             "CALLBACK frames for 4242 and 4343 arrived, in order (%d seen)", th_ncallbacks);
    CHECK_EQ(th_callbacks[0], 4242,
             "CALLBACK frames for 4242 and 4343 arrived, in order (%d seen)", th_ncallbacks);
    CHECK_EQ(th_callbacks[1], 4343,
             "CALLBACK frames for 4242 and 4343 arrived, in order (%d seen)", th_ncallbacks);
    hf.stream = 0x6666;
    rc = th_call(fd, FLYT_OP_STREAM_HOST_FUNC, &hf, sizeof hf, NULL, 0, NULL);
    CHECK_EQ(rc, T_INVALID_HANDLE,
             "STREAM_HOST_FUNC on an unknown stream: %d, a CALLBACK with an error status (run nothing)", rc);
    CHECK_EQ(th_ncallbacks, 3,
             "STREAM_HOST_FUNC on an unknown stream: %d, a CALLBACK with an error status (run nothing)", rc);
    CHECK_EQ(th_callbacks[2], ~0ull,
             "STREAM_HOST_FUNC on an unknown stream: %d, a CALLBACK with an error status (run nothing)", rc);
    flyt_req_handle dflt = {FLYT_STREAM_DEFAULT};
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_SYNC, &dflt, sizeof dflt, NULL, 0, NULL), 0,
             "STREAM_SYNC of the default stream");
    flyt_req_handle e1h = {e1};
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_DESTROY, &e1h, sizeof e1h, NULL, 0, NULL), 0,
             "EVENT_DESTROY x2, STREAM_DESTROY");
    CHECK_EQ(th_call(fd, FLYT_OP_EVENT_DESTROY, &eh, sizeof eh, NULL, 0, NULL), 0,
             "EVENT_DESTROY x2, STREAM_DESTROY");
    CHECK_EQ(th_call(fd, FLYT_OP_STREAM_DESTROY, &sh, sizeof sh, NULL, 0, NULL), 0,
             "EVENT_DESTROY x2, STREAM_DESTROY");
    rc = th_call(fd, FLYT_OP_STREAM_SYNC, &sh, sizeof sh, NULL, 0, NULL);
    CHECK_EQ(rc, T_INVALID_HANDLE, "STREAM_SYNC of the destroyed stream: %d", rc);
}

static void modules(void)
{
    th_say("modules (the host backend runs no kernels)");
    size_t n;
    unsigned char *fat = th_fake_fatbin(&n);
    uint64_t m;
    CHECK_EQ(th_module_load(fd, fat, n, &m), 0,
             "MODULE_LOAD of a fake fatbinary: module %llu", (unsigned long long)m);
    flyt_req_named nr = {m, 7, 0};
    int rc = th_call(fd, FLYT_OP_FUNC_GET, &nr, sizeof nr, "kernel", 7, NULL);
    CHECK_EQ(rc, 0, "FUNC_GET: %d (names resolve; launches are refused)", rc);
    rc = th_call(fd, FLYT_OP_GLOBAL_GET, &nr, sizeof nr, "kernel", 7, NULL);
    CHECK_EQ(rc, 0, "GLOBAL_GET: %d", rc);
    flyt_req_handle mh = {m};
    CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &mh, sizeof mh, NULL, 0, NULL), 0, "MODULE_UNLOAD");
    static const char junk[] = "this is not a fatbinary, nor an ELF image, just text";
    rc = th_module_load(fd, junk, sizeof junk, &m);
    CHECK_EQ(rc, T_INVALID_IMAGE, "MODULE_LOAD of text: %d (CUDA_ERROR_INVALID_IMAGE)", rc);
    free(fat);
}

static void errors_and_reset(void)
{
    th_say("deferred errors, out of memory, device reset");
    uint64_t a;
    int rc = th_alloc(fd, TOTAL + 1, &a);
    CHECK_EQ(rc, T_OUT_OF_MEMORY, "MEM_ALLOC of total + 1: %d (CUDA_ERROR_OUT_OF_MEMORY)", rc);
    flyt_req_memcpy bad = {0x10000, 0, 64, FLYT_STREAM_DEFAULT};
    static unsigned char buf[64];
    CHECK_EQ(th_post(fd, FLYT_OP_MEMCPY_HTOD, &bad, sizeof bad, buf, sizeof buf), 0,
             "NOREPLY MEMCPY_HTOD to 0x10000");
    flyt_rep_i32 v;
    rc = th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v);
    CHECK_EQ(rc, 0, "next reply: result %d, deferred %d (CUDA_ERROR_INVALID_VALUE)", rc, th_last_deferred);
    CHECK_EQ(th_last_deferred, T_INVALID_VALUE,
             "next reply: result %d, deferred %d (CUDA_ERROR_INVALID_VALUE)", rc, th_last_deferred);
    rc = th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v);
    CHECK_EQ(rc, 0, "and the one after: deferred cleared");
    CHECK_EQ(th_last_deferred, 0, "and the one after: deferred cleared");

    CHECK_EQ(th_alloc(fd, 8 * MiB, &a), 0, "MEM_ALLOC 8 MiB");
    flyt_req_stream_create sc = {0, 0, 0};
    flyt_rep_u64 u;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_CREATE, &sc, sizeof sc, NULL, 0, &u, sizeof u), 0,
             "STREAM_CREATE");
    CHECK_EQ(th_call(fd, FLYT_OP_DEVICE_RESET, &none, sizeof none, NULL, 0, NULL), 0, "DEVICE_RESET");
    uint64_t fr, tot;
    mem_info(&fr, &tot);
    CHECK_EQ(fr, TOTAL, "all memory free after reset");
    int had;
    rc = th_dtoh(fd, a, 16, buf, &had);
    CHECK_NE(rc, 0, "the old allocation is gone: %d", rc);
    CHECK_NE(rc, -1000, "the old allocation is gone: %d", rc);
    flyt_req_handle sh = {u.value};
    rc = th_call(fd, FLYT_OP_STREAM_SYNC, &sh, sizeof sh, NULL, 0, NULL);
    CHECK_EQ(rc, T_INVALID_HANDLE, "the old stream is gone: %d", rc);
    CHECK_EQ(th_alloc(fd, 1 * MiB, &a), 0, "memory works after reset");
    CHECK_EQ(th_htod(fd, a, buf, 64), 0, "memory works after reset");
    CHECK_EQ(th_free(fd, a), 0, "memory works after reset");
}

int main(int argc, char **argv)
{
    const char *bin = th_server_bin(argc, argv);
    th_watchdog(240);
    static char env[64];
    snprintf(env, sizeof env, "FLYT_HOST_BACKEND_MEM=%llu", (unsigned long long)TOTAL);
    th_server_start(bin, env);
    fd = th_connect();
    CHECK_GE(fd, 0, "connect");
    CHECK_EQ(th_hello(fd), 0, "HELLO: backend \"host\", one device");

    device_queries();
    big_copies();
    copies_3d();
    pools_streams_events();
    modules();
    errors_and_reset();

    flyt_req_none bye = {0};
    CHECK_EQ(th_post(fd, FLYT_OP_GOODBYE, &bye, sizeof bye, NULL, 0), 0, "GOODBYE NOREPLY");
    close(fd);
    CHECK(th_server_works(), "the server still serves new sessions");
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    th_server_stop();
    th_passed();
    printf("all round-trip checks passed\n");
    return 0;
}
