/*
 * Flyt's libnvidia-ml.so.1 over fake_libcuda.c's two virtual GPUs: every
 * answer NVML gives, its errors, its life cycle, its context handling in
 * libcuda, and that it exports every name in nvml.exports.
 * usage: LD_LIBRARY_PATH=<dir of the fake libcuda.so.1> test_nvml NVML_EXPORTS
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_nvml.h"

#define GIB (1024ULL * 1024 * 1024)

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_RET(call, want)                                                        \
    do {                                                                             \
        nvmlReturn_t got_ = (call);                                                  \
        if (got_ != (want)) {                                                        \
            fprintf(stderr, "FAIL %s:%d: %s returned %d (%s), want %d\n", __FILE__,  \
                    __LINE__, #call, (int)got_, nvmlErrorString(got_), (int)(want)); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

/* stderr into a temporary file, to count the lines NVML writes. */
struct capture {
    int saved;
    FILE *file;
};

static void capture_begin(struct capture *c)
{
    fflush(stderr);
    c->file = tmpfile();
    c->saved = dup(STDERR_FILENO);
    dup2(fileno(c->file), STDERR_FILENO);
}

/* Returns the number of lines written, and they themselves in text. */
static int capture_end(struct capture *c, char *text, size_t size)
{
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    rewind(c->file);
    size_t n = fread(text, 1, size - 1, c->file);
    fclose(c->file);
    text[n] = '\0';
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    fputs(text, stderr); /* still shown in the test's log */
    return lines;
}

static int is_hex_lower(char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'); }

/* NVML's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lower-case hex. */
static int is_nvml_uuid(const char *s)
{
    if (strlen(s) != 40 || strncmp(s, "GPU-", 4) != 0)
        return 0;
    for (int i = 4; i < 40; i++) {
        int dash = i == 12 || i == 17 || i == 22 || i == 27;
        if (dash ? s[i] != '-' : !is_hex_lower(s[i]))
            return 0;
    }
    return 1;
}

static void *fake_cuda_symbol(const char *name)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *sym = lib ? dlsym(lib, name) : NULL;
    if (lib)
        dlclose(lib);
    return sym;
}

static int primary_refs(int dev)
{
    int (*fn)(int) = (int (*)(int))fake_cuda_symbol("flyt_fake_cuda_primary_refs");
    return fn ? fn(dev) : -1;
}

static int ctx_depth(void)
{
    int (*fn)(void) = (int (*)(void))fake_cuda_symbol("flyt_fake_cuda_ctx_depth");
    return fn ? fn() : -1;
}

static void test_before_init(void)
{
    unsigned int count = 7;
    nvmlDevice_t dev;
    int version;
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    CHECK(count == 7);
    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_ERROR_UNINITIALIZED);
    CHECK_RET(nvmlSystemGetCudaDriverVersion_v2(&version), NVML_ERROR_UNINITIALIZED);
    CHECK_RET(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    CHECK(strcmp(nvmlErrorString(NVML_SUCCESS), "Success") == 0);
    CHECK(strlen(nvmlErrorString(NVML_ERROR_UNINITIALIZED)) > 0);
    CHECK(strlen(nvmlErrorString((nvmlReturn_t)12345)) > 0);
}

/* Without a driver NVML fails as NVIDIA's does, says so in one line, and
 * tries again on the next nvmlInit. */
static void test_failed_init(void)
{
    struct capture cap;
    char text[1024];
    unsigned int count = 7;

    setenv("FLYT_NVML_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    capture_begin(&cap);
    CHECK_RET(nvmlInit_v2(), NVML_ERROR_LIBRARY_NOT_FOUND);
    CHECK(capture_end(&cap, text, sizeof text) == 1);
    CHECK(strstr(text, "NVML_ERROR_LIBRARY_NOT_FOUND") != NULL);
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    CHECK_RET(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    unsetenv("FLYT_NVML_LIBCUDA");

    setenv("FLYT_FAKE_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
    capture_begin(&cap);
    CHECK_RET(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
    CHECK(capture_end(&cap, text, sizeof text) == 1);
    CHECK(strstr(text, "NVML_ERROR_DRIVER_NOT_LOADED") != NULL);
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    /* NVML_INIT_FLAG_NO_GPUS: a driver without GPUs is no failure. */
    CHECK_RET(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    CHECK(count == 0);
    CHECK_RET(nvmlShutdown(), NVML_SUCCESS);
    setenv("FLYT_FAKE_CUDA_INIT_ERROR", "999", 1); /* anything else, even with the flag */
    CHECK_RET(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_ERROR_DRIVER_NOT_LOADED);
    unsetenv("FLYT_FAKE_CUDA_INIT_ERROR");
}

static void test_system(void)
{
    char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int version = 0;
    unsigned int count = 7;

    CHECK_RET(nvmlSystemGetCudaDriverVersion(&version), NVML_SUCCESS);
    CHECK(version == 13000);
    version = 0;
    CHECK_RET(nvmlSystemGetCudaDriverVersion_v2(&version), NVML_SUCCESS);
    CHECK(version == 13000);
    CHECK_RET(nvmlSystemGetCudaDriverVersion_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);

    unsetenv("FLYT_NVML_DRIVER_VERSION");
    CHECK_RET(nvmlSystemGetDriverVersion(text, sizeof text), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlSystemGetNVMLVersion(text, sizeof text), NVML_SUCCESS);
    CHECK(strcmp(text, "13") == 0); /* the CUDA driver's major version */
    setenv("FLYT_NVML_DRIVER_VERSION", "580.95.05", 1);
    CHECK_RET(nvmlSystemGetDriverVersion(text, sizeof text), NVML_SUCCESS);
    CHECK(strcmp(text, "580.95.05") == 0);
    CHECK_RET(nvmlSystemGetDriverVersion(text, 9), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_RET(nvmlSystemGetNVMLVersion(text, sizeof text), NVML_SUCCESS);
    CHECK(strcmp(text, "13.580.95.05") == 0);
    unsetenv("FLYT_NVML_DRIVER_VERSION");

    CHECK_RET(nvmlUnitGetCount(&count), NVML_SUCCESS);
    CHECK(count == 0);
    count = 7;
    CHECK_RET(nvmlGetExcludedDeviceCount(&count), NVML_SUCCESS);
    CHECK(count == 0);
}

static void check_handle_by_pci(const char *bus_id, nvmlDevice_t want, nvmlReturn_t want_ret)
{
    nvmlDevice_t got = NULL;
    CHECK_RET(nvmlDeviceGetHandleByPciBusId_v2(bus_id, &got), want_ret);
    if (want_ret == NVML_SUCCESS && got != want)
        fprintf(stderr, "FAIL: %s found the wrong device\n", bus_id), failures++;
    got = NULL;
    CHECK_RET(nvmlDeviceGetHandleByPciBusId(bus_id, &got), want_ret);
    if (want_ret == NVML_SUCCESS && got != want)
        fprintf(stderr, "FAIL: %s (v1) found the wrong device\n", bus_id), failures++;
}

static void test_lookup(nvmlDevice_t dev[2])
{
    unsigned int count = 0, index = 7;
    nvmlDevice_t h = NULL;
    int not_a_device;

    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    CHECK(count == 2);
    count = 0;
    CHECK_RET(nvmlDeviceGetCount(&count), NVML_SUCCESS);
    CHECK(count == 2);
    CHECK_RET(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);

    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(0, &dev[0]), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(1, &dev[1]), NVML_SUCCESS);
    CHECK(dev[0] != NULL && dev[1] != NULL && dev[0] != dev[1]);
    CHECK_RET(nvmlDeviceGetHandleByIndex(1, &h), NVML_SUCCESS);
    CHECK(h == dev[1]);
    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(2, &h), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);

    CHECK_RET(nvmlDeviceGetIndex(dev[1], &index), NVML_SUCCESS);
    CHECK(index == 1);
    CHECK_RET(nvmlDeviceGetIndex(NULL, &index), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlDeviceGetIndex((nvmlDevice_t)(void *)&not_a_device, &index),
              NVML_ERROR_INVALID_ARGUMENT);

    CHECK_RET(nvmlDeviceGetHandleByUUID("GPU-12345678-9abc-def0-0123-456789abcdee", &h),
              NVML_SUCCESS);
    CHECK(h == dev[1]);
    CHECK_RET(nvmlDeviceGetHandleByUUID("GPU-12345678-9abc-def0-0123-456789abcdef", &h),
              NVML_SUCCESS);
    CHECK(h == dev[0]);
    CHECK_RET(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h),
              NVML_ERROR_NOT_FOUND);
    CHECK_RET(nvmlDeviceGetHandleByUUID(NULL, &h), NVML_ERROR_INVALID_ARGUMENT);

    check_handle_by_pci("00000000:3B:00.0", dev[0], NVML_SUCCESS);
    check_handle_by_pci("0000:5e:00.0", dev[1], NVML_SUCCESS);
    check_handle_by_pci("3b:00.0", dev[0], NVML_SUCCESS);
    check_handle_by_pci("0000:3b:00.1", NULL, NVML_ERROR_NOT_FOUND);
    check_handle_by_pci("0000:99:00.0", NULL, NVML_ERROR_NOT_FOUND);
    check_handle_by_pci("0001:3b:00.0", NULL, NVML_ERROR_NOT_FOUND);
    check_handle_by_pci("not a bus id", NULL, NVML_ERROR_INVALID_ARGUMENT);
    check_handle_by_pci("0000:3b:00.0 trailing", NULL, NVML_ERROR_INVALID_ARGUMENT);
}

static void test_identity(nvmlDevice_t dev[2])
{
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    int major = 0, minor = 7;

    CHECK_RET(nvmlDeviceGetName(dev[0], text, NVML_DEVICE_NAME_BUFFER_SIZE), NVML_SUCCESS);
    CHECK(strcmp(text, "Flyt virtual GPU") == 0);
    CHECK_RET(nvmlDeviceGetName(dev[0], text, 5), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_RET(nvmlDeviceGetName(dev[0], NULL, 64), NVML_ERROR_INVALID_ARGUMENT);

    CHECK_RET(nvmlDeviceGetUUID(dev[0], text, NVML_DEVICE_UUID_BUFFER_SIZE), NVML_SUCCESS);
    CHECK(is_nvml_uuid(text));
    CHECK(strcmp(text, "GPU-12345678-9abc-def0-0123-456789abcdef") == 0);
    CHECK_RET(nvmlDeviceGetUUID(dev[1], text, 41), NVML_SUCCESS);
    CHECK(strcmp(text, "GPU-12345678-9abc-def0-0123-456789abcdee") == 0);
    CHECK_RET(nvmlDeviceGetUUID(dev[1], text, 40), NVML_ERROR_INSUFFICIENT_SIZE);

    nvmlPciInfo_t pci;
    memset(&pci, 0xaa, sizeof pci);
    CHECK_RET(nvmlDeviceGetPciInfo_v3(dev[0], &pci), NVML_SUCCESS);
    CHECK(pci.domain == 0 && pci.bus == 0x3b && pci.device == 0);
    CHECK(strcmp(pci.busId, "00000000:3B:00.0") == 0);
    CHECK(strcmp(pci.busIdLegacy, "0000:3B:00.0") == 0);
    CHECK((pci.pciDeviceId & 0xffff) == 0x10de);
    memset(&pci, 0xaa, sizeof pci);
    CHECK_RET(nvmlDeviceGetPciInfo_v2(dev[1], &pci), NVML_SUCCESS);
    CHECK(strcmp(pci.busId, "00000000:5E:00.0") == 0 && pci.bus == 0x5e);
    CHECK_RET(nvmlDeviceGetPciInfo_v3(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT);
    /* v1 callers allocated the 52-byte struct of old: nothing beyond it is written. */
    unsigned char old[sizeof(nvmlPciInfo_t)];
    memset(old, 0xaa, sizeof old);
    CHECK_RET(nvmlDeviceGetPciInfo(dev[0], (nvmlPciInfo_t *)(void *)old), NVML_SUCCESS);
    CHECK(strcmp((const char *)old, "0000:3B:00.0") == 0);
    CHECK(old[52] == 0xaa && old[sizeof old - 1] == 0xaa);

    CHECK_RET(nvmlDeviceGetCudaComputeCapability(dev[0], &major, &minor), NVML_SUCCESS);
    CHECK(major == 9 && minor == 0);
    nvmlDeviceArchitecture_t arch = 0;
    CHECK_RET(nvmlDeviceGetArchitecture(dev[0], &arch), NVML_SUCCESS);
    CHECK(arch == NVML_DEVICE_ARCH_HOPPER);
    unsigned int n = 0;
    CHECK_RET(nvmlDeviceGetNumGpuCores(dev[0], &n), NVML_SUCCESS);
    CHECK(n == 56 * 128);
    nvmlBrandType_t brand = NVML_BRAND_TESLA;
    CHECK_RET(nvmlDeviceGetBrand(dev[0], &brand), NVML_SUCCESS);
    CHECK(brand == NVML_BRAND_UNKNOWN);
    n = 7;
    CHECK_RET(nvmlDeviceGetMultiGpuBoard(dev[0], &n), NVML_SUCCESS);
    CHECK(n == 0);
    CHECK_RET(nvmlDeviceGetMemoryBusWidth(dev[0], &n), NVML_SUCCESS);
    CHECK(n == 5120);
}

static void test_memory(nvmlDevice_t dev[2])
{
    nvmlMemory_t m;
    nvmlMemory_v2_t m2;

    CHECK_RET(nvmlDeviceGetMemoryInfo(dev[0], &m), NVML_SUCCESS);
    CHECK(m.total == 16 * GIB && m.free == 12 * GIB && m.used == 4 * GIB);
    /* NVML pushed the device's primary context around cuMemGetInfo and
     * popped it again; it retains the context once, however often it asks. */
    CHECK(ctx_depth() == 0);
    CHECK_RET(nvmlDeviceGetMemoryInfo(dev[0], &m), NVML_SUCCESS);
    CHECK(primary_refs(0) == 1);
    CHECK(primary_refs(1) == 0);

    memset(&m2, 0, sizeof m2);
    m2.version = nvmlMemory_v2;
    CHECK_RET(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2), NVML_SUCCESS);
    CHECK(m2.version == nvmlMemory_v2);
    CHECK(m2.total == 16 * GIB && m2.free == 10 * GIB && m2.used == 6 * GIB &&
          m2.reserved == 0);
    CHECK(primary_refs(1) == 1);
    CHECK(ctx_depth() == 0);
    m2.version = 1;
    CHECK_RET(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    CHECK_RET(nvmlDeviceGetMemoryInfo(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlDeviceGetMemoryInfo(NULL, &m), NVML_ERROR_INVALID_ARGUMENT);
    CHECK(nvmlMemory_v2 == ((unsigned int)sizeof(nvmlMemory_v2_t) | 2U << 24));
}

static void test_modes(nvmlDevice_t dev[2])
{
    unsigned int v = 7, w = 7;
    nvmlEnableState_t cur = NVML_FEATURE_DISABLED, pend = NVML_FEATURE_DISABLED;
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_PROHIBITED;

    CHECK_RET(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_SM, &v), NVML_SUCCESS);
    CHECK(v == 1755);
    CHECK_RET(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_GRAPHICS, &v), NVML_SUCCESS);
    CHECK(v == 1755);
    CHECK_RET(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_MEM, &v), NVML_SUCCESS);
    CHECK(v == 2619);
    CHECK_RET(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_VIDEO, &v), NVML_ERROR_NOT_SUPPORTED);

    CHECK_RET(nvmlDeviceGetComputeMode(dev[0], &mode), NVML_SUCCESS);
    CHECK(mode == NVML_COMPUTEMODE_DEFAULT);
    CHECK_RET(nvmlDeviceGetEccMode(dev[0], &cur, &pend), NVML_SUCCESS);
    CHECK(cur == NVML_FEATURE_ENABLED && pend == NVML_FEATURE_ENABLED);
    cur = NVML_FEATURE_ENABLED;
    CHECK_RET(nvmlDeviceGetDisplayMode(dev[0], &cur), NVML_SUCCESS);
    CHECK(cur == NVML_FEATURE_DISABLED);
    CHECK_RET(nvmlDeviceGetMigMode(dev[0], &v, &w), NVML_SUCCESS);
    CHECK(v == NVML_DEVICE_MIG_DISABLE && w == NVML_DEVICE_MIG_DISABLE);
    CHECK_RET(nvmlDeviceGetMigMode(dev[0], &v, NULL), NVML_ERROR_INVALID_ARGUMENT);
    v = 7;
    CHECK_RET(nvmlDeviceIsMigDeviceHandle(dev[0], &v), NVML_SUCCESS);
    CHECK(v == 0);

    nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
    CHECK_RET(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_READ, &st), NVML_SUCCESS);
    CHECK(st == NVML_P2P_STATUS_OK);
    CHECK_RET(nvmlDeviceGetP2PStatus(dev[0], dev[0], NVML_P2P_CAPS_INDEX_WRITE, &st),
              NVML_SUCCESS);
    CHECK(st == NVML_P2P_STATUS_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_NVLINK, &st),
              NVML_ERROR_NOT_SUPPORTED);
}

/* What the VM cannot see is "not supported", not a made-up 0. */
static void test_not_visible(nvmlDevice_t dev[2])
{
    nvmlUtilization_t u;
    unsigned int v;
    nvmlPstates_t p;
    nvmlIntNvLinkDeviceType_t t;
    nvmlEnableState_t e;

    CHECK_RET(nvmlDeviceGetUtilizationRates(dev[0], &u), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetUtilizationRates(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU, &v),
              NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetPowerUsage(dev[0], &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetFanSpeed(dev[0], &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_SM, &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetPerformanceState(dev[0], &p), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetPersistenceMode(dev[0], &e), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetMinorNumber(dev[0], &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetCurrPcieLinkGeneration(dev[0], &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetCurrPcieLinkWidth(dev[0], &v), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetNvLinkState(dev[0], 0, &e), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetNvLinkRemoteDeviceType(dev[0], 0, &t), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceGetTemperature(NULL, NVML_TEMPERATURE_GPU, &v),
              NVML_ERROR_INVALID_ARGUMENT);

    /* The processes run on the GPU server: the VM sees none. */
    nvmlProcessInfo_t infos[4];
    nvmlProcessInfo_v1_t old[4];
    unsigned int count = 4;
    CHECK_RET(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, infos), NVML_SUCCESS);
    CHECK(count == 0);
    count = 0;
    CHECK_RET(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, NULL), NVML_SUCCESS);
    count = 4;
    CHECK_RET(nvmlDeviceGetComputeRunningProcesses(dev[1], &count, old), NVML_SUCCESS);
    CHECK(count == 0);
    CHECK_RET(nvmlDeviceGetGraphicsRunningProcesses_v3(dev[0], NULL, infos),
              NVML_ERROR_INVALID_ARGUMENT);
}

/* A function Flyt does not carry out: not supported, said once per name. */
static void test_stub(void)
{
    struct capture cap;
    char text[1024];
    nvmlReturn_t (*serial)(void) = (nvmlReturn_t(*)(void))dlsym(RTLD_DEFAULT,
                                                                 "nvmlDeviceGetSerial");
    CHECK(serial != NULL);
    if (serial == NULL)
        return;
    capture_begin(&cap);
    nvmlReturn_t r1 = serial(), r2 = serial();
    CHECK(capture_end(&cap, text, sizeof text) == 1);
    CHECK(strstr(text, "nvmlDeviceGetSerial") != NULL);
    CHECK(r1 == NVML_ERROR_NOT_SUPPORTED && r2 == NVML_ERROR_NOT_SUPPORTED);
}

/* The PCI identity with its class, and event sets that exist but are never
 * told of an event. */
static void test_pci_ext_and_events(nvmlDevice_t dev[2])
{
    nvmlPciInfoExt_t ext = {.version = 0};
    nvmlPciInfo_t pci;
    CHECK_RET(nvmlDeviceGetPciInfoExt(dev[1], &ext), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    CHECK_RET(nvmlDeviceGetPciInfoExt(dev[1], NULL), NVML_ERROR_INVALID_ARGUMENT);
    ext.version = nvmlPciInfoExt_v1;
    CHECK(nvmlPciInfoExt_v1 == 0x1000040);
    CHECK_RET(nvmlDeviceGetPciInfoExt(dev[1], &ext), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetPciInfo_v3(dev[1], &pci), NVML_SUCCESS);
    CHECK(strcmp(ext.busId, pci.busId) == 0 && ext.bus == pci.bus && ext.device == pci.device);
    CHECK(ext.baseClass == 3 && ext.subClass == 2 && ext.version == nvmlPciInfoExt_v1);

    nvmlEventSet_t set = NULL;
    unsigned long long types = 1;
    nvmlEventData_t data;
    CHECK_RET(nvmlEventSetCreate(NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlEventSetCreate(&set), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetSupportedEventTypes(dev[0], &types), NVML_SUCCESS);
    CHECK(types == 0);
    CHECK_RET(nvmlDeviceRegisterEvents(dev[0], 0x8 /* Xid */, set), NVML_ERROR_NOT_SUPPORTED);
    CHECK_RET(nvmlDeviceRegisterEvents(dev[0], 0x8, NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_RET(nvmlEventSetWait_v2(set, &data, 5), NVML_ERROR_TIMEOUT);
    CHECK_RET(nvmlEventSetFree(set), NVML_SUCCESS);
}

/* nvidia-smi's private table: its size first, a device by index from slot
 * 81, an empty process list from 213-215, any other slot refused without
 * touching its arguments; another table id refused and named once. */
typedef nvmlReturn_t (*internal_slot)(uintptr_t, uintptr_t, uintptr_t, uintptr_t);

static void test_internal_table(nvmlDevice_t dev[2])
{
    static const unsigned char smi_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                             0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
    unsigned char other_id[16];
    memcpy(other_id, smi_id, sizeof other_id);
    other_id[15] ^= 1;
    const void *table = (const void *)1;
    struct capture cap;
    char text[1024];
    CHECK_RET(nvmlInternalGetExportTable(NULL, smi_id), NVML_ERROR_INVALID_ARGUMENT);
    capture_begin(&cap);
    CHECK_RET(nvmlInternalGetExportTable(&table, other_id), NVML_ERROR_NOT_SUPPORTED);
    CHECK(capture_end(&cap, text, sizeof text) == 1);
    CHECK(strstr(text, "c4fe3e6c") != NULL && table == NULL);
    CHECK_RET(nvmlInternalGetExportTable(&table, smi_id), NVML_SUCCESS);
    if (table == NULL)
        return;
    const uintptr_t *slot = table;
    CHECK(slot[0] == 256 * sizeof(uintptr_t));

    nvmlDevice_t got = NULL;
    CHECK_RET(((internal_slot)slot[81])(1, (uintptr_t)&got, 0x22, 0), NVML_SUCCESS);
    CHECK(got == dev[1]);
    CHECK_RET(((internal_slot)slot[81])(7, (uintptr_t)&got, 0x22, 0),
              NVML_ERROR_INVALID_ARGUMENT);

    unsigned count = 250;
    CHECK_RET(((internal_slot)slot[214])((uintptr_t)dev[0], (uintptr_t)&count, 0, 0),
              NVML_SUCCESS);
    CHECK(count == 0);
    count = 250;
    CHECK_RET(((internal_slot)slot[213])(0, (uintptr_t)&count, 0, 0),
              NVML_ERROR_INVALID_ARGUMENT);
    CHECK(count == 250);

    unsigned untouched = 77;
    CHECK_RET(((internal_slot)slot[100])((uintptr_t)dev[0], (uintptr_t)&untouched, 0, 0),
              NVML_ERROR_NOT_SUPPORTED);
    CHECK(untouched == 77);
}

/* Every name in the list resolves, in libnvidia-ml.so.1 itself. */
static void test_exports(const char *list)
{
    FILE *f = fopen(list, "r");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    char line[256];
    int names = 0, missing = 0;
    while (lib != NULL && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        names++;
        Dl_info info;
        void *sym = dlsym(lib, line);
        if (sym == NULL || !dladdr(sym, &info) || strstr(info.dli_fname, "libnvidia-ml") == NULL) {
            if (missing++ < 10)
                fprintf(stderr, "FAIL: %s is not exported\n", line);
        }
    }
    fclose(f);
    if (lib != NULL)
        dlclose(lib);
    CHECK(missing == 0);
    CHECK(names >= 400);
    printf("exports: %d names checked\n", names);
}

static void test_shutdown(void)
{
    unsigned int count = 0;
    /* Reference-counted: the second nvmlInit needs its own nvmlShutdown. */
    CHECK_RET(nvmlShutdown(), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    CHECK(primary_refs(0) == 1);
    CHECK_RET(nvmlShutdown(), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    CHECK_RET(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    /* The last shutdown gave back the primary contexts NVML retained. */
    CHECK(primary_refs(0) == 0 && primary_refs(1) == 0);

    nvmlDevice_t dev = NULL;
    CHECK_RET(nvmlInit(), NVML_SUCCESS);
    CHECK_RET(nvmlDeviceGetHandleByIndex_v2(1, &dev), NVML_SUCCESS);
    CHECK_RET(nvmlShutdown(), NVML_SUCCESS);
    /* A handle kept past shutdown is refused, not followed. */
    char name[NVML_DEVICE_NAME_BUFFER_SIZE];
    CHECK_RET(nvmlDeviceGetName(dev, name, sizeof name), NVML_ERROR_UNINITIALIZED);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s NVML_EXPORTS_LIST\n", argv[0]);
        return 2;
    }
    nvmlDevice_t dev[2] = {NULL, NULL};
    test_before_init();
    test_failed_init();
    /* As NVIDIA's, answered before nvmlInit. */
    char version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "";
    CHECK_RET(nvmlSystemGetNVMLVersion(version, sizeof version), NVML_SUCCESS);
    CHECK(strcmp(version, "13") == 0);
    CHECK_RET(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_RET(nvmlInitWithFlags(0), NVML_SUCCESS);
    /* Our fake, not some other libcuda.so.1: the test is meaningless otherwise. */
    if (fake_cuda_symbol("flyt_fake_cuda_primary_refs") == NULL) {
        fprintf(stderr, "FAIL: NVML did not load the test's fake libcuda.so.1 "
                        "(is it first on LD_LIBRARY_PATH?)\n");
        return 1;
    }
    test_system();
    test_lookup(dev);
    if (dev[0] != NULL && dev[1] != NULL) {
        test_identity(dev);
        test_memory(dev);
        test_modes(dev);
        test_internal_table(dev);
        test_pci_ext_and_events(dev);
        test_not_visible(dev);
    }
    test_stub();
    test_exports(argv[1]);
    test_shutdown();
    if (failures) {
        fprintf(stderr, "test_nvml: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_nvml: all checks passed\n");
    return 0;
}
