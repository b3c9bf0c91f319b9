/*
 * cost_reduce.c - the bytes a unary einsum's loop nest reads from its
 * operand on a CPU.
 *
 * Codegen runs a unary einsum (a sum, max, min or argmax over some labels,
 * codegen/reduce.c) as one loop nest: the result's positions outermost in
 * result order, then the contracted positions in the operand's order.  When
 * the innermost loop walks the operand's contiguous dim the reads are one
 * sequential sweep.  Otherwise each iteration of the inner loops reads one
 * element of a different cache line, and a line is read again only when
 * the loop over the contiguous dim moves on: it is still cached if the
 * lines the loops inside that one touch fit in the cache, and must come
 * from memory again if not.  Then every element read costs a whole line:
 * `dWout.1 = einsum(btvd->dv)` of examples/fortunes_bf16.ein, whose b, t
 * loop strides over V x D bf16 elements, took 148 ms on the 2-core EPYC
 * where one sweep of its 16 MiB was priced at 3.9 ms
 * (docs/performance-history.md, section 5, evening of 2026-11-30).
 */
#include "costmodel.h"

/* Bytes of a cache line on the CPUs einc runs on (x86-64, AArch64). */
#define LINE_BYTES 64.0
/* Bytes of cache a loop's lines must fit in to be read once: the
 * second-level cache of one core (1 MiB on Zen 4 and Skylake-SP; a
 * calibrated profile records no cache size). */
#define REUSE_BYTES (1024.0 * 1024.0)

double cost_reduce_read_factor(const ir_module *m, const ir_op *op)
{
    if (!op || op->kind != IR_OP_EINSUM || op->noperands != 1 || !op->result ||
        op->u.einsum.gather || op->u.einsum.scatter)
        return 1;
    const ir_type *a = &op->operands[0]->type, *r = &op->result->type;
    int rank = a->rank;
    if (rank < 2 || rank > IR_MAX_RANK)
        return 1;
    int64_t size[IR_MAX_RANK], stride[IR_MAX_RANK], s = 1;
    for (int j = rank - 1; j >= 0; j--) {
        size[j] = ir_local_size(m, a, j);
        stride[j] = s;
        s *= size[j];
    }
    /* The loops, innermost first: the contracted positions from the
     * operand's last, then the result's from its last. */
    int order[2 * IR_MAX_RANK], n = 0;
    for (int j = rank - 1; j >= 0; j--) {
        bool kept = false;
        for (int q = 0; q < r->rank; q++)
            kept |= op->u.einsum.result_labels[q] == op->u.einsum.labels[0][j];
        if (!kept)
            order[n++] = j;
    }
    for (int q = r->rank - 1; q >= 0; q--)
        for (int j = 0; j < rank; j++)
            if (op->u.einsum.labels[0][j] == op->u.einsum.result_labels[q]) {
                order[n++] = j;
                break;
            }
    /* The contiguous dim: the operand's last of more than one element. */
    int contiguous = -1;
    for (int j = rank - 1; j >= 0 && contiguous < 0; j--)
        if (size[j] > 1)
            contiguous = j;
    double elem = (double)ir_dtype_size(a->dtype), inside = 1;
    for (int k = 0; k < n; k++) {
        int j = order[k];
        if (size[j] <= 1)
            continue;
        if (j == contiguous)
            /* Sequential innermost (inside == 1), or lines that stay
             * cached until the next element of each is read. */
            return inside * LINE_BYTES <= REUSE_BYTES ? 1 : LINE_BYTES / elem;
        if (inside == 1 && (double)stride[j] * elem < LINE_BYTES)
            return 1; /* the innermost loop reads neighbours in one line */
        inside *= (double)size[j];
    }
    return 1;
}
