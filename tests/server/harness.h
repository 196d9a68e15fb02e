/*
 * Shared helpers of the server tests: a CHECK macro, starting and stopping a
 * flyt-server on a Unix socket in a temporary directory, and raw frames over
 * a plain socket (flyt_proto.h structs, no client library).
 */
#ifndef FLYT_TEST_HARNESS_H
#define FLYT_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "flyt_proto.h"

/* CUresult values the tests look for (the wire carries driver codes). */
#define T_SUCCESS           0
#define T_INVALID_VALUE     1
#define T_OUT_OF_MEMORY     2
#define T_INVALID_DEVICE    101
#define T_INVALID_IMAGE     200
#define T_INVALID_HANDLE    400
#define T_NOT_SUPPORTED     801

/* A test's one argument, the flyt-server binary (usage and exit 2 without
 * it); stdout is made line-buffered and SIGPIPE ignored. */
const char *th_server_bin(int argc, char **argv);

/* Heading of a group of checks. */
void th_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Arms alarm(seconds): on expiry the server is killed, the temporary
 * directory removed and the test exits 2. Child processes call it with 0 to
 * get the default (just die) behaviour back. */
void th_watchdog(unsigned seconds);

/* Starts `bin --backend host --listen unix:DIR/s.sock` with env_assign
 * ("NAME=value", or NULL) added to its environment, in a fresh temp dir,
 * and waits until it accepts connections. Cleanup is registered atexit. */
void th_server_start(const char *bin, const char *env_assign);
/* The same with more arguments after --listen (NULL-terminated list). */
void th_server_start_args(const char *bin, const char *env_assign, const char *const *extra);
/* Makes the temporary directory now (before a start, to put files in it);
 * th_temp_dir names it ("" before). Removed at stop when empty. */
void th_prepare_dir(void);
const char *th_temp_dir(void);
void th_server_stop(void);
/* The server's stderr goes to a log in the temp dir, printed if the test
 * fails. th_server_log_has: whether a line contains needle (printed). */
int th_server_log_has(const char *needle);
/* The server log's path ("" before a start). */
const char *th_server_log_path(void);
/* How many lines of the server log contain needle (quiet). */
int th_server_log_count(const char *needle);
/* No session died of a signal and no sanitizer spoke (server log). */
int th_server_log_clean(void);
/* Call before a successful exit (else the log is printed at exit). */
void th_passed(void);
int th_server_alive(void);
const char *th_socket_path(void);

/* Seconds on the monotonic clock. */
double th_now_s(void);
/* Sessions the server's log shows started and not yet ended. */
int th_sessions_live(void);
/* Waits up to seconds until no session is left; the seconds it took, or -1. */
double th_wait_no_session(double seconds);
/* The admitted sessions and their memory on the status page status_file
 * (--status-file); all ones when it cannot be read. */
void th_status_page(const char *status_file, uint32_t *sessions, uint64_t *used);
/* The start of a checkpoint test's main: one argument, the server binary
 * (*bin; else the usage and exit 2), the watchdog (120 s), SIGPIPE ignored,
 * a fresh directory /tmp/flyt-TAG-XXXXXX in dir (64 bytes) with its status
 * page's and state file's paths (128 bytes each), a server started with
 * that --status-file, and a connection to it that said HELLO (returned). */
int th_ckpt_main(int argc, char **argv, const char *tag, const char **bin, char *dir,
                 char *status_path, char *state_path);
/* A server started with `--restore state_path --status-file status_path`. */
void th_ckpt_restore(const char *bin, const char *status_path, const char *state_path);
/* A connection to it whose HELLO resumes the restored session (checked,
 * named "HELLO resumes the <what>"). */
int th_ckpt_resume(const char *what);
/* Its end: the files and the directory removed, th_passed. */
void th_ckpt_end(const char *dir, const char *status_path, const char *state_path);

/* Runs `bin args...` to its end (a server expected to refuse to start) and
 * returns its exit status (128 + signal when killed); its stderr in out
 * (NUL-terminated, cut to outlen), or dropped when out is NULL. */
int th_run_server(const char *bin, const char *const *args, char *out, size_t outlen);

/* A connected socket with 10 s send/receive timeouts, or -1. */
int th_connect(void);
/* The same to another server's Unix socket. */
int th_connect_to(const char *sock_path);

/* One frame. payload2 (may be NULL) is sent right after payload. */
int th_send(int fd, uint16_t op, uint16_t flags, uint32_t seq, const void *payload, size_t len,
            const void *payload2, size_t len2);
/* Sends a frame whose header length is `length` but with only the given
 * bytes following (for malformed frames). */
int th_send_raw_hdr(int fd, uint32_t length, uint16_t op, uint16_t flags, uint32_t seq);

/* A reply as read from the socket. */
struct th_reply {
    struct flyt_frame_hdr hdr;
    int32_t result, deferred;
    unsigned char *body; /* after struct flyt_reply; malloc'd */
    size_t body_len;
};
void th_reply_free(struct th_reply *r);

/* Reads one whole frame. 0 on success; -1 on EOF or reset (the server ended
 * the session); -2 on timeout or another error. */
int th_read_frame(int fd, struct th_reply *r);

/* Request with the next sequence number, then its reply, checked for op,
 * seq and reply flag. Returns the reply's result, or -1000 when no proper
 * reply came (the connection then is closed or out of step). */
int th_call(int fd, uint16_t op, const void *req, size_t req_len, const void *data, size_t data_len,
            struct th_reply *out);
/* Like th_call but also copies the op's reply struct into rep (rep_len bytes). */
int th_call_rep(int fd, uint16_t op, const void *req, size_t req_len, const void *data,
                size_t data_len, void *rep, size_t rep_len);
/* Sends a NOREPLY request. 0 on success. */
int th_post(int fd, uint16_t op, const void *req, size_t req_len, const void *data, size_t data_len);
/* A request with the descriptor pass_fd (SCM_RIGHTS; -1: none), as HOST_MAP sends
 * its memfd; the result (-1000 on I/O failure), up to rep_len bytes of the
 * reply into rep (zeroed first). */
int th_call_fd(int fd, uint16_t op, const void *req, size_t req_len, int pass_fd, void *rep,
               size_t rep_len);
/* A memfd of size bytes, sealed against shrinking and growing when seal. */
int th_memfd(uint64_t size, int seal);
uint32_t th_next_seq(void);

/* HELLO with the right magic and version; returns 0 when accepted. */
int th_hello(int fd);
/* A fresh connection, HELLO and DEVICE_COUNT == 1: the server works. */
int th_server_works(void);

/* The deferred field of the last reply th_call read. */
extern int32_t th_last_deferred;
/* callback_ids of the CALLBACK frames th_call met while waiting for replies
 * (~0 for one whose status was not 0). */
extern uint64_t th_callbacks[64];
extern int th_ncallbacks;

/* MEMCPY_DTOH of size bytes into buf. Returns the final copy result
 * (-1000 when the reply was malformed or missing). *had_data says whether
 * the reply carried data. */
int th_dtoh(int fd, uint64_t src, uint64_t size, void *buf, int *had_data);

/* MEM_ALLOC / MEM_FREE / MEMCPY_HTOD conveniences. */
int th_alloc(int fd, uint64_t size, uint64_t *ptr);
int th_free(int fd, uint64_t ptr);
int th_htod(int fd, uint64_t dst, const void *data, uint64_t size);

/* A minimal well-formed fatbinary image for MODULE_LOAD (malloc'd). */
unsigned char *th_fake_fatbin(size_t *size);
/* MODULE_LOAD with the hash handshake; returns the result, module in *module. */
int th_module_load(int fd, const void *image, size_t size, uint64_t *module);

#endif
