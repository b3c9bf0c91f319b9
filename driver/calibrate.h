/*
 * calibrate.h - `einc calibrate`: measures this machine through the real
 * runtime and writes a calibrated hardware profile (docs/cost-model.md,
 * "Calibration").
 */
#ifndef EINC_CALIBRATE_H
#define EINC_CALIBRATE_H

/* Entry point of `einc calibrate ARGS`; argv[0] is "calibrate".  Returns the
 * exit status: 0 on success, 1 when a benchmark or the output fails, 2 on a
 * bad command line. */
int calibrate_main(int argc, char **argv);

#endif
