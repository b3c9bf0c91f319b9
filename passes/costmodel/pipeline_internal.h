/*
 * pipeline_internal.h - what pipeline_sched.c (the orders) and
 * pipeline_sim.c (the timeline) share and keep from the public header: the
 * state of one simulation of a pipeline step.
 *
 * A simulation knows, for every (kind, model chunk, microbatch), when that
 * item ended (NAN while not run), and for every stage when it is free.  An
 * item is ready when its dependencies have ended (plus a hop when they ran
 * on another device); it starts at max(ready, stage free).
 */
#ifndef EINC_PIPELINE_INTERNAL_H
#define EINC_PIPELINE_INTERNAL_H

#include <stdbool.h>

#include "pipeline.h"

/* One simulation: the times it uses and what has run so far. */
typedef struct pp_sim {
    int stages;        /* Z */
    int microbatches;  /* M */
    int chunks;        /* v */
    const double *t_f; /* [Z] per device, split evenly over its v chunks */
    const double *t_b; /* [Z] idem */
    const double *t_w; /* [Z] or NULL (no W items) */
    double t_p2p;      /* seconds per hop between devices */
    bool unit;         /* every item takes 1 and hops are free (pp_print_table) */
    double *end;       /* [3][Z v][M] owned: end time of each item, NAN if not run */
    double *free_at;   /* [Z] owned: when each stage finishes its last item */
} pp_sim;

/* Starts an empty simulation of `p` (already validated); `unit` as in
 * pp_sim.  Returns -1 if out of memory. */
int pp_sim_init(pp_sim *sim, const pp_params *p, bool unit);

/* Frees the arrays of `sim`. */
void pp_sim_free(pp_sim *sim);

/* Seconds that item `it` takes on stage s. */
double pp_sim_duration(const pp_sim *sim, int s, const pp_item *it);

/* When `it` on stage s may start as far as its dependencies go (not the
 * stage), or INFINITY while a dependency has not run. */
double pp_sim_ready(const pp_sim *sim, int s, const pp_item *it);

/* Runs `it` on stage s at `start` (>= ready and >= the stage's free time):
 * sets its start and end and records its end. */
void pp_sim_run(pp_sim *sim, int s, pp_item *it, double start);

/* Runs the fixed per-stage orders of `stage` ([Z]) from an empty
 * simulation, filling each item's start and end.  Returns -1 if the orders
 * deadlock (an item waits on one that its own stage runs later). */
int pp_sim_replay(pp_sim *sim, pp_stage_plan *stage);

/* Fills busy, peaks, step, ideal and bubble of `plan` from its timeline. */
void pp_plan_summarize(pp_plan *plan);

#endif
