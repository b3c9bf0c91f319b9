/*
 * ir_annot.h - what the cost pass and the planner write on the IR: per-op
 * costs, the program's totals, and the planner's certificate.
 *
 * The IR carries these annotations (ir_op.cost, ir_module.totals,
 * ir_module.plan) but the ir layer never computes them: passes/costmodel
 * and propagate do, and the printers show them.  Apart from ir.h so that
 * the structure of a program and the numbers about it are read
 * separately (included by ir.h; it may also be included alone).
 */
#ifndef EINC_IR_ANNOT_H
#define EINC_IR_ANNOT_H

#include <stdbool.h>

/* Why the cost pass says an op takes the time it does. */
typedef enum ir_bound {
    IR_BOUND_NONE,      /* not annotated */
    IR_BOUND_COMPUTE,   /* FLOPs / peak FLOP/s dominates */
    IR_BOUND_MEMORY,    /* HBM bytes / HBM bandwidth dominates */
    IR_BOUND_BANDWIDTH, /* collective, V / W term dominates */
    IR_BOUND_LATENCY,   /* collective, per-hop latency term dominates */
} ir_bound;

/* "compute", "memory", "bandwidth", "latency", or "" for IR_BOUND_NONE
 * (print.c). */
const char *ir_bound_name(ir_bound b);

/* Cost annotation written by the cost pass (all per device). */
typedef struct ir_cost {
    bool valid;        /* false until a cost pass ran */
    double flops;      /* floating-point operations */
    double hbm_bytes;  /* bytes read + written in device memory */
    double comm_bytes; /* bytes sent by this device */
    double t_compute;  /* seconds */
    double t_memory;   /* seconds */
    double t_comm;     /* seconds */
    double time;       /* seconds: the op's estimate */
    ir_bound bound;
} ir_cost;

/* What the planner proved about its plan (the propagate pass fills it;
 * --dump-ir and --explain print it with ir_plan_cert_str). */
typedef enum ir_plan_proof {
    IR_PLAN_UNPROVEN,   /* no whole-program ILP was solved */
    IR_PLAN_OPTIMAL,    /* the ILP proved its optimum among the candidates */
    IR_PLAN_BOUNDED,    /* the solver stopped at its time limit with a bound */
} ir_plan_proof;

/* Whether the HBM decided the plan (the planner's memory row). */
typedef enum ir_plan_memory {
    IR_PLAN_MEM_FREE,      /* the fastest plan fits, or the row was not stated: nothing to say */
    IR_PLAN_MEM_BOUND,     /* the fastest plan does not fit; a slower one that does was chosen */
    IR_PLAN_MEM_NONE_FITS, /* no plan among the candidates fits; the fastest was kept */
} ir_plan_memory;

typedef struct ir_plan_cert {
    bool valid;          /* propagate ran with a profile */
    ir_plan_proof proof;
    double objective;    /* seconds: the plan's compute and reshards in sequence (the planner's objective) */
    double best;         /* seconds: no plan among the candidates is faster by that objective */
    long candidates;     /* candidate layouts the ILP chose among */
    bool merged;         /* simple ops followed an operand (Alpa's merging) to keep the ILP small */
    const char *why;     /* when the plan is above `best`: why it was kept (static string), or NULL */
    /* The seed 000 strategy the portfolio kept over the search's plan ("FSDP+TP",
     * passes/propagate_portfolio.c; static string), or NULL when the search's plan stands. */
    const char *strategy;
    /* The planner's memory row (passes/propagate_ilp_mem.c): bytes per device of params,
     * optimizer state, inputs, gradients and activations kept for the backward pass. */
    ir_plan_memory memory;
    double mem_hbm;      /* bytes: the profile's HBM per device */
    double mem_fastest;  /* bytes: what the fastest plan keeps (IR_PLAN_MEM_BOUND) */
    double mem_plan;     /* bytes: what the chosen plan keeps */
    double mem_least;    /* bytes: no plan among the candidates keeps less (IR_PLAN_MEM_NONE_FITS) */
    double fastest;      /* seconds: the fastest plan's objective (IR_PLAN_MEM_BOUND) */
} ir_plan_cert;

/* Most CPU counts ir_pipe_totals.core_bubble holds a prediction for. */
#define IR_PIPE_CORE_BUBBLES 16

/* The step of a pipelined program (ir_module.pipe) as its schedule runs
 * it: Z stages, M microbatches, the stage-to-stage hops, then the weight
 * gradients' reductions and the update once (passes/cost_pipe.c,
 * docs/pipeline.md "The cost of a compiled pipelined program").  Seconds
 * per training step and bytes per device; valid is false for a program not
 * pipelined. */
typedef struct ir_pipe_totals {
    bool valid;
    bool forward;          /* a forward (inference): M forwards per stage, no backward, sync or update */
    int stages;            /* Z, the pipeline axis's size */
    int microbatches;      /* M */
    int schedule;          /* a pp_schedule, ir_module.pipe.schedule */
    double step;           /* the predicted step: pipeline + sync_update */
    double pipeline;       /* makespan of the M forwards and backwards on the Z stages (simulated) */
    double sync_update;    /* after the pipeline drains: gradient reductions and the update, slowest stage */
    double bubble;         /* idle share of `pipeline`, simulated (pp_plan.bubble); what an
                              executable may carry as its predicted bubble */
    double bubble_formula; /* (Z - 1) / (M + Z - 1), uniform stages and free hops (seed 000) */
    double held;           /* most microbatches whose activations one stage holds at once */
    double stage_memory;   /* peak bytes of the fullest stage: params, gradients, optimizer
                              state, held activations, send and receive buffers */
    double hop;            /* one transfer of one microbatch's activation between stages */
    double stage_f, stage_b; /* one microbatch's forward, backward (with dL/dW) on a stage's
                                |L|/Z layers, the part every stage does */
    double first_extra, last_extra; /* per microbatch, forward + backward: what only the first
                                       stage (embedding) and the last (head, loss) add */
    double first_extra_f, last_extra_f; /* of which in the F item */
    double first_extra_w, last_extra_w; /* of which in the W item (zero-bubble, zb-h2; else 0):
                                           the ops from the dL/dW loop on (the embedding's and
                                           the head's weight gradients) and their sums' adds;
                                           the rest is in B */
    double stage_sums;     /* once per step, in sync_update: the AllReduces over the stages of
                              the sums only the first or last stage computes (pipe_work.zsum) */
    /* core_bubble[c - 1]: the core-idle bubble of `pipeline` when the Z
     * stages share c CPUs, c = 1 .. min(Z, IR_PIPE_CORE_BUBBLES), taking
     * turns at items (pp_core_bubble; [Z - 1] is `bubble`); -1 where not
     * simulated (a forward, or more than about 2^26 replay steps). */
    double core_bubble[IR_PIPE_CORE_BUBBLES];
    double grad_once;      /* once per step, in sync_update: a stage's collectives of its stacked
                              gradients, moved out of the backward loop (passes/pipeline_grad.c) */
    double grad_once_bytes; /* bytes their unreduced sums add to a stage, in stage_memory (an FSDP
                               gradient's full block instead of its 1/X; 0 for DP's) */
    double grad_once_first_bytes, grad_once_last_bytes; /* the same for the gradients outside the
                               loops whose collective runs once per step (the embedding's on the
                               first stage, the head's on the last: pipe_work.acc_extra_pre, _post) */
} ir_pipe_totals;

/* Totals of the cost pass over the whole program (per device).  For a
 * pipelined program (ir_module.pipe) the module is one microbatch and each
 * stage's loops run |L|/Z layers: step_time, exposed_comm_time, mfu and
 * peak_memory are one microbatch's forward and backward on one stage plus
 * the update, and `pipe` holds the step as the schedule runs it. */
typedef struct ir_totals {
    bool valid;
    double step_time;          /* seconds, with off-critical-path collectives overlapped */
    double exposed_comm_time;  /* seconds of communication on the critical path */
    double mfu;                /* model FLOPs per device / (step_time * peak FLOP/s), 0..1 */
    double model_flops;        /* GLOBAL FLOPs of the unsharded program's einsums and MeshSlice
                                  loops, each counted once (seed 003: 2 * params * tokens) */
    double elementwise_flops;  /* GLOBAL FLOPs of elementwise ops, not in model_flops or mfu */
    double peak_memory;        /* bytes per device at the program-order peak: params, inputs
                                  and the live intermediates */
    double bound_serial;       /* seconds: cost_lower_bound's total_s (no plan's serial step is
                                  faster); 0 if not computed */
    double bound_compute;      /* seconds: its parts, cost_bound's compute_s, memory_s and */
    double bound_memory;       /*   comm_s, and hbm_bytes (per device): */
    double bound_comm;         /*   bound_serial = max(compute, memory) + comm */
    double bound_hbm_bytes;
    ir_pipe_totals pipe;       /* the pipelined step; pipe.valid false if not pipelined */
} ir_totals;

#endif
