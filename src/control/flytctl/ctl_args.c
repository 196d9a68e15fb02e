/* flytctl: the options of one command, and the checks of their values. */
#include "ctl.h"

#include "flyt_config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const struct ctl_opt global_opts[] = {
    {"--server", "URL", "the cluster manager, http://HOST:PORT; else $FLYT_CM_URL, else\n"
                        "\"server\" in the config file, else " CTL_DEFAULT_SERVER},
    {"--token-file", "FILE", "file holding the operator token; else $FLYT_OPERATOR_TOKEN_FILE,\n"
                             "else \"token_file\" in the config file"},
    {"--ca", "FILE", "PEM CA certificate(s) an https:// server's certificate must chain\n"
                     "to; else $FLYT_CA, else \"ca_file\" in the config file, else the\n"
                     "system's CA store (the certificate is always verified)"},
    {"--json", NULL, "print the API's JSON instead of tables (for scripts)"},
    {"--config", "FILE", "config file (default ~/.config/flyt/flytctl.conf)"},
    {"--timeout", "DURATION", "time limit of each request: 500ms, 10s, 1m (default 30s)"},
    {NULL, NULL, NULL}};

void ctl_cmd_name(const struct ctl_cmd *cmd, char *out, size_t outlen)
{
    if (cmd->group)
        snprintf(out, outlen, "%s %s", cmd->group, cmd->name);
    else
        snprintf(out, outlen, "%s", cmd->name);
}

int ctl_usage(const struct ctl_cmd *cmd, const char *fmt, ...)
{
    char name[64], msg[1024];
    ctl_cmd_name(cmd, name, sizeof name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flytctl %s: %s\n(see 'flytctl %s --help')\n", name, msg, name);
    return CTL_EUSAGE;
}

static void print_opts(const struct ctl_opt *opts, FILE *out)
{
    for (const struct ctl_opt *o = opts; o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        fprintf(out, "  %-22s ", left);
        for (const char *h = o->help; *h; h++) {   /* continuation lines under the text */
            fputc(*h, out);
            if (*h == '\n')
                fprintf(out, "%25s", "");
        }
        fputc('\n', out);
    }
}

void ctl_print_global_opts(FILE *out)
{
    print_opts(global_opts, out);
    fprintf(out, "  %-22s %s\n", "-h, --help", "this help");
}

void ctl_print_cmd_help(const struct ctl_cmd *cmd, FILE *out)
{
    char name[64];
    ctl_cmd_name(cmd, name, sizeof name);
    fprintf(out, "usage: flytctl [GLOBAL OPTIONS] %s", name);
    if (cmd->posnames && cmd->posnames[0])
        fprintf(out, " %s", cmd->posnames);
    if (cmd->opts && cmd->opts[0].name)
        fprintf(out, " [OPTIONS]");
    fprintf(out, "\n\n%s\n", cmd->summary);
    if (cmd->help)
        fprintf(out, "\n%s", cmd->help);
    if (cmd->opts && cmd->opts[0].name) {
        fprintf(out, "\nOptions:\n");
        print_opts(cmd->opts, out);
    }
    fprintf(out, "\nGlobal options (anywhere on the line):\n");
    ctl_print_global_opts(out);
}

/* arg is "--name" or "--name=value": does it name opt? */
static int opt_matches(const char *arg, const char *opt, const char **inline_val)
{
    size_t n = strlen(opt);
    if (strncmp(arg, opt, n) != 0)
        return 0;
    if (arg[n] == 0) {
        *inline_val = NULL;
        return 1;
    }
    if (arg[n] == '=') {
        *inline_val = arg + n + 1;
        return 1;
    }
    return 0;
}

/* Takes the option's value (inline or the next word). NULL when there is none. */
static const char *opt_value(int argc, char **argv, int *i, const char *inline_val)
{
    if (inline_val)
        return inline_val;
    if (*i + 1 < argc)
        return argv[++*i];
    return NULL;
}

int ctl_global_opt(struct ctl *c, int argc, char **argv, int *i, char *msg, size_t msglen)
{
    const char *arg = argv[*i], *iv = NULL;
    if (opt_matches(arg, "--json", &iv)) {
        if (iv) {
            snprintf(msg, msglen, "--json takes no value");
            return -1;
        }
        c->json = 1;
        return 1;
    }
    const char **slot = NULL;
    const struct ctl_opt *o;
    for (o = global_opts; o->name; o++)
        if (o->metavar && opt_matches(arg, o->name, &iv))
            break;
    if (!o->name)
        return 0;
    if (strcmp(o->name, "--server") == 0)
        slot = &c->opt_server;
    else if (strcmp(o->name, "--token-file") == 0)
        slot = &c->opt_token_file;
    else if (strcmp(o->name, "--config") == 0)
        slot = &c->opt_config;
    else if (strcmp(o->name, "--ca") == 0)
        slot = &c->opt_ca;
    else
        slot = &c->opt_timeout;
    const char *v = opt_value(argc, argv, i, iv);
    if (!v || !v[0]) {
        snprintf(msg, msglen, "%s needs a value (%s)", o->name, o->metavar);
        return -1;
    }
    *slot = v;
    return 1;
}

const char *ctl_opt(const struct ctl_cmd *cmd, const struct ctl_args *a, const char *name)
{
    for (int k = 0; cmd->opts && cmd->opts[k].name; k++)
        if (strcmp(cmd->opts[k].name, name) == 0)
            return a->val[k];
    return NULL;
}

int ctl_parse(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv,
              struct ctl_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            ctl_print_cmd_help(cmd, stdout);
            return 1;
        }
    int only_pos = 0;
    char msg[256];
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_pos && strcmp(arg, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (!only_pos && arg[0] == '-' && arg[1]) {
            int g = ctl_global_opt(c, argc, argv, &i, msg, sizeof msg);
            if (g < 0)
                return ctl_usage(cmd, "%s", msg);
            if (g > 0)
                continue;
            int k;
            const char *iv = NULL;
            for (k = 0; cmd->opts && cmd->opts[k].name; k++)
                if (opt_matches(arg, cmd->opts[k].name, &iv))
                    break;
            if (!cmd->opts || !cmd->opts[k].name)
                return ctl_usage(cmd, "unknown option \"%s\"", arg);
            const struct ctl_opt *o = &cmd->opts[k];
            const char *v = "1";
            if (!o->metavar && iv)
                return ctl_usage(cmd, "%s takes no value", o->name);
            if (o->metavar) {
                v = opt_value(argc, argv, &i, iv);
                if (!v)
                    return ctl_usage(cmd, "%s needs a value (%s)", o->name, o->metavar);
                if (!v[0])
                    return ctl_usage(cmd, "%s: empty value", o->name);
            }
            if (a->val[k])
                return ctl_usage(cmd, "%s given twice", o->name);
            a->val[k] = v;
            continue;
        }
        if (a->npos >= cmd->npos_max || a->npos >= CTL_MAX_POS)
            return ctl_usage(cmd, "unexpected argument \"%s\"", arg);
        a->pos[a->npos++] = arg;
    }
    if (a->npos < cmd->npos_min)
        return ctl_usage(cmd, "missing %s", cmd->posnames);
    return 0;
}

int ctl_arg_count(const struct ctl_cmd *cmd, const char *opt, const char *s, long long min,
                  long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1])))
        end = (char *)s;
    if (end == s || *end || errno == ERANGE || v < min || v > max)
        return ctl_usage(cmd, "%s: expected a whole number from %lld to %lld, got \"%s\"", opt,
                         min, max, s);
    *out = v;
    return 0;
}

int ctl_arg_memory(const struct ctl_cmd *cmd, const char *opt, const char *s, long long *bytes)
{
    const uint64_t limit = 1ULL << 60;   /* 1 EiB, as the cluster manager */
    size_t digits = strspn(s, "0123456789");
    if (digits && s[digits] == 0) {
        errno = 0;
        unsigned long long mib = strtoull(s, NULL, 10);
        if (errno == ERANGE || mib == 0 || mib > (limit >> 20))
            return ctl_usage(cmd, "%s: %s MiB is out of range (1 MiB to 1 EiB)", opt, s);
        *bytes = (long long)(mib << 20);
        return 0;
    }
    uint64_t b;
    char why[256];
    if (digits && (s[digits] == '.' || s[digits] == ','))
        return ctl_usage(cmd, "%s: \"%s\": give a whole number with a unit (e.g. 1536MiB "
                              "rather than 1.5GiB)", opt, s);
    if (flyt_parse_size(s, &b, why, sizeof why) < 0)
        return ctl_usage(cmd, "%s: %s; a bare number is MiB", opt, why);
    if (b == 0 || b > limit)
        return ctl_usage(cmd, "%s: \"%s\" is out of range (1 byte to 1 EiB)", opt, s);
    *bytes = (long long)b;
    return 0;
}

int ctl_arg_ip(const struct ctl_cmd *cmd, const char *opt, const char *s)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1)
        return 0;
    return ctl_usage(cmd, "%s: expected an IPv4 or IPv6 address, got \"%s\"", opt, s);
}

int ctl_arg_id(const struct ctl_cmd *cmd, const char *what, const char *s)
{
    size_t n = strlen(s);
    int ok = n > 0 && n < 64;
    for (const char *p = s; ok && *p; p++)
        ok = isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.';
    if (ok)
        return 0;
    return ctl_usage(cmd, "%s: expected 1 to 63 characters of A-Z a-z 0-9 . _ -, got \"%s\"",
                     what, s);
}

int ctl_arg_duration(const struct ctl_cmd *cmd, const char *opt, const char *s, long *ms)
{
    uint64_t v;
    char why[256];
    if (flyt_parse_duration_ms(s, &v, why, sizeof why) < 0)
        return ctl_usage(cmd, "%s: %s", opt, why);
    if (v < 10 || v > 86400000)
        return ctl_usage(cmd, "%s: \"%s\" is out of range (10ms to 24h)", opt, s);
    *ms = (long)v;
    return 0;
}
