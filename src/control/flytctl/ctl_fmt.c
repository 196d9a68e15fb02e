/* flytctl: tables, human units, JSON output. */
#include "ctl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ctl_table {
    int ncols, nrows, cap;
    char **cells;   /* (nrows + 1) * ncols, row 0 the headers */
    int *right;
    int *minw;
};

struct ctl_table *ctl_table_new(int ncols, const char *const *headers)
{
    struct ctl_table *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    t->ncols = ncols;
    t->cap = 16;
    t->cells = calloc((size_t)(t->cap * ncols), sizeof *t->cells);
    t->right = calloc((size_t)ncols, sizeof *t->right);
    t->minw = calloc((size_t)ncols, sizeof *t->minw);
    if (!t->cells || !t->right || !t->minw)
        abort();
    for (int i = 0; i < ncols; i++) {
        const char *h = headers[i];
        t->right[i] = h[0] == '>';
        t->cells[i] = strdup(h + t->right[i]);
    }
    return t;
}

void ctl_table_row(struct ctl_table *t, ...)
{
    if (t->nrows + 2 > t->cap) {
        t->cap *= 2;
        t->cells = realloc(t->cells, (size_t)(t->cap * t->ncols) * sizeof *t->cells);
        if (!t->cells)
            abort();
    }
    t->nrows++;
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->ncols; i++) {
        const char *s = va_arg(ap, const char *);
        t->cells[t->nrows * t->ncols + i] = strdup(s && s[0] ? s : "-");
    }
    va_end(ap);
}

void ctl_table_min_width(struct ctl_table *t, int col, int width)
{
    if (col >= 0 && col < t->ncols)
        t->minw[col] = width;
}

void ctl_table_free(struct ctl_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < (t->nrows + 1) * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t->right);
    free(t->minw);
    free(t);
}

void ctl_table_print(struct ctl_table *t, FILE *out)
{
    ctl_table_print_ex(t, out, 1);
}

void ctl_table_print_ex(struct ctl_table *t, FILE *out, int header)
{
    int *w = calloc((size_t)t->ncols, sizeof *w);
    if (!w)
        abort();
    memcpy(w, t->minw, (size_t)t->ncols * sizeof *w);
    for (int r = 0; r <= t->nrows; r++)
        for (int i = 0; i < t->ncols; i++) {
            int n = (int)strlen(t->cells[r * t->ncols + i]);
            if (n > w[i])
                w[i] = n;
        }
    for (int r = header ? 0 : 1; r <= t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            const char *s = t->cells[r * t->ncols + i];
            int last = i == t->ncols - 1;
            if (t->right[i])
                fprintf(out, "%*s", w[i], s);
            else if (last)
                fputs(s, out);
            else
                fprintf(out, "%-*s", w[i], s);
            if (!last)
                fputs("  ", out);
        }
        fputc('\n', out);
    }
    free(w);
    ctl_table_free(t);
}

void ctl_fmt_bytes(long long bytes, char *out, size_t outlen)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(out, outlen, "%lld B", bytes);
        return;
    }
    int u = 0;
    long long div = 1;
    while (u < 6 && bytes / div >= 1024) {
        div *= 1024;
        u++;
    }
    if (bytes % div == 0)
        snprintf(out, outlen, "%lld %s", bytes / div, units[u]);
    else
        snprintf(out, outlen, "%.1f %s", (double)bytes / (double)div, units[u]);
}

/* Parses "YYYY-MM-DDTHH:MM:SS[.mmm]Z". */
static int parse_time(const char *s, time_t *t)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *t = timegm(&tm);
    return 0;
}

void ctl_fmt_time(json_t *v, char *out, size_t outlen)
{
    const char *s = json_string_value(v);
    time_t t;
    if (!s || parse_time(s, &t) < 0) {
        snprintf(out, outlen, "%s", s ? s : "-");
        return;
    }
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, outlen, "%Y-%m-%d %H:%M:%S", &tm);
}

void ctl_fmt_age(json_t *v, char *out, size_t outlen)
{
    const char *s = json_string_value(v);
    time_t t;
    if (!s) {
        snprintf(out, outlen, "never");
        return;
    }
    if (parse_time(s, &t) < 0) {
        snprintf(out, outlen, "%s", s);
        return;
    }
    long long d = (long long)(time(NULL) - t);
    if (d < 0)
        d = 0;
    if (d < 120)
        snprintf(out, outlen, "%llds ago", d);
    else if (d < 7200)
        snprintf(out, outlen, "%lldm ago", d / 60);
    else if (d < 172800)
        snprintf(out, outlen, "%lldh ago", d / 3600);
    else
        snprintf(out, outlen, "%lldd ago", d / 86400);
}

const char *ctl_js(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s && s[0] ? s : "-";
}

long long ctl_ji(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

void ctl_fmt_int(json_t *o, const char *key, char *out, size_t outlen)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        snprintf(out, outlen, "%lld", (long long)json_integer_value(v));
    else
        snprintf(out, outlen, "-");
}

void ctl_fmt_size(json_t *o, const char *key, char *out, size_t outlen)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        ctl_fmt_bytes((long long)json_integer_value(v), out, outlen);
    else
        snprintf(out, outlen, "-");
}

void ctl_print_json(json_t *j)
{
    if (j)
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY);
    else
        fputs("null", stdout);
    fputc('\n', stdout);
}

void ctl_print_fields(FILE *out, ...)
{
    va_list ap;
    int w = 0;
    va_start(ap, out);
    for (const char *k; (k = va_arg(ap, const char *));) {
        (void)va_arg(ap, const char *);
        if ((int)strlen(k) > w)
            w = (int)strlen(k);
    }
    va_end(ap);
    va_start(ap, out);
    for (const char *k; (k = va_arg(ap, const char *));) {
        const char *v = va_arg(ap, const char *);
        fprintf(out, "%s:%*s  %s\n", k, w - (int)strlen(k), "", v && v[0] ? v : "-");
    }
    va_end(ap);
}

void ctl_print_sessions(json_t *sessions, FILE *out)
{
    static const char *const h[] = {"ID", "VM", ">PID", "NODE", ">GPU", ">SMS", ">MEMORY",
                                    "STATE", "ENDPOINT", "CREATED (UTC)"};
    struct ctl_table *t = ctl_table_new(10, h);
    size_t i;
    json_t *s;
    json_array_foreach(sessions, i, s) {
        char pid[32], gpu[32], sms[32], mem[32], created[32];
        ctl_fmt_int(s, "pid", pid, sizeof pid);
        ctl_fmt_int(s, "gpu_index", gpu, sizeof gpu);
        ctl_fmt_int(s, "sm_count", sms, sizeof sms);
        ctl_fmt_size(s, "memory_quota", mem, sizeof mem);
        ctl_fmt_time(json_object_get(s, "created_at"), created, sizeof created);
        ctl_table_row(t, ctl_js(s, "id"), ctl_js(s, "vm_id"), pid, ctl_js(s, "node_id"), gpu, sms,
                      mem, ctl_js(s, "state"), ctl_js(s, "endpoint"), created);
    }
    ctl_table_print(t, out);
}
