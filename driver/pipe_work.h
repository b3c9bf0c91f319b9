/*
 * pipe_work.h - the work of a pipeline stage, per microbatch, read off a
 * compiled training program whose ops the cost pass annotated
 * (pipe_work.c says how the backward pass splits into B and W).
 */
#ifndef EINC_DRIVER_PIPE_WORK_H
#define EINC_DRIVER_PIPE_WORK_H

#include <stdbool.h>
#include <stdint.h>

#include "costmodel.h"
#include "ir.h"

/* Seconds and bytes per device, for the batch the module was priced at
 * (one microbatch).  "layer" figures are per layer of the repeat block: a
 * stage of k layers does k of each.  The first stage also runs the ops
 * before the block (pre: the embedding, and after the backward block its
 * gradient), the last stage the ops after it (post: the head, the loss and
 * their gradients). */
typedef struct pipe_work {
    int64_t layers;                  /* |L|, the repeat block's trip count */
    double layer_f, layer_b, layer_w; /* forward; input gradient dL/dx; weight gradient dL/dW */
    double pre_f, pre_b, pre_w;      /* first stage only */
    double post_f, post_b, post_w;   /* last stage only */
    /* Collectives that reduce weight gradients (seed 000's DP AllReduce,
     * FSDP ReduceScatter): once per step after the last microbatch, per
     * layer / on the first / on the last stage. */
    double sync_layer, sync_pre, sync_post;
    /* The optimizer's update, once per step: of the stacked params (a
     * stage updates its share) and of the others. */
    double update_stacked, update_other;
    double carry_bytes;              /* the activation one stage hands the next */
    double act_layer;                /* activations the forward block keeps per layer */
    double state_stacked, state_other; /* params and optimizer state, bytes */
    double param_stacked, param_other; /* params alone: what their accumulated gradients take */
} pipe_work;

/* Fills w from m, compiled with a loss and an optimizer and annotated by
 * the cost pass: one forward repeat block and its reverse backward block.
 * Returns 0, or -1 with a message in err (no or several repeat blocks, no
 * backward pass, out of memory).  m is not modified. */
int pipe_work_of(const ir_module *m, pipe_work *w, char *err, size_t errlen);

/* Seconds to move `bytes` one hop between neighbouring stages: one ICI
 * link one way plus a hop's latency (seed 001, "one hop"), or the chip's
 * share of the data-center network when the stages are pods (`dcn`, seed
 * 000). */
double pipe_work_hop(const cost_hw *hw, double bytes, bool dcn);

#endif
