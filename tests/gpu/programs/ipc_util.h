/* What the two-process IPC programs (ipc_memory, pool_ipc) share: blocking
 * reads and writes of a pipe or socket that end the program on failure, a
 * descriptor sent over a Unix socket (SCM_RIGHTS), the kernels that fill a
 * buffer and add to it, and a host-side sum. */
#ifndef FLYT_GPU_IPC_UTIL_H
#define FLYT_GPU_IPC_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__global__ void fill(int *p, int n, int base)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = base + i % 1000;
}

__global__ void add(int *p, int n, int v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] += v;
}

static void put(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n) {
        printf("FAIL: pipe write\n");
        exit(1);
    }
}

static void get(int fd, void *p, size_t n)
{
    if (read(fd, p, n) != (ssize_t)n) {
        printf("FAIL: pipe read\n");
        exit(1);
    }
}

static long long sum(const int *p, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += p[i];
    return s;
}

/* fd and one byte over sock; recv_fd returns the receiver's copy. */
static void send_fd(int sock, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte = 'f';
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {&byte, 1};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1) {
        printf("FAIL: sendmsg\n");
        exit(1);
    }
}

static int recv_fd(int sock)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte;
    struct iovec iov = {&byte, 1};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    struct cmsghdr *cm;
    if (recvmsg(sock, &msg, 0) != 1 || (cm = CMSG_FIRSTHDR(&msg)) == NULL ||
        cm->cmsg_type != SCM_RIGHTS) {
        printf("FAIL: recvmsg\n");
        exit(1);
    }
    int fd = -1;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

#endif
