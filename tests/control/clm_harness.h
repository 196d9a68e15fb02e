/* Test harness for flyt-cluster-manager: runs the real daemon as a child process on
 * loopback, fake node managers (flyt_http servers answering /v1/servers) and a heartbeat
 * thread playing their node-manager side, and JSON call helpers. */
#ifndef FLYT_TEST_CM_HARNESS_H
#define FLYT_TEST_CM_HARNESS_H

#include "flyt_http.h"

#include <pthread.h>
#include <sys/types.h>

#define FAKE_MAX_SERVERS 64

struct fake_server {
    char session_id[64];
    int connected;
};

/* A fake node manager: answers POST/DELETE/GET /v1/servers and POST /v1/servers/{id}/resize
 * with the manager token. */
struct fake_nm {
    struct flyt_http_server *http;
    char address[64];            /* http://127.0.0.1:PORT */
    char node_id[64];
    char node_token[65];         /* to call the cluster manager */
    char manager_token[65];      /* what the cluster manager must send */
    char session_key[65];
    int heartbeat;               /* the heartbeat thread reports for it */
    int fail_start;              /* POST /v1/servers answers 500 */
    int starts, stops, bad_auth;
    int resizes, last_sm_count;  /* POST /v1/servers/{id}/resize: count, the last SM count */
    struct fake_server servers[FAKE_MAX_SERVERS];
    int nservers;
    pthread_mutex_t lock;
};

struct clm_proc {
    pid_t pid;
    int port;
    char base[64];               /* http://127.0.0.1:PORT; https:// when extra sets tls_* */
    char dir[256];               /* config, token, port file, log */
    char op_token[65];
    char binary[1024], store[1024], extra[1024];
};

/* Writes the config (extra lines appended) and starts the daemon; exits on failure. */
void clm_start(struct clm_proc *clm, const char *binary, const char *store, const char *extra);
void clm_restart(struct clm_proc *clm);
/* kill -9, then the same start as clm_restart (a crash and its restart). */
void clm_kill_restart(struct clm_proc *clm);
void clm_stop(struct clm_proc *clm);

/* One call; body is JSON text or NULL. Returns the status; *ans (may be NULL) gets the
 * answer (json_decref it). err gets the client's error text. */
long call(struct clm_proc *clm, const char *method, const char *path, const char *token,
          const char *body, json_t **ans);
extern char call_err[1024];

/* Operator calls, checked: a VM (its token into token_out, may be NULL), a node (its token
 * into nm), and nm's registration (the secrets it is given into nm; the answer). */
void clm_create_vm(struct clm_proc *clm, const char *body, char *token_out);
void clm_create_node(struct clm_proc *clm, struct fake_nm *nm, const char *host_ip);
json_t *clm_register_node(struct clm_proc *clm, struct fake_nm *nm, const char *host_ip, int sms,
                          long long mem, const char *sessions);

void fake_nm_start(struct fake_nm *nm, const char *node_id);
void fake_nm_stop(struct fake_nm *nm);
int fake_nm_has(struct fake_nm *nm, const char *session_id);
void fake_nm_set_connected(struct fake_nm *nm, const char *session_id, int connected);

/* Heartbeats every nm with heartbeat set, every period_ms, to clm (whose port may change
 * across restarts), applying "stop" answers. nms is read until heartbeats_stop: it must
 * outlive the call (not a returning function's local). */
void heartbeats_start(struct clm_proc *clm, struct fake_nm **nms, int n, int period_ms);
void heartbeats_stop(void);
/* One heartbeat now; returns the status and the answer. */
long heartbeat_once(struct clm_proc *clm, struct fake_nm *nm, json_t **ans);

/* Polls until cond(arg) or timeout_ms; returns cond's last value. */
int wait_for(int (*cond)(void *), void *arg, int timeout_ms);

const char *jstr(json_t *j, const char *path);   /* "a.b.c" into objects; NULL when absent */
long long jint(json_t *j, const char *path);     /* -1 when absent */

#endif
