/* Streaming a session's state to the server that takes it over: see state_stream.h. */
#include "state_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "flyt_clock.h"
#include "flyt_io.h"
#include "flyt_log.h"
#include "state_format.h"
#include "state_pipe.h"
#include "state_precopy.h"
#include "flyt_token.h"
#include "flyt_transport.h"

#define CONNECT_TRIES_MS 10000 /* the receiver may still be starting */
#define SEND_STALL_S     30    /* a receiver that takes nothing this long has failed */
#define VERDICT_MS       120000 /* verifying a large state takes a while */
#define GREETING_LEN     (sizeof FLYT_STREAM_MAGIC - 1 + FLYT_STREAM_SECRET_LEN)

long long flyt_stream_now_ms(void)
{
    return flyt_mono_ms();
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Waits until fd is readable or deadline (ms, monotonic) passes: 1, 0 at the deadline. */
static int readable_by(int fd, long long deadline)
{
    for (;;) {
        long long left = deadline - flyt_stream_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 1; /* the read that follows says what is wrong */
    }
}

int flyt_stream_read_by(int fd, void *buf, size_t len, long long deadline)
{
    for (size_t got = 0; got < len;) {
        if (!readable_by(fd, deadline))
            return -1;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n == 0 || (n < 0 && errno != EINTR))
            return -1;
        got += n > 0 ? (size_t)n : 0;
    }
    return 0;
}

/* ---- the source ---- */

int flyt_stream_connect(const char *address, const char *secret, char *err, size_t errlen)
{
    flyt_addr a;
    if (flyt_addr_parse(address, &a, err, errlen) != 0)
        return -1;
    if (strlen(secret) != FLYT_STREAM_SECRET_LEN) {
        snprintf(err, errlen, "the receiver's secret is not %d hex digits", FLYT_STREAM_SECRET_LEN);
        return -1;
    }
    long long deadline = flyt_stream_now_ms() + CONNECT_TRIES_MS;
    int fd;
    while ((fd = flyt_connect_timeout(&a, CONNECT_TRIES_MS, err, errlen)) < 0 &&
           flyt_stream_now_ms() < deadline)
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    if (fd < 0)
        return -1;
    struct timeval stall = {SEND_STALL_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof stall);
    char greeting[GREETING_LEN];
    memcpy(greeting, FLYT_STREAM_MAGIC, sizeof FLYT_STREAM_MAGIC - 1);
    memcpy(greeting + sizeof FLYT_STREAM_MAGIC - 1, secret, FLYT_STREAM_SECRET_LEN);
    if (flyt_write_full(fd, greeting, sizeof greeting) != 0) {
        snprintf(err, errlen, "sending to %s: %s", address, strerror(errno ? errno : EPIPE));
        close(fd);
        return -1;
    }
    return fd;
}

/* The pre-copy's answer line (state_precopy.c), when the source stopped waiting for it
 * before the receiver had loaded the images: not the verdict. The bytes kept. */
static size_t skip_preloaded(char *line, size_t got)
{
    char *end;
    while (got >= 10 && memcmp(line, "PRELOADED ", 10) == 0 &&
           (end = memchr(line, '\n', got)) != NULL) {
        size_t cut = (size_t)(end - line) + 1;
        memmove(line, line + cut, got - cut);
        got -= cut;
    }
    return got;
}

int flyt_stream_finish(int fd, char *err, size_t errlen)
{
    char line[320];
    size_t got = 0;
    long n = 0;
    shutdown(fd, SHUT_WR); /* the end of the state: the receiver verifies it now */
    long long deadline = flyt_stream_now_ms() + VERDICT_MS;
    while (got < sizeof line - 1 && memchr(line, '\n', got) == NULL && readable_by(fd, deadline) &&
           (n = read(fd, line + got, sizeof line - 1 - got)) > 0)
        got = skip_preloaded(line, got + (size_t)n);
    close(fd);
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "OK", 2) == 0)
        return 0;
    if (strncmp(line, "ERR ", 4) == 0)
        snprintf(err, errlen, "the receiver refused the state: %s", line + 4);
    else
        snprintf(err, errlen, "the receiver gave no verdict (%s)",
                 n < 0 ? strerror(errno) : got ? "a malformed answer" : "connection closed");
    return -1;
}

/* ---- the receiver ---- */

static void verdict(int fd, const char *why)
{
    char line[320];
    int n = why ? snprintf(line, sizeof line, "ERR %.300s\n", why) : snprintf(line, sizeof line, "OK\n");
    if (flyt_write_full(fd, line, (size_t)n) != 0)
        flyt_warn("the state's sender did not wait for the verdict");
}

/* The one connection within the deadline, its greeting checked: the socket, or -1. */
static int accept_sender(int lfd, const char *secret, long long deadline, char *err, size_t errlen)
{
    if (!readable_by(lfd, deadline)) {
        snprintf(err, errlen, "no state arrived within the deadline");
        return -1;
    }
    int fd = flyt_accept(lfd);
    if (fd < 0) {
        snprintf(err, errlen, "accepting the state connection: %s", strerror(errno));
        return -1;
    }
    char greeting[GREETING_LEN];
    size_t got = 0;
    long n;
    while (got < sizeof greeting && readable_by(fd, deadline) &&
           (n = read(fd, greeting + got, sizeof greeting - got)) > 0)
        got += (size_t)n;
    const char *why = NULL;
    if (got < sizeof greeting || memcmp(greeting, FLYT_STREAM_MAGIC, sizeof FLYT_STREAM_MAGIC - 1))
        why = "not a Flyt state stream";
    else if (CRYPTO_memcmp(greeting + sizeof FLYT_STREAM_MAGIC - 1, secret,
                           FLYT_STREAM_SECRET_LEN) != 0)
        why = "wrong secret";
    if (why) {
        verdict(fd, why);
        close(fd);
        snprintf(err, errlen, "refused the state connection: %s", why);
        return -1;
    }
    return fd;
}

/* ---- the received bytes: in memory, hashed in place, the file written after ---- */

#define RESERVE_MAX  ((size_t)1 << 40) /* address space for the state: far above a GPU's */
#define RESERVE_MIN  ((size_t)1 << 30)
#define COMMIT_STEP  ((size_t)64 << 20)

/* The state's bytes at mem, which never moves (the hashing threads read it): a
 * reservation of address space made usable COMMIT_STEP at a time. */
struct rbody {
    unsigned char *mem;
    size_t         reserved, committed, len;
    pthread_t      filler; /* faulting in the last step made usable, ahead of recv() */
    int            filling;
    size_t         fill_from, fill_len;
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it: recv() faults them */
#endif

static void *fault_in(void *arg)
{
    struct rbody *rb = arg;
    madvise(rb->mem + rb->fill_from, rb->fill_len, MADV_POPULATE_WRITE);
    return NULL;
}

static void rbody_filled(struct rbody *rb)
{
    if (rb->filling)
        pthread_join(rb->filler, NULL);
    rb->filling = 0;
}

static int rbody_open(struct rbody *rb)
{
    for (rb->reserved = RESERVE_MAX; rb->reserved >= RESERVE_MIN; rb->reserved /= 2) {
        void *m = mmap(NULL, rb->reserved, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED) {
            rb->mem = m;
            madvise(m, rb->reserved, MADV_HUGEPAGE); /* fewer page faults as it fills */
            return 0;
        }
    }
    return -1;
}

/* At least need bytes usable; 0, or -1 (past the reservation, or no memory). */
static int rbody_room(struct rbody *rb, size_t need)
{
    if (need <= rb->committed)
        return 0;
    size_t to = (need + COMMIT_STEP - 1) / COMMIT_STEP * COMMIT_STEP;
    to = to > rb->reserved ? rb->reserved : to;
    if (need > to || mprotect(rb->mem + rb->committed, to - rb->committed,
                              PROT_READ | PROT_WRITE) != 0)
        return -1;
    rbody_filled(rb); /* long done: a step takes a while to arrive */
    rb->fill_from = rb->committed;
    rb->fill_len = to - rb->committed;
    rb->filling = flyt_spawn_unsignalled(&rb->filler, fault_in, rb) == 0;
    rb->committed = to;
    return 0;
}

/* The reservation's tail goes back (the restore reserves device addresses next). */
static void rbody_trim(struct rbody *rb)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), keep = (rb->len + page - 1) / page * page;
    if (keep < rb->reserved)
        munmap(rb->mem + keep, rb->reserved - keep);
    rb->reserved = rb->committed = keep;
}

/* The kernel images a version-2 pre-copy's source left out of the state are put in
 * their MODULE sections as the sections arrive: the sections are walked as far as the
 * bytes go (next: the next section's header). */
struct splicer {
    size_t   next;
    int      done;   /* the END came, or nothing is left out */
    uint64_t bytes;  /* put in */
    unsigned images;
};

static int put_images_in(struct rbody *rb, struct splicer *sp, char *err, size_t errlen)
{
    struct flyt_state_section sec;
    struct flyt_state_module rec;
    while (!sp->done && sp->next + sizeof sec <= rb->len) {
        memcpy(&sec, rb->mem + sp->next, sizeof sec);
        size_t body = sp->next + sizeof sec;
        const void *image = NULL;
        if (sec.type == FLYT_SS_END || sec.length > rb->reserved) {
            sp->done = 1; /* a malformed one: its hash tells */
            break;
        }
        if (sec.type == FLYT_SS_MODULE && body + sizeof rec > rb->len)
            break; /* its record is still on its way */
        if (sec.type == FLYT_SS_MODULE) {
            memcpy(&rec, rb->mem + body, sizeof rec);
            if (sec.length == sizeof rec + rec.image_size &&
                flyt_precopy_left_out(rec.id, rec.sha256, rec.image_size, &image)) {
                size_t at = body + sizeof rec;
                if (image == NULL || rbody_room(rb, rb->len + rec.image_size) != 0) {
                    snprintf(err, errlen, "the kernel image of module %llu was left out of the "
                             "state but %s", (unsigned long long)rec.id,
                             image ? "does not fit here" : "did not arrive whole before");
                    return -1;
                }
                memmove(rb->mem + at + rec.image_size, rb->mem + at, rb->len - at);
                memcpy(rb->mem + at, image, rec.image_size);
                rb->len += rec.image_size;
                sp->bytes += rec.image_size;
                sp->images++;
            }
        }
        sp->next = body + sec.length;
    }
    return 0;
}

/* Bytes below this are final (no image is put in before them) and body. */
static size_t final_bytes(const struct rbody *rb, const struct splicer *sp)
{
    size_t f = sp->done || sp->next > rb->len ? rb->len : sp->next;
    size_t body = rb->len > FLYT_STATE_HASH ? rb->len - FLYT_STATE_HASH : 0;
    return f < body ? f : body;
}

/* The stream into rb until its end, hashing its chunks meanwhile; 0 with *matched
 * (flyt_rh_finish's answer) and *hash_ns, or -1 with err. */
static int take_bytes(int fd, struct rbody *rb, struct splicer *sp, long long deadline,
                      size_t *wire, int *matched, uint64_t *hash_ns, char *err, size_t errlen)
{
    struct flyt_rhash *h = flyt_rh_open(rb->mem);
    if (h == NULL) {
        snprintf(err, errlen, "receiving the state: out of memory (or threads)");
        return -1;
    }
    int rc = -1;
    *wire = 0;
    for (;;) {
        /* a step ahead: its pages are faulted in on a thread while this one arrives */
        if (rbody_room(rb, rb->len + COMMIT_STEP / 2) != 0 && rbody_room(rb, rb->len + 1) != 0) {
            snprintf(err, errlen, "no memory for the state after %zu bytes", rb->len);
            break;
        }
        if (!readable_by(fd, deadline)) {
            snprintf(err, errlen, "the state stopped arriving (%zu bytes) by the deadline", *wire);
            break;
        }
        ssize_t n = read(fd, rb->mem + rb->len, rb->committed - rb->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "reading the state after %zu bytes: %s", *wire, strerror(errno));
            break;
        }
        if (n == 0) {
            rc = 0;
            break;
        }
        rb->len += (size_t)n;
        *wire += (size_t)n;
        if (put_images_in(rb, sp, err, errlen) != 0)
            break;
        if (flyt_rh_final(h, final_bytes(rb, sp)) != 0) {
            snprintf(err, errlen, "hashing the state: out of memory");
            break;
        }
    }
    rbody_filled(rb);
    *matched = rc == 0 ? flyt_rh_finish(h, rb->len, hash_ns) : 0;
    flyt_rh_close(h);
    return rc;
}

/* The received state's file: created before the bytes come (a target that cannot write
 * it refuses the state at once), written once the source was answered. */
static struct {
    int                  fd;
    char                 tmp[PATH_MAX], path[PATH_MAX];
    const unsigned char *data;
    size_t               size;
    pthread_t            th;
} kept = {.fd = -1};

static void *write_kept(void *arg)
{
    (void)arg;
    flyt_precopy_images_free(); /* tens of MB unmapped: not before the verdict */
    long long t0 = now_ns();
    int bad = flyt_write_all(kept.fd, kept.data, kept.size) != 0;
    bad |= close(kept.fd) != 0;
    kept.fd = -1;
    if (bad || rename(kept.tmp, kept.path) != 0) {
        flyt_warn("the received state could not be kept in %s: %s", kept.path, strerror(errno));
        unlink(kept.tmp);
    } else {
        flyt_info("the received state kept in %s (%zu bytes) in %.3f ms, after the source was "
                  "answered", kept.path, kept.size, (now_ns() - t0) * 1e-6);
    }
    return NULL;
}

void flyt_stream_keep_file(int keep, int wait)
{
    if (kept.fd < 0) {
        flyt_precopy_images_free();
        return;
    }
    if (!keep) {
        flyt_precopy_images_free();
        close(kept.fd);
        kept.fd = -1;
        unlink(kept.tmp);
    } else if (wait || flyt_spawn_unsignalled(&kept.th, write_kept, NULL) != 0) {
        write_kept(NULL);
    }
}

/* The bytes of one connection into memory, verified; NULL with err (the verdict sent;
 * on success too unless keep_verdict). */
static struct flyt_state *take_state(int fd, const char *path, long long deadline,
                                     const char *session_id, int keep_verdict, char *err,
                                     size_t errlen)
{
    struct rbody rb = {0};
    struct splicer sp = {.next = sizeof(struct flyt_state_header)};
    struct flyt_state *st = NULL;
    size_t wire = 0;
    long long t0 = now_ns(), t_open = 0;
    int matched = 0;
    uint64_t hash_ns = 0;
    sp.done = !flyt_precopy_leaves_out(); /* nothing left out: no walk */
    if (snprintf(kept.tmp, sizeof kept.tmp, "%s.tmp", path) >= (int)sizeof kept.tmp)
        snprintf(err, errlen, "path too long: %s", path);
    else if ((kept.fd = open(kept.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        snprintf(err, errlen, "cannot create %s: %s", kept.tmp, strerror(errno));
    else if (rbody_open(&rb) != 0)
        snprintf(err, errlen, "no address space for the state");
    else if (take_bytes(fd, &rb, &sp, deadline, &wire, &matched, &hash_ns, err, errlen) != 0)
        ; /* err says why */
    else if ((t_open = now_ns()) && (rbody_trim(&rb), 1) &&
             (st = flyt_state_open_memory(rb.mem, rb.len, matched == 1, hash_ns, path, err,
                                          errlen)) != NULL &&
             strcmp(flyt_state_session_id(st), session_id) != 0) {
        snprintf(err, errlen, "the state holds session '%s', this server serves '%s'",
                 flyt_state_session_id(st), session_id);
        flyt_state_close(st);
        st = NULL;
    }
    if (!st && t_open == 0 && rb.mem)
        munmap(rb.mem, rb.reserved);
    snprintf(kept.path, sizeof kept.path, "%s", path);
    kept.data = rb.mem;
    kept.size = rb.len;
    if (!st)
        flyt_stream_keep_file(0, 0);
    if (!st || !keep_verdict)
        verdict(fd, st ? NULL : err);
    if (st)
        flyt_info("received the session's state: %zu bytes, verified; state phases (receive): "
                  "receiving %.3f ms (%s; %zu bytes over the link, %llu put in from %u kernel "
                  "image(s) held before the stop), opening and verifying %.3f ms", rb.len,
                  (t_open - t0) * 1e-6, matched == 1 ? "hashed as it arrived" : "not hashed yet",
                  wire, (unsigned long long)sp.bytes, sp.images, (now_ns() - t_open) * 1e-6);
    return st;
}

void flyt_stream_verdict(int sender, const char *why)
{
    verdict(sender, why);
    close(sender);
}

struct flyt_state *flyt_stream_receive(const char *address, const char *secret_file,
                                       const char *path, int timeout_s,
                                       const struct flyt_server_config *cfg, int *sender,
                                       char *err, size_t errlen)
{
    const char *session_id = cfg->session_id ? cfg->session_id : "";
    long long deadline = flyt_stream_now_ms() + (long long)timeout_s * 1000;
    flyt_token_line secret[1];
    char why[512] = "";
    if (flyt_token_file_read(secret_file, 0077, FLYT_STREAM_SECRET_LEN, secret, 1, why,
                             sizeof why) < 0 || strlen(secret[0]) != FLYT_STREAM_SECRET_LEN) {
        snprintf(err, errlen, "--restore-secret-file: %s",
                 why[0] ? why : "expected 64 hex digits");
        return NULL;
    }
    flyt_addr a;
    if (flyt_addr_parse(address, &a, why, sizeof why) != 0) {
        snprintf(err, errlen, "--restore-listen: %s", why);
        return NULL;
    }
    int lfd = flyt_listen(&a, why, sizeof why);
    if (lfd < 0) {
        snprintf(err, errlen, "--restore-listen: %s", why);
        return NULL;
    }
    flyt_info("waiting up to %d s for the session's state on %s", timeout_s, address);
    struct flyt_state *st = NULL;
    int fd = accept_sender(lfd, secret[0], deadline, err, errlen);
    close(lfd); /* exactly one state connection */
    if (fd >= 0 && flyt_precopy_receive(fd, cfg, deadline, err, errlen) != 0) {
        verdict(fd, err);
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        st = take_state(fd, path, deadline, session_id, sender != NULL, err, errlen);
        if (st && !sender) /* nobody answers later: the file now */
            flyt_stream_keep_file(1, 1);
        if (st && sender)
            *sender = fd;
        else
            close(fd);
    }
    OPENSSL_cleanse(secret, sizeof secret);
    return st;
}
