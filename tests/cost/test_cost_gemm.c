/*
 * test_cost_gemm.c - a GEMM priced on a calibrated profile
 * (passes/costmodel/cost_op.c, cost_measured_gemm_seconds): its FLOPs at
 * the GEMM curve's rate, plus, where the profile measured what a result
 * element costs ("gemm_seconds_per_result_element", bf16's), its result's
 * elements at that figure; so two bf16 GEMMs of equal FLOPs, one with a
 * result 4x the other's, differ by that figure times the difference, as
 * the layers' [B*T, D] x [D, F] and [B*T, F] x [F, D] products do on
 * oneDNN's route (docs/cost-model.md, "GEMM results").  A profile without
 * the figure prices the FLOPs alone, as before it.  The f32 curve's
 * point at a layer's skinny shapes prices them at their own rate.
 */
#include <math.h>

#include "test_util.h"

/* Forced figures: a bf16 curve of two points and a result element's cost. */
static const double F0 = 2e7, F1 = 1e9, R0 = 5e10, R1 = 1e11, X = 3e-9;

static cost_hw forced_hw(double per_result)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    hw.gemm_npoints[IR_BF16] = 2;
    hw.gemm_flop[IR_BF16][0] = F0, hw.gemm_flop[IR_BF16][1] = F1;
    hw.gemm_rate[IR_BF16][0] = R0, hw.gemm_rate[IR_BF16][1] = R1;
    hw.gemm_result_time[IR_BF16] = per_result;
    return hw;
}

static ir_value *value(ir_module *m, const char *name, ir_value_kind kind, ir_dtype t, int d0,
                       int d1)
{
    ir_value *v = test_f32_value(m, name, kind, 2, (int[]){d0, d1});
    v->type.dtype = t;
    return v;
}

/* Seconds per device (the core-sharing factor taken out) of the einsum
 * C[M, N] = A[M, K] * B[K, N], operands and result in dtype t. */
static double gemm_seconds(const cost_hw *hw, ir_dtype t, int64_t M, int64_t K, int64_t N)
{
    ir_module *m = ir_module_new("t.ein");
    int dm = ir_dim_add(m, "M", M, 0), dk = ir_dim_add(m, "K", K, 0), dn = ir_dim_add(m, "N", N, 0);
    ir_value *in[2] = {value(m, "A", IR_VAL_INPUT, t, dm, dk), value(m, "B", IR_VAL_INPUT, t, dk, dn)};
    ir_value *out = value(m, "C", IR_VAL_OP, t, dm, dn);
    ir_op *op = ir_op_new(m, IR_OP_EINSUM, 2, in, out, 0);
    op->u.einsum.labels[0][0] = dm, op->u.einsum.labels[0][1] = dk;
    op->u.einsum.labels[1][0] = dk, op->u.einsum.labels[1][1] = dn;
    op->u.einsum.result_labels[0] = dm, op->u.einsum.result_labels[1] = dn;
    op->u.einsum.scale = 1.0;
    ir_op_append(m, op);
    ir_output_add(m, "C", out, 0);
    ir_cost c;
    cost_op_estimate(m, hw, op, &c);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * (double)(M * K * N), 0);
    ir_module_free(m);
    return c.t_compute / cost_measured_blas_contention(hw, 1);
}

/* The curve's rate at f: linear in log(f) between its two points. */
static double rate_at(double f)
{
    return R0 + (R1 - R0) * (log(f) - log(F0)) / (log(F1) - log(F0));
}

/* [512, 128] x [128, 512] and [512, 512] x [512, 128]: the same 67 MFLOP
 * at the same rate, results of 262144 and 65536 elements. */
static void test_result_priced(void)
{
    cost_hw hw = forced_hw(X);
    double f = 2.0 * 512 * 128 * 512;
    double wide = gemm_seconds(&hw, IR_BF16, 512, 128, 512);
    double deep = gemm_seconds(&hw, IR_BF16, 512, 512, 128);
    double want_wide = f / rate_at(f) + 262144 * X, want_deep = f / rate_at(f) + 65536 * X;
    CU_ASSERT(fabs(wide - want_wide) <= 1e-12 * want_wide);
    CU_ASSERT(fabs(deep - want_deep) <= 1e-12 * want_deep);
    CU_ASSERT(fabs((wide - deep) - 196608 * X) <= 1e-9 * (wide - deep));
    /* A projection [512, 128] x [128, 128] below the curve's first point:
     * the first point's rate. */
    double proj = gemm_seconds(&hw, IR_BF16, 512, 128, 128);
    double want = 2.0 * 512 * 128 * 128 / R0 + 65536 * X;
    CU_ASSERT(fabs(proj - want) <= 1e-12 * want);
}

/* Without the figure (a profile written before it) a GEMM costs its FLOPs
 * at the curve's rate, whatever its result; so does an f32 GEMM, whose
 * dtype the figure does not name. */
static void test_old_profile(void)
{
    cost_hw hw = forced_hw(0);
    double f = 2.0 * 512 * 128 * 512;
    double wide = gemm_seconds(&hw, IR_BF16, 512, 128, 512);
    CU_ASSERT_DOUBLE_EQUAL(wide, f / cost_measured_gemm_rate(&hw, IR_BF16, f), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(gemm_seconds(&hw, IR_BF16, 512, 512, 128), wide, 1e-15);
    hw = forced_hw(X);
    double f32 = gemm_seconds(&hw, IR_F32, 512, 128, 512);
    CU_ASSERT_DOUBLE_EQUAL(f32, f / cost_measured_gemm_rate(&hw, IR_F32, f), 1e-15);
}

/* An f32 curve with the calibration's point at a layer's skinny shapes
 * (67 MFLOP, between 256^3 and 512^3: calibrate_internal.h,
 * GEMM_LAYER_FIRST): a [512, 128] x [128, 512] product is priced at that
 * point's rate, where without it the interpolation between the squares
 * priced it 14% slower, as fortunes_transformer's were (issue 28). */
static void test_layer_point(void)
{
    cost_hw hw = forced_hw(0);
    const double f = 2.0 * 512 * 128 * 512, sq[2] = {2.0 * 256 * 256 * 256, 2.0 * 512 * 512 * 512};
    hw.gemm_npoints[IR_F32] = 3;
    hw.gemm_flop[IR_F32][0] = sq[0], hw.gemm_flop[IR_F32][1] = f, hw.gemm_flop[IR_F32][2] = sq[1];
    hw.gemm_rate[IR_F32][0] = 38e9, hw.gemm_rate[IR_F32][1] = 46e9, hw.gemm_rate[IR_F32][2] = 47e9;
    double with = gemm_seconds(&hw, IR_F32, 512, 128, 512);
    CU_ASSERT(fabs(with - f / 46e9) <= 1e-12 * with);
    /* The same product on the curve of the squares alone: a third of the
     * way (in log FLOPs) from 38 to 47 GFLOP/s. */
    hw.gemm_npoints[IR_F32] = 2;
    hw.gemm_flop[IR_F32][1] = sq[1], hw.gemm_rate[IR_F32][1] = 47e9;
    double without = gemm_seconds(&hw, IR_F32, 512, 128, 512);
    CU_ASSERT(fabs(without - f / 41e9) <= 1e-9 * without);
    CU_ASSERT(without > 1.1 * with);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a bf16 GEMM's result elements are priced apart", test_result_priced},
        {"a profile without the figure prices FLOPs alone", test_old_profile},
        {"a skinny 67 MFLOP product at the curve's layer point", test_layer_point},
    };
    einc_add_suite("GEMMs on a calibrated profile", tests, (int)(sizeof tests / sizeof tests[0]));
}
