/*
 * elementwise_fn.c - the functions of the language at one element, in
 * LLVM IR, for the loop nests of elementwise.c: the value of fn(x) in the
 * nest's compute type, and the arithmetic under it (an inline f32 exp, an
 * f64 exp that stays on libmvec's vector path, the sigmoid).
 *
 * exp, log, sqrt, fabs and maxnum (relu) are LLVM intrinsics, and exp
 * and log vectorise through glibc's libmvec (target.c); tanh is libm's
 * tanhf/tanh (LLVM 19 has no tanh intrinsic, so loops with tanh stay
 * scalar); gelu is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))) used by GPT-2 and BERT, evaluated as the identical
 * x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)); silu is x * sigmoid(x);
 * sigmoid is 1 / (1 + exp(-x)); rsqrt is 1 / sqrt(x) (exact division, not an
 * estimate).
 */
#include <math.h>
#include <string.h>

#include "cg_internal.h"
#include "elementwise_internal.h"

LLVMValueRef cg_ew_intrinsic(ew_nest *n, const char *name, LLVMValueRef *args, unsigned nargs)
{
    cg_ctx *c = n->c;
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef ty = n->ct;
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(c->llctx, id, &ty, 1);
    return LLVMBuildCall2(c->b, fty, fn, args, nargs, "");
}

static LLVMValueRef libm_tanh(ew_nest *n, LLVMValueRef x)
{
    cg_ctx *c = n->c;
    const char *name = n->ct == c->t.f32 ? "tanhf" : "tanh";
    LLVMTypeRef fty = LLVMFunctionType(n->ct, &n->ct, 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, fty);
    return LLVMBuildCall2(c->b, fty, fn, &x, 1, "");
}

LLVMValueRef cg_ew_const(ew_nest *n, double v)
{
    return LLVMConstReal(n->ct, v);
}

/* 1 / (1 + exp(-x)).  In f64, -x is clamped to [-700, 700] first: beyond
 * that the sigmoid is already 0 or 1 to the type's precision, but libmvec's
 * vector exp sends every lane past its overflow/underflow threshold (|x| >
 * 708) through a scalar fallback, so a gelu of large activations ran 2x
 * slower and its time depended on the data, which the cost model cannot
 * know.  Compare-and-select keeps a NaN a NaN (minnum/maxnum would replace
 * it by the bound).  In f32 the inline exp (exp_poly_f32) has no slow path. */
static LLVMValueRef clamp(ew_nest *n, LLVMValueRef x, double lim)
{
    LLVMBuilderRef b = n->c->b;
    LLVMValueRef hi = cg_ew_const(n, lim), lo = cg_ew_const(n, -lim);
    x = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, hi, ""), hi, x, "");
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, x, lo, ""), lo, x, "");
}

static LLVMValueRef exp_poly_f32(ew_nest *n, LLVMValueRef x);
static LLVMValueRef pick(ew_nest *n, LLVMRealPredicate op, LLVMValueRef a, LLVMValueRef b);

/* The arguments sigmoid gives exp_poly_f32 in f32, kept where exp's
 * result and the quotient are normal floats, because an underflowing
 * product or quotient is finished in a microcode assist on the Zen 4
 * EPYC: a gelu of 6 (A + B), about 1.4% of whose arguments go above 10
 * (and so, through gelu's cubic, exp's argument below -87), took 3.0 ms
 * where the same loop over A + B took 2.3 (docs/performance-history.md,
 * section 5, "Sigmoid's underflow").  Below SIGMOID_EXP_LOW, exp(t) =
 * 1.6e-38 is still normal and 1 + exp(t) rounds to 1 from t = -17 down,
 * so those results are bitwise what the unclamped argument gives.  Above
 * SIGMOID_EXP_HIGH the exact sigmoid is below FLT_MIN = exp(-87.3365):
 * the result is 0 there (before, the quotient was a denormal up to t =
 * 88.72 and 0 beyond, where exp overflowed), the denormal flushed to
 * zero, as XLA's CPU code runs with flush-to-zero. */
#define SIGMOID_EXP_LOW (-87.0)
#define SIGMOID_EXP_HIGH 87.33

static LLVMValueRef sigmoid(ew_nest *n, LLVMValueRef x)
{
    LLVMBuilderRef b = n->c->b;
    LLVMValueRef one = cg_ew_const(n, 1.0), t = LLVMBuildFNeg(b, x, "");
    if (n->ct != n->c->t.f32) {
        LLVMValueRef e = clamp(n, t, 700.0);
        e = cg_ew_intrinsic(n, "llvm.exp", &e, 1);
        return LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, e, ""), "");
    }
    /* MAXPS and MINPS: a NaN stays the operand (pick), and fails the test
     * for 0. */
    LLVMValueRef hi = cg_ew_const(n, SIGMOID_EXP_HIGH);
    LLVMValueRef e = pick(n, LLVMRealOGT, cg_ew_const(n, SIGMOID_EXP_LOW), t);
    e = exp_poly_f32(n, pick(n, LLVMRealOLT, hi, e));
    LLVMValueRef s = LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, e, ""), "");
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, t, hi, ""), cg_ew_const(n, 0.0), s, "");
}

/* exp(x) in f64 that stays on libmvec's vector path, which sends a whole
 * vector through a scalar fallback as soon as one lane is beyond |x| = 708:
 * a softmax's masked -inf scores, half of a causal attention's, made it
 * 10x slower per element.  Arguments beyond 708 are shifted by 512 towards
 * 0 and the result scaled back by exp(-+512) (one extra rounding, into the
 * denormal range where that is the exact answer's neighbourhood anyway);
 * below -746 (where IEEE exp is +0) the result is selected as 0, above
 * 709.79 (overflow) as +inf, and exp only ever sees [-708, 708].  NaN fails
 * every comparison and stays NaN.  f32 has exp_poly_f32. */
static LLVMValueRef exp_f64(ew_nest *n, LLVMValueRef x)
{
    LLVMBuilderRef b = n->c->b;
    const double big = 708.0, k = 512.0, zero = -746.0, over = 709.79;
    LLVMValueRef lo = LLVMBuildFCmp(b, LLVMRealOLT, x, cg_ew_const(n, -big), "");
    LLVMValueRef hi = LLVMBuildFCmp(b, LLVMRealOGT, x, cg_ew_const(n, big), "");
    LLVMValueRef xs = LLVMBuildSelect(b, lo, LLVMBuildFAdd(b, x, cg_ew_const(n, k), ""), x, "");
    xs = LLVMBuildSelect(b, hi, LLVMBuildFSub(b, x, cg_ew_const(n, k), ""), xs, "");
    xs = clamp(n, xs, big);
    LLVMValueRef e = cg_ew_intrinsic(n, "llvm.exp", &xs, 1);
    e = LLVMBuildSelect(b, lo, LLVMBuildFMul(b, e, cg_ew_const(n, exp(-k)), ""), e, "");
    e = LLVMBuildSelect(b, hi, LLVMBuildFMul(b, e, cg_ew_const(n, exp(k)), ""), e, "");
    e = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, x, cg_ew_const(n, zero), ""), cg_ew_const(n, 0.0), e, "");
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, cg_ew_const(n, over), ""), cg_ew_const(n, INFINITY), e,
                           "");
}

/* a * b + c, fused where the target has FMA. */
static LLVMValueRef fmuladd(ew_nest *n, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMValueRef args[] = {a, b, c};
    return cg_ew_intrinsic(n, "llvm.fmuladd", args, 3);
}

/* 2^k for an i32 vector-friendly k in [-126, 127]: the exponent field. */
static LLVMValueRef pow2i(ew_nest *n, LLVMValueRef k)
{
    cg_ctx *c = n->c;
    LLVMValueRef e = LLVMBuildAdd(c->b, k, cg_i32(c, 127), "");
    e = LLVMBuildShl(c->b, e, cg_i32(c, 23), "");
    return LLVMBuildBitCast(c->b, e, c->t.f32, "");
}

/* select(a OP b, a, b): x86 emits it as one MAXPS / MINPS, which returns
 * b when either is NaN, where llvm.maxnum / minnum take three
 * instructions to return the number. */
static LLVMValueRef pick(ew_nest *n, LLVMRealPredicate op, LLVMValueRef a, LLVMValueRef b)
{
    LLVMBuilderRef bld = n->c->b;
    return LLVMBuildSelect(bld, LLVMBuildFCmp(bld, op, a, b, ""), a, b, "");
}

/* exp_poly_f32's lower bound: floor(-176 log2(e) + 0.5) = -254, k whose
 * halves 2^-127 are +0 (the exponent field 0). */
#define EXP_F32_LOW (-176.0)

/* expf inline, in straight-line arithmetic that the loop vectoriser widens
 * to the full vector (16 lanes on AVX-512) with no call: Cody and Waite's
 * range reduction x = k ln 2 + r, |r| <= ln 2 / 2, with ln 2 split in two
 * so k ln 2 is exact, then Cephes' expf polynomial (S. L. Moshier, Cephes
 * Math Library, expf.c: degree 5 minimax on r, relative error 1.6e-7 in
 * its tests) and the scale by 2^k through the exponent field, done as two
 * factors so results in the denormal range (x < -87.3) and up to FLT_MAX
 * come out without overflow in between, each rounded once.  x is first
 * clamped to [-176, 89], which also gives the IEEE limits with no test of
 * its own: every exp below -103.97 rounds to +0, and so does the product
 * from there (y < 1 times 2^-150 at k = -150, less below), and from x >=
 * 128 ln 2 = 88.72 the scaled y >= 1 times 2^128 rounds to +inf, as exp
 * does from there.  The bound -176 gives k = -254, whose two factors
 * 2^-127 have an exponent field of 0: they are +0, and the product is an
 * exact 0, not an underflow.  An underflowing product is finished in a
 * microcode assist on the Zen 4 EPYC, and a causal softmax's masked lanes
 * (-inf, half of its row group's) took one each at the bound -104, which
 * made the row group about a fifth slower than the unmasked one (0.1 ns
 * an element; docs/performance-history.md, section 7).  Every result is
 * bitwise what the bound -104 gave.  A NaN is clamped to -176 (k stays
 * defined) and put back at the end.
 * It replaced libmvec's 8-lane expf on f32 (XLA's CPU back end likewise
 * emits its own polynomial exp): a softmax spent most of its time in the
 * call (docs/performance.md, section 7). */
static LLVMValueRef exp_poly_f32(ew_nest *n, LLVMValueRef x)
{
    cg_ctx *c = n->c;
    LLVMBuilderRef b = c->b;
    LLVMValueRef xc = pick(n, LLVMRealOGT, x, cg_ew_const(n, EXP_F32_LOW));
    xc = pick(n, LLVMRealOLT, xc, cg_ew_const(n, 89.0));
    LLVMValueRef kf = fmuladd(n, xc, cg_ew_const(n, 1.44269504088896341), cg_ew_const(n, 0.5));
    kf = cg_ew_intrinsic(n, "llvm.floor", &kf, 1);
    LLVMValueRef r = fmuladd(n, kf, cg_ew_const(n, -0.693359375), xc);
    r = fmuladd(n, kf, cg_ew_const(n, 2.12194440e-4), r);
    LLVMValueRef p = cg_ew_const(n, 1.9875691500e-4);
    static const double coef[] = {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                  1.6666665459e-1, 5.0000001201e-1};
    for (size_t i = 0; i < sizeof coef / sizeof coef[0]; i++)
        p = fmuladd(n, p, r, cg_ew_const(n, coef[i]));
    LLVMValueRef r2 = LLVMBuildFMul(b, r, r, "");
    LLVMValueRef y = LLVMBuildFAdd(b, fmuladd(n, p, r2, r), cg_ew_const(n, 1.0), "");
    /* k in [-254, 129]: 2^k as 2^(k/2) 2^(k - k/2), both normal from
     * k = -252 on; 2^(k/2) is +0 at -253 and -254 (the bound). */
    LLVMValueRef k = LLVMBuildFPToSI(b, kf, c->t.i32, "");
    LLVMValueRef k1 = LLVMBuildAShr(b, k, cg_i32(c, 1), "");
    LLVMValueRef k2 = LLVMBuildSub(b, k, k1, "");
    y = LLVMBuildFMul(b, LLVMBuildFMul(b, y, pow2i(n, k1), ""), pow2i(n, k2), "");
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), x, y, "");
}

LLVMValueRef cg_ew_call_fn(ew_nest *n, ir_func fn, LLVMValueRef x)
{
    LLVMBuilderRef b = n->c->b;
    switch (fn) {
    case IR_FN_EXP: return n->ct == n->c->t.f32 ? exp_poly_f32(n, x) : exp_f64(n, x);
    case IR_FN_LOG: return cg_ew_intrinsic(n, "llvm.log", &x, 1);
    case IR_FN_TANH: return libm_tanh(n, x);
    case IR_FN_RELU: {
        LLVMValueRef args[] = {x, cg_ew_const(n, 0.0)};
        return cg_ew_intrinsic(n, "llvm.maxnum", args, 2);
    }
    case IR_FN_GELU: {
        /* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
         * as the identical x * sigmoid(2u): one exp, which vectorises
         * (libmvec), where tanh would stay a scalar libm call. */
        LLVMValueRef x3 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
        LLVMValueRef in = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, cg_ew_const(n, 0.044715), x3, ""), "");
        in = LLVMBuildFMul(b, cg_ew_const(n, 2.0 * sqrt(2.0 / M_PI)), in, "");
        return LLVMBuildFMul(b, x, sigmoid(n, in), "");
    }
    case IR_FN_SILU: return LLVMBuildFMul(b, x, sigmoid(n, x), "");
    case IR_FN_SIGMOID: return sigmoid(n, x);
    case IR_FN_SQRT: return cg_ew_intrinsic(n, "llvm.sqrt", &x, 1);
    case IR_FN_RSQRT: return LLVMBuildFDiv(b, cg_ew_const(n, 1.0), cg_ew_intrinsic(n, "llvm.sqrt", &x, 1), "");
    case IR_FN_NEG: return LLVMBuildFNeg(b, x, "");
    case IR_FN_ABS: return cg_ew_intrinsic(n, "llvm.fabs", &x, 1);
    case IR_FN_SIN: return cg_ew_intrinsic(n, "llvm.sin", &x, 1);
    case IR_FN_COS: return cg_ew_intrinsic(n, "llvm.cos", &x, 1);
    case IR_FN_COUNT: break;
    }
    return x; /* unreachable: cg_ew_check rejects unknown functions */
}
