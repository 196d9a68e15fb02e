/*
 * Event sets. The VM is told of no event of the physical GPU (Xid errors,
 * clock changes and the like belong to the host), so a device supports no
 * event type and a wait ends in a timeout; sets themselves work, because
 * tools such as nvidia-smi create one before anything else and stop with
 * "Internal NVML error" if they cannot.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "nvml_internal.h"

struct nvmlEventSet_st {
    int registered; /* never set: no event type is supported */
};

FLYT_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set != NULL ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                               unsigned long long *types)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && types == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *types = 0;
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                                       nvmlEventSet_t set)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = flyt_nvml_device(device, &d);
    if (r == NVML_SUCCESS && set == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    /* as NVIDIA's answers for an event type the device does not support */
    if (r == NVML_SUCCESS && types != 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    return r;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                                  unsigned int timeoutms)
{
    if (!flyt_nvml_is_ready())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec wait = {.tv_sec = timeoutms / 1000, .tv_nsec = (long)(timeoutms % 1000) * 1000000};
    /* nothing will arrive: the whole timeout, even when interrupted */
    while (nanosleep(&wait, &wait) != 0 && errno == EINTR)
        ;
    return NVML_ERROR_TIMEOUT;
}

FLYT_NVML_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                               unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
