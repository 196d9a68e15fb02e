/* GET /metrics: Prometheus text. Capacity per GPU (derived from live sessions), sessions
 * by state, nodes by state, VMs, and the HTTP layer's per-route counts and latencies. */
#include "clm.h"

#include <stdlib.h>
#include <string.h>

static void gpu_metrics(struct flyt_buf *b, const struct gpu_cap *caps, int n)
{
    static const struct {
        const char *name, *help;
    } m[] = {
        {"flyt_gpu_sm_total", "SMs of the GPU (nodes not lost)."},
        {"flyt_gpu_sm_allocated", "SMs held by live sessions (whole SM groups)."},
        {"flyt_gpu_memory_total_bytes", "Memory of the GPU."},
        {"flyt_gpu_memory_allocated_bytes", "Memory quotas of live sessions."},
    };
    for (int k = 0; k < 4; k++) {
        flyt_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", m[k].name, m[k].help, m[k].name);
        for (int i = 0; i < n; i++) {
            int groups[MAX_SM_GROUPS];
            long long v = k == 0 ? caps[i].sm_count
                          : k == 1 ? (long long)gpu_cap_allocated_groups(&caps[i], groups)
                                         * caps[i].granularity
                          : k == 2 ? caps[i].memory_total : caps[i].memory_allocated;
            flyt_buf_printf(b, "%s{node=\"%s\",gpu=\"%d\"} %lld\n", m[k].name, caps[i].node_id,
                            caps[i].index, v);
        }
    }
}

void h_metrics(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct flyt_buf b = {0};
    char err[512];
    struct node_rec *nodes = NULL;
    int nn = 0;
    struct vm_rec *vms = NULL;
    int nvms = 0;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0 && (store_node_list(clm->store, &nodes, &nn, err, sizeof err) < 0
                    || store_vm_list(clm->store, &vms, &nvms, err, sizeof err) < 0))
        rc = api_store_fail(&e, "reading the store", err);
    if (rc == 0) {
        flyt_buf_printf(&b, "# HELP flyt_nodes Nodes by state.\n# TYPE flyt_nodes gauge\n");
        for (int s = 0; s < NODE_STATES; s++) {
            int count = 0;
            for (int i = 0; i < nn; i++)
                count += nodes[i].state == (enum node_state)s;
            flyt_buf_printf(&b, "flyt_nodes{state=\"%s\"} %d\n", node_state_name(s), count);
        }
        flyt_buf_printf(&b, "# HELP flyt_vms VM records.\n# TYPE flyt_vms gauge\nflyt_vms %d\n",
                        nvms);
        /* capacity of the nodes that are not lost (a lost node's is withdrawn) */
        int keep = 0;
        for (int i = 0; i < nn; i++)
            if (nodes[i].state != NODE_LOST)
                nodes[keep++] = nodes[i];
        struct gpu_cap *caps = NULL;
        int ncaps = 0;
        if (capacity_build(clm, nodes, keep, &caps, &ncaps, err, sizeof err) < 0) {
            rc = api_store_fail(&e, "reading capacity", err);
        } else {
            gpu_metrics(&b, caps, ncaps);
            free(caps);
        }
    }
    if (rc == 0) {
        long long counts[SESSION_STATES];
        if (store_session_count_by_state(clm->store, counts, err, sizeof err) < 0) {
            rc = api_store_fail(&e, "counting sessions", err);
        } else {
            flyt_buf_printf(&b, "# HELP flyt_sessions Sessions by state (live: starting, active)."
                                "\n# TYPE flyt_sessions gauge\n");
            for (int s = 0; s < SESSION_STATES; s++)
                flyt_buf_printf(&b, "flyt_sessions{state=\"%s\"} %lld\n", session_state_name(s),
                                counts[s]);
        }
    }
    pthread_mutex_unlock(&clm->lock);
    free(nodes);
    free(vms);
    if (rc < 0) {
        flyt_buf_free(&b);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_metrics(clm->http, &b);
    flyt_http_reply_text(res, 200, "text/plain; version=0.0.4", flyt_buf_take(&b));
}
