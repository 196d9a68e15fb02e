/* /v1/nodes: the operator's node records (the node managers' own calls are in
 * api_node_calls.c). */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int node_load(struct clm *clm, const char *id, struct node_rec *n, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    int found = store_node_get(clm->store, id, n, err, sizeof err);
    if (found < 0)
        return api_store_fail(e, "reading a node", err);
    if (!found)
        return api_fail(e, 404, "not_found", "no node %s", id);
    return 0;
}

static void reply_node(struct clm *clm, struct flyt_http_response *res, int status,
                       const struct node_rec *n, json_t *extra_sessions, const char *token,
                       struct api_error *e);

void h_nodes_list(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct node_rec *nodes = NULL;
    int n = 0;
    char err[512];
    json_t *arr = json_array();
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0 && store_node_list(clm->store, &nodes, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "listing nodes", err);
    for (int i = 0; rc == 0 && i < n; i++) {
        json_t *j = node_json(clm, &nodes[i], &e);
        if (!j)
            rc = -1;
        else
            json_array_append_new(arr, j);
    }
    pthread_mutex_unlock(&clm->lock);
    free(nodes);
    api_reply_wrapped(res, rc >= 0, &e, 200, "nodes", arr);
}

void h_nodes_create(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct node_rec n = {0};
    char token[65], hash[65], err[512];
    memset(&n, 0, sizeof n);
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0 && !json_is_object(req->body))
        rc = api_fail(&e, 400, "bad_request", "body: expected {\"id\", \"host_ip\"}");
    const char *key;
    json_t *v;
    json_object_foreach(rc == 0 ? req->body : NULL, key, v) {
        const char *s = json_string_value(v);
        if (strcmp(key, "id") == 0 && s && valid_id(s))
            snprintf(n.id, sizeof n.id, "%s", s);
        else if (strcmp(key, "host_ip") == 0 && s && valid_ip(s))
            snprintf(n.host_ip, sizeof n.host_ip, "%s", s);
        else if (strcmp(key, "id") == 0)
            rc = api_fail(&e, 400, "bad_request",
                          "id: expected 1 to 63 characters of A-Z a-z 0-9 . _ -");
        else if (strcmp(key, "host_ip") == 0)
            rc = api_fail(&e, 400, "bad_request", "host_ip: expected an IPv4 or IPv6 address");
        else
            rc = api_fail(&e, 400, "bad_request", "unknown field \"%s\"", key);
        if (rc < 0)
            break;
    }
    if (rc == 0 && (!n.id[0] || !n.host_ip[0]))
        rc = api_fail(&e, 400, "bad_request", "%s: missing", !n.id[0] ? "id" : "host_ip");
    if (rc == 0) {
        int found = store_node_get(clm->store, n.id, NULL, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading nodes", err);
        else if (found)
            rc = api_fail(&e, 409, "conflict", "node %s exists", n.id);
    }
    if (rc == 0 && (flyt_token_new(token, sizeof token) < 0
                    || flyt_sha256_hex(token, strlen(token), hash, sizeof hash) < 0))
        rc = api_fail(&e, 500, "internal", "cannot make a token");
    if (rc == 0) {
        n.state = NODE_REGISTERED;
        n.created_at = now_ms();
        int r = store_node_insert(clm->store, &n, hash, err, sizeof err);
        if (r == DB_CONSTRAINT)
            rc = api_fail(&e, 409, "conflict", "node %s exists", n.id);
        else if (r < 0)
            rc = api_store_fail(&e, "creating a node", err);
    }
    if (rc == 0)
        rc = api_event(clm, "node.created", n.id, &e, "node %s (host_ip %s) created; waiting for its "
                   "node manager to register", n.id, n.host_ip);
    if (rc == 0) {
        reply_node(clm, res, 201, &n, NULL, token, &e);
        if (clm_end(clm, 1, &e) < 0)
            api_reply_error(res, &e);
        return;
    }
    clm_end(clm, 0, &e);
    api_reply_error(res, &e);
}

/* Replies {"node": Node, "sessions"?: [...], "token"?} (lock held). */
static void reply_node(struct clm *clm, struct flyt_http_response *res, int status,
                       const struct node_rec *n, json_t *sessions, const char *token,
                       struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    json_t *j = node_json(clm, n, e);
    if (!j) {
        json_decref(sessions);
        api_reply_error(res, e);
        return;
    }
    json_t *out = json_pack("{s:o}", "node", j);
    if (sessions)
        json_object_set_new(out, "sessions", sessions);
    if (token)
        json_object_set_new(out, "token", json_string(token));
    flyt_http_reply_json(res, status, out);
}

void h_node_get(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct node_rec n = {0};
    char err[512];
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = node_load(clm, req->params[0], &n, &e);
    if (rc == 0) {
        struct session_filter f = {.node_id = n.id, .live_only = 1};
        struct session_rec *ss;
        int ns;
        if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0) {
            rc = api_store_fail(&e, "reading sessions", err);
        } else {
            json_t *arr = json_array();
            for (int i = 0; i < ns; i++)
                json_array_append_new(arr, session_json(&ss[i]));
            free(ss);
            reply_node(clm, res, 200, &n, arr, NULL, &e);
        }
    }
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0)
        api_reply_error(res, &e);
}

void h_node_delete(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct node_rec n = {0};
    struct stop_list stops = {0};
    char err[512];
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = node_load(clm, req->params[0], &n, &e);
    struct session_rec *ss = NULL;
    int ns = 0;
    if (rc == 0) {
        struct session_filter f = {.node_id = n.id, .live_only = 1};
        if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
            rc = api_store_fail(&e, "reading sessions", err);
    }
    for (int i = 0; rc == 0 && i < ns; i++) {
        if (session_end(clm, &ss[i], SESSION_LOST, "node deleted", err, sizeof err) < 0)
            rc = api_store_fail(&e, "ending a session", err);
        else
            stop_list_add(&stops, &n, ss[i].id);
    }
    free(ss);
    if (rc == 0 && store_node_delete(clm->store, n.id, err, sizeof err) < 0)
        rc = api_store_fail(&e, "deleting a node", err);
    if (rc == 0)
        rc = api_event(clm, "node.deleted", n.id, &e, "node %s deleted; %d session(s) ended", n.id, ns);
    if (clm_end(clm, rc == 0, &e) < 0) {
        free(stops.items);
        api_reply_error(res, &e);
        return;
    }
    stop_list_run(&stops);
    flyt_http_reply_status(res, 204);
}
