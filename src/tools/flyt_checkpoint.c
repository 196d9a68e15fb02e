/*
 * flyt-checkpoint: asks a managed flyt-server's connected session to write
 * its state (docs/state-format.md), as the node manager does (both through
 * flyt_ckpt_request.h): the request goes into the server's status page
 * (--status-file), SIGURG wakes the session, and the answer is waited for.
 *
 * usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop [--suspend]] [--to ADDR --secret-file F]
 * --stop: the session ends after it; --suspend: it is preempted, its client waits
 * for a restore without a deadline.
 * --to: the session also streams the state to the receiving server at ADDR
 * (flyt-server --restore-listen), proving the secret in F.
 * Prints "checkpoint: BYTES bytes in MS ms"; exit 0, or 1 with the reason.
 */
#include <stdio.h>
#include <string.h>

#include "flyt_ckpt_request.h"
#include "flyt_server_status.h"
#include "flyt_token.h"

static int usage(void)
{
    fprintf(stderr, "usage: flyt-checkpoint STATUS_FILE STATE_FILE [--stop [--suspend]] "
                    "[--to tcp://HOST:PORT --secret-file FILE]\n");
    return 2;
}

int main(int argc, char **argv)
{
    uint32_t flags = 0;
    const char *to = NULL, *secret_file = NULL;
    if (argc < 3)
        return usage();
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--stop") == 0)
            flags |= FLYT_CKPT_STOP;
        else if (strcmp(argv[i], "--suspend") == 0)
            flags |= FLYT_CKPT_SUSPEND;
        else if (strcmp(argv[i], "--to") == 0 && i + 1 < argc)
            to = argv[++i];
        else if (strcmp(argv[i], "--secret-file") == 0 && i + 1 < argc)
            secret_file = argv[++i];
        else
            return usage();
    }
    if (!to != !secret_file || flags == FLYT_CKPT_SUSPEND)
        return usage();
    flyt_token_line secret[1] = {""};
    char err[512];
    if (secret_file && flyt_token_file_read(secret_file, 0077, 1, secret, 1, err, sizeof err) < 0) {
        fprintf(stderr, "flyt-checkpoint: %s\n", err);
        return 1;
    }
    struct flyt_ckpt_dest dest = {to, secret[0]};
    struct flyt_ckpt_outcome out;
    if (flyt_ckpt_request(argv[1], argv[2], &dest, flags, 600000, &out, err, sizeof err) != 0 ||
        out.result != 0) {
        fprintf(stderr, "flyt-checkpoint: %s\n", err);
        return 1;
    }
    printf("checkpoint: %llu bytes in %.3f ms%s", (unsigned long long)out.bytes,
           (double)out.ns / 1e6, to ? " (streamed)" : "");
    if (out.precopy_ms)
        printf(", after a pre-copy of its kernel images of %u ms", out.precopy_ms);
    printf("\n");
    return 0;
}
