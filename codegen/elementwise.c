/*
 * elementwise.c - fused elementwise loop nests in LLVM IR.
 *
 * An Elementwise op computes result[r] = expr(operands broadcast to r) over
 * the result's per-device block.  We emit one loop per result position,
 * outermost first, so the innermost loop walks the result's last (contiguous)
 * dim and O3's loop vectoriser can widen it; adjacent positions that every
 * operand has adjacent too share one loop (plan_loops).  Loops are
 * bottom-tested (every per-device size is >= 1) with a phi per index.
 *
 * Indexing by labels: inside the nest, `bylabel[dim id]` is the current index
 * of the result position carrying that label.  Operand k's element offset is
 * sum_j bylabel[labels[k][j]] * stride_k[j] over its own per-device shape, so
 * an operand that lacks some of the result's labels is broadcast along them,
 * and a transposed operand is read through its own strides.
 *
 * Fusion (decided in plan.c): an operand produced by an op fused into this
 * one is not loaded; its expression tree is evaluated in place with a label
 * map translated through the producer's result labels.
 *
 * Unrolled einsums (ir_einsum_unrolled_terms): a binary einsum that sums a
 * few products per element is the same nest with the einsum as its tree:
 * each element is sum over the contracted index combinations c of
 * a[r, c] * b[r, c], the combinations unrolled (constant indices along
 * the contracted labels, in the operands' label order), times the
 * einsum's scale.  It runs as its own nest (run.c) or inside the loop of
 * the elementwise op it is fused into, like any producer.
 *
 * Streamed results (stream_chunk, stream_loop): a large result is
 * computed four cache lines at a time into a stage in the first-level
 * cache and copied out with non-temporal stores, so its lines are not
 * read before they are written.
 *
 * Arithmetic is done in f32 for f32 and bf16 results and in f64 for f64
 * results.  bf16 is stored as the upper half of an f32: loads shift the i16
 * into the top of an i32; stores round to nearest even (NaN kept quiet).
 *
 * Index values (IR_EW_INDEX) are the element's global position along a
 * dim: the loop index plus the device's block offset along that dim, which
 * is computed once before the nest from rt_coord (the block numbering of
 * runtime/einrt.h) and converted to the compute type.  maximum and minimum
 * are llvm.maximum / llvm.minimum (NaN propagating, as numpy); comparisons
 * are ordered fcmp (false on NaN) except != (unordered, true on NaN), as
 * in C and numpy; where is a select.
 *
 * Functions (exp, tanh, gelu, ...) and the arithmetic under them are
 * elementwise_fn.c's; the check of an op's tree is elementwise_check.c's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"
#include "elementwise_internal.h"

/* The labels of `op`'s result: an elementwise op's, or an unrolled
 * einsum's. */
static const int *res_labels(const ir_op *op)
{
    return op->kind == IR_OP_EINSUM ? op->u.einsum.result_labels : op->u.ew.result_labels;
}

/* Offset of the element of value `v` at label indices `bylabel`, through
 * `labels`.  A row-local buffer (rowgroup.c) holds one row: its row
 * positions, the leading ones, do not move the offset. */
static LLVMValueRef offset_of(ew_nest *n, const ir_value *v, const int *labels,
                              LLVMValueRef *bylabel)
{
    cg_ctx *c = n->c;
    const ir_type *t = &v->type;
    int64_t shape[IR_MAX_RANK];
    cg_local_shape(n->f->m, t, shape);
    LLVMValueRef off = cg_i64(c, 0);
    int64_t stride = 1;
    int lo = cg_one_row(n->f, v->id) ? n->f->nrow : 0;
    for (int j = t->rank - 1; j >= lo; j--) {
        LLVMValueRef term = LLVMBuildNSWMul(c->b, bylabel[labels[j]], cg_i64(c, stride), "");
        off = LLVMBuildNSWAdd(c->b, off, term, "");
        stride *= shape[j];
    }
    return off;
}

static LLVMValueRef load_elem(ew_nest *n, LLVMValueRef base, ir_dtype dtype, LLVMValueRef off)
{
    return cg_load_elem(n->c, n->ct, base, dtype, off);
}

static void store_elem(ew_nest *n, LLVMValueRef v, ir_dtype dtype, LLVMValueRef base,
                       LLVMValueRef off)
{
    cg_store_elem(n->c, n->ct, v, dtype, base, off);
}

LLVMValueRef cg_load_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef base, ir_dtype dtype,
                          LLVMValueRef off)
{
    LLVMBuilderRef b = c->b;
    if (dtype == IR_I32 || dtype == IR_I8) { /* an integer: its value as a number, exact */
        LLVMTypeRef it = dtype == IR_I8 ? c->t.i8 : c->t.i32;
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, it, base, &off, 1, "");
        return LLVMBuildSIToFP(b, LLVMBuildLoad2(b, it, p, ""), ct, "");
    }
    LLVMTypeRef st = dtype == IR_F64 ? c->t.f64 : dtype == IR_BF16 ? c->t.i16 : c->t.f32;
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(b, st, p, "");
    if (dtype == IR_BF16) {
        v = LLVMBuildShl(b, LLVMBuildZExt(b, v, c->t.i32, ""), LLVMConstInt(c->t.i32, 16, 0), "");
        v = LLVMBuildBitCast(b, v, c->t.f32, "");
        st = c->t.f32;
    }
    if (st != ct)
        v = st == c->t.f32 ? LLVMBuildFPExt(b, v, ct, "") : LLVMBuildFPTrunc(b, v, ct, "");
    return v;
}

LLVMValueRef cg_i32_from_float(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v)
{
    /* Clamped first: fptosi of a value outside i32 is poison.  A clamped
     * position is still outside every table an i32 indexes, so a gather
     * sees it as out of range as it was. */
    LLVMValueRef lo = LLVMConstReal(ct, -2147483648.0), hi = LLVMConstReal(ct, 2147483647.0);
    LLVMBuilderRef b = c->b;
    v = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, v, lo, ""), lo, v, "");
    v = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, v, hi, ""), hi, v, "");
    return LLVMBuildFPToSI(b, v, c->t.i32, "");
}

/* The bf16 bits (in the low half of an i32) of f32 `v`: rounded to
 * nearest even by adding 0x7fff plus the lowest kept bit and keeping the
 * top half; a NaN becomes a quiet NaN with the same sign. */
static LLVMValueRef bf16_bits(cg_ctx *c, LLVMValueRef v)
{
    LLVMBuilderRef b = c->b;
    LLVMValueRef bits = LLVMBuildBitCast(b, v, c->t.i32, "");
    LLVMValueRef hi = LLVMBuildLShr(b, bits, LLVMConstInt(c->t.i32, 16, 0), "");
    LLVMValueRef lsb = LLVMBuildAnd(b, hi, LLVMConstInt(c->t.i32, 1, 0), "");
    LLVMValueRef r = LLVMBuildAdd(b, bits, LLVMConstInt(c->t.i32, 0x7fff, 0), "");
    r = LLVMBuildLShr(b, LLVMBuildAdd(b, r, lsb, ""), LLVMConstInt(c->t.i32, 16, 0), "");
    LLVMValueRef qnan = LLVMBuildOr(b, hi, LLVMConstInt(c->t.i32, 0x40, 0), "");
    LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, v, v, "");
    return LLVMBuildSelect(b, isnan, qnan, r, "");
}

LLVMValueRef cg_round_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v, ir_dtype dtype)
{
    LLVMBuilderRef b = c->b;
    if (dtype == IR_F64 || dtype == IR_I32 || (dtype == IR_F32 && ct == c->t.f32))
        return v; /* nothing narrower than the compute type */
    if (dtype == IR_I8)
        return LLVMBuildSIToFP(b, cg_i8_from_float(c, ct, v), ct, "");
    LLVMValueRef f = ct == c->t.f32 ? v : LLVMBuildFPTrunc(b, v, c->t.f32, "");
    if (dtype == IR_BF16) {
        LLVMValueRef hi = LLVMBuildShl(b, bf16_bits(c, f), LLVMConstInt(c->t.i32, 16, 0), "");
        f = LLVMBuildBitCast(b, hi, c->t.f32, "");
    }
    return ct == c->t.f32 ? f : LLVMBuildFPExt(b, f, ct, "");
}

void cg_store_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v, ir_dtype dtype, LLVMValueRef base,
                   LLVMValueRef off)
{
    LLVMBuilderRef b = c->b;
    if (dtype == IR_I8) {
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, c->t.i8, base, &off, 1, "");
        LLVMBuildStore(b, cg_i8_from_float(c, ct, v), p);
        return;
    }
    if (dtype == IR_I32) {
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, c->t.i32, base, &off, 1, "");
        LLVMBuildStore(b, cg_i32_from_float(c, ct, v), p);
        return;
    }
    LLVMTypeRef want = dtype == IR_F64 ? c->t.f64 : c->t.f32;
    if (want != ct)
        v = want == c->t.f32 ? LLVMBuildFPTrunc(b, v, want, "") : LLVMBuildFPExt(b, v, want, "");
    LLVMTypeRef st = want;
    if (dtype == IR_BF16) {
        v = LLVMBuildTrunc(b, bf16_bits(c, v), c->t.i16, "");
        st = c->t.i16;
    }
    LLVMValueRef p = LLVMBuildInBoundsGEP2(b, st, base, &off, 1, "");
    LLVMBuildStore(b, v, p);
}

/* One evaluation of an expression tree at one element: the op, its label
 * indices, and the value of each node once computed (a node shared by two
 * parents is emitted once). */
typedef struct ew_eval {
    const ir_op *op;        /* whose tree */
    LLVMValueRef *bylabel;  /* index of each dim id at this element (local, i64) */
    LLVMValueRef *offbylabel; /* the device's global offset along each dim id (i64) */
    LLVMValueRef *memo;     /* per node: its value, or NULL if not yet emitted */
} ew_eval;

static LLVMValueRef eval_tree(ew_nest *n, const ir_op *op, LLVMValueRef *bylabel,
                              LLVMValueRef *offbylabel);

/* Unrolled einsum `op` at the element with label indices `bylabel`: the
 * sum over the contracted index combinations (the first label read varies
 * slowest) of the operands' product, times the scale.  The combinations
 * are constants, so each term is two loads at fixed offsets from the
 * element's and the sum vectorises with the nest's innermost loop. */
static LLVMValueRef eval_einsum(ew_nest *n, const ir_op *op, LLVMValueRef *bylabel)
{
    cg_ctx *c = n->c;
    const ir_module *m = n->f->m;
    int contr[IR_MAX_OPERANDS * IR_MAX_RANK];
    int64_t size[IR_MAX_OPERANDS * IR_MAX_RANK];
    int ncontr = ir_einsum_contracted(m, op, contr, size); /* >= 0: the einsum is unrolled */
    LLVMValueRef *at = cg_calloc((size_t)m->ndims, sizeof *at);
    memcpy(at, bylabel, (size_t)m->ndims * sizeof *at);
    int terms = ir_einsum_unrolled_terms(m, op);
    LLVMValueRef sum = NULL;
    for (int t = 0; t < terms; t++) {
        for (int q = ncontr - 1, rest = t; q >= 0; q--) {
            at[contr[q]] = cg_i64(c, rest % size[q]);
            rest /= (int)size[q];
        }
        LLVMValueRef prod = NULL;
        for (int k = 0; k < op->noperands; k++) {
            const ir_value *v = op->operands[k];
            LLVMValueRef x = load_elem(n, n->f->buf[v->id], v->type.dtype,
                                       offset_of(n, v, op->u.einsum.labels[k], at));
            prod = prod ? LLVMBuildFMul(c->b, prod, x, "") : x;
        }
        sum = sum ? LLVMBuildFAdd(c->b, sum, prod, "") : prod;
    }
    free(at);
    if (op->u.einsum.scale != 1.0)
        sum = LLVMBuildFMul(c->b, sum, cg_ew_const(n, op->u.einsum.scale), "");
    return sum;
}

/* The value of `op` (elementwise, or an unrolled einsum) at `bylabel`. */
static LLVMValueRef eval_op(ew_nest *n, const ir_op *op, LLVMValueRef *bylabel,
                            LLVMValueRef *offbylabel)
{
    if (op->kind == IR_OP_EINSUM)
        return eval_einsum(n, op, bylabel);
    return eval_tree(n, op, bylabel, offbylabel);
}

/* Operand `k` of x->op at this element: a load, or a fused producer's tree. */
static LLVMValueRef eval_operand(ew_nest *n, const ew_eval *x, int k)
{
    const ir_value *v = x->op->operands[k];
    const int *labels = x->op->u.ew.labels[k];
    const cg_plan *p = n->f->plan;
    int def = p->def_index[v->id];
    if (def >= 0 && p->fused_into[def] >= 0) {
        /* Fused producer: evaluate its tree here, its result position j
         * being our index of label labels[j]. */
        const ir_op *prod = p->ops[def];
        LLVMValueRef *map = cg_calloc((size_t)n->f->m->ndims, sizeof *map);
        LLVMValueRef *offmap = cg_calloc((size_t)n->f->m->ndims, sizeof *offmap);
        for (int j = 0; j < v->type.rank; j++) {
            map[res_labels(prod)[j]] = x->bylabel[labels[j]];
            /* The operand has the dim's sharding (local computability), so
             * its block offset is ours. */
            offmap[res_labels(prod)[j]] = x->offbylabel[labels[j]];
        }
        LLVMValueRef r = eval_op(n, prod, map, offmap);
        free(map);
        free(offmap);
        /* A cast keeps its meaning when fused: its value is rounded to its
         * dtype here as its store would have rounded it. */
        return ir_ew_converts(prod) ? cg_round_elem(n->c, n->ct, r, v->type.dtype) : r;
    }
    return load_elem(n, n->f->buf[v->id], v->type.dtype, offset_of(n, v, labels, x->bylabel));
}

/* Node `node` of x->op, emitted once.  Comparisons give an i1. */
static LLVMValueRef eval(ew_nest *n, ew_eval *x, int node)
{
    if (x->memo[node])
        return x->memo[node];
    cg_ctx *c = n->c;
    LLVMBuilderRef b = c->b;
    const ir_ew_node *e = &x->op->u.ew.nodes[node];
    LLVMValueRef r = NULL, args[2];
    switch (e->kind) {
    case IR_EW_CONST: r = cg_ew_const(n, e->value); break;
    case IR_EW_INDEX: {
        LLVMValueRef g = LLVMBuildNSWAdd(b, x->bylabel[e->dim], x->offbylabel[e->dim], "");
        /* Through i32 when the dim fits: AVX2 converts packed i32 to
         * float but has no packed i64 conversion, so an i64 one kept
         * every masked loop scalar. */
        if (n->f->m->dims[e->dim].size <= INT32_MAX)
            g = LLVMBuildTrunc(b, g, c->t.i32, "");
        r = LLVMBuildSIToFP(b, g, n->ct, "");
        break;
    }
    case IR_EW_ADD: r = LLVMBuildFAdd(b, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_SUB: r = LLVMBuildFSub(b, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_MUL: r = LLVMBuildFMul(b, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_DIV: r = LLVMBuildFDiv(b, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_MAX:
    case IR_EW_MIN:
        args[0] = eval(n, x, e->a);
        args[1] = eval(n, x, e->b);
        r = cg_ew_intrinsic(n, e->kind == IR_EW_MAX ? "llvm.maximum" : "llvm.minimum", args, 2);
        break;
    case IR_EW_LT: r = LLVMBuildFCmp(b, LLVMRealOLT, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_LE: r = LLVMBuildFCmp(b, LLVMRealOLE, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_GT: r = LLVMBuildFCmp(b, LLVMRealOGT, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_GE: r = LLVMBuildFCmp(b, LLVMRealOGE, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_EQ: r = LLVMBuildFCmp(b, LLVMRealOEQ, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_NE: r = LLVMBuildFCmp(b, LLVMRealUNE, eval(n, x, e->a), eval(n, x, e->b), ""); break;
    case IR_EW_SELECT:
        r = LLVMBuildSelect(b, eval(n, x, e->a), eval(n, x, e->b), eval(n, x, e->c), "");
        break;
    case IR_EW_CALL: r = cg_ew_call_fn(n, e->fn, eval(n, x, e->a)); break;
    case IR_EW_OPERAND: r = eval_operand(n, x, e->operand); break;
    case IR_EW_KIND_COUNT: r = cg_ew_const(n, 0.0); break; /* rejected by cg_ew_check */
    }
    return x->memo[node] = r;
}

/* The value of `op`'s expression at the element with label indices `bylabel`. */
static LLVMValueRef eval_tree(ew_nest *n, const ir_op *op, LLVMValueRef *bylabel,
                              LLVMValueRef *offbylabel)
{
    ew_eval x = {.op = op, .bylabel = bylabel, .offbylabel = offbylabel};
    x.memo = cg_calloc((size_t)op->u.ew.nnodes, sizeof *x.memo);
    LLVMValueRef r = eval(n, &x, op->u.ew.root);
    free(x.memo);
    return r;
}

/* The global offset of this device's block of position `d` of `t`: the
 * block number (mixed radix over the dim's axes, major first; einrt.h)
 * times the block size. */
static LLVMValueRef block_offset(ew_nest *n, const ir_type *t, int d)
{
    cg_ctx *c = n->c;
    const ir_module *m = n->f->m;
    LLVMValueRef blk = cg_i64(c, 0);
    for (int k = 0; k < t->sh.naxes[d]; k++) {
        int a = t->sh.axes[d][k];
        LLVMValueRef args[] = {n->f->dev, cg_i32(c, a)};
        LLVMValueRef coord = LLVMBuildCall2(c->b, c->rt.coord_ty, c->rt.coord, args, 2, "");
        blk = LLVMBuildNSWMul(c->b, blk, cg_i64(c, m->mesh.axes[a].size), "");
        blk = LLVMBuildNSWAdd(c->b, blk, coord, "");
    }
    return LLVMBuildNSWMul(c->b, blk, cg_i64(c, ir_local_size(m, t, d)), "");
}

/* The body of the nest: one element, at the current indices. */
static void leaf(ew_nest *n)
{
    cg_ctx *c = n->c;
    const ir_op *op = n->root;
    int rank = op->result->type.rank;
    LLVMValueRef *bylabel = cg_calloc((size_t)n->f->m->ndims, sizeof *bylabel);
    LLVMValueRef *offbylabel = cg_calloc((size_t)n->f->m->ndims, sizeof *offbylabel);
    for (int r = 0; r < rank; r++) {
        bylabel[res_labels(op)[r]] = n->idx[r];
        offbylabel[res_labels(op)[r]] = n->off[r];
    }
    LLVMValueRef v = eval_op(n, op, bylabel, offbylabel);
    if (n->stage_at)
        store_elem(n, v, op->result->type.dtype, n->f->stream_stage, n->stage_at);
    else if (n->dst) /* NULL: only the sum reads the result (cg_emit_elementwise_sum) */
        store_elem(n, v, op->result->type.dtype, n->dst,
                   offset_of(n, op->result, res_labels(op), bylabel));
    if (n->acc) {
        LLVMValueRef sum = LLVMBuildFAdd(c->b, LLVMBuildLoad2(c->b, n->ct, n->acc, ""), v, "");
        LLVMSetFastMathFlags(sum, LLVMFastMathAllowReassoc);
        LLVMBuildStore(c->b, sum, n->acc);
    }
    free(bylabel);
    free(offbylabel);
}

/* Address of the result element at the current indices. */
static LLVMValueRef result_ptr(ew_nest *n)
{
    cg_ctx *c = n->c;
    const ir_op *op = n->root;
    LLVMValueRef *bylabel = cg_calloc((size_t)n->f->m->ndims, sizeof *bylabel);
    for (int r = 0; r < op->result->type.rank; r++)
        bylabel[res_labels(op)[r]] = n->idx[r];
    LLVMValueRef off = offset_of(n, op->result, res_labels(op), bylabel);
    free(bylabel);
    off = LLVMBuildNSWMul(c->b, off, cg_i64(c, (int64_t)ir_dtype_size(op->result->type.dtype)), "");
    return LLVMBuildInBoundsGEP2(c->b, c->t.i8, n->dst, &off, 1, "");
}

/* The innermost loop of a streamed nest (see stream_chunk): chunks
 * of n->chunk elements, each computed into the stage, which stays in the
 * first-level cache, and copied out with non-temporal stores
 * (cg_emit_stream_row); then the elements past the last whole chunk, with
 * ordinary stores.  Each element is computed exactly as in the plain loop. */
static void stream_loop(ew_nest *n, int level)
{
    cg_ctx *c = n->c;
    int inner = n->last[level];
    int64_t trips = n->trips[level], nchunks = trips / n->chunk, done = nchunks * n->chunk;
    int64_t esize = (int64_t)ir_dtype_size(n->root->result->type.dtype);
    cg_for k = cg_for_begin(c, n->f, nchunks);
    LLVMValueRef base = LLVMBuildNUWMul(c->b, k.phi, cg_i64(c, n->chunk), "");
    n->idx[inner] = base;
    LLVMValueRef to = result_ptr(n);
    cg_for j = cg_for_begin(c, n->f, n->chunk);
    n->idx[inner] = LLVMBuildNUWAdd(c->b, base, j.phi, "");
    n->stage_at = j.phi;
    leaf(n);
    n->stage_at = NULL;
    cg_for_end(c, n->f, &j);
    cg_emit_stream_row(c, n->f, to, n->f->stream_stage, n->chunk * esize, cg_line_aligned(c, to));
    cg_for_end(c, n->f, &k);
    if (done < trips) {
        cg_for t = cg_for_begin(c, n->f, trips - done);
        n->idx[inner] = LLVMBuildNUWAdd(c->b, t.phi, cg_i64(c, done), "");
        leaf(n);
        cg_for_end(c, n->f, &t);
    }
}

/* Emits loops level..nloops-1 around the body. */
static void nest(ew_nest *n, int level)
{
    cg_ctx *c = n->c;
    if (level == n->nloops) {
        leaf(n);
        return;
    }
    if (n->last[level] < n->f->nrow) {
        /* A row position of a row group: the group's loop runs it. */
        n->idx[n->last[level]] = n->f->row_idx[n->last[level]];
        nest(n, level + 1);
        return;
    }
    int first = level == 0 ? 0 : n->last[level - 1] + 1;
    for (int r = first; r < n->last[level]; r++)
        n->idx[r] = cg_i64(c, 0);
    if (n->chunk && level == n->nloops - 1) {
        stream_loop(n, level);
        return;
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(c->llctx, n->f->fn, "ew.loop");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(c->llctx, n->f->fn, "ew.after");
    LLVMBuildBr(c->b, loop);
    LLVMPositionBuilderAtEnd(c->b, loop);
    LLVMValueRef phi = LLVMBuildPhi(c->b, c->t.i64, "i");
    n->idx[n->last[level]] = phi;
    nest(n, level + 1);
    LLVMValueRef next = LLVMBuildNUWAdd(c->b, phi, cg_i64(c, 1), "");
    LLVMValueRef more = LLVMBuildICmp(c->b, LLVMIntSLT, next, cg_i64(c, n->trips[level]), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
    LLVMBuildCondBr(c->b, more, loop, after);
    LLVMValueRef inc[] = {cg_i64(c, 0), next};
    LLVMBasicBlockRef from[] = {pre, latch};
    LLVMAddIncoming(phi, inc, from, 2);
    LLVMMoveBasicBlockAfter(after, latch);
    LLVMPositionBuilderAtEnd(c->b, after);
}

/* Clears ok[r] (result positions r and r + 1 of the root may share one
 * loop) where `op`'s tree, or a producer fused into it, reads an operand
 * that has only one of the two labels, or both but not adjacent and in
 * order, or takes an index value of either.  `map[l]` is the root label of
 * `op`'s label l; `rootpos[l]` the root result position of root label l. */
static void merge_check(const cg_fn *f, const ir_op *op, const int *map, const int *rootpos,
                        bool *ok);

/* Clears ok[r] where operand `v` of `op`, read through `labels`, does not
 * have root positions r and r + 1 both adjacent and in order, or neither
 * (see merge_check).  An unrolled einsum's contracted labels are no root
 * position: they sit between the others in the operand, so the positions
 * around them are not adjacent. */
static void operand_merge_check(const ir_op *op, const ir_value *v, const int *labels,
                                const int *map, const int *rootpos, bool *ok)
{
    /* pos[r]: where root position r sits among the operand's dims. */
    int pos[IR_MAX_RANK];
    for (int r = 0; r < IR_MAX_RANK; r++)
        pos[r] = -1;
    for (int j = 0; j < v->type.rank; j++) {
        bool kept = false;
        for (int r = 0; r < op->result->type.rank; r++)
            kept |= res_labels(op)[r] == labels[j];
        if (kept)
            pos[rootpos[map[labels[j]]]] = j;
    }
    for (int r = 0; r + 1 < IR_MAX_RANK; r++)
        if ((pos[r] < 0) != (pos[r + 1] < 0) || (pos[r] >= 0 && pos[r + 1] != pos[r] + 1))
            ok[r] = false;
}

static void merge_check(const cg_fn *f, const ir_op *op, const int *map, const int *rootpos,
                        bool *ok)
{
    int ndims = f->m->ndims;
    if (op->kind == IR_OP_EINSUM) { /* unrolled: its operands are buffers */
        for (int k = 0; k < op->noperands; k++)
            operand_merge_check(op, op->operands[k], op->u.einsum.labels[k], map, rootpos, ok);
        return;
    }
    for (int i = 0; i < op->u.ew.nnodes; i++) {
        const ir_ew_node *e = &op->u.ew.nodes[i];
        if (e->kind == IR_EW_INDEX) {
            int r = rootpos[map[e->dim]];
            if (r > 0)
                ok[r - 1] = false;
            ok[r] = false;
            continue;
        }
        if (e->kind != IR_EW_OPERAND)
            continue;
        const ir_value *v = op->operands[e->operand];
        const int *labels = op->u.ew.labels[e->operand];
        int def = f->plan->def_index[v->id];
        if (def >= 0 && f->plan->fused_into[def] >= 0) {
            const ir_op *prod = f->plan->ops[def];
            int *pmap = cg_calloc((size_t)ndims, sizeof *pmap);
            for (int j = 0; j < v->type.rank; j++)
                pmap[res_labels(prod)[j]] = map[labels[j]];
            merge_check(f, prod, pmap, rootpos, ok);
            free(pmap);
            continue;
        }
        operand_merge_check(op, v, labels, map, rootpos, ok);
    }
}

/* Merges runs of result positions into one loop where every operand the
 * nest reads has those positions adjacent and in the same order (or none
 * of them), and no index value needs them apart: the run's flat index then
 * addresses every operand as the separate indices did, so each element is
 * computed exactly as before, in fewer, longer loops.  A LLaMA layer's
 * [B, T, D] * [B, T] * [D] becomes two loops instead of three, and LLVM
 * has fewer loops to unroll, vectorise and strength-reduce. */
static void plan_loops(ew_nest *n)
{
    const cg_fn *f = n->f;
    const ir_op *op = n->root;
    int rank = op->result->type.rank, ndims = f->m->ndims;
    bool ok[IR_MAX_RANK];
    for (int r = 0; r < IR_MAX_RANK; r++)
        ok[r] = r + 1 < rank && r >= f->nrow; /* row positions stay apart */
    int *map = cg_calloc((size_t)ndims, sizeof *map);
    int *rootpos = cg_calloc((size_t)ndims, sizeof *rootpos);
    for (int l = 0; l < ndims; l++)
        map[l] = l;
    for (int r = 0; r < rank; r++)
        rootpos[res_labels(op)[r]] = r;
    merge_check(f, op, map, rootpos, ok);
    free(map);
    free(rootpos);
    n->nloops = 0;
    for (int r = 0; r < rank; r++) {
        bool starts = r == 0 || !ok[r - 1];
        if (starts)
            n->trips[n->nloops++] = 1;
        n->trips[n->nloops - 1] *= n->shape[r];
        n->last[n->nloops - 1] = r;
    }
}

/* True if `op`'s tree, or that of a producer fused into it, has an index value. */
static bool uses_index(const cg_fn *f, const ir_op *op)
{
    if (op->kind == IR_OP_EINSUM)
        return false; /* unrolled: products of loads */
    for (int i = 0; i < op->u.ew.nnodes; i++) {
        const ir_ew_node *e = &op->u.ew.nodes[i];
        if (e->kind == IR_EW_INDEX)
            return true;
        if (e->kind != IR_EW_OPERAND)
            continue;
        int def = f->plan->def_index[op->operands[e->operand]->id];
        if (def >= 0 && f->plan->fused_into[def] >= 0 && uses_index(f, f->plan->ops[def]))
            return true;
    }
    return false;
}

/* Elements per chunk of a streamed nest's innermost loop, or 0 if the
 * nest writes its result with ordinary stores.  An ordinary store to a
 * line that is not in cache first reads the line (read-for-ownership), so
 * a loop that writes a result larger than the caches moves those bytes
 * twice; a non-temporal store writes the whole line without reading it
 * (stream.c).  Streamed: what ir_ew_streams says (a result of
 * m->stream_min_bytes per device or more), written by a loop nest of its
 * own (not a row group's member, nor one whose elements a sum also
 * reads), with an innermost loop of at least one chunk.  A chunk is
 * CG_STREAM_CHUNK_BYTES, four lines: with a page-long stage the loop ran
 * up to 2x slower or faster from one program to the next, since the loads
 * of an operand meet the stage's recent stores at the same address modulo
 * 4 KiB whenever the two buffers sit at nearby offsets in their pages
 * (the CPU then takes the load to depend on the store); a stage of four
 * lines is that close to a load's address only 1 time in 16.  Measured in
 * docs/performance.md, section 13. */
static int64_t stream_chunk(const ew_nest *n)
{
    const ir_type *t = &n->root->result->type;
    if (!n->dst || n->acc || n->f->nrow > 0 ||
        !ir_ew_streams(n->f->m, ir_local_bytes(n->f->m, t)))
        return 0;
    int64_t esize = (int64_t)ir_dtype_size(t->dtype), inner = n->trips[n->nloops - 1] * esize;
    return inner >= CG_STREAM_CHUNK_BYTES ? CG_STREAM_CHUNK_BYTES / esize : 0;
}

static void emit_nest(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst, LLVMValueRef acc)
{
    ew_nest n = {.c = c, .f = f, .root = op, .dst = dst, .acc = acc};
    /* An i32 result is an integer expression (ir_ew_integer): exact in f64. */
    ir_dtype rt = op->result->type.dtype;
    n.ct = rt == IR_F64 || rt == IR_I32 ? c->t.f64 : c->t.f32;
    cg_local_shape(f->m, &op->result->type, n.shape);
    /* Block offsets are loop invariant: computed here, before the nest,
     * and only when an index value reads them. */
    bool idx = uses_index(f, op);
    for (int r = 0; r < op->result->type.rank; r++)
        n.off[r] = idx ? block_offset(&n, &op->result->type, r) : cg_i64(c, 0);
    plan_loops(&n);
    n.chunk = stream_chunk(&n);
    if (n.chunk && !f->stream_stage) {
        /* One per function: a run function with a thousand streamed nests
         * keeps one stage in its frame, not a thousand. */
        f->stream_stage = cg_entry_alloca(c, f, LLVMArrayType2(c->t.i8, CG_STREAM_CHUNK_BYTES),
                                          "ew.stage");
        LLVMSetAlignment(f->stream_stage, 64);
    }
    nest(&n, 0);
    if (n.chunk)
        cg_emit_stream_fence(c);
}

/* Appends to ids[0..*n) each value whose buffer `op`'s tree, or that of a
 * producer fused into it, loads, once. */
static void loaded_buffers(const cg_fn *f, const ir_op *op, int **ids, int *n, int *cap)
{
    bool einsum = op->kind == IR_OP_EINSUM; /* unrolled: loads every operand */
    int count = einsum ? op->noperands : op->u.ew.nnodes;
    for (int i = 0; i < count; i++) {
        const ir_ew_node *e = einsum ? NULL : &op->u.ew.nodes[i];
        if (e && e->kind != IR_EW_OPERAND)
            continue;
        const ir_value *v = op->operands[e ? e->operand : i];
        int def = f->plan->def_index[v->id];
        if (def >= 0 && f->plan->fused_into[def] >= 0) {
            loaded_buffers(f, f->plan->ops[def], ids, n, cap);
            continue;
        }
        int k = 0;
        while (k < *n && (*ids)[k] != v->id)
            k++;
        if (k < *n)
            continue;
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 8;
            *ids = cg_realloc(*ids, (size_t)*cap * sizeof **ids);
        }
        (*ids)[(*n)++] = v->id;
    }
}

/* The nest as a function of its own, `void ew.I(dev, buffers..., dst)`,
 * called here.  The optimiser and the back end then work on one loop nest
 * at a time: on one function holding every nest of a very long program,
 * LLVM's machine passes walk use lists that grow with the whole program
 * (MachineRegisterInfo::clearKillFlags on constants shared by every nest),
 * and -O3 took longer than linear time.  noinline keeps them apart. */
static void emit_outlined(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst)
{
    int *ids = NULL, nids = 0, cap = 0;
    loaded_buffers(f, op, &ids, &nids, &cap);
    LLVMTypeRef *params = cg_calloc((size_t)nids + 2, sizeof *params);
    for (int k = 0; k < nids + 2; k++)
        params[k] = c->t.ptr;
    LLVMTypeRef ty = LLVMFunctionType(c->t.voidt, params, (unsigned)nids + 2, 0);
    char name[64];
    snprintf(name, sizeof name, "ew.%d", f->plan->def_index[op->result->id]);
    LLVMValueRef fn = LLVMAddFunction(c->mod, name, ty);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(c->llctx, noinline, 0));

    LLVMValueRef *args = cg_calloc((size_t)nids + 2, sizeof *args);
    LLVMValueRef *saved = cg_calloc((size_t)nids + 1, sizeof *saved);
    args[0] = f->dev;
    for (int k = 0; k < nids; k++) {
        args[k + 1] = f->buf[ids[k]];
        saved[k] = f->buf[ids[k]];
        f->buf[ids[k]] = LLVMGetParam(fn, (unsigned)k + 1);
    }
    args[nids + 1] = dst;
    LLVMBasicBlockRef at = LLVMGetInsertBlock(c->b);
    LLVMValueRef outer_fn = f->fn, outer_dev = f->dev, outer_stage = f->stream_stage;
    f->fn = fn;
    f->dev = LLVMGetParam(fn, 0);
    f->stream_stage = NULL;
    LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->llctx, fn, "entry"));
    emit_nest(c, f, op, LLVMGetParam(fn, (unsigned)nids + 1), NULL);
    LLVMBuildRetVoid(c->b);
    f->fn = outer_fn;
    f->dev = outer_dev;
    f->stream_stage = outer_stage;
    for (int k = 0; k < nids; k++)
        f->buf[ids[k]] = saved[k];
    LLVMPositionBuilderAtEnd(c->b, at);
    LLVMBuildCall2(c->b, ty, fn, args, (unsigned)nids + 2, "");
    free(ids);
    free(params);
    free(args);
    free(saved);
}

void cg_emit_elementwise(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst)
{
    if (f->plan->outline_elementwise)
        emit_outlined(c, f, op, dst);
    else
        emit_nest(c, f, op, dst, NULL);
}

void cg_emit_elementwise_sum(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst,
                             LLVMValueRef acc)
{
    emit_nest(c, f, op, dst, acc);
}
