/*
 * cost_op.c - the estimate of one IR op on a hardware profile, and its
 * model FLOPs.
 *
 * Each op gets a per-device estimate (ir_cost):
 *   Einsum       FLOPs = n_operands * prod(per-device size of every label):
 *                2 * prod for the binary einsums propagate leaves (one
 *                multiply and one add per point of the iteration space,
 *                seed 001 / seed 003 "2 * B * D * F"), prod for a unary sum.
 *   Elementwise  FLOPs = (arithmetic nodes of the expression) * result elements.
 *   both         HBM bytes = operands' + result's per-device bytes;
 *                time = max(FLOPs / C_dtype, bytes / W_hbm)   (roofline, seed 001/002).
 *   AllGather, ReduceScatter, AllReduce, AllToAll: cost_formula.c; the HBM
 *                traffic is reported but not timed (HBM is ~10x faster than
 *                ICI, seed 002 "beta ~ 8", so it hides under the transfer).
 *   Slice        a local copy of the kept block: 2 * result bytes / W_hbm.
 *   MeshSlice    the pipelined loop of meshslice_cost.c.
 *   CollectivePermute  one hop per position shifted: cost_hop_time (the
 *                pipeline's stage-to-stage transfer, seed 001's latency
 *                plus the block over one link's one-way bandwidth).
 * On a calibrated profile (hw->measured) the same ops use the measured
 * curves and fits instead of the peak figures, scaled by the core
 * contention (docs/cost-model.md, "How the cost pass uses it").
 *
 * A decode step needs nothing more (seed 002, "Theoretical estimates of LLM
 * latency and throughput", equation (1): B x KV cache bytes / W_hbm for
 * attention plus max(2 B params / C, param bytes / W_hbm) for the rest):
 * with B far below C / W_hbm every matmul is memory-bound, so its time is
 * the bytes of its weight (projections, MLP) or of its layer's cache (the
 * QK and AV einsums) over W_hbm, and the collectives add theirs.  Two
 * things make the per-op sum that formula: the attention scores between
 * the QK and AV einsums stay on chip (cost_op_estimate_onchip with
 * cost_onchip_values, a Flash Attention kernel), and a latency-bound
 * AllReduce pays its hops once (cost_allreduce_time).
 *
 * The FLOPs above are the ones a device EXECUTES: a plan that leaves a dim
 * unsharded computes the same points on several devices.  Model FLOPs
 * (cost_op_model_flops) count each point of the unsharded program once,
 * at global sizes; MFU divides those, not the executed ones (seed 003).
 */
#include <math.h>
#include <string.h>

#include "costmodel.h"

double cost_peak_flops(const cost_hw *hw, ir_dtype t)
{
    if (t == IR_I8) /* int8 x int8 on the MXU (HARDWARE.md); f32's where none is given */
        return hw->peak_int8 > 0 ? hw->peak_int8 : hw->peak_flops[IR_F32];
    if ((int)t < 0 || (int)t >= 3)
        return hw->peak_flops[IR_F32];
    return hw->peak_flops[t];
}

static double local_bytes(const ir_module *m, const ir_value *v)
{
    return v ? (double)ir_local_bytes(m, &v->type) : 0;
}

/* Calls fn(dim id, per-device size, arg) for each position of each operand
 * and of the result of einsum `op`. */
static void for_each_label(const ir_module *m, const ir_op *op,
                           void (*fn)(int dim, int64_t size, void *arg), void *arg)
{
    for (int i = 0; i <= op->noperands; i++) {
        const ir_value *v = i < op->noperands ? op->operands[i] : op->result;
        const int *labels = i < op->noperands ? op->u.einsum.labels[i] : op->u.einsum.result_labels;
        if (!v)
            continue;
        for (int j = 0; j < v->type.rank; j++)
            fn(labels[j], ir_local_size(m, &v->type, j), arg);
    }
}

/* Distinct labels of an einsum with their smallest per-device size. */
typedef struct label_set {
    int n;                                             /* labels found */
    int ids[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK];   /* dim ids */
    int64_t sizes[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK]; /* per-device sizes */
} label_set;

static void add_label(int dim, int64_t size, void *arg)
{
    label_set *ls = arg;
    for (int k = 0; k < ls->n; k++)
        if (ls->ids[k] == dim) {
            if (size < ls->sizes[k])
                ls->sizes[k] = size;
            return;
        }
    ls->ids[ls->n] = dim;
    ls->sizes[ls->n++] = size;
}

int64_t cost_einsum_label_size(const ir_module *m, const ir_op *op, int dim)
{
    if (op->kind != IR_OP_EINSUM)
        return -1;
    label_set ls = {0};
    for_each_label(m, op, add_label, &ls);
    for (int k = 0; k < ls.n; k++)
        if (ls.ids[k] == dim)
            return ls.sizes[k];
    return -1;
}

/* FLOPs of an einsum: the size of its iteration space (each label once, at
 * its smallest per-device size over the places it appears: a label sharded
 * in one operand and replicated in another is computed on the local block)
 * times the number of operands. */
static double einsum_flops(const ir_module *m, const ir_op *op)
{
    if (op->u.einsum.gather)
        return 0; /* a lookup: copies rows, no arithmetic */
    if (op->u.einsum.scatter) /* one add per element of the rows */
        return (double)ir_local_elems(m, &op->operands[1]->type);
    label_set ls = {0};
    for_each_label(m, op, add_label, &ls);
    double points = 1;
    for (int k = 0; k < ls.n; k++)
        points *= (double)ls.sizes[k];
    return (op->noperands > 0 ? op->noperands : 1) * points;
}

double cost_hbm_critical_dim_size(const ir_module *m, const cost_hw *hw, const ir_op *op, int dim)
{
    int64_t n = cost_einsum_label_size(m, op, dim);
    if (n <= 0 || !op->result)
        return -1;
    /* FLOPs = a * n; bytes = b0 + b1 * n where b1 collects the values that
     * carry `dim`.  Compute-bound when a n / C > (b0 + b1 n) / W_hbm. */
    double a = einsum_flops(m, op) / (double)n, b0 = 0, b1 = 0;
    for (int i = 0; i <= op->noperands; i++) {
        const ir_value *v = i < op->noperands ? op->operands[i] : op->result;
        const int *labels = i < op->noperands ? op->u.einsum.labels[i] : op->u.einsum.result_labels;
        if (!v)
            continue;
        bool carries = false;
        for (int j = 0; j < v->type.rank; j++)
            carries |= labels[j] == dim;
        /* a cast fused into the read crosses HBM at its source's width
         * (int8 weights: seed 002's B_crit = beta x alpha_hbm, beta = 1/2) */
        const ir_value *src = i < op->noperands ? ir_folded_cast_source(m, v) : NULL;
        double bytes = local_bytes(m, v) * (src ? (double)ir_dtype_size(src->type.dtype) /
                                                      (double)ir_dtype_size(v->type.dtype)
                                                : 1);
        if (carries)
            b1 += bytes / (double)n;
        else
            b0 += bytes;
    }
    ir_dtype t = hw->measured ? op->result->type.dtype : cost_einsum_dtype(m, op);
    double denom = a * hw->hbm_bw / cost_peak_flops(hw, t) - b1;
    if (denom <= 0)
        return -1;
    return b0 / denom;
}

/* Arithmetic nodes of elementwise `op`: leaves (operands, constants,
 * index values) are free. */
static int arith_nodes(const ir_op *op)
{
    int arith = 0;
    for (int i = 0; i < op->u.ew.nnodes; i++)
        if (ir_ew_arity(op->u.ew.nodes[i].kind) > 0)
            arith++;
    return arith;
}

static double elementwise_flops(const ir_module *m, const ir_op *op)
{
    return op->result ? (double)arith_nodes(op) * (double)ir_local_elems(m, &op->result->type) : 0;
}

/* Roofline for a compute op. */
static void roofline(const cost_hw *hw, ir_dtype t, ir_cost *c)
{
    c->t_compute = c->flops / cost_peak_flops(hw, t);
    c->t_memory = c->hbm_bytes / hw->hbm_bw;
    c->time = fmax(c->t_compute, c->t_memory);
    c->bound = c->t_compute > c->t_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
}

/* Devices of m's mesh. */
static double mesh_devices(const ir_module *m)
{
    double n = 1;
    for (int i = 0; i < m->mesh.naxes; i++)
        n *= (double)m->mesh.axes[i].size;
    return n;
}

/* Seconds per element of the function calls of elementwise `op`, by the
 * per-function costs `fn` (hw->fn_time or hw->fn_time_cache). */
static double fn_seconds_per_elem(const ir_op *op, const double *fn)
{
    double per_elem = 0;
    for (int i = 0; i < op->u.ew.nnodes; i++)
        if (op->u.ew.nodes[i].kind == IR_EW_CALL && (int)op->u.ew.nodes[i].fn >= 0 &&
            op->u.ew.nodes[i].fn < IR_FN_COUNT)
            per_elem += fn[op->u.ew.nodes[i].fn];
    return per_elem;
}

double cost_op_ew_arith_in_cache(const ir_module *m, const cost_hw *hw, const ir_op *op)
{
    if (!hw->measured || op->kind != IR_OP_ELEMENTWISE || !op->result)
        return 0;
    return cost_measured_contention(hw, mesh_devices(m)) *
           (double)ir_local_elems(m, &op->result->type) * fn_seconds_per_elem(op, hw->fn_time_cache);
}

/* Whether every function op calls has an in-cache figure in the profile. */
static bool fns_cached(const cost_hw *hw, const ir_op *op)
{
    for (int i = 0; i < op->u.ew.nnodes; i++)
        if (op->u.ew.nodes[i].kind == IR_EW_CALL && (int)op->u.ew.nodes[i].fn >= 0 &&
            op->u.ew.nodes[i].fn < IR_FN_COUNT && !hw->has_fn_cache[op->u.ew.nodes[i].fn])
            return false;
    return true;
}

/* Seconds per element of op's function calls in a streaming loop whose
 * memory traffic takes `mem_per_elem` seconds per element, beyond that
 * memory time (seconds per element, per device with the calibration's
 * devices busy).  Calibration timed the function's loop and saw it take e
 * longer than the same loop with neg, which took m_cal per element
 * (hw->fn_time, hw->fn_base_time; profiles without the latter take m_cal
 * from the elementwise curve, whose add read 10-25% slower than the neg
 * loop e is relative to, and so priced a gelu loop that much above the
 * calibration's own: docs/performance-history.md, section 5, "The
 * functions' own baseline"); on arrays in cache the function cost a
 * (hw->fn_time_cache).  A loop takes the longer of its memory time and
 * its arithmetic (a roofline: the traffic and the arithmetic overlap), so
 * a function that lengthened the calibration's loop (e > 0) made it bound
 * by its arithmetic, m_cal + e per element, and a loop with the same
 * function takes max(m, m_cal + e): beyond its memory it pays
 * max(0, m_cal + e - m), e at the calibration's own traffic, more in a
 * loop that moves fewer bytes (a unary `gelu(Tmp)`, 8 bytes an element
 * against the calibration's 12: measured 2.88 ms on ffw_dp.ein where e
 * alone priced 2.23), less in one that moves more.  An e under a tenth
 * of m_cal (COST_FN_NOISE) does not say the function bound the loop: it
 * is the difference of two timings of about m_cal, and functions of one
 * instruction (relu, abs, sqrt) came out at up to 6% of m_cal in quiet
 * calibrations.  The function hid under m_cal then, and what it costs
 * where it does not hide is best known from its arithmetic in cache:
 * min(a, the roofline's figure) (relu, e 0.03 ns and a 0.05 against m_cal
 * 0.58: a unary loop over 8 MiB a device priced 1.29 ms by the roofline,
 * 0.74 so, 0.73-0.74 measured; exp, a 0.19: 1.30 and 1.04 against
 * 1.16-1.20).  A function free in cache (a = 0) gets e.  A function that
 * added nothing (e = 0 < a) hid under m_cal; a loop with less traffic
 * hides less of it, in proportion:
 * a - min(a, a m / m_cal).  Without in-cache figures (profiles before
 * them, or a function they do not name) this is e, as before (docs/cost-model.md, "How the cost pass uses
 * it"; tests/cost/test_cost_ewfn.c). */
static double fn_streaming_per_elem(const cost_hw *hw, const ir_op *op, double mem_per_elem)
{
    double a = fn_seconds_per_elem(op, hw->fn_time_cache);
    double e = fn_seconds_per_elem(op, hw->fn_time);
    double n = (double)COST_FN_CAL_ELEMS;
    double m_cal = hw->fn_base_time;
    if (!(m_cal > 0))
        m_cal = cost_measured_ew_seconds(hw, COST_FN_CAL_READ * n, COST_FN_CAL_WRITTEN * n, true) / n;
    if (!fns_cached(hw, op) || !(m_cal > 0) || !(a > 0))
        return e;
    double roof = fmax(0.0, m_cal + e - mem_per_elem);
    if (e >= COST_FN_NOISE * m_cal)
        return roof;
    if (e > 0)
        return fmin(a, roof);
    return a - fmin(a, a * mem_per_elem / m_cal);
}

/* Elementwise time under a calibrated profile: the op's bytes at the
 * elementwise bandwidth measured for that many bytes, with ordinary or
 * streamed stores as codegen writes the result (cost_measured_ew_seconds;
 * operands hot, as the result of the op before), plus, per element, the
 * arithmetic of its function calls that its memory traffic does not hide
 * (fn_streaming_per_elem).  They add: the function cost was measured as
 * the extra time on top of the memory traffic, so whatever overlap the
 * loop achieves is already in it. */
static void measured_elementwise(const ir_module *m, const cost_hw *hw, const ir_op *op, ir_cost *c)
{
    double elems = op->result ? (double)ir_local_elems(m, &op->result->type) : 0;
    double k = cost_measured_contention(hw, mesh_devices(m));
    double written = op->result ? (double)ir_local_bytes(m, &op->result->type) : 0;
    written = written < c->hbm_bytes ? written : c->hbm_bytes;
    double mem = cost_measured_ew_seconds(hw, c->hbm_bytes - written, written,
                                          ir_ew_streams(m, (int64_t)written));
    c->t_memory = k * mem;
    c->t_compute = elems > 0 ? k * elems * fn_streaming_per_elem(hw, op, mem / elems) : 0;
    c->time = c->t_memory + c->t_compute;
    c->bound = c->t_compute > c->t_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
}

/* Sizes of the links a resharding op works over (skips bad axis ids, which
 * the verifier reports): each mesh axis as its physical sub-axes
 * (cost_axis_split), `sizes` holding COST_MAX_LINKS; dcn[i] (when `dcn`
 * is not NULL) says link i crosses the data-center network.  The product
 * of the sizes is the group's device count either way. */
static int coll_axis_sizes(const ir_module *m, const ir_op *op, int64_t *sizes, bool *dcn)
{
    int n = 0;
    for (int i = 0; i < op->u.coll.naxes && i < IR_MAX_AXES; i++) {
        int a = op->u.coll.axes[i];
        if (a < 0 || a >= m->mesh.naxes)
            continue;
        const ir_axis *ax = &m->mesh.axes[a];
        /* A folded axis is its physical sub-axes (seed 001, "multiple
         * axes"); a DCN axis stays one ring over the pods.  The clamp
         * keeps an unverified module inside `sizes`. */
        int phys = ax->dcn ? 1 : ax->phys > IR_MAX_PHYS ? IR_MAX_PHYS : ax->phys;
        int k = cost_axis_split(ax->size, phys, sizes + n);
        for (int j = 0; dcn && j < k; j++)
            dcn[n + j] = ax->dcn;
        n += k;
    }
    return n;
}

double cost_coll_runs(const ir_module *m, const ir_op *op, double p)
{
    const ir_value *in = op->noperands > 0 ? op->operands[0] : NULL;
    const ir_type *t = NULL;
    switch (op->kind) {
    case IR_OP_ALLGATHER:
    case IR_OP_ALLTOALL: t = in ? &in->type : NULL; break;
    case IR_OP_REDUCESCATTER: t = op->result ? &op->result->type : NULL; break;
    default: return p; /* AllReduce: flat slices */
    }
    /* The cut is the deepest dim any axis works along (per-axis ops touch
     * several), an AllToAll's destinations included. */
    int cut = -1;
    for (int k = 0; k < op->u.coll.naxes; k++) {
        int d = ir_coll_dim(&op->u.coll, k), e = op->kind == IR_OP_ALLTOALL ? ir_coll_dim2(&op->u.coll, k) : -1;
        cut = d > cut ? d : cut;
        cut = e > cut ? e : cut;
    }
    if (!t || cut < 0 || cut > t->rank)
        return p;
    double rows = 1;
    for (int d = 0; d < cut; d++) {
        /* An AllToAll's box has the result's (split) extent on its
         * destination dims. */
        bool dest = false;
        for (int k = 0; op->kind == IR_OP_ALLTOALL && k < op->u.coll.naxes; k++)
            dest |= ir_coll_dim2(&op->u.coll, k) == d;
        const ir_type *src = dest && op->result ? &op->result->type : t;
        rows *= (double)ir_local_size(m, src, d);
    }
    return p * rows;
}

/* cost_op_coll_time under a calibrated profile: the fit of op's kind
 * (cost_measured_coll_time) over its group; false for other ops. */
static bool measured_coll_time(const ir_module *m, const cost_hw *hw, const ir_op *op,
                               cost_coll_time *out, double *v)
{
    cost_fit_kind k;
    switch (op->kind) {
    case IR_OP_ALLGATHER: k = COST_FIT_ALLGATHER; break;
    case IR_OP_REDUCESCATTER: k = COST_FIT_REDUCESCATTER; break;
    case IR_OP_ALLREDUCE: k = COST_FIT_ALLREDUCE; break;
    case IR_OP_ALLTOALL: k = COST_FIT_ALLTOALL; break;
    default: return false;
    }
    int64_t sizes[COST_MAX_LINKS];
    int n = coll_axis_sizes(m, op, sizes, NULL);
    double p = 1;
    for (int i = 0; i < n; i++)
        p *= (double)sizes[i];
    *v = local_bytes(m, k == COST_FIT_ALLGATHER ? op->result
                                                : op->noperands > 0 ? op->operands[0] : NULL);
    *out = cost_measured_coll_time(&hw->fit[k], p, *v, cost_coll_runs(m, op, p));
    /* The copies and waits are CPU work: they share the cores like compute. */
    double f = cost_measured_contention(hw, mesh_devices(m));
    out->t_latency *= f;
    out->t_bandwidth *= f;
    out->time *= f;
    return true;
}

bool cost_op_coll_time(const ir_module *m, const cost_hw *hw, const ir_op *op,
                       cost_coll_time *out, double *v)
{
    if (hw->measured)
        return measured_coll_time(m, hw, op, out, v);
    int64_t sizes[COST_MAX_LINKS];
    bool dcn[COST_MAX_LINKS];
    const ir_value *in = op->noperands > 0 ? op->operands[0] : NULL;
    switch (op->kind) {
    case IR_OP_ALLGATHER: *v = local_bytes(m, op->result); break;
    case IR_OP_REDUCESCATTER:
    case IR_OP_ALLREDUCE:
    case IR_OP_ALLTOALL: *v = local_bytes(m, in); break;
    default: return false;
    }
    int n = coll_axis_sizes(m, op, sizes, dcn);
    *out = cost_coll_links_time(hw, op->kind, sizes, dcn, n, *v);
    return true;
}

/* Number of devices in the group of a resharding op. */
static double group_size(const ir_module *m, const ir_op *op)
{
    int64_t sizes[COST_MAX_LINKS];
    int n = coll_axis_sizes(m, op, sizes, NULL);
    double p = 1;
    for (int i = 0; i < n; i++)
        p *= (double)sizes[i];
    return p;
}

/* local_bytes of `v`, 0 when onchip[v->id] says it never reaches HBM. */
static double hbm_bytes_of(const ir_module *m, const ir_value *v, const bool *onchip)
{
    if (onchip && v && v->id >= 0 && v->id < m->nvalues && onchip[v->id])
        return 0;
    return local_bytes(m, v);
}

void cost_op_estimate(const ir_module *m, const cost_hw *hw, const ir_op *op, ir_cost *result)
{
    cost_op_estimate_onchip(m, hw, op, NULL, result);
}

/* What every op's estimate starts from: its operands' and result's HBM
 * bytes (0 for values kept on chip) and the result's dtype. */
typedef struct op_io {
    double in, out;
    ir_dtype t;
} op_io;

/* The cost hooks, one per union arm of IR_OPS: op's estimate into *c
 * (zeroed but for `valid`). */
typedef void (*cost_op_fn)(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io,
                           ir_cost *c);
#define X(e, s, arm, lo, hi, tr) \
    static void cost_op_##arm(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c);
IR_OPS(X)
#undef X

static const cost_op_fn op_cost[IR_OP_COUNT] = {
#define X(e, s, arm, lo, hi, tr) [IR_OP_##e] = cost_op_##arm,
    IR_OPS(X)
#undef X
};

/* A time of HBM traffic alone: `bytes` over W_hbm. */
static void memory_only(const cost_hw *hw, double bytes, ir_cost *c)
{
    c->hbm_bytes = bytes;
    c->t_memory = c->hbm_bytes / hw->hbm_bw;
    c->time = c->t_memory;
    c->bound = IR_BOUND_MEMORY;
}

static void cost_op_einsum(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    c->flops = einsum_flops(m, op);
    /* A gather reads the indices and one table row per result row. */
    c->hbm_bytes = op->u.einsum.gather ? io->in - (double)ir_local_bytes(m, &op->operands[1]->type) + 2 * io->out
                                       : io->in + io->out;
    /* A CPU runs a reduction as codegen's loop nest, which may read a
     * cache line per element (cost_reduce.c). */
    if (hw->measured)
        c->hbm_bytes += (cost_reduce_read_factor(m, op) - 1) * io->in;
    roofline(hw, io->t, c);
    if (hw->measured) { /* measured FLOP/s are for the calibration's device count */
        /* A binary einsum is a BLAS call; a unary one (a reduction or a
         * transpose), a gather and a scatter are einc's own loops, which a
         * lone device runs on one core where its BLAS uses them all. */
        bool blas = op->noperands == 2 && !op->u.einsum.gather && !op->u.einsum.scatter;
        /* A GEMM's result elements cost apart from its FLOPs where the
         * profile measured it (cost_measured_gemm_seconds). */
        double elems = op->result ? (double)ir_local_elems(m, &op->result->type) : 0;
        c->t_compute = blas ? cost_measured_gemm_seconds(hw, io->t, c->flops, elems)
                            : c->flops / cost_measured_gemm_rate(hw, io->t, c->flops);
        c->time = fmax(c->t_compute, c->t_memory);
        c->bound = c->t_compute > c->t_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
        double k = blas ? cost_measured_blas_contention(hw, mesh_devices(m))
                        : cost_measured_contention(hw, mesh_devices(m));
        c->t_compute *= k;
        c->t_memory *= k;
        c->time *= k;
    }
}

static void cost_op_ew(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    c->flops = elementwise_flops(m, op);
    c->hbm_bytes = io->in + io->out;
    if (hw->measured)
        measured_elementwise(m, hw, op, c);
    else
        roofline(hw, io->t, c);
}

static void cost_op_coll(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    cost_coll_time ct;
    double v;
    if (!cost_op_coll_time(m, hw, op, &ct, &v)) {
        memory_only(hw, 2 * io->out, c); /* Slice: a local copy of the kept block */
        return;
    }
    double p = group_size(m, op);
    double share = p > 1 ? (p - 1) / p : 0; /* what leaves this device */
    c->comm_bytes = (op->kind == IR_OP_ALLREDUCE ? 2 : 1) * v * share;
    c->hbm_bytes = io->in + io->out;
    c->t_memory = c->hbm_bytes / hw->hbm_bw;
    c->t_comm = ct.time;
    c->time = ct.time;
    c->bound = ct.bound;
}

/* CollectivePermute: each device sends its block at most one way, all
 * pairs at once, so the op takes one transfer of the block: one hop when
 * the shift is one position (cost_hop_time, seed 001), else |delta| hops
 * of latency (the block is forwarded link by link).  Its bytes are read
 * and written once. */
static void cost_op_perm(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    int a = op->u.perm.axis;
    bool dcn = a >= 0 && a < m->mesh.naxes && m->mesh.axes[a].dcn;
    double bytes = (double)ir_local_bytes(m, &op->operands[0]->type);
    cost_coll_time ct = cost_hop_time(hw, bytes, dcn);
    int d = op->u.perm.delta < 0 ? -op->u.perm.delta : op->u.perm.delta;
    if (d > 1) {
        ct.t_latency *= d;
        ct.time = ct.t_latency + ct.t_bandwidth;
        ct.bound = ct.t_bandwidth > ct.t_latency ? IR_BOUND_BANDWIDTH : IR_BOUND_LATENCY;
    }
    c->comm_bytes = bytes;
    c->hbm_bytes = io->in + io->out;
    c->t_memory = c->hbm_bytes / hw->hbm_bw;
    c->t_comm = ct.time;
    c->time = ct.time;
    c->bound = ct.bound;
}

static void cost_op_ms(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    (void)io;
    cost_meshslice_op(m, hw, op, op->u.ms.k, c);
}

static void cost_op_loop(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    if (op->kind == IR_OP_LAYERSLICE)
        c->bound = IR_BOUND_MEMORY; /* a view of one layer of a stacked param: no data moves */
    else if (op->kind == IR_OP_LAYERSTACK) /* copies one layer's value into its block of the stack */
        memory_only(hw, 2 * (double)ir_local_bytes(m, &op->operands[0]->type), c);
    else { /* LoopBegin, LoopEnd: the carried value's copy */
        c->hbm_bytes = io->in + io->out;
        roofline(hw, io->t, c);
    }
}

static void cost_op_update(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    (void)io; /* in place: reads the slice once and writes it into the state */
    memory_only(hw, 2 * (double)ir_local_bytes(m, &op->operands[1]->type), c);
}

static void cost_op_grad(const ir_module *m, const cost_hw *hw, const ir_op *op, const op_io *io, ir_cost *c)
{
    /* Never priced: the autodiff pass replaces every Grad by the backward
     * ops before the cost pass runs (the pass manager sees to it). */
    (void)m, (void)hw, (void)op, (void)io;
    c->valid = false;
}

void cost_op_estimate_onchip(const ir_module *m, const cost_hw *hw, const ir_op *op,
                             const bool *onchip, ir_cost *result)
{
    ir_cost c;
    memset(&c, 0, sizeof c);
    c.valid = true;
    op_io io = {0, hbm_bytes_of(m, op->result, onchip), op->result ? op->result->type.dtype : IR_F32};
    /* A cast folded into an einsum's operand read (ir_folded_cast_source;
     * einc's runtime converts it block by block too, so on a calibrated
     * host as well): its source's bytes cross HBM in the einsum, and the
     * cast itself moves nothing. */
    bool fused_result = ir_folded_cast_source(m, op->result) != NULL;
    if (fused_result)
        io.out = 0;
    for (int i = 0; i < op->noperands && !fused_result; i++) {
        const ir_value *v = op->operands[i];
        const ir_value *src = ir_folded_cast_source(m, v);
        /* the operand's block as the einsum reads it, at the source's width */
        io.in += src ? local_bytes(m, v) * (double)ir_dtype_size(src->type.dtype) /
                           (double)ir_dtype_size(v->type.dtype)
                     : hbm_bytes_of(m, v, onchip);
    }
    if (!hw->measured && op->kind == IR_OP_EINSUM)
        io.t = cost_einsum_dtype(m, op);
    if ((unsigned)op->kind < IR_OP_COUNT)
        op_cost[op->kind](m, hw, op, &io, &c);
    else {
        c.hbm_bytes = io.in + io.out;
        roofline(hw, io.t, &c);
    }
    *result = c;
}

/* Global size of dim `dim` of m, 1 for an id out of range (the verifier
 * reports those). */
static double global_dim(const ir_module *m, int dim)
{
    return dim >= 0 && dim < m->ndims ? (double)m->dims[dim].size : 1;
}

/* n_operands x prod over the distinct labels of their global sizes, for
 * `labels[i]` the labels of operand i (ranks from the operand values) and
 * `result_labels` those of the result. */
static double global_points(const ir_module *m, const ir_op *op,
                            const int (*labels)[IR_MAX_RANK], const int *result_labels)
{
    int seen[IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK], nseen = 0;
    double points = 1;
    for (int i = 0; i <= op->noperands; i++) {
        const ir_value *v = i < op->noperands ? op->operands[i] : op->result;
        const int *l = i < op->noperands ? labels[i] : result_labels;
        for (int j = 0; v && j < v->type.rank; j++) {
            int s = 0;
            while (s < nseen && seen[s] != l[j])
                s++;
            if (s < nseen)
                continue;
            seen[nseen++] = l[j];
            points *= global_dim(m, l[j]);
        }
    }
    return (op->noperands > 0 ? op->noperands : 1) * points;
}

double cost_op_model_flops(const ir_module *m, const ir_op *op)
{
    if (op->remat)
        return 0; /* computed again (--remat): executed, not model FLOPs */
    switch (op->kind) {
    case IR_OP_EINSUM:
        /* The same count as einsum_flops, at global instead of local
         * sizes: every point of the iteration space once. */
        return op->u.einsum.gather || op->u.einsum.scatter ? 0
                                   : global_points(m, op, op->u.einsum.labels,
                                                   op->u.einsum.result_labels);
    case IR_OP_MESHSLICE:
        /* A 2D GEMM's 2 m n k (seed 004), whatever K and dataflow. */
        return global_points(m, op, op->u.ms.labels, op->u.ms.result_labels);
    default:
        return 0;
    }
}

double cost_op_elementwise_flops(const ir_module *m, const ir_op *op)
{
    if (op->kind != IR_OP_ELEMENTWISE || !op->result)
        return 0;
    double elems = 1;
    for (int d = 0; d < op->result->type.rank; d++)
        elems *= global_dim(m, op->result->type.dims[d]);
    return (double)arith_nodes(op) * elems;
}
