/* The client tests' CHECK: says ok or FAIL with what was checked, counts
 * failures and carries on, so one run shows every failure; CHECK_DONE()
 * prints the summary line the run scripts look for and gives the exit code. */
#ifndef FLYT_CLIENT_CHECK_H
#define FLYT_CLIENT_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) {                                                             \
            printf("ok: " __VA_ARGS__);                                         \
        } else {                                                                \
            printf("FAIL (%s:%d): ", __FILE__, __LINE__);                       \
            printf(__VA_ARGS__);                                                \
            failures++;                                                         \
        }                                                                       \
        printf("\n");                                                           \
    } while (0)

#define CHECK_DONE() (printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures), failures != 0)

#endif
