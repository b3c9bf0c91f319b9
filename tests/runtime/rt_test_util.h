/* rt_test_util.h - helpers shared by the runtime's CUnit tests. */
#ifndef EINC_RT_TEST_UTIL_H
#define EINC_RT_TEST_UTIL_H

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rt_internal.h"

/* Stores v as element i of an array of `dtype` (bf16 rounded to nearest even). */
static inline void test_store(int32_t dtype, void *p, int64_t i, double v)
{
    if (dtype == RT_F64)
        ((double *)p)[i] = v;
    else if (dtype == RT_F32)
        ((float *)p)[i] = (float)v;
    else if (dtype == RT_I8) /* rounded to the nearest int8 */
        ((int8_t *)p)[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v < 0 ? v - 0.5 : v + 0.5);
    else
        ((uint16_t *)p)[i] = rt_f32_to_bf16((float)v);
}

/* Element i of an array of `dtype`, as double. */
static inline double test_load(int32_t dtype, const void *p, int64_t i)
{
    if (dtype == RT_F64)
        return ((const double *)p)[i];
    if (dtype == RT_F32)
        return ((const float *)p)[i];
    if (dtype == RT_I8)
        return ((const int8_t *)p)[i];
    return rt_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* A logit from a small set (7 levels), so ties within a row and across
 * its shards are common; now and then -Inf or -0.0, and with `specials`
 * NaN or +Inf.  Advances *state (splitmix64). */
static inline double test_draw_logit(uint64_t *state, int specials)
{
    *state = rt_splitmix64(*state);
    uint64_t r = *state % 64;
    if (specials && r == 0)
        return NAN;
    if (specials && r == 1)
        return INFINITY;
    if (r == 2)
        return -INFINITY;
    if (r == 3)
        return -0.0;
    return (double)(r % 7) * 0.5 - 1.0;
}

/* A `run` for programs that tests only use for their mesh. */
static inline void test_noop_run(rt_device *dev, void *const *in, void *const *out)
{
    (void)dev;
    (void)in;
    (void)out;
}

/* A program that tests use for its mesh only: `naxes` axes named X, Y,
 * Z, W with the given sizes, a no-op run. */
static inline rt_program test_mesh_program(int32_t naxes, const int64_t *sizes)
{
    rt_program p;
    memset(&p, 0, sizeof p);
    p.abi_version = RT_ABI_VERSION;
    p.naxes = naxes;
    memcpy(p.axis_names, "XYZW", RT_MAX_AXES);
    memcpy(p.axis_sizes, sizes, (size_t)naxes * sizeof *sizes);
    p.run = test_noop_run;
    return p;
}

/* Runs fn(arg) in a child process; returns its exit status (-1 if it did
 * not exit) and what it wrote to stderr, NUL-terminated. */
static inline int test_in_child(void (*fn)(void *), void *arg, char *err, size_t errlen)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < errlen && (n = read(fd[0], err + len, errlen - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A fresh temporary directory for one test (removed by test_remove_dir()). */
static inline void test_make_dir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/einrt_test_XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
}

/* Removes `dir` and the files in it. */
static inline void test_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

#endif
