/* A flood of slow clients against flyt-cluster-manager (issue 8, item 2), with the
 * default API limits: connections from other loopback addresses trickle one header byte
 * at a time, more than the API's connection limit, and are reopened as soon as they
 * close, while a node heartbeats from 127.0.0.1 and one of its sessions is live.
 * The node must never be lost nor its session end; every slow connection must be cut by
 * the request deadline; one address gets no more than its per-peer share; and once the
 * flood is over a node that really goes silent is still found lost.
 * With "tls" the API is HTTPS (certificates from make_test_certs.sh) and the slow clients
 * trickle a TLS handshake instead: a ClientHello that never ends.
 *   test_api_flood PATH/flyt-cluster-manager [tls PATH/make_test_certs.sh] */
#include "clm_harness.h"

#include "check.h"
#include "flyt_log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOD_ADDRS 10       /* 127.0.0.2 .. 127.0.0.11 */
#define FLOOD_PER_ADDR 60    /* under the per-peer limit (64), 600 in all: over 512 */
#define FLOOD_SECONDS 25
#define DEADLINE_MS 10000    /* api_request_timeout's default */
#define SLACK_MS 3000

static struct clm_proc clm;
static struct fake_nm nm;

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connection from 127.0.0.host to the manager; -1 when connect fails. */
static int slow_connect(int host)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {0}, dst = {0};
    src.sin_family = dst.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    dst.sin_port = htons((unsigned short)clm.port);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0
        || connect(fd, (struct sockaddr *)&dst, sizeof dst) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One more byte of a request whose headers never end; 0 while the server keeps the
 * connection, -1 once it closed it. */
static int tls_mode;

static int trickle(int fd, long long n)
{
    static const char req[] = "POST /v1/nodes/node-a/heartbeat HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    /* a handshake record of 512 bytes announced, then a ClientHello's first bytes */
    static const char hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    const char *start = tls_mode ? hello : req;
    long long len = tls_mode ? (long long)sizeof hello - 1 : (long long)sizeof req - 1;
    char ch = n < len ? start[n] : 'a';
    char buf[256];
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        return -1;
    return send(fd, &ch, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1 || errno == EAGAIN ? 0 : -1;
}

struct slow {
    int fd, host;
    long long opened, sent;
};

/* Trickles on every connection each 500 ms for seconds, reopening closed ones; returns
 * the longest any connection stayed open and counts the closed ones. */
static long long flood(struct slow *c, int n, int seconds, int *closed)
{
    long long end = mono_ms() + seconds * 1000LL, longest = 0;
    *closed = 0;
    while (mono_ms() < end) {
        long long now = mono_ms();
        for (int i = 0; i < n; i++) {
            if (c[i].fd >= 0 && trickle(c[i].fd, c[i].sent++) < 0) {
                close(c[i].fd);
                c[i].fd = -1;
                (*closed)++;
            }
            if (c[i].fd >= 0 && now - c[i].opened > longest)
                longest = now - c[i].opened;
            if (c[i].fd < 0) {
                c[i].fd = slow_connect(c[i].host);
                c[i].opened = now;
                c[i].sent = 0;
            }
        }
        poll(NULL, 0, 500);
    }
    return longest;
}

static int open_count(struct slow *c, int n)
{
    int open = 0;
    for (int i = 0; i < n; i++)
        if (c[i].fd >= 0 && trickle(c[i].fd, c[i].sent++) == 0)
            open++;
    return open;
}

static void close_all(struct slow *c, int n)
{
    for (int i = 0; i < n; i++)
        if (c[i].fd >= 0) {
            close(c[i].fd);
            c[i].fd = -1;
        }
}

static int node_state_is(const char *want)
{
    json_t *a = NULL;
    int is = call(&clm, "GET", "/v1/nodes/node-a", clm.op_token, NULL, &a) == 200
             && jstr(a, "node.state") && strcmp(jstr(a, "node.state"), want) == 0;
    json_decref(a);
    return is;
}

static int node_lost(void *arg)
{
    (void)arg;
    return node_state_is("lost");
}

static int event_count(const char *kind)
{
    json_t *a = NULL;
    CHECK_EQ(call(&clm, "GET", "/v1/events?limit=1000", clm.op_token, NULL, &a), 200, "GET /v1/events");
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(a, "events"), i, e)
        n += jstr(e, "kind") && strcmp(jstr(e, "kind"), kind) == 0;
    json_decref(a);
    return n;
}

static void setup(char *sid, size_t sidlen)
{
    json_t *a = NULL;
    CHECK(call(&clm, "POST", "/v1/vms", clm.op_token,
               "{\"id\": \"vm-a\", \"vm_ip\": \"10.0.0.1\", \"host_ip\": \"10.0.1.1\", "
               "\"compute_units\": 16, \"memory\": \"1GiB\"}", &a) == 201, "create a VM");
    char vm_token[65];
    snprintf(vm_token, sizeof vm_token, "%s", jstr(a, "token"));
    json_decref(a);
    CHECK(call(&clm, "POST", "/v1/nodes", clm.op_token,
               "{\"id\": \"node-a\", \"host_ip\": \"10.0.1.1\"}", &a) == 201, "create a node");
    snprintf(nm.node_token, sizeof nm.node_token, "%s", jstr(a, "token"));
    json_decref(a);
    char body[512];
    snprintf(body, sizeof body,
             "{\"address\": \"%s\", \"host_ip\": \"10.0.1.1\", \"gpus\": [{\"index\": 0, "
             "\"uuid\": \"GPU-a\", \"name\": \"Fake H100\", \"sm_count\": 64, "
             "\"sm_granularity\": 8, \"memory_total\": 8589934592}], \"sessions\": []}",
             nm.address);
    CHECK_EQ(call(&clm, "POST", "/v1/nodes/node-a/register", nm.node_token, body, &a), 200,
          "register the node");
    pthread_mutex_lock(&nm.lock);
    snprintf(nm.manager_token, sizeof nm.manager_token, "%s", jstr(a, "manager_token"));
    nm.heartbeat = 1;
    pthread_mutex_unlock(&nm.lock);
    json_decref(a);
    CHECK_EQ(call(&clm, "POST", "/v1/sessions", vm_token, "{\"pid\": 1, \"process\": \"t\"}", &a), 201, "a session on the node");
    snprintf(sid, sidlen, "%s", jstr(a, "session.id"));
    json_decref(a);
}

static int session_active(const char *sid)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s", sid);
    json_t *a = NULL;
    int active = call(&clm, "GET", path, clm.op_token, NULL, &a) == 200
                 && strcmp(jstr(a, "session.state"), "active") == 0;
    json_decref(a);
    return active;
}

int main(int argc, char **argv)
{
    tls_mode = argc == 4 && strcmp(argv[2], "tls") == 0;
    if (argc != 2 && !tls_mode) {
        fprintf(stderr, "usage: test_api_flood PATH/flyt-cluster-manager [tls PATH/make_test_certs.sh]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    flyt_log_init("test_api_flood", FLYT_LOG_ERROR);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    struct rlimit rl;   /* 700 sockets here, as many in the manager */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char store[128], sid[64];
    snprintf(store, sizeof store, "sqlite:/tmp/flyt-test-flood-%d.db", (int)getpid());
    fake_nm_start(&nm, "node-a");
    char extra[1024] = "heartbeat_interval = 1s\nnode_timeout = 3s\n", certs[128] = "";
    if (tls_mode) {
        snprintf(certs, sizeof certs, "/tmp/flyt-test-flood-certs-%d", (int)getpid());
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "%s %s", argv[3], certs);
        int rc = system(cmd);
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
            return 77;
        CHECK_EQ(rc, 0, "make the test certificates (%s)", cmd);
        char ca[256];
        snprintf(ca, sizeof ca, "%s/ca.pem", certs);
        CHECK_EQ(flyt_http_client_ca(ca, cmd, sizeof cmd), 0, "trust the test CA: %s", cmd);
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                 "tls_cert_file = %s/server.pem\ntls_key_file = %s/server.key\n", certs, certs);
        printf("-- over HTTPS; the slow clients trickle a TLS handshake\n");
    }
    clm_start(&clm, argv[1], store, extra);
    CHECK(!tls_mode || strncmp(clm.base, "https://", 8) == 0, "the API is at %s", clm.base);
    struct fake_nm *nms[] = {&nm};
    heartbeats_start(&clm, nms, 1, 250);
    setup(sid, sizeof sid);

    printf("-- one address gets its per-peer share, no more\n");
    static struct slow one[80];
    for (int i = 0; i < 80; i++)
        one[i] = (struct slow){slow_connect(50), 50, mono_ms(), 0};
    poll(NULL, 0, 1000);
    int open = open_count(one, 80);
    CHECK_EQ(open, 64, "80 connections from 127.0.0.50: %d kept open (limit 64)", open);
    close_all(one, 80);

    printf("-- %d slow connections from %d addresses for %d s\n", FLOOD_ADDRS * FLOOD_PER_ADDR,
           FLOOD_ADDRS, FLOOD_SECONDS);
    static struct slow c[FLOOD_ADDRS * FLOOD_PER_ADDR];
    for (int i = 0; i < FLOOD_ADDRS * FLOOD_PER_ADDR; i++)
        c[i] = (struct slow){-1, 2 + i % FLOOD_ADDRS, 0, 0};
    int closed;
    long long longest = flood(c, FLOOD_ADDRS * FLOOD_PER_ADDR, FLOOD_SECONDS, &closed);
    close_all(c, FLOOD_ADDRS * FLOOD_PER_ADDR);
    CHECK_LE(longest, DEADLINE_MS + SLACK_MS,
          "no slow connection outlived the request deadline (longest %lld ms, deadline %d ms)",
          longest, DEADLINE_MS);
    CHECK_GE(closed, 512, "the server closed %d slow connections", closed);
    poll(NULL, 0, 1500);   /* heartbeats reach it again */
    CHECK_EQ(event_count("node.lost"), 0,
          "the node was never lost during the flood");
    CHECK(node_state_is("ready"),
          "the node was never lost during the flood");
    CHECK(session_active(sid), "its session is still active");

    printf("-- after the flood, a node that goes silent is still lost\n");
    pthread_mutex_lock(&nm.lock);
    nm.heartbeat = 0;
    pthread_mutex_unlock(&nm.lock);
    CHECK(wait_for(node_lost, NULL, 8000), "the silent node is lost after node_timeout");
    CHECK(!session_active(sid), "its session ended with it");

    heartbeats_stop();
    clm_stop(&clm);
    fake_nm_stop(&nm);
    unlink(store + 7);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s /tmp/flyt-test-flood-%d.db-wal /tmp/flyt-test-flood-%d.db-shm %s",
             clm.dir, (int)getpid(), (int)getpid(), certs);
    if (system(cmd) != 0) {
    }
    printf("test_api_flood: all passed\n");
    return 0;
}
