/*
 * cost_fusion.c - the values a chip keeps on chip rather than in HBM:
 * the scores of a softmax attention, which a Flash Attention kernel
 * computes and consumes block by block in on-chip memory.
 *
 * Seed 002, "What about attention?": in a Flash Attention fusion the step
 * reads Q and the KV cache from HBM, does the QK and AV matmuls and writes
 * the result back; "we never need to write the [B, S, T] attention matrix
 * back to HBM".  That is why a decode step's attention costs the bytes of
 * its KV cache over the HBM bandwidth and nothing for the scores (seed 002,
 * "Theoretical estimates of LLM latency and throughput", equation (1)).
 * einc writes attention as separate ops (the QK einsum, the softmax's max,
 * exp, sum and scale, the AV einsum), and the per-op roofline alone
 * would charge each of them a trip of the scores through HBM: about six,
 * over [B, heads, S] per layer, a tenth of the step of seed 002's GQA
 * LLaMA-2 13B at B = 16.
 *
 * The rule.  The result R of an (arithmetic, non-gather) Einsum roots a
 * family: R, and the result of every Elementwise op that reads a member
 * and has exactly R's dims (the causal mask, exp(x - max), the scaling by
 * the row sums).  The family is attention scores when a member is read by
 * a max reduction (a unary max Einsum that reduces one of its dims): the
 * softmax's running maximum, which is how einc lowers `softmax` and how
 * one writes it by hand.  A member is kept on chip unless it is a program
 * output or something other than an Einsum or Elementwise op reads it (a
 * collective moves a value from HBM).  The row statistics (the max and the
 * sums, without the reduced dim) are not members: they are small and go
 * to HBM as usual.
 *
 * Narrow operands.  An einsum operand that is a cast of a narrower value
 * (`f32(Wq[D, F])` of int8 weights, `f32(Xb[...])` of bf16) and that
 * nothing else reads is converted as the GEMM loads its tiles: the MXU
 * and tensor cores take int8 and bf16 inputs and accumulate wider, so
 * the weights cross HBM at their own width (seed 002: int8 weights halve
 * the bytes of a memory-bound decode step).  Such a cast's result is kept
 * on chip, and the einsum is charged the cast's source bytes instead
 * (ir_folded_cast_source, cost_op.c).  An einsum all of whose operands
 * are such casts of i8 values runs int8 x int8 (cost_einsum_dtype).
 *
 * einc's runtime folds such casts too (codegen/plan.c, runtime/
 * einsum_mixed.c: the GEMM converts the source block by block), so their
 * bytes and the missing copy hold on a calibrated host as well; the int8
 * rate does not (the host converts to f32 and runs sgemm).  The scores'
 * on-chip rule is only for the seeds' chips: an einc executable on a
 * calibrated host runs each op on its own and does write the scores
 * (runtime/), so a measured profile keeps them in memory.
 */
#include <stdlib.h>

#include "costmodel.h"

/* Whether the dims of `a` and `b` are the same set (any order). */
static bool same_dims(const ir_type *a, const ir_type *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++) {
        bool found = false;
        for (int j = 0; j < b->rank && !found; j++)
            found = a->dims[i] == b->dims[j];
        if (!found)
            return false;
    }
    return true;
}

/* Whether `op` is a max reduction that drops a dim of its operand. */
static bool is_max_reduction(const ir_op *op)
{
    if (op->kind != IR_OP_EINSUM || op->u.einsum.reduce != IR_RED_MAX || op->noperands != 1 ||
        !op->operands[0] || !op->result)
        return false;
    return op->result->type.rank < op->operands[0]->type.rank;
}

static bool valid_id(const ir_module *m, const ir_value *v)
{
    return v && v->id >= 0 && v->id < m->nvalues;
}

ir_dtype cost_einsum_dtype(const ir_module *m, const ir_op *op)
{
    ir_dtype t = op->result ? op->result->type.dtype : IR_F32;
    if (op->kind != IR_OP_EINSUM || op->noperands < 1)
        return t;
    for (int k = 0; k < op->noperands; k++) {
        const ir_value *src = ir_folded_cast_source(m, op->operands[k]);
        if (!src || src->type.dtype != IR_I8)
            return t;
    }
    return IR_I8;
}

bool *cost_onchip_values(const ir_module *m, const cost_hw *hw)
{
    if (hw->measured || m->nvalues <= 0)
        return NULL;
    bool fused = false; /* some cast is fused into its einsum's operand read */
    for (int i = 0; i < m->nvalues && !fused; i++)
        fused = ir_folded_cast_source(m, m->values[i]) != NULL;
    /* root[id]: id of the family root of value id, or -1 (no family);
     * scores[id]: the family rooted at id is attention scores. */
    int *root = malloc((size_t)m->nvalues * sizeof *root);
    bool *scores = calloc((size_t)m->nvalues, sizeof *scores);
    bool *onchip = calloc((size_t)m->nvalues, sizeof *onchip);
    if (!root || !scores || !onchip) {
        free(root);
        free(scores);
        free(onchip);
        return NULL; /* out of memory: every value in HBM, the plain roofline */
    }
    for (int i = 0; i < m->nvalues; i++)
        root[i] = -1;
    bool any = false;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!valid_id(m, op->result))
            continue;
        if (is_max_reduction(op) && valid_id(m, op->operands[0]) && root[op->operands[0]->id] >= 0) {
            scores[root[op->operands[0]->id]] = true;
            any = true;
        } else if (op->kind == IR_OP_EINSUM && !op->u.einsum.gather) {
            root[op->result->id] = op->result->id;
        } else if (op->kind == IR_OP_ELEMENTWISE) {
            for (int k = 0; k < op->noperands; k++) {
                const ir_value *v = op->operands[k];
                if (!valid_id(m, v) || root[v->id] < 0)
                    continue;
                const ir_value *r = m->values[root[v->id]];
                if (r && same_dims(&r->type, &op->result->type)) {
                    root[op->result->id] = root[v->id];
                    break;
                }
            }
        }
    }
    for (int i = 0; i < m->nvalues && fused; i++)
        onchip[i] = ir_folded_cast_source(m, m->values[i]) != NULL;
    if (any) {
        for (int i = 0; i < m->nvalues; i++)
            onchip[i] |= root[i] >= 0 && scores[root[i]];
        /* What leaves the fused kernel is in HBM: an output, or a value a
         * collective or any other kind of op reads. */
        for (int k = 0; k < m->noutputs; k++)
            if (valid_id(m, m->outputs[k].value))
                onchip[m->outputs[k].value->id] = false;
        for (const ir_op *op = m->first; op; op = op->next)
            if (op->kind != IR_OP_EINSUM && op->kind != IR_OP_ELEMENTWISE)
                for (int k = 0; k < op->noperands; k++)
                    if (valid_id(m, op->operands[k]))
                        onchip[op->operands[k]->id] = false;
    }
    free(root);
    free(scores);
    if (!any && !fused) {
        free(onchip);
        return NULL;
    }
    return onchip;
}
