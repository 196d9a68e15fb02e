/*
 * A GPU's UUID as nvidia-smi writes it ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"):
 * the client (CUDA_VISIBLE_DEVICES), Flyt's NVML and the node manager print the same
 * text. Header-only: NVML links nothing of Flyt's.
 */
#ifndef FLYT_GPU_UUID_H
#define FLYT_GPU_UUID_H

#include <stddef.h>
#include <stdio.h>

#define FLYT_GPU_UUID_TEXT 41 /* "GPU-" 36 characters, NUL */

static inline void flyt_gpu_uuid_text(const void *uuid16, char *out, size_t cap)
{
    const unsigned char *b = uuid16;
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

#endif
