/*
 * test_alloc.c - rt_alloc / rt_free (runtime/device.c): live and peak
 * accounting, a freed block handed back to the next request of its exact
 * size, the cache bounded by the peak, a double free and a foreign pointer
 * refused with a message (in a child process: rt_fatal ends the process),
 * and a block of 2 MiB or more on a 2 MiB boundary, advised as huge pages.
 */
#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

static const rt_program solo_prog = {.abi_version = RT_ABI_VERSION, .run = test_noop_run};

static void test_reuse(void)
{
    rt_device dev;
    rt_device_init(&dev, &solo_prog, NULL, NULL, 0);
    char *a = rt_alloc(&dev, 1000), *b = rt_alloc(&dev, 3000);
    CU_ASSERT_EQUAL((uintptr_t)a % 64, 0);
    memset(a, 1, 1000);
    memset(b, 2, 3000);
    CU_ASSERT_EQUAL(dev.live_bytes, 4000);
    CU_ASSERT_EQUAL(dev.peak_bytes, 4000);
    rt_free(&dev, a);
    rt_free(&dev, b);
    CU_ASSERT_EQUAL(dev.live_bytes, 0);
    CU_ASSERT_EQUAL(dev.cached_bytes, 4000);
    /* The same sizes come back from the cache; another size does not. */
    char *b2 = rt_alloc(&dev, 3000), *a2 = rt_alloc(&dev, 1000);
    CU_ASSERT_PTR_EQUAL(b2, b);
    CU_ASSERT_PTR_EQUAL(a2, a);
    CU_ASSERT_EQUAL(dev.cached_bytes, 0);
    CU_ASSERT_EQUAL(dev.live_bytes, 4000);
    char *c = rt_alloc(&dev, 999);
    CU_ASSERT_PTR_NOT_EQUAL(c, a);
    CU_ASSERT_EQUAL(dev.peak_bytes, 4999);
    rt_free(&dev, c);
    rt_free(&dev, a2);
    rt_free(&dev, b2);
    CU_ASSERT_EQUAL(dev.cached_bytes, 4999);
    rt_device_release(&dev);
    CU_ASSERT_EQUAL(dev.cached_bytes, 0);
    CU_ASSERT_PTR_NULL(dev.alloc_cache);
}

static void test_cache_bounded_by_peak(void)
{
    rt_device dev;
    rt_device_init(&dev, &solo_prog, NULL, NULL, 0);
    /* Peak 100: a freed 100 is kept, and so is a later 60 (a new block:
     * no exact match), since 160 cached with nothing live is within twice
     * the peak: a run's last frees (a step's new params) stay cached. */
    void *a = rt_alloc(&dev, 100);
    rt_free(&dev, a);
    CU_ASSERT_EQUAL(dev.cached_bytes, 100);
    void *b = rt_alloc(&dev, 60);
    CU_ASSERT_EQUAL(dev.cached_bytes, 100);
    rt_free(&dev, b);
    CU_ASSERT_EQUAL(dev.cached_bytes, 160);
    /* A new 150 (peak 150) with 160 cached would pass 2 x 150: the cache
     * gives back the 60 first. */
    void *c = rt_alloc(&dev, 150);
    CU_ASSERT_EQUAL(dev.peak_bytes, 150);
    CU_ASSERT_EQUAL(dev.cached_bytes, 100);
    CU_ASSERT(dev.live_bytes + dev.cached_bytes <= 2 * dev.peak_bytes);
    /* More live blocks raise the peak; the sum stays within twice it. */
    void *d = rt_alloc(&dev, 100); /* the cached 100 */
    CU_ASSERT_EQUAL(dev.cached_bytes, 0);
    void *e = rt_alloc(&dev, 90);
    CU_ASSERT_EQUAL(dev.peak_bytes, 340);
    rt_free(&dev, d);
    rt_free(&dev, e);
    CU_ASSERT(dev.live_bytes + dev.cached_bytes <= 2 * dev.peak_bytes);
    rt_free(&dev, c);
    CU_ASSERT(dev.cached_bytes <= 2 * dev.peak_bytes);
    rt_device_release(&dev);
}

/* Runs fn in a child; returns its exit status and what it wrote to stderr. */
static void double_free(void *arg)
{
    (void)arg;
    rt_device dev;
    rt_device_init(&dev, &solo_prog, NULL, NULL, 0);
    void *a = rt_alloc(&dev, 256);
    rt_free(&dev, a); /* cached: the header is still ours to read */
    rt_free(&dev, a);
}

static void test_double_free(void)
{
    char err[512];
    CU_ASSERT_EQUAL(test_in_child(double_free, NULL, err, sizeof err), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "freed twice"));
}

/* Whether the mapping that holds p is advised as huge pages (MADV_HUGEPAGE:
 * "hg" among its VmFlags in /proc/self/smaps): 1 or 0; -1 where that
 * cannot be read. */
static int huge_advised(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0, got = -1;
    while (got < 0 && fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2)
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            got = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return got;
}

static void test_huge_blocks(void)
{
    rt_device dev;
    rt_device_init(&dev, &solo_prog, NULL, NULL, 0);
    int64_t big = (int64_t)3 << 20;
    char *a = rt_alloc(&dev, big), *s = rt_alloc(&dev, 100000);
    /* the header (64 bytes) starts the 2 MiB page; the data follows it */
    CU_ASSERT_EQUAL((uintptr_t)a % ((uintptr_t)2 << 20), 64);
    CU_ASSERT_EQUAL((uintptr_t)s % 64, 0);
    memset(a, 1, (size_t)big);
    CU_ASSERT_NOT_EQUAL(huge_advised(a), 0);
    rt_free(&dev, s);
    rt_free(&dev, a);
    rt_device_release(&dev);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"freed blocks come back for the same size", test_reuse},
        {"live and cached blocks stay within twice the peak", test_cache_bounded_by_peak},
        {"a double free is refused", test_double_free},
        {"blocks of 2 MiB or more are huge-page advised", test_huge_blocks},
    };
    einc_add_suite("rt_alloc", tests, (int)(sizeof tests / sizeof tests[0]));
}
