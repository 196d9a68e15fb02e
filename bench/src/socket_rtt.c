/*
 * The transport's floor: the round trip of a small message between two
 * processes over a Unix socket and over TCP loopback, with the receiver
 * blocked in read and with it spinning on non-blocking reads (as Flyt's
 * client and server spin on a waiting call). No CUDA: what any remoting of
 * a call through these sockets pays at least, beside Flyt's own round trips
 * (bench_latency: stream query, idle device sync).
 *
 * Prints RESULT lines as the other benchmark programs (bench_common.h):
 *     RESULT socket_rtt_<unix|tcp>_<block|spin> <microseconds> us
 * usage: socket_rtt [--quick]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG     64 /* a frame header and a small request */
#define BATCHES 11

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* All n bytes, blocking or spinning on MSG_DONTWAIT; -1 when the peer is gone. */
static int get(int fd, char *buf, size_t n, int spin)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, buf + got, n - got, spin ? MSG_DONTWAIT : 0);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
    }
    return 0;
}

static int put(int fd, const char *buf, size_t n)
{
    return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void echo(int fd, int spin)
{
    char buf[MSG];
    while (get(fd, buf, MSG, spin) == 0 && put(fd, buf, MSG) == 0)
        ;
    _exit(0);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over BATCHES of the mean round trip of n calls, in µs. */
static double measure(int fd, int spin, int n)
{
    char buf[MSG];
    memset(buf, 7, sizeof buf);
    double per[BATCHES];
    for (int i = 0; i < n / 10; i++) /* warm-up */
        if (put(fd, buf, MSG) != 0 || get(fd, buf, MSG, spin) != 0)
            return -1;
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int i = 0; i < n; i++)
            if (put(fd, buf, MSG) != 0 || get(fd, buf, MSG, spin) != 0)
                return -1;
        per[b] = (now_us() - t0) / n;
    }
    qsort(per, BATCHES, sizeof per[0], by_value);
    return per[BATCHES / 2];
}

/* A connected pair: a socketpair, or a TCP loopback connection (no Nagle). */
static int pair(int tcp, int sv[2])
{
    if (!tcp)
        return socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &len) != 0)
        return -1;
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (sv[0] < 0 || connect(sv[0], (struct sockaddr *)&a, sizeof a) != 0 ||
        (sv[1] = accept(ls, NULL, NULL)) < 0)
        return -1;
    close(ls);
    setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sv[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0, rc = 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: socket_rtt [--quick]\n");
        return 2;
    }
    int n = quick ? 5000 : 50000;
    for (int tcp = 0; tcp < 2; tcp++)
        for (int spin = 0; spin < 2; spin++) {
            int sv[2];
            if (pair(tcp, sv) != 0) {
                perror("socket_rtt: a connected pair");
                return 1;
            }
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0)
                return 1;
            if (pid == 0) {
                close(sv[0]);
                echo(sv[1], spin);
            }
            close(sv[1]);
            double us = measure(sv[0], spin, n);
            close(sv[0]);
            waitpid(pid, NULL, 0);
            if (us < 0) {
                fprintf(stderr, "socket_rtt: the echo process went away\n");
                rc = 1;
                continue;
            }
            printf("RESULT socket_rtt_%s_%s %.3f us\n", tcp ? "tcp" : "unix", spin ? "spin" : "block", us);
        }
    return rc;
}
