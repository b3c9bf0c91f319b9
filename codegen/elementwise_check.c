/*
 * elementwise_check.c - what codegen checks of an Elementwise op before it
 * emits a loop nest for it (cg_ew_check): a well-formed expression tree,
 * result labels that are distinct dims, and operands whose every dim is a
 * dim of the result with the same size per device.  The verifier checks
 * the IR; this guards the emitter against a tree it would index out of
 * bounds, so a bad module is an error message, not a crash.
 */
#include <stdlib.h>

#include "cg_internal.h"

/* Checks the tree under node `n`: indices, operands, functions and dims
 * valid, comparisons exactly where a truth value is wanted (the condition
 * of a where, and nowhere else), and no cycle.  `state` per node: 0 unseen,
 * 1 on the current path, 2 checked; each node is checked once, so a DAG
 * with shared nodes costs O(nodes). */
static bool node_ok(const ir_op *op, int n, unsigned char *state)
{
    if (n < 0 || n >= op->u.ew.nnodes || state[n] == 1)
        return false;
    if (state[n] == 2)
        return true;
    const ir_ew_node *e = &op->u.ew.nodes[n];
    bool ok = (unsigned)e->kind < IR_EW_KIND_COUNT;
    state[n] = 1;
    const int kids[3] = {e->a, e->b, e->c};
    int arity = ir_ew_arity(e->kind);
    for (int k = 0; ok && k < arity; k++) {
        ok = node_ok(op, kids[k], state);
        bool want_bool = e->kind == IR_EW_SELECT && k == 0;
        ok = ok && ir_ew_is_compare(op->u.ew.nodes[kids[k]].kind) == want_bool;
    }
    switch (e->kind) {
    case IR_EW_OPERAND:
        ok = e->operand >= 0 && e->operand < op->noperands;
        break;
    case IR_EW_INDEX: {
        int r = 0, rank = op->result->type.rank;
        while (r < rank && op->u.ew.result_labels[r] != e->dim)
            r++;
        ok = r < rank;
        break;
    }
    case IR_EW_CALL:
        ok = ok && (int)e->fn >= 0 && e->fn < IR_FN_COUNT;
        break;
    default:
        break;
    }
    state[n] = 2;
    return ok;
}

bool cg_ew_check(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    const ir_value *res = op->result;
    bool tree_ok = op->u.ew.nodes && op->u.ew.nnodes >= 1 && res &&
                   !ir_ew_is_compare(op->u.ew.nodes[op->u.ew.root].kind);
    if (tree_ok) {
        unsigned char *state = cg_calloc((size_t)op->u.ew.nnodes, 1);
        tree_ok = node_ok(op, op->u.ew.root, state);
        free(state);
    }
    if (!tree_ok) {
        diag_error(d, op->loc, "codegen: malformed elementwise expression (bad node index, "
                               "kind, operand, function or index dim, a comparison outside "
                               "a where condition, or a cycle)");
        return false;
    }
    for (int r = 0; r < res->type.rank; r++) {
        int l = op->u.ew.result_labels[r];
        bool dup = false;
        for (int s = 0; s < r; s++)
            dup |= op->u.ew.result_labels[s] == l;
        if (l < 0 || l >= m->ndims || dup) {
            diag_error(d, op->loc, "codegen: elementwise result label %d at position %d is %s",
                       l, r, dup ? "repeated" : "not a dim");
            return false;
        }
    }
    for (int k = 0; k < op->noperands; k++) {
        const ir_value *v = op->operands[k];
        for (int j = 0; j < v->type.rank; j++) {
            int l = op->u.ew.labels[k][j], r = 0;
            while (r < res->type.rank && op->u.ew.result_labels[r] != l)
                r++;
            if (r == res->type.rank) {
                diag_error(d, op->loc, "codegen: elementwise operand %d dim %d (label %d) is not "
                                       "a dim of the result", k, j, l);
                return false;
            }
            int64_t a = ir_local_size(m, &v->type, j), b = ir_local_size(m, &res->type, r);
            if (a != b) {
                diag_error(d, op->loc, "codegen: elementwise operand %d dim '%s' has %lld elements "
                                       "per device but the result has %lld (shardings differ)",
                           k, m->dims[l].name, (long long)a, (long long)b);
                return false;
            }
        }
    }
    return true;
}
