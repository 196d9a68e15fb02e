/* TCP and Unix-socket plumbing shared by the client library and the server. */
#include "flyt_transport.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Large socket buffers keep bulk copies streaming; the kernel caps them. */
#define FLYT_SOCK_BUF (8 << 20)

static int fail(char *err, size_t errlen, const char *fmt, const char *a)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, a, strerror(errno));
    return -1;
}

int flyt_addr_parse(const char *text, flyt_addr *addr, char *err, size_t errlen)
{
    memset(addr, 0, sizeof *addr);
    if (text == NULL || *text == '\0') {
        snprintf(err, errlen, "empty address");
        return -1;
    }
    if (strncmp(text, "unix:", 5) == 0) {
        const char *path = text + 5;
        if (strncmp(path, "//", 2) == 0)
            path += 2;
        size_t n = strlen(path);
        if (n == 0 || n >= sizeof addr->path) {
            snprintf(err, errlen, "unix socket path empty or longer than %zu bytes: %s",
                     sizeof addr->path - 1, text);
            return -1;
        }
        addr->kind = FLYT_ADDR_UNIX;
        memcpy(addr->path, path, n + 1);
        return 0;
    }
    const char *hp = text;
    int tls = strncmp(hp, "tls://", 6) == 0;
    if (strncmp(hp, "tcp://", 6) == 0 || tls)
        hp += 6;
    else if (strstr(hp, "://") != NULL) {
        snprintf(err, errlen, "unknown address scheme (want tcp://, tls:// or unix:): %s", text);
        return -1;
    }
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon == hp || colon[1] == '\0') {
        snprintf(err, errlen, "address needs HOST:PORT: %s", text);
        return -1;
    }
    const char *h = hp, *hend = colon;
    if (*h == '[' && hend[-1] == ']') {
        h++;
        hend--;
    }
    size_t hl = (size_t)(hend - h), pl = strlen(colon + 1);
    if (hl == 0 || hl >= sizeof addr->host || pl >= sizeof addr->port) {
        snprintf(err, errlen, "host or port too long: %s", text);
        return -1;
    }
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "port is not a number: %s", text);
            return -1;
        }
    long port = strtol(colon + 1, NULL, 10);
    if (port < 0 || port > 65535) {
        snprintf(err, errlen, "port out of range: %s", text);
        return -1;
    }
    addr->kind = FLYT_ADDR_TCP;
    addr->tls = tls;
    memcpy(addr->host, h, hl);
    memcpy(addr->port, colon + 1, pl + 1);
    return 0;
}

void flyt_addr_format(const flyt_addr *addr, char *out, size_t outlen)
{
    if (addr->kind == FLYT_ADDR_UNIX)
        snprintf(out, outlen, "unix:%s", addr->path);
    else if (strchr(addr->host, ':'))
        snprintf(out, outlen, "%s://[%s]:%s", addr->tls ? "tls" : "tcp", addr->host, addr->port);
    else
        snprintf(out, outlen, "%s://%s:%s", addr->tls ? "tls" : "tcp", addr->host, addr->port);
}

static void tune_tcp(int fd)
{
    int one = 1, buf = FLYT_SOCK_BUF;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int flyt_keepalive_parse(const char *text, struct flyt_keepalive *k, char *err, size_t errlen)
{
    if (strcmp(text, "off") == 0) {
        *k = (struct flyt_keepalive){0, 0, 0};
        return 0;
    }
    long v[3];
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        v[i] = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (v[i] < 1 || v[i] > 3600 || errno || *end != (i < 2 ? ',' : '\0')) {
            snprintf(err, errlen, "want IDLE,INTERVAL,COUNT (seconds, seconds, probes; each 1 "
                     "to 3600) or off, got '%s'", text);
            return -1;
        }
        p = end + 1;
    }
    *k = (struct flyt_keepalive){(int)v[0], (int)v[1], (int)v[2]};
    return 0;
}

int flyt_keepalive_dead_s(const struct flyt_keepalive *k)
{
    return k->idle_s > 0 ? k->idle_s + k->interval_s * k->count : 0;
}

int flyt_is_tcp(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    return getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
           (ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
}

int flyt_keepalive_set(int fd, const struct flyt_keepalive *k)
{
    if (k->idle_s <= 0 || !flyt_is_tcp(fd))
        return 0;
    int one = 1;
    /* TCP_USER_TIMEOUT also governs keepalive once set: the connection ends
     * when the peer has been silent this long and a probe went unanswered */
    unsigned user_timeout_ms = (unsigned)flyt_keepalive_dead_s(k) * 1000u;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &k->idle_s, sizeof k->idle_s) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &k->interval_s, sizeof k->interval_s) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &k->count, sizeof k->count) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms) != 0)
        return -1;
    return 0;
}

int flyt_socket_error(int fd)
{
    int e = 0;
    socklen_t len = sizeof e;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 ? e : 0;
}

int flyt_peer_vanished(int err)
{
    return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH;
}

static void tune_unix(int fd)
{
    int buf = FLYT_SOCK_BUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

static int unix_sockaddr(const flyt_addr *addr, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, addr->path, strlen(addr->path) + 1);
    return 0;
}

/* connect() bounded by timeout_ms (0: the system's own limit): a blocking
 * connect waits at most SO_SNDTIMEO on Linux, for TCP and Unix sockets. */
static int connect_bounded(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (timeout_ms > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc = connect(fd, sa, len);
    if (rc != 0 && timeout_ms > 0 && (errno == EINPROGRESS || errno == EAGAIN))
        errno = ETIMEDOUT;
    int saved = errno;
    if (timeout_ms > 0) {
        struct timeval zero = {0, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
    }
    errno = saved;
    return rc;
}

static int tcp_open(const flyt_addr *addr, int passive, int timeout_ms, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(addr->host, addr->port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", addr->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (passive) {
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
                break;
        } else if (connect_bounded(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms) == 0) {
            break;
        }
        int saved = errno;
        close(fd);
        errno = saved;
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return fail(err, errlen, passive ? "cannot listen on %s: %s" : "cannot connect to %s: %s",
                    addr->host);
    tune_tcp(fd);
    return fd;
}

int flyt_listen(const flyt_addr *addr, char *err, size_t errlen)
{
    if (addr->kind == FLYT_ADDR_TCP)
        return tcp_open(addr, 1, 0, err, errlen);
    struct sockaddr_un sa;
    unix_sockaddr(addr, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(err, errlen, "socket %s: %s", addr->path);
    unlink(addr->path); /* a stale socket file from an earlier run */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return fail(err, errlen, "cannot listen on %s: %s", addr->path);
    }
    return fd;
}

int flyt_connect(const flyt_addr *addr, char *err, size_t errlen)
{
    return flyt_connect_timeout(addr, 0, err, errlen);
}

int flyt_connect_timeout(const flyt_addr *addr, int timeout_ms, char *err, size_t errlen)
{
    if (addr->kind == FLYT_ADDR_TCP)
        return tcp_open(addr, 0, timeout_ms, err, errlen);
    struct sockaddr_un sa;
    unix_sockaddr(addr, &sa);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(err, errlen, "socket %s: %s", addr->path);
    if (connect_bounded(fd, (struct sockaddr *)&sa, sizeof sa, timeout_ms) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return fail(err, errlen, "cannot connect to %s: %s", addr->path);
    }
    tune_unix(fd);
    return fd;
}

int flyt_accept(int listen_fd)
{
    int fd;
    do {
        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    if (flyt_is_tcp(fd))
        tune_tcp(fd);
    else
        tune_unix(fd);
    return fd;
}

int flyt_read_full(int fd, void *buf, size_t len)
{
    return flyt_read_full_fd(fd, buf, len, NULL);
}

static ssize_t recv_with_fd(int fd, void *buf, size_t len, int flags, int *passed_fd)
{
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {buf, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (passed_fd) {
        msg.msg_control = control.bytes;
        msg.msg_controllen = sizeof control.bytes;
    }
    ssize_t n;
    do {
        n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        /* keep the first descriptor, close any others: one is all a frame may pass */
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            if (i == 0) {
                if (*passed_fd >= 0)
                    close(*passed_fd);
                *passed_fd = got;
            } else {
                close(got);
            }
        }
    }
    return n;
}

long flyt_recv_some(int fd, void *buf, size_t cap, int *passed_fd)
{
    return (long)recv_with_fd(fd, buf, cap, 0, passed_fd);
}

int flyt_read_full_fd(int fd, void *buf, size_t len, int *passed_fd)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv_with_fd(fd, p, len, MSG_WAITALL, passed_fd);
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int flyt_writev_full_fd(int fd, struct iovec *iov, int iovcnt, int pass_fd)
{
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt,
                         .msg_control = control.bytes, .msg_controllen = sizeof control.bytes};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof pass_fd);
    ssize_t n;
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    /* the descriptor went with the first bytes; the rest goes plainly */
    size_t left = (size_t)n;
    while (iovcnt > 0 && left >= iov[0].iov_len) {
        left -= iov[0].iov_len;
        iov++;
        iovcnt--;
    }
    if (iovcnt == 0)
        return 0;
    iov[0].iov_base = (char *)iov[0].iov_base + left;
    iov[0].iov_len -= left;
    return flyt_writev_full(fd, iov, iovcnt);
}

int flyt_write_full(int fd, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    return flyt_writev_full(fd, &iov, 1);
}

int flyt_writev_full(int fd, struct iovec *iov, int iovcnt)
{
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)iovcnt;
    while (msg.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        size_t left = (size_t)n;
        while (msg.msg_iovlen > 0 && left >= msg.msg_iov[0].iov_len) {
            left -= msg.msg_iov[0].iov_len;
            msg.msg_iov++;
            msg.msg_iovlen--;
        }
        if (msg.msg_iovlen > 0) {
            msg.msg_iov[0].iov_base = (char *)msg.msg_iov[0].iov_base + left;
            msg.msg_iov[0].iov_len -= left;
        }
    }
    return 0;
}

int flyt_skip(int fd, size_t len)
{
    char tmp[16384];
    while (len > 0) {
        size_t n = len < sizeof tmp ? len : sizeof tmp;
        if (flyt_read_full(fd, tmp, n) != 0)
            return -1;
        len -= n;
    }
    return 0;
}

int flyt_peer_hung_up(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int flyt_spin_readable(int fd, unsigned spin_us)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, 0) > 0)
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long us = (t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000;
        if (us >= (long)spin_us)
            return 0;
    }
}
