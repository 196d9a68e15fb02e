/* The client manager's config file: keys, defaults, and the checks flyt_config does not
 * do itself (URL form, octal mode, group, token file). configs/client-manager.conf
 * explains every key. */
#include "cmgr.h"

#include "flyt_config.h"
#include "flyt_http.h"
#include "flyt_log.h"
#include "flyt_token.h"

#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct flyt_cfg_key keys[] = {
    {"cluster_manager", FLYT_CFG_STRING, NULL,
     "cluster manager base URL, http://HOST:PORT or https://HOST:PORT", true, 0, 0},
    {"cluster_ca_file", FLYT_CFG_STRING, NULL,
     "PEM CA certificate(s) that an https:// cluster manager's certificate must chain to; "
     "unset: the system's CA store", false, 0, 0},
    {"vm_id", FLYT_CFG_STRING, NULL, "this VM's id in the cluster manager (flytctl vm list)",
     true, 0, 0},
    {"vm_token_file", FLYT_CFG_STRING, NULL,
     "file holding this VM's token (shown once by POST /v1/vms); not readable by others",
     true, 0, 0},
    {"socket", FLYT_CFG_STRING, "/run/flyt/client.sock",
     "Unix socket the client library asks (its FLYT_CLIENT_MANAGER default)", false, 0, 0},
    {"socket_group", FLYT_CFG_STRING, NULL,
     "group owning the socket (name or number); unset: the daemon's own group", false, 0, 0},
    {"socket_mode", FLYT_CFG_STRING, "0666",
     "permissions of the socket, octal; 0660 with socket_group limits GPUs to that group",
     false, 0, 0},
    {"state_file", FLYT_CFG_STRING, NULL,
     "where the sessions held are kept (pid, start time, session id) for a restart to "
     "reconcile with; unset: client-manager.state beside the socket", false, 0, 0},
    {"log_level", FLYT_CFG_STRING, "info", "error, warn, info or debug", false, 0, 0},
    {"alive_interval", FLYT_CFG_DURATION, "30s",
     "how often each live process's session is reported alive", false, 200, 3600000},
    {"acquire_timeout", FLYT_CFG_DURATION, "60s",
     "how long one request from a process may retry the cluster manager", false, 1000,
     600000},
    {"request_timeout", FLYT_CFG_DURATION, "30s",
     "limit of one HTTP call to the cluster manager (session creation starts a server)",
     false, 1000, 600000},
    {"retry_max_backoff", FLYT_CFG_DURATION, "30s",
     "longest wait between retries of a release while the cluster manager is unreachable",
     false, 100, 600000},
    {"shutdown_timeout", FLYT_CFG_DURATION, "20s",
     "how long stopping may spend releasing the sessions still held", false, 1000, 600000},
    {"process_watch", FLYT_CFG_STRING, "auto",
     "how ended processes are noticed: auto (pidfd, else /proc), pidfd, proc", false, 0, 0},
    {"max_connections_per_user", FLYT_CFG_INT, "32",
     "open connections one local user may hold at once (of 256 in all), so that one user "
     "cannot lock the others out", false, 1, 256},
    {"metrics_listen", FLYT_CFG_STRING, NULL,
     "HOST:PORT for Prometheus metrics at /metrics; unset: none", false, 0, 0},
    {NULL, 0, NULL, NULL, false, 0, 0}};

void cmgr_config_help(void) { flyt_config_print_help(keys, stdout); }

static int bad(char *err, size_t errlen, const char *file, const struct flyt_config *cfg,
               const char *key, const char *fmt, const char *arg)
{
    char what[400];
    snprintf(what, sizeof what, fmt, arg);
    int line = flyt_config_line(cfg, key);
    if (line > 0)
        snprintf(err, errlen, "%s:%d: %s: %s", file, line, key, what);
    else
        snprintf(err, errlen, "%s: %s (default): %s", file, key, what);
    return -1;
}

static int copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

int cmgr_config_load(const char *path, struct cmgr_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    struct flyt_config *cfg = flyt_config_new(keys);
    if (cfg == NULL) {
        snprintf(err, errlen, "%s: internal error in the key table", path);
        return -1;
    }
    int rc = -1;
    if (flyt_config_load(cfg, path, err, errlen) < 0)
        goto out;

    const char *url = flyt_config_str(cfg, "cluster_manager");
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        bad(err, errlen, path, cfg, "cluster_manager", "expected http://HOST:PORT, got \"%s\"", url);
        goto out;
    }
    if (copy(c->cluster_url, sizeof c->cluster_url, url) < 0) {
        bad(err, errlen, path, cfg, "cluster_manager", "too long%s", "");
        goto out;
    }
    size_t ul = strlen(c->cluster_url);
    while (ul > 0 && c->cluster_url[ul - 1] == '/')
        c->cluster_url[--ul] = '\0';
    if (strchr(strstr(c->cluster_url, "://") + 3, '/') != NULL || ul <= 8) {
        bad(err, errlen, path, cfg, "cluster_manager",
            "give the base URL only (http://HOST:PORT), not \"%s\"", url);
        goto out;
    }

    const char *vm = flyt_config_str(cfg, "vm_id");
    if (*vm == '\0' || copy(c->vm_id, sizeof c->vm_id, vm) < 0) {
        bad(err, errlen, path, cfg, "vm_id", "empty or longer than 127 bytes%s", "");
        goto out;
    }

    /* a relative token file is relative to the config file's folder */
    const char *tf = flyt_config_str(cfg, "vm_token_file");
    char tpath[PATH_MAX];
    if (tf[0] == '/') {
        snprintf(tpath, sizeof tpath, "%s", tf);
    } else {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(tpath, sizeof tpath, "%s/%s", dirname(dir), tf);
    }
    char why[PATH_MAX + 200];
    static struct flyt_cred vm_cred; /* one per process; its lock outlives config reloads */
    c->vm_cred = &vm_cred;
    /* 0640 allowed, as documented */
    if (flyt_cred_init(&vm_cred, "vm_token_file", tpath, 0007, 1, why, sizeof why) < 0) {
        bad(err, errlen, path, cfg, "vm_token_file", "%s", why);
        goto out;
    }

    const char *sock = flyt_config_str(cfg, "socket");
    if (sock[0] != '/' || copy(c->socket_path, sizeof c->socket_path, sock) < 0) {
        bad(err, errlen, path, cfg, "socket", "need an absolute path under 108 bytes, got \"%s\"",
            sock);
        goto out;
    }

    const char *state = flyt_config_str(cfg, "state_file");
    char sockdir[sizeof c->socket_path];
    snprintf(sockdir, sizeof sockdir, "%s", c->socket_path);
    if (state == NULL)
        snprintf(c->state_path, sizeof c->state_path, "%s/client-manager.state", dirname(sockdir));
    else if (state[0] != '/' || copy(c->state_path, sizeof c->state_path, state) < 0) {
        bad(err, errlen, path, cfg, "state_file", "need an absolute path, got \"%s\"", state);
        goto out;
    }

    c->socket_gid = -1;
    const char *grp = flyt_config_str(cfg, "socket_group");
    if (grp != NULL && *grp) {
        char *end;
        long g = strtol(grp, &end, 10);
        if (*end == '\0' && g >= 0) {
            c->socket_gid = (int)g;
        } else {
            struct group *gr = getgrnam(grp);
            if (gr == NULL) {
                bad(err, errlen, path, cfg, "socket_group", "no group named \"%s\"", grp);
                goto out;
            }
            c->socket_gid = (int)gr->gr_gid;
        }
    }

    const char *mode = flyt_config_str(cfg, "socket_mode");
    char *end;
    long m = strtol(mode, &end, 8);
    if (*mode == '\0' || *end != '\0' || m < 0 || m > 0777) {
        bad(err, errlen, path, cfg, "socket_mode", "expected octal permissions like 0660, got \"%s\"",
            mode);
        goto out;
    }
    if ((m & 0600) != 0600) {
        bad(err, errlen, path, cfg, "socket_mode", "the owner needs read and write (%s)", mode);
        goto out;
    }
    c->socket_mode = (unsigned)m;

    const char *lvl = flyt_config_str(cfg, "log_level");
    int level = flyt_log_level_parse(lvl);
    if (level < 0) {
        bad(err, errlen, path, cfg, "log_level", "expected error, warn, info or debug, got \"%s\"",
            lvl);
        goto out;
    }
    c->log_level = level;

    const char *w = flyt_config_str(cfg, "process_watch");
    if (strcmp(w, "auto") == 0)
        c->watch = WATCH_AUTO;
    else if (strcmp(w, "pidfd") == 0)
        c->watch = WATCH_PIDFD;
    else if (strcmp(w, "proc") == 0)
        c->watch = WATCH_PROC;
    else {
        bad(err, errlen, path, cfg, "process_watch", "expected auto, pidfd or proc, got \"%s\"", w);
        goto out;
    }

    const char *ml = flyt_config_str(cfg, "metrics_listen");
    if (ml != NULL && copy(c->metrics_listen, sizeof c->metrics_listen, ml) < 0) {
        bad(err, errlen, path, cfg, "metrics_listen", "too long%s", "");
        goto out;
    }

    c->alive_interval_ms = (long long)flyt_config_duration_ms(cfg, "alive_interval");
    c->acquire_timeout_ms = (long long)flyt_config_duration_ms(cfg, "acquire_timeout");
    c->request_timeout_ms = (long long)flyt_config_duration_ms(cfg, "request_timeout");
    c->max_conns_per_user = (int)flyt_config_int(cfg, "max_connections_per_user");
    c->retry_max_ms = (long long)flyt_config_duration_ms(cfg, "retry_max_backoff");
    c->shutdown_timeout_ms = (long long)flyt_config_duration_ms(cfg, "shutdown_timeout");
    if (flyt_http_client_ca_from_config(cfg, path, "cluster_ca_file", err, errlen) < 0)
        goto out;
    rc = 0;
out:
    flyt_config_free(cfg);
    return rc;
}
