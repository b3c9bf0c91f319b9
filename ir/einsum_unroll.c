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

int ir_einsum_unrolled_terms(const ir_module *m, const ir_op *op)
{
    if (op->kind != IR_OP_EINSUM || op->noperands != 2 || m->einsum_unroll_max < 1 || op->u.einsum.gather ||
        op->u.einsum.scatter || op->u.einsum.reduce != IR_RED_SUM || !op->result ||
        op->result->type.dtype == IR_I32)
        return 0;
    int64_t terms = 1;
    int seen[2 * IR_MAX_RANK], nseen = 0;
    for (int k = 0; k < 2; k++) {
        const ir_value *v = op->operands[k];
        if (!v || v->type.dtype != op->result->type.dtype)
            return 0;
        for (int j = 0; j < v->type.rank; j++) {
            int l = op->u.einsum.labels[k][j];
            bool kept = false;
            for (int r = 0; r < op->result->type.rank && !kept; r++)
                kept = op->u.einsum.result_labels[r] == l;
            if (kept)
                continue;
            int64_t size = ir_local_size(m, &v->type, j);
            int s = 0;
            while (s < nseen && seen[s] != l)
                s++;
            if (s < nseen) {
                /* Seen in the other operand (or twice in this one): the
                 * blocks must agree for an index to address both. */
                for (int k2 = 0; k2 <= k; k2++)
                    for (int j2 = 0; j2 < op->operands[k2]->type.rank; j2++)
                        if (op->u.einsum.labels[k2][j2] == l &&
                            ir_local_size(m, &op->operands[k2]->type, j2) != size)
                            return 0;
                continue;
            }
            seen[nseen++] = l;
            terms *= size;
            if (terms > m->einsum_unroll_max || terms < 1)
                return 0;
        }
    }
    return (int)terms;
}
