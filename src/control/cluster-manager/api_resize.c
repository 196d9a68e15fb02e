/* Live resize (docs/api.md, "Live resize"): POST /v1/sessions/{id}/resize and
 * POST /v1/vms/{id}/resize (each live session of the VM), operator only.
 *
 * Body: "sm_count" (absolute) or "sm_delta", "memory_quota" (bytes) or
 * "memory_delta", "partial" (bool). Per session, under the lock: the GPU's
 * capacity without this session's own share (capacity.c), the new SM count
 * checked (at least one group, at most the GPU, a multiple of the
 * granularity), groups kept lowest first when shrinking and the lowest free
 * ones added when growing, memory against what the GPU has free; past what is
 * free it is refused, or with "partial" granted as far as it goes. The new
 * share is recorded (the store's groups are the SM group map, so nothing is
 * counted twice) with a "session.resized" event; then, without the lock, the
 * node manager applies it to the running server. If the node cannot, the old
 * share is recorded again and the answer says why. */
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

/* Under the lock: the new share of session id recorded; old keeps the previous one. */
static int reserve(struct clm *clm, const char *id, const struct resize_ask *a,
                   struct session_rec *s, struct session_rec *old, struct node_rec *node,
                   const char **granted, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    int found = store_session_get(clm->store, id, s, err, sizeof err);
    if (found <= 0)
        return found < 0 ? api_store_fail(e, "reading a session", err)
                         : api_fail(e, 404, "not_found", "no session %s", id);
    if (s->state != SESSION_ACTIVE)
        return api_fail(e, 409, "conflict", "session %s is %s, not active", s->id,
                        session_state_name(s->state));
    if (node_load(clm, s->node_id, node, e) < 0)
        return -1;
    struct gpu_cap *caps = NULL;
    int ncaps = 0;
    if (capacity_build(clm, node, 1, &caps, &ncaps, err, sizeof err) < 0)
        return api_store_fail(e, "reading capacity", err);
    struct gpu_cap *c = NULL;
    for (int i = 0; i < ncaps; i++)
        if (caps[i].index == s->gpu_index)
            c = &caps[i];
    int rc = c ? 0 : api_fail(e, 409, "conflict", "node %s no longer reports GPU %d",
                              s->node_id, s->gpu_index);
    if (rc == 0) { /* the GPU as if this session held nothing */
        for (int i = 0; i < s->ngroups; i++)
            if (s->groups[i] >= 0 && s->groups[i] < c->ngroups)
                c->group_users[s->groups[i]]--;
        c->memory_allocated -= s->memory_quota;
        *old = *s;
        rc = plan(c, s, a, granted, e);
    }
    free(caps);
    if (rc < 0)
        return -1;
    char m1[64], m2[64];
    format_bytes(old->memory_quota, m1, sizeof m1);
    format_bytes(s->memory_quota, m2, sizeof m2);
    if (store_session_set_share(clm->store, s, err, sizeof err) < 0)
        return api_store_fail(e, "recording a share", err);
    return api_event(clm, "session.resized", s->id, e, "%d SMs and %s -> %d SMs and %s on %s/%d "
                     "(%s)", old->sm_count, m1, s->sm_count, m2, s->node_id, s->gpu_index,
                     *granted);
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

/* One session, end to end: its answer object, or NULL with e. */
static json_t *resize_one(struct clm *clm, const char *id, const struct resize_ask *a,
                          struct api_error *e)
{
    double t0 = mono_ms();
    struct session_rec s, old;
    struct node_rec node;
    const char *granted = "full";
    if (clm_begin(clm, e) < 0)
        return NULL;
    int rc = reserve(clm, id, a, &s, &old, &node, &granted, e);
    if (clm_end(clm, rc == 0, e) < 0)
        return NULL;
    json_t *ans = NULL;
    char why[512] = "";
    if (node_apply(clm, &node, &s, &ans, why, sizeof why) < 0) {
        json_decref(ans);
        struct api_error e2 = {0};
        if (clm_begin(clm, &e2) == 0) { /* the share stays what the server runs on */
            char err[512];
            int ok = store_session_set_share(clm->store, &old, err, sizeof err) == 0 &&
                     api_event(clm, "session.resize_failed", s.id, &e2, "node %s: %s", node.id,
                               why) == 0;
            clm_end(clm, ok, &e2);
        }
        api_fail(e, 503, "unavailable", "session %s: node %s could not apply the resize: %s",
                 s.id, node.id, why);
        return NULL;
    }
    double ms = mono_ms() - t0;
    flyt_info("session %s resized to %d SMs and %lld bytes (%s) in %.3f ms end to end", s.id,
              s.sm_count, s.memory_quota, granted, ms);
    return json_pack("{s:o,s:s,s:{s:i,s:I},s:o,s:f}", "session", session_json(&s), "granted",
                     granted, "previous", "sm_count", old.sm_count, "memory_quota",
                     (json_int_t)old.memory_quota, "node", ans ? ans : json_null(), "cluster_ms",
                     ms);
}

static int operator_only(struct clm *clm, const struct flyt_http_request *req, struct api_error *e)
{
    struct principal who;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, e);
    pthread_mutex_unlock(&clm->lock);
    return rc;
}

void h_session_resize(void *ctx, const struct flyt_http_request *req,
                      struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct resize_ask a;
    json_t *out = NULL;
    if (operator_only(clm, req, &e) == 0 && parse_ask(req->body, &a, &e) == 0)
        out = resize_one(clm, req->params[0], &a, &e);
    if (!out) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, out);
}

/* There is no VM-wide share yet: each live session of the VM is resized as
 * asked, one after the other; the VM's per-process share (for sessions that
 * start later) is "vm update"'s. */
void h_vm_resize(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct resize_ask a;
    struct session_rec *ss = NULL;
    int n = 0;
    char err[512];
    if (operator_only(clm, req, &e) < 0 || parse_ask(req->body, &a, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    struct vm_rec vm;
    pthread_mutex_lock(&clm->lock);
    int found = store_vm_get(clm->store, req->params[0], &vm, err, sizeof err);
    struct session_filter f = {.vm_id = req->params[0], .by_state = 1, .state = SESSION_ACTIVE};
    int rc = found < 0 ? api_store_fail(&e, "reading a VM", err)
             : !found  ? api_fail(&e, 404, "not_found", "no VM %s", req->params[0])
                       : 0;
    if (rc == 0 && store_session_list(clm->store, &f, &ss, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "reading sessions", err);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    json_t *arr = json_array();
    int done = 0;
    for (int i = 0; i < n; i++) {
        struct api_error one = {0};
        json_t *r = resize_one(clm, ss[i].id, &a, &one);
        if (r) {
            done++;
            json_array_append_new(arr, r);
        } else {
            json_array_append_new(arr, json_pack("{s:s,s:i,s:s,s:s}", "session_id", ss[i].id,
                                                 "status", one.status, "error", one.code,
                                                 "message", one.message));
        }
    }
    free(ss);
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:i,s:i,s:o}", "vm", vm.id, "sessions", n,
                                             "resized", done, "results", arr));
}
