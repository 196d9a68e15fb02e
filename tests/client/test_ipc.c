/*
 * CUDA IPC through Flyt (docs/protocol.md, "IPC"), with NVIDIA's runtime as
 * programs such as simpleIPC and torch.multiprocessing use it. Two processes
 * of one server: the parent exports a 1 MiB and a 4 KiB allocation and an
 * interprocess event; the child opens them, reads the parent's bytes, writes
 * its own, which the parent then reads; double opens share one pointer and
 * need two closes; the importer cannot free what it opened; one's own handle
 * does not open; a handle whose allocation was freed opens nothing; and a
 * process of another server (another tenant: FLYT_OTHER_SERVER) is refused;
 * a device reset with a mapping open undoes it. A VMM allocation
 * (cuMemCreate) goes over as a file descriptor sent with SCM_RIGHTS, as
 * NVIDIA's memMapIPCDrv sample and PyTorch's expandable segments share.
 * A shareable memory pool goes over as a descriptor too, and an allocation
 * of it as 64 bytes of export data, as NVIDIA's streamOrderedAllocationIPC
 * sample shares them, exported and imported before either process has a
 * context (the runtime makes none for pool calls).
 * Fork comes before any CUDA call: each process has its own connection.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define BIG   (1u << 20)
#define SMALL 4096u

static void put(int fd, const void *p, size_t n) { CHECK_EQ(write(fd, p, n), (ssize_t)n, "pipe write"); }
static void get(int fd, void *p, size_t n) { CHECK_EQ(read(fd, p, n), (ssize_t)n, "pipe read"); }

static int fdsock[2]; /* the parent's end [0], the importer's [1]: descriptors */

/* The driver API of NVIDIA's runtime's own driver (Flyt's libcuda.so.1). */
static void *drv(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CHECK_EQ(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q), cudaSuccess,
             "driver entry point %s", name);
    CHECK(fn != NULL, "%s found", name);
    return fn;
}
#define DRV(fn) ((PFN_##fn##_v10020)drv(#fn)) /* the VMM calls came in CUDA 10.2 */

static void send_fd(int sock, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte = 'f';
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof cbuf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    CHECK_EQ(sendmsg(sock, &msg, 0), 1, "the descriptor sent (SCM_RIGHTS)");
}

static int recv_fd(int sock)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte;
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof cbuf};
    CHECK_EQ(recvmsg(sock, &msg, 0), 1, "a descriptor received");
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    CHECK(cm != NULL && cm->cmsg_type == SCM_RIGHTS, "it came as SCM_RIGHTS");
    int fd = -1;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

/* A VMM allocation of size bytes mapped read-write at a fresh address. */
static CUdeviceptr vmm_map(CUmemGenericAllocationHandle mem, size_t size)
{
    CUdeviceptr va = 0;
    CHECK_EQ(DRV(cuMemAddressReserve)(&va, size, 0, 0, 0), CUDA_SUCCESS, "cuMemAddressReserve");
    CHECK_EQ(DRV(cuMemMap)(va, size, 0, mem, 0), CUDA_SUCCESS, "cuMemMap");
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK_EQ(DRV(cuMemSetAccess)(va, size, &acc, 1), CUDA_SUCCESS, "cuMemSetAccess");
    return va;
}

static void vmm_unmap(CUdeviceptr va, size_t size)
{
    CHECK_EQ(DRV(cuMemUnmap)(va, size), CUDA_SUCCESS, "cuMemUnmap");
    CHECK_EQ(DRV(cuMemAddressFree)(va, size), CUDA_SUCCESS, "cuMemAddressFree");
}

/* The importer's side of the VMM allocation: it reads the exporter's 0x33s
 * and leaves 0x44s. */
static void child_vmm(void)
{
    int fd = recv_fd(fdsock[1]);
    size_t size = 0;
    get(fdsock[1], &size, sizeof size);
    CUmemGenericAllocationHandle mem = 0;
    CHECK_EQ(DRV(cuMemImportFromShareableHandle)(&mem, (void *)(intptr_t)fd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             CUDA_SUCCESS, "cuMemImportFromShareableHandle");
    close(fd);
    CUmemAllocationProp prop;
    CHECK_EQ(DRV(cuMemGetAllocationPropertiesFromHandle)(&prop, mem), CUDA_SUCCESS,
             "the imported allocation's properties");
    CHECK_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
             "it is exportable as a descriptor");
    CUdeviceptr va = vmm_map(mem, size);
    unsigned char *host = malloc(size);
    CHECK_EQ(cudaMemcpy(host, (void *)va, size, cudaMemcpyDeviceToHost), cudaSuccess, "read it");
    int all = 1;
    for (size_t i = 0; i < size; i++)
        all &= host[i] == 0x33;
    CHECK(all, "the importer reads the exporter's VMM allocation");
    CHECK_EQ(cudaMemset((void *)va, 0x44, size), cudaSuccess, "and writes it");
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess, "the write is done");
    vmm_unmap(va, size);
    CHECK_EQ(DRV(cuMemRelease)(mem), CUDA_SUCCESS, "the imported handle released");
    int null_fd = open("/dev/null", O_RDONLY);
    CHECK(DRV(cuMemImportFromShareableHandle)(&mem, (void *)(intptr_t)null_fd,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS,
          "a descriptor Flyt did not export imports nothing");
    close(null_fd);
    free(host);
    char done = 'v';
    put(fdsock[1], &done, 1);
}

struct exporter {
    CUmemGenericAllocationHandle mem;
    int fd;
    CUresult result;
};

static void *export_on_thread(void *arg)
{
    struct exporter *ex = arg;
    ex->result = DRV(cuMemExportToShareableHandle)(&ex->fd, ex->mem,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    return NULL;
}

/* The exporter's side: an exportable allocation filled with 0x33, its
 * descriptor sent; afterwards it holds the importer's 0x44s. */
static void parent_vmm(void)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    int posix = 0;
    CHECK_EQ(((PFN_cuDeviceGetAttribute_v2000)drv("cuDeviceGetAttribute"))(
                 &posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
             CUDA_SUCCESS, "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED");
    CHECK_EQ(posix, 1, "the device says it exports POSIX descriptors");
    size_t size = 0;
    CHECK_EQ(DRV(cuMemGetAllocationGranularity)(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             CUDA_SUCCESS, "the granularity");
    CUmemGenericAllocationHandle mem = 0, plain = 0;
    CHECK_EQ(DRV(cuMemCreate)(&mem, size, &prop, 0), CUDA_SUCCESS, "an exportable cuMemCreate");
    CUdeviceptr va = vmm_map(mem, size);
    CHECK_EQ(cudaMemset((void *)va, 0x33, size), cudaSuccess, "fill it");
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess, "filled");
    struct exporter ex = {.mem = mem, .fd = -1};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, export_on_thread, &ex), 0, "a thread without a context");
    CHECK_EQ(pthread_join(t, NULL), 0, "joined");
    CHECK_EQ(ex.result, CUDA_SUCCESS,
             "cuMemExportToShareableHandle from a thread with no current context (as PyTorch's "
             "queue feeder thread)");
    int fd = ex.fd;
    CHECK(fd >= 0, "a descriptor");
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CHECK_EQ(DRV(cuMemCreate)(&plain, size, &prop, 0), CUDA_SUCCESS, "a cuMemCreate not exportable");
    int no = -1;
    CHECK(DRV(cuMemExportToShareableHandle)(&no, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
              CUDA_SUCCESS, "which does not export");
    CHECK_EQ(DRV(cuMemRelease)(plain), CUDA_SUCCESS, "released");
    send_fd(fdsock[0], fd);
    close(fd);
    put(fdsock[0], &size, sizeof size);
    char done;
    get(fdsock[0], &done, 1);
    unsigned char *host = malloc(size);
    CHECK_EQ(cudaMemcpy(host, (void *)va, size, cudaMemcpyDeviceToHost), cudaSuccess, "read it back");
    int all = 1;
    for (size_t i = 0; i < size; i++)
        all &= host[i] == 0x44;
    CHECK(all, "the exporter reads the importer's writes");
    vmm_unmap(va, size);
    CHECK_EQ(DRV(cuMemRelease)(mem), CUDA_SUCCESS, "the exported handle released");
    free(host);
}

#define POOLED (3u << 20)

/* The importer's side of the pool: it reads the exporter's 0x55s, leaves
 * 0x66s and frees its import; afterwards a freed allocation's data imports
 * nothing. */
static void child_pool(void)
{
    int fd = recv_fd(fdsock[1]);
    struct cudaMemPoolPtrExportData data, freed_data;
    get(fdsock[1], &data, sizeof data);
    cudaMemPool_t pool = NULL, again = NULL, own = NULL;
    CHECK_EQ(cudaMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                                  cudaMemHandleTypePosixFileDescriptor, 0),
             cudaSuccess, "cudaMemPoolImportFromShareableHandle");
    CHECK_EQ(cudaMemPoolImportFromShareableHandle(&again, (void *)(intptr_t)fd,
                                                  cudaMemHandleTypePosixFileDescriptor, 0),
             cudaSuccess, "import it again");
    CHECK(again == pool, "the same pool, as the driver's");
    close(fd);
    struct cudaMemAccessDesc access = {.location = {cudaMemLocationTypeDevice, 0},
                                .flags = cudaMemAccessFlagsProtReadWrite};
    CHECK_EQ(cudaMemPoolSetAccess(pool, &access, 1), cudaSuccess, "access for this device");
    void *p = NULL, *none = NULL;
    CHECK(cudaMallocFromPoolAsync(&none, 4096, pool, 0) != cudaSuccess,
          "an imported pool makes no allocations");
    cudaGetLastError();
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                              .handleTypes = cudaMemHandleTypePosixFileDescriptor,
                              .location = {cudaMemLocationTypeDevice, 0}};
    CHECK_EQ(cudaMemPoolCreate(&own, &props), cudaSuccess, "a pool of the importer's own");
    CHECK(cudaMemPoolImportPointer(&none, own, &data) != cudaSuccess,
          "the allocation does not import into a pool it is not of");
    cudaGetLastError();
    CHECK_EQ(cudaMemPoolDestroy(own), cudaSuccess, "destroyed");
    CHECK_EQ(cudaMemPoolImportPointer(&p, pool, &data), cudaSuccess, "cudaMemPoolImportPointer");
    struct cudaPointerAttributes attr;
    CHECK_EQ(cudaPointerGetAttributes(&attr, (char *)p + 10), cudaSuccess, "its attributes");
    CHECK_EQ(attr.type, cudaMemoryTypeDevice, "imported pool memory is device memory");
    unsigned char *host = malloc(POOLED);
    CHECK_EQ(cudaMemcpy(host, p, POOLED, cudaMemcpyDeviceToHost), cudaSuccess, "read it");
    int all = 1;
    for (size_t i = 0; i < POOLED; i++)
        all &= host[i] == 0x55;
    CHECK(all, "the importer reads the exporter's pool allocation");
    CHECK_EQ(cudaMemsetAsync(p, 0x66, POOLED, 0), cudaSuccess, "and writes it");
    CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess, "the import freed (cudaFreeAsync)");
    CHECK_EQ(cudaStreamSynchronize(0), cudaSuccess, "before the exporter frees it");
    char done = 'p';
    put(fdsock[1], &done, 1);
    get(fdsock[1], &freed_data, sizeof freed_data);
    CHECK(cudaMemPoolImportPointer(&none, pool, &freed_data) != cudaSuccess,
          "a freed allocation's export data imports nothing");
    cudaGetLastError();
    CHECK_EQ(cudaMemPoolDestroy(pool), cudaSuccess, "the imported pool destroyed");
    put(fdsock[1], &done, 1);
    free(host);
}

/* The exporter's side: a shareable pool and an allocation of it filled with
 * 0x55, both sent; afterwards the allocation holds the importer's 0x66s. */
static void parent_pool(void)
{
    int types = 0;
    CHECK_EQ(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0), cudaSuccess,
             "cudaDevAttrMemoryPoolSupportedHandleTypes");
    CHECK(types & cudaMemHandleTypePosixFileDescriptor, "the device shares pools as POSIX descriptors");
    struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                              .handleTypes = cudaMemHandleTypePosixFileDescriptor,
                              .location = {cudaMemLocationTypeDevice, 0}};
    cudaMemPool_t pool = NULL, plain = NULL, dflt = NULL;
    CHECK_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess, "a shareable pool");
    int fd = -1;
    CHECK_EQ(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
             cudaSuccess, "cudaMemPoolExportToShareableHandle");
    CHECK(fd >= 0, "a descriptor");
    void *p = NULL, *q = NULL, *r = NULL;
    CHECK_EQ(cudaMallocFromPoolAsync(&p, POOLED, pool, 0), cudaSuccess, "an allocation from it");
    CHECK_EQ(cudaMallocFromPoolAsync(&q, 4096, pool, 0), cudaSuccess, "a second one");
    struct cudaMemPoolPtrExportData data, twice, qdata;
    CHECK_EQ(cudaMemPoolExportPointer(&data, p), cudaSuccess, "cudaMemPoolExportPointer");
    CHECK_EQ(cudaMemPoolExportPointer(&twice, p), cudaSuccess, "export it again");
    CHECK(memcmp(&data, &twice, sizeof data) == 0, "one allocation, one export");
    CHECK_EQ(cudaMemPoolExportPointer(&qdata, q), cudaSuccess, "export the second one");
    CHECK_EQ(cudaMemsetAsync(p, 0x55, POOLED, 0), cudaSuccess, "fill it");
    CHECK_EQ(cudaStreamSynchronize(0), cudaSuccess, "filled");

    props.handleTypes = cudaMemHandleTypeNone;
    CHECK_EQ(cudaMemPoolCreate(&plain, &props), cudaSuccess, "a pool not shareable");
    int no = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&no, plain, cudaMemHandleTypePosixFileDescriptor, 0) !=
              cudaSuccess, "does not export");
    cudaGetLastError();
    CHECK_EQ(cudaMallocFromPoolAsync(&r, 4096, plain, 0), cudaSuccess, "an allocation from it");
    CHECK(cudaMemPoolExportPointer(&twice, r) != cudaSuccess, "which does not export either");
    cudaGetLastError();
    CHECK_EQ(cudaFreeAsync(r, 0), cudaSuccess, "freed");
    CHECK_EQ(cudaMemPoolDestroy(plain), cudaSuccess, "destroyed");
    CHECK_EQ(cudaDeviceGetDefaultMemPool(&dflt, 0), cudaSuccess, "the default pool");
    CHECK(cudaMemPoolExportToShareableHandle(&no, dflt, cudaMemHandleTypePosixFileDescriptor, 0) !=
              cudaSuccess, "is not shareable");
    cudaGetLastError();

    send_fd(fdsock[0], fd);
    close(fd);
    put(fdsock[0], &data, sizeof data);
    char done;
    get(fdsock[0], &done, 1);
    unsigned char *host = malloc(POOLED);
    CHECK_EQ(cudaMemcpy(host, p, POOLED, cudaMemcpyDeviceToHost), cudaSuccess, "read it back");
    int all = 1;
    for (size_t i = 0; i < POOLED; i++)
        all &= host[i] == 0x66;
    CHECK(all, "the exporter reads the importer's writes to the pool allocation");
    CHECK_EQ(cudaFreeAsync(q, 0), cudaSuccess, "the second allocation freed");
    CHECK_EQ(cudaStreamSynchronize(0), cudaSuccess, "free done");
    put(fdsock[0], &qdata, sizeof qdata);
    get(fdsock[0], &done, 1);
    CHECK_EQ(cudaFreeAsync(p, 0), cudaSuccess, "the exported allocation freed");
    CHECK_EQ(cudaMemPoolDestroy(pool), cudaSuccess, "the shareable pool destroyed");
    free(host);
}

struct handles {
    cudaIpcMemHandle_t   big, small;
    cudaIpcEventHandle_t event;
};


static void fill(unsigned char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 31u + seed);
}

static int matches(const unsigned char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (unsigned char)(i * 31u + seed))
            return 0;
    return 1;
}

/* The importer: everything a second process does with the handles. */
static void child(int in, int out)
{
    child_pool(); /* first: the pool is imported before this process has a context */
    struct handles h;
    get(in, &h, sizeof h);
    unsigned char *host = malloc(BIG);
    CHECK(host != NULL, "malloc");

    void *big = NULL, *again = NULL, *small = NULL;
    CHECK_EQ(cudaIpcOpenMemHandle(&big, h.big, cudaIpcMemLazyEnablePeerAccess), cudaSuccess,
             "open the 1 MiB allocation's handle");
    CHECK_EQ(cudaMemcpy(host, big, BIG, cudaMemcpyDeviceToHost), cudaSuccess, "read it");
    CHECK(matches(host, BIG, 7), "the importer reads the exporter's bytes");
    CHECK_EQ(cudaIpcOpenMemHandle(&again, h.big, cudaIpcMemLazyEnablePeerAccess), cudaSuccess,
             "open it again");
    CHECK(again == big, "a second open gives the same pointer");
    struct cudaPointerAttributes attr;
    CHECK_EQ(cudaPointerGetAttributes(&attr, (char *)big + 100), cudaSuccess, "its attributes");
    CHECK_EQ(attr.type, cudaMemoryTypeDevice, "opened memory is device memory");
    CHECK(cudaFree(big) != cudaSuccess, "the importer cannot free what it opened");
    cudaGetLastError();

    CHECK_EQ(cudaIpcOpenMemHandle(&small, h.small, cudaIpcMemLazyEnablePeerAccess), cudaSuccess,
             "open the 4 KiB allocation's handle");
    CHECK_EQ(cudaMemcpy(host, small, SMALL, cudaMemcpyDeviceToHost), cudaSuccess, "read it");
    CHECK(matches(host, SMALL, 3), "the small allocation's bytes, not its neighbours'");

    fill(host, BIG, 11);
    CHECK_EQ(cudaMemcpy(big, host, BIG, cudaMemcpyHostToDevice), cudaSuccess, "write the big one");
    CHECK_EQ(cudaMemset(small, 0x5a, SMALL), cudaSuccess, "set the small one");

    cudaEvent_t ev;
    CHECK_EQ(cudaIpcOpenEventHandle(&ev, h.event), cudaSuccess, "open the event's handle");
    CHECK_EQ(cudaStreamWaitEvent(0, ev, 0), cudaSuccess, "wait for the exporter's event");
    CHECK_EQ(cudaEventSynchronize(ev), cudaSuccess, "synchronise with it");
    CHECK_EQ(cudaEventDestroy(ev), cudaSuccess, "destroy the opened event");
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess, "the writes are done");

    cudaIpcMemHandle_t junk;
    memset(&junk, 0, sizeof junk);
    void *none = NULL;
    CHECK(cudaIpcOpenMemHandle(&none, junk, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess,
          "a handle Flyt did not make opens nothing");
    cudaGetLastError();

    CHECK_EQ(cudaIpcCloseMemHandle(big), cudaSuccess, "close the second open");
    CHECK_EQ(cudaIpcCloseMemHandle(big), cudaSuccess, "close the first open");
    CHECK(cudaIpcCloseMemHandle(big) != cudaSuccess, "a third close has nothing to close");
    cudaGetLastError();
    CHECK_EQ(cudaIpcCloseMemHandle(small), cudaSuccess, "close the small one");
    child_vmm();
    CHECK_EQ(cudaIpcOpenMemHandle(&small, h.small, cudaIpcMemLazyEnablePeerAccess), cudaSuccess,
             "open the small one again");
    CHECK_EQ(cudaDeviceReset(), cudaSuccess, "a device reset with a mapping open");
    CHECK_EQ(cudaMalloc(&none, SMALL), cudaSuccess, "the device serves after the reset");
    CHECK_EQ(cudaFree(none), cudaSuccess, "and frees");

    char done = 'w';
    put(out, &done, 1);
    get(in, &done, 1); /* the parent freed the 1 MiB allocation */
    CHECK(cudaIpcOpenMemHandle(&none, h.big, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess,
          "the handle of a freed allocation opens nothing");
    free(host);
    exit(0);
}

/* A process of another server: the same handle is another tenant's. */
static void stranger(int in, const char *other)
{
    struct handles h;
    get(in, &h, sizeof h);
    setenv("FLYT_SERVER", other, 1);
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h.big, cudaIpcMemLazyEnablePeerAccess);
    CHECK(e != cudaSuccess, "a session of another server does not open the handle");
    printf("other tenant's open: %s\n", cudaGetErrorName(e));
    exit(0);
}

static pid_t start(int *to, int *from, const char *other)
{
    int down[2], up[2];
    CHECK_EQ(pipe(down), 0, "pipe");
    CHECK_EQ(pipe(up), 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        if (other)
            stranger(down[0], other);
        child(down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    *to = down[1];
    *from = up[0];
    return pid;
}

static int reaped_ok(pid_t pid)
{
    int st = 0;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
    const char *other = getenv("FLYT_OTHER_SERVER");
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fdsock), 0, "socketpair for descriptors");
    int to, from, to2 = -1, from2 = -1;
    pid_t kid = start(&to, &from, NULL);
    pid_t stray = other ? start(&to2, &from2, other) : -1;
    parent_pool(); /* first: the pool is exported before this process has a context */

    unsigned char *host = malloc(BIG);
    CHECK(host != NULL, "malloc");
    void *big = NULL, *small = NULL, *neighbour = NULL;
    CHECK_EQ(cudaMalloc(&neighbour, SMALL), cudaSuccess, "cudaMalloc beside the small one");
    CHECK_EQ(cudaMalloc(&small, SMALL), cudaSuccess, "cudaMalloc 4 KiB");
    CHECK_EQ(cudaMalloc(&big, BIG), cudaSuccess, "cudaMalloc 1 MiB");
    fill(host, BIG, 7);
    CHECK_EQ(cudaMemcpy(big, host, BIG, cudaMemcpyHostToDevice), cudaSuccess, "fill the big one");
    fill(host, SMALL, 3);
    CHECK_EQ(cudaMemcpy(small, host, SMALL, cudaMemcpyHostToDevice), cudaSuccess, "fill the small one");
    CHECK_EQ(cudaMemset(neighbour, 0, SMALL), cudaSuccess, "clear the neighbour");

    int ipc_events = 0;
    CHECK_EQ(cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, 0), cudaSuccess,
             "cudaDevAttrIpcEventSupport");
    CHECK_EQ(ipc_events, 1, "the device says it has interprocess events");
    struct handles h;
    CHECK_EQ(cudaIpcGetMemHandle(&h.big, big), cudaSuccess, "cudaIpcGetMemHandle 1 MiB");
    cudaIpcMemHandle_t twice;
    CHECK_EQ(cudaIpcGetMemHandle(&twice, big), cudaSuccess, "export it again");
    CHECK(memcmp(&twice, &h.big, sizeof twice) == 0, "one allocation, one handle");
    CHECK_EQ(cudaIpcGetMemHandle(&h.small, small), cudaSuccess, "cudaIpcGetMemHandle 4 KiB");
    void *own = NULL;
    CHECK(cudaIpcOpenMemHandle(&own, h.big, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess,
          "the exporter does not open its own handle");
    cudaGetLastError();

    cudaEvent_t timed, ev;
    CHECK_EQ(cudaEventCreate(&timed), cudaSuccess, "a timed event");
    cudaIpcEventHandle_t eh;
    CHECK(cudaIpcGetEventHandle(&eh, timed) != cudaSuccess, "a plain event has no IPC handle");
    cudaGetLastError();
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess) != cudaSuccess,
          "an interprocess event must be untimed");
    cudaGetLastError();
    CHECK_EQ(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming),
             cudaSuccess, "an interprocess event");
    CHECK_EQ(cudaEventRecord(ev, 0), cudaSuccess, "record it");
    CHECK_EQ(cudaIpcGetEventHandle(&h.event, ev), cudaSuccess, "cudaIpcGetEventHandle");

    put(to, &h, sizeof h);
    parent_vmm();
    if (stray > 0) {
        put(to2, &h, sizeof h);
        CHECK(reaped_ok(stray), "the other tenant's process");
    }
    char msg;
    get(from, &msg, 1);
    CHECK_EQ(cudaMemcpy(host, big, BIG, cudaMemcpyDeviceToHost), cudaSuccess, "read back the big one");
    CHECK(matches(host, BIG, 11), "the exporter reads the importer's bytes");
    CHECK_EQ(cudaMemcpy(host, small, SMALL, cudaMemcpyDeviceToHost), cudaSuccess, "read back the small one");
    int set = 1;
    for (unsigned i = 0; i < SMALL; i++)
        set &= host[i] == 0x5a;
    CHECK(set, "the importer's memset reached the small one");
    CHECK_EQ(cudaMemcpy(host, neighbour, SMALL, cudaMemcpyDeviceToHost), cudaSuccess, "read the neighbour");
    int untouched = 1;
    for (unsigned i = 0; i < SMALL; i++)
        untouched &= host[i] == 0;
    CHECK(untouched, "the neighbour of the small one is untouched");

    CHECK_EQ(cudaFree(big), cudaSuccess, "free the exported allocation");
    put(to, &msg, 1);
    CHECK(reaped_ok(kid), "the importing process");
    CHECK_EQ(cudaEventDestroy(ev), cudaSuccess, "destroy the event");
    CHECK_EQ(cudaEventDestroy(timed), cudaSuccess, "destroy the timed event");
    CHECK_EQ(cudaFree(small), cudaSuccess, "free the small one");
    CHECK_EQ(cudaFree(neighbour), cudaSuccess, "free the neighbour");
    free(host);
    printf("ipc: memory and events shared between two processes\n");
    return 0;
}
