/*
 * flyt-checkpoint: asks a managed flyt-server's connected session to write
 * its state (docs/state-format.md), as the node manager does (both through
 * flyt_ckpt_request.h): the request goes into the server's status page
 * (--status-file), SIGURG wakes the session, and the answer is waited for.
 *
 * usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop]
 * Prints "checkpoint: BYTES bytes in MS ms"; exit 0, or 1 with the reason.
 */
#include <stdio.h>
#include <string.h>

#include "flyt_ckpt_request.h"

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--stop") != 0)) {
        fprintf(stderr, "usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop]\n");
        return 2;
    }
    struct flyt_ckpt_outcome out;
    char err[512];
    if (flyt_ckpt_request(argv[1], argv[2], argc == 4, 600000, &out, err, sizeof err) != 0 ||
        out.result != 0) {
        fprintf(stderr, "flyt-checkpoint: %s\n", err);
        return 1;
    }
    printf("checkpoint: %llu bytes in %.3f ms\n", (unsigned long long)out.bytes,
           (double)out.ns / 1e6);
    return 0;
}
