/* flytctl: the operator's CLI against flyt-cluster-manager (docs/api.md, docs/flytctl.md).
 *   flytctl.c    global options, config, the command table, dispatch, help
 *   ctl_args.c   option parsing of one command, number/size/IP/duration checks
 *   ctl_api.c    HTTP calls, error reporting and exit codes, URL building
 *   ctl_fmt.c    tables, sizes, times, JSON output
 *   cmd_vm.c     vm list|show|add|update|remove|import
 *   cmd_node.c   node list|show|add|remove
 *   cmd_misc.c   session list|show|release, events, status, version
 *   cmd_resize.c session resize, vm resize
 *   cmd_checkpoint.c  checkpoint, restore, migrate, node drain|undrain */
#ifndef FLYT_CTL_H
#define FLYT_CTL_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#ifndef FLYTCTL_VERSION
#define FLYTCTL_VERSION "0.0.0"
#endif

/* Exit codes. */
enum {
    CTL_OK = 0,
    CTL_EAPI = 1,     /* the cluster manager answered with an error */
    CTL_EUSAGE = 2,   /* bad command line or input file */
    CTL_ECONN = 3,    /* cannot reach the cluster manager, or authentication refused */
};

#define CTL_DEFAULT_SERVER "http://127.0.0.1:8600"
#define CTL_MAX_OPTS 12
#define CTL_MAX_POS 4

/* Global settings, resolved from options > environment > config file > defaults. */
struct ctl {
    char server[1024];           /* without a trailing '/' */
    const char *server_from;     /* where it came from, for messages */
    char token_file[1024];       /* "" when none */
    char token_from[1200];
    char token[512];
    int token_loaded;
    int json;
    long timeout_ms;
    char config_path[1100];      /* the config file read, "" when none */
    char last_error[64];         /* the error code of the last failed call ("conflict") */
    /* global options as given on the command line (NULL: not given) */
    const char *opt_server, *opt_token_file, *opt_config, *opt_timeout, *opt_ca;
};

/* ---- commands ---- */
struct ctl_opt {
    const char *name;      /* "--vm-ip" */
    const char *metavar;   /* "IP"; NULL for a flag */
    const char *help;
};

struct ctl_args {
    const char *val[CTL_MAX_OPTS];   /* by index in the command's option table; a flag: "1" */
    const char *pos[CTL_MAX_POS];
    int npos;
};

struct ctl_cmd;
typedef int ctl_run_fn(struct ctl *c, const struct ctl_cmd *cmd, struct ctl_args *a);

struct ctl_cmd {
    const char *group;       /* "vm", "node", "session"; NULL for a top-level command */
    const char *name;        /* "list" */
    const char *posnames;    /* synopsis of the positional arguments: "ID", "FILE", "" */
    int npos_min, npos_max;
    const struct ctl_opt *opts;   /* ends with {NULL} */
    const char *summary;     /* one line */
    const char *help;        /* the rest of --help, may be NULL */
    ctl_run_fn *run;
};

/* cmd_token.c: node|vm rotate-token|revoke-token, session revoke-tokens */
extern const struct ctl_opt ctl_rotate_opts[], ctl_revoke_opts[];
ctl_run_fn ctl_rotate_token, ctl_revoke_token, ctl_session_revoke_tokens;
#define CTL_ROTATE_HELP                                                                         \
    "The new token is printed once. Calls with the previous one keep working until the\n"     \
    "grace ends (default 10m), so the daemon that holds it can be switched without a\n"       \
    "failed call: write the new token into its token file; it reads the file again on\n"     \
    "SIGHUP and when the cluster manager refuses the old one (401).\n"
#define CTL_REVOKE_HELP                                                                         \
    "Takes effect at once: the next call with a revoked token is answered 401.\n"

/* cmd_resize.c: session resize / vm resize */
extern const struct ctl_opt ctl_resize_opts[];
ctl_run_fn ctl_session_resize, ctl_vm_resize;
#define CTL_RESIZE_HELP                                                                         \
    "The change goes through the cluster manager and the node to the running server: new\n"     \
    "work runs on the new share, nothing is copied. Lowering memory below what is in use\n"     \
    "frees nothing: new allocations fail until use is under the quota. A request beyond\n"     \
    "what the GPU has free is refused, or with --partial granted as far as it goes.\n"         \
    "\nExamples:\n  flytctl session resize s-0123 --sm +16\n"                                  \
    "  flytctl session resize s-0123 --sm 64 --memory 8GiB --partial\n"                        \
    "  flytctl vm resize vm-10.0.0.5 --memory -1GiB\n"
extern const struct ctl_cmd ctl_vm_cmds[], ctl_node_cmds[], ctl_session_cmds[],
    ctl_misc_cmds[];

/* "vm add" or "status": the command's name as typed. */
void ctl_cmd_name(const struct ctl_cmd *cmd, char *out, size_t outlen);

/* ---- ctl_args.c ---- */
/* If argv[*i] is a global option, stores it in c (taking its value, advancing *i) and
 * returns 1; 0 when it is not one; -1 with msg when its value is missing. */
int ctl_global_opt(struct ctl *c, int argc, char **argv, int *i, char *msg, size_t msglen);
void ctl_print_global_opts(FILE *out);
/* Parses argv (after the command words) into a. Global options (--server, --token-file,
 * --json, --config, --timeout) are accepted anywhere and applied to c. Returns 0, 1 when
 * --help was given (help printed), or CTL_EUSAGE after printing the reason. */
int ctl_parse(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv,
              struct ctl_args *a);
/* The value of option name ("--memory"), NULL when not given. */
const char *ctl_opt(const struct ctl_cmd *cmd, const struct ctl_args *a, const char *name);
/* Prints "flytctl CMD: <message>" and the --help hint to stderr; returns CTL_EUSAGE. */
int ctl_usage(const struct ctl_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ctl_print_cmd_help(const struct ctl_cmd *cmd, FILE *out);
/* Value checks for options; each prints a usage error and returns CTL_EUSAGE when bad. */
int ctl_arg_count(const struct ctl_cmd *cmd, const char *opt, const char *s, long long min,
                  long long max, long long *out);
/* Memory: a bare number is MiB; a number with a unit (B KiB MiB GiB TiB KB MB GB TB) is
 * converted to bytes. */
int ctl_arg_memory(const struct ctl_cmd *cmd, const char *opt, const char *s, long long *bytes);
int ctl_arg_ip(const struct ctl_cmd *cmd, const char *opt, const char *s);
int ctl_arg_id(const struct ctl_cmd *cmd, const char *what, const char *s);
int ctl_arg_duration(const struct ctl_cmd *cmd, const char *opt, const char *s, long *ms);

/* ---- ctl_api.c ---- */
/* One API call. path is appended to the server URL ("/v1/vms"); build it with ctl_path.
 * auth: send the operator token (loaded on first use). On a 2xx answer returns CTL_OK
 * with *answer (NULL when the body was empty). Otherwise prints why and returns CTL_EAPI
 * (the server's error code and message), or CTL_ECONN (no answer, not a Flyt answer, no
 * token, 401/403). */
int ctl_call(struct ctl *c, const char *method, const char *path, json_t *body, int auth,
             json_t **answer);
/* Bytes both ways (state files): body (NULL: none) as application/octet-stream, a 2xx
 * answer's bytes in *out (free() it). Errors printed as ctl_call; CTL_OK or an exit code. */
int ctl_call_bytes(struct ctl *c, const char *method, const char *path, const void *body,
                   size_t len, long timeout_ms, char **out, size_t *outlen);
/* cmd_checkpoint.c: checkpoint, restore, migrate, node drain|undrain */
extern const struct ctl_opt ctl_checkpoint_opts[], ctl_where_opts[], ctl_migrate_opts[];
ctl_run_fn ctl_checkpoint, ctl_restore, ctl_migrate, ctl_node_drain, ctl_node_undrain;
#define CTL_CKPT_HELP                                                                           \
    "The session's server writes its state (docs/state-format.md); the file comes back\n"     \
    "through the node and cluster managers. With --stop the session ends after it and is\n"  \
    "recorded suspended (its share freed); its program waits until `flytctl restore`.\n"      \
    "\nExample:\n  flytctl checkpoint s-0123 --to s-0123.state --stop\n"
#define CTL_RESTORE_HELP                                                                        \
    "The file names its session; it must not be running (suspended, lost or failed).\n"      \
    "\nExample:\n  flytctl restore s-0123.state --node gpu-2\n"
#define CTL_MIGRATE_HELP                                                                        \
    "A receiving server is started on the target first; the source drains and streams its\n" \
    "state straight to it (progress shown), which restores it. --via file: checkpoint to a\n" \
    "file, copy it through the managers, restore it. If the stream fails the session stays\n" \
    "on its source running; if the restore fails it is restored there from its file.\n"       \
    "Prints the downtime (checkpoint request to the restored server listening).\n"            \
    "\nExample:\n  flytctl migrate s-0123 --node gpu-2 --gpu 1\n"
/* DELETE path; then, with --json, the answer if any, else the line `done`
 * (printed with a newline). CTL_OK or ctl_call's error. */
int ctl_delete(struct ctl *c, const char *path, const char *done);
/* path = fmt with each %s argument percent-encoded (for ids and query values). */
void ctl_path(char *out, size_t outlen, const char *fmt, ...);
/* Appends "&name=value" or "?name=value" (value encoded) to path. */
void ctl_path_query(char *path, size_t pathlen, const char *name, const char *value);

/* ---- ctl_fmt.c ---- */
struct ctl_table;
/* headers: a leading '>' right-aligns that column. */
struct ctl_table *ctl_table_new(int ncols, const char *const *headers);
void ctl_table_row(struct ctl_table *t, ...);   /* ncols strings (copied) */
void ctl_table_print(struct ctl_table *t, FILE *out);   /* prints and frees */
/* header 0: the rows only (aligned among themselves), for a stream of batches. */
void ctl_table_print_ex(struct ctl_table *t, FILE *out, int header);
void ctl_table_free(struct ctl_table *t);
void ctl_table_min_width(struct ctl_table *t, int col, int width);

void ctl_fmt_bytes(long long bytes, char *out, size_t outlen);   /* "20 GiB", "79.6 GiB" */
/* RFC 3339 -> "2025-01-02 03:04:05" (UTC); "-" for null. */
void ctl_fmt_time(json_t *v, char *out, size_t outlen);
/* RFC 3339 -> "12s ago"; "never" for null. */
void ctl_fmt_age(json_t *v, char *out, size_t outlen);

/* Field getters: a string ("-" when null or absent), an integer (0), a formatted integer,
 * a formatted size. */
const char *ctl_js(json_t *o, const char *key);
long long ctl_ji(json_t *o, const char *key);
void ctl_fmt_int(json_t *o, const char *key, char *out, size_t outlen);
void ctl_fmt_size(json_t *o, const char *key, char *out, size_t outlen);
/* Prints j indented to stdout (the --json output). */
void ctl_print_json(json_t *j);
/* Prints "Key:  value" lines aligned: pairs of (key, value) strings ending with NULL. */
void ctl_print_fields(FILE *out, ...);

/* Session rows shared by several commands. */
void ctl_print_sessions(json_t *sessions, FILE *out);

#endif
