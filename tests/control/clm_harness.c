/* See clm_harness.h. */
#include "clm_harness.h"

#include "check.h"
#include "flyt_token.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char call_err[1024];

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int wait_for(int (*cond)(void *), void *arg, int timeout_ms)
{
    for (int t = 0; t < timeout_ms; t += 50) {
        if (cond(arg))
            return 1;
        msleep(50);
    }
    return cond(arg);
}

static void spawn(struct clm_proc *clm)
{
    char port_file[512], log[512], conf[512];
    snprintf(port_file, sizeof port_file, "%s/port", clm->dir);
    snprintf(log, sizeof log, "%s/clm.log", clm->dir);
    snprintf(conf, sizeof conf, "%s/clm.conf", clm->dir);
    unlink(port_file);
    pid_t pid = fork();
    CHECK_GE(pid, 0, "fork");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execl(clm->binary, clm->binary, "--config", conf, "--port-file", port_file, (char *)NULL);
        _exit(127);
    }
    clm->pid = pid;
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &clm->port) == 1;
            fclose(f);
            if (ok) {
                char base[64];   /* a config with a certificate serves HTTPS only */
                snprintf(base, sizeof base, "%s://127.0.0.1:%d",
                         strstr(clm->extra, "tls_cert_file") ? "https" : "http", clm->port);
                if (strcmp(base, clm->base) != 0)   /* a restart keeps it: no write */
                    memcpy(clm->base, base, sizeof base);
                return;
            }
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            char cmd[600];
            snprintf(cmd, sizeof cmd, "cat %s", log);
            if (system(cmd) < 0) {
            }
            CHECK(0, "flyt-cluster-manager exited at start (status %d)", status);
        }
        msleep(50);
    }
    CHECK(0, "flyt-cluster-manager did not write its port file");
}

/* Whether the store's key file is its default (an SQLite store's); else the config names
 * DIR/store.key (clm_start writes one), unless extra names its own. */
static int clm_store_key_default(const struct clm_proc *clm)
{
    return strstr(clm->extra, "store_key_file") || strncmp(clm->store, "postgres", 8) != 0;
}

static void write_secret(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_NE(f, NULL, "write %s", path);
    fprintf(f, "%s\n", text);
    fclose(f);
    chmod(path, 0600);
}

static void write_config(struct clm_proc *clm)
{
    char path[512];
    snprintf(path, sizeof path, "%s/clm.conf", clm->dir);
    FILE *f = fopen(path, "w");
    CHECK_NE(f, NULL, "write the config");
    /* a restart listens on the port of the first start, as a real one would */
    fprintf(f, "# written by the test\nlisten = 127.0.0.1:%d\nstore = \"%s\"\n"
               "operator_token_file = operator.token\nlog_level = debug\n%s%s\n",
            clm->port, clm->store,
            clm_store_key_default(clm) ? "" : "store_key_file = store.key\n", clm->extra);
    fclose(f);
}

static struct clm_proc *atexit_cm;
static void kill_cm(void)
{
    if (atexit_cm && atexit_cm->pid > 0) {
        kill(atexit_cm->pid, SIGKILL);
        waitpid(atexit_cm->pid, NULL, 0);
        atexit_cm->pid = 0;
    }
}

void clm_start(struct clm_proc *clm, const char *binary, const char *store, const char *extra)
{
    memset(clm, 0, sizeof *clm);
    snprintf(clm->binary, sizeof clm->binary, "%s", binary);
    snprintf(clm->store, sizeof clm->store, "%s", store);
    snprintf(clm->dir, sizeof clm->dir, "/tmp/flyt-clm-test.XXXXXX");
    CHECK_NE(mkdtemp(clm->dir), NULL, "temp dir");
    char path[512];
    /* an operator token of 64 hex characters */
    for (int i = 0; i < 64; i++)
        clm->op_token[i] = "0123456789abcdef"[(unsigned)rand() % 16];
    clm->op_token[64] = 0;
    snprintf(path, sizeof path, "%s/operator.token", clm->dir);
    write_secret(path, clm->op_token);
    snprintf(clm->extra, sizeof clm->extra, "%s", extra ? extra : "");
    if (!clm_store_key_default(clm)) {
        char key[65];
        CHECK_EQ(flyt_random_hex(32, key, sizeof key), 0, "a store key");
        snprintf(path, sizeof path, "%s/store.key", clm->dir);
        write_secret(path, key);
    }
    write_config(clm);
    atexit_cm = clm;
    static int registered;
    if (!registered++)
        atexit(kill_cm);
    spawn(clm);
}

void clm_stop(struct clm_proc *clm)
{
    if (clm->pid <= 0)
        return;
    kill(clm->pid, SIGTERM);
    int status = 0;
    waitpid(clm->pid, &status, 0);
    clm->pid = 0;
    CHECK(WIFEXITED(status),
          "flyt-cluster-manager stopped cleanly on SIGTERM (status %d)", status);
    CHECK_EQ(WEXITSTATUS(status), 0,
          "flyt-cluster-manager stopped cleanly on SIGTERM (status %d)", status);
}

void clm_restart(struct clm_proc *clm)
{
    clm_stop(clm);
    write_config(clm);
    spawn(clm);
}

void clm_kill_restart(struct clm_proc *clm)
{
    if (clm->pid > 0) {
        kill(clm->pid, SIGKILL);
        waitpid(clm->pid, NULL, 0);
        clm->pid = 0;
    }
    write_config(clm);
    spawn(clm);
}

long call(struct clm_proc *clm, const char *method, const char *path, const char *token,
          const char *body, json_t **ans)
{
    char url[1024];
    snprintf(url, sizeof url, "%s%s", clm->base, path);
    json_t *b = NULL;
    if (body) {
        json_error_t je;
        b = json_loads(body, 0, &je);
        if (!b)
            CHECK(0, "test body is JSON: %s (%s)", body, je.text);
    }
    long status = 0;
    json_t *a = NULL;
    call_err[0] = 0;
    if (flyt_http_call(method, url, token, b, &status, &a, call_err, sizeof call_err) < 0)
        status = -1;
    json_decref(b);
    if (ans)
        *ans = a;
    else
        json_decref(a);
    return status;
}

void clm_create_vm(struct clm_proc *clm, const char *body, char *token_out)
{
    json_t *a;
    long st = call(clm, "POST", "/v1/vms", clm->op_token, body, &a);
    CHECK_EQ(st, 201,
          "create VM %s: %ld %s", body, st, call_err);
    CHECK(jstr(a, "token"),
          "create VM %s: %ld %s", body, st, call_err);
    CHECK_EQ(strlen(jstr(a, "token")), 64,
          "create VM %s: %ld %s", body, st, call_err);
    if (token_out)
        snprintf(token_out, 65, "%s", jstr(a, "token"));
    json_decref(a);
}

void clm_create_node(struct clm_proc *clm, struct fake_nm *nm, const char *host_ip)
{
    char body[256];
    snprintf(body, sizeof body, "{\"id\": \"%s\", \"host_ip\": \"%s\"}", nm->node_id, host_ip);
    json_t *a;
    CHECK_EQ(call(clm, "POST", "/v1/nodes", clm->op_token, body, &a), 201,
          "create node %s", nm->node_id);
    CHECK(jstr(a, "token"),
          "create node %s", nm->node_id);
    CHECK_STR_EQ(jstr(a, "node.state"), "registered", "new node is 'registered'");
    snprintf(nm->node_token, sizeof nm->node_token, "%s", jstr(a, "token"));
    json_decref(a);
}

json_t *clm_register_node(struct clm_proc *clm, struct fake_nm *nm, const char *host_ip, int sms,
                          long long mem, const char *sessions)
{
    char body[1024], path[128];
    snprintf(body, sizeof body,
             "{\"address\": \"%s\", \"host_ip\": \"%s\", \"gpus\": [{\"index\": 0, \"uuid\": "
             "\"GPU-%s\", \"name\": \"Fake H100\", \"sm_count\": %d, \"sm_granularity\": 8, "
             "\"memory_total\": %lld}], \"sessions\": %s}",
             nm->address, host_ip, nm->node_id, sms, mem, sessions ? sessions : "[]");
    snprintf(path, sizeof path, "/v1/nodes/%s/register", nm->node_id);
    json_t *a;
    long st = call(clm, "POST", path, nm->node_token, body, &a);
    CHECK_EQ(st, 200, "register %s: %ld %s", nm->node_id, st, call_err);
    pthread_mutex_lock(&nm->lock);
    snprintf(nm->manager_token, sizeof nm->manager_token, "%s", jstr(a, "manager_token"));
    snprintf(nm->session_key, sizeof nm->session_key, "%s", jstr(a, "session_key"));
    nm->heartbeat = 1;
    pthread_mutex_unlock(&nm->lock);
    return a;
}


/* The value at "a.b.0.c" (object keys, array indexes); NULL when absent. strtok_r, not
 * strtok: test_parallel's 8 threads read their answers at once, and strtok's one hidden
 * position is shared by all threads, so one thread's walk went on in another's path (a
 * 201 with its session read as no session: CI saw "7 of 8" processes get one). */
static json_t *jpath(json_t *j, const char *path)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok_r(buf, ".", &save); tok && j; tok = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(tok)) : json_object_get(j, tok);
    return j;
}

const char *jstr(json_t *j, const char *path) { return json_string_value(jpath(j, path)); }

long long jint(json_t *j, const char *path)
{
    json_t *v = jpath(j, path);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* ---- fake node manager ---- */

static int nm_auth(struct fake_nm *nm, const struct flyt_http_request *req,
                   struct flyt_http_response *res)
{
    if (!req->token || strcmp(req->token, nm->manager_token) != 0) {
        nm->bad_auth++;
        flyt_http_reply_error(res, 401, "unauthorized", "not the manager token");
        return -1;
    }
    return 0;
}

static void nm_start_server(void *ctx, const struct flyt_http_request *req,
                            struct flyt_http_response *res)
{
    struct fake_nm *nm = ctx;
    pthread_mutex_lock(&nm->lock);
    if (nm_auth(nm, req, res) == 0) {
        const char *sid = json_string_value(json_object_get(req->body, "session_id"));
        if (nm->fail_start || !sid || nm->nservers == FAKE_MAX_SERVERS) {
            flyt_http_reply_error(res, 500, "internal", "fake node manager: cannot start");
        } else {
            nm->starts++;
            struct fake_server *s = &nm->servers[nm->nservers++];
            snprintf(s->session_id, sizeof s->session_id, "%s", sid);
            s->connected = 1;
            flyt_http_reply_json(res, 200, json_pack("{s:s,s:i}", "endpoint",
                                                     "tcp://127.0.0.1:7000", "pid", 4242));
        }
    }
    pthread_mutex_unlock(&nm->lock);
}

static void remove_server(struct fake_nm *nm, const char *sid)
{
    for (int i = 0; i < nm->nservers; i++)
        if (strcmp(nm->servers[i].session_id, sid) == 0) {
            nm->servers[i] = nm->servers[--nm->nservers];
            return;
        }
}

static void nm_stop_server(void *ctx, const struct flyt_http_request *req,
                           struct flyt_http_response *res)
{
    struct fake_nm *nm = ctx;
    pthread_mutex_lock(&nm->lock);
    if (nm_auth(nm, req, res) == 0) {
        nm->stops++;
        remove_server(nm, req->params[0]);
        flyt_http_reply_status(res, 204);
    }
    pthread_mutex_unlock(&nm->lock);
}

/* A live resize: taken by the server's one connected session. */
static void nm_resize_server(void *ctx, const struct flyt_http_request *req,
                             struct flyt_http_response *res)
{
    struct fake_nm *nm = ctx;
    pthread_mutex_lock(&nm->lock);
    if (nm_auth(nm, req, res) == 0) {
        nm->resizes++;
        nm->last_sm_count = (int)json_integer_value(json_object_get(req->body, "sm_count"));
        flyt_http_reply_json(res, 200, json_pack("{s:i,s:i,s:i}", "applied", 1, "pending", 0,
                                                 "failed", 0));
    }
    pthread_mutex_unlock(&nm->lock);
}

static const struct flyt_http_route nm_routes[] = {
    {"POST", "/v1/servers", nm_start_server},
    {"POST", "/v1/servers/{sid}/resize", nm_resize_server},
    {"DELETE", "/v1/servers/{sid}", nm_stop_server},
    {NULL, NULL, NULL}};

void fake_nm_start(struct fake_nm *nm, const char *node_id)
{
    memset(nm, 0, sizeof *nm);
    pthread_mutex_init(&nm->lock, NULL);
    snprintf(nm->node_id, sizeof nm->node_id, "%s", node_id);
    char err[256];
    nm->http = flyt_http_start("127.0.0.1:0", nm_routes, nm, err, sizeof err);
    CHECK_NE(nm->http, NULL, "fake node manager for %s starts (%s)", node_id, err);
    snprintf(nm->address, sizeof nm->address, "http://127.0.0.1:%d", flyt_http_port(nm->http));
}

void fake_nm_stop(struct fake_nm *nm)
{
    flyt_http_stop(nm->http);
    pthread_mutex_destroy(&nm->lock);
}

int fake_nm_has(struct fake_nm *nm, const char *sid)
{
    pthread_mutex_lock(&nm->lock);
    int found = 0;
    for (int i = 0; i < nm->nservers; i++)
        found |= strcmp(nm->servers[i].session_id, sid) == 0;
    pthread_mutex_unlock(&nm->lock);
    return found;
}

void fake_nm_set_connected(struct fake_nm *nm, const char *sid, int connected)
{
    pthread_mutex_lock(&nm->lock);
    for (int i = 0; i < nm->nservers; i++)
        if (strcmp(nm->servers[i].session_id, sid) == 0)
            nm->servers[i].connected = connected;
    pthread_mutex_unlock(&nm->lock);
}

/* ---- heartbeats ---- */

long heartbeat_once(struct clm_proc *clm, struct fake_nm *nm, json_t **ans_out)
{
    json_t *sessions = json_array();
    pthread_mutex_lock(&nm->lock);
    for (int i = 0; i < nm->nservers; i++)
        json_array_append_new(sessions, json_pack("{s:s,s:b,s:b,s:i}", "id",
                                                  nm->servers[i].session_id, "alive", 1,
                                                  "connected", nm->servers[i].connected,
                                                  "memory_used", 0));
    pthread_mutex_unlock(&nm->lock);
    json_t *body = json_pack("{s:o}", "sessions", sessions);
    char url[512], err[512];
    snprintf(url, sizeof url, "%s/v1/nodes/%s/heartbeat", clm->base, nm->node_id);
    long status = 0;
    json_t *ans = NULL;
    if (flyt_http_call("POST", url, nm->node_token, body, &status, &ans, err, sizeof err) < 0)
        status = -1;
    json_decref(body);
    if (status == 200) {
        size_t i;
        json_t *id;
        pthread_mutex_lock(&nm->lock);
        json_array_foreach(json_object_get(ans, "stop"), i, id)
            remove_server(nm, json_string_value(id));
        pthread_mutex_unlock(&nm->lock);
    }
    if (ans_out)
        *ans_out = ans;
    else
        json_decref(ans);
    return status;
}

static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    int running;
    struct clm_proc *clm;
    struct fake_nm **nms;
    int n, period_ms;
} hb = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *hb_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&hb.lock);
        int running = hb.running;
        pthread_mutex_unlock(&hb.lock);
        if (!running)
            break;
        for (int i = 0; i < hb.n; i++) {
            pthread_mutex_lock(&hb.nms[i]->lock);
            int on = hb.nms[i]->heartbeat;
            pthread_mutex_unlock(&hb.nms[i]->lock);
            if (on)
                heartbeat_once(hb.clm, hb.nms[i], NULL);
        }
        msleep(hb.period_ms);
    }
    return NULL;
}

void heartbeats_start(struct clm_proc *clm, struct fake_nm **nms, int n, int period_ms)
{
    hb.clm = clm;
    hb.nms = nms;
    hb.n = n;
    hb.period_ms = period_ms;
    hb.running = 1;
    CHECK_EQ(pthread_create(&hb.thread, NULL, hb_main, NULL), 0, "heartbeat thread");
}

void heartbeats_stop(void)
{
    pthread_mutex_lock(&hb.lock);
    hb.running = 0;
    pthread_mutex_unlock(&hb.lock);
    pthread_join(hb.thread, NULL);
}
