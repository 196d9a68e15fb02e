/*
 * flyt-client-manager: one per VM. Holds the VM's credentials, answers the client
 * library over a Unix socket with a server endpoint and session token for the calling
 * process (asking the cluster manager for a session), watches each process and releases
 * its session when it ends (pidfd, else /proc), pings `alive` for live ones, and releases
 * everything when it stops. Also installs Flyt's client library, the drop-in CUDA driver
 * libcuda.so.1 (with Flyt's libnvidia-ml.so.1 when beside it), VM-wide (install.c).
 *
 * Modules: main.c (options and start, on flyt_daemon.h), sessions.c (the pid -> session table,
 * the watcher and worker threads), cluster.c (the calls to the cluster manager),
 * sock.c (the Unix socket and its line protocol), reconcile.c (the state file and the
 * reconciliation after a restart), install.c (--install/--uninstall), request_cmd.c (the
 * `request` subcommand, over share_client.c: flyt_share.h, a program's share requests).
 */
#ifndef FLYT_CMGR_H
#define FLYT_CMGR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "flyt_assert.h"
#include "flyt_buf.h"
#include "flyt_cred.h"

#ifndef FLYT_VERSION
#define FLYT_VERSION "0.0.0"
#endif

#define CMGR_DEFAULT_CONFIG "/etc/flyt/client-manager.conf"
#define CMGR_TOKEN_MAX 512       /* session tokens (FLYT_MAX_TOKEN) */

enum watch_mode { WATCH_AUTO, WATCH_PIDFD, WATCH_PROC };

struct cmgr_config {
    char cluster_url[512];       /* without a trailing '/' */
    char vm_id[128];
    struct flyt_cred *vm_cred;   /* the VM token (read again on SIGHUP and on a 401) */
    char socket_path[108];
    char state_path[4096];       /* the sessions held, for a restart (reconcile.c) */
    int socket_gid;              /* -1: leave the daemon's group */
    unsigned socket_mode;
    long long alive_interval_ms;
    long long acquire_timeout_ms;
    long long request_timeout_ms;
    int       max_conns_per_user; /* open connections of one uid at once */
    long long retry_max_ms;
    long long shutdown_timeout_ms;
    enum watch_mode watch;
    int log_level;               /* enum flyt_log_level */
    char metrics_listen[128];    /* "" : no metrics endpoint */
};

/* Loads and checks the config file; 0, or -1 with "FILE:LINE: reason" in err. */
int cmgr_config_load(const char *path, struct cmgr_config *c, char *err, size_t errlen);
void cmgr_config_help(void);

/* ---- the cluster manager (cluster.c) ---- */
enum cluster_outcome {
    CLUSTER_OK,          /* 2xx */
    CLUSTER_RETRY,       /* no answer, or 5xx: try again later */
    CLUSTER_GONE,        /* 404 / 409 on a session call: it no longer exists or has ended */
    CLUSTER_REFUSED,     /* other 4xx: retrying will not help */
};
struct cluster_session {
    char id[128];
    char endpoint[256];
    char token[CMGR_TOKEN_MAX + 1];
    char vm_id[128];
};
enum cluster_outcome cluster_session_create(const struct cmgr_config *c, pid_t pid, const char *process,
                                  long timeout_ms, struct cluster_session *out, char *err,
                                  size_t errlen);
enum cluster_outcome cluster_session_release(const struct cmgr_config *c, const char *id,
                                   long timeout_ms, char *err, size_t errlen);
enum cluster_outcome cluster_session_alive(const struct cmgr_config *c, const char *id, long timeout_ms,
                                 char *err, size_t errlen);

/* The VM's live sessions (a VM token lists only its own). */
struct cluster_live {
    char id[128];
    long long pid;
    int active; /* else still starting */
};
enum cluster_outcome cluster_sessions_live(const struct cmgr_config *c, long timeout_ms,
                                           struct cluster_live **out, int *n, char *err,
                                           size_t errlen);

/* A share request of a VM's program (docs/api.md, "App-requested scaling"): POST
 * /v1/vms/{vm_id}/requests. CLUSTER_OK with the answer (state "granted" or "queued", the
 * share now), else the cluster manager's reason in err. */
struct cluster_share {
    char state[16], request[128];
    long long sm, memory;
};
enum cluster_outcome cluster_share_request(const struct cmgr_config *c, const char *sm,
                                           const char *memory, const char *reason,
                                           long timeout_ms, struct cluster_share *out,
                                           char *err, size_t errlen);

/* ---- the sessions held, across a restart (reconcile.c) ---- */
struct cmgr_held {
    char id[128];
    pid_t pid;
    unsigned long long start; /* the process's start time: a reused pid has another */
};
/* Writes the state file (0600, replaced whole); 0, or -1 logged. */
int held_save(const char *path, const struct cmgr_held *h, int n);
/* One reconciliation at start with the state file an earlier run left: the VM's live
 * sessions whose process still runs (same pid and start time) are taken over, the others
 * released. CLUSTER_RETRY when the cluster manager did not answer (try again). */
enum cluster_outcome reconcile_once(const struct cmgr_config *c);

/* ---- sessions (sessions.c) ---- */
struct acquire_answer {
    char session_id[128];
    char endpoint[256];
    char token[CMGR_TOKEN_MAX + 1];
};
int sessions_start(const struct cmgr_config *c, char *err, size_t errlen);
/* Acquires (or finds) the session of process pid. 0 with ans, or -1 with a message. */
int sessions_acquire(pid_t pid, struct acquire_answer *ans, char *err, size_t errlen);
/* Takes over the session of process pid whose start time is start (after a restart): as
 * sessions_acquire, refused when pid is another process now. */
int sessions_adopt(pid_t pid, unsigned long long start, char *err, size_t errlen);
/* Whether this run holds session id, or is asking for one for pid. */
int sessions_knows(const char *id, pid_t pid);
/* Releases session id (of process pid, which has ended) through the worker, with retries. */
void sessions_release_orphan(const char *id, pid_t pid);
/* Releases pid's session now (the process asked). 0, or -1 with a message. */
int sessions_release_pid(pid_t pid, char *err, size_t errlen);
/* Pending and new requests fail from now on (before sock_stop). */
void sessions_stopping(void);
/* Stops the threads and releases every session (bounded by shutdown_timeout). */
void sessions_stop(void);
/* Prometheus text for /metrics. */
void sessions_metrics(struct flyt_buf *out);


/* ---- the Unix socket (sock.c) ---- */
int sock_start(const struct cmgr_config *c, char *err, size_t errlen);
void sock_stop(void);

/* ---- installation (install.c) ---- */
struct install_opts {
    const char *root;      /* "" or "/": the real system */
    const char *prefix;    /* where the libraries go */
    const char *lib;       /* Flyt's libcuda.so.1 to install; NULL: next to the binary */
    int preload;           /* also /etc/ld.so.preload */
    int ldconfig;          /* -1: run unless root is set; 0 never; 1 always */
};
int cmgr_install(const struct install_opts *o);
int cmgr_uninstall(const struct install_opts *o);

/* flyt-client-manager request ... (request_cmd.c): argv[0] is "request". Exit status. */
int cmgr_request_main(int argc, char **argv);

/* monotonic milliseconds */
uint64_t cmgr_now_ms(void);

#endif
