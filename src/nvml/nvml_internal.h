/*
 * Inside Flyt's libnvidia-ml.so.1: every answer comes from the CUDA driver
 * API of the libcuda.so.1 next to it (Flyt's, which answers from the
 * tenant's virtual GPU), loaded with dlopen on the first nvmlInit.
 */
#ifndef FLYT_NVML_INTERNAL_H
#define FLYT_NVML_INTERNAL_H

#include <stddef.h>

#include <cuda.h>

#include "flyt_client_table.h"

#include "flyt_nvml.h"

#define FLYT_NVML_EXPORT __attribute__((visibility("default")))
#define FLYT_NVML_MAX_DEVICES 64
/* Overrides the name or path given to dlopen instead of libcuda.so.1. */
#define FLYT_NVML_LIBCUDA_ENV "FLYT_NVML_LIBCUDA"
/* The host's driver version, which the CUDA driver API cannot tell. */
#define FLYT_NVML_DRIVER_VERSION_ENV "FLYT_NVML_DRIVER_VERSION"

/* The driver API entry points we use; the optional ones may be NULL. */
struct flyt_nvml_cuda {
    CUresult (*init)(unsigned int flags);
    CUresult (*driver_get_version)(int *version);
    CUresult (*device_get_count)(int *count);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*device_get_name)(char *name, int len, CUdevice dev);
    CUresult (*device_total_mem)(size_t *bytes, CUdevice dev);
    CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice dev);
    CUresult (*device_get_attribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    /* optional */
    CUresult (*device_get_pci_bus_id)(char *bus_id, int len, CUdevice dev);
    CUresult (*device_can_access_peer)(int *can, CUdevice dev, CUdevice peer);
    CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*primary_ctx_release)(CUdevice dev);
    CUresult (*ctx_push_current)(CUcontext ctx);
    CUresult (*ctx_pop_current)(CUcontext *ctx);
    CUresult (*mem_get_info)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*get_export_table)(const void **table, const CUuuid *id);
    /* Flyt's libcuda only (flyt_client_table.h): NULL for another driver */
    flyt_tool_scope_fn tool_scope;
    flyt_tool_mem_info_fn tool_mem_info;
};

/* What the virtual GPU is; taken once per nvmlInit. -1: the driver would not say. */
struct nvmlDevice_st {
    unsigned int index;
    CUdevice cu;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned int pci_domain, pci_bus, pci_device;
    unsigned long long total_mem;
    int cc_major, cc_minor;
    int sm_count, clock_khz, mem_clock_khz, bus_width;
    int ecc, multi_gpu_board, compute_mode;
    CUcontext primary; /* retained on the first memory query, released on shutdown */
};

/* nvml_cuda.c */
extern struct flyt_nvml_cuda flyt_nvml_cu;
nvmlReturn_t flyt_nvml_cuda_load(void);
nvmlReturn_t flyt_nvml_cuda_start(unsigned int flags, unsigned int *count);
nvmlReturn_t flyt_nvml_snapshot(struct nvmlDevice_st *d, unsigned int index);
/* The share's SM count and memory now (a live resize changes them; Flyt's
 * driver answers both without a round trip); the snapshot's if it won't say. */
int flyt_nvml_sm_count(const struct nvmlDevice_st *d);
unsigned long long flyt_nvml_total_mem(const struct nvmlDevice_st *d);
/* Around every call into the driver after nvmlInit's: Flyt's libcuda then
 * takes it as a tool's, not the program's (and a forked child connects
 * anew). A failed start says why; flyt_nvml_cuda_leave is called either way. */
CUresult flyt_nvml_cuda_enter(void);
void flyt_nvml_cuda_leave(void);
/* cuDeviceCanAccessPeer, inside the scope */
CUresult flyt_nvml_can_access_peer(int *can, CUdevice dev, CUdevice peer);
nvmlReturn_t flyt_nvml_free_memory(struct nvmlDevice_st *d, unsigned long long *free_bytes);
void flyt_nvml_release_context(struct nvmlDevice_st *d);
nvmlReturn_t flyt_nvml_from_cuda(CUresult r);
struct flyt_nvml_pci_addr {
    unsigned int domain, bus, device, function;
};
int flyt_nvml_parse_pci(const char *text, struct flyt_nvml_pci_addr *out);

/* nvml_init.c */
extern struct nvmlDevice_st flyt_nvml_devices[FLYT_NVML_MAX_DEVICES];
extern unsigned int flyt_nvml_device_count;
int flyt_nvml_is_ready(void);
void flyt_nvml_lock(void);
/* Aborts unless the calling thread holds the NVML lock (asserting builds only). */
void flyt_nvml_assert_locked(void);
void flyt_nvml_unlock(void);
void flyt_nvml_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
nvmlReturn_t flyt_nvml_copy_string(char *dst, unsigned int length, const char *src);

/* nvml_device.c */
nvmlReturn_t flyt_nvml_device(nvmlDevice_t handle, struct nvmlDevice_st **out);
nvmlReturn_t flyt_nvml_answer(nvmlReturn_t r, int value, unsigned int *out);

#endif
