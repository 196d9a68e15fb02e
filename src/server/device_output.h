/*
 * What the driver prints in a session (device printf, device-side assert
 * messages) reaches the application: the session process's fd 1 and fd 2
 * become memory files, and what was appended to them is sent to the client
 * before the next reply or callback frame (docs/device-output.md).
 */
#ifndef FLYT_DEVICE_OUTPUT_H
#define FLYT_DEVICE_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

struct flyt_output {
    int      captured;  /* fd 1 and fd 2 are ours; the fields below are valid */
    int      file[2];   /* the memory files behind fd 1 and fd 2 */
    uint64_t taken[2];  /* bytes of each already handed out */
};

/* Replaces fd 1 and fd 2 of this process by memory files; the log keeps the
 * original stderr. 0, or -1 with errno (nothing changed then). */
int flyt_output_capture(struct flyt_output *o);

/* Pushes what stdio still buffers to the files. 1 when captured, else 0. */
int flyt_output_flush(struct flyt_output *o);

/* The next bytes appended to fd 1 (stream 0) or fd 2 (stream 1), at most
 * cap; 0 once all was taken, and the file is then emptied so that it does
 * not grow. Called by one thread at a time (the sender role). */
size_t flyt_output_take(struct flyt_output *o, int stream, void *buf, size_t cap);

/* At the session's end: what the driver printed after the client's last
 * reply (at context teardown, or with the client gone) goes to the log. */
void flyt_output_to_log(struct flyt_output *o);

#endif
