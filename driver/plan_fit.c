/*
 * plan_fit.c - when no candidate of `einc plan` fits the HBM, the smallest
 * change that would make one fit (plan.h, plan_find_fit).
 *
 * Seed 000 sizes a job by what a chip holds: the params, gradients and
 * optimizer state shrink with the devices that shard them, the kept
 * activations with the batch each device holds ("Data Parallelism" and
 * "FSDP": the memory per chip; seed 003, "Gradient checkpointing" for
 * remat).  So two changes can make the smallest candidate fit: more chips
 * (both parts shrink) or a smaller batch (the activations and a KV cache
 * shrink).  Each is searched by compiling the candidate again, doubling
 * the chips or halving the batch, so the reported figure is the cost
 * pass's peak and not an extrapolation: the kept activations need not
 * scale exactly (an axis stops dividing a dim, a collective's buffer is a
 * floor).  Rematerialisation is already every row's choice (plan_run).
 */
#include "plan.h"

#include <stdio.h>
#include <string.h>

#define FIT_MAX_HALVINGS 20 /* a batch of 2^20 halved to 1 */

int plan_batch_dim(const ir_module *proto, const plan_roles *r)
{
    for (int i = 0; i < proto->nvalues; i++) {
        const ir_value *v = proto->values[i];
        if (v->kind != IR_VAL_INPUT)
            continue;
        for (int d = 0; d < v->type.rank; d++)
            if (r->batch[v->type.dims[d]])
                return v->type.dims[d];
    }
    return -1;
}

/* The fewest chips at which `smallest` fits: its first mesh axis (the
 * batch and FSDP axis of every two-axis family) doubled until it does; of
 * a pipelined row, the axis after its stages' (more stages need more
 * layers), or the stages when it has no other. */
static void more_chips(plan_table *t, const plan_row *smallest, plan_compile_fn compile, void *ctx)
{
    int axis = smallest->pp && smallest->naxes > 1 ? 1 : 0;
    for (int64_t k = 2; t->chips * k <= PLAN_FIT_MAX_CHIPS; k *= 2) {
        plan_row row = *smallest;
        row.sizes[axis] *= k;
        plan_price_row(t, &row, compile, ctx);
        if (row.ok && row.fits) {
            t->fit.chips = t->chips * k;
            t->fit.at_chips = row;
            return;
        }
    }
}

/* The largest batch, the program's halved, at which `smallest` fits on
 * the table's chips.  Stops at the first size that does not compile
 * (the batch no longer divides over its axes). */
static void smaller_batch(plan_table *t, const ir_module *proto, const plan_row *smallest,
                          plan_compile_fn compile, plan_define_fn define, void *ctx)
{
    int d = t->fit.batch_dim;
    int64_t b = proto->dims[d].size;
    for (int i = 0; i < FIT_MAX_HALVINGS && b % 2 == 0; i++) {
        b /= 2;
        fe_define def = {proto->dims[d].name, b};
        define(ctx, &def);
        plan_row row = *smallest;
        plan_price_row(t, &row, compile, ctx);
        if (!row.ok)
            break;
        if (row.fits) {
            t->fit.batch = b;
            t->fit.at_batch = row;
            break;
        }
    }
    define(ctx, NULL);
}

void plan_find_fit(plan_table *t, const ir_module *proto, plan_compile_fn compile, plan_define_fn define, void *ctx)
{
    memset(&t->fit, 0, sizeof t->fit);
    t->fit.batch_dim = -1;
    if (t->chosen < 0 || t->rows[t->chosen].fits)
        return;
    t->fit.tried = true;
    const plan_row smallest = t->rows[t->chosen];
    more_chips(t, &smallest, compile, ctx);
    t->fit.batch_dim = plan_batch_dim(proto, &t->roles);
    if (t->fit.batch_dim >= 0) {
        snprintf(t->fit.batch_name, sizeof t->fit.batch_name, "%s", proto->dims[t->fit.batch_dim].name);
        smaller_batch(t, proto, &smallest, compile, define, ctx);
    }
}
