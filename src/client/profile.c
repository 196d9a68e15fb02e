/*
 * FLYT_PROFILE=1: where a program's time in Flyt went, written to stderr at
 * exit. Per operation: how many went out, how many of them waited for a
 * reply and how long (from the send to the reply, which includes the server's
 * work), and the bytes they carried; besides, the time spent hashing kernel
 * images. It answers "why is this program slower through Flyt" without a
 * debugger, and costs two clock reads per call only while it is on.
 *
 * Counters are atomics indexed by op: calls come from any thread.
 */
#include "client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_clock.h"

#define PROFILE_OPS 512 /* above every op number (flyt_ops.def) */

struct op_counts {
    _Atomic uint64_t sent, waited, wait_ns, bytes;
};

static struct op_counts counts[PROFILE_OPS];
static _Atomic uint64_t hash_ns, hash_bytes, hash_images;
static _Atomic uint64_t trim_images, trim_before, trim_after;
static int enabled = -1; /* -1: FLYT_PROFILE not read yet */

static void print_profile(void);

static void forget_counts(void)
{
    memset(counts, 0, sizeof counts);
    atomic_store(&hash_ns, 0);
    atomic_store(&hash_bytes, 0);
    atomic_store(&hash_images, 0);
    atomic_store(&trim_images, 0);
    atomic_store(&trim_before, 0);
    atomic_store(&trim_after, 0);
}

int flyt_profiling(void)
{
    int on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (on >= 0)
        return on;
    const char *v = getenv("FLYT_PROFILE");
    on = v != NULL && *v != '\0' && strcmp(v, "0") != 0;
    int unset = -1;
    if (__atomic_compare_exchange_n(&enabled, &unset, on, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) && on) {
        atexit(print_profile);
        pthread_atfork(NULL, NULL, forget_counts); /* a child's table is its own */
    }
    return __atomic_load_n(&enabled, __ATOMIC_RELAXED);
}

void flyt_profile_call(uint16_t op, uint64_t bytes, uint64_t wait_ns, int waited)
{
    if (op >= PROFILE_OPS)
        return;
    struct op_counts *c = &counts[op];
    atomic_fetch_add_explicit(&c->sent, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->bytes, bytes, memory_order_relaxed);
    if (waited) {
        atomic_fetch_add_explicit(&c->waited, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->wait_ns, wait_ns, memory_order_relaxed);
    }
}

void flyt_profile_hash(uint64_t bytes, uint64_t ns)
{
    atomic_fetch_add_explicit(&hash_images, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hash_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&hash_ns, ns, memory_order_relaxed);
}

void flyt_profile_trim(uint64_t before, uint64_t after)
{
    if (!flyt_profiling())
        return;
    atomic_fetch_add_explicit(&trim_images, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&trim_before, before, memory_order_relaxed);
    atomic_fetch_add_explicit(&trim_after, after, memory_order_relaxed);
}

static int by_wait_desc(const void *a, const void *b)
{
    uint64_t x = counts[*(const int *)a].wait_ns, y = counts[*(const int *)b].wait_ns;
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

static void print_profile(void)
{
    int order[PROFILE_OPS], n = 0;
    uint64_t total_ns = 0, total_sent = 0;
    for (int op = 0; op < PROFILE_OPS; op++)
        if (counts[op].sent) {
            order[n++] = op;
            total_ns += counts[op].wait_ns;
            total_sent += counts[op].sent;
        }
    if (total_sent == 0 && hash_images == 0)
        return; /* e.g. a forked child that made no call */
    qsort(order, (size_t)n, sizeof order[0], by_wait_desc);
    fprintf(stderr, "flyt: profile of pid %ld: %llu requests, %.1f ms waiting for replies; "
            "%llu kernel images hashed (%.1f MB) in %.1f ms\n", (long)getpid(),
            (unsigned long long)total_sent, total_ns / 1e6, (unsigned long long)hash_images,
            hash_bytes / 1e6, hash_ns / 1e6);
    if (trim_images)
        fprintf(stderr, "flyt: %llu kernel images cut to this GPU's architecture: %.1f MB of %.1f MB shipped\n",
                (unsigned long long)trim_images, trim_after / 1e6, trim_before / 1e6);
    fprintf(stderr, "flyt: %-26s %9s %9s %11s %9s %12s\n", "op", "sent", "waited", "wait ms",
            "mean us", "bytes");
    for (int i = 0; i < n; i++) {
        const struct op_counts *c = &counts[order[i]];
        fprintf(stderr, "flyt: %-26s %9llu %9llu %11.2f %9.1f %12llu\n", flyt_op_name((unsigned)order[i]),
                (unsigned long long)c->sent, (unsigned long long)c->waited, c->wait_ns / 1e6,
                c->waited ? c->wait_ns / 1e3 / (double)c->waited : 0.0, (unsigned long long)c->bytes);
    }
}
