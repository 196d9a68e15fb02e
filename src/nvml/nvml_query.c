/*
 * The device's state: memory (asked live of the driver), the fixed numbers
 * of the snapshot, and the answers a virtual GPU cannot give.
 */
#include "nvml_internal.h"

static nvmlReturn_t flyt_nvml_memory(nvmlDevice_t device, const void *out,
                                     unsigned long long *total, unsigned long long *free_bytes)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && out == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = flyt_nvml_free_memory(d, free_bytes);
    if (r != NVML_SUCCESS)
        return r;
    /* The tenant's quota is the device's whole memory. */
    *total = flyt_nvml_total_mem(d);
    if (*free_bytes > *total)
        *free_bytes = *total;
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total = 0, free_bytes = 0;
    nvmlReturn_t r = flyt_nvml_memory(device, memory, &total, &free_bytes);
    if (r == NVML_SUCCESS)
        *memory = (nvmlMemory_t){.total = total, .free = free_bytes, .used = total - free_bytes};
    return r;
}

/* What the driver or firmware keeps back is not visible through CUDA:
 * reserved is 0, and used is everything not free. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                         nvmlMemory_v2_t *memory)
{
    if (memory != NULL && flyt_nvml_is_ready() && memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total = 0, free_bytes = 0;
    nvmlReturn_t r = flyt_nvml_memory(device, memory, &total, &free_bytes);
    if (r == NVML_SUCCESS)
        *memory = (nvmlMemory_v2_t){.version = nvmlMemory_v2,
                                    .total = total,
                                    .reserved = 0,
                                    .free = free_bytes,
                                    .used = total - free_bytes};
    return r;
}

/* CUDA's clock attributes are the peak clocks, which is what this asks. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                        unsigned int *clock)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    int khz = -1;
    if (r == NVML_SUCCESS && (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM))
        khz = d->clock_khz;
    else if (r == NVML_SUCCESS && type == NVML_CLOCK_MEM)
        khz = d->mem_clock_khz;
    return flyt_nvml_answer(r, khz < 0 ? -1 : khz / 1000, clock);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device,
                                                       nvmlComputeMode_t *mode)
{
    struct nvmlDevice_st *d;
    unsigned int v = 0;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    r = flyt_nvml_answer(r, r == NVML_SUCCESS ? d->compute_mode : -1, mode ? &v : NULL);
    if (r == NVML_SUCCESS)
        *mode = (nvmlComputeMode_t)v; /* CUcomputemode has NVML's numbers */
    return r;
}

/* CUDA tells whether ECC is on, not whether it could be: off reads as
 * disabled, and nothing is pending. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                                   nvmlEnableState_t *pending)
{
    struct nvmlDevice_st *d;
    unsigned int v = 0;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && pending == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    r = flyt_nvml_answer(r, r == NVML_SUCCESS ? d->ecc : -1, current ? &v : NULL);
    if (r == NVML_SUCCESS)
        *current = *pending = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return r;
}

/* The handle is good and the answer has somewhere to go. */
static nvmlReturn_t flyt_nvml_checked(nvmlDevice_t device, const void *out)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && out == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    return r;
}

/* Features this virtual GPU truthfully lacks: no display on a GPU across
 * the network, no MIG partitioning visible from the VM. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device,
                                                       nvmlEnableState_t *display)
{
    nvmlReturn_t r = flyt_nvml_checked(device, display);
    if (r == NVML_SUCCESS)
        *display = NVML_FEATURE_DISABLED;
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device,
                                                         nvmlEnableState_t *isActive)
{
    nvmlReturn_t r = flyt_nvml_checked(device, isActive);
    if (r == NVML_SUCCESS)
        *isActive = NVML_FEATURE_DISABLED;
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                                   unsigned int *pendingMode)
{
    nvmlReturn_t r = flyt_nvml_checked(device, currentMode);
    if (r == NVML_SUCCESS && pendingMode == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *currentMode = *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return r;
}

/* The virtual GPU is never split into MIG devices. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                             unsigned int *count)
{
    return flyt_nvml_answer(flyt_nvml_checked(device, count), 0, count);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                          unsigned int *isMigDevice)
{
    nvmlReturn_t r = flyt_nvml_checked(device, isMigDevice);
    if (r == NVML_SUCCESS)
        *isMigDevice = 0;
    return r;
}

/* Peer reads and writes as the CUDA driver allows them; the other
 * capabilities (NVLink, atomics) it does not describe. */
FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                     nvmlGpuP2PCapsIndex_t p2pIndex,
                                                     nvmlGpuP2PStatus_t *p2pStatus)
{
    struct nvmlDevice_st *a, *b;
    nvmlReturn_t r = flyt_nvml_device(device1, &a);
    if (r == NVML_SUCCESS)
        r = flyt_nvml_device(device2, &b);
    if (r != NVML_SUCCESS)
        return r;
    if (p2pStatus == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((p2pIndex != NVML_P2P_CAPS_INDEX_READ && p2pIndex != NVML_P2P_CAPS_INDEX_WRITE) ||
        flyt_nvml_cu.device_can_access_peer == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    int can = 0;
    r = flyt_nvml_from_cuda(flyt_nvml_can_access_peer(&can, a->cu, b->cu));
    if (r == NVML_SUCCESS)
        *p2pStatus = can ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return r;
}

/* The processes using the GPU run on the server, where the VM cannot see
 * them: the list is empty, as on a GPU nothing runs on. */
static nvmlReturn_t flyt_nvml_no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    nvmlReturn_t r = flyt_nvml_checked(device, infoCount);
    if (r == NVML_SUCCESS)
        *infoCount = 0;
    return r;
}

#define FLYT_NVML_NO_PROCESSES(name, info_type)                                              \
    FLYT_NVML_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount,          \
                                       info_type *infos)                                      \
    {                                                                                          \
        (void)infos;                                                                           \
        return flyt_nvml_no_processes(device, infoCount);                                     \
    }

FLYT_NVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_t)
FLYT_NVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* Sensors and live counters of the physical GPU (utilization, temperature,
 * power, fans, current clocks, P-state), its host's PCIe and NVLink links,
 * and host settings (persistence mode, the /dev/nvidiaN minor) are not
 * visible from the VM. Answering 0 would read as an idle, cold GPU, so
 * these say "not supported", which applications already handle for GPUs
 * without such sensors. Quietly: callers such as PyTorch ask routinely. */
static nvmlReturn_t flyt_nvml_not_visible(nvmlDevice_t device, const void *out)
{
    nvmlReturn_t r = flyt_nvml_checked(device, out);
    return r == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                            nvmlUtilization_t *utilization)
{
    return flyt_nvml_not_visible(device, utilization);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                       nvmlTemperatureSensors_t sensorType,
                                                       unsigned int *temp)
{
    (void)sensorType;
    return flyt_nvml_not_visible(device, temp);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return flyt_nvml_not_visible(device, power);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return flyt_nvml_not_visible(device, speed);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device,
                                                            nvmlPstates_t *pState)
{
    return flyt_nvml_not_visible(device, pState);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                     unsigned int *clock)
{
    (void)type;
    return flyt_nvml_not_visible(device, clock);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device,
                                                           nvmlEnableState_t *mode)
{
    return flyt_nvml_not_visible(device, mode);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                       unsigned int *minorNumber)
{
    return flyt_nvml_not_visible(device, minorNumber);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device,
                                                                  unsigned int *currLinkGen)
{
    return flyt_nvml_not_visible(device, currLinkGen);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device,
                                                             unsigned int *currLinkWidth)
{
    return flyt_nvml_not_visible(device, currLinkWidth);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                       nvmlEnableState_t *isActive)
{
    (void)link;
    return flyt_nvml_not_visible(device, isActive);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    (void)link;
    return flyt_nvml_not_visible(device, pNvLinkDeviceType);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                  unsigned int link,
                                                                  nvmlPciInfo_t *pci)
{
    (void)link;
    return flyt_nvml_not_visible(device, pci);
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *gpuFabricInfo)
{
    return flyt_nvml_not_visible(device, gpuFabricInfo);
}
