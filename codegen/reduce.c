/*
 * reduce.c - unary einsums (reductions: `max(x)`, `min(x)`, `sum(x)`,
 * `mean(x)`, the two reductions of a softmax, RMSNorm's mean of squares)
 * as LLVM loop nests.
 *
 * result[r] = scale * reduce_{c} operand[r, c], where r runs over the
 * result's per-device block and c over the operand's other labels (the
 * contracted ones).  The loops are the result's positions outermost, in
 * result order, then the contracted positions in the operand's order, so
 * when the reduced dim is the operand's last (softmax over the key dim) the
 * innermost loop walks contiguous memory.  The accumulator starts at -inf
 * for max and +inf for min and combines with llvm.maximum / llvm.minimum,
 * which propagate NaN as numpy.max does; a sum starts at 0 and adds with
 * reassociation allowed, so it vectorises.  The accumulator lives in an
 * entry-block alloca that O3's mem2reg turns into a register.  bf16 is read
 * into f32 (exact) and the result rounded once.  Two-operand einsums are
 * GEMMs (rt_einsum).
 *
 * An argmax (one contracted dim, not sharded, so the local index is the
 * global one) keeps the best value and its index: an element replaces
 * them if it is greater, or if it is NaN and the best is not, so the result
 * is numpy.argmax's (the first maximum; the first NaN if there is one; 0
 * for a row of -inf).
 */
#include <math.h>
#include <string.h>

#include "cg_internal.h"

cg_for cg_for_begin(cg_ctx *c, cg_fn *f, int64_t n)
{
    cg_for l = {.pre = LLVMGetInsertBlock(c->b), .n = n};
    l.body = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "red.loop");
    LLVMBuildBr(c->b, l.body);
    LLVMPositionBuilderAtEnd(c->b, l.body);
    l.phi = LLVMBuildPhi(c->b, c->t.i64, "r");
    return l;
}

void cg_for_end(cg_ctx *c, cg_fn *f, cg_for *l)
{
    LLVMValueRef next = LLVMBuildNUWAdd(c->b, l->phi, cg_i64(c, 1), "");
    LLVMValueRef more = LLVMBuildICmp(c->b, LLVMIntSLT, next, cg_i64(c, l->n), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "red.after");
    LLVMBuildCondBr(c->b, more, l->body, after);
    LLVMValueRef inc[] = {cg_i64(c, 0), next};
    LLVMBasicBlockRef from[] = {l->pre, latch};
    LLVMAddIncoming(l->phi, inc, from, 2);
    LLVMPositionBuilderAtEnd(c->b, after);
}

/* Row-major element offset of the index values `idx` in value `v`'s block
 * of `shape`; a row-local buffer (rowgroup.c) holds one row, so its row
 * positions (the leading ones) do not count. */
static LLVMValueRef offset(cg_ctx *c, const cg_fn *f, const ir_value *v, const int64_t *shape,
                           LLVMValueRef *idx)
{
    LLVMValueRef off = cg_i64(c, 0);
    int lo = cg_one_row(f, v->id) ? f->nrow : 0;
    for (int j = lo; j < v->type.rank; j++) {
        off = LLVMBuildNSWMul(c->b, off, cg_i64(c, shape[j]), "");
        off = LLVMBuildNSWAdd(c->b, off, idx[j], "");
    }
    return off;
}

LLVMValueRef cg_entry_alloca(cg_ctx *c, cg_fn *f, LLVMTypeRef t, const char *name)
{
    LLVMBuilderRef eb = LLVMCreateBuilderInContext(c->llctx);
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(f->fn);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(eb, first);
    else
        LLVMPositionBuilderAtEnd(eb, entry);
    LLVMValueRef v = LLVMBuildAlloca(eb, t, name);
    LLVMDisposeBuilder(eb);
    return v;
}

void cg_emit_reduce(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst)
{
    const ir_value *a = op->operands[0], *r = op->result;
    ir_reduce red = op->u.einsum.reduce;
    bool argmax = red == IR_RED_ARGMAX;
    /* An argmax compares in its operand's type and stores i32 positions. */
    LLVMTypeRef ct = (argmax ? a : r)->type.dtype == IR_F64 ? c->t.f64 : c->t.f32;
    bool is_max = red == IR_RED_MAX || argmax;
    int64_t ashape[IR_MAX_RANK], rshape[IR_MAX_RANK];
    cg_local_shape(f->m, &a->type, ashape);
    cg_local_shape(f->m, &r->type, rshape);
    /* Each operand position is a result position (same label) or contracted. */
    int res_pos[IR_MAX_RANK], ncontr = 0, contr[IR_MAX_RANK];
    for (int j = 0; j < a->type.rank; j++) {
        res_pos[j] = -1;
        for (int q = 0; q < r->type.rank; q++)
            if (op->u.einsum.result_labels[q] == op->u.einsum.labels[0][j])
                res_pos[j] = q;
        if (res_pos[j] < 0)
            contr[ncontr++] = j;
    }
    LLVMValueRef acc = cg_entry_alloca(c, f, ct, "red.acc");
    LLVMValueRef best = argmax ? cg_entry_alloca(c, f, c->t.i64, "red.best") : NULL;
    cg_for rl[IR_MAX_RANK], cl[IR_MAX_RANK];
    LLVMValueRef ridx[IR_MAX_RANK], aidx[IR_MAX_RANK];
    /* In a row group (rowgroup.c) the leading result positions are the
     * group's rows: its loops run them. */
    for (int q = 0; q < r->type.rank; q++) {
        if (q < f->nrow) {
            ridx[q] = f->row_idx[q];
            continue;
        }
        rl[q] = cg_for_begin(c, f, rshape[q]);
        ridx[q] = rl[q].phi;
    }
    LLVMBuildStore(c->b, LLVMConstReal(ct, red == IR_RED_SUM ? 0.0 : is_max ? -INFINITY : INFINITY),
                   acc);
    if (argmax)
        LLVMBuildStore(c->b, cg_i64(c, 0), best);
    for (int k = 0; k < ncontr; k++) {
        cl[k] = cg_for_begin(c, f, ashape[contr[k]]);
        aidx[contr[k]] = cl[k].phi;
    }
    for (int j = 0; j < a->type.rank; j++)
        if (res_pos[j] >= 0)
            aidx[j] = ridx[res_pos[j]];
    LLVMValueRef x = cg_load_elem(c, ct, f->buf[a->id], a->type.dtype,
                                  offset(c, f, a, ashape, aidx));
    LLVMValueRef prev = LLVMBuildLoad2(c->b, ct, acc, ""), next;
    if (argmax) {
        /* x > best, or x is NaN and best is not (UNO: either is NaN). */
        LLVMValueRef gt = LLVMBuildFCmp(c->b, LLVMRealOGT, x, prev, "");
        LLVMValueRef xnan = LLVMBuildFCmp(c->b, LLVMRealUNO, x, x, "");
        LLVMValueRef pnum = LLVMBuildFCmp(c->b, LLVMRealORD, prev, prev, "");
        LLVMValueRef take = LLVMBuildOr(c->b, gt, LLVMBuildAnd(c->b, xnan, pnum, ""), "");
        next = LLVMBuildSelect(c->b, take, x, prev, "");
        LLVMValueRef bi = LLVMBuildLoad2(c->b, c->t.i64, best, "");
        LLVMBuildStore(c->b, LLVMBuildSelect(c->b, take, cl[0].phi, bi, ""), best);
    } else if (red == IR_RED_SUM) {
        /* Reassociation lets the vectoriser keep partial sums per lane (the
         * order of a sum is not specified; BLAS reorders it too). */
        next = LLVMBuildFAdd(c->b, prev, x, "");
        LLVMSetFastMathFlags(next, LLVMFastMathAllowReassoc);
    } else {
        const char *name = is_max ? "llvm.maximum" : "llvm.minimum";
        unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
        LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &ct, 1);
        LLVMTypeRef fty = LLVMIntrinsicGetType(c->llctx, id, &ct, 1);
        LLVMValueRef args[] = {prev, x};
        next = LLVMBuildCall2(c->b, fty, fn, args, 2, "");
    }
    LLVMBuildStore(c->b, next, acc);
    for (int k = ncontr - 1; k >= 0; k--)
        cg_for_end(c, f, &cl[k]);
    if (argmax) {
        LLVMValueRef pos = LLVMBuildTrunc(c->b, LLVMBuildLoad2(c->b, c->t.i64, best, ""), c->t.i32, "");
        LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->t.i32, dst,
                                               (LLVMValueRef[]){offset(c, f, r, rshape, ridx)}, 1, "");
        LLVMBuildStore(c->b, pos, p);
        for (int q = r->type.rank - 1; q >= f->nrow; q--)
            cg_for_end(c, f, &rl[q]);
        return;
    }
    LLVMValueRef v = LLVMBuildLoad2(c->b, ct, acc, "");
    if (op->u.einsum.scale != 1.0)
        v = LLVMBuildFMul(c->b, v, LLVMConstReal(ct, op->u.einsum.scale), "");
    cg_store_elem(c, ct, v, r->type.dtype, dst, offset(c, f, r, rshape, ridx));
    for (int q = r->type.rank - 1; q >= f->nrow; q--)
        cg_for_end(c, f, &rl[q]);
}

bool cg_row_sum_fits(const cg_fn *f, const ir_op *ew, const ir_op *sum)
{
    const ir_value *e = ew->result, *r = sum->result;
    if (ew->kind != IR_OP_ELEMENTWISE || sum->kind != IR_OP_EINSUM || sum->noperands != 1 ||
        sum->u.einsum.reduce != IR_RED_SUM || sum->operands[0] != e ||
        r->type.rank != f->nrow || r->type.dtype != e->type.dtype ||
        (e->type.dtype != IR_F32 && e->type.dtype != IR_F64))
        return false;
    for (int j = 0; j < e->type.rank; j++)
        if (sum->u.einsum.labels[0][j] != ew->u.ew.result_labels[j])
            return false;
    return true;
}

LLVMValueRef cg_row_sum_begin(cg_ctx *c, cg_fn *f, const ir_op *sum)
{
    LLVMTypeRef ct = sum->result->type.dtype == IR_F64 ? c->t.f64 : c->t.f32;
    LLVMValueRef acc = cg_entry_alloca(c, f, ct, "row.sum");
    LLVMBuildStore(c->b, LLVMConstReal(ct, 0.0), acc);
    return acc;
}

void cg_row_sum_end(cg_ctx *c, cg_fn *f, const ir_op *sum, LLVMValueRef dst, LLVMValueRef acc)
{
    const ir_value *r = sum->result;
    LLVMTypeRef ct = r->type.dtype == IR_F64 ? c->t.f64 : c->t.f32;
    int64_t rshape[IR_MAX_RANK];
    cg_local_shape(f->m, &r->type, rshape);
    LLVMValueRef v = LLVMBuildLoad2(c->b, ct, acc, "");
    if (sum->u.einsum.scale != 1.0)
        v = LLVMBuildFMul(c->b, v, LLVMConstReal(ct, sum->u.einsum.scale), "");
    cg_store_elem(c, ct, v, r->type.dtype, dst, offset(c, f, r, rshape, f->row_idx));
}
