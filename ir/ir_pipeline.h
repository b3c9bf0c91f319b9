/*
 * ir_pipeline.h - pipeline parallelism in the module (ir_module.pipe): the
 * stage axis, the microbatches, the schedule's items and where a pipelined
 * step reduces its stacked gradients (docs/pipeline.md).  Part of ir.h,
 * which includes it before ir_module, which holds an ir_pipeline by value:
 * include ir.h.
 */
#ifndef EINC_IR_PIPELINE_H
#define EINC_IR_PIPELINE_H

#ifndef EINC_IR_H
#error "ir_pipeline.h is part of ir.h: include ir.h"
#endif

/* One work item of a pipeline stage's schedule: the forward ('F') or the
 * backward ('B': dL/dx and dL/dW, or with zero-bubble dL/dx only) of one
 * microbatch on the stage's layers, or zero-bubble's 'W' (its dL/dW, the
 * second backward loop, passes/pipeline_split.c).  With the interleaved
 * schedule an item runs one of the stage's v chunks of layers. */
typedef struct ir_pipe_item {
    char kind;      /* 'F', 'B' or 'W' */
    int microbatch; /* in [0, M) */
    int chunk;      /* the stage's local chunk c in [0, v) (model chunk c Z + z); 0 unless interleaved */
} ir_pipe_item;

/* Where a pipelined training step reduces the stacked params' gradients
 * whose DP AllReduce or FSDP ReduceScatter may run once per step
 * (pipe_work_deferrable_stack; `--grad-sync`, docs/pipeline.md "Gradient
 * collectives once per step"). */
typedef enum ir_grad_sync {
    IR_GRAD_SYNC_AUTO,       /* once per step, but those ir_pipeline.grad_mb names (the
                                choice, passes/pipeline_choose.c, when deferring does not fit) */
    IR_GRAD_SYNC_STEP,       /* every one once per step, after the schedule */
    IR_GRAD_SYNC_MICROBATCH, /* every one per microbatch, inside the backward loop */
    IR_GRAD_SYNC_COUNT
} ir_grad_sync;

/* --grad-sync's spelling of g ("auto", "step", "microbatch"), the one
 * table for the option's parser and the JSON dump; NULL when g is no
 * ir_grad_sync. */
static inline const char *ir_grad_sync_name(int g)
{
    static const char *const name[IR_GRAD_SYNC_COUNT] = {"auto", "step", "microbatch"};
    return g >= 0 && g < IR_GRAD_SYNC_COUNT ? name[g] : NULL;
}

/* When a stage with W items (zero-bubble, zb-h2) runs them (`--w-fill`,
 * docs/pipeline.md "W items placed at run time"): where the table puts
 * them, or also earlier, while the next item's input has not arrived
 * (runtime/pipe_fill.c).  Schedules without W items ignore it. */
typedef enum ir_w_fill {
    IR_W_FILL_STATIC,  /* the table's order */
    IR_W_FILL_GREEDY,  /* the earliest W whose B has run, while the next item waits */
    IR_W_FILL_COUNT
} ir_w_fill;

/* --w-fill's spelling of f ("static", "greedy"); NULL when f is no ir_w_fill. */
static inline const char *ir_w_fill_name(int f)
{
    static const char *const name[IR_W_FILL_COUNT] = {"static", "greedy"};
    return f >= 0 && f < IR_W_FILL_COUNT ? name[f] : NULL;
}

/* Pipeline parallelism (docs/pipeline.md; seed 000, "流水线并行"): the
 * stacked params of the `repeat` over dim `dim` shard it over mesh axis
 * `axis` (`W[L_Z, D_X, F_Y]`), so device group z of the axis (a stage)
 * holds layers [z |L|/Z, (z+1) |L|/Z) and runs them, the activations going
 * from stage to stage one hop at a time.  The batch dim `batch_dim` is
 * split into `microbatches` M: after the pipeline pass dims[batch_dim].size
 * is one microbatch's, |B| / M, and `batch_size` the whole batch's, which
 * the program's inputs and the runtime still see.  `schedule` is the order
 * of each stage's forwards and backwards (a pp_schedule of
 * passes/costmodel/pipeline.h).  axis = -1: not pipelined. */
typedef struct ir_pipeline {
    int axis;           /* mesh axis of the stages, -1 if none */
    int dim;            /* the repeat's layer dim, sharded over `axis` */
    uint32_t loc;       /* the first declaration that shards it so */
    const char *stacked;/* that declaration's tensor (messages; arena-owned) */
    int microbatches;   /* M >= 1; 0 until the pipeline pass sets it */
    int batch_dim;      /* dim id split into microbatches, -1 until then */
    int64_t batch_size; /* the whole batch: |batch_dim| * M */
    int schedule;       /* a pp_schedule */
    /* v, chunks (virtual stages) per stage: 1, or >= 2 for interleaved
     * (Narayanan et al., SC'21): stage z holds chunks z, z + Z, ..., of |L| / (Z v)
     * layers, stacked layer dims dealt block-cyclically (rt_tensor_desc.cyclic_blocks) */
    int chunks;
    int nitems;         /* work items per stage: 2 M v (3 M for zb-h1 and zb-h2, M v for a forward) */
    ir_pipe_item *order;/* [Z * nitems]: stage z's items in the order it runs
                           them, from z * nitems (arena-owned) */
    const char *schedule_name; /* "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "forward",
                                  "forward-interleaved" (static storage): --schedule=zero-bubble's
                                  is the one it resolved to */
    /* How --schedule=zero-bubble resolved ("schedule zero-bubble -> zb-h2 (fits: ...)",
     * passes/pipeline_choose.c, pass_pipeline_resolve_zb) for --dump-ir, --dump-cost and
     * the JSON; arena-owned, NULL when the schedule was not that alias. */
    const char *resolved;
    /* The schedule as a table, one line per stage ("stage 0 | F0 F1 .  B0 ..."),
     * an item per time slot (docs/pipeline.md); arena-owned, NULL before the pass. */
    const char *table;
    /* How schedule and M were chosen ("chosen: ...") or, both given, their memory ("given: ...")
     * (passes/pipeline_choose.c): one --dump-cost line, arena-owned, NULL when not priced. */
    const char *choice;
    int grad_sync;      /* an ir_grad_sync: --grad-sync, AUTO when not given */
    /* The stacked gradients (their tensor names, e.g. "dWin"; arena-owned or
     * the values' own) whose collective stays per microbatch inside the
     * backward loop: under AUTO the choice's, after the pipeline pass every
     * one kept there (passes/pipeline_grad.c); ngrad_mb of them. */
    const char *const *grad_mb;
    int ngrad_mb;
    int w_fill;         /* an ir_w_fill: --w-fill (codegen/pipeline_fill.c) */
} ir_pipeline;

#endif
