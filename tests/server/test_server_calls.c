/*
 * Every plain call of calls.api (the CALL op), with a fixed corpus of
 * pseudo-random requests per call: right and wrong handle ids, addresses
 * inside and outside an allocation, random scalars and in-bytes, sent with
 * and without a reply. The server must answer each request that asks, never
 * end a session for a well-formed one, and never crash (host backend).
 * usage: test_server_calls FLYT_SERVER_BIN
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "harness.h"

/* The server's table, from the same generated file. */
static const struct flyt_call_desc descs[FLYT_CALL_LIMIT] = {
#include "flyt_calls_desc.inc"
};

#define CASES_PER_CALL 200

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A value for an argument of this kind: often valid, sometimes not. */
static uint64_t arg_for(uint8_t kind, uint64_t stream, uint64_t mem)
{
    uint64_t r = next();
    switch (kind) {
    case FLYT_ARG_STREAM: return r % 4 == 0 ? r : r % 4 == 1 ? stream : r % 3; /* 0/1/2 fixed */
    case FLYT_ARG_DPTR: return r % 3 == 0 ? r : mem + (r >> 8) % 4096;
    case FLYT_ARG_DEVICE: return r % 4 == 0 ? r : 0;
    case FLYT_ARG_SCALAR: return r % 2 ? r % 16 : r;
    default: return r;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_server_calls FLYT_SERVER_BIN\n");
        return 2;
    }
    th_watchdog(240);
    th_server_start(argv[1], NULL);
    int fd = th_connect();
    CHECK_GE(fd, 0, "a session");
    CHECK_EQ(th_hello(fd), 0, "a session");
    uint64_t mem = 0;
    CHECK_EQ(th_alloc(fd, 8192, &mem), 0, "an allocation for the addresses");
    flyt_req_stream_create sc = {0, 0, 0};
    flyt_rep_u64 u;
    CHECK_EQ(th_call_rep(fd, FLYT_OP_STREAM_CREATE, &sc, sizeof sc, NULL, 0, &u, sizeof u), 0,
             "a stream for the handles");
    uint64_t stream = u.value;

    unsigned calls = 0, answered = 0, succeeded = 0;
    for (uint32_t id = 1; id < FLYT_CALL_LIMIT; id++) {
        const struct flyt_call_desc *d = &descs[id];
        if (d->symbol == NULL)
            continue;
        calls++;
        for (int n = 0; n < CASES_PER_CALL; n++) {
            flyt_req_call req = {.id = id, .in_size = d->in_size};
            for (unsigned i = 0; i < d->nargs; i++)
                req.args[i] = arg_for(d->kinds[i], stream, mem);
            unsigned char in[FLYT_CALL_MAX_BYTES];
            for (size_t i = 0; i < sizeof in; i++)
                in[i] = (unsigned char)next();
            if (d->async && n % 2) {
                if (th_post(fd, FLYT_OP_CALL, &req, sizeof req, in, d->in_size) != 0) {
                    CHECK(0, "%s case %d: cannot send it without reply", d->symbol, n);
                    return 1;
                }
                continue;
            }
            struct th_reply rep;
            int rc = th_call(fd, FLYT_OP_CALL, &req, sizeof req, in, d->in_size, &rep);
            if (rc == -1000) {
                CHECK(0, "%s case %d: no answer (the session ended)", d->symbol, n);
                return 1;
            }
            /* a success carries exactly the out-pointee behind the reply struct */
            if (rc == 0 && rep.body_len != sizeof(flyt_rep_call) + (d->out_size ? d->out_size : 0) &&
                !(d->out_size == 0 && rep.body_len == sizeof(flyt_rep_call)))
                CHECK(0, "%s case %d: a reply of %zu bytes", d->symbol, n, rep.body_len);
            th_reply_free(&rep);
            answered++;
            succeeded += rc == 0;
        }
    }
    CHECK_GT(calls, 0,
             "%u plain calls, %d cases each: %u answered, %u of them succeeded", calls, CASES_PER_CALL, answered, succeeded);
    flyt_rep_i32 cnt;
    flyt_req_none none = {0};
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &cnt, sizeof cnt), 0,
             "the session still answers");
    CHECK(th_server_alive(), "the server is alive, no crash, no sanitizer report");
    CHECK(th_server_log_clean(), "the server is alive, no crash, no sanitizer report");
    th_passed();
    printf("all plain-call checks passed\n");
    return 0;
}
