/*
 * A TCP client whose machine vanishes (issue 10): no FIN, no reset, nothing
 * more ever comes from it. The server runs in one network namespace, each
 * client in another, joined by a veth pair; "vanishing" is the client's side
 * of the pair set down, so its kernel can neither answer nor close. With
 * --keepalive 1,1,2 the server must end such a session within a few seconds,
 * whether its thread is blocked in a driver call (the fake device's
 * synchronise never returns: FLYT_HOST_BACKEND_SYNC_MS=forever) or waits for
 * the next request, and free it (status page). A client that is merely idle,
 * or whose call is blocked, while its machine lives, keeps its session. And
 * the client library's own keepalive (FLYT_KEEPALIVE): a program whose
 * server's machine vanishes sees its waiting call fail (vanish_client.c).
 * Needs root (ip netns); skips (77) without.
 *
 * usage: test_server_vanish PATH-TO-flyt-server
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flyt_transport.h"
#include "harness.h"

#define SERVER_IP  "10.78.0.1"
#define CLIENT_IP  "10.78.0.2"
#define SERVER_TCP "tcp://" SERVER_IP ":7777"
#define KEEPALIVE  "1,1,2" /* a silent peer is gone 1 + 1 * 2 = 3 s after its last word */
#define GONE_WITHIN 10.0    /* seconds: 3 s, and slack for a loaded machine */

static char ns_server[64], ns_client[64], status_file[256];

/* Runs a shell command line; its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void remove_namespaces(void)
{
    if (ns_server[0])
        sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", ns_server, ns_client);
}

/* Namespaces of an earlier run that was killed (its pid is gone). */
static void remove_stale_namespaces(void)
{
    sh("for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^fvan[0-9]+-[sc]$'); "
       "do p=${ns#fvan}; p=${p%%-*}; kill -0 $p 2>/dev/null || ip netns del $ns; done");
}

/* A child process of this test: it dies with the test (a failed check
 * leaves no client waiting for ever), without the test's watchdog. */
static void become_child(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    th_watchdog(0);
}

static int enter_namespace(const char *ns)
{
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 ? setns(fd, CLONE_NEWNET) : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Two namespaces joined by a veth pair; this process moves into the
 * server's (the server started later runs there). Exits 77 when it cannot. */
static void make_network(void)
{
    if (geteuid() != 0 || sh("command -v ip > /dev/null") != 0) {
        printf("SKIP: needs root and the ip command (network namespaces); CI runs as root\n");
        exit(77);
    }
    remove_stale_namespaces();
    snprintf(ns_server, sizeof ns_server, "fvan%d-s", (int)getpid());
    snprintf(ns_client, sizeof ns_client, "fvan%d-c", (int)getpid());
    if (sh("ip netns add %s 2>/dev/null", ns_server) != 0) {
        printf("SKIP: cannot make a network namespace (ip netns add)\n");
        ns_server[0] = '\0';
        exit(77);
    }
    atexit(remove_namespaces); /* before the server's start: runs after its stop */
    CHECK_EQ(sh("ip netns add %s && ip link add v0 netns %s type veth peer name v1 netns %s && "
                "ip -n %s addr add " SERVER_IP "/24 dev v0 && ip -n %s link set v0 up && "
                "ip -n %s link set lo up && ip -n %s addr add " CLIENT_IP "/24 dev v1 && "
                "ip -n %s link set v1 up && ip -n %s link set lo up",
                ns_client, ns_server, ns_client, ns_server, ns_server, ns_server, ns_client,
                ns_client, ns_client),
             0, "namespaces %s and %s joined by a veth pair", ns_server, ns_client);
    CHECK_EQ(enter_namespace(ns_server), 0, "this test runs in %s", ns_server);
}

/* A machine vanishes from the network (its end of the pair set down: no
 * packet in or out), or comes back. */
static void set_link(const char *ns, const char *dev, const char *updown)
{
    CHECK_EQ(sh("ip -n %s link set %s %s", ns, dev, updown), 0, "the link of %s %s", ns, updown);
}

static void client_link(const char *updown) { set_link(ns_client, "v1", updown); }

enum client_kind {
    IDLE,          /* HELLO and an allocation, then nothing */
    BLOCKED,       /* then DEVICE_SYNC, which the fake device never finishes */
    IDLE_THEN_CALL /* idle 5 s (past the keepalive's time), then PING; then as BLOCKED */
};

/* A client process in the client's namespace: it writes one byte on ready
 * once in the state kind names, then waits to be killed; exits 1 on any
 * failure (its parent sees no byte). */
static pid_t start_client(enum client_kind kind, int ready)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    become_child();
    if (enter_namespace(ns_client) != 0)
        _exit(1);
    flyt_addr addr;
    char err[256];
    uint64_t ptr;
    static const flyt_req_none none;
    if (flyt_addr_parse(SERVER_TCP, &addr, err, sizeof err) != 0)
        _exit(1);
    int fd = flyt_connect_timeout(&addr, 5000, err, sizeof err);
    if (fd < 0 || th_hello(fd) != 0 || th_alloc(fd, 1 << 20, &ptr) != 0)
        _exit(1);
    if (kind == IDLE_THEN_CALL) {
        sleep(5);
        if (th_call(fd, FLYT_OP_PING, &none, sizeof none, NULL, 0, NULL) != T_SUCCESS)
            _exit(1);
    }
    if (kind != IDLE && th_send(fd, FLYT_OP_DEVICE_SYNC, 0, th_next_seq(), &none, sizeof none,
                                NULL, 0) != 0)
        _exit(1);
    if (write(ready, "S", 1) != 1)
        _exit(1);
    for (;;)
        pause();
}

static pid_t client_ready(enum client_kind kind, const char *what)
{
    int ready[2];
    CHECK_EQ(pipe(ready), 0, "a pipe");
    pid_t client = start_client(kind, ready[1]);
    CHECK_GE(client, 0, "fork a client");
    close(ready[1]);
    char byte = 0;
    CHECK_EQ(read(ready[0], &byte, 1), 1, "the client, over TCP from %s: %s", ns_client, what);
    close(ready[0]);
    return client;
}

static void end_client(pid_t client)
{
    kill(client, SIGKILL);
    waitpid(client, NULL, 0);
}

/* The status page shows n sessions holding n MiB in all. */
static int status_shows(uint32_t n)
{
    uint32_t sessions = ~0u;
    uint64_t used = ~0ull;
    for (int i = 0; i < 100; i++) { /* the parent reaps, then frees the slots */
        th_status_page(status_file, &sessions, &used);
        if (sessions == n && used == (uint64_t)n << 20)
            return 1;
        usleep(20 * 1000);
    }
    printf("        (status page: %u sessions, %llu bytes)\n", sessions, (unsigned long long)used);
    return 0;
}

/* The client's link goes down with its session in the state kind names:
 * the session must end, as one whose client stopped answering, and be freed. */
static void vanished_client_is_dropped(enum client_kind kind, const char *what)
{
    th_say("a client whose machine vanishes %s: its session ends", what);
    int said = th_server_log_count("stopped answering");
    pid_t client = client_ready(kind, what);
    if (kind == BLOCKED)
        sleep(2); /* blocked past the watch's threshold (1 s) */
    CHECK(status_shows(1), "status page: 1 session holding 1 MiB");
    client_link("down");
    double took = th_wait_no_session(GONE_WITHIN);
    CHECK(took >= 0, "the session ended %.2f s after the client's machine vanished (keepalive "
          KEEPALIVE ": 3 s)", took);
    CHECK_EQ(th_server_log_count("stopped answering"), said + 1,
             "the server says its client stopped answering");
    if (kind == IDLE)
        CHECK(th_server_log_has("no answer to TCP keepalive); ending its session"),
              "as its read of the next request failed");
    if (kind == BLOCKED)
        CHECK(th_server_log_has("no answer to TCP keepalive) while its session waited"),
              "while it waited in a call (the watcher saw it)");
    if (kind == BLOCKED)
        CHECK_EQ(th_server_log_count("in DEVICE_SYNC;"), 2, "in DEVICE_SYNC");
    CHECK(th_server_log_count(" ended with exit status") + th_server_log_count(" killed by signal") == 0,
          "the session ended as one whose client left (exit status 0)");
    CHECK(status_shows(0), "status page: no session, no memory");
    end_client(client);
    client_link("up");
}

/* A client idle past the keepalive's time, then blocked in a call as long,
 * with its machine alive: nothing is ended; killed, it hangs up as usual. */
static void live_client_keeps_its_session(void)
{
    th_say("a client idle for 5 s, then blocked in a call for 5 s, keeps its session");
    pid_t client = client_ready(IDLE_THEN_CALL, "idle 5 s, then PING answered, then DEVICE_SYNC");
    sleep(5);
    CHECK_EQ(th_sessions_live(), 1, "the session still waits in DEVICE_SYNC 5 s later");
    CHECK(!th_server_log_has("stopped answering") && !th_server_log_has("hung up while"),
          "no hang-up seen");
    end_client(client);
    CHECK(th_wait_no_session(GONE_WITHIN) >= 0, "killed, its client hangs up and the session ends");
    CHECK(th_server_log_has("hung up while its session waited"), "as a hang-up");
    CHECK(status_shows(0), "status page: no session, no memory");
}

/* Waits up to seconds for pid to exit; the seconds it took (its exit status
 * in *status), or -1 after killing it. */
static double wait_exit(pid_t pid, double seconds, int *status)
{
    double t0 = th_now_s();
    while (th_now_s() - t0 < seconds) {
        if (waitpid(pid, status, WNOHANG) == pid)
            return th_now_s() - t0;
        usleep(20 * 1000);
    }
    end_client(pid);
    return -1;
}

/* The client library's side (FLYT_KEEPALIVE): the server's machine vanishes
 * while a program's call waits for its reply; the call fails as for a lost
 * server, within the keepalive's time. */
static void vanished_server_fails_its_client(void)
{
    const char *prog = getenv("FLYT_TEST_VANISH_CLIENT");
    if (prog == NULL || *prog == '\0') {
        printf("  (FLYT_TEST_VANISH_CLIENT unset: the client library's side is not tested)\n");
        return;
    }
    th_say("the server's machine vanishes while a program's call waits for its reply");
    int out[2];
    CHECK_EQ(pipe(out), 0, "a pipe");
    pid_t pid = fork();
    if (pid == 0) {
        become_child();
        dup2(out[1], STDOUT_FILENO);
        if (enter_namespace(ns_client) != 0)
            _exit(1);
        setenv("FLYT_SERVER", SERVER_TCP, 1);
        setenv("FLYT_KEEPALIVE", KEEPALIVE, 1);
        execl(prog, prog, (char *)NULL);
        _exit(127);
    }
    CHECK_GE(pid, 0, "fork the program");
    close(out[1]);
    FILE *from = fdopen(out[0], "r");
    char line[512] = "";
    while (fgets(line, sizeof line, from) && strcmp(line, "ready\n") != 0)
        printf("    %s", line); /* its own checks */
    CHECK_STR_EQ(line, "ready\n", "the program (FLYT_KEEPALIVE=" KEEPALIVE ") has a context "
                 "and memory, and synchronises");
    sleep(1); /* its cuCtxSynchronize waits on the fake device */
    set_link(ns_server, "v0", "down");
    int status = -1;
    double took = wait_exit(pid, GONE_WITHIN, &status);
    while (fgets(line, sizeof line, from))
        printf("    %s", line);
    fclose(from);
    CHECK(took >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "its call failed as for a lost server, and it ended %.2f s after the server's machine "
          "vanished (status %d)", took, status);
    set_link(ns_server, "v0", "up");
}

int main(int argc, char **argv)
{
    const char *bin = th_server_bin(argc, argv);
    make_network();
    th_watchdog(100);
    th_prepare_dir();
    snprintf(status_file, sizeof status_file, "%s/server.status", th_temp_dir());
    const char *const args[] = {"--listen", SERVER_TCP, "--keepalive", KEEPALIVE,
                                "--status-file", status_file, NULL};
    th_server_start_args(bin, "FLYT_HOST_BACKEND_SYNC_MS=forever", args);
    live_client_keeps_its_session();
    vanished_client_is_dropped(IDLE, "while its session waits for the next request");
    vanished_client_is_dropped(BLOCKED, "while its session is blocked in a driver call");
    vanished_server_fails_its_client();
    CHECK(th_server_log_clean(), "no session died of a signal, no sanitizer report (server log)");
    th_server_stop();
    unlink(status_file);
    th_passed();
    printf("all vanished-client checks passed\n");
    return 0;
}
