/* Leveled logging to stderr (or the descriptor set with flyt_log_set_fd),
 * with the program name and pid on every line. */
#ifndef FLYT_LOG_H
#define FLYT_LOG_H

#include <stddef.h>

enum flyt_log_level { FLYT_LOG_ERROR = 0, FLYT_LOG_WARN, FLYT_LOG_INFO, FLYT_LOG_DEBUG };

void flyt_log_init(const char *program, enum flyt_log_level level);
/* Log to fd instead of stderr: a session process whose fd 2 carries the
 * driver's output to the client keeps its log on the original stderr. */
void flyt_log_set_fd(int fd);
int flyt_log_fd(void);
/* Parses "error", "warn", "info", "debug"; -1 when unknown. */
int flyt_log_level_parse(const char *name);
enum flyt_log_level flyt_log_get_level(void);
/* in with control characters written as \n, \r, \t or \xHH, cut to fit
 * cap (with its NUL); the length written. flyt_log applies it to every
 * message, so a peer's text in one cannot forge a line of its own. */
size_t flyt_log_escape(char *out, size_t cap, const char *in);
void flyt_log(enum flyt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define flyt_error(...) flyt_log(FLYT_LOG_ERROR, __VA_ARGS__)
#define flyt_warn(...)  flyt_log(FLYT_LOG_WARN, __VA_ARGS__)
#define flyt_info(...)  flyt_log(FLYT_LOG_INFO, __VA_ARGS__)
#define flyt_debug(...) do { if (flyt_log_get_level() >= FLYT_LOG_DEBUG) flyt_log(FLYT_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
