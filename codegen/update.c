/*
 * update.c - an UpdateSlice op (ir.h: a write into state at a run-time
 * position) as a call of the runtime's rt_update_slice with a constant
 * rt_update_desc.  The op's result is its storage operand's buffer (a
 * state's, or a view of one layer of it): run.c makes the result name
 * that buffer, and the call writes the slice into it in place.
 */
#include "cg_internal.h"
#include "einrt.h"

/* The constant below lists rt_update_desc's members in order, all 8 bytes
 * wide, so the C struct has no padding: seven scalars, the axes, three
 * strings, the op id, four per-row scalars and the rows' axes. */
_Static_assert(sizeof(rt_update_desc) == 8 * (7 + RT_MAX_AXES + 3 + 1 + 4 + RT_MAX_AXES),
               "rt_update_desc changed: update cg_emit_update_slice");

void cg_emit_update_slice(cg_ctx *c, cg_fn *f, const ir_op *op, int id)
{
    const ir_module *m = f->m;
    const ir_value *store = op->operands[0], *rows = op->operands[1], *pos = op->operands[2];
    int at = op->u.update.dim;
    int row = op->u.update.row; /* per-row write: the rows' dim, < at */
    int64_t outer = 1, inner = 1, axes[RT_MAX_AXES] = {0}, row_axes[RT_MAX_AXES] = {0};
    int64_t row_stride = 1;
    for (int d = 0; d < store->type.rank; d++) {
        int64_t n = ir_local_size(m, &store->type, d);
        if (d < at)
            outer *= n;
        else if (d > at)
            inner *= n;
        if (row >= 0 && d > row && d < at)
            row_stride *= n;
    }
    for (int k = 0; k < store->type.sh.naxes[at] && k < RT_MAX_AXES; k++)
        axes[k] = store->type.sh.axes[at][k];
    int row_naxes = row >= 0 ? store->type.sh.naxes[row] : 0;
    for (int k = 0; k < row_naxes && k < RT_MAX_AXES; k++)
        row_axes[k] = store->type.sh.axes[row][k];
    const ir_dimdef *dim = &m->dims[store->type.dims[at]];
    /* struct rt_update_desc (einrt.h), member by member. */
    LLVMValueRef df[] = {
        cg_i64(c, (int64_t)store->type.dtype),
        cg_i64(c, outer),
        cg_i64(c, ir_local_size(m, &store->type, at)),
        cg_i64(c, dim->size),
        cg_i64(c, inner),
        /* A window write's rows have its dim in the written one's place. */
        cg_i64(c, rows->type.rank == store->type.rank ? ir_local_size(m, &rows->type, at) : 1),
        cg_i64(c, store->type.sh.naxes[at]),
        cg_const_i64s(c, axes, RT_MAX_AXES, RT_MAX_AXES, 0),
        cg_const_string(c, store->tensor),
        cg_const_string(c, pos->tensor),
        cg_const_string(c, dim->name),
        cg_i64(c, id),
        cg_i64(c, row >= 0 ? ir_local_size(m, &store->type, row) : 0),
        cg_i64(c, row_stride),
        cg_i64(c, row >= 0 && pos->type.sh.naxes[0] > 0), /* pos split like the rows */
        cg_i64(c, row_naxes),
        cg_const_i64s(c, row_axes, RT_MAX_AXES, RT_MAX_AXES, 0),
    };
    LLVMValueRef args[] = {f->dev, NULL, f->buf[pos->id], f->buf[rows->id], f->buf[store->id]};
    cg_call_with_desc(c, "rt_update_slice", df, sizeof df / sizeof df[0], args, 5);
}
