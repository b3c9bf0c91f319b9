/*
 * analyze_pipe.h - `einc analyze --stages Z`: the program, with its plan
 * on its mesh as one stage, pipelined over Z stages (Z times the chips),
 * priced for every schedule and microbatch count (analyze_pipe.c).
 */
#ifndef EINC_DRIVER_ANALYZE_PIPE_H
#define EINC_DRIVER_ANALYZE_PIPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "analyze.h"
#include "pipe_work.h"
#include "pipeline.h"

#define ANALYZE_PIPE_MAX 64 /* priced (schedule, M) pairs */

/* What to price: Z stages, and optionally one M and one schedule. */
typedef struct analyze_pipe_opts {
    int stages;        /* Z >= 2: 0 prices nothing */
    int microbatches;  /* M, or 0: every M that divides the batch, up to 64 */
    int schedule;      /* a pp_schedule, PP_ZB_AUTO (zb-h2 or zb-h1 by memory), or -1: all of them */
    bool dcn;          /* the stages are pods: transfers over the data-center network */
    int chunks;        /* --chunks=v: the interleaved schedule's chunks per stage; 0: 2 */
} analyze_pipe_opts;

/* One priced (schedule, M) (pipe_priced, passes/costmodel/pipe_work.h). */
typedef pipe_priced analyze_pipe_row;

/* The priced table and the inputs it came from. */
typedef struct analyze_pipe {
    analyze_pipe_opts opts;
    int64_t layers;    /* |L| */
    double hop;        /* seconds per stage-to-stage transfer of a full-batch activation */
    double unpipelined; /* the program's step on one stage's mesh (all layers) */
    double update;     /* the optimizer's update of every param, unpipelined */
    double grad_sync;  /* the gradient collectives that run once per step (pipe_work.sync_pre, sync_post, unpipelined,
                          and a stage's 1/Z of the stacked params' deferred ones, sync_stacked) */
    double stage_sums; /* the AllReduces over the Z stages of the sums only the first or last stage
                          computes (pipe_work_zsums_time), once per step */
    int n;
    analyze_pipe_row rows[ANALYZE_PIPE_MAX];
    /* Per row, the nkept stacked gradients that the compiler's default
     * (--grad-sync=auto) keeps per microbatch so that the stage fits the
     * HBM, as priced: their names one after the other, each ended by its
     * NUL (owned here, malloc); NULL and 0 when every one is deferred. */
    char *kept[ANALYZE_PIPE_MAX];
    int nkept[ANALYZE_PIPE_MAX];
    /* Per row, under --schedule=zero-bubble: zb-h2's fullest stage in bytes
     * at that M, which chose the row's zb-h2 or zb-h1 against the HBM; 0
     * for other schedules. */
    double zb_h2_memory[ANALYZE_PIPE_MAX];
    int best;          /* the row with the shortest step */
    pp_params best_params; /* its stage times, for the table; arrays owned here */
    double *arrays;    /* 3 Z doubles behind best_params */
} analyze_pipe;

/* Prices t's program (compiled with `compile` as written) pipelined over
 * opts->stages stages.  Returns 0, or -1 with a message in err (no batch
 * dim, L not a multiple of Z, no training step, M not dividing the batch,
 * out of memory).  Free with analyze_pipe_free, whatever it returned. */
int analyze_pipe_run(analyze_pipe *p, const analyze_table *t, const analyze_pipe_opts *opts,
                     analyze_compile_fn compile, void *ctx, char *err, size_t errlen);
void analyze_pipe_free(analyze_pipe *p);

/* The table and the best schedule's stage x time-slot chart (text), or
 * the "pipeline" object of analyze's JSON. */
void analyze_pipe_print(FILE *out, const analyze_pipe *p, const analyze_table *t);
struct cJSON *analyze_pipe_json(const analyze_pipe *p);

#endif
