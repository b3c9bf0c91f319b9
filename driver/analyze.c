/*
 * analyze.c - the whole-step limits of a program and of seed 000's
 * strategies on its mesh (analyze.h).
 *
 * Each strategy is compiled through the whole pipeline (the planner lays
 * out everything the strategy leaves open) and priced by the cost pass.
 * The batch limits then come from the same plan priced at other batch
 * sizes (the cost model again on the planned module with the batch dim
 * resized): the plan does not change with B, though a much larger batch
 * might be planned differently.  Times are taken at B and 2B and are
 * linear in B between them: time(B) = a + b B.
 *
 * The critical batch (seed 000, "Data Parallelism" and "FSDP": "Since we
 * overlap, the total time per layer is the max of these two quantities",
 * T_math > T_comms when B/X > C / W_ici).  The seed compares, phase by
 * phase, the matmul time of a layer with the collectives that overlap it:
 * the forward pass with the forward's weight gathers, the backward pass
 * with the gradients' reductions (which are "not on the critical path" and
 * run alongside the backward matmuls).  So here: for the forward phase and
 * for the backward phase (with the update, whose gradient reductions it
 * waits for), and for every group of mesh axes that collectives run over,
 * the compute of the phase must cover that group's communication in the
 * phase (each group has its own links).  Each condition a + b B >= c + d B
 * gives a threshold; the critical batch is the largest, in tokens per
 * chip.  The contractions' HBM time is one more such group (seed 002,
 * "B_crit = C / W_hbm", about 240 on v5e for bf16 weights), which decides
 * when no collective does, as in a decode step.  With the seed's DP or FSDP layer on one v5p axis this is
 * C / W_ici = 2550; under tensor parallelism the activations' collectives
 * grow with B as the compute does, so the condition does not depend on B
 * (seed 000: Y < F / 2550) and the answer is "any batch" or "never".
 *
 * The optimal split (seed 000, "Combining FSDP and TP"): on a 2D ICI mesh
 * the same critical batch with the chips re-split between the two axes,
 * real sizes with the same product, each collective rescaled to the split
 * (optimal_split, split_factor); the least over a log grid of splits.
 *
 * What fits: the peak memory per device (the cost pass's, which keeps the
 * activations the backward pass reads) of the same plan with the batch dim
 * resized, bisected for the largest multiple of the batch dim's sharding
 * that fits the HBM.  With
 * remat the program is compiled again with --remat=layer (each repeated
 * layer keeps only its input).
 */
#include "analyze.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

/* Sums of one plan at one batch size: compute per phase, communication
 * per phase and axis group. */
typedef struct sums {
    double compute[2];                       /* [0] forward, [1] backward and update */
    double matmul[2];                        /* the contractions' FLOP time (T_math) */
    double hbm[2];                           /* the contractions' HBM time (T_mem) */
    double comm[2][ANALYZE_MAX_GROUPS];
} sums;

/* The group index of a collective's axes in row r (added if new); -1 when
 * the row holds ANALYZE_MAX_GROUPS groups already. */
static int group_of(analyze_row *r, const ir_mesh *mesh, const int *axes, int n)
{
    /* One group per set of axes, named in mesh order: an AllGather over
     * X then Y uses the same links as one over Y then X. */
    char name[IR_MAX_AXES + 1];
    int len = 0;
    for (int a = 0; a < mesh->naxes; a++)
        for (int k = 0; k < n; k++)
            if (axes[k] == a) {
                name[len++] = mesh->axes[a].name;
                break;
            }
    name[len] = '\0';
    for (int g = 0; g < r->ngroups; g++)
        if (strcmp(r->group[g], name) == 0)
            return g;
    if (r->ngroups >= ANALYZE_MAX_GROUPS)
        return -1;
    memcpy(r->group[r->ngroups], name, (size_t)len + 1);
    return r->ngroups++;
}

/* The mesh axes op's communication runs over (n = 0: none). */
static void op_axes(const ir_op *op, int *axes, int *n)
{
    *n = 0;
    if (op->kind == IR_OP_MESHSLICE) {
        axes[(*n)++] = op->u.ms.row_axis;
        axes[(*n)++] = op->u.ms.col_axis;
    } else if (ir_op_is_reshard(op->kind) && op->kind != IR_OP_SLICE) {
        for (int k = 0; k < op->u.coll.naxes && k < IR_MAX_AXES; k++)
            axes[(*n)++] = op->u.coll.axes[k];
    }
}

/* How op's communication time changes when the mesh axes take the sizes
 * `to` (real: seed 000's "Combining FSDP and TP" lets X and Y be any
 * positive numbers with X Y = N) instead of the declared ones, with the
 * bandwidth-bound collective of seed 001 (per-device bytes times
 * (P - 1) / P over the axes it runs on): the bytes one device holds shrink
 * with the other axes that shard the operand (FSDP's AllGather_X of
 * Win[D_X, F_Y] moves D F / Y; TP's AllReduce_Y of [B_X, D] moves B D / X),
 * and the ring factor follows the collective's own axes.  MeshSlice loops
 * (their partial collectives run over both axes) and everything else are
 * kept as priced: 1. */
static double split_factor(const ir_op *op, const ir_mesh *mesh, const double *to)
{
    if (!to || op->kind == IR_OP_MESHSLICE || !ir_op_is_reshard(op->kind) || op->kind == IR_OP_SLICE ||
        op->noperands < 1)
        return 1.0;
    bool on[IR_MAX_AXES] = {false};
    double p = 1, p_to = 1;
    for (int k = 0; k < op->u.coll.naxes && k < IR_MAX_AXES; k++) {
        int a = op->u.coll.axes[k];
        on[a] = true;
        p *= (double)mesh->axes[a].size;
        p_to *= to[a];
    }
    double f = p > 1 ? ((p_to - 1) / p_to) / ((p - 1) / p) : 1.0;
    const ir_sharding *sh = &op->operands[0]->type.sh;
    bool shards[IR_MAX_AXES] = {false};
    for (int d = 0; d < op->operands[0]->type.rank; d++)
        for (int k = 0; k < sh->naxes[d]; k++)
            shards[sh->axes[d][k]] = true;
    for (int a = 0; a < mesh->naxes; a++)
        if (shards[a] && !on[a])
            f *= (double)mesh->axes[a].size / to[a];
    return f;
}

/* Adds m's annotated op times (each op once per run of its block) into s,
 * registering the axis groups in r; with `to` (NULL: as declared) each
 * op's communication as on a mesh of those axis sizes (split_factor). */
static void sum_ops(const ir_module *m, analyze_row *r, const double *to, sums *s)
{
    memset(s, 0, sizeof *s);
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->cost.valid)
            continue;
        double trips = (double)ir_op_trips(m, op);
        int p = op->phase == IR_PHASE_FORWARD ? 0 : 1;
        int axes[IR_MAX_AXES * 2], n;
        op_axes(op, axes, &n);
        double comm = 0, compute = op->cost.time;
        if (op->kind == IR_OP_MESHSLICE) {
            compute = op->cost.t_compute;
            comm = fmax(0.0, op->cost.time - op->cost.t_compute);
        } else if (n > 0) {
            compute = 0;
            comm = op->cost.time;
        }
        s->compute[p] += compute * trips;
        if (op->kind == IR_OP_MESHSLICE || (op->kind == IR_OP_EINSUM && op->noperands == 2)) {
            s->matmul[p] += op->cost.t_compute * trips;
            s->hbm[p] += op->cost.t_memory * trips;
        }
        int g = n > 0 ? group_of(r, &m->mesh, axes, n) : -1;
        if (g >= 0)
            s->comm[p][g] += comm * trips * split_factor(op, &m->mesh, to);
    }
}

/* The smallest B >= 0 with a0 + a1 B >= c0 + c1 B, 0 when it holds at
 * every B, < 0 when it fails at large B (c grows at least as fast). */
static double threshold(double a0, double a1, double c0, double c1)
{
    double tol = 1e-9 * fmax(fabs(a1), fabs(c1));
    if (a1 - c1 > tol)
        return fmax(0.0, (c0 - a0) / (a1 - c1));
    return a0 >= c0 - 1e-9 * fmax(fabs(a0), fabs(c0)) && fabs(a1 - c1) <= tol ? 0.0 : -1.0;
}

int64_t analyze_batch_parts(const ir_module *m, int batch)
{
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_INPUT && v->kind != IR_VAL_STATE)
            continue;
        for (int d = 0; d < v->type.rank; d++)
            if (v->type.dims[d] == batch) {
                int64_t parts = 1;
                for (int k = 0; k < v->type.sh.naxes[d]; k++)
                    parts *= m->mesh.axes[v->type.sh.axes[d][k]].size;
                return parts;
            }
    }
    return 1;
}

/* The cost model on m with the batch dim at `size`: fills *s.  The dim
 * size is restored; the ops' annotations are left at `size` (only the
 * memory peak, which reads sizes alone, is asked of m afterwards). */
static void price_at(ir_module *m, const analyze_table *t, analyze_row *r, int64_t size, sums *s)
{
    int64_t keep = m->dims[t->batch].size;
    m->dims[t->batch].size = size;
    cost_annotate_ops(m, t->hw);
    sum_ops(m, r, NULL, s);
    m->dims[t->batch].size = keep;
}

/* Peak memory per device of m's plan with the batch dim at `size`. */
static double peak_at(ir_module *m, int batch, int64_t size)
{
    int64_t keep = m->dims[batch].size;
    m->dims[batch].size = size;
    double peak = cost_memory_peak(m).peak;
    m->dims[batch].size = keep;
    return peak;
}

/* The largest multiple of `parts` whose peak memory (m's plan, the batch
 * at that size) fits `hbm`: 0 when none does, -1 when the peak does not
 * grow with the batch.  The peak is the largest of the live sets along
 * the program, each linear in the batch, so it is convex and
 * nondecreasing in it, but where it sits moves: bisection, not a line
 * through two points. */
static double largest_fit(ir_module *m, int batch, double hbm, int64_t parts)
{
    if (peak_at(m, batch, parts) > hbm)
        return 0.0;
    int64_t lo = 1, hi = 2; /* in units of parts: lo fits */
    const int64_t cap = INT64_C(1) << 40;
    while (peak_at(m, batch, hi * parts) <= hbm) {
        lo = hi;
        if (hi >= cap / parts)
            return peak_at(m, batch, 2 * hi * parts) > peak_at(m, batch, hi * parts) ? (double)(hi * parts) : -1.0;
        hi *= 2;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (peak_at(m, batch, mid * parts) <= hbm)
            lo = mid;
        else
            hi = mid;
    }
    return (double)(lo * parts);
}

/* plan_compile_quiet's closure for one strategy. */
typedef struct row_call {
    analyze_compile_fn compile;
    void *ctx;
    const fe_autoshard *a;
    ir_remat remat;
} row_call;

static ir_module *call_row(void *ctx, diag_ctx *d)
{
    const row_call *c = ctx;
    return c->compile(c->ctx, c->a, c->remat, d);
}

/* Compiles one strategy; the first line of the first error in r->why. */
static ir_module *compile_row(analyze_row *r, const fe_autoshard *a, ir_remat remat,
                              analyze_compile_fn compile, void *ctx)
{
    row_call c = {compile, ctx, a, remat};
    return plan_compile_quiet(call_row, &c, r->why, sizeof r->why);
}

/* The critical batch, in units of the batch dim, of one plan priced at
 * b0 (s0) and 2 b0 (s1): the largest threshold over the phases and the
 * groups (and HBM) at which the phase's matmul time covers the group's
 * time; 0 at any batch, -1 never.  The group that sets it goes to `by`. */
static double critical_of(const analyze_row *r, const sums *s0, const sums *s1, int64_t b0, char *by,
                          size_t bylen)
{
    double crit = 0;
    by[0] = '\0';
    for (int p = 0; p < 2 && crit >= 0; p++)
        for (int g = -1; g < r->ngroups && crit >= 0; g++) { /* g = -1: HBM */
            double v0 = g < 0 ? s0->hbm[p] : s0->comm[p][g], v1 = g < 0 ? s1->hbm[p] : s1->comm[p][g];
            if (v0 <= 0 && v1 <= 0)
                continue;
            double a1 = (s1->matmul[p] - s0->matmul[p]) / (double)b0, a0 = s0->matmul[p] - a1 * (double)b0;
            double c1 = (v1 - v0) / (double)b0, c0 = v0 - c1 * (double)b0;
            double b = threshold(a0, a1, c0, c1);
            if (b < 0 || b > crit)
                snprintf(by, bylen, "%s", g < 0 ? "HBM" : r->group[g]);
            crit = b < 0 ? -1.0 : fmax(crit, b);
        }
    return crit;
}

/* Points of the search for the optimal split, evenly spaced in log X. */
#define SPLIT_STEPS 2048
#define SPLIT_POINTS (SPLIT_STEPS + 2) /* the declared split, then X = N^(j / SPLIT_STEPS), j = 0..SPLIT_STEPS */

/* The first axis's size at point i of the search over n chips. */
static double split_x(const ir_mesh *mesh, double n, int i)
{
    return i == 0 ? (double)mesh->axes[0].size : pow(n, (double)(i - 1) / SPLIT_STEPS);
}

/* Seed 000's optimal split of the chips between the two axes of a 2D ICI
 * mesh ("Combining FSDP and TP": X_opt = sqrt(B N M_X / (F M_Y)), where the
 * FSDP axis's weight traffic, growing with X, meets the TP axis's
 * activation traffic, falling with X; at the critical batch this is
 * B / N = alpha^2 / (M_X M_Y F)).  The seed lets X and Y be any positive
 * reals with X Y = N, so this searches X over [1, N] on a log grid, each
 * collective rescaled to the split (split_factor) with compute and HBM
 * time as priced (per device they depend on N only, up to the
 * contractions' weight bytes), and keeps the split with the least critical
 * batch: r->opt_critical (tokens per chip; 0 any batch, -1 never at any
 * split), r->opt_size, r->opt_by.  Leaves m annotated at the batch size as
 * declared.  Nothing (r->opt_ok false) for other meshes or out of memory. */
static void optimal_split(ir_module *m, const analyze_table *t, analyze_row *r)
{
    const ir_mesh *mesh = &m->mesh;
    r->opt_ok = false;
    if (mesh->naxes != 2 || mesh->axes[0].dcn || mesh->axes[1].dcn)
        return;
    double n = (double)mesh->axes[0].size * (double)mesh->axes[1].size;
    sums *g = malloc(2 * SPLIT_POINTS * sizeof *g);
    if (!g)
        return;
    int64_t b0 = t->batch_size, keep = m->dims[t->batch].size;
    /* Point 0 is the declared split, so that a tie (a strategy whose
     * collectives all run over both axes) keeps it. */
    for (int b = 1; b >= 0; b--) { /* 2 b0, then b0 (left annotated) */
        m->dims[t->batch].size = b ? 2 * b0 : b0;
        cost_annotate_ops(m, t->hw);
        for (int i = 0; i < SPLIT_POINTS; i++) {
            double to[2] = {split_x(mesh, n, i), n / split_x(mesh, n, i)};
            sum_ops(m, r, to, &g[b * SPLIT_POINTS + i]);
        }
    }
    m->dims[t->batch].size = keep;
    double best = -1;
    r->opt_by[0] = '\0';
    for (int i = 0; i < SPLIT_POINTS; i++) {
        char by[IR_MAX_AXES + 1];
        double c = critical_of(r, &g[i], &g[SPLIT_POINTS + i], b0, by, sizeof by);
        if (c >= 0 && (best < 0 || c < best * (1 - 1e-9))) {
            best = c;
            r->opt_size[0] = split_x(mesh, n, i);
            r->opt_size[1] = n / r->opt_size[0];
            memcpy(r->opt_by, by, sizeof by);
        }
    }
    free(g);
    r->opt_ok = true;
    r->opt_critical = best < 0 ? -1.0 : best * t->tokens_per_batch / n;
}

static void run_row(analyze_table *t, analyze_row *r, analyze_compile_fn compile, void *ctx)
{
    fe_autoshard a, *as = NULL;
    if (strcmp(r->family, "plan") != 0) {
        r->fam.roles = &t->roles;
        plan_row_autoshard(&r->fam, &a);
        as = &a;
    }
    ir_module *m = compile_row(r, as, IR_REMAT_NONE, compile, ctx);
    r->ok = m != NULL;
    if (!m)
        return;
    sums s0, s1;
    sum_ops(m, r, NULL, &s0);
    r->step = m->totals.step_time;
    r->exposed = m->totals.exposed_comm_time;
    r->memory = m->totals.peak_memory;
    r->compute = s0.compute[0] + s0.compute[1];
    for (int g = 0; g < r->ngroups; g++)
        r->comm[g] = s0.comm[0][g] + s0.comm[1][g];
    r->critical = -1;
    r->max_fits = r->max_fits_remat = 0;
    if (t->batch < 0) {
        ir_module_free(m);
        return;
    }
    int64_t b0 = t->batch_size, b1 = 2 * b0;
    price_at(m, t, r, b1, &s1);
    double crit = critical_of(r, &s0, &s1, b0, r->critical_by, sizeof r->critical_by);
    double devices = (double)ir_mesh_devices(&m->mesh);
    optimal_split(m, t, r);
    r->critical_tokens = crit < 0 ? -1.0 : crit * t->tokens_per_batch;
    r->critical = crit < 0 ? -1.0 : r->critical_tokens / (devices > 0 ? devices : 1);
    int64_t parts = analyze_batch_parts(m, t->batch);
    r->max_fits = largest_fit(m, t->batch, t->hw->hbm_bytes, parts);
    ir_module_free(m);

    analyze_row scratch = *r;
    ir_module *mr = compile_row(&scratch, as, IR_REMAT_LAYER, compile, ctx);
    r->remat_ok = mr != NULL;
    if (mr)
        r->max_fits_remat = largest_fit(mr, t->batch, t->hw->hbm_bytes, analyze_batch_parts(mr, t->batch));
    ir_module_free(mr);
}

/* The batch dim (the roles' batch dim of the first input that has one)
 * and the tokens one unit of it holds. */
static void find_batch(analyze_table *t, const ir_module *m)
{
    t->batch = -1;
    t->tokens_per_batch = 1;
    const bool *in_param = t->roles.in_param;
    for (int i = 0; i < m->nvalues && t->batch < 0; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_INPUT)
            continue;
        for (int d = 0; d < v->type.rank && t->batch < 0; d++)
            if (t->roles.batch[v->type.dims[d]])
                t->batch = v->type.dims[d];
        if (t->batch < 0)
            continue;
        /* Every element of an i32 input is a token id (Tok[B, T]), even
         * when a param has T (a learned position embedding); in a float
         * input the dims no param has are tokens (In[B, T, D]: D is the
         * model's). */
        for (int d = 0; d < v->type.rank; d++) {
            int id = v->type.dims[d];
            if (id != t->batch && !t->roles.layer[id] && (v->type.dtype == IR_I32 || !in_param[id]))
                t->tokens_per_batch *= (double)m->dims[id].size;
        }
    }
    if (t->batch >= 0) {
        snprintf(t->batch_name, sizeof t->batch_name, "%s", m->dims[t->batch].name);
        t->batch_size = m->dims[t->batch].size;
    }
}

int analyze_run(analyze_table *t, const ir_module *proto, const cost_hw *hw, analyze_compile_fn compile,
                void *ctx, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->hw = hw;
    t->mesh = proto->mesh;
    if (proto->mesh.naxes == 0) {
        snprintf(err, errlen, "the program declares no mesh: analyze prices strategies on the program's "
                 "mesh (for a program without one, `einc plan --chips N` compares meshes)");
        return -1;
    }
    if (plan_roles_of(proto, &t->roles) != 0) {
        snprintf(err, errlen, "the program has too many dims to analyze");
        return -1;
    }
    find_batch(t, proto);
    t->rows[t->n++].family = "plan";
    for (int f = PLAN_DP; f < PLAN_NFAMILIES; f++) {
        if ((f == PLAN_FSDP_TP || f == PLAN_DP_TP) && proto->mesh.naxes < 2)
            continue;
        analyze_row *r = &t->rows[t->n++];
        r->family = plan_family_name((plan_family)f);
        r->fam.family = (plan_family)f;
    }
    for (int i = 0; i < t->n; i++)
        run_row(t, &t->rows[i], compile, ctx);
    return 0;
}

/* ---- the report ---- */

static void mesh_json(cJSON *o, const ir_mesh *mesh)
{
    cJSON *j = cJSON_AddObjectToObject(o, "mesh");
    for (int a = 0; a < mesh->naxes; a++) {
        char name[2] = {mesh->axes[a].name, '\0'};
        cJSON_AddNumberToObject(j, name, (double)mesh->axes[a].size);
    }
}

/* A count, or null for "never" / "any" (< 0). */
static void add_count(cJSON *o, const char *key, double v)
{
    if (v < 0)
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, v);
}

static void print_json(FILE *out, const analyze_table *t, cJSON *pipeline)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "hw", t->hw->name);
    cJSON_AddNumberToObject(root, "hbm_bytes", t->hw->hbm_bytes);
    if (t->batch >= 0) {
        cJSON *b = cJSON_AddObjectToObject(root, "batch_dim");
        cJSON_AddStringToObject(b, "name", t->batch_name);
        cJSON_AddNumberToObject(b, "size", (double)t->batch_size);
        cJSON_AddNumberToObject(b, "tokens_each", t->tokens_per_batch);
    } else {
        cJSON_AddNullToObject(root, "batch_dim");
    }
    cJSON *arr = cJSON_AddArrayToObject(root, "strategies");
    for (int i = 0; i < t->n; i++) {
        const analyze_row *r = &t->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "family", r->family);
        mesh_json(o, &t->mesh);
        if (!r->ok) {
            cJSON_AddStringToObject(o, "error", r->why);
            continue;
        }
        cJSON_AddNumberToObject(o, "step_time", r->step);
        cJSON_AddNumberToObject(o, "compute_time", r->compute);
        cJSON *c = cJSON_AddObjectToObject(o, "comm_time");
        for (int g = 0; g < r->ngroups; g++)
            cJSON_AddNumberToObject(c, r->group[g], r->comm[g]);
        cJSON_AddNumberToObject(o, "exposed_comm_time", r->exposed);
        cJSON_AddNumberToObject(o, "memory_per_device", r->memory);
        if (t->batch < 0) {
            cJSON_AddNullToObject(o, "critical_batch_per_chip");
            cJSON_AddNullToObject(o, "critical_batch");
            cJSON_AddNullToObject(o, "max_batch_fits");
            cJSON_AddNullToObject(o, "max_batch_fits_remat");
            continue;
        }
        add_count(o, "critical_batch_per_chip", r->critical);
        add_count(o, "critical_batch", r->critical_tokens);
        cJSON_AddStringToObject(o, "critical_batch_bound", r->critical_by);
        if (r->opt_ok) {
            /* Seed 000's optimal split: real axis sizes, same chips. */
            add_count(o, "critical_batch_per_chip_opt_mesh", r->opt_critical);
            cJSON *om = r->opt_critical < 0 ? cJSON_AddNullToObject(o, "opt_mesh")
                                            : cJSON_AddObjectToObject(o, "opt_mesh");
            for (int a = 0; a < 2 && r->opt_critical >= 0; a++) {
                char name[2] = {t->mesh.axes[a].name, '\0'};
                cJSON_AddNumberToObject(om, name, r->opt_size[a]);
            }
            cJSON_AddStringToObject(o, "critical_batch_opt_mesh_bound", r->opt_by);
        }
        add_count(o, "max_batch_fits", r->max_fits);
        add_count(o, "max_batch_fits_remat", r->remat_ok ? r->max_fits_remat : -1);
    }
    if (pipeline)
        cJSON_AddItemToObject(root, "pipeline", pipeline);
    char *text = cJSON_PrintUnformatted(root);
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* "2550 tok (X)", "any", "never (X)": the group that sets it in brackets */
static void crit_str(double v, const char *by, char *buf, size_t n)
{
    if (v == 0)
        snprintf(buf, n, "any");
    else if (v < 0)
        snprintf(buf, n, "never (%s)", by);
    else
        snprintf(buf, n, "%.4g tok (%s)", v, by);
}

/* "16", "any", "none" */
static void fit_str(double v, char *buf, size_t n)
{
    if (v < 0)
        snprintf(buf, n, "any");
    else if (v == 0)
        snprintf(buf, n, "none");
    else
        snprintf(buf, n, "%.0f", v);
}

void analyze_print(FILE *out, const analyze_table *t, bool json, struct cJSON *pipeline)
{
    if (json) {
        print_json(out, t, pipeline);
        return;
    }
    cJSON_Delete(pipeline);
    char mesh[128] = "";
    size_t len = 0;
    for (int a = 0; a < t->mesh.naxes && len < sizeof mesh; a++) {
        const ir_axis *ax = &t->mesh.axes[a];
        /* The placement decides the collectives' links: say it, as the source does. */
        char place[24] = "";
        if (ax->dcn)
            snprintf(place, sizeof place, " over dcn");
        else if (ax->phys > 1)
            snprintf(place, sizeof place, " over %d", ax->phys);
        len += (size_t)snprintf(mesh + len, sizeof mesh - len, "%s%c: %lld%s", a ? ", " : "", ax->name,
                                (long long)ax->size, place);
    }
    fprintf(out, "whole-step limits on %s, mesh {%s}, %.4g GiB of HBM per chip\n", t->hw->name, mesh,
            t->hw->hbm_bytes / (1024.0 * 1024.0 * 1024.0));
    if (t->batch >= 0)
        fprintf(out, "batch dim %s = %lld (%.4g token%s each); critical batch in tokens per chip, "
                "largest batch in %s\n", t->batch_name, (long long)t->batch_size, t->tokens_per_batch,
                t->tokens_per_batch == 1 ? "" : "s", t->batch_name);
    else
        fprintf(out, "no batch dim (an input dim that no param has): no batch limits\n");
    fprintf(out, "  %-8s %11s %11s %11s  %-28s %14s %10s %10s\n", "strategy", "step", "compute", "exposed",
            "communication per axis", "critical batch", "max batch", "w/ remat");
    for (int i = 0; i < t->n; i++) {
        const analyze_row *r = &t->rows[i];
        if (!r->ok) {
            fprintf(out, "  %-8s does not compile: %s\n", r->family, r->why);
            continue;
        }
        char comm[128] = "-";
        size_t n = 0;
        for (int g = 0; g < r->ngroups && n < sizeof comm; g++)
            n += (size_t)snprintf(comm + n, sizeof comm - n, "%s%s %.4g us", g ? ", " : "", r->group[g],
                                  r->comm[g] * 1e6);
        char crit[32] = "-", fit[32] = "-", fitr[32] = "-";
        if (t->batch >= 0) {
            crit_str(r->critical, r->critical_by, crit, sizeof crit);
            fit_str(r->max_fits, fit, sizeof fit);
            if (r->remat_ok)
                fit_str(r->max_fits_remat, fitr, sizeof fitr);
        }
        fprintf(out, "  %-8s %8.4g us %8.4g us %8.4g us  %-28s %14s %10s %10s\n", r->family, r->step * 1e6,
                r->compute * 1e6, r->exposed * 1e6, comm, crit, fit, fitr);
    }
    for (int i = 0; i < t->n; i++) {
        const analyze_row *r = &t->rows[i];
        if (!r->ok || !r->opt_ok || t->batch < 0)
            continue;
        if (i == 0 || !t->rows[i - 1].opt_ok)
            fprintf(out, "critical batch at the optimal split of the %.0f chips between %c and %c (seed 000, "
                    "\"Combining FSDP and TP\"; real axis sizes):\n",
                    (double)t->mesh.axes[0].size * (double)t->mesh.axes[1].size, t->mesh.axes[0].name,
                    t->mesh.axes[1].name);
        char crit[32];
        crit_str(r->opt_critical, r->opt_by, crit, sizeof crit);
        if (r->opt_critical < 0) {
            fprintf(out, "  %-8s %14s\n", r->family, "never, at every split");
            continue;
        }
        fprintf(out, "  %-8s %14s at %c = %.4g, %c = %.4g\n", r->family, crit, t->mesh.axes[0].name,
                r->opt_size[0], t->mesh.axes[1].name, r->opt_size[1]);
    }
}
