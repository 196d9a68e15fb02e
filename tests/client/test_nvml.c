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

#include "check.h"
#include "flyt_nvml.h"

#define GIB (1024ULL * 1024 * 1024)

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
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(count, 7, "count == 7");
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_ERROR_UNINITIALIZED,
             "nvmlDeviceGetHandleByIndex_v2(0, &dev)");
    CHECK_EQ(nvmlSystemGetCudaDriverVersion_v2(&version), NVML_ERROR_UNINITIALIZED,
             "nvmlSystemGetCudaDriverVersion_v2(&version)");
    CHECK_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED, "nvmlShutdown()");
    CHECK_STR_EQ(nvmlErrorString(NVML_SUCCESS), "Success",
                 "strcmp(nvmlErrorString(NVML_SUCCESS), \"Success\") == 0");
    CHECK_GT(strlen(nvmlErrorString(NVML_ERROR_UNINITIALIZED)), 0,
             "strlen(nvmlErrorString(NVML_ERROR_UNINITIALIZED)) > 0");
    CHECK_GT(strlen(nvmlErrorString((nvmlReturn_t)12345)), 0,
             "strlen(nvmlErrorString((nvmlReturn_t)12345)) > 0");
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
    CHECK_EQ(nvmlInit_v2(), NVML_ERROR_LIBRARY_NOT_FOUND, "nvmlInit_v2()");
    CHECK_EQ(capture_end(&cap, text, sizeof text), 1, "capture_end(&cap, text, sizeof text) == 1");
    CHECK_NE(strstr(text, "NVML_ERROR_LIBRARY_NOT_FOUND"), NULL,
             "strstr(text, \"NVML_ERROR_LIBRARY_NOT_FOUND\") != NULL");
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED, "nvmlShutdown()");
    unsetenv("FLYT_NVML_LIBCUDA");

    setenv("FLYT_FAKE_CUDA_INIT_ERROR", "100", 1); /* CUDA_ERROR_NO_DEVICE */
    capture_begin(&cap);
    CHECK_EQ(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED, "nvmlInit_v2()");
    CHECK_EQ(capture_end(&cap, text, sizeof text), 1, "capture_end(&cap, text, sizeof text) == 1");
    CHECK_NE(strstr(text, "NVML_ERROR_DRIVER_NOT_LOADED"), NULL,
             "strstr(text, \"NVML_ERROR_DRIVER_NOT_LOADED\") != NULL");
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED, "nvmlDeviceGetCount_v2(&count)");
    /* NVML_INIT_FLAG_NO_GPUS: a driver without GPUs is no failure. */
    CHECK_EQ(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_SUCCESS,
             "nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS)");
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(count, 0, "count == 0");
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS, "nvmlShutdown()");
    setenv("FLYT_FAKE_CUDA_INIT_ERROR", "999", 1); /* anything else, even with the flag */
    CHECK_EQ(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_ERROR_DRIVER_NOT_LOADED,
             "nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS)");
    unsetenv("FLYT_FAKE_CUDA_INIT_ERROR");
}

static void test_system(void)
{
    char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int version = 0;
    unsigned int count = 7;

    CHECK_EQ(nvmlSystemGetCudaDriverVersion(&version), NVML_SUCCESS,
             "nvmlSystemGetCudaDriverVersion(&version)");
    CHECK_EQ(version, 13000, "version == 13000");
    version = 0;
    CHECK_EQ(nvmlSystemGetCudaDriverVersion_v2(&version), NVML_SUCCESS,
             "nvmlSystemGetCudaDriverVersion_v2(&version)");
    CHECK_EQ(version, 13000, "version == 13000");
    CHECK_EQ(nvmlSystemGetCudaDriverVersion_v2(NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlSystemGetCudaDriverVersion_v2(NULL)");

    unsetenv("FLYT_NVML_DRIVER_VERSION");
    CHECK_EQ(nvmlSystemGetDriverVersion(text, sizeof text), NVML_ERROR_NOT_SUPPORTED,
             "nvmlSystemGetDriverVersion(text, sizeof text)");
    CHECK_EQ(nvmlSystemGetNVMLVersion(text, sizeof text), NVML_SUCCESS,
             "nvmlSystemGetNVMLVersion(text, sizeof text)");
    CHECK_STR_EQ(text, "13", "strcmp(text, \"13\") == 0"); /* the CUDA driver's major version */
    setenv("FLYT_NVML_DRIVER_VERSION", "580.95.05", 1);
    CHECK_EQ(nvmlSystemGetDriverVersion(text, sizeof text), NVML_SUCCESS,
             "nvmlSystemGetDriverVersion(text, sizeof text)");
    CHECK_STR_EQ(text, "580.95.05", "strcmp(text, \"580.95.05\") == 0");
    CHECK_EQ(nvmlSystemGetDriverVersion(text, 9), NVML_ERROR_INSUFFICIENT_SIZE,
             "nvmlSystemGetDriverVersion(text, 9)");
    CHECK_EQ(nvmlSystemGetNVMLVersion(text, sizeof text), NVML_SUCCESS,
             "nvmlSystemGetNVMLVersion(text, sizeof text)");
    CHECK_STR_EQ(text, "13.580.95.05", "strcmp(text, \"13.580.95.05\") == 0");
    unsetenv("FLYT_NVML_DRIVER_VERSION");

    CHECK_EQ(nvmlUnitGetCount(&count), NVML_SUCCESS, "nvmlUnitGetCount(&count)");
    CHECK_EQ(count, 0, "count == 0");
    count = 7;
    CHECK_EQ(nvmlGetExcludedDeviceCount(&count), NVML_SUCCESS, "nvmlGetExcludedDeviceCount(&count)");
    CHECK_EQ(count, 0, "count == 0");
}

static void check_handle_by_pci(const char *bus_id, nvmlDevice_t want, nvmlReturn_t want_ret)
{
    nvmlDevice_t got = NULL;
    CHECK_EQ(nvmlDeviceGetHandleByPciBusId_v2(bus_id, &got), want_ret,
             "nvmlDeviceGetHandleByPciBusId_v2(bus_id, &got)");
    if (want_ret == NVML_SUCCESS)
        CHECK_EQ(got, want, "%s finds its device", bus_id);
    got = NULL;
    CHECK_EQ(nvmlDeviceGetHandleByPciBusId(bus_id, &got), want_ret,
             "nvmlDeviceGetHandleByPciBusId(bus_id, &got)");
    if (want_ret == NVML_SUCCESS)
        CHECK_EQ(got, want, "%s finds its device (v1)", bus_id);
}

static void test_lookup(nvmlDevice_t dev[2])
{
    unsigned int count = 0, index = 7;
    nvmlDevice_t h = NULL;
    int not_a_device;

    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(count, 2, "count == 2");
    count = 0;
    CHECK_EQ(nvmlDeviceGetCount(&count), NVML_SUCCESS, "nvmlDeviceGetCount(&count)");
    CHECK_EQ(count, 2, "count == 2");
    CHECK_EQ(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT, "nvmlDeviceGetCount_v2(NULL)");

    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev[0]), NVML_SUCCESS,
             "nvmlDeviceGetHandleByIndex_v2(0, &dev[0])");
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev[1]), NVML_SUCCESS,
             "nvmlDeviceGetHandleByIndex_v2(1, &dev[1])");
    CHECK_NE(dev[0], NULL, "dev[0] != NULL");
    CHECK_NE(dev[1], NULL, "dev[1] != NULL");
    CHECK_NE(dev[0], dev[1], "dev[0] != dev[1]");
    CHECK_EQ(nvmlDeviceGetHandleByIndex(1, &h), NVML_SUCCESS, "nvmlDeviceGetHandleByIndex(1, &h)");
    CHECK_EQ(h, dev[1], "h == dev[1]");
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(2, &h), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetHandleByIndex_v2(2, &h)");
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetHandleByIndex_v2(0, NULL)");

    CHECK_EQ(nvmlDeviceGetIndex(dev[1], &index), NVML_SUCCESS, "nvmlDeviceGetIndex(dev[1], &index)");
    CHECK_EQ(index, 1, "index == 1");
    CHECK_EQ(nvmlDeviceGetIndex(NULL, &index), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetIndex(NULL, &index)");
    CHECK_EQ(nvmlDeviceGetIndex((nvmlDevice_t)(void *)&not_a_device, &index), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetIndex((nvmlDevice_t)(void *)&not_a_device, &index)");

    CHECK_EQ(nvmlDeviceGetHandleByUUID("GPU-12345678-9abc-def0-0123-456789abcdee", &h), NVML_SUCCESS,
             "nvmlDeviceGetHandleByUUID(\"GPU-12345678-9abc-def0-0123-456789abcdee\", &h)");
    CHECK_EQ(h, dev[1], "h == dev[1]");
    CHECK_EQ(nvmlDeviceGetHandleByUUID("GPU-12345678-9abc-def0-0123-456789abcdef", &h), NVML_SUCCESS,
             "nvmlDeviceGetHandleByUUID(\"GPU-12345678-9abc-def0-0123-456789abcdef\", &h)");
    CHECK_EQ(h, dev[0], "h == dev[0]");
    CHECK_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h), NVML_ERROR_NOT_FOUND,
             "nvmlDeviceGetHandleByUUID(\"GPU-00000000-0000-0000-0000-000000000000\", &h)");
    CHECK_EQ(nvmlDeviceGetHandleByUUID(NULL, &h), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetHandleByUUID(NULL, &h)");

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

    CHECK_EQ(nvmlDeviceGetName(dev[0], text, NVML_DEVICE_NAME_BUFFER_SIZE), NVML_SUCCESS,
             "nvmlDeviceGetName(dev[0], text, NVML_DEVICE_NAME_BUFFER_SIZE)");
    CHECK_STR_EQ(text, "Flyt virtual GPU", "strcmp(text, \"Flyt virtual GPU\") == 0");
    CHECK_EQ(nvmlDeviceGetName(dev[0], text, 5), NVML_ERROR_INSUFFICIENT_SIZE,
             "nvmlDeviceGetName(dev[0], text, 5)");
    CHECK_EQ(nvmlDeviceGetName(dev[0], NULL, 64), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetName(dev[0], NULL, 64)");

    CHECK_EQ(nvmlDeviceGetUUID(dev[0], text, NVML_DEVICE_UUID_BUFFER_SIZE), NVML_SUCCESS,
             "nvmlDeviceGetUUID(dev[0], text, NVML_DEVICE_UUID_BUFFER_SIZE)");
    CHECK(is_nvml_uuid(text), "is_nvml_uuid(text)");
    CHECK_STR_EQ(text, "GPU-12345678-9abc-def0-0123-456789abcdef",
                 "strcmp(text, \"GPU-12345678-9abc-def0-0123-456789abcdef\") == 0");
    CHECK_EQ(nvmlDeviceGetUUID(dev[1], text, 41), NVML_SUCCESS, "nvmlDeviceGetUUID(dev[1], text, 41)");
    CHECK_STR_EQ(text, "GPU-12345678-9abc-def0-0123-456789abcdee",
                 "strcmp(text, \"GPU-12345678-9abc-def0-0123-456789abcdee\") == 0");
    CHECK_EQ(nvmlDeviceGetUUID(dev[1], text, 40), NVML_ERROR_INSUFFICIENT_SIZE,
             "nvmlDeviceGetUUID(dev[1], text, 40)");

    nvmlPciInfo_t pci;
    memset(&pci, 0xaa, sizeof pci);
    CHECK_EQ(nvmlDeviceGetPciInfo_v3(dev[0], &pci), NVML_SUCCESS, "nvmlDeviceGetPciInfo_v3(dev[0], &pci)");
    CHECK_EQ(pci.domain, 0, "pci.domain == 0");
    CHECK_EQ(pci.bus, 0x3b, "pci.bus == 0x3b");
    CHECK_EQ(pci.device, 0, "pci.device == 0");
    CHECK_STR_EQ(pci.busId, "00000000:3B:00.0", "strcmp(pci.busId, \"00000000:3B:00.0\") == 0");
    CHECK_STR_EQ(pci.busIdLegacy, "0000:3B:00.0", "strcmp(pci.busIdLegacy, \"0000:3B:00.0\") == 0");
    CHECK_EQ((pci.pciDeviceId & 0xffff), 0x10de, "(pci.pciDeviceId & 0xffff) == 0x10de");
    memset(&pci, 0xaa, sizeof pci);
    CHECK_EQ(nvmlDeviceGetPciInfo_v2(dev[1], &pci), NVML_SUCCESS, "nvmlDeviceGetPciInfo_v2(dev[1], &pci)");
    CHECK_STR_EQ(pci.busId, "00000000:5E:00.0", "strcmp(pci.busId, \"00000000:5E:00.0\") == 0");
    CHECK_EQ(pci.bus, 0x5e, "pci.bus == 0x5e");
    CHECK_EQ(nvmlDeviceGetPciInfo_v3(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetPciInfo_v3(dev[0], NULL)");
    /* v1 callers allocated the 52-byte struct of old: nothing beyond it is written. */
    unsigned char old[sizeof(nvmlPciInfo_t)];
    memset(old, 0xaa, sizeof old);
    CHECK_EQ(nvmlDeviceGetPciInfo(dev[0], (nvmlPciInfo_t *)(void *)old), NVML_SUCCESS,
             "nvmlDeviceGetPciInfo(dev[0], (nvmlPciInfo_t *)(void *)old)");
    CHECK_STR_EQ((const char *)old, "0000:3B:00.0", "strcmp((const char *)old, \"0000:3B:00.0\") == 0");
    CHECK_EQ(old[52], 0xaa, "old[52] == 0xaa");
    CHECK_EQ(old[sizeof old - 1], 0xaa, "old[sizeof old - 1] == 0xaa");

    CHECK_EQ(nvmlDeviceGetCudaComputeCapability(dev[0], &major, &minor), NVML_SUCCESS,
             "nvmlDeviceGetCudaComputeCapability(dev[0], &major, &minor)");
    CHECK_EQ(major, 9, "major == 9");
    CHECK_EQ(minor, 0, "minor == 0");
    nvmlDeviceArchitecture_t arch = 0;
    CHECK_EQ(nvmlDeviceGetArchitecture(dev[0], &arch), NVML_SUCCESS,
             "nvmlDeviceGetArchitecture(dev[0], &arch)");
    CHECK_EQ(arch, NVML_DEVICE_ARCH_HOPPER, "arch == NVML_DEVICE_ARCH_HOPPER");
    unsigned int n = 0;
    CHECK_EQ(nvmlDeviceGetNumGpuCores(dev[0], &n), NVML_SUCCESS, "nvmlDeviceGetNumGpuCores(dev[0], &n)");
    CHECK_EQ(n, 56 * 128, "n == 56 * 128");
    nvmlBrandType_t brand = NVML_BRAND_TESLA;
    CHECK_EQ(nvmlDeviceGetBrand(dev[0], &brand), NVML_SUCCESS, "nvmlDeviceGetBrand(dev[0], &brand)");
    CHECK_EQ(brand, NVML_BRAND_UNKNOWN, "brand == NVML_BRAND_UNKNOWN");
    n = 7;
    CHECK_EQ(nvmlDeviceGetMultiGpuBoard(dev[0], &n), NVML_SUCCESS, "nvmlDeviceGetMultiGpuBoard(dev[0], &n)");
    CHECK_EQ(n, 0, "n == 0");
    CHECK_EQ(nvmlDeviceGetMemoryBusWidth(dev[0], &n), NVML_SUCCESS,
             "nvmlDeviceGetMemoryBusWidth(dev[0], &n)");
    CHECK_EQ(n, 5120, "n == 5120");
}

static void test_memory(nvmlDevice_t dev[2])
{
    nvmlMemory_t m;
    nvmlMemory_v2_t m2;

    CHECK_EQ(nvmlDeviceGetMemoryInfo(dev[0], &m), NVML_SUCCESS, "nvmlDeviceGetMemoryInfo(dev[0], &m)");
    CHECK_EQ(m.total, 16 * GIB, "m.total == 16 * GIB");
    CHECK_EQ(m.free, 12 * GIB, "m.free == 12 * GIB");
    CHECK_EQ(m.used, 4 * GIB, "m.used == 4 * GIB");
    /* NVML pushed the device's primary context around cuMemGetInfo and
     * popped it again; it retains the context once, however often it asks. */
    CHECK_EQ(ctx_depth(), 0, "ctx_depth() == 0");
    CHECK_EQ(nvmlDeviceGetMemoryInfo(dev[0], &m), NVML_SUCCESS, "nvmlDeviceGetMemoryInfo(dev[0], &m)");
    CHECK_EQ(primary_refs(0), 1, "primary_refs(0) == 1");
    CHECK_EQ(primary_refs(1), 0, "primary_refs(1) == 0");

    memset(&m2, 0, sizeof m2);
    m2.version = nvmlMemory_v2;
    CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2), NVML_SUCCESS,
             "nvmlDeviceGetMemoryInfo_v2(dev[1], &m2)");
    CHECK_EQ(m2.version, nvmlMemory_v2, "m2.version == nvmlMemory_v2");
    CHECK_EQ(m2.total, 16 * GIB, "m2.total == 16 * GIB");
    CHECK_EQ(m2.free, 10 * GIB, "m2.free == 10 * GIB");
    CHECK_EQ(m2.used, 6 * GIB, "m2.used == 6 * GIB");
    CHECK_EQ(m2.reserved, 0, "m2.reserved == 0");
    CHECK_EQ(primary_refs(1), 1, "primary_refs(1) == 1");
    CHECK_EQ(ctx_depth(), 0, "ctx_depth() == 0");
    m2.version = 1;
    CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
             "nvmlDeviceGetMemoryInfo_v2(dev[1], &m2)");
    CHECK_EQ(nvmlDeviceGetMemoryInfo(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetMemoryInfo(dev[0], NULL)");
    CHECK_EQ(nvmlDeviceGetMemoryInfo(NULL, &m), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetMemoryInfo(NULL, &m)");
    /* The value applications built with NVIDIA's nvml.h pass (40 bytes, version 2),
     * not the macro's own expansion again. */
    CHECK_EQ(nvmlMemory_v2, 0x02000028u, "nvmlMemory_v2 is 0x02000028, as in NVIDIA's nvml.h");
}

static void test_modes(nvmlDevice_t dev[2])
{
    unsigned int v = 7, w = 7;
    nvmlEnableState_t cur = NVML_FEATURE_DISABLED, pend = NVML_FEATURE_DISABLED;
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_PROHIBITED;

    CHECK_EQ(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_SM, &v), NVML_SUCCESS,
             "nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_SM, &v)");
    CHECK_EQ(v, 1755, "v == 1755");
    CHECK_EQ(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_GRAPHICS, &v), NVML_SUCCESS,
             "nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_GRAPHICS, &v)");
    CHECK_EQ(v, 1755, "v == 1755");
    CHECK_EQ(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_MEM, &v), NVML_SUCCESS,
             "nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_MEM, &v)");
    CHECK_EQ(v, 2619, "v == 2619");
    CHECK_EQ(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_VIDEO, &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_VIDEO, &v)");

    CHECK_EQ(nvmlDeviceGetComputeMode(dev[0], &mode), NVML_SUCCESS,
             "nvmlDeviceGetComputeMode(dev[0], &mode)");
    CHECK_EQ(mode, NVML_COMPUTEMODE_DEFAULT, "mode == NVML_COMPUTEMODE_DEFAULT");
    CHECK_EQ(nvmlDeviceGetEccMode(dev[0], &cur, &pend), NVML_SUCCESS,
             "nvmlDeviceGetEccMode(dev[0], &cur, &pend)");
    CHECK_EQ(cur, NVML_FEATURE_ENABLED, "cur == NVML_FEATURE_ENABLED");
    CHECK_EQ(pend, NVML_FEATURE_ENABLED, "pend == NVML_FEATURE_ENABLED");
    cur = NVML_FEATURE_ENABLED;
    CHECK_EQ(nvmlDeviceGetDisplayMode(dev[0], &cur), NVML_SUCCESS, "nvmlDeviceGetDisplayMode(dev[0], &cur)");
    CHECK_EQ(cur, NVML_FEATURE_DISABLED, "cur == NVML_FEATURE_DISABLED");
    CHECK_EQ(nvmlDeviceGetMigMode(dev[0], &v, &w), NVML_SUCCESS, "nvmlDeviceGetMigMode(dev[0], &v, &w)");
    CHECK_EQ(v, NVML_DEVICE_MIG_DISABLE, "v == NVML_DEVICE_MIG_DISABLE");
    CHECK_EQ(w, NVML_DEVICE_MIG_DISABLE, "w == NVML_DEVICE_MIG_DISABLE");
    CHECK_EQ(nvmlDeviceGetMigMode(dev[0], &v, NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetMigMode(dev[0], &v, NULL)");
    v = 7;
    CHECK_EQ(nvmlDeviceIsMigDeviceHandle(dev[0], &v), NVML_SUCCESS,
             "nvmlDeviceIsMigDeviceHandle(dev[0], &v)");
    CHECK_EQ(v, 0, "v == 0");

    nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
    CHECK_EQ(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_READ, &st), NVML_SUCCESS,
             "nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_READ, &st)");
    CHECK_EQ(st, NVML_P2P_STATUS_OK, "st == NVML_P2P_STATUS_OK");
    CHECK_EQ(nvmlDeviceGetP2PStatus(dev[0], dev[0], NVML_P2P_CAPS_INDEX_WRITE, &st), NVML_SUCCESS,
             "nvmlDeviceGetP2PStatus(dev[0], dev[0], NVML_P2P_CAPS_INDEX_WRITE, &st)");
    CHECK_EQ(st, NVML_P2P_STATUS_NOT_SUPPORTED, "st == NVML_P2P_STATUS_NOT_SUPPORTED");
    CHECK_EQ(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_NVLINK, &st)");
}

/* What the VM cannot see is "not supported", not a made-up 0. */
static void test_not_visible(nvmlDevice_t dev[2])
{
    nvmlUtilization_t u;
    unsigned int v;
    nvmlPstates_t p;
    nvmlIntNvLinkDeviceType_t t;
    nvmlEnableState_t e;

    CHECK_EQ(nvmlDeviceGetUtilizationRates(dev[0], &u), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetUtilizationRates(dev[0], &u)");
    CHECK_EQ(nvmlDeviceGetUtilizationRates(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetUtilizationRates(dev[0], NULL)");
    CHECK_EQ(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU, &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU, &v)");
    CHECK_EQ(nvmlDeviceGetPowerUsage(dev[0], &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetPowerUsage(dev[0], &v)");
    CHECK_EQ(nvmlDeviceGetFanSpeed(dev[0], &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetFanSpeed(dev[0], &v)");
    CHECK_EQ(nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_SM, &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_SM, &v)");
    CHECK_EQ(nvmlDeviceGetPerformanceState(dev[0], &p), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetPerformanceState(dev[0], &p)");
    CHECK_EQ(nvmlDeviceGetPersistenceMode(dev[0], &e), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetPersistenceMode(dev[0], &e)");
    CHECK_EQ(nvmlDeviceGetMinorNumber(dev[0], &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetMinorNumber(dev[0], &v)");
    CHECK_EQ(nvmlDeviceGetCurrPcieLinkGeneration(dev[0], &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetCurrPcieLinkGeneration(dev[0], &v)");
    CHECK_EQ(nvmlDeviceGetCurrPcieLinkWidth(dev[0], &v), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetCurrPcieLinkWidth(dev[0], &v)");
    CHECK_EQ(nvmlDeviceGetNvLinkState(dev[0], 0, &e), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetNvLinkState(dev[0], 0, &e)");
    CHECK_EQ(nvmlDeviceGetNvLinkRemoteDeviceType(dev[0], 0, &t), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceGetNvLinkRemoteDeviceType(dev[0], 0, &t)");
    CHECK_EQ(nvmlDeviceGetTemperature(NULL, NVML_TEMPERATURE_GPU, &v), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetTemperature(NULL, NVML_TEMPERATURE_GPU, &v)");

    /* The processes run on the GPU server: the VM sees none. */
    nvmlProcessInfo_t infos[4];
    nvmlProcessInfo_v1_t old[4];
    unsigned int count = 4;
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, infos), NVML_SUCCESS,
             "nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, infos)");
    CHECK_EQ(count, 0, "count == 0");
    count = 0;
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, NULL), NVML_SUCCESS,
             "nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &count, NULL)");
    count = 4;
    CHECK_EQ(nvmlDeviceGetComputeRunningProcesses(dev[1], &count, old), NVML_SUCCESS,
             "nvmlDeviceGetComputeRunningProcesses(dev[1], &count, old)");
    CHECK_EQ(count, 0, "count == 0");
    CHECK_EQ(nvmlDeviceGetGraphicsRunningProcesses_v3(dev[0], NULL, infos), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetGraphicsRunningProcesses_v3(dev[0], NULL, infos)");
}

/* A function Flyt does not carry out: not supported, said once per name. */
static void test_stub(void)
{
    struct capture cap;
    char text[1024];
    nvmlReturn_t (*serial)(void) = (nvmlReturn_t(*)(void))dlsym(RTLD_DEFAULT,
                                                                 "nvmlDeviceGetSerial");
    CHECK_NE(serial, NULL, "serial != NULL");
    if (serial == NULL)
        return;
    capture_begin(&cap);
    nvmlReturn_t r1 = serial(), r2 = serial();
    CHECK_EQ(capture_end(&cap, text, sizeof text), 1, "capture_end(&cap, text, sizeof text) == 1");
    CHECK_NE(strstr(text, "nvmlDeviceGetSerial"), NULL, "strstr(text, \"nvmlDeviceGetSerial\") != NULL");
    CHECK_EQ(r1, NVML_ERROR_NOT_SUPPORTED, "r1 == NVML_ERROR_NOT_SUPPORTED");
    CHECK_EQ(r2, NVML_ERROR_NOT_SUPPORTED, "r2 == NVML_ERROR_NOT_SUPPORTED");
}

/* The PCI identity with its class, and event sets that exist but are never
 * told of an event. */
static void test_pci_ext_and_events(nvmlDevice_t dev[2])
{
    nvmlPciInfoExt_t ext = {.version = 0};
    nvmlPciInfo_t pci;
    CHECK_EQ(nvmlDeviceGetPciInfoExt(dev[1], &ext), NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
             "nvmlDeviceGetPciInfoExt(dev[1], &ext)");
    CHECK_EQ(nvmlDeviceGetPciInfoExt(dev[1], NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceGetPciInfoExt(dev[1], NULL)");
    ext.version = nvmlPciInfoExt_v1;
    CHECK_EQ(nvmlPciInfoExt_v1, 0x1000040, "nvmlPciInfoExt_v1 == 0x1000040");
    CHECK_EQ(nvmlDeviceGetPciInfoExt(dev[1], &ext), NVML_SUCCESS, "nvmlDeviceGetPciInfoExt(dev[1], &ext)");
    CHECK_EQ(nvmlDeviceGetPciInfo_v3(dev[1], &pci), NVML_SUCCESS, "nvmlDeviceGetPciInfo_v3(dev[1], &pci)");
    CHECK_STR_EQ(ext.busId, pci.busId, "strcmp(ext.busId, pci.busId) == 0");
    CHECK_EQ(ext.bus, pci.bus, "ext.bus == pci.bus");
    CHECK_EQ(ext.device, pci.device, "ext.device == pci.device");
    CHECK_EQ(ext.baseClass, 3, "ext.baseClass == 3");
    CHECK_EQ(ext.subClass, 2, "ext.subClass == 2");
    CHECK_EQ(ext.version, nvmlPciInfoExt_v1, "ext.version == nvmlPciInfoExt_v1");

    nvmlEventSet_t set = NULL;
    unsigned long long types = 1;
    nvmlEventData_t data;
    CHECK_EQ(nvmlEventSetCreate(NULL), NVML_ERROR_INVALID_ARGUMENT, "nvmlEventSetCreate(NULL)");
    CHECK_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS, "nvmlEventSetCreate(&set)");
    CHECK_EQ(nvmlDeviceGetSupportedEventTypes(dev[0], &types), NVML_SUCCESS,
             "nvmlDeviceGetSupportedEventTypes(dev[0], &types)");
    CHECK_EQ(types, 0, "types == 0");
    CHECK_EQ(nvmlDeviceRegisterEvents(dev[0], 0x8 /* Xid */, set), NVML_ERROR_NOT_SUPPORTED,
             "nvmlDeviceRegisterEvents(dev[0], 0x8 /* Xid */, set)");
    CHECK_EQ(nvmlDeviceRegisterEvents(dev[0], 0x8, NULL), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlDeviceRegisterEvents(dev[0], 0x8, NULL)");
    CHECK_EQ(nvmlEventSetWait_v2(set, &data, 5), NVML_ERROR_TIMEOUT, "nvmlEventSetWait_v2(set, &data, 5)");
    CHECK_EQ(nvmlEventSetFree(set), NVML_SUCCESS, "nvmlEventSetFree(set)");
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
    CHECK_EQ(nvmlInternalGetExportTable(NULL, smi_id), NVML_ERROR_INVALID_ARGUMENT,
             "nvmlInternalGetExportTable(NULL, smi_id)");
    capture_begin(&cap);
    CHECK_EQ(nvmlInternalGetExportTable(&table, other_id), NVML_ERROR_NOT_SUPPORTED,
             "nvmlInternalGetExportTable(&table, other_id)");
    CHECK_EQ(capture_end(&cap, text, sizeof text), 1, "capture_end(&cap, text, sizeof text) == 1");
    CHECK_NE(strstr(text, "c4fe3e6c"), NULL, "strstr(text, \"c4fe3e6c\") != NULL");
    CHECK_EQ(table, NULL, "table == NULL");
    CHECK_EQ(nvmlInternalGetExportTable(&table, smi_id), NVML_SUCCESS,
             "nvmlInternalGetExportTable(&table, smi_id)");
    if (table == NULL)
        return;
    const uintptr_t *slot = table;
    CHECK_EQ(slot[0], 256 * sizeof(uintptr_t), "slot[0] == 256 * sizeof(uintptr_t)");

    nvmlDevice_t got = NULL;
    CHECK_EQ(((internal_slot)slot[81])(1, (uintptr_t)&got, 0x22, 0), NVML_SUCCESS,
             "((internal_slot)slot[81])(1, (uintptr_t)&got, 0x22, 0)");
    CHECK_EQ(got, dev[1], "got == dev[1]");
    CHECK_EQ(((internal_slot)slot[81])(7, (uintptr_t)&got, 0x22, 0), NVML_ERROR_INVALID_ARGUMENT,
             "((internal_slot)slot[81])(7, (uintptr_t)&got, 0x22, 0)");

    unsigned count = 250;
    CHECK_EQ(((internal_slot)slot[214])((uintptr_t)dev[0], (uintptr_t)&count, 0, 0), NVML_SUCCESS,
             "((internal_slot)slot[214])((uintptr_t)dev[0], (uintptr_t)&count, 0, 0)");
    CHECK_EQ(count, 0, "count == 0");
    count = 250;
    CHECK_EQ(((internal_slot)slot[213])(0, (uintptr_t)&count, 0, 0), NVML_ERROR_INVALID_ARGUMENT,
             "((internal_slot)slot[213])(0, (uintptr_t)&count, 0, 0)");
    CHECK_EQ(count, 250, "count == 250");

    unsigned untouched = 77;
    CHECK_EQ(((internal_slot)slot[100])((uintptr_t)dev[0], (uintptr_t)&untouched, 0, 0), NVML_ERROR_NOT_SUPPORTED,
             "((internal_slot)slot[100])((uintptr_t)dev[0], (uintptr_t)&untouched, 0, 0)");
    CHECK_EQ(untouched, 77, "untouched == 77");
}

/* Every name in the list resolves, in libnvidia-ml.so.1 itself. */
static void test_exports(const char *list)
{
    FILE *f = fopen(list, "r");
    CHECK_NE(f, NULL, "f != NULL");
    if (f == NULL)
        return;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK_NE(lib, NULL, "lib != NULL");
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
    CHECK_EQ(missing, 0, "missing == 0");
    CHECK_GE(names, 400, "names >= 400");
    printf("exports: %d names checked\n", names);
}

static void test_shutdown(void)
{
    unsigned int count = 0;
    /* Reference-counted: the second nvmlInit needs its own nvmlShutdown. */
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS, "nvmlShutdown()");
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(primary_refs(0), 1, "primary_refs(0) == 1");
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS, "nvmlShutdown()");
    CHECK_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED, "nvmlDeviceGetCount_v2(&count)");
    CHECK_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED, "nvmlShutdown()");
    /* The last shutdown gave back the primary contexts NVML retained. */
    CHECK_EQ(primary_refs(0), 0, "primary_refs(0) == 0");
    CHECK_EQ(primary_refs(1), 0, "primary_refs(1) == 0");

    nvmlDevice_t dev = NULL;
    CHECK_EQ(nvmlInit(), NVML_SUCCESS, "nvmlInit()");
    CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev), NVML_SUCCESS, "nvmlDeviceGetHandleByIndex_v2(1, &dev)");
    CHECK_EQ(nvmlShutdown(), NVML_SUCCESS, "nvmlShutdown()");
    /* A handle kept past shutdown is refused, not followed. */
    char name[NVML_DEVICE_NAME_BUFFER_SIZE];
    CHECK_EQ(nvmlDeviceGetName(dev, name, sizeof name), NVML_ERROR_UNINITIALIZED,
             "nvmlDeviceGetName(dev, name, sizeof name)");
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
    CHECK_EQ(nvmlSystemGetNVMLVersion(version, sizeof version), NVML_SUCCESS,
             "nvmlSystemGetNVMLVersion(version, sizeof version)");
    CHECK_STR_EQ(version, "13", "strcmp(version, \"13\") == 0");
    CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS, "nvmlInit_v2()");
    CHECK_EQ(nvmlInitWithFlags(0), NVML_SUCCESS, "nvmlInitWithFlags(0)");
    /* Our fake, not some other libcuda.so.1: the test is meaningless otherwise. */
    CHECK(fake_cuda_symbol("flyt_fake_cuda_primary_refs"),
          "NVML loaded the test's fake libcuda.so.1 (first on LD_LIBRARY_PATH)");
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
    return check_done();
}
