/*
 * The node manager's calls to the cluster manager (docs/api.md, "Node"), all
 * from the main thread: register (and re-register when the cluster manager
 * no longer knows the node as registered), heartbeat with every server's
 * liveness, connection and memory use, and the report of a server that died.
 * The lock is never held across a call.
 */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLM_TIMEOUT_MS 10000

/* Stops the servers of the sessions in a "stop" array (lock held). */
static void apply_stops(struct nm *nm, json_t *stop, const char *from)
{
    FLYT_ASSERT_HELD(&nm->lock);
    size_t i;
    json_t *v;
    json_array_foreach(stop, i, v) {
        const char *sid = json_string_value(v);
        struct nm_server *s = sid ? nm_server_find(nm, sid) : NULL;
        if (!s)
            continue;
        if (!s->stop_asked)
            flyt_info("session %s: the cluster manager's %s says stop", sid, from);
        s->report = 0;
        nm_server_stop_locked(nm, s);
        if (s->state == NM_EXITED && s->waiters == 0) { /* already dead: nothing to wait for */
            nm_server_unlink(nm, s);
            nm_server_free(s);
        }
    }
}

static json_t *session_reports(struct nm *nm, int heartbeat)
{
    FLYT_ASSERT_HELD(&nm->lock);
    json_t *arr = json_array();
    for (struct nm_server *s = nm->servers; s; s = s->next) {
        if (s->state == NM_STARTING)
            continue; /* its start request settles it */
        int connected = 0;
        long long mem = 0;
        int alive = s->state == NM_RUNNING || s->state == NM_STOPPING;
        if (alive)
            nm_server_status(s, &connected, &mem);
        json_t *o = json_pack("{s:s,s:b}", "id", s->sid, "alive", alive);
        if (heartbeat) {
            json_object_set_new(o, "connected", json_boolean(connected));
            json_object_set_new(o, "memory_used", json_integer(mem));
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

int nm_register(struct nm *nm)
{
    json_t *gpus = json_array();
    for (int i = 0; i < nm->ngpus; i++) {
        const struct nm_gpu *u = &nm->gpus[i];
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", u->compute_capability / 10, u->compute_capability % 10);
        json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:i,s:i,s:I,s:s}", "index", u->index,
                                              "uuid", u->uuid, "name", u->name, "sm_count",
                                              u->sm_count, "sm_granularity", u->sm_granularity,
                                              "memory_total", (json_int_t)u->memory_total,
                                              "compute_capability", cc));
    }
    pthread_mutex_lock(&nm->lock);
    json_t *sessions = session_reports(nm, 0);
    pthread_mutex_unlock(&nm->lock);
    json_t *body = json_pack("{s:s,s:s,s:o,s:o}", "address", nm->address, "host_ip",
                             nm->cfg.advertise_host, "gpus", gpus, "sessions", sessions);
    char url[NM_STR * 2], err[512];
    snprintf(url, sizeof url, "%s/v1/nodes/%s/register", nm->cfg.cluster_manager, nm->cfg.node_id);
    long status = 0;
    json_t *ans = NULL;
    int rc = flyt_cred_call(&nm->node_cred, "POST", url, body, CLM_TIMEOUT_MS, &status,
                                    &ans, err, sizeof err);
    json_decref(body);
    if (rc < 0 || status != 200) {
        if (rc == 0 && (status == 401 || status == 403))
            flyt_error("the cluster manager refuses this node's token (%s): check node_id and "
                       "node_token_file",
                       err);
        else
            flyt_warn("cannot register with the cluster manager at %s: %s",
                      nm->cfg.cluster_manager, err);
        json_decref(ans);
        return -1;
    }
    const char *key = json_string_value(json_object_get(ans, "session_key"));
    const char *mtok = json_string_value(json_object_get(ans, "manager_token"));
    json_t *hb = json_object_get(ans, "heartbeat_interval_s");
    json_t *stop = json_object_get(ans, "stop");
    unsigned char raw[128];
    size_t rawlen = 0;
    if (!key || !mtok || strlen(key) >= sizeof nm->session_key_hex ||
        strlen(mtok) >= sizeof nm->manager_token || strlen(mtok) < 32 ||
        flyt_hex_decode(key, raw, sizeof raw, &rawlen) != 0 || rawlen < 16 || !json_is_number(hb)) {
        flyt_error("the cluster manager's register answer lacks a valid session_key, "
                   "manager_token or heartbeat_interval_s");
        json_decref(ans);
        return -1;
    }
    long long hb_ms = (long long)(json_number_value(hb) * 1000.0);
    if (hb_ms < 100)
        hb_ms = 100;
    pthread_mutex_lock(&nm->lock);
    int again = nm->registered;
    snprintf(nm->session_key_hex, sizeof nm->session_key_hex, "%s", key);
    snprintf(nm->manager_token, sizeof nm->manager_token, "%s", mtok);
    nm->heartbeat_ms = nm->cfg.heartbeat_ms ? nm->cfg.heartbeat_ms : hb_ms;
    nm->registered = 1;
    if (json_is_array(stop))
        apply_stops(nm, stop, "register answer");
    pthread_mutex_unlock(&nm->lock);
    flyt_info("%s with the cluster manager at %s as node %s (%s, %d GPU(s)); heartbeat every %lld ms",
              again ? "registered again" : "registered", nm->cfg.cluster_manager, nm->cfg.node_id,
              nm->address, nm->ngpus, nm->heartbeat_ms);
    json_decref(ans);
    return 0;
}

int nm_heartbeat(struct nm *nm)
{
    pthread_mutex_lock(&nm->lock);
    json_t *sessions = session_reports(nm, 1);
    pthread_mutex_unlock(&nm->lock);
    json_t *body = json_pack("{s:o}", "sessions", sessions);
    char url[NM_STR * 2], err[512];
    snprintf(url, sizeof url, "%s/v1/nodes/%s/heartbeat", nm->cfg.cluster_manager, nm->cfg.node_id);
    long status = 0;
    json_t *ans = NULL;
    int rc = flyt_cred_call(&nm->node_cred, "POST", url, body, CLM_TIMEOUT_MS, &status,
                                    &ans, err, sizeof err);
    json_decref(body);
    nm->heartbeats++;
    if (rc < 0 || status != 200) {
        nm->heartbeat_failures++;
        if (rc == 0 && (status == 409 || status == 401 || status == 403 || status == 404)) {
            /* the cluster manager does not know us as registered (any more) */
            flyt_warn("heartbeat refused (%s): registering again", err);
            pthread_mutex_lock(&nm->lock);
            nm->registered = 0;
            pthread_mutex_unlock(&nm->lock);
        } else {
            flyt_warn("heartbeat to %s failed: %s", nm->cfg.cluster_manager, err);
        }
        json_decref(ans);
        return -1;
    }
    json_t *stop = json_object_get(ans, "stop");
    if (json_is_array(stop) && json_array_size(stop)) {
        pthread_mutex_lock(&nm->lock);
        apply_stops(nm, stop, "heartbeat answer");
        pthread_mutex_unlock(&nm->lock);
    }
    json_decref(ans);
    return 0;
}

/* Tells the cluster manager about servers that died; forgets them once it
 * knows. With timeout_ms, one try each (shutdown). */
void nm_report_ended(struct nm *nm, int timeout_ms)
{
    for (;;) {
        char sid[NM_SID_MAX], reason[200];
        pthread_mutex_lock(&nm->lock);
        struct nm_server *s = nm->servers;
        while (s && !(s->report && s->state == NM_EXITED))
            s = s->next;
        if (!s || !nm->registered) {
            pthread_mutex_unlock(&nm->lock);
            return;
        }
        snprintf(sid, sizeof sid, "%s", s->sid);
        snprintf(reason, sizeof reason, "%s", s->reason);
        pthread_mutex_unlock(&nm->lock);

        char url[NM_STR * 2], err[512];
        snprintf(url, sizeof url, "%s/v1/nodes/%s/sessions/%s/ended", nm->cfg.cluster_manager,
                 nm->cfg.node_id, sid);
        json_t *body = json_pack("{s:s}", "reason", reason);
        long status = 0;
        int rc = flyt_cred_call(&nm->node_cred, "POST", url, body,
                                        timeout_ms ? timeout_ms : CLM_TIMEOUT_MS, &status, NULL, err,
                                        sizeof err);
        json_decref(body);
        int done = rc == 0 && (status == 204 || status == 200 || status == 404 || status == 409);
        if (done)
            flyt_info("session %s: told the cluster manager it ended (%s)", sid, reason);
        else
            flyt_warn("session %s: cannot tell the cluster manager it ended: %s", sid, err);
        pthread_mutex_lock(&nm->lock);
        s = nm_server_find(nm, sid);
        if (s && s->state == NM_EXITED && (done || timeout_ms)) {
            s->report = 0;
            if (s->waiters == 0) {
                nm_server_unlink(nm, s);
                nm_server_free(s);
            }
        }
        if (!done && timeout_ms) /* stopping and the cluster manager is away: tell no more */
            for (s = nm->servers; s; s = s->next)
                s->report = 0;
        pthread_mutex_unlock(&nm->lock);
        if (!done && !timeout_ms)
            return; /* try again at the next heartbeat */
    }
}
