/*
 * bench_util.h - timing helpers shared by the C benchmark programs of bench/.
 *
 * Benchmarks are programs run by hand through the Python scripts beside them, never
 * tests: they print one `RESULT key=value ...` line per measurement, which
 * the scripts parse and turn into ratios against a baseline measured in the
 * same run (docs/performance.md).
 */
#ifndef EINC_BENCH_UTIL_H
#define EINC_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds from a monotonic clock. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of t[0..n-1] (sorts t in place); 0 when n == 0. */
static inline double bench_median(double *t, int n)
{
    if (n <= 0)
        return 0;
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Deterministic values in [-1, 1) (xorshift64*), so runs are comparable. */
static inline double bench_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (double)((x * 2685821657736338717ull) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* Iterations for a collective or copy of `bytes`: about 256 MiB moved per
 * measurement, at least 5 and at most 1000 iterations. */
static inline int bench_iters(int64_t bytes)
{
    int64_t it = ((int64_t)256 << 20) / (bytes > 0 ? bytes : 1);
    return (int)(it < 5 ? 5 : it > 1000 ? 1000 : it);
}

#endif
