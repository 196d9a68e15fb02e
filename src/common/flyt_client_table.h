/*
 * Flyt's own export table of its libcuda.so.1, asked with cuGetExportTable
 * and this UUID (NVIDIA's driver refuses it). Shared by the client, the
 * server (which must not run on Flyt's library by mistake) and Flyt's NVML.
 */
#ifndef FLYT_CLIENT_TABLE_H
#define FLYT_CLIENT_TABLE_H

#include <cuda.h>
#include <stddef.h>

#define FLYT_CLIENT_MARKER_UUID                                                                 \
    {0x66, 0x6c, 0x79, 0x74, 0x2d, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2d, 0x6c, 0x69, 0x62, 0x31}

/* The slots. A tool scope (per thread, nestable) lets a tool library that
 * answers through the driver (NVML) start and query it without counting as
 * the program's cuInit: natively NVML does not initialise CUDA, so a program
 * may ask NVML, fork, and use CUDA in the child, and cuDeviceGetCount still
 * says CUDA_ERROR_NOT_INITIALIZED until the program's own cuInit. Inside the
 * scope, a child forked after the program's cuInit may still ask too. */
enum {
    FLYT_CLIENT_TABLE_SIZE,     /* the table's size in bytes */
    FLYT_CLIENT_TABLE_NAME,     /* "flyt" */
    FLYT_CLIENT_TABLE_SCOPE,    /* flyt_tool_scope_fn */
    FLYT_CLIENT_TABLE_MEM_INFO, /* flyt_tool_mem_info_fn */
    FLYT_CLIENT_TABLE_SLOTS
};

/* entering 1 opens the calling thread's scope, 0 closes it */
typedef void (*flyt_tool_scope_fn)(int entering);
/* the virtual GPU's free and total memory, without a context (NVML's answer
 * does not depend on one); inside the scope, after cuInit */
typedef CUresult (*flyt_tool_mem_info_fn)(CUdevice dev, size_t *free_bytes, size_t *total_bytes);

#endif
