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

#define FLYT_REPLAY_REF_IOVS 8

struct flyt_replay {
    char    *buf;
    size_t   cap;
    size_t   start, len; /* the bytes held: buf[start, start + len) */
    uint64_t base;       /* their stream offset */
    size_t   limit;      /* unconfirmed bytes a data frame may add to */
    /* A frame over the limit is not copied (a copy of every bulk transfer
     * cost two thirds of TCP's bandwidth): it goes alone, so it is then all
     * that is held, and its sender keeps its memory until it is confirmed
     * consumed. Its header and request are copied (head); its data is the
     * sender's. */
    struct iovec ref[FLYT_REPLAY_REF_IOVS];
    int          nref;   /* 0: none */
    size_t       ref_len;
    char        *head;
};

/* 0, or -1 when out of memory. */
int flyt_replay_init(struct flyt_replay *r, size_t limit);
/* The stream offset after the last byte sent. */
static inline uint64_t flyt_replay_end(const struct flyt_replay *r)
{
    return r->base + r->len + (r->nref ? r->ref_len : 0);
}
/* Whether a frame of n bytes is held by reference (see struct flyt_replay):
 * its sender must not return before it is confirmed consumed. */
static inline int flyt_replay_by_ref(const struct flyt_replay *r, size_t n) { return n > r->limit; }
/* Forgets the bytes before consumed. */
void flyt_replay_trim(struct flyt_replay *r, uint64_t consumed);
/* Whether a frame of n bytes must wait for earlier ones to be confirmed
 * (never when nothing is unconfirmed: a larger frame then goes alone). */
int flyt_replay_must_wait(const struct flyt_replay *r, size_t n);
/* Appends total bytes gathered from iov; their copy (contiguous), or NULL
 * when out of memory. */
const char *flyt_replay_append(struct flyt_replay *r, const struct iovec *iov, int iovcnt,
                               size_t total);
/* Holds a frame over the limit by reference, nothing else being held: its
 * first nhead iovecs (header and request) are copied, the rest referenced.
 * 0 with the frame's bytes as iovecs in out (*nout of them, at most
 * FLYT_REPLAY_REF_IOVS), or -1 when out of memory or too many iovecs. */
int flyt_replay_append_ref(struct flyt_replay *r, const struct iovec *iov, int iovcnt, int nhead,
                           size_t total, struct iovec *out, int *nout);
/* The bytes from stream offset from to the end (*n of them), or NULL when
 * from is not held or they are a frame held by reference. */
const char *flyt_replay_from(const struct flyt_replay *r, uint64_t from, size_t *n);
/* The same as iovecs (at most FLYT_REPLAY_REF_IOVS): their count, or -1
 * when from is not held. */
int flyt_replay_iov_from(const struct flyt_replay *r, uint64_t from, struct iovec *out);
void flyt_replay_free(struct flyt_replay *r);

#endif
