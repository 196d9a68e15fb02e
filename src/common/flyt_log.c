#include "flyt_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_program = "flyt";
static enum flyt_log_level log_level = FLYT_LOG_INFO;
static const char *const level_names[] = {"error", "warn", "info", "debug"};
static int log_fd = STDERR_FILENO;

void flyt_log_init(const char *program, enum flyt_log_level level)
{
    log_program = program;
    log_level = level;
}

void flyt_log_set_fd(int fd) { log_fd = fd; }

int flyt_log_fd(void) { return log_fd; }

int flyt_log_level_parse(const char *name)
{
    for (int i = 0; i <= FLYT_LOG_DEBUG; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

enum flyt_log_level flyt_log_get_level(void) { return log_level; }

size_t flyt_log_escape(char *out, size_t cap, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (cap == 0)
        return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char esc[4] = {0};
        size_t n = 1;
        if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[0] = '\\';
            esc[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
            n = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[*p >> 4];
            esc[3] = hex[*p & 15];
            n = 4;
        } else {
            esc[0] = (char)*p;
        }
        if (o + n >= cap)
            break;
        memcpy(out + o, esc, n);
        o += n;
    }
    out[o] = '\0';
    return o;
}

void flyt_log(enum flyt_log_level level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char line[1024], msg[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_program, (int)getpid(),
                     level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* messages carry peers' text (names, paths, kernel output): a control
     * character in it must not start a forged line of its own */
    if (n > 0 && (size_t)n < sizeof line)
        flyt_log_escape(line + n, sizeof line - (size_t)n, msg);
    /* one write per line so lines of concurrent processes do not interleave */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    if (write(log_fd, line, len) < 0) {
        /* nowhere left to report it */
    }
}
