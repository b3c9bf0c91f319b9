/*
 * verify.c - the IR's invariants, checked after every pass.
 *
 * Structural: operands defined before use, result->def links, valid dims and
 * labels.  Sharding: a mesh axis shards at most one dim of a value and is
 * not also unreduced there (seed 001: "a mesh axis, once used, is
 * exhausted"); every sharded dim divides by its axes' product.  Semantic:
 * every Einsum and Elementwise is locally computable from its operands'
 * shardings and produces exactly its result's sharding (the four cases of
 * seed 001 §"Matmul with sharded operands", with unreduced operands allowed
 * only where the op is linear in them), and every collective transforms its
 * operand's sharding exactly as ir.h defines it.  Constraints: a value with
 * a source constraint reaches a value that meets it through reshard ops, and
 * every output meets its constraint (bare outputs: nothing unreduced).
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "verify_internal.h"

#define WHY(...) (why ? (void)snprintf(why, why_size, __VA_ARGS__) : (void)0)

bool ir_op_local_sharding(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    const int (*labels)[IR_MAX_RANK];
    const int *rlabels;
    if (op->kind == IR_OP_EINSUM) {
        labels = op->u.einsum.labels;
        rlabels = op->u.einsum.result_labels;
    } else if (op->kind == IR_OP_ELEMENTWISE) {
        labels = op->u.ew.labels;
        rlabels = op->u.ew.result_labels;
    } else {
        WHY("not an einsum or elementwise op");
        return false;
    }
    /* Axes of each label, from the first operand that has it. */
    int nlabels = m->ndims;
    int8_t(*laxes)[IR_MAX_AXES] = calloc((size_t)nlabels + 1, sizeof *laxes);
    int *lnaxes = calloc((size_t)nlabels + 1, sizeof *lnaxes);
    int *lseen = calloc((size_t)nlabels + 1, sizeof *lseen); /* 1 + operand index that set it */
    bool *lin = calloc((size_t)nlabels + 1, sizeof *lin);    /* lseen[L] != 0 */
    int owner[IR_MAX_AXES];
    for (int a = 0; a < IR_MAX_AXES; a++)
        owner[a] = -1;
    bool ok = false;
    ir_axes unreduced = 0, used = 0;
    if (!laxes || !lnaxes || !lseen || !lin) {
        WHY("out of memory");
        goto done;
    }
    for (int i = 0; i < op->noperands; i++) {
        const ir_value *v = op->operands[i];
        for (int j = 0; j < v->type.rank; j++) {
            int L = labels[i][j];
            if (L < 0 || L >= nlabels) {
                WHY("operand %d has an invalid label", i);
                goto done;
            }
            const ir_sharding *s = &v->type.sh;
            if (lseen[L]) {
                bool same = lnaxes[L] == s->naxes[j] &&
                            memcmp(laxes[L], s->axes[j], (size_t)s->naxes[j]) == 0;
                if (!same) {
                    char a1[8], a2[8];
                    ir_axes_str(&m->mesh, laxes[L], lnaxes[L], a1, sizeof a1);
                    ir_axes_str(&m->mesh, s->axes[j], s->naxes[j], a2, sizeof a2);
                    WHY("dim %s is sharded as %s%s%s in operand %d but %s%s%s in operand %d",
                        m->dims[L].name, m->dims[L].name, *a1 ? "_" : "", a1, lseen[L] - 1,
                        m->dims[L].name, *a2 ? "_" : "", a2, i);
                    goto done;
                }
                continue;
            }
            lseen[L] = i + 1;
            lin[L] = true;
            lnaxes[L] = s->naxes[j];
            memcpy(laxes[L], s->axes[j], (size_t)s->naxes[j]);
            for (int k = 0; k < s->naxes[j]; k++) {
                int a = s->axes[j][k];
                if (owner[a] >= 0 && owner[a] != L) {
                    WHY("mesh axis %c shards both %s and %s", m->mesh.axes[a].name,
                        m->dims[owner[a]].name, m->dims[L].name);
                    goto done;
                }
                owner[a] = L;
                used |= 1u << a;
            }
        }
    }
    ir_reduce reduce = op->kind == IR_OP_EINSUM ? op->u.einsum.reduce : IR_RED_SUM;
    if (op->kind == IR_OP_EINSUM && op->u.einsum.gather) {
        /* Indices into the first dim of the table, which nothing else has. */
        int V = op->u.einsum.gather_label;
        bool ok_g = op->noperands == 2 && reduce == IR_RED_SUM &&
                    op->operands[0]->type.dtype == IR_I32 && op->operands[1]->type.dtype != IR_I32 &&
                    op->operands[1]->type.rank >= 1 && op->u.einsum.labels[1][0] == V;
        for (int j = 0; ok_g && j < op->operands[0]->type.rank; j++)
            ok_g = op->u.einsum.labels[0][j] != V;
        for (int j = 0; ok_g && op->result && j < op->result->type.rank; j++)
            ok_g = op->u.einsum.result_labels[j] != V;
        if (!ok_g) {
            WHY("a gather takes i32 indices and a table whose first dim, and only it, is looked up");
            goto done;
        }
    }
    if (op->kind == IR_OP_EINSUM && op->u.einsum.scatter) {
        /* The table's first dim only in the result, the indices' dims in
         * both operands, in order, and the rest in rows and result. */
        int V = op->u.einsum.gather_label;
        const ir_value *ids = op->operands[0], *rows = op->noperands == 2 ? op->operands[1] : NULL;
        int ni = ids->type.rank;
        bool ok_s = rows && !op->u.einsum.gather && reduce == IR_RED_SUM && ids->type.dtype == IR_I32 &&
                    rows->type.dtype != IR_I32 && op->result && op->result->type.rank >= 1 &&
                    op->u.einsum.result_labels[0] == V &&
                    rows->type.rank == ni + op->result->type.rank - 1;
        for (int j = 0; ok_s && j < ni; j++)
            ok_s = op->u.einsum.labels[0][j] == op->u.einsum.labels[1][j] &&
                   op->u.einsum.labels[0][j] != V;
        for (int j = 1; ok_s && j < op->result->type.rank; j++)
            ok_s = op->u.einsum.labels[1][ni + j - 1] == op->u.einsum.result_labels[j] &&
                   op->u.einsum.result_labels[j] != V;
        if (!ok_s) {
            WHY("a scatter-add takes i32 indices and one row per index, and makes a table whose "
                "first dim only it has");
            goto done;
        }
    }
    if (reduce != IR_RED_SUM && (op->kind != IR_OP_EINSUM || op->noperands != 1)) {
        WHY("a %s reduction is a unary einsum", ir_reduce_name(reduce));
        goto done;
    }
    if (reduce == IR_RED_ARGMAX &&
        (!op->result || op->result->type.dtype != IR_I32 || op->operands[0]->type.dtype == IR_I32 ||
         op->operands[0]->type.rank != op->result->type.rank + 1)) {
        WHY("an argmax takes a floating-point operand and gives i32 positions along one of its dims");
        goto done;
    }
    for (int i = 0; i < op->noperands; i++) {
        const ir_sharding *s = &op->operands[i]->type.sh;
        if (op->kind == IR_OP_EINSUM && (s->unreduced & unreduced)) {
            WHY("two operands hold unreduced partial sums over the same axis");
            goto done;
        }
        /* Only a sum commutes with the sum over devices (an einsum or a
         * linear elementwise op); partial maxima must be reduced first. */
        if (s->unreduced && (s->red != IR_RED_SUM || reduce != IR_RED_SUM)) {
            WHY("an operand holds partial %s results {%s U_..} that a %s einsum cannot take: "
                "reduce them first", ir_reduce_name((ir_reduce)s->red), ir_reduce_name((ir_reduce)s->red),
                ir_reduce_name(reduce));
            goto done;
        }
        unreduced |= s->unreduced;
    }
    if (unreduced & used) {
        WHY("an operand is unreduced over an axis that shards a dim");
        goto done;
    }
    if (op->kind == IR_OP_ELEMENTWISE && unreduced) {
        for (int i = 0; i < op->noperands; i++)
            if (op->operands[i]->type.sh.unreduced != unreduced) {
                WHY("elementwise operands must all be unreduced over the same axes");
                goto done;
            }
        if (!ir_ew_takes_partial_sums(op)) {
            WHY("a nonlinear or narrowing elementwise op cannot take unreduced partial sums");
            goto done;
        }
    }
    int rank = op->result ? op->result->type.rank : 0;
    for (int r = 0; r < rank; r++) {
        int L = rlabels[r];
        /* An elementwise result dim no operand has (one that only an index
         * value or a broadcast constant spans) is computed whole; so is a
         * scatter-add's table dim. */
        bool whole = op->kind == IR_OP_ELEMENTWISE ||
                     (op->kind == IR_OP_EINSUM && op->u.einsum.scatter &&
                      L == op->u.einsum.gather_label);
        if (L < 0 || L >= nlabels || (!lseen[L] && !whole)) {
            WHY("result dim %d is not a dim of any operand", r);
            goto done;
        }
    }
    ir_axes contracted = ir_einsum_sharding(nlabels, lnaxes, (const int8_t(*)[IR_MAX_AXES])laxes,
                                            lin, rank, rlabels, unreduced, reduce, out);
    if (op->kind == IR_OP_ELEMENTWISE)
        for (int L = 0; L < nlabels; L++) {
            bool kept = !lseen[L];
            for (int r = 0; r < rank && !kept; r++)
                kept = rlabels[r] == L;
            if (!kept) {
                WHY("elementwise op drops dim %s", m->dims[L].name);
                goto done;
            }
        }
    /* Partial argmaxes over devices would need their values too. */
    if (reduce == IR_RED_ARGMAX && contracted) {
        WHY("an argmax reduces a sharded dim (gather it first)");
        goto done;
    }
    ok = true;
done:
    free(laxes);
    free(lnaxes);
    free(lseen);
    free(lin);
    return ok;
}

/* Checks one value's sharding; reports at `loc`. */
static int check_value(const ir_module *m, const ir_value *v, diag_ctx *d, uint32_t loc)
{
    char buf[256];
    int errs = 0;
    const ir_type *t = &v->type;
    if (t->rank < 0 || t->rank > IR_MAX_RANK) {
        diag_error(d, loc, "value %s has invalid rank %d", v->tensor, t->rank);
        return 1;
    }
    ir_axes seen = 0;
    for (int j = 0; j < t->rank; j++) {
        if (t->dims[j] < 0 || t->dims[j] >= m->ndims) {
            diag_error(d, loc, "value %s has an invalid dim at position %d", v->tensor, j);
            return errs + 1;
        }
        for (int k = 0; k < t->sh.naxes[j]; k++) {
            int a = t->sh.axes[j][k];
            if (a < 0 || a >= m->mesh.naxes) {
                diag_error(d, loc, "value %s is sharded over an axis not in the mesh", v->tensor);
                return errs + 1;
            }
            if (seen & (1u << a)) {
                diag_error(d, loc, "mesh axis %c used twice in %s", m->mesh.axes[a].name,
                           ir_type_str(m, v->tensor, t, buf, sizeof buf));
                errs++;
            }
            seen |= 1u << a;
        }
        int64_t parts = ir_sharding_dim_parts(&t->sh, &m->mesh, j);
        if (m->dims[t->dims[j]].size % parts != 0) {
            diag_error(d, loc, "dim %s (%lld) of %s is not divisible by its mesh axes (%lld)",
                       m->dims[t->dims[j]].name, (long long)m->dims[t->dims[j]].size,
                       ir_type_str(m, v->tensor, t, buf, sizeof buf), (long long)parts);
            errs++;
        }
    }
    if (t->sh.unreduced & ~((1u << m->mesh.naxes) - 1)) {
        diag_error(d, loc, "value %s is unreduced over an axis not in the mesh", v->tensor);
        errs++;
    }
    if (t->sh.unreduced & seen) {
        diag_error(d, loc, "%s is both sharded and unreduced over one axis",
                   ir_type_str(m, v->tensor, t, buf, sizeof buf));
        errs++;
    }
    return errs;
}

/* Position k of dim d's axis list must end with axes[0..n-1]. */
static bool ends_with(const ir_sharding *s, int d, const int8_t *axes, int n)
{
    if (d < 0 || d >= IR_MAX_RANK || s->naxes[d] < n)
        return false;
    return memcmp(&s->axes[d][s->naxes[d] - n], axes, (size_t)n) == 0;
}

/* The axes of resharding op arm `c` that work along dim position d, in
 * their listed order, into sub[]; returns how many. */
static int axes_along(const ir_coll *c, int d, int8_t *sub)
{
    int n = 0;
    for (int k = 0; k < c->naxes; k++)
        if (ir_coll_dim(c, k) == d)
            sub[n++] = c->axes[k];
    return n;
}

/* Whether the dims of resharding op `op` are valid for rank `rank`: every
 * axis names a dim (and an AllToAll a destination that is no source), and
 * a per-axis op has at least two different dims.  False with a reason. */
static bool coll_dims_ok(const ir_op *op, int rank, char *why, size_t why_size)
{
    const ir_coll *c = &op->u.coll;
    bool a2a = op->kind == IR_OP_ALLTOALL, differ = false;
    for (int k = 0; k < c->naxes; k++) {
        int d = ir_coll_dim(c, k), e = a2a ? ir_coll_dim2(c, k) : -1;
        if (d < 0 || d >= rank || (a2a && (e < 0 || e >= rank))) {
            WHY("invalid dim");
            return false;
        }
        for (int j = 0; a2a && j < c->naxes; j++)
            if (ir_coll_dim(c, j) == e) {
                WHY("AllToAll moves axes into a dim it also takes axes from");
                return false;
            }
        differ |= d != ir_coll_dim(c, 0) || (a2a && e != ir_coll_dim2(c, 0));
    }
    if (c->dim == IR_COLL_PER_AXIS && !differ) {
        WHY("per-axis dims that are all the same dim (write it in dim)");
        return false;
    }
    return true;
}

/* The sharding a reshard op must produce from its operand's, or false:
 * the verifier hook of the coll arm. */
bool ir_verify_coll(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    const ir_value *v = op->operands[0];
    if (v->type.rank != op->result->type.rank ||
        memcmp(v->type.dims, op->result->type.dims, sizeof(int) * (size_t)op->result->type.rank) != 0) {
        WHY("operand and result dims differ");
        return false;
    }
    const ir_sharding *in = &v->type.sh;
    int rank = v->type.rank;
    int n = op->u.coll.naxes;
    ir_axes set = 0;
    for (int k = 0; k < n; k++) {
        if (op->u.coll.axes[k] < 0 || op->u.coll.axes[k] >= m->mesh.naxes) {
            WHY("collective over an axis not in the mesh");
            return false;
        }
        set |= 1u << op->u.coll.axes[k];
    }
    if (n == 0) {
        WHY("collective over no axes");
        return false;
    }
    *out = *in;
    if (op->kind != IR_OP_ALLREDUCE && !coll_dims_ok(op, rank, why, why_size))
        return false;
    switch (op->kind) {
    case IR_OP_ALLGATHER:
    case IR_OP_ALLTOALL:
        for (int d = 0; d < rank; d++) {
            int8_t sub[IR_MAX_AXES];
            int c = axes_along(&op->u.coll, d, sub);
            if (c > 0 && !ends_with(in, d, sub, c)) {
                WHY("%s axes are not the minor-most axes of their dim", ir_op_name(op->kind));
                return false;
            }
            out->naxes[d] = (uint8_t)(in->naxes[d] - c);
        }
        if (op->kind == IR_OP_ALLTOALL)
            for (int k = 0; k < n; k++)
                ir_sharding_push(out, ir_coll_dim2(&op->u.coll, k), op->u.coll.axes[k]);
        return true;
    case IR_OP_REDUCESCATTER:
    case IR_OP_ALLREDUCE:
        if ((in->unreduced & set) != set) {
            WHY("%s over axes the operand is not unreduced over", ir_op_name(op->kind));
            return false;
        }
        if (op->u.coll.reduce != (ir_reduce)in->red) {
            WHY("%s combines with %s but the operand holds partial %s results",
                ir_op_name(op->kind), ir_reduce_name(op->u.coll.reduce),
                ir_reduce_name((ir_reduce)in->red));
            return false;
        }
        out->unreduced &= ~set;
        if (!out->unreduced)
            out->red = IR_RED_SUM;
        if (op->kind == IR_OP_REDUCESCATTER)
            for (int k = 0; k < n; k++)
                ir_sharding_push(out, ir_coll_dim(&op->u.coll, k), op->u.coll.axes[k]);
        return true;
    case IR_OP_SLICE:
        if ((ir_sharding_used_axes(in, rank) | in->unreduced) & set) {
            WHY("Slice over an axis the operand already uses");
            return false;
        }
        for (int k = 0; k < n; k++)
            ir_sharding_push(out, ir_coll_dim(&op->u.coll, k), op->u.coll.axes[k]);
        return true;
    default:
        WHY("not a reshard op");
        return false;
    }
}

/* The result sharding of MeshSlice `op` (its verifier hook): its AllGather moves applied to the
 * operands, the einsum rule of ir_op_local_sharding, then its ReduceScatter
 * move.  Also checks the dataflow's shape (which matrices move, over which
 * axes) and that K * block divides every per-device size of the split dim,
 * which blocked slicing needs (seed 004 Algorithm 2). */
bool ir_verify_ms(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    int row = op->u.ms.row_axis, col = op->u.ms.col_axis;
    if (op->noperands != 2 || op->u.ms.nmoves != 2) {
        WHY("MeshSlice needs two operands and two partial collectives");
        return false;
    }
    if (row < 0 || row >= m->mesh.naxes || col < 0 || col >= m->mesh.naxes || row == col) {
        WHY("MeshSlice row and column axes must be two distinct mesh axes");
        return false;
    }
    if (op->u.ms.k < 1 || op->u.ms.block < 1) {
        WHY("MeshSlice needs K >= 1 and a block >= 1");
        return false;
    }
    if (op->u.ms.dataflow != IR_MS_OS && op->u.ms.dataflow != IR_MS_LS && op->u.ms.dataflow != IR_MS_RS) {
        WHY("unknown MeshSlice dataflow");
        return false;
    }
    ir_value va = *op->operands[0], vb = *op->operands[1];
    ir_value *virt[2] = {&va, &vb};
    const ir_ms_move *rs = NULL;
    int64_t span = op->u.ms.k * (int64_t)op->u.ms.block;
    for (int i = 0; i < 2; i++) {
        const ir_ms_move *mv = &op->u.ms.moves[i];
        if (mv->axis != row && mv->axis != col) {
            WHY("a MeshSlice collective runs over an axis that is neither its row nor its column axis");
            return false;
        }
        if (mv->kind == IR_OP_ALLGATHER && (mv->operand == 0 || mv->operand == 1)) {
            ir_value *v = virt[mv->operand];
            int8_t ax = (int8_t)mv->axis;
            /* The operand's label at that position, not its value's dim:
             * a reference may relabel a dim (`W[E, D]` of a `W[D, E]`). */
            if (mv->dim < 0 || mv->dim >= v->type.rank || !ends_with(&v->type.sh, mv->dim, &ax, 1) ||
                op->u.ms.labels[mv->operand][mv->dim] != op->u.ms.split_label) {
                WHY("MeshSlice AllGather of operand %d: the axis is not the minor-most of the split dim",
                    mv->operand);
                return false;
            }
            if (ir_local_size(m, &v->type, mv->dim) % span) {
                WHY("K * block does not divide operand %d's per-device split dim", mv->operand);
                return false;
            }
            v->type.sh.naxes[mv->dim]--;
        } else if (mv->kind == IR_OP_REDUCESCATTER && mv->operand == -1 && !rs) {
            rs = mv;
        } else {
            WHY("MeshSlice collectives are AllGathers of operands and at most one ReduceScatter of the result");
            return false;
        }
    }
    if (op->u.ms.moves[0].axis == op->u.ms.moves[1].axis) {
        WHY("MeshSlice moves the two matrices over the same axis");
        return false;
    }
    /* The einsum between the partial collectives: the ms arm mirrors the
     * einsum arm's labels and scale; past them it holds the dataflow, so
     * the einsum-only members are set here. */
    ir_op e = *op;
    e.kind = IR_OP_EINSUM;
    e.u.einsum.reduce = IR_RED_SUM;
    e.u.einsum.gather = false;
    e.u.einsum.scatter = false;
    e.u.einsum.gather_label = -1;
    e.operands[0] = &va;
    e.operands[1] = &vb;
    if (!ir_op_local_sharding(m, &e, out, why, why_size))
        return false;
    if (rs) {
        ir_axes bit = 1u << rs->axis;
        const ir_type *t = &op->result->type;
        if (!(out->unreduced & bit) || rs->dim < 0 || rs->dim >= t->rank ||
            op->u.ms.result_labels[rs->dim] != op->u.ms.split_label) {
            WHY("MeshSlice ReduceScatter: the partial result is not unreduced over its axis, or the dim is not the split dim");
            return false;
        }
        out->unreduced &= ~bit;
        ir_sharding_push(out, rs->dim, rs->axis);
        if (ir_local_size(m, t, rs->dim) % span) {
            WHY("K * block does not divide the result's per-device split dim");
            return false;
        }
    }
    return true;
}

/* Whether v, or a value reached from v through reshard ops (its readers,
 * from its use-list), has sharding `c`. */
static bool reaches(const ir_value *v, const ir_sharding *c)
{
    if (ir_sharding_equal(&v->type.sh, c, v->type.rank))
        return true;
    for (int k = 0; k < v->nuses; k++) {
        const ir_op *op = v->uses[k].op;
        if (ir_op_is_reshard(op->kind) && op->noperands == 1 && op->operands[0] == v && op->result &&
            reaches(op->result, c))
            return true;
    }
    return false;
}

/* An update overwrites a param or state with a value of its type: same
 * dtype and dims, and the target's sharding as the constraint. */
static bool update_matches(const ir_output *o)
{
    const ir_type *a = &o->update->type, *b = &o->value->type;
    if ((o->update->kind != IR_VAL_PARAM && o->update->kind != IR_VAL_STATE) ||
        a->dtype != b->dtype || a->rank != b->rank || !o->has_constraint ||
        !ir_sharding_equal(&o->constraint, &a->sh, a->rank))
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* The dtype rule of Einsum and Elementwise (docs/ir.md): an einsum's
 * floating-point operands have its result's dtype (a GEMM takes one dtype;
 * i32 operands are a gather's or scatter's indices, checked above); an
 * elementwise op gives a floating-point or i8 result, or an i32 one from
 * an integer expression (ir_ew_integer: a gather's positions), and may read operands
 * of any dtype (each converted as it is loaded, i32 only in comparisons):
 * that is how a cast is written; i8 (seed 002's quantized values) is only
 * a cast's source or target, or moved, never an einsum's result. */
static bool dtypes_ok(const ir_module *m, const ir_op *op, char *why, size_t why_size)
{
    if (!op->result)
        return true; /* reported by the structural checks */
    ir_dtype r = op->result->type.dtype;
    if (op->kind == IR_OP_ELEMENTWISE && r == IR_I32 && !ir_ew_integer(m, op, op->u.ew.root)) {
        WHY("an elementwise op gives an i32 result only from an integer expression (i32 "
            "operands, index values, integer constants; +, -, *, maximum, minimum)");
        return false;
    }
    if (op->kind == IR_OP_EINSUM && op->u.einsum.gather_zero_outside && !op->u.einsum.gather) {
        WHY("only a gather gives zeros for indices outside its table");
        return false;
    }
    if (op->kind == IR_OP_EINSUM && r == IR_I8 && !op->u.einsum.gather) {
        WHY("an einsum gives no i8 result: i8 values are converted by an elementwise cast "
            "or moved, not computed");
        return false;
    }
    for (int i = 0; op->kind == IR_OP_EINSUM && r != IR_I32 && i < op->noperands; i++) {
        ir_dtype t = op->operands[i] ? op->operands[i]->type.dtype : r;
        if (t != IR_I32 && t != r) {
            WHY("einsum operand %d is %s but its result is %s: an einsum takes one dtype (cast "
                "the operand first, an elementwise op)", i, ir_dtype_name(t), ir_dtype_name(r));
            return false;
        }
    }
    return true;
}

/* The verifier hooks of Einsum and Elementwise: the dtype rule, then the
 * einsum rule. */
bool ir_verify_einsum(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    return dtypes_ok(m, op, why, why_size) && ir_op_local_sharding(m, op, out, why, why_size);
}

bool ir_verify_ew(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, size_t why_size)
{
    return dtypes_ok(m, op, why, why_size) && ir_op_local_sharding(m, op, out, why, why_size);
}

/* Whether the labels of Einsum or Elementwise `op` name dims of its values'
 * sizes (other kinds have none); reports the first that does not. */
static bool labels_ok(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    if (op->kind != IR_OP_EINSUM && op->kind != IR_OP_ELEMENTWISE)
        return true;
    const int (*labels)[IR_MAX_RANK] = op->kind == IR_OP_EINSUM ? op->u.einsum.labels : op->u.ew.labels;
    const int *rl = op->kind == IR_OP_EINSUM ? op->u.einsum.result_labels : op->u.ew.result_labels;
    for (int i = 0; i < op->noperands; i++)
        for (int j = 0; j < op->operands[i]->type.rank; j++) {
            int L = labels[i][j];
            if (L < 0 || L >= m->ndims || m->dims[L].size != m->dims[op->operands[i]->type.dims[j]].size) {
                diag_error(d, op->loc, "%s: label %d of operand %d does not match its dim size",
                           ir_op_name(op->kind), j, i);
                return false;
            }
        }
    for (int r = 0; r < op->result->type.rank; r++)
        if (rl[r] < 0 || rl[r] >= m->ndims || m->dims[rl[r]].size != m->dims[op->result->type.dims[r]].size) {
            diag_error(d, op->loc, "%s: result label %d does not match its dim size", ir_op_name(op->kind), r);
            return false;
        }
    return true;
}

/* Both verifiers: with `planned`, the shardings too. */
static int verify(const ir_module *m, diag_ctx *d, bool planned)
{
    int before = d->nerrors;
    char why[256], b1[256], b2[256];
    for (int a = 0; a < m->mesh.naxes; a++)
        for (int b = a + 1; b < m->mesh.naxes; b++)
            if (m->mesh.axes[a].name == m->mesh.axes[b].name)
                diag_error(d, m->mesh.axes[b].loc, "mesh axis %c defined twice", m->mesh.axes[b].name);
    /* The cost model splits an axis over `phys` physical axes and reads
     * that many sizes (cost_axis_split): a pass must keep it in range. */
    for (int a = 0; a < m->mesh.naxes; a++) {
        const ir_axis *ax = &m->mesh.axes[a];
        if (ax->phys < 1 || ax->phys > IR_MAX_PHYS || (ax->dcn && ax->phys != 1))
            diag_error(d, ax->loc, "mesh axis %c spans %d physical axes%s (1 to %d, 1 over DCN)", ax->name,
                       ax->phys, ax->dcn ? " over DCN" : "", IR_MAX_PHYS);
    }
    bool *defined = calloc((size_t)m->nvalues + 1, sizeof *defined);
    if (!defined) {
        diag_error(d, DIAG_NOLOC, "out of memory in the verifier");
        return 1;
    }
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_OP) {
            defined[i] = true;
            check_value(m, v, d, v->loc);
        }
    }
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->result || op->result->def != op) {
            diag_error(d, op->loc, "%s op has no result or a stale result link", ir_op_name(op->kind));
            continue;
        }
        const ir_op_traits *tr = ir_op_traits_of(op->kind);
        if (!tr) {
            diag_error(d, op->loc, "op of unknown kind %d", (int)op->kind);
            continue;
        }
        bool operands_ok = op->noperands >= tr->min_operands && op->noperands <= tr->max_operands;
        if (!operands_ok)
            diag_error(d, op->loc, "%s op has %d operands, not %d to %d", tr->name, op->noperands,
                       tr->min_operands, tr->max_operands);
        for (int i = 0; operands_ok && i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            if (!v || v->id < 0 || v->id >= m->nvalues || m->values[v->id] != v) {
                diag_error(d, op->loc, "%s op has an invalid operand %d", ir_op_name(op->kind), i);
                operands_ok = false;
            } else if (!defined[v->id]) {
                diag_error(d, op->loc, "%s uses %s before it is defined", ir_op_name(op->kind),
                           ir_value_name(v, b1, sizeof b1));
                operands_ok = false;
            }
        }
        if (check_value(m, op->result, d, op->loc) || !operands_ok) {
            defined[op->result->id] = true;
            continue;
        }
        defined[op->result->id] = true;
        if (!labels_ok(m, op, d) || !planned)
            continue;
        ir_sharding want;
        bool ok = tr->verify(m, op, &want, why, sizeof why);
        if (!ok) {
            diag_error(d, op->loc, "%s producing %s is not locally computable: %s", ir_op_name(op->kind),
                       ir_type_str(m, op->result->tensor, &op->result->type, b1, sizeof b1), why);
            continue;
        }
        if (!ir_sharding_equal(&want, &op->result->type.sh, op->result->type.rank)) {
            ir_type t = op->result->type;
            t.sh = want;
            diag_error(d, op->loc, "%s result is %s but its operands give %s", ir_op_name(op->kind),
                       ir_type_str(m, op->result->tensor, &op->result->type, b1, sizeof b1),
                       ir_type_str(m, op->result->tensor, &t, b2, sizeof b2));
        }
    }
    for (int i = 0; planned && i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (!v->has_constraint || (v->kind == IR_VAL_OP && (!v->def || !defined[i])))
            continue;
        if (!reaches(v, &v->constraint)) {
            ir_type t = v->type;
            t.sh = v->constraint;
            diag_error(d, v->loc, "%s does not meet its constraint %s", ir_type_str(m, v->tensor, &v->type, b1, sizeof b1),
                       ir_type_str(m, v->tensor, &t, b2, sizeof b2));
        }
    }
    for (int i = 0; i < m->noutputs; i++) {
        const ir_output *o = &m->outputs[i];
        if (!o->value) {
            diag_error(d, o->loc, "output %s has no value", o->name);
            continue;
        }
        const ir_type *t = &o->value->type;
        if (o->update && !update_matches(o)) {
            diag_error(d, o->loc, "update of %s by %s: not a param or state of the same dims "
                       "and dtype", o->name, ir_type_str(m, o->name, t, b1, sizeof b1));
            continue;
        }
        if (!planned)
            continue;
        if (o->has_constraint && !ir_sharding_equal(&t->sh, &o->constraint, t->rank)) {
            ir_type c = *t;
            c.sh = o->constraint;
            diag_error(d, o->loc, "output %s is %s, not %s", o->name, ir_type_str(m, o->name, t, b1, sizeof b1),
                       ir_type_str(m, o->name, &c, b2, sizeof b2));
        } else if (t->sh.unreduced) {
            diag_error(d, o->loc, "output %s holds unreduced partial sums: %s", o->name,
                       ir_type_str(m, o->name, t, b1, sizeof b1));
        }
    }
    free(defined);
    ir_verify_loops(m, d);
    ir_verify_updates(m, d);
    ir_verify_uses(m, d);
    return d->nerrors - before;
}

int ir_verify(const ir_module *m, diag_ctx *d)
{
    return verify(m, d, true);
}

int ir_verify_unplanned(const ir_module *m, diag_ctx *d)
{
    return verify(m, d, false);
}
