/* The server tests' CHECK: prints what was checked, and on the first failure
 * says where and exits non-zero (atexit handlers clean up). */
#ifndef FLYT_TEST_CHECK_H
#define FLYT_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        int ok_ = (cond);                                                       \
        printf(ok_ ? "  ok    " : "  FAIL  ");                                  \
        printf(__VA_ARGS__);                                                    \
        printf("\n");                                                           \
        if (!ok_) {                                                             \
            printf("        (%s:%d: %s)\n", __FILE__, __LINE__, #cond);        \
            fflush(stdout);                                                     \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#endif
