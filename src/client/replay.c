/* The replay buffer of the client's request stream: see replay.h. */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

int flyt_replay_init(struct flyt_replay *r, size_t limit)
{
    memset(r, 0, sizeof *r);
    r->limit = limit;
    r->cap = 2 * limit; /* appends move the held bytes down at most once per limit bytes */
    r->buf = malloc(r->cap);
    return r->buf ? 0 : -1;
}

void flyt_replay_trim(struct flyt_replay *r, uint64_t consumed)
{
    if (consumed <= r->base)
        return;
    size_t drop = consumed - r->base < r->len ? (size_t)(consumed - r->base) : r->len;
    r->start += drop;
    r->len -= drop;
    r->base += drop;
    if (r->len > 0)
        return;
    r->start = 0;
    if (r->cap > 2 * r->limit) { /* a large frame grew it: give the memory back */
        char *smaller = realloc(r->buf, 2 * r->limit);
        if (smaller) {
            r->buf = smaller;
            r->cap = 2 * r->limit;
        }
    }
}

int flyt_replay_must_wait(const struct flyt_replay *r, size_t n)
{
    return r->len > 0 && r->len + n > r->limit;
}

const char *flyt_replay_append(struct flyt_replay *r, const struct iovec *iov, int iovcnt,
                               size_t total)
{
    if (r->start + r->len + total > r->cap && r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->len);
        r->start = 0;
    }
    if (r->len + total > r->cap) {
        size_t cap = r->cap * 2 > r->len + total ? r->cap * 2 : r->len + total;
        char *bigger = realloc(r->buf, cap);
        if (bigger == NULL)
            return NULL;
        r->buf = bigger;
        r->cap = cap;
    }
    char *frame = r->buf + r->start + r->len, *at = frame;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    r->len += total;
    return frame;
}

const char *flyt_replay_from(const struct flyt_replay *r, uint64_t from, size_t *n)
{
    if (from < r->base || from > r->base + r->len)
        return NULL;
    *n = (size_t)(r->base + r->len - from);
    return r->buf + r->start + (size_t)(from - r->base);
}
