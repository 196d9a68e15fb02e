/*
 * For builds without libFuzzer (gcc, CI's plain and sanitizer builds): runs
 * a fuzz target's LLVMFuzzerTestOneInput once on every file named, or found
 * in a directory named, on the command line — the corpus replay.
 * usage: <target>-replay FILE_OR_DIR...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t size = 0, cap = 0, n;
    do {
        if (size == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (grown == NULL) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = grown;
        }
        n = fread(buf + size, 1, cap - size, f);
        size += n;
    } while (n > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed += run_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            failed += run_file(path) != 0;
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", files, failed);
    return files == 0 || failed ? 1 : 0;
}
