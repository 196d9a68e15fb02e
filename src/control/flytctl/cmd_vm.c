/* flytctl vm list|show|add|update|remove|import */
#include "ctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MEMORY_HELP                                                                          \
    "SIZE: a bare number is MiB (the unit of the original vm_required_resources documents);\n" \
    "a number with a unit is exact: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB\n" \
    "(powers of 1000), e.g. 20480, 20GiB, \"512 MiB\".\n"

/* "16-64 SMs, 1 GiB-8 GiB" or "-" (bounds the operator set for the VM's programs' requests) */
static void bounds_text(json_t *vm, char *out, size_t outlen)
{
    json_t *b = json_object_get(vm, "bounds");
    char sm0[32], sm1[32], m0[32], m1[32];
    ctl_fmt_int(b, "sm_min", sm0, sizeof sm0);
    ctl_fmt_int(b, "sm_max", sm1, sizeof sm1);
    ctl_fmt_size(b, "memory_min", m0, sizeof m0);
    ctl_fmt_size(b, "memory_max", m1, sizeof m1);
    if (!json_is_integer(json_object_get(b, "sm_max")) &&
        !json_is_integer(json_object_get(b, "memory_max")))
        snprintf(out, outlen, "-");
    else
        snprintf(out, outlen, "SMs %s..%s, memory %s..%s", sm0, sm1, m0, m1);
}

static void vm_row(struct ctl_table *t, json_t *vm)
{
    char sms[32], mem[32], sessions[32], created[32], bounds[160];
    ctl_fmt_int(vm, "compute_units", sms, sizeof sms);
    ctl_fmt_size(vm, "memory", mem, sizeof mem);
    ctl_fmt_int(vm, "sessions", sessions, sizeof sessions);
    ctl_fmt_time(json_object_get(vm, "created_at"), created, sizeof created);
    bounds_text(vm, bounds, sizeof bounds);
    ctl_table_row(t, ctl_js(vm, "id"), ctl_js(vm, "vm_ip"), ctl_js(vm, "host_ip"), sms, mem,
                  sessions, created, bounds);
}

static const char *const vm_headers[] = {"ID", "VM IP", "HOST IP", ">SMS", ">MEMORY",
                                         ">SESSIONS", "CREATED (UTC)", "APP REQUEST BOUNDS"};

static int vm_list(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    (void)a;
    json_t *ans;
    int rc = ctl_call(c, "GET", "/v1/vms", NULL, 1, &ans);
    if (rc)
        return rc;
    json_t *vms = json_object_get(ans, "vms");
    if (c->json) {
        ctl_print_json(ans);
    } else if (json_array_size(vms) == 0) {
        printf("No VMs (add them with 'flytctl vm add' or 'flytctl vm import').\n");
    } else {
        struct ctl_table *t = ctl_table_new(8, vm_headers);
        size_t i;
        json_t *vm;
        json_array_foreach(vms, i, vm)
            vm_row(t, vm);
        ctl_table_print(t, stdout);
    }
    json_decref(ans);
    return CTL_OK;
}

/* "20 GiB (21474836480 bytes)" */
static void size_exact(json_t *o, const char *key, char *out, size_t outlen)
{
    char h[32];
    ctl_fmt_size(o, key, h, sizeof h);
    snprintf(out, outlen, "%s (%lld bytes)", h, ctl_ji(o, key));
}

static void print_vm_fields(json_t *vm)
{
    char sms[48], mem[96], sessions[32], created[32], updated[32], bounds[160];
    snprintf(sms, sizeof sms, "%lld SMs", ctl_ji(vm, "compute_units"));
    bounds_text(vm, bounds, sizeof bounds);
    size_exact(vm, "memory", mem, sizeof mem);
    ctl_fmt_int(vm, "sessions", sessions, sizeof sessions);
    ctl_fmt_time(json_object_get(vm, "created_at"), created, sizeof created);
    ctl_fmt_time(json_object_get(vm, "updated_at"), updated, sizeof updated);
    ctl_print_fields(stdout, "ID", ctl_js(vm, "id"), "VM IP", ctl_js(vm, "vm_ip"), "Host IP",
                     ctl_js(vm, "host_ip"), "Compute units", sms, "Memory", mem, "Live sessions",
                     sessions, "App request bounds", bounds, "Created (UTC)", created,
                     "Updated (UTC)", updated, NULL);
}

static int vm_show(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/vms/%s", a->pos[0]);
    json_t *ans;
    int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else {
        print_vm_fields(json_object_get(ans, "vm"));
        json_t *ss = json_object_get(ans, "sessions");
        if (json_array_size(ss)) {
            printf("\nLive sessions:\n");
            ctl_print_sessions(ss, stdout);
        } else {
            printf("\nNo live sessions.\n");
        }
    }
    json_decref(ans);
    return CTL_OK;
}

/* --sm-min N, --sm-max N, --memory-min SIZE, --memory-max SIZE ("none" clears one). */
static int bounds_body(const struct ctl_cmd *cmd, struct ctl_args *a, json_t *body)
{
    static const char *const opts[] = {"--sm-min", "--sm-max", "--memory-min", "--memory-max"};
    static const char *const keys[] = {"sm_min", "sm_max", "memory_min", "memory_max"};
    for (int i = 0; i < 4; i++) {
        const char *v = ctl_opt(cmd, a, opts[i]);
        long long n;
        if (!v)
            continue;
        if (strcmp(v, "none") == 0)
            json_object_set_new(body, keys[i], json_null());
        else if (i < 2 ? ctl_arg_count(cmd, opts[i], v, 1, 1000000, &n)
                       : ctl_arg_memory(cmd, opts[i], v, &n))
            return CTL_EUSAGE;
        else
            json_object_set_new(body, keys[i], json_integer(n));
    }
    return 0;
}

/* The VM fields of the options into body; require: all four. */
static int vm_body(const struct ctl_cmd *cmd, struct ctl_args *a, int require, json_t *body)
{
    static const char *const names[] = {"--vm-ip", "--host-ip", "--compute-units", "--memory"};
    static const char *const metas[] = {"IP", "IP", "N", "SIZE"};
    for (int i = 0; require && i < 4; i++)
        if (!ctl_opt(cmd, a, names[i]))
            return ctl_usage(cmd, "missing %s %s", names[i], metas[i]);
    const char *v;
    if ((v = ctl_opt(cmd, a, "--vm-ip"))) {
        if (ctl_arg_ip(cmd, "--vm-ip", v))
            return CTL_EUSAGE;
        json_object_set_new(body, "vm_ip", json_string(v));
    }
    if ((v = ctl_opt(cmd, a, "--host-ip"))) {
        if (ctl_arg_ip(cmd, "--host-ip", v))
            return CTL_EUSAGE;
        json_object_set_new(body, "host_ip", json_string(v));
    }
    long long n;
    if ((v = ctl_opt(cmd, a, "--compute-units"))) {
        if (ctl_arg_count(cmd, "--compute-units", v, 1, 1000000, &n))
            return CTL_EUSAGE;
        json_object_set_new(body, "compute_units", json_integer(n));
    }
    if ((v = ctl_opt(cmd, a, "--memory"))) {
        if (ctl_arg_memory(cmd, "--memory", v, &n))
            return CTL_EUSAGE;
        json_object_set_new(body, "memory", json_integer(n));
    }
    if (bounds_body(cmd, a, body))
        return CTL_EUSAGE;
    if ((v = ctl_opt(cmd, a, "--id"))) {
        if (ctl_arg_id(cmd, "--id", v))
            return CTL_EUSAGE;
        json_object_set_new(body, "id", json_string(v));
    }
    if (json_object_size(body) == 0)
        return ctl_usage(cmd, "nothing to change: give at least one of --vm-ip, --host-ip, "
                              "--compute-units, --memory, --sm-min, --sm-max, --memory-min, "
                              "--memory-max");
    return 0;
}

static void vm_summary(json_t *vm, char *out, size_t outlen)
{
    char mem[32];
    ctl_fmt_size(vm, "memory", mem, sizeof mem);
    snprintf(out, outlen, "vm_ip %s, host_ip %s, %lld SMs, %s", ctl_js(vm, "vm_ip"),
             ctl_js(vm, "host_ip"), ctl_ji(vm, "compute_units"), mem);
}

static int vm_add(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    json_t *body = json_object();
    int rc = vm_body(cmd, a, 1, body);
    json_t *ans = NULL;
    if (rc == 0)
        rc = ctl_call(c, "POST", "/v1/vms", body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else {
        json_t *vm = json_object_get(ans, "vm");
        char sum[512];
        vm_summary(vm, sum, sizeof sum);
        printf("Added VM %s: %s.\n\n"
               "VM token (shown only this once; the cluster manager keeps only its hash):\n\n"
               "    %s\n\n"
               "Give it to the flyt-client-manager of VM %s.\n",
               ctl_js(vm, "id"), sum, ctl_js(ans, "token"), ctl_js(vm, "id"));
    }
    json_decref(ans);
    return CTL_OK;
}

static int vm_update(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    json_t *body = json_object();
    int rc = vm_body(cmd, a, 0, body);
    json_t *ans = NULL;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/vms/%s", a->pos[0]);
    if (rc == 0)
        rc = ctl_call(c, "PATCH", path, body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else {
        json_t *vm = json_object_get(ans, "vm");
        char sum[512];
        vm_summary(vm, sum, sizeof sum);
        printf("Updated VM %s: %s.\n(The VM gets this share when it next starts with no live session; the share it holds now changes with vm resize.)\n",
               ctl_js(vm, "id"), sum);
    }
    json_decref(ans);
    return CTL_OK;
}

static int vm_remove(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    char path[1024];
    ctl_path(path, sizeof path, "/v1/vms/%s", a->pos[0]);
    int force = ctl_opt(cmd, a, "--force") != NULL;
    if (force)
        ctl_path_query(path, sizeof path, "force", "1");
    char done[512];
    snprintf(done, sizeof done, "Removed VM %s%s.", a->pos[0],
             force ? " (its sessions, if any, released)" : "");
    int rc = ctl_delete(c, path, done);
    if (rc && strcmp(c->last_error, "conflict") == 0 && !force)
        fprintf(stderr, "  'flytctl vm remove %s --force' releases its sessions and removes "
                        "it\n", a->pos[0]);
    return rc;
}

/* The share requests of the VM's programs: granted, queued, refused, superseded, cancelled. */
static int vm_requests(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/vms/%s/requests", a->pos[0]);
    json_t *ans;
    int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
    if (rc)
        return rc;
    json_t *qs = json_object_get(ans, "requests");
    if (c->json) {
        ctl_print_json(ans);
    } else if (json_array_size(qs) == 0) {
        printf("No requests from VM %s's programs.\n", a->pos[0]);
    } else {
        static const char *const h[] = {"ID", "ASKED SMS", "ASKED MEMORY", ">TARGET SMS",
                                        ">TARGET MEMORY", "STATE", "CREATED (UTC)", "MESSAGE"};
        struct ctl_table *t = ctl_table_new(8, h);
        size_t i;
        json_t *q;
        json_array_foreach(qs, i, q) {
            char sms[32], mem[32], when[32];
            ctl_fmt_int(q, "sm_target", sms, sizeof sms);
            ctl_fmt_size(q, "memory_target", mem, sizeof mem);
            ctl_fmt_time(json_object_get(q, "created_at"), when, sizeof when);
            ctl_table_row(t, ctl_js(q, "id"), ctl_js(q, "sm"), ctl_js(q, "memory"), sms, mem,
                          ctl_js(q, "state"), when, ctl_js(q, "message"));
        }
        ctl_table_print(t, stdout);
    }
    json_decref(ans);
    return CTL_OK;
}

/* Reads FILE ("-": stdin) into {"documents": [...]}; NULL after a usage error. */
static json_t *read_documents(const struct ctl_cmd *cmd, const char *file)
{
    int is_stdin = strcmp(file, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(file, "r");
    if (!f) {
        ctl_usage(cmd, "cannot read %s: %s", file, strerror(errno));
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    if (!is_stdin)
        fclose(f);
    if (!j) {
        ctl_usage(cmd, "%s:%d:%d: not valid JSON: %s", is_stdin ? "(stdin)" : file, jerr.line,
                  jerr.column, jerr.text);
        return NULL;
    }
    json_t *docs = json_is_array(j) ? j : json_object_get(j, "documents");
    if (!json_is_array(docs)) {
        ctl_usage(cmd, "%s: expected a JSON array of vm_required_resources documents, or an "
                       "object with \"documents\": [...]", file);
        json_decref(j);
        return NULL;
    }
    if (json_array_size(docs) == 0) {
        ctl_usage(cmd, "%s: no documents", file);
        json_decref(j);
        return NULL;
    }
    size_t i;
    json_t *d;
    json_array_foreach(docs, i, d) {
        if (!json_is_object(d)) {
            ctl_usage(cmd, "%s: documents[%zu]: expected an object {\"vm_ip\", \"host_ip\", "
                           "\"compute_units\", \"memory\"}", file, i);
            json_decref(j);
            return NULL;
        }
    }
    json_t *body = json_pack("{s:O}", "documents", docs);
    json_decref(j);
    return body;
}

static int vm_import(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    json_t *body = read_documents(cmd, a->pos[0]);
    if (!body)
        return CTL_EUSAGE;
    json_t *ans;
    int rc = ctl_call(c, "POST", "/v1/vms/import", body, 1, &ans);
    json_decref(body);
    if (rc) {
        if (rc == CTL_EAPI)
            fprintf(stderr, "  nothing was imported (the import is all or nothing)\n");
        return rc;
    }
    if (c->json) {
        ctl_print_json(ans);
        json_decref(ans);
        return CTL_OK;
    }
    json_t *created = json_object_get(ans, "created"), *updated = json_object_get(ans, "updated");
    printf("Imported %s: %zu created, %zu updated.\n\n",
           strcmp(a->pos[0], "-") == 0 ? "(stdin)" : a->pos[0], json_array_size(created),
           json_array_size(updated));
    static const char *const h[] = {"ACTION", "ID", "VM IP", "HOST IP", ">SMS", ">MEMORY",
                                    ">SESSIONS", "CREATED (UTC)"};
    struct ctl_table *t = ctl_table_new(8, h);
    for (int pass = 0; pass < 2; pass++) {
        size_t i;
        json_t *vm;
        json_array_foreach(pass ? updated : created, i, vm) {
            char sms[32], mem[32], sessions[32], when[32];
            ctl_fmt_int(vm, "compute_units", sms, sizeof sms);
            ctl_fmt_size(vm, "memory", mem, sizeof mem);
            ctl_fmt_int(vm, "sessions", sessions, sizeof sessions);
            ctl_fmt_time(json_object_get(vm, "created_at"), when, sizeof when);
            ctl_table_row(t, pass ? "updated" : "created", ctl_js(vm, "id"), ctl_js(vm, "vm_ip"),
                          ctl_js(vm, "host_ip"), sms, mem, sessions, when);
        }
    }
    ctl_table_print(t, stdout);
    if (json_array_size(created)) {
        printf("\nVM tokens of the new VMs (shown only this once; the cluster manager keeps only "
               "their hashes):\n\n");
        static const char *const th[] = {"ID", "VM IP", "TOKEN"};
        struct ctl_table *tt = ctl_table_new(3, th);
        size_t i;
        json_t *vm;
        json_array_foreach(created, i, vm)
            ctl_table_row(tt, ctl_js(vm, "id"), ctl_js(vm, "vm_ip"), ctl_js(vm, "token"));
        ctl_table_print(tt, stdout);
        printf("\nGive each to the flyt-client-manager of its VM.\n");
    }
    json_decref(ans);
    return CTL_OK;
}

/* the bounds within which the VM's programs may ask for another share (docs/api.md,
 * "App-requested scaling") */
#define BOUNDS_OPTS                                                                         \
    {"--sm-min", "N", "fewest SMs the VM's programs may ask for (\"none\" clears it)"},     \
    {"--sm-max", "N", "most SMs the VM's programs may ask for (none: SM asks refused)"},     \
        {"--memory-min", "SIZE", "least memory its programs may ask for"},                 \
        {"--memory-max", "SIZE", "most memory its programs may ask for (none: refused)"}

static const struct ctl_opt add_opts[] = {
    {"--vm-ip", "IP", "the VM's address (required)"},
    {"--host-ip", "IP", "the machine that hosts the VM (required; placement prefers its GPUs)"},
    {"--compute-units", "N", "SMs per CUDA process (required; rounded up to whole SM groups)"},
    {"--memory", "SIZE", "GPU memory per CUDA process (required); a bare number is MiB"},
    {"--id", "ID", "the VM's id (default: vm-<vm_ip>)"},
    BOUNDS_OPTS,
    {NULL, NULL, NULL}};
static const struct ctl_opt update_opts[] = {
    {"--vm-ip", "IP", "new VM address"},
    {"--host-ip", "IP", "new host address"},
    {"--compute-units", "N", "new SMs per CUDA process"},
    {"--memory", "SIZE", "new GPU memory per CUDA process; a bare number is MiB"},
    BOUNDS_OPTS,
    {NULL, NULL, NULL}};
static const struct ctl_opt remove_opts[] = {
    {"--force", NULL, "also release the VM's live sessions (else refused while it has any)"},
    {NULL, NULL, NULL}};
static const struct ctl_opt no_opts[] = {{NULL, NULL, NULL}};

const struct ctl_cmd ctl_vm_cmds[] = {
    {"vm", "list", "", 0, 0, no_opts, "List the VMs: addresses, share per CUDA process, live "
     "sessions.", NULL, vm_list},
    {"vm", "show", "ID", 1, 1, no_opts, "Show one VM and its live sessions.", NULL, vm_show},
    {"vm", "add", "", 0, 0, add_opts,
     "Register a VM with its GPU share; prints the VM's token once.",
     MEMORY_HELP "\nExample:\n  flytctl vm add --vm-ip 10.0.0.5 --host-ip 10.0.1.1 "
     "--compute-units 32 --memory 20GiB\n", vm_add},
    {"vm", "update", "ID", 1, 1, update_opts,
     "Change a VM's addresses or share (applies to its new sessions).",
     MEMORY_HELP "\nExample:\n  flytctl vm update vm-10.0.0.5 --memory 40GiB\n", vm_update},
    {"vm", "resize", "ID", 1, 1, ctl_resize_opts,
     "Resize the share of each of the VM's running sessions, live.", CTL_RESIZE_HELP,
     ctl_vm_resize},
    {"vm", "requests", "ID", 1, 1, no_opts,
     "List the share requests of the VM's programs and what became of them.",
     "A program asks through its client manager (flyt-client-manager request) for more or\n"
     "fewer SMs or memory, within the bounds set here with vm add/update --sm-min, --sm-max,\n"
     "--memory-min, --memory-max. States: granted, queued (the GPU lacks the capacity now;\n"
     "retried as it frees), refused (the message says why), superseded (a later request of\n"
     "the VM replaced it), cancelled (the VM's sessions ended first).\n", vm_requests},
    {"vm", "rotate-token", "ID", 1, 1, ctl_rotate_opts,
     "Give a VM a new token; the previous one stays valid for a grace period.",
     CTL_ROTATE_HELP "\nExample:\n  flytctl vm rotate-token vm-10.0.0.5 --grace 5m\n",
     ctl_rotate_token},
    {"vm", "revoke-token", "ID", 1, 1, ctl_revoke_opts,
     "Refuse a VM's token (or only its previous one) from now on.", CTL_REVOKE_HELP,
     ctl_revoke_token},
    {"vm", "remove", "ID", 1, 1, remove_opts,
     "Remove a VM (refused while it has live sessions unless --force).", NULL, vm_remove},
    {"vm", "import", "FILE", 1, 1, no_opts,
     "Create or update VMs from a JSON file of vm_required_resources docs.",
     "FILE (\"-\": standard input) holds a JSON array of documents, or an object with\n"
     "\"documents\": [...]. Each document is {\"vm_ip\", \"host_ip\", \"compute_units\", "
     "\"memory\"};\n"
     "other fields are ignored. A document whose vm_ip matches a VM updates it; the others\n"
     "create VMs (id vm-<vm_ip>) whose tokens are printed once. All or nothing: one bad\n"
     "document and nothing changes.\n"
     "memory: a number is MiB (the original system's unit); a string takes a unit:\n"
     "\"20GiB\", \"512MiB\", \"2048KiB\", \"1073741824B\" (also KB/MB/GB/TB, powers of 1000).\n"
     "\nExample file:\n"
     "  [{\"vm_ip\": \"10.0.0.5\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 32, "
     "\"memory\": 20480},\n"
     "   {\"vm_ip\": \"10.0.0.6\", \"host_ip\": \"10.0.1.2\", \"compute_units\": 16, "
     "\"memory\": \"8GiB\"}]\n",
     vm_import},
    {NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL}};
