/*
 * pipeline_fill.c - zero-bubble's W items placed at run time
 * (`--w-fill=greedy`, docs/pipeline.md "W items placed at run time").
 *
 * The run function (pipeline.c) loops over its stage's row of the
 * schedule table, one item per trip.  With the greedy fill a trip asks
 * the runtime which position of the row to run (rt_pipe_next,
 * runtime/pipe_fill.c): the one at the cursor, or while that item's input
 * has not arrived, the stage's next W whose B has run.  Every item still
 * runs once, so the loop keeps its nitems trips and the F, B and W bodies
 * are the same; only the order changes.  The cursor and the row's done
 * flags live in one rt_alloc'd block: an i32 cursor, then nitems bytes.
 */
#include "pipeline_internal.h"

/* Where the done flags start in the block (the cursor's i32 before). */
enum { DONE_AT = 8 };

bool cg_pp_fill_on(const pp_ctx *x)
{
    const ir_pipeline *pp = &x->m->pipe;
    return pp->w_fill == IR_W_FILL_GREEDY && x->wb >= 0 && x->m->mesh.axes[pp->axis].size > 1;
}

LLVMValueRef cg_pp_fill_begin(cg_ctx *c, cg_fn *f, int nitems)
{
    int64_t bytes = DONE_AT + (int64_t)nitems;
    LLVMValueRef args[] = {f->dev, cg_i64(c, bytes)};
    LLVMValueRef state = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, "fill");
    LLVMBuildMemSet(c->b, state, LLVMConstInt(c->t.i8, 0, 0), cg_i64(c, bytes), 8);
    return state;
}

LLVMValueRef cg_pp_fill_next(cg_ctx *c, cg_fn *f, LLVMValueRef state, LLVMValueRef table,
                             LLVMValueRef row_at, int nitems)
{
    LLVMTypeRef params[] = {c->t.ptr, c->t.i32, c->t.ptr, c->t.i32, c->t.ptr, c->t.ptr};
    LLVMTypeRef fty = LLVMFunctionType(c->t.i32, params, 6, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, "rt_pipe_next");
    if (!fn)
        fn = LLVMAddFunction(c->mod, "rt_pipe_next", fty);
    LLVMValueRef row = LLVMBuildInBoundsGEP2(c->b, c->t.i32, table, &row_at, 1, "row");
    LLVMValueRef at = cg_i64(c, DONE_AT);
    LLVMValueRef done = LLVMBuildInBoundsGEP2(c->b, c->t.i8, state, &at, 1, "done");
    LLVMValueRef args[] = {f->dev, cg_i32(c, f->m->pipe.axis), row, cg_i32(c, nitems), state, done};
    LLVMValueRef pos = LLVMBuildCall2(c->b, fty, fn, args, 6, "pos");
    return LLVMBuildZExt(c->b, pos, c->t.i64, "");
}

void cg_pp_fill_end(cg_ctx *c, cg_fn *f, LLVMValueRef state)
{
    LLVMValueRef args[] = {f->dev, state};
    LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
}
