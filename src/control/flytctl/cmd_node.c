/* flytctl node list|show|add|remove */
#include "ctl.h"

#include <stdlib.h>
#include <string.h>

/* [0,1,2,3,6] -> "0-3,6"; "none" when empty. */
static void fmt_groups(json_t *arr, char *out, size_t outlen)
{
    size_t n = json_array_size(arr), o = 0;
    out[0] = 0;
    if (!n) {
        snprintf(out, outlen, "none");
        return;
    }
    for (size_t i = 0; i < n && o + 1 < outlen;) {
        long long a = json_integer_value(json_array_get(arr, i)), b = a;
        size_t j = i + 1;
        while (j < n && json_integer_value(json_array_get(arr, j)) == b + 1)
            b = json_integer_value(json_array_get(arr, j++));
        int w = b > a ? snprintf(out + o, outlen - o, "%s%lld-%lld", o ? "," : "", a, b)
                      : snprintf(out + o, outlen - o, "%s%lld", o ? "," : "", a);
        o += (size_t)w < outlen - o ? (size_t)w : outlen - o - 1;
        i = j;
    }
}

/* The capacity cells of one GPU: SM total/allocated/free, memory total/allocated/free. */
struct gpu_cells {
    char index[16], sm[24], sm_alloc[24], sm_free[24], mem[32], mem_alloc[32], mem_free[32];
};

static void gpu_cells(json_t *g, struct gpu_cells *c)
{
    ctl_fmt_int(g, "index", c->index, sizeof c->index);
    ctl_fmt_int(g, "sm_count", c->sm, sizeof c->sm);
    ctl_fmt_int(g, "sm_allocated", c->sm_alloc, sizeof c->sm_alloc);
    ctl_fmt_int(g, "sm_free", c->sm_free, sizeof c->sm_free);
    ctl_fmt_size(g, "memory_total", c->mem, sizeof c->mem);
    ctl_fmt_size(g, "memory_allocated", c->mem_alloc, sizeof c->mem_alloc);
    ctl_fmt_size(g, "memory_free", c->mem_free, sizeof c->mem_free);
}

static int node_list(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    (void)a;
    json_t *ans;
    int rc = ctl_call(c, "GET", "/v1/nodes", NULL, 1, &ans);
    if (rc)
        return rc;
    json_t *nodes = json_object_get(ans, "nodes");
    if (c->json) {
        ctl_print_json(ans);
    } else if (json_array_size(nodes) == 0) {
        printf("No nodes (add one with 'flytctl node add ID --host-ip IP').\n");
    } else {
        static const char *const h[] = {"NODE", "STATE", "HOST IP", ">GPU", "NAME",
                                        ">SM TOTAL", ">SM ALLOC", ">SM FREE", ">MEM TOTAL",
                                        ">MEM ALLOC", ">MEM FREE"};
        struct ctl_table *t = ctl_table_new(11, h);
        size_t i, k;
        json_t *n, *g;
        json_array_foreach(nodes, i, n) {
            json_t *gpus = json_object_get(n, "gpus");
            if (json_array_size(gpus) == 0)
                ctl_table_row(t, ctl_js(n, "id"), ctl_js(n, "state"), ctl_js(n, "host_ip"), "-",
                              "(no GPUs reported)", "-", "-", "-", "-", "-", "-");
            json_array_foreach(gpus, k, g) {
                struct gpu_cells gc;
                gpu_cells(g, &gc);
                ctl_table_row(t, ctl_js(n, "id"), ctl_js(n, "state"), ctl_js(n, "host_ip"),
                              gc.index, ctl_js(g, "name"), gc.sm, gc.sm_alloc, gc.sm_free, gc.mem,
                              gc.mem_alloc, gc.mem_free);
            }
        }
        ctl_table_print(t, stdout);
    }
    json_decref(ans);
    return CTL_OK;
}

static int node_show(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024];
    ctl_path(path, sizeof path, "/v1/nodes/%s", a->pos[0]);
    json_t *ans;
    int rc = ctl_call(c, "GET", path, NULL, 1, &ans);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
        json_decref(ans);
        return CTL_OK;
    }
    json_t *n = json_object_get(ans, "node");
    char hb[64], age[32];
    ctl_fmt_time(json_object_get(n, "last_heartbeat"), hb, sizeof hb);
    ctl_fmt_age(json_object_get(n, "last_heartbeat"), age, sizeof age);
    if (json_is_string(json_object_get(n, "last_heartbeat"))) {
        size_t l = strlen(hb);
        snprintf(hb + l, sizeof hb - l, " UTC (%s)", age);
    } else {
        snprintf(hb, sizeof hb, "never");
    }
    ctl_print_fields(stdout, "ID", ctl_js(n, "id"), "Host IP", ctl_js(n, "host_ip"), "Address",
                     ctl_js(n, "address"), "State", ctl_js(n, "state"), "Last heartbeat", hb,
                     NULL);
    json_t *gpus = json_object_get(n, "gpus");
    if (json_array_size(gpus) == 0) {
        printf("\nNo GPUs reported (its node manager has not registered yet).\n");
    } else {
        printf("\nGPUs:\n");
        static const char *const h[] = {">GPU", "NAME", "UUID", ">SM TOTAL", ">SM ALLOC",
                                        ">SM FREE", ">SM GROUP", "GROUPS USED", ">MEM TOTAL",
                                        ">MEM ALLOC", ">MEM FREE"};
        struct ctl_table *t = ctl_table_new(11, h);
        size_t k;
        json_t *g;
        json_array_foreach(gpus, k, g) {
            struct gpu_cells gc;
            char gran[24], used[256];
            gpu_cells(g, &gc);
            ctl_fmt_int(g, "sm_granularity", gran, sizeof gran);
            fmt_groups(json_object_get(g, "sm_groups_allocated"), used, sizeof used);
            size_t l = strlen(used);
            snprintf(used + l, sizeof used - l, " of %lld", ctl_ji(g, "sm_groups"));
            ctl_table_row(t, gc.index, ctl_js(g, "name"), ctl_js(g, "uuid"), gc.sm, gc.sm_alloc,
                          gc.sm_free, gran, used, gc.mem, gc.mem_alloc, gc.mem_free);
        }
        ctl_table_print(t, stdout);
    }
    json_t *ss = json_object_get(ans, "sessions");
    if (json_array_size(ss)) {
        printf("\nLive sessions:\n");
        ctl_print_sessions(ss, stdout);
    } else {
        printf("\nNo live sessions.\n");
    }
    json_decref(ans);
    return CTL_OK;
}

static int node_add(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    const char *ip = ctl_opt(cmd, a, "--host-ip");
    if (ctl_arg_id(cmd, "ID", a->pos[0]))
        return CTL_EUSAGE;
    if (!ip)
        return ctl_usage(cmd, "missing --host-ip IP");
    if (ctl_arg_ip(cmd, "--host-ip", ip))
        return CTL_EUSAGE;
    json_t *body = json_pack("{s:s,s:s}", "id", a->pos[0], "host_ip", ip), *ans;
    int rc = ctl_call(c, "POST", "/v1/nodes", body, 1, &ans);
    json_decref(body);
    if (rc)
        return rc;
    if (c->json) {
        ctl_print_json(ans);
    } else {
        json_t *n = json_object_get(ans, "node");
        printf("Added node %s (host_ip %s); it is ready once its node manager registers.\n\n"
               "Node token (shown only this once; the cluster manager keeps only its hash):\n\n"
               "    %s\n\n"
               "Give it to the flyt-node-manager of node %s.\n",
               ctl_js(n, "id"), ctl_js(n, "host_ip"), ctl_js(ans, "token"), ctl_js(n, "id"));
    }
    json_decref(ans);
    return CTL_OK;
}

static int node_remove(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a)
{
    (void)cmd;
    char path[1024], done[512];
    ctl_path(path, sizeof path, "/v1/nodes/%s", a->pos[0]);
    snprintf(done, sizeof done, "Removed node %s (its sessions, if any, ended).", a->pos[0]);
    return ctl_delete(c, path, done);
}

static const struct ctl_opt add_opts[] = {
    {"--host-ip", "IP", "the GPU machine's address (required)"},
    {NULL, NULL, NULL}};
static const struct ctl_opt no_opts[] = {{NULL, NULL, NULL}};

const struct ctl_cmd ctl_node_cmds[] = {
    {"node", "list", "", 0, 0, no_opts,
     "List the nodes and each GPU's SMs and memory: total, allocated, free.",
     "A node with several GPUs has one row per GPU; MEM columns are in binary units.\n",
     node_list},
    {"node", "show", "ID", 1, 1, no_opts,
     "Show one node: state, heartbeat, GPUs and SM groups, live sessions.", NULL,
     node_show},
    {"node", "add", "ID", 1, 1, add_opts,
     "Create a node record; prints the node's token once.",
     "ID: 1 to 63 characters of A-Z a-z 0-9 . _ -\n"
     "\nExample:\n  flytctl node add gpu-1 --host-ip 10.0.1.1\n", node_add},
    {"node", "remove", "ID", 1, 1, no_opts,
     "Remove a node; its live sessions end and its capacity is withdrawn.", NULL, node_remove},
    {"node", "drain", "ID", 1, 1, no_opts,
     "Stop placements on a node and migrate its sessions away, reporting each.", NULL,
     ctl_node_drain},
    {"node", "undrain", "ID", 1, 1, no_opts, "Let a drained node take placements again.", NULL,
     ctl_node_undrain},
    {"node", "rotate-token", "ID", 1, 1, ctl_rotate_opts,
     "Give a node a new token; the previous one stays valid for a grace period.",
     CTL_ROTATE_HELP "\nExample:\n  flytctl node rotate-token gpu-1 --grace 5m\n",
     ctl_rotate_token},
    {"node", "revoke-token", "ID", 1, 1, ctl_revoke_opts,
     "Refuse a node's token (or only its previous one) from now on.", CTL_REVOKE_HELP,
     ctl_revoke_token},
    {NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL}};
