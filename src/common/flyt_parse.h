/* Parsing of the values configuration files and command lines take: every
 * process's (the server's options, the control plane's config files). */
#ifndef FLYT_PARSE_H
#define FLYT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 0 on success, -1 with a reason in err (err may be NULL). */
int flyt_parse_int(const char *s, long long *out, char *err, size_t errlen);
int flyt_parse_bool(const char *s, bool *out, char *err, size_t errlen);
/* B, KiB, MiB, GiB, TiB, KB, MB, GB, TB; a bare number is bytes. */
int flyt_parse_size(const char *s, uint64_t *out, char *err, size_t errlen);
/* ms, s, m, h; a bare number is seconds. */
int flyt_parse_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen);

/* A compute capability, MAJOR.MINOR ("9.0", "10.3"): *out = MAJOR * 10 + MINOR. */
int flyt_parse_compute_capability(const char *s, int *out, char *err, size_t errlen);

/* Writes a printf-style reason into err, when there is room for one. */
void flyt_set_reason(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
