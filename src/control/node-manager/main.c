/* flyt-node-manager: see nm.h. Startup, the main loop and shutdown. */
#include "nm.h"

#include "flyt_daemon.h"
#include "flyt_log.h"
#include "flyt_token.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-node-manager --config FILE [--port-file FILE]\n"
            "       flyt-node-manager --check-config FILE | --help | --version\n"
            "\n"
            "The Flyt node manager of a GPU machine: registers the machine's GPUs with the\n"
            "cluster manager, starts one flyt-server per tenant session when the cluster\n"
            "manager asks, watches them and heartbeats (docs/api.md). SIGTERM stops every\n"
            "server and MPS daemon it started, then it exits 0. SIGHUP reads node_token_file\n"
            "again (a rotated token); a call the cluster manager answers 401 does too.\n"
            "\n"
            "  --config FILE        the config file (example: configs/node-manager.conf)\n"
            "  --port-file FILE     write the API's TCP port there once listening (tests that\n"
            "                       listen on port 0)\n"
            "  --check-config FILE  check the file (and the node token, TLS and CA files), then\n"
            "                       exit\n"
            "  --help, --version\n"
            "\n"
            "Config keys (key = value; durations take ms/s/m/h, sizes KiB/MiB/GiB):\n");
    flyt_config_print_help(nm_config_keys, out);
}

/* key: the config key naming the directory, for the messages. */
static int make_private_dir(const char *key, const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        flyt_error("%s %s: %s", key, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        flyt_error("%s %s is not a directory", key, path);
        return -1;
    }
    if (access(path, W_OK) != 0) {
        flyt_error("%s %s: %s", key, path, strerror(errno));
        return -1;
    }
    char why[1024]; /* it holds the session keys */
    if (flyt_private_check(path, why, sizeof why) != 0) {
        flyt_error("%s: %s", key, why);
        return -1;
    }
    return 0;
}

static struct nm node_manager;

/* Stops every server and waits until none runs (main thread). */
static void stop_all(void)
{
    pthread_mutex_lock(&node_manager.lock);
    node_manager.shutting_down = 1;
    int n = 0;
    for (struct nm_server *s = node_manager.servers; s; s = s->next)
        if (s->pid > 0 && s->state != NM_EXITED) {
            int report = s->state == NM_RUNNING;
            nm_server_stop_locked(&node_manager, s);
            s->report = report; /* the cluster manager did not ask: tell it */
            snprintf(s->reason, sizeof s->reason, "the node manager stopped");
            n++;
        }
    pthread_cond_broadcast(&node_manager.cond);
    pthread_mutex_unlock(&node_manager.lock);
    if (n)
        flyt_info("stopping %d server(s)", n);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        nm_servers_reap(&node_manager);
        pthread_mutex_lock(&node_manager.lock);
        int live = nm_servers_any_live(&node_manager);
        pthread_mutex_unlock(&node_manager.lock);
        if (!live)
            break;
        struct timespec tick = {0, 100 * 1000 * 1000};
        sigtimedwait(&chld, NULL, &tick);
    }
}

static void version(void)
{
    printf("flyt-node-manager %s\n", NM_VERSION);
}

static int load(void *ctx, const char *path, int *log_level, char *err, size_t errlen)
{
    struct nm *nm = ctx;
    if (nm_config_load(path, &nm->cfg, err, errlen) < 0)
        return -1;
    char why[1024];
    if (flyt_cred_init(&nm->node_cred, "node_token_file", nm->cfg.node_token_file, 0077, 32, why,
                       sizeof why) < 0) {
        snprintf(err, errlen, "%s: node_token_file: %s", path, why);
        return -1;
    }
    *log_level = nm->cfg.log_level;
    return 0;
}

/* SIGHUP: the node token file again (a rotated token, docs/api.md). */
static void reload(void *ctx)
{
    struct nm *nm = ctx;
    flyt_cred_reload_logged(&nm->node_cred);
}

/* When the loop runs next: registering (with backoff) or heartbeating, and telling the
 * cluster manager of servers that ended. */
static struct {
    long long next_register, next_heartbeat, next_report, retry;
} timer = {.retry = 1000};

/* Registers until the cluster manager answers, then heartbeats. */
static void talk_to_cluster_manager(void)
{
    long long now = nm_now_ms();
    pthread_mutex_lock(&node_manager.lock);
    int registered = node_manager.registered;
    long long heartbeat_ms = node_manager.heartbeat_ms;
    pthread_mutex_unlock(&node_manager.lock);
    if (!registered && now >= timer.next_register) {
        if (nm_register(&node_manager) == 0) {
            timer.retry = 1000;
            timer.next_heartbeat = nm_now_ms() + node_manager.heartbeat_ms;
        } else {
            timer.next_register = nm_now_ms() + timer.retry;
            timer.retry = timer.retry * 2 > 10000 ? 10000 : timer.retry * 2;
        }
    } else if (registered && now >= timer.next_heartbeat) {
        nm_heartbeat(&node_manager);
        nm_report_ended(&node_manager, 0);
        timer.next_heartbeat = nm_now_ms() + heartbeat_ms;
    }
}

static int deaths_untold(void)
{
    pthread_mutex_lock(&node_manager.lock);
    int pending = 0;
    for (struct nm_server *s = node_manager.servers; s && !pending; s = s->next)
        pending = s->report && s->state == NM_EXITED;
    pthread_mutex_unlock(&node_manager.lock);
    return pending;
}

/* A death is told at once, not at the next heartbeat. */
static void report_deaths(void)
{
    if (deaths_untold() && nm_now_ms() >= timer.next_report) {
        nm_report_ended(&node_manager, 0);
        if (deaths_untold()) /* it failed: not again at once (a later death is told at once) */
            timer.next_report = nm_now_ms() + 2000;
    }
}

/* One turn of the main loop; the ms until the next (SIGCHLD wakes it sooner). */
static long long tick(void *ctx)
{
    (void)ctx;
    talk_to_cluster_manager();
    nm_servers_reap(&node_manager);
    report_deaths();
    long long now = nm_now_ms(), wait = 200;
    pthread_mutex_lock(&node_manager.lock);
    long long due = node_manager.registered ? timer.next_heartbeat : timer.next_register;
    pthread_mutex_unlock(&node_manager.lock);
    if (due - now < wait)
        wait = due - now > 0 ? due - now : 0;
    return wait;
}

static const struct flyt_daemon daemon_spec = {
    .name = "flyt-node-manager",
    .short_opts = "h",
    .takes_port_file = 1,
    .usage = usage,
    .version = version,
    .load = load,
    .config_good = "OK",
    .takes_sigchld = 1,
    .reload = reload,
    .tick = tick,
    .ctx = &node_manager,
};

/* The state and cache directories, private; the GPUs, found. */
static int prepare_node(void)
{
    const struct nm_config *c = &node_manager.cfg;
    if (make_private_dir("state_dir", c->state_dir) != 0 ||
        (c->module_cache_dir[0] && make_private_dir("module_cache_dir", c->module_cache_dir) != 0))
        return -1;
    char err[1024];
    if (nm_gpus_discover(c, node_manager.gpus, &node_manager.ngpus, err, sizeof err) != 0) {
        flyt_error("GPUs: %s", err);
        return -1;
    }
    for (int i = 0; i < node_manager.ngpus; i++) {
        const struct nm_gpu *gpu = &node_manager.gpus[i];
        flyt_info("GPU %d: %s, %s, %d SMs in groups of %d, %lld MiB", gpu->index, gpu->name,
                  gpu->uuid, gpu->sm_count, gpu->sm_granularity, gpu->memory_total >> 20);
    }
    return 0;
}

/* MPS when configured, then the API; its advertised address. */
static int start_serving(void)
{
    char err[1024];
    flyt_mutex_init(&node_manager.lock);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&node_manager.cond, &ca);
    if (nm_mps_start(&node_manager, err, sizeof err) != 0) {
        flyt_error("MPS: %s", err);
        return -1;
    }
    const struct nm_config *c = &node_manager.cfg;
    pthread_mutex_lock(&node_manager.lock); /* no request runs before node_manager.http is set */
    int https = c->tls.cert_pem != NULL;
    node_manager.http = flyt_http_start_tls(c->listen, nm_routes, &node_manager, NULL, &c->tls,
                                            err, sizeof err);
    pthread_mutex_unlock(&node_manager.lock);
    flyt_http_tls_free(&node_manager.cfg.tls);   /* the server keeps its own copy */
    if (!node_manager.http) {
        flyt_error("%s", err);
        nm_mps_stop(&node_manager);
        return -1;
    }
    char host[NM_STR + 2];
    nm_host_for_url(c->advertise_host, host, sizeof host);
    int port = flyt_http_port(node_manager.http);
    snprintf(node_manager.address, sizeof node_manager.address, "%s://%s:%d",
             https ? "https" : "http", host, port);
    flyt_info("listening on %s (port %d) as %s; servers on ports %d-%d; backend %s%s", c->listen,
              port, node_manager.address, c->port_min, c->port_max,
              c->host_backend ? "host" : "cuda", c->mps ? ", MPS" : "");
    return 0;
}

/* Every server stopped and told, the API and MPS down. */
static void shut_down(void)
{
    stop_all();
    flyt_http_stop(node_manager.http);
    nm_report_ended(&node_manager, 2000);
    pthread_mutex_lock(&node_manager.lock);
    while (node_manager.servers) {
        struct nm_server *s = node_manager.servers;
        nm_server_unlink(&node_manager, s);
        nm_server_free(s);
    }
    pthread_mutex_unlock(&node_manager.lock);
    nm_mps_stop(&node_manager);
    flyt_info("stopped");
}

int main(int argc, char **argv)
{
    struct flyt_daemon_args args;
    int rc = flyt_daemon_start(&daemon_spec, argc, argv, &args);
    if (rc != FLYT_DAEMON_RUN)
        return rc;
    if (node_manager.cfg.host_backend)
        flyt_warn("backend = host: TEST MODE, fake GPUs and servers on host memory that run no "
                  "kernels");
    sigset_t sigs;   /* blocked in every thread; the main loop takes them */
    flyt_daemon_block_signals(&daemon_spec, &sigs);
    if (prepare_node() < 0 || start_serving() < 0)
        return 1;
    nm_servers_adopt(&node_manager); /* before registering: it reports them */
    if (args.port_file)
        flyt_daemon_write_port(args.port_file, flyt_http_port(node_manager.http));
    flyt_daemon_wait(&daemon_spec, &sigs);
    shut_down();
    return 0;
}
