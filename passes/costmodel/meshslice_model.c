/*
 * meshslice_model.c - time of a 2D GEMM under the five algorithms of seed 004.
 *
 * How it works.  Every algorithm does the same local work (2mnk / chips
 * FLOPs) and moves the same two matrices; they differ in how the movement is
 * cut up and whether it overlaps the GEMM.  A dataflow is therefore reduced
 * to two "moves" (struct move): the matrix that travels along a mesh row
 * (between the `cols` chips of a row, the horizontal ring) and the one that
 * travels along a mesh column (the `rows` chips of a column, the vertical
 * ring), each an AllGather before the GEMM or a ReduceScatter after it
 * (seed 004 Fig. 1, Table 1):
 *
 *     C-stn (OS)   row ring: AllGather A       column ring: AllGather B
 *     A-stn (LS)   row ring: ReduceScatter C   column ring: AllGather B
 *     B-stn (RS)   row ring: AllGather A       column ring: ReduceScatter C
 *
 * An iterated algorithm is then a three-stage software pipeline over S
 * iterations: gather slice s (both rings in parallel, seed 004 3.2.2 assumes
 * the two directions do not interfere), multiply slice s, scatter slice s.
 * With stage times pre, g, post the pipeline takes
 *
 *     pre + g + post + (S - 1) * max(pre, g, post)
 *
 * which is the paper's "prologue + (K-1) * steady state + epilogue"; with
 * no overlap (seed 004 Table 3's TPUs) S * (pre + g + post).  A partial
 * GEMM costs the larger of its FLOPs and its HBM bytes (the stationary
 * matrix is read whole by every slice).
 * MeshSlice uses it with partial collectives of shard/K bytes (Eq. 5)
 * and the copies that cut the sub-shards out (and back in) in those stages,
 * Collective is the same with S = 1 (nothing to overlap), SUMMA with
 * lcm(rows, cols) panels moved by pipelined broadcasts/reductions, whose
 * D + P - 1 stages each pay a synchronization (seed 004 2.3.3, Fig. 3).
 * Wang et al. decompose one ring into P SendRecv steps overlapped with P
 * partial GEMMs and run the other ring's collective unoverlapped; Cannon
 * skews, then shifts both matrices one hop per step over one-way links.
 *
 * In every dataflow the partial GEMMs split one dim: the contracting dim k
 * for C-stn, n for A-stn, m for B-stn (the dim MeshSlice slices, Fig. 5), so
 * one helper (local_gemm) gives the local GEMM of any algorithm from the
 * number of pieces that dim is cut into.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "meshslice_model.h"

/* Figures no profile holds; docs/meshslice.md says where each comes from. */
#define DEFAULT_T_LAUNCH 5e-6     /* ASSUMED: one XLA collective launch on TPU */
#define DEFAULT_GEMM_EFF 0.9      /* ASSUMED: large bf16 GEMM on one TPU v4 chip */
#define DEFAULT_T_GEMM_LAUNCH 1e-6 /* ASSUMED: one local GEMM call */
#define DEFAULT_MXU_TILE 128      /* TPU v4: 128x128 systolic arrays (seed 004, A4) */
#define DEFAULT_BLOCK 8           /* TPU memory tiles 128x8 (seed 004, 3.1.2) */

/* Whether a move gathers before the GEMM or scatters partial sums after it. */
typedef enum move_kind {
    MOVE_NONE,      /* the ring has one chip: nothing moves */
    MOVE_GATHER,    /* AllGather of an input before the GEMM */
    MOVE_SCATTER,   /* ReduceScatter of partial outputs after the GEMM */
} move_kind;

/* One matrix moving over one ring of the mesh. */
typedef struct move {
    move_kind kind;  /* gather, scatter, or nothing */
    int64_t ring;    /* chips in the ring (cols for the row ring, rows for the column ring) */
    double shard;    /* bytes: one chip's shard of the moving matrix */
    double bw;       /* bytes/s of a ring collective on this axis */
} move;

/* A dataflow on a mesh: the two moves and the local GEMM of the Collective
 * algorithm, whose `cut` dim the iterated algorithms split further. */
typedef struct plan {
    move row;        /* along a mesh row (horizontal, `cols` chips) */
    move col;        /* along a mesh column (vertical, `rows` chips) */
    int64_t lm, ln, lk; /* local GEMM of Collective: (lm x lk) * (lk x ln), elements */
    int cut;         /* which of lm (0), ln (1), lk (2) partial GEMMs split */
} plan;

const char *cost_ms_dataflow_name(cost_ms_dataflow df)
{
    switch (df) {
    case COST_MS_DF_C_STN: return "C-stn (OS)";
    case COST_MS_DF_A_STN: return "A-stn (LS)";
    case COST_MS_DF_B_STN: return "B-stn (RS)";
    default: return "?";
    }
}

static const char *const algo_names[COST_MS_ALGO_COUNT] = {"Cannon", "SUMMA", "Collective", "Wang",
                                                     "MeshSlice"};
static const char *const algo_keys[COST_MS_ALGO_COUNT] = {"cannon", "summa", "collective", "wang",
                                                    "meshslice"};
static const char *const df_keys[COST_MS_DF_COUNT] = {"os", "ls", "rs"};

const char *cost_ms_algo_name(cost_ms_algo a)
{
    return (unsigned)a < COST_MS_ALGO_COUNT ? algo_names[a] : "?";
}

const char *cost_ms_dataflow_key(cost_ms_dataflow df)
{
    return (unsigned)df < COST_MS_DF_COUNT ? df_keys[df] : "?";
}

const char *cost_ms_algo_key(cost_ms_algo a)
{
    return (unsigned)a < COST_MS_ALGO_COUNT ? algo_keys[a] : "?";
}

int cost_ms_dataflow_lookup(const char *key)
{
    for (int i = 0; i < COST_MS_DF_COUNT; i++)
        if (strcmp(key, df_keys[i]) == 0)
            return i;
    return -1;
}

int cost_ms_algo_lookup(const char *key)
{
    for (int i = 0; i < COST_MS_ALGO_COUNT; i++)
        if (strcmp(key, algo_keys[i]) == 0)
            return i;
    return -1;
}

void cost_ms_params_from_hw(const cost_hw *hw, ir_dtype t, cost_ms_params *p)
{
    memset(p, 0, sizeof *p);
    p->t_launch = DEFAULT_T_LAUNCH;
    p->l_sync = hw->ici_latency;
    p->bw_ring = hw->ici_bidi_bw;
    p->bw_line = hw->ici_oneway_bw;
    p->bw_link = hw->ici_oneway_bw;
    p->t_launch_rds = p->t_launch;
    p->bw_ring_rds = p->bw_ring;
    p->bw_line_rds = p->bw_line;
    p->t_launch_sr = p->t_launch;
    p->l_sync_sr = p->l_sync;
    p->bw_sr = 0;
    p->wrap = hw->wrap;
    p->wrap_size = hw->wrap_size;
    p->peak_flops = hw->peak_flops[t];
    p->gemm_eff = DEFAULT_GEMM_EFF;
    p->t_gemm_launch = DEFAULT_T_GEMM_LAUNCH;
    p->hbm_bw = hw->hbm_bw;
    p->mxu_tile = DEFAULT_MXU_TILE;
    p->block = DEFAULT_BLOCK;
    p->elem_bytes = (double)ir_dtype_size(t);
}

/* The profile's wraparound rule (cost_hw_axis_wraps, restated on cost_ms_params
 * so the model needs no profile once its figures are copied). */
static bool axis_wraps(const cost_ms_params *p, int64_t size)
{
    switch (p->wrap) {
    case COST_WRAP_ALWAYS: return true;
    case COST_WRAP_NEVER: return false;
    case COST_WRAP_SIZE_EQUALS: return size == p->wrap_size;
    case COST_WRAP_SIZE_MULTIPLE_OF: return p->wrap_size > 0 && size % p->wrap_size == 0;
    }
    return false;
}

double cost_ms_axis_bw(const cost_ms_params *p, int64_t size)
{
    return axis_wraps(p, size) ? p->bw_ring : p->bw_line;
}

double cost_ms_collective_time(const cost_ms_params *p, int64_t ring, double shard_bytes)
{
    if (ring <= 1)
        return 0;
    return p->t_launch + (double)(ring - 1) * (p->l_sync + shard_bytes / cost_ms_axis_bw(p, ring));
}

double cost_ms_reduce_scatter_time(const cost_ms_params *p, int64_t ring, double shard_bytes)
{
    if (ring <= 1)
        return 0;
    double bw = axis_wraps(p, ring) ? p->bw_ring_rds : p->bw_line_rds;
    return p->t_launch_rds + (double)(ring - 1) * (p->l_sync + shard_bytes / bw);
}

/* Eq. 5 for move kind `kind` (an AllGather or a ReduceScatter). */
static double move_time(const cost_ms_params *p, int kind_scatter, int64_t ring, double shard_bytes)
{
    return kind_scatter ? cost_ms_reduce_scatter_time(p, ring, shard_bytes)
                        : cost_ms_collective_time(p, ring, shard_bytes);
}

static double pad(const cost_ms_params *p, int64_t x)
{
    int64_t t = p->mxu_tile > 0 ? p->mxu_tile : 1;
    return (double)((x + t - 1) / t * t);
}

double cost_ms_gemm_time(const cost_ms_params *p, int64_t m, int64_t n, int64_t k)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0;
    double flops = 2.0 * pad(p, m) * pad(p, n) * pad(p, k);
    return p->t_gemm_launch + flops / (p->peak_flops * p->gemm_eff);
}

double cost_ms_partial_gemm_time(const cost_ms_params *p, int64_t m, int64_t n, int64_t k, bool accumulate)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0;
    double compute = cost_ms_gemm_time(p, m, n, k) - p->t_gemm_launch;
    if (p->hbm_bw <= 0)
        return p->t_gemm_launch + compute;
    double dm = (double)m, dn = (double)n, dk = (double)k;
    double bytes = p->elem_bytes * (dm * dk + dk * dn + dm * dn * (accumulate ? 2.0 : 1.0));
    return p->t_gemm_launch + fmax(compute, bytes / p->hbm_bw);
}

double cost_ms_gemm_flops(const cost_ms_gemm *g)
{
    return 2.0 * (double)g->m * (double)g->n * (double)g->k;
}

cost_ms_dataflow cost_ms_choose_dataflow(const cost_ms_gemm *g)
{
    double a = (double)g->m * (double)g->k;
    double b = (double)g->k * (double)g->n;
    double c = (double)g->m * (double)g->n;
    if (c >= a && c >= b)
        return COST_MS_DF_C_STN;
    return a >= b ? COST_MS_DF_A_STN : COST_MS_DF_B_STN;
}

bool cost_ms_mesh_valid(const cost_ms_gemm *g, cost_ms_mesh mesh, cost_ms_dataflow df)
{
    if (mesh.rows < 1 || mesh.cols < 1 || g->m < 1 || g->n < 1 || g->k < 1)
        return false;
    /* Each matrix's rows over the mesh rows, its columns over the columns;
     * A-stn keeps B transposed (B^T[n,k]), B-stn keeps A transposed (A^T[k,m])
     * so that the stationary layout serves all three GEMMs of training
     * (seed 004, 3.2.1). */
    int64_t ar = g->m, ac = g->k, br = g->k, bc = g->n;
    if (df == COST_MS_DF_A_STN)
        br = g->n, bc = g->k;
    if (df == COST_MS_DF_B_STN)
        ar = g->k, ac = g->m;
    return ar % mesh.rows == 0 && ac % mesh.cols == 0 && br % mesh.rows == 0 &&
           bc % mesh.cols == 0 && g->m % mesh.rows == 0 && g->n % mesh.cols == 0;
}

int64_t cost_ms_sliced_dim(const cost_ms_gemm *g, cost_ms_dataflow df)
{
    switch (df) {
    case COST_MS_DF_C_STN: return g->k;
    case COST_MS_DF_A_STN: return g->n;
    default: return g->m;
    }
}

bool cost_ms_slices_valid(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh,
                          cost_ms_dataflow df, int64_t slices)
{
    if (slices < 1 || !cost_ms_mesh_valid(g, mesh, df))
        return false;
    if (slices == 1)
        return true; /* no slicing: the Collective algorithm */
    int64_t d = cost_ms_sliced_dim(g, df);
    int64_t unit = slices * (p->block > 0 ? p->block : 1);
    /* The sliced dim is split over the rows in one matrix and the columns in
     * the other (C-stn: A's k over cols, B's k over rows; A-stn: B^T's n over
     * rows, C's n over cols; B-stn: A^T's m over cols, C's m over rows). */
    return (d / mesh.rows) % unit == 0 && (d / mesh.cols) % unit == 0;
}

static move make_move(const cost_ms_params *p, move_kind kind, int64_t ring, double global_bytes,
                      int64_t chips)
{
    move mv = {MOVE_NONE, ring, global_bytes / (double)chips, cost_ms_axis_bw(p, ring)};
    if (ring > 1)
        mv.kind = kind;
    return mv;
}

static plan make_plan(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh, cost_ms_dataflow df)
{
    int64_t chips = mesh.rows * mesh.cols;
    double e = p->elem_bytes;
    double a = e * (double)g->m * (double)g->k;
    double b = e * (double)g->k * (double)g->n;
    double c = e * (double)g->m * (double)g->n;
    plan pl;
    memset(&pl, 0, sizeof pl);
    switch (df) {
    case COST_MS_DF_C_STN:
        pl.row = make_move(p, MOVE_GATHER, mesh.cols, a, chips);
        pl.col = make_move(p, MOVE_GATHER, mesh.rows, b, chips);
        pl.lm = g->m / mesh.rows, pl.ln = g->n / mesh.cols, pl.lk = g->k, pl.cut = 2;
        break;
    case COST_MS_DF_A_STN:
        pl.row = make_move(p, MOVE_SCATTER, mesh.cols, c, chips);
        pl.col = make_move(p, MOVE_GATHER, mesh.rows, b, chips);
        pl.lm = g->m / mesh.rows, pl.ln = g->n, pl.lk = g->k / mesh.cols, pl.cut = 1;
        break;
    default:
        pl.row = make_move(p, MOVE_GATHER, mesh.cols, a, chips);
        pl.col = make_move(p, MOVE_SCATTER, mesh.rows, c, chips);
        pl.lm = g->m, pl.ln = g->n / mesh.cols, pl.lk = g->k / mesh.rows, pl.cut = 0;
        break;
    }
    return pl;
}

/* Local GEMM time when the cut dim is split into `pieces` (rounded up: an
 * uneven split pays for its largest piece).  Split pieces of C-stn's
 * contraction accumulate into C, which each piece reads and writes. */
static double local_gemm(const cost_ms_params *p, const plan *pl, int64_t pieces)
{
    int64_t d[3] = {pl->lm, pl->ln, pl->lk};
    d[pl->cut] = (d[pl->cut] + pieces - 1) / pieces;
    return cost_ms_partial_gemm_time(p, d[0], d[1], d[2], pl->cut == 2 && pieces > 1);
}

/* Three-stage software pipeline of `iters` iterations (module comment);
 * without overlap (p->no_overlap) every stage waits for the previous one. */
static double pipeline(const cost_ms_params *p, double pre, double g, double post, int64_t iters)
{
    if (p->no_overlap)
        return (double)iters * (pre + g + post);
    double steady = fmax(pre, fmax(g, post));
    return pre + g + post + (double)(iters - 1) * steady;
}

/* The per-iteration gather and scatter stage times when every move sends
 * `frac` of its shard per collective call: the two rings run in parallel. */
static void stages(const cost_ms_params *p, const plan *pl, double frac, double *pre, double *post)
{
    const move *mv[2] = {&pl->row, &pl->col};
    *pre = *post = 0;
    for (int i = 0; i < 2; i++) {
        double t = move_time(p, mv[i]->kind == MOVE_SCATTER, mv[i]->ring, mv[i]->shard * frac);
        if (mv[i]->kind == MOVE_GATHER)
            *pre = fmax(*pre, t);
        else if (mv[i]->kind == MOVE_SCATTER)
            *post = fmax(*post, t);
    }
}

/* Sum of both moves' whole collectives: the communication of Collective,
 * reported as t_comm for every algorithm (what would be exposed unoverlapped). */
static double comm_total(const cost_ms_params *p, const plan *pl)
{
    return move_time(p, pl->row.kind == MOVE_SCATTER, pl->row.ring, pl->row.shard) +
           move_time(p, pl->col.kind == MOVE_SCATTER, pl->col.ring, pl->col.shard);
}

/* Seconds of one iteration's slicing copies of move `mv` cut into k sub-shards. */
static double slice_copy_time(const cost_ms_params *p, const move *mv, int64_t k)
{
    return mv->kind == MOVE_NONE ? 0 : cost_ms_slice_copy_time(p, mv->shard, k);
}

/* MeshSlice with K slices; K = 1 is Collective (seed 004, 3.2.2).  The
 * slicing copies belong to the gather and scatter stages, which overlap
 * the partial GEMMs (3.1.1); both copies share the HBM, so they add up. */
static double time_meshslice(const cost_ms_params *p, const plan *pl, int64_t k, double *t_comp)
{
    double pre, post;
    stages(p, pl, 1.0 / (double)k, &pre, &post);
    const move *mv[2] = {&pl->row, &pl->col};
    for (int i = 0; i < 2; i++) {
        if (mv[i]->kind == MOVE_GATHER)
            pre += slice_copy_time(p, mv[i], k);
        else
            post += slice_copy_time(p, mv[i], k);
    }
    double g = local_gemm(p, pl, k);
    *t_comp = g * (double)k;
    return pipeline(p, pre, g, post, k);
}

/* Collective as seed 004's authors price XLA's 2D GEMM on a real TPU
 * (CostModel.py GSPMD_OS/LS/RS, github.com/hwnam831/meshslice): a
 * ReduceScatter (LS, RS), or for OS the AllGather along the mesh rows, runs
 * exposed; the other move, an AllGather, takes max(GEMM, AllGather).
 * Without overlap it is the plain Collective. */
static double time_collective_overlap(const cost_ms_params *p, const plan *pl, double *t_comp)
{
    if (p->no_overlap) /* nothing hides: the plain Collective */
        return time_meshslice(p, pl, 1, t_comp);
    double g = local_gemm(p, pl, 1);
    double row = move_time(p, pl->row.kind == MOVE_SCATTER, pl->row.ring, pl->row.shard);
    double col = move_time(p, pl->col.kind == MOVE_SCATTER, pl->col.ring, pl->col.shard);
    *t_comp = g;
    if (pl->col.kind == MOVE_SCATTER)
        return col + fmax(g, row);
    return row + fmax(g, col);
}

/* Broadcast (or reduce) of `bytes` over a ring of P chips as D packets in
 * D + P - 1 pipelined stages, one synchronization each (seed 004 2.3.3,
 * Fig. 3), with the D that minimises the time (at most one packet per
 * `block` elements). */
static double bcast_time(const cost_ms_params *p, int64_t ring, double bytes)
{
    if (ring <= 1)
        return 0;
    double bw = cost_ms_axis_bw(p, ring);
    double max_d = fmax(1.0, floor(bytes / (p->elem_bytes * (double)(p->block > 0 ? p->block : 1))));
    double d_opt = sqrt((double)(ring - 1) * bytes / (bw * p->l_sync));
    double best = INFINITY;
    double cand[2] = {floor(d_opt), ceil(d_opt)};
    for (int i = 0; i < 2; i++) {
        double d = fmin(fmax(cand[i], 1.0), max_d);
        double t = p->t_launch + (d + (double)ring - 1) * (p->l_sync + bytes / (d * bw));
        best = fmin(best, t);
    }
    return best;
}

int64_t cost_ms_gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* SUMMA with lcm(rows, cols) panels (seed 004 2.3.3): each move's block row
 * (or column), ring * shard bytes, is cut into that many panels. */
static double time_summa(const cost_ms_params *p, const plan *pl, int64_t panels, double *t_comp)
{
    const move *mv[2] = {&pl->row, &pl->col};
    double pre = 0, post = 0;
    for (int i = 0; i < 2; i++) {
        double t = bcast_time(p, mv[i]->ring, mv[i]->shard * (double)mv[i]->ring / (double)panels);
        if (mv[i]->kind == MOVE_GATHER)
            pre = fmax(pre, t);
        else if (mv[i]->kind == MOVE_SCATTER)
            post = fmax(post, t);
    }
    double g = local_gemm(p, pl, panels);
    *t_comp = g * (double)panels;
    return pipeline(p, pre, g, post, panels);
}

/* Wang et al. (seed 004 2.3.4): decompose move `d` into P SendRecv steps
 * overlapped with P partial GEMMs; the other move runs whole, before
 * (gather) or after (scatter) the loop.  A step moves one shard around the
 * ring, half each way as the authors' Wang_OS does (TensorParallel.py,
 * github.com/hwnam831/meshslice), at bw_sr (0: the axis's ring bandwidth,
 * which already counts both directions). */
static double time_wang_one(const cost_ms_params *p, const plan *pl, const move *d, const move *o,
                            double *t_comp)
{
    int64_t steps = d->ring;
    double g = local_gemm(p, pl, steps);
    double t_step = p->t_launch_sr + p->l_sync_sr + d->shard / (p->bw_sr > 0 ? p->bw_sr : d->bw);
    double t_other = move_time(p, o->kind == MOVE_SCATTER, o->ring, o->shard);
    *t_comp = g * (double)steps;
    if (p->no_overlap)
        return t_other + (double)steps * g + (double)(steps - 1) * t_step;
    return t_other + g + (double)(steps - 1) * fmax(g, t_step);
}

static double time_wang(const cost_ms_params *p, const plan *pl, int64_t *steps, double *t_comp)
{
    double best = INFINITY, tc = 0;
    if (pl->row.kind != MOVE_NONE) {
        best = time_wang_one(p, pl, &pl->row, &pl->col, &tc);
        *steps = pl->row.ring;
        *t_comp = tc;
    }
    if (pl->col.kind != MOVE_NONE) {
        double t = time_wang_one(p, pl, &pl->col, &pl->row, &tc);
        if (t < best) {
            best = t;
            *steps = pl->col.ring;
            *t_comp = tc;
        }
    }
    if (best == INFINITY) { /* a 1 x 1 mesh: just the GEMM */
        *steps = 1;
        return time_meshslice(p, pl, 1, t_comp);
    }
    return best;
}

/* Cannon on a q x q torus (seed 004 2.3.2): skew the gathered matrices by up
 * to q/2 hops, q multiply-and-shift steps with one-hop SendRecv over one-way
 * links, and unskew a scattered output at the end. */
static double time_cannon(const cost_ms_params *p, const plan *pl, int64_t q, double *t_comp)
{
    const move *mv[2] = {&pl->row, &pl->col};
    double skew_in = 0, skew_out = 0, shift = 0;
    for (int i = 0; i < 2; i++) {
        if (mv[i]->kind == MOVE_NONE)
            continue;
        double hops = (double)(q / 2);
        double skew = p->t_launch_sr + hops * (p->l_sync_sr + mv[i]->shard / p->bw_link);
        if (mv[i]->kind == MOVE_GATHER)
            skew_in = fmax(skew_in, skew);
        else
            skew_out = fmax(skew_out, skew);
        shift = fmax(shift, p->t_launch_sr + p->l_sync_sr + mv[i]->shard / p->bw_link);
    }
    double g = local_gemm(p, pl, q);
    *t_comp = g * (double)q;
    if (p->no_overlap)
        return skew_in + (double)q * g + (double)(q - 1) * shift + skew_out;
    return skew_in + g + (double)(q - 1) * fmax(g, shift) + skew_out;
}

static cost_ms_estimate invalid(const char *why)
{
    cost_ms_estimate e;
    memset(&e, 0, sizeof e);
    e.why = why;
    return e;
}

/* The time of `algo` on plan `pl` into e->time, e->t_compute and e->slices;
 * returns NULL, or why the configuration cannot run. */
static const char *algo_time(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh,
                             cost_ms_dataflow df, const plan *pl, cost_ms_algo algo, int64_t slices,
                             cost_ms_estimate *e)
{
    e->slices = 1;
    switch (algo) {
    case COST_MS_ALGO_COLLECTIVE:
        e->time = p->collective_overlap ? time_collective_overlap(p, pl, &e->t_compute)
                                        : time_meshslice(p, pl, 1, &e->t_compute);
        return NULL;
    case COST_MS_ALGO_MESHSLICE:
        if (!cost_ms_slices_valid(p, g, mesh, df, slices))
            return "K must divide the sliced dim's per-device size into blocks of B";
        e->slices = slices;
        e->time = time_meshslice(p, pl, slices, &e->t_compute);
        return NULL;
    case COST_MS_ALGO_SUMMA: {
        int64_t panels = mesh.rows / cost_ms_gcd64(mesh.rows, mesh.cols) * mesh.cols;
        if (cost_ms_sliced_dim(g, df) % panels != 0)
            return "SUMMA's lcm(rows, cols) panels do not divide the sliced dim";
        e->slices = panels;
        e->time = time_summa(p, pl, panels, &e->t_compute);
        return NULL;
    }
    case COST_MS_ALGO_WANG:
        e->time = time_wang(p, pl, &e->slices, &e->t_compute);
        return NULL;
    case COST_MS_ALGO_CANNON:
        if (mesh.rows != mesh.cols)
            return "Cannon needs a square mesh";
        if (mesh.rows > 1 && !axis_wraps(p, mesh.rows))
            return "Cannon's cyclic shifts need wraparound on both mesh axes";
        if (cost_ms_sliced_dim(g, df) % mesh.rows != 0)
            return "the sliced dim does not divide into q Cannon steps";
        e->slices = mesh.rows;
        e->time = time_cannon(p, pl, mesh.rows, &e->t_compute);
        return NULL;
    default:
        return "unknown algorithm";
    }
}

cost_ms_estimate cost_ms_time(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh,
                              cost_ms_dataflow df, cost_ms_algo algo, int64_t slices)
{
    if ((unsigned)df >= COST_MS_DF_COUNT || (unsigned)algo >= COST_MS_ALGO_COUNT)
        return invalid("unknown dataflow or algorithm");
    if (p->peak_flops <= 0 || p->gemm_eff <= 0 || p->bw_ring <= 0 || p->bw_line <= 0 ||
        p->bw_link <= 0 || p->elem_bytes <= 0 || p->l_sync < 0 || p->t_launch < 0 || p->hbm_bw < 0 ||
        p->bw_ring_rds <= 0 || p->bw_line_rds <= 0 || p->t_launch_rds < 0 || p->t_launch_sr < 0 ||
        p->l_sync_sr < 0 || p->bw_sr < 0)
        return invalid("model parameters must be positive");
    if (!cost_ms_mesh_valid(g, mesh, df))
        return invalid("the matrices do not divide evenly over the mesh");
    plan pl = make_plan(p, g, mesh, df);
    cost_ms_estimate e;
    memset(&e, 0, sizeof e);
    const char *why = algo_time(p, g, mesh, df, &pl, algo, slices, &e);
    if (why)
        return invalid(why);
    /* The same configuration with every stage serialized (Wang keeps its
     * steps; the other algorithms their slices or panels). */
    cost_ms_params serial = *p;
    serial.no_overlap = true;
    cost_ms_estimate s = e;
    algo_time(&serial, g, mesh, df, &pl, algo, e.slices, &s);
    e.valid = true;
    e.t_serial = s.time;
    if (algo == COST_MS_ALGO_MESHSLICE)
        e.t_slicing = (double)e.slices * (slice_copy_time(p, &pl.row, e.slices) + slice_copy_time(p, &pl.col, e.slices));
    e.t_comm = comm_total(p, &pl);
    e.t_exposed = fmax(0.0, e.time - e.t_compute);
    e.utilization = cost_ms_gemm_flops(g) / (e.time * (double)(mesh.rows * mesh.cols) * p->peak_flops);
    return e;
}

cost_ms_estimate cost_ms_best_slices(const cost_ms_params *p, const cost_ms_gemm *g,
                                     cost_ms_mesh mesh, cost_ms_dataflow df, cost_ms_algo algo)
{
    if (algo != COST_MS_ALGO_MESHSLICE)
        return cost_ms_time(p, g, mesh, df, algo, 1);
    cost_ms_estimate best = cost_ms_time(p, g, mesh, df, algo, 1);
    if (!best.valid)
        return best;
    int64_t d = cost_ms_sliced_dim(g, df);
    int64_t lim = d / (mesh.rows > mesh.cols ? mesh.rows : mesh.cols);
    if (lim > COST_MS_MAX_SLICES)
        lim = COST_MS_MAX_SLICES;
    for (int64_t k = 2; k <= lim; k++) {
        if (!cost_ms_slices_valid(p, g, mesh, df, k))
            continue;
        cost_ms_estimate e = cost_ms_time(p, g, mesh, df, algo, k);
        if (e.valid && e.time < best.time)
            best = e;
    }
    return best;
}

void cost_ms_training_gemms(const cost_ms_layer *fwd, cost_ms_dataflow df, cost_ms_layer out[3])
{
    int64_t m = fwd->gemm.m, n = fwd->gemm.n, k = fwd->gemm.k;
    for (int i = 0; i < 3; i++) {
        out[i] = *fwd;
        out[i].fixed_df = true;
    }
    out[0].df = df;
    /* Derivation in docs/meshslice.md ("Training"): with GEMM X = Y Z, C-stn
     * moves Y along rows and Z along columns, A-stn X along rows and Z along
     * columns, B-stn Y along rows and X along columns. */
    switch (df) {
    case COST_MS_DF_C_STN: /* C stays; A (and A') along rows, B (and B') along columns */
        out[1].gemm = (cost_ms_gemm){m, k, n}, out[1].df = COST_MS_DF_A_STN; /* A' = C' B^T */
        out[2].gemm = (cost_ms_gemm){k, n, m}, out[2].df = COST_MS_DF_B_STN; /* B' = A^T C' */
        break;
    case COST_MS_DF_A_STN: /* A stays; C along rows, B along columns */
        out[1].gemm = (cost_ms_gemm){m, k, n}, out[1].df = COST_MS_DF_C_STN; /* A' = C' B^T */
        out[2].gemm = (cost_ms_gemm){n, k, m}, out[2].df = COST_MS_DF_B_STN; /* B'^T = C'^T A */
        break;
    default:          /* B stays; A along rows, C along columns */
        out[1].gemm = (cost_ms_gemm){k, m, n}, out[1].df = COST_MS_DF_A_STN; /* A'^T = B C'^T */
        out[2].gemm = (cost_ms_gemm){k, n, m}, out[2].df = COST_MS_DF_C_STN; /* B' = A^T C' */
        break;
    }
}

/* A layer's dataflow: the override `df` (>= 0), else the layer's fixed one,
 * else the heuristic. */
static cost_ms_dataflow layer_df(const cost_ms_layer *l, int df)
{
    if (df >= 0 && df < COST_MS_DF_COUNT)
        return (cost_ms_dataflow)df;
    return l->fixed_df ? l->df : cost_ms_choose_dataflow(&l->gemm);
}

static double layers_flops(const cost_ms_layer *layers, int n)
{
    double flops = 0;
    for (int i = 0; i < n; i++)
        flops += layers[i].repeat * cost_ms_gemm_flops(&layers[i].gemm);
    return flops;
}

/* The K (1..COST_MS_MAX_SLICES, valid for every member) with the least
 * total MeshSlice time over the layers of layer i's k_group; ties keep the
 * smaller K. */
static int64_t group_k(const cost_ms_params *p, const cost_ms_layer *layers, int n, int i, cost_ms_mesh mesh,
                       int df)
{
    int64_t lim = COST_MS_MAX_SLICES;
    for (int j = 0; j < n; j++)
        if (layers[j].k_group == layers[i].k_group) {
            int64_t d = cost_ms_sliced_dim(&layers[j].gemm, layer_df(&layers[j], df));
            int64_t l = d / (mesh.rows > mesh.cols ? mesh.rows : mesh.cols);
            lim = l < lim ? l : lim;
        }
    int64_t best_k = 1;
    double best = INFINITY;
    for (int64_t k = 1; k <= lim; k++) {
        double t = 0;
        for (int j = 0; j < n && t < INFINITY; j++) {
            if (layers[j].k_group != layers[i].k_group)
                continue;
            cost_ms_estimate e = cost_ms_time(p, &layers[j].gemm, mesh, layer_df(&layers[j], df),
                                              COST_MS_ALGO_MESHSLICE, k);
            t = e.valid ? t + layers[j].repeat * e.time : INFINITY;
        }
        if (t < best) {
            best = t;
            best_k = k;
        }
    }
    return best_k;
}

cost_ms_tune_result cost_ms_tune_mesh(const cost_ms_params *p, const cost_ms_layer *layers, int n,
                                      cost_ms_mesh mesh, cost_ms_algo algo, int df, int64_t common_k,
                                      cost_ms_layer_choice *choices)
{
    cost_ms_tune_result res;
    memset(&res, 0, sizeof res);
    res.mesh = mesh;
    if (n < 1 || mesh.rows < 1 || mesh.cols < 1)
        return res;
    int last_group = 0;
    int64_t last_k = 0;
    for (int i = 0; i < n; i++) {
        const cost_ms_gemm *g = &layers[i].gemm;
        cost_ms_dataflow d = layer_df(&layers[i], df);
        int64_t k = common_k;
        if (algo == COST_MS_ALGO_MESHSLICE && k <= 0 && layers[i].k_group != 0) {
            if (layers[i].k_group != last_group) /* members are usually adjacent */
                last_k = group_k(p, layers, n, i, mesh, df), last_group = layers[i].k_group;
            k = last_k;
        }
        cost_ms_estimate e = algo == COST_MS_ALGO_MESHSLICE && k > 0 ? cost_ms_time(p, g, mesh, d, algo, k)
                                                                      : cost_ms_best_slices(p, g, mesh, d, algo);
        if (!e.valid)
            return res;
        if (choices) {
            choices[i].df = d;
            choices[i].est = e;
        }
        res.time += layers[i].repeat * e.time;
        res.time_serial += layers[i].repeat * e.t_serial;
        res.time_slicing += layers[i].repeat * e.t_slicing;
    }
    res.found = true;
    res.utilization = layers_flops(layers, n) / (res.time * (double)(mesh.rows * mesh.cols) * p->peak_flops);
    return res;
}

cost_ms_tune_result cost_ms_tune(const cost_ms_params *p, const cost_ms_layer *layers, int n, int64_t chips,
                                 cost_ms_algo algo, int df, int64_t common_k, cost_ms_layer_choice *choices)
{
    cost_ms_tune_result best;
    memset(&best, 0, sizeof best);
    for (int64_t r = 1; r <= chips; r++) {
        if (chips % r != 0)
            continue;
        cost_ms_mesh mesh = {r, chips / r};
        cost_ms_tune_result t = cost_ms_tune_mesh(p, layers, n, mesh, algo, df, common_k, NULL);
        if (t.found && (!best.found || t.time < best.time))
            best = t;
    }
    if (best.found && choices)
        cost_ms_tune_mesh(p, layers, n, best.mesh, algo, df, common_k, choices);
    return best;
}

int64_t cost_ms_best_common_k(const cost_ms_params *p, const cost_ms_layer *layers, int n,
                              cost_ms_mesh mesh, int df)
{
    if (n < 1 || mesh.rows < 1 || mesh.cols < 1)
        return 0;
    int64_t lim = INT64_MAX;
    for (int i = 0; i < n; i++) {
        const cost_ms_gemm *g = &layers[i].gemm;
        int64_t d = cost_ms_sliced_dim(g, layer_df(&layers[i], df));
        int64_t l = d / (mesh.rows > mesh.cols ? mesh.rows : mesh.cols);
        if (l < lim)
            lim = l;
    }
    if (lim > COST_MS_MAX_SLICES)
        lim = COST_MS_MAX_SLICES;
    int64_t best_k = 0;
    double best = INFINITY;
    for (int64_t k = 1; k <= lim; k++) {
        cost_ms_tune_result t = cost_ms_tune_mesh(p, layers, n, mesh, COST_MS_ALGO_MESHSLICE, df, k, NULL);
        if (t.found && t.time < best) {
            best = t.time;
            best_k = k;
        }
    }
    return best_k;
}
