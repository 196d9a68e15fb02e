/* The client side of one exchange on the client manager's socket (flyt_cmgr_proto.h):
 * the client library's acquire and a program's share request (flyt_share.h) use it. */
#include "flyt_cmgr_proto.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long ms_left(const struct timespec *deadline)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (deadline->tv_sec - t.tv_sec) * 1000L + (deadline->tv_nsec - t.tv_nsec) / 1000000L;
}

static int connected(const char *path, int timeout_s, char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(why, whylen, "the client manager socket path is too long: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, whylen, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(why, whylen, "no client manager at %s (%s)", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads up to the first '\n' into answer before the deadline; its length, or -1. */
static int read_line(int fd, const char *path, int timeout_s, char *answer, size_t cap,
                     char *why, size_t whylen)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_s;
    size_t got = 0;
    for (;;) {
        long left = ms_left(&deadline);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            snprintf(why, whylen, "the client manager at %s did not answer within %d s "
                     "(FLYT_CLIENT_MANAGER_TIMEOUT)", path, timeout_s);
            return -1;
        }
        ssize_t r = pr > 0 ? recv(fd, answer + got, cap - 1 - got, 0) : -1;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(why, whylen, "the client manager at %s closed the connection without "
                     "an answer%s%s", path, r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
            return -1;
        }
        got += (size_t)r;
        answer[got] = '\0';
        char *nl = strchr(answer, '\n');
        if (nl) {
            *nl = '\0';
            return (int)(nl - answer);
        }
        if (got == cap - 1) {
            snprintf(why, whylen, "the client manager at %s sent an over-long line", path);
            return -1;
        }
    }
}

int flyt_cmgr_ask(const char *path, const char *request, int timeout_s, char *answer,
                  size_t cap, char *why, size_t whylen)
{
    int fd = connected(path, timeout_s, why, whylen);
    if (fd < 0)
        return -1;
    ssize_t n = (ssize_t)strlen(request);
    if (send(fd, request, (size_t)n, MSG_NOSIGNAL) != n) {
        /* a manager that refuses the connection answers and closes before reading: its
         * line is still queued here, and says more than EPIPE */
        int e = errno;
        if ((e == EPIPE || e == ECONNRESET) &&
            read_line(fd, path, timeout_s, answer, cap, why, whylen) >= 0) {
            close(fd);
            return 0;
        }
        snprintf(why, whylen, "the client manager at %s: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    int rc = read_line(fd, path, timeout_s, answer, cap, why, whylen);
    close(fd);
    return rc < 0 ? -1 : 0;
}
