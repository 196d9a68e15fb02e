/* Placement: see placement.h. */
#include "placement.h"

#include "flyt_assert.h"

#include <stdio.h>
#include <string.h>

void gpu_cap_init(struct gpu_cap *c, const char *node_id, const char *host_ip,
                  const struct gpu_rec *gpu)
{
    memset(c, 0, sizeof *c);
    snprintf(c->node_id, sizeof c->node_id, "%s", node_id);
    snprintf(c->host_ip, sizeof c->host_ip, "%s", host_ip);
    snprintf(c->name, sizeof c->name, "%s", gpu->name);
    c->compute_capability = gpu->compute_capability;
    c->index = gpu->index;
    c->sm_count = gpu->sm_count;
    c->granularity = gpu->sm_granularity > 0 ? gpu->sm_granularity : 1;
    c->ngroups = c->sm_count / c->granularity;
    if (c->ngroups > MAX_SM_GROUPS)
        c->ngroups = MAX_SM_GROUPS;
    c->memory_total = gpu->memory_total;
}

void gpu_cap_add(struct gpu_cap *c, const int *groups, int ngroups, long long memory)
{
    for (int i = 0; i < ngroups; i++)
        if (groups[i] >= 0 && groups[i] < c->ngroups)
            c->group_users[groups[i]]++;
    c->memory_allocated += memory;
}

int gpu_cap_free_groups(const struct gpu_cap *c)
{
    int n = 0;
    for (int i = 0; i < c->ngroups; i++)
        n += c->group_users[i] == 0;
    return n;
}

int gpu_cap_allocated_groups(const struct gpu_cap *c, int *groups)
{
    int n = 0;
    for (int i = 0; i < c->ngroups; i++)
        if (c->group_users[i])
            groups[n++] = i;
    return n;
}

int placement_policy_parse(const char *s, enum placement_policy *out)
{
    if (strcmp(s, "spread") == 0)
        *out = PLACE_SPREAD;
    else if (strcmp(s, "pack") == 0)
        *out = PLACE_PACK;
    else
        return -1;
    return 0;
}

void format_bytes(long long b, char *out, size_t outlen)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (b < 1024) {
        snprintf(out, outlen, "%lld bytes", b);
        return;
    }
    double v = (double)b;
    int u = -1;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    if (v == (double)(long long)v)
        snprintf(out, outlen, "%lld %s", (long long)v, units[u]);
    else
        snprintf(out, outlen, "%.1f %s", v, units[u]);
}

static long long needed_groups(const struct gpu_cap *c, long long compute_units)
{
    return (compute_units + c->granularity - 1) / c->granularity;
}

static int fits(const struct gpu_cap *c, const struct placement_request *r)
{
    long long g = needed_groups(c, r->compute_units);
    if (g > c->ngroups)
        return 0;
    if (!r->overcommit && g > gpu_cap_free_groups(c))
        return 0;
    return c->memory_total - c->memory_allocated >= r->memory;
}

static long long free_sms(const struct gpu_cap *c)
{
    return (long long)gpu_cap_free_groups(c) * c->granularity;
}

/* < 0 when a is the better choice. */
static int compare(const struct gpu_cap *a, const struct gpu_cap *b,
                   const struct placement_request *r)
{
    int la = r->host_ip && strcmp(a->host_ip, r->host_ip) == 0;
    int lb = r->host_ip && strcmp(b->host_ip, r->host_ip) == 0;
    if (la != lb)
        return la ? -1 : 1;
    long long fa = free_sms(a), fb = free_sms(b);
    long long ma = a->memory_total - a->memory_allocated, mb = b->memory_total - b->memory_allocated;
    int sign = r->policy == PLACE_SPREAD ? -1 : 1;   /* spread: more free is better */
    if (fa != fb)
        return fa < fb ? -sign : sign;
    if (ma != mb)
        return ma < mb ? -sign : sign;
    int c = strcmp(a->node_id, b->node_id);
    if (c)
        return c;
    return a->index - b->index;
}

static void pick_groups(const struct gpu_cap *c, int want, struct placement_result *out)
{
    out->ngroups = 0;
    /* free groups first, lowest index first; with overcommit then the least shared */
    for (int users = 0; out->ngroups < want; users++) {
        int any_left = 0;
        for (int i = 0; i < c->ngroups && out->ngroups < want; i++) {
            if (c->group_users[i] == users)
                out->groups[out->ngroups++] = i;
            else if (c->group_users[i] > users)
                any_left = 1;
        }
        if (!any_left)
            break;
    }
    /* groups were appended by sharing level; keep them sorted */
    for (int i = 1; i < out->ngroups; i++)
        for (int j = i; j > 0 && out->groups[j - 1] > out->groups[j]; j--) {
            int t = out->groups[j];
            out->groups[j] = out->groups[j - 1];
            out->groups[j - 1] = t;
        }
}

int placement_choose(const struct gpu_cap *caps, int n, const struct placement_request *r,
                     struct placement_result *out)
{
    memset(out, 0, sizeof *out);
    out->gpu = -1;
    char mem[64];
    format_bytes(r->memory, mem, sizeof mem);
    if (r->compute_units <= 0 || r->memory < 0) {
        snprintf(out->reason, sizeof out->reason, "invalid request: %lld SMs, %s",
                 r->compute_units, mem);
        return -1;
    }
    int best = -1;
    for (int i = 0; i < n; i++)
        if (fits(&caps[i], r) && (best < 0 || compare(&caps[i], &caps[best], r) < 0))
            best = i;
    if (best >= 0) {
        const struct gpu_cap *c = &caps[best];
        out->gpu = best;
        pick_groups(c, (int)needed_groups(c, r->compute_units), out);
        out->sm_count = out->ngroups * c->granularity;
        /* whole groups, disjoint from every other VM's unless overcommit */
        FLYT_ASSERT(out->ngroups == needed_groups(c, r->compute_units));
        for (int g = 0; g < out->ngroups; g++)
            FLYT_ASSERT(r->overcommit || c->group_users[out->groups[g]] == 0);
        return 0;
    }
    if (n == 0) {
        snprintf(out->reason, sizeof out->reason,
                 "needs %lld SMs and %s; no ready GPU node in the cluster", r->compute_units, mem);
        return -1;
    }
    /* the closest GPU, for the message: most free SMs, then most free memory */
    int near = 0;
    for (int i = 1; i < n; i++) {
        long long fi = free_sms(&caps[i]), fn = free_sms(&caps[near]);
        long long mi = caps[i].memory_total - caps[i].memory_allocated;
        long long mn = caps[near].memory_total - caps[near].memory_allocated;
        if (fi > fn || (fi == fn && mi > mn))
            near = i;
    }
    const struct gpu_cap *c = &caps[near];
    char freemem[64];
    format_bytes(c->memory_total - c->memory_allocated, freemem, sizeof freemem);
    long long g = needed_groups(c, r->compute_units);
    snprintf(out->reason, sizeof out->reason,
             "needs %lld SMs (%lld groups of %d) and %s; best GPU %s/%d has %lld of %d SMs and "
             "%s free%s",
             r->compute_units, g, c->granularity, mem, c->node_id, c->index, free_sms(c),
             c->sm_count, freemem, g > c->ngroups ? " (the request is larger than the GPU)" : "");
    return -1;
}
