/* App-requested scaling (docs/api.md, "App-requested scaling"): a VM's program asks, through
 * its client manager and the VM token, for more or fewer SMs or memory for the VM's share:
 * POST /v1/vms/{id}/requests {"sm": "+16"|"-16"|"48", "memory": "+1GiB"|..., "reason"?}.
 * The ask is resolved against the share the VM's live sessions hold now and checked
 * against the bounds the operator set on the VM (sm_min..sm_max, memory_min..memory_max);
 * a request within them is granted through the operator's live resize (share_resize,
 * api_resize.c), queued when the GPU lacks the capacity now (the timer retries it as
 * capacity frees: requests_retry), or refused with the reason. Every request that names a
 * VM it may ask for is recorded (store: share_requests) with a "request.*" event; a later
 * request of the VM supersedes its queued one. GET lists them (VM: its own; operator: any).
 *
 * Requests are handled one at a time (request_mutex, taken before clm->lock and never
 * while holding it): an attempt runs node calls without clm->lock, and the timer's retry
 * must not race a new request of the same VM. */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t request_mutex = FLYT_MUTEX_INITIALIZER;

/* What a program asked: each part absolute or relative ("+16", "-1GiB"). */
struct share_ask {
    int has_sm, sm_rel, has_mem, mem_rel;
    long long sm, mem;
};

/* "+16", "-16", "48" (SMs) or "+1GiB", "-512MiB", "2GiB" (memory; a unit is needed), or
 * an integer (SMs, bytes). The text goes into the record as asked. */
static int parse_amount(json_t *v, const char *key, char *text, size_t cap, int *rel,
                        long long *out, struct api_error *e)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        snprintf(text, cap, "%lld", *out);
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) >= cap)
        return api_fail(e, 400, "bad_request", "%s: expected \"+N\", \"-N\" or \"N\"%s", key,
                        key[0] == 'm' ? " with a unit, e.g. \"+1GiB\"" : " (SMs)");
    snprintf(text, cap, "%s", s);
    int sign = *s == '-' ? -1 : 1;
    *rel = *s == '+' || *s == '-';
    const char *num = s + *rel;
    uint64_t u = 0;
    char why[128];
    int digits = (int)strspn(num, "0123456789");
    if (key[0] == 's' && (digits == 0 || num[digits] || digits > 9))
        return api_fail(e, 400, "bad_request", "%s: \"%s\" is not +N, -N or N SMs", key, s);
    if (key[0] == 's')
        u = strtoull(num, NULL, 10);
    else if (num[digits] == '\0' || flyt_parse_size(num, &u, why, sizeof why) < 0 ||
             u > (1ULL << 60))
        return api_fail(e, 400, "bad_request", "%s: \"%s\" is not +SIZE, -SIZE or SIZE with a "
                        "unit (e.g. \"+1GiB\", \"512MiB\")", key, s);
    *out = sign * (long long)u;
    return 0;
}

static int parse_request(json_t *b, struct share_ask *a, struct request_rec *q,
                         struct api_error *e)
{
    memset(a, 0, sizeof *a);
    if (!json_is_object(b))
        return api_fail(e, 400, "bad_request", "body: expected {\"sm\"?, \"memory\"?, \"reason\"?}");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
        int rc = 0;
        if (strcmp(key, "sm") == 0) {
            a->has_sm = 1;
            rc = parse_amount(v, key, q->sm_ask, sizeof q->sm_ask, &a->sm_rel, &a->sm, e);
        } else if (strcmp(key, "memory") == 0) {
            a->has_mem = 1;
            rc = parse_amount(v, key, q->memory_ask, sizeof q->memory_ask, &a->mem_rel, &a->mem, e);
        } else if (strcmp(key, "reason") == 0) {
            if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof q->reason)
                return api_fail(e, 400, "bad_request", "reason: expected a text of at most %zu "
                                "bytes", sizeof q->reason - 1);
            snprintf(q->reason, sizeof q->reason, "%s", json_string_value(v));
        } else {
            return api_fail(e, 400, "bad_request", "unknown field \"%s\"", key);
        }
        if (rc < 0)
            return -1;
    }
    if (!a->has_sm && !a->has_mem)
        return api_fail(e, 400, "bad_request", "give sm, memory or both");
    return 0;
}

/* The share the VM's live sessions hold now; 0 when it has none. Lock held. */
static int share_now(struct clm *clm, const char *vm_id, long long *sm, long long *mem,
                     struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    struct session_filter f = {.vm_id = vm_id, .live_only = 1};
    struct session_rec *ss;
    int n;
    if (store_session_list(clm->store, &f, &ss, &n, err, sizeof err) < 0)
        return api_store_fail(e, "reading sessions", err);
    if (n > 0)
        *sm = ss[0].sm_count, *mem = ss[0].memory_quota;
    free(ss);
    return n > 0;
}

/* One part of the ask against [min, max]; -1 with why (409) when outside. */
static int within(long long want, long long min, long long max, const char *what,
                  const char *unit, struct api_error *e)
{
    char w[64], b[64];
    int mem = unit[0] == 'b';
    if (!max)
        return api_fail(e, 409, "out_of_bounds", "no bounds set by the operator for %s (%s_max)",
                        mem ? "memory" : "SMs", what);
    if (mem)
        format_bytes(want, w, sizeof w), format_bytes(want > max ? max : min, b, sizeof b);
    else
        snprintf(w, sizeof w, "%lld SMs", want), snprintf(b, sizeof b, "%lld SMs",
                                                          want > max ? max : min);
    if (want > max)
        return api_fail(e, 409, "out_of_bounds", "%s is above the VM's %s_max of %s (set by "
                        "the operator)", w, what, b);
    if (want < (min ? min : 1))
        return api_fail(e, 409, "out_of_bounds", "%s is below the VM's %s_min of %s (set by "
                        "the operator)", w, what, min ? b : (mem ? "1 byte" : "1 SM"));
    return 0;
}

/* The targets of q within vm's bounds; -1 with the reason. */
static int check_bounds(const struct vm_rec *vm, const struct request_rec *q,
                        struct api_error *e)
{
    if (!vm->sm_max && !vm->memory_max)
        return api_fail(e, 409, "out_of_bounds", "no bounds set by the operator: VM %s's "
                        "programs may not ask for another share", vm->id);
    if (q->sm_target && within(q->sm_target, vm->sm_min, vm->sm_max, "sm", "SMs", e) < 0)
        return -1;
    if (q->memory_target &&
        within(q->memory_target, vm->memory_min, vm->memory_max, "memory", "bytes", e) < 0)
        return -1;
    return 0;
}

/* Under the lock: who asks for which VM, what it asked, resolved against the share now and
 * checked against the bounds. -1 with e and *record 0: not recorded (auth, malformed, no
 * such VM); -1 with *record 1: refused (recorded); 0: to attempt. */
static int request_open(struct clm *clm, const struct flyt_http_request *req,
                        struct request_rec *q, int *record, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct principal who;
    struct share_ask a;
    struct vm_rec vm;
    char err[512];
    long long sm = 0, mem = 0;
    *record = 0;
    if (auth_check(clm, req, P_VM, &who, e) < 0)
        return -1;
    if (strcmp(who.id, req->params[0]) != 0)
        return api_fail(e, 403, "forbidden", "VM %s may ask only for its own share, not VM %s's",
                        who.id, req->params[0]);
    int found = store_vm_get(clm->store, who.id, &vm, err, sizeof err);
    if (found <= 0)
        return found < 0 ? api_store_fail(e, "reading a VM", err)
                         : api_fail(e, 404, "not_found", "no VM %s", who.id);
    if (parse_request(req->body, &a, q, e) < 0)
        return -1;
    snprintf(q->vm_id, sizeof q->vm_id, "%s", vm.id);
    *record = 1;
    int live = share_now(clm, vm.id, &sm, &mem, e);
    if (live <= 0)
        return live < 0 ? -1 : api_fail(e, 409, "conflict", "no live session: the share is "
                                        "placed at the next session (from the VM record)");
    q->sm_target = !a.has_sm ? 0 : a.sm_rel ? sm + a.sm : a.sm;
    q->memory_target = !a.has_mem ? 0 : a.mem_rel ? mem + a.mem : a.mem;
    if ((a.has_sm && q->sm_target <= 0) || (a.has_mem && q->memory_target <= 0))
        return api_fail(e, 400, "bad_request", "the share would be empty: it holds %lld SMs and "
                        "%lld bytes now", sm, mem);
    return check_bounds(&vm, q, e);
}

/* Records q (new or changed) with its event; a new one supersedes the VM's queued one. */
static int request_record(struct clm *clm, struct request_rec *q, int is_new,
                          struct api_error *e)
{
    char err[512];
    struct request_rec *old = NULL;
    int n = 0, rc = clm_begin(clm, e);
    if (rc < 0)
        return -1;
    q->updated_at = now_ms();
    if (is_new && store_request_list(clm->store, q->vm_id, 1, REQ_QUEUED, &old, &n, err,
                                     sizeof err) < 0)
        rc = api_store_fail(e, "reading requests", err);
    for (int i = 0; rc == 0 && i < n; i++) {
        old[i].state = REQ_SUPERSEDED;
        old[i].updated_at = q->updated_at;
        snprintf(old[i].message, sizeof old[i].message, "replaced by request %s", q->id);
        if (store_request_update(clm->store, &old[i], err, sizeof err) < 0)
            rc = api_store_fail(e, "updating a request", err);
        else
            rc = api_event(clm, "request.superseded", q->vm_id, e, "request %s %s", old[i].id,
                           old[i].message);
    }
    free(old);
    if (rc == 0 && (is_new ? store_request_insert(clm->store, q, err, sizeof err)
                           : store_request_update(clm->store, q, err, sizeof err)) < 0)
        rc = api_store_fail(e, "recording a request", err);
    if (rc == 0) {
        char kind[32];
        snprintf(kind, sizeof kind, "request.%s", request_state_name(q->state));
        rc = api_event(clm, kind, q->vm_id, e, "request %s (sm %s, memory %s): %s", q->id,
                       q->sm_ask[0] ? q->sm_ask : "-", q->memory_ask[0] ? q->memory_ask : "-",
                       q->message);
    }
    return clm_end(clm, rc == 0, e);
}

/* Asks for q's targets through the operator's resize path. The state q ends in (granted,
 * queued while the GPU lacks capacity or a session is starting, refused otherwise); the
 * answers of the resized sessions in *results when granted. */
static void request_attempt(struct clm *clm, struct request_rec *q, struct vm_resize_outcome *o,
                            json_t **results, struct api_error *e)
{
    *results = share_resize(clm, q->vm_id, q->sm_target, q->memory_target, o, e);
    if (*results && o->sessions > 0) {
        q->state = REQ_GRANTED;
        snprintf(q->message, sizeof q->message, "granted: the share is now %lld SMs and %lld "
                 "bytes", o->sm_count, o->memory_quota);
    } else if (*results) {
        q->state = REQ_REFUSED;
        api_fail(e, 409, "conflict", "no live session: the share is placed at the next session "
                 "(from the VM record)");
        snprintf(q->message, sizeof q->message, "%s", e->message);
    } else {
        q->state = e->status == 409 ? REQ_QUEUED : REQ_REFUSED;
        snprintf(q->message, sizeof q->message, "%s%s", q->state == REQ_QUEUED ? "queued: " : "",
                 e->message);
    }
}

static json_t *share_pack(const struct vm_resize_outcome *o)
{
    return json_pack("{s:I,s:I}", "sm_count", (json_int_t)o->sm_count, "memory_quota",
                     (json_int_t)o->memory_quota);
}

void h_vm_requests_post(void *ctx, const struct flyt_http_request *req,
                        struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0}, rec_e = {0};
    struct request_rec q;
    struct vm_resize_outcome o = {0};
    json_t *results = NULL;
    int record;
    memset(&q, 0, sizeof q);
    new_id("r-", q.id, sizeof q.id);
    q.created_at = now_ms();
    pthread_mutex_lock(&request_mutex);
    pthread_mutex_lock(&clm->lock);
    int rc = request_open(clm, req, &q, &record, &e);
    pthread_mutex_unlock(&clm->lock);
    if (rc == 0) {
        request_attempt(clm, &q, &o, &results, &e);
    } else if (record) {
        q.state = REQ_REFUSED;
        snprintf(q.message, sizeof q.message, "%s", e.message);
    }
    int recorded = !record || request_record(clm, &q, 1, &rec_e) == 0;
    pthread_mutex_unlock(&request_mutex);
    if (!recorded || (q.state == REQ_REFUSED || !record)) {
        json_decref(results);
        api_reply_error(res, recorded ? &e : &rec_e);
        return;
    }
    if (q.state == REQ_QUEUED) {
        pthread_mutex_lock(&clm->lock);
        share_now(clm, q.vm_id, &o.sm_count, &o.memory_quota, &e);
        pthread_mutex_unlock(&clm->lock);
    }
    json_t *out = json_pack("{s:o,s:o}", "request", request_json(&q), "share", share_pack(&o));
    if (results)
        json_object_set_new(out, "results", results);
    flyt_http_reply_json(res, q.state == REQ_GRANTED ? 200 : 202, out);
}

void h_vm_requests_list(void *ctx, const struct flyt_http_request *req,
                        struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct request_rec *qs = NULL;
    int n = 0;
    char err[512];
    json_t *arr = json_array();
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR | P_VM, &who, &e);
    if (rc == 0 && who.kind == P_VM && strcmp(who.id, req->params[0]) != 0)
        rc = api_fail(&e, 403, "forbidden", "VM %s may list only its own requests", who.id);
    if (rc == 0 && store_request_list(clm->store, req->params[0], 0, REQ_GRANTED, &qs, &n, err,
                                      sizeof err) < 0)
        rc = api_store_fail(&e, "listing requests", err);
    for (int i = 0; rc == 0 && i < n; i++)
        json_array_append_new(arr, request_json(&qs[i]));
    pthread_mutex_unlock(&clm->lock);
    free(qs);
    api_reply_wrapped(res, rc == 0, &e, 200, "requests", arr);
}

/* A queued request looked at again under the lock: cancelled when its VM or its VM's
 * sessions are gone, refused when the bounds changed under it; 0: to attempt. */
static int retry_check(struct clm *clm, struct request_rec *q)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct api_error e = {0};
    struct vm_rec vm;
    char err[512];
    long long sm, mem;
    int found = store_vm_get(clm->store, q->vm_id, &vm, err, sizeof err);
    if (found < 0)
        return -1;
    if (!found || share_now(clm, q->vm_id, &sm, &mem, &e) <= 0) {
        q->state = REQ_CANCELLED;
        snprintf(q->message, sizeof q->message, "%s", found ? "the VM's sessions ended: the "
                 "share is placed anew at its next session" : "the VM was removed");
        return 1;
    }
    if (check_bounds(&vm, q, &e) < 0) {
        q->state = REQ_REFUSED;
        snprintf(q->message, sizeof q->message, "%s", e.message);
        return 1;
    }
    return 0;
}

/* One queued request tried again; recorded when its state changed. */
static void retry_one(struct clm *clm, struct request_rec *q)
{
    struct api_error e = {0};
    pthread_mutex_lock(&clm->lock);
    int rc = retry_check(clm, q);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0)
        return;
    if (rc == 0) {
        struct vm_resize_outcome o;
        json_t *results = NULL;
        request_attempt(clm, q, &o, &results, &e);
        json_decref(results);
    }
    if (q->state != REQ_QUEUED && request_record(clm, q, 0, &e) < 0)
        flyt_warn("request %s: %s", q->id, e.message);
}

void requests_retry(struct clm *clm)
{
    char err[512];
    struct request_rec *qs = NULL;
    int n = 0;
    pthread_mutex_lock(&request_mutex);
    pthread_mutex_lock(&clm->lock);
    int rc = store_request_list(clm->store, NULL, 1, REQ_QUEUED, &qs, &n, err, sizeof err);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0)
        flyt_error("timer: requests: %s", err);
    for (int i = 0; rc >= 0 && i < n; i++)
        retry_one(clm, &qs[i]);
    pthread_mutex_unlock(&request_mutex);
    free(qs);
}
