/* Rotation and revocation of credentials (docs/api.md, "Rotating and revoking tokens"):
 * a node's or VM's API token, and a session's tokens. Operator token. */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#define GRACE_DEFAULT_S 600LL           /* a rotated token's previous one: 10 minutes more */
#define GRACE_MAX_S (7LL * 24 * 3600)

int session_signing_key(const struct node_rec *node, const char *sid, long long epoch,
                        unsigned char *key, size_t cap, size_t *len)
{
    unsigned char raw[64];
    size_t rawlen = 0;
    if (flyt_hex_decode(node->session_key, raw, sizeof raw, &rawlen) < 0 || rawlen == 0)
        return -1;
    int rc = flyt_session_key_derive(raw, rawlen, sid, epoch, key, cap, len);
    OPENSSL_cleanse(raw, sizeof raw);
    return rc;
}

int session_signing_key_hex(const struct node_rec *node, const char *sid, long long epoch,
                            char *hex, size_t cap)
{
    unsigned char key[64];
    size_t len = 0;
    if (session_signing_key(node, sid, epoch, key, sizeof key, &len) < 0 || cap < 2 * len + 1)
        return -1;
    flyt_hex_encode(key, len, hex);
    OPENSSL_cleanse(key, sizeof key);
    return 0;
}

static const char *owner_kind(enum token_owner owner)
{
    return owner == TOKEN_OF_VM ? "vm" : "node";
}

/* The optional body of a rotation: {"grace_s": seconds}. */
static int parse_grace(const json_t *body, long long *grace_s, struct api_error *e)
{
    *grace_s = GRACE_DEFAULT_S;
    json_t *g = json_is_object(body) ? json_object_get(body, "grace_s") : NULL;
    if (body && !json_is_object(body))
        return api_fail(e, 400, "bad_request", "body: expected {\"grace_s\"?: seconds}");
    if (!g)
        return 0;
    if (!json_is_integer(g) || json_integer_value(g) < 0 || json_integer_value(g) > GRACE_MAX_S)
        return api_fail(e, 400, "bad_request", "grace_s: expected an integer in [0, %lld]",
                        GRACE_MAX_S);
    *grace_s = json_integer_value(g);
    return 0;
}

/* 0 when the record exists (404 otherwise); lock held. */
static int owner_exists(struct clm *clm, enum token_owner owner, const char *id,
                        struct api_error *e)
{
    char err[512];
    int rc = owner == TOKEN_OF_VM ? store_vm_get(clm->store, id, NULL, err, sizeof err)
                                  : store_node_get(clm->store, id, NULL, err, sizeof err);
    if (rc < 0)
        return api_store_fail(e, "reading", err);
    return rc ? 0 : api_fail(e, 404, "not_found", "no %s %s", owner_kind(owner), id);
}

static void rotate(struct clm *clm, const struct flyt_http_request *req,
                   struct flyt_http_response *res, enum token_owner owner)
{
    struct api_error e = {0};
    struct principal who;
    const char *id = req->params[0], *kind = owner_kind(owner);
    char token[65], hash[65], err[512];
    long long grace_s = 0, until = 0;
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = parse_grace(req->body, &grace_s, &e);
    if (rc == 0)
        rc = owner_exists(clm, owner, id, &e);
    if (rc == 0 && (flyt_token_new(token, sizeof token) < 0
                    || flyt_sha256_hex(token, strlen(token), hash, sizeof hash) < 0))
        rc = api_fail(&e, 500, "internal", "cannot make a token");
    if (rc == 0) {
        until = grace_s ? now_ms() + grace_s * 1000 : 0;
        if (store_token_rotate(clm->store, owner, id, hash, until, err, sizeof err) < 0)
            rc = api_store_fail(&e, "rotating a token", err);
    }
    char ev[48];
    snprintf(ev, sizeof ev, "%s.token_rotated", kind);
    if (rc == 0)
        rc = api_event(clm, ev, id, &e, "%s %s has a new token; the previous one is %s", kind,
                       id, grace_s ? "valid for its grace" : "refused from now on");
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:s,s:I,s:o}", kind, id, "token", token,
                                             "grace_s", (json_int_t)grace_s,
                                             "previous_valid_until", json_time(until)));
    OPENSSL_cleanse(token, sizeof token);
}

/* body: {"previous_only"?: bool}: only the token a rotation's grace keeps valid. */
static void revoke(struct clm *clm, const struct flyt_http_request *req,
                   struct flyt_http_response *res, enum token_owner owner)
{
    struct api_error e = {0};
    struct principal who;
    const char *id = req->params[0], *kind = owner_kind(owner);
    char err[512];
    int previous_only = json_is_true(json_object_get(req->body, "previous_only"));
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = owner_exists(clm, owner, id, &e);
    if (rc == 0 && store_token_revoke(clm->store, owner, id, previous_only, err, sizeof err) < 0)
        rc = api_store_fail(&e, "revoking a token", err);
    char ev[48];
    snprintf(ev, sizeof ev, "%s.token_revoked", kind);
    if (rc == 0)
        rc = api_event(clm, ev, id, &e, "%s %s: %s", kind, id,
                       previous_only ? "its previous token (a rotation's) is refused from now on"
                                     : "every token is refused from now on (rotate-token "
                                       "gives it a new one)");
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:s}", kind, id, "revoked",
                                             previous_only ? "previous" : "all"));
}

void h_node_rotate_token(void *ctx, const struct flyt_http_request *req,
                         struct flyt_http_response *res)
{
    rotate(ctx, req, res, TOKEN_OF_NODE);
}

void h_vm_rotate_token(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res)
{
    rotate(ctx, req, res, TOKEN_OF_VM);
}

void h_node_revoke_token(void *ctx, const struct flyt_http_request *req,
                         struct flyt_http_response *res)
{
    revoke(ctx, req, res, TOKEN_OF_NODE);
}

void h_vm_revoke_token(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res)
{
    revoke(ctx, req, res, TOKEN_OF_VM);
}

/* Tells the session's running server the key of its next epoch (without the lock). */
static int push_session_key(const struct node_rec *node, const struct session_rec *s,
                            long long epoch, struct api_error *e)
{
    char hex[129], url[ADDR_MAX + ID_MAX + 32], err[512];
    if (session_signing_key_hex(node, s->id, epoch, hex, sizeof hex) < 0)
        return api_fail(e, 500, "internal", "node %s has no valid session key", node->id);
    snprintf(url, sizeof url, "%s/v1/servers/%s/session-key", node->address, s->id);
    json_t *body = json_pack("{s:s}", "session_key", hex);
    OPENSSL_cleanse(hex, sizeof hex);
    long status = 0;
    int rc = flyt_http_call_timeout("PUT", url, node->manager_token, body, 10000, &status, NULL,
                                    err, sizeof err);
    json_decref(body);
    if (rc < 0 || status != 204)
        return api_fail(e, 503, "unavailable", "node %s did not take the session's new key "
                        "(nothing revoked): %s", node->id, err);
    return 0;
}

/* POST /v1/sessions/{id}/revoke-tokens: every token issued for the session so far is
 * refused at its server's admission from now on; connections already admitted carry on,
 * and the session's process gets a token of the new epoch when it asks again. The running
 * server is told first (nothing changes when it cannot be), then the epoch is recorded. */
void h_session_revoke_tokens(void *ctx, const struct flyt_http_request *req,
                             struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct session_rec s;
    struct node_rec node;
    char err[512];
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    int found = rc == 0 ? store_session_get(clm->store, req->params[0], &s, err, sizeof err) : 0;
    if (rc == 0 && found < 0)
        rc = api_store_fail(&e, "reading the session", err);
    else if (rc == 0 && !found)
        rc = api_fail(&e, 404, "not_found", "no session %s", req->params[0]);
    int running = rc == 0 && (s.state == SESSION_ACTIVE || s.state == SESSION_MIGRATING);
    if (rc == 0)
        rc = node_load(clm, s.node_id, &node, &e);
    pthread_mutex_unlock(&clm->lock);
    if (rc == 0 && running)
        rc = push_session_key(&node, &s, s.token_epoch + 1, &e);
    long long epoch = 0;
    if (rc == 0 && clm_begin(clm, &e) == 0) {
        if (store_session_token_epoch_next(clm->store, s.id, &epoch, err, sizeof err) < 0)
            rc = api_store_fail(&e, "recording the revocation", err);
        if (rc == 0)
            rc = api_event(clm, "session.tokens_revoked", s.id, &e,
                           "session %s: its tokens issued so far are refused (epoch %lld)", s.id,
                           epoch);
        rc = clm_end(clm, rc == 0, &e);
    } else if (rc == 0) {
        rc = -1;
    }
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:I,s:b}", "session", s.id, "token_epoch",
                                             (json_int_t)epoch, "server_told", running));
}
