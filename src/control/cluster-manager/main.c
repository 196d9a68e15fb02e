/* flyt-cluster-manager: the control plane's API and source of truth (docs/api.md). */
#include "clm.h"
#include "seal.h"

#include "flyt_daemon.h"
#include "flyt_log.h"

#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-cluster-manager --config FILE [--port-file FILE]\n"
            "       flyt-cluster-manager --check-config FILE | --help | --version\n"
            "\n"
            "The Flyt cluster manager: VMs, nodes, GPU placement and sessions over the HTTP API\n"
            "of docs/api.md, state in SQLite or PostgreSQL.\n"
            "\n"
            "  --config FILE        the config file (example: configs/cluster-manager.conf)\n"
            "  --port-file FILE     write the bound TCP port there once listening (for tests\n"
            "                       that listen on port 0)\n"
            "  --check-config FILE  check the file (and the operator token, TLS and CA files),\n"
            "                       then exit\n"
            "  --help, --version\n"
            "\n"
            "SIGHUP reads operator_token_file again (token rotation; docs/api.md).\n"
            "\n"
            "Config keys (key = value; durations take ms/s/m/h):\n");
    flyt_config_print_help(clm_config_keys, out);
}

static void version(void)
{
    printf("flyt-cluster-manager %s (store schema %d)\n", FLYT_CLM_VERSION,
           store_latest_schema_version());
}

static struct clm clm;
static struct seal_key store_key;   /* node secrets in the store are sealed with it */

static int load(void *ctx, const char *path, int *log_level, char *err, size_t errlen)
{
    struct clm *c = ctx;
    if (settings_load(path, &c->set, &c->operator_tokens, err, errlen) < 0)
        return -1;
    *log_level = c->set.log_level;
    return 0;
}

/* SIGHUP: operator_token_file again (a rotation: docs/api.md). */
static void reload(void *ctx)
{
    struct clm *c = ctx;
    struct clm_operator_tokens ops;
    char why[1400];
    if (settings_read_operator_tokens(c->set.operator_token_file, &ops, why, sizeof why) < 0) {
        flyt_error("SIGHUP: operator_token_file: %s; keeping the tokens in use", why);
        return;
    }
    int n = ops.n;
    pthread_mutex_lock(&c->lock);
    c->operator_tokens = ops;
    pthread_mutex_unlock(&c->lock);
    OPENSSL_cleanse(&ops, sizeof ops);
    flyt_info("SIGHUP: operator_token_file %s: %d operator token(s) valid from now on",
              c->set.operator_token_file, n);
}

static const struct flyt_daemon daemon_spec = {
    .name = "flyt-cluster-manager",
    .short_opts = "h",
    .takes_port_file = 1,
    .usage = usage,
    .version = version,
    .load = load,
    .config_good = "OK",
    .reload = reload,
    .ctx = &clm,
};

/* The store's key loaded (made at an SQLite store's first start) and the node secrets
 * sealed with it, those an older version left in plain text too. */
static int seal_store(void)
{
    char err[1400];
    const char *file = clm.set.store_key_file;
    if ((file[0] ? seal_key_file_load(file, clm.set.store_key_create, &store_key, err, sizeof err)
                 : seal_key_random(&store_key)) < 0) {
        flyt_error("store_key_file: %s", err);
        return -1;
    }
    int sealed = store_nodes_seal(clm.store, &store_key, err, sizeof err);
    if (sealed < 0) {
        flyt_error("store %s: %s (store_key_file %s)", clm.set.store_url, err,
                   file[0] ? file : "none: an in-memory store");
        return -1;
    }
    if (sealed > 0)
        flyt_info("sealed %d node secret(s) the store held in plain text (store_key_file %s)",
                  sealed, file);
    return 0;
}

/* The store, open and with the sessions a previous run left starting failed. */
static int open_store(void)
{
    char err[1024];
    clm.store = store_open(clm.set.store_url, err, sizeof err);
    if (!clm.store) {
        flyt_error("store %s: %s", clm.set.store_url, err);
        return -1;
    }
    if (seal_store() < 0) {
        store_close(clm.store);
        return -1;
    }
    if (lifecycle_recover(&clm, err, sizeof err) < 0) {
        flyt_error("recovering sessions: %s", err);
        store_close(clm.store);
        return -1;
    }
    return 0;
}

/* The API and the timer thread; the store is open. */
static int start_serving(void)
{
    char err[1024], schema[128];
    int https = clm.set.tls.cert_pem != NULL;
    /* read while nothing else uses the store: once the API and the timer run, every use is
     * theirs, under clm.lock (db.h). A PostgreSQL connection used by two threads at once
     * loses its place in the protocol ("insufficient data in \"T\" message"): a restart
     * while nodes heartbeat failed a request, and the next call got no answer. */
    snprintf(schema, sizeof schema, "%d", store_schema_version(clm.store, err, sizeof err));
    pthread_mutex_lock(&clm.lock);   /* no request runs before clm.http is set */
    clm.http = flyt_http_start_tls(clm.set.listen, clm_routes, &clm, &clm.set.api, &clm.set.tls,
                                   err, sizeof err);
    flyt_http_tls_free(&clm.set.tls);   /* the server keeps its own copy */
    pthread_mutex_unlock(&clm.lock);
    if (!clm.http) {
        flyt_error("%s", err);
        return -1;
    }
    if (lifecycle_start(&clm) < 0) {
        flyt_error("cannot start the timer thread");
        flyt_http_stop(clm.http);
        return -1;
    }
    flyt_info("listening on %s (port %d, %s), store %s (schema %s), policy %s%s", clm.set.listen,
              flyt_http_port(clm.http), https ? "HTTPS" : "plain HTTP", store_kind(clm.store), schema,
              clm.set.policy == PLACE_PACK ? "pack" : "spread",
              clm.set.overcommit ? ", overcommit" : "");
    return 0;
}

int main(int argc, char **argv)
{
    struct flyt_daemon_args args;
    int rc = flyt_daemon_start(&daemon_spec, argc, argv, &args);
    if (rc != FLYT_DAEMON_RUN)
        return rc;
    sigset_t sigs;   /* they go to flyt_daemon_wait, not to the server threads */
    flyt_daemon_block_signals(&daemon_spec, &sigs);
    flyt_mutex_init(&clm.lock);
    flyt_mutex_init(&clm.timer_lock);
    pthread_cond_init(&clm.timer_cond, NULL);
    clm.started_ms = now_ms();
    if (open_store() < 0)
        return 1;
    if (start_serving() < 0) {
        store_close(clm.store);
        return 1;
    }
    if (args.port_file)
        flyt_daemon_write_port(args.port_file, flyt_http_port(clm.http));
    flyt_daemon_wait(&daemon_spec, &sigs);
    flyt_http_stop(clm.http);
    lifecycle_stop(&clm);
    store_close(clm.store);
    seal_key_forget(&store_key);
    pthread_mutex_destroy(&clm.lock);
    return 0;
}
