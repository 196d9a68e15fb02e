/*
 * Internal interface of the client library (the drop-in libcudart.so.13).
 *
 * Modules: conn.c (the one connection to the server, its receiver thread and
 * calls), errors.c (last/sticky error, names), registry.c (what the client
 * knows locally: device and pinned ranges, fatbinaries, functions, variables),
 * and api_*.c (the CUDA runtime functions, grouped as the CUDA docs group
 * them). Functions here use the flyt_ prefix; CUDA names are the API.
 */
#ifndef FLYT_CLIENT_H
#define FLYT_CLIENT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "flyt_proto.h"

#define FLYT_EXPORT __attribute__((visibility("default")))

/* ---- connection (conn.c) ---- */

/* Where a reply's pieces go. rep/rep_size: the op's reply struct. data: room
 * for trailing bytes (data_max); streamed: the reply ends with a trailer
 * whose result overrides (MEMCPY_DTOH style). */
struct flyt_reply_sink {
    void  *rep;
    size_t rep_size;
    void  *data;
    size_t data_max;
    size_t data_got;
    int    streamed;
};

/* Connects on first use. cudaSuccess, or cudaErrorNoDevice when no server
 * can be reached (the reason is printed once). */
cudaError_t flyt_connect_once(void);
/* Number of devices the server offers (0 until connected). */
int flyt_device_count(void);
/* The device properties fetched at connect. */
const struct cudaDeviceProp *flyt_device_props(void);

/* A synchronous call: sends op with req (+ data iovecs), waits for the reply.
 * Returns the call's CUresult mapped to cudaError_t, and records any deferred
 * error of earlier pipelined calls as the last error. */
cudaError_t flyt_call(uint16_t op, const void *req, size_t req_size, const struct iovec *data,
                      int data_count, struct flyt_reply_sink *sink);
/* flyt_call that passes a file descriptor along (Unix sockets only). */
cudaError_t flyt_call_fd(uint16_t op, const void *req, size_t req_size, int fd,
                         struct flyt_reply_sink *sink);
/* Whether host memory can be shared with the server: a Unix-socket session
 * and FLYT_SHM not set to 0. */
int flyt_conn_shares_memory(void);
/* A pipelined call: sends op without waiting (FLYT_F_NOREPLY). */
cudaError_t flyt_send_async(uint16_t op, const void *req, size_t req_size,
                            const struct iovec *data, int data_count);

/* Host callbacks (cudaLaunchHostFunc / cudaStreamAddCallback). */
typedef void (*flyt_client_cb)(void *a, void *b, int status);
uint64_t flyt_callback_register(void (*host_fn)(void *), void (*stream_cb)(cudaStream_t, cudaError_t, void *),
                                cudaStream_t stream, void *user);

/* ---- errors (errors.c) ---- */
cudaError_t flyt_set_error(cudaError_t err); /* records err as last error, returns it */
cudaError_t flyt_map_result(int cu_result);
cudaError_t flyt_sticky_error(void);         /* cudaSuccess unless the context is broken */
void flyt_reset_errors(void);
cudaError_t flyt_unsupported(const char *name); /* says so once per message */

/* ---- local registry (registry.c) ---- */
enum flyt_range_kind { FLYT_RANGE_DEVICE = 1, FLYT_RANGE_PINNED = 2, FLYT_RANGE_REGISTERED = 3 };
void flyt_range_add(enum flyt_range_kind kind, uint64_t base, uint64_t size, unsigned flags);
int  flyt_range_remove(enum flyt_range_kind kind, uint64_t base); /* 0 when found */
/* Finds the range holding addr: returns its kind (0 if none) and base/size/flags. */
int  flyt_range_find(uint64_t addr, uint64_t *base, uint64_t *size, unsigned *flags);
void flyt_range_clear_device(void);
/* Shared pinned memory (HOST_MAP): the server's region id of a pinned range. */
int flyt_range_set_region(uint64_t base, uint64_t region);
/* The region holding all of [addr, addr + n), with addr's offset in it; 0 if none. */
uint64_t flyt_range_region(uint64_t addr, uint64_t n, uint64_t *offset);
void flyt_range_forget_regions(void);

struct flyt_module;
struct flyt_function {
    struct flyt_module *module;
    const void *host_fun;
    char       *name;
    uint64_t    server_id;   /* 0 until fetched */
    uint32_t    param_count;
    uint32_t    param_bytes;
    flyt_param *params;
    uint32_t    max_dynamic_smem; /* launches asking for more fail at once */
    uint32_t    magic;
};
struct flyt_variable {
    struct flyt_module *module;
    const void *host_var;
    char       *name;
    uint64_t    size;
    uint64_t    dptr;        /* 0 until fetched */
};

/* Resolves a host stub pointer or a cudaKernel_t; loads module and layout on
 * first use. */
cudaError_t flyt_function_resolve(const void *func, struct flyt_function **out);
cudaError_t flyt_variable_resolve(const void *symbol, struct flyt_variable **out);
/* The launch path's lookup: a cudaKernel_t handed out by __cudaGetKernel is
 * used without a map lookup once resolved. */
cudaError_t flyt_kernel_ready(cudaKernel_t kernel, struct flyt_function **out);
/* Forget every server-side id (after cudaDeviceReset). */
void flyt_registry_reset_server_ids(void);

/* ---- helpers shared by api_*.c ---- */
static inline uint64_t flyt_stream_id(cudaStream_t s) { return (uint64_t)(uintptr_t)s; }
/* _ptsz/_ptds entry points treat stream 0 as the per-thread default stream. */
static inline cudaStream_t flyt_ptsz(cudaStream_t s)
{
    return s == NULL ? cudaStreamPerThread : s;
}

#endif
