/* The cluster manager's store: VMs, nodes and their GPUs, sessions, the event log.
 * One interface over SQLite ("sqlite:/path/file.db" or a plain path) and PostgreSQL
 * ("postgresql://..." or "postgres://..." connection URLs), with versioned migrations
 * applied at open (store.c). Times are milliseconds since the epoch, 0 for none.
 *
 * INVARIANT: what is allocated on a GPU (its SM groups and memory) is never stored as a
 * counter. It is always derived from the GPU's live sessions (state "starting" or
 * "active"), each of which records the SM groups and memory quota it holds. Ending a
 * session (any other state) frees its share by that fact alone, so a restart, a repeated
 * report or a retried request can never count an allocation twice or lose one.
 *
 * Functions return >= 0 on success (getters: 1 found, 0 not found), DB_ERR or
 * DB_CONSTRAINT (db.h) with a reason in err. Not thread-safe: callers serialise. */
#ifndef FLYT_CLM_STORE_H
#define FLYT_CLM_STORE_H

#include "db.h"

#include <stddef.h>

#define ID_MAX 64          /* ids: 1..63 chars of [A-Za-z0-9._-] */
#define IP_MAX 64
#define ADDR_MAX 256
#define MAX_SM_GROUPS 256  /* SM groups per GPU */

/* States are enums in memory; their names are what the store and the API carry. */
/* draining: up and monitored like ready, but placement skips it (flytctl node drain). */
enum node_state { NODE_REGISTERED, NODE_READY, NODE_LOST, NODE_DRAINING, NODE_STATES };
/* suspended: checkpointed and stopped (preempted); holds no share, its state file is on
 * its node until restored (docs/api.md, "Checkpoint, restore, migration"). migrating: a
 * checkpoint with stop or a migration is under way; live (it holds its source share),
 * and the end of its source server is expected, not a failure. */
enum session_state {
    SESSION_STARTING, SESSION_ACTIVE,              /* live: they hold their share */
    SESSION_RELEASED, SESSION_LOST, SESSION_FAILED,
    SESSION_SUSPENDED, SESSION_MIGRATING,
    SESSION_STATES
};
const char *node_state_name(enum node_state state);
const char *session_state_name(enum session_state state);
/* 0 with the state of a name; -1 when it names none. */
int node_state_parse(const char *name, enum node_state *state);
int session_state_parse(const char *name, enum session_state *state);

struct vm_rec {
    char id[ID_MAX], vm_ip[IP_MAX], host_ip[IP_MAX];
    long long compute_units;   /* SMs */
    long long memory;          /* bytes */
    long long created_at, updated_at;
    /* bounds the operator sets on what the VM's programs may ask for (0: not set) */
    long long sm_min, sm_max, memory_min, memory_max;
};

struct gpu_rec {
    int index;
    char uuid[128], name[128];
    int sm_count, sm_granularity;
    long long memory_total;
    int compute_capability;          /* MAJOR * 10 + MINOR; 0: not reported */
};

struct node_rec {
    char id[ID_MAX], host_ip[IP_MAX], address[ADDR_MAX];
    enum node_state state;
    long long last_heartbeat, created_at;
    char session_key[65];            /* hex; "" until the first registration */
    char manager_token[65];          /* hex; "" until the first registration */
};

struct session_rec {
    char id[ID_MAX], vm_id[ID_MAX], node_id[ID_MAX];
    long long pid;                   /* the client process in the VM */
    char process[256];
    int gpu_index, sm_count;
    int ngroups, groups[MAX_SM_GROUPS];
    long long memory_quota;
    char endpoint[ADDR_MAX];
    long long server_pid;
    enum session_state state;
    long long created_at, last_activity, ended_at;
    long long disconnected_since;    /* first "connected: false" report of a run; 0: none */
    char end_reason[256];
    long long token_epoch;           /* its tokens' key epoch (store_session_token_epoch_next) */
};

struct event_rec {
    long long id, time;
    char kind[48], subject[ID_MAX];
    char message[512];
};

/* A request of a VM's program for a different share (docs/api.md, "App-requested
 * scaling"): what it asked, the share it resolved to, and what became of it. */
enum request_state { REQ_GRANTED, REQ_QUEUED, REQ_REFUSED, REQ_SUPERSEDED, REQ_CANCELLED,
                     REQ_STATES };
struct request_rec {
    char id[ID_MAX], vm_id[ID_MAX];
    char sm_ask[32], memory_ask[32];  /* as asked ("+16", "-1GiB", "48"); "" when not */
    char reason[256];                 /* the program's words, may be "" */
    long long sm_target, memory_target; /* the share it resolved to; 0: unchanged */
    enum request_state state;
    char message[512];                /* why it is in that state */
    long long created_at, updated_at;
};

/* A share held on a migration's or restore's target (docs/design.md, "Reservations"):
 * counted as allocated from its placement until the session runs there or the
 * operation fails. One per session. */
enum reservation_kind { RES_MIGRATE, RES_RESTORE };
struct reservation_rec {
    char session_id[ID_MAX], vm_id[ID_MAX], node_id[ID_MAX];
    enum reservation_kind kind;
    int gpu_index, sm_count;
    int ngroups, groups[MAX_SM_GROUPS];
    long long memory_quota;
    char from_node[ID_MAX];          /* a migration's source; "" for a restore */
    int stream;                      /* a migration streams the state to a receiving server */
    long long created_at;
};

struct session_filter {
    const char *vm_id, *node_id;          /* NULL: any */
    int by_state;                         /* only sessions in state */
    enum session_state state;
    int live_only;                        /* only "starting" / "active" */
};

struct store;

struct store *store_open(const char *url, char *err, size_t errlen);
void store_close(struct store *st);
const char *store_kind(const struct store *st);      /* "sqlite" | "postgresql" */
int store_schema_version(struct store *st, char *err, size_t errlen);
int store_latest_schema_version(void);

int store_begin(struct store *st, char *err, size_t errlen);
int store_commit(struct store *st, char *err, size_t errlen);
void store_rollback(struct store *st);

/* VMs */
int store_vm_insert(struct store *st, const struct vm_rec *vm, const char *token_hash,
                    char *err, size_t errlen);
int store_vm_update(struct store *st, const struct vm_rec *vm, char *err, size_t errlen);
int store_vm_delete(struct store *st, const char *id, char *err, size_t errlen);
int store_vm_get(struct store *st, const char *id, struct vm_rec *vm, char *err, size_t errlen);
int store_vm_by_ip(struct store *st, const char *vm_ip, struct vm_rec *vm, char *err, size_t errlen);
int store_vm_by_token(struct store *st, const char *token_hash, struct vm_rec *vm, char *err,
                      size_t errlen);
int store_vm_list(struct store *st, struct vm_rec **out, int *n, char *err, size_t errlen);

/* Nodes and GPUs (GPUs go with their node when it is deleted) */
int store_node_insert(struct store *st, const struct node_rec *node, const char *token_hash,
                      char *err, size_t errlen);
int store_node_update(struct store *st, const struct node_rec *node, char *err, size_t errlen);
int store_node_delete(struct store *st, const char *id, char *err, size_t errlen);
int store_node_get(struct store *st, const char *id, struct node_rec *node, char *err, size_t errlen);
int store_node_by_token(struct store *st, const char *token_hash, struct node_rec *node,
                        char *err, size_t errlen);
int store_node_list(struct store *st, struct node_rec **out, int *n, char *err, size_t errlen);
int store_gpus_set(struct store *st, const char *node_id, const struct gpu_rec *gpus, int n,
                   char *err, size_t errlen);
int store_gpus_get(struct store *st, const char *node_id, struct gpu_rec **out, int *n,
                   char *err, size_t errlen);

/* Sessions */
int store_session_insert(struct store *st, const struct session_rec *s, char *err, size_t errlen);
/* Updates everything but the id, VM, node, GPU and share (those never change). */
int store_session_update(struct store *st, const struct session_rec *s, char *err, size_t errlen);
/* A restore elsewhere: the session's node, GPU, SM count, groups and memory quota. */
int store_session_move(struct store *st, const struct session_rec *s, char *err, size_t errlen);
/* A live resize: the session's SM count, groups and memory quota. */
int store_session_set_share(struct store *st, const struct session_rec *s, char *err,
                            size_t errlen);
int store_session_get(struct store *st, const char *id, struct session_rec *s, char *err,
                      size_t errlen);
int store_session_list(struct store *st, const struct session_filter *f, struct session_rec **out,
                       int *n, char *err, size_t errlen);
/* Number of sessions in each state (counts[SESSION_STATES]). */
int store_session_count_by_state(struct store *st, long long *counts, char *err, size_t errlen);
int session_is_live(const struct session_rec *s);

/* Reservations (store_reservations.c); put replaces the session's one. node_id NULL:
 * every node's, oldest first. */
int store_reservation_put(struct store *st, const struct reservation_rec *r, char *err,
                          size_t errlen);
int store_reservation_delete(struct store *st, const char *session_id, char *err, size_t errlen);
int store_reservation_get(struct store *st, const char *session_id, struct reservation_rec *r,
                          char *err, size_t errlen);
int store_reservation_list(struct store *st, const char *node_id, struct reservation_rec **out,
                           int *n, char *err, size_t errlen);

/* Share requests, oldest first; vm_id NULL: every VM's; by_state: only that state. */
const char *request_state_name(enum request_state state);
int store_request_insert(struct store *st, const struct request_rec *r, char *err, size_t errlen);
/* Its state, message, targets and updated_at. */
int store_request_update(struct store *st, const struct request_rec *r, char *err, size_t errlen);
int store_request_list(struct store *st, const char *vm_id, int by_state, enum request_state state,
                       struct request_rec **out, int *n, char *err, size_t errlen);

/* Events: ids increase. */
int store_event_add(struct store *st, const char *kind, const char *subject, const char *message,
                    char *err, size_t errlen);
int store_event_list(struct store *st, long long since_id, int limit, struct event_rec **out,
                     int *n, char *err, size_t errlen);

/* Tokens of VMs and nodes (store_tokens.c). A rotation makes new_hash the token and lets
 * the one it replaces stay valid until old_until (ms since the epoch; 0: refused at once);
 * a revocation refuses every token of the record at once, or with old_only the one of a
 * rotation's grace only. 1 done, 0 no such record. The by_token getters find a record by
 * its token or by its previous one within the grace. */
enum token_owner { TOKEN_OF_VM, TOKEN_OF_NODE };
int store_token_rotate(struct store *st, enum token_owner owner, const char *id,
                       const char *new_hash, long long old_until, char *err, size_t errlen);
int store_token_revoke(struct store *st, enum token_owner owner, const char *id, int old_only,
                       char *err, size_t errlen);
/* The epoch a session's tokens are signed for (0: never revoked); its revocation makes the
 * next one. 1 done, 0 no such session. */
int store_session_token_epoch(struct store *st, const char *id, long long *epoch, char *err,
                              size_t errlen);
int store_session_token_epoch_next(struct store *st, const char *id, long long *epoch,
                                   char *err, size_t errlen);

/* "0,3,4" <-> int arrays */
void groups_format(const int *groups, int n, char *out, size_t outlen);
int groups_parse(const char *text, int *groups, int max);   /* count, -1 if malformed */

/* private to store_*.c */
struct db *store_db_(struct store *st);
void store_copy_(char *dst, size_t cap, const char *src);
int request_state_parse_(const char *name, enum request_state *state);
/* Runs a SELECT and makes each row a record of recsize bytes with from_row (calloc'd
 * array in *out, *n rows). */
typedef void store_row_fn_(const struct db_rows *r, int i, void *rec);
int store_select_(struct store *st, const char *sql, const struct db_arg *a, int na,
                  size_t recsize, store_row_fn_ *from_row, void **out, int *n, char *err,
                  size_t errlen);
long long store_now_ms_(void);

#endif
