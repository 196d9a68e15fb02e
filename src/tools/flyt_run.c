/*
 * flyt-run: runs an unmodified CUDA program with Flyt's client library, a
 * drop-in libcuda.so.1, in place of NVIDIA's driver, pointed at a server.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flyt_transport.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: flyt-run [--server ADDR] [--preload] [--lib DIR] -- PROGRAM [ARGS...]\n"
            "\n"
            "Runs PROGRAM with its CUDA driver calls (and so its CUDA runtime, NVIDIA's\n"
            "libraries and frameworks) carried out by a flyt-server.\n"
            "\n"
            "  -s, --server ADDR  server address: tcp://HOST:PORT or unix:/PATH\n"
            "                     (default: $FLYT_SERVER)\n"
            "  -p, --preload      also load the client library with LD_PRELOAD (for\n"
            "                     programs that load the driver by a full path)\n"
            "  -l, --lib DIR      folder holding Flyt's libcuda.so.1\n"
            "                     (default: $FLYT_LIBDIR, else ../lib next to flyt-run)\n"
            "  -h, --help         this text\n");
}

static int default_libdir(char *out, size_t len)
{
    const char *env = getenv("FLYT_LIBDIR");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    snprintf(out, len, "%s/../lib", dirname(exe));
    return 0;
}

/* Puts value in front of an existing colon-separated variable. */
static int prepend_env(const char *name, const char *value)
{
    const char *old = getenv(name);
    if (old == NULL || *old == '\0')
        return setenv(name, value, 1);
    size_t len = strlen(value) + strlen(old) + 2;
    char *joined = malloc(len);
    if (joined == NULL)
        return -1;
    snprintf(joined, len, "%s:%s", value, old);
    int rc = setenv(name, joined, 1);
    free(joined);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"server", required_argument, NULL, 's'}, {"preload", no_argument, NULL, 'p'},
        {"lib", required_argument, NULL, 'l'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *server = getenv("FLYT_SERVER");
    char libdir[PATH_MAX] = "";
    int preload = 0, c;
    while ((c = getopt_long(argc, argv, "+s:pl:h", options, NULL)) != -1) {
        switch (c) {
        case 's': server = optarg; break;
        case 'p': preload = 1; break;
        case 'l': snprintf(libdir, sizeof libdir, "%s", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "flyt-run: no program given\n");
        usage(stderr);
        return 2;
    }
    if (server == NULL || *server == '\0') {
        fprintf(stderr, "flyt-run: no server: give --server ADDR or set FLYT_SERVER\n");
        return 2;
    }
    flyt_addr addr;
    char err[256];
    if (flyt_addr_parse(server, &addr, err, sizeof err) != 0) {
        fprintf(stderr, "flyt-run: bad server address: %s\n", err);
        return 2;
    }
    if (libdir[0] == '\0' && default_libdir(libdir, sizeof libdir) != 0) {
        fprintf(stderr, "flyt-run: cannot locate the client library; use --lib DIR\n");
        return 2;
    }
    char lib[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s/libcuda.so.1", libdir);
    if (access(lib, R_OK) != 0) {
        fprintf(stderr, "flyt-run: %s: %s\n", lib, strerror(errno));
        return 2;
    }
    setenv("FLYT_SERVER", server, 1);
    /* the loader finds libcuda.so.1 (and libnvidia-ml.so.1) here first;
     * Triton links its launchers against the libcuda.so it is told of */
    if (prepend_env("LD_LIBRARY_PATH", libdir) != 0 || setenv("TRITON_LIBCUDA_PATH", libdir, 1) != 0 ||
        (preload && prepend_env("LD_PRELOAD", lib) != 0)) {
        fprintf(stderr, "flyt-run: cannot set the environment: %s\n", strerror(errno));
        return 2;
    }
    execvp(argv[optind], &argv[optind]);
    fprintf(stderr, "flyt-run: cannot run %s: %s\n", argv[optind], strerror(errno));
    return 127;
}
