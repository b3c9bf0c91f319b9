/*
 * cost_bound.c - a lower bound on the time of one step that no sharding
 * plan on the module's mesh beats under the cost model: the certificate a
 * plan carries (DESIGN.md, "Every plan carries a certificate ... a lower
 * bound independent of the candidates").
 *
 * It reads only what every plan shares: the global shapes and dtypes of
 * the values, the number of devices P of the mesh, the trip counts of
 * repeated blocks and the declared shardings of params, inputs and state.
 * Shardings, collectives and MeshSlice loops a plan has chosen are
 * ignored, so the bound is the same before and after planning.
 *
 * Compute.  The cost model runs SPMD in lock step, so the step takes at
 * least the FLOPs of the busiest device over its peak, and some device
 * executes at least 1/P of the model FLOPs (cost_op_model_flops, the count
 * MFU uses): compute_s = sum over einsums of trips x model FLOPs / (P x
 * peak).  On a calibrated profile the peak is the fastest GEMM rate it
 * measured (its curve may pass its "peak"), times the BLAS core contention
 * of a P-device mesh (cost_measured_blas_contention), as cost_op_estimate
 * times a binary einsum (a unary one, priced as a loop, only costs more);
 * an einsum some plan
 * could shard down to an unrolled loop (at most m->einsum_unroll_max
 * contracted points per device), whose arithmetic a calibrated profile's
 * row groups price at nothing, adds no compute there.
 *
 * Communication.  A binary contraction C[b,m,n] = sum_k A[b,m,k] B[b,k,n]
 * (b, m, n, k: products of the global extents of the batch, free-left,
 * free-right and contracted labels) is F = b m n k multiply-adds.  A
 * device that does f of them reads x entries of A, y of B and adds to z of
 * C, with f <= sqrt(x y z) (Loomis-Whitney: the batch label is in all
 * three projections; Irony, Toledo and Tiskin, JPDC 2004, use it for the
 * memory-dependent bound), and x >= f / n, y >= f / m, z >= f / k (an
 * entry of A meets n multiply-adds at most).  In the square case the
 * fewest entries are x = y = z = f^(2/3); a skinny shape binds the
 * bounds of its largest matrices first (fewest_touched; the three cases
 * of Al Daas et al., "Tight memory-independent parallel matrix
 * multiplication communication lower bounds", SPAA 2022).  Some device
 * has f >= F / P, and in one copy spread evenly it holds
 * b (m k + k n + m n) / P of the entries at the start, so it sends or
 * receives at least
 *     W = max(0, touched(F / P) - b (m k + k n + m n) / P),
 * touched = 3 (F / P)^(2/3) in the square case: Ballard, Demmel, Holtz,
 * Lipshitz, Schwartz, SPAA 2012, the memory-independent bound.  For
 * P <= b the lower bounds alone give the held entries, W = 0: the batch
 * slices can be dealt out whole with no traffic.  An operand that comes
 * from a param, input or state through reshards, layer slices and
 * one-operand elementwise ops counts with the argument's declared share
 * instead, which the program fixes and no plan chooses: a weight declared
 * replicated (data parallelism) is held whole, and its forward matmul
 * needs no traffic.  The words are counted at the smallest element size
 * of the einsum's values.
 *
 * A device sends and receives at once, each at most at the rate of an
 * AllGather over every mesh axis (seed 001: V / (W_ici x n_axes); an axis
 * without wraparound is never faster than 2 W_1way), so the traffic takes
 * at least W bytes / (2 x n_axes x W_axis).  A calibrated profile's fits
 * move a shard per ring step at `bw`; an AllReduce fit's buffer is
 * received twice, so W_axis = 2 x the largest bw of its fits, and the
 * time scales by the core contention, as cost_op_estimate's collectives do.
 *
 * Assumptions (docs/cost-model.md, "Lower bound of a step"): the bound on
 * communication is for plans that hold every other operand and every
 * result of a contraction once, as Ballard et al. assume; a plan that
 * computes an intermediate redundantly on several devices to contract it
 * in place is outside it.  Per-op bounds add because every device runs the
 * same ops on shards of one size.  Latency, memory and elementwise work
 * are left out: each only adds time.
 */
#include <math.h>
#include <stdlib.h>

#include "costmodel.h"

/* A binary einsum's labels by where they appear, as products of their
 * global extents (1 when there are none). */
typedef struct contraction {
    double b;       /* batch: in both operands and the result */
    double m;       /* free-left: in operand 0 and the result only */
    double n;       /* free-right: in operand 1 and the result only */
    double k;       /* contracted: in both operands, not the result */
    double summed;  /* in one operand only and not the result (summed before the product) */
    int ncontracted; /* contracted labels */
    bool diagonal;  /* a label repeats within one operand */
} contraction;

static double global_size(const ir_module *m, int dim)
{
    return dim >= 0 && dim < m->ndims ? (double)m->dims[dim].size : 1;
}

/* Classifies the labels of binary Einsum or MeshSlice `op` into *c;
 * false for any other op (unary einsums, gathers, scatters, max/min). */
static bool classify(const ir_module *m, const ir_op *op, contraction *c)
{
    const int (*labels)[IR_MAX_RANK];
    const int *rl;
    if (op->kind == IR_OP_EINSUM && !op->u.einsum.gather && !op->u.einsum.scatter &&
        op->u.einsum.reduce == IR_RED_SUM) {
        labels = op->u.einsum.labels;
        rl = op->u.einsum.result_labels;
    } else if (op->kind == IR_OP_MESHSLICE) {
        labels = op->u.ms.labels;
        rl = op->u.ms.result_labels;
    } else {
        return false;
    }
    if (op->noperands != 2 || !op->result || !op->operands[0] || !op->operands[1])
        return false;
    *c = (contraction){1, 1, 1, 1, 1, 0, false};
    int rank[2] = {op->operands[0]->type.rank, op->operands[1]->type.rank};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < rank[i]; j++) {
            int l = labels[i][j];
            c->diagonal |= ir_label_pos(labels[i], rank[i], l) != j;
            bool other = ir_label_pos(labels[1 - i], rank[1 - i], l) >= 0;
            bool res = ir_label_pos(rl, op->result->type.rank, l) >= 0;
            if ((i == 1 && other) || ir_label_pos(labels[i], rank[i], l) != j)
                continue; /* counted once, from operand 0 or its first position */
            double s = global_size(m, l);
            if (other && res)
                c->b *= s;
            else if (other) {
                c->k *= s;
                c->ncontracted++;
            }
            else if (res)
                *(i == 0 ? &c->m : &c->n) *= s;
            else
                c->summed *= s;
        }
    return true;
}

/* Elements of operand `v` (global elements `elems`) a device may hold
 * before a contraction moves anything: where `v` comes from an argument
 * (param, input, state) through reshards, layer slices and one-operand
 * elementwise ops, the argument's declared share of them; any other
 * value one copy spread over the `p` devices. */
/* The value `v` comes from through reshards, layer slices and
 * one-operand elementwise ops: an argument (param, input, state) when it
 * only moves or maps one. */
/* Whether `op`'s result only moves or maps its one operand: a reshard, a
 * layer slice or a one-operand elementwise op. */
static bool moves_one(const ir_op *op)
{
    return op->noperands == 1 && op->operands[0] &&
           (ir_op_is_reshard(op->kind) || op->kind == IR_OP_ELEMENTWISE ||
            op->kind == IR_OP_LAYERSLICE);
}

static const ir_value *source_of(const ir_value *v)
{
    while (v->kind == IR_VAL_OP && v->def && moves_one(v->def))
        v = v->def->operands[0];
    return v;
}

static double held_elems(const ir_module *m, const ir_value *v, double elems, double p)
{
    v = source_of(v);
    if (!ir_value_kind_is_argument(v->kind))
        return elems / p;
    double global = 1;
    for (int d = 0; d < v->type.rank; d++)
        global *= global_size(m, v->type.dims[d]);
    return fmax(1 / p, (double)ir_local_elems(m, &v->type) / global) * elems;
}

/* The fewest entries x + y + z of A, B and C that `f` multiply-adds
 * touch: xyz >= f^2 (Loomis-Whitney) and each of x, y, z at least its
 * lower bound lo[i] (f over the extent of the labels its matrix lacks).
 * The free ones are equal; a bound binds when it exceeds their common
 * value, largest first (the KKT conditions of the convex problem). */
static double fewest_touched(double f, double lo0, double lo1, double lo2)
{
    double lo[3] = {fmax(lo0, fmax(lo1, lo2)), 0, fmin(lo0, fmin(lo1, lo2))};
    lo[1] = lo0 + lo1 + lo2 - lo[0] - lo[2];
    double bound_sum = 0, bound_prod = 1;
    for (int a = 0; a < 3; a++) {
        double free_each = pow(f * f / bound_prod, 1.0 / (3 - a));
        if (free_each >= lo[a])
            return bound_sum + (3 - a) * free_each;
        bound_sum += lo[a];
        bound_prod *= lo[a];
    }
    return bound_sum; /* xyz >= f^2 holds at the bounds */
}

/* Words some device of `p` sends or receives in binary contraction `op`
 * with labels `c` (the essay above); 0 for an einsum that is not a plain
 * (batched) matmul. */
static double contraction_words(const ir_module *m, const ir_op *op, const contraction *c, double p)
{
    if (p <= 1 || c->ncontracted == 0 || c->diagonal || c->summed != 1)
        return 0;
    double f = c->b * c->m * c->n * c->k / p;
    double held = held_elems(m, op->operands[0], c->b * c->m * c->k, p) +
                  held_elems(m, op->operands[1], c->b * c->k * c->n, p) + c->b * c->m * c->n / p;
    return fmax(0, fewest_touched(f, f / c->n, f / c->m, f / c->k) - held);
}

/* Smallest element size among `op`'s operands and result, bytes; an
 * operand counts at its source's size (int8 weights cast to f32 may be
 * moved as int8 before the cast). */
static double min_elem_bytes(const ir_op *op)
{
    double e = (double)ir_dtype_size(op->result->type.dtype);
    for (int i = 0; i < op->noperands; i++) {
        e = fmin(e, (double)ir_dtype_size(op->operands[i]->type.dtype));
        e = fmin(e, (double)ir_dtype_size(source_of(op->operands[i])->type.dtype));
    }
    return e;
}

/* The fastest FLOP/s `hw` credits an einsum in dtype `t` with: its peak,
 * or on a calibrated profile the best of peak and GEMM curve. */
static double best_flops(const cost_hw *hw, ir_dtype t)
{
    double r = cost_peak_flops(hw, t);
    int d = (int)t >= 0 && (int)t < 3 ? (int)t : IR_F32;
    for (int i = 0; hw->measured && i < hw->gemm_npoints[d]; i++)
        r = fmax(r, hw->gemm_rate[d][i]);
    return r;
}

/* Whether `op`'s result is operand 0's data moved, mapped (moves_one, as
 * source_of follows) or written into in place (a KV cache's UpdateSlice),
 * whose readers read that storage from HBM. */
static bool passes_on(const ir_op *op)
{
    if (!op->result || op->noperands < 1 || !op->operands[0])
        return false;
    return moves_one(op) || (ir_op_traits_of(op->kind)->traits & IR_TRAIT_INPLACE);
}

/* GLOBAL bytes of the arguments the compute ops of `m` read (cost_bound
 * .hbm_bytes), each counted once.  A gather's table is left out: it reads
 * the rows its indices name, not the table.  Each value's source is found
 * once, in op order (a definition precedes its uses), so a chain of n
 * elementwise ops costs O(n), not a walk back per op. */
static double argument_bytes(const ir_module *m)
{
    size_t n = (size_t)m->nvalues + 1;
    int *src = malloc(n * sizeof *src);
    bool *seen = calloc(n, sizeof *seen);
    double bytes = 0;
    if (!src || !seen) { /* no memory for the sets: no memory term, still a bound */
        free(src);
        free(seen);
        return 0;
    }
    for (int v = 0; v < m->nvalues; v++)
        src[v] = v;
    for (const ir_op *op = m->first; op; op = op->next)
        if (passes_on(op))
            src[op->result->id] = src[op->operands[0]->id];
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!(ir_op_traits_of(op->kind)->traits & IR_TRAIT_COMPUTE))
            continue;
        for (int i = 0; i < op->noperands; i++) {
            if (!op->operands[i] || (i == 1 && op->kind == IR_OP_EINSUM && op->u.einsum.gather))
                continue;
            const ir_value *v = m->values[src[op->operands[i]->id]];
            if (!ir_value_kind_is_argument(v->kind) || seen[v->id])
                continue;
            seen[v->id] = true;
            double elems = 1;
            for (int d = 0; d < v->type.rank; d++)
                elems *= global_size(m, v->type.dims[d]);
            bytes += elems * (double)ir_dtype_size(v->type.dtype);
        }
    }
    free(src);
    free(seen);
    return bytes;
}

/* Bytes/s one device sends plus receives at most on `m`'s mesh under `hw`
 * (the essay above); 0 for a mesh of one device. */
static double link_rate(const ir_module *m, const cost_hw *hw)
{
    int axes = 0;
    for (int i = 0; i < m->mesh.naxes; i++)
        axes += m->mesh.axes[i].size > 1;
    double per_axis = fmax(hw->ici_bidi_bw, 2 * hw->ici_oneway_bw);
    if (hw->measured) {
        per_axis = 0;
        for (int k = 0; k < COST_FIT_COUNT; k++)
            per_axis = fmax(per_axis, 2 * fmax(hw->fit[k].bw, hw->fit[k].small_bw));
    }
    return 2 * axes * per_axis;
}

int cost_lower_bound(const ir_module *m, const cost_hw *hw, cost_bound *out)
{
    if (!m || !hw || !out)
        return -1;
    double p = (double)ir_mesh_devices(&m->mesh);
    if (p < 1)
        return -1;
    *out = (cost_bound){0};
    /* The factors cost_op_estimate scales a calibrated profile's
     * collectives and einsums by on this mesh (1 otherwise); they may be
     * below 1. */
    double contention = cost_measured_contention(hw, p);
    double blas = cost_measured_blas_contention(hw, p); /* the einsums' GEMMs */
    for (const ir_op *op = m->first; op; op = op->next) {
        double flops = cost_op_model_flops(m, op);
        if (flops <= 0 || !op->result)
            continue;
        double trips = (double)ir_op_trips(m, op);
        out->flops += trips * flops;
        contraction c;
        bool binary = classify(m, op, &c);
        bool may_unroll = binary && op->kind == IR_OP_EINSUM &&
                          c.k * c.summed <= (double)m->einsum_unroll_max * p;
        double rate = best_flops(hw, hw->measured ? op->result->type.dtype : cost_einsum_dtype(m, op));
        if (!(hw->measured && may_unroll))
            out->compute_s += trips * flops * blas / (p * rate);
        if (binary)
            out->comm_bytes += trips * contraction_words(m, op, &c, p) * min_elem_bytes(op);
    }
    double link = link_rate(m, hw);
    out->comm_s = out->comm_bytes > 0 && link > 0 ? out->comm_bytes * contention / link : 0;
    out->hbm_bytes = argument_bytes(m) / p;
    out->memory_s = !hw->measured && hw->hbm_bw > 0 ? out->hbm_bytes / hw->hbm_bw : 0;
    out->total_s = fmax(out->compute_s, out->memory_s) + out->comm_s;
    out->overlap_s = fmax(fmax(out->compute_s, out->memory_s), out->comm_s);
    return 0;
}
