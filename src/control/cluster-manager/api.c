/* The route table, authentication, errors, transactions, input checks, health, events. */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

const struct flyt_http_route clm_routes[] = {
    {"GET", "/v1/health", h_health},
    {"GET", "/metrics", h_metrics},
    {"GET", "/v1/events", h_events},
    {"GET", "/v1/vms", h_vms_list},
    {"POST", "/v1/vms", h_vms_create},
    {"POST", "/v1/vms/import", h_vms_import},
    {"GET", "/v1/vms/{id}", h_vm_get},
    {"PATCH", "/v1/vms/{id}", h_vm_patch},
    {"DELETE", "/v1/vms/{id}", h_vm_delete},
    {"GET", "/v1/nodes", h_nodes_list},
    {"POST", "/v1/nodes", h_nodes_create},
    {"GET", "/v1/nodes/{id}", h_node_get},
    {"DELETE", "/v1/nodes/{id}", h_node_delete},
    {"POST", "/v1/nodes/{id}/register", h_node_register},
    {"POST", "/v1/nodes/{id}/heartbeat", h_node_heartbeat},
    {"POST", "/v1/nodes/{id}/sessions/{sid}/ended", h_node_session_ended},
    {"GET", "/v1/sessions", h_sessions_list},
    {"POST", "/v1/sessions", h_sessions_create},
    {"GET", "/v1/sessions/{id}", h_session_get},
    {"DELETE", "/v1/sessions/{id}", h_session_delete},
    {"POST", "/v1/sessions/{id}/alive", h_session_alive},
    {"POST", "/v1/sessions/{id}/resize", h_session_resize},
    {"POST", "/v1/vms/{id}/resize", h_vm_resize},
    {"POST", "/v1/vms/{id}/requests", h_vm_requests_post},
    {"GET", "/v1/vms/{id}/requests", h_vm_requests_list},
    {"POST", "/v1/sessions/{id}/checkpoint", h_session_checkpoint},
    {"GET", "/v1/sessions/{id}/checkpoint", h_session_state_get},
    {"DELETE", "/v1/sessions/{id}/checkpoint", h_session_state_delete},
    {"POST", "/v1/sessions/{id}/restore", h_session_restore},
    {"PUT", "/v1/sessions/{id}/restore", h_session_restore_data},
    {"DELETE", "/v1/sessions/{id}/restore", h_session_restore_abort},
    {"POST", "/v1/sessions/{id}/restore/start", h_session_restore_start},
    {"POST", "/v1/sessions/{id}/migrate", h_session_migrate},
    {"GET", "/v1/sessions/{id}/migration", h_session_migration},
    {"POST", "/v1/nodes/{id}/drain", h_node_drain},
    {"DELETE", "/v1/nodes/{id}/drain", h_node_undrain},
    {"POST", "/v1/nodes/{id}/rotate-token", h_node_rotate_token},
    {"POST", "/v1/nodes/{id}/revoke-token", h_node_revoke_token},
    {"POST", "/v1/vms/{id}/rotate-token", h_vm_rotate_token},
    {"POST", "/v1/vms/{id}/revoke-token", h_vm_revoke_token},
    {"POST", "/v1/sessions/{id}/revoke-tokens", h_session_revoke_tokens},
    {NULL, NULL, NULL}};

int api_fail(struct api_error *e, int status, const char *code, const char *fmt, ...)
{
    e->status = status;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

int api_store_fail(struct api_error *e, const char *what, const char *dberr)
{
    flyt_error("store: %s: %s", what, dberr);
    return api_fail(e, 500, "internal", "store error while %s: %s", what, dberr);
}

int api_event(struct clm *clm, const char *kind, const char *subject, struct api_error *e,
              const char *fmt, ...)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char msg[512], err[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    flyt_info("%s %s: %s", kind, subject, msg);
    if (store_event_add(clm->store, kind, subject, msg, err, sizeof err) < 0)
        return api_store_fail(e, "logging", err);
    return 0;
}

void api_reply_error(struct flyt_http_response *res, const struct api_error *e)
{
    flyt_http_reply_error(res, e->status ? e->status : 500, e->code ? e->code : "internal", "%s",
                          e->message);
}

void api_reply_wrapped(struct flyt_http_response *res, int ok, const struct api_error *e,
                       int status, const char *key, json_t *obj)
{
    if (!ok) {
        json_decref(obj);
        api_reply_error(res, e);
        return;
    }
    flyt_http_reply_json(res, status, json_pack("{s:o}", key, obj));
}

long long now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void new_id(const char *prefix, char *out, size_t outlen)
{
    char hex[17];
    if (flyt_random_hex(8, hex, sizeof hex) < 0)
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)now_ms());
    snprintf(out, outlen, "%s%s", prefix, hex);
}

int valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= ID_MAX)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')
              || *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

int valid_ip(const char *s)
{
    unsigned char buf[16];
    return strlen(s) < IP_MAX
           && (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1);
}

static const char *kind_name(enum principal_kind k)
{
    return k == P_OPERATOR ? "operator" : k == P_NODE ? "node" : k == P_VM ? "VM" : "no";
}

/* Every operator token is compared (the time does not say which one matched). */
static int is_operator_token(const struct clm *clm, const char *token)
{
    int match = 0;
    for (int i = 0; i < clm->operator_tokens.n; i++)
        match |= flyt_token_equal(token, clm->operator_tokens.tok[i]);
    return match;
}

int auth_check(struct clm *clm, const struct flyt_http_request *req, unsigned allowed,
               struct principal *who, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    memset(who, 0, sizeof *who);
    if (!req->token)
        return api_fail(e, 401, "unauthorized",
                        "missing token: send \"Authorization: Bearer <token>\"");
    char err[256];
    if (is_operator_token(clm, req->token)) {
        who->kind = P_OPERATOR;
    } else {
        char hash[65];
        struct vm_rec vm;
        struct node_rec node;
        if (flyt_sha256_hex(req->token, strlen(req->token), hash, sizeof hash) < 0)
            return api_fail(e, 500, "internal", "cannot hash the token");
        int rc = store_node_by_token(clm->store, hash, &node, err, sizeof err);
        if (rc < 0)
            return api_store_fail(e, "checking the token", err);
        if (rc) {
            who->kind = P_NODE;
            snprintf(who->id, sizeof who->id, "%s", node.id);
        } else {
            rc = store_vm_by_token(clm->store, hash, &vm, err, sizeof err);
            if (rc < 0)
                return api_store_fail(e, "checking the token", err);
            if (!rc)
                return api_fail(e, 401, "unauthorized", "unknown token");
            who->kind = P_VM;
            snprintf(who->id, sizeof who->id, "%s", vm.id);
        }
    }
    if (!(allowed & who->kind))
        return api_fail(e, 403, "forbidden", "a %s token may not call %s", kind_name(who->kind),
                        req->route);
    return 0;
}

int clm_begin(struct clm *clm, struct api_error *e)
{
    char err[512];
    pthread_mutex_lock(&clm->lock);
    if (store_begin(clm->store, err, sizeof err) < 0) {
        pthread_mutex_unlock(&clm->lock);
        return api_store_fail(e, "starting a transaction", err);
    }
    return 0;
}

int clm_end(struct clm *clm, int ok, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    int rc = 0;
    if (ok) {
        if (store_commit(clm->store, err, sizeof err) < 0)
            rc = api_store_fail(e, "committing", err);
    } else {
        store_rollback(clm->store);
        rc = -1;
    }
    pthread_mutex_unlock(&clm->lock);
    return rc;
}

void h_health(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    (void)req;
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:s}", "status", "ok", "version",
                                             FLYT_CLM_VERSION));
}

static int query_int(const struct flyt_http_request *req, const char *name, long long def,
                     long long min, long long max, long long *out, struct api_error *e)
{
    const char *v = flyt_http_query(req, name);
    *out = def;
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < min || x > max)
        return api_fail(e, 400, "bad_request", "query parameter %s: expected an integer in "
                        "[%lld, %lld], got \"%s\"", name, min, max, v);
    *out = x;
    return 0;
}

void h_events(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    long long since, limit;
    if (query_int(req, "since", 0, 0, 1LL << 62, &since, &e) < 0
        || query_int(req, "limit", 1000, 1, 10000, &limit, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    pthread_mutex_lock(&clm->lock);
    struct event_rec *ev = NULL;
    int n = 0;
    char err[512];
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0 && store_event_list(clm->store, since, (int)limit, &ev, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "listing events", err);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, event_json(&ev[i]));
    free(ev);
    flyt_http_reply_json(res, 200, json_pack("{s:o}", "events", arr));
}
