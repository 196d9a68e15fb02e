/* flytctl session list|show|release, events, status, version */
#include "ctl.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- sessions ---- */

static const char *const session_states[] = {"starting", "active", "released", "lost", "failed",
                                             "suspended", "migrating", "live", NULL};

static int session_list(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    char path[2048] = "/v1/sessions";
    const char *vm = ctl_opt(cmd, a, "--vm"), *node = ctl_opt(cmd, a, "--node"),
               *state = ctl_opt(cmd, a, "--state");
    if (state) {
        int known = 0;
        for (int i = 0; session_states[i] && !known; i++)
            known = strcmp(state, session_states[i]) == 0;
        if (!known)
            return ctl_usage(cmd, "--state: expected starting, active, released, lost, failed, "
                                  "suspended, migrating or live, got \"%s\"", state);
    }
    if (vm)
        ctl_path_query(path, sizeof path, "vm", vm);
    if (node)
        ctl_path_query(path, sizeof path, "node", node);
    if (state)
        ctl_path_query(path, sizeof path, "state", state);
    json_t *ans;
    int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
    if (rc)
        return rc;
    json_t *ss = json_object_get(ans, "sessions");
    if (c->json)
        ctl_print_json(ans);
    else if (json_array_size(ss) == 0)
        printf("No sessions%s.\n", vm || node || state ? " match" : "");
    else
        ctl_print_sessions(ss, stdout);
    json_decref(ans);
    return CTL_OK;
}

static int session_show(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/sessions/%s", a->pos[0]);
    json_t *ans;
    int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
        json_decref(ans);
        return CTL_OK;
    }
    json_t *s = json_object_get(ans, "session");
    char pid[32], gpu[96], sms[512], mem[96], created[32], activity[64], ended[32], spid[32];
    ctl_fmt_int(s, "pid", pid, sizeof pid);
    ctl_fmt_int(s, "server_pid", spid, sizeof spid);
    snprintf(gpu, sizeof gpu, "%s GPU %lld", ctl_js(s, "node_id"), ctl_ji(s, "gpu_index"));
    size_t o = (size_t)snprintf(sms, sizeof sms, "%lld (SM groups", ctl_ji(s, "sm_count"));
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(s, "sm_groups"), i, g) {
        if (o + 16 < sizeof sms)
            o += (size_t)snprintf(sms + o, sizeof sms - o, "%s%lld", i ? "," : " ",
                                  (long long)json_integer_value(g));
    }
    snprintf(sms + o, sizeof sms - o, ")");
    char h[32];
    ctl_fmt_size(s, "memory_quota", h, sizeof h);
    snprintf(mem, sizeof mem, "%s (%lld bytes)", h, ctl_ji(s, "memory_quota"));
    ctl_fmt_time(json_object_get(s, "created_at"), created, sizeof created);
    ctl_fmt_age(json_object_get(s, "last_activity"), activity, sizeof activity);
    ctl_fmt_time(json_object_get(s, "ended_at"), ended, sizeof ended);
    ctl_print_fields(stdout, "ID", ctl_js(s, "id"), "VM", ctl_js(s, "vm_id"), "Process",
                     json_object_get(s, "process") ? ctl_js(s, "process") : "-", "PID", pid,
                     "GPU", gpu, "SMs", sms, "Memory quota", mem, "Endpoint",
                     ctl_js(s, "endpoint"), "Server PID", spid, "State", ctl_js(s, "state"),
                     "Created (UTC)", created, "Last activity", activity, "Ended (UTC)", ended,
                     "End reason", ctl_js(s, "end_reason"), NULL);
    json_decref(ans);
    return CTL_OK;
}

static int session_release(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024], done[512];
    ctl_path(path, sizeof path, "/v1/sessions/%s", a->pos[0]);
    snprintf(done, sizeof done, "Released session %s (its server is stopped).", a->pos[0]);
    return ctl_delete(c, path, done);
}

/* ---- events ---- */

static volatile sig_atomic_t stop_following;

static void on_stop(int sig)
{
    (void)sig;
    stop_following = 1;
}

static const char *const event_headers[] = {">ID", "TIME (UTC)", "KIND", "SUBJECT", "MESSAGE"};

static void event_row(struct ctl_table *t, json_t *e)
{
    char id[32], when[32];
    ctl_fmt_int(e, "id", id, sizeof id);
    ctl_fmt_time(json_object_get(e, "time"), when, sizeof when);
    ctl_table_row(t, id, when, ctl_js(e, "kind"), ctl_js(e, "subject"), ctl_js(e, "message"));
}

static int events(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    long long since = 0, limit = 0;
    long interval_ms = 2000;
    const char *v;
    if ((v = ctl_opt(cmd, a, "--since")) && ctl_arg_count(cmd, "--since", v, 0, 1LL << 62, &since))
        return CTL_EUSAGE;
    if ((v = ctl_opt(cmd, a, "--limit")) && ctl_arg_count(cmd, "--limit", v, 1, 10000, &limit))
        return CTL_EUSAGE;
    int follow = ctl_opt(cmd, a, "--follow") != NULL;
    if ((v = ctl_opt(cmd, a, "--interval"))) {
        if (!follow)
            return ctl_usage(cmd, "--interval goes with --follow");
        if (ctl_arg_duration(cmd, "--interval", v, &interval_ms))
            return CTL_EUSAGE;
    }
    if (follow) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    int first = 1, warned = 0, header_done = 0;
    while (!stop_following) {
        char path[256];
        snprintf(path, sizeof path, "/v1/events?since=%lld", since);
        if (limit) {
            size_t l = strlen(path);
            snprintf(path + l, sizeof path - l, "&limit=%lld", limit);
        }
        json_t *ans;
        int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
        if (rc) {
            /* once following, a cluster manager restarting is waited for */
            if (!follow || first || strcmp(c->last_error, "unreachable") != 0)
                return rc;
            if (!warned)
                fprintf(stderr, "flytctl: retrying every %ld ms\n", interval_ms);
            warned = 1;
        } else {
            warned = 0;
            json_t *evs = json_object_get(ans, "events");
            if (!follow && c->json) {
                ctl_print_json(ans);
            } else if (c->json) {   /* following: one event per line (JSON lines) */
                size_t i;
                json_t *e;
                json_array_foreach(evs, i, e) {
                    json_dumpf(e, stdout, JSON_COMPACT);
                    fputc('\n', stdout);
                }
            } else if (json_array_size(evs) == 0 && !follow) {
                printf("No events%s.\n", since ? " after that id" : "");
            } else if (json_array_size(evs)) {
                struct ctl_table *t = ctl_table_new(5, event_headers);
                size_t i;
                json_t *e;
                json_array_foreach(evs, i, e)
                    event_row(t, e);
                if (follow) {   /* batches printed apart stay aligned while values fit */
                    static const int minw[] = {6, 19, 20, 24};
                    for (int k = 0; k < 4; k++)
                        ctl_table_min_width(t, k, minw[k]);
                }
                ctl_table_print_ex(t, stdout, !header_done);
                header_done = 1;
            }
            size_t n = json_array_size(evs);
            if (n)
                since = ctl_ji(json_array_get(evs, n - 1), "id");
            json_decref(ans);
            fflush(stdout);
            if (!follow)
                return CTL_OK;
            if (limit ? (long long)n >= limit : n >= 1000)
                continue;   /* more are waiting */
            if (first && !n && !c->json)
                printf("(no events yet; waiting)\n");
            first = 0;
        }
        struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
        while (!stop_following && nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    return CTL_OK;
}

/* ---- status ---- */

static int status(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    (void)a;
    json_t *health, *vms = NULL, *nodes = NULL, *sessions = NULL;
    int rc = ctl_call(c, "GET", "/v1/health", NULL, 0, &health);
    if (rc)
        return rc;
    rc = ctl_call(c, "GET", "/v1/vms", NULL, 1, &vms);
    if (!rc)
        rc = ctl_call(c, "GET", "/v1/nodes", NULL, 1, &nodes);
    if (!rc)
        rc = ctl_call(c, "GET", "/v1/sessions?state=live", NULL, 1, &sessions);
    if (rc) {
        fprintf(stderr, "flytctl: the cluster manager at %s is up (%s, version %s) but its "
                        "counts could not be read\n", c->server, ctl_js(health, "status"),
                ctl_js(health, "version"));
        json_decref(health);
        json_decref(vms);
        json_decref(nodes);
        return rc;
    }
    long long nready = 0, nreg = 0, nlost = 0, ngpus = 0, sm = 0, sm_alloc = 0, mem = 0,
              mem_alloc = 0, nstarting = 0, nactive = 0;
    size_t i, k;
    json_t *n, *g, *s;
    json_array_foreach(json_object_get(nodes, "nodes"), i, n) {
        const char *st = ctl_js(n, "state");
        nready += strcmp(st, "ready") == 0;
        nreg += strcmp(st, "registered") == 0;
        nlost += strcmp(st, "lost") == 0;
        if (strcmp(st, "ready") != 0)
            continue;   /* capacity counts on ready nodes only */
        json_array_foreach(json_object_get(n, "gpus"), k, g) {
            ngpus++;
            sm += ctl_ji(g, "sm_count");
            sm_alloc += ctl_ji(g, "sm_allocated");
            mem += ctl_ji(g, "memory_total");
            mem_alloc += ctl_ji(g, "memory_allocated");
        }
    }
    json_array_foreach(json_object_get(sessions, "sessions"), i, s) {
        nstarting += strcmp(ctl_js(s, "state"), "starting") == 0;
        nactive += strcmp(ctl_js(s, "state"), "active") == 0;
    }
    size_t nvms = json_array_size(json_object_get(vms, "vms")),
           nnodes = json_array_size(json_object_get(nodes, "nodes")),
           nlive = json_array_size(json_object_get(sessions, "sessions"));
    if (c->json) {
        json_t *out = json_pack(
            "{s:s,s:O,s:I,s:{s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I},"
            "s:{s:I,s:I,s:I}}",
            "server", c->server, "health", health, "vms", (json_int_t)nvms, "nodes", "total",
            (json_int_t)nnodes, "ready", (json_int_t)nready, "registered", (json_int_t)nreg,
            "lost", (json_int_t)nlost, "capacity", "gpus", (json_int_t)ngpus, "sm_total",
            (json_int_t)sm, "sm_allocated", (json_int_t)sm_alloc, "sm_free",
            (json_int_t)(sm - sm_alloc), "memory_total", (json_int_t)mem, "memory_allocated",
            (json_int_t)mem_alloc, "memory_free", (json_int_t)(mem - mem_alloc), "sessions",
            "live", (json_int_t)nlive, "active", (json_int_t)nactive, "starting",
            (json_int_t)nstarting);
        ctl_print_json(out);
        json_decref(out);
    } else {
        char manager[1200], vmsb[32], nodesb[160], gpus[32], sms[160], memb[160], sess[128];
        char t1[32], t2[32], t3[32];
        snprintf(manager, sizeof manager, "%s (version %s) at %s", ctl_js(health, "status"),
                 ctl_js(health, "version"), c->server);
        snprintf(vmsb, sizeof vmsb, "%zu", nvms);
        snprintf(nodesb, sizeof nodesb, "%zu (%lld ready, %lld registered, %lld lost)", nnodes,
                 nready, nreg, nlost);
        snprintf(gpus, sizeof gpus, "%lld (on ready nodes)", ngpus);
        snprintf(sms, sizeof sms, "%lld total, %lld allocated, %lld free", sm, sm_alloc,
                 sm - sm_alloc);
        ctl_fmt_bytes(mem, t1, sizeof t1);
        ctl_fmt_bytes(mem_alloc, t2, sizeof t2);
        ctl_fmt_bytes(mem - mem_alloc, t3, sizeof t3);
        snprintf(memb, sizeof memb, "%s total, %s allocated, %s free", t1, t2, t3);
        snprintf(sess, sizeof sess, "%zu live (%lld active, %lld starting)", nlive, nactive,
                 nstarting);
        ctl_print_fields(stdout, "Cluster manager", manager, "VMs", vmsb, "Nodes", nodesb, "GPUs",
                         gpus, "SMs", sms, "GPU memory", memb, "Sessions", sess, NULL);
    }
    json_decref(health);
    json_decref(vms);
    json_decref(nodes);
    json_decref(sessions);
    return CTL_OK;
}

/* ---- version ---- */

static int version(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    int client_only = ctl_opt(cmd, a, "--client") != NULL;
    json_t *health = NULL;
    int rc = client_only ? CTL_OK : ctl_call(c, "GET", "/v1/health", NULL, 0, &health);
    if (c->json) {
        json_t *out = json_pack("{s:s}", "client", FLYTCTL_VERSION);
        if (health)
            json_object_set_new(out, "server", json_pack("{s:s,s:s}", "url", c->server,
                                                         "version", ctl_js(health, "version")));
        ctl_print_json(out);
        json_decref(out);
    } else {
        printf("flytctl %s\n", FLYTCTL_VERSION);
        if (health)
            printf("flyt-cluster-manager %s at %s\n", ctl_js(health, "version"), c->server);
    }
    json_decref(health);
    return rc;
}

static const struct ctl_opt list_opts[] = {
    {"--vm", "ID", "only the sessions of this VM"},
    {"--node", "ID", "only the sessions on this node"},
    {"--state", "STATE", "a state (starting, active, released, lost, failed, suspended, "
                          "migrating) or live"},
    {NULL, NULL, NULL}};
static const struct ctl_opt events_opts[] = {
    {"--since", "ID", "only events after this id (default 0: from the first)"},
    {"--limit", "N", "at most N events per request, 1 to 10000 (server default 1000)"},
    {"--follow", NULL, "keep printing new events until interrupted (JSON lines with --json)"},
    {"--interval", "DURATION", "with --follow: how often to ask (default 2s)"},
    {NULL, NULL, NULL}};
static const struct ctl_opt version_opts[] = {
    {"--client", NULL, "only flytctl's version (do not ask the cluster manager)"},
    {NULL, NULL, NULL}};
static const struct ctl_opt no_opts[] = {{NULL, NULL, NULL}};

const struct ctl_cmd ctl_session_cmds[] = {
    {"session", "list", "", 0, 0, list_opts,
     "List sessions (every CUDA process given a GPU share), live and ended.",
     "Example:\n  flytctl session list --vm vm-10.0.0.5 --state live\n", session_list},
    {"session", "revoke-tokens", "ID", 1, 1, no_opts,
     "Refuse every token issued for a session so far at its server's admission.",
     "Its server reads a new key at once (the session keeps running; connections already\n"
     "admitted carry on); its process gets a token of the new key when it asks again.\n",
     ctl_session_revoke_tokens},
    {"session", "show", "ID", 1, 1, no_opts,
     "Show one session: where it runs, its share, its state and why it ended.", NULL,
     session_show},
    {"session", "release", "ID", 1, 1, no_opts,
     "Release a session: its server is stopped and its share freed.", NULL, session_release},
    {"session", "resize", "ID", 1, 1, ctl_resize_opts,
     "Resize a running session's SMs and memory, live (no restart).", CTL_RESIZE_HELP,
     ctl_session_resize},
    {NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL}};

const struct ctl_cmd ctl_misc_cmds[] = {
    {NULL, "events", "", 0, 0, events_opts, "Show the event log: what changed and why.",
     "Events are printed oldest first from --since. With --follow, new ones are printed as\n"
     "they come (Ctrl-C stops; a cluster manager that goes away is waited for).\n"
     "\nExample:\n  flytctl events --since 120 --follow\n", events},
    {NULL, "status", "", 0, 0, no_opts,
     "Health and counts: VMs, nodes, GPU capacity, live sessions.", NULL,
     status},
    {NULL, "version", "", 0, 0, version_opts,
     "flytctl's version and the cluster manager's.", NULL, version},
    {NULL, "checkpoint", "SESSION", 1, 1, ctl_checkpoint_opts,
     "Write a session's state to FILE (--stop: and stop it: preemption).", CTL_CKPT_HELP,
     ctl_checkpoint},
    {NULL, "restore", "FILE", 1, 1, ctl_where_opts,
     "Bring a checkpointed session back from FILE, on a node placement picks or --node.",
     CTL_RESTORE_HELP, ctl_restore},
    {NULL, "migrate", "SESSION", 1, 1, ctl_migrate_opts,
     "Move a running session to another node (or --node/--gpu), its id kept.", CTL_MIGRATE_HELP,
     ctl_migrate},
    {NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL}};
