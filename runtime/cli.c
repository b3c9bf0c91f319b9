/*
 * cli.c - the command line of an einc executable.
 *
 *   prog --input NAME=file.npy ... --output NAME=file.npy ... [--params DIR]
 *        [--random-inputs SEED] [--check] [--repeat N] [--info] [--stats]
 *        [--profile] [--trace FILE.json] [--bind-to core|none] [--help]
 *   and for a program that trains (train.c):
 *        [--steps N] [--data NAME=file.npy ...] [--seed S] [--log-every K]
 *        [--metrics FILE.jsonl] [--save DIR [--save-every K]]
 *        [--resume DIR [--resume-mismatch=ok]] [--eval-data NAME=F.npy,... [--eval-every K]]
 *   and for a decode program (generate.c):
 *        [--generate N --prompt-ids FILE.npy] [--temperature T] [--top-k K]
 *        [--top-p P] [--seed S] [--stop-token ID[,ID...]] [--generated FILE.npy]
 *        [--speculate K [--draft-input NAME=file.npy ...] [--draft-params DIR]]
 *   or, serving it over HTTP (rt_serve.h):
 *        --serve [--port P] [--host ADDR] [--max-queue N] [--prefill-budget N]
 *        [--static-batching] and the sampling flags
 *
 * Flags may also be written --flag=value.  Names are checked against the
 * program later (job.c), here only the syntax.  Every number is read by
 * rt_parse_count, decimal only: strtoull's base 0 read "--steps 010" as
 * eight steps and refused "08".
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_serve.h"

/* Appends NAME=path from `arg` to list; -1 on bad syntax. */
static int add_pair(rt_named_path **list, int *n, char *arg, const char *flag, char *err,
                    size_t errlen)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return rt_errf(err, errlen, "%s expects NAME=file.npy, got '%s'", flag, arg);
    rt_named_path *l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
    if (!l)
        return rt_errf(err, errlen, "out of memory");
    *eq = 0; /* argv strings are writable: split NAME and path in place */
    l[*n].name = arg;
    l[*n].path = eq + 1;
    *list = l;
    (*n)++;
    return 0;
}

/* add_pair for each of the comma-separated NAME=path pairs of `arg`. */
static int add_pairs(rt_named_path **list, int *n, char *arg, const char *flag, char *err,
                     size_t errlen)
{
    for (char *next; (next = strchr(arg, ',')); arg = next + 1) {
        *next = 0;
        if (add_pair(list, n, arg, flag, err, errlen))
            return -1;
    }
    return add_pair(list, n, arg, flag, err, errlen);
}

int rt_parse_count(const char *flag, const char *val, uint64_t lo, uint64_t hi, uint64_t *v,
                   char *err, size_t errlen)
{
    bool ok = *val != 0;
    uint64_t n = 0;
    for (const char *p = val; ok && *p; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        ok = *p >= '0' && *p <= '9' && d <= hi && n <= (hi - d) / 10;
        n = n * 10 + d;
    }
    if (!ok || n < lo)
        return rt_errf(err, errlen, "%s expects a count from %llu to %llu (decimal), got '%.80s'",
                       flag, (unsigned long long)lo, (unsigned long long)hi, val);
    *v = n;
    return 0;
}

/* rt_parse_count from 1 to `max` into an int64_t field. */
static int parse_count(const char *flag, const char *val, int64_t max, int64_t *v, char *err,
                       size_t errlen)
{
    uint64_t n;
    if (rt_parse_count(flag, val, 1, (uint64_t)max, &n, err, errlen))
        return -1;
    *v = (int64_t)n;
    return 0;
}

/* Largest --steps, --log-every and --save-every: far beyond any run, and
 * small enough that step numbers never overflow. */
#define MAX_STEPS 1000000000000ll

/* Flags that take a value. */
static const char *const valued[] = {
    "--input", "--output", "--random-inputs", "--repeat", "--trace", "--bind-to", "--data",
    "--steps", "--seed", "--log-every", "--metrics", "--save", "--save-every", "--resume",
    "--resume-mismatch", "--eval-data", "--eval-every",
    "--check-tol", "--generate", "--prompt-ids", "--temperature", "--generated",
    "--prompt-cached", "--top-k", "--top-p", "--stop-token", "--params",
    "--port", "--host", "--max-queue", "--prefill-budget", "--speculate", "--draft-input",
    "--draft-params",
};

int rt_flag_takes_value(const char *flag)
{
    for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++)
        if (!strcmp(flag, valued[i]))
            return 1;
    return 0;
}

/* Parses one of the training flags `flag` with value `val`; 1 if `flag` is
 * none of them, -1 and a message on a bad value. */
static int parse_training_flag(const char *flag, char *val, rt_options *o, char *err,
                               size_t errlen)
{
    if (!strcmp(flag, "--data"))
        return add_pair(&o->data, &o->ndata, val, flag, err, errlen);
    if (!strcmp(flag, "--steps"))
        return parse_count(flag, val, MAX_STEPS, &o->steps, err, errlen);
    if (!strcmp(flag, "--log-every"))
        return parse_count(flag, val, MAX_STEPS, &o->log_every, err, errlen);
    if (!strcmp(flag, "--save-every"))
        return parse_count(flag, val, MAX_STEPS, &o->save_every, err, errlen);
    if (!strcmp(flag, "--eval-every"))
        return parse_count(flag, val, MAX_STEPS, &o->eval_every, err, errlen);
    if (!strcmp(flag, "--eval-data"))
        return add_pairs(&o->eval_data, &o->neval_data, val, flag, err, errlen);
    if (!strcmp(flag, "--resume-mismatch")) {
        if (strcmp(val, "ok") && strcmp(val, "refuse"))
            return rt_errf(err, errlen, "--resume-mismatch takes ok (resume from a checkpoint "
                           "saved with other hyperparameters, with a warning) or refuse (the "
                           "default), not '%s'", val);
        o->resume_mismatch_ok = !strcmp(val, "ok");
        return 0;
    }
    if (!strcmp(flag, "--seed")) {
        if (rt_parse_count(flag, val, 0, UINT64_MAX, &o->shuffle_seed, err, errlen))
            return -1;
        o->shuffle = 1;
        return 0;
    }
    const char **dst = !strcmp(flag, "--metrics") ? &o->metrics
                       : !strcmp(flag, "--save") ? &o->save
                       : !strcmp(flag, "--resume") ? &o->resume
                                                   : NULL;
    if (!dst)
        return 1;
    if (!*val)
        return rt_errf(err, errlen, "%s needs a %s name", flag,
                       dst == &o->metrics ? "file" : "directory");
    *dst = val;
    return 0;
}

const char *rt_training_flag(const rt_options *o)
{
    /* --seed also seeds --generate's sampling. */
    return o->ndata ? "--data" : o->steps ? "--steps" : o->shuffle && !o->generate && !o->serve ? "--seed"
           : o->log_every ? "--log-every" : o->metrics ? "--metrics" : o->save ? "--save"
           : o->save_every ? "--save-every" : o->resume ? "--resume"
           : o->resume_mismatch_ok ? "--resume-mismatch" : o->neval_data ? "--eval-data"
           : o->eval_every ? "--eval-every" : NULL;
}

int rt_parse_options(int argc, char **argv, rt_options *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->repeat = 1;
    o->bind = RT_BIND_CORE;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        char *val = NULL;
        char flag[32];
        /* Split --flag=value. */
        char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t flen = eq ? (size_t)(eq - a) : strlen(a);
        if (flen >= sizeof flag)
            return rt_errf(err, errlen, "unknown option '%s' (see --help)", a);
        memcpy(flag, a, flen);
        flag[flen] = 0;
        if (eq)
            val = eq + 1;
        int takes = rt_flag_takes_value(flag);
        if (takes && !val) {
            if (i + 1 >= argc)
                return rt_errf(err, errlen, "%s needs a value (see --help)", flag);
            val = argv[++i];
        } else if (!takes && val) {
            return rt_errf(err, errlen, "%s takes no value", flag);
        }
        int rc = parse_training_flag(flag, val, o, err, errlen);
        if (rc == 1)
            rc = rt_parse_generate_flag(flag, val, o, err, errlen);
        if (rc == 1)
            rc = rt_parse_serve_flag(flag, val, o, err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        if (!strcmp(flag, "--input")) {
            if (add_pair(&o->inputs, &o->ninputs, val, flag, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--output")) {
            if (add_pair(&o->outputs, &o->noutputs, val, flag, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--random-inputs")) {
            if (rt_parse_count(flag, val, 0, UINT64_MAX, &o->seed, err, errlen))
                return -1;
            o->random_inputs = 1;
        } else if (!strcmp(flag, "--repeat")) {
            if (parse_count(flag, val, 1000000, &o->repeat, err, errlen))
                return -1;
            o->repeat_given = 1;
        } else if (!strcmp(flag, "--check")) {
            o->check = 1;
        } else if (!strcmp(flag, "--check-tol")) {
            char *end;
            errno = 0;
            double t = strtod(val, &end);
            if (*end || errno || !(t > 0) || !isfinite(t))
                return rt_errf(err, errlen, "--check-tol expects a positive number, got '%s'", val);
            o->check_tol = t;
        } else if (!strcmp(flag, "--info")) {
            o->info = 1;
        } else if (!strcmp(flag, "--stats")) {
            o->stats = 1;
        } else if (!strcmp(flag, "--trace")) {
            if (!*val)
                return rt_errf(err, errlen, "--trace needs a file name");
            o->trace = val;
        } else if (!strcmp(flag, "--speculate")) {
            if (parse_count(flag, val, 64, &o->speculate, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--draft-input")) {
            if (add_pair(&o->draft_inputs, &o->ndraft_inputs, val, flag, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--draft-params")) {
            if (!*val)
                return rt_errf(err, errlen, "--draft-params needs a directory name");
            o->draft_params = val;
        } else if (!strcmp(flag, "--params")) {
            if (!*val)
                return rt_errf(err, errlen, "--params needs a directory name");
            o->params = val;
        } else if (!strcmp(flag, "--profile")) {
            o->profile = 1;
        } else if (!strcmp(flag, "--discard-outputs")) {
            o->discard_outputs = 1;
        } else if (!strcmp(flag, "--bind-to")) {
            if (!strcmp(val, "core"))
                o->bind = RT_BIND_CORE;
            else if (!strcmp(val, "none"))
                o->bind = RT_BIND_NONE;
            else
                return rt_errf(err, errlen, "--bind-to expects 'core' or 'none', got '%s'", val);
        } else if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            o->help = 1;
        } else {
            return rt_errf(err, errlen, "unknown option '%s' (see --help)", a);
        }
    }
    return 0;
}

void rt_free_options(rt_options *o)
{
    free(o->inputs);
    free(o->outputs);
    free(o->data);
    free(o->eval_data);
    free(o->stop);
    free(o->draft_inputs);
    memset(o, 0, sizeof *o);
}

void rt_print_help(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]\n"
            "Runs an einc-compiled SPMD program on one device per mesh position.\n"
            "\n"
            "  --input NAME=file.npy   value of input or param NAME (global shape, C order;\n"
            "                          '<f4' for f32 and bf16, '<f8' for f64)\n"
            "  --output NAME=file.npy  write output NAME (written atomically)\n"
            "  --params DIR            every param from DIR/NAME.npy, a checkpoint that --save\n"
            "                          wrote (names, dtypes and shapes are checked)\n"
            "  --random-inputs SEED    inputs and params without a file are uniform in [-1, 1),\n"
            "                          reproducible from SEED, the name and the element index\n"
            "  --check                 also run the unsharded reference program and compare\n"
            "                          every output (max relative error; tolerance 1e-4 f32,\n"
            "                          1e-10 f64, 1e-2 bf16; exit 1 beyond it, or if any\n"
            "                          element of either run is NaN or Inf)\n"
            "  --check-tol T           --check's relative tolerance for every dtype instead\n"
            "  --repeat N              run N times, print the median time per run\n"
            "  --info                  print the program (mesh, tensors, shardings, IR)\n"
            "  --stats                 print peak memory (rt_alloc) per device\n"
            "  --discard-outputs       neither gather the outputs to the first device nor\n"
            "                          print them: runs only timed (--profile, --trace)\n"
            "  --profile               run the ops in step (a barrier before each) and print\n"
            "                          per op the median measured time, the cost model's\n"
            "                          prediction and the relative error, and the largest\n"
            "                          peak memory of a device (as --stats)\n"
            "  --trace FILE.json       write every op call on every device as a Chrome\n"
            "                          trace-event file (chrome://tracing, Perfetto)\n"
            "  --bind-to core|none     threads backend: pin device d to the (d mod n)-th of\n"
            "                          the process's n CPUs (core, the default) or not; under\n"
            "                          MPI, mpirun's own --bind-to places the ranks.  With\n"
            "                          more devices than CPUs, EINC_CORE_SHARING=items (the\n"
            "                          default) makes the devices of a CPU take turns at\n"
            "                          pipeline items; =kernel leaves it to the scheduler\n"
            "  --help                  this text\n"
            "\n"
            "Training (a program with an `optimize` statement: each run is one step that\n"
            "updates its params and optimizer state in place):\n"
            "  --steps N               train until step N (the total, counted from the start\n"
            "                          of training, also after --resume); default: one step\n"
            "  --data NAME=file.npy    rows [N, ...] feeding input NAME of shape [B, ...]:\n"
            "                          step s takes batch (s-1) mod (N div B) of its epoch;\n"
            "                          the N mod B rows left over are unused in that epoch\n"
            "  --seed S                visit the --data rows in a permutation per epoch drawn\n"
            "                          from S and the epoch (the same for every file)\n"
            "  --log-every K           print every K-th step's line (and the last)\n"
            "  --metrics FILE.jsonl    one JSON object per step: step, loss, seconds,\n"
            "                          samples_per_s, and eval_loss after an evaluation\n"
            "                          (with --resume: keeps the lines up to the\n"
            "                          checkpoint's step, drops the rest, appends)\n"
            "  --save DIR              after the last step, write DIR/data.txt (the data\n"
            "                          order), DIR/NAME.npy for every param and state, then\n"
            "                          DIR/steps.txt (the step count)\n"
            "  --save-every K          also save after every step that is a multiple of K\n"
            "  --resume DIR            start from the params, states and step count in DIR;\n"
            "                          needs the --seed and --data set DIR was trained with,\n"
            "                          and the same optimizers and hyperparameters\n"
            "  --resume-mismatch=ok    resume also when DIR's hyperparameters differ from the\n"
            "                          program's (a warning names the first); default: refuse\n"
            "  --eval-data NAME=file.npy[,NAME=file.npy...]  held-out rows for every input\n"
            "                          --data feeds: after the last step (and every\n"
            "                          --eval-every K steps) the mean loss over its whole\n"
            "                          batches, params and optimizer state left unchanged\n"
            "  --eval-every K          also evaluate after every K-th step\n"
            "  --output NAME=file.npy  may also name a param or state: its final value\n"
            "  --check                 also compares every step's loss and the final params\n"
            "                          and states with the reference's, in a tolerance that\n"
            "                          grows with the steps (x steps; docs/runtime.md)\n"
            "States not given by --input or --resume start at zero.\n"
            "\n"
            "Generation (a decode program: one i32 input [B] of tokens, one i32 scalar input\n"
            "of the position, a replicated output Logits[B, V] or [B, 1, V], or i32 Next[B];\n"
            "docs/generation.md):\n"
            "  --generate N            feed the prompt, then generate N tokens per sequence,\n"
            "                          one run per position; print them, the time to first\n"
            "                          token, the time per output token and tokens/s\n"
            "  --prompt-ids FILE.npy   the prompt, i32 [B, T]\n"
            "  --temperature T         sample from softmax(logits / T) (default 0: greedy)\n"
            "  --top-k K               sample among the K most likely tokens (1 <= K <= V)\n"
            "  --top-p P               sample among the fewest most likely tokens whose\n"
            "                          probability is at least P (0 < P <= 1)\n"
            "  --seed S                the sampling's seed (default 0): same seed, same tokens\n"
            "  --stop-token ID[,ID]    a sequence ends at any of these ids (repeatable); later\n"
            "                          places are -1, and the loop ends when all have ended\n"
            "  --generated FILE.npy    write the prompt and the tokens, i32 [B, T + N]\n"
            "  --prompt-cached P       the caches given with --input already hold the first P\n"
            "                          prompt tokens (a prefill run's --output): start at P\n"
            "  --check                 also compares the tokens and the last outputs with\n"
            "                          the unsharded reference's\n"
            "\n"
            "Speculative decoding (an executable built with einc --draft; docs/generation.md):\n"
            "  --speculate K           with --generate: the draft proposes K tokens (one run\n"
            "                          each), the target (a window of K + 1 tokens) verifies\n"
            "                          them in one run; the tokens keep the target's\n"
            "                          distribution (greedy: exactly its greedy tokens)\n"
            "  --draft-input NAME=file.npy  an input or param of the draft\n"
            "  --draft-params DIR      every param of the draft from a checkpoint\n"
            "                          (--random-inputs SEED fills both programs' others)\n"
            "\n"
            "Serving (a decode program with a Logits output; docs/generation.md, Serving):\n"
            "  --serve                 answer POST /v1/completions, GET /health and\n"
            "                          GET /metrics over HTTP, in static batches of B\n"
            "  --port P                the TCP port (default 8080; 0: a free one, printed)\n"
            "  --host ADDR             the IPv4 address to listen on (default 127.0.0.1)\n"
            "  --max-queue N           requests that may wait for a batch (default 64); more\n"
            "                          get HTTP 503\n"
            "  --prefill-budget N      with a prefill program (einc --prefill): a step reads\n"
            "                          at most N prompt tokens beyond one per row (default:\n"
            "                          no bound, a window per row)\n"
            "  --static-batching       with one position per row: free slots take requests\n"
            "                          only when no row runs (static batches of B)\n"
            "  --temperature, --top-k, --top-p, --seed, --stop-token: the requests' defaults\n"
            "\n"
            "Without --output, a one-line summary of each output is printed.\n"
            "Exit status: 0 on success, 1 on any error or a failed --check.\n",
            argv0);
}
