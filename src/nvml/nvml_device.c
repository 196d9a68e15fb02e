/*
 * Finding devices and what they are: answered from the snapshot nvmlInit
 * took, so these calls cost the GPU server nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <strings.h>

#include "nvml_internal.h"

/* A handle is a pointer into flyt_nvml_devices; anything else is refused
 * rather than followed. */
nvmlReturn_t flyt_nvml_device(nvmlDevice_t handle, struct nvmlDevice_st **out)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)handle, base = (uintptr_t)flyt_nvml_devices;
    if (handle == NULL || p < base)
        return NVML_ERROR_INVALID_ARGUMENT;
    uintptr_t off = p - base;
    if (off % sizeof *handle != 0 || off / sizeof *handle >= flyt_nvml_device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = handle;
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = flyt_nvml_device_count;
    return NVML_SUCCESS;
}

/* v1 counted only the GPUs the caller could use: here that is every one. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t *device)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= flyt_nvml_device_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &flyt_nvml_devices[index];
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < flyt_nvml_device_count; i++) {
        if (strcasecmp(uuid, flyt_nvml_devices[i].uuid) == 0) {
            *device = &flyt_nvml_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                               nvmlDevice_t *device)
{
    struct flyt_nvml_pci_addr a;
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL || flyt_nvml_parse_pci(pciBusId, &a) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < flyt_nvml_device_count && a.function == 0; i++) {
        const struct nvmlDevice_st *d = &flyt_nvml_devices[i];
        if (d->pci_domain == a.domain && d->pci_bus == a.bus && d->pci_device == a.device) {
            *device = &flyt_nvml_devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId,
                                                            nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
                                                unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    return r != NVML_SUCCESS ? r : flyt_nvml_copy_string(name, length, d->name);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
                                                unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    return r != NVML_SUCCESS ? r : flyt_nvml_copy_string(uuid, length, d->uuid);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && index == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *index = d->index;
    return r;
}

static void flyt_nvml_fill_pci(const struct nvmlDevice_st *d, nvmlPciInfo_t *pci)
{
    *pci = (nvmlPciInfo_t){
        .domain = d->pci_domain,
        .bus = d->pci_bus,
        .device = d->pci_device,
        /* The CUDA driver API tells neither the PCI device id nor the
         * subsystem: NVIDIA's vendor id alone, the rest left 0. */
        .pciDeviceId = 0x10deU,
        .pciSubSystemId = 0,
    };
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             d->pci_domain & 0xffffU, d->pci_bus, d->pci_device);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, d->pci_domain,
             d->pci_bus, d->pci_device);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && pci == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        flyt_nvml_fill_pci(d, pci);
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    nvmlPciInfo_t full;
    nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(device, pci == NULL ? NULL : &full);
    if (r == NVML_SUCCESS && pci->version != nvmlPciInfoExt_v1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r != NVML_SUCCESS)
        return r;
    *pci = (nvmlPciInfoExt_t){
        .version = nvmlPciInfoExt_v1,
        .domain = full.domain,
        .bus = full.bus,
        .device = full.device,
        .pciDeviceId = full.pciDeviceId,
        .pciSubSystemId = full.pciSubSystemId,
        .baseClass = 0x03, /* display controller */
        .subClass = 0x02,  /* 3D controller: what a compute GPU reports */
    };
    snprintf(pci->busId, sizeof pci->busId, "%s", full.busId);
    return NVML_SUCCESS;
}

/* The first nvmlPciInfo_t: a 16-byte bus id, the same five numbers, then
 * four reserved words; 52 bytes, which is all a v1 caller allocated. */
struct flyt_nvml_pci_info_v1 {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved[4];
};

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    nvmlPciInfo_t full;
    nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(device, pci == NULL ? NULL : &full);
    if (r != NVML_SUCCESS)
        return r;
    struct flyt_nvml_pci_info_v1 *old = (struct flyt_nvml_pci_info_v1 *)(void *)pci;
    *old = (struct flyt_nvml_pci_info_v1){
        .domain = full.domain,
        .bus = full.bus,
        .device = full.device,
        .pciDeviceId = full.pciDeviceId,
        .pciSubSystemId = full.pciSubSystemId,
    };
    snprintf(old->busId, sizeof old->busId, "%s", full.busIdLegacy);
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                                 int *minor)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && (major == NULL || minor == NULL))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *major = d->cc_major;
        *minor = d->cc_minor;
    }
    return r;
}

static nvmlDeviceArchitecture_t flyt_nvml_arch_of(int major, int minor)
{
    switch (major) {
    case 3: return NVML_DEVICE_ARCH_KEPLER;
    case 5: return NVML_DEVICE_ARCH_MAXWELL;
    case 6: return NVML_DEVICE_ARCH_PASCAL;
    case 7: return minor >= 5 ? NVML_DEVICE_ARCH_TURING : NVML_DEVICE_ARCH_VOLTA;
    case 8: return minor == 9 ? NVML_DEVICE_ARCH_ADA : NVML_DEVICE_ARCH_AMPERE;
    case 9: return NVML_DEVICE_ARCH_HOPPER;
    case 10:
    case 11:
    case 12: return NVML_DEVICE_ARCH_BLACKWELL;
    default: return NVML_DEVICE_ARCH_UNKNOWN;
    }
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                        nvmlDeviceArchitecture_t *arch)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && arch == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *arch = flyt_nvml_arch_of(d->cc_major, d->cc_minor);
    return r;
}

/* CUDA cores per SM, by compute capability (CUDA programming guide's
 * arithmetic-throughput table); 0 where Flyt does not know. */
static unsigned int flyt_nvml_cores_per_sm(int major, int minor)
{
    switch (major) {
    case 3: return 192;
    case 5: return 128;
    case 6: return minor == 0 ? 64 : 128;
    case 7: return 64;
    case 8: return minor == 0 ? 64 : 128;
    case 9:
    case 10:
    case 11:
    case 12: return 128;
    default: return 0;
    }
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device,
                                                       unsigned int *numCores)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r != NVML_SUCCESS)
        return r;
    if (numCores == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int per_sm = flyt_nvml_cores_per_sm(d->cc_major, d->cc_minor);
    int sms = flyt_nvml_sm_count(d);
    if (per_sm == 0 || sms <= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *numCores = per_sm * (unsigned int)sms;
    return NVML_SUCCESS;
}

/* The product line of the GPU behind the server is not visible here;
 * NVML's own "unknown" says so without failing the caller. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && type == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *type = NVML_BRAND_UNKNOWN;
    return r;
}

/* A number from the snapshot that the driver may have withheld (-1). */
nvmlReturn_t flyt_nvml_answer(nvmlReturn_t r, int value, unsigned int *out)
{
    if (r != NVML_SUCCESS)
        return r;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (value < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)value;
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device,
                                                         unsigned int *multiGpuBool)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    return flyt_nvml_answer(r, r == NVML_SUCCESS ? d->multi_gpu_board : -1, multiGpuBool);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device,
                                                          unsigned int *busWidth)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    return flyt_nvml_answer(r, r == NVML_SUCCESS ? d->bus_width : -1, busWidth);
}
