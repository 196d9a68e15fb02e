/*
 * Session-token admission of flyt-server (--session-id, --session-key-file;
 * docs/api.md "Session tokens"), over raw frames with the host backend:
 * the key file must not be readable by others; HELLO asks for a token; no
 * token, a malformed, badly signed, expired or other session's token is
 * refused with an error reply, the session ends and the server logs why; a
 * good token opens the GPU. A standalone server asks for nothing. Idle
 * connections that never HELLO (issue 8) take no session slot, cannot lock the
 * tenant out, cost a bounded number of processes and end at the deadline.
 *
 * usage: test_server_admission PATH-TO-flyt-server
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flyt_server_status.h"
#include "flyt_token.h"
#include "harness.h"

#define T_NOT_PERMITTED 800
#define SID "s-admission-test"

static const flyt_req_none none;
static unsigned char key[32];
static char key_path[256], bad_key_path[256];

static int hello_flags(int fd, flyt_rep_hello *rep)
{
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = FLYT_PROTO_MINOR;
    h.client_pid = (uint32_t)getpid();
    snprintf(h.client_host, sizeof h.client_host, "test");
    return th_call_rep(fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, rep, sizeof *rep);
}

static int auth(int fd, const char *token)
{
    flyt_req_auth r = {(uint32_t)strlen(token), 0};
    return th_call(fd, FLYT_OP_AUTH, &r, sizeof r, token, strlen(token), NULL);
}

/* The server closed the connection (a read sees EOF). */
static int closed(int fd)
{
    struct th_reply r;
    int rc = th_read_frame(fd, &r);
    if (rc == 0)
        th_reply_free(&r);
    return rc == -1;
}

static void write_key(const char *path, mode_t mode)
{
    char hex[65];
    flyt_hex_encode(key, sizeof key, hex);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK_GE(fd, 0, "write %s", path);
    CHECK_EQ(write(fd, hex, 64), 64, "key written");
    CHECK_EQ(write(fd, "\n", 1), 1, "key written");
    close(fd);
    chmod(path, mode);
}

static void make_token(const unsigned char *k, const char *sid, long long expiry, char *out)
{
    CHECK_EQ(flyt_session_token_make(k, 32, sid, expiry, out, 256), 0, "token for %s made", sid);
}

/* The status page's field, read whole (src/common/flyt_server_status.h). */
static struct flyt_server_status read_status(const char *path)
{
    struct flyt_server_status st;
    memset(&st, 0, sizeof st);
    int fd = open(path, O_RDONLY);
    if (fd >= 0 && pread(fd, &st, sizeof st, 0) != (ssize_t)sizeof st)
        memset(&st, 0, sizeof st);
    if (fd >= 0)
        close(fd);
    return st;
}

/* Live children of pid (from /proc). */
static int children_of(pid_t pid)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        const char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        char state;
        int ppid;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)pid && state != 'Z')
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

#define IDLE_MANY 300

/* Opens n idle connections (no HELLO) into fds. */
static void open_idle(int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        fds[i] = th_connect();
        if (fds[i] < 0)
            CHECK(0, "idle connection %d refused", i);
    }
}

/* How many of the n connections the server has closed (a read sees EOF or a reset). */
static int count_closed(const int *fds, int n)
{
    int closed_n = 0;
    for (int i = 0; i < n; i++) {
        char ch;
        ssize_t r = recv(fds[i], &ch, 1, MSG_DONTWAIT);
        closed_n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return closed_n;
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Issue 8: idle unauthenticated connections take no session slot and cannot hold the
 * tenant out: with 70 of them open, an admitted session keeps working and the tenant's
 * next client is admitted. */
static void test_idle_cannot_lock_out(const char *bin)
{
    th_say("70 idle connections do not lock the tenant out");
    th_prepare_dir();
    snprintf(key_path, sizeof key_path, "%s/session.key", th_temp_dir());
    write_key(key_path, 0600);
    char status[300];
    snprintf(status, sizeof status, "%s/status", th_temp_dir());
    const char *args[] = {"--session-id", SID, "--session-key-file", key_path,
                          "--admission-timeout", "30", "--status-file", status, NULL};
    th_server_start_args(bin, NULL, args);
    char good[256];
    make_token(key, SID, (long long)time(NULL) + 3600, good);
    flyt_rep_hello hr;
    flyt_rep_i32 v;
    int first = th_connect();
    CHECK_GE(first, 0, "the tenant's first client is admitted");
    CHECK_EQ(hello_flags(first, &hr), 0, "the tenant's first client is admitted");
    CHECK_EQ(auth(first, good), 0, "the tenant's first client is admitted");
    static int idle[70];
    open_idle(idle, 70);
    struct timespec settle = {0, 300 * 1000 * 1000};
    nanosleep(&settle, NULL);
    struct flyt_server_status st = read_status(status);
    CHECK_EQ(st.sessions, 1, "the idle connections hold no session slot (sessions %u)", st.sessions);
    int second = th_connect();
    CHECK_GE(second, 0, "the tenant's next client is admitted");
    CHECK_EQ(hello_flags(second, &hr), 0, "the tenant's next client is admitted");
    CHECK_EQ(auth(second, good), 0, "the tenant's next client is admitted");
    CHECK_EQ(th_call_rep(second, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "and works");
    CHECK_EQ(th_call_rep(first, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "the first client's session was not reset");
    pid_t server = (pid_t)read_status(status).server_pid;
    int kids = children_of(server);
    CHECK_LE(kids, 2 + 32, "%d session processes (2 admitted, at most 32 not admitted)", kids);
    close(first);
    close(second);
    close_all(idle, 70);
    CHECK(th_server_alive(), "the server is alive and clean");
    CHECK(th_server_log_clean(), "the server is alive and clean");
    unlink(key_path);
    th_server_stop();
}

/* Issue 8: a standalone server and 300 idle connections: a bounded number of processes,
 * and every connection closed by the admission deadline. */
static void test_idle_flood_standalone(const char *bin)
{
    th_say("%d idle connections to a standalone server", IDLE_MANY);
    th_prepare_dir();
    char status[300];
    snprintf(status, sizeof status, "%s/status", th_temp_dir());
    const char *args[] = {"--admission-timeout", "2", "--status-file", status, NULL};
    th_server_start_args(bin, NULL, args);
    pid_t server = (pid_t)read_status(status).server_pid;
    static int idle[IDLE_MANY];
    open_idle(idle, IDLE_MANY);
    struct timespec settle = {0, 500 * 1000 * 1000};
    nanosleep(&settle, NULL);
    int kids = children_of(server);
    CHECK_LE(kids, 32 + 1,
             "%d session processes for %d idle connections from one user (at most 32 not admitted in all; the rest refused)", kids, IDLE_MANY);
    struct timespec deadline = {3, 0}; /* --admission-timeout 2, and a second of slack */
    nanosleep(&deadline, NULL);
    int closed_n = count_closed(idle, IDLE_MANY);
    CHECK_EQ(closed_n, IDLE_MANY, "all closed after the admission deadline (%d of %d)", closed_n, IDLE_MANY);
    close_all(idle, IDLE_MANY);
    CHECK(th_server_works(), "the server still works");
    CHECK(th_server_log_has("no valid HELLO in time"), "and said why it closed them");
    CHECK(th_server_alive(), "the server is alive and clean");
    CHECK(th_server_log_clean(), "the server is alive and clean");
    th_server_stop();
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flyt-server\n", argv[0]);
        return 2;
    }
    const char *bin = argv[1];
    th_watchdog(120);
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (unsigned char)(i * 37 + 11);

    th_prepare_dir();
    snprintf(key_path, sizeof key_path, "%s/session.key", th_temp_dir());
    snprintf(bad_key_path, sizeof bad_key_path, "%s/open.key", th_temp_dir());

    th_say("key file checks");
    char out[4096];
    write_key(bad_key_path, 0644);
    const char *open_args[] = {"--backend", "host", "--listen", "unix:/tmp/flyt-never.sock",
                               "--session-id", SID, "--session-key-file", bad_key_path, NULL};
    int rc = th_run_server(bin, open_args, out, sizeof out);
    CHECK(strstr(out, "open to other users"), "the refusal of a key file of mode 0644 says it is open to others");
    CHECK(strstr(out, "0644"), "the refusal names the mode 0644");
    CHECK_EQ(rc, 2, "a key file of mode 0644 is refused (%s)", strtok(out, "\n"));
    const char *half_args[] = {"--backend", "host", "--listen", "unix:/tmp/flyt-never.sock",
                               "--session-id", SID, NULL};
    rc = th_run_server(bin, half_args, out, sizeof out);
    CHECK_EQ(rc, 2, "--session-id without a key file is refused");
    CHECK(strstr(out, "go together"), "--session-id without a key file is refused");
    write_key(bad_key_path, 0600);
    int fd0 = open(bad_key_path, O_WRONLY | O_TRUNC);
    CHECK_GE(fd0, 0, "garbage key");
    CHECK_EQ(write(fd0, "not hex at all, not hex at all, not hex", 39), 39, "garbage key");
    close(fd0);
    const char *garbage_args[] = {"--backend", "host", "--listen", "unix:/tmp/flyt-never.sock",
                                  "--session-id", SID, "--session-key-file", bad_key_path, NULL};
    rc = th_run_server(bin, garbage_args, out, sizeof out);
    CHECK_EQ(rc, 2, "a key file that is not hex is refused");
    CHECK(strstr(out, "hex"), "a key file that is not hex is refused");
    unlink(bad_key_path);

    write_key(key_path, 0600);
    const char *args[] = {"--session-id", SID, "--session-key-file", key_path,
                          "--admission-timeout", "1", NULL};
    th_server_start_args(bin, NULL, args);

    th_say("HELLO asks for a token");
    int fd = th_connect();
    flyt_rep_hello hr;
    CHECK_GE(fd, 0, "HELLO answered");
    CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO answered");
    CHECK(hr.flags & FLYT_HELLO_AUTH_REQUIRED, "FLYT_HELLO_AUTH_REQUIRED set (flags 0x%x)", hr.flags);
    CHECK_EQ(hr.device_count, 1, "one device, backend %s", hr.backend);
    CHECK_STR_EQ(hr.backend, "host", "one device, backend %s", hr.backend);

    th_say("no token");
    flyt_rep_i32 v;
    rc = th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v);
    CHECK_EQ(rc, T_NOT_PERMITTED, "DEVICE_COUNT before AUTH: CUDA_ERROR_NOT_PERMITTED (%d)", rc);
    CHECK(closed(fd), "and the session ended");
    close(fd);
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO again");
    CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO again");
    uint64_t p;
    rc = th_alloc(fd, 4096, &p);
    CHECK_EQ(rc, T_NOT_PERMITTED, "MEM_ALLOC before AUTH refused, session ended");
    CHECK(closed(fd), "MEM_ALLOC before AUTH refused, session ended");
    close(fd);
    CHECK(th_server_log_has("admission refused"), "the server logged the refusal");

    struct {
        const char *what, *why;
        char token[256];
    } bad[5];
    unsigned char other[32];
    memcpy(other, key, sizeof other);
    other[0] ^= 1;
    long long now = (long long)time(NULL);
    bad[0].what = "a malformed token";
    bad[0].why = "malformed";
    snprintf(bad[0].token, sizeof bad[0].token, "abc");
    bad[1].what = "a token signed with another key";
    bad[1].why = "does not verify";
    make_token(other, SID, now + 3600, bad[1].token);
    bad[2].what = "an expired token";
    bad[2].why = "expired";
    make_token(key, SID, now - 5, bad[2].token);
    bad[3].what = "a token for another session";
    bad[3].why = "another session";
    make_token(key, "s-someone-else", now + 3600, bad[3].token);
    bad[4].what = "a token whose MAC was tampered with";
    bad[4].why = "does not verify";
    make_token(key, SID, now + 3600, bad[4].token);
    bad[4].token[10] = bad[4].token[10] == 'a' ? 'b' : 'a';
    for (int i = 0; i < 5; i++) {
        th_say("%s", bad[i].what);
        fd = th_connect();
        CHECK_GE(fd, 0, "HELLO");
        CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO");
        rc = auth(fd, bad[i].token);
        CHECK_EQ(rc, T_NOT_PERMITTED, "AUTH answered CUDA_ERROR_NOT_PERMITTED (%d)", rc);
        CHECK(closed(fd), "the session ended");
        close(fd);
        CHECK(th_server_log_has(bad[i].why), "logged: %s", bad[i].why);
    }

    th_say("a client that sends nothing is dropped after --admission-timeout");
    fd = th_connect();
    CHECK_GE(fd, 0, "connected, silent");
    time_t t0 = time(NULL);
    CHECK(closed(fd), "the server closed the connection");
    CHECK_LE(time(NULL) - t0, 5, "within the timeout (1 s)");
    close(fd);
    CHECK(th_server_log_has("no valid session token in time"), "and said why");

    th_say("GOODBYE without a token is just a goodbye");
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO");
    CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO");
    CHECK_EQ(th_call(fd, FLYT_OP_GOODBYE, &none, sizeof none, NULL, 0, NULL), 0, "GOODBYE answered");
    close(fd);

    th_say("a good token");
    char good[256];
    make_token(key, SID, now + 3600, good);
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO");
    CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO");
    CHECK_EQ(auth(fd, good), 0, "AUTH accepted");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "DEVICE_COUNT = 1");
    CHECK_EQ(v.value, 1, "DEVICE_COUNT = 1");
    CHECK_EQ(th_alloc(fd, 1 << 20, &p), 0, "MEM_ALLOC works");
    CHECK_NE(p, 0, "MEM_ALLOC works");
    static unsigned char buf[4096];
    memset(buf, 0x5a, sizeof buf);
    CHECK_EQ(th_htod(fd, p, buf, sizeof buf), 0, "MEMCPY_HTOD works");
    CHECK_EQ(th_free(fd, p), 0, "MEM_FREE works");
    CHECK_EQ(auth(fd, good), 0, "AUTH again on an admitted session: accepted");
    close(fd);
    CHECK(th_server_log_has("admitted"), "the server logged the admission");
    CHECK(th_server_alive(), "the server is alive and clean");
    CHECK(th_server_log_clean(), "the server is alive and clean");
    unlink(key_path);
    th_server_stop();

    th_say("standalone: no key, no token asked");
    th_server_start(bin, NULL);
    fd = th_connect();
    CHECK_GE(fd, 0, "HELLO flags 0");
    CHECK_EQ(hello_flags(fd, &hr), 0, "HELLO flags 0");
    CHECK_EQ(hr.flags, 0, "HELLO flags 0");
    CHECK_EQ(th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &none, sizeof none, NULL, 0, &v, sizeof v), 0,
             "DEVICE_COUNT without AUTH");
    CHECK_EQ(auth(fd, "anything"), 0, "an AUTH anyway is accepted");
    close(fd);
    CHECK(th_server_works(), "standalone server works");
    CHECK(th_server_log_clean(), "standalone server works");
    th_server_stop();

    test_idle_cannot_lock_out(bin);
    test_idle_flood_standalone(bin);

    th_passed();
    printf("all admission checks passed\n");
    return 0;
}
