/* The daemons' skeleton (flyt_daemon.h). */
#include "flyt_daemon.h"

#include "flyt_log.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OPTS 32

/* The common long options, then the daemon's own. */
static void gather_options(const struct flyt_daemon *d, struct option *opts)
{
    int n = 0;
    opts[n++] = (struct option){"config", required_argument, NULL, FLYT_DAEMON_OPT_CONFIG};
    opts[n++] = (struct option){"check-config", required_argument, NULL, FLYT_DAEMON_OPT_CHECK};
    if (d->takes_port_file)
        opts[n++] = (struct option){"port-file", required_argument, NULL, FLYT_DAEMON_OPT_PORT_FILE};
    opts[n++] = (struct option){"help", no_argument, NULL, FLYT_DAEMON_OPT_HELP};
    opts[n++] = (struct option){"version", no_argument, NULL, FLYT_DAEMON_OPT_VERSION};
    for (const struct option *o = d->own_opts; o && o->name && n < MAX_OPTS - 1; o++)
        opts[n++] = *o;
    opts[n] = (struct option){NULL, 0, NULL, 0};
}

static int bad_command_line(const struct flyt_daemon *d, const char *what, const char *arg)
{
    fprintf(stderr, "%s: %s \"%s\"\n", d->name, what, arg);
    if (d->try_help_on_error) {
        fprintf(stderr, "try %s --help\n", d->name);
    } else {
        fprintf(stderr, "\n");
        d->usage(stderr);
    }
    return 2;
}

/* One parsed option: FLYT_DAEMON_RUN to go on, or the exit status. */
static int take_option(const struct flyt_daemon *d, int code, char **argv,
                       struct flyt_daemon_args *args)
{
    switch (code) {
    case FLYT_DAEMON_OPT_CONFIG:
        args->config = optarg;
        args->check_only = 0;
        return FLYT_DAEMON_RUN;
    case FLYT_DAEMON_OPT_CHECK:
        args->config = optarg;
        args->check_only = 1;
        return FLYT_DAEMON_RUN;
    case FLYT_DAEMON_OPT_PORT_FILE:
        args->port_file = optarg;
        return FLYT_DAEMON_RUN;
    case FLYT_DAEMON_OPT_HELP:
        d->usage(stdout);
        return 0;
    case FLYT_DAEMON_OPT_VERSION:
        d->version();
        return 0;
    default:
        if (code >= FLYT_DAEMON_OPT_OWN && d->option) {
            int rc = d->option(d->ctx, code, optarg);
            return rc == 0 ? FLYT_DAEMON_RUN : rc;
        }
        return bad_command_line(d, "unknown or incomplete argument", argv[optind - 1]);
    }
}

int flyt_daemon_parse(const struct flyt_daemon *d, int argc, char **argv,
                      struct flyt_daemon_args *args)
{
    struct option opts[MAX_OPTS];
    gather_options(d, opts);
    *args = (struct flyt_daemon_args){.config = d->default_config};
    opterr = 0;
    optind = 1;
    int code;
    while ((code = getopt_long(argc, argv, d->short_opts, opts, NULL)) != -1) {
        int rc = take_option(d, code, argv, args);
        if (rc != FLYT_DAEMON_RUN)
            return rc;
    }
    if (optind < argc)
        return bad_command_line(d, "unexpected argument", argv[optind]);
    if (!args->config) {
        fprintf(stderr, "%s: --config FILE is required\n\n", d->name);
        d->usage(stderr);
        return 2;
    }
    return FLYT_DAEMON_RUN;
}

int flyt_daemon_configure(const struct flyt_daemon *d, const struct flyt_daemon_args *args)
{
    char err[4200];
    int level = FLYT_LOG_INFO;
    flyt_log_init(d->name, FLYT_LOG_INFO);
    if (d->load(d->ctx, args->config, &level, err, sizeof err) < 0) {
        fprintf(stderr, "%s: bad config: %s\n", d->name, err);
        return 2;
    }
    if (args->check_only) {
        printf("%s: %s\n", args->config, d->config_good);
        return 0;
    }
    flyt_log_init(d->name, (enum flyt_log_level)level);
    return FLYT_DAEMON_RUN;
}

int flyt_daemon_start(const struct flyt_daemon *d, int argc, char **argv,
                      struct flyt_daemon_args *args)
{
    int rc = flyt_daemon_parse(d, argc, argv, args);
    return rc == FLYT_DAEMON_RUN ? flyt_daemon_configure(d, args) : rc;
}

void flyt_daemon_block_signals(const struct flyt_daemon *d, sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGINT);
    if (d->sighup_continues || d->reload)
        sigaddset(sigs, SIGHUP);
    if (d->takes_sigchld)
        sigaddset(sigs, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The next signal, waiting at most ms (< 0: no limit); 0 when none came. */
static int next_signal(const sigset_t *sigs, long long ms)
{
    if (ms < 0) {
        int sig = 0;
        return sigwait(sigs, &sig) == 0 ? sig : 0;
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    int sig = sigtimedwait(sigs, NULL, &ts);
    return sig > 0 ? sig : 0;
}

int flyt_daemon_wait(const struct flyt_daemon *d, const sigset_t *sigs)
{
    for (;;) {
        long long wait = d->tick ? d->tick(d->ctx) : -1;
        int sig = next_signal(sigs, wait);
        if (sig == SIGTERM || sig == SIGINT) {
            flyt_info("signal %d: stopping", sig);
            return sig;
        }
        if (sig == SIGHUP && d->reload)
            d->reload(d->ctx);
        else if (sig == SIGHUP)
            flyt_info("SIGHUP: nothing to reload (restart to apply config changes)");
    }
}

void flyt_daemon_write_port(const char *path, int port)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (f) {
        fprintf(f, "%d\n", port);
        ok = fclose(f) == 0 && rename(tmp, path) == 0;
    }
    if (!ok)
        flyt_warn("cannot write the port file %s", path);
}
