/*
 * Device management and version queries. A session has one device (index
 * 0), the GPU share its server was given; properties come from the server
 * once at connect and are served locally after that.
 */
#include "client.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static _Thread_local int current_device;

/* Attributes are fixed for a session, so each is asked for once. */
#define ATTR_CACHE 512
static atomic_int attr_known[ATTR_CACHE];
static int attr_value[ATTR_CACHE];

static cudaError_t check_device(int device)
{
    cudaError_t err = flyt_connect_once();
    if (err != cudaSuccess)
        return err;
    return (device < 0 || device >= flyt_device_count()) ? cudaErrorInvalidDevice : cudaSuccess;
}

static cudaError_t simple_call(uint16_t op, const void *req, size_t req_size, void *rep,
                               size_t rep_size)
{
    struct flyt_reply_sink sink = {.rep = rep, .rep_size = rep_size};
    return flyt_set_error(flyt_call(op, req, req_size, NULL, 0, rep ? &sink : NULL));
}

FLYT_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = flyt_connect_once();
    *count = err == cudaSuccess ? flyt_device_count() : 0;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (device == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = check_device(device);
    if (err == cudaSuccess)
        current_device = device;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaInitDevice(int device, unsigned device_flags, unsigned flags)
{
    (void)device_flags, (void)flags;
    return flyt_set_error(check_device(device));
}

FLYT_EXPORT cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop)
{
    if (device == NULL || prop == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = check_device(0);
    if (err == cudaSuccess)
        *device = 0;
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaSetValidDevices(int *devices, int len)
{
    for (int i = 0; devices && i < len; i++) {
        cudaError_t err = check_device(devices[i]);
        if (err != cudaSuccess)
            return flyt_set_error(err);
    }
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (prop == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = check_device(device);
    if (err == cudaSuccess)
        memcpy(prop, flyt_device_props(), sizeof *prop);
    return flyt_set_error(err);
}

FLYT_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (value == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = check_device(device);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    unsigned a = (unsigned)attr;
    if (a < ATTR_CACHE && atomic_load_explicit(&attr_known[a], memory_order_acquire)) {
        *value = attr_value[a];
        return cudaSuccess;
    }
    flyt_req_device_attr req = {.attr = (int32_t)attr, .device = device};
    flyt_rep_i32 rep = {0};
    err = simple_call(FLYT_OP_DEVICE_ATTR, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        *value = rep.value;
        if (a < ATTR_CACHE) {
            attr_value[a] = rep.value;
            atomic_store_explicit(&attr_known[a], 1, memory_order_release);
        }
    }
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    flyt_req_none req = {0};
    return simple_call(FLYT_OP_DEVICE_SYNC, &req, sizeof req, NULL, 0);
}

FLYT_EXPORT cudaError_t cudaDeviceReset(void)
{
    flyt_req_none req = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_RESET, &req, sizeof req, NULL, 0);
    if (err == cudaSuccess) {
        flyt_registry_reset_server_ids();
        flyt_range_clear_device();
        flyt_range_forget_regions(); /* the server unpinned them: copy through the socket */
        flyt_reset_errors();
    }
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit)
{
    if (value == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_limit req = {.limit = (int32_t)limit};
    flyt_rep_u64 rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_GET_LIMIT, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess)
        *value = (size_t)rep.value;
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    flyt_req_limit req = {.limit = (int32_t)limit, .value = value};
    return simple_call(FLYT_OP_DEVICE_SET_LIMIT, &req, sizeof req, NULL, 0);
}

FLYT_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    flyt_req_none req = {0};
    flyt_rep_mem_info rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_MEM_INFO, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        if (free_bytes)
            *free_bytes = (size_t)rep.free_bytes;
        if (total_bytes)
            *total_bytes = (size_t)rep.total_bytes;
    }
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device)
{
    if (bus_id == NULL || len <= 0)
        return flyt_set_error(cudaErrorInvalidValue);
    cudaError_t err = check_device(device);
    if (err != cudaSuccess)
        return flyt_set_error(err);
    flyt_req_device req = {.device = device};
    flyt_rep_pci_bus_id rep = {{0}};
    err = simple_call(FLYT_OP_DEVICE_PCI_BUS_ID, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        rep.bus_id[sizeof rep.bus_id - 1] = '\0';
        snprintf(bus_id, (size_t)len, "%s", rep.bus_id);
    }
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *bus_id)
{
    if (device == NULL || bus_id == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    char mine[64];
    cudaError_t err = cudaDeviceGetPCIBusId(mine, sizeof mine, 0);
    if (err != cudaSuccess)
        return err;
    /* bus ids compare without case, and the domain may be written short */
    size_t lm = strlen(mine), lb = strlen(bus_id);
    size_t n = lb < lm ? lb : lm;
    if (n == 0 || strncasecmp(mine + lm - n, bus_id + lb - n, n) != 0)
        return flyt_set_error(cudaErrorInvalidDevice);
    *device = 0;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    flyt_req_none req = {0};
    flyt_rep_i32_pair rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_PRIO_RANGE, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess) {
        if (least)
            *least = rep.a;
        if (greatest)
            *greatest = rep.b;
    }
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *config)
{
    if (config == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_none req = {0};
    flyt_rep_i32 rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_GET_CACHE, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess)
        *config = (enum cudaFuncCache)rep.value;
    return err;
}

FLYT_EXPORT cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache config)
{
    flyt_req_i32 req = {.value = (int32_t)config};
    return simple_call(FLYT_OP_DEVICE_SET_CACHE, &req, sizeof req, NULL, 0);
}

FLYT_EXPORT cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *config)
{
    if (config == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *config = cudaSharedMemBankSizeFourByte;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config)
{
    (void)config;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    if (flags == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_none req = {0};
    flyt_rep_i32 rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DEVICE_GET_FLAGS, &req, sizeof req, &rep, sizeof rep);
    if (err == cudaSuccess)
        *flags = (unsigned)rep.value;
    return err;
}

FLYT_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    flyt_req_i32 req = {.value = (int32_t)flags};
    return simple_call(FLYT_OP_DEVICE_SET_FLAGS, &req, sizeof req, NULL, 0);
}

FLYT_EXPORT cudaError_t cudaDriverGetVersion(int *version)
{
    if (version == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    flyt_req_none req = {0};
    flyt_rep_i32 rep = {0};
    cudaError_t err = simple_call(FLYT_OP_DRIVER_VERSION, &req, sizeof req, &rep, sizeof rep);
    /* CUDA reports 0, not an error, when there is no driver */
    *version = err == cudaSuccess ? rep.value : 0;
    return err == cudaErrorNoDevice ? cudaSuccess : err;
}

FLYT_EXPORT cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (version == NULL)
        return flyt_set_error(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

FLYT_EXPORT cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
FLYT_EXPORT cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
