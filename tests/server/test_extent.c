/*
 * The free-extent list of src/server/extent.c against a byte map: random
 * allocations (with alignments), exact takes and frees over a small range,
 * each result compared with what the map says must happen, plus the edge
 * cases (double free, out of range, full).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/check.h"
#include "extent.h"

#define RANGE 4096u

static unsigned char used[RANGE]; /* the reference: 1 where taken */

static int map_free(uint64_t off, uint64_t len)
{
    if (off + len > RANGE)
        return 0;
    for (uint64_t i = off; i < off + len; i++)
        if (used[i])
            return 0;
    return 1;
}

static void map_set(uint64_t off, uint64_t len, unsigned char v) { memset(used + off, v, len); }

/* The lowest aligned free run of len in the map: what first fit must answer. */
static int map_first_fit(uint64_t len, uint64_t align, uint64_t *off)
{
    for (uint64_t at = 0; at + len <= RANGE; at += align)
        if (map_free(at, len)) {
            *off = at;
            return 1;
        }
    return 0;
}

static void edges(void)
{
    struct flyt_extents e;
    CHECK_EQ(flyt_extents_init(&e, 1024), 0, "init");
    uint64_t off = 7;
    CHECK_EQ(flyt_extents_alloc(&e, 0, 1, &off), -1, "a zero-length allocation is refused");
    CHECK_EQ(flyt_extents_alloc(&e, 2048, 1, &off), -1, "more than the range is refused");
    CHECK_EQ(flyt_extents_alloc(&e, 1024, 1, &off), 0, "the whole range");
    CHECK_EQ(off, 0, "at 0");
    CHECK_EQ(flyt_extents_alloc(&e, 1, 1, &off), -1, "a full range refuses");
    CHECK_EQ(flyt_extents_put(&e, 0, 512), 0, "half back");
    CHECK_EQ(flyt_extents_put(&e, 256, 16), -1, "a double free is refused");
    CHECK_EQ(flyt_extents_put(&e, 1000, 100), -1, "past the end is refused");
    CHECK_EQ(flyt_extents_take(&e, 500, 20), -1, "a take over taken bytes is refused");
    CHECK_EQ(flyt_extents_take(&e, 100, 20), 0, "a take inside the free half");
    CHECK_EQ(e.avail, 512u - 20u, "the free bytes add up");
    CHECK_EQ(flyt_extents_put(&e, 100, 20), 0, "back");
    CHECK_EQ(flyt_extents_put(&e, 512, 512), 0, "the rest back");
    CHECK(flyt_extents_empty(&e), "all free again");
    CHECK_EQ(e.n, 1u, "merged into one extent");
    flyt_extents_destroy(&e);
}

static void random_against_map(void)
{
    struct flyt_extents e;
    CHECK_EQ(flyt_extents_init(&e, RANGE), 0, "init");
    struct {
        uint64_t off, len;
    } live[512];
    int nlive = 0, mismatches = 0;
    srand(12345);
    for (int step = 0; step < 200000; step++) {
        int op = rand() % 3;
        if (op == 0 || nlive == 0) { /* allocate */
            uint64_t len = 1 + (uint64_t)(rand() % 200), align = 1u << (rand() % 7), off = 0, want = 0;
            int fits = map_first_fit(len, align, &want);
            int got = flyt_extents_alloc(&e, len, align, &off) == 0;
            if (got != fits || (got && off != want)) {
                mismatches++;
                continue;
            }
            if (got && nlive < 512) {
                map_set(off, len, 1);
                live[nlive].off = off, live[nlive++].len = len;
            } else if (got) {
                flyt_extents_put(&e, off, len);
            }
        } else if (op == 1) { /* take exactly */
            uint64_t off = (uint64_t)(rand() % RANGE), len = 1 + (uint64_t)(rand() % 64);
            int ok = map_free(off, len);
            if ((flyt_extents_take(&e, off, len) == 0) != ok) {
                mismatches++;
                continue;
            }
            if (ok && nlive < 512) {
                map_set(off, len, 1);
                live[nlive].off = off, live[nlive++].len = len;
            } else if (ok) {
                flyt_extents_put(&e, off, len);
            }
        } else { /* free one */
            int i = rand() % nlive;
            mismatches += flyt_extents_put(&e, live[i].off, live[i].len) != 0;
            map_set(live[i].off, live[i].len, 0);
            mismatches += flyt_extents_put(&e, live[i].off, live[i].len) != -1; /* twice: refused */
            live[i] = live[--nlive];
        }
    }
    CHECK_EQ(mismatches, 0, "200000 random steps answered as the byte map says");
    uint64_t free_bytes = 0;
    for (unsigned i = 0; i < RANGE; i++)
        free_bytes += !used[i];
    CHECK_EQ(e.avail, free_bytes, "the free bytes equal the map's");
    for (int i = 0; i < nlive; i++)
        flyt_extents_put(&e, live[i].off, live[i].len);
    CHECK(flyt_extents_empty(&e), "everything freed: all free");
    CHECK_EQ(e.n, 1u, "one extent");
    flyt_extents_destroy(&e);
}

int main(void)
{
    edges();
    random_against_map();
    printf("PASS\n");
    return 0;
}
