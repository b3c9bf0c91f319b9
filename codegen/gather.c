/*
 * gather.c - a gather einsum (ir.h: `Emb[Tok[B, T], D]`) as a call of the
 * runtime's rt_gather with a constant rt_gather_desc, and its adjoint, a
 * scatter-add einsum, as a call of rt_scatter_add with the same kind of
 * descriptor (of the table it makes).
 *
 * The result's layout is the indices' dims then the table's other dims
 * (lower.c builds it so), so a row of the table is a contiguous run of the
 * result and the kernel copies rows.  The descriptor carries the sharding
 * of the indices (for the global position in an out-of-range message) and
 * of the table's rows (for this device's block offset).
 */
#include <string.h>

#include "cg_internal.h"
#include "einrt.h"

/* The constant below lists rt_gather_desc's members in order, all 8 bytes
 * wide, so the C struct has no padding: ten scalars and pointers, three
 * rank arrays, the ids' axes and the rows' axes. */
_Static_assert(sizeof(rt_gather_desc) ==
                   8 * (10 + 3 * RT_MAX_RANK + RT_MAX_RANK * RT_MAX_AXES + RT_MAX_AXES),
               "rt_gather_desc changed: update cg_emit_gather");

/* [RT_MAX_AXES x i64] of a sharding's axes of dim d, padded with 0. */
static LLVMValueRef axes_of(cg_ctx *c, const ir_sharding *sh, int d)
{
    int64_t a[RT_MAX_AXES] = {0};
    for (int k = 0; k < sh->naxes[d] && k < RT_MAX_AXES; k++)
        a[k] = sh->axes[d][k];
    return cg_const_i64s(c, a, RT_MAX_AXES, RT_MAX_AXES, 0);
}

void cg_emit_gather(cg_ctx *c, cg_fn *f, const ir_op *op, int id, LLVMValueRef dst)
{
    const ir_module *m = f->m;
    /* A scatter-add writes the table (its result) from the rows (operand
     * 1); the descriptor describes the table either way. */
    bool scatter = op->u.einsum.scatter;
    const ir_value *ids = op->operands[0], *table = scatter ? op->result : op->operands[1];
    int64_t shape[RT_MAX_RANK] = {0}, global[RT_MAX_RANK] = {0}, naxes[RT_MAX_RANK] = {0};
    LLVMValueRef axes[RT_MAX_RANK];
    cg_local_shape(m, &ids->type, shape);
    for (int j = 0; j < RT_MAX_RANK; j++) {
        if (j < ids->type.rank) {
            global[j] = m->dims[ids->type.dims[j]].size;
            naxes[j] = ids->type.sh.naxes[j];
        }
        axes[j] = j < ids->type.rank ? axes_of(c, &ids->type.sh, j)
                                     : cg_const_i64s(c, NULL, 0, RT_MAX_AXES, 0);
    }
    int64_t row_elems = 1;
    for (int j = 1; j < table->type.rank; j++)
        row_elems *= ir_local_size(m, &table->type, j);
    LLVMTypeRef i64_axes = LLVMArrayType2(c->t.i64, RT_MAX_AXES);
    /* struct rt_gather_desc (einrt.h), member by member. */
    LLVMValueRef df[] = {
        cg_i64(c, (int64_t)table->type.dtype),
        cg_i64(c, ids->type.rank),
        cg_const_i64s(c, shape, ids->type.rank, RT_MAX_RANK, 0),
        cg_const_i64s(c, global, ids->type.rank, RT_MAX_RANK, 0),
        cg_const_i64s(c, naxes, ids->type.rank, RT_MAX_RANK, 0),
        LLVMConstArray2(i64_axes, axes, RT_MAX_RANK),
        cg_i64(c, ir_local_size(m, &table->type, 0)),
        cg_i64(c, m->dims[table->type.dims[0]].size),
        cg_i64(c, table->type.sh.naxes[0]),
        axes_of(c, &table->type.sh, 0),
        cg_i64(c, row_elems),
        cg_const_string(c, ids->tensor),
        cg_const_string(c, table->tensor),
        cg_i64(c, id),
        cg_i64(c, op->u.einsum.gather_zero_outside),
    };
    LLVMValueRef args[] = {f->dev, NULL, f->buf[ids->id], f->buf[op->operands[1]->id], dst};
    cg_call_with_desc(c, scatter ? "rt_scatter_add" : "rt_gather", df, sizeof df / sizeof df[0],
                      args, 5);
}
