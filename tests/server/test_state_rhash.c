/*
 * The receiving server's hashing of a state stream as it arrives (state_pipe.h,
 * flyt_rh_*, in place): for bodies ending on and around chunk boundaries and the trailer's 32
 * bytes, fed in pieces of awkward sizes, it must agree with flyt_state_root over the
 * whole body, and refuse a stream with one byte changed anywhere, or cut short.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
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
