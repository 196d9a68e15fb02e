/* flyt-node-manager: see nm.h. Startup, the main loop and shutdown. */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_token.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

long long nm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int nm_valid_sid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= NM_SID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return s[0] != '.';
}

const struct nm_gpu *nm_gpu_by_index(const struct nm *node_manager, int index)
{
    for (int i = 0; i < node_manager->ngpus; i++)
        if (node_manager->gpus[i].index == index)
            return &node_manager->gpus[i];
    return NULL;
}

void nm_host_for_url(const char *host, char *out, size_t outlen)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET6, host, buf) == 1)
        snprintf(out, outlen, "[%s]", host);
    else
        snprintf(out, outlen, "%s", host);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-node-manager --config FILE [--port-file FILE]\n"
            "       flyt-node-manager --check-config FILE | --help | --version\n"
            "\n"
            "The Flyt node manager of a GPU machine: registers the machine's GPUs with the\n"
            "cluster manager, starts one flyt-server per tenant session when the cluster\n"
            "manager asks, watches them and heartbeats (docs/api.md). SIGTERM stops every\n"
            "server and MPS daemon it started, then it exits 0.\n"
            "\n"
            "  --config FILE        the config file (example: configs/node-manager.conf)\n"
            "  --port-file FILE     write the API's TCP port there once listening (tests that\n"
            "                       listen on port 0)\n"
            "  --check-config FILE  check the file (and the node token file), then exit\n"
            "  --help, --version\n"
            "\n"
            "Config keys (key = value; durations take ms/s/m/h, sizes KiB/MiB/GiB):\n");
    flyt_config_print_help(nm_config_keys, out);
}

static int write_port(const char *path, int port)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
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

int main(int argc, char **argv)
{
    const char *config = NULL, *port_file = NULL;
    int check_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("flyt-node-manager %s\n", NM_VERSION);
            return 0;
        } else if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--check-config") == 0) &&
                   i + 1 < argc) {
            check_only = strcmp(argv[i], "--check-config") == 0;
            config = argv[++i];
        } else if (strcmp(argv[i], "--port-file") == 0 && i + 1 < argc) {
            port_file = argv[++i];
        } else {
            fprintf(stderr, "flyt-node-manager: unknown or incomplete argument \"%s\"\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "flyt-node-manager: --config FILE is required\n\n");
        usage(stderr);
        return 2;
    }

    char err[1024];
    flyt_log_init("flyt-node-manager", FLYT_LOG_INFO);
    if (nm_config_load(config, &node_manager.cfg, err, sizeof err) < 0) {
        fprintf(stderr, "flyt-node-manager: bad config: %s\n", err);
        return 2;
    }
    if (nm_read_token(node_manager.cfg.node_token_file, node_manager.node_token, sizeof node_manager.node_token, err,
                      sizeof err) < 0) {
        fprintf(stderr, "flyt-node-manager: bad config: %s:%s\n", config, err);
        return 2;
    }
    if (check_only) {
        printf("%s: OK\n", config);
        return 0;
    }
    flyt_log_init("flyt-node-manager", (enum flyt_log_level)node_manager.cfg.log_level);
    if (node_manager.cfg.host_backend)
        flyt_warn("backend = host: TEST MODE, fake GPUs and servers on host memory that run no "
                  "kernels");

    /* signals: blocked in every thread; the main loop takes them with sigtimedwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (make_private_dir("state_dir", node_manager.cfg.state_dir) != 0 ||
        (node_manager.cfg.module_cache_dir[0] &&
         make_private_dir("module_cache_dir", node_manager.cfg.module_cache_dir) != 0))
        return 1;
    nm_state_dir_clean(&node_manager.cfg);
    if (nm_gpus_discover(&node_manager.cfg, node_manager.gpus, &node_manager.ngpus, err, sizeof err) != 0) {
        flyt_error("GPUs: %s", err);
        return 1;
    }
    for (int i = 0; i < node_manager.ngpus; i++)
        flyt_info("GPU %d: %s, %s, %d SMs in groups of %d, %lld MiB", node_manager.gpus[i].index,
                  node_manager.gpus[i].name, node_manager.gpus[i].uuid, node_manager.gpus[i].sm_count, node_manager.gpus[i].sm_granularity,
                  node_manager.gpus[i].memory_total >> 20);

    flyt_mutex_init(&node_manager.lock);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&node_manager.cond, &ca);
    if (nm_mps_start(&node_manager, err, sizeof err) != 0) {
        flyt_error("MPS: %s", err);
        return 1;
    }

    pthread_mutex_lock(&node_manager.lock); /* no request runs before node_manager.http is set */
    node_manager.http = flyt_http_start(node_manager.cfg.listen, nm_routes, &node_manager, err, sizeof err);
    pthread_mutex_unlock(&node_manager.lock);
    if (!node_manager.http) {
        flyt_error("%s", err);
        nm_mps_stop(&node_manager);
        return 1;
    }
    char host[NM_STR + 2];
    nm_host_for_url(node_manager.cfg.advertise_host, host, sizeof host);
    snprintf(node_manager.address, sizeof node_manager.address, "http://%s:%d", host, flyt_http_port(node_manager.http));
    flyt_info("listening on %s (port %d) as %s; servers on ports %d-%d; backend %s%s",
              node_manager.cfg.listen, flyt_http_port(node_manager.http), node_manager.address, node_manager.cfg.port_min, node_manager.cfg.port_max,
              node_manager.cfg.host_backend ? "host" : "cuda", node_manager.cfg.mps ? ", MPS" : "");
    if (port_file && write_port(port_file, flyt_http_port(node_manager.http)) < 0)
        flyt_warn("cannot write the port file %s", port_file);

    long long next_register = 0, next_heartbeat = 0, next_report = 0, retry = 1000;
    int sig = 0;
    while (sig != SIGTERM && sig != SIGINT) {
        long long now = nm_now_ms();
        pthread_mutex_lock(&node_manager.lock);
        int registered = node_manager.registered;
        long long hb = node_manager.heartbeat_ms;
        pthread_mutex_unlock(&node_manager.lock);
        if (!registered && now >= next_register) {
            if (nm_register(&node_manager) == 0) {
                retry = 1000;
                next_heartbeat = nm_now_ms() + node_manager.heartbeat_ms;
            } else {
                next_register = nm_now_ms() + retry;
                retry = retry * 2 > 10000 ? 10000 : retry * 2;
            }
        } else if (registered && now >= next_heartbeat) {
            nm_heartbeat(&node_manager);
            nm_report_ended(&node_manager, 0);
            next_heartbeat = nm_now_ms() + hb;
        }
        nm_servers_reap(&node_manager);
        /* a death is told at once, not at the next heartbeat */
        pthread_mutex_lock(&node_manager.lock);
        int pending = 0;
        for (struct nm_server *s = node_manager.servers; s && !pending; s = s->next)
            pending = s->report && s->state == NM_EXITED;
        pthread_mutex_unlock(&node_manager.lock);
        if (pending && nm_now_ms() >= next_report) {
            nm_report_ended(&node_manager, 0);
            next_report = nm_now_ms() + 2000; /* if it failed, not again at once */
        }

        now = nm_now_ms();
        long long wait = 200;
        pthread_mutex_lock(&node_manager.lock);
        long long due = node_manager.registered ? next_heartbeat : next_register;
        pthread_mutex_unlock(&node_manager.lock);
        if (due - now < wait)
            wait = due - now > 0 ? due - now : 0;
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000};
        sig = sigtimedwait(&sigs, NULL, &ts);
    }

    flyt_info("signal %d: stopping", sig);
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
    return 0;
}
