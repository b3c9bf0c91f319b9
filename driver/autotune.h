/*
 * autotune.h - the `einc autotune` subcommand: MeshSlice's LLM autotuner
 * (seed 004, 3.2) over the 2D GEMMs of a .ein model.
 *
 *   einc autotune --chips N [--hw NAME] [-D NAME=VALUE]... model.ein
 *
 * prints, for the best 2D mesh shape of N chips, each GEMM layer's dataflow,
 * slice count K, estimated time and FLOP utilization, and the einc options
 * that select that configuration (`-D X=.. -D Y=.. --meshslice=K`).  See
 * `einc autotune --help` and docs/meshslice.md.
 */
#ifndef EINC_AUTOTUNE_H
#define EINC_AUTOTUNE_H

/*
 * Runs the subcommand.  argv[0] is the subcommand's name (e.g. "autotune"),
 * the options and the .ein path follow; the driver calls it with
 * autotune_main(argc - 1, argv + 1) when argv[1] is "autotune".  Writes the
 * report to stdout and errors to stderr.  Returns 0 on success, 1 on an
 * error in the input (unreadable file, .ein errors, no 2D GEMM, no mesh
 * shape fits), 2 on a bad command line.  Keeps no state between calls.
 */
int autotune_main(int argc, char **argv);

#endif
