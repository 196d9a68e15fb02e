/*
 * Checkpoint, restore, migration and node drain (docs/api.md, "Checkpoint, restore,
 * migration"). State files move between nodes through this manager in chunks of
 * CHUNK bytes (no shared file system): GET from one node manager, PUT to the other.
 *
 * Operations in flight live in a small table here (ops), one per session: a second
 * one on the same session is refused (409). A migration runs on a thread of its own;
 * its progress and outcome stay in the table for GET .../migration. A session being
 * migrated, or checkpointed with stop, is "migrating" in the store (live: it keeps its
 * source share); a preempted one is "suspended" (no share: a restore places it anew).
 *
 * The target's share is reserved in the store (store.h, reservation_rec) in the same
 * transaction that places it, so that no other placement takes it, until the session runs
 * there (record_running drops it in its transaction) or the operation ends otherwise. A
 * migration's reservation also says what to finish or undo after a restart of this
 * manager (migrations_recover).
 */
#include "clm.h"

#include "flyt_log.h"

#include <openssl/crypto.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (512 * 1024)
#define OP_IDLE_MS (10LL * 60 * 1000)   /* a restore upload nobody continues expires */
#define CKPT_CALL_MS (10L * 60 * 1000)

enum op_kind { OP_CHECKPOINT, OP_RESTORE, OP_MIGRATE };

/* Where a session is to run: a node, a GPU and a share on it. */
struct target {
    struct node_rec node;
    int gpu_index, sm_count, ngroups, groups[MAX_SM_GROUPS];
    long long memory_quota;
};

struct op {
    char sid[ID_MAX];
    enum op_kind kind;
    int done, ok;
    long long touched;
    struct target to, from;
    char phase[32];
    int stream;   /* a migration streams the state to a receiving server (else: copies it) */
    long long bytes, total, downtime_ms;
    char endpoint[ADDR_MAX], message[768];
    struct clm *clm;
    struct op *next;
};

static pthread_mutex_t ops_lock = PTHREAD_MUTEX_INITIALIZER;
static struct op *ops;

static struct op *op_find_locked(const char *sid)
{
    for (struct op *o = ops; o; o = o->next)
        if (strcmp(o->sid, sid) == 0)
            return o;
    return NULL;
}

static int op_busy_locked(const struct op *o)
{
    return o && !o->done && (o->kind != OP_RESTORE || now_ms() - o->touched < OP_IDLE_MS);
}

int ckpt_session_busy(const char *session_id)
{
    pthread_mutex_lock(&ops_lock);
    int busy = op_busy_locked(op_find_locked(session_id));
    pthread_mutex_unlock(&ops_lock);
    return busy;
}

static void op_remove_locked(struct op *o)
{
    for (struct op **p = &ops; *p; p = &(*p)->next)
        if (*p == o) {
            *p = o->next;
            free(o);
            return;
        }
}

/* A new operation on sid, or NULL (409 in e) while another one runs. */
static struct op *op_claim(const char *sid, enum op_kind kind, struct api_error *e)
{
    pthread_mutex_lock(&ops_lock);
    struct op *o = op_find_locked(sid);
    if (op_busy_locked(o)) {
        static const char *const names[] = {"checkpoint", "restore", "migration"};
        api_fail(e, 409, "conflict", "session %s: a %s is already in progress", sid,
                 names[o->kind]);
        pthread_mutex_unlock(&ops_lock);
        return NULL;
    }
    if (o)
        op_remove_locked(o);
    o = calloc(1, sizeof *o);
    if (o) {
        snprintf(o->sid, sizeof o->sid, "%s", sid);
        o->kind = kind;
        o->touched = now_ms();
        snprintf(o->phase, sizeof o->phase, "starting");
        o->next = ops;
        ops = o;
    } else {
        api_fail(e, 500, "internal", "out of memory");
    }
    pthread_mutex_unlock(&ops_lock);
    return o;
}

static void op_drop(struct op *o)
{
    pthread_mutex_lock(&ops_lock);
    op_remove_locked(o);
    pthread_mutex_unlock(&ops_lock);
}

static void op_phase(struct op *o, const char *phase)
{
    pthread_mutex_lock(&ops_lock);
    snprintf(o->phase, sizeof o->phase, "%s", phase);
    o->touched = now_ms();
    pthread_mutex_unlock(&ops_lock);
}

static json_t *op_json_locked(const struct op *o)
{
    return json_pack("{s:s,s:s,s:b,s:b,s:s,s:s,s:i,s:I,s:I,s:I,s:s,s:s,s:s}", "session_id",
                     o->sid, "phase", o->phase, "done", o->done, "ok", o->ok, "from_node",
                     o->from.node.id, "to_node", o->to.node.id, "to_gpu", o->to.gpu_index,
                     "bytes", (json_int_t)o->bytes, "total", (json_int_t)o->total, "downtime_ms",
                     (json_int_t)o->downtime_ms, "endpoint", o->endpoint, "message", o->message,
                     "via", o->stream ? "stream" : "file");
}

/* ---- shared steps ---- */

/* The operator's session, with its node (lock held). */
static int load_session(struct clm *clm, const struct flyt_http_request *req,
                        struct session_rec *s, struct node_rec *node, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct principal who;
    char err[512];
    if (auth_check(clm, req, P_OPERATOR, &who, e) < 0)
        return -1;
    int found = store_session_get(clm->store, req->params[0], s, err, sizeof err);
    if (found <= 0)
        return found < 0 ? api_store_fail(e, "reading a session", err)
                         : api_fail(e, 404, "not_found", "no session %s", req->params[0]);
    return node ? node_load(clm, s->node_id, node, e) : 0;
}

/* The share s holds now, on its node, as a target. */
static void target_of(const struct session_rec *s, const struct node_rec *node, struct target *t)
{
    t->node = *node;
    t->gpu_index = s->gpu_index;
    t->sm_count = s->sm_count;
    t->ngroups = s->ngroups;
    memcpy(t->groups, s->groups, sizeof t->groups[0] * (size_t)s->ngroups);
    t->memory_quota = s->memory_quota;
}

/* Reserves t for s (a migration from `from`, or a restore when from is NULL). In a
 * transaction. */
static int reserve(struct clm *clm, const struct session_rec *s, const struct target *t,
                   const struct target *from, int stream, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    struct reservation_rec r = {0};
    char err[512];
    snprintf(r.session_id, sizeof r.session_id, "%s", s->id);
    snprintf(r.vm_id, sizeof r.vm_id, "%s", s->vm_id);
    snprintf(r.node_id, sizeof r.node_id, "%s", t->node.id);
    r.kind = from ? RES_MIGRATE : RES_RESTORE;
    r.gpu_index = t->gpu_index;
    r.sm_count = t->sm_count;
    r.ngroups = t->ngroups;
    memcpy(r.groups, t->groups, sizeof r.groups[0] * (size_t)t->ngroups);
    r.memory_quota = t->memory_quota;
    if (from)
        snprintf(r.from_node, sizeof r.from_node, "%s", from->node.id);
    r.stream = stream;
    if (store_reservation_put(clm->store, &r, err, sizeof err) < 0)
        return api_store_fail(e, "reserving the target's share", err);
    return 0;
}

/* Drops sid's reservation, if any (takes the lock). */
static void reservation_release(struct clm *clm, const char *sid)
{
    struct api_error e = {0};
    char err[512];
    if (clm_begin(clm, &e) < 0)
        return;
    int rc = store_reservation_delete(clm->store, sid, err, sizeof err) < 0
             ? api_store_fail(&e, "releasing a reservation", err) : 0;
    if (clm_end(clm, rc == 0, &e) < 0)
        flyt_error("session %s: cannot release its reservation: %s", sid, e.message);
}

/* A node's GPU as its node manager reported it (zeroed when the node no longer says). */
static void gpu_of(struct clm *clm, const char *node_id, int index, struct gpu_rec *out)
{
    char err[512];
    struct gpu_rec *gpus = NULL;
    int n = 0;
    memset(out, 0, sizeof *out);
    if (store_gpus_get(clm->store, node_id, &gpus, &n, err, sizeof err) < 0)
        n = 0; /* unknown: no preference, the target's own check still holds */
    for (int i = 0; i < n; i++)
        if (gpus[i].index == index)
            *out = gpus[i];
    free(gpus);
}

/* Whether that GPU can take s's state: of s's GPU's architecture, or either unknown. */
static int takes_state_of(struct clm *clm, const struct session_rec *s, const char *node_id,
                          int index)
{
    struct gpu_rec mine, theirs;
    gpu_of(clm, s->node_id, s->gpu_index, &mine);
    gpu_of(clm, node_id, index, &theirs);
    return !mine.compute_capability || !theirs.compute_capability ||
           mine.compute_capability == theirs.compute_capability;
}

/* As join_vm_elsewhere, for a share reserved for another session of s's VM that is
 * moving there (a drain moves a VM's sessions one after the other). */
static int join_vm_reserved(struct clm *clm, const struct session_rec *s, const char *node,
                            int gpu, struct target *t, struct api_error *e)
{
    char err[512];
    struct reservation_rec *rs;
    int nr, found = 0;
    if (store_reservation_list(clm->store, NULL, &rs, &nr, err, sizeof err) < 0)
        return api_store_fail(e, "reading reservations", err);
    for (int i = 0; i < nr && !found; i++) {
        struct node_rec n;
        if (strcmp(rs[i].vm_id, s->vm_id) != 0 || strcmp(rs[i].session_id, s->id) == 0
            || strcmp(rs[i].node_id, s->node_id) == 0 || (node && strcmp(rs[i].node_id, node) != 0)
            || (gpu >= 0 && rs[i].gpu_index != gpu)
            || !takes_state_of(clm, s, rs[i].node_id, rs[i].gpu_index))
            continue;
        if (store_node_get(clm->store, rs[i].node_id, &n, err, sizeof err) > 0
            && n.state == NODE_READY) {
            t->node = n;
            t->gpu_index = rs[i].gpu_index;
            t->sm_count = rs[i].sm_count;
            t->ngroups = rs[i].ngroups;
            memcpy(t->groups, rs[i].groups, sizeof t->groups[0] * (size_t)rs[i].ngroups);
            t->memory_quota = rs[i].memory_quota;
            found = 1;
        }
    }
    free(rs);
    return found;
}

/* A VM's processes share one share (api_sessions.c): when another live session of s's
 * VM already runs on a ready node other than s's (one moved before it: a drain moves
 * them one by one) on a GPU that can take s's state, s joins that share, as a further
 * process of the VM would. 1 with t, 0 when there is none to join, -1 with e. */
static int join_vm_elsewhere(struct clm *clm, const struct session_rec *s, const char *node,
                             int gpu, struct target *t, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    struct session_filter f = {.vm_id = s->vm_id, .live_only = 1};
    struct session_rec *ss;
    int ns, found = 0;
    if (store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
        return api_store_fail(e, "reading sessions", err);
    for (int i = 0; i < ns && !found; i++) {
        struct node_rec n;
        if (strcmp(ss[i].id, s->id) == 0 || strcmp(ss[i].node_id, s->node_id) == 0 ||
            (node && strcmp(ss[i].node_id, node) != 0) || (gpu >= 0 && ss[i].gpu_index != gpu) ||
            !takes_state_of(clm, s, ss[i].node_id, ss[i].gpu_index))
            continue;
        if (store_node_get(clm->store, ss[i].node_id, &n, err, sizeof err) > 0 &&
            n.state == NODE_READY) {
            target_of(&ss[i], &n, t);
            found = 1;
        }
    }
    free(ss);
    return found ? 1 : join_vm_reserved(clm, s, node, gpu, t, e);
}

/* The client cut the session's kernel images to its GPU's architecture, and a server of
 * another refuses the state (the session staying on its source): GPUs whose capability is
 * known to differ are left out. Returns how many remain in caps[0..n). */
static int same_architecture(struct gpu_cap *caps, int n, int cc)
{
    int keep = 0;
    for (int i = 0; i < n; i++)
        if (!cc || !caps[i].compute_capability || caps[i].compute_capability == cc)
            caps[keep++] = caps[i];
    return keep;
}

/* caps[0..n) reordered with the GPUs of `model` first; their count. */
static int same_model_first(struct gpu_cap *caps, int n, const char *model)
{
    int same = 0;
    for (int i = 0; model[0] && i < n; i++)
        if (strcmp(caps[i].name, model) == 0) {
            struct gpu_cap keep = caps[i];
            memmove(&caps[same + 1], &caps[same], sizeof *caps * (size_t)(i - same));
            caps[same++] = keep;
        }
    return same;
}

/* Placement of s's share (lock held): on node/gpu when given (gpu < 0: any), else on any
 * ready node but `avoid` (NULL: none); only GPUs of its architecture, its model's first. */
static int place(struct clm *clm, const struct session_rec *s, const char *node, int gpu,
                 const char *avoid, struct target *t, struct api_error *e)
{
    FLYT_ASSERT_HELD(&clm->lock);
    char err[512];
    int joined = join_vm_elsewhere(clm, s, node, gpu, t, e);
    if (joined != 0)
        return joined > 0 ? 0 : -1;
    struct node_rec *nodes;
    int nn, keep = 0;
    if (store_node_list(clm->store, &nodes, &nn, err, sizeof err) < 0)
        return api_store_fail(e, "reading nodes", err);
    for (int i = 0; i < nn; i++)
        if (nodes[i].state == NODE_READY && (node ? strcmp(nodes[i].id, node) == 0
                                                  : !avoid || strcmp(nodes[i].id, avoid) != 0))
            nodes[keep++] = nodes[i];
    struct gpu_cap *caps = NULL;
    int ncaps = 0, rc = 0;
    if (keep == 0)
        rc = api_fail(e, 409, "no_capacity", node ? "node %s is not ready (unknown, lost or "
                      "draining)" : "no other ready node for session %s", node ? node : s->id);
    else if (capacity_build(clm, nodes, keep, &caps, &ncaps, err, sizeof err) < 0)
        rc = api_store_fail(e, "reading capacity", err);
    int n = 0;
    for (int i = 0; rc == 0 && i < ncaps; i++)
        if (gpu < 0 || caps[i].index == gpu)
            caps[n++] = caps[i];
    struct gpu_rec src;
    gpu_of(clm, s->node_id, s->gpu_index, &src);
    int candidates = n;
    n = same_architecture(caps, n, src.compute_capability);
    int same = gpu < 0 ? same_model_first(caps, n, src.name) : 0;
    struct vm_rec vm = {0};
    if (rc == 0 && store_vm_get(clm->store, s->vm_id, &vm, err, sizeof err) < 0)
        rc = api_store_fail(e, "reading a VM", err);
    struct placement_request pr = {s->sm_count, s->memory_quota, vm.host_ip, clm->set.policy,
                                   clm->set.overcommit};
    struct placement_result out;
    if (rc == 0 && n == 0 && candidates > 0)
        rc = api_fail(e, 409, "no_capacity", "session %s: no GPU of compute capability %d.%d on "
                      "the chosen node(s), only others: its kernels were cut to its GPU's "
                      "architecture", s->id, src.compute_capability / 10,
                      src.compute_capability % 10);
    else if (rc == 0 && (n == 0 || ((same == 0 || placement_choose(caps, same, &pr, &out) < 0) &&
                                    placement_choose(caps, n, &pr, &out) < 0)))
        rc = api_fail(e, 409, "no_capacity", "session %s: %s", s->id,
                      n == 0 ? "no such GPU on the chosen node(s)" : out.reason);
    for (int i = 0; rc == 0 && i < keep; i++)
        if (strcmp(nodes[i].id, caps[out.gpu].node_id) == 0)
            t->node = nodes[i];
    if (rc == 0) {
        t->gpu_index = caps[out.gpu].index;
        t->sm_count = out.sm_count;
        t->ngroups = out.ngroups;
        memcpy(t->groups, out.groups, sizeof t->groups[0] * (size_t)out.ngroups);
        t->memory_quota = s->memory_quota;
    }
    free(nodes);
    free(caps);
    return rc;
}

/* One call to a node manager's API (without the lock); bytes both ways when raw. */
static int node_call(const struct node_rec *node, const char *method, const char *path,
                     json_t *body, long timeout_ms, json_t **ans, char *err, size_t errlen)
{
    char url[ADDR_MAX + 256];
    long status = 0;
    snprintf(url, sizeof url, "%s%s", node->address, path);
    int rc = flyt_http_call_timeout(method, url, node->manager_token, body, timeout_ms, &status,
                                    ans, err, errlen);
    return rc == 0 && status >= 200 && status < 300 ? 0 : -1;
}

static int node_bytes(const struct node_rec *node, const char *method, const char *path,
                      const char *data, size_t len, char **out, size_t *outlen, long *status,
                      char *err, size_t errlen)
{
    char url[ADDR_MAX + 256];
    snprintf(url, sizeof url, "%s%s", node->address, path);
    int rc = flyt_http_call_bytes(method, url, node->manager_token, data, len, 60000, status, out,
                                  outlen, err, errlen);
    return rc == 0 && *status >= 200 && *status < 300 ? 0 : -1;
}

/* Starts the server of sid on t, restored from its state file or (restore 0) afresh
 * (without the lock). */
static void session_on(const char *sid, const char *vm_id, const struct target *t,
                       struct session_rec *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", sid);
    snprintf(s->vm_id, sizeof s->vm_id, "%s", vm_id);
    s->gpu_index = t->gpu_index;
    s->sm_count = t->sm_count;
    s->ngroups = t->ngroups;
    memcpy(s->groups, t->groups, sizeof s->groups[0] * (size_t)t->ngroups);
    s->memory_quota = t->memory_quota;
}

static int start_server_on(struct clm *clm, const char *sid, const char *vm_id,
                           const struct target *t, int restore, char *endpoint, size_t eplen,
                           long long *server_pid, char *err, size_t errlen)
{
    struct session_rec s;
    session_on(sid, vm_id, t, &s);
    return node_start_server(clm, &t->node, &s, restore, endpoint, eplen, server_pid, err,
                             errlen);
}

/* Records sid active on t at endpoint and logs kind with msg (takes and leaves the lock). */
static int record_running(struct clm *clm, const char *sid, const struct target *t,
                          const char *endpoint, long long server_pid, const char *kind,
                          const char *msg, struct api_error *e)
{
    struct session_rec s;
    char err[512];
    if (clm_begin(clm, e) < 0)
        return -1;
    int found = store_session_get(clm->store, sid, &s, err, sizeof err);
    int rc = found > 0 ? 0 : found < 0 ? api_store_fail(e, "reading a session", err)
                                       : api_fail(e, 404, "not_found", "no session %s", sid);
    if (rc == 0 && (s.state == SESSION_RELEASED || s.state == SESSION_STARTING))
        rc = api_fail(e, 409, "conflict", "session %s was %s meanwhile", sid,
                      session_state_name(s.state));
    if (rc == 0) {
        snprintf(s.node_id, sizeof s.node_id, "%s", t->node.id);
        s.gpu_index = t->gpu_index;
        s.sm_count = t->sm_count;
        s.ngroups = t->ngroups;
        memcpy(s.groups, t->groups, sizeof s.groups[0] * (size_t)t->ngroups);
        s.memory_quota = t->memory_quota;
        snprintf(s.endpoint, sizeof s.endpoint, "%s", endpoint);
        s.server_pid = server_pid;
        s.state = SESSION_ACTIVE;
        s.last_activity = now_ms();
        s.ended_at = s.disconnected_since = 0;
        s.end_reason[0] = 0;
        if (store_session_move(clm->store, &s, err, sizeof err) < 0
            || store_session_update(clm->store, &s, err, sizeof err) < 0
            || store_reservation_delete(clm->store, sid, err, sizeof err) < 0)
            rc = api_store_fail(e, "recording a session", err);
    }
    if (rc == 0)
        rc = api_event(clm, kind, sid, e, "%s", msg);
    return clm_end(clm, rc == 0, e);
}

/* Sets sid's state (from `from` only; any when from < 0) and logs (takes the lock). */
static void record_state(struct clm *clm, const char *sid, int from, enum session_state to,
                         const char *kind, const char *msg)
{
    struct api_error e = {0};
    struct session_rec s;
    char err[512];
    if (clm_begin(clm, &e) < 0)
        return;
    int rc = store_session_get(clm->store, sid, &s, err, sizeof err) > 0 ? 0 : -1;
    if (rc == 0 && (from < 0 || s.state == (enum session_state)from)) {
        s.state = to;
        if (to == SESSION_SUSPENDED) {
            s.endpoint[0] = 0;
            s.server_pid = 0;
        }
        if (store_session_update(clm->store, &s, err, sizeof err) < 0
            || store_reservation_delete(clm->store, sid, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a session", err);
    }
    if (rc == 0 && kind)
        rc = api_event(clm, kind, sid, &e, "%s", msg);
    if (clm_end(clm, rc == 0, &e) < 0)
        flyt_error("session %s: cannot record %s: %s", sid, kind ? kind : "", e.message);
}

static void path_of(char *out, size_t len, const char *fmt, const char *sid)
{
    snprintf(out, len, fmt, sid);
}

/* ---- checkpoint ---- */

void h_session_checkpoint(void *ctx, const struct flyt_http_request *req,
                          struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct session_rec s;
    struct node_rec node;
    struct op *o = NULL;
    json_t *stopj = json_object_get(req->body, "stop");
    int stop = json_is_true(stopj);
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = load_session(clm, req, &s, &node, &e);
    if (rc == 0 && ((req->body && !json_is_object(req->body)) || (stopj && !json_is_boolean(stopj))))
        rc = api_fail(&e, 400, "bad_request", "body: expected {\"stop\": true|false}");
    if (rc == 0 && s.state != SESSION_ACTIVE)
        rc = api_fail(&e, 409, "conflict", "session %s is %s, not active", s.id,
                      session_state_name(s.state));
    if (rc == 0 && !(o = op_claim(s.id, OP_CHECKPOINT, &e)))
        rc = -1;
    if (rc == 0 && stop) {
        char err[512];
        s.state = SESSION_MIGRATING;   /* its server's end is expected from now on */
        if (store_session_update(clm->store, &s, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a session", err);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        if (o)
            op_drop(o);
        api_reply_error(res, &e);
        return;
    }
    char path[ID_MAX + 64], err[768];
    path_of(path, sizeof path, "/v1/servers/%s/checkpoint", s.id);
    /* a checkpoint that stops the session preempts it: its program waits for the restore */
    json_t *body = json_pack("{s:b,s:b}", "stop", stop, "suspend", stop), *ans = NULL;
    int ok = node_call(&node, "POST", path, body, CKPT_CALL_MS, &ans, err, sizeof err) == 0;
    json_decref(body);
    long long bytes = ok ? json_integer_value(json_object_get(ans, "bytes")) : 0;
    double ms = ok ? json_number_value(json_object_get(ans, "ms")) : 0;
    json_decref(ans);
    char msg[512];
    if (ok)
        snprintf(msg, sizeof msg, "checkpoint of %lld bytes on node %s in %.1f ms%s", bytes,
                 node.id, ms, stop ? "; the session is stopped (suspended)" : "");
    else
        snprintf(msg, sizeof msg, "checkpoint failed: %.400s", err);
    if (stop)
        record_state(clm, s.id, SESSION_MIGRATING, ok ? SESSION_SUSPENDED : SESSION_ACTIVE,
                     ok ? "session.suspended" : "session.checkpoint_failed", msg);
    else
        record_state(clm, s.id, SESSION_ACTIVE, SESSION_ACTIVE, ok ? "session.checkpointed"
                                                       : "session.checkpoint_failed", msg);
    op_drop(o);
    if (!ok) {
        flyt_http_reply_error(res, 409, "conflict", "session %s: %s", s.id, err);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:{s:s,s:s,s:I,s:f,s:b}}", "checkpoint",
                                             "session_id", s.id, "node", node.id, "bytes",
                                             (json_int_t)bytes, "ms", ms, "stopped", stop));
}

/* GET / DELETE the session's state file on its node, through this manager. */
static void state_proxy(struct clm *clm, const struct flyt_http_request *req,
                        struct flyt_http_response *res, const char *method)
{
    struct api_error e = {0};
    struct session_rec s;
    struct node_rec node;
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = load_session(clm, req, &s, &node, &e);
    if (clm_end(clm, rc == 0, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    char path[ID_MAX + 128], err[768];
    const char *off = flyt_http_query(req, "offset"), *len = flyt_http_query(req, "length");
    snprintf(path, sizeof path, "/v1/checkpoints/%s?offset=%lld&length=%lld", s.id,
             off ? atoll(off) : 0LL, len ? atoll(len) : (long long)CHUNK);
    char *data = NULL;
    size_t n = 0;
    long status = 0;
    if (node_bytes(&node, method, path, NULL, 0, &data, &n, &status, err, sizeof err) != 0) {
        flyt_http_reply_error(res, status == 404 ? 404 : 502, status == 404 ? "not_found"
                              : "unavailable", "node %s: %s", node.id, err);
        return;
    }
    if (strcmp(method, "DELETE") == 0) {
        free(data);
        flyt_http_reply_status(res, 204);
    } else {
        flyt_http_reply_bytes(res, 200, data, n);
    }
}

void h_session_state_get(void *ctx, const struct flyt_http_request *req,
                         struct flyt_http_response *res)
{
    state_proxy(ctx, req, res, "GET");
}

void h_session_state_delete(void *ctx, const struct flyt_http_request *req,
                            struct flyt_http_response *res)
{
    state_proxy(ctx, req, res, "DELETE");
}

/* ---- restore ---- */

/* "node" / "gpu_index" of a body (both optional). */
static int parse_where(json_t *body, const char **node, int *gpu, struct api_error *e)
{
    json_t *n = json_object_get(body, "node"), *g = json_object_get(body, "gpu_index");
    if ((body && !json_is_object(body)) || (n && !json_is_string(n)) ||
        (g && (!json_is_integer(g) || json_integer_value(g) < 0)))
        return api_fail(e, 400, "bad_request", "body: expected {\"node\"?: ID, \"gpu_index\"?: N}");
    *node = n ? json_string_value(n) : NULL;
    *gpu = g ? (int)json_integer_value(g) : -1;
    return 0;
}

void h_session_restore(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct session_rec s;
    struct target t;
    const char *node = NULL;
    int gpu = -1;
    struct op *o = NULL;
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = load_session(clm, req, &s, NULL, &e);
    if (rc == 0)
        rc = parse_where(req->body, &node, &gpu, &e);
    if (rc == 0 && session_is_live(&s))
        rc = api_fail(&e, 409, "conflict", "session %s is %s: checkpoint it with stop first",
                      s.id, session_state_name(s.state));
    char err[512];
    if (rc == 0 && !ckpt_session_busy(s.id)   /* an expired restore's share goes */
        && store_reservation_delete(clm->store, s.id, err, sizeof err) < 0)
        rc = api_store_fail(&e, "releasing a reservation", err);
    if (rc == 0)
        rc = place(clm, &s, node, gpu, NULL, &t, &e);
    if (rc == 0 && !(o = op_claim(s.id, OP_RESTORE, &e)))
        rc = -1;
    if (rc == 0)
        rc = reserve(clm, &s, &t, NULL, 0, &e);
    if (rc == 0) {
        pthread_mutex_lock(&ops_lock);
        o->to = t;
        snprintf(o->phase, sizeof o->phase, "upload");
        pthread_mutex_unlock(&ops_lock);
    }
    if (clm_end(clm, rc == 0, &e) < 0) {
        if (o)
            op_drop(o);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:{s:s,s:s,s:i,s:i,s:I}}", "restore",
                                             "session_id", s.id, "node", t.node.id, "gpu_index",
                                             t.gpu_index, "sm_count", t.sm_count, "memory_quota",
                                             (json_int_t)t.memory_quota));
}

/* The restore upload of the request's session (touched); -1 once answered. */
static int restore_target(const struct flyt_http_request *req, struct flyt_http_response *res,
                          struct clm *clm, struct target *t)
{
    struct api_error e = {0};
    struct principal who;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return -1;
    }
    pthread_mutex_lock(&ops_lock);
    struct op *o = op_find_locked(req->params[0]);
    int ok = o && o->kind == OP_RESTORE && op_busy_locked(o);
    if (ok) {
        *t = o->to;
        o->touched = now_ms();
    }
    pthread_mutex_unlock(&ops_lock);
    if (!ok)
        flyt_http_reply_error(res, 404, "not_found", "no restore of session %s in progress "
                              "(POST /v1/sessions/%s/restore first)", req->params[0],
                              req->params[0]);
    return ok ? 0 : -1;
}

void h_session_restore_data(void *ctx, const struct flyt_http_request *req,
                            struct flyt_http_response *res)
{
    struct target t;
    if (restore_target(req, res, ctx, &t) != 0)
        return;
    const char *off = flyt_http_query(req, "offset");
    char path[ID_MAX + 64], err[768];
    snprintf(path, sizeof path, "/v1/checkpoints/%s?offset=%lld", req->params[0],
             off ? atoll(off) : 0LL);
    char *ans = NULL;
    size_t n = 0;
    long status = 0;
    int rc = node_bytes(&t.node, "PUT", path, req->raw ? req->raw : "", req->raw_len, &ans, &n,
                        &status, err, sizeof err);
    free(ans);
    if (rc != 0) {
        flyt_http_reply_error(res, status == 409 ? 409 : 502, status == 409 ? "conflict"
                              : "unavailable", "node %s: %s", t.node.id, err);
        return;
    }
    flyt_http_reply_status(res, 204);
}

void h_session_restore_abort(void *ctx, const struct flyt_http_request *req,
                             struct flyt_http_response *res)
{
    struct target t;
    if (restore_target(req, res, ctx, &t) != 0)
        return;
    pthread_mutex_lock(&ops_lock);
    op_remove_locked(op_find_locked(req->params[0]));
    pthread_mutex_unlock(&ops_lock);
    reservation_release(ctx, req->params[0]);
    flyt_http_reply_status(res, 204);
}

void h_session_restore_start(void *ctx, const struct flyt_http_request *req,
                             struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct session_rec s;
    struct target t;
    if (restore_target(req, res, clm, &t) != 0)
        return;
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = load_session(clm, req, &s, NULL, &e);
    clm_end(clm, 0, &e);
    char endpoint[ADDR_MAX], err[768], msg[512];
    long long pid = 0, t0 = now_ms();
    if (rc == 0 && start_server_on(clm, s.id, s.vm_id, &t, 1, endpoint, sizeof endpoint, &pid,
                                   err, sizeof err) != 0)
        rc = api_fail(&e, 503, "unavailable", "node %s could not restore session %s: %s",
                      t.node.id, s.id, err);
    if (rc == 0) {
        snprintf(msg, sizeof msg, "restored on %s/%d at %s (server started in %lld ms)",
                 t.node.id, t.gpu_index, endpoint, now_ms() - t0);
        rc = record_running(clm, s.id, &t, endpoint, pid, "session.restored", msg, &e);
    }
    pthread_mutex_lock(&ops_lock);
    op_remove_locked(op_find_locked(req->params[0]));
    pthread_mutex_unlock(&ops_lock);
    if (rc != 0) {
        reservation_release(clm, req->params[0]);
        api_reply_error(res, &e);
        return;
    }
    char path[ID_MAX + 64];
    path_of(path, sizeof path, "/v1/checkpoints/%s", s.id);
    node_call(&t.node, "DELETE", path, NULL, 10000, NULL, err, sizeof err); /* mapped already */
    flyt_http_reply_json(res, 200, json_pack("{s:{s:s,s:s,s:i,s:s}}", "session", "id", s.id,
                                             "node", t.node.id, "gpu_index", t.gpu_index,
                                             "endpoint", endpoint));
}

/* ---- migration ---- */

/* Copies the source's state file to the target, CHUNK by CHUNK; -1 with err. */
static int copy_state(struct op *o, char *err, size_t errlen)
{
    char path[ID_MAX + 128];
    for (long long off = 0;;) {
        char *data = NULL;
        size_t n = 0;
        long status = 0;
        snprintf(path, sizeof path, "/v1/checkpoints/%s?offset=%lld&length=%d", o->sid, off,
                 CHUNK);
        if (node_bytes(&o->from.node, "GET", path, NULL, 0, &data, &n, &status, err, errlen))
            return -1;
        snprintf(path, sizeof path, "/v1/checkpoints/%s?offset=%lld", o->sid, off);
        char *ans = NULL;
        size_t an = 0;
        int rc = n ? node_bytes(&o->to.node, "PUT", path, data, n, &ans, &an, &status, err,
                                errlen) : 0;
        free(data);
        free(ans);
        if (rc)
            return -1;
        off += (long long)n;
        pthread_mutex_lock(&ops_lock);
        o->bytes = off;
        o->touched = now_ms();
        pthread_mutex_unlock(&ops_lock);
        if (n < CHUNK)
            return off == o->total || o->total == 0 ? 0
                   : (snprintf(err, errlen, "copied %lld of %lld bytes", off, o->total), -1);
    }
}

static void op_finish(struct op *o, int ok, const char *endpoint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Ends a migration: its reservation goes (when the ending could not drop it with the
 * session's record), then the op is done (and may be replaced and freed from then on). */
static void op_finish(struct op *o, int ok, const char *endpoint, const char *fmt, ...)
{
    va_list ap;
    reservation_release(o->clm, o->sid);
    pthread_mutex_lock(&ops_lock);
    va_start(ap, fmt);
    vsnprintf(o->message, sizeof o->message, fmt, ap);
    va_end(ap);
    snprintf(o->endpoint, sizeof o->endpoint, "%s", endpoint ? endpoint : "");
    snprintf(o->phase, sizeof o->phase, "%s", ok ? "done" : "failed");
    o->ok = ok;
    o->done = 1;
    o->touched = now_ms();
    pthread_mutex_unlock(&ops_lock);
}

/* After a failure with the source stopped: the session comes back on its source. */
static void migrate_fall_back(struct op *o, const char *vm_id, int fresh, const char *why)
{
    struct clm *clm = o->clm;
    char endpoint[ADDR_MAX], err[768], msg[1024];
    long long pid = 0;
    struct api_error e = {0};
    op_phase(o, "fallback");
    flyt_warn("session %s: migration to %s failed (%s); restoring it on %s", o->sid,
              o->to.node.id, why, o->from.node.id);
    if (start_server_on(clm, o->sid, vm_id, &o->from, !fresh, endpoint, sizeof endpoint, &pid,
                        err, sizeof err) == 0) {
        snprintf(msg, sizeof msg, "migration to %s failed: %.300s; restored on the source %s/%d "
                 "at %s", o->to.node.id, why, o->from.node.id, o->from.gpu_index, endpoint);
        if (record_running(clm, o->sid, &o->from, endpoint, pid, "session.migrate_failed", msg,
                           &e) == 0) {
            op_finish(o, 0, endpoint, "%s", msg);
            return;
        }
        snprintf(err, sizeof err, "%s", e.message);
    }
    snprintf(msg, sizeof msg, "migration to %s failed: %.300s; restoring on the source failed "
             "too: %.300s; the session is suspended, its state kept on node %s", o->to.node.id,
             why, err, o->from.node.id);
    record_state(clm, o->sid, SESSION_MIGRATING, SESSION_SUSPENDED, "session.migrate_failed", msg);
    op_finish(o, 0, NULL, "%s", msg);
}

struct migrate_job {
    struct op *op;
    char vm_id[ID_MAX];
};

/* The node refused the checkpoint because no client is connected: nothing to carry,
 * so the session's idle server is stopped and started afresh on the target. */
static int no_client(struct op *o, const char *why)
{
    if (strstr(why, " no_session:") == NULL)
        return 0;
    struct stop_list stops = {0};
    stop_list_add(&stops, &o->from.node, o->sid);
    stop_list_run(&stops);
    return 1;
}

/* The target's receiving server, when the state is to be streamed (to another node): 0
 * with where the source streams it and the secret; -1 (logged) when the file is copied
 * instead. */
static int prepare_receiver(struct op *o, const char *vm_id, char *address, size_t addrlen,
                            char *secret, size_t secretlen)
{
    char err[768];
    struct session_rec s;
    if (!o->stream || strcmp(o->to.node.id, o->from.node.id) == 0)
        return -1;
    op_phase(o, "prepare");
    session_on(o->sid, vm_id, &o->to, &s);
    if (node_receive_server(o->clm, &o->to.node, &s, address, addrlen, secret, secretlen, err,
                            sizeof err) == 0)
        return 0;
    flyt_warn("session %s: no receiving server on %s (%s); copying the state file instead",
              o->sid, o->to.node.id, err);
    pthread_mutex_lock(&ops_lock);
    o->stream = 0;
    pthread_mutex_unlock(&ops_lock);
    return -1;
}

/* Polls the source's progress (bytes written of about how many) while its checkpoint runs. */
struct progress_poll {
    struct op *o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
};

static void *progress_main(void *arg)
{
    struct progress_poll *p = arg;
    char path[ID_MAX + 64], err[256];
    path_of(path, sizeof path, "/v1/servers/%s/checkpoint", p->o->sid);
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        pthread_mutex_unlock(&p->lock);
        json_t *ans = NULL;
        if (node_call(&p->o->from.node, "GET", path, NULL, 2000, &ans, err, sizeof err) == 0) {
            pthread_mutex_lock(&ops_lock);
            p->o->bytes = json_integer_value(json_object_get(ans, "sent"));
            p->o->total = json_integer_value(json_object_get(ans, "estimate"));
            pthread_mutex_unlock(&ops_lock);
        }
        json_decref(ans);
        pthread_mutex_lock(&p->lock);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (!p->stop)
            pthread_cond_timedwait(&p->cond, &p->lock, &ts);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* The source's checkpoint with stop (streamed to address when given), its progress
 * polled meanwhile: 0 with its answer, -1 with err. */
static int checkpoint_source(struct op *o, const char *address, const char *secret, json_t **ans,
                             char *err, size_t errlen)
{
    char path[ID_MAX + 64];
    path_of(path, sizeof path, "/v1/servers/%s/checkpoint", o->sid);
    json_t *body = json_pack("{s:b}", "stop", 1);
    if (address)
        json_object_set_new(body, "to", json_pack("{s:s,s:s}", "address", address, "secret",
                                                  secret));
    struct progress_poll p = {.o = o, .lock = PTHREAD_MUTEX_INITIALIZER,
                              .cond = PTHREAD_COND_INITIALIZER};
    pthread_t th;
    int polling = pthread_create(&th, NULL, progress_main, &p) == 0;
    int rc = node_call(&o->from.node, "POST", path, body, CKPT_CALL_MS, ans, err, errlen);
    if (polling) {
        pthread_mutex_lock(&p.lock);
        p.stop = 1;
        pthread_cond_signal(&p.cond);
        pthread_mutex_unlock(&p.lock);
        pthread_join(th, NULL);
    }
    json_decref(body);
    return rc;
}

static void *migrate_main(void *arg)
{
    struct migrate_job *job = arg;
    struct op *o = job->op;
    struct clm *clm = o->clm;
    char path[ID_MAX + 64], err[768], endpoint[ADDR_MAX], msg[1024];
    char address[ADDR_MAX], secret[80] = "";
    long long pid = 0;
    clm_test_step("migrate.placed");
    int streamed = prepare_receiver(o, job->vm_id, address, sizeof address, secret,
                                    sizeof secret) == 0;
    long long t0 = now_ms(); /* the downtime starts with the checkpoint's drain */
    op_phase(o, streamed ? "stream" : "checkpoint");
    json_t *ans = NULL;
    int ok = checkpoint_source(o, streamed ? address : NULL, secret, &ans, err, sizeof err) == 0;
    OPENSSL_cleanse(secret, sizeof secret);
    if (!ok && streamed) { /* the session carries on at its source: the receiver goes */
        struct stop_list stops = {0};
        stop_list_add(&stops, &o->to.node, o->sid);
        stop_list_run(&stops);
    }
    int fresh = !ok && no_client(o, err);
    if (!ok && !fresh) {   /* a refused checkpoint leaves the session running on its source */
        snprintf(msg, sizeof msg, "migration to %s refused: the checkpoint failed: %.400s",
                 o->to.node.id, err);
        record_state(clm, o->sid, SESSION_MIGRATING, SESSION_ACTIVE, "session.migrate_failed", msg);
        op_finish(o, 0, NULL, "%s", msg);
        goto out;
    }
    clm_test_step("migrate.checkpointed");
    pthread_mutex_lock(&ops_lock);
    o->total = fresh ? 0 : json_integer_value(json_object_get(ans, "bytes"));
    /* the kernel images went ahead while the program ran: not downtime */
    t0 += fresh ? 0 : json_integer_value(json_object_get(ans, "precopy_ms"));
    if (streamed)
        o->bytes = o->total;
    pthread_mutex_unlock(&ops_lock);
    json_decref(ans);
    if (!fresh && !streamed && strcmp(o->to.node.id, o->from.node.id) != 0) {
        op_phase(o, "copy");
        if (copy_state(o, err, sizeof err) != 0) {
            migrate_fall_back(o, job->vm_id, fresh, err);
            goto out;
        }
    }
    op_phase(o, fresh ? "start" : "restore");
    if (start_server_on(clm, o->sid, job->vm_id, &o->to, !fresh, endpoint, sizeof endpoint, &pid,
                        err, sizeof err) != 0) {
        migrate_fall_back(o, job->vm_id, fresh, err);
        goto out;
    }
    clm_test_step("migrate.started");
    long long downtime = now_ms() - t0;
    pthread_mutex_lock(&ops_lock);
    o->downtime_ms = downtime;
    pthread_mutex_unlock(&ops_lock);
    snprintf(msg, sizeof msg, "migrated from %s/%d to %s/%d at %s: %lld bytes %s, downtime "
             "%lld ms", o->from.node.id, o->from.gpu_index, o->to.node.id, o->to.gpu_index,
             endpoint, o->total, streamed ? "streamed" : "through a file", downtime);
    struct api_error e = {0};
    if (record_running(clm, o->sid, &o->to, endpoint, pid, "session.migrated", msg, &e) != 0) {
        struct stop_list stops = {0};   /* released meanwhile: nobody uses the new server */
        stop_list_add(&stops, &o->to.node, o->sid);
        stop_list_run(&stops);
        op_finish(o, 0, NULL, "migration done, but %s", e.message);
        goto out;
    }
    path_of(path, sizeof path, "/v1/checkpoints/%s", o->sid);
    node_call(&o->from.node, "DELETE", path, NULL, 10000, NULL, err, sizeof err);
    if (strcmp(o->to.node.id, o->from.node.id) != 0)
        node_call(&o->to.node, "DELETE", path, NULL, 10000, NULL, err, sizeof err);
    op_finish(o, 1, endpoint, "%s", msg);
out:
    free(job);
    return NULL;
}

void h_session_migrate(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct session_rec s;
    struct node_rec node;
    struct target to, from;
    const char *where = NULL;
    int gpu = -1;
    struct op *o = NULL;
    struct migrate_job *job = calloc(1, sizeof *job);
    if (!job || clm_begin(clm, &e) < 0) {
        free(job);
        api_reply_error(res, &e);
        return;
    }
    int rc = load_session(clm, req, &s, &node, &e);
    if (rc == 0)
        rc = parse_where(req->body, &where, &gpu, &e);
    json_t *stream = json_object_get(req->body, "stream");
    if (rc == 0 && stream && !json_is_boolean(stream))
        rc = api_fail(&e, 400, "bad_request", "stream: expected true (default) or false");
    if (rc == 0 && s.state == SESSION_MIGRATING)
        rc = api_fail(&e, 409, "conflict", "session %s is already being migrated", s.id);
    else if (rc == 0 && s.state != SESSION_ACTIVE)
        rc = api_fail(&e, 409, "conflict", "session %s is %s, not active", s.id,
                      session_state_name(s.state));
    if (rc == 0)
        rc = place(clm, &s, where, gpu, where ? NULL : s.node_id, &to, &e);
    if (rc == 0 && !(o = op_claim(s.id, OP_MIGRATE, &e)))
        rc = -1;
    if (rc == 0) {
        target_of(&s, &node, &from);
        pthread_mutex_lock(&ops_lock);
        o->to = to;
        o->from = from;
        o->clm = clm;
        o->stream = !json_is_false(stream);
        pthread_mutex_unlock(&ops_lock);
        rc = reserve(clm, &s, &to, &from, !json_is_false(stream), &e);
    }
    if (rc == 0) {
        s.state = SESSION_MIGRATING;
        char err[512];
        if (store_session_update(clm->store, &s, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a session", err);
    }
    if (rc == 0)
        rc = api_event(clm, "session.migrating", s.id, &e, "migrating from %s/%d to %s/%d",
                       node.id, s.gpu_index, to.node.id, to.gpu_index);
    if (clm_end(clm, rc == 0, &e) < 0) {
        if (o)
            op_drop(o);
        free(job);
        api_reply_error(res, &e);
        return;
    }
    job->op = o;
    snprintf(job->vm_id, sizeof job->vm_id, "%s", s.vm_id);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, migrate_main, job) != 0) {
        record_state(clm, s.id, SESSION_MIGRATING, SESSION_ACTIVE, NULL, NULL);
        op_drop(o);
        free(job);
        flyt_http_reply_error(res, 500, "internal", "cannot start the migration");
    } else {
        pthread_mutex_lock(&ops_lock);
        json_t *j = op_json_locked(o);
        pthread_mutex_unlock(&ops_lock);
        flyt_http_reply_json(res, 202, json_pack("{s:o}", "migration", j));
    }
    pthread_attr_destroy(&attr);
}

void h_session_migration(void *ctx, const struct flyt_http_request *req,
                         struct flyt_http_response *res)
{
    struct clm *clm = ctx;
    struct api_error e = {0};
    struct principal who;
    pthread_mutex_lock(&clm->lock);
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        api_reply_error(res, &e);
        return;
    }
    pthread_mutex_lock(&ops_lock);
    struct op *o = op_find_locked(req->params[0]);
    json_t *j = o && o->kind == OP_MIGRATE ? op_json_locked(o) : NULL;
    pthread_mutex_unlock(&ops_lock);
    if (!j)
        flyt_http_reply_error(res, 404, "not_found", "no migration of session %s is known",
                              req->params[0]);
    else
        flyt_http_reply_json(res, 200, json_pack("{s:o}", "migration", j));
}

/* ---- node drain ---- */

static void node_set_draining(struct clm *clm, const struct flyt_http_request *req,
                              struct flyt_http_response *res, int drain)
{
    struct api_error e = {0};
    struct principal who;
    struct node_rec n;
    char err[512];
    if (clm_begin(clm, &e) < 0) {
        api_reply_error(res, &e);
        return;
    }
    int rc = auth_check(clm, req, P_OPERATOR, &who, &e);
    if (rc == 0)
        rc = node_load(clm, req->params[0], &n, &e);
    enum node_state want = drain ? NODE_DRAINING : NODE_READY;
    if (rc == 0 && n.state != want && n.state != (drain ? NODE_READY : NODE_DRAINING))
        rc = api_fail(&e, 409, "conflict", "node %s is %s", n.id, node_state_name(n.state));
    json_t *ids = json_array();
    struct session_rec *ss = NULL;
    int ns = 0;
    if (rc == 0 && n.state != want) {
        n.state = want;
        if (store_node_update(clm->store, &n, err, sizeof err) < 0)
            rc = api_store_fail(&e, "updating a node", err);
        else
            rc = api_event(clm, drain ? "node.draining" : "node.ready", n.id, &e, "node %s %s",
                           n.id, drain ? "drains: no new placements" : "takes placements again");
    }
    struct session_filter f = {.node_id = n.id, .live_only = 1};
    if (rc == 0 && store_session_list(clm->store, &f, &ss, &ns, err, sizeof err) < 0)
        rc = api_store_fail(&e, "reading sessions", err);
    for (int i = 0; rc == 0 && i < ns; i++)
        json_array_append_new(ids, json_string(ss[i].id));
    free(ss);
    json_t *node = rc == 0 ? node_json(clm, &n, &e) : NULL;
    if (clm_end(clm, rc == 0 && node, &e) < 0) {
        json_decref(ids);
        json_decref(node);
        api_reply_error(res, &e);
        return;
    }
    flyt_http_reply_json(res, 200, json_pack("{s:o,s:o}", "node", node, "sessions", ids));
}

void h_node_drain(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    node_set_draining(ctx, req, res, 1);
}

void h_node_undrain(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    node_set_draining(ctx, req, res, 0);
}

/* ---- recovery of migrations a previous run left in flight ---- */

/* What a node manager runs for sid: 1 with its state ("running", "starting", ...), GPU,
 * endpoint and pid; 0 when nothing; -1 when the node cannot be asked. */
struct node_server {
    char state[32], endpoint[ADDR_MAX];
    int gpu_index;
    long long pid;
};

static int server_on(const struct node_rec *node, const char *sid, struct node_server *out)
{
    json_t *ans = NULL, *srv;
    char err[512];
    size_t i;
    if (!node->address[0] || node->state == NODE_LOST)
        return node->address[0] ? -1 : 0;
    if (node_call(node, "GET", "/v1/servers", NULL, 5000, &ans, err, sizeof err) != 0) {
        json_decref(ans);
        return -1;
    }
    int found = 0;
    json_array_foreach(json_object_get(ans, "servers"), i, srv) {
        const char *id = json_string_value(json_object_get(srv, "session_id"));
        if (found || !id || strcmp(id, sid) != 0)
            continue;
        found = 1;
        const char *state = json_string_value(json_object_get(srv, "state"));
        const char *endpoint = json_string_value(json_object_get(srv, "endpoint"));
        snprintf(out->state, sizeof out->state, "%s", state ? state : "");
        snprintf(out->endpoint, sizeof out->endpoint, "%s", endpoint ? endpoint : "");
        out->gpu_index = (int)json_integer_value(json_object_get(srv, "gpu_index"));
        out->pid = json_integer_value(json_object_get(srv, "pid"));
    }
    json_decref(ans);
    return found;
}

/* The migration of r as the store left it (lock taken): 1 with its op's source and target
 * and the session's VM, 0 when the session is no longer migrating (its reservation only
 * is left), -1 on a store failure. */
static int recovery_load(struct clm *clm, const struct reservation_rec *r, struct op *o,
                         char *vm_id, size_t vmlen)
{
    struct api_error e = {0};
    struct session_rec s;
    struct node_rec from, to;
    char err[512];
    if (clm_begin(clm, &e) < 0)
        return -1;
    int found = store_session_get(clm->store, r->session_id, &s, err, sizeof err);
    int rc = found < 0 ? -1 : found && s.state == SESSION_MIGRATING;
    if (rc == 1 && (store_node_get(clm->store, s.node_id, &from, err, sizeof err) <= 0
                    || store_node_get(clm->store, r->node_id, &to, err, sizeof err) <= 0))
        rc = 0;   /* a node deleted meanwhile: nothing to finish there */
    clm_end(clm, 0, &e);
    if (rc != 1)
        return rc;
    snprintf(vm_id, vmlen, "%s", s.vm_id);
    pthread_mutex_lock(&ops_lock);
    target_of(&s, &from, &o->from);
    o->to.node = to;
    o->to.gpu_index = r->gpu_index;
    o->to.sm_count = r->sm_count;
    o->to.ngroups = r->ngroups;
    memcpy(o->to.groups, r->groups, sizeof r->groups[0] * (size_t)r->ngroups);
    o->to.memory_quota = r->memory_quota;
    o->stream = r->stream;
    pthread_mutex_unlock(&ops_lock);
    return 1;
}

/* The session runs on t (at endpoint, server pid): recorded, the state files go. */
static int recovery_settle(struct op *o, const struct target *t, const char *endpoint,
                           long long pid, const char *kind, const char *msg)
{
    struct api_error e = {0};
    char path[ID_MAX + 64], err[512];
    if (record_running(o->clm, o->sid, t, endpoint, pid, kind, msg, &e) != 0) {
        flyt_error("session %s: %s", o->sid, e.message);
        return -1;
    }
    path_of(path, sizeof path, "/v1/checkpoints/%s", o->sid);
    node_call(&o->from.node, "DELETE", path, NULL, 10000, NULL, err, sizeof err);
    if (strcmp(o->to.node.id, o->from.node.id) != 0)
        node_call(&o->to.node, "DELETE", path, NULL, 10000, NULL, err, sizeof err);
    op_finish(o, strcmp(kind, "session.migrated") == 0, endpoint, "%s", msg);
    return 0;
}

/* Neither end runs the session (the source stopped for its checkpoint): the target
 * settles a receiving server that took the state, else the source restores its state
 * file, else the target restores a copied one; else it stays suspended. */
static void recovery_restart(struct op *o, const char *vm_id, int receiving)
{
    char endpoint[ADDR_MAX], err[768], msg[1024];
    long long pid = 0;
    if (receiving && start_server_on(o->clm, o->sid, vm_id, &o->to, 1, endpoint, sizeof endpoint,
                                     &pid, err, sizeof err) == 0) {
        snprintf(msg, sizeof msg, "migration to %s/%d completed after a restart of the cluster "
                 "manager: its receiving server took the state; at %s", o->to.node.id,
                 o->to.gpu_index, endpoint);
        recovery_settle(o, &o->to, endpoint, pid, "session.migrated", msg);
        return;
    }
    if (start_server_on(o->clm, o->sid, vm_id, &o->from, 1, endpoint, sizeof endpoint, &pid, err,
                        sizeof err) == 0) {
        snprintf(msg, sizeof msg, "migration to %s rolled back after a restart of the cluster "
                 "manager: restored on the source %s/%d at %s", o->to.node.id, o->from.node.id,
                 o->from.gpu_index, endpoint);
        recovery_settle(o, &o->from, endpoint, pid, "session.migrate_failed", msg);
        return;
    }
    if (strcmp(o->to.node.id, o->from.node.id) != 0
        && start_server_on(o->clm, o->sid, vm_id, &o->to, 1, endpoint, sizeof endpoint, &pid,
                           err, sizeof err) == 0) {
        snprintf(msg, sizeof msg, "migration to %s/%d completed after a restart of the cluster "
                 "manager from the copied state; at %s", o->to.node.id, o->to.gpu_index,
                 endpoint);
        recovery_settle(o, &o->to, endpoint, pid, "session.migrated", msg);
        return;
    }
    struct stop_list stops = {0};
    stop_list_add(&stops, &o->to.node, o->sid);
    stop_list_run(&stops);
    snprintf(msg, sizeof msg, "migration to %s interrupted by a restart of the cluster manager "
             "and neither end could restore it (%.300s): suspended, its state kept on node %s",
             o->to.node.id, err, o->from.node.id);
    record_state(o->clm, o->sid, SESSION_MIGRATING, SESSION_SUSPENDED, "session.migrate_failed",
                 msg);
    op_finish(o, 0, NULL, "%s", msg);
}

/* Brings the migration of r to an end: complete when its target runs the session, rolled
 * back when its source still does, else restarted from its state (recovery_restart).
 * 0 when settled, -1 when a node could not be asked (tried again later). */
static int recover_migration(struct clm *clm, const struct reservation_rec *r, struct op *o)
{
    char vm_id[ID_MAX], msg[1024];
    o->clm = clm;
    op_phase(o, "recover");
    int live = recovery_load(clm, r, o, vm_id, sizeof vm_id);
    if (live <= 0) {
        if (live == 0)
            op_finish(o, 0, NULL, "session %s is no longer migrating: its reservation on %s "
                      "is released", r->session_id, r->node_id);
        return live;
    }
    struct node_server at_to = {0}, at_from = {0};
    int same = strcmp(o->to.node.id, o->from.node.id) == 0;
    int on_to = server_on(&o->to.node, o->sid, &at_to);
    int on_from = same ? on_to : server_on(&o->from.node, o->sid, &at_from);
    if (same)
        at_from = at_to;
    if (on_to < 0 || on_from < 0)
        return -1;
    int to_runs = on_to && strcmp(at_to.state, "running") == 0 && at_to.gpu_index == o->to.gpu_index
                  && (!same || o->to.gpu_index != o->from.gpu_index);
    flyt_info("session %s: recovering its migration %s -> %s (target: %s, source: %s)", o->sid,
              o->from.node.id, o->to.node.id, on_to ? at_to.state : "nothing",
              on_from ? at_from.state : "nothing");
    if (to_runs) {
        struct stop_list stops = {0};
        if (on_from && !same)
            stop_list_add(&stops, &o->from.node, o->sid);
        stop_list_run(&stops);
        snprintf(msg, sizeof msg, "migration from %s/%d to %s/%d completed after a restart of "
                 "the cluster manager: the target runs it at %s", o->from.node.id,
                 o->from.gpu_index, o->to.node.id, o->to.gpu_index, at_to.endpoint);
        return recovery_settle(o, &o->to, at_to.endpoint, at_to.pid, "session.migrated", msg);
    }
    if (on_from && strcmp(at_from.state, "running") == 0) {
        struct stop_list stops = {0};
        if (on_to && !same)
            stop_list_add(&stops, &o->to.node, o->sid);   /* its receiving server */
        stop_list_run(&stops);
        snprintf(msg, sizeof msg, "migration to %s rolled back after a restart of the cluster "
                 "manager: the session carries on at its source %s/%d", o->to.node.id,
                 o->from.node.id, o->from.gpu_index);
        record_state(clm, o->sid, SESSION_MIGRATING, SESSION_ACTIVE, "session.migrate_failed",
                     msg);
        op_finish(o, 0, NULL, "%s", msg);
        return 0;
    }
    recovery_restart(o, vm_id, on_to && !same && strcmp(at_to.state, "starting") == 0);
    return 0;
}

void migrations_recover(struct clm *clm)
{
    struct reservation_rec *rs = NULL;
    int n = 0;
    char err[512];
    pthread_mutex_lock(&clm->lock);
    int rc = store_reservation_list(clm->store, NULL, &rs, &n, err, sizeof err);
    pthread_mutex_unlock(&clm->lock);
    if (rc < 0) {
        flyt_error("recovering migrations: %s", err);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct api_error e = {0};
        /* an operation of this run holds it; else it is a previous run's, or expired */
        struct op *o = op_claim(rs[i].session_id, OP_MIGRATE, &e);
        if (!o)
            continue;
        if (rs[i].kind == RES_RESTORE) {
            flyt_info("session %s: its restore on %s ended unfinished (expired, or the cluster "
                      "manager restarted): its reservation is released", rs[i].session_id,
                      rs[i].node_id);
            reservation_release(clm, rs[i].session_id);
            op_drop(o);
        } else if (recover_migration(clm, &rs[i], o) < 0) {
            op_drop(o);   /* a node could not be asked: the next tick tries again */
        }
    }
    free(rs);
}
