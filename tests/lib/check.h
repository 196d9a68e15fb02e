/* The one set of test assertions (libuv's ASSERT_EQ style): every check
 * prints "ok" or "FAIL" with what it checked; a failed comparison prints
 * both values and where, and ends the test with exit status 1 (atexit
 * handlers clean up). The description is a printf format and required.
 *
 *   CHECK(cond, desc...)          a condition (pointers: non-NULL)
 *   CHECK_EQ(a, b, desc...)       integers, handles or pointers equal
 *   CHECK_NE / CHECK_LT / CHECK_LE / CHECK_GT / CHECK_GE
 *   CHECK_STR_EQ(a, b, desc...)   C strings equal (NULL is no string)
 *   CHECK_MEM_EQ(a, b, n, desc...) n bytes equal; the first difference shown
 *
 * A test that cannot run a part of itself says so with check_skip_part();
 * check_done() then returns 77, which CMake's SKIP_RETURN_CODE reports as
 * skipped, not passed. A test that cannot run at all: check_skip(). */
#ifndef FLYT_TEST_CHECK_H
#define FLYT_TEST_CHECK_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP_CODE 77

static int check_parts_skipped;

static inline void check_failed(const char *file, int line, const char *expr)
{
    printf("        (%s:%d: %s)\n", file, line, expr);
    fflush(stdout);
    exit(1);
}

static inline int check_report(int ok, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int check_report(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf(ok ? "  ok    " : "  FAIL  ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return ok;
}

/* The condition is evaluated before the description's arguments, which may
 * print what it produced. */
#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        int ok_ = !!(cond);                                                     \
        if (!check_report(ok_, __VA_ARGS__))                                    \
            check_failed(__FILE__, __LINE__, #cond);                            \
    } while (0)

/* Both sides are compared as 64-bit integers: equality is exact for any
 * integer, handle or pointer; order is signed (intmax_t). */
#define CHECK_CMP_(a, op, b, ...)                                               \
    do {                                                                        \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                        \
        if (!check_report(a_ op b_, __VA_ARGS__)) {                             \
            printf("        %s = %jd (0x%jx)\n        %s = %jd (0x%jx)\n", #a,  \
                   a_, (uintmax_t)a_, #b, b_, (uintmax_t)b_);                   \
            check_failed(__FILE__, __LINE__, #a " " #op " " #b);                \
        }                                                                       \
    } while (0)

#define CHECK_EQ(a, b, ...) CHECK_CMP_(a, ==, b, __VA_ARGS__)
#define CHECK_NE(a, b, ...) CHECK_CMP_(a, !=, b, __VA_ARGS__)
#define CHECK_LT(a, b, ...) CHECK_CMP_(a, <, b, __VA_ARGS__)
#define CHECK_LE(a, b, ...) CHECK_CMP_(a, <=, b, __VA_ARGS__)
#define CHECK_GT(a, b, ...) CHECK_CMP_(a, >, b, __VA_ARGS__)
#define CHECK_GE(a, b, ...) CHECK_CMP_(a, >=, b, __VA_ARGS__)

#define CHECK_STR_EQ(a, b, ...)                                                 \
    do {                                                                        \
        const char *a_ = (a), *b_ = (b);                                        \
        if (!check_report(a_ && b_ && strcmp(a_, b_) == 0, __VA_ARGS__)) {      \
            printf("        %s = \"%s\"\n        %s = \"%s\"\n", #a,            \
                   a_ ? a_ : "(null)", #b, b_ ? b_ : "(null)");                 \
            check_failed(__FILE__, __LINE__, #a " equals " #b);                 \
        }                                                                       \
    } while (0)

static inline size_t check_first_difference(const void *a, const void *b, size_t n)
{
    const unsigned char *pa = (const unsigned char *)a, *pb = (const unsigned char *)b; /* C++ too */
    size_t i = 0;
    while (i < n && pa[i] == pb[i])
        i++;
    return i;
}

#define CHECK_MEM_EQ(a, b, n, ...)                                              \
    do {                                                                        \
        size_t n_ = (n), at_ = check_first_difference((a), (b), n_);            \
        if (!check_report(at_ == n_, __VA_ARGS__)) {                            \
            printf("        first difference at byte %zu of %zu: 0x%02x vs 0x%02x\n", \
                   at_, n_, ((const unsigned char *)(a))[at_],                  \
                   ((const unsigned char *)(b))[at_]);                          \
            check_failed(__FILE__, __LINE__, #a " equals " #b);                 \
        }                                                                       \
    } while (0)

static inline void check_skip_part(const char *why)
{
    printf("  skip  %s\n", why);
    check_parts_skipped++;
}

/* The exit status of a test whose checks all passed. */
static inline int check_done(void)
{
    if (check_parts_skipped)
        printf("SKIPPED: %d part(s) not run\n", check_parts_skipped);
    fflush(stdout);
    return check_parts_skipped ? CHECK_SKIP_CODE : 0;
}

static inline void check_skip(const char *why)
{
    printf("SKIPPED: %s\n", why);
    fflush(stdout);
    exit(CHECK_SKIP_CODE);
}

#endif
