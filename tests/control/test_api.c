/* flyt-cluster-manager as a real process on loopback, against fake node managers:
 * usage test_api PATH/flyt-cluster-manager STORE_URL. VMs (CRUD, import with units),
 * nodes (register, heartbeat, reconcile), sessions (placement with host preference,
 * no-fit refusal, release, ended reports, idle release), bad input answered with clear
 * errors and nothing changed, node loss and return, metrics, events, restart. */
#include "check.h"
#include "clm_harness.h"
#include "flyt_log.h"
#include "flyt_token.h"
#include "rawhttp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GiB (1024LL * 1024 * 1024)
#define MAX_GROUPS_SEEN 64

static struct clm_proc clm;
static struct fake_nm nma, nmb, nmr;
static char vma_token[65], vmb_token[65], vmc_token[65];

static const char *T(void) { return clm.op_token; }

static void expect_error(long status, json_t *ans, long want, const char *code, const char *text)
{
    const char *c = jstr(ans, "error.code"), *m = jstr(ans, "error.message");
    CHECK_EQ(status, want,
          "%ld %s: %s", status, c ? c : "?", m ? m : call_err);
    CHECK(c,
          "%ld %s: %s", status, c ? c : "?", m ? m : call_err);
    CHECK_STR_EQ(c, code,
          "%ld %s: %s", status, c ? c : "?", m ? m : call_err);
    CHECK(m && (!text || strstr(m, text)),
          "%ld %s: %s", status, c ? c : "?", m ? m : call_err);
    json_decref(ans);
}

/* The JSON text of a GET, for "nothing changed" comparisons. */
static char *snapshot(const char *path)
{
    json_t *a;
    long st = call(&clm, "GET", path, T(), NULL, &a);
    CHECK_EQ(st, 200, "GET %s", path);
    /* drop what legitimately changes between two reads */
    json_t *nodes = json_object_get(a, "nodes");
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
        json_object_del(n, "last_heartbeat");
    json_array_foreach(json_object_get(a, "sessions"), i, n)
        json_object_del(n, "last_activity");   /* heartbeats report clients connected */
    char *s = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(a);
    return s;
}

static char *state_snapshot(void)
{
    char *a = snapshot("/v1/vms"), *b = snapshot("/v1/nodes"), *c = snapshot("/v1/sessions");
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", a, b, c);
    free(a);
    free(b);
    free(c);
    return s;
}

static int last_event_id(void)
{
    json_t *a;
    CHECK_EQ(call(&clm, "GET", "/v1/events?limit=10000", T(), NULL, &a), 200, "events");
    json_t *ev = json_object_get(a, "events");
    int id = json_array_size(ev) ? (int)jint(json_array_get(ev, json_array_size(ev) - 1), "id") : 0;
    json_decref(a);
    return id;
}

static int has_event(const char *kind, const char *subject)
{
    json_t *a;
    CHECK_EQ(call(&clm, "GET", "/v1/events?limit=10000", T(), NULL, &a), 200, "events");
    size_t i;
    json_t *e;
    int found = 0;
    json_array_foreach(json_object_get(a, "events"), i, e)
        found |= strcmp(jstr(e, "kind"), kind) == 0 && (!subject || strcmp(jstr(e, "subject"), subject) == 0);
    json_decref(a);
    return found;
}

static void session_state(const char *sid, char *state, size_t len, char *reason, size_t rlen)
{
    json_t *a;
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "GET", path, T(), NULL, &a), 200, "GET %s", path);
    snprintf(state, len, "%s", jstr(a, "session.state"));
    if (reason)
        snprintf(reason, rlen, "%s", jstr(a, "session.end_reason") ? jstr(a, "session.end_reason") : "");
    json_decref(a);
}

static int is_state(const char *sid, const char *want)
{
    char st[32];
    session_state(sid, st, sizeof st, NULL, 0);
    return strcmp(st, want) == 0;
}

static long long gpu_field(const char *node, const char *field)
{
    json_t *a;
    char path[128];
    snprintf(path, sizeof path, "/v1/nodes/%s", node);
    CHECK_EQ(call(&clm, "GET", path, T(), NULL, &a), 200, "GET %s", path);
    char f[128];
    snprintf(f, sizeof f, "node.gpus.0.%s", field);
    long long v = jint(a, f);
    json_decref(a);
    return v;
}

static json_t *new_session(const char *token, int pid, long want)
{
    char body[64];
    snprintf(body, sizeof body, "{\"pid\": %d, \"process\": \"test\"}", pid);
    json_t *a;
    long st = call(&clm, "POST", "/v1/sessions", token, body, &a);
    CHECK_EQ(st, want, "POST /v1/sessions pid %d: %ld (want %ld) %s", pid, st, want, call_err);
    return a;
}

/* ------------------------------------------------------------------------------------- */

static void test_auth_and_health(void)
{
    printf("-- health and authentication\n");
    json_t *a;
    CHECK_EQ(call(&clm, "GET", "/v1/health", NULL, NULL, &a), 200, "health needs no token");
    CHECK_STR_EQ(jstr(a, "status"), "ok", "health needs no token");
    json_decref(a);
    long st = call(&clm, "GET", "/v1/vms", NULL, NULL, &a);
    expect_error(st, a, 401, "unauthorized", "missing token");
    st = call(&clm, "GET", "/v1/vms", "0000000000000000000000000000000000000000000000000000000000000000", NULL, &a);
    expect_error(st, a, 401, "unauthorized", "unknown token");
    st = call(&clm, "GET", "/metrics", NULL, NULL, &a);
    expect_error(st, a, 401, "unauthorized", NULL);
    st = call(&clm, "GET", "/v1/nothing", T(), NULL, &a);
    expect_error(st, a, 404, "not_found", "/v1/nothing");
}

static void test_vms(void)
{
    printf("-- VMs\n");
    clm_create_vm(&clm, "{\"id\": \"vm-a\", \"vm_ip\": \"10.0.0.1\", \"host_ip\": \"10.0.1.1\", "
              "\"compute_units\": 16, \"memory\": \"10GiB\"}", vma_token);
    clm_create_vm(&clm, "{\"vm_ip\": \"10.0.0.2\", \"host_ip\": \"10.0.1.2\", \"compute_units\": 32, "
              "\"memory\": 8589934592}", vmb_token);
    json_t *a;
    CHECK(call(&clm, "GET", "/v1/vms/vm-10.0.0.2", T(), NULL, &a) == 200,
          "id made from vm_ip; memory in bytes");
    CHECK_EQ(jint(a, "vm.memory"), 8 * GiB,
          "id made from vm_ip; memory in bytes");
    CHECK_EQ(jint(a, "vm.compute_units"), 32,
          "id made from vm_ip; memory in bytes");
    json_decref(a);
    CHECK(call(&clm, "PATCH", "/v1/vms/vm-10.0.0.2", T(), "{\"memory\": \"4GiB\"}", &a) == 200,
          "PATCH memory with a unit");
    CHECK_EQ(jint(a, "vm.memory"), 4 * GiB,
          "PATCH memory with a unit");
    CHECK_EQ(jint(a, "vm.compute_units"), 32,
          "PATCH memory with a unit");
    json_decref(a);

    /* import: numbers are MiB; strings take units; an existing vm_ip is updated */
    const char *docs = "{\"documents\": ["
                       "{\"vm_ip\": \"10.0.0.3\", \"host_ip\": \"10.0.1.9\", \"compute_units\": 8, \"memory\": 2048},"
                       "{\"vm_ip\": \"10.0.0.4\", \"host_ip\": \"10.0.1.9\", \"compute_units\": 8, \"memory\": \"512MiB\", \"_id\": \"x\"},"
                       "{\"vm_ip\": \"10.0.0.2\", \"host_ip\": \"10.0.1.2\", \"compute_units\": 32, \"memory\": \"3GB\"}]}";
    CHECK_EQ(call(&clm, "POST", "/v1/vms/import", T(), docs, &a), 200, "import: %s", call_err);
    json_t *created = json_object_get(a, "created"), *updated = json_object_get(a, "updated");
    CHECK_EQ(json_array_size(created), 2, "2 created, 1 updated");
    CHECK_EQ(json_array_size(updated), 1, "2 created, 1 updated");
    CHECK_EQ(jint(created, "0.memory"), 2 * GiB,
          "2048 (MiB) = 2 GiB; \"512MiB\"");
    CHECK_EQ(jint(created, "1.memory"), 512LL << 20,
          "2048 (MiB) = 2 GiB; \"512MiB\"");
    CHECK_EQ(strlen(jstr(created, "0.token")), 64, "created VMs come with their token");
    snprintf(vmc_token, sizeof vmc_token, "%s", jstr(created, "0.token"));
    CHECK_EQ(jint(updated, "0.memory"), 3000000000LL, "\"3GB\" = 3*10^9 bytes (updated)");
    json_decref(a);
    CHECK_EQ(call(&clm, "GET", "/v1/vms", T(), NULL, &a), 200, "4 VMs listed");
    CHECK_EQ(json_array_size(json_object_get(a, "vms")), 4, "4 VMs listed");
    json_decref(a);
    CHECK_EQ(call(&clm, "GET", "/v1/vms", vma_token, NULL, &a), 403, "a VM token may not list VMs");
    expect_error(403, a, 403, "forbidden", "VM token");

    /* bad input: clear errors, nothing changed */
    char *before = state_snapshot();
    int ev = last_event_id();
    char out[4096];
    char req[512];
    snprintf(req, sizeof req, "POST /v1/vms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Content-Length: 14\r\nConnection: close\r\n\r\n{\"vm_ip\": \"10.", T());
    CHECK_EQ(raw_http(clm.port, req, out, sizeof out), 0,
          "malformed JSON: 400 bad_request");
    CHECK(strstr(out, " 400 ") && strstr(out, "bad_request") && strstr(out, "malformed JSON"),
          "malformed JSON: 400 bad_request");
    struct {
        const char *body, *want;
    } bad[] = {
        {"{\"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8}", "memory: missing"},
        {"{\"vm_ip\": \"10.0.0.999\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": 1}", "vm_ip: expected an IPv4"},
        {"{\"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 0, \"memory\": 1}", "compute_units"},
        {"{\"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": \"20 parsecs\"}", "memory: unknown unit"},
        {"{\"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": \"20\"}", "needs a unit"},
        {"{\"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": 1, \"colour\": 1}", "unknown field \"colour\""},
        {"{\"id\": \"bad id!\", \"vm_ip\": \"10.0.0.9\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": 1}", "id: expected"},
        {"[1, 2]", "expected a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *e;
        long st = call(&clm, "POST", "/v1/vms", T(), bad[i].body, &e);
        expect_error(st, e, 400, "bad_request", bad[i].want);
    }
    long st = call(&clm, "POST", "/v1/vms", T(), "{\"vm_ip\": \"10.0.0.1\", \"host_ip\": \"10.0.1.1\", "
                   "\"compute_units\": 8, \"memory\": 1}", &a);
    expect_error(st, a, 409, "conflict", "vm_ip 10.0.0.1");
    st = call(&clm, "POST", "/v1/vms", T(), "{\"id\": \"vm-a\", \"vm_ip\": \"10.0.0.77\", "
              "\"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": 1}", &a);
    expect_error(st, a, 409, "conflict", "VM vm-a exists");
    st = call(&clm, "GET", "/v1/vms/vm-nope", T(), NULL, &a);
    expect_error(st, a, 404, "not_found", "no VM vm-nope");
    st = call(&clm, "PATCH", "/v1/vms/vm-nope", T(), "{\"memory\": 5}", &a);
    expect_error(st, a, 404, "not_found", "no VM vm-nope");
    st = call(&clm, "PATCH", "/v1/vms/vm-a", T(), "{\"vm_ip\": \"10.0.0.2\"}", &a);
    expect_error(st, a, 409, "conflict", "already has vm_ip");
    st = call(&clm, "PATCH", "/v1/vms/vm-a", T(), "{}", &a);
    expect_error(st, a, 400, "bad_request", "at least one");
    st = call(&clm, "DELETE", "/v1/vms/vm-nope", T(), NULL, &a);
    expect_error(st, a, 404, "not_found", NULL);
    /* an import with one bad document changes nothing, not even the good ones */
    st = call(&clm, "POST", "/v1/vms/import", T(),
              "{\"documents\": [{\"vm_ip\": \"10.0.0.50\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, \"memory\": 1},"
              "{\"vm_ip\": \"10.0.0.51\", \"host_ip\": \"10.0.1.1\", \"compute_units\": -1, \"memory\": 1}]}", &a);
    expect_error(st, a, 400, "bad_request", "documents[1].compute_units");
    st = call(&clm, "POST", "/v1/vms/import", T(), "{\"docs\": []}", &a);
    expect_error(st, a, 400, "bad_request", "documents: expected an array");
    char *after = state_snapshot();
    CHECK_STR_EQ(before, after, "after %zu refused requests nothing changed",
          sizeof bad / sizeof bad[0] + 10);
    CHECK_EQ(last_event_id(), ev, "and no event was logged");
    free(before);
    free(after);
}

static void test_nodes(void)
{
    printf("-- nodes\n");
    clm_create_node(&clm, &nma, "10.0.1.1");
    clm_create_node(&clm, &nmb, "10.0.1.2");
    json_t *a;
    long st = call(&clm, "POST", "/v1/nodes", T(), "{\"id\": \"node-a\", \"host_ip\": \"10.0.1.1\"}", &a);
    expect_error(st, a, 409, "conflict", "node node-a exists");
    st = call(&clm, "POST", "/v1/nodes", T(), "{\"id\": \"node-x\"}", &a);
    expect_error(st, a, 400, "bad_request", "host_ip: missing");

    /* node calls before registering, and with the wrong token */
    st = call(&clm, "POST", "/v1/nodes/node-a/heartbeat", nma.node_token, "{\"sessions\": []}", &a);
    expect_error(st, a, 409, "conflict", "not registered");
    st = call(&clm, "POST", "/v1/nodes/node-b/register", nma.node_token, "{}", &a);
    expect_error(st, a, 403, "forbidden", "may not act for node node-b");
    st = call(&clm, "POST", "/v1/nodes/node-a/register", vma_token, "{}", &a);
    expect_error(st, a, 403, "forbidden", "VM token");
    st = call(&clm, "POST", "/v1/nodes/node-a/register", nma.node_token,
              "{\"address\": \"http://127.0.0.1:1\", \"host_ip\": \"10.0.1.1\", \"gpus\": "
              "[{\"index\": 0, \"uuid\": \"u\", \"name\": \"n\", \"sm_count\": 64, "
              "\"sm_granularity\": 128, \"memory_total\": 1}]}", &a);
    expect_error(st, a, 400, "bad_request", "gpus[0].sm_granularity");
    st = call(&clm, "POST", "/v1/nodes/node-a/register", nma.node_token,
              "{\"address\": \"ftp://x\", \"host_ip\": \"10.0.1.1\", \"gpus\": []}", &a);
    expect_error(st, a, 400, "bad_request", "address");
    st = call(&clm, "GET", "/v1/nodes", nma.node_token, NULL, &a);
    expect_error(st, a, 403, "forbidden", "node token");

    /* node-a: 64 SMs, 40 GiB; node-b: 128 SMs, 80 GiB */
    a = clm_register_node(&clm, &nma, "10.0.1.1", 64, 40 * GiB, NULL);
    CHECK_EQ(jint(a, "heartbeat_interval_s"), 1, "heartbeat_interval_s from the config");
    CHECK_EQ(strlen(jstr(a, "session_key")), 64,
          "session_key and manager_token, 64 hex characters");
    CHECK_EQ(strlen(jstr(a, "manager_token")), 64,
          "session_key and manager_token, 64 hex characters");
    json_decref(a);
    json_decref(clm_register_node(&clm, &nmb, "10.0.1.2", 128, 80 * GiB, NULL));
    CHECK_EQ(call(&clm, "GET", "/v1/nodes/node-a", T(), NULL, &a), 200,
          "node-a ready, 8 SM groups free");
    CHECK_STR_EQ(jstr(a, "node.state"), "ready",
          "node-a ready, 8 SM groups free");
    CHECK_EQ(jint(a, "node.gpus.0.sm_groups"), 8,
          "node-a ready, 8 SM groups free");
    CHECK_EQ(jint(a, "node.gpus.0.sm_free"), 64,
          "node-a ready, 8 SM groups free");
    CHECK_EQ(jint(a, "node.gpus.0.memory_free"), 40 * GiB,
          "node-a ready, 8 SM groups free");
    json_decref(a);
    CHECK(has_event("node.registered", "node-a"), "event node.registered");
    st = heartbeat_once(&clm, &nma, &a);
    CHECK_EQ(st, 200, "heartbeat");
    CHECK_EQ(json_array_size(json_object_get(a, "stop")), 0, "heartbeat");
    json_decref(a);
}

static char sa1[64], sa2[64], sb1[64];

static void test_sessions(void)
{
    printf("-- sessions and placement\n");
    /* vm-a (host 10.0.1.1, 16 SMs, 10 GiB) goes to node-a although node-b is emptier */
    json_t *a = new_session(vma_token, 1001, 201);
    snprintf(sa1, sizeof sa1, "%s", jstr(a, "session.id"));
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-a", "host preference: node-a");
    CHECK_STR_EQ(jstr(a, "session.state"), "active",
          "active with the node's endpoint");
    CHECK_STR_EQ(jstr(a, "session.endpoint"), "tcp://127.0.0.1:7000",
          "active with the node's endpoint");
    CHECK_EQ(jint(a, "session.sm_count"), 16,
          "16 SMs = groups 0,1; 10 GiB");
    CHECK_EQ(jint(a, "session.sm_groups.0"), 0,
          "16 SMs = groups 0,1; 10 GiB");
    CHECK_EQ(jint(a, "session.sm_groups.1"), 1,
          "16 SMs = groups 0,1; 10 GiB");
    CHECK_EQ(jint(a, "session.memory_quota"), 10 * GiB,
          "16 SMs = groups 0,1; 10 GiB");
    unsigned char key[32];
    size_t kl;
    char err[128];
    CHECK_EQ(flyt_hex_decode(nma.session_key, key, sizeof key, &kl), 0,
          "the session token verifies with node-a's session_key");
    CHECK_EQ(flyt_session_token_verify(key, kl, jstr(a, "token"), sa1, (long long)time(NULL), err, sizeof err), 0,
          "the session token verifies with node-a's session_key");
    CHECK(fake_nm_has(&nma, sa1), "node-a's manager started it (manager token)");
    CHECK_EQ(nma.bad_auth, 0, "node-a's manager started it (manager token)");
    json_decref(a);

    a = new_session(vma_token, 1002, 201);
    snprintf(sa2, sizeof sa2, "%s", jstr(a, "session.id"));
    CHECK_EQ(jint(a, "session.sm_groups.0"), 0,
          "the VM's second process joins its share: groups 0,1");
    CHECK_EQ(jint(a, "session.sm_groups.1"), 1,
          "the VM's second process joins its share: groups 0,1");
    json_decref(a);
    a = new_session(vma_token, 1001, 200);
    CHECK_STR_EQ(jstr(a, "session.id"), sa1,
          "the same pid again: its session, 200, a fresh token");
    CHECK(jstr(a, "token"),
          "the same pid again: its session, 200, a fresh token");
    json_decref(a);
    CHECK_EQ(gpu_field("node-a", "sm_allocated"), 16,
          "node-a: the VM's 16 SMs and 10 GiB allocated once");
    CHECK_EQ(gpu_field("node-a", "memory_allocated"), 10 * GiB,
          "node-a: the VM's 16 SMs and 10 GiB allocated once");

    /* vm-10.0.0.2 (host 10.0.1.2, 32 SMs, 3 GB) goes to node-b */
    a = new_session(vmb_token, 2001, 201);
    snprintf(sb1, sizeof sb1, "%s", jstr(a, "session.id"));
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-b", "host preference: node-b");
    json_decref(a);

    /* no fit: a 200-SM VM */
    char big_token[65];
    clm_create_vm(&clm, "{\"id\": \"vm-big\", \"vm_ip\": \"10.0.0.60\", \"host_ip\": \"10.0.1.1\", "
              "\"compute_units\": 200, \"memory\": \"1GiB\"}", big_token);
    char *before = state_snapshot();
    long st = call(&clm, "POST", "/v1/sessions", big_token, "{\"pid\": 5}", &a);
    expect_error(st, a, 409, "no_capacity", "needs 200 SMs (25 groups of 8) and 1 GiB; best GPU node-b/0 has 96 of 128 SMs");
    /* vm-c (10.0.1.9, 8 SMs, 2 GiB) fits elsewhere: spread picks node-b (most free) */
    a = new_session(vmc_token, 3001, 201);
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-b", "no local GPU: spread picks the emptier node-b");
    char sc1[64];
    snprintf(sc1, sizeof sc1, "%s", jstr(a, "session.id"));
    json_decref(a);
    CHECK_EQ(call(&clm, "DELETE", "/v1/sessions/", vmc_token, NULL, NULL), 404, "empty id: 404");
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", sc1);
    CHECK_EQ(call(&clm, "DELETE", path, vmc_token, NULL, NULL), 204, "vm-c releases its session");
    free(before);

    /* bad input on sessions: nothing changed */
    before = state_snapshot();
    snprintf(path, sizeof path, "/v1/sessions/%s", sa1);
    st = call(&clm, "DELETE", path, vmb_token, NULL, &a);
    expect_error(st, a, 403, "forbidden", "belongs to another VM");
    snprintf(path, sizeof path, "/v1/sessions/%s/alive", sa1);
    st = call(&clm, "POST", path, vmb_token, NULL, &a);
    expect_error(st, a, 403, "forbidden", "another VM");
    st = call(&clm, "DELETE", "/v1/sessions/s-doesnotexist", vma_token, NULL, &a);
    expect_error(st, a, 404, "not_found", "no session s-doesnotexist");
    st = call(&clm, "POST", "/v1/sessions", vma_token, "{\"pid\": \"many\"}", &a);
    expect_error(st, a, 400, "bad_request", "pid");
    st = call(&clm, "POST", "/v1/sessions", vma_token, "{\"pid\": 1, \"gpu\": 3}", &a);
    expect_error(st, a, 400, "bad_request", "unknown field \"gpu\"");
    st = call(&clm, "POST", "/v1/sessions", T(), "{\"pid\": 1}", &a);
    expect_error(st, a, 403, "forbidden", "operator token");
    st = call(&clm, "POST", "/v1/sessions", nma.node_token, "{\"pid\": 1}", &a);
    expect_error(st, a, 403, "forbidden", "node token");
    snprintf(path, sizeof path, "/v1/nodes/node-b/sessions/%s/ended", sa1);
    st = call(&clm, "POST", path, nmb.node_token, "{\"reason\": \"exit\"}", &a);
    expect_error(st, a, 404, "not_found", "on node node-b");
    snprintf(path, sizeof path, "/v1/nodes/node-a/sessions/%s/ended", sa1);
    st = call(&clm, "POST", path, nmb.node_token, "{\"reason\": \"exit\"}", &a);
    expect_error(st, a, 403, "forbidden", "may not act for node node-a");
    st = call(&clm, "GET", "/v1/sessions?state=bogus", T(), NULL, &a);
    expect_error(st, a, 400, "bad_request", "state");
    st = call(&clm, "GET", "/v1/events?limit=abc", T(), NULL, &a);
    expect_error(st, a, 400, "bad_request", "limit");
    char *after = state_snapshot();
    CHECK_STR_EQ(before, after, "refused session calls changed nothing");
    free(before);
    free(after);

    snprintf(path, sizeof path, "/v1/sessions/%s/alive", sa1);
    CHECK_EQ(call(&clm, "POST", path, vma_token, NULL, NULL), 204, "alive from its VM: 204");
    CHECK_EQ(call(&clm, "GET", "/v1/sessions?vm=vm-a&state=active", T(), NULL, &a), 200, "filter by VM and state");
    CHECK_EQ(json_array_size(json_object_get(a, "sessions")), 2, "filter by VM and state");
    json_decref(a);
    /* a VM lists its own sessions (its client manager reconciles with them at a restart) */
    CHECK_EQ(call(&clm, "GET", "/v1/sessions?state=active", vma_token, NULL, &a), 200,
             "vm-a lists its sessions");
    CHECK_EQ(json_array_size(json_object_get(a, "sessions")), 2, "vm-a sees its 2, no other VM's");
    json_decref(a);
    st = call(&clm, "GET", "/v1/sessions?vm=vm-b", vma_token, NULL, &a);
    expect_error(st, a, 403, "forbidden", "its own");
    st = call(&clm, "GET", "/v1/sessions", nma.node_token, NULL, &a);
    expect_error(st, a, 403, "forbidden", NULL);

    /* release by the VM: the node manager is told to stop the server */
    int stops = nma.stops;
    snprintf(path, sizeof path, "/v1/sessions/%s", sa2);
    CHECK_EQ(call(&clm, "DELETE", path, vma_token, NULL, NULL), 204, "vm-a releases its session");
    CHECK(is_state(sa2, "released"),
          "released; node-a stopped its server");
    CHECK_EQ(nma.stops, stops + 1,
          "released; node-a stopped its server");
    CHECK(!fake_nm_has(&nma, sa2),
          "released; node-a stopped its server");
    CHECK_EQ(call(&clm, "DELETE", path, vma_token, NULL, NULL), 204, "releasing again: 204, no change");
    CHECK_EQ(gpu_field("node-a", "sm_allocated"), 16, "node-a: the VM's 16 SMs while it has a session");

    /* the node reports a session ended */
    a = new_session(vma_token, 1003, 201);
    char s3[64];
    snprintf(s3, sizeof s3, "%s", jstr(a, "session.id"));
    CHECK_EQ(jint(a, "session.sm_groups.0"), 0, "a later process joins the VM's groups 0,1");
    json_decref(a);
    snprintf(path, sizeof path, "/v1/nodes/node-a/sessions/%s/ended", s3);
    CHECK_EQ(call(&clm, "POST", path, nma.node_token, "{\"reason\": \"exited\"}", NULL), 204,
          "node-a reports the session ended");
    char state[32], reason[256];
    session_state(s3, state, sizeof state, reason, sizeof reason);
    CHECK_STR_EQ(state, "released", "released: %s", reason);
    CHECK(strstr(reason, "exited"), "released: %s", reason);

    /* the node cannot start the server: 503, the session failed, nothing held */
    nma.fail_start = 1;
    st = call(&clm, "POST", "/v1/sessions", vma_token, "{\"pid\": 1004}", &a);
    expect_error(st, a, 503, "unavailable", "node node-a could not start a server");
    nma.fail_start = 0;
    CHECK_EQ(gpu_field("node-a", "sm_allocated"), 16, "the failed start holds no capacity");
    CHECK_EQ(call(&clm, "GET", "/v1/sessions?state=failed", T(), NULL, &a), 200, "recorded as failed");
    CHECK_EQ(json_array_size(json_object_get(a, "sessions")), 1, "recorded as failed");
    json_decref(a);
    CHECK(has_event("session.allocated", sa1) && has_event("session.released", sa2)
              && has_event("session.failed", NULL), "events: allocated, released, failed");
}

static char par_token[65];
static char par_ids[8][64], par_nodes[8][64];
static int par_groups[8][2];
static char par_why[8][256]; /* a process without its session: status and answer */

static void *par_alloc(void *arg)
{
    int i = (int)(long)arg;
    char body[64];
    snprintf(body, sizeof body, "{\"pid\": %d}", 7000 + i);
    json_t *a;
    par_groups[i][0] = par_groups[i][1] = -1;
    long st = call(&clm, "POST", "/v1/sessions", par_token, body, &a);
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    snprintf(par_why[i], sizeof par_why[i], "pid %d: %ld %s", 7000 + i, st, text ? text : "");
    free(text);
    if (st == 201) {
        snprintf(par_ids[i], sizeof par_ids[i], "%s", jstr(a, "session.id"));
        snprintf(par_nodes[i], sizeof par_nodes[i], "%s", jstr(a, "session.node_id"));
        if (json_array_size(json_object_get(json_object_get(a, "session"), "sm_groups")) == 2) {
            par_groups[i][0] = (int)jint(a, "session.sm_groups.0");
            par_groups[i][1] = (int)jint(a, "session.sm_groups.1");
        }
    }
    json_decref(a);
    return NULL;
}

/* issue 8, attack 3: a VM's share limits the VM, not each of its processes. */
static void test_parallel(void)
{
    printf("-- a VM's processes share its share (8 concurrent allocations)\n");
    clm_create_vm(&clm, "{\"id\": \"vm-par\", \"vm_ip\": \"10.0.0.70\", \"host_ip\": \"10.0.1.2\", "
              "\"compute_units\": 16, \"memory\": \"1GiB\"}", par_token);
    long long before = gpu_field("node-b", "sm_allocated");
    long long mem_before = gpu_field("node-b", "memory_allocated");
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, par_alloc, (void *)i);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    int ok = 0, same = 0;
    for (int i = 0; i < 8; i++) {
        if (par_groups[i][0] < 0)
            printf("  (%s)\n", par_why[i]);
        ok += par_groups[i][0] >= 0;
        same += par_groups[i][0] == par_groups[0][0] && par_groups[i][1] == par_groups[0][1] &&
                strcmp(par_nodes[i], "node-b") == 0;
    }
    CHECK_EQ(ok, 8, "8 concurrent processes of vm-par got sessions of 2 SM groups");
    CHECK_EQ(same, 8, "all 8 run on the VM's same 2 SM groups of node-b (%d,%d)",
             par_groups[0][0], par_groups[0][1]);
    CHECK_EQ(gpu_field("node-b", "sm_allocated"), before + 16,
             "node-b: the VM's 16 SMs allocated once, not 8 times");
    CHECK_EQ(gpu_field("node-b", "memory_allocated"), mem_before + GiB,
             "node-b: the VM's 1 GiB allocated once");
    /* the next VM still gets its share on node-b: 96 SMs are left for it */
    char next_token[65];
    clm_create_vm(&clm, "{\"id\": \"vm-next\", \"vm_ip\": \"10.0.0.71\", \"host_ip\": \"10.0.1.2\", "
              "\"compute_units\": 64, \"memory\": \"1GiB\"}", next_token);
    json_t *a = new_session(next_token, 7100, 201);
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-b", "the next VM gets its 64 SMs on node-b");
    char next_id[64];
    snprintf(next_id, sizeof next_id, "%s", jstr(a, "session.id"));
    json_decref(a);
    CHECK_EQ(gpu_field("node-b", "sm_allocated"), before + 16 + 64, "node-b: 80 more SMs in all");
    char path[640];
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "/v1/sessions/%s", par_ids[i]);
        CHECK_EQ(call(&clm, "DELETE", path, par_token, NULL, NULL), 204, "release %s", par_ids[i]);
        if (i == 6)
            CHECK_EQ(gpu_field("node-b", "sm_allocated"), before + 16 + 64,
                     "the VM holds its share while one of its processes runs");
    }
    snprintf(path, sizeof path, "/v1/sessions/%s", next_id);
    CHECK_EQ(call(&clm, "DELETE", path, next_token, NULL, NULL), 204, "release vm-next's");
    CHECK_EQ(gpu_field("node-b", "sm_allocated"), before, "all released: the share is free");
    CHECK_EQ(gpu_field("node-b", "memory_allocated"), mem_before, "all released: the share is free");
    CHECK_EQ(call(&clm, "DELETE", "/v1/vms/vm-par", T(), NULL, NULL), 204, "delete vm-par");
    CHECK_EQ(call(&clm, "DELETE", "/v1/vms/vm-next", T(), NULL, NULL), 204, "delete vm-next");
}

static int idle_released(void *sid) { return is_state(sid, "released"); }
static int nma_stopped(void *sid) { return !fake_nm_has(&nma, sid); }

static void test_idle(void)
{
    printf("-- idle release\n");
    json_t *a = new_session(vma_token, 1100, 201);
    char sid[64];
    snprintf(sid, sizeof sid, "%s", jstr(a, "session.id"));
    json_decref(a);
    fake_nm_set_connected(&nma, sid, 0);
    CHECK(!is_state(sid, "released"), "not released at once");
    CHECK(wait_for(idle_released, sid, 6000), "released after idle_grace without a client");
    char state[32], reason[256];
    session_state(sid, state, sizeof state, reason, sizeof reason);
    CHECK(strstr(reason, "idle"), "end reason: %s", reason);
    /* "stop" is in the answer to the heartbeat that released it, which the heartbeat thread
     * applies only after the daemon committed: the release can show first (a loaded machine
     * saw the server still there) */
    CHECK(wait_for(nma_stopped, sid, 2000), "the node was told to stop it (heartbeat \"stop\")");
}

static void test_metrics_events(void)
{
    printf("-- metrics and events\n");
    char url[128], err[256];
    snprintf(url, sizeof url, "%s/metrics", clm.base);
    long status;
    CHECK_EQ(flyt_http_call("GET", url, T(), NULL, &status, NULL, err, sizeof err), -1, "metrics are text, not JSON");
    CHECK_EQ(status, 200, "metrics are text, not JSON");
    char req[512], out[65536];
    snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Connection: close\r\n\r\n", T());
    CHECK_EQ(raw_http(clm.port, req, out, sizeof out), 0, "GET /metrics");
    CHECK(strstr(out, "flyt_gpu_sm_total{node=\"node-a\",gpu=\"0\"} 64"), "SM total per GPU");
    CHECK(strstr(out, "flyt_gpu_sm_allocated{node=\"node-a\",gpu=\"0\"} 16"), "SMs allocated per GPU");
    CHECK(strstr(out, "flyt_gpu_memory_allocated_bytes{node=\"node-a\",gpu=\"0\"} 10737418240"),
          "memory allocated per GPU");
    CHECK(strstr(out, "flyt_sessions{state=\"active\"} 2"), "sessions by state");
    CHECK(strstr(out, "flyt_nodes{state=\"ready\"} 2"), "nodes by state");
    CHECK(strstr(out, "flyt_http_requests_total{route=\"POST /v1/sessions\",code=\"2xx\"}"),
          "requests per route");
    CHECK(strstr(out, "flyt_http_request_errors_total{route=\"POST /v1/sessions\"}"), "errors per route");
    CHECK(strstr(out, "flyt_http_request_duration_seconds_bucket{route=\"POST /v1/sessions\",le=\"+Inf\"}"),
          "latency histogram per route");
    json_t *a;
    CHECK_EQ(call(&clm, "GET", "/v1/events?since=3&limit=2", T(), NULL, &a), 200, "events since/limit");
    CHECK_EQ(json_array_size(json_object_get(a, "events")), 2, "events since/limit");
    CHECK_EQ(jint(a, "events.0.id"), 4, "events since/limit");
    CHECK_EQ(jint(a, "events.1.id"), 5, "events since/limit");
    json_decref(a);
}

static int node_b_lost(void *arg)
{
    (void)arg;
    json_t *a;
    int lost = call(&clm, "GET", "/v1/nodes/node-b", T(), NULL, &a) == 200
               && strcmp(jstr(a, "node.state"), "lost") == 0;
    json_decref(a);
    return lost;
}

static void test_node_loss(void)
{
    printf("-- node loss and return\n");
    pthread_mutex_lock(&nmb.lock);
    nmb.heartbeat = 0;
    pthread_mutex_unlock(&nmb.lock);
    CHECK(wait_for(node_b_lost, NULL, 6000), "node-b is lost after node_timeout without heartbeats");
    char state[32], reason[256];
    session_state(sb1, state, sizeof state, reason, sizeof reason);
    CHECK_STR_EQ(state, "lost", "its session is lost: %s", reason);
    CHECK(strstr(reason, "node lost"), "its session is lost: %s", reason);
    CHECK(has_event("node.lost", "node-b"), "event node.lost");
    /* its capacity is withdrawn: vm-10.0.0.2 (32 SMs) now fits only on node-a (48 free) */
    json_t *a = new_session(vmb_token, 2002, 201);
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-a", "placement skips the lost node");
    char sid[64], path[128];
    snprintf(sid, sizeof sid, "%s", jstr(a, "session.id"));
    json_decref(a);
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    CHECK_EQ(call(&clm, "DELETE", path, T(), NULL, NULL), 204, "the operator releases it");

    /* node-b comes back still running the lost session's server: it is told to stop it */
    CHECK(fake_nm_has(&nmb, sb1), "node-b still runs the old server");
    char sessions[128];
    snprintf(sessions, sizeof sessions, "[{\"id\": \"%s\", \"alive\": true}]", sb1);
    a = clm_register_node(&clm, &nmb, "10.0.1.2", 128, 80 * GiB, sessions);
    CHECK_EQ(json_array_size(json_object_get(a, "stop")), 1, "register again: stop the lost session");
    CHECK_STR_EQ(jstr(a, "stop.0"), sb1, "register again: stop the lost session");
    json_decref(a);
    CHECK(!node_b_lost(NULL) && has_event("node.returned", "node-b"), "node-b ready again, node.returned");
    CHECK_EQ(gpu_field("node-b", "sm_allocated"), 0, "nothing counted for the lost session");
}

static void test_restart(void)
{
    printf("-- restart\n");
    /* a session on each node, then compare everything across a restart */
    json_t *a = new_session(vmb_token, 2003, 201);
    char sb[64];
    snprintf(sb, sizeof sb, "%s", jstr(a, "session.id"));
    json_decref(a);
    char *before = state_snapshot();
    long long alloc_a = gpu_field("node-a", "sm_allocated"), alloc_b = gpu_field("node-b", "sm_allocated");
    clm_restart(&clm);
    char *after = state_snapshot();
    CHECK_STR_EQ(before, after, "VMs, nodes (with allocations) and sessions are the same");
    free(before);
    free(after);
    CHECK_EQ(gpu_field("node-a", "sm_allocated"), alloc_a,
          "allocations intact: node-a %lld SMs, node-b %lld SMs", alloc_a, alloc_b);
    CHECK_EQ(gpu_field("node-b", "sm_allocated"), alloc_b,
          "allocations intact: node-a %lld SMs, node-b %lld SMs", alloc_a, alloc_b);
    CHECK(is_state(sa1, "active") && is_state(sb, "active"), "live sessions still active");
    usleep(1500 * 1000);   /* heartbeats reach the new process */
    CHECK(is_state(sa1, "active") && !node_b_lost(NULL), "after heartbeats: still active, node ready");
    /* a new process of vm-a joins its share; a new VM does not reuse held groups */
    a = new_session(vma_token, 1200, 201);
    CHECK_EQ(jint(a, "session.sm_groups.0"), 0, "vm-a's new process joins its groups 0,1");
    json_decref(a);
    CHECK_EQ(gpu_field("node-a", "sm_allocated"), alloc_a, "vm-a still counted once");
    char r_token[65];
    clm_create_vm(&clm, "{\"id\": \"vm-r\", \"vm_ip\": \"10.0.0.80\", \"host_ip\": \"10.0.1.1\", "
              "\"compute_units\": 16, \"memory\": \"1GiB\"}", r_token);
    a = new_session(r_token, 1201, 201);
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-a",
          "new VM on node-a avoids held groups (got group %lld)", jint(a, "session.sm_groups.0"));
    CHECK_GE(jint(a, "session.sm_groups.0"), 2,
          "new VM on node-a avoids held groups (got group %lld)", jint(a, "session.sm_groups.0"));
    json_decref(a);
    long long now_a = gpu_field("node-a", "sm_allocated");
    CHECK_EQ(now_a, alloc_a + 16, "counted once: %lld SMs", now_a);
    CHECK_EQ(call(&clm, "DELETE", "/v1/vms/vm-r?force=1", T(), NULL, NULL), 204, "delete vm-r");
}

static void test_deletes(void)
{
    printf("-- deletes\n");
    json_t *a;
    long st = call(&clm, "DELETE", "/v1/vms/vm-a", T(), NULL, &a);
    expect_error(st, a, 409, "conflict", "live session");
    int stops = nma.stops;
    CHECK_EQ(call(&clm, "DELETE", "/v1/vms/vm-a?force=1", T(), NULL, NULL), 204, "force-delete vm-a");
    CHECK(is_state(sa1, "released"), "its sessions released, servers stopped");
    CHECK_GT(nma.stops, stops, "its sessions released, servers stopped");
    st = call(&clm, "POST", "/v1/sessions", vma_token, "{\"pid\": 1}", &a);
    expect_error(st, a, 401, "unauthorized", "unknown token");
    CHECK_EQ(call(&clm, "DELETE", "/v1/nodes/node-b", T(), NULL, NULL), 204, "delete node-b");
    pthread_mutex_lock(&nmb.lock);
    nmb.heartbeat = 0;
    pthread_mutex_unlock(&nmb.lock);
    st = heartbeat_once(&clm, &nmb, &a);
    expect_error(st, a, 401, "unauthorized", NULL);
    CHECK(has_event("vm.deleted", "vm-a") && has_event("node.deleted", "node-b"), "delete events");
}

/* ---- app-requested scaling (docs/api.md, "App-requested scaling") ---- */

static long ask(const char *vm, const char *token, const char *body, json_t **a)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/vms/%s/requests", vm);
    return call(&clm, "POST", path, token, body, a);
}

static long long share_sms(const char *sid)
{
    char path[128];
    json_t *a;
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    long long v = call(&clm, "GET", path, T(), NULL, &a) == 200 ? jint(a, "session.sm_count") : -1;
    json_decref(a);
    return v;
}

static char queued_id[64];
static int request_granted(void *arg)
{
    json_t *a;
    int ok = 0;
    if (call(&clm, "GET", "/v1/vms/vm-r1/requests", T(), NULL, &a) == 200) {
        json_t *qs = json_object_get(a, "requests"), *q;
        size_t i;
        json_array_foreach(qs, i, q)
            ok |= strcmp(jstr(q, "id"), queued_id) == 0 && strcmp(jstr(q, "state"), "granted") == 0;
    }
    json_decref(a);
    (void)arg;
    return ok;
}

/* The operator's bounds on a VM: kept, shown, checked. */
static void check_bounds_api(char *r1_token, char *r2_token)
{
    json_t *a;
    long st = call(&clm, "POST", "/v1/vms", T(), "{\"id\": \"vm-rx\", \"vm_ip\": \"10.0.9.9\", "
                   "\"host_ip\": \"10.0.9.1\", \"compute_units\": 8, \"memory\": \"1GiB\", "
                   "\"sm_min\": 32, \"sm_max\": 16}", &a);
    expect_error(st, a, 400, "bad_request", "sm_min");
    clm_create_vm(&clm, "{\"id\": \"vm-r1\", \"vm_ip\": \"10.0.9.11\", \"host_ip\": \"10.0.9.1\", "
              "\"compute_units\": 8, \"memory\": \"1GiB\", \"sm_min\": 8, \"sm_max\": 32, "
              "\"memory_max\": \"4GiB\"}", r1_token);
    clm_create_vm(&clm, "{\"id\": \"vm-r2\", \"vm_ip\": \"10.0.9.12\", \"host_ip\": \"10.0.9.1\", "
              "\"compute_units\": 16, \"memory\": \"2GiB\"}", r2_token);
    st = call(&clm, "PATCH", "/v1/vms/vm-r1", T(), "{\"memory_min\": \"8GiB\"}", &a);
    expect_error(st, a, 400, "bad_request", "memory_min");
    st = call(&clm, "PATCH", "/v1/vms/vm-r1", T(), "{\"sm_max\": \"many\"}", &a);
    expect_error(st, a, 400, "bad_request", "sm_max");
    CHECK_EQ(call(&clm, "PATCH", "/v1/vms/vm-r1", T(), "{\"memory_min\": \"512MiB\"}", &a), 200,
             "PATCH memory_min: %s", call_err);
    CHECK_EQ(jint(a, "vm.bounds.memory_min"), 512LL << 20, "bounds shown with the VM");
    CHECK_EQ(jint(a, "vm.bounds.sm_max"), 32, "bounds shown with the VM");
    CHECK_EQ(jint(a, "vm.bounds.memory_max"), 4 * GiB, "bounds shown with the VM");
    json_decref(a);
    CHECK_EQ(call(&clm, "GET", "/v1/vms/vm-r2", T(), NULL, &a), 200, "GET vm-r2");
    CHECK(json_is_null(json_object_get(json_object_get(json_object_get(a, "vm"), "bounds"),
                                       "sm_max")), "no bounds: null");
    json_decref(a);
}

static void test_requests(void)
{
    printf("-- app-requested scaling\n");
    char r1[65], r2[65], s1[64], s2[64];
    clm_create_node(&clm, &nmr, "10.0.9.1");
    json_decref(clm_register_node(&clm, &nmr, "10.0.9.1", 32, 8 * GiB, NULL));
    check_bounds_api(r1, r2);
    json_t *a;
    long st = ask("vm-r1", r1, "{\"sm\": \"+8\"}", &a);
    expect_error(st, a, 409, "conflict", "no live session");
    a = new_session(r1, 7001, 201);
    snprintf(s1, sizeof s1, "%s", jstr(a, "session.id"));
    CHECK_STR_EQ(jstr(a, "session.node_id"), "node-r", "vm-r1 on node-r");
    json_decref(a);
    a = new_session(r2, 7002, 201);
    snprintf(s2, sizeof s2, "%s", jstr(a, "session.id"));
    json_decref(a);

    st = ask("vm-r2", r2, "{\"sm\": \"+8\"}", &a);
    expect_error(st, a, 409, "out_of_bounds", "no bounds set by the operator");
    st = ask("vm-r1", r2, "{\"sm\": \"+8\"}", &a);
    expect_error(st, a, 403, "forbidden", "its own share");
    st = ask("vm-r1", T(), "{\"sm\": \"+8\"}", &a);
    expect_error(st, a, 403, "forbidden", NULL);
    st = ask("vm-r1", r1, "{\"sm\": \"lots\"}", &a);
    expect_error(st, a, 400, "bad_request", "sm");
    st = ask("vm-r1", r1, "{\"memory\": \"+1\"}", &a);
    expect_error(st, a, 400, "bad_request", "unit");
    st = ask("vm-r1", r1, "{\"gpus\": 2}", &a);
    expect_error(st, a, 400, "bad_request", "unknown field");

    int resizes = nmr.resizes;
    CHECK_EQ(ask("vm-r1", r1, "{\"sm\": \"+8\", \"reason\": \"bigger batch\"}", &a), 200,
             "+8 SMs within the bounds: granted: %s", call_err);
    CHECK_STR_EQ(jstr(a, "request.state"), "granted", "granted");
    CHECK_EQ(jint(a, "share.sm_count"), 16, "the share is 16 SMs");
    CHECK_EQ(jint(a, "results.0.node.applied"), 1, "the node applied it to the running server");
    json_decref(a);
    CHECK_EQ(nmr.resizes, resizes + 1, "one resize call to the node");
    CHECK_EQ(nmr.last_sm_count, 16, "the node was told 16 SMs");
    CHECK_EQ(share_sms(s1), 16, "the session records 16 SMs");

    st = ask("vm-r1", r1, "{\"sm\": \"64\"}", &a);
    expect_error(st, a, 409, "out_of_bounds", "sm_max of 32");
    st = ask("vm-r1", r1, "{\"memory\": \"+8GiB\"}", &a);
    expect_error(st, a, 409, "out_of_bounds", "memory_max");
    st = ask("vm-r1", r1, "{\"sm\": \"-8\", \"memory\": \"256MiB\"}", &a);
    expect_error(st, a, 409, "out_of_bounds", "memory_min");

    /* 32 SMs: 16 own + 16 of vm-r2's: queued; then 24 replaces it */
    CHECK_EQ(ask("vm-r1", r1, "{\"sm\": \"+16\"}", &a), 202, "beyond free capacity: queued: %s",
             call_err);
    CHECK_STR_EQ(jstr(a, "request.state"), "queued", "queued");
    char first[64];
    snprintf(first, sizeof first, "%s", jstr(a, "request.id"));
    json_decref(a);
    CHECK_EQ(ask("vm-r1", r1, "{\"sm\": \"24\"}", &a), 202, "24: queued too: %s", call_err);
    snprintf(queued_id, sizeof queued_id, "%s", jstr(a, "request.id"));
    json_decref(a);
    CHECK_EQ(share_sms(s1), 16, "nothing changed while queued");
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", s2);
    CHECK_EQ(call(&clm, "DELETE", path, r2, NULL, NULL), 204, "vm-r2's session ends");
    CHECK(wait_for(request_granted, NULL, 5000), "the queued request is granted as capacity frees");
    CHECK_EQ(share_sms(s1), 24, "the session records 24 SMs");
    CHECK_EQ(nmr.last_sm_count, 24, "the node was told 24 SMs");

    CHECK_EQ(call(&clm, "GET", "/v1/vms/vm-r1/requests", r1, NULL, &a), 200, "list own: %s",
             call_err);
    json_t *qs = json_object_get(a, "requests"), *q;
    size_t i;
    int superseded = 0, refused = 0, granted = 0;
    json_array_foreach(qs, i, q) {
        superseded += strcmp(jstr(q, "state"), "superseded") == 0 && strcmp(jstr(q, "id"), first) == 0;
        refused += strcmp(jstr(q, "state"), "refused") == 0;
        granted += strcmp(jstr(q, "state"), "granted") == 0;
    }
    CHECK_EQ(superseded, 1, "the first queued request was superseded");
    CHECK_EQ(refused, 4, "refusals recorded (no live session, three out of bounds)");
    CHECK_EQ(granted, 2, "two granted");
    json_decref(a);
    CHECK_EQ(call(&clm, "GET", "/v1/vms/vm-r1/requests", r2, NULL, NULL), 403,
             "another VM may not list them");
    CHECK(has_event("request.granted", "vm-r1") && has_event("request.superseded", "vm-r1"),
          "request events");
    snprintf(path, sizeof path, "/v1/sessions/%s", s1);
    CHECK_EQ(call(&clm, "DELETE", path, r1, NULL, NULL), 204, "vm-r1's session ends");
}

static void test_bad_config(const char *binary)
{
    printf("-- config refused at start\n");
    char path[512], cmd[1200], out[2048];
    snprintf(path, sizeof path, "%s/bad.conf", clm.dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "# bad\nlisten = 127.0.0.1:0\nplacement_policy = fastest\noperator_token_file = operator.token\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s --config %s 2>&1; echo \"exit $?\"", binary, path);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    char want[600];
    snprintf(want, sizeof want, "%s:3: placement_policy: \"fastest\" is not spread or pack", path);
    CHECK(strstr(out, want) && strstr(out, "exit 2"), "refused with FILE:LINE: reason: %s", want);
    f = fopen(path, "w");
    fprintf(f, "listen = 127.0.0.1:0\noperator_token_file = operator.token\nnode_timeout = 3 fortnights\n");
    fclose(f);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    snprintf(want, sizeof want, "%s:3: node_timeout: unknown unit \"fortnights\"", path);
    CHECK(strstr(out, want) && strstr(out, "exit 2"), "bad unit: %s", want);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_api PATH/flyt-cluster-manager STORE_URL\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    flyt_log_init("test_api", FLYT_LOG_ERROR);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    const char *store = argv[2];
    char sqlite_path[600];
    if (strcmp(store, "sqlite") == 0) {   /* a fresh file in the test's directory */
        snprintf(sqlite_path, sizeof sqlite_path, "sqlite:/tmp/flyt-test-api-%d.db", (int)getpid());
        store = sqlite_path;
    }
    printf("store: %s\n", store);
    fake_nm_start(&nma, "node-a");
    fake_nm_start(&nmb, "node-b");
    clm_start(&clm, argv[1], store,
             "heartbeat_interval = 1s\nnode_timeout = 2s\nidle_grace = 1500ms\n"
             "placement_policy = spread\n");
    fake_nm_start(&nmr, "node-r");
    struct fake_nm *nms[] = {&nma, &nmb, &nmr};
    heartbeats_start(&clm, nms, 3, 250);

    test_auth_and_health();
    test_vms();
    test_nodes();
    test_sessions();
    test_parallel();
    test_idle();
    test_metrics_events();
    test_node_loss();
    test_restart();
    test_deletes();
    test_requests();
    test_bad_config(argv[1]);

    heartbeats_stop();
    clm_stop(&clm);
    fake_nm_stop(&nma);
    fake_nm_stop(&nmb);
    fake_nm_stop(&nmr);
    if (strncmp(store, "sqlite:", 7) == 0 && store == sqlite_path) {
        unlink(store + 7);
        char p[700];
        snprintf(p, sizeof p, "%s-wal", store + 7);
        unlink(p);
        snprintf(p, sizeof p, "%s-shm", store + 7);
        unlink(p);
        snprintf(p, sizeof p, "%s.key", store + 7);
        unlink(p);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", clm.dir);
    if (system(cmd) != 0) {
    }
    printf("test_api: all passed\n");
    return 0;
}
