/*
 * The clocks Flyt measures with: the monotonic clock for durations and
 * deadlines (never steps with the wall clock), any clock in nanoseconds where
 * a record needs wall time. One helper for the whole tree.
 */
#ifndef FLYT_CLOCK_H
#define FLYT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t flyt_clock_ns(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline uint64_t flyt_mono_ns(void) { return flyt_clock_ns(CLOCK_MONOTONIC); }

static inline long long flyt_mono_ms(void) { return (long long)(flyt_mono_ns() / 1000000u); }

#endif
