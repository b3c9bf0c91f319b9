/*
 * pipeline_sim.c - the timeline of a pipeline schedule: event-driven
 * simulation of fixed per-stage orders, the step's summary (bubble, memory
 * peaks) and the stage x time-slot table.
 *
 * The orders come from pipeline_sched.c.  A fixed order per stage plus the
 * data dependencies between stages determine every start time (each item
 * starts at the later of its stage being free and its inputs having
 * arrived), so the replay may visit stages in any order: it runs whatever
 * is ready, round-robin, until every item has run or nothing can (which
 * would be a deadlock: an order that waits on its own future).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"

/* Index of (kind, model chunk k, microbatch m) in pp_sim.end. */
static size_t end_index(const pp_sim *sim, pp_kind kind, int k, int m)
{
    size_t K = (size_t)sim->stages * (size_t)sim->chunks;
    return ((size_t)kind * K + (size_t)k) * (size_t)sim->microbatches + (size_t)m;
}

int pp_sim_init(pp_sim *sim, const pp_params *p, bool unit)
{
    memset(sim, 0, sizeof *sim);
    sim->stages = p->stages;
    sim->microbatches = p->microbatches;
    sim->chunks = p->chunks < 1 ? 1 : p->chunks;
    sim->t_f = p->t_f;
    sim->t_b = p->t_b;
    sim->t_w = p->t_w;
    sim->t_p2p = p->t_p2p;
    sim->unit = unit;
    size_t n = 3 * (size_t)sim->stages * (size_t)sim->chunks * (size_t)sim->microbatches;
    sim->end = malloc(n * sizeof *sim->end);
    sim->free_at = calloc((size_t)sim->stages, sizeof *sim->free_at);
    if (!sim->end || !sim->free_at) {
        pp_sim_free(sim);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        sim->end[i] = NAN;
    return 0;
}

void pp_sim_free(pp_sim *sim)
{
    free(sim->end);
    free(sim->free_at);
    sim->end = NULL;
    sim->free_at = NULL;
}

double pp_sim_duration(const pp_sim *sim, int s, const pp_item *it)
{
    if (sim->unit)
        return 1.0;
    const double *t = it->kind == PP_F ? sim->t_f : it->kind == PP_B ? sim->t_b : sim->t_w;
    /* Interleaved: a device's layers are split evenly over its v chunks
     * (Narayanan et al. SC'21, section 2.2.2). */
    return t[s] / sim->chunks;
}

/* End of (kind, k, m) plus the hop from model chunk k's device to stage s. */
static double arrival(const pp_sim *sim, pp_kind kind, int k, int m, int s)
{
    double e = sim->end[end_index(sim, kind, k, m)];
    if (isnan(e))
        return INFINITY;
    int from = k % sim->stages;
    return from == s || sim->unit ? e : e + sim->t_p2p;
}

double pp_sim_ready(const pp_sim *sim, int s, const pp_item *it)
{
    int K = sim->stages * sim->chunks;
    int k = it->chunk * sim->stages + s; /* model chunk (Megatron's assignment) */
    int m = it->microbatch;
    switch (it->kind) {
    case PP_F:
        return k == 0 ? 0.0 : arrival(sim, PP_F, k - 1, m, s);
    case PP_B:
        /* The last chunk's backward starts from the loss of its own forward. */
        return k == K - 1 ? arrival(sim, PP_F, k, m, s) : arrival(sim, PP_B, k + 1, m, s);
    case PP_W:
        return arrival(sim, PP_B, k, m, s);
    }
    return INFINITY;
}

void pp_sim_run(pp_sim *sim, int s, pp_item *it, double start)
{
    int k = it->chunk * sim->stages + s;
    it->start = start;
    it->end = start + pp_sim_duration(sim, s, it);
    sim->end[end_index(sim, it->kind, k, it->microbatch)] = it->end;
    sim->free_at[s] = it->end;
}

int pp_sim_replay(pp_sim *sim, pp_stage_plan *stage)
{
    int Z = sim->stages;
    int *next = calloc((size_t)Z, sizeof *next);
    if (!next)
        return -1;
    int left = 0;
    for (int s = 0; s < Z; s++)
        left += stage[s].n_items;
    while (left > 0) {
        int ran = 0;
        for (int s = 0; s < Z; s++) {
            while (next[s] < stage[s].n_items) {
                pp_item *it = &stage[s].items[next[s]];
                double ready = pp_sim_ready(sim, s, it);
                if (isinf(ready))
                    break;
                pp_sim_run(sim, s, it, fmax(ready, sim->free_at[s]));
                next[s]++;
                ran++;
            }
        }
        if (ran == 0)
            break;
        left -= ran;
    }
    free(next);
    return left == 0 ? 0 : -1;
}

void pp_plan_summarize(pp_plan *plan)
{
    bool split = pp_schedule_splits(plan->schedule);
    double busy_sum = 0.0;
    plan->step = plan->ideal = 0.0;
    plan->peak_held = plan->peak_held_w = 0;
    for (int s = 0; s < plan->stages; s++) {
        pp_stage_plan *st = &plan->stage[s];
        int held = 0, held_w = 0;
        st->busy = 0.0;
        st->peak_held = st->peak_held_w = 0;
        for (int i = 0; i < st->n_items; i++) {
            const pp_item *it = &st->items[i];
            st->busy += it->end - it->start;
            plan->step = fmax(plan->step, it->end);
            /* Activations are kept from the forward until the backward that
             * reads them; with the backward split, W still reads the layer
             * inputs, so they stay until W (Qi et al., section 2). */
            held += it->kind == PP_F ? 1 : it->kind == PP_B ? -1 : 0;
            held_w += it->kind == PP_F ? 1 : (it->kind == PP_W || (!split && it->kind == PP_B)) ? -1 : 0;
            st->peak_held = held > st->peak_held ? held : st->peak_held;
            st->peak_held_w = held_w > st->peak_held_w ? held_w : st->peak_held_w;
        }
        busy_sum += st->busy;
        plan->ideal = fmax(plan->ideal, st->busy);
        plan->peak_held = st->peak_held > plan->peak_held ? st->peak_held : plan->peak_held;
        plan->peak_held_w = st->peak_held_w > plan->peak_held_w ? st->peak_held_w : plan->peak_held_w;
    }
    plan->bubble = plan->step > 0.0 ? 1.0 - busy_sum / plan->stages / plan->step : 0.0;
}

/* The cell text of `it`: "F3", or "F3.1" with the chunk when v > 1. */
static void cell_label(const pp_item *it, int chunks, char *buf, size_t n)
{
    static const char kinds[] = {'F', 'B', 'W'};
    if (chunks > 1)
        snprintf(buf, n, "%c%d.%d", kinds[it->kind], it->microbatch, it->chunk);
    else
        snprintf(buf, n, "%c%d", kinds[it->kind], it->microbatch);
}

/* Copies the plan's orders and replays them with unit times; NULL if out of
 * memory.  The copy's items carry the slots as start and end. */
static pp_stage_plan *unit_timeline(const pp_plan *plan)
{
    int Z = plan->stages;
    pp_stage_plan *copy = calloc((size_t)Z, sizeof *copy);
    pp_params p = {.stages = Z, .microbatches = plan->microbatches, .chunks = plan->chunks};
    pp_sim sim;
    if (!copy || pp_sim_init(&sim, &p, true) != 0) {
        free(copy);
        return NULL;
    }
    bool ok = true;
    for (int s = 0; s < Z && ok; s++) {
        copy[s].n_items = plan->stage[s].n_items;
        copy[s].items = malloc((size_t)copy[s].n_items * sizeof *copy[s].items);
        ok = copy[s].items != NULL;
        if (ok)
            memcpy(copy[s].items, plan->stage[s].items, (size_t)copy[s].n_items * sizeof *copy[s].items);
    }
    ok = ok && pp_sim_replay(&sim, copy) == 0;
    pp_sim_free(&sim);
    if (!ok) {
        for (int s = 0; s < Z; s++)
            free(copy[s].items);
        free(copy);
        return NULL;
    }
    return copy;
}

void pp_print_table(FILE *f, const pp_plan *plan)
{
    if (!plan->stage) {
        fprintf(f, "(empty pipeline plan)\n");
        return;
    }
    int Z = plan->stages;
    pp_stage_plan *slots = unit_timeline(plan);
    if (!slots) {
        fprintf(f, "(pipeline table: out of memory)\n");
        return;
    }
    int width = 1, n_slots = 0;
    char label[32];
    for (int s = 0; s < Z; s++) {
        for (int i = 0; i < slots[s].n_items; i++) {
            cell_label(&slots[s].items[i], plan->chunks, label, sizeof label);
            width = (int)strlen(label) > width ? (int)strlen(label) : width;
            n_slots = (int)slots[s].items[i].end > n_slots ? (int)slots[s].items[i].end : n_slots;
        }
    }
    fprintf(f, "%s, Z=%d stages, M=%d microbatches", pp_schedule_name(plan->schedule), Z,
            plan->microbatches);
    if (plan->chunks > 1)
        fprintf(f, ", v=%d chunks per stage", plan->chunks);
    fprintf(f, " (one slot per item)\n");
    for (int s = 0; s < Z; s++) {
        fprintf(f, "stage %d |", s);
        int i = 0;
        for (int t = 0; t < n_slots; t++) {
            const pp_item *it = i < slots[s].n_items ? &slots[s].items[i] : NULL;
            if (it && (int)it->start == t) {
                cell_label(it, plan->chunks, label, sizeof label);
                i++;
            } else {
                snprintf(label, sizeof label, ".");
            }
            /* Padded to a common width, except the row's last cell. */
            fprintf(f, " %-*s", t + 1 < n_slots ? width : 0, label);
        }
        fprintf(f, "\n");
        free(slots[s].items);
    }
    free(slots);
    fprintf(f, "step %.6g s, ideal %.6g s, bubble %.1f%%, peak held %d", plan->step, plan->ideal,
            100.0 * plan->bubble, plan->peak_held);
    if (pp_schedule_splits(plan->schedule))
        fprintf(f, " (awaiting W: %d)", plan->peak_held_w);
    fprintf(f, "%s\n", plan->chunks > 1 ? " (microbatch, chunk) pairs" : " microbatches");
}

/* The stage whose next item can start first when the stages of a CPU take
 * turns: start = max(its inputs' arrival, its stage free, its CPU free);
 * ties go to the item requested first (max of the first two: a turn is
 * granted in request order), then to the lower stage.  -1 if none can. */
static int next_turn(const pp_sim *sim, const pp_stage_plan *order, const int *next, const double *cpu_free,
                     int cores, double *start)
{
    int best = -1;
    double best_req = INFINITY;
    *start = INFINITY;
    for (int s = 0; s < sim->stages; s++) {
        if (next[s] >= order[s].n_items)
            continue;
        double req = fmax(pp_sim_ready(sim, s, &order[s].items[next[s]]), sim->free_at[s]);
        double at = fmax(req, cpu_free[s % cores]);
        if (isinf(req) || at > *start || (at == *start && req >= best_req))
            continue;
        best = s;
        best_req = req;
        *start = at;
    }
    return best;
}

double pp_core_bubble(const pp_params *p, const pp_plan *plan, int cores, double *span)
{
    if (cores < 1 || !plan->stage)
        return -1;
    int Z = plan->stages, left = 0;
    pp_params q = *p;
    q.chunks = plan->chunks;
    pp_sim sim = {0}; /* freed whether or not it was started */
    pp_stage_plan *order = calloc((size_t)Z, sizeof *order);
    int *next = calloc((size_t)Z, sizeof *next);
    double *cpu_free = calloc((size_t)cores, sizeof *cpu_free);
    bool ok = order && next && cpu_free && pp_sim_init(&sim, &q, false) == 0;
    for (int s = 0; ok && s < Z; s++) {
        /* A copy: pp_sim_run writes the items' times. */
        order[s].n_items = plan->stage[s].n_items;
        order[s].items = malloc((size_t)order[s].n_items * sizeof *order[s].items + 1);
        ok = order[s].items != NULL;
        if (ok)
            memcpy(order[s].items, plan->stage[s].items, (size_t)order[s].n_items * sizeof *order[s].items);
        left += order[s].n_items;
    }
    double work = 0.0, end = 0.0;
    for (; ok && left > 0; left--) {
        double start;
        int s = next_turn(&sim, order, next, cpu_free, cores, &start);
        if (s < 0)
            break; /* a deadlock: pp_build's orders never have one */
        pp_item *it = &order[s].items[next[s]++];
        pp_sim_run(&sim, s, it, start);
        cpu_free[s % cores] = it->end;
        work += it->end - it->start;
        end = fmax(end, it->end);
    }
    ok = ok && left == 0;
    pp_sim_free(&sim);
    for (int s = 0; order && s < Z; s++)
        free(order[s].items);
    free(order);
    free(next);
    free(cpu_free);
    if (!ok)
        return -1;
    int used = cores < Z ? cores : Z;
    if (span)
        *span = end;
    return end > 0.0 ? 1.0 - work / ((double)used * end) : 0.0;
}
