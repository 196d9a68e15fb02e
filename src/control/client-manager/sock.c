/*
 * The Unix socket the client library asks, with the line protocol of
 * src/protocol/flyt_cmgr_proto.h. The caller is identified by SO_PEERCRED; the pid field
 * must be the caller's own. One thread per connection; a connection may carry several
 * requests.
 */
#include "cmgr.h"

#include "flyt_cmgr_proto.h"
#include "flyt_log.h"
#include "flyt_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define IDLE_TIMEOUT_MS 10000 /* a connection that sends nothing for this long is closed */
#define MAX_CONNS 256

static struct {
    const struct cmgr_config *c;
    int lfd;
    int stop_pipe[2];
    pthread_t acceptor;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int conns[MAX_CONNS];     /* open connections, -1 free: shut down at stop */
    uid_t conn_uid[MAX_CONNS]; /* the peer's user of conns[i] */
    int nthreads;
} listener = {.lfd = -1, .stop_pipe = {-1, -1}, .lock = FLYT_MUTEX_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

static int send_error(int fd, const char *msg)
{
    char line[FLYT_CMGR_LINE_MAX];
    int n = flyt_cmgr_format_error(line, sizeof line, msg);
    return flyt_write_full(fd, line, (size_t)n);
}

/* op=request: the VM's share, asked of the cluster manager (one attempt; a program that
 * gets "try again" asks again). */
static int serve_share_request(int fd, const char *line)
{
    char err[1024] = "";
    struct flyt_cmgr_share_ask a;
    struct cluster_share ans;
    if (flyt_cmgr_parse_share(line, &a, err, sizeof err) < 0)
        return send_error(fd, err);
    enum cluster_outcome o = cluster_share_request(listener.c, a.sm, a.memory, a.reason,
                                                   (long)listener.c->request_timeout_ms, &ans,
                                                   err, sizeof err);
    if (o != CLUSTER_OK) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s%s", o == CLUSTER_RETRY ? "cluster manager unreachable, "
                 "try again: " : "refused: ", err);
        return send_error(fd, msg);
    }
    flyt_info("share request %s (sm %s, memory %s): %s, share now %lld SMs and %lld bytes",
              ans.request, a.sm[0] ? a.sm : "-", a.memory[0] ? a.memory : "-", ans.state, ans.sm,
              ans.memory);
    char out[FLYT_CMGR_LINE_MAX];
    int n = flyt_cmgr_format_share_answer(out, sizeof out, ans.state, ans.request, ans.sm,
                                          ans.memory);
    return n > 0 ? flyt_write_full(fd, out, (size_t)n) : send_error(fd, "answer too long");
}

static int serve_line(int fd, const char *line, pid_t peer)
{
    char err[1024];
    enum flyt_cmgr_op op;
    long pid;
    if (flyt_cmgr_parse_request(line, &op, &pid, err, sizeof err) < 0)
        return send_error(fd, err);
    if (pid != (long)peer) {
        flyt_warn("refused %s for pid %ld from pid %d: not the caller", flyt_cmgr_op_name(op), pid,
                  (int)peer);
        snprintf(err, sizeof err, "pid %ld is not the caller: the socket says pid %d (a process "
                 "may ask only for itself; a process in another pid namespace cannot be served)",
                 pid, (int)peer);
        return send_error(fd, err);
    }
    if (op == FLYT_CMGR_REQUEST)
        return serve_share_request(fd, line);
    if (op == FLYT_CMGR_RELEASE) {
        if (sessions_release_pid((pid_t)pid, err, sizeof err) < 0)
            return send_error(fd, err);
        return flyt_write_full(fd, FLYT_CMGR_RELEASED, strlen(FLYT_CMGR_RELEASED));
    }
    struct acquire_answer ans;
    if (sessions_acquire((pid_t)pid, &ans, err, sizeof err) < 0)
        return send_error(fd, err);
    char out[FLYT_CMGR_LINE_MAX];
    int n = flyt_cmgr_format_acquired(out, sizeof out, ans.session_id, ans.endpoint, ans.token);
    explicit_bzero(ans.token, sizeof ans.token);
    int rc = n > 0 ? flyt_write_full(fd, out, (size_t)n) : send_error(fd, "answer too long");
    explicit_bzero(out, sizeof out);
    return rc;
}

static void conn_slot_drop(int fd)
{
    pthread_mutex_lock(&listener.lock);
    for (int i = 0; i < MAX_CONNS; i++)
        if (listener.conns[i] == fd) {
            listener.conns[i] = -1;
            break;
        }
    listener.nthreads--;
    pthread_cond_broadcast(&listener.idle);
    pthread_mutex_unlock(&listener.lock);
}

/* Takes a slot for fd of user uid: NULL, or why not (all taken, or the user's share of
 * them: one local user must not lock the others out). */
static const char *conn_slot_take(int fd, uid_t uid)
{
    const char *why = NULL;
    int free_at = -1, of_user = 0;
    pthread_mutex_lock(&listener.lock);
    for (int i = 0; i < MAX_CONNS; i++) {
        if (listener.conns[i] < 0 && free_at < 0)
            free_at = i;
        of_user += listener.conns[i] >= 0 && listener.conn_uid[i] == uid;
    }
    if (free_at < 0)
        why = "too many connections; try again";
    else if (of_user >= listener.c->max_conns_per_user)
        why = "too many connections of your user (max_connections_per_user); try again";
    if (why == NULL) {
        listener.conns[free_at] = fd;
        listener.conn_uid[free_at] = uid;
        listener.nthreads++;
    }
    pthread_mutex_unlock(&listener.lock);
    return why;
}

static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.pid <= 0) {
        flyt_warn("a connection without peer credentials: %s", strerror(errno));
        send_error(fd, "cannot identify the caller");
        goto out;
    }
    char buf[FLYT_CMGR_LINE_MAX];
    size_t got = 0;
    for (;;) {
        char *nl;
        while ((nl = memchr(buf, '\n', got)) == NULL) {
            if (got == sizeof buf) {
                send_error(fd, "bad request: line too long");
                goto out;
            }
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int pr = poll(&p, 1, IDLE_TIMEOUT_MS);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr <= 0)
                goto out;
            ssize_t n = recv(fd, buf + got, sizeof buf - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                goto out;
            got += (size_t)n;
        }
        *nl = '\0';
        if (nl > buf && nl[-1] == '\r')
            nl[-1] = '\0';
        flyt_debug("pid %d (uid %d): %s", (int)cred.pid, (int)cred.uid, buf);
        if (serve_line(fd, buf, cred.pid) != 0)
            goto out;
        size_t used = (size_t)(nl - buf) + 1;
        memmove(buf, nl + 1, got - used);
        got -= used;
    }
out:
    conn_slot_drop(fd); /* before close: once closed, the number may name a new connection */
    close(fd);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = listener.lfd, .events = POLLIN}, {.fd = listener.stop_pipe[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            flyt_error("socket: poll: %s", strerror(errno));
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        int fd = accept4(listener.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
                flyt_warn("socket: accept: %s", strerror(errno));
                usleep(100000); /* e.g. out of descriptors: do not spin */
            }
            continue;
        }
        struct ucred cred;
        socklen_t cl = sizeof cred;
        const char *refused = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0
                                  ? "cannot identify the caller"
                                  : conn_slot_take(fd, cred.uid);
        if (refused) {
            flyt_debug("socket: connection refused: %s", refused);
            send_error(fd, refused);
            close(fd);
            continue;
        }
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, conn_main, (void *)(intptr_t)fd) != 0) {
            flyt_warn("socket: cannot start a connection thread");
            conn_slot_drop(fd);
            close(fd);
        }
        pthread_attr_destroy(&a);
    }
}

/* mkdir -p of path's folder (0755 for the ones it makes). */
static int make_parent(const char *path, char *err, size_t errlen)
{
    char dir[sizeof listener.c->socket_path];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot make %s: %s", dir, strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    return 0;
}

int sock_start(const struct cmgr_config *c, char *err, size_t errlen)
{
    listener.c = c;
    for (int i = 0; i < MAX_CONNS; i++)
        listener.conns[i] = -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", c->socket_path);
    if (make_parent(c->socket_path, err, errlen) < 0)
        return -1;
    struct stat st;
    if (lstat(c->socket_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s exists and is not a socket", c->socket_path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (probe >= 0)
            close(probe);
        if (live) {
            snprintf(err, errlen, "another process serves %s (a client manager already runs?)",
                     c->socket_path);
            return -1;
        }
        unlink(c->socket_path); /* left by an earlier run */
    }
    listener.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener.lfd < 0 || bind(listener.lfd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, errlen, "cannot bind %s: %s", c->socket_path, strerror(errno));
        return -1;
    }
    /* permissions before listen(): nobody can connect in between */
    if (c->socket_gid >= 0 && chown(c->socket_path, (uid_t)-1, (gid_t)c->socket_gid) != 0) {
        snprintf(err, errlen, "cannot give %s to group %d: %s", c->socket_path, c->socket_gid,
                 strerror(errno));
        return -1;
    }
    if (chmod(c->socket_path, c->socket_mode) != 0 || listen(listener.lfd, 128) != 0) {
        snprintf(err, errlen, "cannot set up %s: %s", c->socket_path, strerror(errno));
        return -1;
    }
    if (pipe2(listener.stop_pipe, O_CLOEXEC) != 0 ||
        pthread_create(&listener.acceptor, NULL, accept_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the socket thread");
        return -1;
    }
    listener.started = 1;
    flyt_info("serving %s (mode %04o%s)", c->socket_path, c->socket_mode,
              c->socket_gid >= 0 ? ", group set" : "");
    return 0;
}

void sock_stop(void)
{
    if (listener.started) {
        (void)!write(listener.stop_pipe[1], "x", 1);
        pthread_join(listener.acceptor, NULL);
        listener.started = 0;
    }
    if (listener.lfd >= 0) {
        close(listener.lfd);
        listener.lfd = -1;
        unlink(listener.c->socket_path);
    }
    /* wake connections waiting for a line; one inside a request finishes it (bounded by
     * request_timeout) and then finds its peer gone */
    pthread_mutex_lock(&listener.lock);
    for (int i = 0; i < MAX_CONNS; i++)
        if (listener.conns[i] >= 0)
            shutdown(listener.conns[i], SHUT_RDWR);
    while (listener.nthreads > 0)
        pthread_cond_wait(&listener.idle, &listener.lock);
    pthread_mutex_unlock(&listener.lock);
    for (int i = 0; i < 2; i++)
        if (listener.stop_pipe[i] >= 0)
            close(listener.stop_pipe[i]);
}
