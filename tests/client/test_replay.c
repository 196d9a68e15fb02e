/*
 * The client's replay buffer (src/client/replay.c) alone: bytes appended are
 * found again from any offset still held, trimming drops only what was
 * confirmed, a frame waits only while others are unconfirmed, a frame
 * larger than the limit grows the buffer and the memory goes back once it
 * is consumed.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "replay.h"

static unsigned char byte_at(uint64_t off) { return (unsigned char)(off * 7u + (off >> 8)); }

/* Appends n bytes of the stream pattern, as two pieces (header and body). */
static void append(struct flyt_replay *r, size_t n)
{
    unsigned char *p = malloc(n);
    uint64_t at = flyt_replay_end(r);
    for (size_t i = 0; i < n; i++)
        p[i] = byte_at(at + i);
    struct iovec iov[2] = {{p, n / 3}, {p + n / 3, n - n / 3}};
    const char *copy = flyt_replay_append(r, iov, 2, n);
    CHECK(copy != NULL, "append %zu bytes at %llu", n, (unsigned long long)at);
    CHECK_MEM_EQ(copy, p, n, "the copy holds them");
    free(p);
}

static void held_from(const struct flyt_replay *r, uint64_t from)
{
    size_t n = 0;
    const char *p = flyt_replay_from(r, from, &n);
    CHECK(p != NULL, "offset %llu is held", (unsigned long long)from);
    CHECK_EQ(from + n, flyt_replay_end(r), "up to the end");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] != byte_at(from + i))
            CHECK_EQ((unsigned char)p[i], byte_at(from + i), "byte %llu", (unsigned long long)(from + i));
}

int main(void)
{
    struct flyt_replay r;
    CHECK_EQ(flyt_replay_init(&r, 4096), 0, "a buffer of limit 4096");
    CHECK(!flyt_replay_must_wait(&r, 100000), "nothing unconfirmed: even a large frame goes");
    append(&r, 1000);
    append(&r, 2000);
    held_from(&r, 0);
    held_from(&r, 1000);
    CHECK(flyt_replay_must_wait(&r, 1500), "3000 unconfirmed + 1500 > 4096: wait");
    CHECK(!flyt_replay_must_wait(&r, 1000), "3000 + 1000 fit");
    flyt_replay_trim(&r, 1000);
    CHECK_EQ(r.base, 1000, "trimmed to the confirmed offset");
    CHECK(flyt_replay_from(&r, 999, &(size_t){0}) == NULL, "a byte before it is gone");
    held_from(&r, 1000);
    held_from(&r, 3000);
    flyt_replay_trim(&r, 500);
    CHECK_EQ(r.base, 1000, "an older confirmation changes nothing");
    for (int i = 0; i < 50; i++) { /* the held bytes move down as the buffer cycles */
        append(&r, 700);
        flyt_replay_trim(&r, flyt_replay_end(&r) - 1500);
        held_from(&r, flyt_replay_end(&r) - 1500);
    }
    CHECK_EQ(r.cap, 8192, "cycling never grew it");
    flyt_replay_trim(&r, flyt_replay_end(&r));
    /* a frame over the limit is held by reference: header and request copied, data not */
    CHECK(flyt_replay_by_ref(&r, 100000), "100000 bytes over the limit go by reference");
    CHECK(!flyt_replay_by_ref(&r, 4096), "the limit itself is copied");
    static char data[100000 - 48];
    char head[48];
    memset(head, 7, sizeof head);
    memset(data, 9, sizeof data);
    struct iovec frame[3] = {{head, 16}, {head + 16, 32}, {data, sizeof data}}, held[8];
    int nheld = 0;
    uint64_t at = flyt_replay_end(&r);
    CHECK_EQ(flyt_replay_append_ref(&r, frame, 3, 2, 100000, held, &nheld), 0, "held by reference");
    CHECK_EQ(nheld, 2, "as its copied head and the caller's data");
    CHECK_EQ(held[0].iov_len, 48, "the head is header and request");
    CHECK(held[0].iov_base != head, "the head is a copy");
    CHECK(held[1].iov_base == data, "the data is the caller's");
    CHECK_EQ(r.cap, 8192, "nothing grew");
    CHECK_EQ(flyt_replay_end(&r), at + 100000, "the stream counts it");
    CHECK(flyt_replay_must_wait(&r, 10), "the next frame waits for it");
    CHECK(flyt_replay_from(&r, at, &(size_t){0}) == NULL, "no contiguous copy of it");
    struct iovec again[8];
    CHECK_EQ(flyt_replay_iov_from(&r, at, again), 2, "a replay from its start sends it whole");
    CHECK_MEM_EQ(again[0].iov_base, head, 48, "its head");
    CHECK_EQ(flyt_replay_iov_from(&r, at + 10, again), -1, "no replay from inside it");
    CHECK_EQ(flyt_replay_iov_from(&r, at + 100000, again), 0, "nothing from its end");
    flyt_replay_trim(&r, at + 50000);
    CHECK_EQ(r.nref, 2, "a frame is consumed whole or not at all");
    flyt_replay_trim(&r, at + 100000);
    CHECK_EQ(r.nref, 0, "consumed: forgotten");
    CHECK_EQ(r.base, at + 100000, "and the stream goes on after it");
    CHECK(!flyt_replay_must_wait(&r, 10), "the next frame goes");
    CHECK_EQ(flyt_replay_append_ref(&r, frame, 3, 2, 100000, held, &nheld), 0, "another one");
    flyt_replay_free(&r);
    CHECK(r.buf == NULL && r.head == NULL, "freed");
    CHECK_EQ(flyt_replay_init(&r, 4096), 0, "a new buffer");
    CHECK(flyt_replay_from(&r, flyt_replay_end(&r) + 1, &(size_t){0}) == NULL, "past the end: none");
    flyt_replay_free(&r);
    printf("test_replay: all checks passed\n");
    return check_done();
}
