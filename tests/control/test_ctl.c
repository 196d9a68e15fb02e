/* flytctl: every command's human and --json output, import with units, usage errors, auth
 * errors and exit codes.
 *   test_ctl FLYTCTL [CLUSTER_MANAGER]
 * Without CLUSTER_MANAGER only what needs no server runs (help, usage errors, an
 * unreachable server). With it, a real flyt-cluster-manager (SQLite in a temporary
 * directory) is started, this program plays a node manager (its HTTP API answers the
 * cluster manager's POST /v1/servers) and a VM's client manager (POST /v1/sessions), and
 * flytctl runs as a separate process for each command. */
#include "check.h"
#include "flyt_http.h"
#include "flyt_log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *flytctl;
static char dir[256], base[128], tokfile[512], home[512];
static pid_t clm_pid;

/* ---- running flytctl ---- */

static struct {
    int rc;
    char out[1 << 17];
    char err[1 << 15];
} last_run;

/* Environment overrides for the next runs: "KEY=VALUE", or "KEY" to unset. */
static const char *overrides[8];

static void set_override(int i, const char *kv) { overrides[i] = kv; }
static void clear_overrides(void) { memset(overrides, 0, sizeof overrides); }

static int key_eq(const char *a, const char *b)
{
    size_t la = strcspn(a, "="), lb = strcspn(b, "=");
    return la == lb && strncmp(a, b, la) == 0;
}

static char **make_env(void)
{
    static char *envp[600];
    static char d_url[200], d_tok[600], d_home[600];
    snprintf(d_url, sizeof d_url, "FLYT_CM_URL=%s", base);
    snprintf(d_tok, sizeof d_tok, "FLYT_OPERATOR_TOKEN_FILE=%s", tokfile);
    snprintf(d_home, sizeof d_home, "HOME=%s", home);
    const char *defaults[] = {d_url, d_tok, d_home};
    int n = 0;
    for (char **e = environ; *e && n < 500; e++)
        if (strncmp(*e, "FLYT_", 5) != 0 && strncmp(*e, "HOME=", 5) != 0
            && strncmp(*e, "XDG_", 4) != 0)
            envp[n++] = *e;
    for (int d = 0; d < 3; d++) {
        const char *v = defaults[d];
        for (int o = 0; o < 8; o++)
            if (overrides[o] && key_eq(overrides[o], defaults[d]))
                v = strchr(overrides[o], '=') ? overrides[o] : NULL;
        if (v)
            envp[n++] = (char *)v;
    }
    for (int o = 0; o < 8; o++) {
        int is_default = 0;
        for (int d = 0; d < 3; d++)
            is_default |= overrides[o] && key_eq(overrides[o], defaults[d]);
        if (overrides[o] && !is_default && strchr(overrides[o], '='))
            envp[n++] = (char *)overrides[o];
    }
    envp[n] = NULL;
    return envp;
}

/* Starts flytctl with args; its stdout and stderr pipes go to out_fd and err_fd. */
static pid_t spawn(const char *const *args, const char *stdin_file, int *out_fd, int *err_fd)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = flytctl;
    for (int i = 0; args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int po[2], pe[2];
    if (pipe(po) < 0 || pipe(pe) < 0)
        abort();
    char **envp = make_env();
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(stdin_file ? stdin_file : "/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        execve(flytctl, (char **)argv, envp);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    *out_fd = po[0];
    *err_fd = pe[0];
    return pid;
}

static int run_in(const char *stdin_file, const char *const *args)
{
    int fo, fe;
    pid_t pid = spawn(args, stdin_file, &fo, &fe);
    size_t no = 0, ne = 0;
    int open_fds = 2;
    struct pollfd p[2] = {{fo, POLLIN, 0}, {fe, POLLIN, 0}};
    time_t deadline = time(NULL) + 30;
    while (open_fds && time(NULL) < deadline) {
        if (poll(p, 2, 1000) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char *buf = i ? last_run.err : last_run.out;
            size_t *len = i ? &ne : &no, cap = i ? sizeof last_run.err : sizeof last_run.out;
            char tmp[4096];
            ssize_t r = read(p[i].fd, tmp, sizeof tmp);
            if (r <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
                continue;
            }
            size_t take = (size_t)r < cap - 1 - *len ? (size_t)r : cap - 1 - *len;
            memcpy(buf + *len, tmp, take);
            *len += take;
        }
    }
    last_run.out[no] = 0;
    last_run.err[ne] = 0;
    if (open_fds) {
        kill(pid, SIGKILL);
        for (int i = 0; i < 2; i++)
            if (p[i].fd >= 0)
                close(p[i].fd);
    }
    int st;
    waitpid(pid, &st, 0);
    last_run.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (last_run.rc > 3 || open_fds) {   /* a crash or a sanitizer report: show everything */
        printf("  flytctl");
        for (int i = 0; args[i]; i++)
            printf(" %s", args[i]);
        printf("\n  exit %d%s\n--- stdout\n%s--- stderr\n%s---\n", last_run.rc,
               open_fds ? " (killed: it did not finish in 30 s)" : "", last_run.out, last_run.err);
    }
    return last_run.rc;
}

#define CTL(...) run_in(NULL, (const char *const[]){__VA_ARGS__, NULL})
#define CTL_IN(file, ...) run_in(file, (const char *const[]){__VA_ARGS__, NULL})

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The line of text that starts with prefix (copied into line), or 0. */
static int line_starting(const char *text, const char *prefix, char *line, size_t linelen)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            snprintf(line, linelen, "%.*s", (int)len, p);
            return 1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* The line of text that contains needle (copied into line), or 0. */
static int line_containing(const char *text, const char *needle, char *line, size_t linelen)
{
    const char *hit = strstr(text, needle);
    if (!hit)
        return 0;
    const char *start = hit;
    while (start > text && start[-1] != '\n')
        start--;
    size_t len = strcspn(start, "\n");
    snprintf(line, linelen, "%.*s", (int)len, start);
    return 1;
}

/* Runs of blanks -> one space (for comparing table rows); returns 1. */
static int squeeze(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++)
        if (*p != ' ' || (o > s && o[-1] != ' '))
            *o++ = *p;
    *o = 0;
    return 1;
}

/* Offset of word in the line that contains needle; -1 when absent. */
static int col_with(const char *text, const char *needle, const char *word)
{
    char line[4096];
    if (!line_containing(text, needle, line, sizeof line))
        return -1;
    const char *w = strstr(line, word);
    return w ? (int)(w - line) : -1;
}

/* Column offset of word in the line starting with prefix; -1 when absent. */
static int col(const char *text, const char *prefix, const char *word)
{
    char line[4096];
    if (!line_starting(text, prefix, line, sizeof line))
        return -1;
    const char *w = strstr(line, word);
    return w ? (int)(w - line) : -1;
}

/* Offset just after word (for right-aligned columns). */
static int col_end(const char *text, const char *prefix, const char *word)
{
    int c = col(text, prefix, word);
    return c < 0 ? -1 : c + (int)strlen(word);
}

static json_t *out_json(void)
{
    json_error_t e;
    json_t *j = json_loads(last_run.out, 0, &e);
    if (!j)
        printf("  (stdout is not JSON: %s)\n%s\n", e.text, last_run.out);
    return j;
}

/* The first 64-hex-character word of s, into tok. */
static int find_token(const char *s, char *tok)
{
    for (const char *p = s; *p; p++) {
        size_t n = 0;
        while (isxdigit((unsigned char)p[n]) && !isupper((unsigned char)p[n]))
            n++;
        if (n == 64 && (p == s || isspace((unsigned char)p[-1]))) {
            memcpy(tok, p, 64);
            tok[64] = 0;
            return 1;
        }
        if (n)
            p += n - 1;
    }
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        printf("cannot write %s\n", path);
        exit(1);
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0
        || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        abort();
    close(fd);   /* nothing listens there now */
    return ntohs(a.sin_port);
}

static void cleanup(void)
{
    if (clm_pid > 0) {
        kill(clm_pid, SIGTERM);
        int st;
        waitpid(clm_pid, &st, 0);
        clm_pid = 0;
    }
    if (dir[0] && !getenv("TEST_CTL_KEEP")) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            printf("cannot remove %s\n", dir);
    }
}

/* ---- the node manager this test plays ---- */

static int servers_started, servers_stopped;
static pthread_mutex_t nm_lock = PTHREAD_MUTEX_INITIALIZER;

static void nm_start(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    if (!req->token || strlen(req->token) != 64) {
        flyt_http_reply_error(res, 401, "unauthorized", "no manager token");
        return;
    }
    pthread_mutex_lock(&nm_lock);
    int n = ++servers_started;
    pthread_mutex_unlock(&nm_lock);
    flyt_http_reply_json(res, 200, json_pack("{s:s,s:i}", "endpoint", "tcp://127.0.0.1:7001",
                                             "pid", 4000 + n));
}

static void nm_stop(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    (void)req;
    pthread_mutex_lock(&nm_lock);
    servers_stopped++;
    pthread_mutex_unlock(&nm_lock);
    flyt_http_reply_status(res, 204);
}

static void nm_list(void *ctx, const struct flyt_http_request *req, struct flyt_http_response *res)
{
    (void)ctx;
    (void)req;
    flyt_http_reply_json(res, 200, json_pack("{s:[]}", "servers"));
}

static const struct flyt_http_route nm_routes[] = {
    {"POST", "/v1/servers", nm_start},
    {"DELETE", "/v1/servers/{id}", nm_stop},
    {"GET", "/v1/servers", nm_list},
    {NULL, NULL, NULL}};

/* ---- tests without a server ---- */

static void test_offline(void)
{
    printf("help, usage errors, exit codes (no server needed)\n");
    CHECK_EQ(CTL("--help"), 0,
          "flytctl --help lists the commands, global options and exit codes");
    CHECK(has(last_run.out, "Commands:") && has(last_run.out, "vm import FILE") && has(last_run.out, "Exit codes") && has(last_run.out, "FLYT_CM_URL"),
          "flytctl --help lists the commands, global options and exit codes");
    CHECK_EQ(CTL("help"), 0, "flytctl help");
    CHECK(has(last_run.out, "node list"), "flytctl help");
    static const char *const cmds[][2] = {
        {"vm", "list"}, {"vm", "show"}, {"vm", "add"}, {"vm", "update"}, {"vm", "remove"},
        {"vm", "import"}, {"node", "list"}, {"node", "show"}, {"node", "add"},
        {"node", "remove"}, {"session", "list"}, {"session", "show"}, {"session", "release"},
        {"events", NULL}, {"status", NULL}, {"version", NULL}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: flytctl [GLOBAL OPTIONS] %s%s%s", cmds[i][0],
                 cmds[i][1] ? " " : "", cmds[i][1] ? cmds[i][1] : "");
        int rc = cmds[i][1] ? CTL(cmds[i][0], cmds[i][1], "--help") : CTL(cmds[i][0], "--help");
        CHECK_EQ(rc, 0,
              "%s --help", want + 32);
        CHECK(has(last_run.out, want) && has(last_run.out, "Global options") && !last_run.err[0],
              "%s --help", want + 32);
        rc = cmds[i][1] ? CTL("help", cmds[i][0], cmds[i][1]) : CTL("help", cmds[i][0]);
        CHECK_EQ(rc, 0, "help %s", want + 32);
        CHECK(has(last_run.out, want), "help %s", want + 32);
    }
    CHECK_EQ(CTL("vm", "--help"), 0, "vm --help lists its subcommands");
    CHECK(has(last_run.out, "vm import FILE"), "vm --help lists its subcommands");
    CHECK_EQ(CTL("node", "-h"), 0, "node -h");
    CHECK(has(last_run.out, "node add ID"), "node -h");
    CHECK_EQ(CTL("session", "help"), 0, "session help");
    CHECK(has(last_run.out, "session release ID"), "session help");
    CHECK_EQ(CTL("vm", "add", "--help"), 0, "vm add --help says memory's assumed unit (MiB)");
    CHECK(has(last_run.out, "a bare number is MiB") && has(last_run.out, "--compute-units N"), "vm add --help says memory's assumed unit (MiB)");
    CHECK_EQ(CTL("vm", "import", "--help"), 0, "vm import --help says the documents' unit");
    CHECK(has(last_run.out, "a number is MiB") && has(last_run.out, "\"20GiB\""), "vm import --help says the documents' unit");

    CHECK_EQ(run_in(NULL, (const char *const[]){NULL}), 2,
          "no command: exit 2 with the help on stderr");
    CHECK(has(last_run.err, "no command given") && has(last_run.err, "Commands:"),
          "no command: exit 2 with the help on stderr");
    CHECK_EQ(CTL("frob"), 2, "unknown command: %s", last_run.err);
    CHECK(has(last_run.err, "unknown command \"frob\""), "unknown command: %s", last_run.err);
    CHECK_EQ(CTL("--frob", "status"), 2,
          "unknown global option");
    CHECK(has(last_run.err, "unknown option \"--frob\""),
          "unknown global option");
    CHECK_EQ(CTL("vm"), 2,
          "vm without subcommand");
    CHECK(has(last_run.err, "missing subcommand") && has(last_run.err, "vm list"),
          "vm without subcommand");
    CHECK_EQ(CTL("vm", "frob"), 2, "unknown subcommand");
    CHECK(has(last_run.err, "unknown subcommand \"frob\""), "unknown subcommand");
    CHECK_EQ(CTL("help", "frob"), 2, "help on an unknown command");
    CHECK(has(last_run.err, "no such command"), "help on an unknown command");
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "32") == 2 && has(last_run.err, "missing --memory SIZE") && has(last_run.err, "vm add --help"),
          "missing option: %s", last_run.err);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "lots", "--memory", "1GiB") == 2
              && has(last_run.err, "--compute-units: expected a whole number from 1 to 1000000, got "
                            "\"lots\""), "bad number: %s", last_run.err);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "0", "--memory", "1GiB") == 2 && has(last_run.err, "got \"0\""), "zero SMs refused");
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "8", "--memory", "20XB") == 2 && has(last_run.err, "unknown unit \"XB\"")
              && has(last_run.err, "a bare number is MiB"), "bad size: %s", last_run.err);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "8", "--memory", "1.5GiB") == 2 && has(last_run.err, "whole number with a unit"),
          "fractional size: %s", last_run.err);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "8", "--memory", "0") == 2 && has(last_run.err, "out of range"), "zero memory refused");
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0", "--host-ip", "10.0.1.1", "--compute-units", "8",
              "--memory", "1GiB") == 2 && has(last_run.err, "--vm-ip: expected an IPv4 or IPv6 address"),
          "bad IP: %s", last_run.err);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units", "8",
              "--memory", "1GiB", "--id", "bad id!") == 2 && has(last_run.err, "--id: expected"),
          "bad id");
    CHECK_EQ(CTL("vm", "add", "--memory"), 2,
          "option without its value");
    CHECK(has(last_run.err, "--memory needs a value (SIZE)"),
          "option without its value");
    CHECK_EQ(CTL("vm", "add", "--memory", "1GiB", "--memory", "2GiB"), 2, "option given twice");
    CHECK(has(last_run.err, "--memory given twice"), "option given twice");
    CHECK_EQ(CTL("vm", "show"), 2, "missing ID");
    CHECK(has(last_run.err, "missing ID"), "missing ID");
    CHECK_EQ(CTL("vm", "show", "a", "b"), 2,
          "extra argument");
    CHECK(has(last_run.err, "unexpected argument \"b\""),
          "extra argument");
    CHECK_EQ(CTL("vm", "list", "--bogus"), 2,
          "unknown option");
    CHECK(has(last_run.err, "unknown option \"--bogus\""),
          "unknown option");
    CHECK_EQ(CTL("vm", "update", "x"), 2, "empty update");
    CHECK(has(last_run.err, "nothing to change"), "empty update");
    CHECK_EQ(CTL("vm", "remove", "x", "--force=yes"), 2,
          "flag with a value");
    CHECK(has(last_run.err, "--force takes no value"),
          "flag with a value");
    CHECK_EQ(CTL("node", "add", "gpu-1"), 2, "node add without --host-ip");
    CHECK(has(last_run.err, "missing --host-ip IP"), "node add without --host-ip");
    CHECK_EQ(CTL("events", "--limit", "0"), 2, "bad --limit");
    CHECK(has(last_run.err, "--limit: expected a whole number " "from 1 to 10000"), "bad --limit");
    CHECK_EQ(CTL("events", "--since", "-1"), 2, "bad --since");
    CHECK(has(last_run.err, "--since"), "bad --since");
    CHECK_EQ(CTL("events", "--interval", "1s"), 2,
          "--interval without --follow");
    CHECK(has(last_run.err, "--interval goes with --follow"),
          "--interval without --follow");
    CHECK_EQ(CTL("events", "--follow", "--interval", "soon"), 2,
          "bad --interval");
    CHECK(has(last_run.err, "--interval"),
          "bad --interval");
    CHECK_EQ(CTL("session", "list", "--state", "sleeping"), 2,
          "bad --state");
    CHECK(has(last_run.err, "--state: expected starting, active, released, lost, failed, suspended, migrating or live"),
          "bad --state");
    CHECK_EQ(CTL("--server", "ftp://x", "status"), 2, "bad server URL: %s", last_run.err);
    CHECK(has(last_run.err, "is not http://HOST:PORT") && has(last_run.err, "--server"), "bad server URL: %s", last_run.err);
    CHECK_EQ(CTL("--timeout", "1x", "status"), 2, "bad --timeout");
    CHECK(has(last_run.err, "--timeout"), "bad --timeout");
    CHECK_EQ(CTL("--config", "/nonexistent/flytctl.conf", "status"), 2,
          "missing --config file: %s", last_run.err);
    CHECK(has(last_run.err, "bad config file") && has(last_run.err, "/nonexistent/flytctl.conf"),
          "missing --config file: %s", last_run.err);

    char path[600], conf[600];
    snprintf(conf, sizeof conf, "%s/bad.conf", dir);
    write_file(conf, "# flytctl\nserver = http://127.0.0.1:1\nsurver = x\n");
    CHECK_EQ(CTL("--config", conf, "status"), 2, "config with an unknown key: file:line: %s", last_run.err);
    CHECK(has(last_run.err, "bad.conf:3") && has(last_run.err, "surver"), "config with an unknown key: file:line: %s", last_run.err);
    CHECK_EQ(CTL("vm", "import", "/nonexistent.json"), 2, "import: missing file");
    CHECK(has(last_run.err, "cannot read /nonexistent.json"), "import: missing file");
    snprintf(path, sizeof path, "%s/bad.json", dir);
    write_file(path, "[{\"vm_ip\": \"10.0.0.9\",\n \"memory\": }]\n");
    CHECK_EQ(CTL("vm", "import", path), 2,
          "import: bad JSON says file:line:column: %s", last_run.err);
    CHECK(has(last_run.err, "bad.json:2:") && has(last_run.err, "not valid JSON"),
          "import: bad JSON says file:line:column: %s", last_run.err);
    write_file(path, "{\"vms\": []}");
    CHECK_EQ(CTL("vm", "import", path), 2,
          "import: wrong shape");
    CHECK(has(last_run.err, "expected a JSON array"),
          "import: wrong shape");
    write_file(path, "[]");
    CHECK_EQ(CTL("vm", "import", path), 2, "import: empty");
    CHECK(has(last_run.err, "no documents"), "import: empty");
    write_file(path, "[{\"vm_ip\": \"10.0.0.9\"}, 7]");
    CHECK_EQ(CTL("vm", "import", path), 2,
          "import: a document that is not an object");
    CHECK(has(last_run.err, "documents[1]: expected an object"),
          "import: a document that is not an object");

    CHECK_EQ(CTL("version", "--client"), 0, "version --client: %s", last_run.out);
    CHECK(has(last_run.out, "flytctl 0."), "version --client: %s", last_run.out);
    CHECK_EQ(CTL("--version"), 0, "--version");
    CHECK(has(last_run.out, "flytctl "), "--version");

    /* a server that is not there */
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", free_port());
    CHECK_EQ(CTL("--server", dead, "status"), 3,
          "unreachable server: exit 3: %s", last_run.err);
    CHECK(has(last_run.err, "cannot reach the cluster manager") && has(last_run.err, dead) && has(last_run.err, "from --server"),
          "unreachable server: exit 3: %s", last_run.err);
    CHECK_EQ(CTL("--server", dead, "vm", "list"), 3,
          "unreachable server (vm list): exit 3");
    CHECK(has(last_run.err, "cannot reach"),
          "unreachable server (vm list): exit 3");
    CHECK_EQ(CTL("--server", dead, "version"), 3, "version: client's version, then exit 3");
    CHECK(has(last_run.out, "flytctl 0.") && has(last_run.err, "cannot reach"), "version: client's version, then exit 3");
    set_override(0, "FLYT_OPERATOR_TOKEN_FILE");
    CHECK_EQ(CTL("--server", dead, "vm", "list"), 3, "no token: exit 3, says how to give one: %s", last_run.err);
    CHECK(has(last_run.err, "no operator token") && has(last_run.err, "--token-file"), "no token: exit 3, says how to give one: %s", last_run.err);
    set_override(0, "FLYT_OPERATOR_TOKEN_FILE=/nonexistent/token");
    CHECK_EQ(CTL("--server", dead, "vm", "list"), 3, "unreadable token file: %s", last_run.err);
    CHECK(has(last_run.err, "cannot read the operator token " "file /nonexistent/token") && has(last_run.err, "FLYT_OPERATOR_TOKEN_FILE"), "unreadable token file: %s", last_run.err);
    clear_overrides();
}

/* ---- tests against the cluster manager ---- */

static void start_cm(const char *clm_bin)
{
    char conf[600], portfile[600], logf[600], text[2048];
    snprintf(conf, sizeof conf, "%s/clm.conf", dir);
    snprintf(portfile, sizeof portfile, "%s/clm.port", dir);
    snprintf(logf, sizeof logf, "%s/clm.log", dir);
    snprintf(text, sizeof text,
             "listen = 127.0.0.1:0\nstore = sqlite:%s/clm.db\noperator_token_file = %s\n"
             "node_timeout = 1h\nlog_level = warn\n", dir, tokfile);
    write_file(conf, text);
    clm_pid = fork();
    if (clm_pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(clm_bin, clm_bin, "--config", conf, "--port-file", portfile, (char *)NULL);
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 200 && !port; i++) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        int st;
        if (!port && waitpid(clm_pid, &st, WNOHANG) == clm_pid) {
            clm_pid = 0;
            break;
        }
        if (!port)
            usleep(50 * 1000);
    }
    if (!port) {
        snprintf(text, sizeof text, "cat '%s'", logf);
        if (system(text) != 0)
            printf("(no log)\n");
    }
    CHECK_GT(port, 0, "flyt-cluster-manager started (port %d)", port);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
}

static void register_node(const char *id, const char *token, int nm_port)
{
    char url[256], addr[128], err[512];
    snprintf(url, sizeof url, "%s/v1/nodes/%s/register", base, id);
    snprintf(addr, sizeof addr, "http://127.0.0.1:%d", nm_port);
    json_t *body = json_pack(
        "{s:s,s:s,s:[{s:i,s:s,s:s,s:i,s:i,s:I},{s:i,s:s,s:s,s:i,s:i,s:I}],s:[]}", "address", addr,
        "host_ip", "10.0.1.1", "gpus", "index", 0, "uuid", "GPU-0000aaaa", "name",
        "NVIDIA H100 80GB HBM3", "sm_count", 132, "sm_granularity", 8, "memory_total",
        (json_int_t)85520809984LL, "index", 1, "uuid", "GPU-1111bbbb", "name",
        "NVIDIA H100 80GB HBM3", "sm_count", 132, "sm_granularity", 8, "memory_total",
        (json_int_t)85520809984LL, "sessions");
    long status;
    json_t *ans = NULL;
    int rc = flyt_http_call("POST", url, token, body, &status, &ans, err, sizeof err);
    json_decref(body);
    json_decref(ans);
    CHECK_EQ(rc, 0, "node %s registers with 2 GPUs (%ld %s)", id, status, err);
    CHECK_EQ(status, 200, "node %s registers with 2 GPUs (%ld %s)", id, status, err);
}

/* A session for a VM, as its client manager asks; returns the session id (static). */
static const char *new_session(const char *vm_token, int pid)
{
    static char sid[128];
    char url[256], err[512];
    snprintf(url, sizeof url, "%s/v1/sessions", base);
    json_t *body = json_pack("{s:i,s:s}", "pid", pid, "process", "train.py");
    long status;
    json_t *ans = NULL;
    int rc = flyt_http_call("POST", url, vm_token, body, &status, &ans, err, sizeof err);
    json_decref(body);
    const char *id = json_string_value(json_object_get(json_object_get(ans, "session"), "id"));
    CHECK_EQ(rc, 0, "VM gets a session (%ld %s)", status, err);
    CHECK_EQ(status, 201, "VM gets a session (%ld %s)", status, err);
    CHECK(id, "VM gets a session (%ld %s)", status, err);
    snprintf(sid, sizeof sid, "%s", id);
    json_decref(ans);
    return sid;
}

static long long jint(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *save, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
        cur = isdigit((unsigned char)k[0]) ? json_array_get(cur, (size_t)atoi(k))
                                           : json_object_get(cur, k);
    return json_integer_value(cur);
}

static const char *jstr(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *save, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
        cur = isdigit((unsigned char)k[0]) ? json_array_get(cur, (size_t)atoi(k))
                                           : json_object_get(cur, k);
    const char *s = json_string_value(cur);
    return s ? s : "";
}

static void test_vms(char *vm_token, char *web_token)
{
    printf("vm add/list/show/update\n");
    CHECK_EQ(CTL("status"), 0, "status of an empty cluster:\n%s", last_run.out);
    CHECK(has(last_run.out, "ok (version") && has(last_run.out, base) && has(last_run.out, "VMs:") && has(last_run.out, "0 live"), "status of an empty cluster:\n%s", last_run.out);
    CHECK_EQ(CTL("version"), 0,
          "version shows both: %s", last_run.out);
    CHECK(has(last_run.out, "flytctl 0.") && has(last_run.out, "flyt-cluster-manager 0."),
          "version shows both: %s", last_run.out);
    CHECK_EQ(CTL("--json", "version"), 0,
          "version --json");
    CHECK(has(last_run.out, "\"client\"") && has(last_run.out, "\"server\""),
          "version --json");
    CHECK_EQ(CTL("vm", "list"), 0, "empty vm list says so");
    CHECK(has(last_run.out, "No VMs"), "empty vm list says so");

    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "32", "--memory", "20GiB") == 0 && has(last_run.out, "Added VM vm-10.0.0.5")
              && has(last_run.out, "32 SMs, 20 GiB") && has(last_run.out, "shown only this once"),
          "vm add (20GiB):\n%s", last_run.out);
    CHECK(find_token(last_run.out, vm_token),
          "the VM token is printed once: %s", vm_token);
    CHECK_EQ(count_of(last_run.out, vm_token), 1,
          "the VM token is printed once: %s", vm_token);
    CHECK(CTL("--json", "vm", "add", "--vm-ip", "10.0.0.6", "--host-ip", "10.0.1.2",
              "--compute-units", "12", "--memory", "20480", "--id", "web") == 0,
          "vm add --json (memory 20480 = MiB)");
    json_t *j = out_json();
    CHECK(j,
          "--json is the API's answer: vm.memory %lld bytes, a 64-char token",
          jint(j, "vm.memory"));
    CHECK_STR_EQ(jstr(j, "vm.id"), "web",
          "--json is the API's answer: vm.memory %lld bytes, a 64-char token",
          jint(j, "vm.memory"));
    CHECK_EQ(jint(j, "vm.memory"), 21474836480LL,
          "--json is the API's answer: vm.memory %lld bytes, a 64-char token",
          jint(j, "vm.memory"));
    CHECK_EQ(jint(j, "vm.compute_units"), 12,
          "--json is the API's answer: vm.memory %lld bytes, a 64-char token",
          jint(j, "vm.memory"));
    CHECK_EQ(strlen(jstr(j, "token")), 64,
          "--json is the API's answer: vm.memory %lld bytes, a 64-char token",
          jint(j, "vm.memory"));
    snprintf(web_token, 65, "%s", jstr(j, "token"));
    json_decref(j);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.7", "--host-ip", "10.0.1.1", "--compute-units",
              "8", "--memory", "1500MB", "--id", "db") == 0 && has(last_run.out, "1.4 GiB"),
          "vm add (1500MB, powers of 1000): %s", last_run.out);
    CHECK(CTL("vm", "add", "--vm-ip", "10.0.0.5", "--host-ip", "10.0.1.1", "--compute-units",
              "8", "--memory", "1GiB") == 1 && has(last_run.err, "conflict") && has(last_run.err, "HTTP 409")
              && has(last_run.err, "10.0.0.5"), "duplicate vm_ip: exit 1 with the server's code and "
                                         "message: %s", last_run.err);

    CHECK_EQ(CTL("vm", "list"), 0, "vm list");
    printf("%s", last_run.out);
    CHECK(has(last_run.out, "vm-10.0.0.5") && has(last_run.out, "web") && has(last_run.out, "db")
              && has(last_run.out, "20 GiB") && has(last_run.out, "1.4 GiB"), "vm list shows the three VMs");
    CHECK(col(last_run.out, "ID ", "VM IP") == col(last_run.out, "web ", "10.0.0.6") && col(last_run.out, "ID ", "HOST IP") == col(last_run.out, "db ", "10.0.1.1"),
          "vm list columns are aligned");
    CHECK_EQ(col_end(last_run.out, "ID ", "SMS"), col_end(last_run.out, "web ", "12"),
          "vm list columns are aligned");
    CHECK(col_end(last_run.out, "ID ", "MEMORY") == col_end(last_run.out, "db ", "1.4 GiB"),
          "vm list columns are aligned");
    CHECK_EQ(CTL("vm", "list", "--json"), 0, "vm list --json");
    j = out_json();
    CHECK(j, "--json: {\"vms\": [3]}");
    CHECK_EQ(json_array_size(json_object_get(j, "vms")), 3, "--json: {\"vms\": [3]}");
    json_decref(j);

    CHECK_EQ(CTL("vm", "show", "web"), 0, "vm show:\n%s", last_run.out);
    CHECK(has(last_run.out, "VM IP:") && has(last_run.out, "10.0.0.6") && has(last_run.out, "12 SMs") && has(last_run.out, "20 GiB (21474836480 bytes)") && has(last_run.out, "No live sessions"), "vm show:\n%s", last_run.out);
    CHECK_EQ(CTL("vm", "show", "web", "--json"), 0, "vm show --json");
    j = out_json();
    CHECK(j,
          "vm show --json: {vm, sessions}");
    CHECK_STR_EQ(jstr(j, "vm.vm_ip"), "10.0.0.6",
          "vm show --json: {vm, sessions}");
    CHECK(json_is_array(json_object_get(j, "sessions")),
          "vm show --json: {vm, sessions}");
    json_decref(j);
    CHECK_EQ(CTL("vm", "show", "nope"), 1,
          "vm show of an unknown VM: exit 1: %s", last_run.err);
    CHECK(has(last_run.err, "not_found: no VM nope (HTTP 404)"),
          "vm show of an unknown VM: exit 1: %s", last_run.err);
    CHECK_EQ(CTL("vm", "show", "nope", "--json"), 1,
          "--json errors print the API's error body too");
    CHECK(has(last_run.out, "\"not_found\""),
          "--json errors print the API's error body too");
    CHECK_EQ(CTL("vm", "show", "a/b?c"), 1, "ids are URL-encoded");
    CHECK(has(last_run.err, "not_found"), "ids are URL-encoded");

    CHECK_EQ(CTL("vm", "update", "web", "--compute-units", "16", "--memory", "8GiB"), 0, "vm update: %s", last_run.out);
    CHECK(has(last_run.out, "Updated VM web") && has(last_run.out, "16 SMs, 8 GiB") && has(last_run.out, "next starts with no live session"), "vm update: %s", last_run.out);
    CHECK(CTL("--json", "vm", "update", "web", "--host-ip", "10.0.1.3") == 0, "vm update --json");
    j = out_json();
    CHECK(j,
          "vm update --json: host_ip changed, the rest kept");
    CHECK_STR_EQ(jstr(j, "vm.host_ip"), "10.0.1.3",
          "vm update --json: host_ip changed, the rest kept");
    CHECK_EQ(jint(j, "vm.compute_units"), 16,
          "vm update --json: host_ip changed, the rest kept");
    json_decref(j);
    CHECK_EQ(CTL("vm", "update", "nope", "--memory", "1GiB"), 1,
          "vm update of an unknown VM");
    CHECK(has(last_run.err, "not_found"),
          "vm update of an unknown VM");
    CHECK(CTL("vm", "update", "web", "--vm-ip", "10.0.0.5") == 1 && has(last_run.err, "conflict"),
          "vm update to a taken vm_ip: exit 1: %s", last_run.err);
}

static void test_nodes(char *node_token, int nm_port)
{
    printf("node add/list/show\n");
    CHECK_EQ(CTL("node", "list"), 0, "empty node list says so");
    CHECK(has(last_run.out, "No nodes"), "empty node list says so");
    CHECK(CTL("--json", "node", "add", "gpu-1", "--host-ip", "10.0.1.1") == 0, "node add --json");
    json_t *j = out_json();
    CHECK(j,
          "node add --json: {node, token}");
    CHECK_STR_EQ(jstr(j, "node.id"), "gpu-1",
          "node add --json: {node, token}");
    CHECK_EQ(strlen(jstr(j, "token")), 64,
          "node add --json: {node, token}");
    snprintf(node_token, 65, "%s", jstr(j, "token"));
    json_decref(j);
    char tok2[65];
    CHECK(CTL("node", "add", "gpu-2", "--host-ip", "10.0.1.2") == 0 && has(last_run.out, "Added node gpu-2") && has(last_run.out, "Node token (shown only this once") && find_token(last_run.out, tok2), "node add prints the node token once:\n%s", last_run.out);
    CHECK_EQ(count_of(last_run.out, tok2), 1, "node add prints the node token once:\n%s", last_run.out);
    CHECK(CTL("node", "add", "gpu-2", "--host-ip", "10.0.1.2") == 1 && has(last_run.err, "conflict"),
          "node add of an existing id: exit 1");
    CHECK(CTL("node", "add", "bad/id", "--host-ip", "10.0.1.2") == 2 && has(last_run.err, "ID: expected"),
          "node add with a bad id: exit 2");

    register_node("gpu-1", node_token, nm_port);
    CHECK_EQ(CTL("node", "list"), 0, "node list");
    printf("%s", last_run.out);
    char line[1024];
    CHECK(line_starting(last_run.out, "gpu-1  ready", line, sizeof line) && has(line, "NVIDIA H100")
              && has(line, "132") && has(line, "79.6 GiB") && has(line, "0 B"),
          "gpu-1 is ready, each GPU with its SMs and memory in human units");
    CHECK_EQ(count_of(last_run.out, "gpu-1 "), 2,
          "one row per GPU; gpu-2 has none yet");
    CHECK(has(last_run.out, "(no GPUs reported)"),
          "one row per GPU; gpu-2 has none yet");
    CHECK_EQ(col_end(last_run.out, "NODE ", "SM TOTAL"), col_end(last_run.out, "gpu-1 ", "132"),
          "node list columns are aligned");
    CHECK_EQ(col(last_run.out, "NODE ", "STATE"), col(last_run.out, "gpu-2 ", "registered"),
          "node list columns are aligned");
    CHECK_EQ(CTL("node", "list", "--json"), 0, "node list --json");
    j = out_json();
    CHECK(j, "--json: {\"nodes\": [2]}");
    CHECK_EQ(json_array_size(json_object_get(j, "nodes")), 2, "--json: {\"nodes\": [2]}");
    json_decref(j);
}

static void test_sessions(const char *vm_token)
{
    printf("sessions, capacity, release, remove\n");
    char sid[128];
    snprintf(sid, sizeof sid, "%s", new_session(vm_token, 4242));
    CHECK_EQ(servers_started, 1, "the cluster manager asked this test's node manager for a server");
    CHECK_EQ(CTL("node", "list"), 0, "node list after a session");
    printf("%s", last_run.out);
    char line[1024];
    CHECK(line_containing(last_run.out, "59.6 GiB", line, sizeof line) && squeeze(line)
              && has(line, "gpu-1 ready 10.0.1.1 0 NVIDIA H100 80GB HBM3 132 32 100 79.6 GiB 20 GiB "
                           "59.6 GiB") && count_of(last_run.out, "59.6 GiB") == 1,
          "node list: 32 SMs and 20 GiB allocated, 100 SMs and 59.6 GiB free on one GPU");
    CHECK_EQ(CTL("node", "show", "gpu-1"), 0, "node show");
    printf("%s", last_run.out);
    CHECK(has(last_run.out, "State:") && has(last_run.out, "ready") && has(last_run.out, "s ago")
              && has(last_run.out, "GPU-0000aaaa") && has(last_run.out, "of 16") && has(last_run.out, "0-3 of 16")
              && has(last_run.out, sid) && has(last_run.out, "tcp://127.0.0.1:7001"),
          "node show: state, heartbeat age, GPUs with the SM groups used, live sessions");
    CHECK_EQ(CTL("--json", "node", "show", "gpu-1"), 0, "node show --json");
    json_t *j = out_json();
    CHECK(j,
          "node show --json: {node, sessions}");
    CHECK_STR_EQ(jstr(j, "node.state"), "ready",
          "node show --json: {node, sessions}");
    CHECK_EQ(json_array_size(json_object_get(j, "sessions")), 1,
          "node show --json: {node, sessions}");
    json_decref(j);
    CHECK_EQ(CTL("node", "show", "gpu-9"), 1, "node show unknown: exit 1");
    CHECK(has(last_run.err, "not_found"), "node show unknown: exit 1");

    CHECK_EQ(CTL("session", "list"), 0,
          "session list:\n%s", last_run.out);
    CHECK(has(last_run.out, sid) && has(last_run.out, "vm-10.0.0.5") && has(last_run.out, "4242") && has(last_run.out, "active") && has(last_run.out, "tcp://127.0.0.1:7001"),
          "session list:\n%s", last_run.out);
    CHECK_EQ(col(last_run.out, "ID ", "STATE"), col(last_run.out, sid, "active"), "session list columns are aligned");
    CHECK_EQ(CTL("session", "list", "--vm", "web"), 0,
          "session list --vm filters");
    CHECK(has(last_run.out, "No sessions match"),
          "session list --vm filters");
    CHECK_EQ(CTL("session", "list", "--node", "gpu-1", "--state", "live"), 0,
          "session list --node --state live");
    CHECK(has(last_run.out, sid),
          "session list --node --state live");
    CHECK_EQ(CTL("session", "list", "--state", "released", "--json"), 0, "session list --json");
    j = out_json();
    CHECK(j, "--json: no released ones yet");
    CHECK_EQ(json_array_size(json_object_get(j, "sessions")), 0, "--json: no released ones yet");
    json_decref(j);
    CHECK_EQ(CTL("session", "show", sid), 0, "session show:\n%s", last_run.out);
    CHECK(has(last_run.out, "32 (SM groups 0,1,2,3)") && has(last_run.out, "20 GiB (21474836480 bytes)") && has(last_run.out, "gpu-1 GPU ") && has(last_run.out, "train.py") && has(last_run.out, "active"), "session show:\n%s", last_run.out);
    CHECK_EQ(CTL("session", "show", sid, "--json"), 0, "session show --json");
    j = out_json();
    CHECK(j,
          "session show --json: {session}");
    CHECK_EQ(jint(j, "session.sm_count"), 32,
          "session show --json: {session}");
    CHECK_EQ(jint(j, "session.pid"), 4242,
          "session show --json: {session}");
    json_decref(j);
    CHECK_EQ(CTL("session", "show", "s-nope"), 1, "session show unknown");
    CHECK(has(last_run.err, "not_found"), "session show unknown");

    CHECK(CTL("vm", "show", "vm-10.0.0.5") == 0 && has(last_run.out, "Live sessions:") && has(last_run.out, sid),
          "vm show lists the VM's live sessions");
    CHECK_EQ(CTL("status"), 0, "status counts:\n%s", last_run.out);
    CHECK(has(last_run.out, "1 live (1 active, 0 starting)") && has(last_run.out, "2 (1 ready, 1 registered, 0 lost)") && has(last_run.out, "264 total, 32 allocated, 232 free"), "status counts:\n%s", last_run.out);
    CHECK_EQ(CTL("status", "--json"), 0, "status --json");
    j = out_json();
    CHECK(j, "status --json counts");
    CHECK_EQ(jint(j, "vms"), 3, "status --json counts");
    CHECK_EQ(jint(j, "sessions.live"), 1, "status --json counts");
    CHECK_EQ(jint(j, "capacity.sm_allocated"), 32, "status --json counts");
    CHECK_EQ(jint(j, "nodes.ready"), 1, "status --json counts");
    CHECK_STR_EQ(jstr(j, "health.status"), "ok", "status --json counts");
    json_decref(j);

    CHECK(CTL("vm", "remove", "vm-10.0.0.5") == 1 && has(last_run.err, "conflict")
              && has(last_run.err, "vm remove vm-10.0.0.5 --force"),
          "vm remove with a live session: exit 1 and the --force hint: %s", last_run.err);
    CHECK_EQ(CTL("session", "release", sid), 0, "session release");
    CHECK(has(last_run.out, "Released session"), "session release");
    CHECK_GE(servers_stopped, 1, "its server was stopped");
    CHECK_EQ(CTL("session", "show", sid), 0, "the session shows released and why");
    CHECK(has(last_run.out, "released") && has(last_run.out, "released by the operator"), "the session shows released and why");
    CHECK_EQ(CTL("session", "release", sid, "--json"), 0,
          "--json on a 204 prints nothing");
    CHECK_EQ(last_run.out[0], 0,
          "--json on a 204 prints nothing");
    snprintf(sid, sizeof sid, "%s", new_session(vm_token, 4343));
    CHECK(CTL("vm", "remove", "vm-10.0.0.5", "--force") == 0 && has(last_run.out, "Removed VM vm-10.0.0.5"),
          "vm remove --force with a live session");
    CHECK_EQ(CTL("session", "show", sid, "--json"), 0,
          "its session was released");
    CHECK(has(last_run.out, "\"released\""),
          "its session was released");
    CHECK(CTL("vm", "remove", "vm-10.0.0.5") == 1 && has(last_run.err, "not_found"),
          "removing it again: exit 1");
    CHECK_EQ(CTL("node", "remove", "gpu-2"), 0, "node remove");
    CHECK(has(last_run.out, "Removed node gpu-2"), "node remove");
    CHECK_EQ(CTL("node", "show", "gpu-2"), 1, "removed node is gone");
    CHECK(has(last_run.err, "not_found"), "removed node is gone");
    CHECK_EQ(CTL("node", "remove", "gpu-2", "--json"), 1,
          "node remove of an unknown node: exit 1");
    CHECK(has(last_run.out, "not_found"),
          "node remove of an unknown node: exit 1");
}

static void test_import(void)
{
    printf("vm import\n");
    char path[600];
    snprintf(path, sizeof path, "%s/vms.json", dir);
    write_file(path,
               "[{\"vm_ip\": \"10.0.0.6\", \"host_ip\": \"10.0.1.2\", \"compute_units\": 24, "
               "\"memory\": 4096},\n"
               " {\"vm_ip\": \"10.0.0.21\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 16, "
               "\"memory\": 20480, \"_id\": \"ignored\"},\n"
               " {\"vm_ip\": \"10.0.0.22\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 8, "
               "\"memory\": \"8GiB\"},\n"
               " {\"vm_ip\": \"10.0.0.23\", \"host_ip\": \"10.0.1.2\", \"compute_units\": 8, "
               "\"memory\": \"1500MB\"}]\n");
    CHECK_EQ(CTL("vm", "import", path), 0,
          "import of an array:\n%s", last_run.out);
    CHECK(has(last_run.out, "3 created, 1 updated"),
          "import of an array:\n%s", last_run.out);
    char line[1024];
    CHECK(line_starting(last_run.out, "updated  web", line, sizeof line) && has(line, "4 GiB"),
          "the document with web's vm_ip updated it; memory 4096 is MiB (4 GiB)");
    CHECK(line_starting(last_run.out, "created  vm-10.0.0.21", line, sizeof line) && has(line, "20 GiB"),
          "memory 20480 (a number) is MiB: 20 GiB");
    CHECK(line_starting(last_run.out, "created  vm-10.0.0.22", line, sizeof line) && has(line, "8 GiB"),
          "memory \"8GiB\" is 8 GiB");
    CHECK(line_starting(last_run.out, "created  vm-10.0.0.23", line, sizeof line) && has(line, "1.4 GiB"),
          "memory \"1500MB\" is 1.5e9 bytes");
    char tok[65];
    CHECK(has(last_run.out, "shown only this once") && line_starting(last_run.out, "vm-10.0.0.22 ", line, sizeof line)
              && find_token(line, tok), "the new VMs' tokens are printed once");
    CHECK(CTL("--json", "vm", "show", "vm-10.0.0.23") == 0 && has(last_run.out, "\"memory\": 1500000000"),
          "1500MB stored as 1500000000 bytes");
    CHECK_EQ(CTL("--json", "vm", "show", "web"), 0, "web updated to 4096 MiB and 24 SMs");
    CHECK(has(last_run.out, "\"memory\": 4294967296") && has(last_run.out, "\"compute_units\": 24"), "web updated to 4096 MiB and 24 SMs");

    write_file(path, "{\"documents\": [{\"vm_ip\": \"10.0.0.21\", \"host_ip\": \"10.0.1.1\", "
                     "\"compute_units\": 32, \"memory\": \"2048KiB\"}, {\"vm_ip\": \"10.0.0.24\", "
                     "\"host_ip\": \"10.0.1.1\", \"compute_units\": 4, \"memory\": "
                     "\"1073741824B\"}]}");
    CHECK_EQ(CTL("vm", "import", path, "--json"), 0, "import of {\"documents\": [...]} --json");
    json_t *j = out_json();
    CHECK(j,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    CHECK_EQ(json_array_size(json_object_get(j, "created")), 1,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    CHECK_EQ(json_array_size(json_object_get(j, "updated")), 1,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    CHECK_EQ(jint(j, "updated.0.memory"), 2097152,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    CHECK_EQ(jint(j, "created.0.memory"), 1073741824,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    CHECK_EQ(strlen(jstr(j, "created.0.token")), 64,
          "--json: {created: [VM+token], updated: [VM]}, 2048KiB and 1073741824B");
    json_decref(j);

    write_file(path, "[{\"vm_ip\": \"10.0.0.25\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 4, "
                     "\"memory\": \"8GiB\"},\n{\"vm_ip\": \"10.0.0.26\", \"host_ip\": \"10.0.1.1\", "
                     "\"compute_units\": 4, \"memory\": \"20 parsecs\"}]");
    CHECK_EQ(CTL("vm", "import", path), 1,
          "a bad document: exit 1, the server names it: %s", last_run.err);
    CHECK(has(last_run.err, "bad_request") && has(last_run.err, "documents[1].memory") && has(last_run.err, "nothing was imported"),
          "a bad document: exit 1, the server names it: %s", last_run.err);
    CHECK(CTL("vm", "show", "vm-10.0.0.25") == 1, "and nothing of that file was imported");
    write_file(path, "[{\"vm_ip\": \"10.0.0.27\", \"host_ip\": \"10.0.1.1\", \"compute_units\": 4, "
                     "\"memory\": 512}]");
    CHECK_EQ(CTL_IN(path, "vm", "import", "-"), 0, "import from standard input: %s", last_run.out);
    CHECK(has(last_run.out, "1 created") && has(last_run.out, "512 MiB"), "import from standard input: %s", last_run.out);
}

static void test_events(void)
{
    printf("events\n");
    CHECK_EQ(CTL("events"), 0,
          "events lists what happened");
    CHECK(has(last_run.out, "vm.created") && has(last_run.out, "session.allocated") && has(last_run.out, "session.released") && has(last_run.out, "node.created"),
          "events lists what happened");
    CHECK_EQ(col_with(last_run.out, "TIME (UTC)", "KIND"), col_with(last_run.out, "node.created", "node.created"),
          "events table columns are aligned");
    CHECK_EQ(col_with(last_run.out, "TIME (UTC)", "MESSAGE"), col_with(last_run.out, "node.created", "node gpu-1"),
          "events table columns are aligned");
    CHECK_EQ(CTL("events", "--since", "2", "--limit", "3", "--json"), 0, "events --since --limit --json");
    json_t *j = out_json();
    json_t *evs = json_object_get(j, "events");
    CHECK(j, "--json: the 3 events after id 2");
    CHECK_EQ(json_array_size(evs), 3, "--json: the 3 events after id 2");
    CHECK_EQ(jint(j, "events.0.id"), 3, "--json: the 3 events after id 2");
    CHECK_EQ(jint(j, "events.2.id"), 5, "--json: the 3 events after id 2");
    json_decref(j);
    CHECK_EQ(CTL("events", "--since", "100000"), 0,
          "no events after a large id");
    CHECK(has(last_run.out, "No events"),
          "no events after a large id");

    /* --follow: prints the log, then each new event, until SIGTERM */
    for (int as_json = 0; as_json < 2; as_json++) {
        int fo, fe;
        const char *args_h[] = {"events", "--follow", "--interval", "100ms", NULL};
        const char *args_j[] = {"events", "--follow", "--interval", "100ms", "--json", NULL};
        pid_t pid = spawn(as_json ? args_j : args_h, NULL, &fo, &fe);
        char buf[1 << 16];
        size_t len = 0;
        int phase = 0;
        char vm_ip[32], want[64];
        snprintf(vm_ip, sizeof vm_ip, "10.0.0.%d", 90 + as_json);
        snprintf(want, sizeof want, "vm-%s", vm_ip);
        time_t deadline = time(NULL) + 20;
        while (phase < 2 && time(NULL) < deadline) {
            struct pollfd p = {fo, POLLIN, 0};
            if (poll(&p, 1, 200) > 0) {
                ssize_t r = read(fo, buf + len, sizeof buf - 1 - len);
                if (r <= 0)
                    break;
                len += (size_t)r;
                buf[len] = 0;
            }
            if (phase == 0 && has(buf, "vm.created")) {
                phase = 1;   /* the existing log came; make a new event */
                const char *const add[] = {"vm", "add", "--vm-ip", vm_ip, "--host-ip",
                                           "10.0.1.1", "--compute-units", "8", "--memory", "1GiB",
                                           NULL};
                CHECK_EQ(run_in(NULL, add), 0, "a VM added while following");
            }
            if (phase == 1 && has(buf, want))
                phase = 2;
        }
        kill(pid, SIGTERM);
        int st;
        waitpid(pid, &st, 0);
        close(fo);
        close(fe);
        CHECK_EQ(phase, 2, "events --follow%s printed the new event %s", as_json ? " --json" : "",
              want);
        CHECK(WIFEXITED(st), "SIGTERM stops it with exit 0");
        CHECK_EQ(WEXITSTATUS(st), 0, "SIGTERM stops it with exit 0");
        if (as_json) {
            json_error_t e;
            char *nl = strchr(buf, '\n');
            if (nl)
                *nl = 0;
            json_t *ev = json_loads(buf, 0, &e);
            CHECK(ev,
                  "--follow --json prints one event per line (JSON lines)");
            CHECK_EQ(json_integer_value(json_object_get(ev, "id")), 1,
                  "--follow --json prints one event per line (JSON lines)");
            json_decref(ev);
        } else {
            CHECK_EQ(count_of(buf, "TIME (UTC)"), 1, "--follow prints the header once");
        }
    }
}

static void test_auth_and_config(const char *vm_token)   /* a live VM's token */
{
    printf("auth errors, configuration sources\n");
    char bad[600], vmtok[600], text[1200];
    snprintf(bad, sizeof bad, "%s/wrong.token", dir);
    write_file(bad, "0000000000000000000000000000000000000000000000000000000000000000\n");
    CHECK_EQ(CTL("--token-file", bad, "vm", "list"), 3,
          "a wrong token: exit 3, says authentication failed and which file: %s", last_run.err);
    CHECK(has(last_run.err, "authentication failed") && has(last_run.err, "unauthorized") && has(last_run.err, "HTTP 401") && has(last_run.err, bad),
          "a wrong token: exit 3, says authentication failed and which file: %s", last_run.err);
    snprintf(vmtok, sizeof vmtok, "%s/vm.token", dir);
    snprintf(text, sizeof text, "%s\n", vm_token);
    write_file(vmtok, text);
    CHECK_EQ(CTL("--token-file", vmtok, "node", "list"), 3,
          "a VM's token instead of the operator's: exit 3, forbidden: %s", last_run.err);
    CHECK(has(last_run.err, "not allowed") && has(last_run.err, "forbidden") && has(last_run.err, "HTTP 403") && has(last_run.err, "is not the operator token"),
          "a VM's token instead of the operator's: exit 3, forbidden: %s", last_run.err);
    CHECK_EQ(CTL("--token-file", bad, "status"), 3,
          "status with a wrong token: the server is up, the counts refused");
    CHECK(has(last_run.err, "is up"),
          "status with a wrong token: the server is up, the counts refused");

    char dead[64], deadenv[100];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", free_port());
    snprintf(deadenv, sizeof deadenv, "FLYT_CM_URL=%s", dead);
    set_override(0, deadenv);
    CHECK_EQ(CTL("vm", "list"), 3, "FLYT_CM_URL is used");
    CHECK(has(last_run.err, "from FLYT_CM_URL"), "FLYT_CM_URL is used");
    CHECK_EQ(CTL("--server", base, "vm", "list"), 0, "--server wins over FLYT_CM_URL");
    CHECK_EQ(CTL("vm", "list", "--server", base + 7), 0,
          "global options after the command; a URL without http:// gets it");

    /* ~/.config/flyt/flytctl.conf: server and a token_file relative to it */
    char cdir[600], conf[700], tok[700];
    snprintf(cdir, sizeof cdir, "%s/.config", home);
    mkdir(home, 0700);
    mkdir(cdir, 0700);
    snprintf(cdir, sizeof cdir, "%s/.config/flyt", home);
    mkdir(cdir, 0700);
    snprintf(conf, sizeof conf, "%s/flytctl.conf", cdir);
    snprintf(tok, sizeof tok, "%s/op.token", cdir);
    FILE *in = fopen(tokfile, "r");
    char t[200] = "";
    CHECK(in && fgets(t, sizeof t, in), "read the operator token");
    fclose(in);
    write_file(tok, t);
    snprintf(text, sizeof text, "# flytctl\nserver = %s\ntoken_file = op.token\ntimeout = 5s\n", base);
    write_file(conf, text);
    set_override(0, "FLYT_CM_URL");
    set_override(1, "FLYT_OPERATOR_TOKEN_FILE");
    CHECK_EQ(CTL("vm", "list"), 0, "server and token_file from "
                                                        "~/.config/flyt/flytctl.conf: %s", last_run.err);
    CHECK(has(last_run.out, "web"), "server and token_file from "
                                                        "~/.config/flyt/flytctl.conf: %s", last_run.err);
    set_override(0, deadenv);
    CHECK_EQ(CTL("vm", "list"), 3,
          "FLYT_CM_URL wins over the config file");
    CHECK(has(last_run.err, "from FLYT_CM_URL"),
          "FLYT_CM_URL wins over the config file");
    clear_overrides();
    snprintf(text, sizeof text, "server = %s\ntoken_file = %s\n", dead, bad);
    write_file(conf, text);
    CHECK_EQ(CTL("vm", "list"), 0, "the environment wins over the config file");
    set_override(0, "FLYT_CM_URL");
    CHECK_EQ(CTL("vm", "list"), 3,
          "messages say which config line gave the server: %s", last_run.err);
    CHECK(has(last_run.err, "flytctl.conf:1"),
          "messages say which config line gave the server: %s", last_run.err);
    set_override(1, "FLYT_OPERATOR_TOKEN_FILE");
    CHECK_EQ(CTL("--config", conf, "--server", base, "vm", "list"), 3, "and which gave the token file: %s", last_run.err);
    CHECK(has(last_run.err, "HTTP 401") && has(last_run.err, "flytctl.conf:2"), "and which gave the token file: %s", last_run.err);
    clear_overrides();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_ctl FLYTCTL [CLUSTER_MANAGER]\n");
        return 2;
    }
    flyt_log_init("test_ctl", FLYT_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    flytctl = argv[1];
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/test_ctl.XXXXXX", tmp);
    CHECK(mkdtemp(dir), "temporary directory %s", dir);
    atexit(cleanup);
    snprintf(tokfile, sizeof tokfile, "%s/operator.token", dir);
    snprintf(home, sizeof home, "%s/home", dir);
    char optoken[65];
    for (int i = 0; i < 64; i++)
        optoken[i] = "0123456789abcdef"[(i * 7 + 3) % 16];
    optoken[64] = 0;
    char text[100];
    snprintf(text, sizeof text, "%s\n", optoken);
    write_file(tokfile, text);
    chmod(tokfile, 0600);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", free_port());

    test_offline();
    if (argc < 3 || !argv[2][0]) {
        check_skip_part("no flyt-cluster-manager given: the tests against it did not run");
        return check_done();
    }

    start_cm(argv[2]);
    char err[512] = "";
    struct flyt_http_server *nm = flyt_http_start("127.0.0.1:0", nm_routes, NULL, err, sizeof err);
    CHECK(nm, "this test's node manager listens (%s)", err);

    char vm_token[65], web_token[65], node_token[65];
    test_vms(vm_token, web_token);
    test_nodes(node_token, flyt_http_port(nm));
    test_sessions(vm_token);
    test_import();
    test_events();
    test_auth_and_config(web_token);

    cleanup();
    flyt_http_stop(nm);
    printf("all flytctl tests passed\n");
    return 0;
}
