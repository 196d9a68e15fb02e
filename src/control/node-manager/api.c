/*
 * The node manager's own API (docs/api.md, "Cluster manager -> node
 * manager"), called by the cluster manager with its manager_token:
 *   POST   /v1/servers              start a server, answer once it listens
 *   DELETE /v1/servers/{session_id} stop it; 204 once nothing of it runs
 *   GET    /v1/servers              the servers, alive and connected
 *   POST   /v1/servers/{id}/resize  a live resize of its share (resize.c)
 *   checkpoint, state files, restore   (checkpoint.c)
 * and, without a token, GET /v1/health and GET /metrics (counts only).
 */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <openssl/crypto.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Only the cluster manager's token, once registration told us what it is. */
int nm_authorized(struct nm *nm, const struct flyt_http_request *req,
                      struct flyt_http_response *res)
{
    char tok[NM_STR];
    pthread_mutex_lock(&nm->lock);
    snprintf(tok, sizeof tok, "%s", nm->manager_token);
    pthread_mutex_unlock(&nm->lock);
    if (!req->token) {
        flyt_http_reply_error(res, 401, "unauthorized", "missing Authorization: Bearer token");
        return 0;
    }
    if (!tok[0]) {
        flyt_http_reply_error(res, 401, "unauthorized",
                              "not registered with the cluster manager yet: no token is valid");
        return 0;
    }
    if (!flyt_token_equal(req->token, tok)) {
        flyt_http_reply_error(res, 401, "unauthorized", "unknown token");
        return 0;
    }
    return 1;
}

/* A session key as the cluster manager sends it: 64 hex digits. */
static int nm_valid_key(const char *hex)
{
    unsigned char raw[32];
    size_t n = 0;
    return hex && strlen(hex) == 64 && flyt_hex_decode(hex, raw, sizeof raw, &n) == 0;
}

int nm_parse_share(const struct nm_gpu *gpu, json_t *groups, json_t *sc, json_t *mq,
                   struct nm_start_req *r, struct flyt_http_response *res)
{
    size_t n = json_is_array(groups) ? json_array_size(groups) : 0;
    int avail = gpu->sm_count / gpu->sm_granularity;
    if (n == 0 || n > NM_MAX_GROUPS) {
        flyt_http_reply_error(res, 400, "bad_request", "sm_groups: expected a non-empty array of "
                              "SM group indices");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(groups, i);
        long long x = json_is_integer(v) ? json_integer_value(v) : -1;
        int dup = 0;
        for (size_t k = 0; k < i; k++)
            dup |= r->groups[k] == x;
        if (x < 0 || x >= avail || dup) {
            flyt_http_reply_error(res, 400, "bad_request",
                                  "sm_groups[%zu]: GPU %d has groups 0..%d of %d SMs, each once",
                                  i, gpu->index, avail - 1, gpu->sm_granularity);
            return -1;
        }
        r->groups[i] = (int)x;
    }
    r->ngroups = (int)n;
    if (!json_is_integer(sc) || json_integer_value(sc) != (json_int_t)n * gpu->sm_granularity) {
        flyt_http_reply_error(res, 400, "bad_request", "sm_count: expected %zu groups x %d SMs = %zu",
                              n, gpu->sm_granularity, n * (size_t)gpu->sm_granularity);
        return -1;
    }
    r->sm_count = (int)json_integer_value(sc);
    if (!json_is_integer(mq) || json_integer_value(mq) < 1 ||
        json_integer_value(mq) > gpu->memory_total) {
        flyt_http_reply_error(res, 400, "bad_request", "memory_quota: expected bytes, 1 to %lld",
                              gpu->memory_total);
        return -1;
    }
    r->memory_quota = json_integer_value(mq);
    return 0;
}

static void h_start(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    if (!nm_authorized(nm, req, res))
        return;
    json_t *b = req->body;
    if (!json_is_object(b)) {
        flyt_http_reply_error(res, 400, "bad_request", "body: expected {\"session_id\", "
                              "\"gpu_index\", \"sm_groups\", \"sm_count\", \"memory_quota\"}");
        return;
    }
    static struct nm_start_req zero;
    struct nm_start_req *r = malloc(sizeof *r);
    if (!r) {
        flyt_http_reply_error(res, 500, "internal", "out of memory");
        return;
    }
    *r = zero;
    const char *sid = json_string_value(json_object_get(b, "session_id"));
    json_t *gi = json_object_get(b, "gpu_index"), *groups = json_object_get(b, "sm_groups"),
           *sc = json_object_get(b, "sm_count"), *mq = json_object_get(b, "memory_quota");
    const struct nm_gpu *gpu = json_is_integer(gi) ? nm_gpu_by_index(nm, (int)json_integer_value(gi))
                                                   : NULL;
    if (!sid || !nm_valid_sid(sid)) {
        flyt_http_reply_error(res, 400, "bad_request",
                              "session_id: expected 1 to 64 of A-Z a-z 0-9 . _ -");
        goto out;
    }
    if (!gpu) {
        flyt_http_reply_error(res, 400, "bad_request", "gpu_index: this node has no such GPU (%d "
                              "GPU(s))", nm->ngpus);
        goto out;
    }
    if (nm_parse_share(gpu, groups, sc, mq, r, res) != 0)
        goto out;
    json_t *vm = json_object_get(b, "vm_id");
    if (vm && (!json_is_string(vm) || !nm_valid_sid(json_string_value(vm)))) {
        flyt_http_reply_error(res, 400, "bad_request",
                              "vm_id: expected 1 to 64 of A-Z a-z 0-9 . _ -");
        goto out;
    }
    snprintf(r->vm_id, sizeof r->vm_id, "%s", vm ? json_string_value(vm) : "");
    r->restore = json_is_true(json_object_get(b, "restore"));
    r->receive = json_is_true(json_object_get(b, "receive"));
    if (r->receive && flyt_random_hex(32, r->secret, sizeof r->secret) != 0) {
        flyt_http_reply_error(res, 500, "internal", "no random bytes for a secret");
        goto out;
    }
    json_t *key = json_object_get(b, "session_key");
    if (key && !nm_valid_key(json_string_value(key))) {
        flyt_http_reply_error(res, 400, "bad_request", "session_key: expected 64 hex digits");
        goto out;
    }
    snprintf(r->session_key, sizeof r->session_key, "%s", key ? json_string_value(key) : "");
    snprintf(r->sid, sizeof r->sid, "%s", sid);
    r->gpu_index = gpu->index;

    int status = 0;
    char msg[600], endpoint[NM_STR + 32];
    pid_t pid = 0;
    if (nm_server_start(nm, r, &status, msg, sizeof msg, endpoint, sizeof endpoint, &pid) != 0) {
        const char *code = status == 409 ? "conflict" : status == 503 ? "unavailable" : "internal";
        flyt_http_reply_error(res, status, code, "%s", msg);
        goto out;
    }
    if (status == 202) /* receive: where the source streams the state, and its secret */
        flyt_http_reply_json(res, status, json_pack("{s:s,s:s,s:i}", "state_address", endpoint,
                                                    "secret", r->secret, "pid", (int)pid));
    else
        flyt_http_reply_json(res, status,
                             json_pack("{s:s,s:i}", "endpoint", endpoint, "pid", (int)pid));
out:
    if (r)
        OPENSSL_cleanse(r->secret, sizeof r->secret);
    free(r);
}

static void h_stop(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    if (!nm_authorized(nm, req, res))
        return;
    if (nm_server_stop_wait(nm, req->params[0]) != 0) {
        flyt_http_reply_error(res, 404, "not_found", "no server for session %s", req->params[0]);
        return;
    }
    flyt_http_reply_status(res, 204);
}

/* PUT /v1/servers/{id}/session-key {"session_key": hex}: the session's tokens revoked. */
static void h_set_key(void *ctx, const struct flyt_http_request *req,
                      struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    if (!nm_authorized(nm, req, res))
        return;
    const char *hex = json_string_value(json_object_get(req->body, "session_key"));
    char err[512];
    if (!nm_valid_key(hex)) {
        flyt_http_reply_error(res, 400, "bad_request", "session_key: expected 64 hex digits");
        return;
    }
    int rc = nm_server_set_key(nm, req->params[0], hex, err, sizeof err);
    if (rc == 1)
        flyt_http_reply_error(res, 404, "not_found", "no server for session %s", req->params[0]);
    else if (rc < 0)
        flyt_http_reply_error(res, 500, "internal", "%s", err);
    else
        flyt_http_reply_status(res, 204);
    if (rc == 0)
        flyt_info("session %s: new session key (its earlier tokens are refused)", req->params[0]);
}

static const char *state_name(enum nm_state s)
{
    switch (s) {
    case NM_STARTING: return "starting";
    case NM_RUNNING: return "running";
    case NM_STOPPING: return "stopping";
    default: return "exited";
    }
}

static void h_list(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    if (!nm_authorized(nm, req, res))
        return;
    json_t *arr = json_array();
    char host[NM_STR + 2];
    nm_host_for_url(nm->cfg.advertise_host, host, sizeof host);
    pthread_mutex_lock(&nm->lock);
    for (struct nm_server *s = nm->servers; s; s = s->next) {
        int connected = 0;
        long long mem = 0;
        int alive = s->state == NM_RUNNING || s->state == NM_STOPPING;
        if (alive)
            nm_server_status(s, &connected, &mem);
        char ep[NM_STR + 32];
        snprintf(ep, sizeof ep, "%s://%s:%d", nm->cfg.server_tls_cert[0] ? "tls" : "tcp", host,
                 s->port);
        json_array_append_new(
            arr, json_pack("{s:s,s:i,s:b,s:b,s:s,s:s,s:i,s:i,s:I,s:I,s:b}", "session_id", s->sid,
                           "pid", (int)s->pid, "alive", alive, "connected", connected, "state",
                           state_name(s->state), "endpoint", ep, "gpu_index", s->gpu_index,
                           "sm_count", s->sm_count, "memory_quota", (json_int_t)s->memory_quota,
                           "memory_used", (json_int_t)mem, "adopted", s->adopted));
    }
    pthread_mutex_unlock(&nm->lock);
    flyt_http_reply_json(res, 200, json_pack("{s:o}", "servers", arr));
}

static void h_health(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    (void)req;
    pthread_mutex_lock(&nm->lock);
    int registered = nm->registered;
    pthread_mutex_unlock(&nm->lock);
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:s,s:s,s:b}", "status", "ok", "version",
                                             NM_VERSION, "node", nm->cfg.node_id, "registered",
                                             registered));
}

static void h_metrics(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct nm *nm = ctx;
    (void)req;
    struct flyt_buf b = {0};
    pthread_mutex_lock(&nm->lock);
    int running = 0, connected = 0;
    long long mem = 0, quota = 0;
    for (struct nm_server *s = nm->servers; s; s = s->next) {
        if (s->state != NM_RUNNING)
            continue;
        int c = 0;
        long long m = 0;
        nm_server_status(s, &c, &m);
        running++;
        connected += c;
        mem += m;
        quota += s->memory_quota;
    }
    flyt_buf_printf(&b, "# HELP flyt_node_registered 1 when registered with the cluster manager\n"
                        "# TYPE flyt_node_registered gauge\nflyt_node_registered %d\n",
                    nm->registered);
    flyt_buf_printf(&b, "# HELP flyt_node_gpus GPUs of this node\n# TYPE flyt_node_gpus gauge\n"
                        "flyt_node_gpus %d\n", nm->ngpus);
    flyt_buf_printf(&b, "# HELP flyt_node_servers running flyt-servers\n"
                        "# TYPE flyt_node_servers gauge\nflyt_node_servers %d\n", running);
    flyt_buf_printf(&b, "# HELP flyt_node_servers_connected servers with a client connected\n"
                        "# TYPE flyt_node_servers_connected gauge\n"
                        "flyt_node_servers_connected %d\n", connected);
    flyt_buf_printf(&b, "# HELP flyt_node_memory_used_bytes memory allocated by tenants\n"
                        "# TYPE flyt_node_memory_used_bytes gauge\n"
                        "flyt_node_memory_used_bytes %lld\n", mem);
    flyt_buf_printf(&b, "# HELP flyt_node_memory_quota_bytes memory quotas of running servers\n"
                        "# TYPE flyt_node_memory_quota_bytes gauge\n"
                        "flyt_node_memory_quota_bytes %lld\n", quota);
    flyt_buf_printf(&b, "# HELP flyt_node_server_starts_total servers started\n"
                        "# TYPE flyt_node_server_starts_total counter\n"
                        "flyt_node_server_starts_total %llu\n", nm->starts);
    flyt_buf_printf(&b, "# HELP flyt_node_server_start_failures_total servers that did not start\n"
                        "# TYPE flyt_node_server_start_failures_total counter\n"
                        "flyt_node_server_start_failures_total %llu\n", nm->start_failures);
    flyt_buf_printf(&b, "# HELP flyt_node_server_deaths_total servers that ended unasked\n"
                        "# TYPE flyt_node_server_deaths_total counter\n"
                        "flyt_node_server_deaths_total %llu\n", nm->deaths);
    flyt_buf_printf(&b, "# HELP flyt_node_heartbeats_total heartbeats sent\n"
                        "# TYPE flyt_node_heartbeats_total counter\n"
                        "flyt_node_heartbeats_total %llu\n", nm->heartbeats);
    flyt_buf_printf(&b, "# HELP flyt_node_heartbeat_failures_total heartbeats without a good answer\n"
                        "# TYPE flyt_node_heartbeat_failures_total counter\n"
                        "flyt_node_heartbeat_failures_total %llu\n", nm->heartbeat_failures);
    pthread_mutex_unlock(&nm->lock);
    flyt_http_metrics(nm->http, &b);
    flyt_http_reply_text(res, 200, "text/plain; version=0.0.4", flyt_buf_take(&b));
}

const struct flyt_http_route nm_routes[] = {
    {"GET", "/v1/health", h_health},
    {"GET", "/metrics", h_metrics},
    {"POST", "/v1/servers", h_start},
    {"GET", "/v1/servers", h_list},
    {"DELETE", "/v1/servers/{id}", h_stop},
    {"PUT", "/v1/servers/{id}/session-key", h_set_key},
    {"POST", "/v1/servers/{id}/resize", nm_h_resize},
    {"POST", "/v1/servers/{id}/checkpoint", nm_h_checkpoint},
    {"GET", "/v1/servers/{id}/checkpoint", nm_h_checkpoint_progress},
    {"GET", "/v1/checkpoints/{id}", nm_h_state_get},
    {"PUT", "/v1/checkpoints/{id}", nm_h_state_put},
    {"DELETE", "/v1/checkpoints/{id}", nm_h_state_delete},
    {NULL, NULL, NULL}};
