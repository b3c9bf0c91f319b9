/*
 * plan.c - auto-sharding: seed 000's strategy families on every mesh of N
 * chips, each compiled and priced by the whole pipeline, the fastest that
 * fits chosen (plan.h).
 *
 * The strategies write the storage of inputs and params as seed 000 does
 * ("How to Scale Your Model", part 5, training parallelism): data
 * parallelism shards the batch of every input over X and keeps the params
 * whole; FSDP (ZeRO-3) also shards each param's model dim over X, gathered
 * for use; Megatron tensor parallelism shards each param's other dim (the
 * hidden dim F, the heads N, the vocabulary V) over its axis; FSDP+TP does
 * both over X and Y.  Everything else (activations, gradients, the
 * optimizer state, the collectives) is the whole-program planner's choice
 * (passes/propagate_ilp.c), so a family is a starting storage, not a
 * fixed plan, and the cost pass's step decides between them
 * (plan_choose.c).  Pipeline
 * parallelism (seed 000's fourth strategy) shards a `repeat` block's
 * layer dim over the first axis and any family over the others; the
 * pipeline pass then picks the microbatches and the cost pass prices the
 * schedule's step (add_pp_rows, fill_row).
 */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"

/* ---- roles ---- */

int plan_roles_of(const ir_module *m, plan_roles *r)
{
    memset(r, 0, sizeof *r);
    r->model = -1;
    if (m->ndims > (int)(sizeof r->batch / sizeof r->batch[0]))
        return -1;
    r->ndims = m->ndims;
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LAYERSLICE && op->noperands == 1 && op->operands[0]->type.rank > 0)
            r->layer[op->operands[0]->type.dims[0]] = true;
    int count[64] = {0};
    bool *in_param = r->in_param;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_PARAM)
            continue;
        for (int d = 0; d < v->type.rank; d++)
            if (!r->layer[v->type.dims[d]]) {
                count[v->type.dims[d]]++;
                in_param[v->type.dims[d]] = true;
            }
    }
    bool in_input[64] = {false};
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_INPUT && v->kind != IR_VAL_STATE)
            continue;
        for (int d = 0; d < v->type.rank; d++)
            if (!in_param[v->type.dims[d]] && !r->layer[v->type.dims[d]]) {
                r->batch[v->type.dims[d]] = true;
                break;
            }
        if (v->kind == IR_VAL_INPUT)
            for (int d = 0; d < v->type.rank; d++)
                in_input[v->type.dims[d]] = true;
    }
    /* The model dim: the one most params have; between equals one an input
     * has (seed 000's D of In[B, D], not the MLP's hidden F), the larger. */
    for (int d = 0; d < m->ndims; d++) {
        if (count[d] == 0 || r->batch[d])
            continue;
        int c = r->model;
        if (c < 0 || count[d] > count[c] ||
            (count[d] == count[c] && (in_input[d] > in_input[c] ||
                                      (in_input[d] == in_input[c] && m->dims[d].size > m->dims[c].size))))
            r->model = d;
    }
    return 0;
}

/* ---- the shardings of one family ---- */

/* Position in dims[0..rank-1] that `want` accepts and whose size divides
 * by `parts`, not `avoid`; -1 if none. */
static int pick(const ir_module *m, const plan_roles *r, int rank, const int *dims, int64_t parts, int avoid,
                int kind)
{
    for (int i = 0; i < rank; i++) {
        int d = dims[i];
        if (i == avoid || r->layer[d] || m->dims[d].size % parts != 0)
            continue;
        if ((kind == 0 && r->batch[d]) || (kind == 1 && d == r->model) ||
            (kind == 2 && d != r->model && !r->batch[d]))
            return i;
    }
    return -1;
}

/* The mesh axes family f shards a role over (ids into m's mesh) and how
 * many devices they make: a one-axis family uses every axis of the mesh
 * (on `einc analyze`'s meshes, e.g. DP over X and Y at once); a two-axis
 * family puts the tensor-parallel dims on the last axis and the batch and
 * FSDP dims on the others.  `tp` picks the tensor-parallel group.  A
 * pipelined row (`pp`) keeps the first axis for its stages. */
static int64_t axis_group(const ir_module *m, plan_family f, bool pp, bool tp, int *axes, int *n)
{
    bool two = f == PLAN_FSDP_TP || f == PLAN_DP_TP;
    int lo = pp ? 1 : 0, hi = m->mesh.naxes;
    if (two && tp)
        lo = hi - 1;
    else if (two)
        hi--;
    int64_t parts = 1;
    *n = 0;
    for (int k = lo; k < hi; k++) {
        axes[(*n)++] = k;
        parts *= m->mesh.axes[k].size;
    }
    return parts;
}

/* Shards position p of a value over the group's axes, in order. */
static void push_group(ir_sharding *sh, int p, const int *axes, int n)
{
    for (int k = 0; k < n && p >= 0; k++)
        ir_sharding_push(sh, p, axes[k]);
}

/* fe_autoshard.assign for row `ctx`. */
static void assign(void *ctx, const ir_module *m, ir_value_kind kind, const char *name, int rank,
                   const int *dims, ir_sharding *sh)
{
    (void)name;
    const plan_row *row = ctx;
    const plan_roles *r = row->roles;
    plan_family f = row->family;
    /* Pipeline parallelism (seed 000, "流水线并行"; docs/pipeline.md): the
     * layer dim of every stacked param and state over the first axis, so
     * the pipeline pass gives each stage its own layers. */
    if (row->pp)
        for (int i = 0; i < rank; i++)
            if (r->layer[dims[i]] && m->dims[dims[i]].size % row->sizes[0] == 0) {
                ir_sharding_push(sh, i, 0);
                break;
            }
    int xa[IR_MAX_AXES], ya[IR_MAX_AXES], nx, ny;
    int64_t x = axis_group(m, f, row->pp, false, xa, &nx), y = axis_group(m, f, row->pp, true, ya, &ny);
    if (nx == 0 || ny == 0)
        return;
    if (kind != IR_VAL_PARAM) {
        int batch = -1;
        if (f != PLAN_TP) {
            batch = pick(m, r, rank, dims, x, -1, 0);
            push_group(sh, batch, xa, nx);
        }
        /* A state written from the params' outputs (a KV cache) is sharded
         * like the rows written into it, over the tensor-parallel dim the
         * params share with it (the KV heads), so each device keeps its
         * own heads' cache and the write stays local (seed 002,
         * "Distributing inference over multiple accelerators": the cache
         * sharded over the KV heads, and over the batch beyond them, which
         * DP+TP's X does). */
        if (kind == IR_VAL_STATE && f != PLAN_DP && f != PLAN_FSDP)
            push_group(sh, pick(m, r, rank, dims, y, batch, 2), ya, ny);
        return;
    }
    int model = -1;
    if (f == PLAN_FSDP || f == PLAN_FSDP_TP) {
        model = pick(m, r, rank, dims, x, -1, 1);
        push_group(sh, model, xa, nx);
    }
    if (f == PLAN_TP || f == PLAN_FSDP_TP || f == PLAN_DP_TP)
        push_group(sh, pick(m, r, rank, dims, y, model, 2), ya, ny);
}

/* ---- running the candidates ---- */

/* Seconds of the collectives (in all, and on the busiest mesh axis: each
 * collective counts on every axis of its group), of the compute ops and of
 * the matmuls (einsums at their roofline: FLOPs at the peak, seed 000's
 * T_math, or HBM traffic when longer, seed 002's memory-bound decode;
 * MeshSlice GEMMs) of m, per device, each op once per run of its block. */
static void comm_compute(const ir_module *m, double *comm, double *comm_axis, double *compute, double *math)
{
    double load[IR_MAX_AXES] = {0};
    *comm = *comm_axis = *compute = *math = 0.0;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->cost.valid)
            continue;
        double trips = (double)ir_op_trips(m, op);
        if (ir_op_is_reshard(op->kind) && op->kind != IR_OP_SLICE) {
            *comm += op->cost.time * trips;
            for (int k = 0; k < op->u.coll.naxes; k++) /* verified: mesh axis ids */
                load[op->u.coll.axes[k]] += op->cost.time * trips;
        } else if (op->kind == IR_OP_MESHSLICE) {
            /* The loop's time beyond its GEMMs is its communication. */
            double c = fmax(0.0, op->cost.time - op->cost.t_compute) * trips;
            *comm += c;
            for (int k = 0; k < op->u.ms.nmoves; k++)
                load[op->u.ms.moves[k].axis] += c;
            *compute += op->cost.t_compute * trips;
            *math += op->cost.t_compute * trips;
        } else {
            *compute += op->cost.time * trips;
            if (op->kind == IR_OP_EINSUM)
                *math += op->cost.time * trips;
        }
    }
    for (int a = 0; a < IR_MAX_AXES; a++)
        *comm_axis = fmax(*comm_axis, load[a]);
}

void plan_row_autoshard(const plan_row *row, fe_autoshard *a)
{
    memset(a, 0, sizeof *a);
    a->keep_mesh = true;
    a->assign = assign;
    a->ctx = (void *)row;
}

void plan_row_mesh_autoshard(const plan_row *row, fe_autoshard *a)
{
    memset(a, 0, sizeof *a);
    a->naxes = row->naxes;
    for (int k = 0; k < row->naxes; k++) {
        a->names[k] = (char)("XYZ"[k]);
        a->sizes[k] = row->sizes[k];
    }
    a->assign = assign;
    a->ctx = (void *)row;
}

void plan_autoshard(const plan_table *t, int i, fe_autoshard *a)
{
    plan_row_mesh_autoshard(&t->rows[i], a);
}

ir_module *plan_compile_quiet(ir_module *(*compile)(void *ctx, diag_ctx *d), void *ctx, char *why, size_t n)
{
    char *text = NULL;
    size_t size = 0;
    FILE *errs = open_memstream(&text, &size);
    diag_ctx d;
    diag_init(&d, NULL, NULL, 0);
    d.out = errs ? errs : stderr;
    ir_module *m = compile(ctx, &d);
    if (errs)
        fclose(errs);
    if (!m || !m->totals.valid) {
        /* The first line of the first error says why. */
        const char *w = text && *text ? text : "the program does not compile on this mesh";
        size_t len = strcspn(w, "\n");
        snprintf(why, n, "%.*s", (int)(len < n ? len : n - 1), w);
        ir_module_free(m);
        m = NULL;
    }
    free(text);
    return m;
}

/* plan_compile_quiet's closure for one row. */
typedef struct row_call {
    plan_compile_fn compile;
    void *ctx;
    const fe_autoshard *a;
    ir_remat remat;
} row_call;

static ir_module *call_row(void *ctx, diag_ctx *d)
{
    const row_call *c = ctx;
    return c->compile(c->ctx, c->a, c->remat, d);
}

/* The param value v reads, through layer slices and resharding, or NULL. */
static const ir_value *param_of(const ir_value *v)
{
    while (v && v->kind == IR_VAL_OP && v->def && v->def->noperands >= 1 &&
           (v->def->kind == IR_OP_LAYERSLICE || ir_op_is_reshard(v->def->kind)))
        v = v->def->operands[0];
    return v && v->kind == IR_VAL_PARAM ? v : NULL;
}

bool plan_trains(const ir_module *m)
{
    for (int i = 0; i < m->noutputs; i++)
        if (m->outputs[i].update && m->outputs[i].update->kind == IR_VAL_PARAM)
            return true;
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->phase != IR_PHASE_FORWARD)
            return true;
    return false;
}

/* Whether m trains and whether its plan moves weights: an AllGather of a
 * param, FSDP's signature (seed 000).  A program that serves and keeps
 * its weights in place moves activations instead (seed 002,
 * "Generation": FSDP is infeasible for generation, weights stay
 * stationary). */
static void plan_kind(const ir_module *m, bool *trains, bool *gathers)
{
    *trains = plan_trains(m);
    *gathers = false;
    for (const ir_op *op = m->first; op && !*gathers; op = op->next)
        *gathers = op->kind == IR_OP_ALLGATHER && param_of(op->operands[0]);
}

/* Row figures from compiled module m. */
static void fill_row(const plan_table *t, plan_row *row, const ir_module *m, ir_remat remat)
{
    row->step = m->totals.step_time;
    row->mfu = m->totals.mfu;
    row->memory = m->totals.peak_memory;
    row->exposed = m->totals.exposed_comm_time;
    comm_compute(m, &row->comm, &row->comm_axis, &row->compute, &row->math);
    const ir_pipe_totals *p = &m->totals.pipe;
    if (p->valid && p->step > 0) {
        /* A pipelined module is one microbatch on one stage, so its serial
         * totals are not a step (passes/cost_pipe.c): the schedule's step
         * and the fullest stage's memory are.  The memory is the larger of
         * that and the module's own peak (one microbatch, in program
         * order, with its transients: what `-o` warns against).  MFU
         * scales by the work of the step, M microbatches through Z
         * stages' layers, over its time; the op times of M microbatches
         * stand for its compute and communication (the hops are in the
         * step, not in these). */
        double mb = (double)p->microbatches;
        row->mfu = m->totals.mfu * mb * p->stages * m->totals.step_time / p->step;
        row->step = p->step;
        row->memory = fmax(p->stage_memory, m->totals.peak_memory);
        row->exposed *= mb;
        row->comm *= mb;
        row->comm_axis *= mb;
        row->compute *= mb;
        row->math *= mb;
        row->microbatches = p->microbatches;
        row->schedule = p->forward ? "forward" : pp_schedule_name((pp_schedule)p->schedule);
        row->bubble = p->bubble;
        row->makespan = p->pipeline;
    }
    row->fits = row->memory <= t->hw->hbm_bytes;
    plan_kind(m, &row->trains, &row->gathers_params);
    row->remat = remat;
}

/* The options go through t->option and are reset after. */
plan_row plan_price_once(const plan_table *t, const plan_row *row, ir_remat remat, int zero, const char *schedule,
                         plan_compile_fn compile, void *ctx)
{
    static const char *const stage[] = {"0", "1", "2"};
    plan_row r = *row;
    r.estimate = 0.0; /* figures of this compile, no earlier estimate's (plan_cut.c sets its own) */
    r.estimated = false;
    fe_autoshard a;
    plan_row_mesh_autoshard(&r, &a);
    row_call c = {compile, ctx, &a, remat};
    if (schedule)
        t->option(ctx, "schedule", schedule);
    if (zero > 0)
        t->option(ctx, "zero", stage[zero]);
    ir_module *m = plan_compile_quiet(call_row, &c, r.why, sizeof r.why);
    if (schedule)
        t->option(ctx, "schedule", NULL);
    if (zero > 0)
        t->option(ctx, "zero", NULL);
    r.ok = m != NULL;
    if (r.ok)
        fill_row(t, &r, m, remat);
    r.zero = zero;
    ir_module_free(m);
    return r;
}

void plan_price_row(const plan_table *t, plan_row *row, plan_compile_fn compile, void *ctx)
{
    plan_row best = plan_price_once(t, row, t->remat, 0, NULL, compile, ctx);
    if (best.ok && !best.fits && best.trains && t->choose_zero && t->option) {
        /* ZeRO first: sharding the optimizer state over the data axes
         * moves the same bytes (ReduceScatter + AllGather for DP's
         * AllReduce) and recomputes nothing. */
        plan_row r = plan_price_once(t, row, t->remat, 2, NULL, compile, ctx);
        if (r.ok && r.memory < best.memory)
            best = r;
    }
    if (best.ok && !best.fits && best.trains && t->choose_remat) {
        /* Kept when it fits, or, when nothing fits, as the smaller figure
         * the report names. */
        plan_row r = plan_price_once(t, row, IR_REMAT_LAYER, best.zero, NULL, compile, ctx);
        if (r.ok && r.memory < best.memory)
            best = r;
    }
    if (best.ok && best.pp && best.trains && t->choose_schedule && t->option) {
        /* The schedule is a choice too: zero-bubble fills 1F1B's bubble
         * with the weight gradients (docs/pipeline.md) at the cost of
         * holding their inputs longer (the pass compiles zb-h2 when its
         * stages fit the HBM, else zb-h1); each is kept when it fits where the
         * other does not, or is faster and fits as well.  (The pipeline
         * pass's own default is the fastest, which may not fit.)  The
         * schedule `best` chose is not compiled again: the pass would pick
         * the same M (passes/pipeline.c, cheapest_plan) and give best. */
        static const char *const scheds[] = {"1f1b", "zero-bubble"};
        const char *chose = best.schedule;
        for (int k = 0; k < 2; k++) {
            if (chose && strcmp(chose, scheds[k]) == 0)
                continue;
            plan_row r = plan_price_once(t, row, best.remat, best.zero, scheds[k], compile, ctx);
            if (r.ok && ((r.fits && !best.fits) || (r.fits == best.fits && r.step < best.step)))
                best = r;
        }
    }
    *row = best;
}

static void add_row(plan_table *t, plan_family f, int naxes, int64_t x, int64_t y, int64_t z)
{
    if (t->n >= PLAN_MAX_ROWS) {
        t->dropped++;
        return;
    }
    plan_row *row = &t->rows[t->n++];
    memset(row, 0, sizeof *row);
    row->family = f;
    row->naxes = naxes;
    row->sizes[0] = x;
    row->sizes[1] = y;
    row->sizes[2] = z;
    row->roles = &t->roles;
    row->same_as = -1;
}

/* The rows of the meshes of `naxes` axes whose sizes (each >= 2) multiply
 * to `chips`.  A one-axis family spreads over every axis, so their order
 * does not matter: sizes nondecreasing.  A two-axis family puts TP on the
 * last axis: the others nondecreasing, the last any. */
static void add_meshes(plan_table *t, int64_t chips, int naxes)
{
    if (naxes == 2) {
        for (int64_t x = 2; x <= chips / 2; x++) {
            if (chips % x != 0)
                continue;
            if (x <= chips / x)
                for (int f = PLAN_DP; f <= PLAN_TP; f++)
                    add_row(t, (plan_family)f, 2, x, chips / x, 1);
            for (int f = PLAN_FSDP_TP; f <= PLAN_DP_TP; f++)
                add_row(t, (plan_family)f, 2, x, chips / x, 1);
        }
        return;
    }
    for (int64_t x = 2; x <= chips / 4; x++)
        for (int64_t y = x; chips % x == 0 && y <= chips / x / 2; y++) {
            if ((chips / x) % y != 0)
                continue;
            int64_t z = chips / x / y;
            if (y <= z)
                for (int f = PLAN_DP; f <= PLAN_TP; f++)
                    add_row(t, (plan_family)f, 3, x, y, z);
            for (int f = PLAN_FSDP_TP; f <= PLAN_DP_TP; f++)
                add_row(t, (plan_family)f, 3, x, y, z);
        }
}

/* Pipelined rows (plan_row.pp): p stages over the first axis for every p
 * >= 2 that divides the layer count |L|, alone (p = chips) or with every
 * family on a mesh of the other chips/p, as add_meshes orders them. */
static void add_pp_rows(plan_table *t, int64_t chips, int64_t layers)
{
    int first = t->n;
    for (int64_t p = 2; p <= chips && p <= layers; p++) {
        if (chips % p != 0 || layers % p != 0)
            continue;
        int64_t rest = chips / p;
        if (rest == 1) {
            add_row(t, PLAN_DP, 1, p, 1, 1);
            continue;
        }
        for (int f = PLAN_DP; f <= PLAN_TP; f++)
            add_row(t, (plan_family)f, 2, p, rest, 1);
        for (int64_t y = 2; y <= rest / 2; y++) {
            if (rest % y != 0)
                continue;
            if (y <= rest / y)
                for (int f = PLAN_DP; f <= PLAN_TP; f++)
                    add_row(t, (plan_family)f, 3, p, y, rest / y);
            for (int f = PLAN_FSDP_TP; f <= PLAN_DP_TP; f++)
                add_row(t, (plan_family)f, 3, p, y, rest / y);
        }
    }
    for (int i = first; i < t->n; i++)
        t->rows[i].pp = true;
}

/* |L| of the program's repeated block (the largest, if several), or 0
 * when nothing can be pipelined: no block, or a state (a KV cache), which
 * the pipeline pass does not split into stages yet (docs/pipeline.md). */
static int64_t layer_count(const ir_module *proto, const plan_roles *r)
{
    for (int i = 0; i < proto->nvalues; i++)
        if (proto->values[i]->kind == IR_VAL_STATE)
            return 0;
    int64_t l = 0;
    for (int d = 0; d < proto->ndims; d++)
        if (r->layer[d] && proto->dims[d].size > l)
            l = proto->dims[d].size;
    return l;
}

int plan_run(plan_table *t, const ir_module *proto, const cost_hw *hw, int64_t chips, ir_remat remat,
             bool choose_remat, bool choose_schedule, bool choose_zero, plan_search search,
             plan_compile_fn compile, plan_option_fn option, void *ctx)
{
    memset(t, 0, sizeof *t);
    t->option = option;
    t->choose_schedule = choose_schedule;
    t->choose_zero = choose_zero;
    t->search = search;
    t->chosen = -1;
    t->pipe_lost = -1;
    t->pipe_rival = -1;
    t->chips = chips;
    t->hw = hw;
    t->remat = remat;
    t->choose_remat = choose_remat && remat == IR_REMAT_NONE;
    if (chips < 1 || plan_roles_of(proto, &t->roles) != 0)
        return -1;
    /* One axis of all the chips, then every split into two and three: a
     * mesh axis is a physical torus axis, and a collective over several
     * has their links (seed 001), so DP over a cube of 4x4x4 needs a third
     * of the batch per chip that one axis of 64 does (seed 000: 850
     * against 2550 on v5p). */
    for (int f = PLAN_DP; f <= PLAN_TP; f++)
        add_row(t, (plan_family)f, 1, chips, 1, 1);
    add_meshes(t, chips, 2);
    add_meshes(t, chips, 3);
    add_pp_rows(t, chips, layer_count(proto, &t->roles));
    /* A row whose storage an earlier row on its mesh writes is the same
     * compile: it takes those figures (plan_same.c).  Without memory for
     * the storages, every row is compiled. */
    int nd = plan_storage_count(proto);
    size_t stride = (size_t)(nd > 0 ? nd : 1);
    ir_sharding *st = calloc((size_t)t->n * stride, sizeof *st);
    int own[PLAN_MAX_ROWS], nown = 0;
    for (int i = 0; i < t->n; i++) {
        plan_row *row = &t->rows[i];
        int j = i;
        if (st) {
            plan_storage_of(proto, row, st + (size_t)i * stride);
            for (j = 0; j < i; j++)
                if (plan_same_storage(proto, &t->rows[j], st + (size_t)j * stride, row, st + (size_t)i * stride))
                    break;
        }
        if (j == i)
            own[nown++] = i;
        else
            row->same_as = j;
    }
    free(st);
    /* Every row with a compile of its own is priced, in full or, on a
     * large table, first estimated (plan_cut.c); then the others take the
     * figures of the row they repeat. */
    if (!plan_cut_active(t, nown) || plan_cut_run(t, own, nown, compile, ctx) != 0)
        for (int k = 0; k < nown; k++)
            plan_price_row(t, &t->rows[own[k]], compile, ctx);
    for (int i = 0; i < t->n; i++) {
        plan_row *row = &t->rows[i];
        int j = row->same_as;
        if (j < 0)
            continue;
        plan_family f = row->family;
        *row = t->rows[j];
        row->family = f;
        row->same_as = j;
        t->estimated += row->estimated;
    }
    /* The fastest that fits; a pipelined row only when it is faster than
     * the unpipelined ones by more than its bubble's uncertainty. */
    plan_choose(t);
    return 0;
}
