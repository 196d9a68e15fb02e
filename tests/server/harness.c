/* Helpers shared by the server tests; see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_fatbin.h"
#include "flyt_server_status.h"
#include "flyt_transport.h"

static pid_t server_pid = -1;
static pid_t owner_pid = -1;
static char tmp_dir[64];
static char sock_path[128];
static char log_path[128];
static int passed;
static uint32_t seq_counter = 1;
int32_t th_last_deferred;
uint64_t th_callbacks[64];
int th_ncallbacks;

static void cleanup_files(void)
{
    if (sock_path[0])
        unlink(sock_path);
    if (log_path[0])
        unlink(log_path);
    if (tmp_dir[0])
        rmdir(tmp_dir);
}

void th_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("== ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "  FAIL  watchdog: the test took too long\n";
    if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0) {
        /* nothing to do */
    }
    if (server_pid > 0)
        kill(-server_pid, SIGKILL);
    cleanup_files();
    _exit(2);
}

void th_watchdog(unsigned seconds)
{
    if (seconds == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(0);
        return;
    }
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

static void dump_log(void)
{
    FILE *f = log_path[0] ? fopen(log_path, "r") : NULL;
    if (f == NULL)
        return;
    printf("---- server log ----\n");
    char line[1024];
    while (fgets(line, sizeof line, f))
        fputs(line, stdout);
    printf("---- end of server log ----\n");
    fclose(f);
}

static void at_exit(void)
{
    if (getpid() != owner_pid)
        return;
    if (!passed)
        dump_log();
    th_server_stop();
}

void th_passed(void)
{
    passed = 1;
}

int th_server_log_clean(void)
{
    return !th_server_log_has("by signal") && !th_server_log_has("Sanitizer") &&
           !th_server_log_has("runtime error");
}

/* Lines of the server log containing needle: all counted, or (first) the
 * first one printed and 1 returned. */
static int scan_log(const char *needle, int first)
{
    FILE *f = log_path[0] ? fopen(log_path, "r") : NULL;
    if (f == NULL)
        return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && !(first && n))
        if (strstr(line, needle)) {
            if (first)
                printf("        (server log: %s)\n", strtok(line, "\n"));
            n++;
        }
    fclose(f);
    return n;
}

const char *th_server_log_path(void) { return log_path; }

int th_server_log_has(const char *needle) { return scan_log(needle, 1); }

int th_server_log_count(const char *needle) { return scan_log(needle, 0); }

const char *th_socket_path(void)
{
    return sock_path;
}

int th_server_alive(void)
{
    if (server_pid <= 0)
        return 0;
    int st;
    pid_t r = waitpid(server_pid, &st, WNOHANG);
    if (r == 0)
        return 1;
    if (r == server_pid) {
        if (WIFSIGNALED(st))
            printf("  server died of signal %d\n", WTERMSIG(st));
        else
            printf("  server exited with status %d\n", WEXITSTATUS(st));
        server_pid = -1;
    }
    return 0;
}

void th_server_start(const char *bin, const char *env_assign)
{
    th_server_start_args(bin, env_assign, NULL);
}

const char *th_temp_dir(void)
{
    return tmp_dir;
}

static void make_temp_dir(void)
{
    if (tmp_dir[0])
        return;
    strcpy(tmp_dir, "/tmp/flyt-test-XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        perror("mkdtemp");
        tmp_dir[0] = '\0';
        exit(1);
    }
}

void th_prepare_dir(void)
{
    owner_pid = getpid();
    make_temp_dir();
}

void th_server_start_args(const char *bin, const char *env_assign, const char *const *extra)
{
    owner_pid = getpid();
    make_temp_dir();
    snprintf(sock_path, sizeof sock_path, "%s/s.sock", tmp_dir);
    snprintf(log_path, sizeof log_path, "%s/server.log", tmp_dir);
    static int at_exit_set;
    if (!at_exit_set++)
        atexit(at_exit);
    char listen_arg[160];
    snprintf(listen_arg, sizeof listen_arg, "unix:%s", sock_path);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: stopping it reaches its sessions too */
        int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        if (log >= 0)
            dup2(log, STDERR_FILENO);
        if (env_assign)
            putenv((char *)env_assign);
        const char *argv[64] = {bin, "--backend", "host", "--listen", listen_arg};
        int argc = 5;
        for (int i = 0; extra && extra[i] && argc < 63; i++)
            argv[argc++] = extra[i];
        argv[argc] = NULL;
        execv(bin, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    server_pid = pid;
    printf("started %s (pid %d) on %s\n", bin, (int)pid, listen_arg);

    for (int i = 0; i < 1500; i++) { /* 15 s */
        int fd = th_connect();
        if (fd >= 0) {
            close(fd);
            return;
        }
        if (!th_server_alive()) {
            printf("  FAIL  the server did not start\n");
            exit(1);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("  FAIL  the server never accepted a connection on %s\n", sock_path);
    exit(1);
}

void th_server_stop(void)
{
    if (server_pid > 0) {
        kill(-server_pid, SIGTERM);
        int st, done = 0;
        for (int i = 0; i < 500 && !done; i++) { /* 5 s */
            if (waitpid(server_pid, &st, WNOHANG) == server_pid)
                done = 1;
            else {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        kill(-server_pid, SIGKILL); /* what is left of its group, if anything */
        if (!done)
            waitpid(server_pid, &st, 0);
        server_pid = -1;
    }
    cleanup_files();
    sock_path[0] = log_path[0] = tmp_dir[0] = '\0';
}

int th_connect(void)
{
    return th_connect_to(sock_path);
}

int th_connect_to(const char *sock_path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(sock_path) >= sizeof sa.sun_path) {
        close(fd);
        return -1;
    }
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

uint32_t th_next_seq(void)
{
    return seq_counter++;
}

int th_send(int fd, uint16_t op, uint16_t flags, uint32_t seq, const void *payload, size_t len,
            const void *payload2, size_t len2)
{
    struct flyt_frame_hdr h = {(uint32_t)(len + len2), op, flags, seq, 0};
    struct iovec iov[3] = {{&h, sizeof h}, {(void *)payload, len}, {(void *)payload2, len2}};
    return flyt_writev_full(fd, iov, 3);
}

int th_send_raw_hdr(int fd, uint32_t length, uint16_t op, uint16_t flags, uint32_t seq)
{
    struct flyt_frame_hdr h = {length, op, flags, seq, 0};
    return flyt_write_full(fd, &h, sizeof h);
}

void th_reply_free(struct th_reply *r)
{
    free(r->body);
    r->body = NULL;
}

int th_read_frame(int fd, struct th_reply *r)
{
    memset(r, 0, sizeof *r);
    if (flyt_read_full(fd, &r->hdr, sizeof r->hdr) != 0)
        return (errno == 0 || errno == ECONNRESET || errno == EPIPE) ? -1 : -2;
    if (r->hdr.length > FLYT_MAX_PAYLOAD + 64u) {
        printf("  frame of %u bytes from the server\n", r->hdr.length);
        return -2;
    }
    unsigned char *p = malloc(r->hdr.length ? r->hdr.length : 1);
    if (p == NULL)
        return -2;
    if (flyt_read_full(fd, p, r->hdr.length) != 0) {
        int e = errno;
        free(p);
        return (e == 0 || e == ECONNRESET) ? -1 : -2;
    }
    if (r->hdr.length >= sizeof(struct flyt_reply)) {
        struct flyt_reply rep;
        memcpy(&rep, p, sizeof rep);
        r->result = rep.result;
        r->deferred = rep.deferred;
        r->body_len = r->hdr.length - sizeof rep;
        r->body = malloc(r->body_len ? r->body_len : 1);
        if (r->body)
            memcpy(r->body, p + sizeof rep, r->body_len);
    } else {
        r->result = -1000;
    }
    free(p);
    return 0;
}

int th_call(int fd, uint16_t op, const void *req, size_t req_len, const void *data, size_t data_len,
            struct th_reply *out)
{
    uint32_t seq = th_next_seq();
    struct th_reply r;
    if (th_send(fd, op, 0, seq, req, req_len, data, data_len) != 0) {
        printf("  (%s: send failed: %s)\n", flyt_op_name(op), strerror(errno));
        return -1000;
    }
    for (;;) {
        int rc = th_read_frame(fd, &r);
        if (rc != 0) {
            printf("  (%s: %s)\n", flyt_op_name(op), rc == -1 ? "connection closed" : "no reply");
            return -1000;
        }
        if (r.hdr.op == FLYT_OP_CALLBACK) { /* not a reply: note it, read on */
            struct flyt_msg_callback m;
            if (r.hdr.length == sizeof m && r.hdr.seq == 0 && r.hdr.flags == 0 &&
                th_ncallbacks < (int)(sizeof th_callbacks / sizeof th_callbacks[0])) {
                /* th_read_frame split the payload as if it were a reply */
                memcpy(&m.callback_id, &r.result, 4);
                memcpy((char *)&m.callback_id + 4, &r.deferred, 4);
                memcpy(&m.status, r.body, 4);
                th_callbacks[th_ncallbacks++] = m.status == 0 ? m.callback_id : ~0ull;
            } else {
                printf("  (malformed CALLBACK frame: length %u seq %u flags %u)\n", r.hdr.length, r.hdr.seq,
                       r.hdr.flags);
                th_callbacks[0] = ~0ull;
            }
            th_reply_free(&r);
            /* as a 2.2 client: the host function "ran" (the server holds
             * its stream until it hears so) */
            flyt_req_none done = {0};
            th_post(fd, FLYT_OP_HOST_FUNC_DONE, &done, sizeof done, NULL, 0);
            continue;
        }
        break;
    }
    if (r.hdr.op != op || r.hdr.seq != seq || r.hdr.flags != FLYT_F_REPLY ||
        r.hdr.length < sizeof(struct flyt_reply)) {
        printf("  (%s: bad reply header: op %u seq %u (want %u) flags %u length %u)\n", flyt_op_name(op),
               r.hdr.op, r.hdr.seq, seq, r.hdr.flags, r.hdr.length);
        th_reply_free(&r);
        return -1000;
    }
    th_last_deferred = r.deferred;
    int result = r.result;
    if (out)
        *out = r;
    else
        th_reply_free(&r);
    return result;
}

int th_call_rep(int fd, uint16_t op, const void *req, size_t req_len, const void *data,
                size_t data_len, void *rep, size_t rep_len)
{
    struct th_reply r;
    int result = th_call(fd, op, req, req_len, data, data_len, &r);
    if (result == -1000)
        return result;
    memset(rep, 0, rep_len);
    if (r.body_len < rep_len && result == 0) {
        printf("  (%s: reply body %zu bytes, want %zu)\n", flyt_op_name(op), r.body_len, rep_len);
        result = -1000;
    } else {
        memcpy(rep, r.body, r.body_len < rep_len ? r.body_len : rep_len);
    }
    th_reply_free(&r);
    return result;
}

int th_call_fd(int fd, uint16_t op, const void *req, size_t req_len, int pass_fd, void *rep,
               size_t rep_len)
{
    struct flyt_frame_hdr h = {(uint32_t)req_len, op, 0, th_next_seq(), 0};
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)req, req_len}};
    struct th_reply r;
    memset(rep, 0, rep_len);
    int sent = pass_fd >= 0 ? flyt_writev_full_fd(fd, iov, 2, pass_fd) : flyt_writev_full(fd, iov, 2);
    if (sent != 0 || th_read_frame(fd, &r) != 0)
        return -1000;
    int result = r.result;
    memcpy(rep, r.body, r.body_len < rep_len ? r.body_len : rep_len);
    th_reply_free(&r);
    return result;
}

int th_memfd(uint64_t size, int seal)
{
    int fd = memfd_create("test-shared", MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0));
    CHECK_GE(fd, 0, "a memfd of %llu bytes", (unsigned long long)size);
    CHECK_EQ(ftruncate(fd, (off_t)size), 0, "a memfd of %llu bytes", (unsigned long long)size);
    if (seal)
        CHECK_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0, "sealed");
    return fd;
}

int th_post(int fd, uint16_t op, const void *req, size_t req_len, const void *data, size_t data_len)
{
    return th_send(fd, op, FLYT_F_NOREPLY, th_next_seq(), req, req_len, data, data_len);
}

int th_hello(int fd)
{
    flyt_req_hello h;
    memset(&h, 0, sizeof h);
    h.magic = FLYT_PROTO_MAGIC;
    h.major = FLYT_PROTO_MAJOR;
    h.minor = FLYT_PROTO_MINOR;
    h.client_pid = (uint32_t)getpid();
    snprintf(h.client_host, sizeof h.client_host, "test");
    flyt_rep_hello rep;
    int rc = th_call_rep(fd, FLYT_OP_HELLO, &h, sizeof h, NULL, 0, &rep, sizeof rep);
    if (rc != 0)
        return rc;
    if (rep.major != FLYT_PROTO_MAJOR || rep.device_count != 1 ||
        strncmp(rep.backend, "host", sizeof rep.backend) != 0) {
        printf("  (HELLO reply: major %u devices %u backend %.32s)\n", rep.major, rep.device_count,
               rep.backend);
        return -1000;
    }
    return 0;
}

int th_server_works(void)
{
    if (!th_server_alive())
        return 0;
    int fd = th_connect();
    if (fd < 0)
        return 0;
    int ok = 0;
    if (th_hello(fd) == 0) {
        flyt_req_none req = {0};
        flyt_rep_i32 rep;
        ok = th_call_rep(fd, FLYT_OP_DEVICE_COUNT, &req, sizeof req, NULL, 0, &rep, sizeof rep) == 0 &&
             rep.value == 1;
    }
    close(fd);
    return ok;
}

int th_dtoh(int fd, uint64_t src, uint64_t size, void *buf, int *had_data)
{
    flyt_req_memcpy req = {0, src, size, FLYT_STREAM_DEFAULT};
    struct th_reply r;
    *had_data = 0;
    int result = th_call(fd, FLYT_OP_MEMCPY_DTOH, &req, sizeof req, NULL, 0, &r);
    if (result == -1000)
        return result;
    size_t head = sizeof(flyt_rep_none);
    if (r.body_len == head) {
        if (result == 0 && size != 0) {
            printf("  (MEMCPY_DTOH: success without data)\n");
            result = -1000;
        }
    } else if (r.body_len == head + size + sizeof(struct flyt_reply)) {
        struct flyt_reply tail;
        memcpy(buf, r.body + head, size);
        memcpy(&tail, r.body + head + size, sizeof tail);
        *had_data = 1;
        if (result == 0)
            result = tail.result;
    } else {
        printf("  (MEMCPY_DTOH: reply body of %zu bytes for %llu)\n", r.body_len,
               (unsigned long long)size);
        result = -1000;
    }
    th_reply_free(&r);
    return result;
}

int th_alloc(int fd, uint64_t size, uint64_t *ptr)
{
    flyt_req_mem_alloc req = {size, FLYT_STREAM_DEFAULT, 0};
    flyt_rep_u64 rep;
    int rc = th_call_rep(fd, FLYT_OP_MEM_ALLOC, &req, sizeof req, NULL, 0, &rep, sizeof rep);
    *ptr = rep.value;
    return rc;
}

int th_free(int fd, uint64_t ptr)
{
    flyt_req_handle req = {ptr};
    return th_call(fd, FLYT_OP_MEM_FREE, &req, sizeof req, NULL, 0, NULL);
}

int th_htod(int fd, uint64_t dst, const void *data, uint64_t size)
{
    flyt_req_memcpy req = {dst, 0, size, FLYT_STREAM_DEFAULT};
    return th_call(fd, FLYT_OP_MEMCPY_HTOD, &req, sizeof req, data, size, NULL);
}

unsigned char *th_fake_fatbin(size_t *size)
{
    const size_t body = 64;
    unsigned char *img = calloc(1, FLYT_FAKE_FATBIN_HEADER + body);
    *size = flyt_fake_fatbin(img, body, 3);
    return img;
}

int th_module_load(int fd, const void *image, size_t size, uint64_t *module)
{
    flyt_req_module_load req;
    memset(&req, 0, sizeof req);
    unsigned int mdlen = 0;
    EVP_Digest(image, size, req.sha256, &mdlen, EVP_sha256(), NULL);
    req.size = size;
    req.has_data = 0;
    flyt_rep_module_load rep;
    int rc = th_call_rep(fd, FLYT_OP_MODULE_LOAD, &req, sizeof req, NULL, 0, &rep, sizeof rep);
    if (rc == 0 && rep.need_data) {
        req.has_data = 1;
        rc = th_call_rep(fd, FLYT_OP_MODULE_LOAD, &req, sizeof req, image, size, &rep, sizeof rep);
        if (rc == 0 && rep.need_data)
            rc = -1000;
    }
    *module = rep.module;
    return rc;
}

int th_run_server(const char *bin, const char *const *args, char *out, size_t outlen)
{
    char log[] = "/tmp/flyt-run-XXXXXX";
    int lfd = mkstemp(log);
    if (lfd < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(lfd, 2);
        const char *argv[32] = {bin};
        int n = 1;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ssize_t n = out && outlen ? pread(lfd, out, outlen - 1, 0) : 0;
    if (out && outlen)
        out[n > 0 ? n : 0] = '\0';
    close(lfd);
    unlink(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

double th_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int th_sessions_live(void)
{
    return th_server_log_count(" started for ") - th_server_log_count(" ended (exit status") -
           th_server_log_count(" ended with exit status") - th_server_log_count(" killed by signal");
}

double th_wait_no_session(double seconds)
{
    double t0 = th_now_s();
    while (th_now_s() - t0 < seconds) {
        if (th_sessions_live() == 0)
            return th_now_s() - t0;
        usleep(20 * 1000);
    }
    return -1;
}

void th_status_page(const char *status_file, uint32_t *sessions, uint64_t *used)
{
    struct flyt_server_status st;
    memset(&st, 0, sizeof st);
    int fd = open(status_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || pread(fd, &st, sizeof st, 0) != (ssize_t)sizeof st)
        memset(&st, 0xff, sizeof st); /* unreadable: never looks settled */
    if (fd >= 0)
        close(fd);
    *sessions = st.sessions;
    *used = st.memory_used;
}

const char *th_server_bin(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flyt-server\n", argv[0]);
        exit(2);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    return argv[1];
}

int th_ckpt_main(int argc, char **argv, const char *tag, const char **bin, char *dir,
                 char *status_path, char *state_path)
{
    *bin = th_server_bin(argc, argv);
    th_watchdog(120);
    snprintf(dir, 64, "/tmp/flyt-%s-XXXXXX", tag);
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(status_path, 128, "%s/server.status", dir);
    snprintf(state_path, 128, "%s/session.state", dir);
    const char *args[] = {"--status-file", status_path, NULL};
    th_server_start_args(*bin, NULL, args);
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO");
    return fd;
}

void th_ckpt_restore(const char *bin, const char *status_path, const char *state_path)
{
    const char *args[] = {"--restore", state_path, "--status-file", status_path, NULL};
    th_server_start_args(bin, NULL, args);
}

int th_ckpt_resume(const char *what)
{
    int fd = th_connect();
    CHECK(fd >= 0 && th_hello(fd) == 0, "HELLO resumes the %s", what);
    return fd;
}

void th_ckpt_end(const char *dir, const char *status_path, const char *state_path)
{
    unlink(state_path);
    unlink(status_path);
    rmdir(dir);
    th_passed();
}
