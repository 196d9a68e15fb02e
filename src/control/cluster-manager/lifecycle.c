/* Session and node lifecycle: ending sessions, losing nodes, calling node managers, and the
 * timer thread that finds nodes past node_timeout. */
#include "clm.h"

#include "flyt_log.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void stop_list_add(struct stop_list *l, const struct node_rec *node, const char *session_id)
{
    if (!node->address[0] || !node->manager_token[0])
        return;   /* never registered: nothing can run there */
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        struct stop_item *it = realloc(l->items, sizeof *it * (size_t)cap);
        if (!it)
            return;
        l->items = it;
        l->cap = cap;
    }
    struct stop_item *it = &l->items[l->n++];
    snprintf(it->address, sizeof it->address, "%s", node->address);
    snprintf(it->token, sizeof it->token, "%s", node->manager_token);
    snprintf(it->session_id, sizeof it->session_id, "%s", session_id);
}

void stop_list_run(struct stop_list *l)
{
    for (int i = 0; i < l->n; i++) {
        const struct stop_item *it = &l->items[i];
        char url[ADDR_MAX + 128], err[512];
        long status;
        snprintf(url, sizeof url, "%s/v1/servers/%s", it->address, it->session_id);
        if (flyt_http_call_timeout("DELETE", url, it->token, NULL, 5000, &status, NULL, err,
                                   sizeof err) < 0)
            flyt_warn("stopping server of session %s: %s (the node is told again at its next "
                      "heartbeat)", it->session_id, err);
        else if (status != 204 && status != 404)
            flyt_warn("stopping server of session %s: %s", it->session_id, err);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

int session_end(struct clm *clm, struct session_rec *s, enum session_state state,
                const char *reason, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&clm->lock);
    if (!session_is_live(s))
        return 0;
    FLYT_ASSERT(state != SESSION_STARTING && state != SESSION_ACTIVE
                && state != SESSION_MIGRATING);
    s->state = state;
    snprintf(s->end_reason, sizeof s->end_reason, "%s", reason);
    s->ended_at = now_ms();
    if (store_session_update(clm->store, s, err, errlen) < 0)
        return -1;
    char kind[48], msg[512];
    snprintf(kind, sizeof kind, "session.%s", session_state_name(state));
    snprintf(msg, sizeof msg, "session of VM %s (pid %lld) on %s/%d ended: %s", s->vm_id, s->pid,
             s->node_id, s->gpu_index, reason);
    flyt_info("%s %s: %s", kind, s->id, msg);
    return store_event_add(clm->store, kind, s->id, msg, err, errlen) < 0 ? -1 : 0;
}

int node_mark_lost(struct clm *clm, struct node_rec *n, const char *reason, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct session_filter f = {.node_id = n->id, .live_only = 1};
    struct session_rec *ss;
    int nss;
    if (store_session_list(clm->store, &f, &ss, &nss, err, errlen) < 0)
        return -1;
    for (int i = 0; i < nss; i++)
        if (session_end(clm, &ss[i], SESSION_LOST, "node lost", err, errlen) < 0) {
            free(ss);
            return -1;
        }
    free(ss);
    n->state = NODE_LOST;
    if (store_node_update(clm->store, n, err, errlen) < 0)
        return -1;
    char msg[512];
    snprintf(msg, sizeof msg, "node %s lost (%s); %d session(s) ended, its capacity withdrawn",
             n->id, reason, nss);
    flyt_warn("%s", msg);
    return store_event_add(clm->store, "node.lost", n->id, msg, err, errlen) < 0 ? -1 : 0;
}

/* POST /v1/servers for s on node, with the flag named mode set (NULL: none); 0 with the
 * answer of a 2xx in *ans, -1 with err. */
static int servers_post(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                        const char *mode, json_t **ans, char *err, size_t errlen)
{
    char url[ADDR_MAX + 32];
    snprintf(url, sizeof url, "%s/v1/servers", node->address);
    json_t *groups = json_array();
    for (int i = 0; i < s->ngroups; i++)
        json_array_append_new(groups, json_integer(s->groups[i]));
    /* vm_id: the node keeps each VM's kernel images apart */
    json_t *body = json_pack("{s:s,s:i,s:o,s:i,s:I,s:s}", "session_id", s->id, "gpu_index",
                             s->gpu_index, "sm_groups", groups, "sm_count", s->sm_count,
                             "memory_quota", (json_int_t)s->memory_quota, "vm_id", s->vm_id);
    if (mode)   /* restore: from its state file there; receive: streamed (api_checkpoint.c) */
        json_object_set_new(body, mode, json_true());
    if (s->token_epoch) {   /* its tokens were revoked: the key of its epoch (api_tokens.c) */
        char hex[2 * 64 + 1];
        if (session_signing_key_hex(node, s->id, s->token_epoch, hex, sizeof hex) < 0) {
            json_decref(body);
            snprintf(err, errlen, "node %s has no valid session key", node->id);
            return -1;
        }
        json_object_set_new(body, "session_key", json_string(hex));
        OPENSSL_cleanse(hex, sizeof hex);
    }
    long status;
    *ans = NULL;
    int rc = flyt_http_call_timeout("POST", url, node->manager_token, body,
                                    clm->set.server_start_timeout_ms, &status, ans, err, errlen);
    json_decref(body);
    if (rc < 0)
        return -1;
    if (status < 200 || status > 202) {
        json_decref(*ans);
        *ans = NULL;
        return -1;   /* err says "HTTP <status> <code>: <message>" */
    }
    return 0;
}

int node_receive_server(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                        char *address, size_t addrlen, char *secret, size_t secretlen, char *err,
                        size_t errlen)
{
    json_t *ans;
    if (servers_post(clm, node, s, "receive", &ans, err, errlen) != 0)
        return -1;
    const char *a = json_string_value(json_object_get(ans, "state_address"));
    const char *k = json_string_value(json_object_get(ans, "secret"));
    int rc = a && k && strlen(a) < addrlen && strlen(k) < secretlen ? 0 : -1;
    if (rc == 0) {
        snprintf(address, addrlen, "%s", a);
        snprintf(secret, secretlen, "%s", k);
    } else { /* a node manager that does not know "receive" started a plain server */
        snprintf(err, errlen, "node %s cannot take a streamed state (no state_address)", node->id);
        struct stop_list stops = {0};
        stop_list_add(&stops, node, s->id);
        stop_list_run(&stops);
    }
    json_decref(ans);
    return rc;
}

int node_start_server(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                      int restore, char *endpoint, size_t eplen, long long *server_pid, char *err,
                      size_t errlen)
{
    json_t *ans;
    if (servers_post(clm, node, s, restore ? "restore" : NULL, &ans, err, errlen) != 0)
        return -1;
    const char *ep = json_string_value(json_object_get(ans, "endpoint"));
    json_t *pid = json_object_get(ans, "pid");
    if (!ep || !*ep || strlen(ep) >= eplen) {
        snprintf(err, errlen, "node %s answered without a valid \"endpoint\"", node->id);
        json_decref(ans);
        return -1;
    }
    snprintf(endpoint, eplen, "%s", ep);
    *server_pid = json_is_integer(pid) ? json_integer_value(pid) : 0;
    json_decref(ans);
    return 0;
}

void clm_test_step(const char *step)
{
    const char *at = getenv("FLYT_CLM_TEST_KILL_AT");
    if (at && strcmp(at, step) == 0) {
        flyt_warn("test hook FLYT_CLM_TEST_KILL_AT=%s: killing this process (SIGKILL)", step);
        raise(SIGKILL);
    }
}

/* Lock held: the sessions a previous run left "starting" end "failed". */
static int recover_locked(struct clm *clm, char *err, size_t errlen)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct session_filter f = {.by_state = 1, .state = SESSION_STARTING};
    struct session_rec *ss;
    int n;
    if (store_begin(clm->store, err, errlen) < 0)
        return -1;
    if (store_session_list(clm->store, &f, &ss, &n, err, errlen) < 0) {
        store_rollback(clm->store);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (session_end(clm, &ss[i], SESSION_FAILED,
                        "the cluster manager restarted while its server was starting", err,
                        errlen) < 0) {
            free(ss);
            store_rollback(clm->store);
            return -1;
        }
    free(ss);
    if (n)
        flyt_info("%d session(s) left starting by the previous run failed; their nodes stop "
                  "them at their next heartbeat", n);
    return store_commit(clm->store, err, errlen);
}

int lifecycle_recover(struct clm *clm, char *err, size_t errlen)
{
    pthread_mutex_lock(&clm->lock);   /* nothing else runs yet: the lock is for the asserts */
    int rc = recover_locked(clm, err, errlen);
    pthread_mutex_unlock(&clm->lock);
    return rc;
}

/* Since when the manager has been able to hear every node: heartbeats missed before then
 * may have been lost by the manager itself, so they do not count against a node. Deaf
 * were: the time before this process started; the moment the API last refused a
 * connection at its limits (a flood of slow clients: the heartbeat may have been the one
 * refused); the moment this timer found it had not run for a heartbeat interval (the
 * process was starved or stopped, and heartbeats may be queued unread). A flood that never
 * ends postpones node losses for as long: the safe side, since a loss ends sessions. */
static long long hearing_since(struct clm *clm, long long now)
{
    if (clm->last_tick_ms && now - clm->last_tick_ms > clm->set.heartbeat_interval_ms)
        clm->late_ms = now;
    clm->last_tick_ms = now;
    long long since = clm->started_ms;
    long long refused = flyt_http_refused_at(clm->http);
    if (refused > since)
        since = refused;
    if (clm->late_ms > since)
        since = clm->late_ms;
    return since;
}

/* The node has been silent past node_timeout, but not for that long since the manager
 * could hear it: say so, at most every 10 s. */
static void note_deaf(struct clm *clm, const struct node_rec *n, long long now, long long since)
{
    if (clm->deaf_logged_ms && now - clm->deaf_logged_ms < 10000)
        return;
    clm->deaf_logged_ms = now;
    flyt_warn("node %s: no heartbeat for %lld ms, but the manager itself could not hear "
              "%lld ms ago (API connections refused at their limits, or this process late): "
              "not lost unless silent for node_timeout after that",
              n->id, now - n->last_heartbeat, now - since);
}

void lifecycle_tick(struct clm *clm)
{
    char err[512];
    struct node_rec *nodes;
    int n;
    long long now = now_ms();
    long long hearing = hearing_since(clm, now);
    pthread_mutex_lock(&clm->lock);
    if (store_begin(clm->store, err, sizeof err) < 0) {
        flyt_error("timer: %s", err);
        pthread_mutex_unlock(&clm->lock);
        return;
    }
    int ok = store_node_list(clm->store, &nodes, &n, err, sizeof err) >= 0;
    for (int i = 0; ok && i < n; i++) {
        if (nodes[i].state != NODE_READY && nodes[i].state != NODE_DRAINING)
            continue;
        /* after a restart (or any deaf spell) every node gets a full node_timeout */
        long long seen = nodes[i].last_heartbeat > hearing ? nodes[i].last_heartbeat : hearing;
        if (now - seen > clm->set.node_timeout_ms) {
            char why[128];
            snprintf(why, sizeof why, "no heartbeat for %lld ms", now - seen);
            ok = node_mark_lost(clm, &nodes[i], why, err, sizeof err) >= 0;
        } else if (now - nodes[i].last_heartbeat > clm->set.node_timeout_ms) {
            note_deaf(clm, &nodes[i], now, hearing);
        }
    }
    free(nodes);
    if (!ok) {
        flyt_error("timer: %s", err);
        store_rollback(clm->store);
    } else if (store_commit(clm->store, err, sizeof err) < 0) {
        flyt_error("timer: %s", err);
    }
    pthread_mutex_unlock(&clm->lock);
}

static void *timer_main(void *arg)
{
    struct clm *clm = arg;
    long long period = clm->set.heartbeat_interval_ms / 2;
    if (period > 1000)
        period = 1000;
    if (period < 50)
        period = 50;
    pthread_mutex_lock(&clm->timer_lock);
    while (!clm->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += period / 1000;
        ts.tv_nsec += (period % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        int rc = pthread_cond_timedwait(&clm->timer_cond, &clm->timer_lock, &ts);
        if (clm->stopping)
            break;
        if (rc == ETIMEDOUT) {
            pthread_mutex_unlock(&clm->timer_lock);
            lifecycle_tick(clm);
            migrations_recover(clm);
            requests_retry(clm);
            pthread_mutex_lock(&clm->timer_lock);
        }
    }
    pthread_mutex_unlock(&clm->timer_lock);
    return NULL;
}

int lifecycle_start(struct clm *clm)
{
    clm->stopping = 0;
    return pthread_create(&clm->timer, NULL, timer_main, clm) == 0 ? 0 : -1;
}

void lifecycle_stop(struct clm *clm)
{
    pthread_mutex_lock(&clm->timer_lock);
    clm->stopping = 1;
    pthread_cond_signal(&clm->timer_cond);
    pthread_mutex_unlock(&clm->timer_lock);
    pthread_join(clm->timer, NULL);
}
