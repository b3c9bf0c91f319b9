/*
 * test_collectives.c - every collective of the threads backend against a
 * straightforward implementation of the seeds' semantics (coll_check.h)
 * on 1D/2D/3D meshes of 1, 2, 4 and 8 devices, groups over one and two axes
 * (both orders), dims leading/middle/last, f32/f64/bf16.  Each launch runs
 * all kinds and dims back to back on the same groups, which also exercises
 * barrier reuse.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "coll_check.h"
#include "rt_test_util.h"

/* Runs every kind and dim for each dtype on the group `axes` of `mesh`. */
static void run_case(int32_t naxes_mesh, const int64_t *sizes, int32_t naxes,
                     const int32_t *axes)
{
    rt_program p;
    memset(&p, 0, sizeof p);
    p.abi_version = RT_ABI_VERSION;
    p.naxes = naxes_mesh;
    memcpy(p.axis_names, "XYZW", RT_MAX_AXES);
    memcpy(p.axis_sizes, sizes, (size_t)naxes_mesh * sizeof *sizes);
    p.run = test_noop_run;
    int64_t n = rt_mesh_size(&p);
    for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
        coll_config c = {.prog = &p, .naxes = naxes, .dtype = dtype};
        memcpy(c.axes, axes, (size_t)naxes * sizeof *axes);
        c.errors = calloc((size_t)n, sizeof *c.errors);
        c.checked = calloc((size_t)n, sizeof *c.checked);
        rt_threads_launch(&p, 0, RT_BIND_NONE, coll_check_device, &c);
        int64_t errors = 0, checked = 0;
        for (int64_t i = 0; i < n; i++) {
            errors += c.errors[i];
            checked += c.checked[i];
        }
        CU_ASSERT_EQUAL(errors, 0);
        CU_ASSERT(checked > 0);
        if (errors)
            fprintf(stderr, "\n  mesh of %lld devices, %d group axes (first %d), %s: %lld of %lld "
                    "elements wrong\n", (long long)n, naxes, axes[0], rt_dtype_name(dtype),
                    (long long)errors, (long long)checked);
        free(c.errors);
        free(c.checked);
    }
}

static void test_1d_meshes(void)
{
    static const int64_t sizes[][1] = {{1}, {2}, {4}, {8}};
    const int32_t x[] = {0};
    for (int i = 0; i < 4; i++)
        run_case(1, sizes[i], 1, x);
}

static void test_2d_mesh_one_axis(void)
{
    const int64_t sizes[] = {2, 4};
    const int32_t x[] = {0}, y[] = {1};
    run_case(2, sizes, 1, x);
    run_case(2, sizes, 1, y);
}

static void test_2d_mesh_both_axes(void)
{
    const int64_t sizes[] = {2, 4};
    const int32_t xy[] = {0, 1}, yx[] = {1, 0};
    run_case(2, sizes, 2, xy);
    run_case(2, sizes, 2, yx);
}

static void test_3d_mesh(void)
{
    const int64_t sizes[] = {2, 2, 2};
    const int32_t y[] = {1}, z[] = {2}, xz[] = {0, 2}, zy[] = {2, 1}, xyz[] = {0, 1, 2};
    run_case(3, sizes, 1, y);
    run_case(3, sizes, 1, z);
    run_case(3, sizes, 2, xz);
    run_case(3, sizes, 2, zy);
    run_case(3, sizes, 3, xyz);
}

static void test_axis_of_size_one(void)
{
    const int64_t sizes[] = {1, 4};
    const int32_t x[] = {0}, xy[] = {0, 1};
    run_case(2, sizes, 1, x);
    run_case(2, sizes, 2, xy);
}

/* The AllReduce slices cover the array exactly, also when G does not divide n. */
static void test_slice_ranges(void)
{
    for (int64_t n = 0; n < 20; n++)
        for (int64_t G = 1; G <= 8; G++) {
            int64_t next = 0;
            for (int64_t r = 0; r < G; r++) {
                int64_t lo, hi;
                rt_slice_range(n, G, r, &lo, &hi);
                CU_ASSERT_EQUAL(lo, next);
                CU_ASSERT(hi >= lo && hi - lo <= n / G + 1);
                next = hi;
            }
            CU_ASSERT_EQUAL(next, n);
        }
}

/* bf16 sums are done in f32 and rounded once. */
static void test_bf16_sum_in_f32(void)
{
    uint16_t a[1] = {rt_f32_to_bf16(1.0f)};
    uint16_t b[1] = {rt_f32_to_bf16(0x1p-8f)};
    const void *srcs[3] = {a, b, b};
    uint16_t out[1];
    rt_sum_arrays(RT_BF16, out, srcs, 3, 1);
    /* In f32, 1 + 2^-8 + 2^-8 = 1 + 2^-7, exact in bf16 (8 significant bits);
     * rounding after each addition would give 1 (1 + 2^-8 ties to even). */
    CU_ASSERT_EQUAL(rt_bf16_to_f32(out[0]), 1.0078125f);
}

/* A barrier reports a deadlock instead of sleeping when no thread can come. */
static void test_deadlock_detection(void)
{
    rt_waitstate one = {.nthreads = 1};
    atomic_init(&one.word, 0);
    rt_barrier b;
    rt_barrier_init(&b, 2, &one);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b), -1); /* the only thread waits for a second */
    rt_barrier_destroy(&b);

    rt_waitstate two = {.nthreads = 2};
    atomic_init(&two.word, 0);
    CU_ASSERT_EQUAL(rt_waitstate_finish(&two), 0); /* nobody waits: fine */
    rt_barrier_init(&b, 2, &two);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b), -1); /* its peer has finished */
    rt_barrier_destroy(&b);

    rt_waitstate many = {.nthreads = 3};
    atomic_init(&many.word, 0);
    rt_barrier_init(&b, 1, &many);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b), 0); /* a barrier of one never blocks */
    rt_barrier_destroy(&b);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"1D meshes of 1, 2, 4, 8 devices", test_1d_meshes},
        {"2D mesh 2x4, groups over X and over Y", test_2d_mesh_one_axis},
        {"2D mesh 2x4, groups over XY and YX", test_2d_mesh_both_axes},
        {"3D mesh 2x2x2, groups over 1, 2, 3 axes", test_3d_mesh},
        {"mesh axis of size 1", test_axis_of_size_one},
        {"AllReduce slice ranges", test_slice_ranges},
        {"bf16 sums in f32", test_bf16_sum_in_f32},
        {"barrier deadlock detection", test_deadlock_detection},
    };
    einc_add_suite("runtime collectives (threads)", tests, (int)(sizeof tests / sizeof tests[0]));
}
