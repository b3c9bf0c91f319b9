/*
 * fusion.c - which elementwise ops run inside the loop of their consumer.
 *
 * Codegen emits the loops this decides (codegen/plan.c) and the cost model
 * prices a row group by it (passes/costmodel/cost_rowgroup.c), so the rule
 * lives here, in the layer both depend on, as a pure function of the IR.
 *
 * An elementwise op P is computed inline inside the loop of its consumer C
 * (no buffer for P's result) when P's result is read exactly once (one
 * operand node in one expression tree, so nothing is recomputed), by an
 * elementwise op C of the same loop body, at C's full result shape (C's
 * labels for that operand are a permutation of C's result labels, so no
 * element of P is recomputed), P's result is not a program output, and P
 * and C have one result dtype.  The last is for casts: a fused group is
 * computed in the arithmetic of its emitting op's dtype (f64 for f64, else
 * f32), so an f64 producer read by a cast to f32 keeps its buffer and is
 * computed in f64; a producer that converts (an operand's dtype is not its
 * result's) is rounded to its result dtype where it is read (codegen), so
 * a cast means the same fused or not.
 * Chains fuse transitively: fused_into names the op that finally emits the
 * loop.  A fused group holds at most IR_FUSED_MAX_NODES expression nodes (or
 * one op, however large): codegen evaluates a group's trees recursively,
 * one level per fused producer, so a chain of 50,000 elementwise statements
 * fused into one loop overflowed the stack.  Past the bound the producer
 * is materialised in a buffer and the chain goes on in a new loop.
 *
 * An einsum that codegen unrolls (ir_einsum_unrolled_terms: a few products
 * summed per element, einsum_unroll.c) is a producer too, by the same
 * rule: its consumer's loop computes each element as that sum, reading
 * the einsum's operands in place, so the rotary embedding's contraction,
 * its product with Sin and the sum with Q * Cos are one pass over Q.
 * It counts as three nodes per term (two loads and a multiply-add).
 */
#include <stdlib.h>

#include "ir.h"

static bool valid_value(const ir_module *m, const ir_value *v)
{
    return v && v->id >= 0 && v->id < m->nvalues;
}

bool ir_value_is_output(const ir_module *m, const ir_value *v)
{
    for (int o = 0; o < m->noutputs; o++)
        if (m->outputs[o].value == v)
            return true;
    return false;
}

/* Whether C's operand `k` covers C's result dims one to one (no broadcast). */
static bool full_shape_use(const ir_op *c, int k)
{
    const ir_value *v = c->operands[k];
    int rank = c->result->type.rank;
    if (v->type.rank != rank)
        return false;
    for (int j = 0; j < rank; j++) {
        int found = 0;
        for (int r = 0; r < rank; r++)
            found += c->u.ew.labels[k][j] == c->u.ew.result_labels[r];
        if (found != 1)
            return false;
    }
    return true;
}

int ir_fuse_elementwise(const ir_module *m, ir_op *const *ops, int nops, int *fused_into)
{
    for (int i = 0; i < nops; i++)
        fused_into[i] = -1;
    int nv = m->nvalues > 0 ? m->nvalues : 1;
    /* Uses: how many times each value is read (per operand node of an
     * elementwise tree, so `U * U` counts twice and U is not recomputed by
     * fusing it), and the last reader. */
    int *nuses = calloc((size_t)nv, sizeof *nuses);
    int *reader = malloc((size_t)nv * sizeof *reader);
    int *nodes = calloc((size_t)(nops > 0 ? nops : 1), sizeof *nodes);
    if (!nuses || !reader || !nodes) {
        free(nuses);
        free(reader);
        free(nodes);
        return -1;
    }
    for (int v = 0; v < nv; v++)
        reader[v] = -1;
    for (int i = 0; i < nops; i++) {
        const ir_op *op = ops[i];
        for (int k = 0; k < op->noperands; k++) {
            if (!valid_value(m, op->operands[k]))
                continue;
            int v = op->operands[k]->id;
            if (op->kind != IR_OP_ELEMENTWISE)
                nuses[v]++;
            reader[v] = i;
        }
        if (op->kind != IR_OP_ELEMENTWISE)
            continue;
        nodes[i] = op->u.ew.nnodes;
        for (int n = 0; n < op->u.ew.nnodes; n++) {
            const ir_ew_node *e = &op->u.ew.nodes[n];
            if (e->kind == IR_EW_OPERAND && e->operand >= 0 && e->operand < op->noperands &&
                valid_value(m, op->operands[e->operand]))
                nuses[op->operands[e->operand]->id]++;
        }
    }
    /* Direct fusion decisions, then resolved to the emitting op.  Consumers
     * come after producers, so walking backwards resolves chains.  nodes[i]
     * counts the expression nodes of op i and of every producer fused into
     * it so far; producers come first, so it is complete when op i is
     * decided, and a fusion that would take its consumer's group past
     * IR_FUSED_MAX_NODES is not made. */
    for (int i = 0; i < nops; i++) {
        const ir_op *op = ops[i];
        int terms = ir_einsum_unrolled_terms(m, op);
        if (terms > 0)
            nodes[i] = 3 * terms;
        if ((op->kind != IR_OP_ELEMENTWISE && terms == 0) || !valid_value(m, op->result))
            continue;
        int v = op->result->id;
        if (nuses[v] != 1 || reader[v] < 0 || ir_value_is_output(m, op->result))
            continue;
        const ir_op *c = ops[reader[v]];
        /* Not into another loop body (or out of one): the producer would
         * run once per iteration, or the body's value after it. */
        if (c->kind != IR_OP_ELEMENTWISE || nodes[reader[v]] + nodes[i] > IR_FUSED_MAX_NODES ||
            c->loop != op->loop || !valid_value(m, c->result) ||
            c->result->type.dtype != op->result->type.dtype)
            continue;
        for (int k = 0; k < c->noperands; k++)
            if (c->operands[k] == op->result && full_shape_use(c, k))
                fused_into[i] = reader[v];
        if (fused_into[i] >= 0)
            nodes[reader[v]] += nodes[i];
    }
    for (int i = nops - 1; i >= 0; i--) {
        int c = fused_into[i];
        if (c >= 0 && fused_into[c] >= 0)
            fused_into[i] = fused_into[c];
    }
    free(nuses);
    free(reader);
    free(nodes);
    return 0;
}

const ir_value *ir_folded_cast_source(const ir_module *m, const ir_value *v)
{
    if (m->no_cast_fold || !v || v->kind != IR_VAL_OP || !v->def || v->nuses != 1)
        return NULL;
    const ir_op *cast = v->def, *use = v->uses[0].op;
    if (cast->kind != IR_OP_ELEMENTWISE || cast->noperands != 1 || !cast->operands[0] ||
        cast->u.ew.nnodes < 1 || cast->u.ew.nodes[cast->u.ew.root].kind != IR_EW_OPERAND ||
        ir_dtype_size(cast->operands[0]->type.dtype) >= ir_dtype_size(v->type.dtype) ||
        !cast->result || !full_shape_use(cast, 0) ||
        !use || use->kind != IR_OP_EINSUM || use->noperands != 2 || use->u.einsum.gather ||
        use->u.einsum.scatter || use->u.einsum.reduce != IR_RED_SUM ||
        ir_einsum_unrolled_terms(m, use) > 0)
        return NULL;
    for (int k = 0; k < m->noutputs; k++) /* by id: the planner prices copies of values */
        if (m->outputs[k].value && m->outputs[k].value->id == v->id)
            return NULL; /* the caller reads the converted copy */
    return cast->operands[0];
}
