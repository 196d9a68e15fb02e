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

#include "flyt_clock.h"
#include "flyt_parse.h"
#include "flyt_log.h"
#include "flyt_proto.h"
#include "flyt_token.h"
#include "flyt_tls.h"
#include "flyt_transport.h"
#include "quota.h"
#include "session.h"
#include "state.h"
#include "state_stream.h"

#ifndef FLYT_VERSION
#define FLYT_VERSION "0.1.0"
#endif

#define EXIT_USAGE 2
#define STOP_GRACE_S 10 /* after SIGTERM, children get this long before SIGKILL */

#define MAX_SM_GROUPS 256
#define MAX_SESSION_KEY 128 /* bytes */
#define FLYT_MAX_LISTEN 4
#define MAX_UNADMITTED 1024

struct options {
    const char               *listen[FLYT_MAX_LISTEN]; /* --listen, once or more */
    int                       nlisten;
    struct flyt_server_config cfg;
    int                       log_level;
    const char               *key_file;
    const char               *status_file;
    const char               *restore_file;
    const char               *restore_listen;      /* the state arrives there first */
    const char               *restore_secret_file;
    int                       restore_timeout_s;
    const char               *vm_quota_file;
    const char               *tls_cert, *tls_key;
    unsigned                  max_unadmitted, max_unadmitted_per_peer;
    struct flyt_keepalive     keepalive; /* on every TCP connection accepted */
    int                       sm_groups[MAX_SM_GROUPS];
    unsigned char             key[MAX_SESSION_KEY];
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flyt-server --listen tcp://HOST:PORT|unix:/PATH [options]\n"
            "\n"
            "Runs CUDA calls of Flyt clients on a GPU, one child process per connection.\n"
            "\n"
            "  --listen ADDR       address to listen on (required); up to 4 of them, e.g. a\n"
            "                      TCP address and a Unix socket for clients on this machine\n"
            "  --gpu N             GPU index to use (default 0)\n"
            "  --backend KIND      cuda (default) or host (host memory, for tests only)\n"
            "  --cache-dir DIR     keep fatbinaries here by content hash across sessions\n"
            "  --cache-max SIZE    keep the cache folder's images within SIZE bytes, the least\n"
            "                      recently used evicted first (default 0: no limit)\n"
            "  --max-image-bytes SIZE  kernel images one session may hold loaded (the server\n"
            "                      keeps a copy of each; default 4GiB, 0: no limit)\n"
            "  --poll-us N         busy-poll N microseconds for a client's next call before\n"
            "                      sleeping (default 100; 0 = never; lower latency, more CPU)\n"
            "  --log-level LEVEL   error, warn, info (default) or debug\n"
            "  --tls-cert FILE     TLS on the TCP listeners (docs/tls.md): this certificate\n"
            "                      chain (PEM); clients connect with tls://HOST:PORT\n"
            "  --tls-key FILE      its private key (PEM, unencrypted, mode 0600)\n"
            "  --keepalive IDLE,INTERVAL,COUNT  TCP keepalive on every TCP connection: after\n"
            "                      IDLE s of silence probe every INTERVAL s; COUNT unanswered\n"
            "                      probes (or data unacknowledged as long) end the session of\n"
            "                      a client whose machine vanished (default 5,2,4: 13 s; off:\n"
            "                      the system's defaults, hours)\n"
            "\n"
            "Managed use (a node manager starts one server per tenant session):\n"
            "  --session-id ID     the session this server serves\n"
            "  --session-key-file FILE\n"
            "                      hex session key (mode 0600, never group/world readable):\n"
            "                      clients must AUTH with a session token for ID signed\n"
            "                      with it (docs/api.md) before anything else\n"
            "  --admission-timeout S  drop a connection not admitted within S seconds\n"
            "                      (a valid HELLO; managed: and a session token; default 5)\n"
            "  --max-unadmitted N  connections not yet admitted at once (default 32); past\n"
            "                      it the oldest of them (older than 250 ms) is dropped for\n"
            "                      the newcomer, else the newcomer is refused\n"
            "  --max-unadmitted-per-peer N  the same from one IP address (or one user on\n"
            "                      a Unix socket; default 8)\n"
            "  --memory-quota SIZE refuse allocations past SIZE bytes in all (units: KiB MiB\n"
            "                      GiB TiB, KB MB GB TB); the device reports SIZE as its memory\n"
            "  --sm-groups LIST    run kernels on these SM groups only (e.g. 0,1,2), as a\n"
            "                      green context; the device reports their SMs\n"
            "  --sm-granularity N  SMs per group (default 8)\n"
            "  --status-file PATH  keep a status page there for the node manager\n"
            "  --vm-quota FILE     the memory quota of the tenant's VM on this node, shared\n"
            "                      with its other servers (src/common/flyt_vm_quota.h)\n"
            "  --restore FILE      the first admitted session resumes the checkpointed\n"
            "                      session of FILE (docs/state-format.md)\n"
            "  --restore-listen tcp://HOST:PORT\n"
            "                      before anything else: take the state of FILE from exactly\n"
            "                      one connection there (a migration's source streams it),\n"
            "                      write it into FILE, verify and restore it, listen, answer\n"
            "                      the source, then serve as --restore\n"
            "  --restore-secret-file F  the one-time secret that connection must give (64\n"
            "                      hex digits, mode 0600); required with --restore-listen\n"
            "  --restore-timeout S exit unless the state arrived within S seconds (default 60)\n"
            "                      (src/common/flyt_server_status.h)\n"
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

static int valid_session_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

/* "0,1,2" into o->sm_groups: distinct indices, at most MAX_SM_GROUPS. */
static int parse_groups(const char *list, struct options *o)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9')
            return -1;
        long v = strtol(p, &end, 10);
        if (errno || v > 4095 || n == MAX_SM_GROUPS)
            return -1;
        for (int i = 0; i < n; i++)
            if (o->sm_groups[i] == v)
                return -1;
        o->sm_groups[n++] = (int)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
    o->cfg.sm_groups = o->sm_groups;
    o->cfg.sm_ngroups = n;
    return 0;
}

/* The session key: hex in a file that only its owner may read. */
static int read_session_key(struct options *o)
{
    char why[1400];
    size_t klen = 0;
    if (flyt_session_key_file_read(o->key_file, o->key, sizeof o->key, &klen, why,
                                   sizeof why) != 0) {
        fprintf(stderr, "flyt-server: --session-key-file %s\n", why);
        return -1;
    }
    o->cfg.session_key = o->key;
    o->cfg.session_key_len = klen;
    o->cfg.session_key_file = o->key_file;
    return 0;
}

/* -1 to go on; otherwise the exit status (0 after --help/--version). */
static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},    {"gpu", required_argument, NULL, 'g'},
        {"backend", required_argument, NULL, 'b'},   {"cache-dir", required_argument, NULL, 'c'},
        {"cache-max", required_argument, NULL, 'C'},
        {"max-image-bytes", required_argument, NULL, 'I'},
        {"log-level", required_argument, NULL, 'L'}, {"help", no_argument, NULL, 'h'},
        {"poll-us", required_argument, NULL, 'P'},
        {"session-id", required_argument, NULL, 'i'},
        {"session-key-file", required_argument, NULL, 'k'},
        {"memory-quota", required_argument, NULL, 'q'},
        {"sm-groups", required_argument, NULL, 's'},
        {"sm-granularity", required_argument, NULL, 'G'},
        {"status-file", required_argument, NULL, 'S'},
        {"admission-timeout", required_argument, NULL, 'A'},
        {"max-unadmitted", required_argument, NULL, 'U'},
        {"max-unadmitted-per-peer", required_argument, NULL, 'u'},
        {"restore", required_argument, NULL, 'R'},
        {"restore-listen", required_argument, NULL, 'r'},
        {"restore-secret-file", required_argument, NULL, 'X'},
        {"restore-timeout", required_argument, NULL, 'W'},
        {"vm-quota", required_argument, NULL, 'Q'},
        {"tls-cert", required_argument, NULL, 'T'},
        {"tls-key", required_argument, NULL, 'K'},
        {"keepalive", required_argument, NULL, 'E'},
        {"version", no_argument, NULL, 'V'},         {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->cfg.backend_kind = "cuda";
    o->cfg.poll_us = 100;
    o->cfg.max_image_bytes = (uint64_t)4 << 30;
    o->cfg.sm_granularity = 8;
    o->cfg.admission_timeout_s = 5;
    o->cfg.admitted_fd = -1;
    o->cfg.watch_hangup = 1; /* each session runs in a process of its own */
    o->max_unadmitted = 32;
    o->restore_timeout_s = 60;
    o->max_unadmitted_per_peer = 8;
    o->keepalive = FLYT_KEEPALIVE_DEFAULT;
    o->log_level = FLYT_LOG_INFO;
    opterr = 0; /* our own messages */
    int ch;
    while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        char *end;
        long v;
        switch (ch) {
        case 'l':
            if (o->nlisten == FLYT_MAX_LISTEN)
                return bad_arg("%s", "at most 4 --listen addresses");
            o->listen[o->nlisten++] = optarg;
            break;
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
        case 'I': {
            uint64_t max;
            char why[128];
            if (flyt_parse_size(optarg, &max, why, sizeof why) != 0)
                return bad_arg("--max-image-bytes wants a size such as 4GiB (0: no limit), got "
                               "'%s'", optarg);
            o->cfg.max_image_bytes = max;
            break;
        }
        case 'C': {
            uint64_t max;
            char why[128];
            if (flyt_parse_size(optarg, &max, why, sizeof why) != 0)
                return bad_arg("--cache-max wants a size such as 2GiB (0: no limit), got '%s'",
                               optarg);
            o->cfg.cache_max_bytes = max;
            break;
        }
        case 'P':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 0 || v > 1000000)
                return bad_arg("--poll-us wants microseconds (0 to 1000000), got '%s'", optarg);
            o->cfg.poll_us = (unsigned)v;
            break;
        case 'i':
            if (!valid_session_id(optarg))
                return bad_arg("--session-id wants 1 to 128 of A-Z a-z 0-9 . _ -, got '%s'", optarg);
            o->cfg.session_id = optarg;
            break;
        case 'k': o->key_file = optarg; break;
        case 'q': {
            uint64_t q;
            char why[128];
            if (flyt_parse_size(optarg, &q, why, sizeof why) != 0 || q == 0)
                return bad_arg("--memory-quota wants a size such as 20GiB or 1073741824, got '%s'",
                               optarg);
            o->cfg.memory_quota = q;
            break;
        }
        case 's':
            if (parse_groups(optarg, o) != 0)
                return bad_arg("--sm-groups wants distinct group indices 0..4095 such as 0,1,2, "
                               "got '%s'", optarg);
            break;
        case 'G':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 1 || v > 1024)
                return bad_arg("--sm-granularity wants SMs per group (1 to 1024), got '%s'", optarg);
            o->cfg.sm_granularity = (unsigned)v;
            break;
        case 'S': o->status_file = optarg; break;
        case 'A':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 1 || v > 3600)
                return bad_arg("--admission-timeout wants seconds (1 to 3600), got '%s'", optarg);
            o->cfg.admission_timeout_s = (unsigned)v;
            break;
        case 'U':
        case 'u':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 1 || v > MAX_UNADMITTED)
                return bad_arg("--max-unadmitted[-per-peer] wants a count (1 to 1024), got '%s'",
                               optarg);
            *(ch == 'U' ? &o->max_unadmitted : &o->max_unadmitted_per_peer) = (unsigned)v;
            break;
        case 'L':
            o->log_level = flyt_log_level_parse(optarg);
            if (o->log_level < 0)
                return bad_arg("--log-level must be error, warn, info or debug, got '%s'", optarg);
            break;
        case 'R': o->restore_file = optarg; break;
        case 'r': o->restore_listen = optarg; break;
        case 'X': o->restore_secret_file = optarg; break;
        case 'W':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || *optarg == '\0' || *end != '\0' || v < 1 || v > 3600)
                return bad_arg("--restore-timeout wants seconds (1 to 3600), got '%s'", optarg);
            o->restore_timeout_s = (int)v;
            break;
        case 'Q': o->vm_quota_file = optarg; break;
        case 'T': o->tls_cert = optarg; break;
        case 'K': o->tls_key = optarg; break;
        case 'E': {
            char why[160];
            if (flyt_keepalive_parse(optarg, &o->keepalive, why, sizeof why) != 0)
                return bad_arg("--keepalive: %s", why);
            break;
        }
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
    if (o->nlisten == 0)
        return bad_arg("%s", "--listen is required");
    if ((o->cfg.session_id != NULL) != (o->key_file != NULL))
        return bad_arg("%s", "--session-id and --session-key-file go together");
    if (o->restore_listen && (!o->restore_file || !o->restore_secret_file))
        return bad_arg("%s", "--restore-listen needs --restore FILE and --restore-secret-file");
    if (o->cfg.cache_dir) {
        struct stat st;
        if (stat(o->cfg.cache_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return bad_arg("--cache-dir '%s' is not a directory", o->cfg.cache_dir);
    }
    return -1;
}

/* ---- children ----
 * Each connection forks a child at once, but until its client is admitted (a valid HELLO,
 * and on a managed server a valid session token; the child then writes one byte on its
 * pipe) it holds no session slot and is cheap to drop: at most max_unadmitted of them live
 * at a time, max_unadmitted_per_peer from one peer, and a newcomer over either cap
 * replaces the oldest (of its peer first). Idle connections thus can hold nobody out, and
 * each ends itself after --admission-timeout. */

struct child {
    pid_t         pid;
    int           admit_fd;  /* read end of its admission pipe; -1 once admitted or dropped */
    int           dropped;   /* killed by us before admission: its end is not news */
    unsigned long seq;       /* accept order, to find the oldest */
    long long     born_ms;   /* when it was accepted (monotonic) */
    unsigned char peer[16];  /* IP address, or the uid on a Unix socket */
};

/* A connection younger than this is never dropped for a newcomer: a real
 * client sends its HELLO within milliseconds, even when many processes of
 * one user start at once on a busy machine, while idle ones grow older than
 * this. Past the per-peer cap young connections are let in; past the total
 * cap, with all of them young, a newcomer is refused. */
#define UNADMITTED_GRACE_MS 250

static struct child *children;
static size_t n_children, cap_children;
static unsigned long accept_seq;

static struct child *add_child(pid_t pid, int admit_fd, const unsigned char peer[16])
{
    if (n_children == cap_children) {
        size_t cap = cap_children ? cap_children * 2 : 16;
        struct child *p = realloc(children, cap * sizeof *p);
        if (p == NULL) {
            /* still reaped through waitpid(-1); only SIGTERM at shutdown misses it */
            flyt_warn("out of memory tracking session %d", (int)pid);
            return NULL;
        }
        children = p;
        cap_children = cap;
    }
    struct child *c = &children[n_children++];
    c->pid = pid;
    c->admit_fd = admit_fd;
    c->dropped = 0;
    c->seq = ++accept_seq;
    c->born_ms = flyt_mono_ms();
    memcpy(c->peer, peer, sizeof c->peer);
    return c;
}

static struct child *find_child(pid_t pid)
{
    for (size_t i = 0; i < n_children; i++)
        if (children[i].pid == pid)
            return &children[i];
    return NULL;
}

/* --restore: sessions start from the state until one has been admitted */
static int restore_taken;

static void child_admitted(struct child *c)
{
    if (c->admit_fd >= 0)
        close(c->admit_fd);
    c->admit_fd = -1;
}

/* Its admission byte came: it took the --restore state, if any. */
static void child_said_admitted(struct child *c)
{
    restore_taken = 1;
    child_admitted(c);
}

static void forget_child(pid_t pid)
{
    struct child *c = find_child(pid);
    if (c) {
        child_admitted(c);
        *c = children[--n_children];
    }
}

/* The oldest connection not yet admitted (from peer, or from anyone when peer is NULL),
 * and how many there are. */
static struct child *oldest_unadmitted(const unsigned char *peer, unsigned *count)
{
    struct child *oldest = NULL;
    *count = 0;
    for (size_t i = 0; i < n_children; i++) {
        struct child *c = &children[i];
        char byte;
        /* its admission may still wait unread in the pipe: never drop an admitted session */
        if (c->admit_fd >= 0 && read(c->admit_fd, &byte, 1) == 1)
            child_said_admitted(c);
        if (c->admit_fd < 0 || (peer && memcmp(c->peer, peer, sizeof c->peer) != 0))
            continue;
        (*count)++;
        if (!oldest || c->seq < oldest->seq)
            oldest = c;
    }
    return oldest;
}

static unsigned long long dropped_total, dropped_logged;

/* Drops the oldest unadmitted connection of peer (or of anyone) while there are limit or
 * more and it is past its grace, to make room for a new one. 0, or -1 when the newcomer
 * must be refused: the total limit reached with every one within its grace. */
static int make_room(const unsigned char *peer, unsigned limit, const char *which)
{
    unsigned count;
    struct child *c;
    long long now = flyt_mono_ms();
    while ((c = oldest_unadmitted(peer, &count)) != NULL && count >= limit) {
        if (now - c->born_ms < UNADMITTED_GRACE_MS)
            return peer ? 0 : -1;
        kill(c->pid, SIGKILL);
        child_admitted(c);
        c->dropped = 1;
        if (dropped_total++ == dropped_logged) { /* 1, 2, 4, 8 ...: a flood logs a few lines */
            flyt_warn("dropped %llu connection(s) not admitted in time for newer ones (%s "
                      "limit %u)", dropped_total, which, limit);
            dropped_logged = dropped_logged ? dropped_logged * 2 : 1;
        }
    }
    return 0;
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
        struct child *c = find_child(pid);
        if (c && c->dropped)
            flyt_debug("session %d dropped before admission", (int)pid);
        else
            log_exit(pid, status);
        forget_child(pid);
        flyt_status_session_ended(pid);
    }
}

/* SIGTERM to every session, then wait; SIGKILL whoever outlasts the grace. */
static void stop_children(void)
{
    stopping = 1;
    for (size_t i = 0; i < n_children; i++)
        kill(children[i].pid, SIGTERM);
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
                kill(children[i].pid, SIGKILL);
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

/* The peer in words, and as a key for the per-peer limit: its IP address, or its uid on a
 * Unix socket. */
static void describe_peer(int fd, char *out, size_t len, unsigned char key[16])
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(out, len, "unknown peer");
    memset(key, 0, 16);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
            snprintf(out, len, "unix peer pid %d uid %d", (int)cred.pid, (int)cred.uid);
            key[0] = 'u';
            memcpy(key + 4, &cred.uid, sizeof cred.uid);
        } else {
            snprintf(out, len, "unix peer");
        }
        return;
    }
    if (ss.ss_family == AF_INET)
        memcpy(key, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    else if (ss.ss_family == AF_INET6)
        memcpy(key, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(out, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/* --tls-cert and --tls-key, both or neither; a tls:// listener needs them,
 * and with them every TCP listener is one. 0, or the exit status. */
static int setup_tls(struct options *o, flyt_addr *addrs)
{
    if (!o->tls_cert != !o->tls_key)
        return bad_arg("%s", "--tls-cert and --tls-key go together");
    for (int i = 0; i < o->nlisten; i++) {
        if (addrs[i].tls && !o->tls_cert)
            return bad_arg("--listen %s needs --tls-cert and --tls-key", o->listen[i]);
        if (addrs[i].kind == FLYT_ADDR_TCP && o->tls_cert)
            addrs[i].tls = 1;
    }
    if (!o->tls_cert)
        return 0;
    char err[1024];
    o->cfg.tls_ctx = flyt_tls_server_ctx(o->tls_cert, o->tls_key, err, sizeof err);
    if (o->cfg.tls_ctx == NULL) {
        flyt_error("%s", err);
        return 1;
    }
    return 0;
}

/* The listening sockets, which a session child closes first. */
static int listen_fds[FLYT_MAX_LISTEN];
static int n_listen;
static ino_t listen_ino[FLYT_MAX_LISTEN]; /* a Unix socket's file, removed at the end if ours */
static dev_t listen_dev[FLYT_MAX_LISTEN];

/* --restore-listen: the first session's process, started before the state came so its
 * device was open by then (a CUDA context takes a while); it holds the state and waits
 * for its client's connection, passed on warm_fd. */
static pid_t warm_pid;
static int warm_fd = -1, warm_admit = -1; /* its socketpair, its admission pipe */

struct handoff {
    char peer[160];
};

/* The connection goes to the warm process: 1, or 0 when it is gone (then a child as usual,
 * which opens the state file itself). */
static int hand_to_warm(int fd, const char *peer, const unsigned char key[16])
{
    struct handoff h = {{0}};
    snprintf(h.peer, sizeof h.peer, "%s", peer);
    struct iovec iov = {&h, sizeof h};
    int sent = flyt_writev_full_fd(warm_fd, &iov, 1, fd) == 0;
    close(warm_fd);
    warm_fd = -1;
    if (!sent) {
        flyt_warn("the process that took the state is gone; %s gets a new one", peer);
        close(warm_admit);
        return 0;
    }
    if (!add_child(warm_pid, warm_admit, key))
        close(warm_admit);
    close(fd);
    flyt_info("session %d (device opened and state taken before) started for %s",
              (int)warm_pid, peer);
    return 1;
}

static void start_session(int fd, const struct options *o, const sigset_t *orig)
{
    char peer[160];
    unsigned char key[16];
    describe_peer(fd, peer, sizeof peer, key);
    if (warm_fd >= 0 && !restore_taken && hand_to_warm(fd, peer, key))
        return;
    if (make_room(key, o->max_unadmitted_per_peer, "per-peer") != 0 ||
        make_room(NULL, o->max_unadmitted, "total") != 0) {
        flyt_warn("refusing %s: too many connections not admitted yet", peer);
        close(fd);
        return;
    }
    int admit[2];
    if (pipe2(admit, O_CLOEXEC) != 0) {
        flyt_error("refusing %s: no pipe: %s", peer, strerror(errno));
        close(fd);
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        flyt_error("cannot fork a session for %s: %s", peer, strerror(errno));
        close(admit[0]);
        close(admit[1]);
        close(fd);
        return;
    }
    if (pid == 0) {
        /* the child: plain signal handling, no listening socket nor other children's
         * pipes, then the session */
        for (int i = 0; i < n_listen; i++)
            close(listen_fds[i]);
        close(admit[0]);
        for (size_t i = 0; i < n_children; i++)
            if (children[i].admit_fd >= 0)
                close(children[i].admit_fd);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        sigprocmask(SIG_SETMASK, orig, NULL);
        struct flyt_server_config cfg = o->cfg;
        cfg.admitted_fd = admit[1];
        if (!flyt_is_tcp(fd))
            cfg.tls_ctx = NULL; /* TLS is for TCP listeners only */
        char err[768];
        if (!restore_taken && o->restore_listen && /* the warm process did not take it */
            (cfg.restore = flyt_state_open(o->restore_file, err, sizeof err)) == NULL) {
            flyt_error("%s; refusing %s", err, peer);
            _exit(1);
        }
        if (restore_taken)
            cfg.restore = NULL;
        exit(flyt_session_run(fd, peer, &cfg));
    }
    close(fd);
    close(admit[1]);
    fcntl(admit[0], F_SETFL, O_NONBLOCK);
    if (!add_child(pid, admit[0], key))
        close(admit[0]);
    flyt_info("session %d started for %s", (int)pid, peer);
}

/* A child's admission pipe spoke: admitted (a byte), or it ended (end of file). */
static void admission_news(pid_t pid)
{
    struct child *c = find_child(pid);
    char byte;
    if (c && c->admit_fd >= 0 && read(c->admit_fd, &byte, 1) == 1)
        child_said_admitted(c);
    else if (c)
        child_admitted(c); /* it ended */
}

static void accept_one(int lfd, const struct options *o, const sigset_t *orig)
{
    int fd = flyt_accept(lfd);
    if (fd >= 0 && flyt_keepalive_set(fd, &o->keepalive) != 0)
        flyt_warn("no TCP keepalive on a new connection: %s; a client whose machine vanishes "
                  "holds its session until the system's own timeouts", strerror(errno));
    if (fd >= 0) {
        start_session(fd, o, orig);
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

/* The address as listened on: a TCP port 0 becomes the port the kernel chose
 * (also in *port_out; 0 for a Unix socket). */
static void bound_address(int lfd, const flyt_addr *addr, char *out, size_t len,
                          unsigned *port_out)
{
    flyt_addr a = *addr;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char port[sizeof a.port];
    *port_out = 0;
    if (a.kind == FLYT_ADDR_TCP && getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, port, sizeof port, NI_NUMERICSERV) == 0) {
        memcpy(a.port, port, sizeof port);
        *port_out = (unsigned)strtoul(port, NULL, 10);
    }
    flyt_addr_format(&a, out, len);
}

/* Verifies the --restore file before anything listens (with --restore-listen: takes
 * it from the migration's source first, *sender its connection awaiting the verdict);
 * 0 or -1 (logged). */
static int open_restore(struct options *o, int *sender)
{
    char err[768];
    struct flyt_state *st =
        o->restore_listen ? flyt_stream_receive(o->restore_listen, o->restore_secret_file,
                                                o->restore_file, o->restore_timeout_s,
                                                &o->cfg, sender, err, sizeof err)
                          : flyt_state_open(o->restore_file, err, sizeof err);
    if (st == NULL) {
        flyt_error("%s", err);
        return -1;
    }
    const char *id = flyt_state_session_id(st);
    if (strcmp(id, o->cfg.session_id ? o->cfg.session_id : "") != 0) {
        flyt_error("state file %s holds session '%s', this server serves '%s'", o->restore_file,
                   id, o->cfg.session_id ? o->cfg.session_id : "");
        if (sender && *sender >= 0)
            flyt_stream_verdict(*sender, "it holds another session");
        flyt_state_close(st);
        return -1;
    }
    o->cfg.restore = st; /* mapped for the server's life: each session child inherits it */
    flyt_info("restoring the session of %s for the first admitted client", o->restore_file);
    return 0;
}

/* The state taken and verified: restores it into the session to come, says so on ctl
 * ('R'), and once the server listens ('L' back) tells the source it may end its session:
 * the client it then sends here finds its session ready. 0, or -1 (the source told why,
 * and carries on). */
static int warm_restore(struct options *o, int ctl, int sender)
{
    char err[768] = "";
    long long t0 = flyt_mono_ms();
    if (flyt_quota_child_restoring() != 0) /* its allocations count against the quota */
        snprintf(err, sizeof err, "this server already has %d sessions, or its VM %d on this "
                 "node", FLYT_STATUS_SLOTS, FLYT_VMQ_SLOTS);
    if (err[0] || flyt_session_restore_early(&o->cfg, err, sizeof err) != CUDA_SUCCESS) {
        flyt_error("restoring the received state failed: %s; its source keeps the session", err);
        flyt_stream_keep_file(0, 0);
        flyt_stream_verdict(sender, err);
        return -1;
    }
    long long t_restored = flyt_mono_ms();
    char ready = 'R', listening = 0;
    if (write(ctl, &ready, 1) != 1 || read(ctl, &listening, 1) != 1 || listening != 'L') {
        flyt_stream_keep_file(0, 0);
        flyt_stream_verdict(sender, "the receiving server could not listen");
        return -1;
    }
    flyt_stream_verdict(sender, NULL);
    flyt_stream_keep_file(1, 0); /* written while the session is served */
    flyt_info("state phases (receive): restored before its client %lld ms, listening %lld ms; "
              "the source told to end its session", t_restored - t0, flyt_mono_ms() - t_restored);
    return 0;
}

/* The warm process (above): opens the device, takes the state and restores it, says so
 * on ctl, then runs the session of the connection passed to it. Its exit status. */
static int warm_main(struct options *o, int ctl, int admit)
{
    signal(SIGPIPE, SIG_IGN); /* a vanished peer is a failed write, not a death */
    char err[768];
    long long t0 = flyt_mono_ms();
    if (flyt_session_preopen(&o->cfg, err, sizeof err) != 0) {
        flyt_error("%s", err);
        return FLYT_EXIT_BACKEND;
    }
    flyt_info("device open in %lld ms, before the state", flyt_mono_ms() - t0);
    int sender = -1;
    if (open_restore(o, &sender) != 0 || warm_restore(o, ctl, sender) != 0)
        return 1;
    long long t_told = flyt_mono_ms();
    struct handoff h;
    int fd = -1;
    if (flyt_read_full_fd(ctl, &h, sizeof h, &fd) != 0 || fd < 0)
        return 0; /* the server ended before a client came */
    close(ctl);
    flyt_info("the session's client came %lld ms after its source was told to end it",
              flyt_mono_ms() - t_told);
    h.peer[sizeof h.peer - 1] = '\0';
    struct flyt_server_config cfg = o->cfg;
    cfg.admitted_fd = admit;
    if (!flyt_is_tcp(fd))
        cfg.tls_ctx = NULL; /* TLS is for TCP listeners only */
    return flyt_session_run(fd, h.peer, &cfg);
}

/* Starts the warm process and waits until it holds the state; 0, or -1 when it failed
 * (it logged why). */
static int start_warm(struct options *o)
{
    int sp[2], admit[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0 || pipe2(admit, O_CLOEXEC)) {
        flyt_error("--restore-listen: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(sp[0]);
        close(admit[0]);
        exit(warm_main(o, sp[1], admit[1]));
    }
    close(sp[1]);
    close(admit[1]);
    char ready = 0;
    ssize_t n;
    while (pid > 0 && (n = read(sp[0], &ready, 1)) < 0 && errno == EINTR)
        ;
    if (pid < 0 || ready != 'R') {
        if (pid < 0)
            flyt_error("--restore-listen: fork: %s", strerror(errno));
        else
            waitpid(pid, NULL, 0);
        close(sp[0]);
        close(admit[0]);
        return -1;
    }
    warm_pid = pid;
    warm_fd = sp[0];
    warm_admit = admit[0];
    fcntl(warm_admit, F_SETFL, O_NONBLOCK);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    flyt_log_init("flyt-server", (enum flyt_log_level)o.log_level);

    flyt_addr addrs[FLYT_MAX_LISTEN];
    char err[512];
    for (int i = 0; i < o.nlisten; i++)
        if (flyt_addr_parse(o.listen[i], &addrs[i], err, sizeof err) != 0)
            return bad_arg("--listen: %s", err);
    if ((rc = setup_tls(&o, addrs)) != 0)
        return rc;
    if (strcmp(o.cfg.backend_kind, "host") == 0)
        flyt_warn("backend 'host' keeps memory on the host and runs no kernels: it is for tests");
    if (o.key_file && read_session_key(&o) != 0)
        return EXIT_USAGE;
    if (o.restore_file && !o.restore_listen && open_restore(&o, NULL) != 0)
        return 1;
    if ((o.cfg.memory_quota || o.status_file || o.vm_quota_file) &&
        flyt_status_open(o.status_file, o.cfg.memory_quota, err, sizeof err) != 0) {
        flyt_error("%s", err);
        return 1;
    }
    if (o.vm_quota_file && flyt_quota_vm_open(o.vm_quota_file, err, sizeof err) != 0) {
        flyt_error("--vm-quota: %s", err);
        return 1;
    }
    if (o.restore_listen && start_warm(&o) != 0)
        return 1; /* it said why */

    sigset_t wait_mask, orig;
    setup_signals(&wait_mask, &orig);
    unsigned port = 0; /* the first TCP address's, for the status page */
    for (n_listen = 0; n_listen < o.nlisten; n_listen++) {
        int lfd = flyt_listen(&addrs[n_listen], err, sizeof err);
        if (lfd < 0) {
            flyt_error("%s", err);
            return 1;
        }
        fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK); /* poll said ready, but it may not be */
        listen_fds[n_listen] = lfd;
        struct stat bound;
        if (addrs[n_listen].kind == FLYT_ADDR_UNIX && stat(addrs[n_listen].path, &bound) == 0) {
            listen_ino[n_listen] = bound.st_ino;
            listen_dev[n_listen] = bound.st_dev;
        }
        char where[400];
        unsigned this_port;
        bound_address(lfd, &addrs[n_listen], where, sizeof where, &this_port);
        if (port == 0)
            port = this_port;
        flyt_info("listening on %s (backend %s, gpu %d)", where, o.cfg.backend_kind, o.cfg.gpu);
    }
    if (o.cfg.session_id || o.cfg.memory_quota || o.cfg.sm_ngroups) {
        char share[96] = "whole GPU";
        if (o.cfg.sm_ngroups)
            snprintf(share, sizeof share, "%d SM group(s) of %u", o.cfg.sm_ngroups,
                     o.cfg.sm_granularity);
        flyt_info("session %s: %s, memory quota %llu bytes, %s",
                  o.cfg.session_id ? o.cfg.session_id : "(none)",
                  o.cfg.session_id ? "clients need a session token" : "no token asked",
                  (unsigned long long)o.cfg.memory_quota, share);
    }
    flyt_status_listening(port);
    if (warm_fd >= 0 && write(warm_fd, "L", 1) != 1) /* it answers the source now */
        flyt_warn("the process that took the state is gone");

    int status = 0;
    /* the listening sockets, then the admission pipes of connections not yet admitted */
    size_t room = (size_t)n_listen + MAX_UNADMITTED + 1;
    struct pollfd *p = calloc(room, sizeof *p);
    pid_t *p_pid = calloc(room, sizeof *p_pid);
    if (!p || !p_pid) {
        flyt_error("out of memory");
        got_stop = status = 1;
    }
    while (!got_stop) {
        nfds_t np = 0;
        for (int i = 0; i < n_listen; i++)
            p[np++] = (struct pollfd){listen_fds[i], POLLIN, 0};
        for (size_t i = 0; i < n_children && np < room; i++)
            if (children[i].admit_fd >= 0) {
                p_pid[np] = children[i].pid;
                p[np++] = (struct pollfd){children[i].admit_fd, POLLIN, 0};
            }
        int n = ppoll(p, np, NULL, &wait_mask);
        int poll_errno = errno; /* reaping below sets errno too */
        for (nfds_t i = (nfds_t)n_listen; n > 0 && i < np; i++)
            if (p[i].revents)
                admission_news(p_pid[i]);
        if (got_chld) {
            got_chld = 0;
            reap();
        }
        if (n < 0 && poll_errno != EINTR) {
            flyt_error("poll: %s", strerror(poll_errno));
            status = 1;
            break;
        }
        for (int i = 0; !got_stop && n > 0 && i < n_listen; i++)
            if (p[i].revents & POLLIN)
                accept_one(listen_fds[i], &o, &orig);
    }
    free(p);
    free(p_pid);

    flyt_info("shutting down");
    for (int i = 0; i < n_listen; i++)
        close(listen_fds[i]);
    stop_children();
    for (int i = 0; i < n_listen; i++) {
        struct stat now; /* ours still: a server that took over the session may be there now */
        if (addrs[i].kind == FLYT_ADDR_UNIX && stat(addrs[i].path, &now) == 0 &&
            now.st_ino == listen_ino[i] && now.st_dev == listen_dev[i])
            unlink(addrs[i].path);
    }
    free(children);
    flyt_info("stopped");
    return status;
}
