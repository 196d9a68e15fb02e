#include "flyt_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(struct flyt_buf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

void flyt_buf_append(struct flyt_buf *b, const char *s, size_t len)
{
    if (reserve(b, len) < 0)
        return;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = 0;
}

void flyt_buf_printf(struct flyt_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *flyt_buf_take(struct flyt_buf *b)
{
    char *d = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
    return d;
}

void flyt_buf_free(struct flyt_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
