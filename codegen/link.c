/*
 * link.c - links the emitted object with the runtime (c3c's linker.c step).
 *
 *   threads: cc  [-fuse-ld=gold] objs <runtime_dir>/libeinrt.a     -lopenblas -lmicrohttpd -lcjson -lmvec -lm -lpthread -o out
 *   MPI:     mpicc [-fuse-ld=gold] objs <runtime_dir>/libeinrt_mpi.a -lopenblas -lmicrohttpd -lcjson -lmvec -lm -lpthread -o out
 *
 * objs: the sharded program's object and the reference program's (emit.c).
 *
 * gold, where the compiler driver has it (checked when einc is configured),
 * because GNU ld spends ~110 ms more on the same link: the link was the
 * largest part of einc's time after LLVM (docs/performance.md, section 4).
 * The linker runs by posix_spawnp (no shell, so paths need no quoting; no
 * copy of einc's page tables, which hold all of libLLVM, as fork would
 * make); its stdout and stderr are read through a pipe and reported through
 * the diag context when it fails, so the user sees the linker's own words.
 */
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg_internal.h"

extern char **environ; /* the linker runs in einc's environment (PATH, LIBRARY_PATH) */

#ifndef EINC_RUNTIME_DIR
#define EINC_RUNTIME_DIR "."
#endif

/* Reads everything from `fd` into a malloc'd NUL-terminated string. */
static char *slurp(int fd)
{
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    for (;;) {
        if (len + 1024 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t)
                break;
            s = t;
        }
        ssize_t n = read(fd, s + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    s[len] = 0;
    return s;
}

int cg_link(const char *const *objs, int nobjs, const cg_options *opts, diag_ctx *d)
{
    bool mpi = opts->runtime == CG_RUNTIME_MPI;
    const char *dir = opts->runtime_dir ? opts->runtime_dir : EINC_RUNTIME_DIR;
    char lib[4096];
    snprintf(lib, sizeof lib, "%s/%s", dir, mpi ? "libeinrt_mpi.a" : "libeinrt.a");
    struct stat st;
    if (stat(lib, &st) != 0) {
        diag_error(d, DIAG_NOLOC, "runtime library '%s' not found (build the %s target, or "
                                  "give the directory that holds it)", lib,
                   mpi ? "einrt_mpi" : "einrt");
        return -1;
    }
    if (nobjs < 1 || nobjs > 4) {
        diag_error(d, DIAG_NOLOC, "internal error: %d objects to link (1 to 4)", nobjs);
        return -1;
    }
    const char *argv[20];
    int argc = 0;
    argv[argc++] = mpi ? "mpicc" : "cc";
#ifdef EINC_LINK_GOLD
    argv[argc++] = "-fuse-ld=gold";
#endif
    for (int i = 0; i < nobjs; i++)
        argv[argc++] = objs[i];
    argv[argc++] = lib;
    argv[argc++] = "-lopenblas";
    argv[argc++] = "-lmicrohttpd"; /* --serve's HTTP server (runtime/server.c) */
    argv[argc++] = "-lcjson";      /* its JSON bodies (runtime/request.c) */
#if defined(__x86_64__)
    argv[argc++] = "-lmvec"; /* vectorised exp/log (target.c) */
#endif
    argv[argc++] = "-lm";
    argv[argc++] = "-lpthread";
#ifdef EINC_SANITIZE_LINK
    /* A runtime built with sanitizers needs their run-time libraries. */
    argv[argc++] = "-fsanitize=address,undefined";
#endif
    argv[argc++] = "-o";
    argv[argc++] = opts->output;
    argv[argc] = NULL;

    int fds[2];
    if (pipe(fds) != 0) {
        diag_error(d, DIAG_NOLOC, "cannot run the linker: pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err != 0) {
        diag_error(d, DIAG_NOLOC, "cannot run '%s': %s", argv[0], strerror(err));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    close(fds[1]);
    char *text = slurp(fds[0]);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        diag_error(d, DIAG_NOLOC, "linking '%s' failed (%s exited with status %d):\n%s",
                   opts->output, argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                   text ? text : "");
        rc = -1;
    } else if (text && *text) {
        /* Warnings from a successful link still reach the user. */
        fputs(text, d->out ? d->out : stderr);
    }
    free(text);
    return rc;
}
