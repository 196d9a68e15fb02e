/* Placement (src/control/cluster-manager/placement.c): a pure function, tested on its own. */
#include "check.h"
#include "placement.h"

#include <string.h>

#define GiB (1024LL * 1024 * 1024)

static struct gpu_cap gpu(const char *node, const char *host, int index, int sms, int gran,
                          long long mem)
{
    struct gpu_rec g = {0};
    g.index = index;
    g.sm_count = sms;
    g.sm_granularity = gran;
    g.memory_total = mem;
    struct gpu_cap c;
    gpu_cap_init(&c, node, host, &g);
    return c;
}

static struct placement_request req(long long sms, long long mem, const char *host,
                                    enum placement_policy p)
{
    struct placement_request r = {sms, mem, host, p, 0};
    return r;
}

int main(void)
{
    struct placement_result out;

    /* rounding up to whole groups, lowest groups first, disjoint */
    struct gpu_cap h100 = gpu("node-a", "10.0.0.1", 0, 132, 8, 80 * GiB);
    CHECK_EQ(h100.ngroups, 16, "132 SMs in groups of 8: 16 groups");
    struct placement_request r = req(20, 10 * GiB, "10.0.0.1", PLACE_SPREAD);
    CHECK_EQ(placement_choose(&h100, 1, &r, &out), 0, "20 SMs fit");
    CHECK_EQ(out.gpu, 0, "rounded up to 3 groups = 24 SMs");
    CHECK_EQ(out.ngroups, 3, "rounded up to 3 groups = 24 SMs");
    CHECK_EQ(out.sm_count, 24, "rounded up to 3 groups = 24 SMs");
    CHECK_EQ(out.groups[0], 0, "groups 0,1,2");
    CHECK_EQ(out.groups[1], 1, "groups 0,1,2");
    CHECK_EQ(out.groups[2], 2, "groups 0,1,2");
    gpu_cap_add(&h100, out.groups, out.ngroups, 10 * GiB);
    CHECK_EQ(placement_choose(&h100, 1, &r, &out), 0,
          "the next session gets groups 3,4,5 (disjoint)");
    CHECK_EQ(out.groups[0], 3,
          "the next session gets groups 3,4,5 (disjoint)");
    CHECK_EQ(out.groups[2], 5,
          "the next session gets groups 3,4,5 (disjoint)");

    /* holes are reused */
    struct gpu_cap holes = gpu("n", "h", 0, 64, 8, 80 * GiB);
    int used[] = {0, 2};
    gpu_cap_add(&holes, used, 2, GiB);
    r = req(16, GiB, "h", PLACE_SPREAD);
    CHECK_EQ(placement_choose(&holes, 1, &r, &out), 0, "free groups 1 and 3 taken around the used ones");
    CHECK_EQ(out.ngroups, 2, "free groups 1 and 3 taken around the used ones");
    CHECK_EQ(out.groups[0], 1, "free groups 1 and 3 taken around the used ones");
    CHECK_EQ(out.groups[1], 3, "free groups 1 and 3 taken around the used ones");

    /* fragmentation cannot refuse a fit (docs/design.md, "SM groups need not be
     * contiguous"): for every pattern of used groups on an 8-group GPU, a request fits
     * exactly when enough groups are free, however scattered, and gets free ones only */
    for (int used_mask = 0; used_mask < 256; used_mask++) {
        struct gpu_cap frag = gpu("n", "h", 0, 64, 8, 80 * GiB);
        int ug[8], nu = 0;
        for (int g = 0; g < 8; g++)
            if (used_mask & (1 << g))
                ug[nu++] = g;
        gpu_cap_add(&frag, ug, nu, 0);
        for (int want = 1; want <= 8; want++) {
            r = req(want * 8, GiB, "h", PLACE_SPREAD);
            int fit = placement_choose(&frag, 1, &r, &out) == 0;
            CHECK_EQ(fit, want <= 8 - nu, "used groups %#x: %d group(s) fit iff %d are free",
                     used_mask, want, 8 - nu);
            for (int i = 0; fit && i < out.ngroups; i++)
                CHECK(!(used_mask & (1 << out.groups[i])), "used groups %#x: group %d is free",
                      used_mask, out.groups[i]);
        }
    }
    int alloc[MAX_SM_GROUPS];
    CHECK_EQ(gpu_cap_allocated_groups(&holes, alloc), 2, "allocated groups listed");
    CHECK_EQ(alloc[1], 2, "allocated groups listed");

    /* host preference beats the policy */
    struct gpu_cap two[2] = {gpu("node-a", "10.0.0.1", 0, 128, 8, 80 * GiB),
                             gpu("node-b", "10.0.0.2", 0, 128, 8, 80 * GiB)};
    int big[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    gpu_cap_add(&two[1], big, 12, 40 * GiB);   /* node-b: 4 groups free */
    r = req(16, GiB, "10.0.0.2", PLACE_SPREAD);
    CHECK_EQ(placement_choose(two, 2, &r, &out), 0,
          "VM on host 10.0.0.2 goes to node-b although node-a is emptier");
    CHECK_EQ(out.gpu, 1,
          "VM on host 10.0.0.2 goes to node-b although node-a is emptier");
    r = req(64, GiB, "10.0.0.2", PLACE_SPREAD);
    CHECK_EQ(placement_choose(two, 2, &r, &out), 0,
          "when the own host cannot fit it, another host is used");
    CHECK_EQ(out.gpu, 0,
          "when the own host cannot fit it, another host is used");

    /* spread and pack */
    struct gpu_cap three[3] = {gpu("n1", "h1", 0, 128, 8, 80 * GiB), gpu("n2", "h2", 0, 128, 8, 80 * GiB),
                               gpu("n3", "h3", 0, 128, 8, 80 * GiB)};
    int g4[4] = {0, 1, 2, 3}, g8[8] = {0, 1, 2, 3, 4, 5, 6, 7}, g14[14] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    gpu_cap_add(&three[0], g8, 8, GiB);    /* 8 groups free */
    gpu_cap_add(&three[1], g4, 4, GiB);    /* 12 free */
    gpu_cap_add(&three[2], g14, 14, GiB);  /* 2 free */
    r = req(24, GiB, "elsewhere", PLACE_SPREAD);
    CHECK_EQ(placement_choose(three, 3, &r, &out), 0, "spread: the most free GPU");
    CHECK_EQ(out.gpu, 1, "spread: the most free GPU");
    r.policy = PLACE_PACK;
    CHECK_EQ(placement_choose(three, 3, &r, &out), 0,
          "pack: the least free GPU that fits (n3 has too few groups)");
    CHECK_EQ(out.gpu, 0,
          "pack: the least free GPU that fits (n3 has too few groups)");
    r = req(16, GiB, "elsewhere", PLACE_PACK);
    CHECK_EQ(placement_choose(three, 3, &r, &out), 0, "pack: n3 when it fits");
    CHECK_EQ(out.gpu, 2, "pack: n3 when it fits");

    /* ties: node id, then index */
    struct gpu_cap tie[2] = {gpu("zeta", "h", 0, 64, 8, 10 * GiB), gpu("alpha", "h", 1, 64, 8, 10 * GiB)};
    r = req(8, GiB, "h", PLACE_SPREAD);
    CHECK_EQ(placement_choose(tie, 2, &r, &out), 0, "tie broken by node id");
    CHECK_EQ(out.gpu, 1, "tie broken by node id");

    /* memory */
    struct gpu_cap m = gpu("n", "h", 0, 128, 8, 40 * GiB);
    int g1[1] = {0};
    gpu_cap_add(&m, g1, 1, 30 * GiB);
    r = req(8, 20 * GiB, "h", PLACE_SPREAD);
    CHECK_EQ(placement_choose(&m, 1, &r, &out), -1, "memory does not fit");
    CHECK_NE(strstr(out.reason, "needs 8 SMs (1 groups of 8) and 20 GiB; best GPU n/0 has 120 of 128 SMs and 10 GiB free"), NULL,
          "reason: %s", out.reason);

    /* no fit: the message names the closest GPU */
    r = req(104, 20 * GiB, "h1", PLACE_SPREAD);
    CHECK_EQ(placement_choose(three, 3, &r, &out), -1, "104 SMs fit nowhere");
    CHECK_NE(strstr(out.reason, "needs 104 SMs (13 groups of 8) and 20 GiB; best GPU n2/0 has 96 of 128 SMs"), NULL,
          "reason: %s", out.reason);
    r = req(200, GiB, "h1", PLACE_SPREAD);
    CHECK_EQ(placement_choose(three, 3, &r, &out), -1,
          "larger than any GPU: %s", out.reason);
    CHECK(strstr(out.reason, "larger than the GPU"),
          "larger than any GPU: %s", out.reason);
    CHECK_EQ(placement_choose(NULL, 0, &r, &out), -1,
          "no GPU at all: %s", out.reason);
    CHECK(strstr(out.reason, "no ready GPU node"),
          "no GPU at all: %s", out.reason);

    /* overcommit shares SM groups (the least shared), never memory */
    struct gpu_cap oc = gpu("n", "h", 0, 32, 8, 40 * GiB);
    int all[4] = {0, 1, 2, 3}, two_g[2] = {0, 1};
    gpu_cap_add(&oc, all, 4, 10 * GiB);
    gpu_cap_add(&oc, two_g, 2, 10 * GiB);   /* groups 0,1 shared by two, 2,3 by one */
    r = req(16, 10 * GiB, "h", PLACE_SPREAD);
    CHECK_EQ(placement_choose(&oc, 1, &r, &out), -1, "without overcommit: refused");
    r.overcommit = 1;
    CHECK_EQ(placement_choose(&oc, 1, &r, &out), 0, "with overcommit: the least shared groups 2,3");
    CHECK_EQ(out.ngroups, 2, "with overcommit: the least shared groups 2,3");
    CHECK_EQ(out.groups[0], 2, "with overcommit: the least shared groups 2,3");
    CHECK_EQ(out.groups[1], 3, "with overcommit: the least shared groups 2,3");
    r.memory = 30 * GiB;
    CHECK_EQ(placement_choose(&oc, 1, &r, &out), -1, "overcommit never over-commits memory");

    /* helpers */
    char b[64];
    format_bytes(20 * GiB, b, sizeof b);
    CHECK_STR_EQ(b, "20 GiB", "format 20 GiB");
    format_bytes(1536LL * 1024 * 1024, b, sizeof b);
    CHECK_STR_EQ(b, "1.5 GiB", "format 1.5 GiB");
    format_bytes(100, b, sizeof b);
    CHECK_STR_EQ(b, "100 bytes", "format bytes");
    enum placement_policy p;
    CHECK_EQ(placement_policy_parse("pack", &p), 0, "policy names");
    CHECK_EQ(p, PLACE_PACK, "policy names");
    CHECK_EQ(placement_policy_parse("fast", &p), -1, "policy names");
    printf("test_placement: all passed\n");
    return 0;
}
