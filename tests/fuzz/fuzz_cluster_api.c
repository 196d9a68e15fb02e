/*
 * libFuzzer target: the cluster manager's HTTP API (docs/api.md), every
 * route of clm_routes (but the migration's: routes_build), fed requests in the format of fuzz_http.h and handled
 * in process (flyt_http_handle) against a fresh SQLite store in memory per
 * input. The store starts with a VM and a ready node with two GPUs whose
 * tokens are the roles "vm" and "node"; "op" is the operator's. The node
 * managers the API calls are a fake (flyt_http_call below): each call takes
 * the next "<STATUS BODY" answer of the input, else a plausible success.
 * Whatever the requests, the manager must answer each without a memory
 * error, a leak, undefined behaviour or a failed assertion.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clm.h"
#include "flyt_token.h"
#include "fuzz_http.h"

#define OPERATOR_TOKEN "fuzz-operator-token"
#define NODE_TOKEN "fuzz-node-token"
#define VM_TOKEN "fuzz-vm-token"

static struct clm clm;

/* Every route but the migration's, which goes on in a detached thread after
 * its request is answered: it would outlive the input and its store. */
static struct flyt_http_route routes[128];

static void routes_build(void)
{
    size_t n = 0;
    for (const struct flyt_http_route *r = clm_routes; r->method; r++)
        if (strstr(r->pattern, "/migrate") == NULL && n + 1 < sizeof routes / sizeof routes[0])
            routes[n++] = *r;
    routes[n] = (struct flyt_http_route){0};
}

/* ---- the fake node managers ---- */

#define MAX_ANSWERS 8
static struct {
    int status;     /* 0: no answer (connection refused) */
    char *body;
} answers[MAX_ANSWERS];
static int nanswers, next_answer;

static void answer_line(const char *line)
{
    if (nanswers == MAX_ANSWERS)
        return;
    char *end;
    long status = strtol(line, &end, 10);
    answers[nanswers].status = status < 0 || status > 999 ? 500 : (int)status;
    answers[nanswers].body = strdup(*end == ' ' ? end + 1 : end);
    nanswers++;
}

static void answers_clear(void)
{
    for (int i = 0; i < nanswers; i++)
        free(answers[i].body);
    nanswers = next_answer = 0;
}

/* What a node manager that works answers. */
static const char *default_answer(const char *method, const char *url, int *status)
{
    if (strcmp(method, "DELETE") == 0) {
        *status = 204;
        return "";
    }
    size_t n = strlen(url);
    if (n >= 7 && strcmp(url + n - 7, "/resize") == 0) {
        *status = 200;
        return "{\"applied\":1,\"pending\":0,\"failed\":0,\"sessions\":[]}";
    }
    *status = 201;
    return "{\"endpoint\":\"tcp://127.0.0.1:9\",\"pid\":4242}";
}

/* Replaces flyt_http_client.c's libcurl call (that object is then not linked). */
/* The input's next answer (status in *st), or fallback with *st as it was. */
static const char *next_answer_text(const char *fallback, int *st)
{
    if (next_answer >= nanswers)
        return fallback;
    *st = answers[next_answer].status;
    return answers[next_answer++].body;
}

int flyt_http_call_timeout(const char *method, const char *url, const char *token, json_t *body,
                           long timeout_ms, long *status, json_t **answer, char *err,
                           size_t errlen)
{
    (void)token;
    (void)body;
    (void)timeout_ms;
    if (answer)
        *answer = NULL;
    *status = 0;
    int st;
    const char *text = next_answer_text(default_answer(method, url, &st), &st);
    if (st == 0) {
        snprintf(err, errlen, "%s %s: connection refused", method, url);
        return -1;
    }
    *status = st;
    json_t *j = *text ? json_loads(text, 0, NULL) : NULL;
    if (st >= 200 && st < 300 && *text && !j) {
        snprintf(err, errlen, "%s %s: HTTP %d answer is not JSON", method, url, st);
        return -1;
    }
    if (st < 200 || st >= 300)
        snprintf(err, errlen, "HTTP %d error: %s", st, text);
    if (answer)
        *answer = j;
    else
        json_decref(j);
    return 0;
}

int flyt_http_call(const char *method, const char *url, const char *token, json_t *body,
                   long *status, json_t **answer, char *err, size_t errlen)
{
    return flyt_http_call_timeout(method, url, token, body, 10000, status, answer, err, errlen);
}

/* State files moving between node managers (checkpoint, migration): the next
 * answer's status, and its body as the bytes (on success). */
int flyt_http_call_bytes(const char *method, const char *url, const char *token, const void *body,
                         size_t len, long timeout_ms, long *status, char **out, size_t *outlen,
                         char *err, size_t errlen)
{
    (void)token;
    (void)body;
    (void)len;
    (void)timeout_ms;
    if (out)
        *out = NULL;
    if (outlen)
        *outlen = 0;
    *status = 0;
    int st = 200;
    const char *text = next_answer_text("", &st);
    if (st == 0) {
        snprintf(err, errlen, "%s %s: connection refused", method, url);
        return -1;
    }
    *status = st;
    if (st < 200 || st >= 300) {
        snprintf(err, errlen, "HTTP %d error: %s", st, text);
        return 0;
    }
    if (out && (*out = strdup(text)) == NULL)
        return -1;
    if (outlen)
        *outlen = strlen(text);
    return 0;
}

/* ---- the store each input starts from ---- */

static void must(int ok, const char *what, const char *err)
{
    if (!ok) {
        fprintf(stderr, "fuzz_cluster_api: %s: %s\n", what, err);
        abort();
    }
}

static void token_hash(const char *token, char *hash)
{
    must(flyt_sha256_hex(token, strlen(token), hash, 65) == 0, "sha256", "");
}

static void store_seed(void)
{
    char err[512], hash[65];
    clm.store = store_open("sqlite::memory:", err, sizeof err);
    must(clm.store != NULL, "store", err);
    struct vm_rec vm = {.id = "vm-1", .vm_ip = "10.0.0.2", .host_ip = "10.0.0.1",
                        .compute_units = 132, .memory = 1LL << 34};
    vm.created_at = vm.updated_at = now_ms();
    token_hash(VM_TOKEN, hash);
    must(store_vm_insert(clm.store, &vm, hash, err, sizeof err) >= 0, "vm", err);
    struct node_rec node = {.id = "node-1", .host_ip = "10.0.0.1",
                            .address = "http://127.0.0.1:9", .state = NODE_READY};
    node.created_at = node.last_heartbeat = now_ms();
    memset(node.session_key, 'a', 64);
    memset(node.manager_token, 'b', 64);
    token_hash(NODE_TOKEN, hash);
    must(store_node_insert(clm.store, &node, hash, err, sizeof err) >= 0, "node", err);
    const struct gpu_rec gpus[2] = {
        {0, "GPU-00000000-0000-0000-0000-000000000000", "Fuzz H100", 132, 2, 80LL << 30, 90},
        {1, "GPU-11111111-1111-1111-1111-111111111111", "Fuzz H100", 132, 4, 80LL << 30, 90},
    };
    must(store_gpus_set(clm.store, node.id, gpus, 2, err, sizeof err) >= 0, "gpus", err);
}

static void setup_once(void)
{
    fuzz_http_quiet_logs("fuzz_cluster_api");
    flyt_mutex_init(&clm.lock);
    snprintf(clm.operator_tokens.tok[0], sizeof clm.operator_tokens.tok[0], "%s", OPERATOR_TOKEN);
    clm.operator_tokens.n = 1;
    clm.set.heartbeat_interval_ms = 5000;
    clm.set.node_timeout_ms = 20000;
    clm.set.idle_grace_ms = 600000;
    clm.set.session_token_ttl_ms = 86400000;
    clm.set.server_start_timeout_ms = 30000;
    clm.set.policy = PLACE_SPREAD;
    clm.started_ms = now_ms();
    /* /metrics and the timer read the HTTP server's counters: one that nobody calls */
    char err[256];
    routes_build();
    clm.http = flyt_http_start("127.0.0.1:0", routes, &clm, err, sizeof err);
    must(clm.http != NULL, "http", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup_once);
    store_seed();
    static const char *const roles[] = {"op", OPERATOR_TOKEN, "node", NODE_TOKEN,
                                        "vm", VM_TOKEN, NULL};
    const struct fuzz_http_target t = {routes, &clm, roles, answer_line};
    fuzz_http_run(&t, data, size);
    lifecycle_tick(&clm);
    answers_clear();
    store_close(clm.store);
    clm.store = NULL;
    return 0;
}
