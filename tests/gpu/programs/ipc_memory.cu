// ipc_memory: CUDA IPC between two processes, as NVIDIA's simpleIPC sample
// and torch.multiprocessing use it. Forked before any CUDA call, so each
// process has its own context (through Flyt: its own session). The parent
// fills a 4 MiB and a 2 KiB buffer with a kernel, records an interprocess
// event and hands the handles to the child over a pipe; the child waits for
// the event on its stream, opens both buffers (twice for the big one: the
// same pointer), runs a kernel that adds to every element, records its own
// interprocess event and returns its handle; the parent waits on that event
// and checks the sums. Then the child closes its mappings and the parent
// frees; a handle of a freed buffer no longer opens.
//
// stdout: deterministic results only.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_util.h"
#include "ipc_util.h"

#define BIG_N   (1 << 20) // ints: 4 MiB
#define SMALL_N 512       // ints: 2 KiB, packed beside other small allocations

struct to_child {
    cudaIpcMemHandle_t   big, small;
    cudaIpcEventHandle_t filled;
};

static int child(int in, int out)
{
    struct to_child h;
    get(in, &h, sizeof h);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t filled;
    CHECK(cudaIpcOpenEventHandle(&filled, h.filled));
    CHECK(cudaStreamWaitEvent(s, filled, 0));
    int *big = NULL, *again = NULL, *small = NULL;
    CHECK(cudaIpcOpenMemHandle((void **)&big, h.big, cudaIpcMemLazyEnablePeerAccess));
    CHECK(cudaIpcOpenMemHandle((void **)&again, h.big, cudaIpcMemLazyEnablePeerAccess));
    CHECK(cudaIpcOpenMemHandle((void **)&small, h.small, cudaIpcMemLazyEnablePeerAccess));
    add<<<256, 256, 0, s>>>(big, BIG_N, 7);
    add<<<4, 128, 0, s>>>(small, SMALL_N, 1000);
    CHECK(cudaGetLastError());
    cudaEvent_t added;
    CHECK(cudaEventCreateWithFlags(&added, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(added, s));
    cudaIpcEventHandle_t added_h;
    CHECK(cudaIpcGetEventHandle(&added_h, added));
    put(out, &added_h, sizeof added_h);
    int *host = (int *)malloc(SMALL_N * sizeof(int));
    CHECK(cudaMemcpyAsync(host, small, SMALL_N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    char ok;
    get(in, &ok, 1); // the parent has waited on our event
    printf("child: second open gives the same pointer: %s\n", again == big ? "yes" : "no");
    printf("child: small buffer sum after its kernel %lld\n", sum(host, SMALL_N));
    CHECK(cudaIpcCloseMemHandle(again));
    CHECK(cudaIpcCloseMemHandle(big));
    CHECK(cudaIpcCloseMemHandle(small));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaEventDestroy(added));
    fflush(stdout);
    put(out, &ok, 1);
    get(in, &ok, 1); // the parent freed the big buffer
    int *stale = NULL;
    cudaError_t e = cudaIpcOpenMemHandle((void **)&stale, h.big, cudaIpcMemLazyEnablePeerAccess);
    printf("child: the freed buffer's handle opens: %s\n", e == cudaSuccess ? "yes" : "no");
    cudaGetLastError();
    free(host);
    fflush(stdout);
    return 0;
}

int main(void)
{
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        exit(child(down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);

    int *big, *small, *other;
    CHECK(cudaMalloc(&other, SMALL_N * sizeof(int))); // a neighbour the child must not touch
    CHECK(cudaMalloc(&small, SMALL_N * sizeof(int)));
    CHECK(cudaMalloc(&big, BIG_N * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fill<<<256, 256, 0, s>>>(big, BIG_N, 1);
    fill<<<4, 128, 0, s>>>(small, SMALL_N, 2);
    fill<<<4, 128, 0, s>>>(other, SMALL_N, 3);
    CHECK(cudaGetLastError());
    cudaEvent_t filled;
    CHECK(cudaEventCreateWithFlags(&filled, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(filled, s));
    struct to_child h;
    CHECK(cudaIpcGetMemHandle(&h.big, big));
    CHECK(cudaIpcGetMemHandle(&h.small, small));
    CHECK(cudaIpcGetEventHandle(&h.filled, filled));
    put(down[1], &h, sizeof h);

    cudaIpcEventHandle_t added_h;
    get(up[0], &added_h, sizeof added_h);
    cudaEvent_t added;
    CHECK(cudaIpcOpenEventHandle(&added, added_h));
    CHECK(cudaStreamWaitEvent(s, added, 0));
    int *host = (int *)malloc(BIG_N * sizeof(int));
    CHECK(cudaMemcpyAsync(host, big, BIG_N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    char ok = 1;
    put(down[1], &ok, 1);
    get(up[0], &ok, 1); // the child's lines are out
    printf("parent: big buffer sum after the child's kernel %lld\n", sum(host, BIG_N));
    CHECK(cudaMemcpy(host, small, SMALL_N * sizeof(int), cudaMemcpyDeviceToHost));
    printf("parent: small buffer sum %lld\n", sum(host, SMALL_N));
    CHECK(cudaMemcpy(host, other, SMALL_N * sizeof(int), cudaMemcpyDeviceToHost));
    printf("parent: neighbour sum %lld\n", sum(host, SMALL_N));
    CHECK(cudaFree(big));
    CHECK(cudaDeviceSynchronize());
    fflush(stdout);
    put(down[1], &ok, 1);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL: the child process\n");
        return 1;
    }
    CHECK(cudaEventDestroy(added));
    CHECK(cudaEventDestroy(filled));
    CHECK(cudaFree(small));
    CHECK(cudaFree(other));
    free(host);
    printf("PASS ipc_memory\n");
    return 0;
}
