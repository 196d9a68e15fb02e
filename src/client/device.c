/*
 * cuInit, versions and every device query. After cuInit the answers come
 * from the snapshot the server sent at connect (conn.c), which already shows
 * the tenant's virtual GPU: no device query is a round trip.
 */
#include "client.h"
#include "export_tables.h"
#include "flyt_gpu_uuid.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* 0: cuInit not called yet; else 1 + the CUresult it returned */
static atomic_int init_state;
/* The program called cuInit itself, not inside a tool's scope: until then
 * its calls say CUDA_ERROR_NOT_INITIALIZED, and a child forked after it is
 * refused (conn.c), as NVIDIA's driver after a fork. */
static atomic_int program_started;
/* Flyt's NVML is calling on this thread (flyt_client_table.h). */
static _Thread_local int tool_depth;

void flyt_tool_scope(int entering)
{
    if (entering)
        tool_depth++;
    else if (tool_depth > 0)
        tool_depth--;
}

int flyt_in_tool_scope(void) { return tool_depth > 0; }
int flyt_program_started(void) { return atomic_load(&program_started); }

static uint64_t share_seq;

/* A forked child: what its parent's cuInit said is not the child's, nor a share change
 * the parent's receiver was in the middle of writing (an odd share_seq would stay odd). */
void flyt_init_forget(void)
{
    atomic_store(&init_state, 0);
    __atomic_store_n(&share_seq, 0, __ATOMIC_RELAXED);
}

FLYT_EXPORT CUresult cuDriverGetVersion(int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION; /* the API this library carries, whatever the server's GPU driver */
    return CUDA_SUCCESS;
}

/* ---- CUDA_VISIBLE_DEVICES ----
 * As the driver reads it at cuInit: GPU indices or UUIDs ("GPU-" and enough of the
 * UUID to name one), comma-separated, enumerated up to the first entry that names no
 * GPU. A session has one GPU: it is visible exactly when the first entry names it, and
 * with none visible the program's cuInit says CUDA_ERROR_NO_DEVICE (as the driver's).
 * Tools ask whatever it says: NVIDIA's NVML does not read it. */
enum { SEES_UNKNOWN, SEES_GPU, SEES_NONE };
static atomic_int program_sees;

/* SEES_GPU or SEES_NONE from the variable alone; SEES_UNKNOWN when its first entry is a
 * UUID, which only the device snapshot can match. */
static int visibility_by_name(const char **uuid_entry, size_t *uuid_len)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    if (list == NULL)
        return SEES_GPU;
    list += strspn(list, " \t"); /* blanks around an entry are ignored (measured) */
    size_t len = strcspn(list, ",");
    while (len > 0 && (list[len - 1] == ' ' || list[len - 1] == '\t'))
        len--;
    if (len > 0 && strspn(list, "0123456789") == len) /* an index: only 0 exists */
        return strtoul(list, NULL, 10) == 0 && len < 12 ? SEES_GPU : SEES_NONE;
    if (len > 4 && strncmp(list, "GPU-", 4) == 0) {
        *uuid_entry = list;
        *uuid_len = len;
        return SEES_UNKNOWN;
    }
    return SEES_NONE; /* empty, -1, MIG-..., anything else: no GPU named */
}

/* Whether entry's len bytes begin the GPU's UUID as nvidia-smi writes it. */
static int names_our_gpu(const char *entry, size_t len)
{
    char text[FLYT_GPU_UUID_TEXT];
    flyt_gpu_uuid_text(flyt_conn_snapshot()->uuid, text, sizeof text);
    return len <= strlen(text) && strncasecmp(entry, text, len) == 0;
}

/* The connection and the device count, once for every caller. */
static CUresult start_driver(void)
{
    int state = atomic_load(&init_state);
    if (state != 0)
        return (CUresult)(state - 1);
    CUresult r = flyt_connect_once();
    if (r == CUDA_SUCCESS && flyt_conn_device_count() < 1)
        r = CUDA_ERROR_NO_DEVICE;
    if (r != CUDA_SUCCESS && flyt_in_tool_scope())
        return r; /* a tool's failed start: the program's cuInit tries again */
    int expected = 0;
    atomic_compare_exchange_strong(&init_state, &expected, 1 + (int)r);
    return (CUresult)(atomic_load(&init_state) - 1);
}

FLYT_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (flyt_conn_forked())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flyt_in_tool_scope())
        return start_driver();
    atomic_store(&program_started, 1);
    const char *uuid_entry = NULL;
    size_t uuid_len = 0;
    int sees = atomic_load(&program_sees);
    if (sees == SEES_UNKNOWN)
        sees = visibility_by_name(&uuid_entry, &uuid_len);
    if (sees == SEES_NONE) { /* no session is opened for a program that sees no GPU */
        atomic_store(&program_sees, SEES_NONE);
        return CUDA_ERROR_NO_DEVICE;
    }
    CUresult r = start_driver();
    if (r == CUDA_SUCCESS && uuid_entry != NULL)
        atomic_store(&program_sees, names_our_gpu(uuid_entry, uuid_len) ? SEES_GPU : SEES_NONE);
    else if (r == CUDA_SUCCESS)
        atomic_store(&program_sees, SEES_GPU);
    return r == CUDA_SUCCESS && atomic_load(&program_sees) == SEES_NONE ? CUDA_ERROR_NO_DEVICE : r;
}

CUresult flyt_init_state(void)
{
    /* the common case first: the program started, no tool's thread-local scope asked */
    int program = atomic_load_explicit(&program_started, memory_order_relaxed);
    if (!program || flyt_conn_forked() || atomic_load(&program_sees) == SEES_NONE) {
        int tool = flyt_in_tool_scope();
        if (flyt_conn_forked() || (!tool && !program))
            return CUDA_ERROR_NOT_INITIALIZED;
        if (!tool && atomic_load(&program_sees) == SEES_NONE)
            return CUDA_ERROR_NO_DEVICE; /* CUDA_VISIBLE_DEVICES hides the GPU */
    }
    int state = atomic_load(&init_state);
    return state == 0 ? CUDA_ERROR_NOT_INITIALIZED : (CUresult)(state - 1);
}

CUresult flyt_check_device(CUdevice dev)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    return dev >= 0 && dev < flyt_conn_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Features that need the GPU to map this process's memory: they are there
 * only when the server shares memory with it (one machine, docs/host-memory.md). */
static int needs_shared_memory(CUdevice_attribute attr)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: /* managed memory itself is always there */
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
        return 1;
    default:
        return 0;
    }
}

/* Features the GPU has but a tenant behind Flyt cannot use: the virtual GPU
 * says it lacks them, so libraries take their other paths. */
static int hidden_feature(CUdevice_attribute attr)
{
    if (needs_shared_memory(attr))
        return !flyt_conn_shares_memory();
    /* between machines pinned memory is mapped through a VMM reservation
     * (pinned_remote.c) */
    if (attr == CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)
        return !flyt_conn_shares_memory() &&
               !flyt_device_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
    /* IPC between the VM's own processes (ipc.c) */
    if (attr == CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED)
        return flyt_conn_server_minor() < FLYT_MINOR_IPC;
    if (attr == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
        return flyt_conn_server_minor() < FLYT_MINOR_IPC_VMM;
    if (attr == CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES)
        return flyt_conn_server_minor() < FLYT_MINOR_IPC_POOL;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
        return 1;
    default:
        return 0;
    }
}

/* The snapshot's SM count and total memory under a sequence lock: one
 * writer (the receiver thread, at a SHARE_CHANGED frame), readers on any
 * thread that retry while it writes. Odd: being written. */

uint64_t flyt_device_share(int *sm_count, uint64_t *total_mem)
{
    flyt_rep_device_snapshot *s = flyt_conn_snapshot_mut();
    for (;;) {
        uint64_t seq = __atomic_load_n(&share_seq, __ATOMIC_ACQUIRE);
        if (seq & 1)
            continue; /* a writer is between two stores */
        int sms = __atomic_load_n(&s->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], __ATOMIC_RELAXED);
        uint64_t total = __atomic_load_n(&s->total_mem, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&share_seq, __ATOMIC_RELAXED) == seq) {
            *sm_count = sms;
            *total_mem = total;
            return seq / 2;
        }
    }
}

void flyt_device_share_changed(const struct flyt_msg_share *m)
{
    flyt_rep_device_snapshot *s = flyt_conn_snapshot_mut();
    uint64_t seq = share_seq;
    __atomic_store_n(&share_seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], m->sm_count, __ATOMIC_RELAXED);
    __atomic_store_n(&s->total_mem, m->total_mem, __ATOMIC_RELAXED);
    __atomic_store_n(&share_seq, seq + 2, __ATOMIC_RELEASE);
}

int flyt_device_attr(CUdevice_attribute attr)
{
    const flyt_rep_device_snapshot *s = flyt_conn_snapshot();
    if ((int)attr <= 0 || (int)attr >= s->attr_count || hidden_feature(attr))
        return 0;
    if (attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
        int sms;
        uint64_t total;
        flyt_device_share(&sms, &total);
        return sms;
    }
    if (attr == CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) /* fabric handles are not */
        return s->attrs[attr] & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return s->attrs[attr];
}

FLYT_EXPORT CUresult cuDeviceGetCount(int *count)
{
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_init_state();
    *count = r == CUDA_SUCCESS ? flyt_conn_device_count() : 0;
    return r;
}

FLYT_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = flyt_check_device(ordinal);
    if (r == CUDA_SUCCESS)
        *device = ordinal;
    return r;
}

FLYT_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", flyt_conn_snapshot()->name);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int sms;
    uint64_t total;
    flyt_device_share(&sms, &total);
    *bytes = (size_t)total;
    return CUDA_SUCCESS;
}

/* The CUDA 3.0 ABI: a 32-bit count, capped as the driver caps it. */
FLYT_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS && bytes)
        *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return bytes ? r : CUDA_ERROR_INVALID_VALUE;
}

FLYT_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (value == NULL || (int)attr <= 0 || (int)attr >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *value = flyt_device_attr(attr);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, flyt_conn_snapshot()->uuid, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

/* LUIDs exist only on Windows. */
FLYT_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    (void)luid, (void)mask;
    CUresult r = flyt_check_device(dev);
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_SUPPORTED;
}

FLYT_EXPORT CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (bus_id == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)len, "%s", flyt_conn_snapshot()->pci_bus_id);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id)
{
    CUresult r = flyt_init_state();
    if (r != CUDA_SUCCESS)
        return r;
    if (dev == NULL || bus_id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* "0000:19:00.0" and "19:00.0" name the same device */
    const char *ours = flyt_conn_snapshot()->pci_bus_id;
    size_t n = strlen(bus_id), m = strlen(ours);
    if (flyt_conn_device_count() > 0 && n > 0 && n <= m && strcasecmp(ours + (m - n), bus_id) == 0) {
        *dev = 0;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

FLYT_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *major = flyt_device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    *minor = flyt_device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuDeviceGetProperties(CUdevprop *p, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    p->maxThreadsPerBlock = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    p->maxThreadsDim[0] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    p->maxThreadsDim[1] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    p->maxThreadsDim[2] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    p->maxGridSize[0] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    p->maxGridSize[1] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    p->maxGridSize[2] = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    p->sharedMemPerBlock = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    p->totalConstantMemory = flyt_device_attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    p->SIMDWidth = flyt_device_attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    p->memPitch = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    p->regsPerBlock = flyt_device_attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    p->clockRate = flyt_device_attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    p->textureAlign = flyt_device_attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    return CUDA_SUCCESS;
}

/* A session has one device, so there is no peer to reach. */
FLYT_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    CUresult r = flyt_check_device(dev);
    if (r == CUDA_SUCCESS)
        r = flyt_check_device(peer);
    if (r == CUDA_SUCCESS && can == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *can = 0;
    return r;
}

FLYT_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src,
                                             CUdevice dst)
{
    (void)attr;
    CUresult r = flyt_check_device(src);
    if (r == CUDA_SUCCESS)
        r = flyt_check_device(dst);
    if (r == CUDA_SUCCESS && (value == NULL || src == dst))
        r = src == dst ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
    return r;
}

FLYT_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    (void)type;
    CUresult r = flyt_check_device(dev);
    if (r == CUDA_SUCCESS && pi == NULL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *pi = 0; /* the share is set by the operator, not by the program */
    return r;
}

/* Profiling belongs to the GPU's host: from the VM these change nothing. */
/* The virtual GPU's link to the host has no native atomics
 * (HOST_NATIVE_ATOMIC_SUPPORTED is hidden as 0, as a PCIe GPU reports it):
 * no capability for any operation. */
FLYT_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *caps, const CUatomicOperation *ops,
                                                       unsigned int count, CUdevice dev)
{
    CUresult r = flyt_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (caps == NULL || ops == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++)
        if ((int)ops[i] < 0 || ops[i] >= CU_ATOMIC_OPERATION_MAX)
            return CUDA_ERROR_INVALID_VALUE;
    memset(caps, 0, count * sizeof *caps);
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuProfilerStart(void) { return CUDA_SUCCESS; }
FLYT_EXPORT CUresult cuProfilerStop(void) { return CUDA_SUCCESS; }
