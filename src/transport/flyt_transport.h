/*
 * Byte-stream transport: address parsing, listen/connect over TCP or Unix
 * sockets, and whole-buffer reads and writes that retry on EINTR and short
 * transfers. Frames and their meaning live in src/protocol.
 */
#ifndef FLYT_TRANSPORT_H
#define FLYT_TRANSPORT_H

#include <stddef.h>
#include <sys/uio.h>

enum flyt_addr_kind { FLYT_ADDR_TCP = 1, FLYT_ADDR_UNIX = 2 };

typedef struct {
    enum flyt_addr_kind kind;
    char host[256]; /* TCP: name or address; [v6] brackets stripped */
    char port[16];
    char path[108]; /* Unix socket path */
    int  tls;       /* TCP with TLS: "tls://" (flyt_tls.h) */
} flyt_addr;

/* "tcp://HOST:PORT", "HOST:PORT" (TCP), "tls://HOST:PORT" (TCP with TLS) or "unix:/path". 0 on success, else -1
 * with a reason in err. */
int flyt_addr_parse(const char *text, flyt_addr *addr, char *err, size_t errlen);
/* Writes the address back in its canonical text form. */
void flyt_addr_format(const flyt_addr *addr, char *out, size_t outlen);

/* TCP keepalive on a data-plane connection: a peer whose machine vanished
 * (power loss, cut network: no FIN, no reset) is declared gone once nothing
 * came from it for idle_s + interval_s * count seconds (its kernel answers
 * probes even while its program is busy), and data unacknowledged that long
 * ends the connection too (TCP_USER_TIMEOUT). idle_s 0: the system's
 * defaults (hours). */
struct flyt_keepalive {
    int idle_s;     /* silence before the first probe */
    int interval_s; /* between probes */
    int count;      /* unanswered probes that end the connection */
};
/* 5 + 2 * 4: a vanished peer is noticed 13 s after it last spoke. */
#define FLYT_KEEPALIVE_DEFAULT ((struct flyt_keepalive){5, 2, 4})
/* "IDLE,INTERVAL,COUNT" (seconds, seconds, probes; each 1 to 3600) or "off".
 * 0, or -1 with a reason in err. */
int flyt_keepalive_parse(const char *text, struct flyt_keepalive *k, char *err, size_t errlen);
/* Seconds from the last word of a peer to the connection's end (0: off). */
int flyt_keepalive_dead_s(const struct flyt_keepalive *k);
/* Applies k to a connected TCP socket; nothing for other sockets or idle_s
 * 0. 0, or -1 (errno) when the system refused an option. */
int flyt_keepalive_set(int fd, const struct flyt_keepalive *k);
/* 1 when fd is a TCP socket (IPv4 or IPv6), 0 otherwise. */
int flyt_is_tcp(int fd);
/* The pending error of a socket (SO_ERROR, which reading clears): ETIMEDOUT
 * after keepalive or TCP_USER_TIMEOUT gave up on the peer; 0 when none. */
int flyt_socket_error(int fd);
/* Whether a socket error says the peer stopped answering (keepalive or
 * TCP_USER_TIMEOUT gave up: ETIMEDOUT, or the unreachable host or network
 * an ICMP message named meanwhile) rather than that it closed. */
int flyt_peer_vanished(int err);

/* Return a file descriptor, or -1 with a reason in err. */
int flyt_listen(const flyt_addr *addr, char *err, size_t errlen);
int flyt_connect(const flyt_addr *addr, char *err, size_t errlen);
/* flyt_connect giving up after timeout_ms (0: no limit of its own). */
int flyt_connect_timeout(const flyt_addr *addr, int timeout_ms, char *err, size_t errlen);
int flyt_accept(int listen_fd);

/* 0 when every byte moved, -1 on error or end of stream (errno set; 0 at EOF). */
int flyt_read_full(int fd, void *buf, size_t len);
int flyt_write_full(int fd, const void *buf, size_t len);
/* iov is consumed: its entries are advanced as bytes go out. */
int flyt_writev_full(int fd, struct iovec *iov, int iovcnt);
/* Like flyt_read_full, and on a Unix socket a file descriptor passed with
 * the bytes (SCM_RIGHTS) is stored in *passed_fd (an earlier one there is
 * closed first). passed_fd NULL: no descriptor is taken. */
int flyt_read_full_fd(int fd, void *buf, size_t len, int *passed_fd);
/* One recvmsg of up to cap bytes (blocking until at least one): the byte
 * count, 0 at end of stream, -1 on error. A passed descriptor goes to
 * *passed_fd as with flyt_read_full_fd. */
long flyt_recv_some(int fd, void *buf, size_t cap, int *passed_fd);
/* Like flyt_writev_full, passing pass_fd along with the first byte. */
int flyt_writev_full_fd(int fd, struct iovec *iov, int iovcnt, int pass_fd);
/* Polls fd for up to spin_us microseconds without sleeping; 1 when it became
 * readable, 0 otherwise (the caller then blocks as usual). A reply that comes
 * within the spin costs no thread wake-up, which is most of a local round trip. */
int flyt_spin_readable(int fd, unsigned spin_us);
/* 1 when the peer of a connected socket has hung up (or the connection
 * failed), without reading anything: data still queued does not hide it. */
int flyt_peer_hung_up(int fd);
/* Reads and drops len bytes. */
int flyt_skip(int fd, size_t len);

#endif
