/* Streaming a session's state to the server that takes it over: see state_stream.h. */
#include "state_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "flyt_log.h"
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
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
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

/* Copies the stream into tmp until its end, hashing its chunks meanwhile; 0 with *matched
 * (flyt_rh_finish's answer) and *hash_ns, or -1 with err. */
static int take_bytes(int fd, const char *tmp, long long deadline, size_t *total, int *matched,
                      uint64_t *hash_ns, char *err, size_t errlen)
{
    struct flyt_rhash *h = flyt_rh_open();
    int out = h ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (out < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, h ? strerror(errno) : "out of memory");
        flyt_rh_close(h);
        return -1;
    }
    int rc = -1;
    *total = 0;
    for (;;) {
        if (!readable_by(fd, deadline)) {
            snprintf(err, errlen, "the state stopped arriving (%zu bytes) by the deadline", *total);
            break;
        }
        size_t room;
        unsigned char *at = flyt_rh_space(h, &room);
        ssize_t n = read(fd, at, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "reading the state after %zu bytes: %s", *total, strerror(errno));
            break;
        }
        if (n == 0) {
            rc = 0;
            break;
        }
        ssize_t w = 0;
        for (ssize_t k; w < n && ((k = write(out, at + w, (size_t)(n - w))) > 0 || errno == EINTR);)
            w += k > 0 ? k : 0;
        if (w < n) {
            snprintf(err, errlen, "writing %s: %s", tmp, strerror(errno));
            break;
        }
        *total += (size_t)n;
        if (flyt_rh_took(h, (size_t)n) != 0) {
            snprintf(err, errlen, "hashing the state: out of memory");
            break;
        }
    }
    if (close(out) != 0 && rc == 0) {
        snprintf(err, errlen, "writing %s: %s", tmp, strerror(errno));
        rc = -1;
    }
    *matched = rc == 0 ? flyt_rh_finish(h, hash_ns) : 0;
    flyt_rh_close(h);
    return rc;
}

/* The bytes of one connection into path, verified; NULL with err (the verdict sent; on
 * success too unless keep_verdict). */
static struct flyt_state *take_state(int fd, const char *path, long long deadline,
                                     const char *session_id, int keep_verdict, char *err,
                                     size_t errlen)
{
    char tmp[PATH_MAX];
    size_t total = 0;
    struct flyt_state *st = NULL;
    long long t0 = now_ns(), t_open = 0;
    int matched = 0;
    uint64_t hash_ns = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        snprintf(err, errlen, "path too long: %s", path);
    else if (take_bytes(fd, tmp, deadline, &total, &matched, &hash_ns, err, errlen) != 0)
        ; /* err says why */
    else if (rename(tmp, path) != 0)
        snprintf(err, errlen, "cannot rename %s: %s", tmp, strerror(errno));
    else if ((t_open = now_ns()) &&
             (st = matched == 1 ? flyt_state_open_hashed(path, hash_ns, err, errlen)
                                : flyt_state_open(path, err, errlen)) != NULL &&
             strcmp(flyt_state_session_id(st), session_id) != 0) {
        snprintf(err, errlen, "the state holds session '%s', this server serves '%s'",
                 flyt_state_session_id(st), session_id);
        flyt_state_close(st);
        st = NULL;
    }
    unlink(tmp);
    if (!st || !keep_verdict)
        verdict(fd, st ? NULL : err);
    if (st)
        flyt_info("received the session's state: %zu bytes, verified; state phases (receive): "
                  "receiving %.3f ms (%s), opening and verifying %.3f ms", total,
                  (t_open - t0) * 1e-6, matched == 1 ? "hashed as it arrived" : "not hashed yet",
                  (now_ns() - t_open) * 1e-6);
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
        if (st && sender)
            *sender = fd;
        else
            close(fd);
    }
    OPENSSL_cleanse(secret, sizeof secret);
    return st;
}
