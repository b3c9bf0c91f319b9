/*
 * test_collectives.c - every collective of the threads backend against a
 * straightforward implementation of the seeds' semantics (coll_check.h)
 * on 1D/2D/3D meshes of 1, 2, 4 and 8 devices, groups over one and two axes
 * (both orders), dims leading/middle/last, groups of several axes also
 * with each axis along its own dim (RT_DIM_PER_AXIS), f32/f64/bf16,
 * AllReduce and ReduceScatter with each reduce_op (sum, max, min).  Each launch runs
 * all kinds and dims back to back on the same groups, which also exercises
 * barrier reuse.  The combine itself (rt_reduce_arrays) is tested directly,
 * and bad reduce_ops must end the job with a message (in a child process:
 * rt_fatal ends the process).
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cunit_main.h"
#include "coll_check.h"
#include "rt_test_util.h"

/* Runs every kind and dim for each dtype and reduce_op on the group `axes`
 * of `mesh`. */
static void run_case(int32_t naxes_mesh, const int64_t *sizes, int32_t naxes,
                     const int32_t *axes)
{
    rt_program p = test_mesh_program(naxes_mesh, sizes);
    int64_t n = rt_mesh_size(&p);
    for (int32_t op = RT_REDUCE_SUM; op <= RT_REDUCE_MIN; op++) {
        for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
            coll_config c = {.prog = &p, .naxes = naxes, .dtype = dtype, .reduce_op = op};
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
                fprintf(stderr, "\n  mesh of %lld devices, %d group axes (first %d), %s, reduce "
                        "%s: %lld of %lld elements wrong\n", (long long)n, naxes, axes[0],
                        rt_dtype_name(dtype), rt_reduce_op_name(op), (long long)errors,
                        (long long)checked);
            free(c.errors);
            free(c.checked);
        }
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

/* The 2x2 mesh of the Transformer's tensor parallelism: groups over X, Y,
 * XY and YX (every reduce_op, as every case). */
static void test_2x2_mesh(void)
{
    const int64_t sizes[] = {2, 2};
    const int32_t x[] = {0}, y[] = {1}, xy[] = {0, 1}, yx[] = {1, 0};
    run_case(2, sizes, 1, x);
    run_case(2, sizes, 1, y);
    run_case(2, sizes, 2, xy);
    run_case(2, sizes, 2, yx);
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

/* Element i of a 4-member group in test_reduce_arrays: member j holds
 * vals[j][i]. */
static const float reduce_vals[4][6] = {
    {-3.0f, -1.0f, 2.0f, NAN, -0.5f, 7.0f},
    {-2.0f, -5.0f, NAN, 1.0f, -0.25f, -INFINITY},
    {-4.0f, -1.5f, 3.0f, 4.0f, -8.0f, 1.0f},
    {-2.5f, -6.0f, 0.0f, -9.0f, -0.75f, 2.0f},
};

/* rt_reduce_arrays: max and min of negative values, a NaN in any member
 * (first or later) giving NaN, -inf; f32, f64 and bf16 (exact, since every
 * value is a bf16), also with dst aliasing the second source as the MPI
 * operator uses it. */
static void test_reduce_arrays(void)
{
    static const float want[3][6] = {
        [RT_REDUCE_SUM] = {-11.5f, -13.5f, NAN, NAN, -9.5f, -INFINITY},
        [RT_REDUCE_MAX] = {-2.0f, -1.0f, NAN, NAN, -0.25f, 7.0f},
        [RT_REDUCE_MIN] = {-4.0f, -6.0f, NAN, NAN, -8.0f, -INFINITY},
    };
    for (int32_t op = RT_REDUCE_SUM; op <= RT_REDUCE_MIN; op++)
        for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
            uint64_t buf[4][6], out[6];
            const void *srcs[4];
            for (int j = 0; j < 4; j++) {
                for (int i = 0; i < 6; i++)
                    test_store(dtype, buf[j], i, reduce_vals[j][i]);
                srcs[j] = buf[j];
            }
            rt_reduce_arrays(op, dtype, out, srcs, 4, 6);
            for (int i = 0; i < 6; i++) {
                double got = test_load(dtype, out, i), w = want[op][i];
                CU_ASSERT(isnan(w) ? isnan(got) : got == w);
            }
            /* Two members into the second one's buffer: inout = in op inout. */
            rt_reduce_arrays(op, dtype, buf[1], srcs, 2, 6);
            for (int i = 0; i < 6; i++) {
                double a = reduce_vals[0][i], b = reduce_vals[1][i];
                double w = isnan(a) || isnan(b) ? NAN
                           : op == RT_REDUCE_MAX ? fmax(a, b)
                           : op == RT_REDUCE_MIN ? fmin(a, b)
                                                 : a + b;
                double got = test_load(dtype, buf[1], i);
                CU_ASSERT(isnan(w) ? isnan(got) : got == w);
            }
        }
}

/* A bad descriptor for the death tests: a 1D collective over X of a 2x2
 * mesh, called by every device through rt_collective or, with `async`,
 * rt_async_start. */
typedef struct bad_case {
    int32_t kind;                /* enum rt_coll_kind */
    int32_t reduce_op;           /* the bad (or misplaced) reduce_op */
    int async;                   /* 1: through rt_async_start */
    const char *message;         /* what stderr must contain */
} bad_case;

static void bad_device(rt_device *dev, void *arg)
{
    const bad_case *b = arg;
    rt_coll_desc d = {.kind = b->kind, .dtype = RT_F32, .naxes = 1, .axes = {0}, .rank = 1,
                      .in_shape = {4}, .out_shape = {4}, .dim = 0, .dim2 = -1, .op_id = 23,
                      .reduce_op = b->reduce_op};
    if (b->kind == RT_ALLGATHER)
        d.out_shape[0] = 8;
    if (b->kind == RT_REDUCESCATTER || b->kind == RT_SLICE)
        d.in_shape[0] = 8;
    if (b->kind == RT_ALLREDUCE)
        d.dim = -1;
    if (b->kind == RT_ALLTOALL) {
        d.rank = 2;
        d.in_shape[0] = 2, d.in_shape[1] = 4;
        d.out_shape[0] = 4, d.out_shape[1] = 2;
        d.dim2 = 1;
    }
    float in[8] = {0}, out[8];
    if (b->async) {
        rt_async *q = rt_async_open(dev);
        rt_async_wait(q, rt_async_start(q, &d, in, out));
        rt_async_close(q);
    } else {
        rt_collective(dev, &d, in, out);
    }
}

static void bad_job(void *arg)
{
    static const rt_program p = {.abi_version = RT_ABI_VERSION, .naxes = 2,
                                 .axis_names = {'X', 'Y'}, .axis_sizes = {2, 2},
                                 .run = test_noop_run};
    rt_threads_launch(&p, 0, RT_BIND_NONE, bad_device, arg);
}

/* A reduce_op outside 0..2, or a max / min on a kind that does not reduce,
 * ends the job with status 1 and a message naming the op. */
static void test_bad_reduce_op(void)
{
    static const bad_case cases[] = {
        {RT_ALLREDUCE, 7, 0, "AllReduce (op 23): unknown reduce_op 7 (0 sum, 1 max, 2 min)"},
        {RT_REDUCESCATTER, -1, 1, "ReduceScatter (op 23): unknown reduce_op -1"},
        {RT_ALLGATHER, RT_REDUCE_MAX, 0, "AllGather (op 23): reduce_op is 1 (max), but only "
                                         "AllReduce and ReduceScatter reduce; it must be 0"},
        {RT_ALLGATHER, RT_REDUCE_MIN, 1, "AllGather (op 23): reduce_op is 2 (min)"},
        {RT_ALLTOALL, RT_REDUCE_MAX, 0, "AllToAll (op 23): reduce_op is 1 (max)"},
        {RT_SLICE, RT_REDUCE_MIN, 0, "Slice (op 23): reduce_op is 2 (min)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char err[4096];
        int st = test_in_child(bad_job, (void *)&cases[k], err, sizeof err);
        CU_ASSERT_EQUAL(st, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "einrt: error: device "));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[k].message));
        if (st != 1 || !strstr(err, cases[k].message))
            fprintf(stderr, "\n  case %zu: status %d, stderr: %s\n", k, st, err);
    }
}

/* A barrier reports a deadlock instead of sleeping when no thread can come. */
static void test_deadlock_detection(void)
{
    rt_waitstate one = {.nthreads = 1};
    atomic_init(&one.word, 0);
    rt_barrier b;
    rt_barrier_init(&b, 2, &one);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b, NULL), -1); /* the only thread waits for a second */
    rt_barrier_destroy(&b);

    rt_waitstate two = {.nthreads = 2};
    atomic_init(&two.word, 0);
    CU_ASSERT_EQUAL(rt_waitstate_finish(&two), 0); /* nobody waits: fine */
    rt_barrier_init(&b, 2, &two);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b, NULL), -1); /* its peer has finished */
    rt_barrier_destroy(&b);

    rt_waitstate many = {.nthreads = 3};
    atomic_init(&many.word, 0);
    rt_barrier_init(&b, 1, &many);
    CU_ASSERT_EQUAL(rt_barrier_wait(&b, NULL), 0); /* a barrier of one never blocks */
    rt_barrier_destroy(&b);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"1D meshes of 1, 2, 4, 8 devices", test_1d_meshes},
        {"2D mesh 2x4, groups over X and over Y", test_2d_mesh_one_axis},
        {"2D mesh 2x4, groups over XY and YX", test_2d_mesh_both_axes},
        {"2D mesh 2x2, groups over X, Y, XY and YX", test_2x2_mesh},
        {"3D mesh 2x2x2, groups over 1, 2, 3 axes", test_3d_mesh},
        {"mesh axis of size 1", test_axis_of_size_one},
        {"AllReduce slice ranges", test_slice_ranges},
        {"bf16 sums in f32", test_bf16_sum_in_f32},
        {"sum, max and min combines (NaN, -inf, aliasing)", test_reduce_arrays},
        {"bad reduce_op ends the job with a message", test_bad_reduce_op},
        {"barrier deadlock detection", test_deadlock_detection},
    };
    einc_add_suite("runtime collectives (threads)", tests, (int)(sizeof tests / sizeof tests[0]));
}
