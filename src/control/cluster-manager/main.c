/* flyt-cluster-manager: the control plane's API and source of truth (docs/api.md). */
#include "clm.h"

#include "flyt_log.h"

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
            "  --check-config FILE  check the file (and the operator token file), then exit\n"
            "  --help, --version\n"
            "\n"
            "Config keys (key = value; durations take ms/s/m/h):\n");
    flyt_config_print_help(clm_config_keys, out);
}

static int write_port(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

int main(int argc, char **argv)
{
    const char *config = NULL, *port_file = NULL;
    int check_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("flyt-cluster-manager %s (store schema %d)\n", FLYT_CLM_VERSION,
                   store_latest_schema_version());
            return 0;
        } else if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--check-config") == 0)
                   && i + 1 < argc) {
            check_only = strcmp(argv[i], "--check-config") == 0;
            config = argv[++i];
        } else if (strcmp(argv[i], "--port-file") == 0 && i + 1 < argc) {
            port_file = argv[++i];
        } else {
            fprintf(stderr, "flyt-cluster-manager: unknown or incomplete argument \"%s\"\n\n",
                    argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "flyt-cluster-manager: --config FILE is required\n\n");
        usage(stderr);
        return 2;
    }

    static struct clm clm;
    char err[1024];
    flyt_log_init("flyt-cluster-manager", FLYT_LOG_INFO);
    if (settings_load(config, &clm.set, clm.operator_token, sizeof clm.operator_token, err,
                      sizeof err) < 0) {
        fprintf(stderr, "flyt-cluster-manager: bad config: %s\n", err);
        return 2;
    }
    if (check_only) {
        printf("%s: OK\n", config);
        return 0;
    }
    flyt_log_init("flyt-cluster-manager", (enum flyt_log_level)clm.set.log_level);

    /* signals go to sigwait below, not to the server threads */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    flyt_mutex_init(&clm.lock);
    flyt_mutex_init(&clm.timer_lock);
    pthread_cond_init(&clm.timer_cond, NULL);
    clm.started_ms = now_ms();
    clm.store = store_open(clm.set.store_url, err, sizeof err);
    if (!clm.store) {
        flyt_error("store %s: %s", clm.set.store_url, err);
        return 1;
    }
    if (lifecycle_recover(&clm, err, sizeof err) < 0) {
        flyt_error("recovering sessions: %s", err);
        store_close(clm.store);
        return 1;
    }
    pthread_mutex_lock(&clm.lock);   /* no request runs before clm.http is set */
    clm.http = flyt_http_start_limited(clm.set.listen, clm_routes, &clm, &clm.set.api, err, sizeof err);
    pthread_mutex_unlock(&clm.lock);
    if (!clm.http) {
        flyt_error("%s", err);
        store_close(clm.store);
        return 1;
    }
    if (lifecycle_start(&clm) < 0) {
        flyt_error("cannot start the timer thread");
        flyt_http_stop(clm.http);
        store_close(clm.store);
        return 1;
    }
    char schema[128];
    snprintf(schema, sizeof schema, "%d", store_schema_version(clm.store, err, sizeof err));
    flyt_info("listening on %s (port %d), store %s (schema %s), policy %s%s", clm.set.listen,
              flyt_http_port(clm.http), store_kind(clm.store), schema,
              clm.set.policy == PLACE_PACK ? "pack" : "spread",
              clm.set.overcommit ? ", overcommit" : "");
    if (port_file && write_port(port_file, flyt_http_port(clm.http)) < 0)
        flyt_warn("cannot write the port file %s", port_file);

    int sig = 0;
    sigwait(&sigs, &sig);
    flyt_info("signal %d: stopping", sig);
    flyt_http_stop(clm.http);
    lifecycle_stop(&clm);
    store_close(clm.store);
    pthread_mutex_destroy(&clm.lock);
    return 0;
}
