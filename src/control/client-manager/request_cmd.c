/* flyt-client-manager request: a program's (or a person's) request, from inside the VM, for
 * another share of the VM's GPU, through the running client manager (flyt_share.h). */
#include "cmgr.h"
#include "flyt_share.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void request_usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-client-manager request [--sm N|+N|-N] [--memory SIZE|+SIZE|-SIZE]\n"
            "                                   [--reason TEXT] [--socket PATH]\n"
            "\n"
            "Asks the VM's running client manager for more or fewer SMs or memory for the\n"
            "VM's share (the one share all its CUDA processes run on), within the bounds the\n"
            "operator set (flytctl vm update ID --sm-min/--sm-max/--memory-min/--memory-max).\n"
            "The cluster manager grants it at once when the GPU has the capacity (the running\n"
            "programs see the new share), queues it when not (granted as capacity frees; a\n"
            "later request replaces a queued one), or refuses it with the reason.\n"
            "\n"
            "  --sm N|+N|-N      SMs: the new count, or a change (a multiple of the GPU's SM\n"
            "                    group size, 8 on Hopper)\n"
            "  --memory SIZE|+SIZE|-SIZE  memory: the new size, or a change, with a unit\n"
            "                    (KiB, MiB, GiB, TiB; KB, MB, GB, TB), e.g. +1GiB\n"
            "  --reason TEXT     why, for the record (flytctl vm requests ID lists it)\n"
            "  --socket PATH     the client manager's socket (default $FLYT_CLIENT_MANAGER,\n"
            "                    else /run/flyt/client.sock)\n"
            "\n"
            "Prints \"granted\" or \"queued\" with the request's id and the share now (SMs,\n"
            "bytes) and exits 0; a refusal prints the reason on stderr and exits 1; a bad\n"
            "command line exits 2.\n"
            "\nExample:\n  flyt-client-manager request --sm +16 --memory +1GiB --reason 'batch 2x'\n");
}

int cmgr_request_main(int argc, char **argv)
{
    static const struct option opts[] = {{"sm", required_argument, NULL, 's'},
                                         {"memory", required_argument, NULL, 'm'},
                                         {"reason", required_argument, NULL, 'r'},
                                         {"socket", required_argument, NULL, 'S'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *sm = NULL, *memory = NULL, *reason = NULL, *sock = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': sm = optarg; break;
        case 'm': memory = optarg; break;
        case 'r': reason = optarg; break;
        case 'S': sock = optarg; break;
        case 'h': request_usage(stdout); return 0;
        default: request_usage(stderr); return 2;
        }
    }
    if (optind < argc || (!sm && !memory)) {
        fprintf(stderr, "flyt-client-manager request: give --sm, --memory or both\n");
        request_usage(stderr);
        return 2;
    }
    struct flyt_share_answer ans;
    if (flyt_share_request(sock, sm, memory, reason, &ans) < 0) {
        fprintf(stderr, "flyt-client-manager request: %s\n", ans.message);
        return 1;
    }
    printf("%s: request %s; the VM's share is now %lld SMs and %lld bytes%s\n", ans.state,
           ans.request, ans.sm, ans.memory,
           strcmp(ans.state, "queued") == 0 ? " (granted when the GPU has the capacity)" : "");
    return 0;
}
