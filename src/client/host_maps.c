/*
 * What /proc/self/maps says about a host range the program registers:
 * whether Flyt may swap its pages for shared ones (private anonymous memory
 * only), and whether NVIDIA's driver would refuse to pin it for writing.
 */
#include "client.h"

#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/vfs.h>

struct maps_line {
    uint64_t lo, hi, inode;
    char perms[8];
    char path[256];
};

/* Calls visit for each mapping overlapping [lo, hi), in address order,
 * until it returns nonzero; covered: how far the mappings visited reach
 * without a gap from lo. */
static int maps_walk(uint64_t lo, uint64_t hi, int (*visit)(const struct maps_line *, void *),
                     void *arg, uint64_t *covered)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char text[512];
    int stop = 0;
    *covered = lo;
    while (!stop && fgets(text, sizeof text, f)) {
        unsigned long long a, b, off, inode;
        struct maps_line m = {.path = ""};
        char dev[16];
        if (sscanf(text, "%llx-%llx %7s %llx %15s %llu %255s", &a, &b, m.perms, &off, dev, &inode,
                   m.path) < 6 || b <= lo)
            continue;
        if (a >= hi)
            break;
        m.lo = a, m.hi = b, m.inode = inode;
        if (a <= *covered && b > *covered)
            *covered = b;
        stop = visit(&m, arg);
    }
    fclose(f);
    return stop;
}

/* Private anonymous memory, or pages an earlier registration of the
 * program's memory left shared (memory.c's "flyt-registered" memfd: the
 * program's own bytes, which Flyt may swap again). */
static int not_plain_anonymous(const struct maps_line *m, void *arg)
{
    (void)arg;
    int anonymous = strncmp(m->perms, "rw-p", 4) == 0 && m->inode == 0 &&
                    (m->path[0] == '\0' || strcmp(m->path, "[heap]") == 0);
    int left_by_flyt = strncmp(m->perms, "rw-s", 4) == 0 &&
                       strcmp(m->path, "/memfd:flyt-registered") == 0;
    return !(anonymous || left_by_flyt);
}

int flyt_maps_plain_anonymous(uint64_t lo, uint64_t hi)
{
    uint64_t covered;
    return maps_walk(lo, hi, not_plain_anonymous, NULL, &covered) == 0 && covered >= hi;
}

/* Linux 6.5 and later refuse a long-term pin for writing of a shared file
 * mapping whose file system writes pages back (mm/gup.c,
 * writable_file_mapping_allowed): NVIDIA's driver pins that way on x86. */
static int kernel_refuses_file_pins(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
        return 0;
    return major > 6 || (major == 6 && minor >= 5);
}

/* Shared memory file systems keep no dirty state to write back. */
static int written_back_file(const struct maps_line *m, void *arg)
{
    (void)arg;
    if (m->perms[3] != 's' || m->inode == 0 || strncmp(m->path, "/memfd:", 7) == 0)
        return 0;
    struct statfs fs;
    if (m->path[0] != '/' || statfs(m->path, &fs) != 0)
        return 0; /* unknown: let the driver of the server decide */
    return fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC && fs.f_type != RAMFS_MAGIC;
}

int flyt_maps_unpinnable_for_write(uint64_t lo, uint64_t hi)
{
    uint64_t covered;
    return kernel_refuses_file_pins() && maps_walk(lo, hi, written_back_file, NULL, &covered) > 0;
}
