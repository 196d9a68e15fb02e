/* flyt-node-manager: small helpers the modules share (nm.h); apart from main.c so
 * that tests and fuzz targets can link the modules without the daemon's main. */
#include "nm.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

long long nm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int nm_valid_sid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= NM_SID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return s[0] != '.';
}

const struct nm_gpu *nm_gpu_by_index(const struct nm *node_manager, int index)
{
    for (int i = 0; i < node_manager->ngpus; i++)
        if (node_manager->gpus[i].index == index)
            return &node_manager->gpus[i];
    return NULL;
}

void nm_host_for_url(const char *host, char *out, size_t outlen)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET6, host, buf) == 1)
        snprintf(out, outlen, "[%s]", host);
    else
        snprintf(out, outlen, "%s", host);
}
