/* The store against a real database: usage test_store URL (sqlite:/path or postgresql://).
 * Migrations, records, constraints, transactions, the derived-capacity invariant across a
 * reopen (restart), events. Starts from empty tables. */
#include "check.h"
#include "clm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GiB (1024LL * 1024 * 1024)

static char err[1024];

static void reset(const char *url)
{
    struct db *db = strncmp(url, "postgres", 8) == 0 ? db_open_pg(url, err, sizeof err)
                                                     : db_open_sqlite(url + 7, err, sizeof err);
    CHECK_NE(db, NULL, "open the raw database to reset it (%s)", err);
    static const char *const tables[] = {"reservations", "events", "share_requests", "sessions", "gpus", "nodes", "vms",
                                         "schema_version"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s", tables[i]);
        CHECK_GE(db_exec(db, sql, NULL, 0, NULL, err, sizeof err), 0, "%s (%s)", sql, err);
    }
    db->ops->close(db);
}

static struct session_rec session(const char *id, const char *vm, const char *node, int gpu,
                                  int g0, int ng, long long mem, enum session_state state)
{
    struct session_rec s;
    memset(&s, 0, sizeof s);
    snprintf(s.id, sizeof s.id, "%s", id);
    snprintf(s.vm_id, sizeof s.vm_id, "%s", vm);
    snprintf(s.node_id, sizeof s.node_id, "%s", node);
    s.state = state;
    s.pid = 100;
    s.gpu_index = gpu;
    s.ngroups = ng;
    for (int i = 0; i < ng; i++)
        s.groups[i] = g0 + i;
    s.sm_count = ng * 8;
    s.memory_quota = mem;
    s.created_at = s.last_activity = now_ms();
    return s;
}

/* Allocated SMs and memory of node-a's GPUs, derived from live sessions. */
static void capacity(struct store *st, long long *sm0, long long *mem0, long long *sm1)
{
    struct clm clm;
    memset(&clm, 0, sizeof clm);
    clm.store = st;
    flyt_mutex_init(&clm.lock);
    pthread_mutex_lock(&clm.lock);   /* capacity_build reads the store under the lock */
    struct node_rec n;
    CHECK_EQ(store_node_get(st, "node-a", &n, err, sizeof err), 1, "node-a exists");
    struct gpu_cap *caps;
    int nc;
    CHECK_EQ(capacity_build(&clm, &n, 1, &caps, &nc, err, sizeof err), 0,
          "capacity of node-a's 2 GPUs (%s)", err);
    CHECK_EQ(nc, 2,
          "capacity of node-a's 2 GPUs (%s)", err);
    int g[MAX_SM_GROUPS];
    *sm0 = (long long)gpu_cap_allocated_groups(&caps[0], g) * caps[0].granularity;
    *mem0 = caps[0].memory_allocated;
    *sm1 = (long long)gpu_cap_allocated_groups(&caps[1], g) * caps[1].granularity;
    free(caps);
    pthread_mutex_unlock(&clm.lock);
    pthread_mutex_destroy(&clm.lock);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_store sqlite:/path | postgresql://...\n");
        return 2;
    }
    const char *url = argv[1];
    printf("store %s\n", url);
    reset(url);

    /* migrations */
    struct store *st = store_open(url, err, sizeof err);
    CHECK_NE(st, NULL, "open and migrate (%s)", err);
    CHECK_EQ(store_schema_version(st, err, sizeof err), store_latest_schema_version(),
          "schema at the latest version %d", store_latest_schema_version());
    store_close(st);
    st = store_open(url, err, sizeof err);
    CHECK_NE(st, NULL, "reopen: migrations are not applied twice (%s)", err);
    struct db_rows rows;
    CHECK_GE(db_exec(store_db_(st), "SELECT COUNT(*) FROM schema_version", NULL, 0, &rows, err, sizeof err), 0,
          "one schema_version row per migration");
    CHECK_EQ(db_cell_int(&rows, 0, 0), store_latest_schema_version(),
          "one schema_version row per migration");
    db_rows_free(&rows);

    /* VMs */
    struct vm_rec vm = {0}, got;
    snprintf(vm.id, sizeof vm.id, "vm-1");
    snprintf(vm.vm_ip, sizeof vm.vm_ip, "10.0.0.5");
    snprintf(vm.host_ip, sizeof vm.host_ip, "10.0.1.1");
    vm.compute_units = 16;
    vm.memory = 20 * GiB;
    vm.created_at = vm.updated_at = 1700000000000LL;
    CHECK_EQ(store_vm_insert(st, &vm, "hash-vm-1", err, sizeof err), 1, "insert VM (%s)", err);
    CHECK_EQ(store_vm_get(st, "vm-1", &got, err, sizeof err), 1, "get VM: 64-bit memory and times intact");
    CHECK_EQ(got.memory, 20 * GiB, "get VM: 64-bit memory and times intact");
    CHECK_EQ(got.compute_units, 16, "get VM: 64-bit memory and times intact");
    CHECK_EQ(got.created_at, 1700000000000LL, "get VM: 64-bit memory and times intact");
    CHECK_STR_EQ(got.host_ip, "10.0.1.1", "get VM: 64-bit memory and times intact");
    CHECK_EQ(store_vm_by_token(st, "hash-vm-1", &got, err, sizeof err), 1, "VM by token hash");
    CHECK_EQ(store_vm_by_token(st, "nope", &got, err, sizeof err), 0, "unknown token hash");
    CHECK(store_vm_by_ip(st, "10.0.0.5", &got, err, sizeof err) == 1, "VM by vm_ip");
    CHECK_EQ(store_vm_insert(st, &vm, "hash-2", err, sizeof err), DB_CONSTRAINT, "duplicate id refused");
    snprintf(vm.id, sizeof vm.id, "vm-2");
    CHECK_EQ(store_vm_insert(st, &vm, "hash-2", err, sizeof err), DB_CONSTRAINT,
          "duplicate vm_ip refused");
    snprintf(vm.vm_ip, sizeof vm.vm_ip, "10.0.0.6");
    CHECK_EQ(store_vm_insert(st, &vm, "hash-2", err, sizeof err), 1, "second VM");
    vm.compute_units = 32;
    CHECK_EQ(store_vm_update(st, &vm, err, sizeof err), 1, "update VM");
    struct vm_rec *vms;
    int n;
    CHECK_EQ(store_vm_list(st, &vms, &n, err, sizeof err), 0, "list VMs");
    CHECK_EQ(n, 2, "list VMs");
    CHECK_STR_EQ(vms[0].id, "vm-1", "list VMs");
    CHECK_EQ(vms[1].compute_units, 32, "list VMs");
    free(vms);

    /* a rolled-back transaction leaves nothing */
    CHECK_EQ(store_begin(st, err, sizeof err), 0, "begin");
    CHECK_EQ(store_vm_delete(st, "vm-2", err, sizeof err), 1, "delete inside");
    CHECK_EQ(store_event_add(st, "x", "y", "z", err, sizeof err), 1, "event inside");
    store_rollback(st);
    CHECK_EQ(store_vm_get(st, "vm-2", &got, err, sizeof err), 1, "rollback kept the VM");
    struct event_rec *ev;
    CHECK_EQ(store_event_list(st, 0, 100, &ev, &n, err, sizeof err), 0,
          "rollback kept no event");
    CHECK_EQ(n, 0,
          "rollback kept no event");
    free(ev);

    /* nodes and GPUs */
    struct node_rec node = {0}, ng;
    snprintf(node.id, sizeof node.id, "node-a");
    snprintf(node.host_ip, sizeof node.host_ip, "10.0.1.1");
    node.state = NODE_REGISTERED;
    node.created_at = now_ms();
    CHECK_EQ(store_node_insert(st, &node, "hash-node-a", err, sizeof err), 1, "insert node (%s)", err);
    CHECK_EQ(store_node_insert(st, &node, "hash-x", err, sizeof err), DB_CONSTRAINT, "duplicate node");
    node.state = NODE_READY;
    snprintf(node.address, sizeof node.address, "http://10.0.1.1:8601");
    snprintf(node.session_key, sizeof node.session_key, "%064d", 7);
    snprintf(node.manager_token, sizeof node.manager_token, "%064d", 9);
    node.last_heartbeat = now_ms();
    CHECK_EQ(store_node_update(st, &node, err, sizeof err), 1, "update node");
    CHECK_EQ(store_node_by_token(st, "hash-node-a", &ng, err, sizeof err), 1, "node by token, updated");
    CHECK_EQ(ng.state, NODE_READY, "node by token, updated");
    CHECK_STR_EQ(ng.address, "http://10.0.1.1:8601", "node by token, updated");
    CHECK_EQ(strlen(ng.session_key), 64, "node by token, updated");
    struct gpu_rec gpus[2] = {{0, "GPU-aaa", "NVIDIA H100", 132, 8, 80 * GiB, 90},
                              {1, "GPU-bbb", "NVIDIA H100", 132, 8, 80 * GiB, 0}};
    CHECK_EQ(store_gpus_set(st, "node-a", gpus, 2, err, sizeof err), 0, "set GPUs (%s)", err);
    CHECK_EQ(store_gpus_set(st, "node-a", gpus, 2, err, sizeof err), 0, "set GPUs again replaces");
    struct gpu_rec *gg;
    CHECK_EQ(store_gpus_get(st, "node-a", &gg, &n, err, sizeof err), 0, "get GPUs");
    CHECK_EQ(n, 2, "get GPUs");
    CHECK_EQ(gg[1].memory_total, 80 * GiB, "get GPUs");
    CHECK_STR_EQ(gg[1].uuid, "GPU-bbb", "get GPUs");
    CHECK(gg[0].compute_capability == 90 && gg[1].compute_capability == 0,
          "get GPUs: their compute capability, 0 where not reported");
    free(gg);

    /* sessions and the derived capacity */
    struct session_rec s1 = session("s-1", "vm-1", "node-a", 0, 0, 2, 10 * GiB, SESSION_ACTIVE);
    struct session_rec s2 = session("s-2", "vm-2", "node-a", 0, 2, 3, 5 * GiB, SESSION_STARTING);
    struct session_rec s3 = session("s-3", "vm-1", "node-a", 1, 0, 1, GiB, SESSION_ACTIVE);
    struct session_rec s4 = session("s-4", "vm-1", "node-a", 0, 5, 4, 30 * GiB, SESSION_RELEASED);
    CHECK_EQ(store_session_insert(st, &s1, err, sizeof err), 1, "insert sessions (%s)", err);
    CHECK_EQ(store_session_insert(st, &s2, err, sizeof err), 1, "insert sessions (%s)", err);
    CHECK_EQ(store_session_insert(st, &s3, err, sizeof err), 1, "insert sessions (%s)", err);
    CHECK_EQ(store_session_insert(st, &s4, err, sizeof err), 1, "insert sessions (%s)", err);
    long long sm0, mem0, sm1;
    capacity(st, &sm0, &mem0, &sm1);
    CHECK_EQ(sm0, 40,
          "GPU 0: 5 groups (40 SMs) and 15 GiB from its 2 live sessions; the released one holds "
          "nothing (got %lld SMs, %lld bytes)", sm0, mem0);
    CHECK_EQ(mem0, 15 * GiB,
          "GPU 0: 5 groups (40 SMs) and 15 GiB from its 2 live sessions; the released one holds "
          "nothing (got %lld SMs, %lld bytes)", sm0, mem0);
    CHECK_EQ(sm1, 8,
          "GPU 0: 5 groups (40 SMs) and 15 GiB from its 2 live sessions; the released one holds "
          "nothing (got %lld SMs, %lld bytes)", sm0, mem0);
    struct session_rec sg;
    CHECK_EQ(store_session_get(st, "s-2", &sg, err, sizeof err), 1,
          "session groups round-trip");
    CHECK_EQ(sg.ngroups, 3,
          "session groups round-trip");
    CHECK_EQ(sg.groups[0], 2,
          "session groups round-trip");
    CHECK_EQ(sg.groups[2], 4,
          "session groups round-trip");
    CHECK_EQ(sg.memory_quota, 5 * GiB,
          "session groups round-trip");
    struct session_filter live = {.node_id = "node-a", .live_only = 1};
    struct session_rec *ss;
    CHECK_EQ(store_session_list(st, &live, &ss, &n, err, sizeof err), 0, "3 live sessions");
    CHECK_EQ(n, 3, "3 live sessions");
    free(ss);
    struct session_filter byvm = {.vm_id = "vm-1"};
    CHECK_EQ(store_session_list(st, &byvm, &ss, &n, err, sizeof err), 0, "vm-1: 3 sessions");
    CHECK_EQ(n, 3, "vm-1: 3 sessions");
    free(ss);
    struct session_filter bystate = {.by_state = 1, .state = SESSION_RELEASED};
    CHECK_EQ(store_session_list(st, &bystate, &ss, &n, err, sizeof err), 0, "filter by state");
    CHECK_EQ(n, 1, "filter by state");
    CHECK_STR_EQ(ss[0].id, "s-4", "filter by state");
    free(ss);

    /* restart: the same capacity, nothing counted twice */
    store_close(st);
    st = store_open(url, err, sizeof err);
    CHECK_NE(st, NULL, "reopen after 'restart'");
    long long a, b, c;
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0, "after reopening: the same allocation (%lld SMs)", a);
    CHECK_EQ(b, mem0, "after reopening: the same allocation (%lld SMs)", a);
    CHECK_EQ(c, sm1, "after reopening: the same allocation (%lld SMs)", a);
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0, "derived again: still the same (no counter to drift)");

    /* reservations: a migration's target share counts as allocated, survives a restart,
     * and one that joins a share already counted (same VM, GPU, groups) adds nothing */
    struct reservation_rec rv = {.kind = RES_MIGRATE, .gpu_index = 0, .sm_count = 16,
                                 .ngroups = 2, .groups = {5, 6}, .memory_quota = 4 * GiB,
                                 .stream = 1};
    snprintf(rv.session_id, sizeof rv.session_id, "s-9");
    snprintf(rv.vm_id, sizeof rv.vm_id, "vm-3");
    snprintf(rv.node_id, sizeof rv.node_id, "node-a");
    snprintf(rv.from_node, sizeof rv.from_node, "node-b");
    CHECK_EQ(store_reservation_put(st, &rv, err, sizeof err), 1, "reserve (%s)", err);
    store_close(st);
    st = store_open(url, err, sizeof err);
    CHECK_NE(st, NULL, "reopen with a reservation");
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0 + 16, "the reservation's 2 groups are allocated after a restart (%lld)", a);
    CHECK_EQ(b, mem0 + 4 * GiB, "and its memory (%lld)", b);
    struct reservation_rec rg;
    CHECK_EQ(store_reservation_get(st, "s-9", &rg, err, sizeof err), 1, "get it (%s)", err);
    CHECK(rg.kind == RES_MIGRATE && rg.ngroups == 2 && rg.groups[1] == 6 && rg.stream == 1
          && strcmp(rg.from_node, "node-b") == 0 && rg.memory_quota == 4 * GiB,
          "a reservation round-trips");
    rv.ngroups = 1;
    CHECK_EQ(store_reservation_put(st, &rv, err, sizeof err), 1, "put replaces (%s)", err);
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0 + 8, "the replaced reservation holds 1 group (%lld)", a);
    struct reservation_rec join = rv;
    snprintf(join.session_id, sizeof join.session_id, "s-8");
    snprintf(join.vm_id, sizeof join.vm_id, "vm-1");
    join.kind = RES_RESTORE;
    join.ngroups = 2;
    join.groups[0] = 0;
    join.groups[1] = 1;
    CHECK_EQ(store_reservation_put(st, &join, err, sizeof err), 1, "reserve a joining share");
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0 + 8, "joining vm-1's counted share (groups 0,1) adds no SMs (%lld)", a);
    CHECK_EQ(b, mem0 + 4 * GiB, "nor memory (%lld)", b);
    struct reservation_rec *rl;
    CHECK_EQ(store_reservation_list(st, "node-a", &rl, &n, err, sizeof err), 0, "list");
    CHECK_EQ(n, 2, "2 reservations on node-a");
    free(rl);
    CHECK_EQ(store_reservation_list(st, "node-b", &rl, &n, err, sizeof err), 0, "list");
    CHECK_EQ(n, 0, "none on node-b");
    free(rl);
    CHECK_EQ(store_reservation_delete(st, "s-9", err, sizeof err), 1, "release");
    CHECK_EQ(store_reservation_delete(st, "s-8", err, sizeof err), 1, "release");
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, sm0, "released: back to the live sessions' share (%lld)", a);

    /* ending a session frees its share by that fact alone */
    struct clm clm;
    memset(&clm, 0, sizeof clm);
    clm.store = st;
    flyt_mutex_init(&clm.lock);
    pthread_mutex_lock(&clm.lock);   /* session_end runs in a transaction, under the lock */
    CHECK_EQ(store_session_get(st, "s-1", &sg, err, sizeof err), 1, "get s-1");
    CHECK_EQ(store_begin(st, err, sizeof err), 0, "end s-1 (%s)", err);
    CHECK_EQ(session_end(&clm, &sg, SESSION_RELEASED, "test", err, sizeof err), 0, "end s-1 (%s)", err);
    CHECK_EQ(store_commit(st, err, sizeof err), 0, "end s-1 (%s)", err);
    CHECK_EQ(session_end(&clm, &sg, SESSION_LOST, "again", err, sizeof err), 0, "ending it again is a no-op");
    pthread_mutex_unlock(&clm.lock);
    capacity(st, &a, &b, &c);
    CHECK_EQ(a, 24, "s-1's 2 groups and 10 GiB are free (%lld SMs)", a);
    CHECK_EQ(b, 5 * GiB, "s-1's 2 groups and 10 GiB are free (%lld SMs)", a);
    long long counts[SESSION_STATES];
    CHECK_EQ(store_session_count_by_state(st, counts, err, sizeof err), 0, "sessions by state");
    CHECK_EQ(counts[SESSION_ACTIVE], 1, "sessions by state");
    CHECK_EQ(counts[SESSION_RELEASED], 2, "sessions by state");
    CHECK_EQ(counts[SESSION_STARTING], 1, "sessions by state");

    /* events */
    CHECK_EQ(store_event_add(st, "test.a", "x", "first", err, sizeof err), 1, "add events");
    CHECK_EQ(store_event_add(st, "test.b", "y", "second", err, sizeof err), 1, "add events");
    CHECK_EQ(store_event_list(st, 0, 100, &ev, &n, err, sizeof err), 0, "3 events");
    CHECK_EQ(n, 3, "3 events");
    CHECK_LT(ev[0].id, ev[1].id, "ids increase, in order");
    CHECK_LT(ev[1].id, ev[2].id, "ids increase, in order");
    CHECK_STR_EQ(ev[0].kind, "session.released", "ids increase, in order");
    CHECK_STR_EQ(ev[2].message, "second", "ids increase, in order");
    CHECK_GT(ev[0].time, 0, "ids increase, in order");
    long long mid = ev[1].id;
    free(ev);
    CHECK_EQ(store_event_list(st, mid, 100, &ev, &n, err, sizeof err), 0, "since");
    CHECK_EQ(n, 1, "since");
    CHECK_STR_EQ(ev[0].kind, "test.b", "since");
    free(ev);
    CHECK_EQ(store_event_list(st, 0, 1, &ev, &n, err, sizeof err), 0, "limit");
    CHECK_EQ(n, 1, "limit");
    free(ev);

    /* nodes go with their GPUs */
    CHECK_EQ(store_node_delete(st, "node-a", err, sizeof err), 1, "delete node");
    CHECK_EQ(store_gpus_get(st, "node-a", &gg, &n, err, sizeof err), 0, "its GPUs are gone");
    CHECK_EQ(n, 0, "its GPUs are gone");
    free(gg);
    CHECK_EQ(store_vm_delete(st, "vm-1", err, sizeof err), 1,
          "delete VM");
    CHECK_EQ(store_vm_get(st, "vm-1", &got, err, sizeof err), 0,
          "delete VM");

    /* a store from a newer version is refused */
    struct db_arg v[] = {DB_I(999)};
    CHECK_EQ(db_exec(store_db_(st), "INSERT INTO schema_version (version, applied_at, description)"
                  " VALUES (?, 0, 'future')", v, 1, NULL, err, sizeof err), 1, "fake a newer schema");
    store_close(st);
    st = store_open(url, err, sizeof err);
    CHECK_EQ(st, NULL, "refused: %s", err);
    CHECK(strstr(err, "schema version 999 is newer"), "refused: %s", err);

    /* bad URLs */
    CHECK_EQ(store_open("mysql://x", err, sizeof err), NULL, "%s", err);
    CHECK(strstr(err, "unknown kind"), "%s", err);
    CHECK_EQ(store_open("sqlite:/nonexistent-dir/x.db", err, sizeof err), NULL, "%s", err);
    CHECK(strstr(err, "cannot open"), "%s", err);
    reset(url);
    printf("test_store (%s): all passed\n", strncmp(url, "sqlite", 6) == 0 ? "sqlite" : "postgresql");
    return 0;
}
