/* The plain driver calls of calls.api on the GPU: one case per call,
 * generated (flyt_calls_cuda.inc); handle_CALL translated the handles. */
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include "backend_cuda_int.h"
#include "calls.h"

void flyt_cuda_calls_resolve(struct flyt_cuda_backend *b)
{
    for (uint32_t id = 0; id < FLYT_CALL_LIMIT; id++) {
        const struct flyt_call_desc *d = flyt_call_desc(id);
        b->calls[id] = d && b->cu.lib ? dlsym(b->cu.lib, d->symbol) : NULL;
    }
}

CUresult flyt_cuda_call(flyt_backend *base, uint32_t id, const uint64_t *a, const void *in,
                        void *out)
{
    ENTER(b, base);
    void *fn = id < FLYT_CALL_LIMIT ? b->calls[id] : NULL;
    if (fn == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    (void)in, (void)out;
    switch (id) {
#include "flyt_calls_cuda.inc"
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}
