/*
 * The driver prints device printf output and assert messages on the stdout
 * and stderr of the process that synchronises (the session process), as
 * NVIDIA's driver does natively. Those descriptors are memory files opened
 * for appending: the driver never blocks on them (a pipe could fill up in
 * the middle of a synchronisation), and checking for output is one lseek
 * per descriptor (about 0.1 us each).
 */
#include "device_output.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flyt_log.h"
#include "session.h"

static int make_file(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    /* appending: after the file is emptied, the next write lands at 0 */
    if (fcntl(fd, F_SETFL, O_APPEND) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Sanitizer builds: a report (ASan, UBSan, LSan) is the last thing a dying
 * session writes, to fd 2, the memory file here, which dies with it. Each
 * sanitizer runtime loaded (GCC's libasan and libubsan, or clang's one in the
 * program) is asked to call back before it ends the process, and what the
 * files hold goes to the log then. (Not __sanitizer_set_report_fd: UBSan,
 * set up at its first report, sets its report path back and closes that fd.)
 * In other builds no loaded object has the symbol. */
static struct flyt_output *captured; /* one session per process */

static void output_to_log_at_death(void)
{
    if (captured)
        flyt_output_to_log(captured);
}

static int call_back_at_death(struct dl_phdr_info *info, size_t size, void *unused)
{
    (void)size, (void)unused;
    void *lib = dlopen(info->dlpi_name[0] ? info->dlpi_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        return 0;
    void (*set_death_callback)(void (*)(void));
    *(void **)&set_death_callback = dlsym(lib, "__sanitizer_set_death_callback");
    if (set_death_callback)
        set_death_callback(output_to_log_at_death);
    dlclose(lib);
    return 0;
}

int flyt_output_capture(struct flyt_output *o)
{
    int log_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (log_fd < 0)
        return -1;
    int out = make_file("flyt-driver-stdout");
    int err = out < 0 ? -1 : make_file("flyt-driver-stderr");
    if (err < 0) {
        int e = errno;
        if (out >= 0)
            close(out);
        close(log_fd);
        errno = e;
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    flyt_log_set_fd(log_fd);
    if (dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
        int e = errno;
        dup2(log_fd, STDERR_FILENO); /* stdout may be lost now; the log is not */
        flyt_log_set_fd(STDERR_FILENO);
        close(log_fd);
        close(out);
        close(err);
        errno = e;
        return -1;
    }
    *o = (struct flyt_output){.captured = 1, .file = {out, err}};
    captured = o;
    dl_iterate_phdr(call_back_at_death, NULL);
    return 0;
}

int flyt_output_flush(struct flyt_output *o)
{
    if (!o->captured)
        return 0;
    /* the driver may print through stdio: fully buffered on a file */
    fflush(stdout);
    fflush(stderr);
    return 1;
}

size_t flyt_output_take(struct flyt_output *o, int stream, void *buf, size_t cap)
{
    if (!o->captured || stream < 0 || stream > 1)
        return 0;
    int fd = o->file[stream];
    /* the size: a third of an fstat's cost; the offset is unused (pread,
     * appending writers) */
    off_t end = lseek(fd, 0, SEEK_END);
    uint64_t size = end > 0 ? (uint64_t)end : 0;
    if (size > o->taken[stream]) {
        uint64_t left = size - o->taken[stream];
        ssize_t n = pread(fd, buf, left < cap ? (size_t)left : cap, (off_t)o->taken[stream]);
        if (n > 0) {
            o->taken[stream] += (uint64_t)n;
            return (size_t)n;
        }
        flyt_warn("cannot read the driver's %s: %s; dropping %llu bytes",
                  stream ? "stderr" : "stdout", n < 0 ? strerror(errno) : "end of file",
                  (unsigned long long)left);
    }
    if (size > 0 && ftruncate(fd, 0) != 0)
        flyt_warn("cannot empty the driver's %s: %s", stream ? "stderr" : "stdout",
                  strerror(errno));
    o->taken[stream] = 0;
    return 0;
}

/* The tenant's text: one log line per line of it, escaped by flyt_log, so
 * it cannot pass for the server's own lines. */
static void log_output_lines(int stream, const char *piece, size_t n)
{
    const char *name = stream ? "stderr" : "stdout";
    while (n > 0) {
        const char *nl = memchr(piece, '\n', n);
        size_t len = nl ? (size_t)(nl - piece) : n;
        size_t shown = len < 512 ? len : 512;
        flyt_info("session %s: %.*s%s", name, (int)shown, piece, shown < len ? "..." : "");
        len += nl != NULL;
        piece += len;
        n -= len;
    }
}

void flyt_output_to_log(struct flyt_output *o)
{
    char piece[4096];
    if (!flyt_output_flush(o))
        return;
    for (int stream = 0; stream < 2; stream++) {
        size_t n;
        while ((n = flyt_output_take(o, stream, piece, sizeof piece)) > 0)
            log_output_lines(stream, piece, n);
    }
}

/* The output itself goes out ahead of the reply, as before every reply. */
int handle_OUTPUT_DRAIN(flyt_session *s, flyt_call *c)
{
    const flyt_req_output_drain *req = c->req;
    c->result = req->sync ? FLYT_BCALL0(s, device_sync) : CUDA_SUCCESS;
    return FLYT_CONT;
}
