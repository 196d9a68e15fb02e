/* Config files: see flyt_config.h for the format. A small line parser of our own. */
#include "flyt_config.h"

#include "flyt_log.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct cfg_value {
    char *str;      /* string values */
    long long num;  /* int, bool, size (bytes), duration (ms) */
    bool set;       /* set by the file */
    int line;       /* where the file set it */
};

struct flyt_config {
    const struct flyt_cfg_key *keys;
    size_t nkeys;
    struct cfg_value *values;
};

static const char *const type_names[] = {"string", "int", "bool", "size", "duration"};

static int find_key(const struct flyt_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nkeys; i++)
        if (strcmp(cfg->keys[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Parses text into values[i] according to the key's type and bounds. */
static int set_value(struct flyt_config *cfg, size_t i, const char *text, char *err,
                     size_t errlen)
{
    const struct flyt_cfg_key *k = &cfg->keys[i];
    struct cfg_value *v = &cfg->values[i];
    long long num = 0;
    switch (k->type) {
    case FLYT_CFG_STRING: {
        char *dup = strdup(text);
        if (!dup) {
            flyt_set_reason(err, errlen, "out of memory");
            return -1;
        }
        free(v->str);
        v->str = dup;
        return 0;
    }
    case FLYT_CFG_INT:
        if (flyt_parse_int(text, &num, err, errlen) < 0)
            return -1;
        break;
    case FLYT_CFG_BOOL: {
        bool b;
        if (flyt_parse_bool(text, &b, err, errlen) < 0)
            return -1;
        num = b;
        break;
    }
    case FLYT_CFG_SIZE:
    case FLYT_CFG_DURATION: {
        uint64_t u;
        int rc = k->type == FLYT_CFG_SIZE ? flyt_parse_size(text, &u, err, errlen)
                                          : flyt_parse_duration_ms(text, &u, err, errlen);
        if (rc < 0)
            return -1;
        if (u > (uint64_t)INT64_MAX) {
            flyt_set_reason(err, errlen, "value \"%s\" out of range", text);
            return -1;
        }
        num = (long long)u;
        break;
    }
    }
    if (k->max > k->min && (num < k->min || num > k->max)) {
        const char *unit = k->type == FLYT_CFG_SIZE ? " bytes"
                           : k->type == FLYT_CFG_DURATION ? " ms" : "";
        flyt_set_reason(err, errlen, "value \"%s\" out of range [%lld%s, %lld%s]", text, k->min, unit,
               k->max, unit);
        return -1;
    }
    v->num = num;
    return 0;
}

struct flyt_config *flyt_config_new(const struct flyt_cfg_key *keys)
{
    struct flyt_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    cfg->keys = keys;
    while (keys[cfg->nkeys].name)
        cfg->nkeys++;
    cfg->values = calloc(cfg->nkeys ? cfg->nkeys : 1, sizeof *cfg->values);
    if (!cfg->values) {
        free(cfg);
        return NULL;
    }
    for (size_t i = 0; i < cfg->nkeys; i++) {
        char err[256];
        if (keys[i].def && set_value(cfg, i, keys[i].def, err, sizeof err) < 0) {
            flyt_error("config: default of %s: %s", keys[i].name, err);
            flyt_config_free(cfg);
            return NULL;
        }
    }
    return cfg;
}

void flyt_config_free(struct flyt_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nkeys; i++)
        free(cfg->values[i].str);
    free(cfg->values);
    free(cfg);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

static bool valid_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
            return false;
    return true;
}

/* Turns the raw value (after '=') into its text: quoted "..." with \" and \\ escapes,
 * or unquoted up to a " #" comment. -1 with a reason on a malformed quote. */
static int unquote(char *raw, char *reason, size_t rlen)
{
    char *s = trim(raw);
    if (*s != '"') {
        for (char *p = s; *p; p++)
            if (*p == '#' && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
                *p = 0;
                break;
            }
        char *t = trim(s);
        memmove(raw, t, strlen(t) + 1);
        return 0;
    }
    char *o = raw;
    const char *p = s + 1;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
            p++;
        *o++ = *p;
    }
    if (*p != '"') {
        flyt_set_reason(reason, rlen, "unterminated quoted value");
        return -1;
    }
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    if (*p && *p != '#') {
        flyt_set_reason(reason, rlen, "unexpected text after the quoted value: \"%s\"", p);
        return -1;
    }
    *o = 0;
    return 0;
}

int flyt_config_parse(struct flyt_config *cfg, const char *name, const char *text, char *err,
                      size_t errlen)
{
    char section[128] = "";
    char reason[512];
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        char *buf = malloc(len + 1);
        if (!buf) {
            flyt_set_reason(err, errlen, "%s: out of memory", name);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (nl ? 1 : 0);
        int bad = 0;
        char *line = trim(buf);
        if (*line == 0 || *line == '#' || *line == ';') {
            /* blank or comment */
        } else if (*line == '[') {
            char *close = strchr(line, ']');
            char *rest = close ? trim(close + 1) : NULL;
            if (!close || (*rest && *rest != '#')) {
                flyt_set_reason(reason, sizeof reason, "malformed section header \"%s\" (expected [name])",
                       line);
                bad = 1;
            } else {
                *close = 0;
                char *sec = trim(line + 1);
                if (!valid_name(sec) || strlen(sec) >= sizeof section) {
                    flyt_set_reason(reason, sizeof reason, "invalid section name \"%s\"", sec);
                    bad = 1;
                } else {
                    snprintf(section, sizeof section, "%s", sec);
                }
            }
        } else {
            char *eq = strchr(line, '=');
            if (!eq) {
                flyt_set_reason(reason, sizeof reason, "expected \"key = value\", got \"%s\"", line);
                bad = 1;
            } else {
                *eq = 0;
                char *key = trim(line);
                char full[256];
                snprintf(full, sizeof full, "%s%s%s", section, *section ? "." : "", key);
                int idx = valid_name(key) ? find_key(cfg, full) : -1;
                if (!valid_name(key)) {
                    flyt_set_reason(reason, sizeof reason, "invalid key name \"%s\"", key);
                    bad = 1;
                } else if (idx < 0) {
                    flyt_set_reason(reason, sizeof reason, "unknown key \"%s\"", full);
                    bad = 1;
                } else if (cfg->values[idx].set) {
                    flyt_set_reason(reason, sizeof reason, "duplicate key \"%s\" (first set on line %d)",
                           full, cfg->values[idx].line);
                    bad = 1;
                } else if (unquote(eq + 1, reason, sizeof reason) < 0) {
                    bad = 1;
                } else {
                    char why[400];
                    if (set_value(cfg, (size_t)idx, eq + 1, why, sizeof why) < 0) {
                        flyt_set_reason(reason, sizeof reason, "%s: %s", full, why);
                        bad = 1;
                    } else {
                        cfg->values[idx].set = true;
                        cfg->values[idx].line = lineno;
                    }
                }
            }
        }
        free(buf);
        if (bad) {
            flyt_set_reason(err, errlen, "%s:%d: %s", name, lineno, reason);
            return -1;
        }
    }
    for (size_t i = 0; i < cfg->nkeys; i++)
        if (cfg->keys[i].required && !cfg->values[i].set) {
            flyt_set_reason(err, errlen, "%s: required key \"%s\" is not set", name, cfg->keys[i].name);
            return -1;
        }
    return 0;
}

int flyt_config_load(struct flyt_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        flyt_set_reason(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                flyt_set_reason(err, errlen, "%s: out of memory", path);
                return -1;
            }
            text = t;
        }
        memcpy(text + len, chunk, n);
        len += n;
        if (len > (1u << 20)) {
            free(text);
            fclose(f);
            flyt_set_reason(err, errlen, "%s: larger than 1 MiB", path);
            return -1;
        }
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(text);
        flyt_set_reason(err, errlen, "%s: read error", path);
        return -1;
    }
    if (text && memchr(text, 0, len)) {
        /* find the line of the NUL for the message */
        int line = 1;
        for (size_t i = 0; i < len && text[i]; i++)
            line += text[i] == '\n';
        free(text);
        flyt_set_reason(err, errlen, "%s:%d: NUL byte in line", path, line);
        return -1;
    }
    if (text)
        text[len] = 0;
    int rc = flyt_config_parse(cfg, path, text ? text : "", err, errlen);
    free(text);
    return rc;
}

static const struct cfg_value *get(const struct flyt_config *cfg, const char *name,
                                   enum flyt_cfg_type type)
{
    int i = find_key(cfg, name);
    if (i < 0 || cfg->keys[i].type != type) {
        flyt_error("config: key %s %s", name, i < 0 ? "not declared" : "read with the wrong type");
        abort();
    }
    return &cfg->values[i];
}

const char *flyt_config_str(const struct flyt_config *cfg, const char *name)
{
    return get(cfg, name, FLYT_CFG_STRING)->str;
}
long long flyt_config_int(const struct flyt_config *cfg, const char *name)
{
    return get(cfg, name, FLYT_CFG_INT)->num;
}
bool flyt_config_bool(const struct flyt_config *cfg, const char *name)
{
    return get(cfg, name, FLYT_CFG_BOOL)->num != 0;
}
uint64_t flyt_config_size(const struct flyt_config *cfg, const char *name)
{
    return (uint64_t)get(cfg, name, FLYT_CFG_SIZE)->num;
}
uint64_t flyt_config_duration_ms(const struct flyt_config *cfg, const char *name)
{
    return (uint64_t)get(cfg, name, FLYT_CFG_DURATION)->num;
}
bool flyt_config_is_set(const struct flyt_config *cfg, const char *name)
{
    int i = find_key(cfg, name);
    return i >= 0 && cfg->values[i].set;
}

int flyt_config_line(const struct flyt_config *cfg, const char *name)
{
    int i = find_key(cfg, name);
    return i >= 0 && cfg->values[i].set ? cfg->values[i].line : 0;
}

int flyt_config_path(const struct flyt_config *cfg, const char *cfgpath, const char *name,
                     char *out, size_t outlen, char *err, size_t errlen)
{
    const char *v = flyt_config_str(cfg, name);
    out[0] = 0;
    if (!v || !v[0])
        return 0;
    const char *slash = v[0] == '/' ? NULL : strrchr(cfgpath, '/');
    int n = slash ? snprintf(out, outlen, "%.*s/%s", (int)(slash - cfgpath), cfgpath, v)
                  : snprintf(out, outlen, "%s", v);
    if (n < 0 || (size_t)n >= outlen) {
        flyt_set_reason(err, errlen, "%s:%d: %s: path too long", cfgpath,
                        flyt_config_line(cfg, name), name);
        out[0] = 0;
        return -1;
    }
    return 1;
}

void flyt_config_print_help(const struct flyt_cfg_key *keys, FILE *out)
{
    for (const struct flyt_cfg_key *k = keys; k->name; k++) {
        fprintf(out, "  %-24s %-8s %s", k->name, type_names[k->type], k->help ? k->help : "");
        if (k->required)
            fprintf(out, " (required)");
        else if (k->def && *k->def)
            fprintf(out, " (default: %s)", k->def);
        fprintf(out, "\n");
    }
}
