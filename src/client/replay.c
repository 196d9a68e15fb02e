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

void flyt_replay_free(struct flyt_replay *r)
{
    free(r->buf);
    free(r->head);
    memset(r, 0, sizeof *r);
}

void flyt_replay_trim(struct flyt_replay *r, uint64_t consumed)
{
    if (consumed <= r->base)
        return;
    if (r->nref) { /* held alone: a frame is consumed whole */
        if (consumed < r->base + r->ref_len)
            return;
        r->base += r->ref_len;
        r->nref = 0;
        r->ref_len = 0;
        free(r->head);
        r->head = NULL;
        return;
    }
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
    size_t held = r->len + (r->nref ? r->ref_len : 0);
    return held > 0 && held + n > r->limit;
}

int flyt_replay_append_ref(struct flyt_replay *r, const struct iovec *iov, int iovcnt, int nhead,
                           size_t total, struct iovec *out, int *nout)
{
    if (r->len != 0 || r->nref != 0 || nhead < 1 || nhead > iovcnt ||
        iovcnt - nhead + 1 > FLYT_REPLAY_REF_IOVS)
        return -1;
    size_t head_len = 0;
    for (int i = 0; i < nhead; i++)
        head_len += iov[i].iov_len;
    r->head = malloc(head_len ? head_len : 1);
    if (r->head == NULL)
        return -1;
    char *at = r->head;
    for (int i = 0; i < nhead; i++) {
        if (iov[i].iov_len)
            memcpy(at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    r->ref[0] = (struct iovec){r->head, head_len};
    r->nref = 1;
    for (int i = nhead; i < iovcnt; i++)
        r->ref[r->nref++] = iov[i];
    r->ref_len = total;
    r->start = 0;
    memcpy(out, r->ref, sizeof r->ref[0] * (size_t)r->nref);
    *nout = r->nref;
    return 0;
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
        if (iov[i].iov_len) /* an empty part may have no base */
            memcpy(at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    r->len += total;
    return frame;
}

int flyt_replay_iov_from(const struct flyt_replay *r, uint64_t from, struct iovec *out)
{
    if (r->nref) { /* a frame is replayed whole: from is where it starts, or after it */
        if (from == r->base + r->ref_len)
            return 0;
        if (from != r->base)
            return -1;
        memcpy(out, r->ref, sizeof r->ref[0] * (size_t)r->nref);
        return r->nref;
    }
    size_t n;
    const char *p = flyt_replay_from(r, from, &n);
    if (p == NULL)
        return -1;
    out[0] = (struct iovec){(void *)p, n};
    return n ? 1 : 0;
}

const char *flyt_replay_from(const struct flyt_replay *r, uint64_t from, size_t *n)
{
    if (r->nref || from < r->base || from > r->base + r->len)
        return NULL;
    *n = (size_t)(r->base + r->len - from);
    return r->buf + r->start + (size_t)(from - r->base);
}
