/*
 * pipeline_sched.c - the orders of the pipeline schedules (which item each
 * stage runs next) and pp_build, which checks the parameters, builds the
 * orders and has pipeline_sim.c time them.
 *
 * GPipe, 1F1B and interleaved are fixed orders that depend only on (Z, M,
 * v, s), written as the papers and Megatron-LM's schedules.py state them.
 * Zero-bubble (ZB-H1) keeps 1F1B's order of F and B passes and places the W
 * passes while simulating: a stage runs a pending W when its next F or B
 * is not ready yet (the W fills what would be a bubble), or when running
 * the next F would hold more than Z microbatches' activations (the memory
 * limit of ZB-H1: no stage above 1F1B's peak, Qi et al., section 3.1);
 * the W passes still pending when the F and B passes are done run last.
 * ZB-H2 (same section, figure 4) is built the same way from an order of F
 * and B passes with twice 1F1B's warm-up, 2 (Z - s - 1) forwards on stage
 * s, and a limit of 2Z - 1 microbatches held.
 * The W's placement therefore depends on the times, and its order is then
 * replayed like any other (e.g. by pp_print_table with unit times).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"

/* Most Z * v * M work units a plan may have (memory stays under ~100 MB). */
#define PP_MAX_UNITS (1 << 20)

static const char *const schedule_names[PP_SCHEDULE_COUNT] = {"gpipe", "1f1b", "interleaved",
                                                              "zb-h1", "zb-h2"};

const char *pp_schedule_name(pp_schedule s)
{
    if ((int)s == PP_ZB_AUTO)
        return "zero-bubble";
    return (int)s >= 0 && (int)s < PP_SCHEDULE_COUNT ? schedule_names[s] : "?";
}

bool pp_schedule_splits(pp_schedule s)
{
    return s == PP_ZB_H1 || s == PP_ZB_H2 || (int)s == PP_ZB_AUTO;
}

int pp_schedule_lookup(const char *name)
{
    for (int i = 0; name && i < PP_SCHEDULE_COUNT; i++)
        if (strcmp(name, schedule_names[i]) == 0)
            return i;
    return name && strcmp(name, "zero-bubble") == 0 ? PP_ZB_AUTO : -1;
}

/* Checks one per-stage time array; 0 or -1 with a message. */
static int check_times(const double *t, const char *what, int Z, char *err, size_t errlen)
{
    if (!t) {
        snprintf(err, errlen, "pipeline: %s is missing (one time per stage needed)", what);
        return -1;
    }
    for (int s = 0; s < Z; s++) {
        if (!isfinite(t[s]) || t[s] < 0.0) {
            snprintf(err, errlen, "pipeline: %s[%d] = %g, must be a finite time >= 0 seconds", what,
                     s, t[s]);
            return -1;
        }
    }
    return 0;
}

/* 0 if `p` can be built with `schedule`, else -1 with a message. */
static int check_params(const pp_params *p, pp_schedule schedule, char *err, size_t errlen)
{
    if (!p) {
        snprintf(err, errlen, "pipeline: no parameters");
        return -1;
    }
    if ((int)schedule < 0 || (int)schedule >= PP_SCHEDULE_COUNT) {
        snprintf(err, errlen, "pipeline: unknown schedule %d", (int)schedule);
        return -1;
    }
    const char *name = pp_schedule_name(schedule);
    if (p->stages < 1) {
        snprintf(err, errlen, "pipeline: %d stages, need at least 1", p->stages);
        return -1;
    }
    if (p->microbatches < 1) {
        snprintf(err, errlen, "pipeline: %d microbatches, need at least 1", p->microbatches);
        return -1;
    }
    int v = p->chunks;
    if (schedule == PP_INTERLEAVED) {
        if (v < 2) {
            snprintf(err, errlen,
                     "pipeline: interleaved needs at least 2 chunks per stage, got %d "
                     "(with 1 chunk use 1f1b)",
                     v);
            return -1;
        }
        /* Megatron-LM's interleaved schedule runs microbatches in groups of
         * Z per chunk (Narayanan et al. SC'21, section 2.2.2). */
        if (p->microbatches % p->stages != 0) {
            snprintf(err, errlen,
                     "pipeline: interleaved needs the microbatches (%d) to be a multiple of "
                     "the stages (%d)",
                     p->microbatches, p->stages);
            return -1;
        }
    } else if (v != 0 && v != 1) {
        snprintf(err, errlen, "pipeline: %s runs 1 chunk per stage, got %d (chunks are for interleaved)",
                 name, v);
        return -1;
    }
    if (v < 1)
        v = 1;
    if ((long long)p->stages * v * p->microbatches > PP_MAX_UNITS) {
        snprintf(err, errlen, "pipeline: %d stages x %d chunks x %d microbatches is more than %d items",
                 p->stages, v, p->microbatches, PP_MAX_UNITS);
        return -1;
    }
    if (check_times(p->t_f, "t_f", p->stages, err, errlen) ||
        check_times(p->t_b, "t_b", p->stages, err, errlen))
        return -1;
    if (pp_schedule_splits(schedule) && check_times(p->t_w, "t_w", p->stages, err, errlen))
        return -1;
    if (!isfinite(p->t_p2p) || p->t_p2p < 0.0) {
        snprintf(err, errlen, "pipeline: t_p2p = %g, must be a finite time >= 0 seconds", p->t_p2p);
        return -1;
    }
    return 0;
}

/* Appends (kind, m, c) to a stage's order. */
static void push(pp_stage_plan *st, pp_kind kind, int m, int c)
{
    st->items[st->n_items++] = (pp_item){.kind = kind, .microbatch = m, .chunk = c};
}

/* GPipe (Huang et al. 2019, figure 2c): all M forwards, then all M
 * backwards in the same order. */
static void order_gpipe(pp_stage_plan *st, int M)
{
    for (int m = 0; m < M; m++)
        push(st, PP_F, m, 0);
    for (int m = 0; m < M; m++)
        push(st, PP_B, m, 0);
}

/* 1F1B / PipeDream-Flush (Narayanan et al. ICML'21, figure 2; Megatron-LM
 * forward_backward_pipelining_without_interleaving): a stage runs
 * min(warmup, M) warm-up forwards, then pairs (F, B), then the remaining
 * backwards, so at most min(warmup + 1, M) microbatches are held.  1F1B's
 * stage s of Z has warmup = Z - s - 1; ZB-H2's F and B order has
 * 2 (Z - s - 1). */
static void order_1f1b(pp_stage_plan *st, int warmup, int M)
{
    warmup = warmup < M ? warmup : M;
    for (int m = 0; m < warmup; m++)
        push(st, PP_F, m, 0);
    for (int i = 0; i < M - warmup; i++) {
        push(st, PP_F, warmup + i, 0);
        push(st, PP_B, i, 0);
    }
    for (int m = M - warmup; m < M; m++)
        push(st, PP_B, m, 0);
}

/* The k-th forward (or backward) of a device in the interleaved schedule:
 * microbatches go in groups of Z through chunk 0, then the same group
 * through chunk 1, ...; backwards visit the chunks in reverse (Megatron-LM
 * schedules.py, get_model_chunk_id). */
static void interleaved_unit(int k, int Z, int v, bool forward, int *m, int *c)
{
    int in_group = k % (Z * v);
    *c = forward ? in_group / Z : v - 1 - in_group / Z;
    *m = k / (Z * v) * Z + k % Z;
}

/* Interleaved 1F1B (Narayanan et al. SC'21, figure 4; Megatron-LM
 * forward_backward_pipelining_with_interleaving): M v forwards and
 * backwards per device, warm-up (Z - s - 1) * 2 + (v - 1) * Z forwards
 * (all of them when M = Z), then 1F1B, then the remaining backwards. */
static void order_interleaved(pp_stage_plan *st, int Z, int M, int v, int s)
{
    int total = M * v;
    int warmup = M == Z ? total : (Z - s - 1) * 2 + (v - 1) * Z;
    warmup = warmup < total ? warmup : total;
    int m, c;
    for (int k = 0; k < warmup; k++) {
        interleaved_unit(k, Z, v, true, &m, &c);
        push(st, PP_F, m, c);
    }
    for (int i = 0; i < total - warmup; i++) {
        interleaved_unit(warmup + i, Z, v, true, &m, &c);
        push(st, PP_F, m, c);
        interleaved_unit(i, Z, v, false, &m, &c);
        push(st, PP_B, m, c);
    }
    for (int k = total - warmup; k < total; k++) {
        interleaved_unit(k, Z, v, false, &m, &c);
        push(st, PP_B, m, c);
    }
}

/* Where one stage is in the zero-bubble construction. */
typedef struct zb_stage {
    pp_stage_plan fb; /* 1F1B's order of the F and B passes */
    int next_fb;      /* next index in fb */
    int f_done;       /* forwards run */
    int b_done;       /* backwards run; B runs in microbatch order 0, 1, ... */
    int w_done;       /* W passes run, also in microbatch order */
} zb_stage;

/* The item stage s would run next and when; false if it must wait for an
 * item of another stage that has not run yet.  A pending W fills a wait
 * for the next F or B only when the wait is at least min_gap: a W much
 * longer than the wait (a short transfer) would delay that F or B by the
 * difference.  A W also runs first when the next F would hold more than
 * `limit` microbatches (F done, W not done). */
static bool zb_candidate(const pp_sim *sim, const zb_stage *z, int s, double min_gap, int limit, pp_item *it,
                         double *start)
{
    double free_at = sim->free_at[s];
    bool w_pending = z->b_done > z->w_done;
    pp_item w = {.kind = PP_W, .microbatch = z->w_done, .chunk = 0};
    if (z->next_fb == z->fb.n_items) {
        *it = w;
        *start = free_at;
        return w_pending;
    }
    const pp_item *next = &z->fb.items[z->next_fb];
    bool memory_full = next->kind == PP_F && z->f_done - z->w_done >= limit;
    double ready = pp_sim_ready(sim, s, next);
    if (w_pending && (memory_full || (ready > free_at && ready - free_at >= min_gap))) {
        *it = w;
        *start = free_at;
        return true;
    }
    *it = *next;
    *start = fmax(ready, free_at);
    return !isinf(ready);
}

/* Zero-bubble ZB-H1 (Qi et al., ICLR'24, section 3.1 and figure 3; seed
 * 000's DeepSeek-v3 figure), or with `h2` ZB-H2 (figure 4): runs the
 * simulation, choosing at each step the earliest item any stage can start
 * (F and B before W on ties, so a W never takes a slot an input has
 * arrived for), W filling waits of at least gap_frac of its own time
 * (zb_candidate), and records the orders and times in plan (whose stages'
 * item counts start at 0).  The F and B passes keep 1F1B's order with
 * Z - s - 1 warm-up forwards on stage s and at most Z microbatches held
 * (ZB-H1), or 2 (Z - s - 1) and 2Z - 1 (ZB-H2: the first stage's forwards
 * fill the wait for its first B).  Returns -1 on deadlock or out of
 * memory. */
static int build_zero_bubble(const pp_params *p, double gap_frac, bool h2, pp_plan *plan, char *err,
                             size_t errlen)
{
    int Z = p->stages, M = p->microbatches;
    int limit = h2 ? 2 * Z - 1 : Z;
    zb_stage *z = calloc((size_t)Z, sizeof *z);
    pp_sim sim;
    if (!z || pp_sim_init(&sim, p, false) != 0) {
        free(z);
        snprintf(err, errlen, "pipeline: out of memory");
        return -1;
    }
    int rc = 0;
    for (int s = 0; s < Z && rc == 0; s++) {
        z[s].fb.items = malloc((size_t)(2 * M) * sizeof *z[s].fb.items);
        if (!z[s].fb.items)
            rc = -1;
        else
            order_1f1b(&z[s].fb, (h2 ? 2 : 1) * (Z - s - 1), M);
    }
    for (int left = 3 * M * Z; rc == 0 && left > 0; left--) {
        int best = -1;
        double best_start = INFINITY;
        pp_item best_it = {0}, it;
        double start;
        for (int s = 0; s < Z; s++) {
            if (!zb_candidate(&sim, &z[s], s, gap_frac * p->t_w[s], limit, &it, &start))
                continue;
            bool earlier = start < best_start ||
                           (start == best_start && best_it.kind == PP_W && it.kind != PP_W);
            if (best < 0 || earlier) {
                best = s;
                best_start = start;
                best_it = it;
            }
        }
        if (best < 0) {
            rc = -1;
            break;
        }
        pp_stage_plan *st = &plan->stage[best];
        st->items[st->n_items] = best_it;
        pp_sim_run(&sim, best, &st->items[st->n_items], best_start);
        st->n_items++;
        z[best].f_done += best_it.kind == PP_F;
        z[best].b_done += best_it.kind == PP_B;
        z[best].w_done += best_it.kind == PP_W;
        z[best].next_fb += best_it.kind != PP_W;
    }
    if (rc != 0)
        snprintf(err, errlen, "pipeline: %s schedule could not be built (internal error)", h2 ? "zb-h2" : "zero-bubble");
    for (int s = 0; s < Z; s++)
        free(z[s].fb.items);
    free(z);
    pp_sim_free(&sim);
    return rc;
}

void pp_plan_free(pp_plan *plan)
{
    if (!plan)
        return;
    for (int s = 0; plan->stage && s < plan->stages; s++)
        free(plan->stage[s].items);
    free(plan->stage);
    memset(plan, 0, sizeof *plan);
}

int pp_build(const pp_params *p, pp_schedule schedule, pp_plan *out, char *err, size_t errlen)
{
    char scratch[8];
    if (!err || errlen == 0) {
        err = scratch;
        errlen = sizeof scratch;
    }
    if (out)
        memset(out, 0, sizeof *out);
    if (!out) {
        snprintf(err, errlen, "pipeline: no plan to fill");
        return -1;
    }
    if (check_params(p, schedule, err, errlen) != 0)
        return -1;
    int Z = p->stages, M = p->microbatches;
    int v = schedule == PP_INTERLEAVED ? p->chunks : 1;
    int per_stage = (pp_schedule_splits(schedule) ? 3 : 2) * M * v;
    out->schedule = schedule;
    out->stages = Z;
    out->microbatches = M;
    out->chunks = v;
    out->stage = calloc((size_t)Z, sizeof *out->stage);
    for (int s = 0; out->stage && s < Z; s++) {
        out->stage[s].items = malloc((size_t)per_stage * sizeof *out->stage[s].items);
        if (!out->stage[s].items) {
            pp_plan_free(out);
            break;
        }
    }
    if (!out->stage) {
        snprintf(err, errlen, "pipeline: out of memory");
        return -1;
    }
    pp_params q = *p;
    q.chunks = v;
    int rc = 0;
    if (pp_schedule_splits(schedule)) {
        /* Which waits a W should fill depends on the times: with free
         * transfers every wait (gap 0) is right, with costly ones only those
         * a W fits in.  Each rule is simulated; the shortest step is kept
         * (Qi et al. section 3.2 also pick among heuristic schedules by
         * simulation). */
        static const double fracs[] = {0.0, 0.5, 1.0};
        int nf = (int)(sizeof fracs / sizeof fracs[0]), best = 0;
        double best_step = INFINITY;
        for (int f = 0; f <= nf && rc == 0; f++) {
            int pick = f < nf ? f : best;
            for (int s = 0; s < Z; s++)
                out->stage[s].n_items = 0;
            rc = build_zero_bubble(&q, fracs[pick], schedule == PP_ZB_H2, out, err, errlen);
            if (rc == 0 && f < nf) {
                pp_plan_summarize(out);
                if (out->step < best_step) {
                    best_step = out->step;
                    best = f;
                }
            }
        }
    } else {
        for (int s = 0; s < Z; s++) {
            if (schedule == PP_GPIPE)
                order_gpipe(&out->stage[s], M);
            else if (schedule == PP_1F1B)
                order_1f1b(&out->stage[s], Z - s - 1, M);
            else
                order_interleaved(&out->stage[s], Z, M, v, s);
        }
        pp_sim sim;
        rc = pp_sim_init(&sim, &q, false);
        if (rc == 0) {
            rc = pp_sim_replay(&sim, out->stage);
            pp_sim_free(&sim);
        }
        if (rc != 0)
            snprintf(err, errlen, "pipeline: %s schedule could not be simulated (internal error)",
                     pp_schedule_name(schedule));
    }
    if (rc != 0) {
        pp_plan_free(out);
        return -1;
    }
    pp_plan_summarize(out);
    return 0;
}
