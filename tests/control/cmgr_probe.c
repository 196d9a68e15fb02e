/*
 * Speaks flyt-client-manager's line protocol (docs/api.md) directly, as the client
 * library would, plus what the library never sends. Prints every answer line.
 * usage: cmgr_probe SOCKET acquire | twice | wrong-pid | release | garbage | hold SECONDS
 *   twice: two acquires on two connections (exit 0 when both name the same session)
 *   release: acquire, release, acquire (exit 0 when the second session differs)
 *   hold: acquire, print "held", sleep SECONDS
 *   idle N SECONDS: opens N connections that send nothing, prints "open N", sleeps
 *   line TEXT: sends TEXT ("%ld" in it: this process's pid) as one line (exit 0 when the
 *   answer is an error)
 */
#include "flyt_cmgr_proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *sock;

static int ask(const char *fmt, long pid, char *out, size_t cap)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror(sock);
        exit(2);
    }
    char req[256];
    int n = snprintf(req, sizeof req, fmt, pid);
    /* a refused connection is answered and closed before the request is read: the
     * answer is still there to read after EPIPE */
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n && errno != EPIPE && errno != ECONNRESET) {
        perror("write");
        exit(2);
    }
    size_t got = 0;
    while (got < cap - 1) {
        ssize_t r = read(fd, out + got, cap - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (memchr(out, '\n', got))
            break;
    }
    out[got] = '\0';
    out[strcspn(out, "\n")] = '\0';
    close(fd);
    printf("%s\n", out);
    fflush(stdout);
    return 0;
}

static void session_of(const char *line, char *id, size_t cap)
{
    if (!flyt_cmgr_field(line, "session", id, cap))
        id[0] = '\0';
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cmgr_probe SOCKET acquire|twice|wrong-pid|release|garbage|hold S\n");
        return 2;
    }
    sock = argv[1];
    const char *what = argv[2];
    long me = (long)getpid();
    char a[4096], b[4096], ia[128], ib[128];
    if (strcmp(what, "acquire") == 0) {
        ask("op=acquire pid=%ld\n", me, a, sizeof a);
        return strncmp(a, "status=ok ", 10) == 0 ? 0 : 1;
    }
    if (strcmp(what, "twice") == 0) {
        ask("op=acquire pid=%ld\n", me, a, sizeof a);
        ask("op=acquire pid=%ld\n", me, b, sizeof b);
        session_of(a, ia, sizeof ia);
        session_of(b, ib, sizeof ib);
        return ia[0] && strcmp(a, b) == 0 ? 0 : 1;
    }
    if (strcmp(what, "wrong-pid") == 0) {
        ask("op=acquire pid=%ld\n", (long)getppid(), a, sizeof a);
        return strncmp(a, "status=error ", 13) == 0 ? 0 : 1;
    }
    if (strcmp(what, "garbage") == 0) {
        ask("hello%ld\n", me, a, sizeof a);
        return strncmp(a, "status=error ", 13) == 0 ? 0 : 1;
    }
    if (strcmp(what, "release") == 0) {
        ask("op=acquire pid=%ld\n", me, a, sizeof a);
        ask("op=release pid=%ld\n", me, b, sizeof b);
        if (strcmp(b, "status=ok") != 0)
            return 1;
        ask("op=acquire pid=%ld\n", me, b, sizeof b);
        session_of(a, ia, sizeof ia);
        session_of(b, ib, sizeof ib);
        return ia[0] && ib[0] && strcmp(ia, ib) != 0 ? 0 : 1;
    }
    if (strcmp(what, "line") == 0 && argc == 4) {
        char fmt[1024];
        snprintf(fmt, sizeof fmt, "%s\n", argv[3]);
        ask(fmt, me, a, sizeof a);
        return strncmp(a, "status=error ", 13) == 0 ? 0 : 1;
    }
    if (strcmp(what, "idle") == 0 && argc == 5) {
        int n = atoi(argv[3]);
        for (int i = 0; i < n; i++) {
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un sa = {.sun_family = AF_UNIX};
            snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
            if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
                perror(sock);
                return 2;
            }
        }
        printf("open %d\n", n);
        fflush(stdout);
        sleep((unsigned)atoi(argv[4]));
        return 0;
    }
    if (strcmp(what, "hold") == 0 && argc == 4) {
        ask("op=acquire pid=%ld\n", me, a, sizeof a);
        if (strncmp(a, "status=ok ", 10) != 0)
            return 1;
        printf("held\n");
        fflush(stdout);
        sleep((unsigned)atoi(argv[3]));
        return 0;
    }
    fprintf(stderr, "cmgr_probe: unknown request %s\n", what);
    return 2;
}
