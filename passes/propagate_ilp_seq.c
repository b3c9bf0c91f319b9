/*
 * propagate_ilp_seq.c - sequence parallelism among the candidates of the
 * whole-program ILP (propagate_ilp.c, propagate_ilp_cands.c).
 *
 * The ILP offers a mesh axis only on the dims the program shards
 * somewhere.  Megatron sequence parallelism (seed 000, "TP with sequence
 * parallelism"; Korthikanti et al., "Reducing Activation Recomputation in
 * Large Transformer Models", MLSys 2023) shards the residual stream
 * [B, T, D] over T on the tensor-parallel axis between the attention and
 * MLP blocks, with an AllGather before each block and a ReduceScatter
 * after it in place of the AllReduce; nothing in the program shards T,
 * so without this file that plan is out of the ILP's reach.  Here:
 *
 * - the TP axes are the axes some param shards a dim over and no input
 *   does (an axis that splits an input's batch is a data-parallel one);
 * - the sequence dims are the dims nothing shards that an input has
 *   beside a sharded dim (T of Tok[B_X, T]);
 * - a TP axis may go to a sequence dim of an op whose every dim is a dim
 *   of some input or param: the residual stream, the norms, the MLP, the
 *   LM head and the loss, forward and backward, but not attention's
 *   [B, N, T, S] scores, whose key positions S no argument has (that is
 *   context parallelism, a strategy of its own);
 * - such a layout is kept only if every other used axis splits a dim the
 *   inputs shard over it (the batch): sequence parallelism runs beside
 *   data parallelism or FSDP on the other axes.
 * These bounds keep the ILP's growth on the examples small (docs/
 * propagation.md, "Sequence parallelism").
 */
#include "propagate_ilp.h"

void pass_ilp_seq_mark(ilp *s)
{
    const prop *p = s->p;
    const ir_module *m = p->m;
    ir_axes param = 0, input = 0;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] >= 0 || (v->kind != IR_VAL_PARAM && v->kind != IR_VAL_INPUT))
            continue;
        for (int d = 0; d < v->type.rank; d++) {
            int id = v->type.dims[d];
            ir_axes on = ir_sharding_dim_axes(&v->type.sh, d);
            if (id >= 0 && id < m->ndims) {
                s->seq[id].argument = true;
                if (v->kind == IR_VAL_INPUT)
                    s->seq[id].batch |= on;
            }
            if (v->kind == IR_VAL_PARAM)
                param |= on;
            else
                input |= on;
        }
    }
    ir_axes tp = param & ~input & p->used_axes;
    for (int i = 0; i < m->nvalues && tp; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] >= 0 || v->kind != IR_VAL_INPUT)
            continue;
        bool sharded = false;
        for (int d = 0; d < v->type.rank; d++)
            sharded = sharded || v->type.sh.naxes[d] > 0;
        for (int d = 0; d < v->type.rank && sharded; d++) {
            int id = v->type.dims[d];
            if (id >= 0 && id < m->ndims && !s->sharded_dim[id])
                s->seq[id].tp = tp;
        }
    }
}

bool pass_ilp_seq_option(const ilp *s, int k, int l, int a)
{
    const opinfo *oi = &s->p->ops[k];
    if (!(s->seq[oi->label[l]].tp & (1u << a)))
        return false;
    for (int j = 0; j < oi->nlabels; j++)
        if (!s->seq[oi->label[j]].argument)
            return false;
    return true;
}

bool pass_ilp_seq_splits(const ilp *s, int k, const layout *lay)
{
    const opinfo *oi = &s->p->ops[k];
    for (int a = 0; a < s->p->m->mesh.naxes; a++) {
        int l = lay->choice[a];
        if (l >= 0 && l < CH_CARRY && !s->sharded_dim[oi->label[l]] && (s->seq[oi->label[l]].tp & (1u << a)))
            return true;
    }
    return false;
}

bool pass_ilp_seq_keep(const ilp *s, int k, const layout *lay)
{
    const prop *p = s->p;
    const opinfo *oi = &p->ops[k];
    if (!pass_ilp_seq_splits(s, k, lay))
        return true;
    for (int a = 0; a < p->m->mesh.naxes; a++) {
        if (!(p->used_axes & (1u << a)) || p->m->mesh.axes[a].size <= 1)
            continue;
        int l = lay->choice[a];
        bool seq = l >= 0 && l < CH_CARRY && (s->seq[oi->label[l]].tp & (1u << a));
        bool batch = l >= 0 && l < CH_CARRY && (s->seq[oi->label[l]].batch & (1u << a));
        if (!seq && !batch)
            return false;
    }
    return true;
}
