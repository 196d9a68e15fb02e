/* flyt-cluster-manager's config keys (configs/cluster-manager.conf explains each) and the
 * checks the config module does not do itself. */
#include "clm.h"
#include "seal.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <openssl/crypto.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const struct flyt_cfg_key clm_config_keys[] = {
    {"listen", FLYT_CFG_STRING, "0.0.0.0:8600", "HTTP API address, HOST:PORT", false, 0, 0},
    {"store", FLYT_CFG_STRING, "sqlite:/var/lib/flyt/cluster.db",
     "sqlite:/path/file.db (or a plain path) or postgresql://user@host/db", false, 0, 0},
    {"operator_token_file", FLYT_CFG_STRING, NULL,
     "file holding the operator token (flytctl's), at least 32 characters; up to 8, one a "
     "line, all valid (rotation: add the new one, switch, remove the old; SIGHUP reads it "
     "again)", true, 0, 0},
    {"store_key_file", FLYT_CFG_STRING, NULL,
     "file holding the key (64 hex digits, mode 0600) node secrets are sealed with in the "
     "store; required with PostgreSQL; unset with SQLite: the store file's path + \".key\", "
     "made at first start", false, 0, 0},
    {"heartbeat_interval", FLYT_CFG_DURATION, "5s", "how often node managers heartbeat", false,
     100, 3600000},
    {"node_timeout", FLYT_CFG_DURATION, "20s", "a node silent this long is lost", false, 200,
     86400000},
    {"idle_grace", FLYT_CFG_DURATION, "10m",
     "a session its node reports unconnected this long is released", false, 100, 604800000},
    {"placement_policy", FLYT_CFG_STRING, "spread", "spread (most free GPU first) or pack", false,
     0, 0},
    {"overcommit", FLYT_CFG_BOOL, "false", "let sessions share SM groups (never memory)", false, 0,
     0},
    {"session_token_ttl", FLYT_CFG_DURATION, "10m", "lifetime of the session tokens issued (a client asks again at each reconnect)",
     false, 1000, 31536000000LL},
    {"server_start_timeout", FLYT_CFG_DURATION, "30s",
     "how long a node manager may take to start a server", false, 100, 600000},
    {"log_level", FLYT_CFG_STRING, "info", "error, warn, info or debug", false, 0, 0},
    {"api_max_connections", FLYT_CFG_INT, "512",
     "API connections open at once, from all peers (more are closed at accept)", false, 8, 60000},
    {"api_max_connections_per_peer", FLYT_CFG_INT, "64",
     "API connections open at once from one IP address", false, 1, 60000},
    {"api_request_timeout", FLYT_CFG_DURATION, "10s",
     "a request's headers and body must arrive within this (and its answer leave within it)",
     false, 100, 600000},
    FLYT_HTTP_TLS_CFG_KEYS,
    {"node_ca_file", FLYT_CFG_STRING, NULL,
     "PEM CA certificate(s) that node managers' https:// certificates must chain to; unset: "
     "the system's CA store", false, 0, 0},
    {NULL, 0, NULL, NULL, false, 0, 0}};

static int copy_str(char *dst, size_t cap, const char *src, const char *path,
                    const struct flyt_config *cfg, const char *key, char *err, size_t errlen)
{
    if (strlen(src) >= cap) {
        snprintf(err, errlen, "%s:%d: %s: value too long", path, flyt_config_line(cfg, key), key);
        return -1;
    }
    snprintf(dst, cap, "%s", src);
    return 0;
}

int settings_read_operator_tokens(const char *file, struct clm_operator_tokens *ops, char *err,
                                  size_t errlen)
{
    struct clm_operator_tokens got = {0};
    got.n = flyt_token_file_read(file, 0077, 32, got.tok, FLYT_TOKEN_FILE_MAX, err, errlen);
    if (got.n < 0)
        return -1;
    *ops = got;
    OPENSSL_cleanse(&got, sizeof got);
    return 0;
}

/* The SQLite file of a store URL; NULL for PostgreSQL. */
static const char *sqlite_file(const char *url)
{
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        return NULL;
    return strncmp(url, "sqlite:", 7) == 0 ? url + 7 : url;
}

/* The key file reads and holds a key (its mode too: the owner's alone). */
static int store_key_check(const struct flyt_config *cfg, const char *path, const char *file,
                           char *err, size_t errlen)
{
    struct seal_key key;
    char why[1400];
    int rc = seal_key_file_load(file, 0, &key, why, sizeof why);
    seal_key_forget(&key);
    if (rc < 0)
        snprintf(err, errlen, "%s:%d: store_key_file: %s", path,
                 flyt_config_line(cfg, "store_key_file"), why);
    return rc;
}

/* store_key_file, checked; or its default for an SQLite store (made at its first start). */
static int store_key_settings(const struct flyt_config *cfg, const char *path,
                              struct clm_settings *set, char *err, size_t errlen)
{
    const char *db = sqlite_file(set->store_url);
    if (flyt_config_path(cfg, path, "store_key_file", set->store_key_file,
                         sizeof set->store_key_file, err, errlen) < 0)
        return -1;
    if (set->store_key_file[0])
        return store_key_check(cfg, path, set->store_key_file, err, errlen);
    if (!db || strncmp(db, "file:", 5) == 0) {
        snprintf(err, errlen, "%s: store_key_file: required with a %s store (a file holding "
                 "64 hex digits, mode 0600, outside the store: the key node secrets are sealed "
                 "with; make one with: openssl rand -hex 32)", path,
                 db ? "file: URI SQLite" : "PostgreSQL");
        return -1;
    }
    if (strcmp(db, ":memory:") == 0)
        return 0;
    int n = snprintf(set->store_key_file, sizeof set->store_key_file, "%s.key", db);
    if (n < 0 || (size_t)n >= sizeof set->store_key_file) {
        snprintf(err, errlen, "%s: store: path too long for its key file", path);
        return -1;
    }
    set->store_key_create = 1;
    return access(set->store_key_file, F_OK) == 0
               ? store_key_check(cfg, path, set->store_key_file, err, errlen) : 0;
}

int settings_load(const char *path, struct clm_settings *set, struct clm_operator_tokens *ops,
                  char *err, size_t errlen)
{
    struct flyt_config *cfg = flyt_config_new(clm_config_keys);
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    if (flyt_config_load(cfg, path, err, errlen) < 0)
        goto out;
    memset(set, 0, sizeof *set);
    if (copy_str(set->listen, sizeof set->listen, flyt_config_str(cfg, "listen"), path, cfg,
                 "listen", err, errlen) < 0
        || copy_str(set->store_url, sizeof set->store_url, flyt_config_str(cfg, "store"), path,
                    cfg, "store", err, errlen) < 0
        || copy_str(set->operator_token_file, sizeof set->operator_token_file,
                    flyt_config_str(cfg, "operator_token_file"), path, cfg, "operator_token_file",
                    err, errlen) < 0)
        goto out;
    if (set->operator_token_file[0] != '/') {   /* relative to the config file */
        const char *slash = strrchr(path, '/');
        if (slash) {
            char joined[sizeof set->operator_token_file];
            int n = snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - path), path,
                             set->operator_token_file);
            if (n < 0 || (size_t)n >= sizeof joined) {
                snprintf(err, errlen, "%s:%d: operator_token_file: path too long", path,
                         flyt_config_line(cfg, "operator_token_file"));
                goto out;
            }
            memcpy(set->operator_token_file, joined, (size_t)n + 1);
        }
    }
    set->heartbeat_interval_ms = (long long)flyt_config_duration_ms(cfg, "heartbeat_interval");
    set->node_timeout_ms = (long long)flyt_config_duration_ms(cfg, "node_timeout");
    set->idle_grace_ms = (long long)flyt_config_duration_ms(cfg, "idle_grace");
    set->session_token_ttl_ms = (long long)flyt_config_duration_ms(cfg, "session_token_ttl");
    set->server_start_timeout_ms = (long long)flyt_config_duration_ms(cfg, "server_start_timeout");
    set->overcommit = flyt_config_bool(cfg, "overcommit");
    set->api.max_connections = (unsigned)flyt_config_int(cfg, "api_max_connections");
    set->api.max_per_peer = (unsigned)flyt_config_int(cfg, "api_max_connections_per_peer");
    set->api.request_timeout_ms = (unsigned)flyt_config_duration_ms(cfg, "api_request_timeout");
    set->api.idle_timeout_s = FLYT_HTTP_IDLE_TIMEOUT_S;
    if (placement_policy_parse(flyt_config_str(cfg, "placement_policy"), &set->policy) < 0) {
        snprintf(err, errlen, "%s:%d: placement_policy: \"%s\" is not spread or pack", path,
                 flyt_config_line(cfg, "placement_policy"), flyt_config_str(cfg, "placement_policy"));
        goto out;
    }
    set->log_level = flyt_log_level_parse(flyt_config_str(cfg, "log_level"));
    if (set->log_level < 0) {
        snprintf(err, errlen, "%s:%d: log_level: \"%s\" is not error, warn, info or debug", path,
                 flyt_config_line(cfg, "log_level"), flyt_config_str(cfg, "log_level"));
        goto out;
    }
    if (set->node_timeout_ms <= set->heartbeat_interval_ms) {
        snprintf(err, errlen, "%s:%d: node_timeout (%lld ms) must be longer than "
                 "heartbeat_interval (%lld ms)", path,
                 flyt_config_line(cfg, "node_timeout") ? flyt_config_line(cfg, "node_timeout")
                                                       : flyt_config_line(cfg, "heartbeat_interval"),
                 set->node_timeout_ms, set->heartbeat_interval_ms);
        goto out;
    }
    char why[1400];
    if (settings_read_operator_tokens(set->operator_token_file, ops, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s:%d: operator_token_file: %s", path,
                 flyt_config_line(cfg, "operator_token_file"), why);
        goto out;
    }
    if (store_key_settings(cfg, path, set, err, errlen) < 0
        || flyt_http_client_ca_from_config(cfg, path, "node_ca_file", err, errlen) < 0 ||
        flyt_http_tls_from_config(cfg, path, &set->tls, err, errlen) < 0)
        goto out;
    rc = 0;
out:
    flyt_config_free(cfg);
    return rc;
}
