/* flyt-node-manager's config keys (configs/node-manager.conf explains each) and the checks
 * the config module does not do itself. */
#include "nm.h"

#include "flyt_log.h"
#include "flyt_parse.h"
#include "flyt_token.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const struct flyt_cfg_key nm_config_keys[] = {
    {"node_id", FLYT_CFG_STRING, NULL, "this node's id, as created with POST /v1/nodes", true, 0, 0},
    {"node_token_file", FLYT_CFG_STRING, NULL, "file holding the node token (mode 0600)", true, 0, 0},
    {"cluster_manager", FLYT_CFG_STRING, NULL,
     "the cluster manager's URL, http://HOST:PORT or https://HOST:PORT", true, 0, 0},
    {"cluster_ca_file", FLYT_CFG_STRING, NULL,
     "PEM CA certificate(s) that an https:// cluster manager's certificate must chain to; "
     "unset: the system's CA store", false, 0, 0},
    FLYT_HTTP_TLS_CFG_KEYS,
    {"server_tls_cert_file", FLYT_CFG_STRING, NULL,
     "PEM certificate (chain) of the node's flyt-servers: with server_tls_key_file their TCP "
     "listeners speak TLS and the endpoints given to clients are tls:// (the client verifies "
     "it, FLYT_TLS_CA or the system's store; docs/tls.md); must name advertise_host",
     false, 0, 0},
    {"server_tls_key_file", FLYT_CFG_STRING, NULL,
     "PEM private key of server_tls_cert_file, unencrypted, readable by its owner alone",
     false, 0, 0},
    {"listen", FLYT_CFG_STRING, "0.0.0.0:8601",
     "HOST:PORT of this node manager's API, called by the cluster manager (port 0: any)", false,
     0, 0},
    {"advertise_host", FLYT_CFG_STRING, NULL,
     "IP address others reach this node at (API URL, host_ip, server endpoints); default: "
     "listen's host unless it is 0.0.0.0 or ::",
     false, 0, 0},
    {"server_path", FLYT_CFG_STRING, "/usr/local/bin/flyt-server", "the flyt-server program",
     false, 0, 0},
    {"server_listen_host", FLYT_CFG_STRING, "",
     "address the servers listen on; default (empty): advertise_host, the address clients "
     "are given, so that servers listen only where their clients reach them",
     false, 0, 0},
    {"server_unix_socket", FLYT_CFG_BOOL, "true",
     "each server also listens on a Unix socket in state_dir, listed first in its endpoint: "
     "clients on this machine that may open state_dir get shared memory (pinned, mapped and "
     "managed memory); false where separate machines share a file system (tests)",
     false, 0, 0},
    {"server_port_min", FLYT_CFG_INT, "9600", "lowest TCP port given to a server", false, 1, 65535},
    {"server_port_max", FLYT_CFG_INT, "9699", "highest TCP port given to a server", false, 1,
     65535},
    {"server_start_timeout", FLYT_CFG_DURATION, "20s", "how long a server may take to listen",
     false, 100, 600000},
    {"server_stop_grace", FLYT_CFG_DURATION, "15s",
     "after SIGTERM, how long a server may take to stop before SIGKILL", false, 0, 600000},
    {"state_dir", FLYT_CFG_STRING, "/run/flyt-node",
     "directory of the servers' session key files (0600) and status files", false, 0, 0},
    {"module_cache_dir", FLYT_CFG_STRING, "",
     "where servers keep kernel images by content hash, a folder per VM, so that later sessions "
     "of the VM need not send them again (cuBLAS ships about 26 MB on first use); empty: "
     "state_dir/modules; off: none",
     false, 0, 0},
    {"module_cache_max_per_vm", FLYT_CFG_SIZE, "4GiB",
     "disk a VM's cached images may take; past it the least recently used are evicted "
     "(0: no limit)", false, 0, 0},
    {"backend", FLYT_CFG_STRING, "cuda",
     "cuda (the GPUs, through the CUDA driver) or host (test mode: fake GPUs of [test], "
     "servers on the host-memory test backend)",
     false, 0, 0},
    {"sm_granularity", FLYT_CFG_INT, "0",
     "SMs per SM group; 0: from the driver (8 on Hopper)", false, 0, 1024},
    {"heartbeat_interval", FLYT_CFG_DURATION, "0",
     "how often to heartbeat; 0: as the cluster manager says", false, 0, 3600000},
    {"log_level", FLYT_CFG_STRING, "info", "error, warn, info or debug (servers too)", false, 0,
     0},
    {"mps", FLYT_CFG_BOOL, "false", "run an MPS control daemon per GPU while running", false, 0,
     0},
    {"mps_pipe_dir", FLYT_CFG_STRING, "/tmp/nvidia-mps",
     "MPS pipe directories: one gpuN subdirectory per GPU", false, 0, 0},
    {"mps_log_dir", FLYT_CFG_STRING, "/var/log/nvidia-mps",
     "MPS log directories: one gpuN subdirectory per GPU", false, 0, 0},
    {"mps_control", FLYT_CFG_STRING, "nvidia-cuda-mps-control",
     "the MPS control program (a path, or a name looked up in PATH)", false, 0, 0},
    {"test.gpus", FLYT_CFG_INT, "1", "backend = host: how many fake GPUs", false, 1, NM_MAX_GPUS},
    {"test.gpu_name", FLYT_CFG_STRING, "Flyt fake GPU", "backend = host: their name", false, 0,
     0},
    {"test.gpu_compute_capability", FLYT_CFG_STRING, "9.0",
     "backend = host: their compute capability, MAJOR.MINOR", false, 0, 0},
    {"test.gpu_sm_count", FLYT_CFG_INT, "132", "backend = host: SMs of each", false, 1, 100000},
    {"test.gpu_sm_granularity", FLYT_CFG_INT, "8", "backend = host: SMs per SM group", false, 1,
     1024},
    {"test.gpu_memory", FLYT_CFG_SIZE, "80GiB", "backend = host: memory of each", false, 1, 0},
    {NULL, 0, NULL, NULL, false, 0, 0}};

static int copy(char *dst, size_t cap, const char *src, const char *path,
                const struct flyt_config *cfg, const char *key, char *err, size_t errlen)
{
    if (!src)
        src = "";
    if (strlen(src) >= cap) {
        snprintf(err, errlen, "%s:%d: %s: value too long", path, flyt_config_line(cfg, key), key);
        return -1;
    }
    snprintf(dst, cap, "%s", src);
    return 0;
}

/* A relative path is taken relative to the config file's directory. */
static int resolve(char *p, size_t cap, const char *cfgpath, const struct flyt_config *cfg,
                   const char *key, char *err, size_t errlen)
{
    if (!p[0] || p[0] == '/')
        return 0;
    const char *slash = strrchr(cfgpath, '/');
    if (!slash)
        return 0;
    char joined[PATH_MAX + NM_STR];
    int n = snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - cfgpath), cfgpath, p);
    if (n < 0 || (size_t)n >= cap) {
        snprintf(err, errlen, "%s:%d: %s: path too long", cfgpath, flyt_config_line(cfg, key), key);
        return -1;
    }
    memcpy(p, joined, (size_t)n + 1);
    return 0;
}

static int is_ip(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

#define FAIL(key, ...)                                                                    \
    do {                                                                                  \
        char why_[PATH_MAX + 512];                                                                 \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                         \
        if (flyt_config_line(cfg, key))                                                   \
            snprintf(err, errlen, "%s:%d: %s: %s", path, flyt_config_line(cfg, key), key, why_); \
        else                                                                              \
            snprintf(err, errlen, "%s: %s (not set: default): %s", path, key, why_);      \
        goto out;                                                                         \
    } while (0)

int nm_config_load(const char *path, struct nm_config *c, char *err, size_t errlen)
{
    struct flyt_config *cfg = flyt_config_new(nm_config_keys);
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (flyt_config_load(cfg, path, err, errlen) < 0)
        goto out;
    if (copy(c->node_id, sizeof c->node_id, flyt_config_str(cfg, "node_id"), path, cfg, "node_id",
             err, errlen) < 0 ||
        copy(c->node_token_file, sizeof c->node_token_file, flyt_config_str(cfg, "node_token_file"),
             path, cfg, "node_token_file", err, errlen) < 0 ||
        copy(c->cluster_manager, sizeof c->cluster_manager, flyt_config_str(cfg, "cluster_manager"),
             path, cfg, "cluster_manager", err, errlen) < 0 ||
        copy(c->listen, sizeof c->listen, flyt_config_str(cfg, "listen"), path, cfg, "listen", err,
             errlen) < 0 ||
        copy(c->advertise_host, sizeof c->advertise_host, flyt_config_str(cfg, "advertise_host"),
             path, cfg, "advertise_host", err, errlen) < 0 ||
        copy(c->server_path, sizeof c->server_path, flyt_config_str(cfg, "server_path"), path, cfg,
             "server_path", err, errlen) < 0 ||
        copy(c->server_listen_host, sizeof c->server_listen_host,
             flyt_config_str(cfg, "server_listen_host"), path, cfg, "server_listen_host", err,
             errlen) < 0 ||
        copy(c->state_dir, sizeof c->state_dir, flyt_config_str(cfg, "state_dir"), path, cfg,
             "state_dir", err, errlen) < 0 ||
        copy(c->module_cache_dir, sizeof c->module_cache_dir,
             flyt_config_str(cfg, "module_cache_dir"), path, cfg, "module_cache_dir", err,
             errlen) < 0 ||
        copy(c->mps_pipe_dir, sizeof c->mps_pipe_dir, flyt_config_str(cfg, "mps_pipe_dir"), path,
             cfg, "mps_pipe_dir", err, errlen) < 0 ||
        copy(c->mps_log_dir, sizeof c->mps_log_dir, flyt_config_str(cfg, "mps_log_dir"), path, cfg,
             "mps_log_dir", err, errlen) < 0 ||
        copy(c->mps_control, sizeof c->mps_control, flyt_config_str(cfg, "mps_control"), path, cfg,
             "mps_control", err, errlen) < 0 ||
        copy(c->test_gpu_name, sizeof c->test_gpu_name, flyt_config_str(cfg, "test.gpu_name"), path,
             cfg, "test.gpu_name", err, errlen) < 0 ||
        copy(c->test_gpu_cc, sizeof c->test_gpu_cc,
             flyt_config_str(cfg, "test.gpu_compute_capability"), path, cfg,
             "test.gpu_compute_capability", err, errlen) < 0)
        goto out;

    if (!nm_valid_sid(c->node_id))
        FAIL("node_id", "expected 1 to 64 of A-Z a-z 0-9 . _ -");
    if (strncmp(c->cluster_manager, "http://", 7) != 0 &&
        strncmp(c->cluster_manager, "https://", 8) != 0)
        FAIL("cluster_manager", "expected a URL, http://HOST:PORT or https://HOST:PORT");
    size_t ul = strlen(c->cluster_manager);
    while (ul && c->cluster_manager[ul - 1] == '/')
        c->cluster_manager[--ul] = '\0';

    /* listen = HOST:PORT; the advertised host defaults to HOST */
    const char *colon = strrchr(c->listen, ':');
    if (!colon || colon == c->listen || !colon[1])
        FAIL("listen", "expected HOST:PORT");
    if (!c->advertise_host[0]) {
        char host[NM_STR];
        snprintf(host, sizeof host, "%.*s", (int)(colon - c->listen), c->listen);
        if (host[0] == '[') { /* [v6] */
            memmove(host, host + 1, strlen(host));
            char *rb = strchr(host, ']');
            if (rb)
                *rb = '\0';
        }
        if (!is_ip(host) || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
            FAIL("listen", "listening on %s: set advertise_host to the node's IP address", host);
        snprintf(c->advertise_host, sizeof c->advertise_host, "%s", host);
    } else if (!is_ip(c->advertise_host)) {
        FAIL("advertise_host", "expected an IPv4 or IPv6 address, got \"%s\"", c->advertise_host);
    }

    if (!c->server_listen_host[0])
        snprintf(c->server_listen_host, sizeof c->server_listen_host, "%s", c->advertise_host);
    else if (strcmp(c->server_listen_host, "0.0.0.0") == 0 || strcmp(c->server_listen_host, "::") == 0)
        flyt_warn("%s: server_listen_host = %s: session servers listen on every address, not "
                  "only on %s where their clients reach them", path, c->server_listen_host,
                  c->advertise_host);
    c->port_min = (int)flyt_config_int(cfg, "server_port_min");
    c->port_max = (int)flyt_config_int(cfg, "server_port_max");
    if (c->port_max < c->port_min)
        FAIL("server_port_max", "%d is below server_port_min %d", c->port_max, c->port_min);
    c->start_timeout_ms = (long long)flyt_config_duration_ms(cfg, "server_start_timeout");
    c->stop_grace_ms = (long long)flyt_config_duration_ms(cfg, "server_stop_grace");
    c->heartbeat_ms = (long long)flyt_config_duration_ms(cfg, "heartbeat_interval");
    if (c->heartbeat_ms && c->heartbeat_ms < 100)
        FAIL("heartbeat_interval", "at least 100ms (or 0: as the cluster manager says)");
    c->sm_granularity = (int)flyt_config_int(cfg, "sm_granularity");

    const char *backend = flyt_config_str(cfg, "backend");
    if (strcmp(backend, "host") == 0)
        c->host_backend = 1;
    else if (strcmp(backend, "cuda") != 0)
        FAIL("backend", "expected cuda or host, got \"%s\"", backend);
    static const char *const test_keys[] = {"test.gpus", "test.gpu_name",
                                            "test.gpu_compute_capability", "test.gpu_sm_count",
                                            "test.gpu_sm_granularity", "test.gpu_memory"};
    for (size_t i = 0; !c->host_backend && i < sizeof test_keys / sizeof test_keys[0]; i++)
        if (flyt_config_is_set(cfg, test_keys[i]))
            FAIL(test_keys[i], "fake GPUs are for backend = host only (this node runs cuda)");
    c->test_gpus = (int)flyt_config_int(cfg, "test.gpus");
    c->test_gpu_sm_count = (int)flyt_config_int(cfg, "test.gpu_sm_count");
    c->test_gpu_sm_granularity = (int)flyt_config_int(cfg, "test.gpu_sm_granularity");
    c->test_gpu_memory = (long long)flyt_config_size(cfg, "test.gpu_memory");
    if (c->host_backend && c->test_gpu_sm_granularity > c->test_gpu_sm_count)
        FAIL("test.gpu_sm_granularity", "more than test.gpu_sm_count (%d)", c->test_gpu_sm_count);
    if (c->host_backend && !c->test_gpu_name[0])
        FAIL("test.gpu_name", "must not be empty");
    char cc_why[160];
    if (flyt_parse_compute_capability(c->test_gpu_cc, &c->test_gpu_cc_value, cc_why,
                                      sizeof cc_why) != 0)
        FAIL("test.gpu_compute_capability", "%s", cc_why);

    int lvl = flyt_log_level_parse(flyt_config_str(cfg, "log_level"));
    if (lvl < 0)
        FAIL("log_level", "expected error, warn, info or debug");
    c->log_level = lvl;
    c->mps = flyt_config_bool(cfg, "mps");
    c->server_unix_socket = flyt_config_bool(cfg, "server_unix_socket");

    if (!c->state_dir[0])
        FAIL("state_dir", "must not be empty");
    if (!c->server_path[0])
        FAIL("server_path", "must not be empty");
    if (resolve(c->node_token_file, sizeof c->node_token_file, path, cfg, "node_token_file", err,
                errlen) < 0 ||
        resolve(c->server_path, sizeof c->server_path, path, cfg, "server_path", err, errlen) < 0 ||
        resolve(c->state_dir, sizeof c->state_dir, path, cfg, "state_dir", err, errlen) < 0)
        goto out;
    c->module_cache_max = flyt_config_size(cfg, "module_cache_max_per_vm");
    if (strcmp(c->module_cache_dir, "off") == 0)
        c->module_cache_dir[0] = '\0';
    else if (!c->module_cache_dir[0] &&
             snprintf(c->module_cache_dir, sizeof c->module_cache_dir, "%s/modules", c->state_dir) >=
                 (int)sizeof c->module_cache_dir)
        FAIL("module_cache_dir", "state_dir/modules is too long a path");
    else if (resolve(c->module_cache_dir, sizeof c->module_cache_dir, path, cfg,
                     "module_cache_dir", err, errlen) < 0)
        goto out;
    if (access(c->server_path, X_OK) != 0)
        FAIL("server_path", "%s: %s", c->server_path, strerror(errno));
    if (flyt_http_client_ca_from_config(cfg, path, "cluster_ca_file", err, errlen) < 0
        || flyt_http_tls_from_config(cfg, path, &c->tls, err, errlen) < 0
        || flyt_tls_paths_from_config(cfg, path, "server_tls_cert_file", "server_tls_key_file",
                                      c->server_tls_cert, c->server_tls_key,
                                      sizeof c->server_tls_cert, err, errlen) < 0)
        goto out;
    if (c->mps && (c->mps_pipe_dir[0] != '/' || c->mps_log_dir[0] != '/'))
        FAIL(c->mps_pipe_dir[0] != '/' ? "mps_pipe_dir" : "mps_log_dir", "expected an absolute path");
    rc = 0;
out:
    flyt_config_free(cfg);
    return rc;
}
