/*
 * The receiving server's hashing of a state stream as it arrives (state_pipe.h,
 * flyt_rh_*, in place): for bodies ending on and around chunk boundaries and the trailer's 32
 * bytes, fed in pieces of awkward sizes, it must agree with flyt_state_root over the
 * whole body, and refuse a stream with one byte changed anywhere, or cut short.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "state_format.h"
#include "state_pipe.h"

#define C FLYT_STATE_CHUNK

/* Feeds stream (len bytes) into a buffer in pieces of varying size, each piece's bytes
 * declared final once they cannot be the trailer: flyt_rh_finish's answer. */
static int feed(const unsigned char *stream, size_t len, unsigned seed)
{
    unsigned char *buf = calloc(1, len + 1);
    CHECK(buf != NULL, "memory");
    struct flyt_rhash *h = flyt_rh_open(buf);
    CHECK(h != NULL, "a hasher");
    size_t off = 0;
    while (off < len) {
        seed = seed * 1103515245u + 12345u;
        size_t n = (size_t)(seed >> 8) % (C / 3) + 1;
        n = n > len - off ? len - off : n;
        memcpy(buf + off, stream + off, n);
        off += n;
        int took = flyt_rh_final(h, off > 32 ? off - 32 : 0);
        if (took != 0) /* quiet when it works: thousands of pieces */
            CHECK_EQ(took, 0, "took %zu bytes at %zu", n, off);
    }
    uint64_t ns = 0;
    int r = flyt_rh_finish(h, len, &ns);
    flyt_rh_close(h);
    free(buf);
    return r;
}

/* The writer's two outputs: the socket is read at once, the file only once the socket
 * saw its end. */
struct outputs {
    int             sock, file;
    size_t          sock_bytes, file_bytes;
    int             sock_ended;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
};

static size_t drain(int fd)
{
    static char buf[1 << 16];
    size_t total = 0;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        total += (size_t)n;
    return total;
}

static void *read_sock(void *arg)
{
    struct outputs *o = arg;
    o->sock_bytes = drain(o->sock);
    pthread_mutex_lock(&o->mu);
    o->sock_ended = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static void *read_file(void *arg)
{
    struct outputs *o = arg;
    pthread_mutex_lock(&o->mu);
    while (!o->sock_ended)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    o->file_bytes = drain(o->file);
    return NULL;
}

/* A streamed state whose file is slower than its socket (here: not read at all until the
 * socket's end): the stream completes, the file after it; bytes put unsent reach the
 * file and not the socket. */
static void file_lags_behind(void)
{
    int sp[2], pp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0 && pipe(pp) == 0, "a socket and a pipe");
    struct outputs o = {.sock = sp[1], .file = pp[0]};
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    pthread_t ts, tf;
    CHECK(pthread_create(&ts, NULL, read_sock, &o) == 0 &&
              pthread_create(&tf, NULL, read_file, &o) == 0, "readers");
    struct flyt_swriter *w = flyt_sw_open(NULL, pp[1], sp[0], NULL);
    CHECK(w != NULL, "a writer");
    size_t piece = 1 << 20, pieces = 80, unsent = 3 * piece + 12345;
    unsigned char *buf = calloc(1, unsent);
    for (size_t i = 0; i < pieces; i++)
        if (flyt_sw_put(w, buf, piece) != 0)
            CHECK_EQ(flyt_sw_put(w, buf, piece), 0, "piece %zu", i);
    CHECK_EQ(flyt_sw_put_unsent(w, buf, unsent), 0, "bytes the receiver holds");
    CHECK_EQ(flyt_sw_put(w, buf, 77), 0, "more after them");
    CHECK_EQ(flyt_sw_finish(w), 0, "finished: the file taken after the socket ended");
    uint64_t total = flyt_sw_total(w);
    CHECK_EQ(flyt_sw_unsent(w), unsent, "the bytes left out");
    flyt_sw_close(w, NULL);
    close(pp[1]);
    pthread_join(ts, NULL);
    pthread_join(tf, NULL);
    CHECK_EQ(o.file_bytes, total, "the file has every byte");
    CHECK_EQ(o.sock_bytes, total - unsent, "the socket all but those left out");
    close(sp[0]);
    close(sp[1]);
    close(pp[0]);
    free(buf);
}

int main(void)
{
    file_lags_behind();
    const size_t bodies[] = {1, 100, C - 32, C - 31, C - 1, C, C + 1, C + 31, 2 * C - 32,
                             2 * C - 33, 2 * C, 3 * C + 5};
    unsigned char *stream = malloc(3 * C + 64);
    CHECK(stream != NULL, "memory");
    for (size_t i = 0; i < 3 * C + 64; i++)
        stream[i] = (unsigned char)(i * 2654435761u >> 13);
    for (size_t k = 0; k < sizeof bodies / sizeof bodies[0]; k++) {
        size_t body = bodies[k];
        uint64_t ns;
        CHECK_EQ(flyt_state_root(stream, body, stream + body, &ns), 0, "root of %zu bytes", body);
        CHECK_EQ(feed(stream, body + 32, (unsigned)k + 1), 1, "a body of %zu bytes matches", body);
        size_t at[] = {0, body / 2, body - 1, body, body + 31};
        for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) {
            stream[at[j]] ^= 0x40;
            CHECK_EQ(feed(stream, body + 32, (unsigned)j + 7), 0,
                     "body %zu bytes, byte %zu changed: refused", body, at[j]);
            stream[at[j]] ^= 0x40;
        }
        CHECK_EQ(feed(stream, body + 31, 3), 0, "body %zu bytes cut by one: refused", body);
    }
    CHECK_EQ(feed(stream, 20, 1), 0, "shorter than a trailer: refused");
    free(stream);
    printf("test_state_rhash: all checks passed\n");
    return 0;
}
