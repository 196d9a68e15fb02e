/* The skeleton the three daemons share (flyt-cluster-manager, flyt-node-manager,
 * flyt-client-manager): the command line's common options through getopt_long, config
 * loading and --check-config, logging, signals and the loop that waits for them, running
 * a timer between.
 *
 *   struct flyt_daemon_args args;
 *   int rc = flyt_daemon_start(&spec, argc, argv, &args);      parse: help, version, errors;
 *   if (rc != FLYT_DAEMON_RUN) return rc;                       configure: load, check, logging
 *   sigset_t sigs; flyt_daemon_block_signals(&spec, &sigs);     before any thread starts
 *   ... start ...
 *   int sig = flyt_daemon_wait(&spec, &sigs);                    SIGTERM or SIGINT
 *                                                               (SIGHUP: spec.reload)
 *   ... stop ... */
#ifndef FLYT_DAEMON_H
#define FLYT_DAEMON_H

#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#define FLYT_DAEMON_RUN (-1) /* go on; any other answer is the exit status */

/* Option codes of the common options (a daemon's own start at FLYT_DAEMON_OPT_OWN). */
enum {
    FLYT_DAEMON_OPT_CONFIG = 'c',
    FLYT_DAEMON_OPT_HELP = 'h',
    FLYT_DAEMON_OPT_VERSION = 'V',
    FLYT_DAEMON_OPT_CHECK = 256,
    FLYT_DAEMON_OPT_PORT_FILE,
    FLYT_DAEMON_OPT_OWN = 300
};

struct flyt_daemon {
    const char *name;             /* "flyt-node-manager": logs and messages */
    const char *short_opts;       /* getopt's short options of the common ones: "h", "c:hV" */
    int takes_port_file;          /* --port-file FILE */
    const char *default_config;   /* NULL: --config (or --check-config) is required */
    /* its own long options, NULL-terminated (NULL: none), and their handler: 0, or an exit
     * status */
    const struct option *own_opts;
    int (*option)(void *ctx, int code, const char *arg);
    void (*usage)(FILE *out);     /* the help text (--help prints it to stdout) */
    void (*version)(void);        /* --version */
    int try_help_on_error;        /* a bad command line says "try NAME --help", not the usage */
    /* Loads and checks path; 0 with the log level, or -1 with "FILE:LINE: reason". */
    int (*load)(void *ctx, const char *path, int *log_level, char *err, size_t errlen);
    const char *config_good;      /* --check-config's word for a good file: "OK", "good" */
    int sighup_continues;         /* SIGHUP is logged and ignored (else its default) */
    /* SIGHUP runs this (reads token files again); NULL: sighup_continues decides */
    void (*reload)(void *ctx);
    int takes_sigchld;            /* SIGCHLD wakes the loop (a daemon that reaps children) */
    /* The timer: runs between signals; the milliseconds until it wants to run again.
     * NULL: the loop only waits for a stopping signal. */
    long long (*tick)(void *ctx);
    void *ctx;
};

struct flyt_daemon_args {
    const char *config;
    int check_only;               /* --check-config */
    const char *port_file;        /* NULL: none */
};

int flyt_daemon_parse(const struct flyt_daemon *d, int argc, char **argv,
                      struct flyt_daemon_args *args);
/* Loads the config (logging at info until its level is known); --check-config ends here. */
int flyt_daemon_configure(const struct flyt_daemon *d, const struct flyt_daemon_args *args);
/* flyt_daemon_parse, then flyt_daemon_configure. */
int flyt_daemon_start(const struct flyt_daemon *d, int argc, char **argv,
                      struct flyt_daemon_args *args);
/* Blocks the daemon's signals in this thread and every thread it starts; ignores SIGPIPE. */
void flyt_daemon_block_signals(const struct flyt_daemon *d, sigset_t *sigs);
/* Runs the timer until SIGTERM or SIGINT, which it returns. */
int flyt_daemon_wait(const struct flyt_daemon *d, const sigset_t *sigs);
/* Writes the bound port to the --port-file (a warning if it cannot). */
void flyt_daemon_write_port(const char *path, int port);

#endif
