/*
 * The node's flyt-servers: one process per session.
 *
 * Start (an API thread): pick a free port of the range, write the session key
 * to STATE_DIR/SID.key (0600), spawn
 *   flyt-server --listen tcp://LISTEN_HOST:PORT --session-id SID
 *       --session-key-file KEY --memory-quota BYTES --sm-groups LIST
 *       --sm-granularity G --gpu 0 --backend cuda|host --status-file STATUS
 * in its own process group, and wait until its status page says it listens.
 * Each server sees exactly its GPU: CUDA_VISIBLE_DEVICES=<the GPU's UUID>
 * (so --gpu 0; the form MPS documents for clients of a per-GPU daemon), plus
 * the GPU's MPS pipe directory when MPS runs; host-backend servers get the
 * fake GPU's memory and SM count instead.
 *
 * Stop: SIGTERM (the server stops its sessions), SIGKILL to the whole group
 * after the grace. Reaping is the main thread's: on SIGCHLD it peeks at each
 * server with waitid(WNOWAIT), kills what is left of the server's process
 * group while the group id is still held by the zombie leader, then reaps. An
 * exit nobody asked for is a death: logged, reported to the cluster manager.
 *
 * Servers adopted from an earlier run (adopt.c) are not our children: their
 * pidfds are polled instead, and signals go through the pidfd.
 *
 * Connected clients and memory use come from each server's status page
 * (src/common/flyt_server_status.h), read with pread.
 */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_proc.h"
#include "flyt_server_status.h"
#include "flyt_token.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- processes ---- */

static const char *const flyt_env_names[] = {
    "CUDA_VISIBLE_DEVICES=", "CUDA_MPS_PIPE_DIRECTORY=", "CUDA_MPS_LOG_DIRECTORY=",
    "FLYT_HOST_BACKEND_MEM=", "FLYT_HOST_BACKEND_SMS=", "FLYT_HOST_BACKEND_CC=", "FLYT_SERVER=",
    "FLYT_SESSION_TOKEN=",
    NULL};

char **nm_env_build(const char *const *extra)
{
    size_t n = 0, x = 0;
    while (environ[n])
        n++;
    while (extra && extra[x])
        x++;
    char **env = calloc(n + x + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (int j = 0; flyt_env_names[j] && !drop; j++)
            drop = strncmp(environ[i], flyt_env_names[j], strlen(flyt_env_names[j])) == 0;
        if (!drop && !(env[k++] = strdup(environ[i])))
            goto oom;
    }
    for (size_t i = 0; i < x; i++)
        if (!(env[k++] = strdup(extra[i])))
            goto oom;
    return env;
oom:
    nm_env_free(env);
    return NULL;
}

void nm_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

int nm_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, pid_t *pid,
             char *err, size_t errlen)
{
    int ep[2]; /* the child's exec error, if any; closed by a successful exec */
    if (pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sigset_t none;
    sigemptyset(&none);
    pid_t p = fork();
    if (p < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(ep[0]);
        close(ep[1]);
        if (devnull >= 0)
            close(devnull);
        return -1;
    }
    if (p == 0) {
        /* async-signal-safe calls only from here on */
        setpgid(0, 0);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < 32; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, &dfl, NULL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = stdin_fd >= 0 ? stdin_fd : devnull;
        if (in >= 0 && in != 0)
            dup2(in, 0);
        /* only 0-2 and the error pipe (close-on-exec) go on */
        long c1 = ep[1] > 3 ? syscall(SYS_close_range, 3u, (unsigned)ep[1] - 1, 0u) : 0;
        long c2 = syscall(SYS_close_range, (unsigned)ep[1] + 1, ~0u, 0u);
        if (c1 != 0 || c2 != 0)
            for (int fd = 3; fd < 4096; fd++)
                if (fd != ep[1])
                    close(fd);
        execve(path, argv, envp);
        int e = errno;
        ssize_t w = write(ep[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(ep[1]);
    if (devnull >= 0)
        close(devnull);
    setpgid(p, p); /* also here: no window where the group does not exist */
    int child_errno = 0;
    ssize_t r;
    do
        r = read(ep[0], &child_errno, sizeof child_errno);
    while (r < 0 && errno == EINTR);
    close(ep[0]);
    if (r == (ssize_t)sizeof child_errno) {
        snprintf(err, errlen, "cannot run %s: %s", path, strerror(child_errno));
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
            ;
        return -1;
    }
    *pid = p;
    return 0;
}

int nm_run(const char *path, char *const argv[], char *const envp[], const char *input,
           long long timeout_ms, char *err, size_t errlen)
{
    int in[2] = {-1, -1};
    if (input && pipe2(in, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid;
    char spawn_err[512];
    int rc = nm_spawn(path, argv, envp, input ? in[0] : -1, &pid, spawn_err, sizeof spawn_err);
    if (input)
        close(in[0]);
    if (rc != 0) {
        if (input)
            close(in[1]);
        snprintf(err, errlen, "%s", spawn_err);
        return -1;
    }
    if (input) {
        ssize_t w = write(in[1], input, strlen(input));
        (void)w;
        close(in[1]);
    }
    long long deadline = nm_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (w < 0 && errno != EINTR) {
            snprintf(err, errlen, "waitpid: %s", strerror(errno));
            return -1;
        }
        if (nm_now_ms() > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            snprintf(err, errlen, "%s did not finish in %lld ms (killed)", path, timeout_ms);
            return -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* ---- the list ---- */

struct nm_server *nm_server_find(struct nm *nm, const char *sid)
{
    FLYT_ASSERT_HELD(&nm->lock);
    for (struct nm_server *s = nm->servers; s; s = s->next)
        if (strcmp(s->sid, sid) == 0)
            return s;
    return NULL;
}

void nm_server_unlink(struct nm *nm, struct nm_server *s)
{
    FLYT_ASSERT_HELD(&nm->lock);
    for (struct nm_server **pp = &nm->servers; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
}

void nm_server_free(struct nm_server *s)
{
    if (!s)
        return;
    if (s->key_path[0])
        unlink(s->key_path);
    if (s->status_path[0])
        unlink(s->status_path);
    if (s->sock_path[0])
        unlink(s->sock_path);
    if (s->record_path[0])
        unlink(s->record_path);
    if (s->secret_path[0])
        unlink(s->secret_path);
    if (s->adopted && s->pidfd >= 0)
        close(s->pidfd);
    nm_vmq_put(s);
    free(s);
}

int nm_servers_any_live(struct nm *nm)
{
    FLYT_ASSERT_HELD(&nm->lock);
    for (struct nm_server *s = nm->servers; s; s = s->next)
        if (s->pid > 0 && s->state != NM_EXITED)
            return 1;
    return 0;
}

int nm_server_status(const struct nm_server *s, int *connected, long long *memory_used)
{
    *connected = 0;
    *memory_used = 0;
    int fd = open(s->status_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct flyt_server_status st;
    ssize_t n = pread(fd, &st, sizeof st, 0);
    close(fd);
    if (n != (ssize_t)sizeof st || st.magic != FLYT_STATUS_MAGIC)
        return -1;
    /* a connection counts once its client was admitted (a stray one does not) */
    for (int i = 0; i < FLYT_STATUS_SLOTS && !*connected; i++)
        *connected = st.slots[i].pid > 0 && st.slots[i].admitted;
    *memory_used = (long long)st.memory_used;
    return 0;
}

int nm_server_listening(const struct nm_server *s)
{
    int fd = open(s->status_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    struct flyt_server_status st;
    ssize_t n = pread(fd, &st, sizeof st, 0);
    close(fd);
    return n == (ssize_t)sizeof st && st.magic == FLYT_STATUS_MAGIC &&
           st.server_pid == (uint32_t)s->pid && st.listen_port == (uint32_t)s->port;
}

/* A port of the range that no server of ours holds and that is free now. */
static int pick_port(struct nm *nm)
{
    FLYT_ASSERT_HELD(&nm->lock);
    const struct nm_config *c = &nm->cfg;
    int span = c->port_max - c->port_min + 1;
    if (nm->next_port < c->port_min || nm->next_port > c->port_max)
        nm->next_port = c->port_min;
    for (int i = 0; i < span; i++) {
        int port = nm->next_port;
        nm->next_port = port == c->port_max ? c->port_min : port + 1;
        int ours = 0;
        for (struct nm_server *s = nm->servers; s && !ours; s = s->next)
            ours = s->port == port || s->state_port == port;
        if (ours)
            continue;
        /* is somebody else on it? */
        struct sockaddr_storage ss;
        socklen_t sl;
        memset(&ss, 0, sizeof ss);
        struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, c->server_listen_host, &v4->sin_addr) == 1) {
            v4->sin_family = AF_INET;
            v4->sin_port = htons((uint16_t)port);
            sl = sizeof *v4;
        } else if (inet_pton(AF_INET6, c->server_listen_host, &v6->sin6_addr) == 1) {
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons((uint16_t)port);
            sl = sizeof *v6;
        } else {
            return port; /* a host name: the server finds out */
        }
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return port;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int ok = bind(fd, (struct sockaddr *)&ss, sl) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return -1;
}

static int write_key(const char *path, const char *hex, char *err, size_t errlen)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    char line[NM_STR + 2];
    int n = snprintf(line, sizeof line, "%s\n", hex);
    int ok = write(fd, line, (size_t)n) == n && fchmod(fd, 0600) == 0;
    if (close(fd) != 0)
        ok = 0;
    if (!ok) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

int nm_server_set_key(struct nm *nm, const char *sid, const char *hex, char *err, size_t errlen)
{
    pthread_mutex_lock(&nm->lock);
    struct nm_server *s = nm_server_find(nm, sid);
    int rc = 1;
    if (s && s->key_path[0]) {
        char tmp[sizeof s->key_path + 8];
        snprintf(tmp, sizeof tmp, "%s.new", s->key_path);
        /* a new file renamed over the old: an admission reads one key or the other, whole */
        rc = write_key(tmp, hex, err, errlen);
        if (rc == 0 && rename(tmp, s->key_path) != 0) {
            snprintf(err, errlen, "cannot rename %s: %s", tmp, strerror(errno));
            unlink(tmp);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&nm->lock);
    return rc;
}

static const char *exit_text(int st, char *buf, size_t len)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "ended (status 0x%x)", st);
    return buf;
}

/* ---- start ---- */

#define STATUS(code, ...)                                  \
    do {                                                   \
        *http_status = (code);                             \
        snprintf(msg, msglen, __VA_ARGS__);                \
    } while (0)

/* Where clients reach s: its Unix socket first (a client on this machine that
 * may open the state dir connects there, and gets shared memory: pinned,
 * mapped and managed memory at full speed), then its TCP address (clients
 * elsewhere, which find no such path). docs/node-manager.md. */
void nm_server_endpoint(const struct nm *nm, const struct nm_server *s, char *out, size_t len)
{
    char host[NM_STR + 2];
    nm_host_for_url(nm->cfg.advertise_host, host, sizeof host);
    snprintf(out, len, "%s%s%s%s://%s:%d", s->sock_path[0] ? "unix:" : "", s->sock_path,
             s->sock_path[0] ? "," : "", nm->cfg.server_tls_cert[0] ? "tls" : "tcp", host, s->port);
}

/* The server's image cache: the VM's own folder of module_cache_dir (0700), so
 * whether an image is cached never tells one tenant what another loaded and
 * one tenant's files never reach another's driver. "" (no cache) when the VM
 * is not known or the folder cannot be made. */
static void vm_cache_dir(const struct nm_config *c, const struct nm_server *s, char *out,
                         size_t len)
{
    out[0] = '\0';
    if (!c->module_cache_dir[0] || !s->vm_id[0] ||
        snprintf(out, len, "%s/vm-%s", c->module_cache_dir, s->vm_id) >= (int)len ||
        (mkdir(out, 0700) != 0 && errno != EEXIST)) {
        if (c->module_cache_dir[0])
            flyt_debug("session %s: no image cache (VM \"%s\")", s->sid, s->vm_id);
        out[0] = '\0';
    }
}

/* Spawns the server of s (lock held; s->port chosen). */
static int spawn_server(struct nm *nm, struct nm_server *s, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&nm->lock);
    const struct nm_config *c = &nm->cfg;
    char cache[PATH_MAX];
    vm_cache_dir(c, s, cache, sizeof cache);
    const struct nm_gpu *gpu = nm_gpu_by_index(nm, s->gpu_index);
    char listen[NM_STR + 32], quota[32], groups[NM_MAX_GROUPS * 6], gran[16], host[NM_STR + 2];
    nm_host_for_url(c->server_listen_host, host, sizeof host);
    snprintf(listen, sizeof listen, "tcp://%s:%d", host, s->port);
    snprintf(quota, sizeof quota, "%lld", s->memory_quota);
    snprintf(gran, sizeof gran, "%d", gpu->sm_granularity);
    size_t used = 0;
    groups[0] = '\0';
    for (int i = 0; i < s->ngroups && used < sizeof groups; i++)
        used += (size_t)snprintf(groups + used, sizeof groups - used, "%s%d", i ? "," : "",
                                 s->groups[i]);
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    char local[sizeof s->sock_path + 8];
    snprintf(local, sizeof local, "unix:%s", s->sock_path);
    const char *argv[40] = {c->server_path, "--listen", listen, "--session-id", s->sid,
                            "--session-key-file", s->key_path, "--memory-quota", quota,
                            "--sm-groups", groups, "--sm-granularity", gran, "--gpu", "0",
                            "--backend", c->host_backend ? "host" : "cuda", "--status-file",
                            s->status_path, "--log-level", levels[c->log_level]};
    int argc = 21; /* the fixed ones above; then the optional pairs */
    if (s->sock_path[0]) {
        argv[argc++] = "--listen";
        argv[argc++] = local;
    }
    char cache_max[32];
    snprintf(cache_max, sizeof cache_max, "%llu", c->module_cache_max);
    if (cache[0]) {
        argv[argc++] = "--cache-dir";
        argv[argc++] = cache;
        argv[argc++] = "--cache-max";
        argv[argc++] = cache_max;
    }
    char state[PATH_MAX + NM_SID_MAX + 16], state_listen[NM_STR + 32], receive_s[16];
    if (s->receive) { /* its own file: the source's may be in this same folder */
        snprintf(state, sizeof state, "%s/%s.received", c->state_dir, s->sid);
        snprintf(state_listen, sizeof state_listen, "tcp://%s:%d", host, s->state_port);
        snprintf(receive_s, sizeof receive_s, "%d", NM_RECEIVE_TIMEOUT_S);
        argv[argc++] = "--restore";
        argv[argc++] = state;
        argv[argc++] = "--restore-listen";
        argv[argc++] = state_listen;
        argv[argc++] = "--restore-secret-file";
        argv[argc++] = s->secret_path;
        argv[argc++] = "--restore-timeout";
        argv[argc++] = receive_s;
    } else if (s->restore && nm_state_file(nm, s->sid, state, sizeof state) == 0) {
        argv[argc++] = "--restore";
        argv[argc++] = state;
    }
    if (nm_vmq_path(s)) {
        argv[argc++] = "--vm-quota";
        argv[argc++] = nm_vmq_path(s);
    }
    if (c->server_tls_cert[0]) { /* its TCP listener speaks TLS (the Unix socket stays plain) */
        argv[argc++] = "--tls-cert";
        argv[argc++] = c->server_tls_cert;
        argv[argc++] = "--tls-key";
        argv[argc++] = c->server_tls_key;
    }
    FLYT_ASSERT(argc < (int)(sizeof argv / sizeof argv[0]));
    argv[argc] = NULL;
    /* the environment: this GPU only, or the fake GPU; its MPS daemon */
    const char *fin[7];
    int nf = 0;
    char f_mem[64], f_sms[64], f_cc[64], f_vis[128], f_pipe[PATH_MAX + 32], f_log[PATH_MAX + 32];
    if (c->host_backend) {
        snprintf(f_mem, sizeof f_mem, "FLYT_HOST_BACKEND_MEM=%lld", gpu->memory_total);
        snprintf(f_sms, sizeof f_sms, "FLYT_HOST_BACKEND_SMS=%d", gpu->sm_count);
        snprintf(f_cc, sizeof f_cc, "FLYT_HOST_BACKEND_CC=%s", c->test_gpu_cc);
        fin[nf++] = f_mem;
        fin[nf++] = f_sms;
        fin[nf++] = f_cc;
    } else {
        snprintf(f_vis, sizeof f_vis, "CUDA_VISIBLE_DEVICES=%s", gpu->uuid);
        fin[nf++] = f_vis;
    }
    if (c->mps) {
        char pipe[PATH_MAX], log[PATH_MAX];
        nm_mps_dirs(nm, gpu->index, pipe, sizeof pipe, log, sizeof log);
        snprintf(f_pipe, sizeof f_pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe);
        snprintf(f_log, sizeof f_log, "CUDA_MPS_LOG_DIRECTORY=%s", log);
        fin[nf++] = f_pipe;
        fin[nf++] = f_log;
    }
    fin[nf] = NULL;
    char **env = nm_env_build(fin);
    if (!env) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = nm_spawn(c->server_path, (char *const *)argv, env, -1, &s->pid, err, errlen);
    nm_env_free(env);
    return rc;
}

static int settle_receiver_locked(struct nm *nm, struct nm_server *s, int *http_status, char *msg,
                                  size_t msglen, char *endpoint, size_t eplen, pid_t *pid);

/* Whether the request can start a server now (lock held): 0 when it can; 1 when its
 * server already runs with the same share (a retry: endpoint and pid filled); -1 with
 * an HTTP status and message when it cannot. */
static int start_allowed_locked(struct nm *nm, const struct nm_start_req *r, int *http_status,
                                char *msg, size_t msglen, char *endpoint, size_t eplen,
                                pid_t *pid)
{
    FLYT_ASSERT_HELD(&nm->lock);
    if (nm->shutting_down) {
        STATUS(503, "the node manager is stopping");
        return -1;
    }
    if (!nm->registered || !nm->session_key_hex[0]) {
        STATUS(503, "not registered with the cluster manager yet: no session key");
        return -1;
    }
    struct nm_server *old = nm_server_find(nm, r->sid);
    if (!old)
        return 0;
    if (old->receive && old->state != NM_RUNNING && !r->receive && r->restore)
        return settle_receiver_locked(nm, old, http_status, msg, msglen, endpoint, eplen, pid);
    int same = old->gpu_index == r->gpu_index && old->ngroups == r->ngroups &&
               old->memory_quota == r->memory_quota &&
               memcmp(old->groups, r->groups, sizeof r->groups[0] * (size_t)r->ngroups) == 0;
    if (old->state == NM_RUNNING && same) { /* a retry: the same answer */
        nm_server_endpoint(nm, old, endpoint, eplen);
        *pid = old->pid;
        *http_status = 200;
        return 1;
    }
    STATUS(409, "session %s already has a server here (%s)", r->sid,
           old->state == NM_RUNNING ? "with another share" : "starting or stopping");
    return -1;
}

/* The entry of the request's server, with its key file written, linked in (lock held);
 * NULL with an HTTP status and why in err. */
static struct nm_server *server_new_locked(struct nm *nm, const struct nm_start_req *r,
                                           int *status, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&nm->lock);
    const struct nm_config *c = &nm->cfg;
    struct nm_server *s = calloc(1, sizeof *s);
    if (!s) {
        *status = 500;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(s->sid, sizeof s->sid, "%s", r->sid);
    s->gpu_index = r->gpu_index;
    s->ngroups = r->ngroups;
    memcpy(s->groups, r->groups, sizeof r->groups[0] * (size_t)r->ngroups);
    s->sm_count = r->sm_count;
    s->memory_quota = r->memory_quota;
    snprintf(s->vm_id, sizeof s->vm_id, "%s", r->vm_id);
    s->restore = r->restore;
    s->receive = r->receive;
    s->state = NM_STARTING;
    s->waiters = 1; /* this request: nobody else frees the entry meanwhile */
    snprintf(s->key_path, sizeof s->key_path, "%s/%s.key", c->state_dir, s->sid);
    snprintf(s->status_path, sizeof s->status_path, "%s/%s.status", c->state_dir, s->sid);
    snprintf(s->record_path, sizeof s->record_path, "%s/%s.server", c->state_dir, s->sid);
    if (!c->server_unix_socket ||
        snprintf(s->sock_path, sizeof s->sock_path, "%s/%s.sock", c->state_dir, s->sid) >=
            (int)sizeof s->sock_path)
        s->sock_path[0] = '\0'; /* a state dir too deep for a socket path: TCP only */
    if (write_key(s->key_path, r->session_key[0] ? r->session_key : nm->session_key_hex, err,
                  errlen) != 0) {
        s->key_path[0] = '\0';
        nm_server_free(s);
        flyt_error("session %s: %s", r->sid, err);
        *status = 503;
        return NULL;
    }
    if (s->receive &&
        (snprintf(s->secret_path, sizeof s->secret_path, "%s/%s.secret", c->state_dir, s->sid),
         write_key(s->secret_path, r->secret, err, errlen) != 0)) {
        s->secret_path[0] = '\0';
        nm_server_free(s);
        flyt_error("session %s: no secret for the state: %s", r->sid, err);
        *status = 503;
        return NULL;
    }
    if (nm_vmq_get(nm, s, err, errlen) != 0) {
        nm_server_free(s);
        flyt_error("session %s: %s", r->sid, err);
        *status = 503;
        return NULL;
    }
    s->next = nm->servers;
    nm->servers = s;
    return s;
}

/* Waits (lock held) until s listens, dies, or timeout_ms pass. */
static void wait_listening_locked(struct nm *nm, struct nm_server *s, long long timeout_ms)
{
    FLYT_ASSERT_HELD(&nm->lock);
    long long deadline = nm_now_ms() + timeout_ms;
    while (s->state == NM_STARTING && !nm_server_listening(s) && nm_now_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&nm->cond, &nm->lock, &ts);
    }
}

/* The restore that follows a receiving server's start (lock held): waits until it
 * took its state and listens (1, answered as a start), or says why it did not (-1;
 * the entry goes once nobody else waits on it). */
static int settle_receiver_locked(struct nm *nm, struct nm_server *s, int *http_status, char *msg,
                                  size_t msglen, char *endpoint, size_t eplen, pid_t *pid)
{
    FLYT_ASSERT_HELD(&nm->lock);
    s->waiters++;
    wait_listening_locked(nm, s, nm->cfg.start_timeout_ms + NM_RECEIVE_TIMEOUT_S * 1000LL);
    int rc = 1;
    if (s->state == NM_STARTING && nm_server_listening(s)) {
        s->state = NM_RUNNING;
        nm->starts++;
        nm_server_endpoint(nm, s, endpoint, eplen);
        *pid = s->pid;
        *http_status = 201;
        flyt_info("session %s: server pid %d took its state and listens at %s", s->sid,
                  (int)s->pid, endpoint);
    } else {
        if (s->state == NM_STARTING) {
            snprintf(s->reason, sizeof s->reason, "did not take its state in time");
            nm_server_stop_locked(nm, s);
        }
        while (s->state != NM_EXITED)
            pthread_cond_wait(&nm->cond, &nm->lock);
        STATUS(503, "session %s: the receiving server %s (see the node's log)", s->sid,
               s->reason);
        nm->start_failures++;
        rc = -1;
    }
    pthread_cond_broadcast(&nm->cond);
    if (--s->waiters == 0 && s->state == NM_EXITED) {
        nm_server_unlink(nm, s);
        nm_server_free(s);
    }
    return rc;
}

/* After a failed attempt (lock held): waits for the process to be gone. 1 when a new
 * port is worth a try (it died before listening), else 0; why in err. */
static int attempt_failed_locked(struct nm *nm, struct nm_server *s, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&nm->lock);
    if (s->state == NM_STARTING) { /* timed out: stop it */
        snprintf(err, errlen, "the server did not listen within %lld ms",
                 nm->cfg.start_timeout_ms);
        nm_server_stop_locked(nm, s);
        s->stop_asked = 1;
        while (s->state != NM_EXITED)
            pthread_cond_wait(&nm->cond, &nm->lock);
        return 0;
    }
    if (s->state != NM_EXITED || s->stop_asked) { /* stopped meanwhile */
        snprintf(err, errlen, "the server was stopped while it started");
        while (s->state != NM_EXITED)
            pthread_cond_wait(&nm->cond, &nm->lock);
        return 0;
    }
    /* it died before listening; a port taken meanwhile is worth another try */
    snprintf(err, errlen, "the server %s before it listened (see the log)", s->reason);
    return 1;
}

/* Spawns s's server until one listens (up to 3 ports), lock held. 0 when it runs, or -1
 * with why in err. */
static int launch_locked(struct nm *nm, struct nm_server *s, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&nm->lock);
    const struct nm_config *c = &nm->cfg;
    for (int attempts = 1;; attempts++) {
        if (s->stop_asked || nm->shutting_down) {
            snprintf(err, errlen, "the server was stopped while it started");
            return -1;
        }
        s->port = pick_port(nm);
        if (s->port >= 0 && s->receive)
            s->state_port = pick_port(nm);
        if (s->port < 0 || s->state_port < 0) {
            snprintf(err, errlen, "no free port in %d-%d", c->port_min, c->port_max);
            return -1;
        }
        unlink(s->status_path);
        s->state = NM_STARTING;
        s->reason[0] = '\0';
        if (spawn_server(nm, s, err, errlen) != 0) {
            s->pid = 0;
            return -1;
        }
        flyt_info("session %s: started server pid %d on port %d (GPU %d, %d SMs, %lld bytes)",
                  s->sid, (int)s->pid, s->port, s->gpu_index, s->sm_count, s->memory_quota);
        nm_server_record(nm, s); /* a later run adopts it by this (logged if it fails) */
        if (s->receive)
            return 0; /* it listens once its state came: settle_receiver_locked */
        wait_listening_locked(nm, s, nm->cfg.start_timeout_ms); /* the main thread reaps it */
        if (s->state == NM_STARTING && nm_server_listening(s)) {
            s->state = NM_RUNNING;
            pthread_cond_broadcast(&nm->cond);
            return 0;
        }
        if (!attempt_failed_locked(nm, s, err, errlen) || attempts >= 3 || nm->shutting_down)
            return -1;
        flyt_warn("session %s: %s; trying another port", s->sid, err);
    }
}

int nm_server_start(struct nm *nm, const struct nm_start_req *r, int *http_status, char *msg,
                    size_t msglen, char *endpoint, size_t eplen, pid_t *pid)
{
    pthread_mutex_lock(&nm->lock);
    int allowed = start_allowed_locked(nm, r, http_status, msg, msglen, endpoint, eplen, pid);
    if (allowed != 0) {
        pthread_mutex_unlock(&nm->lock);
        return allowed > 0 ? 0 : -1;
    }
    char err[512];
    int status;
    struct nm_server *s = server_new_locked(nm, r, &status, err, sizeof err);
    if (!s) {
        pthread_mutex_unlock(&nm->lock);
        STATUS(status, "%s", err);
        return -1;
    }
    int launched = launch_locked(nm, s, err, sizeof err) == 0;
    if (launched && s->receive) {
        /* answered at once: the state address; the restore that follows settles it */
        char host[NM_STR + 2];
        nm_host_for_url(nm->cfg.advertise_host, host, sizeof host);
        snprintf(endpoint, eplen, "tcp://%s:%d", host, s->state_port);
        *pid = s->pid;
        s->waiters--;
        pthread_mutex_unlock(&nm->lock);
        flyt_info("session %s: server pid %d waits for its state at %s", r->sid, (int)*pid,
                  endpoint);
        *http_status = 202;
        return 0;
    }
    if (launched) {
        nm_server_endpoint(nm, s, endpoint, eplen);
        *pid = s->pid;
        nm->starts++;
        s->waiters--;
        pthread_mutex_unlock(&nm->lock);
        flyt_info("session %s: server pid %d listens at %s", r->sid, (int)*pid, endpoint);
        *http_status = 201;
        return 0;
    }
    nm->start_failures++;
    flyt_error("session %s: could not start a server: %s", r->sid, err);
    if (--s->waiters == 0) {
        nm_server_unlink(nm, s);
        nm_server_free(s);
    }
    pthread_cond_broadcast(&nm->cond);
    pthread_mutex_unlock(&nm->lock);
    STATUS(503, "%s", err);
    return -1;
}

/* ---- stop ---- */

void nm_server_stop_locked(struct nm *nm, struct nm_server *s)
{
    FLYT_ASSERT_HELD(&nm->lock);
    s->stop_asked = 1;
    if (s->state == NM_EXITED || s->state == NM_STOPPING || s->pid <= 0)
        return;
    s->state = NM_STOPPING;
    s->stop_deadline = nm_now_ms() + nm->cfg.stop_grace_ms;
    /* an adopted server through its pidfd: never a later holder of its pid */
    if ((s->adopted ? flyt_pidfd_signal(s->pidfd, SIGTERM) : kill(s->pid, SIGTERM)) != 0)
        flyt_warn("session %s: SIGTERM to %d: %s", s->sid, (int)s->pid, strerror(errno));
    flyt_info("session %s: stopping server pid %d", s->sid, (int)s->pid);
}

int nm_server_stop_wait(struct nm *nm, const char *sid)
{
    pthread_mutex_lock(&nm->lock);
    struct nm_server *s = nm_server_find(nm, sid);
    if (!s) {
        pthread_mutex_unlock(&nm->lock);
        return -1;
    }
    nm_server_stop_locked(nm, s);
    s->report = 0; /* the cluster manager asked for it */
    s->waiters++;
    while (s->state != NM_EXITED && s->pid > 0)
        pthread_cond_wait(&nm->cond, &nm->lock);
    if (--s->waiters == 0) {
        nm_server_unlink(nm, s);
        nm_server_free(s);
    }
    pthread_mutex_unlock(&nm->lock);
    return 0;
}

/* ---- reaping (main thread) ---- */

void nm_server_exited_locked(struct nm *nm, struct nm_server *s, const char *how)
{
    FLYT_ASSERT_HELD(&nm->lock);
    int was = s->state;
    s->state = NM_EXITED;
    if (s->stop_asked) {
        if (!s->report) /* else the reason to report is already set */
            snprintf(s->reason, sizeof s->reason, "%s", how);
        flyt_info("session %s: server pid %d stopped (%s)", s->sid, (int)s->pid, how);
        if (s->waiters == 0 && !s->report) {
            nm_server_unlink(nm, s);
            nm_server_free(s);
        }
    } else if (was == NM_STARTING) {
        snprintf(s->reason, sizeof s->reason, "%s", how);
    } else {
        /* "failed" first: the cluster manager then records the session failed */
        snprintf(s->reason, sizeof s->reason, "failed: its server (pid %d) %s", (int)s->pid, how);
        flyt_warn("session %s: server pid %d died: %s", s->sid, (int)s->pid, how);
        s->report = 1;
        nm->deaths++;
    }
}

/* Whether our child s has exited; reaped, its group killed, how in how. */
static int child_exited(struct nm_server *s, char *how, size_t len)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != s->pid)
        return 0;
    /* the leader is a zombie: its group id is still ours to kill */
    kill(-s->pid, SIGKILL);
    nm_vmq_server_gone(s); /* its sessions' memory is the VM's again */
    int st = 0;
    while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
        ;
    exit_text(st, how, len);
    return 1;
}

void nm_servers_reap(struct nm *nm)
{
    pthread_mutex_lock(&nm->lock);
    long long now = nm_now_ms();
    int changed = 0;
    struct nm_server *next;
    for (struct nm_server *s = nm->servers; s; s = next) {
        next = s->next;
        if (s->pid <= 0 || s->state == NM_EXITED)
            continue;
        char how[128];
        int exited = s->adopted ? nm_adopted_exited(s) : child_exited(s, how, sizeof how);
        if (exited) {
            if (s->adopted)
                nm_vmq_server_gone(s); /* its sessions' memory is the VM's again */
            if (s->adopted) /* another process reaps it: its exit status is not ours to see */
                snprintf(how, sizeof how, "exited (adopted: its exit status is unknown here)");
            changed = 1;
            nm_server_exited_locked(nm, s, how);
            continue;
        }
        if (s->state == NM_STOPPING && !s->killed && now >= s->stop_deadline) {
            flyt_warn("session %s: server pid %d outlived its %lld ms grace: SIGKILL", s->sid,
                      (int)s->pid, nm->cfg.stop_grace_ms);
            kill(-s->pid, SIGKILL);
            s->killed = 1;
        }
    }
    if (changed)
        pthread_cond_broadcast(&nm->cond);
    pthread_mutex_unlock(&nm->lock);
}
