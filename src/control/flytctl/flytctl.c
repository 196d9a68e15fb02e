/* flytctl: the operator's command line against flyt-cluster-manager. */
#include "ctl.h"

#include "flyt_config.h"
#include "flyt_http.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *name;
    const struct ctl_cmd *cmds;
    const char *summary;
} groups[] = {
    {"vm", ctl_vm_cmds, "VMs and their GPU share"},
    {"node", ctl_node_cmds, "GPU nodes and their capacity"},
    {"session", ctl_session_cmds, "sessions: the GPU shares given to CUDA processes"},
};
#define NGROUPS (sizeof groups / sizeof groups[0])

static const struct flyt_cfg_key config_keys[] = {
    {"server", FLYT_CFG_STRING, NULL, "the cluster manager's URL, http://HOST:PORT or https://",
     false, 0, 0},
    {"ca_file", FLYT_CFG_STRING, NULL,
     "PEM CA certificate(s) an https:// server's certificate must chain to", false, 0, 0},
    {"token_file", FLYT_CFG_STRING, NULL,
     "file holding the operator token (~/ and paths relative to this file work)", false, 0, 0},
    {"timeout", FLYT_CFG_DURATION, "30s", "time limit of each request", false, 10, 86400000},
    {NULL, 0, NULL, NULL, false, 0, 0}};

static void main_help(FILE *out)
{
    fprintf(out,
            "usage: flytctl [GLOBAL OPTIONS] COMMAND [ARGS] [OPTIONS]\n"
            "\n"
            "The Flyt operator's tool: manages VMs, GPU nodes and sessions through the cluster\n"
            "manager's API. Tables by default, the API's JSON with --json.\n"
            "\n"
            "Commands:\n");
    for (size_t g = 0; g < NGROUPS; g++)
        for (const struct ctl_cmd *c = groups[g].cmds; c->name; c++) {
            char left[64];
            snprintf(left, sizeof left, "%s %s %s", c->group, c->name, c->posnames);
            fprintf(out, "  %-22s %s\n", left, c->summary);
        }
    for (const struct ctl_cmd *c = ctl_misc_cmds; c->name; c++)
        fprintf(out, "  %-22s %s\n", c->name, c->summary);
    fprintf(out, "  %-22s %s\n", "help [COMMAND]", "help on a command (or COMMAND --help)");
    fprintf(out, "\nGlobal options (anywhere on the line):\n");
    ctl_print_global_opts(out);
    fprintf(out,
            "\nConfig file (~/.config/flyt/flytctl.conf or --config; key = value):\n");
    flyt_config_print_help(config_keys, out);
    fprintf(out,
            "\nExit codes: 0 done; 1 the cluster manager refused (its error code and message are\n"
            "printed); 2 bad command line or input file; 3 the cluster manager cannot be reached\n"
            "or refused the operator token.\n"
            "\nExamples:\n"
            "  flytctl --server http://10.0.0.1:8600 --token-file ~/.flyt/operator.token status\n"
            "  flytctl vm add --vm-ip 10.0.0.5 --host-ip 10.0.1.1 --compute-units 32 --memory 20GiB\n"
            "  flytctl node list\n"
            "  flytctl --json session list --state live\n");
}

static void group_help(size_t g, FILE *out)
{
    fprintf(out, "usage: flytctl [GLOBAL OPTIONS] %s SUBCOMMAND [ARGS] [OPTIONS]\n\n%s:\n",
            groups[g].name, groups[g].summary);
    for (const struct ctl_cmd *c = groups[g].cmds; c->name; c++) {
        char left[64];
        snprintf(left, sizeof left, "%s %s %s", c->group, c->name, c->posnames);
        fprintf(out, "  %-22s %s\n", left, c->summary);
    }
    fprintf(out, "\n'flytctl %s SUBCOMMAND --help' tells more.\n", groups[g].name);
}

static int main_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "flytctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'flytctl --help')\n");
    return CTL_EUSAGE;
}

/* "~/x" -> "$HOME/x"; a relative path is taken relative to base's directory (base NULL: as
 * is). */
static void expand_path(const char *p, const char *base, char *out, size_t outlen)
{
    const char *home = getenv("HOME");
    if (p[0] == '~' && p[1] == '/' && home) {
        snprintf(out, outlen, "%s%s", home, p + 1);
    } else if (p[0] != '/' && base && strrchr(base, '/')) {
        int dirlen = (int)(strrchr(base, '/') - base);
        snprintf(out, outlen, "%.*s/%s", dirlen, base, p);
    } else {
        snprintf(out, outlen, "%s", p);
    }
}

/* The CA that https:// servers are verified with: --ca > $FLYT_CA > ca_file > the
 * system's store. 0 or CTL_EUSAGE after a message. */
static int resolve_ca(struct ctl *c, const struct flyt_config *cfg)
{
    char path[1100] = "", from[1200] = "";
    const char *env = getenv("FLYT_CA");
    if (c->opt_ca) {
        expand_path(c->opt_ca, NULL, path, sizeof path);
        snprintf(from, sizeof from, "--ca");
    } else if (env && env[0]) {
        expand_path(env, NULL, path, sizeof path);
        snprintf(from, sizeof from, "FLYT_CA");
    } else if (flyt_config_str(cfg, "ca_file")) {
        expand_path(flyt_config_str(cfg, "ca_file"), c->config_path, path, sizeof path);
        snprintf(from, sizeof from, "%s:%d", c->config_path, flyt_config_line(cfg, "ca_file"));
    }
    char err[1400];
    if (path[0] && flyt_http_client_ca(path, err, sizeof err) < 0) {
        fprintf(stderr, "flytctl: %s (from %s)\n", err, from);
        return CTL_EUSAGE;
    }
    return 0;
}

/* Options > environment > config file > defaults. 0 or CTL_EUSAGE after a message. */
static int resolve(struct ctl *c)
{
    char path[1100] = "";
    int explicit_config = c->opt_config != NULL;
    if (c->opt_config)
        expand_path(c->opt_config, NULL, path, sizeof path);
    else if (getenv("HOME") && getenv("HOME")[0])
        snprintf(path, sizeof path, "%s/.config/flyt/flytctl.conf", getenv("HOME"));
    struct flyt_config *cfg = flyt_config_new(config_keys);
    if (!cfg) {
        fprintf(stderr, "flytctl: out of memory\n");
        return CTL_EUSAGE;
    }
    if (path[0] && (explicit_config || access(path, F_OK) == 0)) {
        char err[1024];
        if (flyt_config_load(cfg, path, err, sizeof err) < 0) {
            fprintf(stderr, "flytctl: bad config file: %s\n", err);
            flyt_config_free(cfg);
            return CTL_EUSAGE;
        }
        snprintf(c->config_path, sizeof c->config_path, "%s", path);
    }

    static char server_from[1200];
    const char *server = c->opt_server, *env = getenv("FLYT_CM_URL");
    if (server) {
        c->server_from = "--server";
    } else if (env && env[0]) {
        server = env;
        c->server_from = "FLYT_CM_URL";
    } else if (flyt_config_str(cfg, "server")) {
        server = flyt_config_str(cfg, "server");
        snprintf(server_from, sizeof server_from, "%s:%d", c->config_path,
                 flyt_config_line(cfg, "server"));
        c->server_from = server_from;
    } else {
        server = CTL_DEFAULT_SERVER;
        c->server_from = "the default";
    }
    const char *scheme = strstr(server, "://");
    if (!scheme)
        snprintf(c->server, sizeof c->server, "http://%s", server);
    else
        snprintf(c->server, sizeof c->server, "%s", server);
    size_t len = strlen(c->server);
    while (len > 8 && c->server[len - 1] == '/')
        c->server[--len] = 0;
    const char *host = strstr(c->server, "://") + 3;
    if ((strncmp(c->server, "http://", 7) != 0 && strncmp(c->server, "https://", 8) != 0)
        || !host[0] || host[0] == '/' || strpbrk(c->server, " \t\r\n?#")) {
        fprintf(stderr, "flytctl: the server URL \"%s\" (from %s) is not http://HOST:PORT\n",
                server, c->server_from);
        flyt_config_free(cfg);
        return CTL_EUSAGE;
    }

    const char *tf = c->opt_token_file;
    env = getenv("FLYT_OPERATOR_TOKEN_FILE");
    if (tf) {
        expand_path(tf, NULL, c->token_file, sizeof c->token_file);
        snprintf(c->token_from, sizeof c->token_from, "--token-file");
    } else if (env && env[0]) {
        expand_path(env, NULL, c->token_file, sizeof c->token_file);
        snprintf(c->token_from, sizeof c->token_from, "FLYT_OPERATOR_TOKEN_FILE");
    } else if (flyt_config_str(cfg, "token_file")) {
        expand_path(flyt_config_str(cfg, "token_file"), c->config_path, c->token_file,
                    sizeof c->token_file);
        snprintf(c->token_from, sizeof c->token_from, "%s:%d", c->config_path,
                 flyt_config_line(cfg, "token_file"));
    }

    c->timeout_ms = (long)flyt_config_duration_ms(cfg, "timeout");
    int rc = resolve_ca(c, cfg);
    flyt_config_free(cfg);
    if (rc)
        return rc;
    if (c->opt_timeout) {
        uint64_t ms = 0;
        char why[256];
        if (flyt_parse_duration_ms(c->opt_timeout, &ms, why, sizeof why) < 0)
            return main_usage("--timeout: %s", why);
        if (ms < 10 || ms > 86400000)
            return main_usage("--timeout: \"%s\" is out of range (10ms to 24h)", c->opt_timeout);
        c->timeout_ms = (long)ms;
    }
    return 0;
}

static int run_cmd(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct ctl_args a;
    int rc = ctl_parse(c, cmd, argc, argv, &a);
    if (rc == 1)
        return CTL_OK;   /* --help */
    if (rc)
        return rc;
    rc = resolve(c);
    if (rc)
        return rc;
    return cmd->run(c, cmd, &a);
}

static const struct ctl_cmd *find_cmd(const struct ctl_cmd *cmds, const char *name)
{
    for (const struct ctl_cmd *c = cmds; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* help [GROUP [SUB] | COMMAND] */
static int help(int argc, char **argv)
{
    if (argc == 0) {
        main_help(stdout);
        return CTL_OK;
    }
    for (size_t g = 0; g < NGROUPS; g++)
        if (strcmp(argv[0], groups[g].name) == 0) {
            if (argc == 1) {
                group_help(g, stdout);
                return CTL_OK;
            }
            const struct ctl_cmd *cmd = find_cmd(groups[g].cmds, argv[1]);
            if (!cmd)
                return main_usage("help: no such command \"%s\"", argv[1]);
            ctl_print_cmd_help(cmd, stdout);
            return CTL_OK;
        }
    const struct ctl_cmd *cmd = find_cmd(ctl_misc_cmds, argv[0]);
    if (!cmd)
        return main_usage("help: no such command \"%s\"", argv[0]);
    ctl_print_cmd_help(cmd, stdout);
    return CTL_OK;
}

int main(int argc, char **argv)
{
    static struct ctl c;
    signal(SIGPIPE, SIG_IGN);
    int i = 1;
    char msg[256];
    for (; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            main_help(stdout);
            return CTL_OK;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("flytctl %s\n", FLYTCTL_VERSION);
            return CTL_OK;
        }
        int g = ctl_global_opt(&c, argc, argv, &i, msg, sizeof msg);
        if (g < 0)
            return main_usage("%s", msg);
        if (g == 0)
            break;
    }
    if (i >= argc) {
        fprintf(stderr, "flytctl: no command given\n\n");
        main_help(stderr);
        return CTL_EUSAGE;
    }
    const char *word = argv[i];
    if (word[0] == '-')
        return main_usage("unknown option \"%s\"", word);
    if (strcmp(word, "help") == 0)
        return help(argc - i - 1, argv + i + 1);
    for (size_t g = 0; g < NGROUPS; g++) {
        if (strcmp(word, groups[g].name) != 0)
            continue;
        if (i + 1 >= argc) {
            fprintf(stderr, "flytctl %s: missing subcommand\n\n", word);
            group_help(g, stderr);
            return CTL_EUSAGE;
        }
        const char *sub = argv[i + 1];
        if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0) {
            group_help(g, stdout);
            return CTL_OK;
        }
        const struct ctl_cmd *cmd = find_cmd(groups[g].cmds, sub);
        if (!cmd) {
            fprintf(stderr, "flytctl %s: unknown subcommand \"%s\"\n\n", word, sub);
            group_help(g, stderr);
            return CTL_EUSAGE;
        }
        return run_cmd(&c, cmd, argc - i - 2, argv + i + 2);
    }
    const struct ctl_cmd *cmd = find_cmd(ctl_misc_cmds, word);
    if (!cmd)
        return main_usage("unknown command \"%s\"", word);
    return run_cmd(&c, cmd, argc - i - 1, argv + i + 1);
}
