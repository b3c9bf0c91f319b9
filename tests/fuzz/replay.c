/*
 * replay.c - runs a fuzz harness on files, without libFuzzer: the main of
 * the fuzz_*_replay tests that CTest runs in every build (gcc, ASan+UBSan).
 *
 *     fuzz_frontend_replay DIR_OR_FILE...
 *
 * Each argument is a file or a directory whose regular files (not
 * recursively, in name order) are inputs.  An input that breaks an
 * invariant aborts inside the harness, which fails the test with the
 * harness's message; after the last input it prints how many ran.  The
 * corpus directories hold the seeds and every input that once crashed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

/* Reads all of `path`; NULL if it cannot be read. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger)
                free(buf);
            buf = bigger;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Runs the harness on one file; returns 1 if it ran, 0 if unreadable. */
static int run_file(const char *path)
{
    size_t len;
    uint8_t *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 0;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    int ran = 0, unreadable = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            unreadable++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            run_file(argv[i]) ? ran++ : unreadable++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, NULL, by_name);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], list[k]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                run_file(path) ? ran++ : unreadable++;
            free(list[k]);
        }
        if (n >= 0)
            free(list);
    }
    printf("replayed %d inputs, %d unreadable\n", ran, unreadable);
    /* No input at all means the corpus went missing: fail rather than pass. */
    return ran > 0 && unreadable == 0 ? 0 : 1;
}
