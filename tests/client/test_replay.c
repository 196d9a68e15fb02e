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
    append(&r, 100000);
    CHECK_GE(r.cap, 100000, "a frame larger than the limit grows it");
    held_from(&r, flyt_replay_end(&r) - 100000);
    CHECK(flyt_replay_must_wait(&r, 10), "and the next frame waits for it");
    flyt_replay_trim(&r, flyt_replay_end(&r));
    CHECK_EQ(r.cap, 8192, "consumed, the memory goes back");
    CHECK(flyt_replay_from(&r, flyt_replay_end(&r) + 1, &(size_t){0}) == NULL, "past the end: none");
    free(r.buf);
    printf("test_replay: all checks passed\n");
    return check_done();
}
