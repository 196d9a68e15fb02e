/*
 * Stand-ins for the client library's peers, for tests that need a behaviour
 * the real ones do not show on demand.
 *
 *   fake_peers client-manager SOCKET MODE [ENDPOINT [TOKEN]]
 *     A flyt-client-manager speaking docs/api.md's line protocol. MODE:
 *     ok (answers ENDPOINT and TOKEN), error (answers an error), hang (reads
 *     the request, never answers), close (closes without answering), garbage
 *     (answers a line without status). Each request is printed on stdout as
 *     "request <line> peer_pid=<pid>".
 *   fake_peers auth-server unix:PATH MODE TOKEN
 *     A flyt-server that answers HELLO asking for a session token (MODE
 *     require), or never answers HELLO (MODE mute). With require, it accepts
 *     AUTH only with TOKEN, then answers DEVICE_SNAPSHOT (device name "fake-auth")
 *     and refuses everything else with CUDA_ERROR_NOT_SUPPORTED. A wrong token
 *     gets an error reply and the connection closed. Prints "auth ok" or
 *     "auth refused" per session on stdout.
 * Both serve until killed, one connection at a time.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cuda.h>

#include "flyt_proto.h"
#include "flyt_transport.h"

static int listen_unix(const char *path)
{
    flyt_addr a;
    char err[256], text[200];
    snprintf(text, sizeof text, "unix:%s", path);
    int fd = flyt_addr_parse(text, &a, err, sizeof err) == 0 ? flyt_listen(&a, err, sizeof err) : -1;
    if (fd < 0) {
        fprintf(stderr, "fake_peers: %s\n", err);
        exit(2);
    }
    return fd;
}

static int client_manager(const char *path, const char *mode, const char *endpoint,
                          const char *token)
{
    int lfd = listen_unix(path);
    for (;;) {
        int fd = flyt_accept(lfd);
        if (fd < 0)
            continue;
        char line[4096];
        size_t got = 0;
        while (got < sizeof line - 1) {
            ssize_t n = recv(fd, line + got, sizeof line - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
            if (memchr(line, '\n', got))
                break;
        }
        line[got] = '\0';
        line[strcspn(line, "\n")] = '\0';
        struct ucred cred;
        socklen_t cl = sizeof cred;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl);
        printf("request %s peer_pid=%d\n", line, (int)cred.pid);
        fflush(stdout);
        char out[4096];
        int n = 0;
        if (strcmp(mode, "ok") == 0)
            n = snprintf(out, sizeof out, "status=ok session=fake-1 endpoint=%s token=%s\n",
                         endpoint, token ? token : "");
        else if (strcmp(mode, "error") == 0)
            n = snprintf(out, sizeof out, "status=error message=no_capacity: needs 64 SMs; "
                                          "best GPU has 8 free\n");
        else if (strcmp(mode, "garbage") == 0)
            n = snprintf(out, sizeof out, "hello there\n");
        else if (strcmp(mode, "hang") == 0) {
            pause();
        }
        if (n > 0)
            (void)!write(fd, out, (size_t)n);
        close(fd);
    }
    return 0;
}

static int reply(int fd, const struct flyt_frame_hdr *req, int32_t result, const void *rep,
                 size_t rep_size)
{
    struct flyt_reply r = {.result = result};
    struct flyt_frame_hdr h = {.length = (uint32_t)(sizeof r + rep_size), .op = req->op,
                               .flags = FLYT_F_REPLY, .seq = req->seq};
    struct iovec iov[3] = {{&h, sizeof h}, {&r, sizeof r}, {(void *)rep, rep_size}};
    return flyt_writev_full(fd, iov, rep_size ? 3 : 2);
}

static void auth_session(int fd, const char *token)
{
    struct flyt_frame_hdr h;
    flyt_req_hello hello;
    if (flyt_read_full(fd, &h, sizeof h) != 0 || h.op != FLYT_OP_HELLO ||
        h.length != sizeof hello || flyt_read_full(fd, &hello, sizeof hello) != 0)
        return;
    flyt_rep_hello rh = {.major = FLYT_PROTO_MAJOR, .minor = FLYT_PROTO_MINOR,
                         .server_pid = (uint32_t)getpid(), .device_count = 1,
                         .flags = FLYT_HELLO_AUTH_REQUIRED};
    snprintf(rh.backend, sizeof rh.backend, "fake");
    if (reply(fd, &h, 0, &rh, sizeof rh) != 0)
        return;
    flyt_req_auth a;
    char got[FLYT_MAX_TOKEN + 1];
    if (flyt_read_full(fd, &h, sizeof h) != 0)
        return;
    if (h.op != FLYT_OP_AUTH || h.length < sizeof a || h.length - sizeof a > FLYT_MAX_TOKEN ||
        flyt_read_full(fd, &a, sizeof a) != 0 || a.token_len != h.length - sizeof a ||
        flyt_read_full(fd, got, a.token_len) != 0) {
        printf("auth refused (op %u before AUTH)\n", h.op);
        fflush(stdout);
        return;
    }
    got[a.token_len] = '\0';
    if (strcmp(got, token) != 0) {
        printf("auth refused (token %s)\n", got);
        fflush(stdout);
        reply(fd, &h, 1 /* CUDA_ERROR_INVALID_VALUE */, NULL, 0);
        return;
    }
    printf("auth ok\n");
    fflush(stdout);
    flyt_rep_none none = {0};
    if (reply(fd, &h, 0, &none, sizeof none) != 0)
        return;
    for (;;) {
        if (flyt_read_full(fd, &h, sizeof h) != 0 || h.length > (1u << 20) ||
            flyt_skip(fd, h.length) != 0)
            return;
        if (h.flags & FLYT_F_NOREPLY)
            continue;
        if (h.op == FLYT_OP_DEVICE_SNAPSHOT) {
            /* just enough of a device for NVIDIA's runtime to start on it */
            flyt_rep_device_snapshot p;
            memset(&p, 0, sizeof p);
            snprintf(p.name, sizeof p.name, "fake-auth");
            p.total_mem = 1u << 30;
            p.attr_count = 140;
            p.attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9;
            p.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 8;
            p.attrs[CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32;
            p.attrs[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
            p.attrs[CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1;
            if (reply(fd, &h, 0, &p, sizeof p) != 0)
                return;
        } else if (reply(fd, &h, 801 /* CUDA_ERROR_NOT_SUPPORTED */, NULL, 0) != 0) {
            return;
        }
    }
}

static int auth_server(const char *where, const char *mode, const char *token)
{
    if (strncmp(where, "unix:", 5) != 0)
        return 2;
    int lfd = listen_unix(where + 5);
    for (;;) {
        int fd = flyt_accept(lfd);
        if (fd < 0)
            continue;
        if (strcmp(mode, "mute") == 0) {
            pause();
        }
        auth_session(fd, token);
        close(fd);
    }
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "client-manager") == 0)
        return client_manager(argv[2], argv[3], argc > 4 ? argv[4] : "", argc > 5 ? argv[5] : NULL);
    if (argc == 5 && strcmp(argv[1], "auth-server") == 0)
        return auth_server(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: fake_peers client-manager SOCKET MODE [ENDPOINT [TOKEN]]\n"
                    "       fake_peers auth-server unix:PATH require|mute TOKEN\n");
    return 2;
}
