/* flyt-cluster-manager: the state shared by its modules.
 *   main.c        command line, start, signals, stop
 *   settings.c    the config keys and their checks
 *   api.c         route table, auth, errors, health, events
 *   api_vms.c     /v1/vms (operator)            api_nodes.c   /v1/nodes (operator)
 *   api_node_calls.c  register, heartbeat, ended (node managers, with reconciliation)
 *   api_sessions.c /v1/sessions (operator, VM)  metrics.c     /metrics
 *   api_resize.c  live resize of a session's or a VM's sessions' shares
 *   lifecycle.c   ending sessions, node loss, calls to node managers, the timer thread
 *   capacity.c    GPU capacity derived from live sessions (store.h INVARIANT)
 *   clm_json.c     records -> JSON
 * Every store access holds clm->lock; calls to node managers are made without it. */
#ifndef FLYT_CLM_H
#define FLYT_CLM_H

#include "flyt_assert.h"
#include "flyt_config.h"
#include "flyt_http.h"
#include "flyt_token.h"
#include "placement.h"
#include "store.h"

#include <pthread.h>

#define FLYT_CLM_VERSION "0.1.0"

struct clm_settings {
    char listen[256];
    char store_url[1024];
    char operator_token_file[1024];
    /* the key node secrets are sealed with (seal.h); "": an in-memory store's, random.
     * store_key_create: the default next to an SQLite file, made at its first start */
    char store_key_file[1024];
    int store_key_create;
    long long heartbeat_interval_ms, node_timeout_ms, idle_grace_ms;
    long long session_token_ttl_ms, server_start_timeout_ms;
    enum placement_policy policy;
    int overcommit;
    int log_level;
    struct flyt_http_limits api;
    struct flyt_http_tls tls;      /* the API's certificate and key; none: plain HTTP */
};

/* The operator tokens: every line of operator_token_file (several during a rotation). */
struct clm_operator_tokens {
    flyt_token_line tok[FLYT_TOKEN_FILE_MAX];
    int n;
};

struct clm {
    struct clm_settings set;
    struct clm_operator_tokens operator_tokens;   /* under lock (SIGHUP replaces them) */
    struct store *store;
    struct flyt_http_server *http;
    pthread_mutex_t lock;
    long long started_ms;          /* nodes count as alive until node_timeout after this */
    /* timer thread only: when it last ran, when it found itself late, when it last said
     * that a node's loss waits for the manager to hear again */
    long long last_tick_ms, late_ms, deaf_logged_ms;
    /* timer thread */
    pthread_t timer;
    pthread_mutex_t timer_lock;
    pthread_cond_t timer_cond;
    int stopping;
};

/* ---- errors of API handlers ---- */
struct api_error {
    int status;
    const char *code;
    char message[768];
};
/* Fills e and returns -1. */
int api_fail(struct api_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A store failure: logged, 500 internal. */
int api_store_fail(struct api_error *e, const char *what, const char *dberr);
void api_reply_error(struct flyt_http_response *res, const struct api_error *e);
/* {"key": obj} with status when ok, else e's error; takes obj either way. */
void api_reply_wrapped(struct flyt_http_response *res, int ok, const struct api_error *e,
                       int status, const char *key, json_t *obj);

/* ---- auth (api.c); call with clm->lock held ---- */
enum principal_kind { P_NONE = 0, P_OPERATOR = 1, P_NODE = 2, P_VM = 4 };
struct principal {
    enum principal_kind kind;
    char id[ID_MAX];
};
/* 0 when the request's token is one of the allowed kinds (a mask); else -1 with 401/403. */
int auth_check(struct clm *clm, const struct flyt_http_request *req, unsigned allowed,
               struct principal *who, struct api_error *e);

/* ---- transactions with the lock: begin locks, end unlocks ---- */
int clm_begin(struct clm *clm, struct api_error *e);
/* Commits when ok (returns 0, or -1 with e on a failed commit), else rolls back (-1). */
int clm_end(struct clm *clm, int ok, struct api_error *e);

/* ---- shared by the handlers ---- */
/* Loads a node; 404 not_found when there is none. Lock held. */
int node_load(struct clm *clm, const char *id, struct node_rec *n, struct api_error *e);
/* Logs an event (and the log line); -1 with e on a store failure. In a transaction. */
int api_event(struct clm *clm, const char *kind, const char *subject, struct api_error *e,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- input checks (api.c) ---- */
int valid_id(const char *s);
int valid_ip(const char *s);
long long now_ms(void);
/* A new id: prefix + 16 hex characters. */
void new_id(const char *prefix, char *out, size_t outlen);

/* ---- JSON (clm_json.c) ---- */
json_t *json_time(long long ms);   /* RFC 3339 UTC string; null for 0 */
json_t *vm_json(const struct vm_rec *vm, int live_sessions);
json_t *session_json(const struct session_rec *s);
json_t *request_json(const struct request_rec *r);
json_t *gpu_json(const struct gpu_rec *g, const struct gpu_cap *cap);
json_t *event_json(const struct event_rec *e);
/* The node with its GPUs and their derived allocation; needs the store (lock held). */
json_t *node_json(struct clm *clm, const struct node_rec *n, struct api_error *e);

/* ---- capacity (capacity.c); lock held ---- */
/* caps of the GPUs of the given nodes, with the live sessions' shares added. */
int capacity_build(struct clm *clm, const struct node_rec *nodes, int nnodes, struct gpu_cap **caps,
                   int *ncaps, char *err, size_t errlen);
int vm_live_sessions(struct clm *clm, const char *vm_id, char *err, size_t errlen);

/* ---- lifecycle (lifecycle.c) ---- */
/* A server to stop on a node manager once the lock is released. */
struct stop_item {
    char address[ADDR_MAX], token[65], session_id[ID_MAX];
};
struct stop_list {
    struct stop_item *items;
    int n, cap;
};
void stop_list_add(struct stop_list *l, const struct node_rec *node, const char *session_id);
/* Calls DELETE /v1/servers/{id} for each (best effort: a node that misses it is told again
 * in its next heartbeat's "stop"), then frees the list. Without the lock. */
void stop_list_run(struct stop_list *l);

/* Ends a live session (state released|lost|failed) and logs the event; in a transaction. */
int session_end(struct clm *clm, struct session_rec *s, enum session_state state,
                const char *reason, char *err, size_t errlen);
/* Marks a node lost: its live sessions end "lost", its capacity is withdrawn. */
int node_mark_lost(struct clm *clm, struct node_rec *n, const char *reason, char *err, size_t errlen);
/* Asks the node manager for a server (restore: from the session's state file there);
 * fills endpoint and server pid. Without the lock. */
int node_start_server(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                      int restore, char *endpoint, size_t eplen, long long *server_pid, char *err,
                      size_t errlen);
/* Asks the node manager for a server that takes s's state streamed to it (a migration's
 * target): the address the source streams to and its one-time secret. Without the lock. */
int node_receive_server(struct clm *clm, const struct node_rec *node, const struct session_rec *s,
                        char *address, size_t addrlen, char *secret, size_t secretlen, char *err,
                        size_t errlen);
/* At start: sessions left "starting" by a previous run are failed. */
int lifecycle_recover(struct clm *clm, char *err, size_t errlen);
/* Test hook (docs/design.md, "Test hooks"): when FLYT_CLM_TEST_KILL_AT names step, the
 * manager kills itself there with SIGKILL, as a crash at that point would. */
void clm_test_step(const char *step);
int lifecycle_start(struct clm *clm);
void lifecycle_stop(struct clm *clm);
/* One pass of the timer: nodes past node_timeout are lost, counting only time in which
 * the manager could hear them (lifecycle.c, "deaf"). Lock not held. */
void lifecycle_tick(struct clm *clm);

/* ---- handlers ---- */
typedef void handler_fn(void *ctx, const struct flyt_http_request *req,
                        struct flyt_http_response *res);
handler_fn h_vms_list, h_vms_create, h_vms_import, h_vm_get, h_vm_patch, h_vm_delete;
handler_fn h_nodes_list, h_nodes_create, h_node_get, h_node_delete, h_node_register,
    h_node_heartbeat, h_node_session_ended;
handler_fn h_sessions_list, h_sessions_create, h_session_get, h_session_delete, h_session_alive;
handler_fn h_session_resize, h_vm_resize; /* api_resize.c */
/* The VM's share resized to sm SMs and mem bytes (0: that part unchanged) through the same
 * path as h_vm_resize (no partial grant): each live session's answer in an array, or NULL
 * with e (409 no_capacity past what the GPU has free; nothing changed). Lock not held. */
struct vm_resize_outcome {
    int sessions;                 /* live sessions resized (0: the VM has none) */
    long long sm_count, memory_quota;  /* the share now */
};
json_t *share_resize(struct clm *clm, const char *vm_id, long long sm, long long mem,
                     struct vm_resize_outcome *out, struct api_error *e);
/* api_requests.c: app-requested scaling (VM token), and its retries by the timer */
handler_fn h_vm_requests_post, h_vm_requests_list;
/* Retries the queued requests as capacity frees. Lock not held. */
void requests_retry(struct clm *clm);
/* api_checkpoint.c: checkpoint, restore, migration, node drain */
handler_fn h_session_checkpoint, h_session_state_get, h_session_state_delete, h_session_restore,
    h_session_restore_data, h_session_restore_start, h_session_restore_abort, h_session_migrate,
    h_session_migration, h_node_drain, h_node_undrain;
/* Whether a checkpoint, restore or migration of the session is in flight: its servers
 * come and go on purpose (a heartbeat must not stop them). Any lock. */
int ckpt_session_busy(const char *session_id);
/* Settles the reservations no operation of this run holds: a restore's (expired, or left
 * by a previous run) is released; a previous run's migration is completed or rolled
 * back (api_checkpoint.c). Called by the timer; lock not held. */
void migrations_recover(struct clm *clm);
handler_fn h_events, h_health, h_metrics;
extern const struct flyt_http_route clm_routes[];

/* ---- tokens (api_tokens.c) ---- */
/* The key session sid's tokens are signed with at epoch (its node's session key, or one
 * derived from it after a revocation): raw, or hex. 0, or -1 when the node has none. */
int session_signing_key(const struct node_rec *node, const char *sid, long long epoch,
                        unsigned char *key, size_t cap, size_t *len);
int session_signing_key_hex(const struct node_rec *node, const char *sid, long long epoch,
                            char *hex, size_t cap);
handler_fn h_node_rotate_token, h_node_revoke_token, h_vm_rotate_token, h_vm_revoke_token,
    h_session_revoke_tokens;

/* ---- settings (settings.c) ---- */
extern const struct flyt_cfg_key clm_config_keys[];
/* Loads and checks the config file and the operator token. -1 with "FILE:LINE: reason". */
int settings_load(const char *path, struct clm_settings *set, struct clm_operator_tokens *ops,
                  char *err, size_t errlen);
/* The operator token file's tokens (SIGHUP): 0, or -1 with why (ops untouched). */
int settings_read_operator_tokens(const char *file, struct clm_operator_tokens *ops, char *err,
                                  size_t errlen);

#endif
