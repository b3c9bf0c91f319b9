/*
 * meshslice.c - lowering of the MeshSlice op: one call of the runtime's
 * pipelined loop, rt_meshslice(dev, &desc, a, b, c).
 *
 * The loop itself (slice, start the partial collectives of k+1, partial
 * GEMM of k, finish the partial ReduceScatter of k-1; seed 004 Fig. 5) is
 * the same for every MeshSlice op and lives in runtime/async_meshslice.c
 * with the asynchronous collectives it needs; what differs per op is
 * constant and is emitted here as private constant globals: the partial
 * einsum of one iteration (the moved operands' split dim at its gathered
 * per-iteration size, the result's at its pre-ReduceScatter size), the two
 * partial collectives on one sub-shard, and the rt_meshslice_desc tying
 * them together.  rt_meshslice_desc has only 8-byte members, so its LLVM
 * mirror below is a struct of i64 and ptr fields with no padding.
 */
#include <string.h>

#include "cg_internal.h"
#include "einrt.h"

/* A constant rt_coll_desc for a single-axis collective.  Its reduce_op is
 * always SUM: MeshSlice's ReduceScatter adds partial GEMM products. */
static LLVMValueRef coll_const(cg_ctx *c, int kind, ir_dtype t, int axis, int rank,
                               const int64_t *in, const int64_t *out, int dim, int id)
{
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.dtype = (int32_t)t;
    d.naxes = 1;
    d.axes[0] = axis;
    d.rank = rank;
    memcpy(d.in_shape, in, (size_t)rank * sizeof *in);
    memcpy(d.out_shape, out, (size_t)rank * sizeof *out);
    d.dim = dim;
    d.dim2 = -1;
    d.op_id = id;
    d.reduce_op = RT_REDUCE_SUM;
    for (int a = 0; a < RT_MAX_AXES; a++)
        d.axis_dim[a] = d.axis_dim2[a] = -1;
    return cg_coll_desc_const(c, &d, "ms_coll_desc");
}

/* The rt_meshslice declaration, added on first use. */
static LLVMValueRef rt_meshslice_fn(cg_ctx *c, LLVMTypeRef *ty)
{
    LLVMTypeRef params[] = {c->t.ptr, c->t.ptr, c->t.ptr, c->t.ptr, c->t.ptr};
    *ty = LLVMFunctionType(c->t.voidt, params, 5, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, "rt_meshslice");
    if (!fn)
        fn = LLVMAddFunction(c->mod, "rt_meshslice", *ty);
    return fn;
}

void cg_emit_meshslice(cg_ctx *c, cg_fn *f, const ir_op *op, int id, LLVMValueRef dst)
{
    const ir_module *m = f->m;
    int K = op->u.ms.k, L = op->u.ms.split_label;
    const ir_value *vals[3] = {op->operands[0], op->operands[1], op->result};
    int64_t full[3][RT_MAX_RANK] = {{0}}, iter[3][RT_MAX_RANK] = {{0}};
    int32_t lab[3][RT_MAX_RANK] = {{0}};
    int64_t rank[3], pos[3];
    for (int t = 0; t < 3; t++) {
        rank[t] = vals[t]->type.rank;
        cg_local_shape(m, &vals[t]->type, full[t]);
        cg_local_shape(m, &vals[t]->type, iter[t]);
        const int *l = t < 2 ? op->u.ms.labels[t] : op->u.ms.result_labels;
        for (int j = 0; j < rank[t]; j++)
            lab[t][j] = l[j];
        pos[t] = ir_label_pos(l, (int)rank[t], L);
    }
    /* Partial collectives: on sub-shards (split dim / K); the partial
     * einsum sees the gathered (or not yet scattered) size, times P. */
    LLVMValueRef colls[2];
    int64_t coll_operand[2];
    for (int i = 0; i < op->u.ms.nmoves && i < 2; i++) {
        const ir_ms_move *mv = &op->u.ms.moves[i];
        int t = mv->operand >= 0 ? mv->operand : 2;
        int64_t P = m->mesh.axes[mv->axis].size;
        int64_t sub[RT_MAX_RANK], big[RT_MAX_RANK];
        for (int j = 0; j < rank[t]; j++)
            sub[j] = big[j] = full[t][j];
        sub[mv->dim] = full[t][mv->dim] / K;
        big[mv->dim] = sub[mv->dim] * P;
        iter[t][mv->dim] = big[mv->dim];
        bool gather = mv->kind == IR_OP_ALLGATHER;
        colls[i] = coll_const(c, gather ? RT_ALLGATHER : RT_REDUCESCATTER, vals[t]->type.dtype,
                              mv->axis, (int)rank[t], gather ? sub : big, gather ? big : sub,
                              mv->dim, id);
        coll_operand[i] = mv->operand;
    }
    /* OS: the contracting dim is split, so A's and B's per-iteration split
     * dims are the gathered sub-shard; C is whole. */
    LLVMValueRef ranks[3], shapes[3], labels[3];
    for (int t = 0; t < 3; t++) {
        ranks[t] = cg_i32(c, rank[t]);
        shapes[t] = cg_const_i64s(c, iter[t], (int)rank[t], RT_MAX_RANK, 0);
        int32_t l32[RT_MAX_RANK];
        for (int j = 0; j < RT_MAX_RANK; j++)
            l32[j] = lab[t][j];
        labels[t] = cg_const_i32s(c, l32, (int)rank[t], RT_MAX_RANK, 0);
    }
    LLVMTypeRef i64_rank = LLVMArrayType2(c->t.i64, RT_MAX_RANK);
    LLVMTypeRef i32_rank = LLVMArrayType2(c->t.i32, RT_MAX_RANK);
    LLVMValueRef ef[] = {
        cg_i32(c, (int)op->result->type.dtype),
        cg_i32(c, 2),
        LLVMConstArray2(c->t.i32, ranks, 3),
        LLVMConstArray2(i64_rank, shapes, 3),
        LLVMConstArray2(i32_rank, labels, 3),
        LLVMConstReal(c->t.f64, op->u.ms.scale),
        cg_i32(c, id),
        cg_i32(c, 0), /* not mixed: both operands have the result's dtype (cg_check_ms) */
        cg_const_i32s(c, NULL, 0, 2, 0),
    };
    LLVMValueRef edesc = cg_const_global(
        c, LLVMConstNamedStruct(c->t.einsum_desc, ef, sizeof ef / sizeof ef[0]), "ms_einsum_desc");

    /* struct rt_meshslice_desc (einrt.h), member by member. */
    LLVMTypeRef ptr2 = LLVMArrayType2(c->t.ptr, 2);
    LLVMTypeRef i64_2 = LLVMArrayType2(c->t.i64, 2), i64_3 = LLVMArrayType2(c->t.i64, 3);
    LLVMTypeRef shape3 = LLVMArrayType2(i64_rank, 3);
    LLVMTypeRef members[] = {c->t.i64, c->t.i64, c->t.i64, c->t.ptr, ptr2, i64_2, i64_3, i64_3,
                             shape3, c->t.i64};
    LLVMTypeRef desc_ty = LLVMStructTypeInContext(c->llctx, members, sizeof members / sizeof members[0], 0);
    LLVMValueRef fullc[3];
    for (int t = 0; t < 3; t++)
        fullc[t] = cg_const_i64s(c, full[t], (int)rank[t], RT_MAX_RANK, 0);
    LLVMValueRef df[] = {
        cg_i64(c, op->u.ms.dataflow),
        cg_i64(c, K),
        cg_i64(c, op->u.ms.block),
        edesc,
        LLVMConstArray2(c->t.ptr, colls, 2),
        cg_const_i64s(c, coll_operand, 2, 2, 0),
        cg_const_i64s(c, pos, 3, 3, 0),
        cg_const_i64s(c, rank, 3, 3, 0),
        LLVMConstArray2(i64_rank, fullc, 3),
        cg_i64(c, id),
    };
    LLVMValueRef desc = cg_const_global(c, LLVMConstStructInContext(c->llctx, df, sizeof df / sizeof df[0], 0),
                                        "ms_desc");
    (void)desc_ty;
    LLVMTypeRef fty;
    LLVMValueRef fn = rt_meshslice_fn(c, &fty);
    LLVMValueRef args[] = {f->dev, desc, f->buf[op->operands[0]->id], f->buf[op->operands[1]->id], dst};
    LLVMBuildCall2(c->b, fty, fn, args, 5, "");
}
