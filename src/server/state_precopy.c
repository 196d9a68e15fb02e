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

#include "flyt_clock.h"
#include "flyt_log.h"
#include "flyt_transport.h"
#include "module_cache.h"
#include "state_pipe.h"
#include "state_stream.h"

#define MAX_IMAGES    65536 /* modules one pre-copy lists */
#define MAX_NAMES     (64u << 20) /* bytes of function names one pre-copy lists */
#define MAX_RANGES    (1u << 20) /* stream-ordered allocations one pre-copy lists */
#define ANSWER_S      30    /* the receiver's answers: its list, then its loads */

/* The wire (docs/state-format.md, "Pre-copy of kernel images"): the source sends the
 * header, one entry per module, then each entry's function names; the receiver answers
 * "NEED" and one byte per entry (1: send the image); the source sends those images in
 * list order; the receiver loads every image it has, looks its functions up (a driver
 * that loads lazily loads them then) and answers one line "PRELOADED n\n". The
 * session's stream-ordered allocations follow the names: the receiver keeps their
 * addresses free before it loads anything, or the driver may put the images there. */
struct pc_header {
    char     magic[8]; /* FLYT_PRECOPY_MAGIC */
    uint32_t count;
    uint32_t nranges; /* {addr u64, size u64} after the names */
};

struct pc_entry {
    uint64_t id;   /* the module's id in the session */
    uint64_t size; /* its image's bytes */
    uint8_t  sha256[32];
    uint32_t nfuncs;    /* functions of it the session looked up */
    uint32_t names_len; /* their names, each with its NUL, after the list */
};

/* The receiver's answer per entry: a version-2 pre-copy's state then leaves out the images
 * of PC_SEND and PC_HAS entries (the receiver holds them); version 1 knows only 0 and 1. */
enum { PC_NO, PC_SEND, PC_HAS };

/* ---- the source ---- */

static struct {
    pthread_t        th;
    int              running; /* a thread to join */
    int              done;    /* atomic: it finished */
    int              sock;
    char             dest[256], secret[128];
    struct pc_entry *list;
    void           **image;   /* copies: the session may unload a module meanwhile */
    char           **names;   /* each module's function names, NUL after each */
    uint8_t         *held;    /* the receiver holds entry i's image: the state omits it */
    uint32_t         n, cap;
    uint64_t       (*ranges)[2]; /* the stream-ordered allocations at the start */
    uint32_t         nranges, ranges_cap;
    char             why[240];
} src;

static void source_free_images(void)
{
    for (uint32_t i = 0; i < src.n; i++) {
        free(src.image ? src.image[i] : NULL);
        free(src.names ? src.names[i] : NULL);
    }
    free(src.image);
    free(src.names);
    free(src.ranges);
    src.image = NULL;
    src.names = NULL;
    src.ranges = NULL;
    src.nranges = src.ranges_cap = 0;
}

/* The list too: what the receiver holds is forgotten. */
static void source_forget(void)
{
    source_free_images();
    free(src.list);
    free(src.held);
    src.list = NULL;
    src.held = NULL;
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
    src.names[src.n] = NULL;
    src.image[src.n++] = copy;
    return 0;
}

/* A function's name, after the others of its module (in the list). */
static int list_func(struct flyt_hentry *e, void *arg)
{
    uint64_t *names_total = arg;
    if (e->type != FLYT_H_FUNC || e->u.func.name == NULL)
        return 0;
    uint32_t i = 0;
    while (i < src.n && src.list[i].id != e->u.func.module)
        i++;
    size_t len = strlen(e->u.func.name) + 1;
    if (i == src.n || *names_total + len > MAX_NAMES)
        return 0;
    char *more = realloc(src.names[i], src.list[i].names_len + len);
    if (more == NULL)
        return 0; /* looked up again at the restore */
    memcpy(more + src.list[i].names_len, e->u.func.name, len);
    src.names[i] = more;
    src.list[i].names_len += (uint32_t)len;
    src.list[i].nfuncs++;
    *names_total += len;
    return 0;
}

static CUresult list_range(void *arg, uint64_t addr, uint64_t size, flyt_bhandle pool)
{
    (void)arg, (void)pool;
    if (src.nranges == src.ranges_cap) {
        uint32_t cap = src.ranges_cap ? 2 * src.ranges_cap : 64;
        void *more = cap <= MAX_RANGES ? realloc(src.ranges, cap * sizeof *src.ranges) : NULL;
        if (more == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY; /* the rest reserved at the restore */
        src.ranges = more;
        src.ranges_cap = cap;
    }
    src.ranges[src.nranges][0] = addr;
    src.ranges[src.nranges++][1] = size;
    return CUDA_SUCCESS;
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
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && got == 0)
            return 1;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            continue; /* its start came: the rest is on its way */
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
    int bad = memcmp(tag, "NEED", 4) != 0 || flyt_read_full(src.sock, need, src.n) != 0;
    for (uint32_t i = 0; i < src.n && !bad; i++)
        bad = need[i] > PC_HAS;
    if (bad) {
        snprintf(src.why, sizeof src.why, "the receiver answered the pre-copy malformed");
        return -1;
    }
    return 0;
}

static int send_names(void)
{
    for (uint32_t i = 0; i < src.n; i++)
        if (src.list[i].names_len && flyt_write_full(src.sock, src.names[i], src.list[i].names_len))
            return -1;
    return 0;
}

/* How long the receiver's answers are waited for: FLYT_PRECOPY_WAIT_S, else ANSWER_S. */
static long answer_s(void)
{
    const char *env = getenv("FLYT_PRECOPY_WAIT_S");
    long s = env ? strtol(env, NULL, 10) : 0;
    return s > 0 ? s : ANSWER_S;
}

/* Lists the images, sends those asked for, waits for the loads. 0, or -1 with src.why. */
static int offer(void)
{
    struct pc_header h = {.count = src.n, .nranges = src.nranges};
    memcpy(h.magic, FLYT_PRECOPY_MAGIC, sizeof h.magic);
    uint8_t *need = src.held = calloc(src.n + 1, 1);
    struct timeval answer = {answer_s(), 0}, forever = {0, 0};
    setsockopt(src.sock, SOL_SOCKET, SO_RCVTIMEO, &answer, sizeof answer);
    int rc = -1;
    if (need == NULL)
        snprintf(src.why, sizeof src.why, "out of memory");
    else if (flyt_write_full(src.sock, &h, sizeof h) != 0 ||
             flyt_write_full(src.sock, src.list, src.n * sizeof *src.list) != 0 ||
             send_names() != 0 ||
             flyt_write_full(src.sock, src.ranges, src.nranges * sizeof *src.ranges) != 0) {
        int sent_errno = errno;
        if (read_needs(need) == 0 || strncmp(src.why, "the receiver refused", 20) != 0)
            snprintf(src.why, sizeof src.why, "sending the pre-copy: %s", strerror(sent_errno));
        /* else a refusal (a wrong secret) that closed the connection: it says why */
    } else if (read_needs(need) == 0)
        rc = 0;
    uint64_t sent = 0, sent_bytes = 0;
    for (uint32_t i = 0; rc == 0 && i < src.n; i++) {
        if (need[i] != PC_SEND)
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
    return rc; /* need[i] != PC_NO: the receiver holds image i (src.held) */
}

static void *source_thread(void *arg)
{
    (void)arg;
    uint64_t t0 = flyt_mono_ns();
    src.sock = flyt_stream_connect(src.dest, src.secret, src.why, sizeof src.why);
    OPENSSL_cleanse(src.secret, sizeof src.secret);
    if (src.sock >= 0 && offer() != 0) {
        close(src.sock);
        src.sock = -1;
        memset(src.held, 0, src.n); /* nothing left out of the state */
    }
    source_free_images();
    flyt_info("pre-copy ended after %.3f ms while the program ran on",
              (double)(flyt_mono_ns() - t0) * 1e-6);
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
    src.names = calloc(modules, sizeof *src.names);
    src.cap = modules;
    if (src.list == NULL || src.image == NULL || src.names == NULL) {
        source_forget();
        return 0;
    }
    flyt_handles_foreach(&s->handles, list_module, s);
    uint64_t names_total = 0;
    flyt_handles_foreach(&s->handles, list_func, &names_total);
    if (s->b->ops->state_async)
        s->b->ops->state_async(s->b, list_range, NULL);
    snprintf(src.dest, sizeof src.dest, "%s", dest);
    snprintf(src.secret, sizeof src.secret, "%s", secret);
    src.done = 0;
    src.sock = -1;
    src.why[0] = '\0';
    if (src.n == 0 || flyt_spawn_unsignalled(&src.th, source_thread, NULL) != 0) {
        source_forget();
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
    if (src.sock < 0) {
        snprintf(why, whylen, "%s", src.why);
        source_forget();
    }
    return src.sock;
}

int flyt_precopy_receiver_holds(uint64_t id, const uint8_t sha[32], uint64_t size)
{
    for (uint32_t i = 0; src.held && i < src.n; i++)
        if (src.held[i] && src.list[i].id == id && src.list[i].size == size &&
            memcmp(src.list[i].sha256, sha, 32) == 0)
            return 1;
    return 0;
}

void flyt_precopy_forget(void)
{
    source_forget();
}

/* ---- the receiver ---- */

struct preloaded {
    uint64_t     id, size;
    uint8_t      sha256[32];
    flyt_bhandle module; /* NULL once taken */
};

static struct preloaded *pre;
static size_t            npre;

/* The images a version-2 source leaves out of the state (this receiver said it holds
 * them), with their bytes once they are here and verified. */
struct left_out {
    uint64_t id, size;
    uint8_t  sha256[32];
    void    *image; /* NULL: it did not arrive whole */
    int      left;  /* left out of the state (else its entry only) */
};
static struct left_out *outs;
static uint32_t         nouts;
static struct {
    int      came;                              /* a pre-copy was taken */
    unsigned listed, from_cache, received, taken, again, funcs;
    uint64_t bytes, ns;
} stats;

/* Waits for the first 8 bytes without taking them: the pre-copy's version (1, 2) when
 * they are its magic, 0 otherwise (the state's header, or an end the state's reader
 * reports). */
static int precopy_follows(int fd, long long deadline)
{
    char head[8];
    for (;;) {
        ssize_t n = recv(fd, head, sizeof head, MSG_PEEK);
        if (n == (ssize_t)sizeof head)
            return memcmp(head, FLYT_PRECOPY_MAGIC, sizeof head) == 0    ? 2
                   : memcmp(head, FLYT_PRECOPY_MAGIC1, sizeof head) == 0 ? 1
                                                                         : 0;
        if ((n <= 0 && !(n < 0 && errno == EINTR)) || flyt_stream_now_ms() >= deadline)
            return 0;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL); /* the rest is on its way */
    }
}

/* What the source listed: its entries, their function names (names_at[i]: entry i's
 * first), and the images this node's module cache holds. */
struct incoming {
    struct pc_entry *list;
    uint32_t         n;
    int              version;
    char            *names;
    uint64_t        *names_at;
    void           **cached;
    uint8_t         *asked;      /* what the NEED answer said of each entry (PC_*) */
    uint64_t       (*ranges)[2]; /* the source's stream-ordered allocations */
    uint32_t         nranges;
};

/* Entry i's functions looked up in its loaded module: a driver that loads kernels lazily
 * loads them now, not when the restore looks them up after the stop. */
static void resolve_funcs(flyt_backend *b, flyt_bhandle module, const struct incoming *in,
                          uint32_t i)
{
    const char *name = in->names + in->names_at[i];
    for (uint32_t k = 0; b->ops->func_get && k < in->list[i].nfuncs; k++) {
        flyt_bhandle f;
        if (b->ops->func_get(b, module, name, &f) == CUDA_SUCCESS)
            stats.funcs++;
        name += strlen(name) + 1;
    }
}

/* Entry i's image into the backend, kept for the restore when the driver takes it. */
static void preload(flyt_backend *b, const struct incoming *in, uint32_t i, const void *image)
{
    const struct pc_entry *e = &in->list[i];
    flyt_bhandle module = NULL;
    CUresult r = b->ops->module_load(b, image, (size_t)e->size, NULL, &module);
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
    resolve_funcs(b, module, in, i);
}

/* A sent image: read whole (the stream must stay in step), loaded if it is what its
 * entry says. 0, or -1 when the connection failed. */
static int take_sent(int fd, flyt_backend *b, const struct flyt_server_config *cfg,
                     const struct incoming *in, uint32_t i, long long deadline)
{
    const struct pc_entry *e = &in->list[i];
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
        preload(b, in, i, image);
        if (npre > before)
            flyt_cache_store(cfg->cache_dir, sha, image, e->size, cfg->cache_max_bytes);
        if (in->version >= 2) { /* the state comes without it: kept to put it there */
            outs[i].image = image;
            image = NULL;
        }
    }
    free(image);
    return 0;
}

/* Whether entry i's image is to be sent (the receiver can load it, lacks it). */
static int wanted(const struct incoming *in, uint32_t i, const flyt_backend *b)
{
    return b && !in->cached[i] && in->list[i].size > 0 && in->list[i].size <= FLYT_MAX_FATBIN;
}

/* The images this node's module cache has are loaded first (the source sends the others
 * meanwhile), then each sent one as it arrives: exactly those the NEED answer asked for
 * (cached[] is emptied as its images are handed over, so it cannot say afterwards). 0, or
 * -1 when the connection failed. */
static int load_all(int fd, flyt_backend *b, const struct flyt_server_config *cfg,
                    const struct incoming *in, long long deadline)
{
    for (uint32_t i = 0; i < in->n; i++)
        if (in->cached[i]) {
            preload(b, in, i, in->cached[i]);
            stats.from_cache++;
            if (in->version >= 2) { /* handed over: the state comes without it */
                outs[i].image = in->cached[i];
                in->cached[i] = NULL;
            }
        }
    for (uint32_t i = 0; i < in->n; i++)
        if (in->asked[i] == PC_SEND && take_sent(fd, b, cfg, in, i, deadline) != 0)
            return -1;
    return 0;
}

/* Also notes, for a version-2 source, which images the state will leave out; and, in
 * in->asked, which images it asked for. */
static int answer_needs(int fd, struct incoming *in, flyt_backend *b)
{
    uint8_t *msg = malloc(4 + (size_t)in->n);
    in->asked = malloc((size_t)in->n + 1);
    outs = in->version >= 2 ? calloc((size_t)in->n + 1, sizeof *outs) : NULL;
    if (msg == NULL || in->asked == NULL || (in->version >= 2 && outs == NULL)) {
        free(msg);
        return -1;
    }
    memcpy(msg, "NEED", 4);
    for (uint32_t i = 0; i < in->n; i++) {
        in->asked[i] = wanted(in, i, b) ? PC_SEND
                       : in->cached[i] && in->version >= 2 ? PC_HAS : PC_NO;
        msg[4 + i] = in->asked[i];
        if (outs) { /* by entry */
            outs[i] = (struct left_out){.id = in->list[i].id, .size = in->list[i].size,
                                        .left = in->asked[i] != PC_NO};
            memcpy(outs[i].sha256, in->list[i].sha256, 32);
        }
    }
    nouts = outs ? in->n : 0;
    int rc = flyt_write_full(fd, msg, 4 + (size_t)in->n);
    free(msg);
    return rc;
}

/* Each entry's names: exactly nfuncs of them, each ended by its NUL. */
static int names_ok(const struct incoming *in)
{
    for (uint32_t i = 0; i < in->n; i++) {
        const char *p = in->names + in->names_at[i];
        uint32_t len = in->list[i].names_len, nuls = 0;
        for (uint32_t k = 0; k < len; k++)
            nuls += p[k] == '\0';
        if (nuls != in->list[i].nfuncs || (len && p[len - 1] != '\0'))
            return 0;
    }
    return 1;
}

/* The list after the header, and its names. 0, or -1 (cut short, malformed, no memory). */
static int read_list(int fd, struct incoming *in, long long deadline)
{
    in->list = malloc((size_t)in->n * sizeof *in->list + 1);
    in->names_at = malloc((size_t)in->n * sizeof *in->names_at + 1);
    in->cached = calloc((size_t)in->n + 1, sizeof *in->cached);
    if (!in->list || !in->names_at || !in->cached ||
        flyt_stream_read_by(fd, in->list, (size_t)in->n * sizeof *in->list, deadline) != 0)
        return -1;
    uint64_t total = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        in->names_at[i] = total;
        total += in->list[i].names_len;
    }
    if (total > MAX_NAMES || (in->names = malloc(total + 1)) == NULL ||
        flyt_stream_read_by(fd, in->names, total, deadline) != 0 ||
        (in->ranges = malloc((size_t)in->nranges * sizeof *in->ranges + 1)) == NULL ||
        flyt_stream_read_by(fd, in->ranges, (size_t)in->nranges * sizeof *in->ranges, deadline))
        return -1;
    for (uint32_t i = 0; i < in->nranges; i++)
        if (in->ranges[i][0] == 0 || in->ranges[i][1] == 0 ||
            in->ranges[i][0] + in->ranges[i][1] < in->ranges[i][0])
            return -1;
    return names_ok(in) ? 0 : -1;
}

/* The source's stream-ordered allocations kept free before any image is loaded (the
 * driver lays module memory out where the source's pools were: measured with PyTorch
 * on cudaMallocAsync). Not fatal: the restore reserves what is still missing and says
 * when it cannot. */
static void keep_async_free(flyt_backend *b, const struct incoming *in)
{
    if (b == NULL || in->nranges == 0 || !b->ops->async_spans)
        return;
    CUresult r = b->ops->async_spans(b, (const uint64_t (*)[2])in->ranges, in->nranges);
    if (r != CUDA_SUCCESS)
        flyt_warn("pre-copy: the addresses of the source's %u stream-ordered allocation(s) "
                  "could not be kept free before the kernel images load (CUDA error %d)",
                  in->nranges, (int)r);
}

static void incoming_free(struct incoming *in)
{
    free(in->asked);
    for (uint32_t i = 0; in->cached && i < in->n; i++)
        free(in->cached[i]);
    free(in->cached);
    free(in->names);
    free(in->names_at);
    free(in->list);
    free(in->ranges);
}

int flyt_precopy_receive(int fd, const struct flyt_server_config *cfg, long long deadline_ms,
                         char *err, size_t errlen)
{
    int version = precopy_follows(fd, deadline_ms);
    if (!version)
        return 0;
    uint64_t t0 = flyt_mono_ns();
    struct pc_header h;
    struct incoming in = {.version = version};
    int bad = flyt_stream_read_by(fd, &h, sizeof h, deadline_ms) != 0 || h.count > MAX_IMAGES ||
              h.nranges > MAX_RANGES || (version < 2 && h.nranges != 0);
    in.n = bad ? 0 : h.count;
    in.nranges = bad ? 0 : h.nranges;
    if (bad || read_list(fd, &in, deadline_ms) != 0) {
        incoming_free(&in);
        snprintf(err, errlen, "a malformed pre-copy of kernel images");
        return -1;
    }
    flyt_backend *b = flyt_session_preopened();
    keep_async_free(b, &in);
    for (uint32_t i = 0; b && i < in.n; i++)
        in.cached[i] = flyt_cache_load(cfg->cache_dir, in.list[i].sha256, in.list[i].size);
    int rc = answer_needs(fd, &in, b);
    if (rc == 0)
        rc = load_all(fd, b, cfg, &in, deadline_ms);
    char line[64];
    int len = snprintf(line, sizeof line, "PRELOADED %zu\n", npre);
    if (rc == 0)
        rc = flyt_write_full(fd, line, (size_t)len);
    incoming_free(&in);
    if (rc != 0) {
        flyt_precopy_images_free();
        snprintf(err, errlen, "the pre-copy of kernel images broke off");
        return -1;
    }
    stats.came = 1;
    stats.listed = h.count;
    stats.ns = flyt_mono_ns() - t0;
    flyt_info("state phases (pre-copy): %zu of %u kernel image(s) preloaded before the stop "
              "(%llu bytes; %u from the module cache, %u received; %u function(s) looked up) "
              "in %.3f ms", npre, h.count, (unsigned long long)stats.bytes, stats.from_cache,
              stats.received, stats.funcs, (double)stats.ns * 1e-6);
    return 0;
}

int flyt_precopy_left_out(uint64_t id, const uint8_t sha[32], uint64_t size, const void **image)
{
    for (uint32_t i = 0; i < nouts; i++)
        if (outs[i].left && outs[i].id == id && outs[i].size == size &&
            memcmp(outs[i].sha256, sha, 32) == 0) {
            *image = outs[i].image;
            return 1;
        }
    return 0;
}

int flyt_precopy_leaves_out(void)
{
    for (uint32_t i = 0; i < nouts; i++)
        if (outs[i].left)
            return 1;
    return 0;
}

void flyt_precopy_images_free(void)
{
    for (uint32_t i = 0; i < nouts; i++)
        free(outs[i].image);
    free(outs);
    outs = NULL;
    nouts = 0;
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
