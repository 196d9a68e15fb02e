/*
 * The one buffered socket reader: one recv brings in whatever has arrived
 * (often several pipelined frames), so a small read costs no syscall of its
 * own; a large read with nothing buffered goes straight to its destination.
 * Offsets count bytes since the reader began. On a Unix socket it may take a
 * descriptor passed with the bytes (SCM_RIGHTS): the kernel ends a read
 * after the message that carries one, so fd_end, the offset where the read
 * that brought it ended, is the end of the frame it came with.
 *
 * Not thread-safe: one reader at a time (the server's reader role, the
 * client's receiver thread).
 */
#ifndef FLYT_READER_H
#define FLYT_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int      fd;
    char    *buf;
    size_t   pos, len; /* unread bytes: buf[pos, len) */
    size_t   cap;      /* grows only through flyt_reader_make_room */
    size_t   chunk;    /* the first size: reads of half of it or more bypass the buffer */
    uint64_t total;    /* bytes received so far */
    int      takes_fds; /* a descriptor may come with the bytes */
    int      passed_fd; /* the last one that came and was not taken, or -1 */
    uint64_t fd_end;    /* total when passed_fd came */
    struct flyt_tls *tls; /* reads go through this TLS session (flyt_tls.h); NULL: plain */
} flyt_reader;

/* 0, or -1 when out of memory. A TLS connection then sets r->tls. */
int  flyt_reader_init(flyt_reader *r, int fd, size_t chunk, int takes_fds);
/* Frees the buffer; the socket and a passed descriptor are the caller's. */
void flyt_reader_free(flyt_reader *r);

/* Exactly n bytes: 0, or -1 on error or end of stream (errno 0 at the end). */
int flyt_reader_read(flyt_reader *r, void *dst, size_t n);
/* Reads and drops n bytes. */
int flyt_reader_skip(flyt_reader *r, uint64_t n);

static inline size_t flyt_reader_buffered(const flyt_reader *r) { return r->len - r->pos; }
/* The offset of the next byte to be read. */
static inline uint64_t flyt_reader_offset(const flyt_reader *r)
{
    return r->total - flyt_reader_buffered(r);
}
/* The buffered byte at offset, which must lie in [offset of next, total). */
static inline const char *flyt_reader_at(const flyt_reader *r, uint64_t offset)
{
    return r->buf + r->len - (size_t)(r->total - offset);
}

/* Reading ahead (bytes buffered for later, unread ones kept): room for at
 * least want more bytes, the buffer growing up to max. 0, or -1 at max or
 * out of memory. */
int  flyt_reader_make_room(flyt_reader *r, size_t want, size_t max);
/* One recv appended to the buffer: the byte count, 0 at end of stream, -1
 * on error. */
long flyt_reader_fill(flyt_reader *r);

#endif
