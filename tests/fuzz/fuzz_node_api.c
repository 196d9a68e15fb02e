/*
 * libFuzzer target: the node manager's HTTP API (the cluster manager's calls:
 * start, stop, list and resize servers; health, metrics), every route of
 * nm_routes, fed requests in the format of fuzz_http.h and handled in
 * process (flyt_http_handle). "cm" is the cluster manager's token.
 *
 * No process is ever started or signalled: the port range is empty, so a
 * valid start is checked, recorded and refused for want of a port ("no free
 * port"), and each input finds two fake servers of pid 0 (one running with a
 * status page in a private temporary directory, one without a page) to stop,
 * list and resize. A resize signals only the sessions its page lists: none.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_server_status.h"
#include "fuzz_http.h"
#include "nm.h"

#define MANAGER_TOKEN "fuzz-manager-token"

static struct nm nm;

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_node_api: %s\n", what);
        abort();
    }
}

/* The temporary directory goes with the process. */
static void cleanup(void)
{
    pthread_mutex_lock(&nm.lock);
    while (nm.servers) {
        struct nm_server *s = nm.servers;
        nm_server_unlink(&nm, s);
        nm_server_free(s);
    }
    pthread_mutex_unlock(&nm.lock);
    rmdir(nm.cfg.state_dir);
}

static void setup_once(void)
{
    fuzz_http_quiet_logs("fuzz_node_api");
    flyt_mutex_init(&nm.lock);
    pthread_cond_init(&nm.cond, NULL);
    struct nm_config *c = &nm.cfg;
    snprintf(c->node_id, sizeof c->node_id, "node-1");
    snprintf(c->state_dir, sizeof c->state_dir, "/tmp/fuzz-node-api-XXXXXX");
    must(mkdtemp(c->state_dir) != NULL, "mkdtemp");
    atexit(cleanup);
    snprintf(c->server_path, sizeof c->server_path, "/nonexistent/flyt-server");
    snprintf(c->server_listen_host, sizeof c->server_listen_host, "127.0.0.1");
    snprintf(c->advertise_host, sizeof c->advertise_host, "127.0.0.1");
    c->port_min = 1; /* an empty range: a start never spawns */
    c->port_max = 0;
    c->start_timeout_ms = 1000;
    c->stop_grace_ms = 1000;
    c->host_backend = 1;
    c->server_unix_socket = 1;
    for (int i = 0; i < 2; i++) {
        struct nm_gpu *g = &nm.gpus[nm.ngpus++];
        g->index = i;
        snprintf(g->uuid, sizeof g->uuid, "GPU-%d0000000-0000-0000-0000-000000000000", i);
        snprintf(g->name, sizeof g->name, "Fuzz H100");
        g->sm_granularity = 2 + 2 * i;
        g->sm_count = 132;
        g->memory_total = 80LL << 30;
    }
    nm.registered = 1;
    snprintf(nm.manager_token, sizeof nm.manager_token, "%s", MANAGER_TOKEN);
    memset(nm.session_key_hex, 'c', 64);
    nm.heartbeat_ms = 5000;
    char err[256];
    nm.http = flyt_http_start("127.0.0.1:0", nm_routes, &nm, err, sizeof err); /* /metrics */
    must(nm.http != NULL, err);
}

/* A server entry without a process; with its status page when page is set. */
static void fake_server(const char *sid, int gpu, int page)
{
    struct nm_server *s = calloc(1, sizeof *s);
    must(s != NULL, "calloc");
    snprintf(s->sid, sizeof s->sid, "%s", sid);
    s->gpu_index = gpu;
    s->state = NM_RUNNING;
    s->port = 9;
    s->ngroups = 2;
    s->groups[0] = 0;
    s->groups[1] = 1;
    s->sm_count = 2 * nm.gpus[gpu].sm_granularity;
    s->memory_quota = 1LL << 30;
    snprintf(s->status_path, sizeof s->status_path, "%s/%s.status", nm.cfg.state_dir, sid);
    if (page) {
        struct flyt_server_status st;
        memset(&st, 0, sizeof st);
        st.magic = FLYT_STATUS_MAGIC;
        st.version = FLYT_STATUS_VERSION;
        int fd = open(s->status_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        must(fd >= 0 && write(fd, &st, sizeof st) == (ssize_t)sizeof st, "status page");
        close(fd);
    }
    s->next = nm.servers;
    nm.servers = s;
}

static void servers_reset(void)
{
    pthread_mutex_lock(&nm.lock);
    while (nm.servers) {
        struct nm_server *s = nm.servers;
        nm_server_unlink(&nm, s);
        nm_server_free(s); /* its files too */
    }
    fake_server("s-1", 0, 1);
    fake_server("s-2", 1, 0);
    pthread_mutex_unlock(&nm.lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup_once);
    servers_reset();
    static const char *const roles[] = {"cm", MANAGER_TOKEN, NULL};
    const struct fuzz_http_target t = {nm_routes, &nm, roles, NULL};
    fuzz_http_run(&t, data, size);
    return 0;
}
