/* /v1/vms: the operator's VM records (the original vm_required_resources documents plus
 * an id and a token). */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COMPUTE_UNITS 1000000LL

/* memory: bytes as an integer (mib_numbers: MiB, the original documents' unit) or a string
 * with a unit ("20GiB", "512MiB", "2048KiB", "1073741824B", GB/MB in powers of 1000). */
static int parse_memory(json_t *v, int mib_numbers, const char *where, const char *key,
                        long long *out, struct api_error *e)
{
    if (json_is_string(v)) {
        uint64_t b;
        char why[256];
        const char *s = json_string_value(v);
        if (flyt_parse_size(s, &b, why, sizeof why) < 0)
            return api_fail(e, 400, "bad_request", "%s%s: %s", where, key, why);
        if (strspn(s, "0123456789 ") == strlen(s))
            return api_fail(e, 400, "bad_request", "%s%s: a string needs a unit, e.g. "
                            "\"20GiB\" or \"512MiB\"", where, key);
        if (b == 0 || b > (1ULL << 60))
            return api_fail(e, 400, "bad_request", "%s%s: must be between 1 byte and 1 EiB",
                            where, key);
        *out = (long long)b;
        return 0;
    }
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        d = json_real_value(v);
    else
        return api_fail(e, 400, "bad_request", "%s%s: expected %s or a string with a unit",
                        where, key, mib_numbers ? "a number of MiB" : "an integer number of bytes");
    if (mib_numbers)
        d *= 1048576.0;
    if (d < 1 || d > (double)(1ULL << 60))
        return api_fail(e, 400, "bad_request", "%s%s: must be between 1 byte and 1 EiB", where,
                        key);
    *out = (long long)d;
    return 0;
}

/* The bound a field names (sm_min, sm_max, memory_min, memory_max), or NULL. */
static long long *bound_field(struct vm_rec *vm, const char *key)
{
    return strcmp(key, "sm_min") == 0       ? &vm->sm_min
           : strcmp(key, "sm_max") == 0     ? &vm->sm_max
           : strcmp(key, "memory_min") == 0 ? &vm->memory_min
           : strcmp(key, "memory_max") == 0 ? &vm->memory_max
                                            : NULL;
}

/* A bound: SMs (an integer) or memory (as "memory"); null clears it (stored -1 here, 0 once
 * applied, see vm_update). */
static int parse_bound(json_t *v, const char *key, long long *out, struct api_error *e)
{
    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    if (key[0] == 'm')
        return parse_memory(v, 0, "", key, out, e);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_COMPUTE_UNITS)
        return api_fail(e, 400, "bad_request", "%s: expected an integer number of SMs, 1 or more, "
                        "or null to clear it", key);
    *out = json_integer_value(v);
    return 0;
}

/* min <= max for both pairs of the VM's bounds (0: not set). */
static int check_bounds(const struct vm_rec *vm, struct api_error *e)
{
    if (vm->sm_min && vm->sm_max && vm->sm_min > vm->sm_max)
        return api_fail(e, 400, "bad_request", "sm_min: %lld SMs is above sm_max (%lld SMs)",
                        vm->sm_min, vm->sm_max);
    if (vm->memory_min && vm->memory_max && vm->memory_min > vm->memory_max)
        return api_fail(e, 400, "bad_request", "memory_min: %lld bytes is above memory_max "
                        "(%lld bytes)", vm->memory_min, vm->memory_max);
    return 0;
}

/* upd's bounds over vm's: 0 keeps one, -1 clears it. */
static void apply_bounds(struct vm_rec *vm, const struct vm_rec *upd)
{
    const long long *from[] = {&upd->sm_min, &upd->sm_max, &upd->memory_min, &upd->memory_max};
    long long *to[] = {&vm->sm_min, &vm->sm_max, &vm->memory_min, &vm->memory_max};
    for (int i = 0; i < 4; i++)
        if (*from[i])
            *to[i] = *from[i] < 0 ? 0 : *from[i];
}

/* Reads the VM fields of body into vm. require: all four must be there. strict: unknown
 * fields are refused (the import ignores them). where prefixes messages ("documents[2]."). */
static int parse_vm(json_t *body, struct vm_rec *vm, int require, int strict, int allow_id,
                    int mib_numbers, const char *where, struct api_error *e)
{
    if (!json_is_object(body))
        return api_fail(e, 400, "bad_request", "%sexpected a JSON object", where[0] ? where : "body: ");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "vm_ip") == 0 || strcmp(key, "host_ip") == 0) {
            const char *s = json_string_value(v);
            if (!s || !valid_ip(s))
                return api_fail(e, 400, "bad_request", "%s%s: expected an IPv4 or IPv6 address",
                                where, key);
            snprintf(key[0] == 'v' ? vm->vm_ip : vm->host_ip, IP_MAX, "%s", s);
        } else if (strcmp(key, "compute_units") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1
                || json_integer_value(v) > MAX_COMPUTE_UNITS)
                return api_fail(e, 400, "bad_request",
                                "%scompute_units: expected an integer number of SMs, 1 or more",
                                where);
            vm->compute_units = json_integer_value(v);
        } else if (strcmp(key, "memory") == 0) {
            if (parse_memory(v, mib_numbers, where, key, &vm->memory, e) < 0)
                return -1;
        } else if (strict && bound_field(vm, key)) {
            if (parse_bound(v, key, bound_field(vm, key), e) < 0)
                return -1;
        } else if (strcmp(key, "id") == 0 && allow_id) {
            const char *s = json_string_value(v);
            if (!s || !valid_id(s))
                return api_fail(e, 400, "bad_request",
                                "%sid: expected 1 to 63 characters of A-Z a-z 0-9 . _ -", where);
            snprintf(vm->id, sizeof vm->id, "%s", s);
        } else if (strict) {
            return api_fail(e, 400, "bad_request", "%sunknown field \"%s\"", where, key);
        }
    }
    if (require) {
        const char *missing = !vm->vm_ip[0] ? "vm_ip" : !vm->host_ip[0] ? "host_ip"
                              : !vm->compute_units ? "compute_units" : !vm->memory ? "memory" : NULL;
        if (missing)
            return api_fail(e, 400, "bad_request", "%s%s: missing", where, missing);
    }
    return 0;
}

/* Creates vm (id made from vm_ip when empty) with a new token; in a transaction. */
static int vm_create(struct clm *clm, struct vm_rec *vm, char *token, const char *where,
                     struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512], hash[65];
    if (!vm->id[0]) {
        snprintf(vm->id, sizeof vm->id, "vm-%.50s", vm->vm_ip);   /* an IP has at most 45 chars */
        for (char *p = vm->id; *p; p++)
            if (*p == ':')
                *p = '-';
    }
    struct vm_rec other;
    int rc = store_vm_get(clm->store, vm->id, &other, err, sizeof err);
    if (rc < 0)
        return api_store_fail(e, "reading VMs", err);
    if (rc)
        return api_fail(e, 409, "conflict", "%sVM %s exists", where, vm->id);
    rc = store_vm_by_ip(clm->store, vm->vm_ip, &other, err, sizeof err);
    if (rc < 0)
        return api_store_fail(e, "reading VMs", err);
    if (rc)
        return api_fail(e, 409, "conflict", "%sVM %s already has vm_ip %s", where, other.id,
                        vm->vm_ip);
    if (flyt_token_new(token, 65) < 0 || flyt_sha256_hex(token, strlen(token), hash, sizeof hash) < 0)
        return api_fail(e, 500, "internal", "cannot make a token");
    struct vm_rec none = {0};
    apply_bounds(&none, vm); /* null at creation: no bound */
    vm->sm_min = none.sm_min, vm->sm_max = none.sm_max;
    vm->memory_min = none.memory_min, vm->memory_max = none.memory_max;
    if (check_bounds(vm, e) < 0)
        return -1;
    vm->created_at = vm->updated_at = now_ms();
    rc = store_vm_insert(clm->store, vm, hash, err, sizeof err);
    if (rc == DB_CONSTRAINT)
        return api_fail(e, 409, "conflict", "%sVM %s or vm_ip %s exists", where, vm->id, vm->vm_ip);
    if (rc < 0)
        return api_store_fail(e, "creating a VM", err);
    char msg[512], mem[64];
    format_bytes(vm->memory, mem, sizeof mem);
    snprintf(msg, sizeof msg, "VM %s (vm_ip %s, host_ip %s): %lld SMs, %s", vm->id, vm->vm_ip,
             vm->host_ip, vm->compute_units, mem);
    if (store_event_add(clm->store, "vm.created", vm->id, msg, err, sizeof err) < 0)
        return api_store_fail(e, "logging", err);
    return 0;
}

/* Applies the fields of upd over vm; in a transaction. */
static int vm_update(struct clm *clm, struct vm_rec *vm, const struct vm_rec *upd, const char *where,
                     struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    if (upd->vm_ip[0] && strcmp(upd->vm_ip, vm->vm_ip) != 0) {
        struct vm_rec other;
        int rc = store_vm_by_ip(clm->store, upd->vm_ip, &other, err, sizeof err);
        if (rc < 0)
            return api_store_fail(e, "reading VMs", err);
        if (rc)
            return api_fail(e, 409, "conflict", "%sVM %s already has vm_ip %s", where, other.id,
                            upd->vm_ip);
        snprintf(vm->vm_ip, sizeof vm->vm_ip, "%s", upd->vm_ip);
    }
    if (upd->host_ip[0])
        snprintf(vm->host_ip, sizeof vm->host_ip, "%s", upd->host_ip);
    if (upd->compute_units)
        vm->compute_units = upd->compute_units;
    if (upd->memory)
        vm->memory = upd->memory;
    apply_bounds(vm, upd);
    if (check_bounds(vm, e) < 0)
        return -1;
    vm->updated_at = now_ms();
    int rc = store_vm_update(clm->store, vm, err, sizeof err);
    if (rc == DB_CONSTRAINT)
        return api_fail(e, 409, "conflict", "%svm_ip %s is taken", where, vm->vm_ip);
    if (rc < 0)
        return api_store_fail(e, "updating a VM", err);
    char msg[512], mem[64];
    format_bytes(vm->memory, mem, sizeof mem);
    snprintf(msg, sizeof msg, "VM %s now vm_ip %s, host_ip %s, %lld SMs, %s (for new sessions)",
             vm->id, vm->vm_ip, vm->host_ip, vm->compute_units, mem);
    if (store_event_add(clm->store, "vm.updated", vm->id, msg, err, sizeof err) < 0)
        return api_store_fail(e, "logging", err);
    return 0;
}

static json_t *vm_json_live(struct clm *clm, const struct vm_rec *vm)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[256];
    int n = vm_live_sessions(clm, vm->id, err, sizeof err);
    return vm_json(vm, n < 0 ? 0 : n);
}

void h_vms_list(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct vm_rec *vms = NULL;
    int n = 0;
    char err[512];
    json_t *arr = json_array();
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0 && store_vm_list(clm->store, &vms, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "listing VMs", err);
    for (int i = 0; rc == 0 && i < n; i++)
        json_array_append_new(arr, vm_json_live(clm, &vms[i]));
    pthread_mutex_unlock(&clm->lock);
    free(vms);
    api_reply_wrapped(res, rc >= 0, &e, 200, "vms", arr);
}

void h_vms_create(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct vm_rec vm;
    char token[65];
    memset(&vm, 0, sizeof vm);
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = parse_vm(req->body, &vm, 1, 1, 1, 0, "", &e);
    if (rc == 0)
        rc = vm_create(clm, &vm, token, "", &e);
    json_t *j = rc == 0 ? vm_json(&vm, 0) : NULL;
    if (clm_end(clm, rc == 0, &e) < 0) {
        json_decref(j);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 201, json_pack("{s:o,s:s}", "vm", j, "token", token));
}

void h_vms_import(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    json_t *created = json_array(), *updated = json_array();
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        json_decref(created);
        json_decref(updated);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    json_t *docs = json_object_get(req->body, "documents");
    if (rc == 0 && !json_is_array(docs))
        rc = api_fail(&e, 400, "bad_request", "documents: expected an array of "
                      "vm_required_resources documents");
    size_t i;
    json_t *doc;
    json_array_foreach(docs, i, doc) {
        if (rc < 0)
            break;
        char where[48], err[512];
        snprintf(where, sizeof where, "documents[%zu].", i);
        struct vm_rec in, vm;
        memset(&in, 0, sizeof in);
        rc = parse_vm(doc, &in, 1, 0, 0, 1, where, &e);
        if (rc < 0)
            break;
        int found = store_vm_by_ip(clm->store, in.vm_ip, &vm, err, sizeof err);
        if (found < 0) {
            rc = api_store_fail(&e, "reading VMs", err);
        } else if (found) {
            rc = vm_update(clm, &vm, &in, where, &e);
            if (rc == 0)
                json_array_append_new(updated, vm_json_live(clm, &vm));
        } else {
            char token[65];
            rc = vm_create(clm, &in, token, where, &e);
            if (rc == 0) {
                json_t *j = vm_json(&in, 0);
                json_object_set_new(j, "token", json_string(token));
                json_array_append_new(created, j);
            }
        }
    }
    if (rc == 0) {
        char msg[128], err[512];
        snprintf(msg, sizeof msg, "import: %zu created, %zu updated", json_array_size(created),
                 json_array_size(updated));
        if (store_event_add(clm->store, "vm.imported", "import", msg, err, sizeof err) < 0)
            rc = api_store_fail(&e, "logging", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        json_decref(created);
        json_decref(updated);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:o,s:o}", "created", created, "updated", updated));
}

void h_vm_get(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct vm_rec vm;
    char err[512];
    json_t *out = NULL;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0) {
        int found = store_vm_get(clm->store, req->params[0], &vm, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading a VM", err);
        else if (!found)
            rc = api_fail(&e, 404, "not_found", "no VM %s", req->params[0]);
    }
    if (rc == 0) {
        struct session_filter f = {.vm_id = vm.id, .live_only = 1};   /* live ones; history: /v1/sessions */
        struct session_rec *ss;
        int n, live = 0;
        if (store_session_list(clm->store, &f, &ss, &n, err, sizeof err) < 0) {
            rc = api_store_fail(&e, "reading sessions", err);
        } else {
            json_t *arr = json_array();
            for (int i = 0; i < n; i++) {
                live += session_is_live(&ss[i]);
                json_array_append_new(arr, session_json(&ss[i]));
            }
            free(ss);
            out = json_pack("{s:o,s:o}", "vm", vm_json(&vm, live), "sessions", arr);
        }
    }
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, out);
}

void h_vm_patch(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct vm_rec vm, upd;
    char err[512];
    memset(&upd, 0, sizeof upd);
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0) {
        int found = store_vm_get(clm->store, req->params[0], &vm, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading a VM", err);
        else if (!found)
            rc = api_fail(&e, 404, "not_found", "no VM %s", req->params[0]);
    }
    if (rc == 0)
        rc = parse_vm(req->body, &upd, 0, 1, 0, 0, "", &e);
    if (rc == 0 && !upd.vm_ip[0] && !upd.host_ip[0] && !upd.compute_units && !upd.memory
        && !upd.sm_min && !upd.sm_max && !upd.memory_min && !upd.memory_max)
        rc = api_fail(&e, 400, "bad_request", "body: give at least one of vm_ip, host_ip, "
                      "compute_units, memory, sm_min, sm_max, memory_min, memory_max");
    if (rc == 0)
        rc = vm_update(clm, &vm, &upd, "", &e);
    json_t *j = rc == 0 ? vm_json_live(clm, &vm) : NULL;
    int ended = clm_end(clm, rc == 0, &e);
    api_reply_wrapped(res, ended >= 0, &e, 200, "vm", j);
}

void h_vm_delete(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct vm_rec vm;
    struct stop_list stops = {0};
    char err[512];
    const char *force = flyt_http_query(req, "force");
    int forced = force && (strcmp(force, "1") == 0 || strcmp(force, "true") == 0);
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0) {
        int found = store_vm_get(clm->store, req->params[0], &vm, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading a VM", err);
        else if (!found)
            rc = api_fail(&e, 404, "not_found", "no VM %s", req->params[0]);
    }
    struct session_rec *ss = NULL;
    int n = 0;
    if (rc == 0) {
        struct session_filter f = {.vm_id = vm.id, .live_only = 1};
        if (store_session_list(clm->store, &f, &ss, &n, err, sizeof err) < 0)
            rc = api_store_fail(&e, "reading sessions", err);
        else if (n && !forced)
            rc = api_fail(&e, 409, "conflict",
                          "VM %s has %d live session(s); release them or add ?force=1", vm.id, n);
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        struct node_rec node;
        if (session_end(clm, &ss[i], SESSION_RELEASED, "VM deleted", err, sizeof err) < 0)
            rc = api_store_fail(&e, "ending a session", err);
        else if (store_node_get(clm->store, ss[i].node_id, &node, err, sizeof err) > 0)
            stop_list_add(&stops, &node, ss[i].id);
    }
    free(ss);
    if (rc == 0 && store_vm_delete(clm->store, vm.id, err, sizeof err) < 0)
        rc = api_store_fail(&e, "deleting a VM", err);
    if (rc == 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "VM %s deleted%s", vm.id, n ? " with its sessions" : "");
        if (store_event_add(clm->store, "vm.deleted", vm.id, msg, err, sizeof err) < 0)
            rc = api_store_fail(&e, "logging", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        free(stops.items);
        api_reply_error(res, &e);
        return;
    }
    stop_list_run(&stops);
    flyt_http_reply_status(res, 204);
}
