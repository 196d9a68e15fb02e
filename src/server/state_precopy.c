/* Kernel images sent ahead of a streamed migration: see state_precopy.h. */
#include "state_precopy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "flyt_log.h"
#include "flyt_transport.h"
#include "module_cache.h"
#include "state_pipe.h"
#include "state_stream.h"

#define MAX_IMAGES    65536 /* modules one pre-copy lists */
#define ANSWER_S      30    /* the receiver's answers: its list, then its loads */

/* The wire (docs/state-format.md, "Pre-copy of kernel images"): the source sends the
 * header and one entry per module; the receiver answers "NEED" and one byte per entry
 * (1: send the image); the source sends those images in list order; the receiver loads
 * every image it has and answers one line "PRELOADED n\n". */
struct pc_header {
    char     magic[8]; /* FLYT_PRECOPY_MAGIC */
    uint32_t count;
    uint32_t reserved; /* 0 */
};

struct pc_entry {
    uint64_t id;   /* the module's id in the session */
    uint64_t size; /* its image's bytes */
    uint8_t  sha256[32];
};

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- the source ---- */

static struct {
    pthread_t        th;
    int              running; /* a thread to join */
    int              done;    /* atomic: it finished */
    int              sock;
    char             dest[256], secret[128];
    struct pc_entry *list;
    void           **image;   /* copies: the session may unload a module meanwhile */
    uint32_t         n, cap;
    char             why[240];
} src;

static void source_free_images(void)
{
    for (uint32_t i = 0; i < src.n; i++)
        free(src.image[i]);
    free(src.image);
    free(src.list);
    src.image = NULL;
    src.list = NULL;
    src.n = 0;
}

static int count_module(struct flyt_hentry *e, void *arg)
{
    uint32_t *n = arg;
    *n += e->type == FLYT_H_MODULE && *n < MAX_IMAGES;
    return 0;
}

static int list_module(struct flyt_hentry *e, void *arg)
{
    flyt_session *s = arg;
    const void *image;
    size_t size;
    if (e->type != FLYT_H_MODULE || src.n == src.cap ||
        s->b->ops->module_image(s->b, e->bh, &image, &size) != CUDA_SUCCESS)
        return 0;
    void *copy = malloc(size);
    if (copy == NULL)
        return 0; /* not sent ahead: loaded from the state as before */
    memcpy(copy, image, size);
    src.list[src.n] = (struct pc_entry){.id = e->id, .size = size};
    memcpy(src.list[src.n].sha256, e->u.module.sha256, 32);
    src.image[src.n++] = copy;
    return 0;
}

/* The receiver's answer line after the images: 0 when it came (*loaded), 1 when it did
 * not come in time (the state may follow: flyt_stream_finish skips the line), -1 when the
 * connection failed. */
static int read_preloaded(unsigned *loaded)
{
    char line[64];
    size_t got = 0;
    while (got < sizeof line - 1) {
        ssize_t n = read(src.sock, line + got, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (n <= 0)
            return -1;
        if (line[got++] == '\n')
            break;
    }
    line[got] = '\0';
    return sscanf(line, "PRELOADED %u", loaded) == 1 ? 0 : -1;
}

/* The receiver's first answer: which images it needs (need[]). 0, or -1 with src.why. */
static int read_needs(uint8_t *need)
{
    char tag[4];
    if (flyt_read_full(src.sock, tag, sizeof tag) != 0) {
        snprintf(src.why, sizeof src.why, "the receiver did not answer the pre-copy (%s)",
                 errno ? strerror(errno) : "connection closed");
        return -1;
    }
    if (memcmp(tag, "ERR ", 4) == 0) { /* a refusal line, as the verdict gives */
        char line[200] = "";
        for (size_t i = 0; i < sizeof line - 1 && read(src.sock, line + i, 1) == 1 &&
                           line[i] != '\n'; i++)
            ;
        line[strcspn(line, "\n")] = '\0';
        snprintf(src.why, sizeof src.why, "the receiver refused the state: %s", line);
        return -1;
    }
    if (memcmp(tag, "NEED", 4) != 0 || flyt_read_full(src.sock, need, src.n) != 0) {
        snprintf(src.why, sizeof src.why, "the receiver answered the pre-copy malformed");
        return -1;
    }
    return 0;
}

/* Lists the images, sends those asked for, waits for the loads. 0, or -1 with src.why. */
static int offer(void)
{
    struct pc_header h = {.count = src.n};
    memcpy(h.magic, FLYT_PRECOPY_MAGIC, sizeof h.magic);
    uint8_t *need = malloc(src.n);
    struct timeval answer = {ANSWER_S, 0}, forever = {0, 0};
    setsockopt(src.sock, SOL_SOCKET, SO_RCVTIMEO, &answer, sizeof answer);
    int rc = -1;
    if (need == NULL)
        snprintf(src.why, sizeof src.why, "out of memory");
    else if (flyt_write_full(src.sock, &h, sizeof h) != 0 ||
             flyt_write_full(src.sock, src.list, src.n * sizeof *src.list) != 0) {
        int sent_errno = errno;
        if (read_needs(need) == 0 || strncmp(src.why, "the receiver refused", 20) != 0)
            snprintf(src.why, sizeof src.why, "sending the pre-copy: %s", strerror(sent_errno));
        /* else a refusal (a wrong secret) that closed the connection: it says why */
    } else if (read_needs(need) == 0)
        rc = 0;
    uint64_t sent = 0, sent_bytes = 0;
    for (uint32_t i = 0; rc == 0 && i < src.n; i++) {
        if (!need[i])
            continue;
        if (flyt_write_full(src.sock, src.image[i], src.list[i].size) != 0) {
            snprintf(src.why, sizeof src.why, "sending the kernel images: %s", strerror(errno));
            rc = -1;
        }
        sent++, sent_bytes += src.list[i].size;
    }
    unsigned loaded = 0;
    int late = rc == 0 ? read_preloaded(&loaded) : 0;
    if (late < 0) {
        snprintf(src.why, sizeof src.why, "the receiver failed during the pre-copy");
        rc = -1;
    }
    setsockopt(src.sock, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
    if (rc == 0)
        flyt_info("pre-copy to %s: %u kernel image(s) listed, %llu sent (%llu bytes), %s %u",
                  src.dest, src.n, (unsigned long long)sent, (unsigned long long)sent_bytes,
                  late ? "the receiver still loading them; the state follows, loaded so far"
                       : "preloaded by the receiver:", loaded);
    free(need);
    return rc;
}

static void *source_thread(void *arg)
{
    (void)arg;
    uint64_t t0 = mono_ns();
    src.sock = flyt_stream_connect(src.dest, src.secret, src.why, sizeof src.why);
    OPENSSL_cleanse(src.secret, sizeof src.secret);
    if (src.sock >= 0 && offer() != 0) {
        close(src.sock);
        src.sock = -1;
    }
    source_free_images();
    flyt_info("pre-copy ended after %.3f ms while the program ran on",
              (double)(mono_ns() - t0) * 1e-6);
    __atomic_store_n(&src.done, 1, __ATOMIC_RELEASE);
    kill(getpid(), SIGURG); /* an idle session wakes to capture */
    return NULL;
}

int flyt_precopy_start(flyt_session *s, const char *dest, const char *secret)
{
    const char *off = getenv("FLYT_PRECOPY");
    if (src.running || (off && strcmp(off, "0") == 0) || s->b == NULL || !s->b->ops->module_image)
        return 0;
    uint32_t modules = 0;
    flyt_handles_foreach(&s->handles, count_module, &modules);
    if (modules == 0)
        return 0;
    src.list = malloc(modules * sizeof *src.list);
    src.image = malloc(modules * sizeof *src.image);
    src.cap = modules;
    if (src.list == NULL || src.image == NULL) {
        source_free_images();
        return 0;
    }
    flyt_handles_foreach(&s->handles, list_module, s);
    snprintf(src.dest, sizeof src.dest, "%s", dest);
    snprintf(src.secret, sizeof src.secret, "%s", secret);
    src.done = 0;
    src.sock = -1;
    src.why[0] = '\0';
    if (src.n == 0 || flyt_spawn_unsignalled(&src.th, source_thread, NULL) != 0) {
        source_free_images();
        OPENSSL_cleanse(src.secret, sizeof src.secret);
        return 0;
    }
    src.running = 1;
    return 1;
}

int flyt_precopy_ready(void)
{
    return __atomic_load_n(&src.done, __ATOMIC_ACQUIRE);
}

int flyt_precopy_collect(char *why, size_t whylen)
{
    pthread_join(src.th, NULL);
    src.running = 0;
    if (src.sock < 0)
        snprintf(why, whylen, "%s", src.why);
    return src.sock;
}

/* ---- the receiver ---- */

struct preloaded {
    uint64_t     id, size;
    uint8_t      sha256[32];
    flyt_bhandle module; /* NULL once taken */
};

static struct preloaded *pre;
static size_t            npre;
static struct {
    int      came;                              /* a pre-copy was taken */
    unsigned listed, from_cache, received, taken, again;
    uint64_t bytes, ns;
} stats;

/* Waits for the first 8 bytes without taking them: 1 when they are the pre-copy's
 * magic, 0 otherwise (the state's header, or an end the state's reader reports). */
static int precopy_follows(int fd, long long deadline)
{
    char head[8];
    for (;;) {
        ssize_t n = recv(fd, head, sizeof head, MSG_PEEK);
        if (n == (ssize_t)sizeof head)
            return memcmp(head, FLYT_PRECOPY_MAGIC, sizeof head) == 0;
        if ((n <= 0 && !(n < 0 && errno == EINTR)) || flyt_stream_now_ms() >= deadline)
            return 0;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL); /* the rest is on its way */
    }
}

/* One image into the backend, kept for the restore when the driver takes it. */
static void preload(flyt_backend *b, const struct pc_entry *e, const void *image)
{
    flyt_bhandle module = NULL;
    CUresult r = b->ops->module_load(b, image, (size_t)e->size, &module);
    struct preloaded *more = r == CUDA_SUCCESS ? realloc(pre, (npre + 1) * sizeof *pre) : NULL;
    if (more == NULL) {
        if (module)
            b->ops->module_unload(b, module);
        flyt_warn("pre-copy: module %llu not preloaded (CUDA error %d); the restore loads it",
                  (unsigned long long)e->id, (int)(r ? r : CUDA_ERROR_OUT_OF_MEMORY));
        return;
    }
    pre = more;
    pre[npre] = (struct preloaded){.id = e->id, .size = e->size, .module = module};
    memcpy(pre[npre++].sha256, e->sha256, 32);
    stats.bytes += e->size;
}

/* A sent image: read whole (the stream must stay in step), loaded if it is what its
 * entry says. 0, or -1 when the connection failed. */
static int take_sent(int fd, flyt_backend *b, const struct flyt_server_config *cfg,
                     const struct pc_entry *e, long long deadline)
{
    void *image = malloc(e->size);
    if (image == NULL)
        return -1;
    if (flyt_stream_read_by(fd, image, e->size, deadline) != 0) {
        free(image);
        return -1;
    }
    stats.received++;
    uint8_t sha[32];
    flyt_sha256(image, e->size, sha);
    if (memcmp(sha, e->sha256, 32) != 0) {
        flyt_warn("pre-copy: the image of module %llu does not match its hash; the restore "
                  "loads it", (unsigned long long)e->id);
    } else {
        size_t before = npre;
        preload(b, e, image);
        if (npre > before)
            flyt_cache_store(cfg->cache_dir, sha, image, e->size, cfg->cache_max_bytes);
    }
    free(image);
    return 0;
}

/* The images this node's module cache has are loaded first (the source sends the others
 * meanwhile), then each sent one as it arrives. 0, or -1 when the connection failed. */
static int load_all(int fd, flyt_backend *b, const struct flyt_server_config *cfg,
                    const struct pc_entry *list, uint32_t n, void **cached, long long deadline)
{
    for (uint32_t i = 0; i < n; i++)
        if (cached[i]) {
            preload(b, &list[i], cached[i]);
            stats.from_cache++;
        }
    for (uint32_t i = 0; i < n; i++)
        if (!cached[i] && b && list[i].size > 0 && list[i].size <= FLYT_MAX_FATBIN &&
            take_sent(fd, b, cfg, &list[i], deadline) != 0)
            return -1;
    return 0;
}

static int answer_needs(int fd, const struct pc_entry *list, uint32_t n, void **cached,
                        flyt_backend *b)
{
    uint8_t *msg = malloc(4 + (size_t)n);
    if (msg == NULL)
        return -1;
    memcpy(msg, "NEED", 4);
    for (uint32_t i = 0; i < n; i++)
        msg[4 + i] = b && !cached[i] && list[i].size > 0 && list[i].size <= FLYT_MAX_FATBIN;
    int rc = flyt_write_full(fd, msg, 4 + (size_t)n);
    free(msg);
    return rc;
}

int flyt_precopy_receive(int fd, const struct flyt_server_config *cfg, long long deadline_ms,
                         char *err, size_t errlen)
{
    if (!precopy_follows(fd, deadline_ms))
        return 0;
    uint64_t t0 = mono_ns();
    struct pc_header h;
    if (flyt_stream_read_by(fd, &h, sizeof h, deadline_ms) != 0 || h.count > MAX_IMAGES ||
        h.reserved != 0) {
        snprintf(err, errlen, "a malformed pre-copy of kernel images");
        return -1;
    }
    flyt_backend *b = flyt_session_preopened();
    struct pc_entry *list = malloc((size_t)h.count * sizeof *list + 1);
    void **cached = calloc((size_t)h.count + 1, sizeof *cached);
    int rc = list && cached ? 0 : -1;
    if (rc == 0)
        rc = flyt_stream_read_by(fd, list, (size_t)h.count * sizeof *list, deadline_ms);
    for (uint32_t i = 0; rc == 0 && b && i < h.count; i++)
        cached[i] = flyt_cache_load(cfg->cache_dir, list[i].sha256, list[i].size);
    if (rc == 0)
        rc = answer_needs(fd, list, h.count, cached, b);
    if (rc == 0)
        rc = load_all(fd, b, cfg, list, h.count, cached, deadline_ms);
    char line[64];
    int len = snprintf(line, sizeof line, "PRELOADED %zu\n", npre);
    if (rc == 0)
        rc = flyt_write_full(fd, line, (size_t)len);
    for (uint32_t i = 0; cached && i < h.count; i++)
        free(cached[i]);
    free(cached);
    free(list);
    if (rc != 0) {
        snprintf(err, errlen, "the pre-copy of kernel images broke off");
        return -1;
    }
    stats.came = 1;
    stats.listed = h.count;
    stats.ns = mono_ns() - t0;
    flyt_info("state phases (pre-copy): %zu of %u kernel image(s) preloaded before the stop "
              "(%llu bytes; %u from the module cache, %u received) in %.3f ms",
              npre, h.count, (unsigned long long)stats.bytes, stats.from_cache, stats.received,
              (double)stats.ns * 1e-6);
    return 0;
}

flyt_bhandle flyt_precopy_take(uint64_t id, const uint8_t sha[32], uint64_t size)
{
    for (size_t i = 0; i < npre; i++)
        if (pre[i].module && pre[i].id == id && pre[i].size == size &&
            memcmp(pre[i].sha256, sha, 32) == 0) {
            flyt_bhandle m = pre[i].module;
            pre[i].module = NULL;
            stats.taken++;
            return m;
        }
    stats.again++;
    return NULL;
}

void flyt_precopy_settle(flyt_backend *b, uint64_t restore_ns)
{
    unsigned unused = 0;
    for (size_t i = 0; i < npre; i++)
        if (pre[i].module) {
            b->ops->module_unload(b, pre[i].module);
            unused++;
        }
    free(pre);
    pre = NULL;
    npre = 0;
    if (stats.came)
        flyt_info("state phases (pre-copy): the restore after the stop took %.3f ms: %u "
                  "module(s) taken preloaded, %u loaded again, %u preloaded unused; the "
                  "pre-copy before it %.3f ms", (double)restore_ns * 1e-6, stats.taken,
                  stats.again, unused, (double)stats.ns * 1e-6);
}
