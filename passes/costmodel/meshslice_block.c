/*
 * meshslice_block.c - the non-GEMM layers of a Transformer block, priced
 * by the profile's rates, for the MeshSlice whole-step study
 * (meshslice_model.h, cost_ms_nongemm_time; docs/meshslice.md, "The
 * whole block").
 */
#include "meshslice_model.h"

#include <math.h>
#include <string.h>

/* Appends one layer: `flops` on the matrix units, `elems` elements moved
 * through HBM, all per device. */
static void add_layer(const cost_ms_params *p, cost_ms_nongemm *out, const char *name, double flops, double elems)
{
    cost_ms_nongemm_layer *l = &out->layer[out->n++];
    l->name = name;
    l->flops = flops;
    l->bytes = elems * p->elem_bytes;
    double rate = p->peak_flops * p->gemm_eff;
    l->time = fmax(rate > 0 ? flops / rate : 0.0, p->hbm_bw > 0 ? l->bytes / p->hbm_bw : 0.0);
    out->time += l->time;
    out->flops += flops;
}

int cost_ms_nongemm_time(const cost_ms_params *p, const cost_ms_block_dims *d, int64_t chips, bool train,
                         cost_ms_nongemm *out)
{
    memset(out, 0, sizeof *out);
    if (chips < 1 || d->batch < 1 || d->seq < 1 || d->heads < 1 || d->head_dim < 1 || d->model < 1 || d->ffn < 1)
        return -1;
    double n = (double)chips;
    double tokens = (double)d->batch * (double)d->seq / n;        /* per device */
    double qkv = tokens * (double)d->heads * (double)d->head_dim;  /* one of Q, K, V */
    double scores = tokens * (double)d->seq * (double)d->heads;   /* B H S S / n */
    double model = tokens * (double)d->model, ffn = tokens * (double)d->ffn;
    /* The backward pass: two products per forward product (the gradients
     * of both operands), three elements per element elsewhere. */
    double prod = train ? 3.0 : 1.0, elt_fwd = 1.0, elt_bwd = train ? 1.5 : 0.0;
    double flops = 2.0 * scores * (double)d->head_dim;             /* per product */
    add_layer(p, out, "attention scores (Q K^T)", prod * flops, prod * (2 * qkv + scores));
    add_layer(p, out, "attention context (P V)", prod * flops, prod * (scores + 2 * qkv));
    add_layer(p, out, "softmax", 0, (elt_fwd + elt_bwd) * 2 * scores);
    add_layer(p, out, "LayerNorm x2", 0, (elt_fwd + elt_bwd) * 2 * 2 * model);
    add_layer(p, out, "GeLU", 0, (elt_fwd + elt_bwd) * 2 * ffn);
    /* An add reads two elements and writes one, forward and backward. */
    add_layer(p, out, "residual add x2", 0, (train ? 2.0 : 1.0) * 2 * 3 * model);
    return 0;
}
