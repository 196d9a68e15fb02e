/* Sends raw bytes to 127.0.0.1:port and reads the whole answer (the connection must
 * close: send "Connection: close"). For requests flyt_http_call cannot make (bad JSON). */
#ifndef FLYT_TEST_RAWHTTP_H
#define FLYT_TEST_RAWHTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int raw_http(int port, const char *request, char *out, size_t outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t len = strlen(request), off = 0;
    while (off < len) {
        ssize_t n = write(fd, request + off, len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    size_t got = 0;
    ssize_t n;
    while (got + 1 < outlen && (n = read(fd, out + got, outlen - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = 0;
    close(fd);
    return 0;
}

#endif
