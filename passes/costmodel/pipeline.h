/*
 * pipeline.h - pipeline-parallel schedules and their cost: which work item
 * each stage runs in which order (GPipe, 1F1B, interleaved 1F1B,
 * zero-bubble ZB-H1 and ZB-H2), the simulated timeline of one training step, its
 * bubble fraction and the activation memory each stage holds.
 *
 * Pipelining (issue 25; seed 000, section "流水线并行" / pipeline
 * parallelism, `W_in[L_Z, D_X, F_Y]`) splits the layers of a `repeat L`
 * over the Z devices of a mesh axis and the batch into M microbatches;
 * stage s runs the layers it holds for every microbatch and passes the
 * activation (forward) or its gradient (backward) one hop to its
 * neighbour.  This module knows nothing of the IR: its input is the
 * per-stage time of one microbatch's forward and backward and the time of
 * one hop, as the cost model estimates them; its output is the schedule
 * and its step time.  docs/pipeline.md explains the schedules, their
 * formulas and how to read the table.
 *
 * Every time is in seconds and per microbatch; indices are 0-based
 * (stage s in [0, Z), microbatch m in [0, M), chunk c in [0, v)).  Nothing
 * here keeps state between calls.
 */
#ifndef EINC_PIPELINE_H
#define EINC_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A pipeline schedule: the order in which each stage runs its work. */
typedef enum pp_schedule {
    /* Huang et al., "GPipe", NeurIPS 2019: every forward, then every
     * backward; each stage holds the activations of all M microbatches. */
    PP_GPIPE,
    /* PipeDream-Flush, Narayanan et al., "Memory-Efficient Pipeline-Parallel
     * DNN Training", ICML 2021: min(Z - s - 1, M) warm-up forwards, then
     * one forward one backward, then the remaining backwards; stage s holds
     * at most Z - s microbatches. */
    PP_1F1B,
    /* Narayanan et al., "Efficient Large-Scale Language Model Training on
     * GPU Clusters Using Megatron-LM", SC'21: 1F1B over v model chunks per
     * device (device s holds chunks s, s + Z, s + 2Z, ...); the bubble
     * shrinks to (Z - 1) / (v M + Z - 1) of the step. */
    PP_INTERLEAVED,
    /* Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, schedule
     * ZB-H1 (section 2.1, "memory efficient schedule"; also seed 000's
     * DeepSeek-v3 figure): the backward is split into B (dL/dx, on the
     * critical path) and W (dL/dW, local), and W passes are
     * deferred to fill the bubbles, with at most Z microbatches whose
     * activations are held (F done, W not done) on any stage: 1F1B's
     * memory, about a third of its bubble (`--schedule=zb-h1`). */
    PP_ZB_H1,
    /* Qi et al., ICLR 2024, schedule ZB-H2 (section 2.2, "zero bubble
     * schedule"): the backward split as in ZB-H1, but stage s runs 2 (Z - s - 1) warm-up
     * forwards (1F1B: Z - s - 1), so the first stage is busy until its
     * first B arrives, and W passes fill the rest; up to 2Z - 1
     * microbatches held (F done, W not done), about twice ZB-H1's
     * activations.  Within one step that ends with the optimizer's update
     * (no bypass of its synchronisation, the paper's section 4) the last
     * stage still waits (Z - 1) forwards and hops for its first input. */
    PP_ZB_H2,
} pp_schedule;

/* Number of pp_schedule values (for loops over all schedules). */
#define PP_SCHEDULE_COUNT 5

/* `--schedule=zero-bubble`: not a table of its own but the zero-bubble
 * schedule the device's memory allows, as Qi et al.'s automatic scheduling
 * takes a memory limit (ICLR 2024, section 3: at 1F1B's memory it finds
 * ZB-1p, about ZB-H1; at twice that ZB-2p, about ZB-H2) under the HBM:
 * zb-h2 when its fullest stage fits, else zb-h1 (passes/pipeline_choose.c, pass_pipeline_resolve_zb).
 * pp_schedule_lookup returns it for "zero-bubble" and pp_schedule_name
 * spells it so; it is never a table: pp_build refuses it.  Outside the
 * range of PP_SCHEDULE_COUNT, so loops over the schedules never meet it. */
#define PP_ZB_AUTO PP_SCHEDULE_COUNT

/* A kind of work item on one stage for one microbatch. */
typedef enum pp_kind {
    PP_F, /* forward of one microbatch through one chunk */
    PP_B, /* backward: dL/dx; outside zero-bubble and zb-h2 the whole backward (dL/dx and dL/dW) */
    PP_W, /* weight gradient dL/dW, only in zero-bubble and zb-h2 */
} pp_kind;

/* The shape of the pipeline and its per-microbatch times.  Not owned: the
 * arrays are read during pp_build only. */
typedef struct pp_params {
    int stages;        /* Z >= 1: devices along the pipeline axis */
    int microbatches;  /* M >= 1: microbatches per step */
    int chunks;        /* v: model chunks (virtual stages) per device; >= 2 for
                          interleaved, 1 otherwise (0 is read as 1) */
    const double *t_f; /* [Z] seconds of one microbatch's forward on stage s
                          (all its chunks together; interleaved splits it
                          evenly among the v chunks) */
    const double *t_b; /* [Z] seconds of one microbatch's backward on stage s:
                          dL/dx only for zero-bubble and zb-h2, the whole backward
                          otherwise */
    const double *t_w; /* [Z] seconds of dL/dW for zero-bubble and zb-h2; ignored (may be
                          NULL) for the other schedules */
    double t_p2p;      /* seconds to move one microbatch's activation or its
                          gradient one hop to the neighbouring device (seed
                          001's latency + bytes / bandwidth); 0 within a device */
} pp_params;

/* One work item of a stage and when the simulation runs it. */
typedef struct pp_item {
    pp_kind kind;   /* F, B or W */
    int microbatch; /* m in [0, M) */
    int chunk;      /* local chunk c in [0, v) of this device: model chunk c * Z + s */
    double start;   /* seconds from the start of the step */
    double end;     /* start + the item's time */
} pp_item;

/* One stage (device) of a plan. */
typedef struct pp_stage_plan {
    pp_item *items;   /* [n_items], owned by the plan, in execution order */
    int n_items;      /* 2 M v, or 3 M for zero-bubble and zb-h2 */
    double busy;      /* seconds of work: sum of the items' times */
    int peak_held;    /* most (microbatch, chunk) pairs with F done and B not
                         done at once: activations kept for the backward */
    int peak_held_w;  /* most pairs with F done and W not done (zero-bubble
                         keeps the layer inputs for W); = peak_held otherwise */
} pp_stage_plan;

/* A schedule with its simulated timeline.  Fill with pp_build, release with
 * pp_plan_free. */
typedef struct pp_plan {
    pp_schedule schedule;  /* which schedule */
    int stages;            /* Z */
    int microbatches;      /* M */
    int chunks;            /* v (1 except interleaved) */
    pp_stage_plan *stage;  /* [Z], owned */
    double step;           /* seconds: the makespan, last item's end */
    double ideal;          /* seconds: the busiest stage's busy time (no bubble) */
    double bubble;         /* 1 - mean over stages of busy / step, in [0, 1) */
    int peak_held;         /* max over stages of peak_held */
    int peak_held_w;       /* max over stages of peak_held_w */
} pp_plan;

/* "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", or "zero-bubble" for
 * PP_ZB_AUTO; "?" for a value out of range. */
const char *pp_schedule_name(pp_schedule s);

/* True for the schedules whose backward is split into B (dL/dx) and W
 * (dL/dW) items: zb-h1, zb-h2, and PP_ZB_AUTO (which resolves to one of
 * them). */
bool pp_schedule_splits(pp_schedule s);

/* The schedule called `name` (as pp_schedule_name spells it, PP_ZB_AUTO
 * for "zero-bubble"), or -1. */
int pp_schedule_lookup(const char *name);

/* Builds the per-stage orders of `schedule` for `p` and simulates them
 * (event-driven: an item starts when its stage is free and its
 * dependencies are done; F of model chunk k after F of chunk k - 1 plus
 * t_p2p when that chunk is on another device; B of chunk k after B of
 * chunk k + 1 (plus t_p2p), the last chunk's B after its own F; W after its
 * own B).  On success fills `*out` (the caller frees it with pp_plan_free)
 * and returns 0.  On invalid parameters (Z < 1, M < 1, interleaved with
 * v < 2 or M not a multiple of Z, v != 1 elsewhere, a missing, negative or
 * non-finite time, too many items) writes a message to err (errlen bytes,
 * may be NULL/0), leaves `*out` empty and returns -1. */
int pp_build(const pp_params *p, pp_schedule schedule, pp_plan *out, char *err, size_t errlen);

/* The core-idle bubble of `plan` when its Z stages share `cores` CPUs:
 * the plan's per-stage orders replayed with p's times (p as given to
 * pp_build for the plan), stage s on CPU s mod cores, the stages of a CPU
 * taking turns at whole items (an item is not preempted; when the CPU
 * frees, the stage whose next item became ready first runs it: list
 * scheduling, Graham 1969, as the threads runtime's EINC_CORE_SHARING=items
 * runs them, runtime/core_turns.c).  Returns 1 - (sum of the items' times)
 * / (min(Z, cores) x span), the share of the CPUs' time with nothing to
 * run (Qi et al., ICLR'24, section 2: the bubble rate as idle device
 * time), and the replay's span in seconds in *span (may be NULL).  With
 * cores >= Z every stage has a CPU and it is plan->bubble.  Returns -1
 * (and leaves *span alone) when cores < 1, out of memory, or the orders
 * deadlock.  docs/pipeline.md, "Stages sharing cores: the core-idle bubble". */
double pp_core_bubble(const pp_params *p, const pp_plan *plan, int cores, double *span);

/* Frees the arrays of `plan` and empties it; safe on an empty or zeroed plan. */
void pp_plan_free(pp_plan *plan);

/* Prints the schedule as papers draw it: one row per stage, one column per
 * time slot, cells "F3", "B2", "W1" (microbatch, 0-based; ".c" = local
 * chunk for interleaved, e.g. "F3.1"), "." for idle.  The slots come from
 * re-simulating the plan's orders with every item taking one slot and free
 * transfers, so the table shows the schedule's shape whatever the real
 * times.  Then one line with the real step, ideal, bubble and peaks. */
void pp_print_table(FILE *f, const pp_plan *plan);

#endif
