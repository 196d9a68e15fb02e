/* TLS on a data-plane connection: see flyt_tls.h and docs/tls.md. */
#include "flyt_tls.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "flyt_token.h"

/* ---- libssl, loaded on first use ----
 * Only libssl's functions go through this table (the client library links
 * libcrypto already); each keeps its declared type. */
#define FLYT_SSL_FUNCS(F)                                                                     \
    F(OPENSSL_init_ssl) F(TLS_client_method) F(TLS_server_method) F(SSL_CTX_new)              \
    F(SSL_CTX_free) F(SSL_CTX_ctrl) F(SSL_CTX_set_options) F(SSL_CTX_set_verify)              \
    F(SSL_CTX_load_verify_locations) F(SSL_CTX_set_default_verify_paths)                      \
    F(SSL_CTX_use_certificate_chain_file) F(SSL_CTX_use_PrivateKey)                           \
    F(SSL_CTX_check_private_key) F(SSL_CTX_set_num_tickets) F(SSL_new) F(SSL_free)            \
    F(SSL_set_bio) F(SSL_ctrl) F(SSL_set1_host) F(SSL_get0_param) F(SSL_connect) F(SSL_accept) \
    F(SSL_read_ex) F(SSL_write_ex) F(SSL_get_error) F(SSL_has_pending)                        \
    F(SSL_get_verify_result) F(SSL_get_wbio) F(SSL_get_rbio) F(SSL_get_version)              \
    F(SSL_get_current_cipher) F(SSL_CIPHER_get_name) F(SSL_CTX_set_default_read_buffer_len)

static struct {
#define F(name) __typeof__(&name) name;
    FLYT_SSL_FUNCS(F)
#undef F
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_error[512]; /* empty when loaded */

static void lib_load(void)
{
    const char *path = getenv("FLYT_TLS_LIBSSL"); /* another build, or none (tests) */
    if (path == NULL || *path == '\0')
        path = "libssl.so.3";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(lib_error, sizeof lib_error, "TLS needs OpenSSL 3 (%s): %s", path, dlerror());
        return;
    }
#define F(name)                                                                               \
    if ((*(void **)&lib.name = dlsym(h, #name)) == NULL) {                                    \
        snprintf(lib_error, sizeof lib_error, "TLS needs OpenSSL 3: %s has no %s", path, #name); \
        return;                                                                               \
    }
    FLYT_SSL_FUNCS(F)
#undef F
    lib.OPENSSL_init_ssl(0, NULL);
}

static int lib_ready(char *err, size_t errlen)
{
    pthread_once(&lib_once, lib_load);
    if (lib_error[0] == '\0')
        return 0;
    snprintf(err, errlen, "%s", lib_error);
    return -1;
}

/* The reason OpenSSL queued last, or what. */
static void ssl_reason(char *err, size_t errlen, const char *what)
{
    unsigned long e = 0, last;
    while ((last = ERR_get_error()) != 0)
        e = last;
    char text[256] = "";
    if (e)
        ERR_error_string_n(e, text, sizeof text);
    snprintf(err, errlen, "%s%s%s", what, e ? ": " : "", text);
}

/* ---- contexts ---- */

struct flyt_tls_ctx {
    SSL_CTX *ssl_ctx;
    int      server;
};

/* One recv brings many records: fewer system calls on bulk copies. */
#define READ_AHEAD_BYTES (256u << 10)

/* Bulk data: records read ahead in large batches (fewer syscalls), writes
 * that may end after some records (so a full socket releases the mutex),
 * TLS 1.2 at least, kTLS where the kernel has it. */
static SSL_CTX *new_ctx(int server, char *err, size_t errlen)
{
    if (lib_ready(err, errlen) != 0)
        return NULL;
    SSL_CTX *c = lib.SSL_CTX_new(server ? lib.TLS_server_method() : lib.TLS_client_method());
    if (c == NULL) {
        ssl_reason(err, errlen, "cannot make a TLS context");
        return NULL;
    }
    lib.SSL_CTX_set_options(c, SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    lib.SSL_CTX_ctrl(c, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
    lib.SSL_CTX_ctrl(c, SSL_CTRL_MODE,
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
    lib.SSL_CTX_ctrl(c, SSL_CTRL_SET_READ_AHEAD, 1, NULL);
    lib.SSL_CTX_set_default_read_buffer_len(c, READ_AHEAD_BYTES);
    return c;
}

static flyt_tls_ctx *wrap_ctx(SSL_CTX *c, int server)
{
    flyt_tls_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL) {
        lib.SSL_CTX_free(c);
        return NULL;
    }
    ctx->ssl_ctx = c;
    ctx->server = server;
    return ctx;
}

static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* The key from a file that must be the owner's alone. */
static int use_key(SSL_CTX *c, const char *key_file, char *err, size_t errlen)
{
    char why[512];
    FILE *f = flyt_secret_open(key_file, 0077, why, sizeof why);
    if (f == NULL) {
        snprintf(err, errlen, "--tls-key: %s", why);
        return -1;
    }
    EVP_PKEY *key = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
    fclose(f);
    int ok = key != NULL && lib.SSL_CTX_use_PrivateKey(c, key) == 1;
    EVP_PKEY_free(key);
    if (!ok) {
        char what[600];
        snprintf(what, sizeof what, "--tls-key %s: no usable unencrypted PEM private key",
                 key_file);
        ssl_reason(err, errlen, what);
    }
    return ok ? 0 : -1;
}

flyt_tls_ctx *flyt_tls_server_ctx(const char *cert_file, const char *key_file, char *err,
                                  size_t errlen)
{
    SSL_CTX *c = new_ctx(1, err, errlen);
    if (c == NULL)
        return NULL;
    char what[600];
    int ok = 0;
    if (lib.SSL_CTX_use_certificate_chain_file(c, cert_file) != 1) {
        snprintf(what, sizeof what, "--tls-cert %s: no PEM certificate chain", cert_file);
        ssl_reason(err, errlen, what);
    } else if (use_key(c, key_file, err, errlen) != 0) {
        /* err says why */
    } else if (lib.SSL_CTX_check_private_key(c) != 1) {
        snprintf(what, sizeof what, "--tls-key %s is not the key of --tls-cert %s", key_file,
                 cert_file);
        ssl_reason(err, errlen, what);
    } else {
        ok = 1;
    }
    if (!ok) {
        lib.SSL_CTX_free(c);
        return NULL;
    }
    /* no session tickets: nothing to resume (one connection a session), and a
     * kTLS receiver could not take them */
    lib.SSL_CTX_set_num_tickets(c, 0);
    return wrap_ctx(c, 1);
}

flyt_tls_ctx *flyt_tls_client_ctx(const char *ca_file, char *err, size_t errlen)
{
    SSL_CTX *c = new_ctx(0, err, errlen);
    if (c == NULL)
        return NULL;
    int ok = ca_file ? lib.SSL_CTX_load_verify_locations(c, ca_file, NULL) == 1
                     : lib.SSL_CTX_set_default_verify_paths(c) == 1;
    if (!ok) {
        char what[600];
        snprintf(what, sizeof what, "cannot load the CA file %s (FLYT_TLS_CA)",
                 ca_file ? ca_file : "(system default)");
        ssl_reason(err, errlen, what);
        lib.SSL_CTX_free(c);
        return NULL;
    }
    lib.SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    return wrap_ctx(c, 0);
}

void flyt_tls_ctx_free(flyt_tls_ctx *ctx)
{
    if (ctx == NULL)
        return;
    lib.SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

/* ---- sessions ---- */

#define STAGE_BYTES 16384        /* one full record: small pieces of a writev are gathered */
#define WRITE_MAX   (256u << 10) /* per call, so a reader gets the mutex between */
#define WRITE_BUFFER_BYTES (256 << 10) /* records gathered into one send */

struct flyt_tls {
    SSL            *ssl;
    int             fd;
    int             timeout_ms;
    pthread_mutex_t mu;
    int             buffered; /* OpenSSL holds unread input: set by the reader under mu */
    char            stage[STAGE_BYTES]; /* used by the one writer at a time */
};

static int set_blocking(int fd, int blocking)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    return fcntl(fd, F_SETFL, blocking ? fl & ~O_NONBLOCK : fl | O_NONBLOCK);
}

/* Waits until fd is ready for what OpenSSL wants (ssl_error). */
static int wait_ready(int fd, int ssl_error, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN};
    int n;
    do {
        n = poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
    } while (n < 0 && errno == EINTR);
    if (n == 0)
        errno = EAGAIN;
    return n > 0 ? 0 : -1;
}

enum { IO_READ, IO_WRITE };

/* One SSL_read_ex or SSL_write_ex under the mutex, waiting for the socket
 * while OpenSSL wants it (unless !wait: then -2). Bytes moved, 0 at the end
 * of the stream (errno 0), -1 on error (errno set). */
static long io_once(flyt_tls *t, int dir, void *buf, size_t len, int wait)
{
    for (;;) {
        size_t done = 0;
        pthread_mutex_lock(&t->mu);
        ERR_clear_error();
        int ok = dir == IO_WRITE ? lib.SSL_write_ex(t->ssl, buf, len, &done)
                                 : lib.SSL_read_ex(t->ssl, buf, len, &done);
        int saved = errno;
        int e = ok ? SSL_ERROR_NONE : lib.SSL_get_error(t->ssl, 0);
        /* after a write too: a TLS 1.2 write may read (no renegotiation is offered, but a
         * peer's handshake record could still arrive with data behind it) */
        __atomic_store_n(&t->buffered, lib.SSL_has_pending(t->ssl), __ATOMIC_RELAXED);
        pthread_mutex_unlock(&t->mu);
        if (ok)
            return (long)done;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (!wait)
                return -2;
            if (wait_ready(t->fd, e, t->timeout_ms) != 0)
                return -1;
            continue;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
            errno = 0;
            return 0;
        }
        ERR_clear_error();
        errno = e == SSL_ERROR_SYSCALL && saved ? saved : EPROTO;
        return -1;
    }
}

/* Reads wait for the socket without the mutex while OpenSSL holds no input,
 * so a writer on another thread is not held up by a read that would block
 * (each round trip took five futex calls and a failed read before). */
long flyt_tls_recv_some(flyt_tls *t, void *buf, size_t cap)
{
    if (!__atomic_load_n(&t->buffered, __ATOMIC_RELAXED) && wait_ready(t->fd, SSL_ERROR_WANT_READ, t->timeout_ms) != 0)
        return -1;
    long n = io_once(t, IO_READ, buf, cap, 1);
    /* records already read ahead come along (each is at most 16 KiB) */
    while (n > 0 && (size_t)n < cap && __atomic_load_n(&t->buffered, __ATOMIC_RELAXED)) {
        long more = io_once(t, IO_READ, (char *)buf + n, cap - (size_t)n, 0);
        if (more <= 0)
            break;
        n += more;
    }
    return n;
}

int flyt_tls_read_full(flyt_tls *t, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        long n = io_once(t, IO_READ, p, len, 1);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_all(flyt_tls *t, const char *p, size_t len)
{
    while (len > 0) {
        long n = io_once(t, IO_WRITE, (void *)p, len < WRITE_MAX ? len : WRITE_MAX, 1);
        if (n <= 0) {
            if (n == 0)
                errno = EPIPE;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What the write buffer holds goes to the socket: after each whole frame, so a
 * frame's records leave in one send, not one send per 16 KiB record. */
static int flush_out(flyt_tls *t)
{
    for (;;) {
        pthread_mutex_lock(&t->mu);
        BIO *w = lib.SSL_get_wbio(t->ssl);
        errno = 0;
        int ok = BIO_flush(w) > 0;
        int retry = !ok && BIO_should_retry(w);
        int saved = errno;
        pthread_mutex_unlock(&t->mu);
        if (ok)
            return 0;
        if (!retry) {
            errno = saved ? saved : EPIPE;
            return -1;
        }
        if (wait_ready(t->fd, SSL_ERROR_WANT_WRITE, t->timeout_ms) != 0)
            return -1;
    }
}

/* Small pieces (frame headers, request structs) go out in the record of the
 * bytes after them, not in records of their own; a large piece goes straight. */
int flyt_tls_writev_full(flyt_tls *t, struct iovec *iov, int iovcnt)
{
    size_t staged = 0;
    for (int i = 0; i < iovcnt; i++) {
        const char *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        while (n > 0) {
            if (staged == 0 && n >= STAGE_BYTES) {
                size_t k = n - n % STAGE_BYTES;
                if (write_all(t, p, k) != 0)
                    return -1;
                p += k;
                n -= k;
                continue;
            }
            size_t k = n < STAGE_BYTES - staged ? n : STAGE_BYTES - staged;
            memcpy(t->stage + staged, p, k);
            staged += k;
            p += k;
            n -= k;
            if (staged == STAGE_BYTES) {
                if (write_all(t, t->stage, staged) != 0)
                    return -1;
                staged = 0;
            }
        }
        iov[i].iov_len = 0;
    }
    if (staged && write_all(t, t->stage, staged) != 0)
        return -1;
    return flush_out(t);
}

int flyt_tls_pending(flyt_tls *t)
{
    return __atomic_load_n(&t->buffered, __ATOMIC_RELAXED);
}

void flyt_tls_set_timeout(flyt_tls *t, int timeout_ms)
{
    t->timeout_ms = timeout_ms;
}

void flyt_tls_describe(flyt_tls *t, char *out, size_t outlen)
{
    if (t == NULL) {
        snprintf(out, outlen, "kernel TLS");
        return;
    }
    pthread_mutex_lock(&t->mu);
    snprintf(out, outlen, "%s %s", lib.SSL_get_version(t->ssl),
             lib.SSL_CIPHER_get_name(lib.SSL_get_current_cipher(t->ssl)));
    pthread_mutex_unlock(&t->mu);
}

void flyt_tls_free(flyt_tls *t)
{
    if (t == NULL)
        return;
    lib.SSL_free(t->ssl);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* Why a handshake failed, in words an operator can act on. */
static void handshake_reason(flyt_tls *t, int server, char *err, size_t errlen)
{
    long v = server ? X509_V_OK : lib.SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK) {
        ERR_clear_error();
        snprintf(err, errlen, "the server's certificate was not accepted: %s (is FLYT_TLS_CA "
                 "the CA that signed it, and does it name this host?)",
                 X509_verify_cert_error_string(v));
    } else if (ERR_peek_error() == 0 && errno == 0) {
        snprintf(err, errlen, "the peer closed the connection during the TLS handshake%s",
                 server ? "" : " (is it a TLS listener? flyt-server --tls-cert)");
    } else if (ERR_peek_error() == 0) {
        snprintf(err, errlen, "TLS handshake: %s", strerror(errno));
    } else {
        ssl_reason(err, errlen, "TLS handshake failed");
    }
}

/* Either both directions are in the kernel (the session is dropped: the
 * kernel holds its keys, and the socket is read and written plainly), or
 * OpenSSL carries the data. */
static int finish(flyt_tls *t, flyt_tls **out)
{
    int kernel = BIO_get_ktls_send(lib.SSL_get_wbio(t->ssl)) &&
                 BIO_get_ktls_recv(lib.SSL_get_rbio(t->ssl));
    t->buffered = lib.SSL_has_pending(t->ssl); /* the first frame may have come with the handshake */
    *out = t;
    if (!kernel)
        return 0;
    int fd = t->fd;
    flyt_tls_free(t);
    *out = NULL;
    return set_blocking(fd, 1);
}

/* Reads straight from the socket; writes through a buffer flushed once per
 * frame (flush_out). Both hold the socket BIO, hence its second reference. */
static int attach_socket(SSL *ssl, int fd)
{
    BIO *sock = BIO_new_socket(fd, BIO_NOCLOSE), *buf = BIO_new(BIO_f_buffer());
    if (sock == NULL || buf == NULL || BIO_set_write_buffer_size(buf, WRITE_BUFFER_BYTES) != 1 ||
        BIO_up_ref(sock) != 1) {
        BIO_free(sock);
        BIO_free(buf);
        return -1;
    }
    lib.SSL_set_bio(ssl, sock, BIO_push(buf, sock));
    return 0;
}

static flyt_tls *new_session(flyt_tls_ctx *ctx, int fd, int timeout_ms, char *err, size_t errlen)
{
    flyt_tls *t = calloc(1, sizeof *t);
    if (t == NULL || (t->ssl = lib.SSL_new(ctx->ssl_ctx)) == NULL ||
        attach_socket(t->ssl, fd) != 0 || set_blocking(fd, 0) != 0) {
        ssl_reason(err, errlen, "cannot start a TLS session");
        if (t && t->ssl)
            lib.SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    t->fd = fd;
    t->timeout_ms = timeout_ms;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

static int run_handshake(flyt_tls *t, int server, flyt_tls **out, char *err, size_t errlen)
{
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int rc = server ? lib.SSL_accept(t->ssl) : lib.SSL_connect(t->ssl);
        if (rc == 1)
            return finish(t, out);
        int e = lib.SSL_get_error(t->ssl, rc);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
            wait_ready(t->fd, e, t->timeout_ms) == 0)
            continue;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            snprintf(err, errlen, "TLS handshake: no answer in time");
        else
            handshake_reason(t, server, err, errlen);
        flyt_tls_free(t);
        return -1;
    }
}

/* A TLS client opens with a handshake record (22); anything else is a plain
 * client, told apart before OpenSSL answers it with an alert. */
static int plain_client(int fd, int timeout_ms)
{
    unsigned char first = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1) <= 0)
        return 0;
    return recv(fd, &first, 1, MSG_PEEK) == 1 && first != 22;
}

int flyt_tls_accept(flyt_tls_ctx *ctx, int fd, int timeout_ms, flyt_tls **out, char *err,
                    size_t errlen)
{
    if (plain_client(fd, timeout_ms)) {
        snprintf(err, errlen, "a plain (not TLS) client on a TLS listener: refused (it must "
                 "connect with tls://HOST:PORT)");
        return -1;
    }
    flyt_tls *t = new_session(ctx, fd, timeout_ms, err, errlen);
    return t ? run_handshake(t, 1, out, err, errlen) : -1;
}

/* The certificate must name host: as an IP address or a DNS name (also
 * sent as SNI). */
static int expect_host(flyt_tls *t, const char *host)
{
    unsigned char ip[16];
    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(lib.SSL_get0_param(t->ssl), host) == 1 ? 0 : -1;
    lib.SSL_ctrl(t->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)host);
    return lib.SSL_set1_host(t->ssl, host) == 1 ? 0 : -1;
}

int flyt_tls_connect(flyt_tls_ctx *ctx, int fd, const char *host, int timeout_ms,
                     flyt_tls **out, char *err, size_t errlen)
{
    flyt_tls *t = new_session(ctx, fd, timeout_ms, err, errlen);
    if (t == NULL)
        return -1;
    if (expect_host(t, host) != 0) {
        snprintf(err, errlen, "cannot check the server's certificate for the name %s", host);
        flyt_tls_free(t);
        return -1;
    }
    return run_handshake(t, 0, out, err, errlen);
}
