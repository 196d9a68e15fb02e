/* GPU capacity, derived every time from the live sessions (store.h INVARIANT) and the
 * reservations of migrations and restores in flight (their targets' shares): no counter
 * is stored, so nothing can drift or be counted twice across restarts. A share is the
 * VM's: all live sessions of a VM on a GPU run on the same SM groups and one memory
 * quota (api_sessions.c, api_resize.c), so each VM's share is counted once per GPU; a
 * reservation that joins a share already counted (the same VM, GPU and groups) adds
 * nothing. */
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

static int same_groups(const int *a, int na, const int *b, int nb)
{
    return na == nb && memcmp(a, b, sizeof a[0] * (size_t)na) == 0;
}

/* Whether reservation r joins a share already counted: a live session's or an earlier
 * reservation's of the same VM on the same GPU and groups. */
static int reservation_counted(const struct session_rec *ss, int nss,
                               const struct reservation_rec *rs, int r)
{
    const struct reservation_rec *v = &rs[r];
    for (int j = 0; j < nss; j++)
        if (ss[j].gpu_index == v->gpu_index && strcmp(ss[j].vm_id, v->vm_id) == 0
            && same_groups(ss[j].groups, ss[j].ngroups, v->groups, v->ngroups))
            return 1;
    for (int j = 0; j < r; j++)
        if (rs[j].gpu_index == v->gpu_index && strcmp(rs[j].vm_id, v->vm_id) == 0
            && same_groups(rs[j].groups, rs[j].ngroups, v->groups, v->ngroups))
            return 1;
    return 0;
}

/* Adds the node's live shares and reservations to its GPUs' caps [first, n). */
static int node_shares_add(struct clm *clm, const char *node_id, struct gpu_cap *caps, int first,
                           int n, char *err, size_t errlen)
{
    struct session_filter f = {.node_id = node_id, .live_only = 1};
    struct session_rec *ss;
    struct reservation_rec *rs;
    int nss, nrs;
    if (store_session_list(clm->store, &f, &ss, &nss, err, errlen) < 0)
        return -1;
    if (store_reservation_list(clm->store, node_id, &rs, &nrs, err, errlen) < 0) {
        free(ss);
        return -1;
    }
    for (int s = 0; s < nss; s++) {
        FLYT_ASSERT(session_is_live(&ss[s]));   /* only live sessions hold a share */
        if (vm_share_counted(ss, s))
            continue;
        for (int g = first; g < n; g++)
            if (caps[g].index == ss[s].gpu_index)
                gpu_cap_add(&caps[g], ss[s].groups, ss[s].ngroups, ss[s].memory_quota);
    }
    for (int r = 0; r < nrs; r++) {
        if (reservation_counted(ss, nss, rs, r))
            continue;
        for (int g = first; g < n; g++)
            if (caps[g].index == rs[r].gpu_index)
                gpu_cap_add(&caps[g], rs[r].groups, rs[r].ngroups, rs[r].memory_quota);
    }
    free(ss);
    free(rs);
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
        if (node_shares_add(clm, nodes[i].id, out, first, n, err, errlen) < 0) {
            free(out);
            return -1;
        }
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

