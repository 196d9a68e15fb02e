/*
 * VM-wide installation of Flyt's client library, the drop-in CUDA driver libcuda.so.1
 * (and Flyt's libnvidia-ml.so.1 when it lies next to it), without touching NVIDIA's files.
 *
 * --install copies the libraries to PREFIX (default /usr/local/lib/flyt) and writes
 * /etc/ld.so.conf.d/00-flyt.conf naming PREFIX, then runs ldconfig. ldconfig keeps
 * every directory's libcuda.so.1 in the cache in the order the directories appear
 * in its configuration (ld.so.conf includes the .conf files of ld.so.conf.d in name order, so
 * 00-flyt.conf comes before the driver's multiarch conf and NVIDIA's cuda-*.conf; the trusted
 * system folders come last), and the loader takes the first match: every program that finds
 * libcuda.so.1 through the cache (NVIDIA's runtime, shared or static, its libraries and
 * frameworks all do) gets Flyt's. Programs with an RPATH/RUNPATH to NVIDIA's copy, or run
 * with LD_LIBRARY_PATH naming it, still get NVIDIA's; --preload adds PREFIX/libcuda.so.1 to
 * /etc/ld.so.preload as well, which wins over those too, at the cost of loading the
 * library into every process of the VM (docs/client-manager.md weighs the two).
 *
 * What it created is recorded, with SHA-256 of each file, in
 * /var/lib/flyt/client-install.manifest; --uninstall removes exactly that, and
 * refuses (removing nothing) when a recorded file was changed since. An --install over an
 * earlier one removes the recorded files it no longer writes (the retired libcudart.so.13
 * client, an NVML no longer next to the library). --root DIR prefixes every path (for tests
 * and image builds); ldconfig then runs only with --ldconfig (as ldconfig -r DIR, which
 * needs root).
 */
#include "cmgr.h"

#include "flyt_token.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIBNAME "libcuda.so.1"
#define NVML_NAME "libnvidia-ml.so.1" /* optional: installed when next to LIBNAME */
/* what installs before the driver-level client put in PREFIX (and in ld.so.preload) */
#define LEGACY_LIBNAME "libcudart.so.13"
#define CONF_REL "/etc/ld.so.conf.d/00-flyt.conf"
#define PRELOAD_REL "/etc/ld.so.preload"
#define MANIFEST_REL "/var/lib/flyt/client-install.manifest"
#define MAX_DIRS 32
#define MAX_FILES 8
#define MAX_LIB (512u << 20)

#if defined(__x86_64__)
#define CACHE_ARCH "x86-64"
#elif defined(__aarch64__)
#define CACHE_ARCH "AArch64"
#else
#define CACHE_ARCH "libc6"
#endif

struct manifest {
    char prefix[PATH_MAX];
    int preload;          /* the preload line was added */
    int preload_created;  /* and /etc/ld.so.preload did not exist before */
    char preload_line[PATH_MAX]; /* the line added (root-relative library path) */
    int ndirs, nfiles;
    char dirs[MAX_DIRS][PATH_MAX]; /* made by --install, in the order made */
    struct {
        char path[PATH_MAX];
        char sha[65];
    } files[MAX_FILES];
};

static void say_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "flyt-client-manager: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *root_of(const struct install_opts *o)
{
    return (o->root == NULL || strcmp(o->root, "/") == 0) ? "" : o->root;
}

/* root + rel */
static void rooted(const struct install_opts *o, const char *rel, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s", root_of(o), rel);
}

static int read_all(const char *path, char **data, size_t *len, size_t max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (buf == NULL || got != (size_t)st.st_size) {
        free(buf);
        errno = EIO;
        return -1;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

/* 1 and the hash when the file exists, 0 when it does not, -1 on error. */
static int file_sha(const char *path, char hex[65])
{
    char *d;
    size_t n;
    if (read_all(path, &d, &n, MAX_LIB) < 0)
        return errno == ENOENT ? 0 : -1;
    flyt_sha256_hex(d, n, hex, 65);
    free(d);
    return 1;
}

static int write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.flyt-tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int saved = errno;
            close(fd);
            unlink(tmp);
            errno = saved;
            return -1;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

/* ---- the manifest ---- */

static int manifest_load(const struct install_opts *o, struct manifest *m, char *err,
                         size_t errlen)
{
    char path[PATH_MAX];
    rooted(o, MANIFEST_REL, path, sizeof path);
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[PATH_MAX + 128];
    int ln = 0, ok = 1, version = 0;
    while (ok && fgets(line, sizeof line, f)) {
        ln++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char *sp = strchr(line, ' ');
        if (sp == NULL) {
            ok = 0;
            break;
        }
        *sp = '\0';
        const char *key = line, *val = sp + 1;
        if (strcmp(key, "version") == 0)
            version = atoi(val);
        else if (strcmp(key, "prefix") == 0)
            snprintf(m->prefix, sizeof m->prefix, "%s", val);
        else if (strcmp(key, "preload") == 0)
            m->preload = atoi(val);
        else if (strcmp(key, "preload-file-created") == 0)
            m->preload_created = atoi(val);
        else if (strcmp(key, "preload-line") == 0 && val[0] == '/')
            snprintf(m->preload_line, sizeof m->preload_line, "%s", val);
        else if (strcmp(key, "dir") == 0 && m->ndirs < MAX_DIRS && val[0] == '/')
            snprintf(m->dirs[m->ndirs++], PATH_MAX, "%s", val);
        else if (strcmp(key, "file") == 0 && m->nfiles < MAX_FILES && strlen(val) > 66 &&
                 val[64] == ' ' && val[65] == '/') {
            memcpy(m->files[m->nfiles].sha, val, 64);
            m->files[m->nfiles].sha[64] = '\0';
            snprintf(m->files[m->nfiles].path, PATH_MAX, "%s", val + 65);
            m->nfiles++;
        } else
            ok = 0;
    }
    fclose(f);
    if (!ok || version != 1 || m->prefix[0] != '/') {
        snprintf(err, errlen, "%s:%d: not an install record this version understands; nothing "
                 "changed", path, ln);
        return -1;
    }
    /* records older than preload-line were written when the library was libcudart.so.13 */
    if (m->preload && m->preload_line[0] == '\0')
        snprintf(m->preload_line, sizeof m->preload_line, "%s/%s", m->prefix, LEGACY_LIBNAME);
    return 1;
}

static int manifest_save(const struct install_opts *o, const struct manifest *m, char *err,
                         size_t errlen)
{
    struct flyt_buf b = {0};
    flyt_buf_printf(&b, "# flyt-client-manager --install: what it created (paths under the "
                        "root). --uninstall removes\n# exactly these, and nothing if a file "
                        "changed since. Do not edit.\nversion 1\nprefix %s\npreload %d\n"
                        "preload-file-created %d\n", m->prefix, m->preload, m->preload_created);
    if (m->preload)
        flyt_buf_printf(&b, "preload-line %s\n", m->preload_line);
    for (int i = 0; i < m->ndirs; i++)
        flyt_buf_printf(&b, "dir %s\n", m->dirs[i]);
    for (int i = 0; i < m->nfiles; i++)
        flyt_buf_printf(&b, "file %s %s\n", m->files[i].sha, m->files[i].path);
    char path[PATH_MAX];
    rooted(o, MANIFEST_REL, path, sizeof path);
    char *text = flyt_buf_take(&b);
    int rc = text ? write_atomic(path, text, strlen(text), 0644) : -1;
    if (rc < 0)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    free(text);
    return rc;
}

static int manifest_find_file(const struct manifest *m, const char *rel)
{
    for (int i = 0; i < m->nfiles; i++)
        if (strcmp(m->files[i].path, rel) == 0)
            return i;
    return -1;
}

static void manifest_drop_file(struct manifest *m, int i)
{
    memmove(&m->files[i], &m->files[i + 1], (size_t)(m->nfiles - i - 1) * sizeof m->files[0]);
    m->nfiles--;
}

static void manifest_set_file(struct manifest *m, const char *rel, const char *sha)
{
    int i = manifest_find_file(m, rel);
    if (i < 0) {
        if (m->nfiles == MAX_FILES)
            return;
        i = m->nfiles++;
    }
    snprintf(m->files[i].path, PATH_MAX, "%s", rel);
    snprintf(m->files[i].sha, sizeof m->files[i].sha, "%s", sha);
}

/* mkdir -p root+rel, recording every folder it makes. */
static int make_dirs(const struct install_opts *o, struct manifest *m, const char *rel,
                     char *err, size_t errlen)
{
    char part[PATH_MAX];
    snprintf(part, sizeof part, "%s", rel);
    for (char *p = part + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        char full[PATH_MAX];
        rooted(o, part, full, sizeof full);
        struct stat st;
        if (stat(full, &st) != 0) {
            if (mkdir(full, 0755) != 0) {
                snprintf(err, errlen, "cannot make %s: %s", full, strerror(errno));
                return -1;
            }
            if (m->ndirs < MAX_DIRS)
                snprintf(m->dirs[m->ndirs++], PATH_MAX, "%s", part);
        } else if (!S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s is not a folder", full);
            return -1;
        }
        *p = c;
        if (c == '\0')
            return 0;
    }
}

/* ---- /etc/ld.so.preload ---- */

/* old less our line, byte for byte: the line goes with its newline or, when it ends the
 * file without one, with the newline before it (how add_line put it there). *other: a line
 * of someone else's is left. */
static void drop_line(struct flyt_buf *b, const char *old, const char *line, int *found,
                      int *other)
{
    size_t ll = strlen(line);
    for (const char *p = old, *next; p && *p; p = next) {
        next = strchr(p, '\n');
        size_t l = next ? (size_t)(next - p) : strlen(p);
        next = next ? next + 1 : p + l;
        if (l == ll && strncmp(p, line, l) == 0) {
            *found = 1;
            if (*next == '\0' && next == p + l && b->len > 0 && b->data[b->len - 1] == '\n')
                b->data[--b->len] = '\0'; /* the last line had none: its newline came before */
            continue;
        }
        flyt_buf_append(b, p, (size_t)(next - p));
        for (size_t i = 0; i < l; i++)
            *other |= p[i] != ' ' && p[i] != '\t';
    }
}

/* old and our line after it: on a line of its own, the file's last newline kept as it was */
static void add_line(struct flyt_buf *b, const char *old, size_t n, const char *line)
{
    flyt_buf_append(b, old ? old : "", n);
    if (n > 0 && old[n - 1] != '\n')
        flyt_buf_printf(b, "\n%s", line);
    else
        flyt_buf_printf(b, "%s\n", line);
}

/* Rewrites path with text, with the mode and owner it had (st), or 0644 when new. */
static int write_like(const char *path, const char *text, const struct stat *st)
{
    if (write_atomic(path, text ? text : "", text ? strlen(text) : 0,
                     st ? st->st_mode & 07777 : 0644) != 0)
        return -1;
    if (st && (st->st_uid != geteuid() || st->st_gid != getegid()))
        return chown(path, st->st_uid, st->st_gid);
    return 0;
}

/* Adds (add=1) or removes (add=0) our line. *created: the file was made now (add) / the
 * file may be removed when it ends up empty (remove). The rest of the file, its mode and
 * owner stay exactly as they were. 1 when the line was added or removed, 0 when there was
 * nothing to do (already there / not there), -1 with err. */
static int preload_edit(const struct install_opts *o, const char *line, int add, int *created,
                        char *err, size_t errlen)
{
    char path[PATH_MAX];
    rooted(o, PRELOAD_REL, path, sizeof path);
    char *old = NULL;
    size_t n = 0;
    struct stat st;
    int exists = read_all(path, &old, &n, 1 << 20) == 0 && stat(path, &st) == 0;
    if (!exists && errno != ENOENT) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        free(old);
        return -1;
    }
    struct flyt_buf b = {0};
    int found = 0, other = 0;
    drop_line(&b, old, line, &found, &other);
    int rc = 0, did = 0;
    if (add) {
        *created = !exists;
        if (!found) {
            did = 1;
            flyt_buf_free(&b);
            add_line(&b, old, n, line);
            char *text = flyt_buf_take(&b);
            rc = text ? write_like(path, text, exists ? &st : NULL) : -1;
            free(text);
        }
    } else if (found) {
        did = 1;
        char *text = flyt_buf_take(&b);
        if (*created && !other)
            rc = unlink(path);
        else
            rc = write_like(path, text, &st);
        free(text);
    }
    free(old);
    free(flyt_buf_take(&b));
    if (rc < 0) {
        snprintf(err, errlen, "cannot update %s: %s", path, strerror(errno));
        return -1;
    }
    return did;
}

/* ---- ldconfig ---- */

/* Runs argv; its stdout goes to out (when out is not NULL). The exit status, or -1. */
static int run(char *const argv[], char *out, size_t cap)
{
    int pfd[2] = {-1, -1};
    if (out && pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (out)
            dup2(pfd[1], 1);
        static const char *const where[] = {"/sbin/", "/usr/sbin/", "/bin/", "/usr/bin/"};
        for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s%s", where[i], argv[0]);
            execv(p, argv);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    if (out) {
        close(pfd[1]);
        size_t got = 0;
        for (;;) {
            char tmp[4096];
            ssize_t r = read(pfd[0], tmp, sizeof tmp);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            size_t take = (size_t)r < cap - 1 - got ? (size_t)r : cap - 1 - got;
            memcpy(out + got, tmp, take);
            got += take;
        }
        out[got] = '\0';
        close(pfd[0]);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Which NAME the loader cache names first: into first (root-relative), or "". */
static void cache_first(const struct install_opts *o, const char *name, char *first, size_t cap)
{
    char cache[PATH_MAX];
    rooted(o, "/etc/ld.so.cache", cache, sizeof cache);
    char *argv[] = {"ldconfig", "-p", "-C", cache, NULL};
    size_t outcap = 4 << 20, nlen = strlen(name);
    char *out = malloc(outcap);
    first[0] = '\0';
    if (out == NULL)
        return;
    if (run(argv, out, outcap) == 0) {
        for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
            while (*l == ' ' || *l == '\t')
                l++;
            if (strncmp(l, name, nlen) != 0 || strncmp(l + nlen, " (", 2) != 0 ||
                !strstr(l, CACHE_ARCH))
                continue;
            char *arrow = strstr(l, "=> ");
            if (arrow) {
                snprintf(first, cap, "%s", arrow + 3);
                break;
            }
        }
    }
    free(out);
}

/* Runs ldconfig when asked or on the real root; then says what the cache picks for each
 * of the nwant installed libraries (root-relative paths). */
static int refresh_cache(const struct install_opts *o, char (*want)[PATH_MAX], int nwant)
{
    const char *root = root_of(o);
    int do_it = o->ldconfig == 1 || (o->ldconfig == -1 && root[0] == '\0');
    if (!do_it) {
        printf("ldconfig not run%s: run `ldconfig%s%s` to refresh the loader cache\n",
               root[0] ? " (--root)" : " (--no-ldconfig)", root[0] ? " -r " : "", root);
        return 0;
    }
    char *argv_root[] = {"ldconfig", "-r", (char *)root, NULL};
    char *argv_plain[] = {"ldconfig", NULL};
    int rc = run(root[0] ? argv_root : argv_plain, NULL, 0);
    if (rc != 0) {
        say_err("ldconfig%s%s failed (status %d): the loader cache is not refreshed",
                root[0] ? " -r " : "", root, rc);
        return -1;
    }
    printf("ran ldconfig%s%s\n", root[0] ? " -r " : "", root);
    for (int i = 0; i < nwant; i++) {
        const char *name = strrchr(want[i], '/') + 1;
        char first[PATH_MAX];
        cache_first(o, name, first, sizeof first);
        if (strcmp(first, want[i]) == 0)
            printf("the loader cache now resolves %s to %s\n", name, first);
        else
            say_err("warning: the loader cache resolves %s to %s, not %s: another ld.so.conf "
                    "entry comes first (use --preload)", name, first[0] ? first : "nothing",
                    want[i]);
    }
    return 0;
}

/* ---- install / uninstall ---- */

static int default_lib(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    snprintf(out, cap, "%s/../lib/%s", dirname(exe), LIBNAME);
    return 0;
}

static int check_prefix(const char *prefix)
{
    if (prefix[0] != '/' || strlen(prefix) > PATH_MAX / 2) {
        say_err("--prefix must be an absolute path: %s", prefix);
        return -1;
    }
    for (const char *p = prefix; *p; p++)
        if (*p <= ' ' || *p == ':' || *p == '#' || (unsigned char)*p > '~') {
            say_err("--prefix may not hold spaces, ':', '#' or control characters: %s", prefix);
            return -1;
        }
    return 0;
}

/* A library to copy into the prefix. */
struct lib_file {
    const char *name; /* its file name there (the soname) */
    char src[PATH_MAX];
    char *data;
    size_t len;
    char rel[PATH_MAX], path[PATH_MAX]; /* root-relative, and with the root */
};

/* Flyt's NVML next to the driver library, when there is one: 1 (read), 0 (none). Not
 * Flyt's or unreadable: said, and left out; it is an extra, the driver is what matters. */
static int find_nvml(const char *lib_src, struct lib_file *f)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", lib_src);
    snprintf(f->src, sizeof f->src, "%s/%s", dirname(dir), NVML_NAME);
    f->name = NVML_NAME;
    if (read_all(f->src, &f->data, &f->len, MAX_LIB) < 0) {
        if (errno != ENOENT)
            say_err("warning: cannot read %s: %s; not installing NVML", f->src, strerror(errno));
        return 0;
    }
    /* Flyt's NVML writes its notices as "flyt: ..."; NVIDIA's never holds that */
    if (f->len < 4 || memcmp(f->data, "\177ELF", 4) != 0 ||
        memmem(f->data, f->len, "flyt: ", 6) == NULL) {
        say_err("warning: %s is not Flyt's NVML; not installing it", f->src);
        free(f->data);
        f->data = NULL;
        return 0;
    }
    return 1;
}

/* What one --install works on. */
struct install {
    const struct install_opts *o;
    char prefix[PATH_MAX / 2 + 1];
    struct lib_file *libs; /* [0]: Flyt's libcuda.so.1 (required); [1]: its NVML, if beside */
    int nlibs;
    struct manifest *m;    /* the record of what is installed */
    int had;               /* an earlier install's record was there */
    char conf_path[PATH_MAX];
};

/* Reads Flyt's libcuda.so.1 (and its NVML when next to it). 0, or -1 (said). */
static int load_libs(struct install *in)
{
    struct lib_file *lib = &in->libs[0];
    lib->name = LIBNAME;
    if (in->o->lib)
        snprintf(lib->src, sizeof lib->src, "%s", in->o->lib);
    else if (default_lib(lib->src, sizeof lib->src) < 0) {
        say_err("cannot find Flyt's %s: give it with --lib", LIBNAME);
        return -1;
    }
    if (read_all(lib->src, &lib->data, &lib->len, MAX_LIB) < 0) {
        say_err("cannot read %s: %s (give Flyt's %s with --lib)", lib->src, strerror(errno),
                LIBNAME);
        return -1;
    }
    in->nlibs = 1;
    if (lib->len < 4 || memcmp(lib->data, "\177ELF", 4) != 0 ||
        memmem(lib->data, lib->len, "FLYT_SERVER", 11) == NULL) {
        say_err("%s is not Flyt's client library (an ELF file that reads FLYT_SERVER)",
                lib->src);
        return -1;
    }
    in->nlibs += find_nvml(lib->src, &in->libs[1]);
    return 0;
}

/* The record of an earlier install agrees (same prefix, its files unchanged) and no file
 * about to be written belongs to someone else. 0, or -1 (said). */
static int check_ours(struct install *in)
{
    const struct install_opts *o = in->o;
    struct manifest *m = in->m;
    char err[PATH_MAX + 256];
    in->had = manifest_load(o, m, err, sizeof err);
    for (int i = 0; i < in->nlibs; i++) {
        snprintf(in->libs[i].rel, sizeof in->libs[i].rel, "%s/%s", in->prefix, in->libs[i].name);
        rooted(o, in->libs[i].rel, in->libs[i].path, sizeof in->libs[i].path);
    }
    rooted(o, CONF_REL, in->conf_path, sizeof in->conf_path);
    if (in->had < 0) {
        say_err("%s", err);
        return -1;
    }
    if (in->had) {
        if (strcmp(m->prefix, in->prefix) != 0) {
            say_err("already installed with prefix %s; run --uninstall first", m->prefix);
            return -1;
        }
        for (int i = 0; i < m->nfiles; i++) {
            char p[PATH_MAX], sha[65];
            rooted(o, m->files[i].path, p, sizeof p);
            int st = file_sha(p, sha);
            if (st > 0 && strcmp(sha, m->files[i].sha) != 0) {
                say_err("%s changed since it was installed; not overwriting it (remove it "
                        "yourself, or restore it and run --uninstall)", p);
                return -1;
            }
        }
    } else {
        snprintf(m->prefix, sizeof m->prefix, "%s", in->prefix);
    }
    /* never overwrite a file that is not ours (in the record) */
    const char *mine[3] = {NULL, NULL, CONF_REL}, *mine_path[3] = {NULL, NULL, in->conf_path};
    for (int i = 0; i < in->nlibs; i++) {
        mine[i] = in->libs[i].rel;
        mine_path[i] = in->libs[i].path;
    }
    for (int i = 0; i < 3; i++)
        if (mine[i] && manifest_find_file(m, mine[i]) < 0 && access(mine_path[i], F_OK) == 0) {
            say_err("%s exists and was not installed by flyt-client-manager (no record in "
                    "%s%s); not overwriting it", mine_path[i], root_of(o), MANIFEST_REL);
            return -1;
        }
    return 0;
}

/* The folders, recorded before the files go in so that a failure later leaves a record.
 * 0; 1 when the folders failed (the record is to be saved); -1 when the record could not
 * be written. Said. */
static int make_folders(struct install *in)
{
    char err[PATH_MAX + 256], dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", MANIFEST_REL);
    if (make_dirs(in->o, in->m, in->prefix, err, sizeof err) < 0 ||
        make_dirs(in->o, in->m, "/etc/ld.so.conf.d", err, sizeof err) < 0 ||
        make_dirs(in->o, in->m, dirname(dir), err, sizeof err) < 0) {
        say_err("%s", err);
        return 1;
    }
    if (manifest_save(in->o, in->m, err, sizeof err) < 0) {
        say_err("%s", err);
        return -1;
    }
    return 0;
}

/* The libraries, then the loader's conf naming the prefix; each recorded. 0, or -1 (said). */
static int write_files(struct install *in)
{
    char sha[65];
    for (int i = 0; i < in->nlibs; i++) {
        struct lib_file *lib = &in->libs[i];
        if (write_atomic(lib->path, lib->data, lib->len, 0755) < 0) {
            say_err("cannot write %s: %s", lib->path, strerror(errno));
            return -1;
        }
        flyt_sha256_hex(lib->data, lib->len, sha, sizeof sha);
        manifest_set_file(in->m, lib->rel, sha);
        printf("installed %s (from %s)\n", lib->path, lib->src);
    }
    struct flyt_buf cb = {0};
    flyt_buf_printf(&cb, "# Written by flyt-client-manager --install; --uninstall removes it.\n"
                         "# Puts Flyt's %s%s (GPU through the Flyt cluster) ahead of\n"
                         "# NVIDIA's in the loader cache; NVIDIA's files are untouched.\n%s\n",
                    LIBNAME, in->nlibs > 1 ? " and " NVML_NAME : "", in->prefix);
    char *conf = flyt_buf_take(&cb);
    if (conf == NULL || write_atomic(in->conf_path, conf, strlen(conf), 0644) < 0) {
        say_err("cannot write %s: %s", in->conf_path, strerror(errno));
        free(conf);
        return -1;
    }
    flyt_sha256_hex(conf, strlen(conf), sha, sizeof sha);
    free(conf);
    manifest_set_file(in->m, CONF_REL, sha);
    printf("wrote %s\n", in->conf_path);
    return 0;
}

/* An earlier install preloaded another file (the retired libcudart.so.13): its line goes
 * before that file does. 0, or -1 (said). */
static int drop_old_preload(struct install *in, const char *lib_rel)
{
    struct manifest *m = in->m;
    if (!m->preload || strcmp(m->preload_line, lib_rel) == 0)
        return 0;
    char err[PATH_MAX + 256];
    int created_before = m->preload_created;
    if (preload_edit(in->o, m->preload_line, 0, &m->preload_created, err, sizeof err) < 0) {
        say_err("%s", err);
        return -1;
    }
    printf("removed %s from %s%s (an earlier install's)\n", m->preload_line, root_of(in->o),
           PRELOAD_REL);
    m->preload = 0;
    m->preload_created = created_before;
    m->preload_line[0] = '\0';
    return 0;
}

/* /etc/ld.so.preload lists libcuda.so.1 with --preload, and not (by us) without. 0, or -1
 * (said). */
static int update_preload(struct install *in)
{
    const struct install_opts *o = in->o;
    struct manifest *m = in->m;
    const char *lib_rel = in->libs[0].rel;
    char err[PATH_MAX + 256];
    if (drop_old_preload(in, lib_rel) < 0)
        return -1;
    if (o->preload) {
        int created = 0, did = preload_edit(o, lib_rel, 1, &created, err, sizeof err);
        if (did < 0) {
            say_err("%s", err);
            return -1;
        }
        if (did) {
            /* a file made by an earlier install whose line was just replaced stays "made" */
            m->preload_created = created || (m->preload_created && !m->preload);
            m->preload = 1;
            snprintf(m->preload_line, sizeof m->preload_line, "%s", lib_rel);
            printf("added %s to %s%s: every process of the VM loads it\n", lib_rel,
                   root_of(o), PRELOAD_REL);
        } else if (m->preload) {
            printf("%s already lists %s\n", PRELOAD_REL, lib_rel);
        } else {
            m->preload_created = 0;
            printf("%s%s already lists %s (not by this install: --uninstall will leave it)\n",
                   root_of(o), PRELOAD_REL, lib_rel);
        }
    } else if (m->preload) {
        if (preload_edit(o, lib_rel, 0, &m->preload_created, err, sizeof err) < 0) {
            say_err("%s", err);
            return -1;
        }
        m->preload = m->preload_created = 0;
        m->preload_line[0] = '\0';
        printf("removed %s from %s%s (no --preload this time)\n", lib_rel, root_of(o),
               PRELOAD_REL);
    } else {
        m->preload_created = 0;
    }
    return 0;
}

/* Files an earlier install recorded that this one does not write (unchanged: checked
 * above) go, so that the loader cannot find them. 0, or -1 (said). */
static int drop_stale_files(struct install *in)
{
    struct manifest *m = in->m;
    for (int i = m->nfiles - 1; i >= 0; i--) {
        int current = strcmp(m->files[i].path, CONF_REL) == 0;
        for (int j = 0; j < in->nlibs; j++)
            current |= strcmp(m->files[i].path, in->libs[j].rel) == 0;
        if (current)
            continue;
        char p[PATH_MAX];
        rooted(in->o, m->files[i].path, p, sizeof p);
        if (unlink(p) != 0 && errno != ENOENT) {
            say_err("cannot remove %s: %s", p, strerror(errno));
            return -1;
        }
        printf("removed %s (an earlier install's, not installed now)\n", p);
        manifest_drop_file(m, i);
    }
    return 0;
}

/* The record saved (also after a failed step), then the loader cache when all went well.
 * The exit status. */
static int finish(struct install *in, int rc)
{
    char err[PATH_MAX + 256];
    if (manifest_save(in->o, in->m, err, sizeof err) < 0) {
        say_err("%s", err);
        return 1;
    }
    if (rc != 0)
        return rc;
    printf("recorded in %s%s\n", root_of(in->o), MANIFEST_REL);
    char want[2][PATH_MAX];
    for (int i = 0; i < in->nlibs; i++)
        snprintf(want[i], PATH_MAX, "%s", in->libs[i].rel);
    return refresh_cache(in->o, want, in->nlibs) < 0 ? 1 : 0;
}

/* Everything after the checks: folders, files, preload, stale files, the record. */
static int install_files(struct install *in)
{
    int folders = make_folders(in);
    if (folders < 0)
        return 1;
    if (folders > 0)
        return finish(in, 1);
    if (write_files(in) < 0 || update_preload(in) < 0 || drop_stale_files(in) < 0)
        return finish(in, 1);
    return finish(in, 0);
}

int cmgr_install(const struct install_opts *o)
{
    struct install in = {.o = o};
    snprintf(in.prefix, sizeof in.prefix, "%s", o->prefix);
    if (check_prefix(in.prefix) < 0)
        return 1;
    for (size_t l = strlen(in.prefix); l > 1 && in.prefix[l - 1] == '/';)
        in.prefix[--l] = '\0';
    in.libs = calloc(2, sizeof *in.libs);
    in.m = calloc(1, sizeof *in.m);
    int rc = 1;
    if (in.libs == NULL || in.m == NULL)
        say_err("out of memory");
    else if (load_libs(&in) == 0 && check_ours(&in) == 0) {
        if (in.had)
            printf("already installed at %s: updating\n", in.prefix);
        rc = install_files(&in);
    }
    for (int i = 0; in.libs && i < 2; i++)
        free(in.libs[i].data);
    free(in.libs);
    free(in.m);
    return rc;
}

int cmgr_uninstall(const struct install_opts *o)
{
    struct manifest *m = calloc(1, sizeof *m);
    char err[PATH_MAX + 256], mpath[PATH_MAX];
    rooted(o, MANIFEST_REL, mpath, sizeof mpath);
    int had = m ? manifest_load(o, m, err, sizeof err) : -1;
    if (had <= 0) {
        if (had == 0)
            say_err("no install record at %s: nothing to undo, nothing removed", mpath);
        else
            say_err("%s", m ? err : "out of memory");
        free(m);
        return 1;
    }
    if (o->prefix && strcmp(o->prefix, m->prefix) != 0)
        printf("note: installed with prefix %s (not %s); undoing that\n", m->prefix, o->prefix);
    int changed = 0;
    for (int i = 0; i < m->nfiles; i++) {
        char p[PATH_MAX], sha[65];
        rooted(o, m->files[i].path, p, sizeof p);
        int st = file_sha(p, sha);
        if (st < 0 || (st > 0 && strcmp(sha, m->files[i].sha) != 0)) {
            say_err("%s is not the file --install wrote (changed since); refusing to remove it",
                    p);
            changed++;
        }
    }
    if (changed) {
        say_err("nothing removed: restore or remove the changed file%s yourself, then run "
                "--uninstall again", changed == 1 ? "" : "s");
        free(m);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < m->nfiles; i++) {
        char p[PATH_MAX];
        rooted(o, m->files[i].path, p, sizeof p);
        if (unlink(p) == 0)
            printf("removed %s\n", p);
        else if (errno == ENOENT)
            printf("already gone: %s\n", p);
        else {
            say_err("cannot remove %s: %s", p, strerror(errno));
            rc = 1;
        }
    }
    if (m->preload) {
        if (preload_edit(o, m->preload_line, 0, &m->preload_created, err, sizeof err) < 0) {
            say_err("%s", err);
            rc = 1;
        } else {
            printf("removed %s from %s%s\n", m->preload_line, root_of(o), PRELOAD_REL);
        }
    }
    if (rc == 0) {
        if (unlink(mpath) != 0 && errno != ENOENT) {
            say_err("cannot remove %s: %s", mpath, strerror(errno));
            rc = 1;
        }
        for (int i = m->ndirs - 1; i >= 0 && rc == 0; i--) {
            char p[PATH_MAX];
            rooted(o, m->dirs[i], p, sizeof p);
            if (rmdir(p) == 0)
                printf("removed %s/\n", p);
            else if (errno == ENOTEMPTY || errno == EEXIST)
                printf("kept %s/: other files are in it\n", p);
            else if (errno != ENOENT)
                say_err("cannot remove %s: %s", p, strerror(errno));
        }
    }
    if (rc == 0 && refresh_cache(o, NULL, 0) < 0)
        rc = 1;
    if (rc == 0)
        printf("uninstalled\n");
    free(m);
    return rc;
}
