/*
 * rt_speculate.h - speculative decoding's state (speculate.c, the loop;
 * speculate_prep.c, its checks and report) and the pieces of its
 * acceptance rule that the unit tests call.
 */
#ifndef EINC_RT_SPECULATE_H
#define EINC_RT_SPECULATE_H

#include "rt_generate.h"

/* --speculate K of one job: the draft, its job and the counts of the run.
 * Shared by the devices of a process; the counts and times are written by
 * device 0 only (the root's are reported). */
typedef struct rt_speculate {
    int64_t k;                   /* K: draft tokens proposed per target run, >= 1 */
    int64_t window;              /* W = K + 1: tokens the target verifies per run */
    const rt_program *draft;     /* the companion draft program (not owned) */
    rt_options dopt;             /* the draft's options: --draft-input as its --input,
                                    --draft-params as its --params, --random-inputs shared;
                                    lists not owned (the job's options hold them) */
    rt_job djob;                 /* the draft's inputs (in_paths, headers); rt_job_init'd */
    int djob_ready;              /* 1 once djob must be released */
    rt_generate dgen;            /* the draft's interface: tokens, position, logits, B, V */
    /* Root, after the run. */
    int64_t rounds;              /* target verification runs (after the prefill) */
    int64_t made;                /* tokens made per row: N, or fewer when every row stopped */
    int64_t draft_runs;          /* draft runs, its prefill included */
    int64_t accepted;            /* draft tokens accepted, summed over the rows */
    int64_t tested;              /* draft tokens tested (up to each row's first rejection) */
    double prefill_time;         /* seconds of the target's prefill runs */
    double target_time;          /* seconds of the target's verification runs */
    double draft_time;           /* seconds of the draft's runs */
    double first_time;           /* seconds from the start to the first round's tokens */
    double total_time;           /* seconds of the whole loop */
} rt_speculate;

/* The distribution sample.c's rule draws from for one row of logits
 * (`vocab` elements of floating dtype `dtype`) under `s`, into probs[0..
 * vocab): softmax(l / T) over the kept tokens (top-k, then top-p), zero
 * elsewhere, each w_i / c_{n-1} in the rule's notation; greedy (T = 0, or
 * a maximum of NaN or +-Inf) a one-hot at rt_sample_row's token.  `work`:
 * vocab entries of scratch.  The probabilities sum to 1 within rounding;
 * no errors. */
void rt_sample_probs(const rt_sampling *s, int32_t dtype, const void *row, int64_t vocab,
                     rt_sample_entry *work, double *probs);
/* The token drawn with u in [0, 1) from norm(max(0, p - q)) (the residual
 * after a rejection; Leviathan et al. 2023, Algorithm 1), by inverse CDF
 * over increasing token ids; from p when p - q has no positive mass
 * (p == q, where nothing is rejected).  No errors. */
int32_t rt_sample_residual(const double *p, const double *q, int64_t vocab, double u);
/* Whether a draft token of target probability p and draft probability q
 * is accepted with the draw u in [0, 1): u < min(1, p / q).  q = 0 (a
 * token the draft's rule never draws) accepts iff p > 0. */
int rt_speculate_accept(double p, double q, double u);

#endif
