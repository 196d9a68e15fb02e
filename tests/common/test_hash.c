/* flyt_hash, the one hash table: probe runs with collisions, deletion in the
 * middle of a run and across the end of the table, growth, iteration (with
 * removal), checked against a plain array of what should be there. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flyt_hash.h"

#define MODEL_KEYS 4096u

/* Keys 1..MODEL_KEYS-1 and whether each is in the table (value key * 7). */
static unsigned char in_model[MODEL_KEYS];

/* n distinct keys whose home slot in a table of cap slots is home. */
static void keys_homed_at(size_t home, size_t cap, uint64_t *keys, int n)
{
    for (uint64_t k = 1; n > 0; k++)
        if (flyt_hash_home(k, cap) == home)
            keys[--n] = k;
}

/* How many keys of the model the table gets wrong either way. */
static size_t model_mismatches(const flyt_hash *h)
{
    size_t wrong = 0, present = 0;
    for (uint64_t k = 1; k < MODEL_KEYS; k++) {
        flyt_hash_slot *s = flyt_hash_find(h, k);
        if (in_model[k]) {
            present++;
            wrong += s == NULL || s->value.u64 != k * 7;
        } else {
            wrong += s != NULL;
        }
    }
    return wrong + (present != flyt_hash_count(h));
}

/* Iterates, counting visits per key; 0 when each entry came exactly once. */
static size_t iteration_mismatches(const flyt_hash *h)
{
    static unsigned visits[MODEL_KEYS];
    memset(visits, 0, sizeof visits);
    flyt_hash_iter it;
    flyt_hash_slot *s;
    flyt_hash_iter_init(h, &it);
    size_t wrong = 0;
    while ((s = flyt_hash_iter_next(h, &it)) != NULL)
        if (s->key < MODEL_KEYS)
            visits[s->key]++;
        else
            wrong++;
    for (uint64_t k = 1; k < MODEL_KEYS; k++)
        wrong += visits[k] != (in_model[k] ? 1u : 0u);
    return wrong;
}

static int add(flyt_hash *h, uint64_t k)
{
    flyt_hash_slot *s = flyt_hash_insert(h, k);
    if (s == NULL)
        return -1;
    s->value.u64 = k * 7;
    in_model[k] = 1;
    return 0;
}

static void test_empty(void)
{
    flyt_hash h;
    flyt_hash_init(&h);
    CHECK(flyt_hash_find(&h, 5) == NULL, "an empty table finds nothing");
    CHECK_EQ(flyt_hash_remove(&h, 5), 0, "nor removes anything");
    flyt_hash_iter it;
    flyt_hash_iter_init(&h, &it);
    CHECK(flyt_hash_iter_next(&h, &it) == NULL, "nor iterates over anything");
    CHECK_EQ(add(&h, 5), 0, "a first insert");
    CHECK(flyt_hash_find(&h, 0) == NULL, "key 0 (the empty mark) is never found");
    CHECK_EQ(h.cap, 16, "the first insert makes 16 slots");
    in_model[5] = 0;
    flyt_hash_free(&h);
    CHECK_EQ(flyt_hash_count(&h), 0, "free leaves an empty table");
}

/* One probe run of five keys homed at slot home (and one homed just after
 * it, pushed behind them), then removals from its middle and its start. */
static void test_collisions_at(size_t home)
{
    flyt_hash h;
    flyt_hash_init(&h);
    uint64_t same[5], next[1];
    keys_homed_at(home, 16, same, 5);
    keys_homed_at((home + 1) & 15, 16, next, 1);
    for (int i = 0; i < 5; i++)
        add(&h, same[i]);
    add(&h, next[0]);
    CHECK_EQ(h.cap, 16, "six keys, home %zu: still 16 slots (no growth hides the run)", home);
    CHECK_EQ(model_mismatches(&h), 0, "five keys homed at %zu and one after them all found", home);
    CHECK_EQ(flyt_hash_remove(&h, same[2]), 1, "a key from the middle of the run removed");
    in_model[same[2]] = 0;
    CHECK_EQ(model_mismatches(&h), 0, "the keys behind it shifted back and are still found");
    CHECK_EQ(flyt_hash_remove(&h, same[2]), 0, "removing it again finds nothing");
    CHECK_EQ(flyt_hash_remove(&h, same[0]), 1, "the run's first key removed");
    in_model[same[0]] = 0;
    CHECK_EQ(model_mismatches(&h), 0, "the rest still found");
    CHECK_EQ(iteration_mismatches(&h), 0, "iteration visits each of the rest once");
    for (int i = 0; i < 5; i++)
        in_model[same[i]] = 0;
    in_model[next[0]] = 0;
    flyt_hash_free(&h);
}

/* A hole in the last slot with an entry at its home in slot 0 behind it:
 * that entry must stay (moving it before its home would lose it). */
static void test_wrap_stays(void)
{
    flyt_hash h;
    flyt_hash_init(&h);
    uint64_t last[2], first[1];
    keys_homed_at(15, 16, last, 2);
    keys_homed_at(0, 16, first, 1);
    add(&h, last[0]); /* slot 15 */
    add(&h, first[0]); /* slot 0 */
    add(&h, last[1]); /* slot 1, wrapped */
    flyt_hash_remove(&h, last[0]);
    in_model[last[0]] = 0;
    CHECK_EQ(model_mismatches(&h), 0, "after emptying the last slot, both entries behind it found");
    in_model[first[0]] = in_model[last[1]] = 0;
    flyt_hash_free(&h);
}

static void test_growth(void)
{
    flyt_hash h;
    flyt_hash_init(&h);
    int failed = 0;
    for (uint64_t k = 1; k < MODEL_KEYS; k++)
        failed |= add(&h, k);
    CHECK_EQ(failed, 0, "%u sequential keys inserted", MODEL_KEYS - 1);
    CHECK_EQ(model_mismatches(&h), 0, "all found with their values after growing");
    CHECK_LE(flyt_hash_count(&h) * 2, h.cap, "the table is at most half full");
    CHECK_EQ(h.cap & (h.cap - 1), 0, "its size a power of two");
    size_t cap = h.cap;
    flyt_hash_clear(&h);
    memset(in_model, 0, sizeof in_model);
    CHECK_EQ(flyt_hash_count(&h), 0, "clear empties it");
    CHECK_EQ(h.cap, cap, "and keeps its slots");
    CHECK_EQ(model_mismatches(&h), 0, "nothing is found after clear");
    flyt_hash_free(&h);

    /* aligned pointers: only high bits differ */
    flyt_hash_init(&h);
    size_t wrong = 0;
    for (uint64_t i = 1; i <= 2000; i++) {
        flyt_hash_slot *s = flyt_hash_insert(&h, 0x7f0000000000ull + (i << 21));
        if (s)
            s->value.u64 = i;
    }
    for (uint64_t i = 1; i <= 2000; i++) {
        flyt_hash_slot *s = flyt_hash_find(&h, 0x7f0000000000ull + (i << 21));
        wrong += s == NULL || s->value.u64 != i;
    }
    CHECK_EQ(wrong, 0, "2000 pointers 2 MiB apart found with their values");
    flyt_hash_free(&h);
}

/* Pseudo-random inserts and removals (a fixed seed), checked as they go. */
static void test_random(void)
{
    flyt_hash h;
    flyt_hash_init(&h);
    uint64_t x = 88172645463325252ull;
    size_t wrong = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 2000; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t k = 1 + x % (MODEL_KEYS - 1);
            if (in_model[k]) {
                wrong += flyt_hash_remove(&h, k) != 1;
                in_model[k] = 0;
            } else {
                wrong += add(&h, k) != 0;
            }
        }
        wrong += model_mismatches(&h) + iteration_mismatches(&h);
    }
    CHECK_EQ(wrong, 0, "40000 random inserts and removals agree with the model");
    memset(in_model, 0, sizeof in_model);
    flyt_hash_free(&h);
}

/* Removing while iterating: each entry visited once, exactly the chosen
 * ones gone, also where probe runs wrap past the end of the table. */
static void test_iter_remove(void)
{
    flyt_hash h;
    flyt_hash_init(&h);
    uint64_t wrap[6];
    keys_homed_at(14, 16, wrap, 6); /* a run over slots 14, 15, 0, 1, ... */
    for (int i = 0; i < 6; i++)
        add(&h, wrap[i]);
    CHECK_EQ(h.cap, 16, "a run that wraps past the end of 16 slots");
    size_t visits = 0, removed = 0;
    flyt_hash_iter it;
    flyt_hash_slot *s;
    flyt_hash_iter_init(&h, &it);
    while ((s = flyt_hash_iter_next(&h, &it)) != NULL) {
        visits++;
        if (s->key % 2 == 0) {
            in_model[s->key] = 0;
            flyt_hash_iter_remove(&h, &it);
            removed++;
        }
    }
    CHECK_EQ(visits, 6, "each of the six visited once while the even ones were removed");
    CHECK_EQ(model_mismatches(&h), 0, "exactly the even ones are gone (%zu)", removed);
    for (int i = 0; i < 6; i++)
        in_model[wrap[i]] = 0;
    flyt_hash_free(&h);

    flyt_hash_init(&h);
    for (uint64_t k = 1; k < MODEL_KEYS; k++)
        add(&h, k);
    visits = 0;
    flyt_hash_iter_init(&h, &it);
    while ((s = flyt_hash_iter_next(&h, &it)) != NULL) {
        visits++;
        if (s->key % 3 != 0) {
            in_model[s->key] = 0;
            flyt_hash_iter_remove(&h, &it);
        }
    }
    CHECK_EQ(visits, MODEL_KEYS - 1, "a large table: every entry visited once while removing");
    CHECK_EQ(model_mismatches(&h), 0, "only the multiples of three are left");
    CHECK_EQ(iteration_mismatches(&h), 0, "and a second iteration visits each once");
    memset(in_model, 0, sizeof in_model);
    flyt_hash_free(&h);
}

int main(void)
{
    test_empty();
    test_collisions_at(3);
    test_collisions_at(13); /* the run wraps past the end of the table */
    test_wrap_stays();
    test_growth();
    test_random();
    test_iter_remove();
    return check_done();
}
