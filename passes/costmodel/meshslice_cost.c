/*
 * meshslice_cost.c - the estimated time of a MeshSlice op (cost_meshslice_op).
 *
 * The formula is seed 004's (3.2.2, "execution time estimation"): the loop
 * is a software pipeline whose prologue is the first iteration's partial
 * AllGathers, whose epilogue is the last partial einsum (and, for LS / RS,
 * the last partial ReduceScatter), and whose steady state costs the slowest
 * of its stages per iteration.  The stages come from the same pieces the
 * rest of einc uses: Eq. 5 of cost_ms_collective_time for a collective, the
 * roofline of cost_op.c (FLOPs / peak vs bytes / HBM bandwidth) for the einsum,
 * and for K > 1 the slicing copies of 3.1.2 (cost_ms_slice_copy_time, the
 * helper the autotuner's model uses) in the gather and scatter stages.
 *
 * The pipeline assumes the collectives move data while the GEMM computes,
 * as a TPU's ICI DMA engines do.  On a calibrated CPU host a collective is
 * copies and sums by the same cores that run the GEMMs (a communication
 * thread per device on the threads backend, progress inside MPI calls on
 * MPI), so unless every device has a spare core (cost_measured_overlaps)
 * the loop costs the sum of its K partial GEMMs and its partial
 * collectives: then K = 1 is never slower, and auto K picks it.
 */
#include <math.h>
#include <string.h>

#include "meshslice_model.h"

/* On a calibrated (CPU) profile, the split-dim length below which a
 * slice's GEMM loses efficiency, in place of the TPU's 128-wide systolic
 * array: on this machine 32-row slices ran as fast as 128-row ones and
 * 4-row slices 2 to 2.3x slower (docs/meshslice.md, "Measured on this
 * machine"), which a tile of 8 reproduces. */
#define MEASURED_GEMM_TILE 8.0

/* Per-device size of label `L` in the partial einsum: its size in an
 * operand after that operand's AllGather (the split label: the whole
 * gathered extent; the loop takes 1/K of it per iteration). */
static int64_t gathered_label_size(const ir_module *m, const ir_op *op, int L)
{
    for (int i = 0; i < op->noperands; i++) {
        const ir_type *t = &op->operands[i]->type;
        for (int j = 0; j < t->rank; j++) {
            if (op->u.ms.labels[i][j] != L)
                continue;
            int64_t size = ir_local_size(m, t, j);
            for (int q = 0; q < op->u.ms.nmoves; q++) {
                const ir_ms_move *mv = &op->u.ms.moves[q];
                if (mv->kind == IR_OP_ALLGATHER && mv->operand == i && mv->dim == j)
                    size *= m->mesh.axes[mv->axis].size;
            }
            return size;
        }
    }
    return 1;
}

void cost_meshslice_op(const ir_module *m, const cost_hw *hw, const ir_op *op, int k, ir_cost *c)
{
    memset(c, 0, sizeof *c);
    c->valid = true;
    ir_dtype t = op->result->type.dtype;
    cost_ms_params p;
    cost_ms_params_from_hw(hw, t, &p);
    double K = k > 0 ? k : 1;

    /* FLOPs: 2 * product over the distinct labels of their per-device size
     * in the (gathered) partial einsum, summed over the K iterations. */
    int seen[IR_MAX_OPERANDS * IR_MAX_RANK], nseen = 0;
    double flops = 2;
    for (int i = 0; i < op->noperands; i++)
        for (int j = 0; j < op->operands[i]->type.rank; j++) {
            int L = op->u.ms.labels[i][j], dup = 0;
            for (int s = 0; s < nseen; s++)
                dup |= seen[s] == L;
            if (dup)
                continue;
            seen[nseen++] = L;
            flops *= (double)gathered_label_size(m, op, L);
        }
    if (op->noperands == 1)
        flops /= 2;

    /* A calibrated profile's figures hold for its own device count. */
    double contention = hw->measured ? cost_measured_contention(hw, (double)ir_mesh_devices(&m->mesh)) : 1;
    double pre = 0, post = 0, comm_sum = 0, sent = 0;
    /* One iteration's slicing copies in the gather and scatter stages
     * (cost_ms_slice_copy_time, as meshslice_model.c prices them): the
     * copies of the stage's moves share the HBM, so they add. */
    double pre_copy = 0, post_copy = 0;
    /* Bytes one partial einsum reads and writes: the whole stationary
     * matrix every iteration (OS: C, read and written; LS: A; RS: B), the
     * moved matrices' gathered or partial buffers (added below). */
    double g_bytes = 0, hbm_copy = 0;
    bool moved[2] = {false, false};
    for (int q = 0; q < op->u.ms.nmoves; q++)
        if (op->u.ms.moves[q].operand >= 0 && op->u.ms.moves[q].operand < 2)
            moved[op->u.ms.moves[q].operand] = true;
    for (int i = 0; i < op->noperands && i < 2; i++)
        if (!moved[i])
            g_bytes += (double)ir_local_bytes(m, &op->operands[i]->type);
    if (op->u.ms.dataflow == IR_MS_OS)
        g_bytes += 2 * (double)ir_local_bytes(m, &op->result->type);
    for (int q = 0; q < op->u.ms.nmoves; q++) {
        const ir_ms_move *mv = &op->u.ms.moves[q];
        int64_t P = m->mesh.axes[mv->axis].size;
        const ir_value *v = mv->operand >= 0 ? op->operands[mv->operand] : op->result;
        double piece = (double)ir_local_bytes(m, &v->type) / K; /* one device's sub-shard */
        double tc = cost_ms_collective_time(&p, P, piece);
        if (hw->measured) /* the fit of `einc calibrate`, on the whole buffer of one call */
            tc = contention * cost_measured_coll_time(&hw->fit[mv->kind == IR_OP_ALLGATHER
                                                                      ? COST_FIT_ALLGATHER
                                                                      : COST_FIT_REDUCESCATTER],
                                                      (double)P, (double)P * piece,
                                                      (double)P).time;
        comm_sum += K * tc;
        sent += K * (double)(P - 1) * piece;
        g_bytes += (double)P * piece; /* the gathered (or partial) buffer of one iteration */
        double copy = cost_ms_slice_copy_time(&p, K * piece, (int64_t)K);
        if (copy > 0)
            hbm_copy += 2 * K * piece; /* every sub-shard read and written once */
        if (mv->kind == IR_OP_ALLGATHER)
            pre = fmax(pre, tc), pre_copy += copy;
        else
            post = fmax(post, tc), post_copy += copy;
    }
    pre += pre_copy;
    post += post_copy;
    /* A partial einsum whose split dim is shorter than the GEMM tile wastes
     * what it does not fill (meshslice_model.c pads every dim to mxu_tile;
     * only the split dim changes with K, so only it is padded here): this
     * is what keeps K from growing until slices are a few rows thin. */
    int64_t split = gathered_label_size(m, op, op->u.ms.split_label);
    double sub = (double)split / K;
    double tile = hw->measured ? MEASURED_GEMM_TILE : (double)(p.mxu_tile > 0 ? p.mxu_tile : 1);
    double pad = sub > 0 ? ceil(sub / tile) * tile / sub : 1;
    double g_compute = flops / K / cost_peak_flops(hw, t) * pad;
    double hbm = K * g_bytes + hbm_copy;
    double g_memory = g_bytes / hw->hbm_bw;
    double g = fmax(g_compute, g_memory) + p.t_gemm_launch;
    if (hw->measured) {
        /* The measured GEMM rate at the whole contraction's FLOPs, as the
         * cost pass uses for an Einsum on a calibrated profile.  Not the
         * rate at a slice's FLOPs: the curve's small GEMMs are fast because
         * their operands stay in cache, but a slice re-reads the whole
         * stationary matrix (the memory term), and thin slices measured 2x
         * slower here (docs/meshslice.md), not faster.  The tile padding
         * stays, as the guard against such slices. */
        g_compute = contention * flops / K / cost_measured_gemm_rate(hw, t, flops) * pad;
        g_memory *= contention;
        g = fmax(g_compute, g_memory);
    }
    double steady = fmax(g, fmax(pre, post));
    c->flops = flops;
    c->hbm_bytes = hbm;
    c->comm_bytes = sent;
    c->t_compute = K * g_compute;
    c->t_memory = K * (g_memory + pre_copy + post_copy);
    c->t_comm = comm_sum;
    if (cost_measured_overlaps(hw, (double)ir_mesh_devices(&m->mesh))) {
        c->time = pre + g + post + (K - 1) * steady;
    } else {
        /* Collectives and GEMMs are work for the same cores: every partial
         * collective and every partial GEMM takes its own time. */
        c->time = K * (g + pre_copy + post_copy) + comm_sum;
        steady = comm_sum > K * g ? fmax(pre, post) : g;
    }
    if (steady == g)
        c->bound = g_compute >= g_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
    else
        c->bound = IR_BOUND_BANDWIDTH;
}
