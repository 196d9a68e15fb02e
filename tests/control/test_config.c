/* flyt_config: parsing, types, units, defaults, and the FILE:LINE: reason of every refusal. */
#include "check.h"
#include "flyt_config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const struct flyt_cfg_key keys[] = {
    {"listen", FLYT_CFG_STRING, "127.0.0.1:8600", "address", false, 0, 0},
    {"workers", FLYT_CFG_INT, "4", "threads", false, 1, 64},
    {"overcommit", FLYT_CFG_BOOL, "false", "allow", false, 0, 0},
    {"store.cache", FLYT_CFG_SIZE, "1MiB", "cache size", false, 0, 0},
    {"store.url", FLYT_CFG_STRING, NULL, "store", false, 0, 0},
    {"timeouts.node", FLYT_CFG_DURATION, "15s", "node timeout", false, 0, 0},
    {"timeouts.idle", FLYT_CFG_DURATION, "5m", "idle", false, 0, 0},
    {NULL, 0, NULL, NULL, false, 0, 0}};

/* Parses text; returns the error (empty on success) in err. */
static int parse(const char *text, char *err, size_t errlen, struct flyt_config **out)
{
    struct flyt_config *c = flyt_config_new(keys);
    err[0] = 0;
    int rc = flyt_config_parse(c, "test.conf", text, err, errlen);
    if (out)
        *out = c;
    else
        flyt_config_free(c);
    return rc;
}

static void expect_error(const char *text, const char *want)
{
    char err[512];
    int rc = parse(text, err, sizeof err, NULL);
    CHECK_EQ(rc, -1, "refused with \"%s\" (got \"%s\")", want, err);
    CHECK_NE(strstr(err, want), NULL, "refused with \"%s\" (got \"%s\")", want, err);
}

int main(void)
{
    char err[512];
    struct flyt_config *c;

    /* defaults */
    CHECK_EQ(parse("", err, sizeof err, &c), 0, "empty file parses");
    CHECK_STR_EQ(flyt_config_str(c, "listen"), "127.0.0.1:8600", "string default");
    CHECK_EQ(flyt_config_int(c, "workers"), 4, "int default");
    CHECK(!flyt_config_bool(c, "overcommit"), "bool default");
    CHECK_EQ(flyt_config_size(c, "store.cache"), 1u << 20, "size default 1MiB");
    CHECK_EQ(flyt_config_str(c, "store.url"), NULL, "string without default is NULL");
    CHECK_EQ(flyt_config_duration_ms(c, "timeouts.node"), 15000, "duration default 15s");
    CHECK_EQ(flyt_config_duration_ms(c, "timeouts.idle"), 300000, "duration default 5m");
    CHECK(!flyt_config_is_set(c, "listen"), "default is not 'set'");
    flyt_config_free(c);

    /* a full file */
    const char *text =
        "# comment\n"
        "  ; another comment\n"
        "\n"
        "listen = 0.0.0.0:9000   # trailing comment\n"
        "workers=16\n"
        "overcommit = yes\n"
        "[store]\n"
        "cache = 20 GiB\n"
        "url = \"sqlite:/tmp/a #b.db\"  # quoted keeps '#'\n"
        "[ timeouts ]\n"
        "node = 500ms\n"
        "idle = 2m\r\n";
    CHECK_EQ(parse(text, err, sizeof err, &c), 0, "full file parses (%s)", err);
    CHECK_STR_EQ(flyt_config_str(c, "listen"), "0.0.0.0:9000", "comment stripped");
    CHECK_EQ(flyt_config_int(c, "workers"), 16, "int");
    CHECK(flyt_config_bool(c, "overcommit"), "bool yes");
    CHECK_EQ(flyt_config_size(c, "store.cache"), 20ull << 30, "size 20 GiB");
    CHECK_STR_EQ(flyt_config_str(c, "store.url"), "sqlite:/tmp/a #b.db", "quoted string");
    CHECK_EQ(flyt_config_duration_ms(c, "timeouts.node"), 500, "500ms");
    CHECK_EQ(flyt_config_duration_ms(c, "timeouts.idle"), 120000, "2m with CRLF");
    CHECK(flyt_config_is_set(c, "listen"), "set by the file");
    flyt_config_free(c);

    /* errors, each with its line */
    expect_error("listen = a\nbogus = 1\n", "test.conf:2: unknown key \"bogus\"");
    expect_error("[store]\ncachee = 1\n", "test.conf:2: unknown key \"store.cachee\"");
    expect_error("\n\nworkers = many\n", "test.conf:3: workers: expected an integer, got \"many\"");
    expect_error("workers = 100\n", "test.conf:1: workers: value \"100\" out of range [1, 64]");
    expect_error("overcommit = maybe\n", "test.conf:1: overcommit: expected a boolean");
    expect_error("[store]\ncache = 20 GB\ncache = 1\n",
                 "test.conf:3: duplicate key \"store.cache\" (first set on line 2)");
    expect_error("[store]\ncache = 20 XB\n", "test.conf:2: store.cache: unknown unit \"XB\"");
    expect_error("[store]\ncache = -1\n", "test.conf:2: store.cache: expected a size");
    expect_error("[timeouts]\nnode = 10 days\n", "test.conf:2: timeouts.node: unknown unit \"days\"");
    expect_error("listen\n", "test.conf:1: expected \"key = value\", got \"listen\"");
    expect_error("[store\n", "test.conf:1: malformed section header");
    expect_error("listen = \"abc\n", "test.conf:1: unterminated quoted value");
    expect_error("listen = \"abc\" x\n", "test.conf:1: unexpected text after the quoted value");
    expect_error("= 3\n", "test.conf:1: invalid key name");
    expect_error("[store]\ncache = 99999999999999999999TiB\n", "out of range");

    /* required keys */
    static const struct flyt_cfg_key req[] = {
        {"token_file", FLYT_CFG_STRING, NULL, "x", true, 0, 0}, {NULL, 0, NULL, NULL, false, 0, 0}};
    c = flyt_config_new(req);
    CHECK_EQ(flyt_config_parse(c, "r.conf", "# nothing\n", err, sizeof err), -1,
          "required key missing: %s", err);
    CHECK_STR_EQ(err, "r.conf: required key \"token_file\" is not set",
          "required key missing: %s", err);
    flyt_config_free(c);

    /* loading a file */
    char path[] = "/tmp/flyt-test-config-XXXXXX";
    int fd = mkstemp(path);
    CHECK_GE(fd, 0, "temp file");
    const char *ft = "workers = 2\nworkers = 3\n";
    CHECK_EQ(write(fd, ft, strlen(ft)), (ssize_t)strlen(ft), "write");
    close(fd);
    c = flyt_config_new(keys);
    CHECK_EQ(flyt_config_load(c, path, err, sizeof err), -1, "load refuses the duplicate");
    char want[600];
    snprintf(want, sizeof want, "%s:2: duplicate key \"workers\" (first set on line 1)", path);
    CHECK_STR_EQ(err, want, "message names file and line: %s", err);
    flyt_config_free(c);
    unlink(path);
    c = flyt_config_new(keys);
    CHECK_EQ(flyt_config_load(c, "/nonexistent/x.conf", err, sizeof err), -1, "missing file: %s", err);
    CHECK_NE(strstr(err, "/nonexistent/x.conf: cannot open"), NULL, "missing file: %s", err);
    flyt_config_free(c);

    /* the value parsers on their own */
    uint64_t u;
    CHECK_EQ(flyt_parse_size("2048KiB", &u, err, sizeof err), 0, "2048KiB");
    CHECK_EQ(u, 2048 * 1024, "2048KiB");
    CHECK_EQ(flyt_parse_size("1073741824B", &u, err, sizeof err), 0, "B");
    CHECK_EQ(u, 1073741824ull, "B");
    CHECK_EQ(flyt_parse_size("3GB", &u, err, sizeof err), 0, "3GB");
    CHECK_EQ(u, 3000000000ull, "3GB");
    CHECK_EQ(flyt_parse_size("5", &u, err, sizeof err), 0, "bare bytes");
    CHECK_EQ(u, 5, "bare bytes");
    CHECK_EQ(flyt_parse_duration_ms("45", &u, err, sizeof err), 0, "bare seconds");
    CHECK_EQ(u, 45000, "bare seconds");
    CHECK_EQ(flyt_parse_duration_ms("1h", &u, err, sizeof err), 0, "1h");
    CHECK_EQ(u, 3600000, "1h");
    int cc = 0;
    CHECK(flyt_parse_compute_capability("9.0", &cc, err, sizeof err) == 0 && cc == 90, "9.0");
    CHECK(flyt_parse_compute_capability("10.3", &cc, err, sizeof err) == 0 && cc == 103, "10.3");
    const char *bad_cc[] = {"", "9", "9.", "9.00", "-1.0", " 9.0", "9. 0", "0.5", "sm_90", "100.0"};
    for (size_t i = 0; i < sizeof bad_cc / sizeof bad_cc[0]; i++)
        CHECK_EQ(flyt_parse_compute_capability(bad_cc[i], &cc, err, sizeof err), -1,
                 "compute capability \"%s\" refused", bad_cc[i]);

    printf("test_config: all passed\n");
    return 0;
}
