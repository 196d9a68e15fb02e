/*
 * Small tools for the end-to-end driver (run_e2e.sh), so that it needs neither jq nor curl:
 *
 *   e2e_tool flat < JSON
 *       prints every leaf of a JSON document as PATH=VALUE, one a line: object keys and
 *       array indexes joined by '.', strings as they are (a newline as \n), null as null:
 *       {"nodes":[{"id":"a","gpus":[{"sm_free":8}]}]} -> nodes.0.id=a, nodes.0.gpus.0.sm_free=8
 *       (an empty object or array prints PATH={} or PATH=[]).
 *
 *   e2e_tool http METHOD HOST:PORT PATH TOKEN BODY
 *       one HTTP/1.1 request over a plain TCP connection, the body sent byte for byte (so it
 *       can be malformed JSON): TOKEN "-" sends no Authorization header, BODY "-" no body,
 *       "@FILE" the file's bytes, anything else itself. Prints the status code on the first
 *       line and the answer's body after it. Exit 0 when an answer came, 2 otherwise.
 *
 *   e2e_tool sock PATH LINE
 *       one request line to a client manager's Unix socket (docs/api.md), "%PID%" in LINE
 *       replaced by this process's pid and "%PPID%" by its parent's; prints the answer
 *       line. Exit 0 when an answer came, 2 otherwise.
 */
#include <jansson.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "flyt_io.h"

static void flat(const char *path, json_t *v)
{
    char sub[1024];
    if (json_is_object(v)) {
        if (json_object_size(v) == 0)
            printf("%s={}\n", path);
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", k);
            flat(sub, x);
        }
    } else if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            printf("%s=[]\n", path);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            snprintf(sub, sizeof sub, "%s%s%zu", path, *path ? "." : "", i);
            flat(sub, x);
        }
    } else if (json_is_string(v)) {
        printf("%s=", path);
        for (const char *s = json_string_value(v); *s; s++)
            if (*s == '\n')
                fputs("\\n", stdout);
            else
                putchar(*s);
        putchar('\n');
    } else if (json_is_integer(v)) {
        printf("%s=%lld\n", path, (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        printf("%s=%.17g\n", path, json_real_value(v));
    } else if (json_is_true(v)) {
        printf("%s=true\n", path);
    } else if (json_is_false(v)) {
        printf("%s=false\n", path);
    } else {
        printf("%s=null\n", path);
    }
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

static int http(const char *method, const char *hostport, const char *path, const char *token,
                const char *body_arg)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        fprintf(stderr, "e2e_tool: HOST:PORT expected, got %s\n", hostport);
        return 2;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - hostport), hostport);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "e2e_tool: cannot resolve %s\n", hostport);
        return 2;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    struct timeval tv = {.tv_sec = 15};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        fprintf(stderr, "e2e_tool: connect %s: %s\n", hostport, strerror(errno));
        freeaddrinfo(ai);
        return 2;
    }
    freeaddrinfo(ai);
    char *body = NULL;
    size_t blen = 0;
    if (strcmp(body_arg, "-") != 0) {
        if (body_arg[0] == '@') {
            FILE *f = fopen(body_arg + 1, "rb");
            if (!f) {
                fprintf(stderr, "e2e_tool: %s: %s\n", body_arg + 1, strerror(errno));
                return 2;
            }
            body = read_all(f, &blen);
            fclose(f);
        } else {
            body = strdup(body_arg);
            blen = strlen(body);
        }
    }
    char head[2048];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n",
                     method, path, hostport);
    if (strcmp(token, "-") != 0)
        n += snprintf(head + n, sizeof head - (size_t)n, "Authorization: Bearer %s\r\n", token);
    if (body)
        n += snprintf(head + n, sizeof head - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    /* the server may answer (413) and close before the whole body is sent: not an error */
    if (flyt_write_all(fd, head, (size_t)n) == 0 && body)
        (void)flyt_write_all(fd, body, blen);
    free(body);
    size_t cap = 1 << 20, got = 0;
    char *ans = malloc(cap + 1);
    ssize_t r;
    while (ans && got < cap && (r = read(fd, ans + got, cap - got)) != 0) {
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break; /* a reset after the answer, or the timeout */
        }
        got += (size_t)r;
    }
    close(fd);
    if (!ans)
        return 2;
    ans[got] = '\0';
    int status = 0;
    if (sscanf(ans, "HTTP/1.%*d %d", &status) != 1) {
        fprintf(stderr, "e2e_tool: no HTTP answer from %s (%zu bytes)\n", hostport, got);
        free(ans);
        return 2;
    }
    char *start = strstr(ans, "\r\n\r\n");
    printf("%d\n%s\n", status, start ? start + 4 : "");
    free(ans);
    return 0;
}

static int sock_line(const char *path, const char *line)
{
    char req[4096];
    size_t n = 0;
    for (const char *p = line; *p && n < sizeof req - 32; p++) {
        if (strncmp(p, "%PID%", 5) == 0) {
            n += (size_t)snprintf(req + n, sizeof req - n, "%ld", (long)getpid());
            p += 4;
        } else if (strncmp(p, "%PPID%", 6) == 0) {
            n += (size_t)snprintf(req + n, sizeof req - n, "%ld", (long)getppid());
            p += 5;
        } else {
            req[n++] = *p;
        }
    }
    req[n++] = '\n';
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    struct timeval tv = {.tv_sec = 15};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        flyt_write_all(fd, req, n) != 0) {
        fprintf(stderr, "e2e_tool: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char ans[4200];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof ans - 1 && (r = read(fd, ans + got, sizeof ans - 1 - got)) > 0) {
        got += (size_t)r;
        if (memchr(ans, '\n', got))
            break;
    }
    close(fd);
    ans[got] = '\0';
    if (!memchr(ans, '\n', got)) {
        fprintf(stderr, "e2e_tool: no answer line from %s\n", path);
        return 2;
    }
    fputs(ans, stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "flat") == 0) {
        json_error_t err;
        json_t *v = json_loadf(stdin, JSON_DECODE_ANY, &err);
        if (!v) {
            fprintf(stderr, "e2e_tool flat: line %d: %s\n", err.line, err.text);
            return 1;
        }
        flat("", v);
        json_decref(v);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "sock") == 0)
        return sock_line(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "http") == 0)
        return http(argv[2], argv[3], argv[4], argv[5], argv[6]);
    fprintf(stderr, "usage: e2e_tool flat < JSON | e2e_tool http METHOD HOST:PORT PATH TOKEN BODY |\n"
                    "       e2e_tool sock PATH LINE\n");
    return 2;
}
