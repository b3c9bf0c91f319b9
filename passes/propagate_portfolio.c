/*
 * propagate_portfolio.c - seed 000's whole-model strategies, each planned
 * and scored by the step the cost pass will report, against the plan the
 * search found.
 *
 * The ILP (propagate_ilp.c) minimises the serial objective: every op's
 * compute plus every reshard, in sequence.  The cost pass runs the
 * reshards of params (FSDP's weight gathers) on a prefetch stream beside
 * compute (seed 000: the gathers are "not on the critical path"), so a
 * plan that gathers more weights and moves fewer activations can have
 * the shorter step while the ILP rates it slower (docs/propagation.md,
 * "Limits").  Following Alpa's practice of scoring whole candidate plans
 * by the real objective (Zheng et al., OSDI'22, section 5: the inter-
 * operator pass profiles each stage's intra-operator plans and keeps the
 * fastest), this file plans a small portfolio of strategies and keeps
 * the one whose step (pass_prop_step_time, gathers overlapped) is the
 * shortest.  The strategies are seed 000's families (How to Scale Your
 * Model, part 5, "Training"), stated on the residual stream:
 *
 *   FSDP     [B_XY, T, D]  the batch over every axis (ZeRO-3)
 *   FSDP+TP  [B_X, T, D]   the batch over the data axes, TP on the others
 *   TP+SP    [B_X, T_Y, D] Megatron sequence parallelism on the TP axes
 *   TP       [B, T, D]     the residual stream replicated
 *
 * where, from the program's declared shardings: B is the one dim the
 * inputs shard, or when they shard several (seed 000's FSDP+TP listing
 * stores its input In[B_X, D_Y]), the one of those no param has (params
 * never carry the batch); the data axes (X) are the axes the inputs shard
 * B over; the TP axes (Y) those some param shards and are not data axes;
 * T (the sequence) a dim an input has beside B that nothing shards; D a
 * dim a param shards over a data axis (the model dim FSDP splits).  The
 * residual stream is every forward op's result whose dims are exactly B,
 * the sequence (if any) and a model dim, with no constraint written.  DP
 * is FSDP's residual stream (the params' declared shardings decide
 * between them, and they are not the planner's to change).
 *
 * Each strategy is planned as a user forcing it would get it: the
 * residual stream constrained, every op re-picked from a first forward
 * sweep, then the sweeps and joint moves (pass_prop_descend) to a fixed
 * point; TP with sequence parallelism then also gets the whole-program ILP
 * (propagate_ilp.c) and the sweeps after it, since its plan moves whole
 * blocks at once (the MLP, forward and backward, onto the sequence) where
 * no move of a few ops reaches, when the search's own ILP was small
 * (PORTFOLIO_ILP_COLS).  The constraints are then removed, which
 * leaves every reshard where it was (a value's one reshard into the
 * constrained sharding becomes the same reshard in front of its
 * consumers).  The plan with the shortest step among the search's and the
 * strategies' is kept; a strategy must be PORTFOLIO_MARGIN shorter than
 * the search's plan, and a plan that fits the HBM (the ILP's memory row)
 * beats one that does not.
 *
 * Repeated blocks (propagate_loop.c) are planned once for all their
 * layers, and a loop's carried value (the LoopBegin and LoopEnd results)
 * is no op's result, so it is not constrained itself: its sharding follows
 * the strategy through the values around it.  Before a strategy's sweeps
 * the carries are laid out again (pass_prop_loop_prepare): a loop entered
 * or left by a constrained residual value carries the strategy's sharding,
 * and a backward loop's cotangent starts as its primal's; after them the
 * carries nothing fixes are settled from the value entering, kept if the
 * objective is lower, as the search settles them.  The carries of the plan
 * kept are restored with its layouts.  Plans are scored by the step's
 * replay, which includes the reshards into the carried shardings (they
 * differ between strategies).
 * Where no param shards a dim over a data axis (DP, as
 * examples/llama2_13b*.ein declare it), the model dim is the one a forward
 * loop carries besides B and the sequence (carried_model), and the
 * strategies are DP+TP and DP with FSDP on the TP axes.  Not done: programs
 * without a single batch dim (the inputs shard two dims no param has, as
 * Tok[B_X, T_Y]), DP programs without a repeated block (nothing names
 * their model dim), and compiles with --meshslice=K (the user asked for
 * the search's 2D GEMM loops).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "propagate_internal.h"

#define PORTFOLIO_MARGIN 0.01 /* how much shorter a strategy's step must be (fraction): the
                                 cost model's rounding, not a preference for the search's plan */
#define PORTFOLIO_ILP_COLS 12000 /* sequence parallelism gets its own ILP only when the search's had at
                                    most this many columns (a 1-layer GPT's training step: 8,650, about
                                    a second; fortunes_transformer.ein's 18,753 would add 2,400
                                    candidates and many seconds) */

/* The dims and axes the strategies are stated with. */
typedef struct roles {
    int batch;      /* dim id of B: the one dim the inputs shard, or of several, the one no param has */
    int seq;        /* dim id of the sequence, or -1 */
    bool *model;    /* by dim id: a param shards it over a data axis */
    ir_axes data;   /* axes the inputs shard B over (size > 1) */
    ir_axes tp;     /* axes some param shards that are not data axes (size > 1) */
    bool dp;        /* no param shards a model dim over a data axis: the model dims are a
                       loop's carried ones (carried_model), and the strategies DP's */
} roles;

/* One strategy: the axes of B and of the sequence on the residual stream. */
typedef struct strategy {
    const char *name; /* seed 000's name of it, for the certificate's line (static) */
    const char *why;  /* plan_why when it is kept (static) */
    ir_axes batch, seq;
} strategy;

/* When no param shards a dim over a data axis (data parallelism, the
 * params whole on the data axes), the model dims are those a forward
 * loop carries besides the batch and the sequence: the carried tensor is
 * the residual stream (docs/language.md, "Repeated blocks").  True when
 * some param shards a model dim over a data axis (FSDP). */
static bool carried_model(const prop *p, roles *r)
{
    const ir_module *m = p->m;
    for (int id = 0; id < m->ndims; id++)
        if (r->model[id])
            return true;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN || op->phase != IR_PHASE_FORWARD || !op->result)
            continue;
        const ir_type *t = &op->result->type;
        bool has_batch = false;
        for (int d = 0; d < t->rank; d++)
            has_batch = has_batch || t->dims[d] == r->batch;
        for (int d = 0; has_batch && d < t->rank; d++)
            if (t->dims[d] >= 0 && t->dims[d] < m->ndims && t->dims[d] != r->batch && t->dims[d] != r->seq)
                r->model[t->dims[d]] = true;
    }
    return false;
}

/* What the declared shardings say of one dim (find_roles). */
typedef struct dim_use {
    ir_axes input; /* the axes (of `data`) some input shards it over */
    bool param;    /* some param has it, sharded or not */
    bool sharded;  /* some input or param shards it */
} dim_use;

/* The batch dim among the dims the inputs shard over the axes `data`
 * (use[id].input): the only one, or else the only one no param has (the
 * params never carry the batch: In[B_X, D_Y] beside W[D_X, F_Y] shards
 * B and D, and D is the model's).  -1 when there is none or no single
 * one. */
static int batch_dim(const dim_use *use, int ndims)
{
    int any = -1, own = -1, nany = 0, nown = 0;
    for (int id = 0; id < ndims; id++) {
        if (!use[id].input)
            continue;
        any = id;
        nany++;
        if (!use[id].param) {
            own = id;
            nown++;
        }
    }
    return nany == 1 ? any : nown == 1 ? own : -1;
}

/* Fills r from the declared shardings of inputs and params; false when
 * the program has no single batch dim (then there is no residual stream
 * to state the strategies on).  B is the one dim the inputs shard over
 * an axis, or when they shard several, the one of those no param has;
 * the data axes are those the inputs shard B over (with one such dim,
 * every axis some input shards). */
static bool find_roles(const prop *p, roles *r)
{
    const ir_module *m = p->m;
    ir_axes big = 0;
    for (int a = 0; a < m->mesh.naxes; a++)
        if (m->mesh.axes[a].size > 1)
            big |= 1u << a;
    ir_axes input = 0, param = 0;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        for (int d = 0; p->def[i] < 0 && d < v->type.rank; d++) {
            if (v->kind == IR_VAL_INPUT)
                input |= ir_sharding_dim_axes(&v->type.sh, d);
            else if (v->kind == IR_VAL_PARAM)
                param |= ir_sharding_dim_axes(&v->type.sh, d);
        }
    }
    input &= big & p->used_axes;
    r->batch = r->seq = -1;
    r->dp = false;
    dim_use *use = calloc((size_t)m->ndims + 1, sizeof *use);
    if (!use)
        return false;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] >= 0 || (v->kind != IR_VAL_INPUT && v->kind != IR_VAL_PARAM))
            continue;
        for (int d = 0; d < v->type.rank; d++) {
            int id = v->type.dims[d];
            if (id < 0 || id >= m->ndims)
                continue;
            ir_axes on = ir_sharding_dim_axes(&v->type.sh, d);
            use[id].sharded = use[id].sharded || on;
            use[id].param = use[id].param || v->kind == IR_VAL_PARAM;
            if (v->kind == IR_VAL_INPUT)
                use[id].input |= on & input;
        }
    }
    r->batch = batch_dim(use, m->ndims);
    r->data = r->batch >= 0 ? use[r->batch].input : 0;
    r->tp = param & ~r->data & big & p->used_axes;
    for (int i = 0; i < m->nvalues && r->batch >= 0; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] >= 0 || v->kind != IR_VAL_PARAM)
            continue;
        for (int d = 0; d < v->type.rank; d++) {
            int id = v->type.dims[d];
            if (id >= 0 && id < m->ndims && (ir_sharding_dim_axes(&v->type.sh, d) & r->data))
                r->model[id] = true;
        }
    }
    for (int i = 0; i < m->nvalues && r->batch >= 0; i++) {
        const ir_value *v = m->values[i];
        bool has_batch = false;
        for (int d = 0; d < v->type.rank; d++)
            has_batch = has_batch || v->type.dims[d] == r->batch;
        for (int d = 0; p->def[i] < 0 && v->kind == IR_VAL_INPUT && has_batch && d < v->type.rank; d++) {
            int id = v->type.dims[d];
            if (id >= 0 && id < m->ndims && !use[id].sharded && r->seq < 0)
                r->seq = id;
        }
    }
    free(use);
    if (r->batch >= 0)
        r->dp = !carried_model(p, r);
    return r->batch >= 0 && r->data;
}

/* Whether v is on the residual stream: a forward op's result without a
 * written constraint whose dims are B, the sequence (if any) and one model
 * dim, each once. */
static bool residual(const prop *p, const roles *r, const ir_value *v)
{
    if (!v->def || v->def->phase != IR_PHASE_FORWARD || v->has_constraint || v->id < 0 ||
        v->id >= p->nvalues || p->def[v->id] < 0)
        return false; /* a loop's carried value follows its loop's (plan_strategy) */
    int nb = 0, ns = 0, nm = 0;
    for (int d = 0; d < v->type.rank; d++) {
        int id = v->type.dims[d];
        nb += id == r->batch;
        ns += r->seq >= 0 && id == r->seq;
        nm += id >= 0 && id < p->m->ndims && r->model[id] && id != r->batch && id != r->seq;
    }
    return nb == 1 && ns == (r->seq >= 0) && nm == 1 && v->type.rank == 2 + (r->seq >= 0);
}

/* The sharding of v's dims under strategy s (axes in mesh order); false
 * when a dim would not divide by its axes. */
static bool strategy_sharding(const prop *p, const roles *r, const strategy *s, const ir_value *v,
                              ir_sharding *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->red = IR_RED_SUM;
    for (int d = 0; d < v->type.rank; d++) {
        int id = v->type.dims[d];
        ir_axes on = id == r->batch ? s->batch : r->seq >= 0 && id == r->seq ? s->seq : 0;
        for (int a = 0; a < p->m->mesh.naxes; a++)
            if (on & (1u << a))
                sh->axes[d][sh->naxes[d]++] = (int8_t)a;
        if (on && p->m->dims[id].size % ir_mesh_axes_size(&p->m->mesh, on) != 0)
            return false;
    }
    return true;
}

/* After a strategy's sweeps: the carries of the loops that nothing fixes
 * (a backward loop's cotangent, first laid out like its primal) are taken
 * from the value entering them, as the search does after its first sweeps
 * (pass_prop_loop_settle), and the sweeps run again; kept only if the
 * objective is lower, else the carries and layouts are put back.
 * `saved` holds nloops shardings, `keep` p->nops layouts (scratch). */
static void settle_carries(prop *p, ir_sharding *saved, int nloops, layout *keep)
{
    pass_prop_loop_carries(p, saved, nloops);
    for (int k = 0; k < p->nops; k++)
        keep[k] = p->ops[k].lay;
    double before = pass_prop_total_cost(p).time;
    if (!pass_prop_loop_settle(p))
        return;
    pass_prop_sweep(p);
    if (pass_prop_total_cost(p).time < before)
        return;
    pass_prop_loop_restore(p, saved, nloops);
    for (int k = 0; k < p->nops; k++)
        p->ops[k].lay = keep[k];
}

/* Plans strategy s on the residual values res[0..n-1] (constrained for
 * the plan, unconstrained after): the loops' carries laid out from the
 * constraints (pass_prop_loop_prepare: a loop entered or left by a
 * residual value carries the strategy's sharding, a backward loop first
 * its primal's), a first forward sweep, the sweeps and joint moves of the
 * first phase, the carries nothing fixes settled, and for sequence
 * parallelism the ILP and the sweeps after it.  `saved` (nloops
 * shardings) and `keep` (p->nops layouts) are scratch.  False when the
 * strategy cannot be laid out (the carries may then be changed: the
 * caller restores them). */
static bool plan_strategy(prop *p, const roles *r, const strategy *s, ir_value **res, int n,
                          ir_sharding *saved, int nloops, layout *keep)
{
    for (int i = 0; i < n; i++)
        if (!strategy_sharding(p, r, s, res[i], &res[i]->constraint))
            return false;
    for (int i = 0; i < n; i++)
        res[i]->has_constraint = true;
    int unknown = nloops ? pass_prop_loop_prepare(p) : 0;
    bool ok = true;
    for (int k = 0; k < p->nops; k++)
        p->ops[k].decided = false;
    for (int k = 0; k < p->nops; k++)
        ok = pass_prop_choose(p, k) >= 0 && ok;
    if (ok)
        pass_prop_descend(p);
    if (ok && unknown)
        settle_carries(p, saved, nloops, keep);
    if (ok && s->seq && p->ilp_time > 0 && p->ilp.cols > 0 && p->ilp.cols <= PORTFOLIO_ILP_COLS) {
        pass_prop_ilp_report rep; /* the search's report (p->ilp) stays the certificate's */
        memset(&rep, 0, sizeof rep);
        p->wide = true;
        if (pass_prop_ilp(p, p->ilp_time, &rep) > 0)
            pass_prop_sweep(p);
        p->wide = false;
    }
    for (int i = 0; i < n; i++)
        res[i]->has_constraint = false;
    return ok;
}

/* The strategies of roles r, each once (strategies that coincide on the mesh are one): at most four. */
static int strategies(const roles *r, strategy *out)
{
    /* With the params whole on the data axes, the batch over every axis
     * gathers the weights over the TP axes only: FSDP there, DP on the
     * data axes; the batch over the data axes is DP with TP. */
    strategy all[4] = {
        {r->dp ? "DP with FSDP on the TP axes" : "FSDP",
         r->dp ? "seed 000's DP with FSDP on the TP axes (the batch over every axis on the residual stream) is "
                 "kept: its step, with parameter gathers overlapped, is shorter than the search's plan"
               : "seed 000's FSDP (the batch over every axis on the residual stream) is kept: its step, with "
         "parameter gathers overlapped, is shorter than the search's plan", r->data | r->tp, 0},
        {r->dp ? "DP+TP" : "FSDP+TP",
         r->dp ? "seed 000's DP+TP (the batch over the data axes on the residual stream) is kept: its step, "
                 "with parameter gathers overlapped, is shorter than the search's plan"
               : "seed 000's FSDP+TP (the batch over the data axes on the residual stream) is kept: its step, with "
         "parameter gathers overlapped, is shorter than the search's plan", r->data, 0},
        {"TP with sequence parallelism",
         "seed 000's TP with sequence parallelism (the sequence over the TP axes on the residual stream) is "
         "kept: its step, with parameter gathers overlapped, is shorter than the search's plan", r->data,
         r->seq >= 0 ? r->tp : 0},
        {"TP", "seed 000's TP (the residual stream replicated) is kept: its step, with parameter gathers "
         "overlapped, is shorter than the search's plan", 0, 0},
    };
    int n = 0;
    for (int i = 0; i < 4; i++) {
        bool seen = false;
        for (int j = 0; j < n; j++)
            seen = seen || (out[j].batch == all[i].batch && out[j].seq == all[i].seq);
        if (!seen)
            out[n++] = all[i];
    }
    return n;
}

/* Whether the current plan fits the HBM by the ILP's memory row (always,
 * when the row was not needed). */
static bool fits(const prop *p)
{
    return !(p->ilp.mem_hbm > 0) || pass_prop_memory(p) <= p->ilp.mem_hbm;
}

/* The step a plan is scored by: the planner's replay of the cost pass's
 * two streams, the reshards into the loops' carried shardings included
 * (they differ between strategies). */
static double score(prop *p)
{
    return pass_prop_step_time(p);
}

int pass_prop_portfolio(prop *p)
{
    ir_module *m = p->m;
    /* --meshslice=K asks for the 2D GEMM loops of the search's layouts;
     * --meshslice=auto leaves the choice to the step, as here. */
    if (!p->hw || p->nops == 0 || p->meshslice_k)
        return 0;
    int nloops = pass_prop_loop_carries(p, NULL, 0);
    roles r;
    r.model = calloc((size_t)m->ndims + 1, sizeof *r.model);
    ir_value **res = malloc((size_t)m->nvalues * sizeof *res + 1);
    layout *best = malloc((size_t)p->nops * sizeof *best + 1);
    layout *keep = malloc((size_t)p->nops * sizeof *keep + 1);
    /* The loops' carries: of the best plan so far, and scratch. */
    ir_sharding *best_carry = malloc((size_t)nloops * sizeof *best_carry + 1);
    ir_sharding *saved = malloc((size_t)nloops * sizeof *saved + 1);
    int n = 0, adopted = 0;
    if (!r.model || !res || !best || !keep || !best_carry || !saved || !find_roles(p, &r))
        goto out;
    for (int i = 0; i < m->nvalues; i++)
        if (residual(p, &r, m->values[i]))
            res[n++] = m->values[i];
    if (n == 0)
        goto out;
    for (int k = 0; k < p->nops; k++)
        best[k] = p->ops[k].lay;
    pass_prop_loop_carries(p, best_carry, nloops);
    double best_step = score(p);
    bool best_fit = fits(p), wide = p->wide;
    const char *why = NULL, *name = NULL;
    strategy st[4];
    int ns = strategies(&r, st);
    p->wide = false;
    for (int i = 0; i < ns; i++) {
        if (!plan_strategy(p, &r, &st[i], res, n, saved, nloops, keep))
            continue;
        double step = score(p);
        bool fit = fits(p);
        /* The first strategy kept must beat the search's plan by the margin;
         * later ones need only beat it. */
        bool better = fit != best_fit ? fit : step < best_step * (1.0 - (why ? 0.0 : PORTFOLIO_MARGIN));
        if (p->ctx->log)
            fprintf(p->ctx->log, "propagate: strategy seed 000's %s: step %.4g us (parameter gathers overlapped)%s\n",
                    st[i].name, step * 1e6,
                    better ? ", the best so far" : "");
        if (!better)
            continue;
        for (int k = 0; k < p->nops; k++)
            best[k] = p->ops[k].lay;
        pass_prop_loop_carries(p, best_carry, nloops);
        best_step = step;
        best_fit = fit;
        why = st[i].why;
        name = st[i].name;
    }
    for (int k = 0; k < p->nops; k++) {
        p->ops[k].lay = best[k];
        p->ops[k].decided = true;
    }
    pass_prop_loop_restore(p, best_carry, nloops);
    p->wide = why ? false : wide;
    if (why) {
        p->plan_why = why;
        p->plan_strategy = name;
        adopted = 1;
    }
out:
    free(r.model);
    free(res);
    free(best);
    free(keep);
    free(best_carry);
    free(saved);
    return adopted;
}
