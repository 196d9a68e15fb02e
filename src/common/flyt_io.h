/*
 * Whole-buffer reads and writes on any descriptor (files, pipes), retrying
 * on EINTR and short transfers. Sockets use src/transport's, which also
 * keep a closed peer from raising SIGPIPE.
 */
#ifndef FLYT_IO_H
#define FLYT_IO_H

#include <stddef.h>

/* 0 when every byte moved, -1 on error or end of file (errno 0 at the end). */
int flyt_read_all(int fd, void *buf, size_t len);
int flyt_write_all(int fd, const void *buf, size_t len);

#endif
