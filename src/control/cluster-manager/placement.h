/* Placement: a pure function from the GPUs' capacity and a request to a GPU and a set of
 * SM groups, or a refusal with a reason. No I/O; unit-tested in tests/control.
 *
 * A GPU's SMs are split into groups of sm_granularity SMs (group i is SMs [i*g, (i+1)*g));
 * a VM's share (placed by its first session; its other sessions join it) holds whole
 * groups, disjoint from every other VM's on that GPU unless overcommit is on. Rules:
 *   1. a GPU fits if it has enough free groups (ceil(compute_units / g)) and free memory;
 *      with overcommit, SM groups may be shared (the least shared are taken), memory never;
 *   2. GPUs on the VM's own host_ip come first;
 *   3. then the policy: spread = the most free SMs first (then the most free memory),
 *      pack = the fewest free SMs that fit (then the least free memory);
 *   4. ties: node id, then GPU index.
 * Groups are taken lowest index first. */
#ifndef FLYT_CLM_PLACEMENT_H
#define FLYT_CLM_PLACEMENT_H

#include "store.h"

enum placement_policy { PLACE_SPREAD, PLACE_PACK };

struct gpu_cap {
    char node_id[ID_MAX], host_ip[IP_MAX];
    char name[128];                         /* the GPU's model */
    int compute_capability;                 /* MAJOR * 10 + MINOR; 0: not reported */
    int index;
    int sm_count, granularity, ngroups;    /* ngroups = sm_count / granularity */
    long long memory_total, memory_allocated;
    int group_users[MAX_SM_GROUPS];         /* VMs' live shares holding each group */
};

struct placement_request {
    long long compute_units;   /* SMs */
    long long memory;          /* bytes */
    const char *host_ip;       /* the VM's host */
    enum placement_policy policy;
    int overcommit;
};

struct placement_result {
    int gpu;                   /* index into the caps array */
    int ngroups, groups[MAX_SM_GROUPS];
    int sm_count;              /* ngroups * granularity */
    char reason[512];          /* why nothing fits */
};

/* A GPU with nothing allocated. */
void gpu_cap_init(struct gpu_cap *c, const char *node_id, const char *host_ip,
                  const struct gpu_rec *gpu);
/* Adds a live session's share. Groups outside the GPU are ignored. */
void gpu_cap_add(struct gpu_cap *c, const int *groups, int ngroups, long long memory);
int gpu_cap_free_groups(const struct gpu_cap *c);
int gpu_cap_allocated_groups(const struct gpu_cap *c, int *groups);  /* sorted; the count */

/* 0 with out filled, or -1 with out->reason. */
int placement_choose(const struct gpu_cap *caps, int n, const struct placement_request *req,
                     struct placement_result *out);

int placement_policy_parse(const char *s, enum placement_policy *out);
/* "20 GiB", "512 MiB", "1.5 GiB", "100 bytes" */
void format_bytes(long long bytes, char *out, size_t outlen);

#endif
