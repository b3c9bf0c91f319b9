/*
 * elementwise_i8.c - converting computed values to i8 (the cast `i8(x)`).
 *
 * Quantized weights and KV caches (seed 002) are int8.  A conversion to i8
 * rounds to nearest, ties to even (llvm.roundeven, NumPy's np.rint), then
 * saturates to [-128, 127]; NaN becomes 0.  llvm.fptosi.sat gives exactly
 * the saturation and the NaN rule, so the reference in NumPy is
 * np.clip(np.rint(x), -128, 127).astype(np.int8) with NaN mapped to 0
 * (docs/language.md, "Dtypes and casts").  Loading an i8 is exact in f32.
 */
#include <string.h>

#include "cg_internal.h"

LLVMValueRef cg_i8_from_float(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v)
{
    static const char round_name[] = "llvm.roundeven";
    static const char sat_name[] = "llvm.fptosi.sat";
    unsigned rid = LLVMLookupIntrinsicID(round_name, strlen(round_name));
    LLVMValueRef rfn = LLVMGetIntrinsicDeclaration(c->mod, rid, &ct, 1);
    LLVMTypeRef rty = LLVMIntrinsicGetType(c->llctx, rid, &ct, 1);
    LLVMValueRef r = LLVMBuildCall2(c->b, rty, rfn, &v, 1, "");
    LLVMTypeRef tys[2] = {c->t.i8, ct};
    unsigned sid = LLVMLookupIntrinsicID(sat_name, strlen(sat_name));
    LLVMValueRef sfn = LLVMGetIntrinsicDeclaration(c->mod, sid, tys, 2);
    LLVMTypeRef sty = LLVMIntrinsicGetType(c->llctx, sid, tys, 2);
    return LLVMBuildCall2(c->b, sty, sfn, &r, 1, "");
}
