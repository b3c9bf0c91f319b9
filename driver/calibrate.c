/*
 * calibrate.c - the command line of `einc calibrate`: its flags, and where
 * the profile goes (-o, else this machine's cache file, whose directory is
 * made here).  The measuring itself is the calibrate/ library's
 * (calibrate/calibrate.c), so the driver holds no benchmark code.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate.h"
#include "costmodel.h"
#include "driver.h"

/* --quick's largest collective buffer per device, bytes: the full
 * calibration's largest (64 MiB cap, sizes 8 KiB up by 4x), beyond the
 * last-level cache as a model's activations are. */
#define QUICK_MAX_BYTES (INT64_C(32) << 20)

static void usage(FILE *f)
{
    fputs("usage: einc calibrate [-o PROFILE.json] [options]\n"
          "       einc calibrate --machine\n"
          "\n"
          "Measures this machine through the einc runtime (collectives over groups of\n"
          "2..N devices, GEMM through rt_einsum, elementwise bandwidth), fits\n"
          "T_launch + (P-1)*(L_sync + shard_bytes/BW) per collective (MeshSlice, seed 004)\n"
          "and writes a hardware profile for `einc --hw PROFILE.json`.\n"
          "\n"
          "  -o PATH                 profile to write (atomically), e.g. hw/host.json;\n"
          "                          without -o, this machine's cached profile, which\n"
          "                          `--hw host` uses from then on (docs/cost-model.md)\n"
          "  --machine               print this machine's identity and cache path (JSON)\n"
          "  --runtime=threads|mpi   runtime to measure (default threads)\n"
          "  --ranks N               devices (threads or MPI ranks), 2..16 (default 4)\n"
          "  --name NAME             the profile's name (default host)\n"
          "  --max-bytes N           largest collective buffer per device (default 64 MiB,\n"
          "                          at most 512 MiB; also capped by free memory)\n"
          "  --repeat R              runs per benchmark process (default 7)\n"
          "  --rounds N              rounds over all benchmark programs, the fastest taken\n"
          "                          (default 3, the rounds apart: a spell of load from\n"
          "                          outside slows some, not the result)\n"
          "  --quick                 few sizes and runs, buffers up to 8 MiB (the\n"
          "                          AllReduce's 32 MiB) unless --max-bytes says\n"
          "                          otherwise (well under a minute)\n"
          "  --mpirun CMD            MPI launcher (default: mpirun --allow-run-as-root\n"
          "                          --oversubscribe --bind-to core:overload-allowed\n"
          "                          --map-by core, which places ranks as the threads\n"
          "                          backend's --bind-to core places devices)\n"
          "  --keep                  keep the generated programs and their output\n",
          f);
}

static int parse_args(int argc, char **argv, cal_options *o)
{
    memset(o, 0, sizeof *o);
    o->name = "host";
    o->ranks = 4;
    o->max_bytes = 64 << 20;
    o->repeat = 7;
    o->rounds = 3;
    o->mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed "
                "--map-by core";
    bool repeat_given = false, max_given = false, rounds_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t v;
        const char *val = NULL;
#define VALUE(flag)                                                                   \
    (strcmp(a, flag) == 0 ? (i + 1 < argc ? (val = argv[++i]) != NULL : false)      \
                          : strncmp(a, flag "=", sizeof flag) == 0 ? (val = a + sizeof flag) != NULL \
                                                                  : false)
        static const char *const valued[] = {"--ranks", "--name", "--max-bytes", "--repeat",
                                             "--rounds", "--mpirun"};
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            if (!strcmp(a, valued[k]) && i + 1 >= argc)
                return drv_bad_usage("einc calibrate", "%s needs a value", a);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-o")) {
            if (++i >= argc)
                return drv_bad_usage("einc calibrate", "%s needs a path", a);
            o->output = argv[i];
        } else if (!strcmp(a, "--runtime=threads")) {
            o->mpi = false;
        } else if (!strcmp(a, "--runtime=mpi")) {
            o->mpi = true;
        } else if (!strncmp(a, "--runtime=", 10)) {
            return drv_bad_usage("einc calibrate", "unknown runtime '%s' (threads or mpi)", a + 10);
        } else if (VALUE("--ranks")) {
            if (drv_count("einc calibrate", "--ranks", val, 2, CALIBRATE_MAX_RANKS, &v))
                return 2;
            o->ranks = (int)v;
        } else if (VALUE("--name")) {
            if (!*val || strlen(val) >= COST_HW_NAME_MAX)
                return drv_bad_usage("einc calibrate", "--name wants a non-empty name of at most 63 bytes, not '%s'", val);
            o->name = val;
        } else if (VALUE("--max-bytes")) {
            if (drv_count("einc calibrate", "--max-bytes", val, 64 << 10, INT64_C(512) << 20, &v))
                return 2;
            o->max_bytes = v;
            max_given = true;
        } else if (VALUE("--repeat")) {
            if (drv_count("einc calibrate", "--repeat", val, 3, 1000, &v))
                return 2;
            o->repeat = (int)v;
            repeat_given = true;
        } else if (VALUE("--rounds")) {
            if (drv_count("einc calibrate", "--rounds", val, 1, CALIBRATE_MAX_ROUNDS, &v))
                return 2;
            o->rounds = (int)v;
            rounds_given = true;
        } else if (VALUE("--mpirun")) {
            o->mpirun = val;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--keep")) {
            o->keep = true;
        } else if (!strcmp(a, "--machine")) {
            o->machine = true;
        } else if (a[0] == '-') {
            return drv_bad_usage("einc calibrate", "unknown option '%s'", a);
        } else {
            return drv_bad_usage("einc calibrate", "unexpected argument '%s'", a);
        }
#undef VALUE
    }
    if (o->quick) {
        /* 30-41 s on threads, 48-67 s on MPI, 2 idle cores (docs/cost-model.md,
         * "Calibration"): buffers up to 8 MiB, and the AllReduce's up to
         * 32 MiB, past the last-level cache (calibrate/programs.c: a
         * model's activations of 40 MiB a device ran at half the rate of an
         * 8 MiB buffer on MPI, which a fit that stopped at 8 MiB could not
         * know; the main fit starts at 1 MiB), and two rounds keep
         * the faster of two runs of each program, which halves the damage
         * a spell of load from outside does to a single round. */
        if (!max_given)
            o->max_bytes = QUICK_MAX_BYTES;
        if (!repeat_given)
            o->repeat = 5;
        if (!rounds_given)
            o->rounds = 2;
    }
    return 0;
}

/* Creates `path` and its missing parents (mode 0755), as mkdir -p. */
static int make_dirs(const char *path)
{
    char buf[COST_HW_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char saved = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = saved;
        if (!saved)
            return 0;
    }
}

int calibrate_main(int argc, char **argv)
{
    cal_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.machine)
        return calibrate_print_machine();
    /* Without -o the profile goes to this machine's cache, where `--hw host`
     * finds it. */
    char cached[COST_HW_PATH_MAX];
    cost_machine here;
    calibrate_machine_detect(&here);
    if (!o.output) {
        char dir[COST_HW_PATH_MAX];
        if (calibrate_cache_dir(dir, sizeof dir) != 0 ||
            calibrate_cache_path(&here, cached, sizeof cached) != 0)
            return drv_bad_usage("einc calibrate", "%s",
                                 "no cache directory ($XDG_CACHE_HOME and $HOME unset): give -o PROFILE.json");
        if (make_dirs(dir) != 0) {
            fprintf(stderr, "einc calibrate: error: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
        o.output = cached;
    }
    /* Minutes of measuring must not end in an unwritable file: check the
     * output's directory first (the profile is written to a file beside
     * it, then renamed), and that the rename would replace at most a
     * regular file. */
    if (drv_check_output("einc calibrate", o.output, NULL, 0))
        return 1;
    char outdir[COST_HW_PATH_MAX];
    snprintf(outdir, sizeof outdir, "%s", o.output);
    char *slash = strrchr(outdir, '/');
    if (slash)
        *(slash == outdir ? slash + 1 : slash) = 0;
    else
        snprintf(outdir, sizeof outdir, ".");
    if (access(outdir, W_OK) != 0) {
        fprintf(stderr, "einc calibrate: error: cannot write %s: %s: %s\n", o.output, outdir,
                strerror(errno));
        return 1;
    }
    return calibrate_measure(&o, &here);
}
