/*
 * calibrate.h - `einc calibrate`: measures this machine through the real
 * runtime and writes a calibrated hardware profile (docs/cost-model.md,
 * "Calibration").  The driver parses the command line into cal_options and
 * calls calibrate_measure; the compile path asks calibrate_load_host which
 * profile `--hw host` means.
 */
#ifndef EINC_CALIBRATE_H
#define EINC_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "costmodel.h"

/* Most devices one calibration runs its programs on (--ranks). */
#define CALIBRATE_MAX_RANKS 16
/* Most processes per benchmark program (--rounds). */
#define CALIBRATE_MAX_ROUNDS 15

/* The command line of `einc calibrate`. */
typedef struct cal_options {
    const char *output;     /* -o: profile to write; NULL: this machine's cache file */
    const char *name;       /* --name: the profile's "name" */
    bool mpi;               /* --runtime=mpi */
    int ranks;              /* --ranks N: largest group, devices per program */
    bool quick;             /* --quick: few sizes, few runs (tests) */
    int64_t max_bytes;      /* --max-bytes: largest collective buffer */
    int repeat;             /* --repeat: runs per process */
    int rounds;             /* --rounds: processes per program (median over them) */
    bool keep;              /* --keep: leave the work directory */
    bool machine;           /* --machine: print the identity, measure nothing */
    const char *mpirun;     /* --mpirun: the launcher command */
} cal_options;

/* Measures this machine `here` (calibrate_machine_detect) as `o` says:
 * writes the benchmark programs into a work directory, compiles them with
 * this einc (/proc/self/exe), runs them, fits the collectives and writes
 * the profile to o->output (set; its directory checked writable), then a
 * summary on stderr.  Returns the exit status: 0 on success, 1 when a
 * benchmark, the fit or the output fails (calibrate.c). */
int calibrate_measure(const cal_options *o, const cost_machine *here);

/* `einc calibrate --machine`: prints this machine's identity, its key and
 * cache file as one JSON object on stdout (for scripts and tests).
 * Returns the exit status: 0, or 1 when out of memory (machine.c). */
int calibrate_print_machine(void);

/* Which machine this is (machine.c): CPU model name with family
 * and model numbers, online logical CPUs, widest vector ISA, and the
 * OpenBLAS kernel set and build (openblas_get_corename / _config) that the
 * executables einc links will run.  Unknown fields stay empty / 0. */
void calibrate_machine_detect(cost_machine *m);

/* The directory of einc's cached profiles: $XDG_CACHE_HOME/einc when that
 * is an absolute path, else $HOME/.cache/einc.  Writes it into buf (size
 * n); returns 0, or -1 when neither variable gives one or it does not fit.
 * Does not create the directory. */
int calibrate_cache_dir(char *buf, size_t n);

/* The cached profile of machine `m`: DIR/host-KEY.json with DIR from
 * calibrate_cache_dir and KEY = cost_machine_key(m).  Returns 0, or -1 as
 * calibrate_cache_dir.  The file need not exist. */
int calibrate_cache_path(const cost_machine *m, char *buf, size_t n);

/* Loads the profile `--hw host` means on this machine: its cached profile
 * when that file exists and loads (a broken one is skipped with a warning),
 * else the profile named "host" (cost_hw_load), with one warning on `warn`
 * (NULL: none) when that profile records no machine or another one; the
 * warning names both machines and the fix.  Returns 0, or -1 with a message
 * in err (size errsize) when no profile loads. */
int calibrate_load_host(cost_hw *hw, FILE *warn, char *err, size_t errsize);

#endif
