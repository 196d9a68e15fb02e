/*
 * The client's replay buffer (docs/protocol.md, "Session moves"): the bytes
 * of its request stream that the server may not have consumed yet, so that
 * a restored server can be sent them again from the offset it resumes at.
 * The stream counts every byte sent after the handshake; the buffer holds
 * [base, end) and drops what a reply proved consumed. Not thread-safe: the
 * connection's send lock guards it.
 */
#ifndef FLYT_CLIENT_REPLAY_H
#define FLYT_CLIENT_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct flyt_replay {
    char    *buf;
    size_t   cap;
    size_t   start, len; /* the bytes held: buf[start, start + len) */
    uint64_t base;       /* their stream offset */
    size_t   limit;      /* unconfirmed bytes a data frame may add to */
};

/* 0, or -1 when out of memory. */
int flyt_replay_init(struct flyt_replay *r, size_t limit);
/* The stream offset after the last byte sent. */
static inline uint64_t flyt_replay_end(const struct flyt_replay *r) { return r->base + r->len; }
/* Forgets the bytes before consumed. */
void flyt_replay_trim(struct flyt_replay *r, uint64_t consumed);
/* Whether a frame of n bytes must wait for earlier ones to be confirmed
 * (never when nothing is unconfirmed: a larger frame then goes alone). */
int flyt_replay_must_wait(const struct flyt_replay *r, size_t n);
/* Appends total bytes gathered from iov; their copy (contiguous), or NULL
 * when out of memory. */
const char *flyt_replay_append(struct flyt_replay *r, const struct iovec *iov, int iovcnt,
                               size_t total);
/* The bytes from stream offset from to the end (*n of them), or NULL when
 * from is not held. */
const char *flyt_replay_from(const struct flyt_replay *r, uint64_t from, size_t *n);

#endif
