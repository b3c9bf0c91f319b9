/*
 * stream.c - writing one row of a row group's result with non-temporal
 * stores (rowgroup.c, "Streamed results").
 *
 * The row was computed into a one-row stage, which is in the first-level
 * cache; here it is copied to its place in the result, 64 bytes (one cache
 * line) per store, each store marked `!nontemporal`, which x86 emits as
 * MOVNTDQ / VMOVNTDQ (AArch64: STNP): the line is written to memory without
 * being read first, where an ordinary store reads it for ownership.  Such
 * a store needs an aligned address, so the copy checks the result's base
 * once per row (the runtime's buffers are 64-byte aligned, rt_alloc; a
 * caller's may not be) and falls back to memcpy.  The stores are weakly
 * ordered: cg_emit_stream_fence orders them before the op ends.
 */
#include "cg_internal.h"

LLVMValueRef cg_line_aligned(cg_ctx *c, LLVMValueRef p)
{
    LLVMValueRef a = LLVMBuildPtrToInt(c->b, p, c->t.i64, "");
    a = LLVMBuildAnd(c->b, a, cg_i64(c, 63), "");
    return LLVMBuildICmp(c->b, LLVMIntEQ, a, cg_i64(c, 0), "aligned");
}

void cg_emit_stream_row(cg_ctx *c, cg_fn *f, LLVMValueRef dst, LLVMValueRef stage,
                        int64_t row_bytes, LLVMValueRef aligned)
{
    LLVMBuilderRef b = c->b;
    LLVMBasicBlockRef nt = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "stream.nt");
    LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "stream.plain");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "stream.done");
    LLVMBuildCondBr(b, aligned, nt, plain);

    LLVMPositionBuilderAtEnd(b, nt);
    LLVMTypeRef line = LLVMVectorType(c->t.i32, 16); /* 64 bytes */
    cg_for l = cg_for_begin(c, f, row_bytes / 64);
    LLVMValueRef off = LLVMBuildNUWMul(b, l.phi, cg_i64(c, 64), "");
    LLVMValueRef src = LLVMBuildInBoundsGEP2(b, c->t.i8, stage, &off, 1, "");
    LLVMValueRef to = LLVMBuildInBoundsGEP2(b, c->t.i8, dst, &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(b, line, src, "");
    LLVMSetAlignment(v, 64);
    LLVMValueRef st = LLVMBuildStore(b, v, to);
    LLVMSetAlignment(st, 64);
    LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(c->t.i32, 1, 0));
    unsigned kind = LLVMGetMDKindIDInContext(c->llctx, "nontemporal", 11);
    LLVMSetMetadata(st, kind, LLVMMetadataAsValue(c->llctx, LLVMMDNodeInContext2(c->llctx, &one, 1)));
    cg_for_end(c, f, &l);
    LLVMBuildBr(b, done);

    LLVMPositionBuilderAtEnd(b, plain);
    LLVMBuildMemCpy(b, dst, 1, stage, 64, cg_i64(c, row_bytes));
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
}

void cg_emit_stream_fence(cg_ctx *c)
{
    /* seq_cst: x86's MFENCE, which also orders non-temporal stores (a
     * release fence emits nothing on x86). */
    LLVMBuildFence(c->b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
}

LLVMValueRef cg_row_offset(cg_ctx *c, const cg_fn *f, const ir_type *t)
{
    int64_t row_bytes = ir_local_bytes(f->m, t);
    LLVMValueRef r = cg_i64(c, 0);
    for (int q = 0; q < f->nrow; q++) {
        int64_t n = ir_local_size(f->m, t, q);
        row_bytes /= n;
        r = LLVMBuildNSWAdd(c->b, LLVMBuildNSWMul(c->b, r, cg_i64(c, n), ""), f->row_idx[q], "");
    }
    return LLVMBuildNSWMul(c->b, r, cg_i64(c, row_bytes), "");
}
