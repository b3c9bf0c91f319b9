/*
 * test_cost_threads.c - a calibrated profile prices each op by the cores
 * the runtime really gives it (cost_measured_contention,
 * cost_measured_blas_contention; docs/cost-model.md, "Devices sharing
 * cores").
 *
 * The runtime's thread policy is read from the runtime itself, not
 * restated: the threads backend is launched on meshes of 1, 2, 4 and 8
 * devices and every device reports the OpenBLAS threads its GEMMs would
 * run on.  With C the machine's cores (what `einc calibrate` records),
 * a device's BLAS then gets min(threads, C / devices) cores and its own
 * loops (one thread, the device's) min(1, C / devices).  The profile below
 * was calibrated with 4 devices on those C cores; an op priced on a mesh
 * of D devices must take share(4) / share(D) of its calibrated time, by
 * its kind: a binary einsum at the BLAS share, an elementwise op and a
 * unary einsum (a reduction: einc's own loop) at the loop share.  The
 * test fails if the model prices a lone device's GEMM on one core (the
 * model before this rule: 4x too slow on 2 cores) or its loops on every
 * core, or if the runtime's policy changes without the model.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_test_util.h"
#include "test_util.h"

/* ---- the runtime's policy ---- */

typedef struct blas_seen {
    int threads[8]; /* per device: openblas_get_num_threads() inside the launch */
} blas_seen;

static void record_threads(rt_device *dev, void *arg)
{
    blas_seen *s = arg;
    s->threads[dev->id] = openblas_get_num_threads();
}

/* OpenBLAS threads one device of a `devices`-device mesh runs its GEMMs
 * on under the threads backend (the same on every device, asserted).  The
 * count is process-wide and the backend only ever lowers it, so it is
 * restored to `fresh` (a new process's) before each launch, as each
 * executable starts from it. */
static int backend_blas_threads(int64_t devices, int fresh)
{
    openblas_set_num_threads(fresh);
    rt_program p = test_mesh_program(1, &devices);
    blas_seen s;
    memset(&s, 0, sizeof s);
    rt_threads_launch(&p, 0, RT_BIND_NONE, record_threads, &s);
    for (int64_t i = 1; i < devices; i++)
        CU_ASSERT_EQUAL(s.threads[i], s.threads[0]);
    openblas_set_num_threads(fresh);
    return s.threads[0];
}

/* Cores a device gets: `threads` of its own, at most its share C / D. */
static double share(double cores, double devices, double threads)
{
    return fmin(threads, cores / devices);
}

/* ---- the model's prices ---- */

enum { ROWS = 512, COLS = 1024, INNER = 768 };

/* A profile calibrated with 4 devices on `cores` cores: figures flat in
 * size, so only the core-sharing factor changes with the mesh. */
static cost_hw calibrated(double cores)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    hw.measured = true;
    hw.cal_devices = 4;
    hw.cal_cores = cores;
    hw.elementwise_bw = 4e9;
    hw.ew_npoints = 0;
    hw.ew_write_weight = 1;
    for (int d = 0; d < 3; d++) {
        hw.gemm_npoints[d] = 0;
        hw.peak_flops[d] = 2e10;
    }
    for (int f = 0; f < IR_FN_COUNT; f++)
        hw.fn_time[f] = hw.fn_time_cache[f] = 0;
    hw.fn_time[IR_FN_EXP] = hw.fn_time_cache[IR_FN_EXP] = 2e-9;
    return hw;
}

static ir_value *val(ir_module *m, const char *name, ir_value_kind kind, int rank, const int *dims)
{
    return test_f32_value(m, name, kind, rank, dims);
}

/* On a mesh of `devices` (every value replicated, so each device does the
 * same work whatever the mesh): Y = X W (a GEMM), E = exp(Y), S = sum_C E
 * (a unary einsum).  ops[] gets the three ops. */
static ir_module *program(int64_t devices, ir_op **ops)
{
    ir_module *m = ir_module_new("t.ein");
    CU_ASSERT_FATAL(ir_mesh_add_axis(m, 'X', devices, 0) == 0);
    int R = ir_dim_add(m, "R", ROWS, 0), C = ir_dim_add(m, "C", COLS, 0);
    int K = ir_dim_add(m, "K", INNER, 0);
    ir_value *x = val(m, "X", IR_VAL_INPUT, 2, (int[]){R, K});
    ir_value *w = val(m, "W", IR_VAL_INPUT, 2, (int[]){K, C});
    ir_value *y = val(m, "Y", IR_VAL_OP, 2, (int[]){R, C});
    ir_value *e = val(m, "E", IR_VAL_OP, 2, (int[]){R, C});
    ir_value *s = val(m, "S", IR_VAL_OP, 1, (int[]){R});

    ir_value *xw[2] = {x, w};
    ir_op *mm = ir_op_new(m, IR_OP_EINSUM, 2, xw, y, 0);
    memcpy(mm->u.einsum.labels[0], (int[]){R, K}, 2 * sizeof(int));
    memcpy(mm->u.einsum.labels[1], (int[]){K, C}, 2 * sizeof(int));
    memcpy(mm->u.einsum.result_labels, (int[]){R, C}, 2 * sizeof(int));
    mm->u.einsum.scale = 1.0;
    ir_op_append(m, mm);

    ir_op *ex = ir_op_new(m, IR_OP_ELEMENTWISE, 1, &y, e, 0);
    ir_ew_node *n = ir_alloc(&m->arena, 2 * sizeof *n);
    n[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    n[1] = (ir_ew_node){.kind = IR_EW_CALL, .a = 0, .fn = IR_FN_EXP};
    ex->u.ew.nodes = n;
    ex->u.ew.nnodes = 2;
    ex->u.ew.root = 1;
    memcpy(ex->u.ew.labels[0], (int[]){R, C}, 2 * sizeof(int));
    memcpy(ex->u.ew.result_labels, (int[]){R, C}, 2 * sizeof(int));
    ir_op_append(m, ex);

    ir_op *sum = ir_op_new(m, IR_OP_EINSUM, 1, &e, s, 0);
    memcpy(sum->u.einsum.labels[0], (int[]){R, C}, 2 * sizeof(int));
    sum->u.einsum.result_labels[0] = R;
    sum->u.einsum.scale = 1.0;
    sum->u.einsum.reduce = IR_RED_SUM;
    ir_op_append(m, sum);

    ir_output_add(m, "S", s, 0);
    int i = 0;
    for (ir_op *op = m->first; op; op = op->next)
        ops[i++] = op;
    return m;
}

/* Each op's time on `devices` devices of hw. */
static void price(const cost_hw *hw, int64_t devices, double *t)
{
    ir_op *ops[3];
    ir_module *m = program(devices, ops);
    for (int i = 0; i < 3; i++) {
        ir_cost c;
        cost_op_estimate(m, hw, ops[i], &c);
        CU_ASSERT(c.valid && c.time > 0);
        t[i] = c.time;
    }
    ir_module_free(m);
}

static void test_follows_backend(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    double cores = n > 0 ? (double)n : 1;
    int fresh = openblas_get_num_threads();
    cost_hw hw = calibrated(cores);
    int cal_threads = backend_blas_threads(4, fresh);
    double cal_blas = share(cores, 4, cal_threads), cal_loop = share(cores, 4, 1);
    double at4[3];
    price(&hw, 4, at4);
    const int64_t meshes[] = {1, 2, 8};
    for (int i = 0; i < 3; i++) {
        int64_t d = meshes[i];
        int threads = backend_blas_threads(d, fresh);
        double want_blas = cal_blas / share(cores, (double)d, threads);
        double want_loop = cal_loop / share(cores, (double)d, 1);
        double t[3];
        price(&hw, d, t);
        double got[3] = {t[0] / at4[0], t[1] / at4[1], t[2] / at4[2]};
        double want[3] = {want_blas, want_loop, want_loop};
        const char *what[3] = {"GEMM", "elementwise", "reduction"};
        for (int k = 0; k < 3; k++) {
            if (fabs(got[k] - want[k]) > 1e-9 * want[k])
                fprintf(stderr, "\n  %lld devices (%d BLAS threads, %.0f cores): %s priced at "
                        "%.4gx the calibrated time, the runtime gives %.4gx",
                        (long long)d, threads, cores, what[k], got[k], want[k]);
            CU_ASSERT_DOUBLE_EQUAL(got[k], want[k], 1e-9 * want[k]);
        }
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, (double)d), want_blas,
                               1e-12);
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, (double)d), want_loop, 1e-12);
    }
}

/* The factors on a fixed machine: 4 devices calibrated on 2 cores. */
static void test_two_cores(void)
{
    cost_hw hw = calibrated(2);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 1), 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 1), 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 2), 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 4), 1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 8), 2, 1e-12);
    /* On MPI a lone rank is bound to one core: BLAS shares the loops' factor. */
    hw.cal_mpi = true;
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 1), 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 8), 2, 1e-12);
    hw.cal_mpi = false;
    hw.cal_devices = 0; /* unknown calibration: no scaling */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_blas_contention(&hw, 1), 1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 1), 1, 1e-12);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"ops priced by the cores the threads backend gives them", test_follows_backend},
        {"core-sharing factors on 2 cores", test_two_cores},
    };
    einc_add_suite("cost_threads", tests, (int)(sizeof tests / sizeof tests[0]));
}
