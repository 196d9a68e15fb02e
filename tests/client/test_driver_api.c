/*
 * Flyt's libcuda.so.1 called directly, as driver-API programs, Triton and
 * NVIDIA's libraries call it, against a flyt-server running the host-memory
 * test backend (no kernels run there). Run by run_with_server.sh.
 */
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define CU_OK(call) CHECK_EQ((call), CUDA_SUCCESS, "%s", #call)

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry k(.param .u64 p)\n{\n ret;\n}\n";

static void test_init_and_device(CUdevice *dev)
{
    int n = -1, v = 0;
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED, "device queries need cuInit first");
    CU_OK(cuDriverGetVersion(&v));
    CHECK_EQ(v, CUDA_VERSION, "driver version %d is the API carried (%d)", v, CUDA_VERSION);
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    CHECK_EQ(n, 1, "one device per session (%d)", n);
    CU_OK(cuDeviceGet(dev, 0));
    CHECK_EQ(cuDeviceGet(dev, 1), CUDA_ERROR_INVALID_DEVICE, "ordinal 1 is no device");
    CUatomicOperation ops[2] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_FLOAT_MAX};
    unsigned caps[2] = {7, 7};
    CU_OK(cuDeviceGetHostAtomicCapabilities(caps, ops, 2, *dev));
    CHECK(caps[0] == 0 && caps[1] == 0, "no native host atomics, as HOST_NATIVE_ATOMIC_SUPPORTED says");
    ops[1] = CU_ATOMIC_OPERATION_MAX;
    CHECK_EQ(cuDeviceGetHostAtomicCapabilities(caps, ops, 2, *dev), CUDA_ERROR_INVALID_VALUE,
             "an unknown atomic operation");
    CHECK_EQ(cuDeviceGetHostAtomicCapabilities(caps, ops, 1, 1), CUDA_ERROR_INVALID_DEVICE, "device 1");
    char name[256];
    CU_OK(cuDeviceGetName(name, sizeof name, 0));
    int sms = 0, major = 0;
    CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CU_OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    CHECK_GT(sms, 0, "attributes come from the snapshot: %d SMs, cc %d", sms, major);
    CHECK_GE(major, 7, "attributes come from the snapshot: %d SMs, cc %d", sms, major);
    CHECK_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE,
             "an attribute past the last is refused");
    size_t total = 0;
    CU_OK(cuDeviceTotalMem(&total, 0));
    CHECK_GT(total, 0, "total memory %zu", total);
    char bus[32], bus2[32];
    CU_OK(cuDeviceGetPCIBusId(bus, sizeof bus, 0));
    CUdevice by_bus = -1;
    CU_OK(cuDeviceGetByPCIBusId(&by_bus, bus));
    CHECK_EQ(by_bus, 0, "the device is found by its bus id %s", bus);
    snprintf(bus2, sizeof bus2, "ff:ff.9");
    CHECK_EQ(cuDeviceGetByPCIBusId(&by_bus, bus2), CUDA_ERROR_INVALID_VALUE, "and not by another");
    const char *s = NULL;
    CU_OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(s, "error names: %s", s ? s : "-");
    CHECK_STR_EQ(s, "CUDA_ERROR_INVALID_VALUE", "error names: %s", s ? s : "-");
    CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s, "error strings: %s", s ? s : "-");
    CHECK_STR_EQ(s, "out of memory", "error strings: %s", s ? s : "-");
    CHECK_EQ(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE, "an unknown code has no name");
}

static void test_contexts(CUdevice dev)
{
    CUcontext cur = (CUcontext)1, primary = NULL, mine = NULL, popped = NULL;
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, NULL, "no context is current at first");
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc(&d, 16), CUDA_ERROR_INVALID_CONTEXT, "allocation needs a context");
    unsigned flags = 1;
    int active = 1;
    CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    CHECK_EQ(active, 0, "the primary context starts inactive");
    CU_OK(cuDevicePrimaryCtxRetain(&primary, dev));
    CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    CHECK_EQ(active, 1, "retained, it is active");
    CU_OK(cuCtxCreate(&mine, NULL, 0, dev));
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, mine, "a created context becomes current");
    CHECK_NE(mine, primary, "a created context becomes current");
    unsigned long long id1 = 0, id2 = 0;
    CU_OK(cuCtxGetId(primary, &id1));
    CU_OK(cuCtxGetId(mine, &id2));
    CHECK_NE(id1, id2, "contexts have distinct ids");
    CU_OK(cuCtxPushCurrent(primary));
    CU_OK(cuCtxPopCurrent(&popped));
    CHECK_EQ(popped, primary, "push and pop");
    CU_OK(cuCtxDestroy(mine));
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK_EQ(cur, NULL, "destroying the current context pops it");
    CHECK_EQ(cuCtxPushCurrent(mine), CUDA_ERROR_INVALID_CONTEXT, "a destroyed context is invalid");
    CU_OK(cuCtxSetCurrent(primary));
    CUdevice got = -1;
    CU_OK(cuCtxGetDevice(&got));
    CHECK_EQ(got, dev, "the current context's device");
    CUexecAffinityParam aff;
    int sms = 0;
    CU_OK(cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK_EQ((int)aff.param.smCount.val, sms, "exec affinity: the virtual GPU's %d SMs", sms);
}

static CUmemcpy3DOperand pointer_operand(CUdeviceptr p, size_t row, size_t layer)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row;
    o.op.ptr.layerHeight = layer;
    return o;
}

static CUmemcpy3DOperand array_operand(CUarray a, size_t x, size_t y)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
    o.op.array.array = a;
    o.op.array.offset.x = x;
    o.op.array.offset.y = y;
    return o;
}

/* cuMemcpy3DBatchAsync: a 4x3 block of floats from a host buffer with rows of
 * 8 into an array at (2, 1), out of it packed into device memory, and back
 * to the host within the call; elements are the array's, bytes between
 * pointers. Copies within one batch have no order (CUDA's rule): each
 * dependent step is a batch of its own. */
/* CUDA 12.8's ABI, which names the copy that failed (cuda.h maps the name to _v2) */
static CUresult cuMemcpy3DBatchAsync_v1(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *failed,
                                        unsigned long long flags, CUstream s)
{
    CUresult (*fn)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream) =
        (CUresult(*)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream))dlsym(
            RTLD_DEFAULT, "cuMemcpy3DBatchAsync");
    return fn ? fn(n, ops, failed, flags, s) : CUDA_ERROR_NOT_FOUND;
}

static void test_copy_3d_batch(void)
{
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 16, .Height = 8, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUDA_ARRAY3D_DESCRIPTOR hd = {.Width = 16, .Height = 8, .Format = CU_AD_FORMAT_HALF, .NumChannels = 1};
    CUarray a, half;
    CU_OK(cuArray3DCreate(&a, &ad));
    CU_OK(cuArray3DCreate(&half, &hd));
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 12 * sizeof(float)));
    float src[3][8], back[12];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 8; x++)
            src[y][x] = (float)(y * 10 + x);
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUDA_MEMCPY3D_BATCH_OP ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].src = pointer_operand((CUdeviceptr)(uintptr_t)src, 8, 0);
    ops[0].dst = array_operand(a, 2, 1);
    ops[0].extent = (CUextent3D){4, 3, 1};
    ops[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    ops[1].src = array_operand(a, 2, 1);
    ops[1].dst = pointer_operand(d, 0, 0);
    ops[1].extent = (CUextent3D){4, 3, 1};
    ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    ops[2].src = pointer_operand(d, 0, 0);
    ops[2].dst = pointer_operand((CUdeviceptr)(uintptr_t)back, 0, 0);
    ops[2].extent = (CUextent3D){12 * sizeof(float), 1, 1};
    ops[2].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    for (int i = 0; i < 3; i++)
        CU_OK(cuMemcpy3DBatchAsync(1, ops + i, 0, s));
    int same = 1;
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++)
            same &= back[y * 4 + x] == src[y][x];
    CHECK(same, "a block through an array and device memory, back within the call");
    ops[0].extent.depth = 0;
    CHECK_EQ(cuMemcpy3DBatchAsync(3, ops, 0, s), CUDA_ERROR_INVALID_VALUE, "an empty extent");
    ops[0].extent.depth = 1;
    ops[1].srcAccessOrder = (CUmemcpySrcAccessOrder)9;
    size_t failed = 0;
    CHECK_EQ(cuMemcpy3DBatchAsync_v1(3, ops, &failed, 0, s), CUDA_ERROR_INVALID_VALUE,
             "an unknown access order");
    CHECK_EQ(failed, 1, "the copy that failed is named (%zu)", failed);
    ops[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    ops[2].flags = 2;
    CHECK_EQ(cuMemcpy3DBatchAsync(3, ops, 0, s), CUDA_ERROR_INVALID_VALUE, "an unknown copy flag");
    ops[2].flags = 0;
    CHECK_EQ(cuMemcpy3DBatchAsync(3, ops, 0, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE,
             "not on the legacy stream");
    ops[0].src = pointer_operand((CUdeviceptr)(uintptr_t)src, 3, 0);
    CHECK_EQ(cuMemcpy3DBatchAsync(1, ops, 0, s), CUDA_ERROR_INVALID_VALUE, "rows shorter than the copy");
    ops[0].src = array_operand(half, 0, 0);
    CHECK_EQ(cuMemcpy3DBatchAsync(1, ops, 0, s), CUDA_ERROR_INVALID_VALUE,
             "arrays of different element sizes");
    CU_OK(cuStreamDestroy(s));
    CU_OK(cuMemFree(d));
    CU_OK(cuArrayDestroy(a));
    CU_OK(cuArrayDestroy(half));
}

static void test_memory(void)
{
    CUdeviceptr d = 0, base = 0;
    size_t size = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    CU_OK(cuMemGetAddressRange(&base, &size, d + 100));
    CHECK_EQ(base, d, "address range of an inner pointer");
    CHECK_EQ(size, 4096, "address range of an inner pointer");
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 1));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE, "pointer attribute: device memory");
    char host_byte;
    CHECK_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&host_byte), CUDA_ERROR_INVALID_VALUE,
             "a pointer CUDA does not know has no attributes");
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    unsigned long long buffer_id = 1;
    type = 7;
    void *data[2] = {&type, &buffer_id};
    CU_OK(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)&host_byte));
    CHECK_EQ(type, 0, "but the batch query answers zeros for it");
    CHECK_EQ(buffer_id, 0, "but the batch query answers zeros for it");

    uint32_t words[256];
    CU_OK(cuMemsetD32(d, 0xCAFEF00Du, 256));
    CU_OK(cuMemcpyDtoH(words, d, sizeof words));
    CHECK_EQ(words[0], 0xCAFEF00Du, "cuMemsetD32 pattern");
    CHECK_EQ(words[255], 0xCAFEF00Du, "cuMemsetD32 pattern");
    CU_OK(cuMemsetD16(d, 0xBEEF, 512));
    uint16_t halves[4];
    CU_OK(cuMemcpyDtoH(halves, d + 1000, sizeof halves));
    CHECK_EQ(halves[0], 0xBEEF, "cuMemsetD16 pattern");
    CHECK_EQ(halves[3], 0xBEEF, "cuMemsetD16 pattern");
    CU_OK(cuMemsetD2D8(d, 64, 0x5A, 16, 4));
    unsigned char row[64];
    CU_OK(cuMemcpyDtoH(row, d + 64, sizeof row));
    CHECK_EQ(row[0], 0x5A, "cuMemsetD2D8 writes only the rectangle");
    CHECK_EQ(row[15], 0x5A, "cuMemsetD2D8 writes only the rectangle");
    CHECK_EQ(row[16], 0xEF, "cuMemsetD2D8 writes only the rectangle");

    /* unified addressing: cuMemcpy finds the direction itself */
    char in[100], out[100];
    for (int i = 0; i < 100; i++)
        in[i] = (char)i;
    CU_OK(cuMemcpy(d, (CUdeviceptr)in, sizeof in));
    CU_OK(cuMemcpy((CUdeviceptr)out, d, sizeof out));
    CHECK_MEM_EQ(in, out, sizeof in, "cuMemcpy host to device and back");

    /* registered memory: copies keep working, and the pages keep their bytes */
    size_t len = 1 << 20;
    char *reg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (size_t i = 0; i < len; i++)
        reg[i] = (char)(i * 7);
    CU_OK(cuMemHostRegister(reg, len, 0));
    CHECK_EQ(reg[12345], (char)(12345 * 7), "registration keeps the bytes");
    CHECK_EQ(cuMemHostRegister(reg, len, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "twice is refused");
    CUdeviceptr big;
    CU_OK(cuMemAlloc(&big, len));
    CU_OK(cuMemcpyHtoDAsync(big, reg, len, NULL));
    CU_OK(cuStreamSynchronize(NULL)); /* pinned memory is read when the copy runs */
    memset(reg, 0, len);
    CU_OK(cuMemcpyDtoHAsync(reg, big, len, NULL));
    CU_OK(cuCtxSynchronize());
    CHECK_EQ(reg[777], (char)(777 * 7), "asynchronous copies through registered memory");
    CHECK_EQ(reg[len - 1], (char)((len - 1) * 7), "asynchronous copies through registered memory");
    unsigned hflags = 9;
    CU_OK(cuMemHostGetFlags(&hflags, reg + 10));
    CU_OK(cuMemHostUnregister(reg));
    CHECK_EQ(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "unregistered once");
    CHECK_EQ(reg[777], (char)(777 * 7), "unregistering keeps the bytes");
    munmap(reg, len);

    /* a registration that starts and ends inside pages, and two neighbours */
    char *area = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 4 * 4096; i++)
        area[i] = (char)(i * 3);
    CU_OK(cuMemHostRegister(area + 100, 2 * 4096, 0));
    CU_OK(cuMemcpyHtoD(big, area + 100, 2 * 4096));
    char back[2 * 4096];
    CU_OK(cuMemcpyDtoH(back, big, sizeof back));
    CHECK_MEM_EQ(back, area + 100, sizeof back, "an unaligned registration copies right");
    CHECK_EQ(cuMemHostGetFlags(&hflags, area + 100 + 2 * 4096 - 1), CUDA_SUCCESS,
             "its last byte is registered, with the flags given");
    CHECK_EQ(hflags, 0, "its last byte is registered, with the flags given");
    CHECK_EQ(cuMemHostRegister(area + 3 * 4096, 4096, 0), CUDA_SUCCESS, "a neighbour after it");
    CU_OK(cuMemHostUnregister(area + 100));
    CHECK_EQ(cuMemHostGetFlags(&hflags, area + 2 * 4096 + 100), CUDA_ERROR_INVALID_VALUE,
             "unregistered: no piece of it is left");
    CHECK_EQ(cuMemHostGetFlags(&hflags, area + 3 * 4096), CUDA_SUCCESS, "the neighbour stays registered");
    CU_OK(cuMemHostUnregister(area + 3 * 4096));
    CU_OK(cuMemHostRegister(area + 100, 2 * 4096, 0));
    CU_OK(cuMemHostUnregister(area + 100));
    CHECK_EQ(area[5000], (char)(5000 * 3), "and the bytes are still the program's");
    munmap(area, 4 * 4096);
    CU_OK(cuMemFree(big));
    CU_OK(cuMemFree(d));
    CHECK_EQ(cuMemGetAddressRange(&base, &size, d), CUDA_ERROR_NOT_FOUND, "freed memory has no range");
}

/* Virtual memory management as PyTorch's expandable segments use it: a
 * reserved range, physical allocations mapped into it, access granted, data
 * through it, retain/release, and the errors on the way. */
static void test_vmm(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    int vmm = 0;
    CU_OK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    CHECK_EQ(vmm, 1, "the device says it supports virtual memory management");
    size_t gran = 0;
    CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK_EQ(gran, 2u << 20, "VMM granularity %zu", gran);
    CUmemAllocationProp other = prop;
    other.location.id = 1;
    CUmemGenericAllocationHandle h[2] = {0, 0}, again = 0;
    CHECK_EQ(cuMemCreate(&h[0], gran, &other, 0), CUDA_ERROR_INVALID_DEVICE,
             "cuMemCreate on a device the session lacks");
    CUdeviceptr va = 0;
    CU_OK(cuMemAddressReserve(&va, 3 * gran, 0, 0, 0));
    CU_OK(cuMemCreate(&h[0], gran, &prop, 0));
    CU_OK(cuMemCreate(&h[1], 2 * gran, &prop, 0));
    CHECK_EQ(cuMemMap(va, gran, 0, 0xdead, 0), CUDA_ERROR_INVALID_VALUE, "map of an unknown handle");
    CU_OK(cuMemMap(va, gran, 0, h[0], 0));
    CU_OK(cuMemMap(va + gran, 2 * gran, 0, h[1], 0));
    char word[8] = "vmm-data", back[8] = {0};
    CHECK_NE(cuMemcpyHtoD(va + 16, word, sizeof word), CUDA_SUCCESS,
             "no copy into a mapping the device may not access yet");
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, 3 * gran, &rw, 1));
    unsigned long long access = 0;
    CU_OK(cuMemGetAccess(&access, &rw.location, va + gran + 5));
    CHECK_EQ(access, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess: read-write");
    CU_OK(cuMemcpyHtoD(va + gran + 16, word, sizeof word));
    CU_OK(cuMemsetD8(va, 0x5a, gran));
    CU_OK(cuMemcpyDtoH(back, va + gran + 16, sizeof back));
    unsigned char first = 0;
    CU_OK(cuMemcpyDtoH(&first, va + gran - 1, 1));
    CHECK_MEM_EQ(back, word, sizeof word, "data through two mappings");
    CHECK_EQ(first, 0x5a, "data through two mappings");
    unsigned type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 100));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE, "a mapped address is device memory");
    CUmemAllocationProp got;
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h[1]));
    CHECK_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
             "allocation properties from the handle");
    CU_OK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + gran + 7)));
    CHECK_EQ(again, h[1], "retain gives the mapped allocation's handle");
    CU_OK(cuMemRelease(again));
    CU_OK(cuMemRelease(h[1])); /* mapped: the memory stays until unmapped */
    CU_OK(cuMemcpyDtoH(back, va + gran + 16, sizeof back));
    CHECK_MEM_EQ(back, word, sizeof word, "released but mapped memory keeps its data");
    CHECK_EQ(cuMemRelease(h[1]), CUDA_ERROR_INVALID_VALUE, "a handle released twice");
    CHECK_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h[1]), CUDA_ERROR_INVALID_VALUE,
             "a released handle has no properties any more");
    CHECK_NE(cuMemAddressFree(va, 3 * gran), CUDA_SUCCESS, "no freeing a range still mapped");
    CU_OK(cuMemUnmap(va, 3 * gran));
    CHECK_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 100), CUDA_ERROR_INVALID_VALUE,
             "an unmapped address is no memory");
    CU_OK(cuMemRelease(h[0]));
    CU_OK(cuMemAddressFree(va, 3 * gran));
    /* compression asked for and declined (the host backend compresses nothing):
     * the properties say what the driver granted, as cudaCompressibleMemory checks */
    CUmemAllocationProp compressible = prop;
    compressible.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
    CU_OK(cuMemCreate(&h[0], gran, &compressible, 0));
    CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h[0]));
    CHECK_EQ(got.allocFlags.compressionType, CU_MEM_ALLOCATION_COMP_NONE,
             "the compression granted, not the one asked for");
    CU_OK(cuMemRelease(h[0]));
    CHECK_EQ(cuMemExportToShareableHandle(&again, h[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE,
             "a released allocation does not export (test_ipc exports live ones)");
    CHECK_EQ(cuMemExportToShareableHandle(&again, h[0], CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED,
             "fabric handles stay refused");
}

static void *thread_stream_id(void *arg)
{
    CUcontext ctx = arg;
    cuCtxSetCurrent(ctx);
    unsigned long long *id = calloc(1, sizeof *id);
    cuStreamGetId(CU_STREAM_PER_THREAD, id);
    return id;
}

static void test_streams(void)
{
    CUstream s;
    CUevent a, b;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned flags = 0;
    CU_OK(cuStreamGetFlags(s, &flags));
    CHECK_EQ(flags, CU_STREAM_NON_BLOCKING, "stream flags");
    CU_OK(cuEventCreate(&a, 0));
    CU_OK(cuEventCreate(&b, 0));
    CU_OK(cuEventRecord(a, s));
    CU_OK(cuEventRecord(b, s));
    CU_OK(cuStreamWaitEvent(CU_STREAM_PER_THREAD, b, 0));
    CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CU_OK(cuEventSynchronize(b));
    float ms = -1;
    CU_OK(cuEventElapsedTime(&ms, a, b));
    CHECK(ms >= 0, "elapsed time");
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE, "not capturing");
    /* stream memory operations: plain calls of calls.api, one message each */
    CUdeviceptr flag;
    uint64_t words[2] = {0, 0};
    CU_OK(cuMemAlloc(&flag, 16));
    CU_OK(cuMemsetD8(flag, 0, 16));
    CU_OK(cuStreamWriteValue32(s, flag, 0x1234u, 0));
    CU_OK(cuStreamWaitValue32(s, flag, 0x1234u, CU_STREAM_WAIT_VALUE_EQ));
    CU_OK(cuStreamWriteValue64(CU_STREAM_PER_THREAD, flag + 8, 0x1122334455667788ull, 0));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemcpyDtoH(words, flag, sizeof words));
    CHECK_EQ(words[0], 0x1234u,
             "cuStreamWriteValue32/64 wrote %#llx %#llx", (unsigned long long)words[0], (unsigned long long)words[1]);
    CHECK_EQ(words[1], 0x1122334455667788ull,
             "cuStreamWriteValue32/64 wrote %#llx %#llx", (unsigned long long)words[0], (unsigned long long)words[1]);
    /* a batch of them (cuStreamBatchMemOp): in order, a barrier among them */
    CUstreamBatchMemOpParams ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = flag;
    ops[0].writeValue.value = 0x5678u;
    ops[0].writeValue.flags = CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[2].waitValue.address = flag;
    ops[2].waitValue.value = 0x5678u;
    ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    ops[3].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[3].writeValue.address = flag + 8;
    ops[3].writeValue.value64 = 0x99aabbccddeeff00ull;
    CU_OK(cuStreamBatchMemOp_v2(s, 4, ops, 0));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(words, flag, sizeof words));
    CHECK(words[0] == 0x5678u && words[1] == 0x99aabbccddeeff00ull,
          "cuStreamBatchMemOp wrote %#llx %#llx", (unsigned long long)words[0],
          (unsigned long long)words[1]);
    CHECK_EQ(cuStreamBatchMemOp_v2(s, 0, ops, 0), CUDA_ERROR_INVALID_VALUE, "an empty batch");
    CHECK_EQ(cuStreamBatchMemOp_v2(s, 4, ops, 1), CUDA_ERROR_INVALID_VALUE, "flags other than 0");
    /* the CUDA 8 ABI, under its own name (cuda.h maps the name to _v2) */
    CUresult (*batch_v1)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int) =
        (CUresult(*)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int))dlsym(
            RTLD_DEFAULT, "cuStreamBatchMemOp");
    CHECK(batch_v1 != NULL, "cuStreamBatchMemOp exported");
    CHECK_EQ(batch_v1(s, 4, ops, 0), CUDA_ERROR_INVALID_VALUE, "barriers only in the _v2 API");
    CU_OK(batch_v1(s, 1, ops + 3, 0));
    ops[1].memoryBarrier.flags = 7;
    CHECK_EQ(cuStreamBatchMemOp_v2(s, 4, ops, 0), CUDA_ERROR_INVALID_VALUE, "an unknown barrier scope");
    ops[0].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    ops[0].flushRemoteWrites.flags = 0;
    CHECK_EQ(cuStreamBatchMemOp_v2(s, 1, ops, 0), CUDA_ERROR_NOT_SUPPORTED,
             "remote-write flushes: the virtual GPU has no RDMA peers");
    CU_OK(cuMemFree(flag));
    CU_OK(cuEventDestroy(a));
    CU_OK(cuEventDestroy(b));
    CU_OK(cuStreamDestroy(s));

    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    pthread_t t[2];
    unsigned long long *ids[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, thread_stream_id, ctx);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], (void **)&ids[i]);
    CHECK(*ids[0], "each thread has its own default stream");
    CHECK(*ids[1], "each thread has its own default stream");
    CHECK_NE(*ids[0], *ids[1], "each thread has its own default stream");
    free(ids[0]);
    free(ids[1]);
}

/* A thread with no current context may use events and streams the program
 * created (NVIDIA's runtime makes no context current for cudaEventQuery or
 * cudaEventSynchronize: PyTorch's pin-memory thread); the NULL stream still
 * needs one. */
struct objects {
    CUstream s;
    CUevent a, b;
};

static void *thread_without_context(void *arg)
{
    struct objects *o = arg;
    CUcontext cur = (CUcontext)1;
    CU_OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL, "the new thread has no current context");
    CU_OK(cuEventRecord(o->a, o->s));
    CU_OK(cuEventRecord(o->b, o->s));
    CUresult q = cuStreamQuery(o->s);
    CHECK(q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY, "stream query: %d", (int)q);
    CU_OK(cuStreamSynchronize(o->s));
    CU_OK(cuEventQuery(o->b));
    CU_OK(cuEventSynchronize(o->a));
    float ms = -1;
    CU_OK(cuEventElapsedTime(&ms, o->a, o->b));
    CHECK_EQ(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT, "the NULL stream needs a context");
    CHECK_EQ(cuEventRecord(o->a, NULL), CUDA_ERROR_INVALID_CONTEXT, "so does recording on it");
    /* VMM calls name their device or addresses: PyTorch's expandable segments
     * grow from such threads (worker threads loading weights) */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle mem = 0;
    CU_OK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    CU_OK(cuMemCreate(&mem, gran, &prop, 0));
    CU_OK(cuMemMap(va, gran, 0, mem, 0));
    CUmemAccessDesc rw = {prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, gran, &rw, 1));
    CU_OK(cuMemUnmap(va, gran));
    CU_OK(cuMemRelease(mem));
    CU_OK(cuMemAddressFree(va, gran));
    return NULL;
}

static void test_objects_without_current_context(void)
{
    struct objects o;
    CU_OK(cuStreamCreate(&o.s, 0));
    CU_OK(cuEventCreate(&o.a, 0));
    CU_OK(cuEventCreate(&o.b, 0));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, thread_without_context, &o), 0, "thread");
    pthread_join(t, NULL);
    CU_OK(cuEventDestroy(o.a));
    CU_OK(cuEventDestroy(o.b));
    CU_OK(cuStreamDestroy(o.s));
}

/* ---- host functions in stream order ---- */

struct pinned_word {
    volatile uint32_t *word;
    uint32_t value;
};

/* Writes late, so that a copy that did not wait for it reads the old value. */
static void write_word_late(void *arg)
{
    struct pinned_word *w = arg;
    usleep(20000);
    *w->word = w->value;
}

/* One stream's host function writes pinned memory; the copy after it must
 * read what it wrote (CUDA: work after a host function waits for it). */
static void *host_func_then_copy(void *arg)
{
    uintptr_t lane = (uintptr_t)arg;
    CUstream s;
    CUdeviceptr d;
    uint32_t *pin = NULL;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemAlloc(&d, 4));
    CU_OK(cuMemHostAlloc((void **)&pin, 4096, 0));
    for (uint32_t i = 0; i < 3; i++) {
        struct pinned_word w = {pin, 0x1000u * (uint32_t)lane + i + 1};
        *pin = 0;
        CU_OK(cuLaunchHostFunc(s, write_word_late, &w));
        CU_OK(cuMemcpyHtoDAsync(d, pin, 4, s));
        CU_OK(cuStreamSynchronize(s));
        uint32_t got = 0;
        CU_OK(cuMemcpyDtoH(&got, d, 4));
        CHECK_EQ(got, w.value,
                 "lane %u: the copy after the host function read %#x, want %#x", (unsigned)lane, got, w.value);
    }
    CU_OK(cuMemFreeHost(pin));
    CU_OK(cuMemFree(d));
    CU_OK(cuStreamDestroy(s));
    return NULL;
}

static CUcontext order_ctx;

static void *host_func_ctx_thread(void *lane)
{
    cuCtxSetCurrent(order_ctx);
    return host_func_then_copy(lane);
}

static void test_host_func_order(void)
{
    cuCtxGetCurrent(&order_ctx);
    host_func_then_copy((void *)0);
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, host_func_ctx_thread, (void *)(i + 1));
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* a host function the server cannot enqueue is an error later, not a hang */
    CU_OK(cuLaunchHostFunc((CUstream)(uintptr_t)0x7fff0001, write_word_late, NULL));
    CUdeviceptr d;
    uint32_t v = 1;
    CUresult r = cuMemAlloc(&d, 4);
    if (r == CUDA_SUCCESS)
        r = cuMemcpyHtoD(d, &v, 4);
    CHECK_EQ(r, CUDA_ERROR_INVALID_HANDLE, "host function on no stream: %d", (int)r);
}

/* Launches the driver may refuse for what only the GPU knows wait for the
 * server's answer; the host backend runs no kernel, so its refusal shows
 * which launches waited. */
static void test_answered_launches(CUfunction f)
{
    CUdeviceptr none = 0;
    void *args[] = {&none};
    CHECK_EQ(cuLaunchKernel(f, 3, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS,
             "an ordinary launch is pipelined");
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_SUPPORTED, "its refusal comes at the next sync");
    CHECK_EQ(cuLaunchCooperativeKernel(f, 3, 1, 1, 32, 1, 1, 0, NULL, args),
             CUDA_ERROR_NOT_SUPPORTED, "a cooperative launch waits for its answer");
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = 2;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {.gridDimX = 3, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                          .blockDimY = 1, .blockDimZ = 1, .attrs = &attr, .numAttrs = 1};
    CHECK_EQ(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_NOT_SUPPORTED,
             "a grid that clusters of 2 do not tile waits for its answer");
    cfg.gridDimX = 4;
    CHECK_EQ(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_SUCCESS, "clusters tiling the grid: pipelined");
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_SUPPORTED, "its refusal comes at the next sync");
    CU_OK(cuCtxSynchronize());
}

static void test_modules(void)
{
    CUmodule m;
    CUfunction f, f2;
    CU_OK(cuModuleLoadData(&m, ptx));
    CU_OK(cuModuleGetFunction(&f, m, "k"));
    CU_OK(cuModuleGetFunction(&f2, m, "k"));
    CHECK_EQ(f, f2, "one handle per function");
    int threads = 0;
    CU_OK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    CHECK_GT(threads, 0, "function attributes come with the lookup (%d)", threads);
    const char *name = NULL;
    CU_OK(cuFuncGetName(&name, f));
    CHECK(name, "function name");
    CHECK_STR_EQ(name, "k", "function name");
    CHECK_EQ(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE,
             "an empty grid is refused at once");
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 4096, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE,
             "too many threads are refused at once");
    CHECK_EQ(cuLaunchKernel((CUfunction)(void *)&name, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE,
             "a bogus function is an invalid handle");
    test_answered_launches(f);
    int blocks = 0;
    CU_OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
    CHECK_GT(blocks, 0, "occupancy %d", blocks);
    int min_grid = 0, block = 0;
    CU_OK(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, NULL, 0, 0));
    CHECK_GT(block, 0, "potential block size %d, grid %d", block, min_grid);
    CHECK_GT(min_grid, 0, "potential block size %d, grid %d", block, min_grid);
    CUlibrary lib;
    CUkernel k;
    CU_OK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    CU_OK(cuLibraryGetKernel(&k, lib, "k"));
    CUfunction kf;
    CU_OK(cuKernelGetFunction(&kf, k));
    CHECK_EQ((void *)kf, (void *)k, "a kernel is usable as a function");
    CU_OK(cuLibraryUnload(lib));
    CU_OK(cuModuleUnload(m));
    CHECK_EQ(cuModuleGetFunction(&f, m, "k"), CUDA_ERROR_INVALID_HANDLE, "an unloaded module is gone");
    CHECK_NE(cuModuleLoadData(&m, "not an image"), CUDA_SUCCESS, "garbage is not an image");
}

/* cuLink*: the log buffers of cuLinkCreate's options get the server's logs
 * (the host backend links nothing: empty logs and CUDA_ERROR_NOT_SUPPORTED),
 * and their size options the bytes written. */
static void test_link_logs(void)
{
    char info[64], error[64];
    memset(info, 'x', sizeof info);
    memset(error, 'x', sizeof error);
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_LOG_VERBOSE};
    void *values[] = {info, (void *)(uintptr_t)sizeof info, error, (void *)(uintptr_t)sizeof error,
                      (void *)(uintptr_t)1};
    CUlinkState state;
    CU_OK(cuLinkCreate(5, options, values, &state));
    CU_OK(cuLinkAddData(state, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx), "k.ptx", 0, NULL, NULL));
    void *cubin = NULL;
    size_t size = 0;
    CHECK_EQ(cuLinkComplete(state, &cubin, &size), CUDA_ERROR_NOT_SUPPORTED, "the host backend cannot link");
    CHECK_STR_EQ(info, "", "the info log is written (empty)");
    CHECK_STR_EQ(error, "", "the error log is written (empty)");
    CHECK_EQ((uintptr_t)values[1], 1, "the info log's size option: the bytes written");
    CHECK_EQ((uintptr_t)values[3], 1, "the error log's size option: the bytes written");
    CU_OK(cuLinkDestroy(state));
}

/* The exported symbols and cuGetProcAddress agree, ABI version by version. */
static void test_proc_address(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CU_OK(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st));
    CHECK_NE(fn, NULL, "cuMemAlloc at 13000 is cuMemAlloc_v2");
    CHECK_EQ(fn, dlsym(lib, "cuMemAlloc_v2"), "cuMemAlloc at 13000 is cuMemAlloc_v2");
    CU_OK(cuGetProcAddress("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CHECK_NE(fn, NULL, "and per thread, the _ptds one");
    CHECK_EQ(fn, dlsym(lib, "cuMemcpyHtoD_v2_ptds"), "and per thread, the _ptds one");
    /* as the H100's driver 580 answers (tests/gpu/probes/procaddr_probe.c) */
    CHECK_EQ(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_SUCCESS,
             "an unknown name: success, and the status says why");
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "an unknown name is not found");
    CHECK_EQ(fn, NULL, "an unknown name: no function");
    CUresult (*unversioned)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(lib, "cuGetProcAddress");
    fn = &fn;
    CHECK_EQ(unversioned("cuNoSuchThing", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND,
             "the unversioned ABI, which has no status, says not found");
    CHECK_EQ(fn, (void *)&fn, "and leaves the pointer as it was");
    CHECK_EQ(unversioned("cuMemAlloc", &fn, 13000, 0), CUDA_SUCCESS, "and finds what is there");
    CHECK_EQ(fn, dlsym(lib, "cuMemAlloc_v2"), "and finds what is there");
    dlclose(lib);
}

/* Whether this run's server shares memory with us (Unix socket, FLYT_SHM on):
 * the client takes the first alternative of FLYT_SERVER that accepts, so the
 * first one that is a TCP address or an existing Unix socket decides. */
static int shares_memory(void)
{
    const char *addr = getenv("FLYT_SERVER"), *shm = getenv("FLYT_SHM");
    if (addr == NULL || (shm && strcmp(shm, "0") == 0))
        return 0;
    char list[512], *save = NULL;
    snprintf(list, sizeof list, "%s", addr);
    for (char *one = strtok_r(list, ",", &save); one; one = strtok_r(NULL, ",", &save)) {
        struct stat st;
        if (strncmp(one, "unix:", 5) != 0)
            return 0;
        if (stat(one + 5, &st) == 0 && S_ISSOCK(st.st_mode))
            return 1;
    }
    return 0;
}

static int device_attr(CUdevice_attribute attr)
{
    int v = -1;
    CU_OK(cuDeviceGetAttribute(&v, attr, 0));
    return v;
}

/* Shared file mappings: NVIDIA's driver pins registered pages long-term for
 * writing, which Linux 6.5 and later refuse for a file system that writes
 * pages back; shared memory files (tmpfs, memfd) are fine. */
static void test_registered_file_mappings(void)
{
    char path[] = "flyt-register-file-XXXXXX"; /* the build directory: not tmpfs here */
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, 8192) == 0, "a file in the working directory");
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK_NE(p, MAP_FAILED, "mapped shared");
    struct statfs fs;
    struct utsname u;
    int major = 0, minor = 0;
    CHECK(statfs(path, &fs) == 0 && uname(&u) == 0, "file system and kernel");
    sscanf(u.release, "%d.%d", &major, &minor);
    int refused = (major > 6 || (major == 6 && minor >= 5)) && fs.f_type != TMPFS_MAGIC;
    CHECK_EQ(cuMemHostRegister(p, 8192, 0), refused ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS,
             "a shared file mapping on file system 0x%lx, kernel %s", (unsigned long)fs.f_type, u.release);
    if (!refused)
        CU_OK(cuMemHostUnregister(p));
    munmap(p, 8192);
    close(fd);
    unlink(path);
    int mfd = memfd_create("flyt-test", 0);
    CHECK(mfd >= 0 && ftruncate(mfd, 4096) == 0, "a memfd");
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    CU_OK(cuMemHostRegister(m, 4096, 0));
    CU_OK(cuMemHostUnregister(m));
    munmap(m, 4096);
    close(mfd);
}

static int pointer_int(CUpointer_attribute attr, CUdeviceptr p)
{
    int v = -1;
    CHECK_EQ(cuPointerGetAttribute(&v, attr, p), CUDA_SUCCESS, "pointer attribute %d", (int)attr);
    return v;
}

/* The server writes p's first n bytes with value (a memset running there, at
 * the address we hold); true when this process sees them. */
static int server_writes_here(CUdeviceptr p, unsigned char value, size_t n)
{
    CU_OK(cuMemsetD8(p, value, n));
    CU_OK(cuCtxSynchronize());
    for (size_t i = 0; i < n; i++)
        if (((unsigned char *)(uintptr_t)p)[i] != value)
            return 0;
    return 1;
}

/* Between machines: managed memory without concurrent access; pinned
 * memory is mapped through a reservation at its address once its device
 * pointer is asked (host writes reach the device before its next work,
 * its writes come back at the next synchronisation); registered memory
 * cannot be mapped. Said by the attributes and by the calls. */
static void test_unshared_host_memory(void)
{
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS), 0, "no concurrent access");
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY), 1, "mapped pinned memory");
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM), 0,
             "registered memory is not reached at its address");
    enum { N = 3 * 4096 };
    unsigned char *h = NULL, back[N];
    CU_OK(cuMemHostAlloc((void **)&h, N, CU_MEMHOSTALLOC_DEVICEMAP));
    memset(h, 0x21, N); /* written before the device pointer is asked */
    CUdeviceptr dp = 0, d = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, h, 0));
    CHECK_EQ(dp, (CUdeviceptr)(uintptr_t)h, "device pointer of pinned memory is its host pointer");
    CU_OK(cuMemAlloc(&d, N));
    CU_OK(cuMemcpyDtoD(d, dp, N));
    CU_OK(cuMemcpyDtoH(back, d, N));
    CHECK(back[0] == 0x21 && back[N - 1] == 0x21, "the device reads what was written before");
    h[4097] = 0x43; /* a host write after the mapping */
    CU_OK(cuMemcpyDtoD(d, dp, N));
    CU_OK(cuMemcpyDtoH(back, d, N));
    CHECK(back[4097] == 0x43 && back[4096] == 0x21, "a host write reaches the device");
    CHECK(server_writes_here(dp + 100, 0x3d, 5000), "device writes come back at a synchronisation");
    CHECK_EQ(h[99], 0x21, "bytes the device did not write stay");
    /* a copy naming it as host memory runs in stream order on the device's copy */
    CU_OK(cuMemsetD8Async(dp, 0x11, 4096, NULL));
    CU_OK(cuMemcpyHtoD(d, h, 4096));
    CU_OK(cuMemcpyDtoH(back, d, 4096));
    CHECK(back[0] == 0x11 && back[4095] == 0x11, "HtoD from it after device work in stream order");
    memset(back, 0x66, 64);
    CU_OK(cuMemcpyHtoD(d, back, 64));
    CU_OK(cuMemcpyDtoH(h + 8192, d, 64));
    CHECK(h[8192] == 0x66 && h[8255] == 0x66, "DtoH into it");
    /* no turns, as natively: host code writes while device work is queued,
     * and both writes land */
    CU_OK(cuMemsetD8Async(dp, 0x71, 1000, NULL));
    h[2000] = 0x72;
    CU_OK(cuCtxSynchronize());
    CHECK(h[0] == 0x71 && h[999] == 0x71 && h[1000] != 0x71, "the device's write comes back");
    CHECK_EQ(h[2000], 0x72, "the host's write made meanwhile stays");
    CU_OK(cuMemcpyDtoD(d, dp, N));
    CU_OK(cuMemcpyDtoH(back, d, N));
    CHECK(back[2000] == 0x72 && back[0] == 0x71, "and reaches the device");
    unsigned flags = 0;
    CU_OK(cuMemHostGetFlags(&flags, h));
    CHECK_EQ(flags, CU_MEMHOSTALLOC_DEVICEMAP, "its flags as given (0x%x)", flags);
    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp), CU_MEMORYTYPE_HOST, "host memory type");
    CUdeviceptr attr_dp = 0;
    CU_OK(cuPointerGetAttribute(&attr_dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dp + 4));
    CHECK_EQ(attr_dp, dp + 4, "DEVICE_POINTER of mapped pinned memory");
    CU_OK(cuMemFreeHost(h));
    CHECK_EQ(cuMemHostGetDevicePointer(&dp, h, 0), CUDA_ERROR_INVALID_VALUE, "freed is unknown");

    /* pinned memory whose device pointer is never asked: plain copies */
    unsigned char *plain = NULL;
    CU_OK(cuMemAllocHost((void **)&plain, 4096));
    CU_OK(cuMemHostGetFlags(&flags, plain));
    CHECK_EQ(flags, CU_MEMHOSTALLOC_DEVICEMAP, "mapped as the driver's under unified addressing (0x%x)",
             flags);
    memset(plain, 0x5a, 4096);
    CU_OK(cuMemcpyHtoD(d, plain, 4096));
    memset(plain, 0, 4096);
    CU_OK(cuMemcpyDtoH(plain, d, 4096));
    CHECK(plain[0] == 0x5a && plain[4095] == 0x5a, "copies through unasked pinned memory");
    CU_OK(cuMemFreeHost(plain));
    CU_OK(cuMemFree(d));

    /* unified addressing: a kernel may take a pinned pointer without its
     * device pointer being asked; the launch maps it (the host backend then
     * refuses to run the kernel) */
    unsigned char *direct = NULL;
    CU_OK(cuMemAllocHost((void **)&direct, 2 * 4096));
    memset(direct, 0x31, 2 * 4096);
    CUmodule m;
    CUfunction f;
    CU_OK(cuModuleLoadData(&m, ptx));
    CU_OK(cuModuleGetFunction(&f, m, "k"));
    CUdeviceptr inside = (CUdeviceptr)(uintptr_t)(direct + 4100);
    void *args[] = {&inside};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CHECK_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_SUPPORTED, "the host backend runs no kernel");
    CU_OK(cuModuleUnload(m));
    CHECK(server_writes_here(inside, 0x4e, 100), "a launch naming pinned memory maps it");
    CHECK_EQ(direct[4099], 0x31, "with the bytes host code wrote before");
    CU_OK(cuMemFreeHost(direct));

    /* registered memory: reached at another device address, kept equal the
     * same way; no read-only registration (as a device without it answers) */
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED), 0,
             "no read-only registration reported");
    unsigned char *page = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK_EQ(cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_READ_ONLY), CUDA_ERROR_NOT_SUPPORTED,
             "read-only registration refused");
    unsigned char *reg = page + 100; /* not page-aligned: only its own bytes are exchanged */
    memset(page, 0x12, 2 * 4096);
    CU_OK(cuMemHostRegister(reg, 5000, CU_MEMHOSTREGISTER_DEVICEMAP));
    CU_OK(cuMemHostGetDevicePointer(&dp, reg + 8, 0));
    CHECK_NE(dp, (CUdeviceptr)(uintptr_t)(reg + 8), "registered memory elsewhere on the device");
    CUdeviceptr dp0 = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp0, reg, 0));
    CHECK_EQ(dp0 + 8, dp, "one device address per registration");
    CU_OK(cuMemAlloc(&d, 5000));
    CU_OK(cuMemcpyDtoD(d, dp0, 5000));
    CU_OK(cuMemcpyDtoH(back, d, 5000));
    CHECK(back[0] == 0x12 && back[4999] == 0x12, "the device reads its bytes");
    CU_OK(cuMemsetD8(dp0 + 10, 0x6b, 4000));
    CU_OK(cuCtxSynchronize());
    CHECK(reg[10] == 0x6b && reg[4009] == 0x6b && reg[9] == 0x12 && reg[4010] == 0x12,
          "device writes come back at a synchronisation");
    CHECK(page[99] == 0x12 && page[5100] == 0x12, "bytes around the registration are untouched");
    CU_OK(cuMemFree(d));
    CU_OK(cuMemHostUnregister(reg));
    CHECK_EQ(cuPointerGetAttribute(&attr_dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dp0),
             CUDA_ERROR_INVALID_VALUE, "its device memory goes with the registration");
    munmap(page, 2 * 4096);
}

/* Between machines host writes reach the device before its next work, also
 * those a system call makes (read), and its writes come back at the next
 * synchronisation, also one a query finds done; explicit copies naming
 * managed memory as host memory run in stream order on the device's copy. */
static void test_managed_exchanges(CUdeviceptr m, CUdeviceptr d, size_t n)
{
    unsigned char *host = (unsigned char *)(uintptr_t)m, back[64];
    int fds[2];
    CHECK_EQ(pipe(fds), 0, "a pipe");
    memset(back, 0x3d, sizeof back);
    CHECK_EQ(write(fds[1], back, sizeof back), (ssize_t)sizeof back, "bytes into the pipe");
    CHECK_EQ(read(fds[0], host + 4096, sizeof back), (ssize_t)sizeof back,
             "read() straight into managed memory");
    close(fds[0]);
    close(fds[1]);
    host[n - 1] = 0x3e;
    CU_OK(cuMemcpyDtoD(d, m, n));
    memset(back, 0, sizeof back);
    CU_OK(cuMemcpyDtoH(back, d + 4096, sizeof back));
    CHECK(back[0] == 0x3d && back[63] == 0x3d, "the device sees what read() wrote");
    CU_OK(cuMemcpyDtoH(back, d + n - 1, 1));
    CHECK_EQ(back[0], 0x3e, "and the host's last write");

    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemsetD8Async(m + 20, 0x50, 2, s));
    CU_OK(cuMemsetD8Async(m + 10, 0x4f, 3, s)); /* device work after device work: no stale push */
    CUresult q;
    while ((q = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY)
        ;
    CU_OK(q);
    CHECK(host[10] == 0x4f && host[12] == 0x4f && host[13] != 0x4f,
          "a query that finds the work done brings the device's bytes");
    CHECK(host[20] == 0x50 && host[21] == 0x50, "the earlier work's bytes too");
    CU_OK(cuStreamDestroy(s));

    memset(back, 0x61, sizeof back);
    CU_OK(cuMemcpyHtoD(d, back, sizeof back));
    CU_OK(cuMemcpyDtoH(host + 100, d, sizeof back)); /* managed named as host memory */
    CHECK(host[100] == 0x61 && host[163] == 0x61, "an explicit device-to-host copy into it");
    host[200] = 0x62;
    CU_OK(cuMemcpyHtoD(d, host + 200, 1));
    CU_OK(cuMemcpyDtoH(back, d, 1));
    CHECK_EQ(back[0], 0x62, "an explicit host-to-device copy out of it");
}

/* CUDA 13's batched prefetches and discards of managed ranges m (n bytes). */
static void test_managed_batches(CUdeviceptr m, CUdeviceptr d, size_t n)
{
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr ptrs[3] = {m, m + 4096, m + 8192};
    size_t sizes[3] = {4096, 4096, n - 8192}, first[2] = {0, 2}, bad_first[2] = {1, 2};
    CUmemLocation locs[2] = {{.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                             {.type = CU_MEM_LOCATION_TYPE_HOST}};
    if (!shares_memory()) { /* no concurrent managed access between machines */
        CHECK_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, first, 2, 0, s), CUDA_ERROR_NOT_SUPPORTED,
                 "batched prefetches need concurrent managed access");
        CU_OK(cuStreamDestroy(s));
        return;
    }
    int v = -5;
    CU_OK(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, first, 2, 0, s));
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, n));
    CHECK_EQ(v, CU_DEVICE_CPU, "the last range went to the host, after the first two to the device");
    CHECK_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, bad_first, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
             "the first location must apply from operation 0");
    CHECK_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, first, 2, 0, CU_STREAM_LEGACY),
             CUDA_ERROR_INVALID_VALUE, "not on the legacy stream");
    CHECK_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, first, 4, 0, s), CUDA_ERROR_INVALID_VALUE,
             "more locations than operations");
    ptrs[1] = d;
    CHECK_EQ(cuMemDiscardBatchAsync(ptrs, sizes, 3, 0, s), CUDA_ERROR_INVALID_VALUE,
             "device memory is no managed range");
    ptrs[1] = m + 4096;
    unsigned char *host = (unsigned char *)(uintptr_t)m, back = 0;
    CU_OK(cuMemDiscardBatchAsync(ptrs, sizes, 3, 0, s));
    CU_OK(cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 3, locs, first, 1, 0, s));
    CU_OK(cuStreamSynchronize(s));
    host[4096 + 7] = 0x43; /* a discarded range is the program's to write again */
    CU_OK(cuMemsetD8(m + 8192, 0x44, 1));
    CU_OK(cuMemcpyDtoH(&back, m + 4096 + 7, 1));
    CHECK_EQ(back, 0x43, "after discards the host's write reaches the device");
    CHECK_EQ(host[8192], 0x44, "and the device's the host");
    CU_OK(cuStreamDestroy(s));
}

static void test_managed_memory(void)
{
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 1, "managed memory reported");
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS), shares_memory(),
             "concurrent access where the GPU maps the pages");
    enum { N = 3 * 4096 + 100 };
    CUdeviceptr m = 0, d = 0;
    CU_OK(cuMemAllocManaged(&m, N, CU_MEM_ATTACH_GLOBAL));
    CHECK_EQ(cuMemAllocManaged(&d, N, 7), CUDA_ERROR_INVALID_VALUE, "bad attach flags refused");
    unsigned char *host = (unsigned char *)(uintptr_t)m, back[N];
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 7);
    /* the server reads the same address: a device-to-device copy there */
    CU_OK(cuMemAlloc(&d, N));
    CU_OK(cuMemcpyDtoD(d, m, N));
    CU_OK(cuMemcpyDtoH(back, d, N));
    CHECK_MEM_EQ(back, host, N, "the server sees the host's bytes at the same address");
    CHECK(server_writes_here(m + 5, 0xab, 4000), "and the host sees the server's writes");
    memset(back, 0x5c, N);
    CU_OK(cuMemcpyHtoD(m, back, N));
    CHECK_EQ(host[0], 0x5c, "a copy into managed memory");
    CHECK_EQ(host[N - 1], 0x5c, "a copy into managed memory");
    CU_OK(cuMemcpy(d, m, N));
    CU_OK(cuMemsetD8(m, 0, N));
    CU_OK(cuMemcpy(m, d, N));
    CHECK_EQ(host[100], 0x5c, "unified copies both ways");
    CU_OK(cuMemcpyDtoH(back, m + 1, 10));
    CHECK_EQ(back[0], 0x5c, "a copy out of managed memory");
    test_managed_exchanges(m, d, N);

    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 10), 1, "IS_MANAGED");
    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m), CU_MEMORYTYPE_DEVICE, "device memory type");
    CUdeviceptr dp = 0;
    void *hp = NULL;
    CU_OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, m + 8));
    CU_OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 8));
    CHECK_EQ(dp, m + 8, "one pointer for host and device");
    CHECK_EQ(hp, host + 8, "one pointer for host and device");
    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_IS_MANAGED, d), 0, "device memory is not managed");
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange(&base, &size, m + 77));
    CHECK_EQ(base, m, "address range of managed memory");
    CHECK_EQ(size, N, "address range of managed memory");

    CUmemLocation gpu = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUmemLocation cpu = {.type = CU_MEM_LOCATION_TYPE_HOST};
    int v = 0, by[3] = {0};
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N));
    CHECK_EQ(v, CU_DEVICE_INVALID, "never prefetched");
    CU_OK(cuMemPrefetchAsync_v2(m, N, gpu, 0, NULL));
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N));
    CHECK_EQ(v, 0, "prefetched to the device");
    CUmemLocation gpu1 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1};
    CHECK_EQ(cuMemPrefetchAsync_v2(m, N, gpu1, 0, NULL), CUDA_ERROR_INVALID_DEVICE, "no device 1");
    CHECK_EQ(cuMemPrefetchAsync_v2(d, N, gpu, 0, NULL), CUDA_ERROR_INVALID_VALUE,
             "device memory is no managed range");
    CHECK_EQ(cuMemPrefetchAsync_v2(m, N + 1, gpu, 0, NULL), CUDA_ERROR_INVALID_VALUE, "nor past its end");
    CU_OK(cuMemAdvise_v2(m, N, CU_MEM_ADVISE_SET_READ_MOSTLY, gpu));
    CU_OK(cuMemAdvise_v2(m, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, cpu));
    CU_OK(cuMemAdvise_v2(m, N, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu));
    CHECK_EQ(cuMemAdvise_v2(m, N, (CUmem_advise)9, gpu), CUDA_ERROR_INVALID_VALUE, "unknown advice");
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N));
    CHECK_EQ(v, 1, "read mostly");
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, N));
    CHECK_EQ(v, CU_DEVICE_CPU, "preferred on the host");
    CU_OK(cuMemRangeGetAttribute(by, sizeof by, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, N));
    CHECK_EQ(by[0], 0, "accessed by device 0");
    CHECK_EQ(by[1], CU_DEVICE_INVALID, "accessed by device 0");
    CHECK_EQ(by[2], CU_DEVICE_INVALID, "accessed by device 0");
    CU_OK(cuMemAdvise_v2(m, N, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, cpu));
    CU_OK(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, m, N));
    CHECK_EQ(v, CU_MEM_LOCATION_TYPE_INVALID, "preferred location unset");
    CU_OK(cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_HOST));
    CHECK_EQ(cuStreamAttachMemAsync(NULL, m, 10, CU_MEM_ATTACH_HOST), CUDA_ERROR_INVALID_VALUE,
             "attach is of whole allocations");
    test_managed_batches(m, d, N);

    CU_OK(cuMemFree(m));
    CHECK_EQ(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, m), CUDA_ERROR_INVALID_VALUE,
             "freed managed memory is unknown");
    CU_OK(cuMemFree(d));
}

/* Pinned and registered host memory that kernels reach at its own address. */
static void test_mapped_host_memory(void)
{
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY), 1, "mapped host memory reported");
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM), 1,
             "at the host pointer");
    void *h = NULL;
    CU_OK(cuMemHostAlloc(&h, 8192, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dp = 0;
    unsigned flags = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, h, 0));
    CHECK_EQ(dp, (CUdeviceptr)(uintptr_t)h, "device pointer of pinned memory is its host pointer");
    CU_OK(cuMemHostGetFlags(&flags, h));
    CHECK_EQ(flags, CU_MEMHOSTALLOC_DEVICEMAP, "its flags as given");
    /* as the driver under unified addressing: every pinned allocation is mapped */
    void *plain = NULL, *portable = NULL;
    CU_OK(cuMemAllocHost(&plain, 100));
    CU_OK(cuMemHostGetFlags(&flags, plain));
    CHECK_EQ(flags, CU_MEMHOSTALLOC_DEVICEMAP, "cuMemAllocHost memory is mapped (0x%x)", flags);
    CU_OK(cuMemHostAlloc(&portable, 100, CU_MEMHOSTALLOC_PORTABLE));
    CU_OK(cuMemHostGetFlags(&flags, portable));
    CHECK_EQ(flags, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, "portable and mapped (0x%x)",
             flags);
    CU_OK(cuMemFreeHost(plain));
    CU_OK(cuMemFreeHost(portable));
    CHECK(server_writes_here(dp + 100, 0x3d, 5000), "the server writes it at that address");
    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp), CU_MEMORYTYPE_HOST, "host memory type");
    CHECK_EQ(pointer_int(CU_POINTER_ATTRIBUTE_IS_MANAGED, dp), 0, "not managed");
    CUdeviceptr attr_dp = 0;
    CU_OK(cuPointerGetAttribute(&attr_dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dp + 4));
    CHECK_EQ(attr_dp, dp + 4, "DEVICE_POINTER of mapped pinned memory");
    CU_OK(cuMemFreeHost(h));

    /* plain anonymous pages, which registration shares in place (a sanitizer's
     * heap need not be such memory) */
    unsigned char *reg = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    CHECK_NE(reg, MAP_FAILED, "page-aligned buffer");
    memset(reg, 1, 3 * 4096);
    CU_OK(cuMemHostRegister(reg, 3 * 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
    dp = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, reg, 0));
    CHECK_EQ(dp, (CUdeviceptr)(uintptr_t)reg, "registered memory at its own address");
    CHECK_NE(dp, 0, "written by the server in place");
    CHECK(server_writes_here(dp, 0x77, 3 * 4096), "written by the server in place");
    CU_OK(cuMemHostUnregister(reg));
    CHECK_EQ(reg[4096], 0x77, "the bytes stay after unregistering");
    /* the same memory registered again (its pages are Flyt's shared ones now) */
    CU_OK(cuMemHostRegister(reg, 3 * 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
    CU_OK(cuMemHostGetDevicePointer(&dp, reg, 0));
    CHECK(server_writes_here(dp, 0x78, 3 * 4096), "registered again: written by the server in place");
    CU_OK(cuMemHostUnregister(reg));
    CHECK_EQ(reg[8191], 0x78, "the bytes stay after unregistering again");
    munmap(reg, 3 * 4096);

    /* read-only registration, as the GPU has it: mapped, the flag not echoed */
    reg = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(reg, 0x77, 3 * 4096);
    CHECK_EQ(device_attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED), 1,
             "read-only registration reported");
    CU_OK(cuMemHostRegister(reg, 3 * 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY));
    dp = 0;
    CU_OK(cuMemHostGetDevicePointer(&dp, reg, 0));
    CHECK_EQ(dp, (CUdeviceptr)(uintptr_t)reg, "read-only registered memory at its own address");
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    CU_OK(cuMemcpyDtoD(d, dp + 4096, 4096));
    unsigned char back[16];
    CU_OK(cuMemcpyDtoH(back, d, sizeof back));
    CHECK_EQ(back[3], 0x77, "the server reads read-only registered memory");
    CU_OK(cuMemFree(d));
    CU_OK(cuMemHostGetFlags(&flags, reg));
    CHECK_EQ(flags, CU_MEMHOSTREGISTER_DEVICEMAP, "READ_ONLY not echoed, as the driver's (0x%x)", flags);
    CU_OK(cuMemHostUnregister(reg));
    CHECK_EQ(cuMemHostRegister(reg, 4096, CU_MEMHOSTREGISTER_IOMEMORY), CUDA_ERROR_NOT_SUPPORTED,
             "I/O memory is refused");
    munmap(reg, 3 * 4096);
}

/* CUDA 13's pools by location: the device's default and current pools. */
static void test_pools_by_location(CUdevice dev)
{
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemoryPool dflt = NULL, got = NULL, pool = NULL;
    CU_OK(cuDeviceGetDefaultMemPool(&dflt, dev));
    CU_OK(cuMemGetDefaultMemPool(&got, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK_EQ(got, dflt, "cuMemGetDefaultMemPool is the device's default pool");
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = loc};
    CU_OK(cuMemPoolCreate(&pool, &props));
    CU_OK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, pool));
    CU_OK(cuMemGetMemPool(&got, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK_EQ(got, pool, "cuMemGetMemPool returns the pool set");
    CU_OK(cuDeviceGetMemPool(&got, dev));
    CHECK_EQ(got, pool, "and so does cuDeviceGetMemPool");
    CUdeviceptr p = 0;
    cuuint64_t used = 0;
    CU_OK(cuMemAllocAsync(&p, 4096, NULL));
    CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK_EQ(used, 4096, "cuMemAllocAsync took from the current pool");
    CU_OK(cuMemFreeAsync(p, NULL));
    CU_OK(cuCtxSynchronize());
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CHECK_EQ(cuMemGetMemPool(&got, &host, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_SUPPORTED,
             "pools of host memory are refused");
    CHECK_EQ(cuMemSetMemPool(NULL, CU_MEM_ALLOCATION_TYPE_PINNED, pool), CUDA_ERROR_INVALID_VALUE,
             "a location is needed");
    CU_OK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, dflt));
    CU_OK(cuMemGetMemPool(&got, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK_EQ(got, dflt, "the default pool set back");
    CU_OK(cuMemPoolDestroy(pool));
}

/* How many sockets this process holds open. */
static int sockets_open(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char path[300], target[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        n += len > 7 && strncmp(target, "socket:", 7) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

/* A child forked after the parent connected: as the driver's after a fork,
 * its calls fail with CUDA_ERROR_NOT_INITIALIZED (they must not write to the
 * parent's connection) and it holds no copy of the parent's socket (which
 * would keep the session after the parent ended); it exits normally (atexit handlers run) and the
 * parent carries on. The child's failures come back as its exit status. */
static void test_fork_after_init(void)
{
    CUdeviceptr d = 0;
    CU_OK(cuMemAlloc(&d, 4096));
    CU_OK(cuMemsetD8(d, 0x11, 4096));
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int bad = 0, n = -1;
        CUdeviceptr mine = 0;
        CUcontext ctx = NULL;
        bad += cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuCtxGetCurrent(&ctx) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuMemAlloc(&mine, 4096) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuMemsetD8(d, 0x22, 4096) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuMemsetD8Async(d, 0x22, 4096, NULL) != CUDA_ERROR_NOT_INITIALIZED;
        bad += cuCtxSynchronize() != CUDA_ERROR_NOT_INITIALIZED;
        bad += sockets_open() != 0; /* the parent's session ends with the parent */
        exit(bad);
    }
    int st = -1;
    CHECK_EQ(waitpid(pid, &st, 0), pid, "the child is reaped");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "a child forked after init: every call CUDA_ERROR_NOT_INITIALIZED, no copy of the socket (%d failed)",
          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    unsigned char host[4096];
    CU_OK(cuMemsetD8(d, 0x33, 4096));
    CU_OK(cuMemcpyDtoH(host, d, sizeof host));
    CHECK(host[0] == 0x33 && host[4095] == 0x33, "the parent's session carries on after the child");
    CU_OK(cuMemFree(d));
}

int main(void)
{
    CUdevice dev = -1;
    test_init_and_device(&dev);
    test_contexts(dev);
    test_memory();
    test_vmm();
    test_streams();
    test_objects_without_current_context();
    test_host_func_order();
    test_modules();
    test_link_logs();
    test_proc_address();
    test_pools_by_location(dev);
    test_registered_file_mappings();
    test_managed_memory();
    test_copy_3d_batch();
    test_fork_after_init();
    if (shares_memory())
        test_mapped_host_memory();
    else
        test_unshared_host_memory();
    return check_done();
}
