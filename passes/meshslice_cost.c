/*
 * meshslice_cost.c - the estimated time of a MeshSlice op (meshslice.h).
 *
 * The formula is seed 004's (3.2.2, "execution time estimation"): the loop
 * is a software pipeline whose prologue is the first iteration's partial
 * AllGathers, whose epilogue is the last partial einsum (and, for LS / RS,
 * the last partial ReduceScatter), and whose steady state costs the slowest
 * of its stages per iteration.  The stages come from the same pieces the
 * rest of einc uses: Eq. 5 of ms_collective_time for a collective, the cost
 * pass's roofline (FLOPs / peak vs bytes / HBM bandwidth) for the einsum.
 */
#include <math.h>
#include <string.h>

#include "meshslice.h"
#include "meshslice_model.h"

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

void pass_meshslice_cost(const ir_module *m, const cost_hw *hw, const ir_op *op, int k, ir_cost *c)
{
    memset(c, 0, sizeof *c);
    c->valid = true;
    ir_dtype t = op->result->type.dtype;
    ms_params p;
    ms_params_from_hw(hw, t, &p);
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

    double pre = 0, post = 0, comm_sum = 0, sent = 0, in_bytes = 0;
    for (int i = 0; i < op->noperands; i++)
        in_bytes += (double)ir_local_bytes(m, &op->operands[i]->type);
    double out_bytes = (double)ir_local_bytes(m, &op->result->type);
    double hbm = in_bytes + out_bytes;
    for (int q = 0; q < op->u.ms.nmoves; q++) {
        const ir_ms_move *mv = &op->u.ms.moves[q];
        int64_t P = m->mesh.axes[mv->axis].size;
        const ir_value *v = mv->operand >= 0 ? op->operands[mv->operand] : op->result;
        double piece = (double)ir_local_bytes(m, &v->type) / K; /* one device's sub-shard */
        double tc = ms_collective_time(&p, P, piece);
        comm_sum += K * tc;
        sent += K * (double)(P - 1) * piece;
        hbm += (double)P * piece * K; /* the gathered (or partial) buffers, written and read */
        if (mv->kind == IR_OP_ALLGATHER)
            pre = fmax(pre, tc);
        else
            post = fmax(post, tc);
    }
    /* A partial einsum whose split dim is shorter than the GEMM tile wastes
     * what it does not fill (meshslice_model.c pads every dim to mxu_tile;
     * only the split dim changes with K, so only it is padded here): this
     * is what keeps K from growing until slices are a few rows thin. */
    int64_t split = gathered_label_size(m, op, op->u.ms.split_label);
    double sub = (double)split / K;
    double tile = (double)(p.mxu_tile > 0 ? p.mxu_tile : 1);
    double pad = sub > 0 ? ceil(sub / tile) * tile / sub : 1;
    double g_compute = flops / K / cost_peak_flops(hw, t) * pad;
    double g_memory = hbm / K / hw->hbm_bw;
    double g = fmax(g_compute, g_memory) + p.t_gemm_launch;
    double steady = fmax(g, fmax(pre, post));
    c->flops = flops;
    c->hbm_bytes = hbm;
    c->comm_bytes = sent;
    c->t_compute = K * g_compute;
    c->t_memory = K * g_memory;
    c->t_comm = comm_sum;
    c->time = pre + g + post + (K - 1) * steady;
    if (steady == g)
        c->bound = g_compute >= g_memory ? IR_BOUND_COMPUTE : IR_BOUND_MEMORY;
    else
        c->bound = IR_BOUND_BANDWIDTH;
}
