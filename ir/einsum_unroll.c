/*
 * einsum_unroll.c - which einsums run as an unrolled, memory-bound loop
 * nest instead of a GEMM, the one rule codegen (codegen/elementwise.c),
 * fusion (fusion.c) and the cost model (passes/costmodel/cost_rowgroup.c)
 * share.
 *
 * A binary sum einsum whose contracted labels span few elements per
 * device does almost no arithmetic per element it reads or writes: the
 * rotary embedding's `Q[B, T, N, P, G] * R[P2, P]` sums P = 2.  Through
 * rt_einsum it is a GEMM of K = 2 around two permute copies (P sits in
 * the middle of Q), 24.7 ms measured against 3.6 ms predicted on the
 * decoder layer's full size (docs/performance.md, section 5).  As a loop
 * nest over the result, each element is the unrolled sum of its
 * IR_EINSUM_UNROLL_MAX products or fewer, read in place, vectorised over
 * the innermost result dim, and the nest can run inside its elementwise
 * consumer's loop (fusion.c).  The bound is where the nest stops beating
 * the GEMM: docs/codegen.md, "Small contractions".
 */
#include "ir.h"

int ir_einsum_contracted(const ir_module *m, const ir_op *op, int *labels, int64_t *sizes)
{
    int n = 0;
    for (int k = 0; k < op->noperands; k++) {
        const ir_value *v = op->operands[k];
        for (int j = 0; v && j < v->type.rank; j++) {
            int l = op->u.einsum.labels[k][j];
            bool kept = false;
            for (int r = 0; op->result && r < op->result->type.rank && !kept; r++)
                kept = op->u.einsum.result_labels[r] == l;
            if (kept)
                continue;
            int64_t size = ir_local_size(m, &v->type, j);
            int s = 0;
            while (s < n && labels[s] != l)
                s++;
            if (s == n) {
                labels[n] = l;
                sizes[n++] = size;
            } else if (sizes[s] != size) {
                return -1; /* blocks that one index cannot address both */
            }
        }
    }
    return n;
}

int ir_einsum_unrolled_terms(const ir_module *m, const ir_op *op)
{
    if (op->kind != IR_OP_EINSUM || op->noperands != 2 || m->einsum_unroll_max < 1 ||
        op->u.einsum.gather || op->u.einsum.scatter || op->u.einsum.reduce != IR_RED_SUM ||
        !op->result || op->result->type.dtype == IR_I32)
        return 0;
    for (int k = 0; k < 2; k++)
        if (!op->operands[k] || op->operands[k]->type.dtype != op->result->type.dtype)
            return 0;
    int labels[IR_MAX_OPERANDS * IR_MAX_RANK];
    int64_t sizes[IR_MAX_OPERANDS * IR_MAX_RANK], terms = 1;
    int n = ir_einsum_contracted(m, op, labels, sizes);
    if (n < 0)
        return 0;
    for (int q = 0; q < n; q++) {
        terms *= sizes[q];
        if (terms > m->einsum_unroll_max || terms < 1)
            return 0;
    }
    return (int)terms;
}
