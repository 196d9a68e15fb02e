/* Picks a backend by name. Called in the session child, never the parent. */
#include "backend.h"

#include <stdio.h>
#include <string.h>

flyt_backend *flyt_backend_open(const char *kind, int gpu, char *err, size_t errlen)
{
    if (kind == NULL) {
        snprintf(err, errlen, "no backend named");
        return NULL;
    }
    if (strcmp(kind, "cuda") == 0)
        return flyt_backend_cuda_open(gpu, err, errlen);
    if (strcmp(kind, "host") == 0)
        return flyt_backend_host_open(gpu, err, errlen);
    snprintf(err, errlen, "unknown backend '%s' (want cuda or host)", kind);
    return NULL;
}
