/* Live resize (docs/api.md, "Live resize"): POST /v1/vms/{id}/resize and
 * POST /v1/sessions/{id}/resize, operator only. A share is the VM's (all its
 * live sessions run on the same SM groups and memory quota), so both resize
 * the VM's share and every session on it.
 *
 * Body: "sm_count" (absolute) or "sm_delta", "memory_quota" (bytes) or
 * "memory_delta", "partial" (bool). Under the lock: the GPU's capacity without
 * the VM's own share (capacity.c), the new SM count checked (at least one
 * group, at most the GPU, a multiple of the granularity), groups kept lowest
 * first when shrinking and the lowest free ones added when growing, memory
 * against what the GPU has free; past what is free it is refused, or with
 * "partial" granted as far as it goes. The new share is recorded for each of
 * the VM's sessions (the store's groups are the SM group map, so nothing is
 * counted twice) with "session.resized" events; then, without the lock, the
 * node manager applies it to each running server. If a node cannot, the old
 * share is recorded again, put back on the servers that took the new one, and
 * the answer says why. */
#include "clm.h"

#include "flyt_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct resize_ask {
    int has_sm, sm_rel, has_mem, mem_rel, partial;
    long long sm, mem;
};

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int parse_ask(json_t *b, struct resize_ask *a, struct api_error *e)
{
    memset(a, 0, sizeof *a);
    if (!json_is_object(b))
        return api_fail(e, 400, "bad_request", "body: expected {\"sm_count\" or \"sm_delta\", "
                        "\"memory_quota\" or \"memory_delta\", \"partial\"?}");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
        int sm = strncmp(key, "sm_", 3) == 0, rel = strstr(key, "_delta") != NULL;
        if (strcmp(key, "partial") == 0) {
            if (!json_is_boolean(v))
                return api_fail(e, 400, "bad_request", "partial: expected true or false");
            a->partial = json_is_true(v);
            continue;
        }
        if (strcmp(key, "sm_count") && strcmp(key, "sm_delta") && strcmp(key, "memory_quota") &&
            strcmp(key, "memory_delta"))
            return api_fail(e, 400, "bad_request", "unknown field \"%s\"", key);
        if (!json_is_integer(v))
            return api_fail(e, 400, "bad_request", "%s: expected an integer", key);
        if ((sm && a->has_sm) || (!sm && a->has_mem))
            return api_fail(e, 400, "bad_request", "give the %s as a count or as a delta, not "
                            "both", sm ? "SMs" : "memory");
        if (sm) {
            a->has_sm = 1, a->sm_rel = rel, a->sm = json_integer_value(v);
        } else {
            a->has_mem = 1, a->mem_rel = rel, a->mem = json_integer_value(v);
        }
    }
    if (!a->has_sm && !a->has_mem)
        return api_fail(e, 400, "bad_request", "give at least one of sm_count, sm_delta, "
                        "memory_quota, memory_delta");
    return 0;
}

static int has_group(const int *g, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (g[i] == x)
            return 1;
    return 0;
}

static void sort_groups(int *g, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && g[j - 1] > g[j]; j--) {
            int t = g[j];
            g[j] = g[j - 1];
            g[j - 1] = t;
        }
}

/* The share s may have on GPU c (its own share already taken out of c). */
static int plan(const struct gpu_cap *c, struct session_rec *s, const struct resize_ask *a,
                const char **granted, struct api_error *e)
{
    int gran = c->granularity, gpu_sms = c->ngroups * c->granularity;
    long long want_sm = !a->has_sm ? s->sm_count : a->sm_rel ? s->sm_count + a->sm : a->sm;
    long long want_mem = !a->has_mem ? s->memory_quota
                         : a->mem_rel ? s->memory_quota + a->mem : a->mem;
    char m1[64], m2[64];
    if (want_sm <= 0)
        return api_fail(e, 400, "bad_request", "session %s would have %lld SMs; a share holds at "
                        "least one group of %d SMs", s->id, want_sm, gran);
    if (want_sm > gpu_sms)
        return api_fail(e, 400, "bad_request", "session %s: %lld SMs is more than GPU %s/%d has "
                        "(%d SMs in groups of %d)", s->id, want_sm, c->node_id, c->index, gpu_sms,
                        gran);
    if (want_sm % gran)
        return api_fail(e, 400, "bad_request", "session %s: %lld SMs is not a multiple of the "
                        "GPU's SM granularity, %d SMs per group", s->id, want_sm, gran);
    format_bytes(c->memory_total, m1, sizeof m1);
    if (want_mem <= 0 || want_mem > c->memory_total)
        return api_fail(e, 400, "bad_request", "session %s would have %lld bytes of memory; the "
                        "GPU has %s", s->id, want_mem, m1);
    int want_g = (int)(want_sm / gran), n = 0, groups[MAX_SM_GROUPS];
    for (int i = 0; i < s->ngroups && n < want_g; i++) /* kept lowest first */
        if (s->groups[i] >= 0 && s->groups[i] < c->ngroups)
            groups[n++] = s->groups[i];
    for (int i = 0; i < c->ngroups && n < want_g; i++)
        if (c->group_users[i] == 0 && !has_group(groups, n, i))
            groups[n++] = i;
    long long mem_free = c->memory_total - c->memory_allocated;
    int short_sm = n < want_g, short_mem = want_mem > mem_free;
    *granted = "full";
    if (short_sm || short_mem) {
        format_bytes(want_mem, m1, sizeof m1);
        format_bytes(mem_free, m2, sizeof m2);
        if (!a->partial)
            return api_fail(e, 409, "no_capacity", "session %s: asked for %lld SMs and %s; GPU "
                            "%s/%d can give it %d SMs and %s (add partial to take that)", s->id,
                            want_sm, m1, c->node_id, c->index, n * gran, m2);
        *granted = "partial";
        if (short_mem)
            want_mem = mem_free;
    }
    sort_groups(groups, n);
    s->ngroups = n;
    memcpy(s->groups, groups, sizeof groups[0] * (size_t)n);
    s->sm_count = n * gran;
    s->memory_quota = want_mem;
    return 0;
}

/* A resize of a VM's share: its live sessions (all on the share's node, GPU and SM groups),
 * each with its new and previous share. */
struct vm_resize {
    int n;
    struct session_rec *now, *old;
    struct node_rec *nodes;
    const char *granted;
};

static void vm_resize_free(struct vm_resize *rs)
{
    free(rs->now);
    free(rs->old);
    free(rs->nodes);
    memset(rs, 0, sizeof *rs);
}

/* Records share (a session's SM groups, count and memory quota) for every session of rs. */
static int record_shares(struct clm *clm, struct session_rec *ss, int n,
                         const struct session_rec *share, const char *kind, const char *why,
                         struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512], m[64];
    format_bytes(share->memory_quota, m, sizeof m);
    for (int i = 0; i < n; i++) {
        ss[i].sm_count = share->sm_count;
        ss[i].ngroups = share->ngroups;
        memcpy(ss[i].groups, share->groups, sizeof ss[i].groups[0] * (size_t)share->ngroups);
        ss[i].memory_quota = share->memory_quota;
        if (store_session_set_share(clm->store, &ss[i], err, sizeof err) < 0)
            return api_store_fail(e, "recording a share", err);
        if (api_event(clm, kind, ss[i].id, e, "VM %s: %d SMs and %s on %s/%d (%s)", ss[i].vm_id,
                      ss[i].sm_count, m, ss[i].node_id, ss[i].gpu_index, why) < 0)
            return -1;
    }
    return 0;
}

/* Under the lock: the VM's new share planned on its GPU and recorded for each of its live
 * sessions (rs->old keeps the previous one). A VM whose sessions are all gone has none. */
static int reserve(struct clm *clm, const char *vm_id, const struct resize_ask *a,
                   struct vm_resize *rs, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    struct session_filter f = {.vm_id = vm_id, .live_only = 1};
    struct session_rec *ss;
    if (store_session_list(clm->store, &f, &ss, &rs->n, err, sizeof err) < 0)
        return api_store_fail(e, "reading sessions", err);
    rs->old = ss;
    if (rs->n <= 0)
        return 0;
    for (int i = 0; i < rs->n; i++)
        if (ss[i].state != SESSION_ACTIVE) /* its server starts on the share it was given */
            return api_fail(e, 409, "conflict", "session %s of VM %s is %s; try again once it "
                            "is active", ss[i].id, vm_id, session_state_name(ss[i].state));
    rs->now = malloc(sizeof *rs->now * (size_t)rs->n);
    rs->nodes = calloc((size_t)rs->n, sizeof *rs->nodes);
    if (!rs->now || !rs->nodes)
        return api_fail(e, 500, "internal", "out of memory");
    memcpy(rs->now, ss, sizeof *ss * (size_t)rs->n);
    for (int i = 0; i < rs->n; i++)
        if (node_load(clm, ss[i].node_id, &rs->nodes[i], e) < 0)
            return -1;
    struct gpu_cap *caps = NULL;
    int ncaps = 0;
    if (capacity_build(clm, &rs->nodes[0], 1, &caps, &ncaps, err, sizeof err) < 0)
        return api_store_fail(e, "reading capacity", err);
    struct gpu_cap *c = NULL;
    for (int i = 0; i < ncaps; i++)
        if (caps[i].index == ss[0].gpu_index)
            c = &caps[i];
    int rc = c ? 0 : api_fail(e, 409, "conflict", "node %s no longer reports GPU %d",
                              ss[0].node_id, ss[0].gpu_index);
    if (rc == 0) { /* the GPU as if this VM held nothing (capacity.c counts it once) */
        for (int i = 0; i < ss[0].ngroups; i++)
            if (ss[0].groups[i] >= 0 && ss[0].groups[i] < c->ngroups)
                c->group_users[ss[0].groups[i]]--;
        c->memory_allocated -= ss[0].memory_quota;
        rc = plan(c, &rs->now[0], a, &rs->granted, e);
    }
    free(caps);
    if (rc < 0)
        return -1;
    return record_shares(clm, rs->now, rs->n, &rs->now[0], "session.resized", rs->granted, e);
}

/* Without the lock: the node manager applies it. 0, or -1 with why. */
static int node_apply(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                      json_t **answer, char *why, size_t whylen)
{
    char url[ADDR_MAX + 128];
    snprintf(url, sizeof url, "%s/v1/servers/%s/resize", node->address, s->id);
    json_t *groups = json_array();
    for (int i = 0; i < s->ngroups; i++)
        json_array_append_new(groups, json_integer(s->groups[i]));
    json_t *body = json_pack("{s:o,s:i,s:I}", "sm_groups", groups, "sm_count", s->sm_count,
                             "memory_quota", (json_int_t)s->memory_quota);
    long status = 0;
    int rc = flyt_http_call_timeout("POST", url, node->manager_token, body,
                                    clm->set.server_start_timeout_ms, &status, answer, why, whylen);
    json_decref(body);
    return rc < 0 || status != 200 ? -1 : 0;
}

/* The previous share recorded again and put back on the servers that took the new one
 * (the first napplied), after the node of session failed could not apply it. */
static void roll_back(struct clm *clm, struct vm_resize *rs, int napplied, const char *why)
{
    struct api_error e = {0};
    if (clm_begin(clm, &e) == 0) {
        int ok = record_shares(clm, rs->old, rs->n, &rs->old[0], "session.resize_failed", why,
                               &e) == 0;
        clm_end(clm, ok, &e);
    }
    for (int i = 0; i < napplied; i++) {
        json_t *ans = NULL;
        char err[512];
        if (node_apply(clm, &rs->nodes[i], &rs->old[i], &ans, err, sizeof err) < 0)
            flyt_warn("session %s: node %s could not take back its share: %s", rs->old[i].id,
                      rs->nodes[i].id, err);
        json_decref(ans);
    }
}

/* The VM's share resized, end to end: each live session's answer in an array, or NULL
 * with e (nothing changed). */
static json_t *resize_vm(struct clm *clm, const char *vm_id, const struct resize_ask *a,
                         struct vm_resize *rs, struct api_error *e)
{
    double t0 = mono_ms();
    if (clm_begin(clm, e) < 0)
        return NULL;
    int rc = reserve(clm, vm_id, a, rs, e);
    if (clm_end(clm, rc == 0, e) < 0)
        return NULL;
    json_t *answers = json_array();
    for (int i = 0; i < rs->n; i++) {
        json_t *ans = NULL;
        char why[512] = "";
        if (node_apply(clm, &rs->nodes[i], &rs->now[i], &ans, why, sizeof why) < 0) {
            json_decref(ans);
            json_decref(answers);
            char msg[700];
            snprintf(msg, sizeof msg, "node %s: %s", rs->nodes[i].id, why);
            roll_back(clm, rs, i, msg);
            api_fail(e, 503, "unavailable", "session %s: node %s could not apply the resize: %s",
                     rs->now[i].id, rs->nodes[i].id, why);
            return NULL;
        }
        json_array_append_new(answers, json_pack("{s:o,s:s,s:{s:i,s:I},s:o}", "session",
                                                 session_json(&rs->now[i]), "granted",
                                                 rs->granted, "previous", "sm_count",
                                                 rs->old[i].sm_count, "memory_quota",
                                                 (json_int_t)rs->old[i].memory_quota, "node",
                                                 ans ? ans : json_null()));
    }
    double ms = mono_ms() - t0;
    size_t i;
    json_t *r;
    json_array_foreach(answers, i, r)
        json_object_set_new(r, "cluster_ms", json_real(ms));
    if (rs->n)
        flyt_info("VM %s resized to %d SMs and %lld bytes (%s), %d session(s), in %.3f ms end "
                  "to end", vm_id, rs->now[0].sm_count, rs->now[0].memory_quota, rs->granted,
                  rs->n, ms);
    return answers;
}

json_t *share_resize(struct clm *clm, const char *vm_id, long long sm, long long mem,
                     struct vm_resize_outcome *out, struct api_error *e)
{
    struct resize_ask a = {.has_sm = sm > 0, .sm = sm, .has_mem = mem > 0, .mem = mem};
    struct vm_resize rs = {0};
    json_t *all = resize_vm(clm, vm_id, &a, &rs, e);
    memset(out, 0, sizeof *out);
    out->sessions = rs.n;
    if (all && rs.n) {
        out->sm_count = rs.now[0].sm_count;
        out->memory_quota = rs.now[0].memory_quota;
    }
    vm_resize_free(&rs);
    return all;
}

static int operator_only(struct clm *clm, const struct flyt_http_request *req, struct api_error *e)
{
    struct principal who;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, e);
    pthread_mutex_unlock(&clm->lock);
    return rc;
}

/* A session's share is its VM's: resizing one resizes them all; the answer is this one's. */
void h_session_resize(void *ctx, const struct flyt_http_request *req,
                      struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct resize_ask a;
    struct vm_resize rs = {0};
    struct session_rec s;
    char err[512];
    json_t *all = NULL, *out = NULL;
    if (operator_only(clm, req, &e) < 0 || parse_ask(req->body, &a, &e) < 0)
        goto fail;
    pthread_mutex_lock(&clm->lock);
    int found = store_session_get(clm->store, req->params[0], &s, err, sizeof err);
    int rc = found < 0 ? api_store_fail(&e, "reading a session", err)
             : !found  ? api_fail(&e, 404, "not_found", "no session %s", req->params[0])
             : s.state != SESSION_ACTIVE
                 ? api_fail(&e, 409, "conflict", "session %s is %s, not active", s.id,
                            session_state_name(s.state))
                 : 0;
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0 || !(all = resize_vm(clm, s.vm_id, &a, &rs, &e)))
        goto fail;
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r)
        if (strcmp(json_string_value(json_object_get(json_object_get(r, "session"), "id")),
                   s.id) == 0)
            out = json_incref(r);
    json_decref(all);
    int n = rs.n;
    vm_resize_free(&rs);
    if (!out) {
        flyt_http_reply_error(res, 409, "conflict", "session %s ended during the resize", s.id);
        return;
    }
    json_object_set_new(out, "vm_sessions", json_integer(n));
    flyt_http_reply_json(res, 200, out);
    return;
fail:
    vm_resize_free(&rs);
    api_reply_error(res, &e);
}

/* The VM's share, which all its live sessions run on. */
void h_vm_resize(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct resize_ask a;
    struct vm_resize rs = {0};
    struct vm_rec vm;
    char err[512];
    json_t *all = NULL;
    if (operator_only(clm, req, &e) < 0 || parse_ask(req->body, &a, &e) < 0)
        goto fail;
    pthread_mutex_lock(&clm->lock);
    int found = store_vm_get(clm->store, req->params[0], &vm, err, sizeof err);
    int rc = found < 0 ? api_store_fail(&e, "reading a VM", err)
             : !found  ? api_fail(&e, 404, "not_found", "no VM %s", req->params[0])
                       : 0;
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0 || !(all = resize_vm(clm, vm.id, &a, &rs, &e)))
        goto fail;
    int n = rs.n;
    vm_resize_free(&rs);
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:i,s:i,s:o}", "vm", vm.id, "sessions", n,
                                             "resized", n, "results", all));
    return;
fail:
    vm_resize_free(&rs);
    api_reply_error(res, &e);
}
