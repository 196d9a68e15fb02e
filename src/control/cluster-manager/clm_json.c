/* Records -> the JSON objects of docs/api.md. */
#include "clm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

json_t *json_time(long long ms)
{
    if (ms <= 0)
        return json_null();
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

static json_t *int_or_null(long long v)
{
    return v ? json_integer((json_int_t)v) : json_null();
}

json_t *vm_json(const struct vm_rec *vm, int live_sessions)
{
    return json_pack("{s:s,s:s,s:s,s:I,s:I,s:o,s:o,s:i,s:{s:o,s:o,s:o,s:o}}", "id", vm->id,
                     "vm_ip", vm->vm_ip, "host_ip", vm->host_ip, "compute_units",
                     (json_int_t)vm->compute_units, "memory", (json_int_t)vm->memory,
                     "created_at", json_time(vm->created_at), "updated_at",
                     json_time(vm->updated_at), "sessions", live_sessions, "bounds", "sm_min",
                     int_or_null(vm->sm_min), "sm_max", int_or_null(vm->sm_max), "memory_min",
                     int_or_null(vm->memory_min), "memory_max", int_or_null(vm->memory_max));
}

json_t *request_json(const struct request_rec *r)
{
    return json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:o,s:o}", "id", r->id, "vm_id",
                     r->vm_id, "sm", str_or_null(r->sm_ask), "memory", str_or_null(r->memory_ask),
                     "reason", str_or_null(r->reason), "sm_target", int_or_null(r->sm_target),
                     "memory_target", int_or_null(r->memory_target), "state",
                     request_state_name(r->state), "message", str_or_null(r->message),
                     "created_at", json_time(r->created_at), "updated_at",
                     json_time(r->updated_at));
}

json_t *session_json(const struct session_rec *s)
{
    json_t *groups = json_array();
    for (int i = 0; i < s->ngroups; i++)
        json_array_append_new(groups, json_integer(s->groups[i]));
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:i,s:i,s:o,s:I,s:o,s:s,s:o,s:o,s:o,s:o}", "id",
                          s->id, "vm_id", s->vm_id, "pid", (json_int_t)s->pid, "node_id",
                          s->node_id, "gpu_index", s->gpu_index, "sm_count", s->sm_count,
                          "sm_groups", groups, "memory_quota", (json_int_t)s->memory_quota,
                          "endpoint", str_or_null(s->endpoint), "state", session_state_name(s->state), "created_at",
                          json_time(s->created_at), "last_activity", json_time(s->last_activity),
                          "ended_at", json_time(s->ended_at), "end_reason",
                          str_or_null(s->end_reason));
    if (j && s->process[0])
        json_object_set_new(j, "process", json_string(s->process));
    if (j && s->server_pid)
        json_object_set_new(j, "server_pid", json_integer(s->server_pid));
    return j;
}

json_t *gpu_json(const struct gpu_rec *g, const struct gpu_cap *cap)
{
    int groups[MAX_SM_GROUPS];
    int n = gpu_cap_allocated_groups(cap, groups);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(groups[i]));
    long long sm_alloc = (long long)n * cap->granularity;
    json_t *o = json_pack("{s:i,s:s,s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:i,s:o}", "index", g->index,
                     "uuid", g->uuid, "name", g->name, "sm_count", g->sm_count, "sm_granularity",
                     g->sm_granularity, "memory_total", (json_int_t)g->memory_total,
                     "sm_allocated", (json_int_t)sm_alloc, "memory_allocated",
                     (json_int_t)cap->memory_allocated, "sm_free",
                     (json_int_t)(g->sm_count - sm_alloc), "memory_free",
                     (json_int_t)(g->memory_total - cap->memory_allocated), "sm_groups",
                     cap->ngroups, "sm_groups_allocated", arr);
    if (o && g->compute_capability) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", g->compute_capability / 10, g->compute_capability % 10);
        json_object_set_new(o, "compute_capability", json_string(cc));
    }
    return o;
}

json_t *event_json(const struct event_rec *e)
{
    return json_pack("{s:I,s:o,s:s,s:s,s:s}", "id", (json_int_t)e->id, "time", json_time(e->time),
                     "kind", e->kind, "subject", e->subject, "message", e->message);
}

json_t *node_json(struct clm *clm, const struct node_rec *n, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    struct gpu_rec *gpus = NULL;
    int ngpus = 0;
    struct gpu_cap *caps = NULL;
    int ncaps = 0;
    if (store_gpus_get(clm->store, n->id, &gpus, &ngpus, err, sizeof err) < 0) {
        api_store_fail(e, "reading GPUs", err);
        return NULL;
    }
    if (capacity_build(clm, n, 1, &caps, &ncaps, err, sizeof err) < 0) {
        free(gpus);
        api_store_fail(e, "reading sessions", err);
        return NULL;
    }
    json_t *arr = json_array();
    for (int i = 0; i < ngpus && i < ncaps; i++)
        json_array_append_new(arr, gpu_json(&gpus[i], &caps[i]));
    free(gpus);
    free(caps);
    return json_pack("{s:s,s:s,s:o,s:s,s:o,s:o}", "id", n->id, "host_ip", n->host_ip, "address",
                     str_or_null(n->address), "state", node_state_name(n->state), "last_heartbeat",
                     json_time(n->last_heartbeat), "gpus", arr);
}
