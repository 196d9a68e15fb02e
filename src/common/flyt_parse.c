/* The value parsers every process shares (sizes, durations, integers,
 * booleans), and the reason writer they use. */
#include "flyt_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void flyt_set_reason(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int flyt_parse_int(const char *s, long long *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (!*s || isspace((unsigned char)*s)) {
        flyt_set_reason(err, errlen, "expected an integer, got \"%s\"", s);
        return -1;
    }
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE) {
        flyt_set_reason(err, errlen, "integer \"%s\" out of range", s);
        return -1;
    }
    if (*end) {
        flyt_set_reason(err, errlen, "expected an integer, got \"%s\"", s);
        return -1;
    }
    *out = v;
    return 0;
}

int flyt_parse_compute_capability(const char *s, int *out, char *err, size_t errlen)
{
    size_t major_len = strspn(s, "0123456789");
    int ok = (major_len == 1 || major_len == 2) && s[major_len] == '.' &&
             isdigit((unsigned char)s[major_len + 1]) && s[major_len + 2] == '\0' &&
             atoi(s) >= 1;
    if (!ok) {
        flyt_set_reason(err, errlen, "expected a compute capability MAJOR.MINOR such as 9.0, "
                        "got \"%s\"", s);
        return -1;
    }
    *out = atoi(s) * 10 + (s[major_len + 1] - '0');
    return 0;
}

int flyt_parse_bool(const char *s, bool *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) { *out = true; return 0; }
        if (strcasecmp(s, no[i]) == 0) { *out = false; return 0; }
    }
    flyt_set_reason(err, errlen, "expected a boolean (true/false, yes/no, on/off, 1/0), got \"%s\"", s);
    return -1;
}

/* An unsigned number followed by optional blanks and a unit from the table. */
struct unit { const char *name; uint64_t mult; };

static int parse_with_units(const char *s, const struct unit *units, uint64_t bare_mult,
                            const char *what, const char *unit_list, uint64_t *out,
                            char *err, size_t errlen)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p)) {
        flyt_set_reason(err, errlen, "expected a %s (a number with a unit: %s), got \"%s\"", what,
               unit_list, s);
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(p, &end, 10);
    if (errno == ERANGE) {
        flyt_set_reason(err, errlen, "%s \"%s\" out of range", what, s);
        return -1;
    }
    while (*end == ' ' || *end == '\t')
        end++;
    uint64_t mult = bare_mult;
    if (*end) {
        mult = 0;
        for (const struct unit *u = units; u->name; u++)
            if (strcmp(end, u->name) == 0) {
                mult = u->mult;
                break;
            }
        if (mult == 0) {
            flyt_set_reason(err, errlen, "unknown unit \"%s\" in %s \"%s\" (use %s)", end, what, s,
                   unit_list);
            return -1;
        }
    }
    if (mult && n > UINT64_MAX / mult) {
        flyt_set_reason(err, errlen, "%s \"%s\" out of range", what, s);
        return -1;
    }
    *out = n * mult;
    return 0;
}

int flyt_parse_size(const char *s, uint64_t *out, char *err, size_t errlen)
{
    static const struct unit units[] = {
        {"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
        {"TiB", 1ull << 40}, {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull},
        {"TB", 1000000000000ull}, {NULL, 0}};
    return parse_with_units(s, units, 1, "size", "B, KiB, MiB, GiB, TiB, KB, MB, GB, TB",
                            out, err, errlen);
}

int flyt_parse_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen)
{
    static const struct unit units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {NULL, 0}};
    return parse_with_units(s, units, 1000, "duration", "ms, s, m, h", out, err, errlen);
}

