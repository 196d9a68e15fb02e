/*
 * A weak stub for every function NVIDIA's libnvidia-ml.so.1 exports,
 * generated from nvml.exports, so that no application or tool fails to load
 * for a missing symbol. The functions Flyt answers are strong definitions in
 * the other files and replace these at link time; a stub says once on stderr
 * which function was called and returns NVML_ERROR_NOT_SUPPORTED. This file
 * must not see the NVML prototypes.
 */
#include <stdio.h>
#include <unistd.h>

#define FLYT_NVML_NOT_SUPPORTED 3 /* NVML_ERROR_NOT_SUPPORTED */

int flyt_nvml_stub_called(const char *name, int *warned);

int flyt_nvml_stub_called(const char *name, int *warned)
{
    if (__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED) == 0) {
        char line[192];
        int n = snprintf(line, sizeof line,
                         "flyt: %s is not supported by Flyt's NVML; "
                         "returning NVML_ERROR_NOT_SUPPORTED\n", name);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, len); /* one write: lines of threads don't mix */
        (void)w;
    }
    return FLYT_NVML_NOT_SUPPORTED;
}

#define FLYT_NVML_STUB(name)                                                 \
    __attribute__((weak, visibility("default"))) int name(void)             \
    {                                                                        \
        static int warned;                                                   \
        return flyt_nvml_stub_called(#name, &warned);                        \
    }

#include "flyt_nvml_stubs.inc"
