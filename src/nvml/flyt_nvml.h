/*
 * The part of the NVML API that Flyt's libnvidia-ml.so.1 answers, declared
 * from NVIDIA's public NVML reference (nvml.h is not installed here). Names,
 * values and struct layouts must match NVIDIA's so that applications built
 * against the real header work unchanged; everything else is Flyt's own.
 */
#ifndef FLYT_NVML_H
#define FLYT_NVML_H

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every NVML call. */
typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* nvmlInitWithFlags */
#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2

/* Buffer sizes callers allocate (terminating NUL included). */
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80

/* How NVML spells PCI addresses: 8-digit domain, and the legacy 4-digit one. */
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"

#define NVML_NVLINK_MAX_LINKS 18
#define NVML_VALUE_NOT_AVAILABLE (-1)

/* A versioned struct's version word: its size, and the version in the top byte. */
#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((unsigned int)(ver) << 24U))

/* Opaque to applications; Flyt's handle points at its device snapshot. */
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "%04X:%02X:%02X.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;    /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];          /* "%08X:%02X:%02X.0" */
} nvmlPciInfo_t;

/* The PCI identity with its class (nvidia-smi asks this one). */
typedef struct nvmlPciInfoExt_v1_st {
    unsigned int version; /* nvmlPciInfoExt_v1 */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfoExt_v1_t;
typedef nvmlPciInfoExt_v1_t nvmlPciInfoExt_t;
#define nvmlPciInfoExt_v1 NVML_STRUCT_VERSION(PciInfoExt, 1)

/* Event sets: opaque; the VM is told of no event of the physical GPU. */
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version; /* must be nvmlMemory_v2 */
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlUtilization_st {
    unsigned int gpu;    /* percent of the sample period a kernel ran */
    unsigned int memory; /* percent of the period device memory was read or written */
} nvmlUtilization_t;

/* nvmlDeviceGet*RunningProcesses (the unversioned, v1 names) */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* nvmlDeviceGet*RunningProcesses_v2 and _v3 */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef enum nvmlEnableState_enum {
    NVML_FEATURE_DISABLED = 0,
    NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

typedef enum nvmlBrandType_enum {
    NVML_BRAND_UNKNOWN = 0,
    NVML_BRAND_QUADRO = 1,
    NVML_BRAND_TESLA = 2,
    NVML_BRAND_NVS = 3,
    NVML_BRAND_GEFORCE = 5,
    NVML_BRAND_TITAN = 6,
    NVML_BRAND_NVIDIA = 14
} nvmlBrandType_t;

typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

/* Same numbers as CUDA's CUcomputemode. */
typedef enum nvmlComputeMode_enum {
    NVML_COMPUTEMODE_DEFAULT = 0,
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
    NVML_COMPUTEMODE_PROHIBITED = 2,
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
} nvmlComputeMode_t;

typedef enum nvmlClockType_enum {
    NVML_CLOCK_GRAPHICS = 0,
    NVML_CLOCK_SM = 1,
    NVML_CLOCK_MEM = 2,
    NVML_CLOCK_VIDEO = 3
} nvmlClockType_t;

typedef enum nvmlPStates_enum {
    NVML_PSTATE_0 = 0,
    NVML_PSTATE_15 = 15,
    NVML_PSTATE_UNKNOWN = 32
} nvmlPstates_t;

typedef enum nvmlGpuP2PStatus_enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
    NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5,
    NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PROP = 4,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum nvmlIntNvLinkDeviceType_enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255
} nvmlIntNvLinkDeviceType_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffU

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

/* Initialization and errors */
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);

/* System */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);
nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount);
nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount);
nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount);

/* Finding devices */
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count);

/* Events */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);

/* nvidia-smi's private table (undocumented; see nvml_internal_table.c) */
nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id);

/* Identity */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber);
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor);
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch);
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores);
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type);
nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool);
nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth);

/* State */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int *clock);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode);
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                  nvmlEnableState_t *pending);
nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display);
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos);

/* Answered NVML_ERROR_NOT_SUPPORTED on purpose: the server cannot tell us. */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed);
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock);
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *gpuFabricInfo);

#ifdef __cplusplus
}
#endif

#endif
