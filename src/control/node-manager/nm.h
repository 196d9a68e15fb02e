/*
 * flyt-node-manager: one per GPU machine. Reports the node's GPUs to the
 * cluster manager, starts one flyt-server per tenant session when the
 * cluster manager asks (docs/api.md), watches them, heartbeats, and stops
 * everything when it stops.
 *
 * Threads: the main thread owns signals (all blocked elsewhere), reaps
 * servers, enforces stop deadlines and talks to the cluster manager
 * (register, heartbeat, ended reports); the HTTP server's threads serve the
 * cluster manager's calls (api.c). They share `struct nm` under nm.lock;
 * nm.cond is broadcast whenever a server changes state.
 */
#ifndef FLYT_NM_H
#define FLYT_NM_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "flyt_assert.h"
#include "flyt_config.h"
#include "flyt_cred.h"
#include "flyt_http.h"

#define NM_VERSION     "0.1.0"
#define NM_MAX_GPUS    64
#define NM_SID_MAX     65   /* session ids: 1..64 of [A-Za-z0-9._-] */
#define NM_MAX_GROUPS  1024
#define NM_STR         256
#define NM_RECEIVE_TIMEOUT_S 120 /* a receiving server's wait for the migrated state */

/* ---- configuration (config.c) ---- */
struct nm_config {
    char node_id[NM_SID_MAX];
    char node_token_file[PATH_MAX];
    char cluster_manager[NM_STR];   /* without a trailing slash */
    char listen[NM_STR];
    char advertise_host[NM_STR];    /* an IP literal, no brackets */
    char server_path[PATH_MAX];
    char server_listen_host[NM_STR];
    int  port_min, port_max;
    long long start_timeout_ms, stop_grace_ms;
    char state_dir[PATH_MAX];
    char module_cache_dir[PATH_MAX]; /* "": servers keep no images on disk */
    unsigned long long module_cache_max; /* bytes of one VM's folder, 0: no limit */
    int  host_backend;              /* backend = host (test mode) */
    int  server_unix_socket;        /* servers listen on a Unix socket in state_dir too */
    int  sm_granularity;            /* 0: from the driver */
    long long heartbeat_ms;         /* 0: as the cluster manager says */
    int  log_level;
    int  mps;
    char mps_pipe_dir[PATH_MAX], mps_log_dir[PATH_MAX], mps_control[PATH_MAX];
    /* test mode: the declared fake GPUs */
    int  test_gpus;
    char test_gpu_name[NM_STR];
    char test_gpu_cc[16];           /* "MAJOR.MINOR": the servers' FLYT_HOST_BACKEND_CC */
    int  test_gpu_cc_value;         /* the same as MAJOR * 10 + MINOR */
    int  test_gpu_sm_count, test_gpu_sm_granularity;
    long long test_gpu_memory;
    struct flyt_http_tls tls;       /* the API's certificate and key; none: plain HTTP */
    char server_tls_cert[PATH_MAX];  /* the servers' pair ("": their TCP is plain) */
    char server_tls_key[PATH_MAX];
};
extern const struct flyt_cfg_key nm_config_keys[];
/* Loads and checks the file; -1 with "FILE:LINE: reason" in err. */
int nm_config_load(const char *path, struct nm_config *c, char *err, size_t errlen);

/* ---- GPUs (gpus.c) ---- */
struct nm_gpu {
    int  index;
    char uuid[64];      /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
    char name[NM_STR];
    int  sm_count;      /* SMs usable in whole groups */
    int  sm_granularity;
    long long memory_total;
    int  compute_capability;        /* MAJOR * 10 + MINOR */
};
/* The GPUs: through the CUDA driver (in a child process, so the node manager
 * itself never holds driver state), or the declared fake ones. */
int nm_gpus_discover(const struct nm_config *c, struct nm_gpu *out, int *n, char *err,
                     size_t errlen);

/* ---- servers (servers.c) ---- */
enum nm_state { NM_STARTING, NM_RUNNING, NM_STOPPING, NM_EXITED };

struct nm_server {
    struct nm_server *next;
    char      sid[NM_SID_MAX];
    int       gpu_index;
    int       port;
    pid_t     pid;
    enum nm_state state;
    int       stop_asked;     /* the exit is expected: DELETE, stop list, shutdown */
    long long stop_deadline;  /* ms (monotonic) when SIGKILL follows SIGTERM */
    int       killed;
    int       waiters;        /* DELETE handlers waiting for the exit */
    int       report;         /* an unexpected end to tell the cluster manager */
    char      reason[200];    /* how it ended */
    int       sm_count, ngroups;
    int       groups[NM_MAX_GROUPS];
    long long memory_quota;
    char      vm_id[NM_SID_MAX]; /* "" when the cluster manager did not say */
    int       restore;        /* flyt-server --restore STATE_DIR/ID.state */
    int       receive;        /* takes the state streamed by a migration's source first:
                               * --restore STATE_DIR/ID.received --restore-listen */
    int       state_port;     /* its --restore-listen port */
    char      secret_path[PATH_MAX + NM_SID_MAX + 16];
    char      key_path[PATH_MAX + NM_SID_MAX + 16];
    char      status_path[PATH_MAX + NM_SID_MAX + 16];
    char      sock_path[108]; /* its Unix socket, for clients on this machine; "" if none */
    char      record_path[PATH_MAX + NM_SID_MAX + 16]; /* STATE_DIR/SID.server (adopt.c) */
    int       adopted;        /* started by an earlier run: not our child, watched by pidfd */
    int       pidfd;          /* an adopted server's pidfd */
    struct nm_vmq *vmq;       /* its VM's memory quota page (vmquota.c); NULL: none */
};

struct nm {
    struct nm_config cfg;
    struct flyt_cred node_cred;     /* the node token (read again on SIGHUP and on a 401) */
    struct nm_gpu gpus[NM_MAX_GPUS];
    int ngpus;

    pthread_mutex_t lock;
    pthread_cond_t  cond;
    struct nm_server *servers;
    struct nm_vmq *vmqs;            /* the VMs' memory quota pages (vmquota.c) */
    int shutting_down;

    /* from the cluster manager's register answer */
    int  registered;
    char manager_token[NM_STR];
    char session_key_hex[NM_STR];
    long long heartbeat_ms;         /* in use */

    struct flyt_http_server *http;
    char address[NM_STR + 40];      /* http://HOST:PORT, https:// with TLS */
    int  next_port;

    /* counters for /metrics */
    unsigned long long starts, start_failures, deaths, heartbeats, heartbeat_failures;
};

long long nm_now_ms(void); /* CLOCK_MONOTONIC */
int nm_valid_sid(const char *s);
const struct nm_gpu *nm_gpu_by_index(const struct nm *nm, int index);
/* Prefix for URLs/endpoints: "[v6]" or the plain host. */
void nm_host_for_url(const char *host, char *out, size_t outlen);

/* Starts a server for the request (lock NOT held); waits until it listens.
 * 0 with the server's entry in *out; -1 with an HTTP status and message. */
struct nm_start_req {
    char sid[NM_SID_MAX];
    int  gpu_index;
    int  ngroups;
    int  groups[NM_MAX_GROUPS];
    int  sm_count;
    long long memory_quota;
    char vm_id[NM_SID_MAX]; /* the tenant: its own image cache; "" none */
    int  restore;           /* start from the session's state file (checkpoint.c) */
    int  receive;           /* from the state streamed to it (checkpoint.c): answered at once */
    char secret[68];        /* with receive: the one-time secret the state's source proves */
    char session_key[NM_STR]; /* hex: the session's own key (its tokens revoked); "": the node's */
};
int nm_server_start(struct nm *nm, const struct nm_start_req *r, int *http_status, char *msg,
                    size_t msglen, char *endpoint, size_t eplen, pid_t *pid);
/* Replaces the session key file of sid's server (its tokens revoked: docs/api.md); the
 * server reads it at its next admission. 0, 1 when there is no such server, -1 with err. */
int nm_server_set_key(struct nm *nm, const char *sid, const char *hex, char *err, size_t errlen);
/* SIGTERM now, SIGKILL after the grace (lock held). */
void nm_server_stop_locked(struct nm *nm, struct nm_server *s);
/* Stops the server of sid and waits for its exit (lock NOT held). 0, or -1
 * when there is no such server. */
int nm_server_stop_wait(struct nm *nm, const char *sid);
/* Main thread: reaps what exited, SIGKILLs what outlived its grace. */
void nm_servers_reap(struct nm *nm);
/* A server's status page: connected clients and memory (lock held).
 * 0 when it could be read and the server listens. */
int nm_server_status(const struct nm_server *s, int *connected, long long *memory_used);
/* Whether s's status page says it listens on its port, as its pid (lock held). */
int nm_server_listening(const struct nm_server *s);
/* Unlinks its files and frees it (lock held, entry already unlinked). */
void nm_server_free(struct nm_server *s);
struct nm_server *nm_server_find(struct nm *nm, const char *sid);
void nm_server_unlink(struct nm *nm, struct nm_server *s);
/* Whether any server process is still alive (lock held). */
int nm_servers_any_live(struct nm *nm);
/* Where clients reach s: "unix:SOCK,tcp://HOST:PORT" (lock held). */
void nm_server_endpoint(const struct nm *nm, const struct nm_server *s, char *out, size_t len);
/* A server's exit, noticed (lock held): state, reason, what to report; frees an entry
 * nobody waits for. how: the exit as words. */
void nm_server_exited_locked(struct nm *nm, struct nm_server *s, const char *how);

/* ---- servers of an earlier run (adopt.c) ---- */
/* Writes s's record STATE_DIR/SID.server (0600): its pid and start time and share, what
 * a later run needs to adopt it (lock held, s->pid set). 0, or -1 logged. */
int nm_server_record(struct nm *nm, const struct nm_server *s);
/* At start (lock NOT held, GPUs known): adopts the servers an earlier run left running,
 * each proven the flyt-server its record names (start time, executable, status page);
 * stops those it cannot use; removes the files of everything else. */
void nm_servers_adopt(struct nm *nm);
/* An adopted server (not our child) that has exited: 1 (its group killed), else 0. */
int nm_adopted_exited(struct nm_server *s);

/* ---- a VM's memory quota, shared by its servers (vmquota.c), lock held ---- */
struct nm_vmq;
/* s joins its VM's page (created for the VM's first server, with s's quota). 0 (also
 * when s names no VM: it then has none), or -1 with why. */
int  nm_vmq_get(struct nm *nm, struct nm_server *s, char *err, size_t errlen);
const char *nm_vmq_path(const struct nm_server *s); /* NULL: none */
void nm_vmq_set_quota(struct nm_server *s, long long quota);
long long nm_vmq_used(const struct nm_server *s);   /* the VM's bytes; -1: no page */
/* s's process group is gone: what its sessions held is given back. */
void nm_vmq_server_gone(struct nm_server *s);
/* s leaves its VM's page; the VM's last server removes it. */
void nm_vmq_put(struct nm_server *s);

/* ---- the cluster manager (clmlink.c), main thread ---- */
int  nm_register(struct nm *nm);
int  nm_heartbeat(struct nm *nm);
void nm_report_ended(struct nm *nm, int timeout_ms);

/* ---- the node manager's API (api.c) ---- */
extern const struct flyt_http_route nm_routes[];
/* Whether the request carries the cluster manager's token (else answered). */
int nm_authorized(struct nm *nm, const struct flyt_http_request *req,
                  struct flyt_http_response *res);
/* "sm_groups", "sm_count", "memory_quota" of a share on gpu into r; -1 once
 * answered with a 400. */
int nm_parse_share(const struct nm_gpu *gpu, json_t *groups, json_t *sc, json_t *mq,
                   struct nm_start_req *r, struct flyt_http_response *res);
/* POST /v1/servers/{id}/resize (resize.c). */
void nm_h_resize(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res);
/* checkpoint.c: a session's state file STATE_DIR/ID.state (0, or -1: too long) and the
 * routes that write, read, fill and remove it. */
int nm_state_file(const struct nm *nm, const char *sid, char *out, size_t outlen);
void nm_h_checkpoint(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res);
void nm_h_checkpoint_progress(void *ctx, const struct flyt_http_request *req,
                              struct flyt_http_response *res);
void nm_h_state_get(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res);
void nm_h_state_put(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res);
void nm_h_state_delete(void *ctx, const struct flyt_http_request *req,
                       struct flyt_http_response *res);

/* ---- MPS (mps.c), main thread ---- */
int  nm_mps_start(struct nm *nm, char *err, size_t errlen);
void nm_mps_stop(struct nm *nm);
/* The MPS directories of GPU index (for a server's environment). */
void nm_mps_dirs(const struct nm *nm, int index, char *pipe, size_t plen, char *log, size_t llen);

/* ---- processes (servers.c) ---- */
/* Builds an environment: the node manager's minus the variables Flyt sets,
 * plus extra ("NAME=value", NULL-terminated). Free with nm_env_free. */
char **nm_env_build(const char *const *extra);
void   nm_env_free(char **env);
/* fork + exec, the child in its own process group with default signals and
 * only fds 0-2 (stdin from /dev/null unless stdin_fd >= 0). 0 with the pid;
 * -1 with a reason (exec failures are reported, not just exit 127). */
int nm_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, pid_t *pid,
             char *err, size_t errlen);
/* Runs a command to completion (main thread): its exit status, or -1. */
int nm_run(const char *path, char *const argv[], char *const envp[], const char *input,
           long long timeout_ms, char *err, size_t errlen);

#endif
