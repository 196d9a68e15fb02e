/*
 * flyt-server against requests that used to spin a session forever (issue 8,
 * item 5): a memset or 3D copy whose slices all land on the same bytes (zero
 * slice pitch or zero slice height) and a huge depth. Each is sent by a raw
 * client that then disconnects; the session must end within a few seconds.
 * The same geometry on a kept connection answers CUDA_ERROR_INVALID_VALUE,
 * as the driver does, and a long but valid memset stops when its client
 * leaves. A call blocked in the driver (the fake device's synchronise never
 * returns, FLYT_HOST_BACKEND_SYNC_MS=forever) ends with its session when the
 * client process is killed, and the server's books (status page, VM quota
 * page) are right afterwards; a long call whose client stays is answered.
 *
 * usage: test_server_hardening PATH-TO-flyt-server
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flyt_server_status.h"
#include "flyt_transport.h"
#include "flyt_vm_quota.h"
#include "harness.h"

/* A fresh admitted connection with an allocation of size bytes at *ptr. */
static int session_with_alloc(uint64_t size, uint64_t *ptr)
{
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    CHECK_EQ(th_alloc(fd, size, ptr), 0, "MEM_ALLOC of %llu bytes", (unsigned long long)size);
    return fd;
}

/* Sends the request (a reply wanted), hangs up at once, and checks that the
 * session ends within the limit. */
static void hang_up_after(uint16_t op, const void *req, size_t len, const char *what)
{
    uint64_t ptr;
    CHECK(th_wait_no_session(5.0) >= 0, "no session left from before");
    int fd = session_with_alloc(1 << 20, &ptr);
    /* the request's addresses point into the allocation */
    unsigned char buf[512];
    memcpy(buf, req, len);
    CHECK_EQ(th_send(fd, op, 0, th_next_seq(), buf, len, NULL, 0), 0, "send %s", what);
    close(fd);
    double took = th_wait_no_session(5.0);
    CHECK(took >= 0, "%s, client gone: the session ended (%.2f s)", what, took);
}

static flyt_req_memset spin_memset(uint64_t dst)
{
    flyt_req_memset r = {.dst = dst, .pitch = 1, .slice_pitch = 0, .width_bytes = 1,
                         .height = 1, .depth = (uint64_t)1 << 40, .value = 7, .elem_size = 1};
    return r;
}

static flyt_req_memcpy_3d spin_copy_3d(uint64_t dst, uint64_t src)
{
    flyt_req_memcpy_3d r = {.dir = FLYT_DIR_DTOD, .dst = {dst, 1, 0, 0, 0, 0},
                            .src = {src, 1, 0, 0, 0, 0}, .width_bytes = 1, .height = 1,
                            .depth = (uint64_t)1 << 40};
    return r;
}

static flyt_req_array_copy spin_array_copy(uint64_t dst, uint64_t src)
{
    flyt_req_array_copy r = {.dst = {FLYT_SIDE_DEVICE, 0, dst, 0, 1, 0, 0, 0, 0},
                             .src = {FLYT_SIDE_DEVICE, 0, src, 0, 1, 0, 0, 0, 0},
                             .width_bytes = 1, .height = 1, .depth = (uint64_t)1 << 40};
    return r;
}

/* The session's first allocation lands at the same address every time
 * (one process per session, the same backend): learn it once. */
static uint64_t first_alloc_address(void)
{
    uint64_t ptr;
    int fd = session_with_alloc(1 << 20, &ptr);
    close(fd);
    return ptr;
}

static void spinning_requests_end_with_their_client(void)
{
    th_say("aliased slices and a huge depth, then the client hangs up");
    uint64_t p = first_alloc_address();
    flyt_req_memset m = spin_memset(p);
    hang_up_after(FLYT_OP_MEMSET, &m, sizeof m, "memset with slice pitch 0, depth 2^40");
    flyt_req_memcpy_3d c = spin_copy_3d(p + 4096, p);
    hang_up_after(FLYT_OP_MEMCPY_3D, &c, sizeof c, "3D copy with slice height 0, depth 2^40");
    flyt_req_array_copy a = spin_array_copy(p + 4096, p);
    hang_up_after(FLYT_OP_ARRAY_COPY, &a, sizeof a,
                  "array copy of device sides with slice height 0, depth 2^40");
}

static void impossible_geometry_is_refused(void)
{
    th_say("the same geometry on a kept connection answers an error");
    uint64_t p;
    int fd = session_with_alloc(1 << 20, &p);
    flyt_req_memset m = spin_memset(p);
    int r = th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
    CHECK_EQ(r, T_INVALID_VALUE, "memset, slice pitch 0, depth 2^40: %d (want %d)", r, T_INVALID_VALUE);
    m.depth = 2;
    m.slice_pitch = 0;
    r = th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
    CHECK_EQ(r, T_INVALID_VALUE, "memset, slice pitch 0, depth 2: %d", r);
    m.pitch = 16;
    m.height = 4;
    m.slice_pitch = 32; /* the second slice would overlap the first's rows */
    r = th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
    CHECK_EQ(r, T_INVALID_VALUE, "memset, slices overlapping: %d", r);
    m.slice_pitch = 64;
    m.depth = 3;
    r = th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
    CHECK_EQ(r, T_SUCCESS, "memset, 3 slices of 4 rows of 16 bytes: %d", r);
    unsigned char back[192];
    int had = 0;
    CHECK_EQ(th_dtoh(fd, p, sizeof back, back, &had), 0, "read it back");
    CHECK(had, "read it back");
    int good = 1;
    for (unsigned z = 0; z < 3; z++)
        for (unsigned y = 0; y < 4; y++)
            good &= back[z * 64 + y * 16] == 7;
    CHECK(good, "every row of every slice was set where it lies");

    flyt_req_memcpy_3d c = spin_copy_3d(p + 4096, p);
    r = th_call(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, NULL, 0, NULL);
    CHECK_EQ(r, T_INVALID_VALUE, "3D copy, slice height 0, depth 2^40: %d", r);
    c.depth = 1;
    r = th_call(fd, FLYT_OP_MEMCPY_3D, &c, sizeof c, NULL, 0, NULL);
    CHECK_EQ(r, T_SUCCESS, "3D copy, slice height 0, depth 1 (CUDA allows it): %d", r);
    flyt_req_array_copy a = spin_array_copy(p + 4096, p);
    r = th_call(fd, FLYT_OP_ARRAY_COPY, &a, sizeof a, NULL, 0, NULL);
    CHECK_EQ(r, T_INVALID_VALUE, "array copy, slice height 0, depth 2^40: %d", r);
    close(fd);
}

/* Valid geometry whose work is long (millions of slices): timed once to the
 * end on a kept connection, then sent again by a client that hangs up at
 * once; that session must stop well before the work could have finished. */
static void long_work_stops_when_client_leaves(void)
{
    th_say("a long valid memset stops when the client hangs up");
    uint64_t p;
    const uint64_t size = 64 << 20;
    int fd = session_with_alloc(size, &p);
    flyt_req_memset m = {.dst = p, .pitch = 1, .slice_pitch = 2, .width_bytes = 1, .height = 1,
                         .depth = size / 2, .value = 1, .elem_size = 1};
    double t0 = th_now_s();
    int r = th_call(fd, FLYT_OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
    double whole = th_now_s() - t0;
    CHECK_EQ(r, T_SUCCESS,
             "a memset of %llu one-byte slices, 2 bytes apart: %.2f s", (unsigned long long)m.depth, whole);
    close(fd);
    CHECK(th_wait_no_session(5.0) >= 0, "no session left from before");
    fd = session_with_alloc(size, &p);
    m.dst = p;
    CHECK_EQ(th_send(fd, FLYT_OP_MEMSET, 0, th_next_seq(), &m, sizeof m, NULL, 0), 0,
             "the same memset again, then the client hangs up");
    usleep(20 * 1000);
    close(fd);
    double took = th_wait_no_session(whole + 5.0);
    CHECK(took >= 0 && took < whole / 2, "the session ended %.2f s after the hang-up (the work "
          "takes %.2f s)", took, whole);
}

/* A client's host name with a newline and a made-up log line after it: the
 * server logs the name, and the made-up line must not start a line. */
static void client_text_cannot_forge_log_lines(void)
{
    th_say("a client's text in the server log cannot forge a line");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect");
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = FLYT_PROTO_MINOR;
    h.client_pid = 1;
    snprintf(h.client_host, sizeof h.client_host, "x\nFORGED flyt-server[1] error: \x1b[2Jfake");
    flyt_rep_hello rep;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, &rep, sizeof rep), 0,
             "HELLO with a host name holding a newline and an escape sequence");
    close(fd);
    CHECK(th_wait_no_session(5.0) >= 0, "the session ended");
    CHECK_EQ(th_server_log_count("x\\nFORGED flyt-server[1] error: \\x1b[2Jfake"), 1,
             "the name is logged escaped, on the session's own line");
    int forged = 0;
    FILE *f = fopen(th_server_log_path(), "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f))
        forged += strncmp(line, "FORGED", 6) == 0 || strchr(line, 0x1b) != NULL;
    if (f)
        fclose(f);
    CHECK_NE(f, NULL, "no line of the log starts with the client's text (%d did)", forged);
    CHECK_EQ(forged, 0, "no line of the log starts with the client's text (%d did)", forged);
}

/* HOST_MAP with memfd passed along; the result, the region in *region. */
static int host_map(int fd, int memfd, uint64_t size, uint64_t *region)
{
    flyt_req_host_map req = {.size = size};
    flyt_rep_u64 rep;
    int result = th_call_fd(fd, FLYT_OP_HOST_MAP, &req, sizeof req, memfd, &rep, sizeof rep);
    *region = result == 0 ? rep.value : 0;
    return result;
}

/* A client maps an unsealed memfd into its session, cuts it to nothing and
 * asks for a copy from it: the server touched pages that no longer exist and
 * died of SIGBUS. Now the unsealed file is refused; a sealed one works. */
static void unsealed_shared_memory_is_refused(void)
{
    th_say("shared memory must be sealed against shrinking");
    uint64_t dptr, region = 0;
    const uint64_t size = 1 << 20;
    int fd = session_with_alloc(size, &dptr);
    int memfd = th_memfd(size, 0);
    int r = host_map(fd, memfd, size, &region);
    if (r == T_SUCCESS) { /* the attack goes on: cut the file, then copy from it */
        CHECK_EQ(ftruncate(memfd, 0), 0, "the client cuts the mapped file to 0 bytes");
        flyt_req_memcpy_mapped m = {.device = dptr, .region = region, .size = 4096};
        r = th_call(fd, FLYT_OP_MEMCPY_HTOD_MAPPED, &m, sizeof m, NULL, 0, NULL);
        CHECK(0, "an unsealed memfd was mapped (the copy from it then answered %d)", r);
    }
    CHECK_EQ(r, T_INVALID_VALUE, "HOST_MAP of an unsealed memfd: %d (want %d)", r, T_INVALID_VALUE);
    close(memfd);

    memfd = th_memfd(size, 1);
    r = host_map(fd, memfd, size, &region);
    CHECK_EQ(r, T_SUCCESS, "HOST_MAP of a sealed memfd: %d", r);
    CHECK_NE(region, 0, "HOST_MAP of a sealed memfd: %d", r);
    CHECK_NE(ftruncate(memfd, 0), 0, "the client can no longer cut it");
    CHECK_EQ(errno, EPERM, "the client can no longer cut it");
    unsigned char *view = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    CHECK_NE(view, MAP_FAILED, "map it here too");
    memset(view, 0x5a, 4096);
    flyt_req_memcpy_mapped m = {.device = dptr, .region = region, .size = 4096};
    CHECK_EQ(th_call(fd, FLYT_OP_MEMCPY_HTOD_MAPPED, &m, sizeof m, NULL, 0, NULL), T_SUCCESS,
             "a copy from it to the device");
    unsigned char back[4096];
    int had = 0;
    CHECK_EQ(th_dtoh(fd, dptr, sizeof back, back, &had), 0, "the device holds its bytes");
    CHECK(had, "the device holds its bytes");
    CHECK_EQ(back[0], 0x5a, "the device holds its bytes");
    CHECK_EQ(back[4095], 0x5a, "the device holds its bytes");
    munmap(view, size);
    close(memfd);
    close(fd);
    CHECK(th_wait_no_session(5.0) >= 0, "the session ended");
    CHECK(!th_server_log_has("killed by signal"), "no session died of a signal");
}

static char cache_dir[256];

/* The cache file of image (its hash's name) into path. */
static void cache_file_of(const void *image, size_t size, char *path, size_t len)
{
    unsigned char sha[32];
    unsigned int n = 0;
    EVP_Digest(image, size, sha, &n, EVP_sha256(), NULL);
    int at = snprintf(path, len, "%s/", cache_dir);
    for (int i = 0; i < 32; i++)
        at += snprintf(path + at, len - (size_t)at, "%02x", sha[i]);
    snprintf(path + at, len - (size_t)at, ".fatbin");
}

/* The image cache keeps only images the driver took: junk that failed to
 * load used to stay on disk for good (outside any quota), and a cached image
 * that fails to load is dropped. */
static void cache_keeps_only_loadable_images(void)
{
    th_say("the image cache keeps only images that loaded");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    char path[512];
    struct stat st;
    unsigned char junk[4096];
    memset(junk, 'J', sizeof junk);
    uint64_t module = 0;
    int r = th_module_load(fd, junk, sizeof junk, &module);
    CHECK_EQ(r, T_INVALID_IMAGE, "MODULE_LOAD of 4 KiB of junk: %d (want %d)", r, T_INVALID_IMAGE);
    cache_file_of(junk, sizeof junk, path, sizeof path);
    CHECK_NE(stat(path, &st), 0, "the junk is not in the cache dir");

    size_t size = 0;
    unsigned char *image = th_fake_fatbin(&size);
    CHECK_EQ(th_module_load(fd, image, size, &module), T_SUCCESS, "MODULE_LOAD of a fatbinary");
    cache_file_of(image, size, path, sizeof path);
    CHECK_EQ(stat(path, &st), 0, "it is cached, 0600");
    CHECK_EQ((st.st_mode & 0777), 0600, "it is cached, 0600");
    free(image);

    /* junk under its hash's name, as an older server left it */
    cache_file_of(junk, sizeof junk, path, sizeof path);
    FILE *f = fopen(path, "w");
    CHECK(f, "plant junk in the cache dir");
    CHECK_EQ(fwrite(junk, 1, sizeof junk, f), sizeof junk, "plant junk in the cache dir");
    CHECK_EQ(fclose(f), 0, "plant junk in the cache dir");
    r = th_module_load(fd, junk, sizeof junk, &module);
    CHECK_EQ(r, T_INVALID_IMAGE, "MODULE_LOAD of the cached junk: %d", r);
    CHECK_NE(stat(path, &st), 0, "the cached junk was dropped");
    close(fd);
}

/* A fake fatbinary of 16 + body bytes whose contents depend on seed. */
static unsigned char *fatbin_variant(unsigned seed, size_t body, size_t *size)
{
    size_t base_size;
    unsigned char *base = th_fake_fatbin(&base_size);
    unsigned char *img = calloc(1, 16 + body);
    CHECK(img != NULL, "memory");
    memcpy(img, base, 16);
    uint64_t fat = body;
    memcpy(img + 8, &fat, 8);
    for (size_t i = 0; i < body; i++)
        img[16 + i] = (unsigned char)(i * 7 + 3 + seed * 31);
    free(base);
    *size = 16 + body;
    return img;
}

/* Loads image in a session of its own (a cache hit when cached: a use). */
static void load_in_new_session(const unsigned char *image, size_t size, const char *what)
{
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    uint64_t module = 0;
    CHECK_EQ(th_module_load(fd, image, size, &module), T_SUCCESS, "MODULE_LOAD of %s", what);
    close(fd);
    CHECK(th_wait_no_session(5.0) >= 0, "the session ended");
    usleep(30000); /* file times have the kernel's tick as granularity */
}

/* A cache file whose bytes are not those its name promises (another image of
 * the same size) is checked while the driver loads it: the load is undone,
 * the file dropped, the client asked for the image, which is cached anew. */
static void cache_file_not_matching_its_name(void)
{
    th_say("a cache file that does not match its name is not used, and replaced");
    size_t size;
    unsigned char *a = fatbin_variant(30, 64, &size), *b = fatbin_variant(31, 64, &size);
    char pa[512], pb[512];
    cache_file_of(a, size, pa, sizeof pa);
    cache_file_of(b, size, pb, sizeof pb);
    FILE *f = fopen(pa, "w");
    CHECK(f, "plant B's bytes under A's name");
    CHECK_EQ(fwrite(b, 1, size, f), size, "plant B's bytes under A's name");
    CHECK_EQ(fclose(f), 0, "plant B's bytes under A's name");
    load_in_new_session(a, size, "image A (its cache file holds B)");
    CHECK(th_server_log_has("does not match its hash"), "the mismatch is logged");
    unsigned char back[128];
    f = fopen(pa, "r");
    CHECK(f, "A's cache file is there again");
    CHECK_EQ(fread(back, 1, sizeof back, f), size, "A's cache file is there again");
    fclose(f);
    CHECK(memcmp(back, a, size) == 0, "holding A's bytes now");
    unlink(pa), unlink(pb);
    free(a), free(b);
}

/* Images cost disk outside any quota: --cache-max (200 bytes here, two of
 * these 80-byte images) keeps the folder within it, least recently used first. */
static void cache_stays_within_its_limit(void)
{
    th_say("the image cache stays within --cache-max, evicting the least recently used");
    size_t size;
    unsigned char *a = fatbin_variant(1, 64, &size), *b = fatbin_variant(2, 64, &size),
                  *c = fatbin_variant(3, 64, &size);
    char pa[512], pb[512], pc[512];
    struct stat st;
    cache_file_of(a, size, pa, sizeof pa);
    cache_file_of(b, size, pb, sizeof pb);
    cache_file_of(c, size, pc, sizeof pc);
    load_in_new_session(a, size, "image A");
    load_in_new_session(b, size, "image B");
    CHECK(stat(pa, &st) == 0 && stat(pb, &st) == 0, "A and B are cached");
    load_in_new_session(a, size, "image A again (from the cache: a use)");
    load_in_new_session(c, size, "image C");
    CHECK_EQ(stat(pc, &st), 0, "C is cached");
    CHECK_EQ(stat(pa, &st), 0, "A, used since B, stays");
    CHECK_NE(stat(pb, &st), 0, "B, the least recently used, was evicted");
    CHECK(th_server_log_has("evicted"), "the eviction is logged");
    size_t big_size;
    unsigned char *big = fatbin_variant(4, 400, &big_size);
    char pbig[512];
    cache_file_of(big, big_size, pbig, sizeof pbig);
    load_in_new_session(big, big_size, "an image larger than the limit");
    CHECK_NE(stat(pbig, &st), 0, "it is not cached");
    CHECK(stat(pa, &st) == 0 && stat(pc, &st) == 0, "and evicted nothing");
    free(a), free(b), free(c), free(big);
}

/* Images the server keeps for a session are bounded (--max-image-bytes 200
 * here: two of these 80-byte images); an unload gives room back. */
static void image_memory_is_bounded(void)
{
    th_say("a session's loaded images stay within --max-image-bytes");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    size_t size;
    unsigned char *img[3];
    uint64_t mod[3];
    for (int i = 0; i < 3; i++)
        img[i] = fatbin_variant(10 + (unsigned)i, 64, &size);
    CHECK_EQ(th_module_load(fd, img[0], size, &mod[0]), T_SUCCESS, "the first image loads");
    CHECK_EQ(th_module_load(fd, img[1], size, &mod[1]), T_SUCCESS, "the second too (160 bytes)");
    CHECK_EQ(th_module_load(fd, img[2], size, &mod[2]), T_OUT_OF_MEMORY,
             "a third would make 240 bytes: CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(th_server_log_has("--max-image-bytes"), "the refusal is logged");
    flyt_req_handle u = {mod[0]};
    CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &u, sizeof u, NULL, 0, NULL), T_SUCCESS,
             "MODULE_UNLOAD of the first");
    CHECK_EQ(th_module_load(fd, img[2], size, &mod[2]), T_SUCCESS, "then the third loads");
    for (int i = 0; i < 3; i++)
        free(img[i]);
    close(fd);
}

/* MODULE_LOAD has_data 2 (one machine): the image comes unhashed; the server
 * hashes it while the driver loads it (on a thread, at 300 KiB) and knows it
 * by that hash after. An image whose claimed hash is false is refused and
 * kept nowhere, although the driver had loaded it meanwhile. */
static void unhashed_and_misclaimed_images(void)
{
    th_say("images sent unhashed are known by their hash; a false hash is refused");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    size_t size;
    unsigned char *img = fatbin_variant(20, 300 << 10, &size);
    flyt_req_module_load req = {.size = size, .has_data = 2};
    flyt_rep_module_load rep;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_MODULE_LOAD, &req, sizeof req, img, size, &rep, sizeof rep),
             T_SUCCESS, "MODULE_LOAD of 300 KiB, unhashed");
    CHECK(rep.module != 0 && rep.need_data == 0, "a module, no request for data");
    uint64_t again = 0;
    CHECK_EQ(th_module_load(fd, img, size, &again), T_SUCCESS, "the same image by its hash");
    CHECK_EQ(again, rep.module, "the session's module of that hash: the server hashed it right");
    char path[512];
    struct stat st;
    cache_file_of(img, size, path, sizeof path);
    CHECK_EQ(stat(path, &st), 0, "the cache dir holds it under its hash");

    unsigned char *other = fatbin_variant(21, 300 << 10, &size);
    flyt_req_module_load lie = {.size = size, .has_data = 1};
    unsigned int n = 0;
    EVP_Digest(img, size, lie.sha256, &n, EVP_sha256(), NULL); /* the first image's hash */
    flyt_rep_module_load rep2;
    int r = th_call_rep(fd, FLYT_OP_MODULE_LOAD, &lie, sizeof lie, other, size, &rep2, sizeof rep2);
    CHECK_EQ(r, T_INVALID_VALUE, "an image sent under another's hash: %d (want %d)", r, T_INVALID_VALUE);
    CHECK(th_server_log_has("request says"), "the mismatch is logged");
    cache_file_of(other, size, path, sizeof path);
    CHECK_NE(stat(path, &st), 0, "it is not cached");
    uint64_t third = 0;
    CHECK_EQ(th_module_load(fd, other, size, &third), T_SUCCESS, "sent under its own hash, it loads");
    CHECK(third != 0 && third != rep.module, "as a module of its own");
    flyt_req_handle u = {rep.module};
    CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &u, sizeof u, NULL, 0, NULL), T_SUCCESS,
             "the first image's module unloads (loaded twice: one of two)");
    CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &u, sizeof u, NULL, 0, NULL), T_SUCCESS,
             "and again (the second)");
    CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &u, sizeof u, NULL, 0, NULL), T_INVALID_HANDLE,
             "a third unload finds none: the refused image took no reference");
    free(img), free(other);
    close(fd);
    CHECK(th_wait_no_session(5.0) >= 0, "the session ended");
}

/* Removes what the cache test left, so the temporary dir can go. */
static void remove_cache_dir(void)
{
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(cache_dir);
}

/* ---- a call blocked in the driver, its client gone (session_watch.h) ---- */

static char status_file[256], vmq_file[256];
static struct flyt_vm_quota *vmq;

/* A client process: HELLO, an allocation, then DEVICE_SYNC, which the fake
 * device never finishes; it says so on ready and waits to be killed. Exits
 * at once on a failure (its parent sees no byte). */
static pid_t client_blocked_in_sync(int ready)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    th_watchdog(0);
    uint64_t ptr;
    int fd = th_connect();
    if (fd < 0 || th_hello(fd) != 0 || th_alloc(fd, 1 << 20, &ptr) != 0)
        _exit(1);
    static const flyt_req_none none;
    if (th_send(fd, FLYT_OP_DEVICE_SYNC, 0, th_next_seq(), &none, sizeof none, NULL, 0) != 0 ||
        write(ready, "S", 1) != 1)
        _exit(1);
    for (;;)
        pause();
}

static void blocked_call_ends_when_client_dies(void)
{
    th_say("a call blocked in the driver ends with its session when the client is killed");
    int ready[2];
    CHECK_EQ(pipe(ready), 0, "a pipe");
    pid_t client = client_blocked_in_sync(ready[1]);
    CHECK_GE(client, 0, "fork a client");
    char byte = 0;
    CHECK_EQ(read(ready[0], &byte, 1), 1, "the client sent DEVICE_SYNC");
    close(ready[0]);
    close(ready[1]);
    uint32_t sessions;
    uint64_t used;
    th_status_page(status_file, &sessions, &used);
    CHECK(sessions == 1 && used == 1 << 20, "status page: 1 session holding 1 MiB (%u, %llu)",
          sessions, (unsigned long long)used);
    CHECK_EQ(flyt_vmq_used(vmq), 1 << 20, "VM quota page: 1 MiB held");
    sleep(2); /* the call is blocked past the watch's threshold before the client dies */
    CHECK_EQ(th_sessions_live(), 1, "the session still waits in DEVICE_SYNC");
    double t0 = th_now_s();
    kill(client, SIGKILL);
    waitpid(client, NULL, 0);
    double took = th_wait_no_session(5.0);
    CHECK(took >= 0, "the session ended %.2f s after its client was killed (%.2f s waited)",
          took, th_now_s() - t0);
    CHECK(th_server_log_has("hung up while its session waited"), "the server says why");
    CHECK(th_server_log_has("in DEVICE_SYNC;"), "and in which call");
    CHECK(th_server_log_count(" ended with exit status") + th_server_log_count(" killed by signal") == 0,
          "the session ended as one whose client left (exit status 0)");
    for (int i = 0; i < 100; i++) { /* the parent reaps, then frees the slots */
        th_status_page(status_file, &sessions, &used);
        if (sessions == 0 && used == 0 && flyt_vmq_used(vmq) == 0)
            break;
        usleep(20 * 1000);
    }
    CHECK(sessions == 0 && used == 0, "status page: no session, no memory (%u, %llu)", sessions,
          (unsigned long long)used);
    CHECK_EQ(flyt_vmq_used(vmq), 0, "VM quota page: nothing held");
    CHECK(th_server_works(), "the server serves a new session");
}

/* A client that half-closes after its request looks gone (POLLRDHUP): its
 * blocked call ends the session, and it reads end of file, no reply. */
static void half_closed_client_looks_gone(void)
{
    th_say("a client that half-closes while its call is blocked looks gone");
    CHECK(th_wait_no_session(5.0) >= 0, "no session left from before");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    static const flyt_req_none none;
    CHECK_EQ(th_send(fd, FLYT_OP_DEVICE_SYNC, 0, th_next_seq(), &none, sizeof none, NULL, 0), 0,
             "DEVICE_SYNC sent");
    CHECK_EQ(shutdown(fd, SHUT_WR), 0, "then shutdown(SHUT_WR)");
    struct th_reply r;
    CHECK_EQ(th_read_frame(fd, &r), -1, "end of file instead of the reply");
    CHECK_EQ(th_server_log_count("hung up while its session waited"), 2, "logged as a hang-up");
    close(fd);
}

/* 3 s in DEVICE_SYNC with the client connected: answered, nothing ended. */
static void long_call_with_client_is_answered(void)
{
    th_say("a long call whose client stays connected is answered");
    int fd = th_connect();
    CHECK_GE(fd, 0, "connect and HELLO");
    CHECK_EQ(th_hello(fd), 0, "connect and HELLO");
    static const flyt_req_none none;
    double t0 = th_now_s();
    int r = th_call(fd, FLYT_OP_DEVICE_SYNC, &none, sizeof none, NULL, 0, NULL);
    double took = th_now_s() - t0;
    CHECK(r == T_SUCCESS && took > 2.9, "DEVICE_SYNC answered %d after %.2f s", r, took);
    CHECK_EQ(th_call(fd, FLYT_OP_PING, &none, sizeof none, NULL, 0, NULL), T_SUCCESS,
             "the session goes on");
    CHECK(!th_server_log_has("hung up while"), "no hang-up seen");
    close(fd);
}

static void blocked_calls(const char *bin)
{
    snprintf(status_file, sizeof status_file, "%s/server.status", th_temp_dir());
    snprintf(vmq_file, sizeof vmq_file, "%s/vm.quota", th_temp_dir());
    char err[256] = "";
    vmq = flyt_vmq_create(vmq_file, 64 << 20, err, sizeof err);
    CHECK(vmq != NULL, "a VM quota page: %s", err);
    const char *const args[] = {"--status-file", status_file, "--vm-quota", vmq_file, NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_SYNC_MS=forever", args);
    blocked_call_ends_when_client_dies();
    half_closed_client_looks_gone();
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    th_server_stop();
    flyt_vmq_unmap(vmq);
    unlink(vmq_file);
    unlink(status_file);
    th_server_start(bin, "FLYT_HOST_BACKEND_SYNC_MS=3000");
    long_call_with_client_is_answered();
    th_server_stop();
}

int main(int argc, char **argv)
{
    const char *bin = th_server_bin(argc, argv);
    th_watchdog(120);
    th_prepare_dir();
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", th_temp_dir());
    CHECK_EQ(mkdir(cache_dir, 0700), 0, "a cache dir");
    static const char *const args[] = {"--cache-dir", cache_dir, "--cache-max", "200", NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_MEM=268435456", args);
    spinning_requests_end_with_their_client();
    impossible_geometry_is_refused();
    long_work_stops_when_client_leaves();
    client_text_cannot_forge_log_lines();
    unsealed_shared_memory_is_refused();
    cache_keeps_only_loadable_images();
    cache_file_not_matching_its_name();
    cache_stays_within_its_limit();
    CHECK(th_server_works(), "the server still serves new sessions");
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    remove_cache_dir();
    th_server_stop();
    static const char *const small_images[] = {"--max-image-bytes", "200", NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_MEM=268435456", small_images);
    image_memory_is_bounded();
    th_server_stop();
    th_prepare_dir(); /* the temporary dir went with the last server */
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", th_temp_dir());
    CHECK_EQ(mkdir(cache_dir, 0700), 0, "a cache dir again");
    static const char *const cache_only[] = {"--cache-dir", cache_dir, NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_MEM=268435456", cache_only);
    unhashed_and_misclaimed_images();
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    th_server_stop();
    remove_cache_dir();
    blocked_calls(bin);
    th_passed();
    printf("all hardening checks passed\n");
    return 0;
}
