/*
 * A session's state streamed to a receiving server (flyt-server
 * --restore-listen, docs/state-format.md "Streaming") on the host backend: the
 * receiver takes it, verifies it and serves the session at the same pointer
 * with the same bytes; a wrong secret is refused (and the source carries on);
 * a receiver that dies mid-stream leaves the source session running; a
 * receiver that never gets its state exits after its deadline.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "check.h"
#include "flyt_ckpt_request.h"
#include "flyt_server_status.h"
#include "flyt_transport.h"
#include "harness.h"

#define BIG (8u << 20) /* more than the socket buffers hold: a cut stream fails midway */

static char dir[64], status_path[128], secret_path[128];
static const char secret[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static uint64_t ptr;
static uint32_t last_precopy_ms; /* the last migration's pre-copy, as its session said */
#define NMOD 2
#define FUNC_NAME "kernel_a" /* looked up in each module */
/* The pre-copy's wire as docs/state-format.md describes it. */
struct pc_entry {
    uint64_t id, size;
    uint8_t  sha256[32];
    uint32_t nfuncs, names_len; /* then, after the list, each entry's names */
};
static unsigned char *image[NMOD]; /* distinct kernel images, loaded in the session */
static size_t image_size;
static uint64_t module[NMOD];

static unsigned char pattern(uint64_t i)
{
    return (unsigned char)(i * 7 + (i >> 12));
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(s, (struct sockaddr *)&a, &l) == 0, "a free port");
    close(s);
    return ntohs(a.sin_port);
}

/* A receiving server on port, its Unix socket and log under dir/NAME.*. */
/* A receiving server; quota (NULL: none) its --memory-quota. */
/* A receiving server; opt and val (or NULL): one more option. */
static pid_t receiver_with(const char *bin, const char *name, int port, int timeout_s,
                           const char *opt, const char *val)
{
    char listen[160], state[160], rl[64], log[160], to[16];
    snprintf(listen, sizeof listen, "unix:%s/%s.sock", dir, name);
    snprintf(state, sizeof state, "%s/%s.state", dir, name);
    snprintf(rl, sizeof rl, "tcp://127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    snprintf(to, sizeof to, "%d", timeout_s);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        execl(bin, bin, "--backend", "host", "--listen", listen, "--restore", state,
              "--restore-listen", rl, "--restore-secret-file", secret_path, "--restore-timeout",
              to, opt, val, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static pid_t receiver(const char *bin, const char *name, int port, int timeout_s)
{
    return receiver_with(bin, name, port, timeout_s, NULL, NULL);
}

static int log_has(const char *name, const char *needle)
{
    char path[160], buf[65536] = "";
    snprintf(path, sizeof path, "%s/%s.log", dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static int exit_status(pid_t pid, int timeout_s)
{
    for (int i = 0; i < timeout_s * 100; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Asks the source session for a checkpoint with stop, streamed to port with key. */
static int migrate(int port, const char *key, char *err, size_t errlen)
{
    char to[64], state[160];
    snprintf(to, sizeof to, "tcp://127.0.0.1:%d", port);
    snprintf(state, sizeof state, "%s/source.state", dir);
    struct flyt_ckpt_dest dest = {to, key};
    struct flyt_ckpt_outcome out;
    snprintf(err, errlen, "(none)");
    int rc = flyt_ckpt_request(status_path, state, &dest, FLYT_CKPT_STOP, 60000, &out, err, errlen);
    CHECK_EQ(rc, 0, "the session answered: %s", err);
    last_precopy_ms = out.precopy_ms;
    return out.result;
}

static void contents_hold(int fd, const char *where)
{
    unsigned char *got = malloc(BIG);
    int had;
    CHECK_EQ(th_dtoh(fd, ptr, BIG, got, &had), T_SUCCESS, "%s: the buffer reads", where);
    uint64_t bad = BIG;
    for (uint64_t i = 0; i < BIG && bad == BIG; i++)
        if (got[i] != pattern(i))
            bad = i;
    CHECK_EQ(bad, (uint64_t)BIG, "%s: every byte holds", where);
    free(got);
}

/* A receiver that takes a little of the stream and dies. */
static void *cut_receiver(void *arg)
{
    int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
    char buf[4096];
    if (fd >= 0 && read(fd, buf, sizeof buf) > 0) {
        struct linger hard = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard); /* a reset, as a kill */
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void cut_midway(void)
{
    th_say("a receiver that dies mid-stream: the checkpoint fails, the session carries on");
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 1) == 0 &&
              getsockname(lfd, (struct sockaddr *)&a, &l) == 0, "a fake receiver listens");
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, cut_receiver, &lfd), 0, "fake receiver");
    char err[512] = "";
    CHECK_NE(migrate(ntohs(a.sin_port), secret, err, sizeof err), T_SUCCESS, "refused: %s", err);
    CHECK(strstr(err, "streaming") != NULL, "the error says the stream failed: %s", err);
    pthread_join(th, NULL);
    close(lfd);
}

static void send_all(int fd, const void *p, size_t n, const char *what);
static void read_exactly(int fd, void *p, size_t n, const char *what);

/* Whether two files hold the same bytes. */
static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb, ca = 0, cb = 0;
    while (same && (ca = fgetc(fa)) != EOF && (cb = fgetc(fb)) != EOF)
        same = ca == cb;
    same = same && ca == EOF && fgetc(fb) == EOF;
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}
static void contents_hold(int fd, const char *where);

/* A receiver played by hand, to see the source serve its client while the pre-copy
 * runs: it holds back its answer to the list until the client was served, needs no
 * image, then checks that the state follows on the same connection and refuses it. */
struct slow_receiver {
    int  lfd, client;
    int  served; /* the client's request answered during the pre-copy */
    char first[9]; /* the state's first bytes after the pre-copy */
};

static void *slow_receiver(void *arg)
{
    struct slow_receiver *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    char greeting[72], list[16 + NMOD * sizeof(struct pc_entry)], names[256];
    read_exactly(fd, greeting, sizeof greeting, "the greeting");
    read_exactly(fd, list, sizeof list, "the pre-copy's list");
    uint32_t names_len = 0;
    for (int i = 0; i < NMOD; i++) {
        struct pc_entry e;
        memcpy(&e, list + 16 + i * sizeof e, sizeof e);
        CHECK(e.nfuncs == 1 && e.names_len == sizeof FUNC_NAME, "module %d lists its function", i);
        names_len += e.names_len;
    }
    read_exactly(fd, names, names_len, "the functions' names");
    CHECK(memcmp(names, FUNC_NAME, sizeof FUNC_NAME) == 0, "the name is %s", names);
    uint32_t count;
    memcpy(&count, list + 8, 4);
    CHECK(memcmp(list, "FLYTPRE2", 8) == 0 && count == NMOD, "the list names %u modules", count);
    contents_hold(r->client, "served while the pre-copy waits for the receiver");
    r->served = 1;
    char need[4 + NMOD] = "NEED";
    send_all(fd, need, sizeof need, "no image needed");
    send_all(fd, "PRELOADED 0\n", 12, "none preloaded");
    read_exactly(fd, r->first, 8, "the state's beginning");
    char scrap[65536];
    while (read(fd, scrap, sizeof scrap) > 0)
        ;
    send_all(fd, "ERR played receiver\n", 20, "the verdict");
    close(fd);
    return NULL;
}

/* A receiver played by hand that answers the list but not the loads in time: the source
 * stops waiting (FLYT_PRECOPY_WAIT_S), streams the state, and skips the late answer line
 * before the verdict. */
static void *late_receiver(void *arg)
{
    struct slow_receiver *r = arg;
    int fd = accept(r->lfd, NULL, NULL);
    char head[72 + 16 + NMOD * sizeof(struct pc_entry) + NMOD * sizeof FUNC_NAME];
    read_exactly(fd, head, sizeof head, "the greeting, the list and its names");
    char need[4 + NMOD] = "NEED";
    send_all(fd, need, sizeof need, "no image needed");
    read_exactly(fd, r->first, 8, "the state's beginning, without the loads' answer");
    char scrap[65536];
    while (read(fd, scrap, sizeof scrap) > 0)
        ;
    static const char late[] = "PRELOADED 0\nERR played late receiver\n";
    send_all(fd, late, sizeof late - 1, "the late answer, then the verdict");
    close(fd);
    return NULL;
}

static void played(void *(*fn)(void *), struct slow_receiver *r, char *err, size_t errlen)
{
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    CHECK(r->lfd >= 0 && bind(r->lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(r->lfd, 1) == 0 && getsockname(r->lfd, (struct sockaddr *)&a, &l) == 0,
          "a played receiver listens");
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fn, r), 0, "played receiver");
    CHECK_NE(migrate(ntohs(a.sin_port), secret, err, errlen), T_SUCCESS, "refused: %s", err);
    pthread_join(th, NULL);
    close(r->lfd);
}

static void late_loads(void)
{
    th_say("the receiver still loading when the source stops waiting: the state follows");
    struct slow_receiver r = {0};
    char err[512] = "";
    played(late_receiver, &r, err, sizeof err);
    CHECK(memcmp(r.first, "FLYTSTAT", 8) == 0, "the state followed the pre-copy");
    CHECK(strstr(err, "played late receiver") != NULL, "the verdict after the late line: %s", err);
    CHECK(th_server_log_has("the receiver still loading them"), "the source says it went on");
}

static void served_during_precopy(int client)
{
    th_say("the source serves its client while the pre-copy runs; the state follows it");
    struct slow_receiver r = {.client = client};
    char err[512] = "";
    played(slow_receiver, &r, err, sizeof err);
    CHECK(r.served, "the client was served before the receiver answered the pre-copy");
    CHECK(last_precopy_ms >= 1, "the session says how long the pre-copy ran before the drain "
          "(%u ms: not downtime)", last_precopy_ms);
    CHECK(memcmp(r.first, "FLYTSTAT", 8) == 0, "the state followed the pre-copy");
    CHECK(strstr(err, "played receiver") != NULL, "the source hears the verdict: %s", err);
}

/* A session on the harness server with the pattern at ptr; its connection. */
static int patterned_session(const char *bin)
{
    const char *args[] = {"--status-file", status_path, NULL};
    th_server_start_args(bin, NULL, args);
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO");
    unsigned char *p = malloc(BIG);
    for (uint64_t i = 0; i < BIG; i++)
        p[i] = pattern(i);
    CHECK_EQ(th_alloc(fd, BIG, &ptr), T_SUCCESS, "MEM_ALLOC");
    CHECK_EQ(th_htod(fd, ptr, p, BIG), T_SUCCESS, "pattern in");
    free(p);
    for (int i = 0; i < NMOD; i++) {
        CHECK_EQ(th_module_load(fd, image[i], image_size, &module[i]), T_SUCCESS, "MODULE_LOAD %d", i);
        flyt_req_named req = {.module = module[i], .name_len = sizeof FUNC_NAME};
        CHECK_EQ(th_call(fd, FLYT_OP_FUNC_GET, &req, sizeof req, FUNC_NAME, sizeof FUNC_NAME, NULL),
                 T_SUCCESS, "FUNC_GET %s of module %d", FUNC_NAME, i);
    }
    return fd;
}

/* The modules are there under their ids: each unloads once, then is gone. */
static void modules_hold(int fd, const char *where)
{
    for (int i = 0; i < NMOD; i++) {
        flyt_req_handle req = {module[i]};
        CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &req, sizeof req, NULL, 0, NULL), T_SUCCESS,
                 "%s: module %d unloads", where, i);
        CHECK_EQ(th_call(fd, FLYT_OP_MODULE_UNLOAD, &req, sizeof req, NULL, 0, NULL),
                 T_INVALID_HANDLE, "%s: module %d is gone after", where, i);
    }
}

/* Where needle first stands in NAME's log (-1: absent). */
static long log_at(const char *name, const char *needle)
{
    char path[160], *buf = calloc(1, 1 << 20);
    snprintf(path, sizeof path, "%s/%s.log", dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *at = strstr(buf, needle);
    long pos = at ? at - buf : -1;
    free(buf);
    return pos;
}

/* The receiver's process that took the state dies before its client comes: the client
 * gets a new process that opens the state file itself. */
static void warm_process_gone(const char *bin)
{
    th_say("the process that took the state is gone: the client still gets its session");
    int fd = patterned_session(bin);
    int port = free_port();
    pid_t late = receiver(bin, "late", port, 20);
    char err[512], path[64], sock[160];
    CHECK_EQ(migrate(port, secret, err, sizeof err), T_SUCCESS, "streamed: %s", err);
    close(fd);
    for (int i = 0; i < 500 && !log_has("late", "received state kept in"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    /* the file is written after the source was answered, from the verified bytes */
    CHECK(log_has("late", "received state kept in"), "the receiver kept its state in its file");
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)late, (int)late);
    FILE *f = fopen(path, "r");
    int warm = 0;
    CHECK(f && fscanf(f, "%d", &warm) == 1 && warm > 0, "the receiver's process is %d", warm);
    fclose(f);
    kill(warm, SIGKILL);
    snprintf(sock, sizeof sock, "%s/late.sock", dir);
    for (int i = 0; i < 100 && !log_has("late", "killed by signal"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    int tfd = th_connect_to(sock);
    CHECK(tfd >= 0 && th_hello(tfd) == 0, "HELLO to the receiver");
    contents_hold(tfd, "from the state file, in a new process");
    CHECK(log_has("late", "the process that took the state is gone"), "the receiver says so");
    close(tfd);
    kill(late, SIGTERM);
    exit_status(late, 10);
    th_server_stop();
}


static int connect_port(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 500; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return -1;
}

static void send_all(int fd, const void *p, size_t n, const char *what)
{
    CHECK_EQ(flyt_write_full(fd, p, n), 0, "sent %s", what);
}

static void read_exactly(int fd, void *p, size_t n, const char *what)
{
    size_t got = 0;
    for (ssize_t k; got < n && (k = read(fd, (char *)p + got, n - got)) > 0;)
        got += (size_t)k;
    CHECK_EQ(got, n, "read %s", what);
}

/* A pre-copy that is partly useless, sent by hand: module 0's image right, module 1's
 * corrupted (refused by its hash), and an image for a module the state does not hold.
 * The state then restores module 0 from the preloaded set and loads module 1 again. */
static void partial_precopy(const char *bin)
{
    th_say("a partial pre-copy: what was preloaded is taken, the rest loaded from the state");
    int fd = patterned_session(bin);
    char state[160], err[512] = "", sock[160];
    snprintf(state, sizeof state, "%s/partial-source.state", dir);
    struct flyt_ckpt_outcome out;
    CHECK_EQ(flyt_ckpt_request(status_path, state, NULL, 0, 60000, &out, err, sizeof err), 0,
             "checkpoint: %s", err);
    CHECK_EQ(out.result, T_SUCCESS, "checkpoint to a file");
    int port = free_port();
    pid_t to = receiver(bin, "partial", port, 20);
    int s = connect_port(port);
    CHECK(s >= 0, "connected to the receiver");
    send_all(s, "FLYTSTM1", 8, "the magic");
    send_all(s, secret, sizeof secret - 1, "the secret");
    struct {
        char     magic[8];
        uint32_t count, reserved;
    } h = {"FLYTPRE", 3, 0};
    memcpy(h.magic, "FLYTPRE1", 8);
    struct pc_entry e[3] = {{module[0], image_size, {0}, 1, sizeof FUNC_NAME},
                            {module[1], image_size, {0}, 0, 0}, {999999, image_size, {0}, 0, 0}};
    unsigned md = 0;
    EVP_Digest(image[0], image_size, e[0].sha256, &md, EVP_sha256(), NULL);
    EVP_Digest(image[1], image_size, e[1].sha256, &md, EVP_sha256(), NULL);
    memcpy(e[2].sha256, e[0].sha256, 32);
    send_all(s, &h, sizeof h, "the pre-copy's header");
    send_all(s, e, sizeof e, "its list");
    send_all(s, FUNC_NAME, sizeof FUNC_NAME, "module 0's function");
    char need[7];
    read_exactly(s, need, sizeof need, "the receiver's needs");
    CHECK(memcmp(need, "NEED\1\1\1", 7) == 0, "it asks for all three (no module cache)");
    unsigned char *bad = malloc(image_size);
    memcpy(bad, image[1], image_size);
    bad[image_size - 1] ^= 0xff;
    send_all(s, image[0], image_size, "image 0");
    send_all(s, bad, image_size, "image 1, corrupted");
    send_all(s, image[0], image_size, "image 0 again, for a module the state lacks");
    free(bad);
    char line[32] = "";
    for (size_t i = 0; i < sizeof line - 1 && read(s, line + i, 1) == 1 && line[i] != '\n'; i++)
        ;
    CHECK(strncmp(line, "PRELOADED 2\n", 12) == 0, "two preloaded: '%s'", line);
    int sf = open(state, O_RDONLY);
    CHECK(sf >= 0, "the state file");
    char buf[65536];
    for (ssize_t n; (n = read(sf, buf, sizeof buf)) > 0;)
        send_all(s, buf, (size_t)n, "the state");
    close(sf);
    shutdown(s, SHUT_WR);
    memset(line, 0, sizeof line);
    read_exactly(s, line, 3, "the verdict");
    CHECK(strcmp(line, "OK\n") == 0, "the receiver took the state: '%s'", line);
    close(s);
    close(fd);
    snprintf(sock, sizeof sock, "%s/partial.sock", dir);
    int tfd = th_connect_to(sock);
    CHECK(tfd >= 0 && th_hello(tfd) == 0, "HELLO to the receiver");
    contents_hold(tfd, "after a partial pre-copy");
    CHECK(log_has("partial", "does not match its hash"), "the corrupted image was refused");
    CHECK(log_has("partial", "2 of 3 kernel image(s) preloaded before the stop"),
          "two images preloaded");
    CHECK(log_has("partial", "1 function(s) looked up"), "module 0's function looked up");
    CHECK(log_has("partial", "1 module(s) taken preloaded, 1 loaded again, 1 preloaded unused"),
          "module 0 taken, module 1 loaded from the state, the stray one unloaded");
    modules_hold(tfd, "after a partial pre-copy");
    close(tfd);
    kill(to, SIGTERM);
    exit_status(to, 10);
    th_server_stop();
}

/* A version-2 pre-copy to a receiver whose module cache holds module 0's image: it says
 * it holds that one (2), asks for module 1's (1), reads only that image and answers at
 * once. (It once took module 0's image from its cache and then also waited for it on the
 * connection: the source, told it was held, sent the state after its wait, whose first
 * bytes were read as the image; the state then had no magic.) */
static void cached_precopy(const char *bin)
{
    th_say("a pre-copy to a receiver whose module cache holds an image: only the other is read");
    char cache[160], path[240], hex[65];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    CHECK_EQ(mkdir(cache, 0700), 0, "a module cache dir");
    struct pc_entry e[2] = {{module[0], image_size, {0}, 1, sizeof FUNC_NAME},
                            {module[1], image_size, {0}, 0, 0}};
    unsigned md = 0;
    EVP_Digest(image[0], image_size, e[0].sha256, &md, EVP_sha256(), NULL);
    EVP_Digest(image[1], image_size, e[1].sha256, &md, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", e[0].sha256[i]);
    snprintf(path, sizeof path, "%s/%s.fatbin", cache, hex);
    FILE *cf = fopen(path, "wb");
    CHECK(cf && fwrite(image[0], 1, image_size, cf) == image_size, "module 0's image cached");
    if (cf)
        fclose(cf);
    int port = free_port();
    pid_t to = receiver_with(bin, "cached", port, 20, "--cache-dir", cache);
    int s = connect_port(port);
    CHECK(s >= 0, "connected to the receiver");
    struct timeval patience = {5, 0}; /* far below the receiver's 20 s: a wait shows */
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
    send_all(s, "FLYTSTM1", 8, "the magic");
    send_all(s, secret, sizeof secret - 1, "the secret");
    struct {
        char     magic[8];
        uint32_t count, nranges;
    } h = {"FLYTPRE", 2, 0};
    memcpy(h.magic, "FLYTPRE2", 8);
    send_all(s, &h, sizeof h, "the pre-copy's header");
    send_all(s, e, sizeof e, "its list");
    send_all(s, FUNC_NAME, sizeof FUNC_NAME, "module 0's function");
    char need[6];
    read_exactly(s, need, sizeof need, "the receiver's needs");
    CHECK(memcmp(need, "NEED\2\1", 6) == 0, "it holds module 0's image and asks for module 1's");
    send_all(s, image[1], image_size, "image 1");
    char line[32] = "";
    for (size_t i = 0; i < sizeof line - 1 && read(s, line + i, 1) == 1 && line[i] != '\n'; i++)
        ;
    CHECK(strncmp(line, "PRELOADED 2\n", 12) == 0,
          "both preloaded, answered without waiting for the held image: '%s'", line);
    close(s);
    kill(to, SIGTERM);
    exit_status(to, 10);
    CHECK(log_has("cached", "1 from the module cache, 1 received"), "one from the cache, one sent");
    unlink(path);
    char file[240];
    DIR *d = opendir(cache); /* module 1's image, stored as it came */
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(file, sizeof file, "%s/%s", cache, de->d_name);
        unlink(file);
    }
    if (d)
        closedir(d);
    CHECK_EQ(rmdir(cache), 0, "the cache dir removed");
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
    snprintf(dir, sizeof dir, "/tmp/flyt-stream-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(status_path, sizeof status_path, "%s/server.status", dir);
    snprintf(secret_path, sizeof secret_path, "%s/secret", dir);
    int sfd = open(secret_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(sfd >= 0 && write(sfd, secret, sizeof secret - 1) == (ssize_t)(sizeof secret - 1),
          "secret file");
    close(sfd);

    for (int i = 0; i < NMOD; i++) {
        image[i] = th_fake_fatbin(&image_size);
        image[i][16] ^= (unsigned char)(i + 1);
    }

    th_say("a receiver that never gets its state exits after its deadline");
    int port = free_port();
    pid_t idle = receiver(bin, "idle", port, 1);
    CHECK_EQ(exit_status(idle, 10), 1, "exit 1 after --restore-timeout 1");
    CHECK(log_has("idle", "no state arrived"), "it says no state arrived");

    setenv("FLYT_PRECOPY_WAIT_S", "2", 1); /* the source's wait for a receiver's loads */
    int fd = patterned_session(bin);

    th_say("a wrong secret: the receiver refuses it and exits; the source carries on");
    port = free_port();
    pid_t wrong = receiver(bin, "wrong", port, 20);
    char err[512] = "";
    char bad[sizeof secret];
    memcpy(bad, secret, sizeof bad);
    bad[0] = 'f';
    CHECK_NE(migrate(port, bad, err, sizeof err), T_SUCCESS, "refused");
    CHECK(strstr(err, "wrong secret") != NULL, "the source hears why: %s", err);
    CHECK_EQ(exit_status(wrong, 10), 1, "the receiver exits 1");
    CHECK(log_has("wrong", "wrong secret"), "the receiver says why");
    contents_hold(fd, "after the refused stream, on the source");

    cut_midway();
    contents_hold(fd, "after the cut stream, on the source");
    served_during_precopy(fd);
    contents_hold(fd, "after the played receiver refused, on the source");
    late_loads();
    contents_hold(fd, "after the late receiver refused, on the source");

    th_say("a state the receiver cannot restore (past its memory quota): the source hears "
           "why before it ends the session, and carries on");
    port = free_port();
    pid_t small = receiver_with(bin, "small", port, 20, "--memory-quota", "65536");
    CHECK_NE(migrate(port, secret, err, sizeof err), T_SUCCESS, "refused");
    CHECK(strstr(err, "memory quota") != NULL, "the source hears why: %s", err);
    CHECK_EQ(exit_status(small, 10), 1, "the receiver exits 1");
    CHECK(log_has("small", "its source keeps the session"), "the receiver says why");
    CHECK(!log_has("small", "listening on"), "it never listened");
    contents_hold(fd, "after the refused restore, on the source");

    th_say("streamed: the receiver serves the session, same pointer and bytes");
    port = free_port();
    pid_t to = receiver(bin, "target", port, 20);
    CHECK_EQ(migrate(port, secret, err, sizeof err), T_SUCCESS, "streamed: %s", err);
    char src_state[160], sock[160];
    snprintf(src_state, sizeof src_state, "%s/source.state", dir);
    CHECK(access(src_state, F_OK) == 0, "the source's file stays as the fallback");
    /* whoever asked stops the source's server as the answer comes: by then the
     * client must hold its SESSION_MOVED, else it sees only a closed socket */
    struct pollfd ready = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&ready, 1, 0), 1, "SESSION_MOVED is at the client before the checkpoint is answered");
    struct th_reply moved;
    CHECK_EQ(th_read_frame(fd, &moved), 0, "the frame reads");
    CHECK_EQ(moved.hdr.op, FLYT_OP_SESSION_MOVED, "it is SESSION_MOVED (op %u)", moved.hdr.op);
    th_reply_free(&moved);
    close(fd);
    snprintf(sock, sizeof sock, "%s/target.sock", dir);
    int tfd = th_connect_to(sock); /* the source was told only once the receiver listened */
    CHECK(tfd >= 0 && th_hello(tfd) == 0, "HELLO to the receiver, at the first try");
    CHECK(log_has("target", "restored before its client"), "restored before its client came");
    contents_hold(tfd, "on the receiver");
    CHECK(log_has("target", "received the session's state"), "the receiver says it took it");
    CHECK(log_has("target", "before the state"), "its device was open before the state came");
    CHECK(log_has("target", "state taken before) started"), "its first client went to that process");
    long preloaded = log_at("target", "2 of 2 kernel image(s) preloaded before the stop");
    long received = log_at("target", "received the session's state");
    CHECK(preloaded >= 0 && received > preloaded,
          "the images were loaded before the state came (the source's stop): %ld, %ld",
          preloaded, received);
    CHECK(log_has("target", "2 module(s) taken preloaded, 0 loaded again, 0 preloaded unused"),
          "the restore loaded no image again");
    CHECK(log_has("target", "2 function(s) looked up"), "their functions looked up before too");
    char held[160];
    snprintf(held, sizeof held, "%zu bytes of kernel images left out of the stream", 2 * image_size);
    CHECK(th_server_log_has(held), "the source left both preloaded images out of the stop's stream");
    snprintf(held, sizeof held, "%zu put in from 2 kernel image(s) held before the stop",
             2 * image_size);
    CHECK(log_has("target", held), "the receiver put them in its copy itself");
    for (int i = 0; i < 500 && !log_has("target", "received state kept in"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    char dst_state[160];
    snprintf(dst_state, sizeof dst_state, "%s/target.state", dir);
    CHECK(same_file(src_state, dst_state), "the receiver's file is the source's, images and all");
    modules_hold(tfd, "on the receiver");
    close(tfd);
    kill(to, SIGTERM);
    exit_status(to, 10);
    th_server_stop();
    warm_process_gone(bin);
    partial_precopy(bin);
    cached_precopy(bin);
    static const char *const left[] = {"partial-source.state", "partial.log", "partial.state",
                                       "cached.log", "cached.state", "cached.state.tmp", "cached.sock",
                                       "partial.sock", "secret", "server.status", "source.state", "idle.log",
                                       "wrong.log", "target.log", "target.state", "target.sock",
                                       "wrong.sock", "idle.sock", "late.log", "late.state",
                                       "late.sock", "small.log", "small.state", "small.sock"};
    for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
        char path[200];
        snprintf(path, sizeof path, "%s/%s", dir, left[i]);
        unlink(path);
    }
    CHECK_EQ(rmdir(dir), 0, "nothing else left in %s", dir);
    th_passed();
    printf("test_server_stream: all checks passed\n");
    return 0;
}
