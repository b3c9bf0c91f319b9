/*
 * verify_update.c - the invariants of UpdateSlice (ir.h), the in-place
 * write into program state at a run-time position, checked by ir_verify
 * after every pass; and those of Grad, the gradient the autodiff pass
 * derives (at the end of this file).
 *
 * Types: operand 0 leads (through earlier UpdateSlices and at most one
 * LayerSlice) to a state value; operand 1 is operand 0's type without the
 * written position `dim` (or for a window write, with an unsharded dim no
 * longer than it in its place), sharding included, and holds no unreduced
 * partial sums (each device writes the rows it holds; a partial row would
 * be a wrong one); operand 2 is a replicated i32 scalar, or for a
 * per-row write an i32 vector over the rows' dim, replicated or split like
 * it (each device then finds its rows' positions; a window starts at each
 * row's position); the result has
 * operand 0's type.  Aliasing: the result is operand 0's storage, so no op
 * after the UpdateSlice reads operand 0 (it would see the new rows while
 * the program says it holds the old ones).
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "verify_internal.h"

#define WHY(...) (why ? (void)snprintf(why, why_size, __VA_ARGS__) : (void)0)

/* A per-row position `pos` of storage `a`: an i32 vector over a's dim
 * `row` (before the written `dim`), replicated or split like that dim,
 * with no unreduced sums.  A window is fine: row b's window starts at
 * pos[b]. */
static bool row_position_ok(const ir_value *a, const ir_value *pos, int row, int dim, char *why,
                            size_t why_size)
{
    if (row >= dim) {
        WHY("the per-row position's dim %d is not one before the written dim %d", row, dim);
        return false;
    }
    if (pos->type.dtype != IR_I32 || pos->type.rank != 1 || pos->type.dims[0] != a->type.dims[row] ||
        pos->type.sh.unreduced) {
        WHY("the per-row position is not a reduced i32 vector over the storage's dim %d", row);
        return false;
    }
    int n = pos->type.sh.naxes[0];
    if (n && (n != a->type.sh.naxes[row] ||
              memcmp(pos->type.sh.axes[0], a->type.sh.axes[row], (size_t)n * sizeof pos->type.sh.axes[0][0]))) {
        WHY("the per-row position is split neither like the storage's rows nor not at all");
        return false;
    }
    return true;
}

bool ir_verify_update(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                      size_t why_size)
{
    if (op->noperands != 3) {
        WHY("UpdateSlice takes three operands (the storage, the slice, the position)");
        return false;
    }
    const ir_value *a = op->operands[0], *rows = op->operands[1], *pos = op->operands[2];
    const ir_value *r = op->result;
    int dim = op->u.update.dim;
    if (!ir_update_target(op)) {
        WHY("it writes a value that is not a state (or a layer of one)");
        return false;
    }
    if (dim < 0 || dim >= a->type.rank) {
        WHY("the written position %d is not a dim of the storage", dim);
        return false;
    }
    int row = op->u.update.row;
    if (row < 0 && (pos->type.dtype != IR_I32 || pos->type.rank != 0 || pos->type.sh.unreduced)) {
        WHY("the position is not a replicated i32 scalar");
        return false;
    }
    if (row >= 0 && !row_position_ok(a, pos, row, dim, why, why_size))
        return false;
    bool window = rows->type.rank == a->type.rank;
    bool same = rows->type.dtype == a->type.dtype && rows->type.rank == a->type.rank - !window;
    if (same && window)
        same = rows->type.sh.naxes[dim] == 0 &&
               m->dims[rows->type.dims[dim]].size <= m->dims[a->type.dims[dim]].size;
    for (int d = 0, j = 0; same && d < a->type.rank; d++) {
        if (d == dim) {
            j += window;
            continue;
        }
        same = rows->type.dims[j] == a->type.dims[d] &&
               rows->type.sh.naxes[j] == a->type.sh.naxes[d] &&
               memcmp(rows->type.sh.axes[j], a->type.sh.axes[d],
                      (size_t)a->type.sh.naxes[d] * sizeof a->type.sh.axes[d][0]) == 0;
        j++;
    }
    if (!same || rows->type.sh.unreduced) {
        WHY("the slice is not the storage's type and sharding without the written dim (or with "
            "an unsharded window in its place), fully reduced");
        return false;
    }
    if (r->type.dtype != a->type.dtype || r->type.rank != a->type.rank ||
        memcmp(r->type.dims, a->type.dims, sizeof(int) * (size_t)a->type.rank) != 0) {
        WHY("the result is not the storage's type");
        return false;
    }
    *out = a->type.sh;
    return true;
}

int ir_verify_updates(const ir_module *m, diag_ctx *d)
{
    int before = d->nerrors;
    char b1[256];
    /* written[id]: the UpdateSlice that wrote over value id, or NULL. */
    const ir_op **written = calloc((size_t)m->nvalues + 1, sizeof *written);
    if (!written) {
        diag_error(d, DIAG_NOLOC, "out of memory in the verifier");
        return 1;
    }
    for (const ir_op *op = m->first; op; op = op->next) {
        for (int i = 0; i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            if (v && v->id >= 0 && v->id < m->nvalues && written[v->id])
                diag_error(d, op->loc, "%s reads %s after an UpdateSlice wrote over it in place",
                           ir_op_name(op->kind), ir_value_name(v, b1, sizeof b1));
        }
        if (op->kind == IR_OP_UPDATESLICE && op->noperands > 0 && op->operands[0] &&
            op->operands[0]->id >= 0 && op->operands[0]->id < m->nvalues)
            written[op->operands[0]->id] = op;
    }
    free(written);
    return d->nerrors - before;
}

/* Grad (ir.h, IR_OP_GRAD): a float scalar loss, a float W of the result's
 * dims and dtype.  The frontend's IR is replicated and the autodiff pass
 * replaces every Grad before any pass shards, so its result is replicated. */
bool ir_verify_grad(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                    size_t why_size)
{
    (void)m;
    const ir_value *l = op->operands[0], *w = op->operands[1], *r = op->result;
    if (l->type.rank != 0 || l->type.dtype == IR_I32) {
        WHY("Grad differentiates a float scalar, and its loss has %d dims", l->type.rank);
        return false;
    }
    bool same = w->type.rank == r->type.rank && w->type.dtype == r->type.dtype && w->type.dtype != IR_I32;
    for (int i = 0; same && i < w->type.rank; i++)
        same = w->type.dims[i] == r->type.dims[i];
    if (!same) {
        WHY("a Grad's result has the dims and float dtype of the value it differentiates by");
        return false;
    }
    *out = ir_sharding_replicated();
    return true;
}
