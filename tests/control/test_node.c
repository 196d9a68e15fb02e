/*
 * flyt-node-manager in test mode (backend = host, two fake GPUs, a stand-in MPS control
 * program) against a real flyt-cluster-manager, as separate processes on loopback:
 * registration with its GPUs, heartbeats, its API's authentication, a server started for a
 * session that a client can use only with the session token (raw frames, and the client
 * test program, on NVIDIA's runtime, through Flyt's libcuda.so.1 with FLYT_SESSION_TOKEN),
 * connected reporting, release (DELETE), a killed server reported as failed, idle release
 * through the heartbeat's stop list, and SIGTERM: every server and MPS daemon stopped,
 * nothing left running, exit 0.
 *
 * usage: test_node NODE_MANAGER CLUSTER_MANAGER FLYT_SERVER
 *                  [CLIENT_TEST FLYT_LIB_DIR CUDA_LIB_DIR]
 *   FLYT_LIB_DIR holds Flyt's libcuda.so.1, CUDA_LIB_DIR NVIDIA's libcudart.so.13 (which
 *   CLIENT_TEST links, without an RPATH).
 */
#include "check.h"
#include "clm_harness.h"

#include "flyt_proc.h"
#include "flyt_proto.h"
#include "flyt_server_status.h"
#include "flyt_token.h"

#include <driver_types.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GiB (1LL << 30)
#define T_NOT_PERMITTED 800

static struct clm_proc clm;
static char dir[256], nm_base[128], manager_token[128], node_token[128], session_key[160];
static pid_t nm_pid;
static const char *client_test, *flyt_lib_dir, *cuda_lib_dir;

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void kill_nm(void)
{
    if (nm_pid > 0) {
        kill(nm_pid, SIGKILL);
        waitpid(nm_pid, NULL, 0);
        nm_pid = 0;
    }
}

static void dump(const char *name)
{
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    printf("---- %s ----\n", name);
    while (fgets(line, sizeof line, f))
        fputs(line, stdout);
    fclose(f);
}

static int passed;
static void at_exit(void)
{
    if (!passed) {
        dump("nm.log");
        char p[512];
        snprintf(p, sizeof p, "%s/clm.log", clm.dir);
        FILE *f = fopen(p, "r");
        if (f) {
            char line[1024];
            printf("---- clm.log (last lines) ----\n");
            static char ring[40][1024];
            int n = 0;
            while (fgets(line, sizeof line, f))
                snprintf(ring[n++ % 40], sizeof ring[0], "%s", line);
            for (int i = n > 40 ? n - 40 : 0; i < n; i++)
                fputs(ring[i % 40], stdout);
            fclose(f);
        }
    }
    kill_nm();
}

static void write_file(const char *name, const char *text, mode_t mode)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK_NE(f, NULL, "write %s", name);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static int count_lines(const char *name, const char *needle)
{
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* ---- calls to the node manager's own API ---- */

static long nm_call(const char *method, const char *path, const char *token, json_t **ans)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", nm_base, path);
    long status = 0;
    json_t *a = NULL;
    call_err[0] = 0;
    if (flyt_http_call(method, url, token, NULL, &status, &a, call_err, sizeof call_err) < 0)
        status = -1;
    if (ans)
        *ans = a;
    else
        json_decref(a);
    return status;
}

static long nm_post(const char *path, const char *token, const char *body)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", nm_base, path);
    json_error_t je;
    json_t *b = json_loads(body, 0, &je);
    CHECK_NE(b, NULL, "test body is JSON: %s", body);
    long status = 0;
    call_err[0] = 0;
    if (flyt_http_call("POST", url, token, b, &status, NULL, call_err, sizeof call_err) < 0)
        status = -1;
    json_decref(b);
    return status;
}

/* The node manager's entry for a session, or NULL (json_decref *all after use). */
static json_t *nm_server(const char *sid, json_t **all)
{
    *all = NULL;
    if (nm_call("GET", "/v1/servers", manager_token, all) != 200)
        return NULL;
    json_t *arr = json_object_get(*all, "servers");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        const char *id = json_string_value(json_object_get(o, "session_id"));
        if (id && strcmp(id, sid) == 0)
            return o;
    }
    return NULL;
}

static int nm_servers_count(void)
{
    json_t *a = NULL;
    int n = -1;
    if (nm_call("GET", "/v1/servers", manager_token, &a) == 200)
        n = (int)json_array_size(json_object_get(a, "servers"));
    json_decref(a);
    return n;
}

/* ---- raw frames to a server over TCP ---- */

static int tcp_connect(const char *endpoint)
{
    char host[64];
    int port = 0;
    /* the TCP one of its alternatives (a Unix socket may come first) */
    const char *tcp = strstr(endpoint, "tcp://");
    CHECK(tcp, "endpoint %s parses", endpoint);
    CHECK_EQ(sscanf(tcp, "tcp://%63[^:]:%d", host, &port), 2, "endpoint %s parses", endpoint);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    inet_pton(AF_INET, host, &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One request; the reply's result (-1000: no reply), its body after flyt_reply in rep. */
static int frame_call(int fd, uint16_t op, const void *req, size_t len, const void *data,
                      size_t dlen, void *rep, size_t replen)
{
    static uint32_t seq = 1;
    struct flyt_frame_hdr h = {(uint32_t)(len + dlen), op, 0, seq++, 0};
    char buf[4096];
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, req, len);
    if (dlen)
        memcpy(buf + sizeof h + len, data, dlen);
    if (write(fd, buf, sizeof h + len + dlen) != (ssize_t)(sizeof h + len + dlen))
        return -1000;
    struct flyt_frame_hdr rh;
    struct flyt_reply r;
    do { /* frames of the server's own (SHARE_CHANGED after a resize) are not the reply */
        if (read_full(fd, &rh, sizeof rh) != 0 || rh.length < sizeof r || rh.length > sizeof buf ||
            read_full(fd, buf, rh.length) != 0)
            return -1000;
    } while (!(rh.flags & FLYT_F_REPLY));
    memcpy(&r, buf, sizeof r);
    if (rep) {
        memset(rep, 0, replen);
        size_t n = rh.length - sizeof r < replen ? rh.length - sizeof r : replen;
        memcpy(rep, buf + sizeof r, n);
    }
    return r.result;
}

static int hello(int fd, flyt_rep_hello *rep)
{
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = FLYT_PROTO_MINOR;
    h.client_pid = (uint32_t)getpid();
    snprintf(h.client_host, sizeof h.client_host, "test_node");
    return frame_call(fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, rep, sizeof *rep);
}

static int auth(int fd, const char *token)
{
    flyt_req_auth a = {(uint32_t)strlen(token), 0};
    return frame_call(fd, FLYT_OP_AUTH, &a, sizeof a, token, strlen(token), NULL, 0);
}

/* ---- processes ---- */

static int alive(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], st[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *rp = strrchr(st, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z'; /* a zombie is not running */
}

/* pid's command line, arguments joined by spaces, into cmd; 0, or -1 when it is gone. */
static int cmdline_of(int pid, char *cmd, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(cmd, 1, cap - 1, f);
    fclose(f);
    for (size_t i = 0; i < len; i++)
        if (!cmd[i])
            cmd[i] = ' ';
    cmd[len] = 0;
    return 0;
}

static int cmdline_has(pid_t pid, const char *text)
{
    char cmd[8192];
    return cmdline_of((int)pid, cmd, sizeof cmd) == 0 && strstr(cmd, text) != NULL;
}

/* Processes whose command line mentions our directory (servers, MPS stand-ins). */
static int leftovers(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid() || pid == nm_pid || pid == clm.pid)
            continue;
        char cmd[4096];
        if (cmdline_of(pid, cmd, sizeof cmd) != 0)
            continue;
        if (strstr(cmd, dir) && alive(pid)) {
            printf("        left running: %d %s\n", pid, cmd);
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static int state_files(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/state", dir);
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))  /* the image cache lives there too, by default */
        n += e->d_name[0] != '.' && strcmp(e->d_name, "modules") != 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- conditions to wait for ---- */

static int node_ready(void *arg)
{
    (void)arg;
    json_t *a = NULL;
    int ok = call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a) == 200 &&
             jstr(a, "node.state") && strcmp(jstr(a, "node.state"), "ready") == 0 &&
             json_array_size(json_object_get(json_object_get(a, "node"), "gpus")) == 2;
    json_decref(a);
    return ok;
}

static char want_sid[80], want_state[32];
static int session_state_is(void *arg)
{
    (void)arg;
    char path[200];
    snprintf(path, sizeof path, "/v1/sessions/%s", want_sid);
    json_t *a = NULL;
    int ok = call(&clm, "GET", path, clm.op_token, NULL, &a) == 200 && jstr(a, "session.state") &&
             strcmp(jstr(a, "session.state"), want_state) == 0;
    json_decref(a);
    return ok;
}

static int server_gone(void *arg)
{
    json_t *all;
    json_t *o = nm_server((const char *)arg, &all);
    json_decref(all);
    return o == NULL && all != NULL;
}

static int server_connected(void *arg)
{
    json_t *all;
    json_t *o = nm_server((const char *)arg, &all);
    int c = o && json_is_true(json_object_get(o, "connected"));
    json_decref(all);
    return c;
}

static int server_unconnected(void *arg)
{
    json_t *all;
    json_t *o = nm_server((const char *)arg, &all);
    int c = o && json_is_false(json_object_get(o, "connected"));
    json_decref(all);
    return c;
}

/* Whether node n1's last_heartbeat differs from what the previous call saw. */
static int heartbeat_moved(void)
{
    static char last[64];
    json_t *a = NULL;
    int changed = 0;
    if (call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a) == 200) {
        const char *t = jstr(a, "node.last_heartbeat");
        changed = t && strcmp(t, last) != 0;
        if (t)
            snprintf(last, sizeof last, "%s", t);
    }
    json_decref(a);
    return changed;
}

/* The session of process pid of the VM (want: 201 a new one, 200 the one it holds); its
 * id, endpoint and a fresh token. */
static void session_of(const char *vm_token, int pid, long want, char *sid, char *endpoint,
                       char *token)
{
    char body[64];
    snprintf(body, sizeof body, "{\"pid\": %d}", pid);
    json_t *a = NULL;
    long st = call(&clm, "POST", "/v1/sessions", vm_token, body, &a);
    CHECK_EQ(st, want,
          "POST /v1/sessions for pid %d: %ld %s", pid, st, call_err);
    CHECK(jstr(a, "session.id") && jstr(a, "session.endpoint") && jstr(a, "token"),
          "POST /v1/sessions for pid %d: %ld %s", pid, st, call_err);
    snprintf(sid, 80, "%s", jstr(a, "session.id"));
    snprintf(endpoint, 128, "%s", jstr(a, "session.endpoint"));
    snprintf(token, 512, "%s", jstr(a, "token"));
    printf("        session %s at %s\n", sid, endpoint);
    json_decref(a);
}

/* A new session for the VM; its id, endpoint and token. */
static void new_session(const char *vm_token, int pid, char *sid, char *endpoint, char *token)
{
    session_of(vm_token, pid, 201, sid, endpoint, token);
}

static pid_t server_pid_of(const char *sid)
{
    json_t *all;
    json_t *o = nm_server(sid, &all);
    pid_t p = o ? (pid_t)json_integer_value(json_object_get(o, "pid")) : 0;
    json_decref(all);
    return p;
}

/* Runs the client test program through the Flyt client library. */
static int run_client(const char *endpoint, const char *token, int quiet)
{
    char log[512];
    snprintf(log, sizeof log, "%s/client.log", dir);
    pid_t p = fork();
    if (p == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("FLYT_SERVER", endpoint, 1);
        if (token)
            setenv("FLYT_SESSION_TOKEN", token, 1);
        else
            unsetenv("FLYT_SESSION_TOKEN");
        /* Flyt's driver first, then NVIDIA's runtime */
        char libpath[8300];
        snprintf(libpath, sizeof libpath, "%s:%s", flyt_lib_dir, cuda_lib_dir);
        setenv("LD_LIBRARY_PATH", libpath, 1);
        alarm(120);
        execl(client_test, client_test, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(p, &st, 0);
    if (!quiet && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        dump("client.log");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whether the client library sends session tokens (FLYT_SESSION_TOKEN in its text). */
static int client_has_tokens(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/libcuda.so.1", flyt_lib_dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    static char buf[1 << 16];
    const char *needle = "FLYT_SESSION_TOKEN";
    size_t nl = strlen(needle), keep = 0, n;
    int found = 0;
    while (!found && (n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
        size_t len = keep + n;
        for (size_t i = 0; i + nl <= len && !found; i++)
            found = memcmp(buf + i, needle, nl) == 0;
        keep = len < nl ? len : nl - 1;
        memmove(buf, buf + len - keep, keep);
    }
    fclose(f);
    return found;
}

/* ---- live resize (docs/api.md "Live resize") ---- */

static long resize(const char *what, const char *id, const char *body, json_t **ans)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/%s/%s/resize", what, id);
    return call(&clm, "POST", path, clm.op_token, body, ans);
}

/* The tenant's SM count and memory size as a connected client reads them. */
static int seen_sms(int fd)
{
    flyt_req_device dev = {0, 0};
    flyt_rep_props props;
    if (frame_call(fd, FLYT_OP_DEVICE_PROPS, &dev, sizeof dev, NULL, 0, &props, sizeof props) != 0)
        return -1;
    struct cudaDeviceProp dp;
    memcpy(&dp, props.bytes, sizeof dp);
    return dp.multiProcessorCount;
}

static int alloc(int fd, uint64_t size, uint64_t *ptr)
{
    flyt_req_mem_alloc ma = {size, 0, 0};
    flyt_rep_u64 mr = {0};
    int r = frame_call(fd, FLYT_OP_MEM_ALLOC, &ma, sizeof ma, NULL, 0, &mr, sizeof mr);
    *ptr = mr.value;
    return r;
}

/* The GPU's allocated SM count as the cluster manager derives it. */
static long long gpu_sm_allocated(int gpu)
{
    json_t *a = NULL;
    char key[64];
    snprintf(key, sizeof key, "node.gpus.%d.sm_allocated", gpu);
    long long v = call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a) == 200 ? jint(a, key) : -1;
    json_decref(a);
    return v;
}

/* A VM and its token; its id in id (may be NULL). */
static void new_vm(const char *body, char *token, char *id)
{
    json_t *a = NULL;
    CHECK(call(&clm, "POST", "/v1/vms", clm.op_token, body, &a) == 201 && jstr(a, "token"),
          "POST /v1/vms %s: %s", body, call_err);
    snprintf(token, 80, "%s", jstr(a, "token"));
    if (id)
        snprintf(id, 80, "%s", jstr(a, "vm.id"));
    json_decref(a);
}

/* A connected, admitted client of a session: its fd. */
static int connect_session(const char *endpoint, const char *token)
{
    flyt_rep_hello hr;
    int fd = tcp_connect(endpoint);
    CHECK_GE(fd, 0, "connect to %s", endpoint);
    CHECK_EQ(hello(fd, &hr), 0, "HELLO at %s", endpoint);
    CHECK_EQ(auth(fd, token), 0, "AUTH at %s", endpoint);
    return fd;
}

/* The session's JSON field as text ("" when absent). */
static void session_field(const char *sid, const char *field, char *out, size_t len)
{
    char path[200];
    json_t *a = NULL;
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    out[0] = '\0';
    if (call(&clm, "GET", path, clm.op_token, NULL, &a) == 200) {
        char *s = json_dumps(json_object_get(json_object_get(a, "session"), field),
                             JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(out, len, "%s", s ? s : "");
        free(s);
    }
    json_decref(a);
}

static void release(const char *sid)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "DELETE", path, clm.op_token, NULL, NULL), 204, "release %s", sid);
}

static void check_resize(void)
{
    json_t *a = NULL;
    char vm_token[80], vm_id[80];
    new_vm("{\"vm_ip\": \"10.9.0.2\", \"host_ip\": \"127.0.0.1\", \"compute_units\": 16, "
           "\"memory\": \"1GiB\"}", vm_token, vm_id);
    /* A and B: two processes of one VM, on its one share */
    char sa[80], ea[128], ta[512], sb[80], eb[128], tb[512];
    new_session(vm_token, 5001, sa, ea, ta);
    new_session(vm_token, 5002, sb, eb, tb);
    int fa = connect_session(ea, ta), fb = connect_session(eb, tb);
    CHECK_EQ(seen_sms(fa), 16, "A sees 16 SMs");
    CHECK_EQ(seen_sms(fb), 16, "B sees 16 SMs");
    char ga[200], gb[200];
    session_field(sa, "sm_groups", ga, sizeof ga);
    session_field(sb, "sm_groups", gb, sizeof gb);
    CHECK_STR_EQ(ga, gb, "A and B run on the VM's same SM groups");
    char path[200];
    snprintf(path, sizeof path, "/v1/sessions/%s", sa);
    CHECK_EQ(call(&clm, "GET", path, clm.op_token, NULL, &a), 200, "GET A");
    int gpu = (int)jint(a, "session.gpu_index");
    json_decref(a);
    long long before = gpu_sm_allocated(gpu);
    CHECK_EQ(before, 16, "the GPU holds the VM's 16 SMs once");

    CHECK_EQ(resize("sessions", sa, "{\"sm_delta\": 16}", &a), 200,
          "resize A +16: 32 SMs, granted in full, applied by its connected session: %s", call_err);
    CHECK_EQ(jint(a, "session.sm_count"), 32,
          "resize A +16: 32 SMs, granted in full, applied by its connected session: %s", call_err);
    CHECK_STR_EQ(jstr(a, "granted"), "full",
          "resize A +16: 32 SMs, granted in full, applied by its connected session: %s", call_err);
    CHECK_EQ(jint(a, "node.applied"), 1,
          "resize A +16: 32 SMs, granted in full, applied by its connected session: %s", call_err);
    CHECK_EQ(jint(a, "vm_sessions"), 2, "the VM's share: both of its sessions resized");
    double in_force = json_real_value(json_object_get(json_object_get(a, "node"), "in_force_ms"));
    double apply = json_real_value(json_object_get(json_object_get(a, "node"), "apply_ms"));
    double e2e = json_real_value(json_object_get(a, "cluster_ms"));
    printf("        times: server apply %.3f ms, in force %.3f ms after the node posted it, "
           "%.3f ms end to end through the cluster\n", apply, in_force, e2e);
    CHECK_LT(e2e, 1000, "times recorded");
    CHECK_LE(in_force, e2e, "times recorded");
    json_decref(a);
    CHECK_EQ(seen_sms(fa), 32, "the running session now reports 32 SMs (no reconnect)");
    CHECK_EQ(seen_sms(fb), 32, "and so does B, the VM's other process");
    CHECK_EQ(gpu_sm_allocated(gpu), before + 16, "the GPU's allocated SMs grew by 16, once");
    CHECK_EQ(resize("sessions", sa, "{\"sm_count\": 8}", &a), 200,
          "resize A to 8: %s", call_err);
    CHECK_EQ(jint(a, "session.sm_count"), 8,
          "resize A to 8: %s", call_err);
    json_decref(a);
    CHECK_EQ(seen_sms(fa), 8, "down to 8, capacity freed");
    CHECK_EQ(seen_sms(fb), 8, "down to 8, capacity freed");
    CHECK_EQ(gpu_sm_allocated(gpu), before - 8, "down to 8, capacity freed");

    static const struct {
        const char *body, *want;
        long status;
    } bad[] = {
        {"{\"sm_count\": 6}", "granularity, 4 SMs per group", 400},
        {"{\"sm_count\": 136}", "more than GPU", 400},
        {"{\"sm_delta\": -8}", "at least one group", 400},
        {"{\"memory_quota\": 0}", "bytes of memory", 400},
        {"{\"sm_count\": 8, \"sm_delta\": 4}", "not both", 400},
        {"{}", "at least one", 400},
        {"{\"sm_count\": 136}", "more than GPU", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long st = resize("sessions", sa, bad[i].body, NULL);
        CHECK_EQ(st, bad[i].status,
              "resize %s: %ld %s", bad[i].body, st, call_err);
        CHECK(strstr(call_err, bad[i].want),
              "resize %s: %ld %s", bad[i].body, st, call_err);
    }
    CHECK_EQ(resize("sessions", "s-none", "{\"sm_count\": 8}", NULL), 404, "an unknown session: 404");
    CHECK_EQ(gpu_sm_allocated(gpu), before - 8, "refusals changed nothing");

    /* C: another VM on the same GPU (the other one is full) */
    char vm2_token[80], sc[80], ec[128], tc[512];
    new_vm("{\"vm_ip\": \"10.9.0.3\", \"host_ip\": \"127.0.0.1\", \"compute_units\": 16, "
           "\"memory\": \"1GiB\"}", vm2_token, NULL);
    new_session(vm2_token, 5003, sc, ec, tc);
    CHECK_EQ(resize("sessions", sa, "{\"sm_count\": 132}", NULL), 409, "132 SMs while C holds 16: "
          "409 (%s)", call_err);
    CHECK(strstr(call_err, "add partial"), "132 SMs while C holds 16: 409 (%s)", call_err);
    CHECK_EQ(resize("sessions", sa, "{\"sm_count\": 132, \"partial\": true}", &a), 200,
          "with partial: 116 of 132 SMs (C holds 16): %s", call_err);
    CHECK_STR_EQ(jstr(a, "granted"), "partial",
          "with partial: 116 of 132 SMs (C holds 16): %s", call_err);
    CHECK_EQ(jint(a, "session.sm_count"), 116,
          "with partial: 116 of 132 SMs (C holds 16): %s", call_err);
    json_decref(a);
    CHECK_EQ(seen_sms(fa), 116, "the GPU is full, the VM counted once");
    CHECK_EQ(seen_sms(fb), 116, "the GPU is full, the VM counted once");
    CHECK_EQ(gpu_sm_allocated(gpu), 132, "the GPU is full, the VM counted once");
    CHECK_EQ(resize("sessions", sc, "{\"sm_delta\": 4}", NULL), 409, "C cannot grow now: 409");

    printf("== live resize: memory below use\n");
    uint64_t p1 = 0, p2 = 0;
    char pattern[64];
    memset(pattern, 0x5a, sizeof pattern);
    CHECK_EQ(alloc(fa, 512 << 20, &p1), 0, "A allocates 512 MiB");
    CHECK(p1, "A allocates 512 MiB");
    flyt_req_memcpy mc = {p1, 0, sizeof pattern, 0};
    CHECK_EQ(frame_call(fa, FLYT_OP_MEMCPY_HTOD, &mc, sizeof mc, pattern, sizeof pattern, NULL, 0), 0,
          "and writes to it");
    CHECK_EQ(resize("sessions", sa, "{\"memory_quota\": 268435456}", &a), 200, "quota lowered to 256 MiB: %s", call_err);
    CHECK_EQ(jint(a, "session.memory_quota"), 256 << 20, "quota lowered to 256 MiB: %s", call_err);
    json_decref(a);
    CHECK_EQ(alloc(fa, 1 << 20, &p2), 2, "a new allocation fails with out of memory");
    CHECK_EQ(alloc(fb, 1 << 20, &p2), 2, "in B too: the VM's memory is used up");
    mc.dst = 0;
    mc.src = p1;
    struct {
        flyt_rep_none none; /* the reply struct, then the bytes */
        char bytes[sizeof pattern];
    } back;
    CHECK_EQ(frame_call(fa, FLYT_OP_MEMCPY_DTOH, &mc, sizeof mc, NULL, 0, &back, sizeof back), 0, "the data is intact");
    CHECK(memcmp(back.bytes, pattern, sizeof pattern) == 0, "the data is intact");
    CHECK_EQ(resize("sessions", sa, "{\"memory_quota\": 4294967296}", NULL), 409,
          "4 GiB while C holds 1 GiB: refused");
    CHECK_EQ(resize("sessions", sa, "{\"memory_quota\": 4294967296, \"partial\": true}", &a), 200, "with partial: 3 GiB: %s", call_err);
    CHECK_EQ(jint(a, "session.memory_quota"), 3 * GiB, "with partial: 3 GiB: %s", call_err);
    json_decref(a);
    CHECK_EQ(alloc(fa, 1 << 20, &p2), 0, "allocations work again");
    CHECK_EQ(alloc(fb, 1 << 20, &p2), 0, "in B too");

    printf("== live resize of a VM's share\n");
    CHECK_EQ(resize("vms", vm_id, "{\"sm_count\": 8, \"memory_quota\": 1073741824}", &a), 200, "the VM to 8 SMs: %s", call_err);
    CHECK_EQ(jint(a, "resized"), 2, "the VM to 8 SMs: both sessions: %s", call_err);
    json_decref(a);
    CHECK_EQ(seen_sms(fa), 8, "each sees 8 SMs; the GPU holds 8 SMs for the VM and 16 for C");
    CHECK_EQ(seen_sms(fb), 8, "each sees 8 SMs; the GPU holds 8 SMs for the VM and 16 for C");
    CHECK_EQ(gpu_sm_allocated(gpu), 24, "each sees 8 SMs; the GPU holds 8 SMs for the VM and 16 for C");
    CHECK_EQ(resize("vms", "vm-none", "{\"sm_count\": 8}", NULL), 404, "an unknown VM: 404");
    close(fa);
    close(fb);
    CHECK_EQ(call(&clm, "GET", "/v1/events", clm.op_token, NULL, &a), 200, "GET /v1/events");
    char *ev = json_dumps(a, 0);
    CHECK(ev && strstr(ev, "session.resized"), "the store recorded session.resized events");
    free(ev);
    json_decref(a);
    release(sa);
    release(sb);
    release(sc);
}

/* issue 8, attack 3: the VM's processes together stay within its memory. */
static int vm_alloc_ok(void *arg)
{
    uint64_t p = 0;
    return alloc(*(int *)arg, 512 << 20, &p) == 0;
}

static void check_vm_memory(void)
{
    char vm_token[80], vm_id[80];
    new_vm("{\"vm_ip\": \"10.9.0.4\", \"host_ip\": \"127.0.0.1\", \"compute_units\": 8, "
           "\"memory\": \"1GiB\"}", vm_token, vm_id);
    char sd[80], ed[128], td[512], se[80], ee[128], te[512], sf[80], ef[128], tf[512];
    new_session(vm_token, 6001, sd, ed, td);
    new_session(vm_token, 6002, se, ee, te);
    char quota_file[700];
    snprintf(quota_file, sizeof quota_file, "%s/state/vm-%s.quota", dir, vm_id);
    struct stat st;
    CHECK_EQ(stat(quota_file, &st), 0, "the VM's quota page %s, 0600", quota_file);
    CHECK_EQ(st.st_mode & 0777, 0600, "the VM's quota page %s, 0600", quota_file);
    char arg[800];
    snprintf(arg, sizeof arg, "--vm-quota %s", quota_file);
    CHECK(cmdline_has(server_pid_of(sd), arg) && cmdline_has(server_pid_of(se), arg),
          "both servers of the VM get it");
    int fd = connect_session(ed, td), fe = connect_session(ee, te);
    uint64_t p = 0;
    CHECK_EQ(alloc(fd, 768 << 20, &p), 0, "D allocates 768 MiB of the VM's 1 GiB");
    CHECK_EQ(alloc(fe, 512 << 20, &p), 2, "E cannot take 512 MiB more: out of memory");
    CHECK_EQ(alloc(fe, 256 << 20, &p), 0, "E takes the 256 MiB left");
    CHECK_EQ(alloc(fd, 1 << 20, &p), 2, "the VM's 1 GiB is used up, for D too");
    close(fd);
    CHECK(wait_for(vm_alloc_ok, &fe, 5000), "D's client ended: E can take 512 MiB of what D held");
    new_session(vm_token, 6003, sf, ef, tf);
    int ff = connect_session(ef, tf);
    CHECK_EQ(alloc(ff, 512 << 20, &p), 2, "F, a third process, finds the VM's memory used (E 768 MiB)");
    CHECK_EQ(alloc(ff, 256 << 20, &p), 0, "F takes the 256 MiB left");
    pid_t spid = server_pid_of(se);
    CHECK_EQ(kill(spid, SIGKILL), 0, "SIGKILL to E's server pid %d", (int)spid);
    CHECK(wait_for(vm_alloc_ok, &ff, 5000), "E's server died: F can take 512 MiB of what E held");
    close(fe);
    close(ff);
    release(sd);
    release(sf);
    CHECK(wait_for(server_gone, sd, 5000) && wait_for(server_gone, sf, 5000) &&
          wait_for(server_gone, se, 5000), "the VM's servers are gone");
    CHECK_NE(stat(quota_file, &st), 0, "and so is its quota page");
}

/* Starts the node manager on nm.conf (its log appended to nm.log); its API port. */
static int start_nm(const char *nm_bin)
{
    char conf_path[512], port_path[512], log_path[512];
    snprintf(conf_path, sizeof conf_path, "%s/nm.conf", dir);
    snprintf(port_path, sizeof port_path, "%s/nm.port", dir);
    snprintf(log_path, sizeof log_path, "%s/nm.log", dir);
    unlink(port_path);
    nm_pid = fork();
    if (nm_pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(nm_bin, nm_bin, "--config", conf_path, "--port-file", port_path, (char *)NULL);
        _exit(127);
    }
    int nm_port = 0;
    for (int i = 0; i < 200 && !nm_port; i++) {
        FILE *f = fopen(port_path, "r");
        if (f) {
            if (fscanf(f, "%d", &nm_port) != 1)
                nm_port = 0;
            fclose(f);
        }
        if (!nm_port) {
            int st;
            if (waitpid(nm_pid, &st, WNOHANG) == nm_pid) {
                nm_pid = 0;
                break;
            }
            msleep(50);
        }
    }
    CHECK_GT(nm_port, 0, "flyt-node-manager listens (port %d)", nm_port);
    snprintf(nm_base, sizeof nm_base, "http://127.0.0.1:%d", nm_port);
    return nm_port;
}

/* ---- a node manager's restart (kill -9): its servers adopted ---- */

static int server_adopted(void *arg)
{
    json_t *all;
    json_t *o = nm_server((const char *)arg, &all);
    int ok = o && json_is_true(json_object_get(o, "adopted"));
    json_decref(all);
    return ok;
}

/* A process that is no flyt-server, and the record and status page of session sid naming
 * it, start time and all, as an earlier run would have left them had the pid been reused. */
static pid_t plant_decoy(const char *sid, int port)
{
    pid_t p = fork();
    if (p == 0) {
        execlp("sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    CHECK_GT(p, 0, "fork a decoy");
    char exe[64], target[512] = "";
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)p);
    for (int i = 0; i < 100 && !strstr(target, "sleep"); i++) { /* once it runs sleep */
        ssize_t n = readlink(exe, target, sizeof target - 1);
        target[n > 0 ? n : 0] = 0;
        msleep(10);
    }
    unsigned long long start = 0;
    int ended = 0;
    CHECK_EQ(flyt_proc_start_time(p, &start, &ended), 0, "the decoy %d runs", (int)p);
    static struct flyt_server_status page;
    memset(&page, 0, sizeof page);
    page.magic = FLYT_STATUS_MAGIC;
    page.version = FLYT_STATUS_VERSION;
    page.server_pid = (uint32_t)p;
    page.listen_port = (uint32_t)port;
    char path[600];
    snprintf(path, sizeof path, "%s/state/%s.status", dir, sid);
    FILE *f = fopen(path, "w");
    CHECK(f && fwrite(&page, sizeof page, 1, f) == 1, "write %s", path);
    fclose(f);
    json_t *a = NULL;
    CHECK_EQ(call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a), 200, "GPU 0's UUID");
    json_t *rec = json_pack("{s:s,s:i,s:I,s:i,s:s,s:i,s:s,s:[i],s:i,s:i,s:s}", "session_id", sid,
                            "pid", (int)p, "start_time", (json_int_t)start, "gpu_index", 0,
                            "gpu_uuid", jstr(a, "node.gpus.0.uuid"), "port", port, "sock", "",
                            "sm_groups", 0, "sm_count", 4, "memory_quota", 1024, "vm_id", "");
    json_decref(a);
    snprintf(path, sizeof path, "%s/state/%s.server", dir, sid);
    CHECK_EQ(json_dump_file(rec, path, 0), 0, "write %s", path);
    json_decref(rec);
    return p;
}

static long long session_gpu(const char *sid)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    json_t *a = NULL;
    long long g = call(&clm, "GET", path, clm.op_token, NULL, &a) == 200 ? jint(a, "session.gpu_index") : -1;
    json_decref(a);
    return g;
}

/* The session goes on, its capacity held once, its client's connection fd working. */
static void check_session_goes_on(const char *sid, int gpu, long long held, int fd, int mib)
{
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    snprintf(want_state, sizeof want_state, "active");
    CHECK(session_state_is(NULL), "session %s is still active", sid);
    CHECK_EQ(gpu_sm_allocated(gpu), held, "GPU %d: %lld SMs allocated, as before", gpu, held);
    uint64_t ptr = 0;
    CHECK_EQ(alloc(fd, 16 << 20, &ptr), 0, "its client's connection still works (16 MiB more)");
    json_t *all;
    json_t *o = nm_server(sid, &all);
    CHECK(o, "the node manager reports its memory");
    CHECK_EQ(jint(o, "memory_used"), (long long)(mib + 16) << 20, "the node manager reports its memory");
    json_decref(all);
}

static int node_state_is_ready(void)
{
    json_t *a = NULL;
    int ok = call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a) == 200 &&
             strcmp(jstr(a, "node.state"), "ready") == 0;
    json_decref(a);
    return ok;
}

/* A node token rotated with a grace: the node manager switches by itself (the file, read
 * again at the first 401), no heartbeat is missed; the old token works during the grace
 * and not after; a revoked token is refused at once. */
static void check_node_rotation(void)
{
    printf("== node token rotation without downtime, revocation\n");
    char old[128];
    snprintf(old, sizeof old, "%s", node_token);
    json_t *a = NULL;
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/rotate-token", clm.op_token, "{\"grace_s\": 2}", &a),
             200, "rotate-token: %s", call_err);
    snprintf(node_token, sizeof node_token, "%s", jstr(a, "token") ? jstr(a, "token") : "");
    json_decref(a);
    CHECK_EQ((int)strlen(node_token), 64, "a new token of 64 hex characters");
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/heartbeat", old, "{\"sessions\": []}", NULL), 200,
             "the old token still works during the grace");
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/heartbeat", node_token, "{\"sessions\": []}", NULL),
             200, "the new one works");
    char line[160];
    snprintf(line, sizeof line, "%s\n", node_token);
    write_file("node.token", line, 0600); /* no SIGHUP: the 401 after the grace reads it */
    int refused_before = count_lines("nm.log", "heartbeat refused");
    msleep(2600);
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/heartbeat", old, "{\"sessions\": []}", NULL), 401,
             "after the grace the old token is refused");
    heartbeat_moved();
    msleep(900);
    CHECK(heartbeat_moved(), "the node manager heartbeats on with the new token");
    CHECK(node_state_is_ready(), "node n1 stays ready");
    CHECK_EQ(count_lines("nm.log", "heartbeat refused"), refused_before,
             "not one heartbeat was refused across the rotation");
    CHECK_GE(count_lines("nm.log", "calling again with it"), 1,
             "the node manager read its token file again at the first 401");

    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/rotate-token", clm.op_token, "{\"grace_s\": 600}",
                  &a), 200, "rotate again, 10 min grace: %s", call_err);
    char newest[128];
    snprintf(newest, sizeof newest, "%s", jstr(a, "token") ? jstr(a, "token") : "");
    json_decref(a);
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/revoke-token", clm.op_token,
                  "{\"previous_only\": true}", NULL), 200, "revoke the previous one only");
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/heartbeat", node_token, "{\"sessions\": []}", NULL),
             401, "the previous token is refused at once");
    snprintf(line, sizeof line, "%s\n", newest);
    write_file("node.token", line, 0600);
    kill(nm_pid, SIGHUP); /* and this time the operator tells it */
    snprintf(node_token, sizeof node_token, "%s", newest);
    msleep(800);
    CHECK(node_state_is_ready(), "node n1 is still ready");
    CHECK_GE(count_lines("nm.log", "a new token, in use from now on"), 1,
             "SIGHUP read the node token file again");
    CHECK_EQ(call(&clm, "GET", "/v1/events?limit=10000", clm.op_token, NULL, &a), 200, "events");
    char *text = json_dumps(a, 0);
    CHECK(text && strstr(text, "node.token_rotated") && strstr(text, "node.token_revoked"),
          "node.token_rotated and node.token_revoked events");
    free(text);
    json_decref(a);
}

/* A session's tokens: an expired one and, after revoke-tokens, every earlier one is refused
 * at the server's admission; a fresh one (the client manager's next ask) is admitted. */
static void check_session_revocation(const char *vm_token, const char *sid,
                                     const char *endpoint, char *token, size_t token_cap)
{
    printf("== session tokens: expired and revoked ones refused at admission\n");
    unsigned char key[64];
    size_t klen = 0;
    char expired[512];
    CHECK_EQ(flyt_hex_decode(session_key, key, sizeof key, &klen), 0, "the node's session key");
    CHECK_EQ(flyt_session_token_make(key, klen, sid, (long long)time(NULL) - 1, expired,
                                     sizeof expired), 0, "a token that expired a second ago");
    int fd = tcp_connect(endpoint);
    flyt_rep_hello hr;
    CHECK(fd >= 0 && hello(fd, &hr) == 0, "connected");
    CHECK_EQ(auth(fd, expired), T_NOT_PERMITTED, "an expired session token is refused");
    close(fd);
    int held = tcp_connect(endpoint);   /* admitted before the revocation: carries on */
    CHECK(held >= 0 && hello(held, &hr) == 0 && auth(held, token) == 0, "admitted");
    char path[256];
    snprintf(path, sizeof path, "/v1/sessions/%s/revoke-tokens", sid);
    json_t *a = NULL;
    CHECK_EQ(call(&clm, "POST", path, clm.op_token, NULL, &a), 200, "revoke-tokens: %s",
             call_err);
    CHECK_EQ(jint(a, "token_epoch"), 1, "the session's token epoch is 1");
    json_decref(a);
    fd = tcp_connect(endpoint);
    CHECK(fd >= 0 && hello(fd, &hr) == 0, "connected");
    CHECK_EQ(auth(fd, token), T_NOT_PERMITTED, "a token issued before the revocation is refused");
    close(fd);
    flyt_req_device dev = {0, 0};
    flyt_rep_props props;
    CHECK_EQ(frame_call(held, FLYT_OP_DEVICE_PROPS, &dev, sizeof dev, NULL, 0, &props,
                        sizeof props), 0, "the connection admitted before carries on");
    close(held);
    char sid2[80], ep2[128], fresh[512];
    session_of(vm_token, 4242, 200, sid2, ep2, fresh);   /* the same process asks again */
    CHECK_STR_EQ(sid2, sid, "the same session");
    fd = tcp_connect(endpoint);
    CHECK(fd >= 0 && hello(fd, &hr) == 0, "connected");
    CHECK_EQ(auth(fd, fresh), 0, "a token issued after the revocation is admitted");
    close(fd);
    snprintf(token, token_cap, "%s", fresh);   /* the rest of the test uses the fresh one */
}

static void check_restart(const char *nm_bin, const char *vm_token, int decoy_port)
{
    printf("== kill -9 of the node manager: its servers adopted, their sessions go on\n");
    char sid[80], endpoint[128], token[512];
    new_session(vm_token, 4246, sid, endpoint, token);
    pid_t spid = server_pid_of(sid);
    int fd = tcp_connect(endpoint);
    flyt_rep_hello hr;
    uint64_t ptr;
    CHECK_GE(fd, 0, "a client connects");
    CHECK_EQ(hello(fd, &hr), 0, "a client connects");
    CHECK_EQ(auth(fd, token), 0, "a client connects");
    CHECK_EQ(alloc(fd, 64 << 20, &ptr), 0, "and holds 64 MiB");
    int gpu = (int)session_gpu(sid);
    long long held = gpu_sm_allocated(gpu);
    CHECK_GT(held, 0, "GPU %d: %lld SMs allocated", gpu, held);
    kill_nm();
    CHECK(alive(spid), "its server (pid %d) outlives the node manager", (int)spid);
    pid_t decoy = plant_decoy("s-decoy", decoy_port);
    start_nm(nm_bin);
    CHECK(wait_for(server_adopted, sid, 10000), "the new node manager adopted session %s", sid);
    CHECK_EQ(server_pid_of(sid), spid, "the same server process, pid %d", (int)spid);
    CHECK(wait_for(node_ready, NULL, 10000), "node n1 ready");
    msleep(1200); /* heartbeats of the new run */
    check_session_goes_on(sid, gpu, held, fd, 64);
    CHECK(alive(decoy), "a pid reused by another program is not killed");
    json_t *all;
    CHECK(!nm_server("s-decoy", &all) && all, "and not adopted");
    json_decref(all);
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/state/s-decoy.server", dir);
    CHECK_NE(stat(path, &st), 0, "its files are removed");
    kill(decoy, SIGKILL);
    waitpid(decoy, NULL, 0);

    printf("== kill -9 of the cluster manager: its restart keeps the session\n");
    clm_kill_restart(&clm);
    msleep(1500); /* heartbeats reach the new process */
    CHECK(node_ready(NULL), "node n1 still ready");
    check_session_goes_on(sid, gpu, held, fd, 80);

    printf("== a release stops the adopted server\n");
    close(fd);
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "DELETE", path, vm_token, NULL, NULL), 204, "DELETE %s: %s", path, call_err);
    CHECK(wait_for(server_gone, sid, 5000), "the node manager no longer has it");
    CHECK(!alive(spid), "its process is gone");
    CHECK_LT(gpu_sm_allocated(gpu), held, "GPU %d: its SMs are free again", gpu);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 7) {
        fprintf(stderr, "usage: %s NODE_MANAGER CLUSTER_MANAGER FLYT_SERVER [CLIENT_TEST "
                        "FLYT_LIB_DIR CUDA_LIB_DIR]\n", argv[0]);
        return 2;
    }
    /* absolute paths: the daemons resolve relative ones against their config's directory */
    static char abs[6][4096];
    for (int i = 1; i < argc; i++)
        CHECK_NE(realpath(argv[i], abs[i - 1]), NULL, "%s exists", argv[i]);
    const char *nm_bin = abs[0], *clm_bin = abs[1], *server_bin = abs[2];
    if (argc == 7) {
        client_test = abs[3];
        flyt_lib_dir = abs[4];
        cuda_lib_dir = abs[5];
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    srand((unsigned)getpid());
    alarm(170);
    snprintf(dir, sizeof dir, "/tmp/flyt-nm-test.XXXXXX");
    CHECK_NE(mkdtemp(dir), NULL, "temp dir %s", dir);
    atexit(at_exit);

    printf("== a cluster manager and a node\n");
    char store[512], extra[256];
    snprintf(store, sizeof store, "sqlite:%s/clm.db", dir);
    snprintf(extra, sizeof extra, "heartbeat_interval = 300ms\nnode_timeout = 5s\nidle_grace = 2s\n");
    clm_start(&clm, clm_bin, store, extra);
    json_t *a = NULL;
    CHECK(call(&clm, "POST", "/v1/nodes", clm.op_token, "{\"id\": \"n1\", \"host_ip\": \"127.0.0.1\"}",
               &a) == 201 && jstr(a, "token"),
          "POST /v1/nodes n1: %s", call_err);
    snprintf(node_token, sizeof node_token, "%s", jstr(a, "token"));
    json_decref(a);
    char tok_line[160];
    snprintf(tok_line, sizeof tok_line, "%s\n", node_token);
    write_file("node.token", tok_line, 0600);

    /* the manager token is only ever given to the node: register once as it to learn it
     * (it stays the same at later registrations) */
    char reg[512];
    snprintf(reg, sizeof reg, "{\"address\": \"http://127.0.0.1:9\", \"host_ip\": \"127.0.0.1\", "
             "\"gpus\": [], \"sessions\": []}");
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/n1/register", node_token, reg, &a), 200,
          "the test learns the manager token: %s", call_err);
    CHECK(jstr(a, "manager_token"),
          "the test learns the manager token: %s", call_err);
    snprintf(manager_token, sizeof manager_token, "%s", jstr(a, "manager_token"));
    snprintf(session_key, sizeof session_key, "%s", jstr(a, "session_key"));
    json_decref(a);

    /* a stand-in for nvidia-cuda-mps-control: records each call */
    char script[1024];
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "if [ \"$1\" = -d ]; then what=start; else read -r what; fi\n"
             "echo \"$what $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY\" "
             ">> %s/mps.log\n",
             dir);
    write_file("fake-mps-control", script, 0755);

    /* the servers' ports, derived from the pid so that runs side by side do not collide */
    int port_base = 20000 + (int)(getpid() % 1000) * 41;
    char conf[4 * 4096 + 2048];
    snprintf(conf, sizeof conf,
             "# written by test_node\n"
             "node_id = n1\nnode_token_file = node.token\ncluster_manager = %s\n"
             "listen = 127.0.0.1:0\nserver_path = %s\n"
             "server_port_min = %d\nserver_port_max = %d\nserver_stop_grace = 3s\n"
             "state_dir = state\nbackend = host\nlog_level = debug\n"
             "mps = true\nmps_control = %s/fake-mps-control\nmps_pipe_dir = %s/mps-pipe\n"
             "mps_log_dir = %s/mps-log\n"
             "[test]\ngpus = 2\ngpu_name = \"Test GPU\"\ngpu_sm_count = 132\n"
             "gpu_sm_granularity = 4\ngpu_memory = 4GiB\n",
             clm.base, server_bin, port_base, port_base + 40, dir, dir, dir);
    write_file("nm.conf", conf, 0644);

    printf("== the node manager starts and registers\n");
    int nm_port = start_nm(nm_bin);
    CHECK(wait_for(node_ready, NULL, 10000), "the cluster manager sees node n1 ready with 2 GPUs");
    CHECK_EQ(call(&clm, "GET", "/v1/nodes/n1", clm.op_token, NULL, &a), 200, "GET /v1/nodes/n1");
    char want_addr[160];
    snprintf(want_addr, sizeof want_addr, "http://127.0.0.1:%d", nm_port);
    CHECK(jstr(a, "node.address"),
          "its address is %s", jstr(a, "node.address"));
    CHECK_STR_EQ(jstr(a, "node.address"), want_addr,
          "its address is %s", jstr(a, "node.address"));
    CHECK_EQ(jint(a, "node.gpus.1.sm_count"), 132,
          "GPU 1: %s %s, 132 SMs in groups of 4, 4 GiB", jstr(a, "node.gpus.1.name"),
          jstr(a, "node.gpus.1.uuid"));
    CHECK_EQ(jint(a, "node.gpus.1.sm_granularity"), 4,
          "GPU 1: %s %s, 132 SMs in groups of 4, 4 GiB", jstr(a, "node.gpus.1.name"),
          jstr(a, "node.gpus.1.uuid"));
    CHECK_EQ(jint(a, "node.gpus.1.memory_total"), 4 * GiB,
          "GPU 1: %s %s, 132 SMs in groups of 4, 4 GiB", jstr(a, "node.gpus.1.name"),
          jstr(a, "node.gpus.1.uuid"));
    CHECK_STR_EQ(jstr(a, "node.gpus.1.name"), "Test GPU",
          "GPU 1: %s %s, 132 SMs in groups of 4, 4 GiB", jstr(a, "node.gpus.1.name"),
          jstr(a, "node.gpus.1.uuid"));
    CHECK_EQ(strncmp(jstr(a, "node.gpus.1.uuid"), "GPU-", 4), 0,
          "GPU 1: %s %s, 132 SMs in groups of 4, 4 GiB", jstr(a, "node.gpus.1.name"),
          jstr(a, "node.gpus.1.uuid"));
    json_decref(a);
    CHECK_EQ(count_lines("mps.log", "start "), 2,
          "an MPS control daemon was started per GPU (own pipe directory, CUDA_VISIBLE_DEVICES=UUID)");
    CHECK_EQ(count_lines("mps.log", "/mps-pipe/gpu0"), 1,
          "an MPS control daemon was started per GPU (own pipe directory, CUDA_VISIBLE_DEVICES=UUID)");
    CHECK_EQ(count_lines("mps.log", "/mps-pipe/gpu1"), 1,
          "an MPS control daemon was started per GPU (own pipe directory, CUDA_VISIBLE_DEVICES=UUID)");
    CHECK_EQ(count_lines("mps.log", " GPU-"), 2,
          "an MPS control daemon was started per GPU (own pipe directory, CUDA_VISIBLE_DEVICES=UUID)");

    printf("== heartbeats\n");
    heartbeat_moved();
    msleep(1200);
    CHECK(heartbeat_moved(), "last_heartbeat moves on");
    check_node_rotation();

    printf("== the node manager's API takes only the manager token\n");
    CHECK_EQ(nm_call("GET", "/v1/servers", NULL, NULL), 401, "no token: 401");
    CHECK_EQ(nm_call("GET", "/v1/servers", node_token, NULL), 401, "the node token: 401");
    CHECK_EQ(nm_call("GET", "/v1/servers", clm.op_token, NULL), 401, "the operator token: 401");
    CHECK_EQ(nm_servers_count(), 0, "the manager token: 200, no servers");
    CHECK_EQ(nm_call("GET", "/v1/health", NULL, NULL), 200, "GET /v1/health needs no token");
    CHECK_EQ(nm_call("DELETE", "/v1/servers/s-nothing", manager_token, NULL), 404,
          "DELETE of an unknown session: 404");
    static const struct {
        const char *body, *what;
    } bad[] = {
        {"{\"session_id\": \"s-x\", \"gpu_index\": 7, \"sm_groups\": [0], \"sm_count\": 4, "
         "\"memory_quota\": 1024}", "a GPU the node does not have"},
        {"{\"session_id\": \"s-x\", \"gpu_index\": 0, \"sm_groups\": [33], \"sm_count\": 4, "
         "\"memory_quota\": 1024}", "an SM group the GPU does not have"},
        {"{\"session_id\": \"s-x\", \"gpu_index\": 0, \"sm_groups\": [1, 1], \"sm_count\": 8, "
         "\"memory_quota\": 1024}", "a group twice"},
        {"{\"session_id\": \"s-x\", \"gpu_index\": 0, \"sm_groups\": [1, 2], \"sm_count\": 4, "
         "\"memory_quota\": 1024}", "an sm_count that is not the groups'"},
        {"{\"session_id\": \"s-x\", \"gpu_index\": 0, \"sm_groups\": [1], \"sm_count\": 4, "
         "\"memory_quota\": 8589934592}", "more memory than the GPU has"},
        {"{\"session_id\": \"../etc\", \"gpu_index\": 0, \"sm_groups\": [1], \"sm_count\": 4, "
         "\"memory_quota\": 1024}", "a session id that is no file name"},
        {"[]", "a body that is no object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(nm_post("/v1/servers", manager_token, bad[i].body), 400, "POST /v1/servers with %s: %s",
              bad[i].what, call_err);
    CHECK_EQ(nm_post("/v1/servers", node_token,
                  "{\"session_id\": \"s-x\", \"gpu_index\": 0, \"sm_groups\": [1], "
                  "\"sm_count\": 4, \"memory_quota\": 1024}"), 401,
          "POST /v1/servers with the node token: 401");
    CHECK_EQ(nm_servers_count(), 0, "nothing was started");
    CHECK_EQ(state_files(), 0, "nothing was started");
    char cache[600];
    struct stat cache_st;
    snprintf(cache, sizeof cache, "%s/state/modules", dir);
    CHECK_EQ(stat(cache, &cache_st), 0,
          "the servers' image cache is state_dir/modules, private");
    CHECK(S_ISDIR(cache_st.st_mode),
          "the servers' image cache is state_dir/modules, private");
    CHECK_EQ((cache_st.st_mode & 077), 0,
          "the servers' image cache is state_dir/modules, private");

    printf("== a session: its server, admission with the session token\n");
    char vm_token[80], vm_id[80];
    CHECK(call(&clm, "POST", "/v1/vms", clm.op_token,
               "{\"vm_ip\": \"10.9.0.1\", \"host_ip\": \"127.0.0.1\", \"compute_units\": 132, "
               "\"memory\": \"1GiB\"}",
               &a) == 201 && jstr(a, "token") && jstr(a, "vm.id"),
          "POST /v1/vms: %s", call_err);
    snprintf(vm_token, sizeof vm_token, "%s", jstr(a, "token"));
    snprintf(vm_id, sizeof vm_id, "%s", jstr(a, "vm.id"));
    json_decref(a);
    char sid[80], endpoint[128], token[512];
    new_session(vm_token, 4242, sid, endpoint, token);
    pid_t spid = server_pid_of(sid);
    CHECK_GT(spid, 0, "the node manager lists its server, pid %d", (int)spid);
    CHECK(alive(spid), "the node manager lists its server, pid %d", (int)spid);
    char key_path[512];
    snprintf(key_path, sizeof key_path, "%s/state/%s.key", dir, sid);
    struct stat st;
    CHECK_EQ(stat(key_path, &st), 0, "its session key file is 0600");
    CHECK_EQ((st.st_mode & 0777), 0600, "its session key file is 0600");
    /* a cache shared by all tenants told each whether another had loaded an image */
    char vm_cache[700];
    snprintf(vm_cache, sizeof vm_cache, "--cache-dir %s/state/modules/vm-%s ", dir, vm_id);
    CHECK(cmdline_has(spid, vm_cache), "its image cache is the VM's own: %s", vm_cache);
    snprintf(vm_cache, sizeof vm_cache, "%s/state/modules/vm-%s", dir, vm_id);
    CHECK_EQ(stat(vm_cache, &st), 0,
          "the VM's cache folder is 0700");
    CHECK(S_ISDIR(st.st_mode),
          "the VM's cache folder is 0700");
    CHECK_EQ((st.st_mode & 0777), 0700,
          "the VM's cache folder is 0700");

    int fd = tcp_connect(endpoint);
    flyt_rep_hello hr;
    CHECK_GE(fd, 0,
          "HELLO: the server asks for a session token");
    CHECK_EQ(hello(fd, &hr), 0,
          "HELLO: the server asks for a session token");
    CHECK((hr.flags & FLYT_HELLO_AUTH_REQUIRED),
          "HELLO: the server asks for a session token");
    CHECK_EQ(auth(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.x.1"), T_NOT_PERMITTED,
          "a wrong token is refused");
    close(fd);
    fd = tcp_connect(endpoint);
    CHECK_GE(fd, 0, "the session token is accepted");
    CHECK_EQ(hello(fd, &hr), 0, "the session token is accepted");
    CHECK_EQ(auth(fd, token), 0, "the session token is accepted");
    flyt_req_device dev = {0, 0};
    flyt_rep_props props;
    CHECK_EQ(frame_call(fd, FLYT_OP_DEVICE_PROPS, &dev, sizeof dev, NULL, 0, &props, sizeof props), 0,
          "DEVICE_PROPS");
    struct cudaDeviceProp dp;
    memcpy(&dp, props.bytes, sizeof dp);
    int sms = dp.multiProcessorCount;
    size_t total = dp.totalGlobalMem;
    CHECK_EQ(sms, 132, "the tenant sees its share: %d SMs, %zu bytes", sms,
          total);
    CHECK_EQ(total, (size_t)GiB, "the tenant sees its share: %d SMs, %zu bytes", sms,
          total);
    flyt_req_mem_alloc ma = {(uint64_t)GiB + 1, 0, 0};
    flyt_rep_u64 mr;
    CHECK_EQ(frame_call(fd, FLYT_OP_MEM_ALLOC, &ma, sizeof ma, NULL, 0, &mr, sizeof mr), 2,
          "more than its quota: out of memory");
    ma.size = 256 << 20;
    CHECK_EQ(frame_call(fd, FLYT_OP_MEM_ALLOC, &ma, sizeof ma, NULL, 0, &mr, sizeof mr), 0,
          "256 MiB allocated");
    CHECK(wait_for(server_connected, sid, 5000), "the node manager reports a client connected");
    check_session_revocation(vm_token, sid, endpoint, token, sizeof token);
    json_t *all;
    json_t *o = nm_server(sid, &all);
    CHECK(o, "and 256 MiB used");
    CHECK_EQ(jint(o, "memory_used"), 256 << 20, "and 256 MiB used");
    json_decref(all);
    close(fd);
    CHECK(wait_for(server_unconnected, sid, 5000), "closed: no client connected");

    if (client_test && client_has_tokens()) {
        printf("== the client test program (NVIDIA's runtime) through Flyt's libcuda.so.1\n");
        CHECK_EQ(run_client(endpoint, token, 0), 0, "%s passes with FLYT_SESSION_TOKEN",
              client_test);
        CHECK_NE(run_client(endpoint, NULL, 1), 0, "and fails without it");
    } else {
        check_skip_part("the client test program (not given, or the client library sends no "
                        "session tokens)");
    }

    printf("== live resize: SMs of running sessions\n");
    check_resize();
    printf("== a VM's processes share its memory quota\n");
    check_vm_memory();

    printf("== release: the server stops\n");
    char path[200];
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "DELETE", path, vm_token, NULL, NULL), 204, "DELETE %s: %s", path, call_err);
    CHECK(wait_for(server_gone, sid, 5000), "the node manager no longer has it");
    CHECK(!alive(spid), "its process is gone");
    CHECK_NE(stat(key_path, &st), 0, "and its key file");

    printf("== a killed server is reported\n");
    new_session(vm_token, 4243, sid, endpoint, token);
    spid = server_pid_of(sid);
    CHECK_GT(spid, 0, "SIGKILL to its server pid %d", (int)spid);
    CHECK_EQ(kill(spid, SIGKILL), 0, "SIGKILL to its server pid %d", (int)spid);
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    snprintf(want_state, sizeof want_state, "failed");
    CHECK(wait_for(session_state_is, NULL, 5000), "the cluster manager records session %s failed",
          sid);
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "GET", path, clm.op_token, NULL, &a), 200,
          "reason: %s", jstr(a, "session.end_reason"));
    CHECK(strstr(jstr(a, "session.end_reason"), "signal 9"),
          "reason: %s", jstr(a, "session.end_reason"));
    json_decref(a);
    CHECK(wait_for(server_gone, sid, 5000), "the node manager forgot it");

    printf("== an idle session is released through the heartbeat's stop list\n");
    new_session(vm_token, 4244, sid, endpoint, token);
    spid = server_pid_of(sid);
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    snprintf(want_state, sizeof want_state, "released");
    CHECK(wait_for(session_state_is, NULL, 8000), "no client for 2 s: released");
    CHECK(wait_for(server_gone, sid, 5000) && !alive(spid), "and its server stopped");

    check_restart(nm_bin, vm_token, port_base + 40);

    printf("== SIGTERM: everything stops\n");
    new_session(vm_token, 4245, sid, endpoint, token);
    spid = server_pid_of(sid);
    fd = tcp_connect(endpoint);
    CHECK_GE(fd, 0, "a client is connected");
    CHECK_EQ(hello(fd, &hr), 0, "a client is connected");
    CHECK_EQ(auth(fd, token), 0, "a client is connected");
    CHECK_EQ(kill(nm_pid, SIGTERM), 0, "SIGTERM to the node manager");
    int status = -1;
    for (int i = 0; i < 200; i++) {
        if (waitpid(nm_pid, &status, WNOHANG) == nm_pid) {
            nm_pid = 0;
            break;
        }
        msleep(50);
    }
    CHECK_EQ(nm_pid, 0,
          "it exited with status 0 (status 0x%x)", status);
    CHECK(WIFEXITED(status),
          "it exited with status 0 (status 0x%x)", status);
    CHECK_EQ(WEXITSTATUS(status), 0,
          "it exited with status 0 (status 0x%x)", status);
    close(fd);
    CHECK(!alive(spid), "the server is gone");
    CHECK_EQ(count_lines("mps.log", "quit "), 2, "both MPS daemons were told to quit");
    CHECK_EQ(leftovers(), 0, "nothing it started is left running");
    CHECK_EQ(state_files(), 0, "no key or status file is left");
    snprintf(want_sid, sizeof want_sid, "%s", sid);
    snprintf(want_state, sizeof want_state, "released");
    CHECK(session_state_is(NULL), "the cluster manager was told the session ended");
    CHECK_EQ(count_lines("nm.log", "Sanitizer"), 0,
          "no sanitizer report, no death but the killed server's (node manager log)");
    CHECK_EQ(count_lines("nm.log", "runtime error"), 0,
          "no sanitizer report, no death but the killed server's (node manager log)");
    CHECK_EQ(count_lines("nm.log", "died:"), 2,
          "no sanitizer report, no death but the two killed servers' (node manager log)");

    clm_stop(&clm);
    passed = 1;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, clm.dir);
    if (getenv("FLYT_TEST_KEEP"))
        printf("        (kept %s and %s)\n", dir, clm.dir);
    else if (system(cmd) != 0)
        printf("        (could not remove %s)\n", dir);
    printf("PASS: node manager\n");
    return check_done();
}
