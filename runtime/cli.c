/*
 * cli.c - the command line of an einc executable.
 *
 *   prog --input NAME=file.npy ... --output NAME=file.npy ...
 *        [--random-inputs SEED] [--check] [--repeat N] [--info] [--stats]
 *        [--profile] [--trace FILE.json] [--bind-to core|none] [--help]
 *
 * Flags may also be written --flag=value.  Names are checked against the
 * program later (job.c), here only the syntax.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

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

/* Parses a non-negative integer into *v; -1 unless the whole string is one. */
static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-')
        return -1;
    unsigned long long x = strtoull(s, &end, 0);
    if (*end || errno)
        return -1;
    *v = x;
    return 0;
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
        int takes = !strcmp(flag, "--input") || !strcmp(flag, "--output") ||
                    !strcmp(flag, "--random-inputs") || !strcmp(flag, "--repeat") ||
                    !strcmp(flag, "--trace") || !strcmp(flag, "--bind-to");
        if (takes && !val) {
            if (i + 1 >= argc)
                return rt_errf(err, errlen, "%s needs a value (see --help)", flag);
            val = argv[++i];
        } else if (!takes && val) {
            return rt_errf(err, errlen, "%s takes no value", flag);
        }
        if (!strcmp(flag, "--input")) {
            if (add_pair(&o->inputs, &o->ninputs, val, flag, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--output")) {
            if (add_pair(&o->outputs, &o->noutputs, val, flag, err, errlen))
                return -1;
        } else if (!strcmp(flag, "--random-inputs")) {
            if (parse_u64(val, &o->seed))
                return rt_errf(err, errlen, "--random-inputs expects a non-negative integer seed, "
                            "got '%s'", val);
            o->random_inputs = 1;
        } else if (!strcmp(flag, "--repeat")) {
            uint64_t n;
            if (parse_u64(val, &n) || n < 1 || n > 1000000)
                return rt_errf(err, errlen, "--repeat expects a count from 1 to 1000000, got '%s'",
                            val);
            o->repeat = (int64_t)n;
            o->repeat_given = 1;
        } else if (!strcmp(flag, "--check")) {
            o->check = 1;
        } else if (!strcmp(flag, "--info")) {
            o->info = 1;
        } else if (!strcmp(flag, "--stats")) {
            o->stats = 1;
        } else if (!strcmp(flag, "--trace")) {
            if (!*val)
                return rt_errf(err, errlen, "--trace needs a file name");
            o->trace = val;
        } else if (!strcmp(flag, "--profile")) {
            o->profile = 1;
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
            "  --random-inputs SEED    inputs not given by --input are uniform in [-1, 1),\n"
            "                          reproducible from SEED, the name and the element index\n"
            "  --check                 also run the unsharded reference program and compare\n"
            "                          every output (max relative error; tolerance 1e-4 f32,\n"
            "                          1e-10 f64, 1e-2 bf16; exit 1 beyond it, or if any\n"
            "                          element of either run is NaN or Inf)\n"
            "  --repeat N              run N times, print the median time per run\n"
            "  --info                  print the program (mesh, tensors, shardings, IR)\n"
            "  --stats                 print peak memory (rt_alloc) per device\n"
            "  --profile               run the ops in step (a barrier before each) and print\n"
            "                          per op the median measured time, the cost model's\n"
            "                          prediction and the relative error\n"
            "  --trace FILE.json       write every op call on every device as a Chrome\n"
            "                          trace-event file (chrome://tracing, Perfetto)\n"
            "  --bind-to core|none     threads backend: pin device d to the (d mod n)-th of\n"
            "                          the process's n CPUs (core, the default) or not; under\n"
            "                          MPI, mpirun's own --bind-to places the ranks\n"
            "  --help                  this text\n"
            "\n"
            "Without --output, a one-line summary of each output is printed.\n"
            "Exit status: 0 on success, 1 on any error or a failed --check.\n",
            argv0);
}
