/*
 * Unit tests of src/protocol/flyt_proto.c (the op table and request-header
 * validation) and src/transport/flyt_transport.c (address parsing, the
 * whole-buffer I/O helpers, TCP keepalive settings).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "flyt_proto.h"
#include "flyt_transport.h"

/* The op table as this test sees flyt_ops.def. */
static const struct {
    const char *name;
    unsigned num;
    size_t req, rep;
    unsigned flags;
} expected[] = {
#define FLYT_OP(name, num, req, rep, fl) {#name, num, sizeof(req), sizeof(rep), fl},
#include "flyt_ops.def"
#undef FLYT_OP
};
#define NOPS (sizeof expected / sizeof expected[0])

static int is_op(unsigned num)
{
    for (size_t i = 0; i < NOPS; i++)
        if (expected[i].num == num)
            return 1;
    return 0;
}

static struct flyt_frame_hdr hdr(uint32_t length, uint16_t op, uint16_t flags)
{
    struct flyt_frame_hdr h = {length, op, flags, 7, 0};
    return h;
}

static void test_op_table(void)
{
    printf("== op table\n");
    CHECK_GT(NOPS, 50, "flyt_ops.def has %zu ops", NOPS);
    /* An entry's fields are not compared with this copy: both are the same
     * expansion of flyt_ops.def, and a number used twice already fails the
     * build (-Woverride-init on the table's designated initializers). */
    int all_found = 1, all_padded = 1;
    for (size_t i = 0; i < NOPS; i++) {
        if (flyt_op_info(expected[i].num) == NULL) {
            printf("  %s (%u) not found\n", expected[i].name, expected[i].num);
            all_found = 0;
        }
        if (expected[i].req % 8 || expected[i].rep % 8 || expected[i].req == 0 || expected[i].rep == 0) {
            printf("  %s: request %zu / reply %zu bytes not a multiple of 8\n", expected[i].name,
                   expected[i].req, expected[i].rep);
            all_padded = 0;
        }
    }
    CHECK(all_found, "every op is found by its number");
    CHECK(all_padded, "every request and reply struct is a non-zero multiple of 8 bytes");

    int holes_null = 1;
    for (unsigned n = 0; n < 300; n++)
        if (!is_op(n) && flyt_op_info(n) != NULL)
            holes_null = 0;
    CHECK(holes_null, "numbers without an op (0..299) have no table entry");
    CHECK_EQ(flyt_op_info(65535), NULL, "huge numbers have no entry");
    CHECK_EQ(flyt_op_info(0xFFFFFFFFu), NULL, "huge numbers have no entry");
    CHECK_STR_EQ(flyt_op_name(FLYT_OP_CALLBACK), "CALLBACK", "op 200 is named CALLBACK");
    CHECK_EQ(flyt_op_info(FLYT_OP_CALLBACK), NULL, "CALLBACK is not a request op");
    CHECK_STR_EQ(flyt_op_name(4), "UNKNOWN", "an unused number is named UNKNOWN");

    /* (the frame, reply and 3D copy headers are asserted at compile time) */
    CHECK_EQ(sizeof(flyt_req_memcpy), 32, "memcpy request is 32 bytes");
    CHECK_EQ(sizeof(flyt_req_memset), 64, "memset request is 64 bytes");
    CHECK_EQ(sizeof(flyt_req_hello), 80, "hello request 80, reply 72 bytes");
    CHECK_EQ(sizeof(flyt_rep_hello), 72, "hello request 80, reply 72 bytes (48 before 2.3)");
    CHECK_EQ(flyt_op_info(FLYT_OP_SESSION_MOVED), NULL, "SESSION_MOVED is not a request op");

    const struct flyt_op_info *i;
    i = flyt_op_info(FLYT_OP_HELLO);
    CHECK(i, "HELLO is synchronous and takes no data");
    CHECK_EQ(i->flags, 0, "HELLO is synchronous and takes no data");
    i = flyt_op_info(FLYT_OP_MEMCPY_HTOD);
    CHECK(i, "MEMCPY_HTOD carries data and may be pipelined");
    CHECK_EQ(i->flags, (FLYT_OPF_DATA | FLYT_OPF_ASYNC), "MEMCPY_HTOD carries data and may be pipelined");
    i = flyt_op_info(FLYT_OP_MEMCPY_DTOH);
    CHECK(i, "MEMCPY_DTOH is synchronous with reply data");
    CHECK_EQ(i->flags, FLYT_OPF_RDATA, "MEMCPY_DTOH is synchronous with reply data");
    i = flyt_op_info(FLYT_OP_LAUNCH);
    CHECK(i, "LAUNCH is pipelined with data");
    CHECK(i->flags & FLYT_OPF_ASYNC, "LAUNCH is pipelined with data");
    CHECK(i->flags & FLYT_OPF_DATA, "LAUNCH is pipelined with data");
    i = flyt_op_info(FLYT_OP_FUNC_GET);
    CHECK(i, "FUNC_GET has request and reply data and is synchronous");
    CHECK(i->flags & FLYT_OPF_DATA, "FUNC_GET has request and reply data and is synchronous");
    CHECK(i->flags & FLYT_OPF_RDATA, "FUNC_GET has request and reply data and is synchronous");
    CHECK(!(i->flags & FLYT_OPF_ASYNC), "FUNC_GET has request and reply data and is synchronous");
    i = flyt_op_info(FLYT_OP_DEVICE_COUNT);
    CHECK(i, "DEVICE_COUNT: 8-byte request and reply");
    CHECK_EQ(i->flags, 0, "DEVICE_COUNT: 8-byte request and reply");
    CHECK_EQ(i->req_size, 8, "DEVICE_COUNT: 8-byte request and reply");
    CHECK_EQ(i->rep_size, 8, "DEVICE_COUNT: 8-byte request and reply");
}

static void test_check_request(void)
{
    printf("== flyt_check_request\n");
    int valid = 1;
    for (size_t k = 0; k < NOPS; k++) {
        struct flyt_frame_hdr h = hdr((uint32_t)expected[k].req, (uint16_t)expected[k].num, 0);
        if (flyt_check_request(&h) != NULL) {
            printf("  %s with its exact size rejected: %s\n", expected[k].name, flyt_check_request(&h));
            valid = 0;
        }
        if (expected[k].flags & FLYT_OPF_ASYNC) {
            h.flags = FLYT_F_NOREPLY;
            if (flyt_check_request(&h) != NULL)
                valid = 0;
        }
        if (expected[k].flags & FLYT_OPF_DATA) {
            h = hdr((uint32_t)expected[k].req + 100, (uint16_t)expected[k].num, 0);
            struct flyt_frame_hdr big = hdr(FLYT_MAX_PAYLOAD, (uint16_t)expected[k].num, 0);
            if (flyt_check_request(&h) != NULL || flyt_check_request(&big) != NULL)
                valid = 0;
        }
    }
    CHECK(valid, "every op accepted at its size, with NOREPLY when async, with data up to the limit when DATA");

    int rejected = 1;
    for (size_t k = 0; k < NOPS; k++) {
        const uint16_t op = (uint16_t)expected[k].num;
        const uint32_t rs = (uint32_t)expected[k].req;
        struct flyt_frame_hdr bad[] = {
            hdr(rs - 1, op, 0),              /* too short */
            hdr(0, op, 0),                   /* empty */
            hdr(rs, op, FLYT_F_REPLY),       /* reply flag on a request */
            hdr(rs, op, 0x8),                /* unknown flag */
            hdr(rs, op, 0x8000),
            hdr(FLYT_MAX_PAYLOAD + 1u, op, 0),
            hdr(0xFFFFFFFFu, op, 0),
        };
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++)
            if (flyt_check_request(&bad[j]) == NULL) {
                printf("  %s: bad header %zu accepted\n", expected[k].name, j);
                rejected = 0;
            }
        if (!(expected[k].flags & FLYT_OPF_DATA)) {
            struct flyt_frame_hdr h = hdr(rs + 1, op, 0), h8 = hdr(rs + 8, op, 0);
            if (flyt_check_request(&h) == NULL || flyt_check_request(&h8) == NULL) {
                printf("  %s: trailing data accepted\n", expected[k].name);
                rejected = 0;
            }
        }
        if (!(expected[k].flags & FLYT_OPF_ASYNC)) {
            struct flyt_frame_hdr h = hdr(rs, op, FLYT_F_NOREPLY);
            if (flyt_check_request(&h) == NULL) {
                printf("  %s: NOREPLY accepted on a synchronous op\n", expected[k].name);
                rejected = 0;
            }
        }
    }
    CHECK(rejected, "for every op: short, empty, reply-flagged, unknown-flagged, oversized headers rejected;"
                    " trailing data rejected unless DATA; NOREPLY rejected unless ASYNC");

    struct flyt_frame_hdr h;
    h = hdr(8, 0, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "op 0 rejected");
    h = hdr(8, 4, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "unused op 4 rejected");
    h = hdr(16, FLYT_OP_CALLBACK, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "CALLBACK (200) rejected as a request");
    h = hdr(8, 255, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "op 255 rejected");
    h = hdr(8, 256, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "op 256 rejected");
    h = hdr(8, 65535, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "op 65535 rejected");
    h = hdr(sizeof(flyt_req_memcpy) + 4096, FLYT_OP_MEMCPY_HTOD, FLYT_F_NOREPLY);
    CHECK_EQ(flyt_check_request(&h), NULL, "pipelined MEMCPY_HTOD with 4096 data bytes accepted");
    h = hdr(sizeof(flyt_req_memcpy) + 4096, FLYT_OP_MEMCPY_DTOH, 0);
    CHECK_NE(flyt_check_request(&h), NULL, "MEMCPY_DTOH with trailing data rejected");
    h = hdr(sizeof(flyt_req_none), FLYT_OP_DEVICE_SYNC, FLYT_F_NOREPLY);
    CHECK_NE(flyt_check_request(&h), NULL, "DEVICE_SYNC with NOREPLY rejected");
    h = hdr(sizeof(flyt_req_none), FLYT_OP_GOODBYE, FLYT_F_NOREPLY);
    CHECK_EQ(flyt_check_request(&h), NULL, "GOODBYE with NOREPLY accepted");
}

static void parse_ok(const char *text, enum flyt_addr_kind kind, const char *host, const char *port,
                     const char *path, const char *canonical)
{
    flyt_addr a;
    char err[256] = "", fmt[512];
    int rc = flyt_addr_parse(text, &a, err, sizeof err);
    int ok = rc == 0 && a.kind == kind;
    if (ok && kind == FLYT_ADDR_TCP)
        ok = strcmp(a.host, host) == 0 && strcmp(a.port, port) == 0;
    if (ok && kind == FLYT_ADDR_UNIX)
        ok = strcmp(a.path, path) == 0;
    if (ok) {
        flyt_addr_format(&a, fmt, sizeof fmt);
        ok = strcmp(fmt, canonical) == 0;
        if (!ok)
            printf("  formatted as %s\n", fmt);
    } else if (rc != 0) {
        printf("  error: %s\n", err);
    }
    CHECK(ok, "parse \"%s\" -> %s", text, canonical);
}

static void parse_bad(const char *label, const char *text)
{
    flyt_addr a;
    char err[256] = "";
    int rc = flyt_addr_parse(text, &a, err, sizeof err);
    CHECK_EQ(rc, -1, "reject %s (%s)", label, err[0] ? err : "no reason given");
    CHECK_NE(err[0], '\0', "reject %s (%s)", label, err[0] ? err : "no reason given");
}

static void test_addresses(void)
{
    printf("== address parsing\n");
    parse_ok("tcp://127.0.0.1:5000", FLYT_ADDR_TCP, "127.0.0.1", "5000", NULL, "tcp://127.0.0.1:5000");
    parse_ok("127.0.0.1:5000", FLYT_ADDR_TCP, "127.0.0.1", "5000", NULL, "tcp://127.0.0.1:5000");
    parse_ok("[::1]:7", FLYT_ADDR_TCP, "::1", "7", NULL, "tcp://[::1]:7");
    parse_ok("tcp://[::1]:7", FLYT_ADDR_TCP, "::1", "7", NULL, "tcp://[::1]:7");
    parse_ok("gpu-node-3.example:65535", FLYT_ADDR_TCP, "gpu-node-3.example", "65535", NULL,
             "tcp://gpu-node-3.example:65535");
    parse_ok("localhost:0", FLYT_ADDR_TCP, "localhost", "0", NULL, "tcp://localhost:0");
    parse_ok("tls://gpu-node-3.example:47000", FLYT_ADDR_TCP, "gpu-node-3.example", "47000", NULL,
             "tls://gpu-node-3.example:47000");
    parse_ok("tls://[::1]:7", FLYT_ADDR_TCP, "::1", "7", NULL, "tls://[::1]:7");
    parse_ok("unix:/tmp/x", FLYT_ADDR_UNIX, NULL, NULL, "/tmp/x", "unix:/tmp/x");
    parse_ok("unix:///tmp/x", FLYT_ADDR_UNIX, NULL, NULL, "/tmp/x", "unix:/tmp/x");

    char longest[160], too_long[160];
    snprintf(longest, sizeof longest, "unix:/%0106d", 0); /* 107-byte path: fits with its NUL */
    parse_ok(longest, FLYT_ADDR_UNIX, NULL, NULL, longest + 5, longest);
    snprintf(too_long, sizeof too_long, "unix:/%0107d", 0); /* 108 bytes: no room for the NUL */

    parse_bad("an empty address", "");
    {
        flyt_addr a;
        char err[128] = "";
        CHECK_EQ(flyt_addr_parse(NULL, &a, err, sizeof err), -1, "reject a NULL address");
    }
    parse_bad("a host without port", "127.0.0.1");
    parse_bad("tcp:// without port", "tcp://127.0.0.1");
    parse_bad("an empty port", "127.0.0.1:");
    parse_bad("an empty host", ":5000");
    parse_bad("empty brackets", "[]:5000");
    parse_bad("a non-numeric port", "127.0.0.1:http");
    parse_bad("a port with junk", "127.0.0.1:50x");
    parse_bad("a negative port", "127.0.0.1:-1");
    parse_bad("port 70000", "127.0.0.1:70000");
    parse_bad("port 65536", "127.0.0.1:65536");
    parse_bad("a huge port", "127.0.0.1:99999999999999999999999");
    parse_bad("[::1] without port", "[::1]");
    parse_bad("an empty unix path", "unix:");
    parse_bad("a too-long unix path", too_long);
    parse_bad("scheme udp://", "udp://127.0.0.1:5000");
    parse_bad("scheme http://", "http://example.com:80");
}

static void test_io(void)
{
    printf("== whole-buffer I/O over a socket pair\n");
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, "socketpair");
    char a[] = "hello ", b[] = "world", out[32] = {0};
    struct iovec iov[2] = {{a, 6}, {b, 5}};
    CHECK_EQ(flyt_writev_full(sv[0], iov, 2), 0, "writev_full of two pieces");
    CHECK_EQ(flyt_read_full(sv[1], out, 11), 0, "read_full gets them back");
    CHECK_MEM_EQ(out, "hello world", 11, "read_full gets them back");
    CHECK_EQ(flyt_write_full(sv[0], "0123456789", 10), 0, "write_full");
    CHECK_EQ(flyt_skip(sv[1], 4), 0, "skip drops bytes, the rest follows");
    CHECK_EQ(flyt_read_full(sv[1], out, 6), 0, "skip drops bytes, the rest follows");
    CHECK_MEM_EQ(out, "456789", 6, "skip drops bytes, the rest follows");
    CHECK_EQ(flyt_write_full(sv[0], "abc", 3), 0, "a short message");
    close(sv[0]);
    errno = 1234;
    CHECK_EQ(flyt_read_full(sv[1], out, 8), -1, "read_full past the end: -1 with errno 0");
    CHECK_EQ(errno, 0, "read_full past the end: -1 with errno 0");
    close(sv[1]);

    printf("== listen and connect on a unix socket\n");
    char dir[] = "/tmp/flyt-proto-XXXXXX", text[128], err[256] = "";
    CHECK_NE(mkdtemp(dir), NULL, "temp dir %s", dir);
    snprintf(text, sizeof text, "unix:%s/t.sock", dir);
    flyt_addr addr;
    CHECK_EQ(flyt_addr_parse(text, &addr, err, sizeof err), 0, "parse %s", text);
    int lfd = flyt_listen(&addr, err, sizeof err);
    CHECK_GE(lfd, 0, "listen (%s)", err);
    int cfd = flyt_connect(&addr, err, sizeof err);
    CHECK_GE(cfd, 0, "connect (%s)", err);
    int afd = flyt_accept(lfd);
    CHECK_GE(afd, 0, "accept");
    CHECK_EQ(flyt_write_full(cfd, "ping", 4), 0, "bytes cross the connection");
    CHECK_EQ(flyt_read_full(afd, out, 4), 0, "bytes cross the connection");
    CHECK_MEM_EQ(out, "ping", 4, "bytes cross the connection");
    close(cfd);
    close(afd);
    close(lfd);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/t.sock", dir);
    unlink(sock);
    CHECK_EQ(flyt_connect(&addr, err, sizeof err), -1, "connect to a missing socket fails (%s)", err);
    CHECK(err[0], "connect to a missing socket fails (%s)", err);
    rmdir(dir);
}

static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

static void keepalive_bad(const char *text)
{
    struct flyt_keepalive k = {9, 9, 9};
    char err[256] = "";
    CHECK_EQ(flyt_keepalive_parse(text, &k, err, sizeof err), -1, "'%s' refused (%s)", text, err);
    CHECK(err[0] != '\0' && k.idle_s == 9, "'%s' refused, nothing changed", text);
}

static void test_keepalive(void)
{
    printf("== TCP keepalive settings\n");
    struct flyt_keepalive k = FLYT_KEEPALIVE_DEFAULT;
    CHECK_EQ(flyt_keepalive_dead_s(&k), 13, "the default gives up 13 s after the peer's last word");
    char err[256] = "";
    CHECK_EQ(flyt_keepalive_parse("1,2,3", &k, err, sizeof err), 0, "1,2,3 parses (%s)", err);
    CHECK(k.idle_s == 1 && k.interval_s == 2 && k.count == 3, "1,2,3: idle 1, interval 2, count 3");
    CHECK_EQ(flyt_keepalive_dead_s(&k), 7, "1,2,3 gives up after 7 s");
    CHECK_EQ(flyt_keepalive_parse("off", &k, err, sizeof err), 0, "off parses");
    CHECK_EQ(flyt_keepalive_dead_s(&k), 0, "off: never of its own");
    const char *bad[] = {"", "5", "5,2", "5,2,4,1", "0,2,4", "5,0,4", "5,2,0", "-1,2,4",
                         "5,2,4x", "5, 2,4", "3601,1,1", "on", "5,,4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        keepalive_bad(bad[i]);

    char text[] = "tcp://127.0.0.1:0";
    flyt_addr addr;
    CHECK_EQ(flyt_addr_parse(text, &addr, err, sizeof err), 0, "parse %s", text);
    int lfd = flyt_listen(&addr, err, sizeof err);
    CHECK_GE(lfd, 0, "listen on loopback (%s)", err);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0, "the port chosen");
    snprintf(addr.port, sizeof addr.port, "%u", (unsigned)ntohs(sa.sin_port));
    int cfd = flyt_connect(&addr, err, sizeof err);
    CHECK_GE(cfd, 0, "connect (%s)", err);
    CHECK_EQ(flyt_is_tcp(cfd), 1, "a TCP socket is one");
    k = (struct flyt_keepalive){3, 2, 5};
    CHECK_EQ(flyt_keepalive_set(cfd, &k), 0, "keepalive 3,2,5 set");
    CHECK_EQ(sockopt(cfd, SOL_SOCKET, SO_KEEPALIVE), 1, "SO_KEEPALIVE on");
    CHECK_EQ(sockopt(cfd, IPPROTO_TCP, TCP_KEEPIDLE), 3, "TCP_KEEPIDLE 3");
    CHECK_EQ(sockopt(cfd, IPPROTO_TCP, TCP_KEEPINTVL), 2, "TCP_KEEPINTVL 2");
    CHECK_EQ(sockopt(cfd, IPPROTO_TCP, TCP_KEEPCNT), 5, "TCP_KEEPCNT 5");
    CHECK_EQ(sockopt(cfd, IPPROTO_TCP, TCP_USER_TIMEOUT), 13000, "TCP_USER_TIMEOUT 13 s");
    CHECK_EQ(flyt_socket_error(cfd), 0, "no error pending");
    int afd = flyt_accept(lfd);
    CHECK_GE(afd, 0, "accept");
    k = (struct flyt_keepalive){0, 0, 0};
    CHECK_EQ(flyt_keepalive_set(afd, &k), 0, "off: nothing set");
    CHECK_EQ(sockopt(afd, SOL_SOCKET, SO_KEEPALIVE), 0, "off: SO_KEEPALIVE stays off");
    close(afd);
    close(cfd);
    close(lfd);

    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, "socketpair");
    CHECK_EQ(flyt_is_tcp(sv[0]), 0, "a Unix socket is no TCP socket");
    k = FLYT_KEEPALIVE_DEFAULT;
    CHECK_EQ(flyt_keepalive_set(sv[0], &k), 0, "a Unix socket: nothing to set");
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(60); /* nothing here may hang */
    test_op_table();
    test_check_request();
    test_addresses();
    test_io();
    test_keepalive();
    printf("all protocol checks passed\n");
    return 0;
}
