/*
 * libFuzzer target: the client manager's line protocol (flyt_cmgr_proto.h),
 * both sides. The input is taken as a request line (what a local process
 * sends the client manager) and as an answer line (what the client library
 * reads back), and its pieces are formatted into lines and parsed again.
 * Besides memory errors it checks what the protocol promises: a request
 * that parses formats back to itself, an error answer is always one
 * printable line, and an acquire answer's fields read back as written.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyt_cmgr_proto.h"

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_cmgr_proto: %s\n", what);
        abort();
    }
}

/* An op=request line whose share fields parse formats back to the same fields. */
static void share_side(const char *line, long pid)
{
    struct flyt_cmgr_share_ask a, b;
    char err[256], out[FLYT_CMGR_LINE_MAX];
    if (flyt_cmgr_parse_share(line, &a, err, sizeof err) != 0)
        return;
    int n = flyt_cmgr_format_share_request(out, sizeof out, pid, &a);
    expect(n > 0 && out[n - 1] == '\n', "a parsed share request does not format");
    out[n - 1] = '\0';
    expect(flyt_cmgr_parse_share(out, &b, err, sizeof err) == 0 && strcmp(a.sm, b.sm) == 0 &&
               strcmp(a.memory, b.memory) == 0 && strcmp(a.reason, b.reason) == 0,
           "a formatted share request does not parse back to itself");
}

static void request_side(const char *line)
{
    enum flyt_cmgr_op op;
    long pid;
    char err[256], out[FLYT_CMGR_LINE_MAX];
    if (flyt_cmgr_parse_request(line, &op, &pid, err, sizeof err) != 0)
        return;
    int n = flyt_cmgr_format_request(out, sizeof out, op, pid);
    expect(n > 0 && out[n - 1] == '\n', "a parsed request does not format");
    out[n - 1] = '\0';
    enum flyt_cmgr_op op2;
    long pid2;
    expect(flyt_cmgr_parse_request(out, &op2, &pid2, err, sizeof err) == 0 && op2 == op &&
               pid2 == pid,
           "a formatted request does not parse back to itself");
    if (op == FLYT_CMGR_REQUEST)
        share_side(line, pid);
}

static void answer_side(const char *line)
{
    static const char *const keys[] = {"status", "session", "endpoint", "token", "message",
                                       "state", "request", "sm", "memory", "reason", ""};
    char value[FLYT_CMGR_LINE_MAX];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        flyt_cmgr_field(line, keys[i], value, sizeof value);
        flyt_cmgr_field(line, keys[i], value, 3); /* values that do not fit */
        flyt_cmgr_field(line, keys[i], value, 1);
    }
}

/* An error answer of any text stays one line whose message reads back. */
static void error_side(const char *text)
{
    static const size_t sizes[] = {2, 3, 17, 64, FLYT_CMGR_LINE_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char out[FLYT_CMGR_LINE_MAX];
        int n = flyt_cmgr_format_error(out, sizes[i], text);
        expect(n > 0 && (size_t)n < sizes[i] && out[n] == '\0', "error answer length");
        expect(memchr(out, '\n', (size_t)n) == out + n - 1, "error answer is not one line");
        answer_side(out);
    }
}

/* session, endpoint and token from the input's first three space-free words. */
static void acquired_side(const char *text)
{
    char copy[FLYT_CMGR_LINE_MAX], out[FLYT_CMGR_LINE_MAX], back[FLYT_CMGR_LINE_MAX];
    snprintf(copy, sizeof copy, "%s", text);
    char *save = NULL;
    const char *session = strtok_r(copy, " \n", &save);
    const char *endpoint = strtok_r(NULL, " \n", &save);
    const char *token = strtok_r(NULL, " \n", &save);
    if (!session || !endpoint || !token)
        return;
    int n = flyt_cmgr_format_acquired(out, sizeof out, session, endpoint, token);
    if (n < 0)
        return;
    expect(out[n - 1] == '\n', "acquire answer without its newline");
    out[n - 1] = '\0';
    expect(flyt_cmgr_field(out, "status", back, sizeof back) && strcmp(back, "ok") == 0,
           "acquire answer: status");
    expect(flyt_cmgr_field(out, "session", back, sizeof back) && strcmp(back, session) == 0,
           "acquire answer: session");
    expect(flyt_cmgr_field(out, "endpoint", back, sizeof back) && strcmp(back, endpoint) == 0,
           "acquire answer: endpoint");
    expect(flyt_cmgr_field(out, "token", back, sizeof back) && strcmp(back, token) == 0,
           "acquire answer: token");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= FLYT_CMGR_LINE_MAX) /* the client manager reads one line of at most this */
        return 0;
    char line[FLYT_CMGR_LINE_MAX];
    memcpy(line, data, size);
    line[size] = '\0';
    request_side(line);
    answer_side(line);
    error_side(line);
    acquired_side(line);
    return 0;
}
