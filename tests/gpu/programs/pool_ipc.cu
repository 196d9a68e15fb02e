// pool_ipc: a stream-ordered memory pool shared between two processes, as
// NVIDIA's streamOrderedAllocationIPC sample shares one. Forked before any
// CUDA call, so each process has its own context (through Flyt: its own
// session). The parent creates a pool exportable as a POSIX descriptor,
// takes an 8 MiB and a 64 KiB allocation from it on a stream, fills them
// with a kernel and records an interprocess event; it sends the pool's
// descriptor (SCM_RIGHTS), both allocations' export data and the event's
// handle. The child imports the pool and the allocations, waits for the
// event on its stream, adds to every element, records its own interprocess
// event and frees its imports; the parent waits on that event, checks the
// sums and frees. A pool that is not shareable exports nothing.
//
// stdout: deterministic results only.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_util.h"
#include "ipc_util.h"

#define BIG_N   (2 << 20) // ints: 8 MiB
#define SMALL_N (16 << 10) // ints: 64 KiB

struct to_child {
    cudaMemPoolPtrExportData big, small;
    cudaIpcEventHandle_t     filled;
};

static int child(int sock)
{
    int fd = recv_fd(sock);
    struct to_child h;
    get(sock, &h, sizeof h);
    cudaMemPool_t pool;
    CHECK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                               cudaMemHandleTypePosixFileDescriptor, 0));
    close(fd);
    cudaMemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = 0;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &access, 1));
    int *big = NULL, *small = NULL;
    CHECK(cudaMemPoolImportPointer((void **)&big, pool, &h.big));
    CHECK(cudaMemPoolImportPointer((void **)&small, pool, &h.small));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t filled;
    CHECK(cudaIpcOpenEventHandle(&filled, h.filled));
    CHECK(cudaStreamWaitEvent(s, filled, 0));
    add<<<256, 256, 0, s>>>(big, BIG_N, 7);
    add<<<16, 256, 0, s>>>(small, SMALL_N, 1000);
    CHECK(cudaGetLastError());
    int *host = (int *)malloc(SMALL_N * sizeof(int));
    CHECK(cudaMemcpyAsync(host, small, SMALL_N * sizeof(int), cudaMemcpyDeviceToHost, s));
    cudaEvent_t added;
    CHECK(cudaEventCreateWithFlags(&added, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(added, s));
    // the imports are freed before the exporter frees (as the driver asks)
    CHECK(cudaFreeAsync(big, s));
    CHECK(cudaFree(small));
    CHECK(cudaStreamSynchronize(s));
    cudaIpcEventHandle_t added_h;
    CHECK(cudaIpcGetEventHandle(&added_h, added));
    put(sock, &added_h, sizeof added_h);
    char ok;
    get(sock, &ok, 1); // the parent has waited on our event
    printf("child: small allocation sum after its kernel %lld\n", sum(host, SMALL_N));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaEventDestroy(added));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    free(host);
    fflush(stdout);
    put(sock, &ok, 1);
    return 0;
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(sv[0]);
        exit(child(sv[1]));
    }
    close(sv[1]);
    int sock = sv[0];

    int types = 0;
    CHECK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    printf("parent: pools shareable as POSIX descriptors: %s\n",
           (types & cudaMemHandleTypePosixFileDescriptor) ? "yes" : "no");
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t plain, pool;
    CHECK(cudaMemPoolCreate(&plain, &props));
    int no = -1;
    cudaError_t e = cudaMemPoolExportToShareableHandle(&no, plain, cudaMemHandleTypePosixFileDescriptor, 0);
    printf("parent: a pool created without handle types exports: %s\n", e == cudaSuccess ? "yes" : "no");
    cudaGetLastError();
    CHECK(cudaMemPoolDestroy(plain));
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    CHECK(cudaMemPoolCreate(&pool, &props));
    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *big, *small;
    CHECK(cudaMallocFromPoolAsync((void **)&big, BIG_N * sizeof(int), pool, s));
    CHECK(cudaMallocFromPoolAsync((void **)&small, SMALL_N * sizeof(int), pool, s));
    struct to_child h;
    CHECK(cudaMemPoolExportPointer(&h.big, big));
    CHECK(cudaMemPoolExportPointer(&h.small, small));
    fill<<<256, 256, 0, s>>>(big, BIG_N, 1);
    fill<<<16, 256, 0, s>>>(small, SMALL_N, 2);
    CHECK(cudaGetLastError());
    cudaEvent_t filled;
    CHECK(cudaEventCreateWithFlags(&filled, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(filled, s));
    CHECK(cudaIpcGetEventHandle(&h.filled, filled));
    send_fd(sock, fd);
    close(fd);
    put(sock, &h, sizeof h);

    cudaIpcEventHandle_t added_h;
    get(sock, &added_h, sizeof added_h);
    cudaEvent_t added;
    CHECK(cudaIpcOpenEventHandle(&added, added_h));
    CHECK(cudaStreamWaitEvent(s, added, 0));
    int *host = (int *)malloc(BIG_N * sizeof(int));
    CHECK(cudaMemcpyAsync(host, big, BIG_N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    char ok = 1;
    put(sock, &ok, 1);
    get(sock, &ok, 1); // the child's lines are out
    printf("parent: big allocation sum after the child's kernel %lld\n", sum(host, BIG_N));
    CHECK(cudaMemcpy(host, small, SMALL_N * sizeof(int), cudaMemcpyDeviceToHost));
    printf("parent: small allocation sum %lld\n", sum(host, SMALL_N));
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL: the child process\n");
        return 1;
    }
    CHECK(cudaFreeAsync(big, s));
    CHECK(cudaFreeAsync(small, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventDestroy(added));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    free(host);
    printf("PASS pool_ipc\n");
    return 0;
}
