/*
 * rt_generate.h - the generation loop of a decode program (generate.c) and
 * its choice of each token (sample.c): what the runtime's core (job.c,
 * check.c, cli.c) and the tests of sampling use.  Kept out of
 * rt_internal.h, which every runtime file includes.
 */
#ifndef EINC_RT_GENERATE_H
#define EINC_RT_GENERATE_H

#include "rt_job.h"

/* How --generate chooses each token from a row of logits (sample.c's
 * essay gives the rule). */
typedef struct rt_sampling {
    double temperature;          /* T > 0 samples from softmax(logits / T); 0: greedy */
    int64_t top_k;               /* sample among the top_k most likely tokens; 0: all */
    double top_p;                /* then among the fewest most likely of mass >= top_p, in (0, 1] */
    uint64_t seed;               /* --seed S: the uniform draws' seed */
} rt_sampling;

/* One token of a row being sampled: its logit (then its running weight)
 * and its index in the vocabulary. */
typedef struct rt_sample_entry {
    double value;                /* the logit, then the running sum c_i of the weights */
    int64_t index;               /* the token */
} rt_sample_entry;

/* What a job of --generate does besides running (generate.c): which
 * inputs it feeds and which output it reads, the tokens and the time of
 * each step.  Shared by the devices of a process; the root's arrays are
 * written by device 0 only. */
typedef struct rt_generate {
    int64_t n;                   /* --generate N */
    rt_sampling sampling;        /* how each token is chosen from the logits (sample.c) */
    const int32_t *stop;         /* --stop-token ids (the options' array, not owned) */
    int nstop;                   /* entries in stop */
    int32_t tokens, position;    /* input indices: the tokens [B] (i32) and the position (i32
                                    scalar, or [B] with per_row) */
    int per_row;                 /* 1: the position input holds one position per row, [B] */
    int32_t next;                /* output index of the next tokens [B] (i32), -1: from the logits */
    int32_t logits;              /* output index of the logits [B, V], -1 if none */
    int64_t batch, vocab;        /* B, and V of the logits (0 without) */
    int64_t prompt_len;          /* T0, tokens per sequence of --prompt-ids */
    int64_t first;               /* the first step run: --prompt-cached P, else 0 */
    int64_t steps;               /* the last step + 1: T0 + N - 1; runs: steps - first */
    int64_t ran;                 /* root, after the run: the steps run (steps - first unless
                                    every sequence reached a stop token earlier) */
    int32_t *ids;                /* [B, T0 + N]: the prompt, then the tokens made (root, after the
                                    run); malloc'd, owned.  Step s's time is
                                    job->times[s - first]. */
    struct rt_engine *engine;    /* --serve: the server's engine (engine.c), which runs the
                                    steps instead; owned.  NULL for --generate. */
    struct rt_speculate *spec;   /* --speculate: the draft and the counts (speculate.c), which
                                    run the loop instead; owned.  NULL otherwise. */
} rt_generate;

/* The uniform number in [0, 1) that sequence `seq` draws at step `step`
 * (a multiple of 2^-53): splitmix64 of the seed and a counter, so every
 * device, backend and the reference draw the same number. */
double rt_sample_uniform(uint64_t seed, int64_t step, int64_t seq);
/* The token chosen from `row` (vocab elements of dtype `dtype`, any
 * floating dtype) by sampling settings `s` and the uniform number u in
 * [0, 1): sample.c's rule (greedy when s->temperature is 0).  `work` is
 * caller-owned scratch of vocab entries, overwritten.  vocab >= 1,
 * 0 <= s->top_k, 0 < s->top_p <= 1; no errors. */
int32_t rt_sample_row(const rt_sampling *s, int32_t dtype, const void *row, int64_t vocab,
                      double u, rt_sample_entry *work);
/* The entries per shard that decide a row of `vocab` tokens under `s`
 * (the size of rt_sample_top's summary): 1 for greedy, else --top-k K
 * when 0 < K < vocab, else vocab (every token may be drawn). */
int64_t rt_sample_slots(const rt_sampling *s, int64_t vocab);
/* The summary of one shard of a row (sample_shard.c's vocab-parallel
 * sampling, seed 002): `row` holds n elements of dtype `dtype`, the
 * row's tokens offset .. offset + n - 1.  Writes `slots` entries
 * (rt_sample_slots of the whole row) to `top`, with global indices: the
 * shard's first maximum (NaN largest) alone when that decides greedily
 * (greedy, one slot, or a maximum of NaN or +Inf), else its first
 * min(slots, n) entries in the rule's order (decreasing logit, ties by
 * increasing index); the rest is padding (index -1).  `work` is
 * caller-owned scratch of n entries and `top` may be `work`.  No errors. */
void rt_sample_top(const rt_sampling *s, int32_t dtype, const void *row, int64_t n,
                   int64_t offset, int64_t slots, rt_sample_entry *work, rt_sample_entry *top);
/* The token sample.c's rule chooses from the concatenated summaries of a
 * row's shards (`pairs`, n entries, padding skipped; `sorted`: one shard,
 * already in order): the first maximum decides greedily, else the
 * summaries' entries, ordered, are the row's top-k, and the weights, the
 * top-p cut and u follow.  Gives rt_sample_row's token for the whole row
 * however it was split.  Overwrites `pairs`; no errors. */
int32_t rt_sample_pick(const rt_sampling *s, rt_sample_entry *pairs, int64_t n, int sorted,
                       double u);

/* How one step brings sharded logits together to sample from them: the
 * shards' (value, index) pairs or the whole rows, whichever leaves fewer
 * bytes on each device (rt_sample_choose; docs/generation.md, "Sampling
 * on sharded logits").  Bytes are those of the gathers' results on one
 * device (its own block included): the size of the gathered arrays,
 * which an AllGather's time grows with (seed 001). */
typedef struct rt_sample_plan {
    int64_t slots;               /* K > 0: each shard gives K pairs per row; 0: no pairs */
    int whole;                   /* 1: the logits are gathered whole */
    int64_t bytes;               /* what the chosen gathers leave per device; 0: none */
    int64_t pair_bytes;          /* what the pairs would leave (0 when nothing is sampled) */
    int64_t whole_bytes;         /* what the whole logits would leave */
} rt_sample_plan;

/* The choice for one step: `slots` K pairs per shard and row (the
 * largest rt_sample_slots of the rows sampled; 0: no row samples, nothing
 * is gathered), `pair_rows` rows of pairs gathered onto each device, over
 * `shards` G blocks of the vocabulary each, plus `token_bytes` for the
 * tokens gathered afterwards (--generate with B sharded: B * 8); or the
 * whole logits, `batch` * `vocab` elements of `dtype_bytes`.  Pairs cost
 * pair_rows * G * K * 16 + token_bytes (two f64 each); they are chosen
 * when strictly fewer bytes, else whole rows (the tie to the simpler
 * path).  Both give the same tokens.  All counts >= 0; no errors. */
rt_sample_plan rt_sample_choose(int64_t slots, int64_t pair_rows, int64_t shards,
                                int64_t token_bytes, int64_t batch, int64_t vocab,
                                int64_t dtype_bytes);
/* --generate's plan for every sampling step of program p (g->sampling,
 * the logits' sharding): pairs over V's axes for this device's B_l rows,
 * then the B tokens (8 bytes each), or the whole logits.  With
 * replicated logits nothing is gathered (bytes 0). */
rt_sample_plan rt_sample_plan_generate(const rt_program *p, const rt_generate *g);
/* A shard's summary in wire form: rt_sample_top of `row` (n elements of
 * `dtype`, tokens offset .. offset + n - 1) with `slots` entries, as
 * 2 * slots f64 (value, global index) into `pairs`.  The summary depends
 * only on slots (1: the first maximum; more: the shard's first slots
 * entries in the rule's order), never on a row's settings, so one K
 * serves rows sampled differently as long as K >= each row's
 * rt_sample_slots.  `work`: max(n, slots) entries of scratch (the
 * summary is built there, padded to slots).  No errors. */
void rt_sample_summarise(int32_t dtype, const void *row, int64_t n, int64_t offset,
                         int64_t slots, rt_sample_entry *work, double *pairs);
/* The token of a row from its shards' summaries in wire form (`pairs`:
 * n entries, 2 * n f64, as rt_sample_summarise writes them, in any shard
 * order; `sorted`: one shard, in order), chosen by `s` with draw u:
 * rt_sample_pick on them, so rt_sample_row's token for the whole row
 * whenever each shard gave at least rt_sample_slots(s, V) entries.
 * `work`: n entries of scratch.  No errors. */
int32_t rt_sample_pick_pairs(const rt_sampling *s, const double *pairs, int64_t n, int sorted,
                             double u, rt_sample_entry *work);
/* Every device, after a step of --serve on sharded logits `l` (this
 * device's block `local`), as device 0 planned it (only plan->whole and
 * plan->slots are read): pairs (slots K > 0) gathers every row's
 * rt_sample_summarise of each block with K entries over every axis that
 * shards the logits, into `into` as f64 [B, G * K * 2] (row b's G
 * shards' summaries, G the vocabulary's shards), on every device; whole
 * gathers the logits into `into` ([B, V] elements of l's dtype,
 * rt_sample_gather_whole); neither does nothing.  `into` is
 * caller-owned, of the whole logits' bytes (which bound the pairs'
 * whenever rt_sample_choose picks them).  A collective: every device
 * calls it with the same plan.  Errors end the job (rt_fatal: out of
 * memory). */
void rt_sample_gather_step(rt_device *dev, const rt_program *p, const rt_tensor_desc *l,
                           const rt_sample_plan *plan, const void *local, void *into);

/* Every device, after a step of --generate (sample_shard.c): the next
 * token of each of the g->batch rows into tokens[0..B), the same on every
 * device, from this device's block `local` of the logits output
 * p->outputs[g->logits] (any sharding rt_generate_check_logits accepts:
 * the batch and the vocabulary dims over any mesh axes), sampled by
 * g->sampling with the draws of step `step`.  Bit for bit the tokens
 * rt_sample_row gives on the whole rows.  Gathers (value, index) pairs
 * over the vocabulary's axes or the whole logits, as
 * rt_sample_plan_generate chooses by their bytes.  A collective: every device calls it at the
 * same point.  Errors end the job (rt_fatal: out of memory). */
void rt_sample_sharded(rt_device *dev, const rt_program *p, const rt_generate *g,
                       const void *local, int64_t step, int32_t *tokens);
/* Every device: gathers tensor `t` from this device's block `local`
 * (t->local_shape) into the whole global array `whole` (t->global_shape,
 * caller-owned) on every device: one AllGather over every mesh axis that
 * shards t (a copy when none does).  A collective, as above. */
void rt_sample_gather_whole(rt_device *dev, const rt_tensor_desc *t, const void *local,
                            void *whole);

/* Parses a generation flag (--generate, --prompt-ids, --temperature,
 * --top-k, --top-p, --stop-token, --generated, --prompt-cached) into `o`
 * (--stop-token's ids into the malloc'd o->stop, freed by
 * rt_free_options); 1 if `flag` is none of them, -1 and a message on a
 * bad value (the checks that need the program are rt_generate_prepare's). */
int rt_parse_generate_flag(const char *flag, const char *val, rt_options *o, char *err,
                           size_t errlen);
/* The sampling the command line asks for: --temperature, --top-k, --top-p
 * (1 unless given) and --seed.  What --generate samples with and what
 * --serve's requests default to. */
rt_sampling rt_sampling_of_options(const rt_options *o);

/* The index of the one tensor of ts[0..n) that `match` accepts, -1 if
 * there is none, -2 if there are several (the decode interface is found
 * by shape). */
int32_t rt_find_one(const rt_tensor_desc *ts, int32_t n, int (*match)(const rt_tensor_desc *));
/* Finds the program's decode interface by shape into g: g->tokens,
 * g->position (a message if either is missing or doubled), g->next and
 * g->logits (-1 none, -2 several; not checked here) and g->batch, B.
 * Shared by --generate and --serve.  -1 and a message. */
int rt_generate_find(const rt_program *p, rt_generate *g, char *err, size_t errlen);
/* Writes this device's block of the position input in[g->position]: the
 * scalar `pos`; or with g->per_row, row b's position rows[b] (rows: the
 * global [B] array), or `pos` for every row when rows is NULL. */
void rt_generate_set_positions(rt_device *dev, const rt_program *p, const rt_generate *g,
                               void *const *in, const int32_t *rows, int32_t pos);
/* Checks g->logits (one floating output [B, V] or [B, 1, V], replicated
 * or in even blocks along B and V; rt_sample_sharded reads it) and sets
 * g->vocab, V; the message names sampling when g->sampling.temperature >
 * 0.  -1 and a message. */
int rt_generate_check_logits(const rt_program *p, rt_generate *g, char *err, size_t errlen);
/* Before the run, on every process, with --generate: finds the tokens,
 * position, next-token or logits tensors (a message if the program has
 * none or several, or only a sharded next-token output; a sharded one
 * beside the logits leaves the choice to them), checks --top-k and --stop-token
 * against the vocabulary and the prompt and N against the cache length,
 * reads --prompt-ids into g->ids, and sets job->gen = g and job->repeat =
 * the steps.  -1 and a message. */
int rt_generate_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen);
/* The same generation for --check's reference job `rj` (program `ref`):
 * the tensors by name, the prompt from `g`.  -1 and a message. */
int rt_generate_for_reference(rt_generate *rg, const rt_generate *g, const rt_program *ref,
                              const rt_program *p, char *err, size_t errlen);
/* Every device: the steps (generate.c's essay). */
void rt_generate_device(rt_device *dev, rt_job *job, void *const *in, void *const *out);
/* Root: prints the tokens and the timing line, writes --generated. */
int rt_generate_finish(FILE *f, const rt_job *job, char *err, size_t errlen);
/* Checks --prompt-ids' header against g->batch (i32 [B, T0], T0 >= 1)
 * and sets g->prompt_len.  -1 and a message. */
int rt_generate_prompt_header(const rt_options *o, rt_generate *g, char *err, size_t errlen);
/* Reads --prompt-ids into a new g->ids [B, T0 + N] (zeros after the
 * prompt), once g->batch, g->prompt_len and g->n are set.  -1 and a
 * message. */
int rt_generate_read_prompt(const rt_options *o, rt_generate *g, char *err, size_t errlen);
/* Whether `token` is one of the --stop-token ids. */
int rt_generate_is_stop(const rt_generate *g, int32_t token);
/* Root: prints "tokens b: ..." for the first 16 rows of g->ids (up to a
 * -1); returns how many tokens made were --stop-token ids. */
int64_t rt_generate_print_tokens(FILE *f, const rt_generate *g);
/* Root: writes --generated (g->ids as i32 [B, T0 + N]) if asked; -1 and a
 * message. */
int rt_generate_write_ids(const rt_job *job, char *err, size_t errlen);

/* ---- speculative decoding (speculate.c; docs/generation.md) ---- */

/* From rt_generate_prepare with --speculate K: the target `job->prog` is
 * the windowed program (i32 tokens [B, W], a scalar i32 position, one
 * floating logits output [B, W, V]) with W = K + 1; job->draft the
 * companion (one token per row, logits [B, V] or [B, 1, V], the same B
 * and V).  Checks both, the flags speculation does not take, the caches
 * against the prompt and N (the last verification writes K positions
 * past the last token), resolves the draft's --draft-input,
 * --draft-params and --random-inputs, reads the prompt, and sets g->spec
 * and job->repeat.  -1 and a message. */
int rt_speculate_prepare(rt_job *job, rt_generate *g, char *err, size_t errlen);
/* Every device: the speculative loop (speculate.c's essay); device 0
 * leaves the tokens in g->ids and the counts and times in g->spec. */
void rt_speculate_device(rt_device *dev, rt_job *job, void *const *in, void *const *out);
/* Root: the tokens, the timing line, the speculative line (acceptance
 * rate, tokens per target run, speed-up), --generated.  -1 and a message. */
int rt_speculate_finish(FILE *f, const rt_job *job, char *err, size_t errlen);
/* Frees `s` and its draft job (NULL: nothing). */
void rt_speculate_free(struct rt_speculate *s);

/* Frees what rt_generate_prepare allocated. */
void rt_generate_release(rt_generate *g);

/* ---- the checks before the run (job.c), with the generation's state ---- */

/* What rt_prepare decided. */
enum rt_prep_result {
    RT_PREP_RUN = 0,    /* every check passed: run the job */
    RT_PREP_ERROR = -1, /* the command line is wrong for any rank (err says why) */
    RT_PREP_FILES = -2, /* a check of names, paths or files failed on this rank (err) */
    RT_PREP_HELP = 1,   /* --help: print the usage, exit 0 */
    RT_PREP_INFO = 2,   /* --info: print the program, exit 0 */
};

/* Everything rt_main sets up before the devices run: the options, the
 * job, and the training and generation state the job points into.  Held
 * in one place so the checks can run without starting a job
 * (tests/fuzz/fuzz_cli.c) and be released on every path. */
typedef struct rt_prepared {
    rt_options opt;              /* parsed argv; strings point into argv */
    rt_job job;                  /* valid when job_ready */
    int job_ready;               /* 1 once rt_job_init ran */
    rt_train train;              /* job.train points here for a training program */
    rt_dataset data;             /* the --data files */
    rt_generate gen;             /* job.gen points here with --generate or --serve */
} rt_prepared;

/* Parses argv and runs every check of it against `prog` (and `draft`, the
 * companion program or NULL, for --speculate; `prefill`, likewise, for
 * --serve's chunked prefill) that comes before
 * the run, on rank `rank` of `nranks` (the launcher's): the syntax, the
 * program's ABI, the mode (training, generation, serving flags), the
 * names, the paths against each other, the --data, --resume, --params,
 * --prompt-ids and --input files.  Creates the --save directory and opens
 * --metrics on rank 0 (rt_train_prepare); never runs a step, never starts
 * a server, never exits.  Returns an rt_prep_result, with a message in
 * err for RT_PREP_ERROR and RT_PREP_FILES.  Release *pr with
 * rt_prepared_release whatever it returned. */
int rt_prepare(rt_prepared *pr, int argc, char **argv, const rt_program *prog,
               const rt_program *draft, const rt_program *prefill, const rt_launcher *l, int rank,
               int nranks, char *err, size_t errlen);
/* Frees what rt_prepare and the run allocated and closes --metrics; 0, or
 * -1 and a message if the metrics could not be written out. */
int rt_prepared_release(rt_prepared *pr, char *err, size_t errlen);

#endif
