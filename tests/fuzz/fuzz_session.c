/*
 * libFuzzer target: one flyt-server session on the host backend, fed the
 * input as the byte stream a client sends after a valid HELLO. Whatever the
 * bytes, the session must end (end of input, or a protocol violation) without
 * a memory error, a leak or a hang; its replies are read and dropped.
 *
 * The session runs in this process (no fork): peer copies are refused
 * (no_peer_memory), and the HELLO speaks protocol minor 0 so the session
 * keeps this process's stdout and stderr.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flyt_log.h"
#include "flyt_proto.h"
#include "flyt_transport.h"
#include "session.h"

struct feed {
    int fd;
    const uint8_t *data;
    size_t size;
};

/* Writes HELLO and the input, then reads replies until the session closes. */
static void *feed_session(void *arg)
{
    struct feed *f = arg;
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = 0;
    memcpy(h.client_host, "fuzz", 5);
    struct flyt_frame_hdr hdr = {(uint32_t)sizeof h, FLYT_OP_HELLO, 0, 1, 0};
    struct iovec iov[3] = {{&hdr, sizeof hdr}, {&h, sizeof h}, {(void *)f->data, f->size}};
    flyt_writev_full(f->fd, iov, 3); /* fails once the session ended early: fine */
    shutdown(f->fd, SHUT_WR);
    char sink[65536];
    while (read(f->fd, sink, sizeof sink) > 0)
        ;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet = -1;
    if (quiet < 0) { /* every input ends a session, often with an error line: noise */
        flyt_log_init("fuzz_session", FLYT_LOG_ERROR);
        signal(SIGPIPE, SIG_IGN); /* a session that ended early: its socket is closed */
        quiet = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (quiet >= 0)
            flyt_log_set_fd(quiet);
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    struct feed f = {sv[0], data, size};
    pthread_t feeder;
    if (pthread_create(&feeder, NULL, feed_session, &f) != 0)
        abort();
    static const struct flyt_server_config cfg = {
        .backend_kind = "host",
        .no_peer_memory = 1,
        .admitted_fd = -1, /* no listening parent to tell */
    };
    flyt_session_run(sv[1], "fuzz", &cfg); /* closes sv[1] */
    pthread_join(feeder, NULL);
    close(sv[0]);
    return 0;
}
