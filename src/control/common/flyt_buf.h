/* A growable text buffer (for /metrics and other generated text). */
#ifndef FLYT_BUF_H
#define FLYT_BUF_H

#include <stddef.h>

struct flyt_buf {
    char *data;   /* NUL-terminated once anything was appended; NULL before */
    size_t len;
    size_t cap;
    int failed;   /* an allocation failed; the content is truncated */
};

void flyt_buf_printf(struct flyt_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void flyt_buf_append(struct flyt_buf *b, const char *s, size_t len);
/* Gives the text to the caller (free() it; never NULL unless allocation failed) and
 * empties the buffer. */
char *flyt_buf_take(struct flyt_buf *b);
void flyt_buf_free(struct flyt_buf *b);

#endif
