/*
 * CUDA IPC: memory and events shared with another process of this VM
 * (docs/protocol.md, "IPC"). The handles are made and read by the server
 * sessions, which are processes on the GPU node; here they are opaque bytes
 * the program passes around as it would NVIDIA's. A VMM allocation is
 * exported as a file descriptor, as the driver does: a memfd holding its
 * handle, which the program sends to the other process (SCM_RIGHTS,
 * pidfd_getfd) and whose client reads it back; so is a memory pool, whose
 * allocations are exported as 64 bytes as the driver's. A server older than
 * protocol 2.5 (2.6 for VMM allocations, 2.7 for pools) has no IPC: the
 * calls say so.
 */
#include "client.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(CUipcMemHandle) == FLYT_IPC_HANDLE_BYTES, "CUipcMemHandle is 64 bytes");
_Static_assert(sizeof(CUipcEventHandle) == FLYT_IPC_HANDLE_BYTES, "CUipcEventHandle is 64 bytes");

static CUresult ipc_ready_for(const char *name, int minor)
{
    CUresult r;
    switch (minor) {
    case FLYT_MINOR_IPC: r = flyt_ctx_require_at(name); break;
    /* VMM handles name their device themselves: the driver exports and
     * imports them from any thread (PyTorch does it on a queue's feeder
     * thread, which never made a context current) */
    case FLYT_MINOR_IPC_VMM: r = flyt_ctx_require_object_at(name); break;
    /* so do pools, also before any context exists (NVIDIA's runtime makes
     * none for cudaMemPoolCreate and its exports and imports) */
    default: r = flyt_init_state(); break;
    }
    if (r == CUDA_SUCCESS && flyt_conn_server_minor() < minor)
        r = flyt_unsupported_why(name, "the server predates it (protocol 2.5, 2.6 for VMM, "
                                       "2.7 for pools)");
    return r;
}

static CUresult ipc_ready(const char *name) { return ipc_ready_for(name, FLYT_MINOR_IPC); }

static CUresult export_handle(uint16_t op, uint64_t what, uint8_t out[FLYT_IPC_HANDLE_BYTES])
{
    flyt_req_handle req = {.handle = what};
    flyt_rep_ipc_handle rep;
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    CUresult r = flyt_call(op, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS)
        memcpy(out, rep.handle, FLYT_IPC_HANDLE_BYTES);
    return r;
}

FLYT_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
    CUresult r = ipc_ready(__func__);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t base = 0;
    if (handle == NULL || flyt_range_find((uint64_t)dptr, &base, NULL, NULL) != FLYT_RANGE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    /* the handle names the whole allocation, as the driver's does */
    return export_handle(FLYT_OP_IPC_MEM_EXPORT, base, (uint8_t *)handle->reserved);
}

static CUresult open_mem(CUdeviceptr *dptr, const CUipcMemHandle *handle, unsigned flags,
                         const char *name)
{
    CUresult r = ipc_ready(name);
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_ipc_open req = {.flags = flags};
    memcpy(req.handle, handle->reserved, FLYT_IPC_HANDLE_BYTES);
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_IPC_MEM_OPEN, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t base = 0;
    if (flyt_range_find(rep.a, &base, NULL, NULL) != FLYT_RANGE_DEVICE || base != rep.a)
        flyt_range_add(FLYT_RANGE_DEVICE, rep.a, rep.b, 0); /* a second open has it already */
    *dptr = (CUdeviceptr)rep.a;
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    return open_mem(dptr, &handle, flags, __func__);
}

FLYT_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
    return open_mem(dptr, &handle, flags, __func__);
}

FLYT_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult r = ipc_ready(__func__);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_req_handle req = {.handle = (uint64_t)dptr};
    flyt_rep_u64 rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_IPC_MEM_CLOSE, &req, sizeof req, NULL, 0, &sink);
    if (r == CUDA_SUCCESS && rep.value == 0) /* the last open: the mapping is gone */
        flyt_range_remove(FLYT_RANGE_DEVICE, (uint64_t)dptr);
    return r;
}

FLYT_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
    CUresult r = ipc_ready(__func__);
    if (r != CUDA_SUCCESS)
        return r;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return export_handle(FLYT_OP_IPC_EVENT_EXPORT, (uint64_t)(uintptr_t)event,
                         (uint8_t *)handle->reserved);
}

FLYT_EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
    CUresult r = ipc_ready(__func__);
    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_ipc_open req = {.id = flyt_new_id()};
    memcpy(req.handle, handle.reserved, FLYT_IPC_HANDLE_BYTES);
    r = flyt_call(FLYT_OP_IPC_EVENT_OPEN, &req, sizeof req, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        *event = (CUevent)(uintptr_t)req.id;
    return r;
}

/* ---- VMM allocations and pools as file descriptors ---- */

/* The handle the server makes for what op exports, in a new descriptor as
 * the driver gives: a memfd, sealed so that what the importer reads is what
 * the server wrote. */
static CUresult export_fd(uint16_t op, uint64_t what, int *out)
{
    uint8_t h[FLYT_IPC_HANDLE_BYTES];
    CUresult r = export_handle(op, what, h);
    if (r != CUDA_SUCCESS)
        return r;
    int fd = memfd_create("flyt-ipc-handle", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd < 0 || write(fd, h, sizeof h) != (ssize_t)sizeof h ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = fd;
    return CUDA_SUCCESS;
}

/* The handle in a descriptor export_fd made (in this or another process). */
static CUresult handle_of_fd(int fd, uint8_t h[FLYT_IPC_HANDLE_BYTES], const char *name)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!S_ISREG(st.st_mode) || st.st_size != FLYT_IPC_HANDLE_BYTES ||
        pread(fd, h, FLYT_IPC_HANDLE_BYTES, 0) != (ssize_t)FLYT_IPC_HANDLE_BYTES)
        return flyt_unsupported_why(name, "a descriptor another Flyt process did not export");
    return CUDA_SUCCESS;
}

FLYT_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags)
{
    CUresult r = ipc_ready_for(__func__, FLYT_MINOR_IPC_VMM);
    if (r != CUDA_SUCCESS)
        return r;
    if (shareable == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return flyt_unsupported_why(__func__, "only POSIX file descriptors");
    return export_fd(FLYT_OP_IPC_VMM_EXPORT, handle, (int *)shareable);
}

FLYT_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                                    CUmemAllocationHandleType type)
{
    CUresult r = ipc_ready_for(__func__, FLYT_MINOR_IPC_VMM);
    if (r != CUDA_SUCCESS)
        return r;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return flyt_unsupported_why(__func__, "only POSIX file descriptors");
    flyt_req_ipc_open req = {0};
    r = handle_of_fd((int)(intptr_t)os_handle, req.handle, __func__);
    if (r != CUDA_SUCCESS)
        return r;
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_IPC_VMM_IMPORT, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    flyt_vmm_adopt(rep.a, &prop);
    *handle = rep.a;
    return CUDA_SUCCESS;
}

/* ---- memory pools ---- */

static CUresult pool_ready(const char *name, CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult r = ipc_ready_for(name, FLYT_MINOR_IPC_POOL);
    if (r == CUDA_SUCCESS && flags != 0)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        r = flyt_unsupported_why(name, "only POSIX file descriptors");
    return r;
}

FLYT_EXPORT CUresult cuMemPoolExportToShareableHandle(void *shareable, CUmemoryPool pool,
                                                      CUmemAllocationHandleType type,
                                                      unsigned long long flags)
{
    CUresult r = pool_ready(__func__, type, flags);
    if (r != CUDA_SUCCESS)
        return r;
    if (shareable == NULL || pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return export_fd(FLYT_OP_IPC_POOL_EXPORT, (uint64_t)(uintptr_t)pool, (int *)shareable);
}

FLYT_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os_handle,
                                                        CUmemAllocationHandleType type,
                                                        unsigned long long flags)
{
    CUresult r = pool_ready(__func__, type, flags);
    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_ipc_open req = {0};
    r = handle_of_fd((int)(intptr_t)os_handle, req.handle, __func__);
    uint64_t id = 0;
    if (r == CUDA_SUCCESS)
        r = flyt_call_u64(FLYT_OP_IPC_POOL_IMPORT, &req, sizeof req, &id);
    if (r == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(uintptr_t)id;
    return r;
}

FLYT_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *data, CUdeviceptr ptr)
{
    _Static_assert(sizeof(CUmemPoolPtrExportData) == FLYT_IPC_HANDLE_BYTES, "64 bytes");
    CUresult r = ipc_ready_for(__func__, FLYT_MINOR_IPC_POOL);
    if (r != CUDA_SUCCESS)
        return r;
    if (data == NULL || ptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return export_handle(FLYT_OP_IPC_PTR_EXPORT, (uint64_t)ptr, (uint8_t *)data->reserved);
}

FLYT_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *data)
{
    CUresult r = ipc_ready_for(__func__, FLYT_MINOR_IPC_POOL);
    if (r != CUDA_SUCCESS)
        return r;
    if (ptr == NULL || pool == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    flyt_req_ipc_open req = {.id = (uint64_t)(uintptr_t)pool};
    memcpy(req.handle, data->reserved, FLYT_IPC_HANDLE_BYTES);
    flyt_rep_u64_pair rep = {0};
    struct flyt_reply_sink sink = {.rep = &rep, .rep_size = sizeof rep};
    r = flyt_call(FLYT_OP_IPC_PTR_IMPORT, &req, sizeof req, NULL, 0, &sink);
    if (r != CUDA_SUCCESS)
        return r;
    /* an allocation like cuMemAllocFromPoolAsync's, freed by cuMemFree(Async) */
    flyt_range_add(FLYT_RANGE_DEVICE, rep.a, rep.b, 0);
    *ptr = flyt_dptr(rep.a);
    return CUDA_SUCCESS;
}
