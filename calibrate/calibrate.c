/*
 * calibrate.c - `einc calibrate`: measure this machine through the real
 * runtime and write a calibrated hardware profile.  This file runs the
 * steps in order; the programs are programs.c's, running them runner.c's,
 * the fit fit.c's and the profile profile.c's.
 *
 * How it works.  Calibration should measure what an einc executable will
 * actually do, so it does not time hand-written loops: it writes small .ein
 * programs, compiles them with this very einc (/proc/self/exe), runs them
 * on the chosen runtime (threads, or MPI through mpirun) with
 * `--profile --repeat R`, and reads the median time per op that the
 * executable's profiler prints (runtime/profile.c), or for the programs
 * run on one device per core each device's fastest call from its
 * --trace.  Four kinds of program:
 *
 *   coll_P_I.ein for each group size P = 2..N, a mesh {X: P, Z: N/P} (all N
 *                devices busy, as in the examples, when P divides N; else
 *                {X: P}), and for the I-th buffer size S (bytes per device, as
 *                nccl-tests count them: AllGather's output, ReduceScatter's
 *                input, AllReduce's and AllToAll's buffer) one AllGather_X,
 *                ReduceScatter_X, AllReduce_X and AllToAll_X, made by
 *                output constraints and {U_X} partial sums.
 *   compute.ein  a mesh {X: N} of local GEMMs (rt_einsum, f32/f64/bf16,
 *                several shapes).
 *   stream.ein   elementwise adds (memory bandwidth) and scales (what a
 *                streamed byte written costs) on one device per core,
 *                each with its core's share of the N devices' arrays, read
 *                from the executable's --trace (stream.c).
 *   fnrow.ein    likewise, each unary function of the language (its cost
 *                per element) and two row groups of 2 and 6 passes over
 *                rows in cache (what one pass costs per element:
 *                rowpass.c).
 *
 * Fitting (seed 004, MeshSlice's measured model).  Per collective kind,
 *     T(P, S) = T_launch + (P - 1) * (L_sync + shard_bytes / BW)
 *               + shard_bytes / BW_local + (runs - P) * t_run,
 * shard_bytes = S / P (what one step of a ring moves), is linear in the
 * unknowns (T_launch, L_sync, 1/BW, 1/BW_local, t_run) with regressors (1,
 * P-1, (P-1)*shard, shard, runs-P).  The last two, not in MeshSlice's TPU
 * model, are the copy of the device's own shard into a distinct output
 * buffer, 0 where that copy is free, and the short runs of a collective
 * over an inner dim (fit.c): every size is also timed as a
 * strided variant (tags GS, RZ, AZ) whose peer blocks are rows of 512 B.
 * The samples span microseconds to seconds, so the least squares are
 * weighted by 1/T^2 (relative error).  A coefficient that comes out
 * negative is fixed at zero and the rest refitted (non-negative least
 * squares over the subsets, best feasible fit kept).  Buffers below 1 MiB
 * per device (in cache, several times faster per byte) get a second fit of
 * the same form, "small_messages"; samples far off a first fit (a
 * descheduled thread) are left out of the second.  The residuals (measured
 * vs fitted, relative) are written with the fit.  GEMM FLOP/s is the
 * sum over shapes of 2MNK over the sum of their times (the large shapes,
 * which take the milliseconds, weigh most); elementwise bandwidth the median
 * over sizes of (2 inputs + 1 output) bytes / time (stream.c's time per
 * device of the full mesh); the write weight from
 * the scale's time against the add's (write_weight); a function's cost the
 * time of fn(6 (A + B)) per element beyond that of neg(6 (A + B)).
 *
 * The profile keeps the seed-style figures too (peak_flops from the GEMMs,
 * hbm_bandwidth from the adds, ici_* from the AllGather fit), so every
 * consumer of cost_hw works; the cost pass uses the "calibration" section
 * when present (passes/costmodel/cost_op.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "costmodel.h"

#include "calibrate_internal.h"

/* One line per collective kind on stderr: its fitted terms and how far
 * the samples lie off them; and the largest buffers' floor (fit.c,
 * fit_large) where there is one. */
static void print_summary(const cal_state *c)
{
    for (int k = 0; k < NKINDS; k++) {
        const coll_fit *f = &c->coll[k];
        fprintf(stderr,
                "  %-13s T_launch %7.2f us  L_sync %6.2f us  BW %5.2f GB/s  own shard %5.2f GB/s  "
                "run %5.1f ns  residual rms %5.1f%% max %5.1f%% (%d of %d samples)\n",
                KIND_OP[k], f->t_launch * 1e6, f->l_sync * 1e6, f->bw * 1e-9, f->bw_local * 1e-9,
                f->t_run * 1e9, 100 * f->rms, 100 * f->max, f->used, f->n);
        if (f->large_bw > 0)
            fprintf(stderr,
                    "  %-13s at least %.2f GB/s of (P-1) shards from %.0f MiB "
                    "(rising from %.0f MiB)\n",
                    "", f->large_bw * 1e-9, f->large_at / (1 << 20), f->large_from / (1 << 20));
    }
}

int calibrate_measure(const cal_options *o, const cost_machine *here)
{
    int rc = 1;
    cal_state *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    c->o = o;
    c->machine = *here;
    c->load[0] = -1;
    ssize_t n = readlink("/proc/self/exe", c->self, sizeof c->self - 1);
    if (n <= 0) {
        fprintf(stderr, "einc calibrate: error: cannot find this einc (/proc/self/exe)\n");
        free(c);
        return 1;
    }
    c->self[n] = 0;
    const char *tmpdir = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/einc-calibrate-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(c->dir)) {
        fprintf(stderr, "einc calibrate: error: cannot create a work directory: %s\n",
                strerror(errno));
        free(c);
        return 1;
    }
    /* Other processes' load slows every program calibration runs, and the
     * fastest of a few rounds cannot undo load that lasts the whole run: on
     * the 2-core VM of docs/performance.md a load average of 12 gave GEMM
     * rates 3x below the quiet machine's and a 0.5 ms L_sync.  Say so, and
     * record the load in the profile. */
    if (getloadavg(c->load, 1) == 1 && c->load[0] > (double)here->cores && here->cores > 0)
        fprintf(stderr, "einc calibrate: warning: the machine is busy (load average %.1f on %d "
                        "cores): the figures will be slower than the machine; calibrate when it "
                        "is quiet\n", c->load[0], here->cores);
    if (cal_prepare_collectives(c) || cal_prepare_compute(c) || cal_run_benchmarks(c) ||
        cal_read_results(c))
        goto out;
    for (int k = 0; k < NKINDS; k++)
        if (cal_fit_kind(&c->coll[k], KIND_OP[k]))
            goto out;
    cost_hw hw;
    if (cal_write_profile(c, &hw))
        goto out;
    print_summary(c);
    fprintf(stderr, "  GEMM %.1f / %.1f / %.1f GFLOP/s (f32 / f64 / bf16), a bf16 result element "
            "%.2f ns (0: not measured), elementwise %.2f GB/s per device\nwrote %s\n",
            hw.peak_flops[IR_F32] * 1e-9, hw.peak_flops[IR_F64] * 1e-9,
            hw.peak_flops[IR_BF16] * 1e-9, hw.gemm_result_time[IR_BF16] * 1e9, hw.hbm_bw * 1e-9,
            o->output);
    rc = 0;
out:
    if (o->keep)
        fprintf(stderr, "einc calibrate: the benchmark programs are in %s\n", c->dir);
    else
        cal_remove_dir(c);
    free(c);
    return rc;
}
