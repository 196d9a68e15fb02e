/* Daemon configuration files: `key = value` lines, `[section]` headers, `#` comments.
 *
 * File format:
 *   # a comment (a line whose first non-blank character is '#' or ';')
 *   listen = 0.0.0.0:8600          # in unquoted values, " #" starts a comment
 *   [store]
 *   url = "sqlite:/var/lib/flyt/cluster.db"   # quotes keep spaces and '#'
 * Keys under a [section] are named "section.key"; keys before the first section are
 * plain "key". A daemon declares every key it accepts (name, type, default, help); a
 * file with an unknown key, a bad value, a key given twice, or a malformed line is
 * refused with "FILE:LINE: reason".
 *
 * Types and their values:
 *   string    any text (quoted or not)
 *   int       decimal integer, optional sign
 *   bool      true/false, yes/no, on/off, 1/0
 *   size      bytes: an integer with an optional unit B, KiB, MiB, GiB, TiB (powers of 1024)
 *             or KB, MB, GB, TB (powers of 1000); a bare number is bytes. "20GiB", "512 MiB"
 *   duration  an integer with a unit ms, s, m, h; a bare number is seconds. "30s", "500ms"
 */
#ifndef FLYT_CONFIG_H
#define FLYT_CONFIG_H

#include "flyt_parse.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum flyt_cfg_type { FLYT_CFG_STRING, FLYT_CFG_INT, FLYT_CFG_BOOL, FLYT_CFG_SIZE, FLYT_CFG_DURATION };

struct flyt_cfg_key {
    const char *name;        /* "key" or "section.key" */
    enum flyt_cfg_type type;
    const char *def;         /* default, written as in a file; NULL: no default */
    const char *help;        /* one line */
    bool required;           /* the file must set it */
    long long min, max;      /* int/size(bytes)/duration(ms) bounds, used when max > min */
};
/* A key table ends with an entry whose name is NULL. */

struct flyt_config;

/* A config with every key at its default. The key table must outlive the config.
 * NULL when a default does not parse (a programming error, logged). */
struct flyt_config *flyt_config_new(const struct flyt_cfg_key *keys);
void flyt_config_free(struct flyt_config *cfg);

/* Parses a file / a text (name is used in messages) over the defaults. 0 on success;
 * -1 with err = "FILE:LINE: reason" (or "FILE: reason" when it cannot be read). */
int flyt_config_load(struct flyt_config *cfg, const char *path, char *err, size_t errlen);
int flyt_config_parse(struct flyt_config *cfg, const char *name, const char *text,
                      char *err, size_t errlen);

/* Typed getters by full name. Asking for an undeclared key or the wrong type aborts
 * (a programming error). A string key without value gives NULL. */
const char *flyt_config_str(const struct flyt_config *cfg, const char *name);
long long flyt_config_int(const struct flyt_config *cfg, const char *name);
bool flyt_config_bool(const struct flyt_config *cfg, const char *name);
uint64_t flyt_config_size(const struct flyt_config *cfg, const char *name);      /* bytes */
uint64_t flyt_config_duration_ms(const struct flyt_config *cfg, const char *name);
/* Whether the file set the key (rather than its default). */
bool flyt_config_is_set(const struct flyt_config *cfg, const char *name);
/* The line that set the key, 0 when it has its default: for the daemon's own checks,
 * e.g. "%s:%d: placement_policy: must be spread or pack". */
int flyt_config_line(const struct flyt_config *cfg, const char *name);

/* A string key naming a file, relative paths taken relative to the directory of the config
 * file cfgpath: 1 with the path in out, 0 when the key has no value (out ""), -1 with
 * "FILE:LINE: key: path too long" in err. */
int flyt_config_path(const struct flyt_config *cfg, const char *cfgpath, const char *name,
                     char *out, size_t outlen, char *err, size_t errlen);

/* Writes every key with its type, default and help (for --help). */
void flyt_config_print_help(const struct flyt_cfg_key *keys, FILE *out);

/* The value parsers themselves are flyt_parse.h's (src/common). */

#endif
