/*
 * einsum_rule.c - seed 001's sharding rule for an einsum's result, the one
 * definition the verifier (ir_op_local_sharding) and the planner
 * (passes/propagate_layout.c) share.  The two copies it replaces agreed:
 * both kept a result dim's axes, made the axes of contracted labels
 * unreduced with the einsum's reduction (sum for Elementwise) and kept the
 * operands' (the planner's carried) partial sums.  They differ only in
 * what they reject before the rule, which stays with each caller: the
 * verifier computes an Elementwise result dim that no operand has whole,
 * the planner never shards such a dim.
 *
 * Also the position of a label among an op's labels, which the einsum
 * rules of the planner and codegen's MeshSlice lowering look up.
 */
#include <string.h>

#include "ir.h"

ir_axes ir_einsum_sharding(int nlabels, const int *lnaxes, const int8_t (*laxes)[IR_MAX_AXES],
                           const bool *in_operand, int rank, const int *rlabel, ir_axes unreduced,
                           ir_reduce reduce, ir_sharding *out)
{
    memset(out, 0, sizeof *out);
    /* Case 1 / 2: a dim of the result keeps its operands' axes. */
    for (int r = 0; r < rank; r++) {
        int l = rlabel[r];
        if (l < 0 || l >= nlabels)
            continue; /* computed whole on every device */
        out->naxes[r] = (uint8_t)lnaxes[l];
        memcpy(out->axes[r], laxes[l], (size_t)lnaxes[l]);
    }
    /* Case 3: the axes of a contracted dim hold partial results of the
     * einsum's reduction, unreduced over them ({U_X}). */
    ir_axes contracted = 0;
    for (int l = 0; l < nlabels; l++) {
        if (!in_operand[l])
            continue;
        bool kept = false;
        for (int r = 0; r < rank && !kept; r++)
            kept = rlabel[r] == l;
        for (int k = 0; !kept && k < lnaxes[l]; k++)
            contracted |= 1u << laxes[l][k];
    }
    /* Operands' partial sums stay partial (the einsum is linear in each). */
    out->unreduced = unreduced | contracted;
    out->red = (uint8_t)(contracted ? reduce : IR_RED_SUM);
    return contracted;
}

int ir_label_pos(const int *labels, int rank, int label)
{
    for (int j = 0; j < rank; j++)
        if (labels[j] == label)
            return j;
    return -1;
}
