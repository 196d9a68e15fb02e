/*
 * CUresult names and strings, and the one-line notices for driver functions
 * Flyt does not carry out.
 */
#include "client.h"

#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct error_name {
    int code;
    const char *name;
    const char *text;
};

static const struct error_name error_names[] = {
#include "flyt_error_names.inc"
};

static const struct error_name *lookup(CUresult code)
{
    for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
        if (error_names[i].code == (int)code)
            return &error_names[i];
    return NULL;
}

FLYT_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
    if (str == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const struct error_name *e = lookup(error);
    *str = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FLYT_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
    if (str == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const struct error_name *e = lookup(error);
    *str = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Names already reported: a program calling one function in a loop gets one
 * line, not thousands. A small fixed set is enough; past it, lines repeat. */
#define NOTICE_SLOTS 256
static struct {
    pthread_mutex_t lock;
    char names[NOTICE_SLOTS][96];
    int count;
} notices = {.lock = FLYT_MUTEX_INITIALIZER};

static int first_notice(const char *key)
{
    pthread_mutex_lock(&notices.lock);
    int first = 1;
    for (int i = 0; i < notices.count && first; i++)
        first = strncmp(notices.names[i], key, sizeof notices.names[i] - 1) != 0;
    if (first && notices.count < NOTICE_SLOTS)
        snprintf(notices.names[notices.count++], sizeof notices.names[0], "%s", key);
    pthread_mutex_unlock(&notices.lock);
    return first;
}

CUresult flyt_unsupported_why(const char *name, const char *why)
{
    if (first_notice(name)) {
        char line[512];
        int n = snprintf(line, sizeof line, "flyt: %s is not supported by Flyt%s%s%s\n", name,
                         why ? " (" : "", why ? why : "", why ? ")" : "");
        if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
            /* nowhere left to say it */
        }
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult flyt_driver_unsupported(const char *name) { return flyt_unsupported_why(name, NULL); }

int flyt_tracing(void)
{
    static int tracing = -1;
    if (tracing < 0) {
        const char *env = getenv("FLYT_TRACE");
        tracing = env != NULL && *env != '\0' && strcmp(env, "0") != 0;
    }
    return tracing;
}

CUresult flyt_trace(const char *where, CUresult r)
{
    if (r != CUDA_SUCCESS && flyt_tracing()) {
        char line[256];
        int n = snprintf(line, sizeof line, "flyt: trace: %s: %d, called from:\n", where, (int)r);
        if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0)
            return r;
        /* which library asked tells more than the call itself */
        void *frames[8];
        int depth = backtrace(frames, 8);
        backtrace_symbols_fd(frames + 1, depth - 1, STDERR_FILENO);
    }
    return r;
}
