/* /v1/sessions: allocation (VM token), release (VM or operator), listing (operator; a VM
 * lists only its own, which its client manager reconciles with after a restart).
 * POST places the VM's share, records the session "starting" (which reserves its SM
 * groups and memory), asks the node manager for a server without holding the lock, then
 * records it "active" with its endpoint, or "failed". */
#include "clm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void h_sessions_list(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct session_filter f = {.vm_id = flyt_http_query(req, "vm"),
                               .node_id = flyt_http_query(req, "node")};
    const char *state = flyt_http_query(req, "state");
    struct session_rec *ss = NULL;
    int n = 0;
    char err[512];
    if (state && strcmp(state, "live") == 0)
        f.live_only = 1;
    else if (state)
        f.by_state = session_state_parse(state, &f.state) == 0;
    if (state && !f.live_only && !f.by_state) {
        flyt_http_reply_error(res, 400, "bad_request", "state: expected starting, active, "
                              "released, lost, failed, suspended, migrating or live");
        return;
    }
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR | P_VM, &who, &e);
    if (rc == 0 && who.kind == P_VM) {
        if (f.vm_id && strcmp(f.vm_id, who.id) != 0)
            rc = api_fail(&e, 403, "forbidden", "a VM lists only its own sessions");
        f.vm_id = who.id;
    }
    if (rc == 0 && store_session_list(clm->store, &f, &ss, &n, err, sizeof err) < 0)
        rc = api_store_fail(&e, "listing sessions", err);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, session_json(&ss[i]));
    free(ss);
    flyt_http_reply_json(res, 200, json_pack("{s:o}", "sessions", arr));
}

void h_session_get(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct session_rec s;
    char err[512];
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0) {
        int found = store_session_get(clm->store, req->params[0], &s, err, sizeof err);
        if (found < 0)
            rc = api_store_fail(&e, "reading a session", err);
        else if (!found)
            rc = api_fail(&e, 404, "not_found", "no session %s", req->params[0]);
    }
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:o}", "session", session_json(&s)));
}

/* Loads the session for a VM or operator call; a VM may touch only its own. */
static int own_session(struct clm *clm, const struct flyt_http_request *req, unsigned allowed,
                       struct principal *who, struct session_rec *s, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    if (auth_check(clm, req, allowed, who, e) < 0)
        return -1;
    int found = store_session_get(clm->store, req->params[0], s, err, sizeof err);
    if (found < 0)
        return api_store_fail(e, "reading a session", err);
    if (!found)
        return api_fail(e, 404, "not_found", "no session %s", req->params[0]);
    if (who->kind == P_VM && strcmp(s->vm_id, who->id) != 0)
        return api_fail(e, 403, "forbidden", "session %s belongs to another VM", s->id);
    return 0;
}

void h_session_delete(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct session_rec s;
    struct stop_list stops = {0};
    char err[512];
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = own_session(clm, req, P_OPERATOR | P_VM, &who, &s, &e);
    if (rc == 0 && session_is_live(&s)) {
        struct node_rec node;
        if (session_end(clm, &s, SESSION_RELEASED,
                        who.kind == P_VM ? "released by its VM" : "released by the operator", err,
                        sizeof err) < 0)
            rc = api_store_fail(&e, "ending a session", err);
        else if (store_node_get(clm->store, s.node_id, &node, err, sizeof err) > 0)
            stop_list_add(&stops, &node, s.id);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        free(stops.items);
        api_reply_error(res, &e);
        return;
    }
    stop_list_run(&stops);
    flyt_http_reply_status(res, 204);
}

void h_session_alive(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    struct session_rec s;
    char err[512];
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = own_session(clm, req, P_VM, &who, &s, &e);
    if (rc == 0 && !session_is_live(&s) && s.state != SESSION_SUSPENDED)
        rc = api_fail(&e, 409, "conflict", "session %s has ended (%s)", s.id, s.end_reason);
    if (rc == 0) {
        s.last_activity = now_ms();
        if (store_session_update(clm->store, &s, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a session", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_status(res, 204);
}

/* The session token for s, signed with its node's session key. */
static int make_token(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                      char *out, size_t outlen)
{
    unsigned char key[64];
    size_t klen;
    if (session_signing_key(node, s->id, s->token_epoch, key, sizeof key, &klen) < 0)
        return -1;
    long long expiry = (now_ms() + clm->set.session_token_ttl_ms) / 1000;
    int rc = flyt_session_token_make(key, klen, s->id, expiry, out, outlen);
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* Records s "starting" for process pid of share's VM, on share's node, GPU, SM groups
 * and memory quota (which reserves them unless the VM already holds them). */
static int record_starting(struct clm *clm, const struct session_rec *share, long long pid,
                           json_t *proc, struct session_rec *s, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    memset(s, 0, sizeof *s);
    new_id("s-", s->id, sizeof s->id);
    snprintf(s->vm_id, sizeof s->vm_id, "%s", share->vm_id);
    snprintf(s->node_id, sizeof s->node_id, "%s", share->node_id);
    s->pid = pid;
    if (proc)
        snprintf(s->process, sizeof s->process, "%s", json_string_value(proc));
    s->gpu_index = share->gpu_index;
    s->sm_count = share->sm_count;
    s->ngroups = share->ngroups;
    memcpy(s->groups, share->groups, sizeof s->groups[0] * (size_t)share->ngroups);
    s->memory_quota = share->memory_quota;
    s->state = SESSION_STARTING;
    s->created_at = s->last_activity = now_ms();
    if (store_session_insert(clm->store, s, err, sizeof err) < 0)
        return api_store_fail(e, "recording a session", err);
    return 0;
}

/* A further process of a VM that holds a share (one of its live sessions, share): its
 * session runs on the same node, GPU, SM groups and memory quota, so the VM's processes
 * together never hold more than its share (capacity.c counts a VM once per GPU). */
static int join_vm_share(struct clm *clm, const struct session_rec *share, long long pid,
                         json_t *proc, struct session_rec *s, struct node_rec *node,
                         struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    if (node_load(clm, share->node_id, node, e) < 0)
        return -1;
    if (node->state != NODE_READY)
        return api_fail(e, 409, "no_capacity", "VM %s holds its share on node %s, which is %s",
                        share->vm_id, node->id, node_state_name(node->state));
    return record_starting(clm, share, pid, proc, s, e);
}

/* Phase 1, under the lock: checks, placement (or the VM's share), the "starting" record. */
static int reserve(struct clm *clm, const struct flyt_http_request *req, struct session_rec *s,
                   struct node_rec *node, int *existing, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct principal who;
    struct vm_rec vm;
    char err[512];
    if (auth_check(clm, req, P_VM, &who, e) < 0)
        return -1;
    json_t *pid = json_object_get(req->body, "pid"), *proc = json_object_get(req->body, "process");
    if (!json_is_object(req->body))
        return api_fail(e, 400, "bad_request", "body: expected {\"pid\", \"process\"?}");
    const char *key;
    json_t *v;
    json_object_foreach(req->body, key, v)
        if (strcmp(key, "pid") != 0 && strcmp(key, "process") != 0)
            return api_fail(e, 400, "bad_request", "unknown field \"%s\"", key);
    if (!json_is_integer(pid) || json_integer_value(pid) < 1 || json_integer_value(pid) > 1LL << 32)
        return api_fail(e, 400, "bad_request", "pid: expected the process id, a positive integer");
    if (proc && (!json_is_string(proc) || strlen(json_string_value(proc)) >= sizeof s->process))
        return api_fail(e, 400, "bad_request", "process: expected a string under %zu characters",
                        sizeof s->process);
    int found = store_vm_get(clm->store, who.id, &vm, err, sizeof err);
    if (found <= 0)
        return found < 0 ? api_store_fail(e, "reading a VM", err)
                         : api_fail(e, 404, "not_found", "no VM %s", who.id);
    /* a retry for a process that already holds a session gets that session back */
    struct session_filter f = {.vm_id = vm.id};
    struct session_rec *ss;
    int ns;
    if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
        return api_store_fail(e, "reading sessions", err);
    for (int i = 0; i < ns; i++)
        if (ss[i].pid == json_integer_value(pid)
            && (session_is_live(&ss[i]) || ss[i].state == SESSION_SUSPENDED)) {
            *s = ss[i];
            free(ss);
            /* moving or preempted: the process waits (its client manager asks again) */
            if (s->state == SESSION_MIGRATING || s->state == SESSION_SUSPENDED)
                return api_fail(e, 503, "unavailable", "session %s of process %lld is %s; ask "
                                "again", s->id, s->pid, session_state_name(s->state));
            if (s->state != SESSION_ACTIVE)
                return api_fail(e, 409, "conflict", "process %lld of VM %s already has session "
                                "%s, still starting", s->pid, vm.id, s->id);
            *existing = 1;
            found = store_node_get(clm->store, s->node_id, node, err, sizeof err);
            return found > 0 ? 0 : found < 0 ? api_store_fail(e, "reading a node", err)
                                             : api_fail(e, 404, "not_found", "no node %s", s->node_id);
        }
    /* the VM already holds its share: this process joins it, taking nothing more */
    /* (the list holds ended and suspended sessions too: they hold no share) */
    struct session_rec held;
    int joins = 0;
    for (int i = 0; i < ns && !joins; i++)
        if (session_is_live(&ss[i])) {
            held = ss[i];
            joins = 1;
        }
    free(ss);
    if (joins)
        return join_vm_share(clm, &held, json_integer_value(pid), proc, s, node, e);

    /* placement over the ready nodes' GPUs */
    struct node_rec *nodes;
    int nn;
    if (store_node_list(clm->store, &nodes, &nn, err, sizeof err) < 0)
        return api_store_fail(e, "reading nodes", err);
    int ready = 0;
    for (int i = 0; i < nn; i++)
        if (nodes[i].state == NODE_READY)   /* not lost, not draining */
            nodes[ready++] = nodes[i];
    struct gpu_cap *caps;
    int ncaps;
    if (capacity_build(clm, nodes, ready, &caps, &ncaps, err, sizeof err) < 0) {
        free(nodes);
        return api_store_fail(e, "reading capacity", err);
    }
    struct placement_request pr = {vm.compute_units, vm.memory, vm.host_ip, clm->set.policy,
                                   clm->set.overcommit};
    struct placement_result out;
    int placed = placement_choose(caps, ncaps, &pr, &out);
    if (placed < 0) {
        free(nodes);
        free(caps);
        return api_fail(e, 409, "no_capacity", "VM %s: %s", vm.id, out.reason);
    }
    const struct gpu_cap *c = &caps[out.gpu];
    for (int i = 0; i < ready; i++)
        if (strcmp(nodes[i].id, c->node_id) == 0)
            *node = nodes[i];
    struct session_rec share = {0};
    snprintf(share.vm_id, sizeof share.vm_id, "%s", vm.id);
    snprintf(share.node_id, sizeof share.node_id, "%s", c->node_id);
    share.gpu_index = c->index;
    share.sm_count = out.sm_count;
    share.ngroups = out.ngroups;
    memcpy(share.groups, out.groups, sizeof share.groups[0] * (size_t)out.ngroups);
    share.memory_quota = vm.memory;
    free(nodes);
    free(caps);
    return record_starting(clm, &share, json_integer_value(pid), proc, s, e);
}

/* Phase 3, under the lock: the outcome of the node's answer. */
static int settle(struct clm *clm, struct session_rec *s, int started, const char *why,
                  struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    struct session_rec now;
    int found = store_session_get(clm->store, s->id, &now, err, sizeof err);
    if (found <= 0)
        return found < 0 ? api_store_fail(e, "reading a session", err)
                         : api_fail(e, 500, "internal", "session %s vanished", s->id);
    if (now.state != SESSION_STARTING)   /* ended meanwhile: node lost, VM deleted ... */
        return api_fail(e, 503, "unavailable", "session %s ended while its server started: %s",
                        s->id, now.end_reason);
    if (!started) {
        char reason[400];
        snprintf(reason, sizeof reason, "the node could not start the server: %.300s", why);
        if (session_end(clm, &now, SESSION_FAILED, reason, err, sizeof err) < 0)
            return api_store_fail(e, "ending a session", err);
        return api_fail(e, 503, "unavailable", "node %s could not start a server for VM %s: %s",
                        s->node_id, s->vm_id, why);
    }
    now.state = SESSION_ACTIVE;
    snprintf(now.endpoint, sizeof now.endpoint, "%s", s->endpoint);
    now.server_pid = s->server_pid;
    now.last_activity = now_ms();
    char msg[512], mem[64];
    format_bytes(now.memory_quota, mem, sizeof mem);
    snprintf(msg, sizeof msg, "VM %s pid %lld: %d SMs (groups of %s/%d) and %s at %s", now.vm_id,
             now.pid, now.sm_count, now.node_id, now.gpu_index, mem, now.endpoint);
    if (store_session_update(clm->store, &now, err, sizeof err) < 0
        || store_event_add(clm->store, "session.allocated", now.id, msg, err, sizeof err) < 0)
        return api_store_fail(e, "recording a session", err);
    flyt_info("session.allocated %s: %s", now.id, msg);
    *s = now;
    return 0;
}

void h_sessions_create(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct session_rec s;
    struct node_rec node;
    int existing = 0;
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = reserve(clm, req, &s, &node, &existing, &e);
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    if (!existing) {
        char why[512] = "";
        int started = node_start_server(clm, &node, &s, 0, s.endpoint, sizeof s.endpoint,
                                        &s.server_pid, why, sizeof why) == 0;
        if (!started)
            flyt_warn("session %s: node %s: %s", s.id, node.id, why);
        struct stop_list stops = {0};
        if (clm_begin(clm, &e) < 0) {
            api_reply_error(res, &e);
            return;
        }
        rc = settle(clm, &s, started, why, &e);
        /* a 503 still commits: the session's end (failed) is recorded */
        if (clm_end(clm, rc == 0 || e.status == 503, &e) < 0)
            rc = -1;
        if (rc < 0 && started) {   /* a server nobody will use */
            stop_list_add(&stops, &node, s.id);
            stop_list_run(&stops);
        }
        if (rc < 0) {
            api_reply_error(res, &e);
            return;
        }
    }
    char token[256];
    if (make_token(clm, &node, &s, token, sizeof token) < 0) {
        flyt_http_reply_error(res, 500, "internal", "cannot make the session token");
        return;
    }
    flyt_http_reply_json(res, existing ? 200 : 201,
                         json_pack("{s:o,s:s}", "session", session_json(&s), "token", token));
}
