/* flyt-client-manager: its options and start on the daemons' skeleton (flyt_daemon.h); the
 * work is in sessions.c, sock.c
 * and install.c (cmgr.h gives the map). */
#include "cmgr.h"

#include "flyt_daemon.h"
#include "flyt_http.h"
#include "flyt_log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-client-manager [--config FILE]\n"
            "       flyt-client-manager --check-config FILE\n"
            "       flyt-client-manager --install [--prefix DIR] [--lib FILE] [--preload]\n"
            "                           [--root DIR] [--ldconfig | --no-ldconfig]\n"
            "       flyt-client-manager --uninstall [--root DIR] [--ldconfig | --no-ldconfig]\n"
            "       flyt-client-manager request [--sm N|+N|-N] [--memory SIZE|+SIZE|-SIZE]\n"
            "                           [--reason TEXT] [--socket PATH]  (request --help)\n"
            "       flyt-client-manager --help | --version\n"
            "\n"
            "Runs in a VM: gives each CUDA process that asks (through Flyt's libcuda.so.1,\n"
            "the CUDA driver library that NVIDIA's runtime and libraries load) a GPU server\n"
            "and session token from the cluster manager, and releases the session when the\n"
            "process ends. Stops on SIGTERM/SIGINT, releasing every session. SIGHUP reads\n"
            "vm_token_file again (a rotated token); a call the cluster manager answers 401\n"
            "does too.\n"
            "\n"
            "  -c, --config FILE   config file (default %s)\n"
            "      --check-config FILE  check a config file and exit (0: good)\n"
            "      --install       make every program of the VM use Flyt's libcuda.so.1 (and\n"
            "                      Flyt's libnvidia-ml.so.1 when it lies next to it): copy\n"
            "                      them to --prefix (default /usr/local/lib/flyt), add\n"
            "                      /etc/ld.so.conf.d/00-flyt.conf, run ldconfig. NVIDIA's\n"
            "                      files are not touched.\n"
            "      --preload       also list libcuda.so.1 in /etc/ld.so.preload (wins over\n"
            "                      RPATH and LD_LIBRARY_PATH too; loaded into every process)\n"
            "      --lib FILE      Flyt's libcuda.so.1 to install (default ../lib/libcuda.so.1\n"
            "                      next to this program); libnvidia-ml.so.1 beside it goes too\n"
            "      --uninstall     undo --install exactly (refuses if its files changed)\n"
            "      --root DIR      apply --install/--uninstall under DIR (image builds, tests);\n"
            "                      ldconfig then runs only with --ldconfig (as ldconfig -r DIR)\n"
            "      --ldconfig, --no-ldconfig  run ldconfig or not (default: run unless --root)\n"
            "  -h, --help          this text and the config keys\n"
            "  -V, --version       version\n"
            "\n"
            "Config keys (FILE holds key = value lines; see configs/client-manager.conf):\n",
            CMGR_DEFAULT_CONFIG);
}

static struct cmgr_config cfg;

static void h_metrics(void *ctx, const struct flyt_http_request *req,
                      struct flyt_http_response *res)
{
    struct flyt_http_server **srv = ctx;
    (void)req;
    struct flyt_buf b = {0};
    sessions_metrics(&b);
    if (*srv)
        flyt_http_metrics(*srv, &b);
    char *text = flyt_buf_take(&b);
    flyt_http_reply_text(res, 200, "text/plain; version=0.0.4", text ? text : strdup(""));
}

static const struct flyt_http_route metric_routes[] = {{"GET", "/metrics", h_metrics},
                                                       {NULL, NULL, NULL}};

/* The help text with the config keys. */
static void help(FILE *out)
{
    usage(out);
    if (out == stdout)
        cmgr_config_help();
}

static void version(void)
{
    printf("flyt-client-manager %s\n", FLYT_VERSION);
}

static int load(void *ctx, const char *path, int *log_level, char *err, size_t errlen)
{
    struct cmgr_config *c = ctx;
    if (cmgr_config_load(path, c, err, errlen) < 0)
        return -1;
    *log_level = c->log_level;
    return 0;
}

/* SIGHUP: the VM token file again (a rotated token, docs/api.md). */
static void reload(void *ctx)
{
    struct cmgr_config *c = ctx;
    flyt_cred_reload_logged(c->vm_cred);
}

/* --install / --uninstall and what goes with them */
enum { OPT_INSTALL = FLYT_DAEMON_OPT_OWN, OPT_UNINSTALL, OPT_PREFIX, OPT_LIB, OPT_PRELOAD,
       OPT_ROOT, OPT_LDCONFIG, OPT_NO_LDCONFIG };
static const struct option install_opts[] = {
    {"install", no_argument, NULL, OPT_INSTALL},
    {"uninstall", no_argument, NULL, OPT_UNINSTALL},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"lib", required_argument, NULL, OPT_LIB},
    {"preload", no_argument, NULL, OPT_PRELOAD},
    {"root", required_argument, NULL, OPT_ROOT},
    {"ldconfig", no_argument, NULL, OPT_LDCONFIG},
    {"no-ldconfig", no_argument, NULL, OPT_NO_LDCONFIG},
    {NULL, 0, NULL, 0}};

static struct {
    int action; /* OPT_INSTALL, OPT_UNINSTALL; 0: run the daemon */
    struct install_opts opts;
} install = {.opts = {.root = "", .prefix = NULL, .ldconfig = -1}};

static int install_option(void *ctx, int code, const char *arg)
{
    (void)ctx;
    struct install_opts *io = &install.opts;
    switch (code) {
    case OPT_INSTALL:
    case OPT_UNINSTALL:
        if (install.action && install.action != code) {
            fprintf(stderr, "flyt-client-manager: --install and --uninstall together\n");
            return 2;
        }
        install.action = code;
        break;
    case OPT_PREFIX: io->prefix = arg; break;
    case OPT_LIB: io->lib = arg; break;
    case OPT_PRELOAD: io->preload = 1; break;
    case OPT_ROOT: io->root = arg; break;
    case OPT_LDCONFIG: io->ldconfig = 1; break;
    case OPT_NO_LDCONFIG: io->ldconfig = 0; break;
    }
    return 0;
}

/* --install or --uninstall: their exit status. */
static int run_install(void)
{
    struct install_opts *io = &install.opts;
    if (install.action == OPT_UNINSTALL && (io->lib || io->preload)) {
        fprintf(stderr, "flyt-client-manager: --uninstall takes no --lib or --preload: it "
                        "undoes what the install record lists\n");
        return 2;
    }
    if (install.action == OPT_UNINSTALL)
        return cmgr_uninstall(io);
    if (io->prefix == NULL)
        io->prefix = "/usr/local/lib/flyt";
    return cmgr_install(io);
}

static const struct flyt_daemon daemon_spec = {
    .name = "flyt-client-manager",
    .short_opts = "c:hV",
    .default_config = CMGR_DEFAULT_CONFIG,
    .own_opts = install_opts,
    .option = install_option,
    .usage = help,
    .version = version,
    .try_help_on_error = 1,
    .load = load,
    .config_good = "good",
    .reload = reload,
    .ctx = &cfg,
};

/* The sessions, the socket and (when configured) the metrics endpoint; NULL or the
 * metrics server in *metrics. */
static int start_serving(struct flyt_http_server **metrics)
{
    char err[4200];
    flyt_info("starting %s: VM %s, cluster manager %s", FLYT_VERSION, cfg.vm_id, cfg.cluster_url);
    if (sessions_start(&cfg, err, sizeof err) < 0) {
        flyt_error("%s", err);
        return -1;
    }
    if (sock_start(&cfg, err, sizeof err) < 0) {
        flyt_error("%s", err);
        sessions_stop();
        return -1;
    }
    *metrics = NULL;
    if (!cfg.metrics_listen[0])
        return 0;
    static struct flyt_http_server *srv_ref;
    *metrics = flyt_http_start(cfg.metrics_listen, metric_routes, &srv_ref, err, sizeof err);
    srv_ref = *metrics;
    if (*metrics == NULL) {
        flyt_error("metrics_listen %s: %s", cfg.metrics_listen, err);
        sessions_stopping();
        sock_stop();
        sessions_stop();
        return -1;
    }
    flyt_info("metrics on http://%s/metrics", cfg.metrics_listen);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "request") == 0)
        return cmgr_request_main(argc - 1, argv + 1);
    struct flyt_daemon_args args;
    int rc = flyt_daemon_parse(&daemon_spec, argc, argv, &args);
    if (rc != FLYT_DAEMON_RUN)
        return rc;
    const struct install_opts *io = &install.opts;
    if (!install.action && (io->prefix || io->lib || io->preload || io->root[0] || io->ldconfig != -1)) {
        fprintf(stderr, "flyt-client-manager: --prefix, --lib, --preload, --root and "
                        "--[no-]ldconfig go with --install or --uninstall\n");
        return 2;
    }
    if (install.action)
        return run_install();
    rc = flyt_daemon_configure(&daemon_spec, &args);
    if (rc != FLYT_DAEMON_RUN)
        return rc;
    sigset_t sigs;   /* they go to flyt_daemon_wait, not to the threads */
    flyt_daemon_block_signals(&daemon_spec, &sigs);
    struct flyt_http_server *metrics;
    if (start_serving(&metrics) < 0)
        return 1;
    flyt_daemon_wait(&daemon_spec, &sigs);
    sessions_stopping();
    sock_stop();
    if (metrics)
        flyt_http_stop(metrics);
    sessions_stop();
    explicit_bzero(cfg.vm_cred->token, sizeof cfg.vm_cred->token);
    flyt_info("stopped");
    return 0;
}
