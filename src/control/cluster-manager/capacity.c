/* GPU capacity, derived every time from the live sessions (store.h INVARIANT): nothing
 * here is stored, so nothing can drift or be counted twice across restarts. A share is
 * the VM's: all live sessions of a VM on a GPU run on the same SM groups and one memory
 * quota (api_sessions.c, api_resize.c), so each VM's share is counted once per GPU. */
#include "clm.h"

#include <stdlib.h>
#include <string.h>

/* Whether an earlier session of ss holds the same VM's share on the same GPU. */
static int vm_share_counted(const struct session_rec *ss, int s)
{
    for (int j = 0; j < s; j++)
        if (ss[j].gpu_index == ss[s].gpu_index && strcmp(ss[j].vm_id, ss[s].vm_id) == 0)
            return 1;
    return 0;
}

int capacity_build(struct clm *clm, const struct node_rec *nodes, int nnodes, struct gpu_cap **caps,
                   int *ncaps, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&clm->lock);
    *caps = NULL;
    *ncaps = 0;
    int cap = 0, n = 0;
    struct gpu_cap *out = NULL;
    for (int i = 0; i < nnodes; i++) {
        struct gpu_rec *gpus;
        int ngpus;
        if (store_gpus_get(clm->store, nodes[i].id, &gpus, &ngpus, err, errlen) < 0) {
            free(out);
            return -1;
        }
        if (n + ngpus > cap) {
            cap = (n + ngpus) * 2;
            struct gpu_cap *c = realloc(out, sizeof *c * (size_t)cap);
            if (!c) {
                free(gpus);
                free(out);
                return -1;
            }
            out = c;
        }
        int first = n;
        for (int g = 0; g < ngpus; g++)
            gpu_cap_init(&out[n++], nodes[i].id, nodes[i].host_ip, &gpus[g]);
        free(gpus);
        struct session_filter f = {.node_id = nodes[i].id, .live_only = 1};
        struct session_rec *ss;
        int nss;
        if (store_session_list(clm->store, &f, &ss, &nss, err, errlen) < 0) {
            free(out);
            return -1;
        }
        for (int s = 0; s < nss; s++) {
            FLYT_ASSERT(session_is_live(&ss[s]));   /* only live sessions hold a share */
            if (vm_share_counted(ss, s))
                continue;
            for (int g = first; g < n; g++)
                if (out[g].index == ss[s].gpu_index)
                    gpu_cap_add(&out[g], ss[s].groups, ss[s].ngroups, ss[s].memory_quota);
        }
        free(ss);
    }
    *caps = out;
    *ncaps = n;
    return 0;
}

int vm_live_sessions(struct clm *clm, const char *vm_id, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct session_filter f = {.vm_id = vm_id, .live_only = 1};
    struct session_rec *ss;
    int n;
    if (store_session_list(clm->store, &f, &ss, &n, err, errlen) < 0)
        return -1;
    free(ss);
    return n;
}

