/*
 * FLYT_HOST_BACKEND_PRINTF: what the host backend's fake device "prints",
 * so that CI can test how the driver's output reaches the application
 * (docs/device-output.md) without a GPU. The variable holds items separated
 * by ';'; the k-th is printed at the backend's k-th print point: its
 * opening (the first; a driver may warn as it starts), a device synchronise,
 * or a memset standing in for a kernel launch (on a GPU a launch flushes
 * what earlier kernels printed). An item is pieces separated
 * by ',': out:TEXT (TEXT and a newline on stdout, through stdio as the
 * driver may print), err:TEXT (on stderr), big:N (N lines of 64 bytes on
 * stdout: "device line NNNNNNN " and x's); an empty item prints nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define BIG_LINE_FILL "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" /* to 64 bytes a line */

static void print_piece(const char *p, size_t n)
{
    if (n >= 4 && strncmp(p, "out:", 4) == 0) {
        fprintf(stdout, "%.*s\n", (int)(n - 4), p + 4);
    } else if (n >= 4 && strncmp(p, "err:", 4) == 0) {
        fprintf(stderr, "%.*s\n", (int)(n - 4), p + 4);
    } else if (n >= 4 && strncmp(p, "big:", 4) == 0) {
        unsigned long lines = strtoul(p + 4, NULL, 10);
        for (unsigned long i = 0; i < lines; i++)
            fprintf(stdout, "device line %07lu %s\n", i, BIG_LINE_FILL);
    }
}

void flyt_host_fake_print(unsigned point)
{
    const char *p = getenv("FLYT_HOST_BACKEND_PRINTF");
    if (p == NULL)
        return;
    for (unsigned i = 0; i < point; i++) {
        p = strchr(p, ';');
        if (p == NULL)
            return;
        p++;
    }
    for (;;) {
        size_t n = strcspn(p, ",;");
        print_piece(p, n);
        if (p[n] != ',')
            return;
        p += n + 1;
    }
}
