/*
 * meshslice.c - the `meshslice` pass: 2D GEMMs become MeshSlice loops
 * (seed 004, 3.1).
 *
 * After `propagate`, a contraction whose operands and result are sharded
 * over two mesh axes as a 2D GEMM appears as an Einsum with whole-tensor
 * collectives around it.  The three dataflows of seed 004 (Fig. 1, Table 1,
 * Fig. 5) show up as these patterns, with R and C two distinct mesh axes
 * (the mesh rows and columns) and every collective over one axis:
 *
 *   OS (C-stn)  A' = AllGather_C(A), B' = AllGather_R(B) on the contracting
 *               dim, C = einsum(A', B')                 split: contracting dim
 *   LS (A-stn)  B' = AllGather_R(B) on a free dim n of B,
 *               C = ReduceScatter_C(einsum(A, B')) on n  split: n
 *   RS (B-stn)  A' = AllGather_C(A) on a free dim m of A,
 *               C = ReduceScatter_R(einsum(A', B)) on m  split: m
 *
 * Each becomes one MeshSlice op over the un-gathered A and B whose result
 * is the final C; its K iterations move sub-shard k with partial collectives
 * (ir.h, docs/meshslice.md).  Other mesh axes may shard any dim that no
 * collective touches (data parallelism on a third axis rides along).
 *
 * The dataflow is the one the shardings imply: choosing another would need
 * resharding A, B or C, which is propagate's business.  The paper's
 * heuristic (keep the largest matrix stationary, seed 004 3.2.1) is
 * computed too, and a remark in the --debug-pass log says when the
 * shardings chose differently.
 *
 * K: with --meshslice=auto, the least estimated time (cost_meshslice_op of
 * the cost model, seed 004 3.2.2) over all valid K, found by exhaustive search, and the
 * smallest K within 1% of it; with --meshslice=K that K,
 * or the largest valid K below it (with a note) when it does not divide;
 * with --meshslice=off the pass does nothing.  A K is valid when it divides
 * the gcd g of the per-device sizes of the split dim in every tensor that
 * moves; the slicing block is then g / K elements, the largest block that
 * keeps blocked slicing (seed 004 Algorithm 2) consistent across devices,
 * so each sub-shard is as contiguous as it can be (with R = C it is one
 * contiguous run of the split dim).
 */
#include <string.h>

#include "meshslice_model.h"
#include "meshslice.h"
#include "pass.h"

/* auto K: the smallest K whose estimate is within this fraction of the
 * least (the model is not that precise; see choose_k). */
#define K_TOLERANCE 0.01
/* The largest K --meshslice=K takes. */
#define K_OPTION_MAX 4096

/* How the pass treats 2D GEMMs (--meshslice=auto|off|K). */
typedef enum ms_mode {
    MS_AUTO, /* pick dataflow and K with the cost model (the default) */
    MS_OFF,  /* keep whole-tensor collectives */
    MS_K,    /* a fixed K */
} ms_mode;

/* Parses the option's value into *mode and (MS_K) *k; false if it is not
 * auto, off or a decimal K in [1, K_OPTION_MAX]. */
static bool parse_mode(const char *v, ms_mode *mode, int *k)
{
    *k = 0;
    if (strcmp(v, "auto") == 0) {
        *mode = MS_AUTO;
        return true;
    }
    if (strcmp(v, "off") == 0) {
        *mode = MS_OFF;
        return true;
    }
    int64_t n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9' || n > K_OPTION_MAX)
            return false;
        n = n * 10 + (*p - '0');
    }
    if (!*v || n < 1 || n > K_OPTION_MAX)
        return false;
    *mode = MS_K;
    *k = (int)n;
    return true;
}

static bool check_mode(const char *value, char *why, size_t why_size)
{
    ms_mode mode;
    int k;
    if (parse_mode(value, &mode, &k))
        return true;
    snprintf(why, why_size, "--meshslice wants auto, off or a slice count K from 1 to %d (decimal), "
             "not '%s'", K_OPTION_MAX, value);
    return false;
}

const pass_option pass_meshslice_options[1] = {
    {"meshslice", "auto|off|K: MeshSlice's K by the cost model, no MeshSlice, or a fixed K", check_mode},
};

/* A recognised 2D GEMM, before rewriting. */
typedef struct gemm2d {
    ir_op *einsum;          /* the local contraction */
    ir_op *gather[2];       /* AllGather producing operand i, or NULL */
    ir_op *scatter;         /* ReduceScatter consuming the result, or NULL */
    ir_ms_dataflow df;      /* the dataflow the shardings imply */
    int row_axis, col_axis; /* mesh axes of the rows and columns */
    int split_label;        /* dim id sliced */
    int64_t g;              /* gcd of the split dim's per-device sizes */
} gemm2d;

/* How many operand slots read `v` (its use-list), plus 2 for each program
 * output it is; *user is a reader when there is one. */
static int uses(const ir_module *m, const ir_value *v, ir_op **user)
{
    int n = v->nuses;
    if (n > 0)
        *user = v->uses[n - 1].op;
    for (int o = 0; o < m->noutputs; o++)
        if (m->outputs[o].value == v)
            n += 2;
    return n;
}

/* Whether label L occurs in positions of `labels` (rank `rank`) exactly once. */
static int find_label(const int *labels, int rank, int L)
{
    int pos = -1;
    for (int j = 0; j < rank; j++)
        if (labels[j] == L) {
            if (pos >= 0)
                return -2;
            pos = j;
        }
    return pos;
}

/* A single-axis collective whose value has exactly one reader. */
static bool one_axis(const ir_op *op)
{
    return op && op->u.coll.naxes == 1 && op->noperands == 1;
}

bool pass_meshslice_pattern(const ir_op *e, const pass_ms_coll gather[2], pass_ms_coll scatter,
                            ir_axes unreduced, pass_ms_pattern *out)
{
    const int *lab[2] = {e->u.einsum.labels[0], e->u.einsum.labels[1]}, *lc = e->u.einsum.result_labels;
    int rank[2] = {e->operands[0]->type.rank, e->operands[1]->type.rank}, rc = e->result->type.rank;
    int ga = gather[0].axis, gb = gather[1].axis, sc = scatter.axis;
    if (ga >= 0 && gb >= 0 && sc < 0) {
        int L = lab[0][gather[0].dim];
        if (L != lab[1][gather[1].dim] || find_label(lc, rc, L) != -1 || ga == gb || unreduced)
            return false;
        *out = (pass_ms_pattern){IR_MS_OS, gb, ga, L};
    } else if ((ga >= 0) != (gb >= 0) && sc >= 0) {
        int i = ga >= 0 ? 0 : 1, axis = gather[i].axis;
        int L = lab[i][gather[i].dim];
        if (lc[scatter.dim] != L || find_label(lab[1 - i], rank[1 - i], L) != -1 || axis == sc ||
            unreduced != (1u << sc))
            return false;
        *out = (pass_ms_pattern){i == 1 ? IR_MS_LS : IR_MS_RS, i == 1 ? axis : sc, i == 1 ? sc : axis, L};
    } else {
        return false;
    }
    /* The split dim once in every tensor that moves. */
    for (int i = 0; i < 2; i++)
        if (gather[i].axis >= 0 && find_label(lab[i], rank[i], out->split_label) != gather[i].dim)
            return false;
    return sc < 0 || find_label(lc, rc, out->split_label) == scatter.dim;
}

/* Recognises the 2D GEMM around Einsum `e` (see the essay); false if none. */
static bool recognise(const ir_module *m, ir_op *e, gemm2d *g)
{
    memset(g, 0, sizeof *g);
    if (e->kind != IR_OP_EINSUM || e->noperands != 2 || e->u.einsum.gather || e->u.einsum.scatter)
        return false;
    g->einsum = e;
    ir_op *user = NULL;
    pass_ms_coll gather[2] = {{-1, -1}, {-1, -1}}, scatter = {-1, -1};
    for (int i = 0; i < 2; i++) {
        ir_op *d = e->operands[i]->def;
        if (d && d->kind == IR_OP_ALLGATHER && one_axis(d) && uses(m, d->result, &user) == 1) {
            g->gather[i] = d;
            gather[i] = (pass_ms_coll){d->u.coll.axes[0], d->u.coll.dim};
        }
    }
    if (uses(m, e->result, &user) == 1 && user->kind == IR_OP_REDUCESCATTER && one_axis(user)) {
        g->scatter = user;
        scatter = (pass_ms_coll){user->u.coll.axes[0], user->u.coll.dim};
    }
    pass_ms_pattern pat;
    if (!pass_meshslice_pattern(e, gather, scatter, e->result->type.sh.unreduced, &pat))
        return false;
    g->df = pat.df;
    g->row_axis = pat.row_axis;
    g->col_axis = pat.col_axis;
    g->split_label = pat.split_label;
    /* The per-device sizes that blocked slicing must divide. */
    int64_t gg = 0;
    for (int i = 0; i < 2; i++)
        if (g->gather[i])
            gg = cost_ms_gcd64(gg, ir_local_size(m, &g->gather[i]->operands[0]->type, gather[i].dim));
    if (g->scatter)
        gg = cost_ms_gcd64(gg, ir_local_size(m, &g->scatter->result->type, scatter.dim));
    g->g = gg;
    return gg >= 1;
}

/* Global M, N, K of the GEMM (products of A's free, B's free and the
 * contracting dims' global sizes), for the paper's dataflow heuristic. */
static cost_ms_gemm global_gemm(const ir_module *m, const ir_op *e)
{
    cost_ms_gemm s = {1, 1, 1};
    const int *la = e->u.einsum.labels[0], *lb = e->u.einsum.labels[1], *lc = e->u.einsum.result_labels;
    int ra = e->operands[0]->type.rank, rb = e->operands[1]->type.rank, rc = e->result->type.rank;
    for (int j = 0; j < ra; j++) {
        bool in_b = find_label(lb, rb, la[j]) != -1, in_c = find_label(lc, rc, la[j]) != -1;
        if (in_b && !in_c)
            s.k *= m->dims[la[j]].size;
        else if (!in_b)
            s.m *= m->dims[la[j]].size;
    }
    for (int j = 0; j < rb; j++)
        if (find_label(la, ra, lb[j]) == -1)
            s.n *= m->dims[lb[j]].size;
    return s;
}

static ir_ms_dataflow from_model(cost_ms_dataflow df)
{
    return df == COST_MS_DF_A_STN ? IR_MS_LS : df == COST_MS_DF_B_STN ? IR_MS_RS : IR_MS_OS;
}

/* Builds the MeshSlice op for `g` (not linked), with K = 1. */
static ir_op *build(ir_module *m, const gemm2d *g)
{
    ir_op *e = g->einsum;
    ir_value *ops[2];
    for (int i = 0; i < 2; i++)
        ops[i] = g->gather[i] ? g->gather[i]->operands[0] : e->operands[i];
    ir_value *res = g->scatter ? g->scatter->result : e->result;
    ir_op *ms = ir_op_new(m, IR_OP_MESHSLICE, 2, ops, res, e->loc);
    memcpy(ms->u.ms.labels, e->u.einsum.labels, sizeof ms->u.ms.labels);
    memcpy(ms->u.ms.result_labels, e->u.einsum.result_labels, sizeof ms->u.ms.result_labels);
    ms->u.ms.scale = e->u.einsum.scale;
    ms->u.ms.dataflow = g->df;
    ms->u.ms.k = 1;
    ms->u.ms.block = (int)g->g;
    ms->u.ms.row_axis = g->row_axis;
    ms->u.ms.col_axis = g->col_axis;
    ms->u.ms.split_label = g->split_label;
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (g->gather[i])
            ms->u.ms.moves[n++] = (ir_ms_move){IR_OP_ALLGATHER, i, g->gather[i]->u.coll.axes[0],
                                               g->gather[i]->u.coll.dim};
    if (g->scatter)
        ms->u.ms.moves[n++] = (ir_ms_move){IR_OP_REDUCESCATTER, -1, g->scatter->u.coll.axes[0],
                                           g->scatter->u.coll.dim};
    ms->u.ms.nmoves = n;
    return ms;
}

/* meshslice.h's estimate of a MeshSlice op: the cost model's. */
void pass_meshslice_cost(const ir_module *m, const cost_hw *hw, const ir_op *op, int k, ir_cost *c)
{
    cost_meshslice_op(m, hw, op, k, c);
}

/* The K to use for `ms` (see the essay); writes how it was chosen. */
static int choose_k(pass_ctx *ctx, int fixed_k, const ir_module *m, const cost_hw *hw, const ir_op *ms,
                    int64_t g, char *how, size_t how_size)
{
    int64_t limit = g < COST_MS_MAX_SLICES ? g : COST_MS_MAX_SLICES;
    if (fixed_k > 0) {
        int64_t want = fixed_k, k = 1;
        for (int64_t c = 1; c <= limit && c <= want; c++)
            if (g % c == 0)
                k = c;
        if (k != want) {
            snprintf(how, how_size, "--meshslice=%lld does not divide the per-device split dim "
                     "(gcd %lld), using K=%lld", (long long)want, (long long)g, (long long)k);
            diag_note(ctx->diag, ms->loc, "meshslice: %s", how);
        } else {
            snprintf(how, how_size, "K=%lld from --meshslice", (long long)k);
        }
        return (int)k;
    }
    /* Exhaustive: the least time over every valid K, then the smallest K
     * within K_TOLERANCE of it (more, thinner slices cost what the model
     * does not see: slicing copies, smaller GEMMs' efficiency). */
    double best_t = 0;
    ir_cost c;
    for (int64_t k = 1; k <= limit; k++) {
        if (g % k)
            continue;
        cost_meshslice_op(m, hw, ms, (int)k, &c);
        if (k == 1 || c.time < best_t)
            best_t = c.time;
    }
    int best = 1;
    for (int64_t k = 1; k <= limit; k++) {
        if (g % k)
            continue;
        cost_meshslice_op(m, hw, ms, (int)k, &c);
        if (c.time <= best_t * (1 + K_TOLERANCE)) {
            best = (int)k;
            best_t = c.time;
            break;
        }
    }
    cost_meshslice_op(m, hw, ms, 1, &c);
    snprintf(how, how_size, "K=%d by the cost model on %s: %.3g us (K=1: %.3g us)", best, hw->name,
             best_t * 1e6, c.time * 1e6);
    return best;
}

int pass_meshslice(pass_ctx *ctx, ir_module *m)
{
    const char *opt = pass_option_value(ctx, "meshslice");
    ms_mode mode = MS_AUTO;
    int fixed_k = 0;
    if (opt && !parse_mode(opt, &mode, &fixed_k)) {
        diag_error(ctx->diag, DIAG_NOLOC, "meshslice: --meshslice wants auto, off or a slice count K, not '%s'",
                   opt);
        return 1;
    }
    if (mode == MS_OFF)
        return 0;
    cost_hw local;
    const cost_hw *hw = ctx->hw;
    if (!hw) {
        char err[512];
        if (cost_hw_load(COST_DEFAULT_HW, &local, err, sizeof err) < 0) {
            diag_error(ctx->diag, DIAG_NOLOC, "meshslice: %s", err);
            return 1;
        }
        hw = &local;
    }
    ir_module_renumber(m);
    ir_op *next;
    for (ir_op *e = m->first; e; e = next) {
        next = e->next;
        gemm2d g;
        if (!recognise(m, e, &g))
            continue;
        ir_op *ms = build(m, &g);
        char how[256];
        int k = choose_k(ctx, fixed_k, m, hw, ms, g.g, how, sizeof how);
        ms->u.ms.k = k;
        ms->u.ms.block = (int)(g.g / k);
        cost_ms_gemm s = global_gemm(m, e);
        ir_ms_dataflow heur = from_model(cost_ms_choose_dataflow(&s));
        char ax[2][4];
        int8_t ra = (int8_t)g.row_axis, ca = (int8_t)g.col_axis;
        ir_axes_str(&m->mesh, &ra, 1, ax[0], sizeof ax[0]);
        ir_axes_str(&m->mesh, &ca, 1, ax[1], sizeof ax[1]);
        ir_op_set_reason(m, ms, NULL, -1,
                         "2D GEMM on mesh rows %s x cols %s as MeshSlice %s (seed 004 Fig. 5), %s",
                         ax[0], ax[1], ir_ms_dataflow_name(g.df), how);
        if (ctx->log) {
            fprintf(ctx->log, "meshslice: %s: %s dataflow, %s; M=%lld N=%lld K=%lld%s%s\n",
                    ms->result->tensor, ir_ms_dataflow_name(g.df), how,
                    (long long)s.m, (long long)s.n, (long long)s.k,
                    heur != g.df ? "; the paper's heuristic (largest matrix stationary) would pick " : "",
                    heur != g.df ? ir_ms_dataflow_name(heur) : "");
        }
        ir_op_insert_before(m, e, ms);
        for (int i = 0; i < 2; i++)
            if (g.gather[i]) {
                if (next == g.gather[i])
                    next = next->next;
                ir_op_remove(m, g.gather[i]);
            }
        if (g.scatter) {
            if (next == g.scatter)
                next = next->next;
            ir_op_remove(m, g.scatter);
        }
        ir_op_remove(m, e);
        ms->result->def = ms;
    }
    return 0;
}
