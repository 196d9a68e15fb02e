/*
 * flyt-server: listens, and forks one child per connection. The child opens
 * the backend and runs the session (session.c); the parent never touches
 * CUDA, so one tenant's crash or GPU fault stays in its own process. The
 * parent reaps children, logs each session's end, and on SIGTERM/SIGINT
 * stops its children and exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flyt_log.h"
#include "flyt_proto.h"
#include "flyt_transport.h"
#include "session.h"

#ifndef FLYT_VERSION
#define FLYT_VERSION "0.1.0"
#endif

#define EXIT_USAGE 2
#define STOP_GRACE_S 10 /* after SIGTERM, children get this long before SIGKILL */

struct options {
    const char               *listen;
    struct flyt_server_config cfg;
    int                       log_level;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flyt-server --listen tcp://HOST:PORT|unix:/PATH [options]\n"
            "\n"
            "Runs CUDA calls of Flyt clients on a GPU, one child process per connection.\n"
            "\n"
            "  --listen ADDR       address to listen on (required)\n"
            "  --gpu N             GPU index to use (default 0)\n"
            "  --backend KIND      cuda (default) or host (host memory, for tests only)\n"
            "  --cache-dir DIR     keep fatbinaries here by content hash across sessions\n"
            "  --poll-us N         busy-poll N microseconds for a client's next call before\n"
            "                      sleeping (default 100; 0 = never; lower latency, more CPU)\n"
            "  --log-level LEVEL   error, warn, info (default) or debug\n"
            "  --help              this text\n"
            "  --version           version and protocol\n");
}

static int bad_arg(const char *fmt, const char *a)
{
    fprintf(stderr, "flyt-server: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see --help)\n");
    return EXIT_USAGE;
}

/* -1 to go on; otherwise the exit status (0 after --help/--version). */
static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},    {"gpu", required_argument, NULL, 'g'},
        {"backend", required_argument, NULL, 'b'},   {"cache-dir", required_argument, NULL, 'c'},
        {"log-level", required_argument, NULL, 'L'}, {"help", no_argument, NULL, 'h'},
        {"poll-us", required_argument, NULL, 'P'},
        {"version", no_argument, NULL, 'V'},         {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->cfg.backend_kind = "cuda";
    o->cfg.poll_us = 100;
    o->log_level = FLYT_LOG_INFO;
    opterr = 0; /* our own messages */
    int ch;
    while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        char *end;
        long v;
        switch (ch) {
        case 'l': o->listen = optarg; break;
        case 'g':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 0 || v > 1023)
                return bad_arg("--gpu wants a device index, got '%s'", optarg);
            o->cfg.gpu = (int)v;
            break;
        case 'b':
            if (strcmp(optarg, "cuda") != 0 && strcmp(optarg, "host") != 0)
                return bad_arg("--backend must be cuda or host, got '%s'", optarg);
            o->cfg.backend_kind = optarg;
            break;
        case 'c': o->cfg.cache_dir = optarg; break;
        case 'P':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 0 || v > 1000000)
                return bad_arg("--poll-us wants microseconds (0 to 1000000), got '%s'", optarg);
            o->cfg.poll_us = (unsigned)v;
            break;
        case 'L':
            o->log_level = flyt_log_level_parse(optarg);
            if (o->log_level < 0)
                return bad_arg("--log-level must be error, warn, info or debug, got '%s'", optarg);
            break;
        case 'h': usage(stdout); return 0;
        case 'V':
            printf("flyt-server %s (protocol %d.%d)\n", FLYT_VERSION, FLYT_PROTO_MAJOR,
                   FLYT_PROTO_MINOR);
            return 0;
        case ':': return bad_arg("%s needs a value", argv[optind - 1]);
        default: return bad_arg("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_arg("unexpected argument '%s'", argv[optind]);
    if (o->listen == NULL)
        return bad_arg("%s", "--listen is required");
    if (o->cfg.cache_dir) {
        struct stat st;
        if (stat(o->cfg.cache_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return bad_arg("--cache-dir '%s' is not a directory", o->cfg.cache_dir);
    }
    return -1;
}

/* ---- children ---- */

static pid_t *children;
static size_t n_children, cap_children;

static void add_child(pid_t pid)
{
    if (n_children == cap_children) {
        size_t cap = cap_children ? cap_children * 2 : 16;
        pid_t *p = realloc(children, cap * sizeof *p);
        if (p == NULL) {
            /* still reaped through waitpid(-1); only SIGTERM at shutdown misses it */
            flyt_warn("out of memory tracking session %d", (int)pid);
            return;
        }
        children = p;
        cap_children = cap;
    }
    children[n_children++] = pid;
}

static void forget_child(pid_t pid)
{
    for (size_t i = 0; i < n_children; i++)
        if (children[i] == pid) {
            children[i] = children[--n_children];
            return;
        }
}

static int stopping; /* our own SIGTERM is an expected end */

static void log_exit(pid_t pid, int status)
{
    if (stopping && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
        flyt_info("session %d stopped", (int)pid);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        flyt_info("session %d ended (exit status 0)", (int)pid);
    else if (WIFEXITED(status))
        flyt_warn("session %d ended with exit status %d", (int)pid, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        flyt_warn("session %d killed by signal %d (%s)", (int)pid, WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
}

static void reap(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        log_exit(pid, status);
        forget_child(pid);
    }
}

/* SIGTERM to every session, then wait; SIGKILL whoever outlasts the grace. */
static void stop_children(void)
{
    stopping = 1;
    for (size_t i = 0; i < n_children; i++)
        kill(children[i], SIGTERM);
    if (n_children)
        flyt_info("stopping %zu session(s)", n_children);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    time_t deadline = time(NULL) + STOP_GRACE_S;
    int killed = 0;
    for (;;) {
        reap();
        if (n_children == 0)
            return;
        if (!killed && time(NULL) >= deadline) {
            for (size_t i = 0; i < n_children; i++)
                kill(children[i], SIGKILL);
            flyt_warn("%zu session(s) ignored SIGTERM; killed", n_children);
            killed = 1;
        }
        struct timespec tick = {0, 100 * 1000 * 1000};
        sigtimedwait(&chld, NULL, &tick); /* SIGCHLD is blocked: wait for it here */
    }
}

/* ---- signals ---- */

static volatile sig_atomic_t got_chld, got_stop;

static void on_signal(int sig)
{
    if (sig == SIGCHLD)
        got_chld = 1;
    else
        got_stop = 1;
}

/* Blocks the signals we handle (they arrive only inside ppoll) and returns
 * the mask to wait with; orig is what children get back. */
static void setup_signals(sigset_t *wait_mask, sigset_t *orig)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, orig);
    *wait_mask = *orig;
    sigdelset(wait_mask, SIGCHLD);
    sigdelset(wait_mask, SIGTERM);
    sigdelset(wait_mask, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a vanished client is a failed write, not a death */
}

/* ---- connections ---- */

static void describe_peer(int fd, char *out, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(out, len, "unknown peer");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            snprintf(out, len, "unix peer pid %d uid %d", (int)cred.pid, (int)cred.uid);
        else
            snprintf(out, len, "unix peer");
        return;
    }
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(out, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

static void start_session(int lfd, int fd, const struct options *o, const sigset_t *orig)
{
    char peer[160];
    describe_peer(fd, peer, sizeof peer);
    pid_t pid = fork();
    if (pid < 0) {
        flyt_error("cannot fork a session for %s: %s", peer, strerror(errno));
        close(fd);
        return;
    }
    if (pid == 0) {
        /* the child: plain signal handling, no listening socket, then the session */
        close(lfd);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        sigprocmask(SIG_SETMASK, orig, NULL);
        exit(flyt_session_run(fd, peer, &o->cfg));
    }
    close(fd);
    add_child(pid);
    flyt_info("session %d started for %s", (int)pid, peer);
}

static void accept_one(int lfd, const struct options *o, const sigset_t *orig)
{
    int fd = flyt_accept(lfd);
    if (fd >= 0) {
        start_session(lfd, fd, o, orig);
        return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
        return;
    flyt_warn("accept failed: %s", strerror(errno));
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        struct timespec pause = {0, 100 * 1000 * 1000}; /* do not spin while starved */
        nanosleep(&pause, NULL);
    }
}

/* The address as listened on: a TCP port 0 becomes the port the kernel chose. */
static void bound_address(int lfd, const flyt_addr *addr, char *out, size_t len)
{
    flyt_addr a = *addr;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char port[sizeof a.port];
    if (a.kind == FLYT_ADDR_TCP && getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, port, sizeof port, NI_NUMERICSERV) == 0)
        memcpy(a.port, port, sizeof port);
    flyt_addr_format(&a, out, len);
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    flyt_log_init("flyt-server", (enum flyt_log_level)o.log_level);

    flyt_addr addr;
    char err[512];
    if (flyt_addr_parse(o.listen, &addr, err, sizeof err) != 0)
        return bad_arg("--listen: %s", err);
    if (strcmp(o.cfg.backend_kind, "host") == 0)
        flyt_warn("backend 'host' keeps memory on the host and runs no kernels: it is for tests");

    sigset_t wait_mask, orig;
    setup_signals(&wait_mask, &orig);
    int lfd = flyt_listen(&addr, err, sizeof err);
    if (lfd < 0) {
        flyt_error("%s", err);
        return 1;
    }
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK); /* poll said ready, but it may not be */
    char where[400];
    bound_address(lfd, &addr, where, sizeof where);
    flyt_info("listening on %s (backend %s, gpu %d)", where, o.cfg.backend_kind, o.cfg.gpu);

    int status = 0;
    while (!got_stop) {
        struct pollfd p = {lfd, POLLIN, 0};
        int n = ppoll(&p, 1, NULL, &wait_mask);
        int poll_errno = errno; /* reaping below sets errno too */
        if (got_chld) {
            got_chld = 0;
            reap();
        }
        if (n < 0 && poll_errno != EINTR) {
            flyt_error("poll: %s", strerror(poll_errno));
            status = 1;
            break;
        }
        if (!got_stop && n > 0 && (p.revents & POLLIN))
            accept_one(lfd, &o, &orig);
    }

    flyt_info("shutting down");
    close(lfd);
    stop_children();
    if (addr.kind == FLYT_ADDR_UNIX)
        unlink(addr.path);
    free(children);
    flyt_info("stopped");
    return status;
}
