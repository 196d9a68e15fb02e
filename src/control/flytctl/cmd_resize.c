/* flytctl session resize / vm resize: a live resize through the cluster
 * manager (docs/flytctl.md, docs/api.md "Live resize"). --sm N|+N|-N,
 * --memory SIZE|+SIZE|-SIZE (a bare number is MiB), --partial. */
#include "ctl.h"

#include <stdio.h>
#include <string.h>

const struct ctl_opt ctl_resize_opts[] = {
    {"--sm", "N|+N|-N", "SMs: the new count, or a change (a multiple of the GPU's SM group size)"},
    {"--memory", "SIZE|+SIZE|-SIZE", "memory quota: the new size, or a change; a bare number "
                                     "is MiB"},
    {"--partial", NULL, "take what the GPU has free when it has less than asked"},
    {NULL, NULL, NULL}};

/* "+16" / "-16" / "48" into body's <name>_delta or count field. */
static int put_value(const struct ctl_cmd *cmd, json_t *body, const char *opt, const char *v,
                     const char *abs_key, const char *rel_key, int memory)
{
    int sign = v[0] == '+' ? 1 : v[0] == '-' ? -1 : 0;
    const char *num = sign ? v + 1 : v;
    long long n = 0;
    if (memory ? ctl_arg_memory(cmd, opt, num, &n) : ctl_arg_count(cmd, opt, num, sign ? 0 : 1,
                                                                    100000, &n))
        return CTL_EUSAGE;
    json_object_set_new(body, sign ? rel_key : abs_key, json_integer(sign ? sign * n : n));
    return 0;
}

static json_t *resize_body(const struct ctl_cmd *cmd, struct ctl_args *a, int *rc)
{
    const char *sm = ctl_opt(cmd, a, "--sm"), *mem = ctl_opt(cmd, a, "--memory");
    *rc = 0;
    if (!sm && !mem) {
        *rc = ctl_usage(cmd, "give --sm, --memory or both");
        return NULL;
    }
    json_t *body = json_object();
    if ((sm && (*rc = put_value(cmd, body, "--sm", sm, "sm_count", "sm_delta", 0))) ||
        (mem && (*rc = put_value(cmd, body, "--memory", mem, "memory_quota", "memory_delta", 1)))) {
        json_decref(body);
        return NULL;
    }
    if (ctl_opt(cmd, a, "--partial"))
        json_object_set_new(body, "partial", json_true());
    return body;
}

/* One session's outcome, as a sentence. */
static void print_outcome(json_t *r)
{
    json_t *s = json_object_get(r, "session"), *prev = json_object_get(r, "previous");
    json_t *node = json_object_get(r, "node");
    char m0[32], m1[32];
    ctl_fmt_size(prev, "memory_quota", m0, sizeof m0);
    ctl_fmt_size(s, "memory_quota", m1, sizeof m1);
    printf("Session %s: %lld -> %lld SMs, memory %s -> %s (granted %s).\n", ctl_js(s, "id"),
           ctl_ji(prev, "sm_count"), ctl_ji(s, "sm_count"), m0, m1, ctl_js(r, "granted"));
    long long applied = ctl_ji(node, "applied"), pending = ctl_ji(node, "pending");
    long long failed = ctl_ji(node, "failed");
    printf("  in force for %lld connected process(es)%s%s: %.3f ms after the node posted it "
           "(server apply %.3f ms after a drain of %.3f ms); %.3f ms end to end.\n",
           applied, pending ? ", others at their next call" : "",
           failed ? ", some FAILED (see the server log)" : "",
           json_real_value(json_object_get(node, "in_force_ms")),
           json_real_value(json_object_get(node, "apply_ms")),
           json_real_value(json_object_get(node, "drain_ms")),
           json_real_value(json_object_get(r, "cluster_ms")));
}

static int run_resize(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a,
                      const char *what)
{
    int rc;
    json_t *body = resize_body(cmd, a, &rc);
    if (!body)
        return rc;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/%s/%s/resize", what, a->pos[0]);
    json_t *ans;
    rc = ctl_call(c, "POST", path, body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else if (strcmp(what, "sessions") == 0) {
        print_outcome(ans);
    } else {
        printf("VM %s: its share resized; its %lld process(es) run on it.\n", ctl_js(ans, "vm"),
               ctl_ji(ans, "sessions"));
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(ans, "results"), i, r) {
            if (json_object_get(r, "session"))
                print_outcome(r);
            else
                printf("Session %s: %s: %s\n", ctl_js(r, "session_id"), ctl_js(r, "error"),
                       ctl_js(r, "message"));
        }
        rc = ctl_ji(ans, "resized") == ctl_ji(ans, "sessions") ? CTL_OK : CTL_EAPI;
    }
    json_decref(ans);
    return rc;
}

int ctl_session_resize(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    return run_resize(c, cmd, a, "sessions");
}

int ctl_vm_resize(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    return run_resize(c, cmd, a, "vms");
}
