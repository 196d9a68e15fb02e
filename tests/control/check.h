/* CHECK for the control-plane tests: prints each check; on the first failure says where
 * and exits non-zero (atexit handlers clean up). cond may be a pointer. */
#ifndef FLYT_CONTROL_CHECK_H
#define FLYT_CONTROL_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        int ok_ = !!(cond);                                                     \
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
