/* The one buffered socket reader: see flyt_reader.h. */
#include "flyt_reader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_assert.h"
#include "flyt_tls.h"
#include "flyt_transport.h"

int flyt_reader_init(flyt_reader *r, int fd, size_t chunk, int takes_fds)
{
    memset(r, 0, sizeof *r);
    r->buf = malloc(chunk);
    if (r->buf == NULL)
        return -1;
    r->fd = fd;
    r->cap = r->chunk = chunk;
    r->takes_fds = takes_fds;
    r->passed_fd = -1;
    return 0;
}

void flyt_reader_free(flyt_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->pos = r->len = r->cap = 0;
}

/* After bytes came in: a descriptor that came with them ends where they end. */
static void counted(flyt_reader *r, size_t n, int fd_before)
{
    r->total += n;
    if (r->passed_fd != fd_before)
        r->fd_end = r->total;
}

long flyt_reader_fill(flyt_reader *r)
{
    FLYT_ASSERT(r->len < r->cap);
    int before = r->passed_fd;
    long n = __builtin_expect(r->tls != NULL, 0)
                 ? flyt_tls_recv_some(r->tls, r->buf + r->len, r->cap - r->len)
                 : flyt_recv_some(r->fd, r->buf + r->len, r->cap - r->len,
                                  r->takes_fds ? &r->passed_fd : NULL);
    if (n > 0) {
        r->len += (size_t)n;
        counted(r, (size_t)n, before);
    }
    return n;
}

/* Straight into dst, past the (empty) buffer. */
static int read_direct(flyt_reader *r, void *dst, size_t n)
{
    int before = r->passed_fd;
    if (__builtin_expect(r->tls != NULL, 0)) {
        if (flyt_tls_read_full(r->tls, dst, n) != 0)
            return -1;
    } else if (flyt_read_full_fd(r->fd, dst, n, r->takes_fds ? &r->passed_fd : NULL) != 0) {
        return -1;
    }
    counted(r, n, before);
    return 0;
}

int flyt_reader_read(flyt_reader *r, void *dst, size_t n)
{
    char *p = dst;
    while (n > 0) {
        size_t avail = flyt_reader_buffered(r);
        if (avail > 0) {
            size_t k = avail < n ? avail : n;
            memcpy(p, r->buf + r->pos, k);
            r->pos += k;
            p += k;
            n -= k;
            continue;
        }
        r->pos = r->len = 0;
        if (n >= r->chunk / 2)
            return read_direct(r, p, n);
        long got = flyt_reader_fill(r);
        if (got <= 0) {
            if (got == 0)
                errno = 0;
            return -1;
        }
    }
    return 0;
}

int flyt_reader_skip(flyt_reader *r, uint64_t n)
{
    char tmp[16384];
    while (n > 0) {
        size_t k = n < sizeof tmp ? (size_t)n : sizeof tmp;
        if (flyt_reader_read(r, tmp, k) != 0)
            return -1;
        n -= k;
    }
    return 0;
}

int flyt_reader_make_room(flyt_reader *r, size_t want, size_t max)
{
    if (r->pos == r->len)
        r->pos = r->len = 0;
    if (r->cap - r->len >= want)
        return 0;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        if (r->cap - r->len >= want)
            return 0;
    }
    size_t cap = r->cap * 2;
    while (cap - r->len < want && cap <= max)
        cap *= 2;
    if (cap > max)
        return -1;
    char *buf = realloc(r->buf, cap);
    if (buf == NULL)
        return -1;
    r->buf = buf;
    r->cap = cap;
    return 0;
}
