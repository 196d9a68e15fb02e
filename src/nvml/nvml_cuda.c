/*
 * The CUDA driver side: loads libcuda.so.1 (Flyt's, on LD_LIBRARY_PATH in
 * the VM), resolves the few entry points NVML's answers need, and takes a
 * snapshot of each device. Nothing here links against libcuda: the VM may
 * have none, and NVML must then fail cleanly instead of failing to load.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_gpu_uuid.h"
#include "nvml_internal.h"

struct flyt_nvml_cuda flyt_nvml_cu;
static void *flyt_nvml_libcuda;

struct flyt_nvml_symbol {
    const char *name;
    const char *fallback; /* same signature under an older name, or NULL */
    void *slot;           /* address of the function pointer to fill */
    int required;
};

static const struct flyt_nvml_symbol flyt_nvml_symbols[] = {
    {"cuInit", NULL, &flyt_nvml_cu.init, 1},
    {"cuDriverGetVersion", NULL, &flyt_nvml_cu.driver_get_version, 1},
    {"cuDeviceGetCount", NULL, &flyt_nvml_cu.device_get_count, 1},
    {"cuDeviceGet", NULL, &flyt_nvml_cu.device_get, 1},
    {"cuDeviceGetName", NULL, &flyt_nvml_cu.device_get_name, 1},
    /* Never the unversioned cuDeviceTotalMem or cuMemGetInfo: those take
     * 32-bit sizes. */
    {"cuDeviceTotalMem_v2", NULL, &flyt_nvml_cu.device_total_mem, 1},
    {"cuDeviceGetUuid_v2", "cuDeviceGetUuid", &flyt_nvml_cu.device_get_uuid, 1},
    {"cuDeviceGetAttribute", NULL, &flyt_nvml_cu.device_get_attribute, 1},
    {"cuDeviceGetPCIBusId", NULL, &flyt_nvml_cu.device_get_pci_bus_id, 0},
    {"cuDeviceCanAccessPeer", NULL, &flyt_nvml_cu.device_can_access_peer, 0},
    {"cuDevicePrimaryCtxRetain", NULL, &flyt_nvml_cu.primary_ctx_retain, 0},
    {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease",
     &flyt_nvml_cu.primary_ctx_release, 0},
    {"cuCtxPushCurrent_v2", "cuCtxPushCurrent", &flyt_nvml_cu.ctx_push_current, 0},
    {"cuCtxPopCurrent_v2", "cuCtxPopCurrent", &flyt_nvml_cu.ctx_pop_current, 0},
    {"cuMemGetInfo_v2", NULL, &flyt_nvml_cu.mem_get_info, 0},
    {"cuGetExportTable", NULL, &flyt_nvml_cu.get_export_table, 0},
};

static void *flyt_nvml_lookup(void *lib, const struct flyt_nvml_symbol *s)
{
    void *fn = dlsym(lib, s->name);
    if (fn == NULL && s->fallback != NULL)
        fn = dlsym(lib, s->fallback);
    return fn;
}

/* Fills the table; on a missing required entry point, names it. */
static const char *flyt_nvml_resolve(void *lib)
{
    for (size_t i = 0; i < sizeof flyt_nvml_symbols / sizeof *flyt_nvml_symbols; i++) {
        const struct flyt_nvml_symbol *s = &flyt_nvml_symbols[i];
        void *fn = flyt_nvml_lookup(lib, s);
        if (fn == NULL && s->required)
            return s->name;
        memcpy(s->slot, &fn, sizeof fn); /* POSIX: object and function pointers convert */
    }
    return NULL;
}

/* Flyt's libcuda answers its own table: NVML's calls then go in a tool's
 * scope and memory needs no context. */
static void flyt_nvml_find_client_table(void)
{
    static const CUuuid id = {FLYT_CLIENT_MARKER_UUID};
    const void *const *table = NULL;
    if (flyt_nvml_cu.get_export_table == NULL ||
        flyt_nvml_cu.get_export_table((const void **)&table, &id) != CUDA_SUCCESS ||
        table == NULL ||
        (size_t)table[FLYT_CLIENT_TABLE_SIZE] < FLYT_CLIENT_TABLE_SLOTS * sizeof(void *))
        return;
    memcpy(&flyt_nvml_cu.tool_scope, &table[FLYT_CLIENT_TABLE_SCOPE], sizeof(void *));
    memcpy(&flyt_nvml_cu.tool_mem_info, &table[FLYT_CLIENT_TABLE_MEM_INFO], sizeof(void *));
}

CUresult flyt_nvml_cuda_enter(void)
{
    if (flyt_nvml_cu.tool_scope == NULL)
        return CUDA_SUCCESS; /* another driver: started once by nvmlInit */
    flyt_nvml_cu.tool_scope(1);
    return flyt_nvml_cu.init(0); /* connected already, or a forked child's first */
}

void flyt_nvml_cuda_leave(void)
{
    if (flyt_nvml_cu.tool_scope != NULL)
        flyt_nvml_cu.tool_scope(0);
}

CUresult flyt_nvml_can_access_peer(int *can, CUdevice dev, CUdevice peer)
{
    CUresult r = flyt_nvml_cuda_enter();
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_can_access_peer(can, dev, peer);
    flyt_nvml_cuda_leave();
    return r;
}

/* Called with the NVML lock held. Once loaded, libcuda stays: the
 * application shares it, so it is never closed. */
nvmlReturn_t flyt_nvml_cuda_load(void)
{
    flyt_nvml_assert_locked();
    if (flyt_nvml_libcuda != NULL)
        return NVML_SUCCESS;
    const char *name = getenv(FLYT_NVML_LIBCUDA_ENV);
    if (name == NULL || *name == '\0')
        name = "libcuda.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        flyt_nvml_say("NVML: cannot load the CUDA driver library %s (%s): "
                      "NVML_ERROR_LIBRARY_NOT_FOUND", name, dlerror());
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    const char *missing = flyt_nvml_resolve(lib);
    if (missing != NULL) {
        flyt_nvml_say("NVML: %s has no %s: NVML_ERROR_LIBRARY_NOT_FOUND", name, missing);
        memset(&flyt_nvml_cu, 0, sizeof flyt_nvml_cu);
        dlclose(lib);
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    flyt_nvml_libcuda = lib;
    flyt_nvml_find_client_table();
    return NVML_SUCCESS;
}

/* cuInit and the device count. With NVML_INIT_FLAG_NO_GPUS a driver that
 * has no device is a success with none, as NVIDIA's flag promises. */
nvmlReturn_t flyt_nvml_cuda_start(unsigned int flags, unsigned int *count)
{
    int n = 0;
    CUresult r = flyt_nvml_cu.init(0);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_get_count(&n);
    if (r == CUDA_SUCCESS && n == 0)
        r = CUDA_ERROR_NO_DEVICE;
    if (r == CUDA_ERROR_NO_DEVICE && (flags & NVML_INIT_FLAG_NO_GPUS)) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (r != CUDA_SUCCESS) {
        flyt_nvml_say("NVML: the CUDA driver did not start (CUresult %d): "
                      "NVML_ERROR_DRIVER_NOT_LOADED", (int)r);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    *count = n > FLYT_NVML_MAX_DEVICES ? FLYT_NVML_MAX_DEVICES : (unsigned int)n;
    return NVML_SUCCESS;
}

nvmlReturn_t flyt_nvml_from_cuda(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return NVML_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED: return NVML_ERROR_UNINITIALIZED;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE: return NVML_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_OUT_OF_MEMORY: return NVML_ERROR_MEMORY;
    case CUDA_ERROR_NOT_SUPPORTED: return NVML_ERROR_NOT_SUPPORTED;
    case CUDA_ERROR_NO_DEVICE: return NVML_ERROR_DRIVER_NOT_LOADED;
    default: return NVML_ERROR_UNKNOWN;
    }
}

/* An attribute the NVML answers can do without: -1 when the driver won't say. */
static int flyt_nvml_attr(CUdevice dev, CUdevice_attribute attr)
{
    int v = -1;
    CUresult r = flyt_nvml_cuda_enter();
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_get_attribute(&v, attr, dev);
    flyt_nvml_cuda_leave();
    return r == CUDA_SUCCESS ? v : -1;
}

int flyt_nvml_sm_count(const struct nvmlDevice_st *d)
{
    int v = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    return v > 0 ? v : d->sm_count;
}

unsigned long long flyt_nvml_total_mem(const struct nvmlDevice_st *d)
{
    size_t total = 0;
    CUresult r = flyt_nvml_cuda_enter();
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_total_mem(&total, d->cu);
    flyt_nvml_cuda_leave();
    if (r != CUDA_SUCCESS || total == 0)
        return d->total_mem;
    return total;
}

/* "dddd:bb:dd.f", "dddddddd:bb:dd.f" or "bb:dd.f", hexadecimal, any case. */
int flyt_nvml_parse_pci(const char *text, struct flyt_nvml_pci_addr *out)
{
    unsigned int d = 0, b, s, f;
    int used = -1;
    size_t len = strlen(text);
    if (sscanf(text, "%x:%x:%x.%x%n", &d, &b, &s, &f, &used) != 4 || (size_t)used != len) {
        d = 0;
        used = -1;
        if (sscanf(text, "%x:%x.%x%n", &b, &s, &f, &used) != 3 || (size_t)used != len)
            return -1;
    }
    if (b > 0xff || s > 0x1f || f > 7)
        return -1;
    *out = (struct flyt_nvml_pci_addr){d, b, s, f};
    return 0;
}

static nvmlReturn_t flyt_nvml_snapshot_pci(struct nvmlDevice_st *d)
{
    int dom = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    int bus = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    int dev = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    if (dom >= 0 && bus >= 0 && dev >= 0) {
        d->pci_domain = (unsigned int)dom;
        d->pci_bus = (unsigned int)bus;
        d->pci_device = (unsigned int)dev;
        return NVML_SUCCESS;
    }
    /* Some drivers answer only the string form. */
    char text[64];
    struct flyt_nvml_pci_addr a;
    if (flyt_nvml_cu.device_get_pci_bus_id == NULL ||
        flyt_nvml_cu.device_get_pci_bus_id(text, sizeof text, d->cu) != CUDA_SUCCESS ||
        flyt_nvml_parse_pci(text, &a) != 0)
        return NVML_ERROR_UNKNOWN;
    d->pci_domain = a.domain;
    d->pci_bus = a.bus;
    d->pci_device = a.device;
    return NVML_SUCCESS;
}

/* What every tool asks: without it the device is of no use to NVML. */
static CUresult flyt_nvml_snapshot_identity(struct nvmlDevice_st *d)
{
    size_t total = 0;
    CUuuid uuid;
    CUresult r = flyt_nvml_cu.device_get_name(d->name, (int)sizeof d->name, d->cu);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_total_mem(&total, d->cu);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_get_uuid(&uuid, d->cu);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_get_attribute(
            &d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cu);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.device_get_attribute(
            &d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cu);
    if (r != CUDA_SUCCESS)
        return r;
    d->name[sizeof d->name - 1] = '\0';
    d->total_mem = total;
    flyt_gpu_uuid_text(uuid.bytes, d->uuid, sizeof d->uuid);
    return CUDA_SUCCESS;
}

nvmlReturn_t flyt_nvml_snapshot(struct nvmlDevice_st *d, unsigned int index)
{
    *d = (struct nvmlDevice_st){.index = index};
    CUresult r = flyt_nvml_cu.device_get(&d->cu, (int)index);
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_snapshot_identity(d);
    if (r != CUDA_SUCCESS) {
        flyt_nvml_say("NVML: the CUDA driver would not describe device %u (CUresult %d)",
                      index, (int)r);
        return flyt_nvml_from_cuda(r) == NVML_ERROR_UNINITIALIZED ? NVML_ERROR_DRIVER_NOT_LOADED
                                                                  : NVML_ERROR_UNKNOWN;
    }
    if (flyt_nvml_snapshot_pci(d) != NVML_SUCCESS) {
        flyt_nvml_say("NVML: the CUDA driver gave no PCI address for device %u", index);
        return NVML_ERROR_UNKNOWN;
    }
    d->sm_count = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d->clock_khz = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    d->mem_clock_khz = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    d->bus_width = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    d->ecc = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
    d->multi_gpu_board = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
    d->compute_mode = flyt_nvml_attr(d->cu, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE);
    return NVML_SUCCESS;
}

/* Flyt's libcuda answers without a context: NVML makes none, so a program
 * that only asked NVML holds nothing of CUDA's. */
static nvmlReturn_t flyt_nvml_tool_free_memory(struct nvmlDevice_st *d,
                                               unsigned long long *free_bytes)
{
    size_t free_now = 0, total = 0;
    CUresult r = flyt_nvml_cuda_enter();
    if (r == CUDA_SUCCESS)
        r = flyt_nvml_cu.tool_mem_info(d->cu, &free_now, &total);
    flyt_nvml_cuda_leave();
    if (r != CUDA_SUCCESS)
        return flyt_nvml_from_cuda(r);
    *free_bytes = free_now;
    return NVML_SUCCESS;
}

/* Another driver: cuMemGetInfo answers for the current context, so the
 * device's primary context is retained once (shared with the application,
 * never created twice) and pushed around the call. */
nvmlReturn_t flyt_nvml_free_memory(struct nvmlDevice_st *d, unsigned long long *free_bytes)
{
    if (flyt_nvml_cu.tool_mem_info != NULL)
        return flyt_nvml_tool_free_memory(d, free_bytes);
    if (!flyt_nvml_cu.primary_ctx_retain || !flyt_nvml_cu.ctx_push_current ||
        !flyt_nvml_cu.ctx_pop_current || !flyt_nvml_cu.mem_get_info)
        return NVML_ERROR_NOT_SUPPORTED;
    CUresult r = CUDA_SUCCESS;
    flyt_nvml_lock();
    if (d->primary == NULL)
        r = flyt_nvml_cu.primary_ctx_retain(&d->primary, d->cu);
    CUcontext ctx = d->primary;
    flyt_nvml_unlock();
    if (r != CUDA_SUCCESS)
        return flyt_nvml_from_cuda(r);
    r = flyt_nvml_cu.ctx_push_current(ctx);
    if (r != CUDA_SUCCESS)
        return flyt_nvml_from_cuda(r);
    size_t free_now = 0, total = 0;
    r = flyt_nvml_cu.mem_get_info(&free_now, &total);
    CUcontext popped;
    flyt_nvml_cu.ctx_pop_current(&popped);
    if (r != CUDA_SUCCESS)
        return flyt_nvml_from_cuda(r);
    *free_bytes = free_now;
    return NVML_SUCCESS;
}

/* Called with the NVML lock held, on the last nvmlShutdown. */
void flyt_nvml_release_context(struct nvmlDevice_st *d)
{
    flyt_nvml_assert_locked();
    if (d->primary != NULL && flyt_nvml_cu.primary_ctx_release != NULL)
        flyt_nvml_cu.primary_ctx_release(d->cu);
    d->primary = NULL;
}
