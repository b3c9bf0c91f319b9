/*
 * rt_job.h - the executable around the program: its command line (cli.c),
 * the launchers, the job every device of a process shares (job.c), the
 * training loop (train.c) and --check (check.c).  Kept out of
 * rt_internal.h, which every runtime file includes, as rt_generate.h is:
 * the layers below (devices, collectives, kernels, files) do not need it.
 */
#ifndef EINC_RT_JOB_H
#define EINC_RT_JOB_H

#include "rt_internal.h"

/* ---- the executable (cli.c, job.c, info.c) ---- */

/* A NAME=path pair of --input or --output. */
typedef struct rt_named_path {
    const char *name;            /* tensor name (points into argv) */
    const char *path;            /* file path (points into argv) */
} rt_named_path;

/* Parsed command line. */
typedef struct rt_options {
    rt_named_path *inputs;       /* --input pairs, malloc'd */
    int ninputs;                 /* entries in inputs */
    rt_named_path *outputs;      /* --output pairs, malloc'd */
    int noutputs;                /* entries in outputs */
    int random_inputs;           /* 1 if --random-inputs was given */
    uint64_t seed;               /* its seed */
    int check;                   /* --check */
    double check_tol;            /* --check-tol: tolerance for every dtype, 0 for the defaults */
    int64_t repeat;              /* --repeat N (1 by default) */
    int repeat_given;            /* 1 if --repeat was given (print the median) */
    int info;                    /* --info */
    int help;                    /* --help */
    int stats;                   /* --stats */
    int profile;                 /* --profile */
    int discard_outputs;         /* --discard-outputs: outputs neither gathered nor printed */
    int bind;                    /* --bind-to: an rt_bind (RT_BIND_CORE by default) */
    const char *trace;           /* --trace FILE.json, or NULL (points into argv) */
    const char *params;          /* --params DIR: every param from this checkpoint, or NULL
                                    (points into argv) */
    /* Training (train.c; only for a program that trains).  Strings point into argv. */
    rt_named_path *data;         /* --data pairs, malloc'd */
    int ndata;                   /* entries in data */
    int64_t steps;               /* --steps N: the step count to reach; 0 if not given */
    int shuffle;                 /* 1 if --seed was given: --data rows in a shuffled order */
    uint64_t shuffle_seed;       /* its seed */
    int64_t log_every;           /* --log-every K; 0 if not given (every step) */
    const char *metrics;         /* --metrics FILE.jsonl, or NULL */
    const char *save;            /* --save DIR, or NULL */
    int64_t save_every;          /* --save-every K; 0 if not given (only after the last step) */
    const char *resume;          /* --resume DIR, or NULL */
    int resume_mismatch_ok;      /* --resume-mismatch=ok: resume from a checkpoint whose
                                    hyperparameters differ (a warning), not refuse */
    rt_named_path *eval_data;    /* --eval-data pairs (the held-out set), malloc'd */
    int neval_data;              /* entries in eval_data */
    int64_t eval_every;          /* --eval-every K; 0 if not given (evaluate after the last
                                    step only) */
    /* Generation (generate.c; a decode program).  Strings point into argv. */
    int64_t generate;            /* --generate N: tokens per sequence; 0 if not given */
    const char *prompt_ids;      /* --prompt-ids FILE.npy, or NULL */
    double temperature;          /* --temperature T: 0 (greedy) unless given */
    int64_t top_k;               /* --top-k K: sample among the K most likely tokens; 0 if not
                                    given (all) */
    double top_p;                /* --top-p P in (0, 1]: sample from the nucleus of mass P; 1
                                    unless given */
    int top_p_given;             /* 1 if --top-p was given (1 is a valid value) */
    int32_t *stop;               /* --stop-token ids, malloc'd; NULL if none */
    int nstop;                   /* entries in stop */
    const char *generated;       /* --generated FILE.npy, or NULL */
    int64_t prompt_cached;       /* --prompt-cached P: prompt tokens already in the states; 0 if
                                    not given */
    /* Speculative decoding (speculate.c): --speculate K with the companion draft. */
    int64_t speculate;           /* --speculate K: draft tokens per target run; 0 if not given */
    rt_named_path *draft_inputs; /* --draft-input pairs (the draft's --input), malloc'd */
    int ndraft_inputs;           /* entries in draft_inputs */
    const char *draft_params;    /* --draft-params DIR (the draft's --params), or NULL */
    /* Serving (rt_serve.h; a decode program): --serve, --port, --host, --max-queue,
     * --prefill-budget, --static-batching. */
    int serve;                   /* --serve: answer HTTP requests instead of one run */
    int64_t port;                /* --port P (8080 unless given; 0: any free port) */
    int port_given;              /* 1 if --port was given (0 is a valid value) */
    const char *host;            /* --host ADDR (IPv4), or NULL: 127.0.0.1 (points into argv) */
    int64_t max_queue;           /* --max-queue N: requests waiting for a batch; 0: the default */
    int64_t prefill_budget;      /* --prefill-budget N: prompt tokens a step of the prefill
                                    program reads beyond one per row; 0: no bound (W per row) */
    int static_batching;         /* --static-batching: free slots take requests only when no
                                    row runs (a batch runs to its longest row's end) */
} rt_options;

/* Parses argv into `o`; on error writes a message into err and returns -1. */
int rt_parse_options(int argc, char **argv, rt_options *o, char *err, size_t errlen);
/* Parses the value `val` of `flag` as a count in [lo, hi]: decimal digits
 * only, no sign, no space, nothing after them ("010" is ten), no overflow.
 * 0 with *v set, or -1 and "FLAG expects a count from LO to HI (decimal),
 * got 'VAL'".  Every number of the command line is read by it (cli.c). */
int rt_parse_count(const char *flag, const char *val, uint64_t lo, uint64_t hi, uint64_t *v,
                   char *err, size_t errlen);
/* Before the run: every file the command line names to be written
 * (--output, --trace, --metrics, --generated, the files of the --save
 * checkpoint) against every other one and against every file it names to
 * be read (--input, --data, --eval-data, --prompt-ids, the files of the --resume
 * checkpoint): two outputs naming one file, or an output naming an input,
 * are refused (-1 and a message naming both flags).  --save may name the
 * --resume checkpoint: that is how a resumed run goes on saving; and
 * --output NAME the file of --input NAME: a state updated in place
 * (paths.c). */
int rt_check_paths(const rt_options *o, const rt_program *p, char *err, size_t errlen);
/* 1 if `flag` ("--steps") takes a value ("--steps 3" or "--steps=3"), else 0. */
int rt_flag_takes_value(const char *flag);
/* The first flag given in `o` that only a training program takes
 * ("--steps", "--data", ...), or NULL if none. */
const char *rt_training_flag(const rt_options *o);
/* Frees the lists of `o` (the strings belong to argv). */
void rt_free_options(rt_options *o);
/* Writes the usage text of --help. */
void rt_print_help(FILE *f, const char *argv0);
/* Writes --info: source, mesh, tensors with shardings, the IR dump. */
void rt_print_info(FILE *f, const rt_program *prog);
/* Formats t's sharding in book notation, e.g. "x[256_X, 512]" or with sizes. */
void rt_format_sharding(char *buf, size_t len, const rt_program *prog, const rt_tensor_desc *t);

/* Process-level facts from the launcher. */
typedef struct rt_launcher {
    const char *name;            /* "threads" or "mpi" */
    /* Starts the processes (MPI_Init); sets *rank, *nranks. */
    void (*init)(int *argc, char ***argv, int *rank, int *nranks);
    /* Runs rt_job_device on every device of this process. */
    void (*run)(rt_job *job);
    /* 1 if every process agrees that ok != 0 (MPI_Allreduce). */
    int (*all_ok)(int ok);
    /* Ends the processes with `status` (MPI_Finalize; never returns). */
    void (*finish)(int status) RT_NORETURN_PTR;
    /* Ends every process at once with status 1 (MPI_Abort). */
    void (*abort)(void) RT_NORETURN_PTR;
    /* 1 if each process is one device, so the process count must equal the mesh size. */
    int ranks_are_devices;
} rt_launcher;

/* What a job of a training program does besides running (train.c): which
 * inputs come from --data, where params and states start, the steps, the
 * per-step report and the checkpoints.  Shared by the devices of a process;
 * the root's arrays are written by device 0 only. */
typedef struct rt_train {
    const rt_dataset *data;      /* the --data files (owned by rt_main, shared with --check's reference) */
    int32_t *data_file;          /* per input: its index in data->files, or -1; malloc'd, owned */
    char **resume_paths;         /* per input: DIR/NAME.npy of --resume, or NULL; malloc'd, owned */
    int64_t done;                /* steps done before this run (--resume), else 0 */
    int64_t total;               /* steps done after it: --steps, else done + 1 */
    int reference;               /* 1 in --check's reference run: no step lines, metrics or saves */
    int64_t log_every;           /* a step line for every K-th step and the last */
    FILE *metrics;               /* root: the --metrics stream, or NULL; owned */
    const char *metrics_path;    /* its name (argv), for messages */
    const char *save_dir;        /* --save DIR (argv), or NULL */
    int64_t save_every;          /* --save-every K, or 0: save only after the last step */
    int keep_final;              /* 1: params and states are gathered to `final` after the last
                                    step (--output of one, --check); --save gathers them anyway */
    double *losses;              /* root: the loss of each step of this run (NaN without a loss
                                    output); malloc'd, owned */
    void **final;                /* root: per input, the global array of a param or state (the
                                    last one gathered), else NULL; malloc'd, owned */
    int32_t skip_output;         /* index of the output `opt.skipped` (1 when a step's
                                    gradients held NaN or Inf and it was not applied), or -1 */
    int64_t skipped;             /* root: steps of this run skipped so far */
    rt_dataset eval;             /* the --eval-data files (eval.c), owned; no files without */
    int32_t *eval_file;          /* per input: its index in eval.files, or -1; malloc'd, owned;
                                    NULL without --eval-data */
    int64_t eval_every;          /* --eval-every K: evaluate after every K-th step too; 0: after
                                    the last step only */
    int64_t *update_check;       /* root: per input, the step at which a param's update is
                                    checked (update_check.c), or 0; malloc'd, owned; NULL in
                                    --check's reference run */
    void **update_snap;          /* root: per input, its block before that step, or NULL;
                                    malloc'd, owned */
} rt_train;

/* The check of updates that round to nothing (update_check.c), all on
 * device 0 of the root.  _prepare allocates tr's two arrays from the
 * params' rt_tensor_desc.update_check (-1: out of memory); _before copies
 * the device's block of each param checked at step s, before its run;
 * _after compares them with the step's result and prints one warning per
 * param whose elements mostly stayed, or moves the check to step s + 1
 * when the step was skipped; _free releases the arrays.  Every function
 * does nothing when _prepare was not called. */
int rt_update_check_prepare(const rt_program *p, rt_train *tr);
void rt_update_check_before(const rt_program *p, rt_train *tr, int64_t s, void *const *in);
void rt_update_check_after(const rt_program *p, rt_train *tr, int64_t s, void *const *in,
                           int skipped);
void rt_update_check_free(const rt_program *p, rt_train *tr);

/* State of one job shared by the devices of a process. */
struct rt_job {
    const rt_program *prog;      /* program to run */
    const rt_options *opt;       /* command line */
    const rt_launcher *launcher; /* backend */
    int rank;                    /* this process (0 = root) */
    int nranks;                  /* processes */
    const char **in_paths;       /* per input: file or NULL (random), owned */
    char **param_paths;          /* --params: per input, the malloc'd path of a param's file in
                                    the checkpoint (also in in_paths), else NULL; owned */
    rt_npy_header *in_headers;   /* per input: checked header, owned */
    void **global_out;           /* per output: global array on the root, owned */
    void **state_out;            /* a program that does not train: per input, the root's global
                                    array of a state named by --output (its value after the
                                    last run), else NULL; owned */
    double *times;               /* root: seconds of each repeat, owned */
    int64_t *peak;               /* root: peak bytes per device, owned */
    int64_t repeat;              /* runs of the program */
    int64_t trace_cap;           /* --trace/--profile: spans kept per device (same on every device) */
    int64_t *trace;              /* root, --trace/--profile: [trace_cap][3][ndevices] op id, begin ns,
                                    end ns (-1 op id: no span), owned */
    int64_t *origins;            /* root, --trace/--profile: per device, the rt_now() (ns) its
                                    times count from (rt_trace_collect), owned; NULL: unknown */
    rt_train *train;             /* a training program's job: its steps (not owned); else NULL */
    struct rt_generate *gen;     /* --generate: the generation loop (rt_generate.h; not
                                    owned); else NULL */
    const rt_program *draft;     /* the companion draft program linked beside `prog`
                                    (`einc --draft`; --speculate runs it), or NULL */
    const rt_program *prefill;   /* the chunked-prefill program linked beside `prog`
                                    (`einc --prefill`; --serve runs it), or NULL */
};

/* The per-device flow: read the shards, run (repeat times, or the training
 * steps), gather the outputs and counters to the root.  Called by the
 * launcher on each device. */
void rt_job_device(rt_device *dev, rt_job *job);
/* Every device: allocates its block of each input of job->prog and
 * fills it as rt_job_device does (its file, --random-inputs, zero for a
 * state; a --data input is left for the step).  Returns the malloc'd
 * array of rt_alloc'd blocks; errors end the job (rt_fatal). */
void **rt_job_load_inputs(rt_device *dev, const rt_job *job);
/* Every device: one rt_alloc'd block per output of p, in a malloc'd array. */
void **rt_job_alloc_outputs(rt_device *dev, const rt_program *p);
/* Frees what the two above returned. */
void rt_job_free_buffers(rt_device *dev, const rt_program *p, void **in, void **out);
/* A companion job (the draft's, speculate.c) before the run: matches its
 * options' --input names and --params to its program, checks that every
 * input has a value (job->gen's tokens and position are fed by the loop)
 * and reads every file's header.  -1 and a message. */
int rt_job_resolve_inputs(rt_job *job, char *err, size_t errlen);
/* Every device: run r of the program between two barriers over the mesh;
 * device 0 records its seconds in job->times[r] (on the root). */
void rt_run_timed(rt_device *dev, rt_job *job, void *const *in, void *const *out, int64_t r);
/* Index of the tensor named `name` in ts[0..n), or -1. */
int32_t rt_find_tensor(const rt_tensor_desc *ts, int32_t n, const char *name);
/* Fills a job of `p` with its per-input arrays (in_paths, in_headers);
 * repeat = o->repeat.  Ends the process when out of memory. */
void rt_job_init(rt_job *job, const rt_program *p, const rt_options *o, const rt_launcher *l);
/* Once job->repeat is final: `traced` jobs size the --trace/--profile
 * spans; the root (`root`) also gets its output, time, memory, trace and
 * training arrays. */
void rt_job_alloc(rt_job *job, int root, int traced);
/* Frees what rt_job_init and rt_job_alloc allocated (not job->train). */
void rt_job_release(rt_job *job);
/* Reads and checks the header of every file in job->in_paths; -1 and a message. */
int rt_check_input_files(rt_job *job, char *err, size_t errlen);
/* Root, --check (check.c): runs prog->reference on one device on the same
 * inputs (for a training program the same steps and batches) and prints a
 * comparison line per output (and loss, param, state); 0 if all are finite
 * and within tolerance, else -1 with messages on stderr. */
int rt_run_check(const rt_job *job);
/* ---- training (train.c) ---- */

/* Before the run, on every process, for a program that trains: matches
 * --data names to role-INPUT tensors and opens their files into `ds`,
 * reads --resume's step count and points job->in_paths of every param and
 * state at its file, sets the steps (job->repeat = the steps of this run)
 * and, on the root, creates the --save directory and opens --metrics.
 * Sets job->train = tr.  -1 and a message on the first problem; `tr` and
 * `ds` are then still released with rt_train_release and rt_data_close. */
int rt_train_prepare(rt_job *job, rt_train *tr, rt_dataset *ds, char *err, size_t errlen);
/* Sets up `rtr` for --check's reference program `ref` from the sharded
 * job's `tr` (of `prog`): the same data, steps and start, no reports;
 * -1 and a message if a --data input differs between the programs. */
int rt_train_for_reference(rt_train *rtr, const rt_train *tr, const rt_program *ref,
                           const rt_program *prog, char *err, size_t errlen);
/* Root: allocates the losses of `runs` steps and the arrays of the final
 * params and states of `p` (when kept or saved). */
void rt_train_alloc(rt_train *tr, const rt_program *p, int64_t runs);
/* Frees what `tr` owns and closes --metrics; 0, or -1 with a message if
 * the metrics could not be written out. */
int rt_train_release(rt_train *tr, const rt_program *p, char *err, size_t errlen);
/* A device's training steps: per step, its block of each --data batch,
 * `run` between two barriers over the mesh, and on device 0 the step's
 * time and loss (and the step line and metrics); --save's checkpoints;
 * at the end the final params and states gathered to the root. */
void rt_train_device(rt_device *dev, rt_job *job, void *const *in, void *const *out);
/* Root: the line after the steps: count, mean time per step, samples/s. */
void rt_train_summary(FILE *f, const rt_job *job);

/* ---- held-out evaluation (eval.c) ---- */

/* From rt_train_prepare, after --data: --eval-every needs --eval-data; the
 * program needs a loss; each --eval-data pair names an input --data feeds,
 * once, and every such input gets one; opens and checks the files into
 * tr->eval (as --data's: dtype, rows shaped like the input's, at least one
 * batch, the same N in every file).  -1 and a message naming the flag. */
int rt_eval_prepare(rt_job *job, rt_train *tr, char *err, size_t errlen);
/* 1 if an evaluation follows step `s` (1-based): --eval-data given, not in
 * --check's reference, and `s` is the last step or a multiple of
 * --eval-every. */
int rt_eval_due(const rt_train *tr, int64_t s);
/* Every device, between steps: runs the step on copies of its params and
 * states over every whole batch of the held-out set, in order, and drops
 * the copies, so `in` (the training buffers) is left as it was.  Returns
 * on device 0 the mean of the batches' losses (NaN on other devices). */
double rt_eval_device(rt_device *dev, rt_job *job, void *const *in);

/* Entry point used by main(): everything the executable does.  `draft`
 * and `prefill`: the companion programs linked beside `prog` (einc
 * --draft, einc --prefill), or NULL. */
int rt_main(int argc, char **argv, const rt_program *prog, const rt_program *draft,
            const rt_program *prefill, const rt_launcher *launcher);

extern const rt_launcher rt_threads_launcher;
extern const rt_launcher rt_mpi_launcher;

/* Root, after every device's rt_trace_collect: moves each device's
 * job->trace times onto the earliest device's origin, so that times of
 * different devices compare (trace.c says why); the origins are on device
 * 0's clock (rt_device_ops.clock_offset).  Nothing without job->origins. */
void rt_trace_align(rt_job *job);

#endif
