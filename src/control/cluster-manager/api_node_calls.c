/* The node managers' calls (node tokens): register, heartbeat and ended reports, with
 * reconciliation of what the node runs against the store's live sessions. */
#include "clm.h"
#include "flyt_parse.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node calls: the token must be the node's own. */
static int node_self(struct clm *clm, const struct flyt_http_request *req, struct node_rec *n,
                     struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct principal who;
    if (auth_check(clm, req, P_NODE, &who, e) < 0)
        return -1;
    if (strcmp(who.id, req->params[0]) != 0)
        return api_fail(e, 403, "forbidden", "the token of node %s may not act for node %s",
                        who.id, req->params[0]);
    return node_load(clm, req->params[0], n, e);
}

static int parse_gpus(json_t *arr, struct gpu_rec **out, int *n, struct api_error *e)
{
    *out = NULL;
    *n = 0;
    if (!json_is_array(arr))
        return api_fail(e, 400, "bad_request", "gpus: expected an array");
    size_t cnt = json_array_size(arr);
    if (cnt > 64)
        return api_fail(e, 400, "bad_request", "gpus: more than 64 GPUs");
    struct gpu_rec *g = calloc(cnt ? cnt : 1, sizeof *g);
    if (!g)
        return api_fail(e, 500, "internal", "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        json_t *o = json_array_get(arr, i);
        json_t *idx = json_object_get(o, "index"), *sm = json_object_get(o, "sm_count"),
               *gr = json_object_get(o, "sm_granularity"), *mem = json_object_get(o, "memory_total");
        const char *uuid = json_string_value(json_object_get(o, "uuid"));
        const char *name = json_string_value(json_object_get(o, "name"));
        /* optional (older node managers): "MAJOR.MINOR" */
        json_t *ccj = json_object_get(o, "compute_capability");
        int cc = 0;
        const char *bad = !json_is_object(o) ? "" : !json_is_integer(idx) || json_integer_value(idx) < 0 ? "index"
                          : !uuid || !*uuid || strlen(uuid) >= sizeof g->uuid ? "uuid"
                          : !name || strlen(name) >= sizeof g->name ? "name"
                          : !json_is_integer(sm) || json_integer_value(sm) < 1 || json_integer_value(sm) > 100000 ? "sm_count"
                          : !json_is_integer(gr) || json_integer_value(gr) < 1 || json_integer_value(gr) > json_integer_value(sm) ? "sm_granularity"
                          : !json_is_integer(mem) || json_integer_value(mem) < 1 ? "memory_total"
                          : ccj && (!json_is_string(ccj) ||
                                    flyt_parse_compute_capability(json_string_value(ccj), &cc, NULL, 0) != 0)
                              ? "compute_capability" : NULL;
        if (!bad && json_integer_value(sm) / json_integer_value(gr) > MAX_SM_GROUPS)
            bad = "sm_granularity";
        for (size_t k = 0; !bad && k < i; k++)
            if (g[k].index == json_integer_value(idx))
                bad = "index";
        if (bad) {
            free(g);
            return api_fail(e, 400, "bad_request", "gpus[%zu]%s%s: %s", i, *bad ? "." : "", bad,
                            *bad ? "missing or invalid" : "expected an object");
        }
        g[i].index = (int)json_integer_value(idx);
        snprintf(g[i].uuid, sizeof g[i].uuid, "%s", uuid);
        snprintf(g[i].name, sizeof g[i].name, "%s", name);
        g[i].sm_count = (int)json_integer_value(sm);
        g[i].sm_granularity = (int)json_integer_value(gr);
        g[i].memory_total = json_integer_value(mem);
        g[i].compute_capability = cc;
    }
    *out = g;
    *n = (int)cnt;
    return 0;
}

/* The "sessions" array of register/heartbeat: objects with a string "id" and boolean
 * "alive" (and, in heartbeats, "connected"). */
static int check_reports(json_t *arr, int heartbeat, struct api_error *e)
{
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return api_fail(e, 400, "bad_request", "sessions: expected an array");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        const char *id = json_string_value(json_object_get(o, "id"));
        json_t *mu = json_object_get(o, "memory_used");
        const char *bad = !id || !valid_id(id) ? "id"
                          : !json_is_boolean(json_object_get(o, "alive")) ? "alive"
                          : heartbeat && json_object_get(o, "connected")
                                    && !json_is_boolean(json_object_get(o, "connected")) ? "connected"
                          : mu && !json_is_integer(mu) ? "memory_used" : NULL;
        if (bad)
            return api_fail(e, 400, "bad_request", "sessions[%zu].%s: missing or invalid", i, bad);
    }
    return 0;
}

static json_t *find_report(json_t *arr, const char *id)
{
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o)
        if (strcmp(json_string_value(json_object_get(o, "id")), id) == 0)
            return o;
    return NULL;
}

/* Reported sessions that the store does not know as live sessions of this node: stop them. */
static int stops_for_unknown(struct clm *clm, const char *node_id, json_t *reports, json_t *stop,
                             struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    size_t i;
    json_t *o;
    json_array_foreach(reports, i, o) {
        const char *id = json_string_value(json_object_get(o, "id"));
        struct session_rec s;
        char err[512];
        int found = store_session_get(clm->store, id, &s, err, sizeof err);
        if (found < 0)
            return api_store_fail(e, "reading a session", err);
        if (found && ckpt_session_busy(id))
            continue;   /* being restored or migrated here: that request settles it */
        struct reservation_rec r;
        int reserved = found ? store_reservation_get(clm->store, id, &r, err, sizeof err) : 0;
        if (reserved < 0)
            return api_store_fail(e, "reading a reservation", err);
        if (reserved && strcmp(r.node_id, node_id) == 0)
            continue;   /* a previous run's migration here: migrations_recover settles it */
        if (!found || !session_is_live(&s) || strcmp(s.node_id, node_id) != 0)
            json_array_append_new(stop, json_string(id));
    }
    return 0;
}

static const struct gpu_rec *gpu_by_index(const struct gpu_rec *g, int n, int index)
{
    for (int i = 0; i < n; i++)
        if (g[i].index == index)
            return &g[i];
    return NULL;
}

void h_node_register(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct node_rec n = {0};
    char err[512];
    struct gpu_rec *gpus = NULL, *old = NULL;
    int ngpus = 0, nold = 0;
    json_t *stop = json_array();
    if (clm_begin(clm, &e) < 0) {
        json_decref(stop);
        api_reply_error(res, &e);
        return;
    }
    int rc = node_self(clm, req, &n, &e);
    const char *address = json_string_value(json_object_get(req->body, "address"));
    const char *host_ip = json_string_value(json_object_get(req->body, "host_ip"));
    json_t *reports = json_object_get(req->body, "sessions");
    if (rc == 0 && !json_is_object(req->body))
        rc = api_fail(&e, 400, "bad_request", "body: expected {\"address\", \"host_ip\", \"gpus\", "
                      "\"sessions\"}");
    if (rc == 0 && (!address || (strncmp(address, "http://", 7) != 0
                                 && strncmp(address, "https://", 8) != 0)
                    || strlen(address) >= ADDR_MAX - 1 || strlen(address) < 9))
        rc = api_fail(&e, 400, "bad_request", "address: expected the node manager's URL, "
                      "http://IP:PORT or https://IP:PORT");
    if (rc == 0 && (!host_ip || !valid_ip(host_ip)))
        rc = api_fail(&e, 400, "bad_request", "host_ip: expected an IPv4 or IPv6 address");
    if (rc == 0)
        rc = parse_gpus(json_object_get(req->body, "gpus"), &gpus, &ngpus, &e);
    if (rc == 0)
        rc = check_reports(reports, 0, &e);
    if (rc == 0 && store_gpus_get(clm->store, n.id, &old, &nold, err, sizeof err) < 0)
        rc = api_store_fail(&e, "reading GPUs", err);
    /* reconcile the store's live sessions of this node with what the node runs */
    struct session_rec *ss = NULL;
    int ns = 0, ended = 0;
    if (rc == 0) {
        struct session_filter f = {.node_id = n.id, .live_only = 1};
        if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
            rc = api_store_fail(&e, "reading sessions", err);
    }
    for (int i = 0; rc == 0 && i < ns; i++) {
        const struct gpu_rec *was = gpu_by_index(old, nold, ss[i].gpu_index);
        const struct gpu_rec *now = gpu_by_index(gpus, ngpus, ss[i].gpu_index);
        json_t *r = find_report(reports, ss[i].id);
        const char *why = NULL;
        if (!now || !was || strcmp(now->uuid, was->uuid) != 0 || now->sm_count != was->sm_count
            || now->sm_granularity != was->sm_granularity
            || (now->compute_capability && was->compute_capability /* 0: not reported */
                && now->compute_capability != was->compute_capability))
            why = "its GPU changed when the node registered again";
        else if (ss[i].state == SESSION_STARTING || ss[i].state == SESSION_MIGRATING)
            why = NULL;   /* its start or migration is in flight; that request settles it */
        else if (!r || !json_is_true(json_object_get(r, "alive")))
            why = "not running on the node when it registered again";
        if (why) {
            if (session_end(clm, &ss[i], SESSION_LOST, why, err, sizeof err) < 0)
                rc = api_store_fail(&e, "ending a session", err);
            ended++;
        }
    }
    free(ss);
    if (rc == 0)
        rc = stops_for_unknown(clm, n.id, reports, stop, &e);
    if (rc == 0 && store_gpus_set(clm->store, n.id, gpus, ngpus, err, sizeof err) < 0)
        rc = api_store_fail(&e, "saving GPUs", err);
    enum node_state prev = n.state;
    if (rc == 0) {
        if (!n.session_key[0] && (flyt_random_hex(32, n.session_key, sizeof n.session_key) < 0
                                  || flyt_token_new(n.manager_token, sizeof n.manager_token) < 0))
            rc = api_fail(&e, 500, "internal", "cannot make the node's keys");
        snprintf(n.address, sizeof n.address, "%s", address);
        size_t al = strlen(n.address);
        while (al && n.address[al - 1] == '/')
            n.address[--al] = 0;
        snprintf(n.host_ip, sizeof n.host_ip, "%s", host_ip);
        n.state = prev == NODE_DRAINING ? NODE_DRAINING : NODE_READY;
        n.last_heartbeat = now_ms();
    }
    if (rc == 0 && store_node_update(clm->store, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "updating a node", err);
    if (rc == 0) {
        const char *kind = prev == NODE_LOST ? "node.returned"
                           : prev == NODE_READY ? "node.reregistered" : "node.registered";
        rc = api_event(clm, kind, n.id, &e, "node %s at %s registered with %d GPU(s); %d session(s) "
                   "ended, %zu to stop", n.id, n.address, ngpus, ended, json_array_size(stop));
    }
    free(gpus);
    free(old);
    if (clm_end(clm, rc == 0, &e) < 0) {
        json_decref(stop);
        api_reply_error(res, &e);
        return;
    }
    double hb = (double)clm->set.heartbeat_interval_ms / 1000.0;
    json_t *hbj = hb == floor(hb) ? json_integer((json_int_t)hb) : json_real(hb);
    flyt_http_reply_json(res, 200, json_pack("{s:o,s:s,s:s,s:o}", "heartbeat_interval_s", hbj,
                                             "session_key", n.session_key, "manager_token",
                                             n.manager_token, "stop", stop));
}

/* One reported live session of a heartbeat: failure, activity, idle release. */
static int heartbeat_session(struct clm *clm, struct session_rec *s, json_t *r, long long now,
                             json_t *stop, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    int rc = 0;
    if (s->state == SESSION_MIGRATING)
        return 0;   /* its server ends on purpose; the migration settles it */
    if (!json_is_true(json_object_get(r, "alive"))) {
        rc = session_end(clm, s, SESSION_FAILED, "its server is no longer running", err, sizeof err);
    } else if (s->state != SESSION_ACTIVE) {
        return 0;   /* starting: the start request settles it */
    } else if (!json_is_false(json_object_get(r, "connected"))) {
        s->disconnected_since = 0;
        s->last_activity = now;
        rc = store_session_update(clm->store, s, err, sizeof err);
    } else {
        if (!s->disconnected_since) {
            s->disconnected_since = now;
            rc = store_session_update(clm->store, s, err, sizeof err);
        }
        long long from = s->disconnected_since > s->last_activity ? s->disconnected_since
                                                                  : s->last_activity;
        if (rc >= 0 && now - from >= clm->set.idle_grace_ms) {
            char why[128];
            snprintf(why, sizeof why, "idle: no client connected for %lld s", (now - from) / 1000);
            rc = session_end(clm, s, SESSION_RELEASED, why, err, sizeof err);
            json_array_append_new(stop, json_string(s->id));
        }
    }
    return rc < 0 ? api_store_fail(e, "updating a session", err) : 0;
}

void h_node_heartbeat(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct node_rec n = {0};
    char err[512];
    json_t *stop = json_array();
    long long now = now_ms();
    if (clm_begin(clm, &e) < 0) {
        json_decref(stop);
        api_reply_error(res, &e);
        return;
    }
    int rc = node_self(clm, req, &n, &e);
    json_t *reports = json_object_get(req->body, "sessions");
    if (rc == 0 && !json_is_object(req->body))
        rc = api_fail(&e, 400, "bad_request", "body: expected {\"sessions\": [...]}");
    if (rc == 0)
        rc = check_reports(reports, 1, &e);
    if (rc == 0 && n.state == NODE_REGISTERED)
        rc = api_fail(&e, 409, "conflict", "node %s has not registered yet", n.id);
    if (rc == 0 && n.state == NODE_LOST) {
        n.state = NODE_READY;
        rc = api_event(clm, "node.returned", n.id, &e, "node %s heartbeats again after it was lost",
                   n.id);
    }
    struct session_rec *ss = NULL;
    int ns = 0;
    if (rc == 0) {
        struct session_filter f = {.node_id = n.id, .live_only = 1};
        if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
            rc = api_store_fail(&e, "reading sessions", err);
    }
    for (int i = 0; rc == 0 && i < ns; i++) {
        json_t *r = find_report(reports, ss[i].id);
        long long seen = ss[i].created_at > ss[i].last_activity ? ss[i].created_at
                                                                : ss[i].last_activity;
        if (r)
            rc = heartbeat_session(clm, &ss[i], r, now, stop, &e);
        else if (ss[i].state == SESSION_ACTIVE
                 && now - seen > 2 * clm->set.heartbeat_interval_ms
                 && session_end(clm, &ss[i], SESSION_LOST, "its node no longer reports it", err,
                                sizeof err) < 0)
            rc = api_store_fail(&e, "ending a session", err);
    }
    free(ss);
    if (rc == 0)
        rc = stops_for_unknown(clm, n.id, reports, stop, &e);
    if (rc == 0) {
        n.last_heartbeat = now;
        if (store_node_update(clm->store, &n, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a node", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        json_decref(stop);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:o}", "stop", stop));
}

void h_node_session_ended(void *ctx, const struct flyt_http_request *req,
                          struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct node_rec n = {0};
    struct session_rec s;
    char err[512];
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = node_self(clm, req, &n, &e);
    json_t *reason = json_object_get(req->body, "reason");
    if (rc == 0 && req->body && (!json_is_object(req->body) || (reason && !json_is_string(reason))))
        rc = api_fail(&e, 400, "bad_request", "reason: expected a string");
    if (rc == 0) {
        int found = store_session_get(clm->store, req->params[1], &s, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading a session", err);
        else if (!found || strcmp(s.node_id, n.id) != 0)
            rc = api_fail(&e, 404, "not_found", "no session %s on node %s", req->params[1], n.id);
    }
    if (rc == 0 && session_is_live(&s) && s.state != SESSION_MIGRATING) {
        const char *r = reason ? json_string_value(reason) : "ended";
        int failed = strncmp(r, "fail", 4) == 0 || strncmp(r, "crash", 5) == 0;
        char why[300];
        snprintf(why, sizeof why, "ended on the node: %.200s", r);
        if (session_end(clm, &s, failed ? SESSION_FAILED : SESSION_RELEASED, why, err, sizeof err) < 0)
            rc = api_store_fail(&e, "ending a session", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_status(res, 204);
}
