/*
 * calibrate.h - `einc calibrate`: measures this machine through the real
 * runtime and writes a calibrated hardware profile (docs/cost-model.md,
 * "Calibration").
 */
#ifndef EINC_CALIBRATE_H
#define EINC_CALIBRATE_H

#include <stddef.h>
#include <stdio.h>

#include "costmodel.h"

/* Entry point of `einc calibrate ARGS`; argv[0] is "calibrate".  Returns the
 * exit status: 0 on success, 1 when a benchmark or the output fails, 2 on a
 * bad command line. */
int calibrate_main(int argc, char **argv);

/* Which machine this is (calibrate_machine.c): CPU model name with family
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
