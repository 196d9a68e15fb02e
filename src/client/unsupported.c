/*
 * A weak stub for every symbol NVIDIA's libcudart.so.13 exports, generated
 * from cudart.exports. The functions Flyt carries out are strong definitions
 * in the api_*.c files and replace these at link time; what is left says
 * once on stderr which function the application called and returns
 * cudaErrorNotSupported. This file must not see the CUDA prototypes.
 */
int flyt_unsupported_once(const char *name, int *warned);

#define FLYT_STUB(name)                                                      \
    __attribute__((weak, visibility("default"))) int name(void)             \
    {                                                                        \
        static int warned;                                                   \
        return flyt_unsupported_once(#name, &warned);                        \
    }

#include "flyt_unsupported_stubs.inc"
