/*
 * pipeline_internal.h - what the two files of a pipelined program's run
 * function share: pipeline_plan.c says which stages run which op, in
 * which item, and which values cross segments (the frame); pipeline.c
 * emits the run function from that (its file comment says how it runs).
 */
#ifndef EINC_CODEGEN_PIPELINE_INTERNAL_H
#define EINC_CODEGEN_PIPELINE_INTERNAL_H

#include "cg_internal.h"

/* Stage sets: bit 0 the first stage, bit 1 a middle one, bit 2 the last. */
enum { ST_FIRST = 1, ST_MID = 2, ST_LAST = 4, ST_ALL = 7 };

/* What the emission needs, computed from the plan (classify). */
typedef struct pp_ctx {
    const ir_module *m;
    const cg_plan *p;
    int fb, fe, bb, be;  /* op indices: forward LoopBegin, LoopEnd, backward LoopBegin, LoopEnd */
    int fp, bp;          /* the CollectivePermutes after the forward and the backward loop (the
                            stage boundaries' transfers, passes/pipeline_permute.c); -1 if none
                            (one stage; bp also in a forward) */
    int wb, we;          /* zero-bubble's dL/dW loop (passes/pipeline_split.c): its LoopBegin,
                            LoopEnd; -1 if the backward is one loop */
    char *item;          /* per op: 'F', 'B', 'W' (zero-bubble's dL/dW item: the dL/dW loop, what
                            only it needs and the ops after it, the weight gradients outside the
                            block among them) or 'E' (the update, once per step) */
    uint8_t *avail;      /* per value: the stages that can compute it */
    uint8_t *run;        /* per op: the stages that run it */
    int *at;             /* per op: the op whose emission runs it (fusion, row groups) */
    int *seg;            /* per op: its segment (of `at`) */
    bool *acc;           /* per value: accumulated over the microbatches */
    int *slot;           /* per value: its place in a frame, or -1 */
    int nslots;
    int first_end;       /* index of the first op of item 'E' (p->nops if none) */
    bool trains;         /* a training step; else forwards only (bb = be = nops) */
    bool *rows;          /* per value: an output with the batch dim first, whose
                            microbatches are placed rather than summed */
    int *groups;         /* per value with rows: the inputs' row blocks in its block (row_groups) */
} pp_ctx;


/* Allocates x's per-op and per-value arrays for module `m` with plan `p`
 * (zeroed); cg_pp_free releases them. */
void cg_pp_init(pp_ctx *x, const ir_module *m, const cg_plan *p);
void cg_pp_free(pp_ctx *x);
/* The loops, the items and the stages of every op and value, the
 * accumulated values and the outputs placed by rows; false after
 * reporting through `d` what codegen cannot run pipelined. */
bool cg_pp_classify(pp_ctx *x, diag_ctx *d);
/* Segments (consecutive emission points of one item with the same
 * stages; each loop one segment) and the frame slots of the values that
 * cross them.  After cg_pp_classify succeeded. */
void cg_pp_segment(pp_ctx *x);

/* The greedy W fill (pipeline_fill.c): whether the run function asks the
 * runtime for each item's position (--w-fill=greedy on a schedule with W
 * items over more than one stage); the block holding the row's cursor and
 * done flags, allocated and zeroed (begin) and freed (end); the position
 * (i64) of the item to run next, from rt_pipe_next on the stage's row
 * (`table` + `row_at`, i64) of `nitems` codes. */
bool cg_pp_fill_on(const pp_ctx *x);
LLVMValueRef cg_pp_fill_begin(cg_ctx *c, cg_fn *f, int nitems);
LLVMValueRef cg_pp_fill_next(cg_ctx *c, cg_fn *f, LLVMValueRef state, LLVMValueRef table,
                             LLVMValueRef row_at, int nitems);
void cg_pp_fill_end(cg_ctx *c, cg_fn *f, LLVMValueRef state);

#endif
