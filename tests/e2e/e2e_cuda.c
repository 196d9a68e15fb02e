/*
 * The CUDA program of the end-to-end test: an ordinary program of the CUDA runtime API
 * (linked against NVIDIA's libcudart.so.13, which loads Flyt's libcuda.so.1 as its driver)
 * that knows nothing of Flyt. Run in a VM's network namespace with FLYT_SERVER unset, so
 * the client library asks the VM's client manager for a server.
 *
 * usage: e2e_cuda run SMS MEMORY          check the share, allocate, copy, check, free, exit
 *        e2e_cuda hold SMS MEMORY         the same, but keep the allocation, print "held"
 *                                         and wait for SIGUSR1 (then check the data again
 *                                         through the server, free, exit 0) or SIGTERM
 *        e2e_cuda disconnect SMS MEMORY   the same as run, then close the connection to the
 *                                         server while the process keeps running: print
 *                                         "disconnected" and wait for SIGTERM
 *        e2e_cuda nofit                   expect no GPU: exit 0 when the first CUDA call
 *                                         fails with cudaErrorNoDevice (and so do later ones)
 * SMS and MEMORY (bytes) are the VM's share the device must show. Each check prints a
 * line (tests/lib/check.h); the first that fails ends the program with exit status 1.
 */
#include <cuda_runtime_api.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define CUDA_OK(call) CHECK_EQ((call), cudaSuccess, "%s", #call)

#define BUF (4u << 20)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 9);
}

static volatile sig_atomic_t got_usr1, got_term;
static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        got_usr1 = 1;
    else
        got_term = 1;
}

/* Shuts down every TCP connection of this process: the client library's connection to
 * its server (the only TCP socket the program has). */
static int drop_tcp_connections(void)
{
    DIR *d = opendir("/proc/self/fd");
    int dropped = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 &&
            (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) && shutdown(fd, SHUT_RDWR) == 0)
            dropped++;
    }
    if (d)
        closedir(d);
    return dropped;
}

static int nofit(void)
{
    int count = -1;
    cudaError_t e = cudaGetDeviceCount(&count);
    CHECK_EQ(e, cudaErrorNoDevice,
             "cudaGetDeviceCount: %s (want cudaErrorNoDevice), %d devices", cudaGetErrorName(e), count);
    void *d = NULL;
    e = cudaMalloc(&d, 4096);
    CHECK_NE(e, cudaSuccess, "cudaMalloc also fails: %s", cudaGetErrorName(e));
    return check_done();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "nofit") == 0)
        return nofit();
    if (argc != 4) {
        fprintf(stderr, "usage: e2e_cuda run|hold|disconnect SMS MEMORY | e2e_cuda nofit\n");
        return 2;
    }
    const char *mode = argv[1];
    int want_sms = atoi(argv[2]);
    size_t want_mem = (size_t)strtoull(argv[3], NULL, 10);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int count = -1;
    CUDA_OK(cudaGetDeviceCount(&count));
    CHECK_EQ(count, 1, "one device (%d)", count);
    struct cudaDeviceProp p;
    CUDA_OK(cudaGetDeviceProperties(&p, 0));
    CHECK_EQ(p.multiProcessorCount, want_sms,
             "the device has the VM's %d SMs (%d)", want_sms, p.multiProcessorCount);
    CHECK_EQ(p.totalGlobalMem, want_mem,
             "the device has the VM's %zu bytes (%zu)", want_mem, (size_t)p.totalGlobalMem);
    int attr = 0;
    CUDA_OK(cudaDeviceGetAttribute(&attr, cudaDevAttrMultiProcessorCount, 0));
    CHECK_EQ(attr, want_sms, "SM count attribute %d", attr);
    size_t free0 = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free0, &total));
    CHECK_EQ(total, want_mem, "cudaMemGetInfo: %zu free of %zu", free0, total);
    CHECK_LE(free0, total, "cudaMemGetInfo: %zu free of %zu", free0, total);

    unsigned char *h = malloc(BUF), *back = malloc(BUF);
    void *d1 = NULL, *d2 = NULL;
    fill(h, BUF, (unsigned)getpid());
    CUDA_OK(cudaMalloc(&d1, BUF));
    CUDA_OK(cudaMalloc(&d2, BUF));
    size_t free1 = 0;
    CUDA_OK(cudaMemGetInfo(&free1, &total));
    CHECK_LE(free1 + 2 * (size_t)BUF, free0,
             "8 MiB allocated shows in cudaMemGetInfo (%zu -> %zu)", free0, free1);
    CUDA_OK(cudaMemcpy(d1, h, BUF, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d2, d1, BUF, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMemset(d1, 0x5a, 4096));
    memset(back, 0, BUF);
    CUDA_OK(cudaMemcpy(back, d2, BUF, cudaMemcpyDeviceToHost));
    CHECK_MEM_EQ(h, back, BUF, "4 MiB host -> device -> device -> host is intact");
    CUDA_OK(cudaMemcpy(back, d1, 4096, cudaMemcpyDeviceToHost));
    int set_ok = 1;
    for (int i = 0; i < 4096; i++)
        set_ok &= back[i] == 0x5a;
    CHECK(set_ok, "cudaMemset took");
    void *huge = NULL;
    cudaError_t e = cudaMalloc(&huge, want_mem + ((size_t)1 << 20));
    CHECK_EQ(e, cudaErrorMemoryAllocation, "more than the VM's memory is refused: %s", cudaGetErrorName(e));
    cudaGetLastError();

    if (strcmp(mode, "hold") == 0) {
        printf("held\n");
        time_t until = time(NULL) + 600;
        while (!got_usr1 && !got_term && time(NULL) < until)
            usleep(20000);
        if (!got_usr1) { /* told to stop, or forgotten */
            free(h);
            free(back);
            return 3;
        }
        memset(back, 0, BUF);
        CUDA_OK(cudaMemcpy(back, d2, BUF, cudaMemcpyDeviceToHost));
        CHECK_MEM_EQ(h, back, BUF, "the data is still on the server after the wait");
    }
    CUDA_OK(cudaFree(d1));
    CUDA_OK(cudaFree(d2));
    size_t free2 = 0;
    CUDA_OK(cudaMemGetInfo(&free2, &total));
    CHECK_EQ(free2, free0, "freed: %zu free again", free2);
    if (strcmp(mode, "disconnect") == 0) {
        int n = drop_tcp_connections();
        CHECK_EQ(n, 1, "closed the connection to the server (%d TCP sockets)", n);
        printf("disconnected\n");
        time_t until = time(NULL) + 600;
        while (!got_term && time(NULL) < until)
            usleep(20000);
    }
    free(h);
    free(back);
    return check_done();
}
