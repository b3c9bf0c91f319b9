/*
 * cost_formula.c - the collective cost formulas of seed 001.
 *
 * How a collective over mesh axes X_1..X_n is timed:
 *
 *   A ring (an axis with a wraparound link) moves data both ways: a
 *   bidirectional AllGather of V gathered bytes takes X/2 hops of 2V/X bytes
 *   at the bidirectional bandwidth, T = max(T_min * X / 2, V / W_ici)
 *   (seed 001, "how long does an AllGather take").  Several axes gather in
 *   parallel over their own links, so their bandwidths add (V / (W_ici *
 *   n_axes)) and their path lengths add (T_min * sum|X_i| / 2).
 *
 *   A line (no wraparound: TPU v5e axes other than 16, v4p/v5p axes that are
 *   not a multiple of 4) cannot run the bidirectional ring; seed 001 pop quiz
 *   2 times it as the one-way ring: |X| - 1 hops of V/|X| bytes at the one-way
 *   link bandwidth, T = (|X|-1) V / (|X| W_1way), latency (|X|-1) T_min.  We
 *   write both cases as an effective bandwidth per axis,
 *       ring: W_ici,   line: W_1way * |X| / (|X| - 1),
 *   and add them across axes, which gives back each formula exactly for one
 *   axis and the seed's N_axes rule for rings.
 *
 *   AllToAll (seed 001): T = V * max|X_i| / (4 N W_ici) where V is the bytes
 *   the N devices of the group hold together; per device that is
 *   local_bytes * max|X_i| / (4 W_ici).  On a line, timed as the one-way
 *   ring like the AllGather, the shard for the k-th device away travels k
 *   hops, so each link carries (|X| - 1) local / 2 bytes: half of the
 *   one-way AllGather, (|X| - 1) local / (2 W_1way) (seed 001 question 10:
 *   "on a unidirectional ring AllToAll costs half an AllGather").  The
 *   axis then counts as 2 (|X| - 1) W_ici / W_1way in max|X_i|.
 *
 * A mesh axis folded over k physical axes (`over k`) is k such axes, its
 * size split as evenly as it divides (cost_axis_split): seed 001's
 * "multiple axes" rule then gives it k times the bandwidth of one axis and
 * the hops of its sub-rings.  An axis `over dcn` is a ring over pods at
 * the DCN bandwidth per chip (seed 000, "scaling across pods";
 * cost_coll_links_time).
 *
 * Axes of size 1 move nothing and are skipped; a collective over no real
 * axis costs 0 and is reported as latency-bound with crossover 0.
 */
#include <math.h>

#include "costmodel.h"

static bool axis_wraps(const cost_hw *hw, const int64_t *sizes, const bool *ovr, int i)
{
    return ovr ? ovr[i] : cost_hw_axis_wraps(hw, sizes[i]);
}

/* Fills bound/time/crossover from the two terms; `lat` seconds of latency,
 * `bw` bytes/s of effective bandwidth for message size `v`. */
static cost_coll_time finish(double lat, double bw, double v)
{
    cost_coll_time r = {0};
    r.t_latency = lat;
    r.t_bandwidth = bw > 0 ? v / bw : 0;
    r.time = fmax(r.t_latency, r.t_bandwidth);
    /* Ties go to latency: at the crossover both terms are equal and the
     * message is as small as it can be without the hops dominating. */
    r.bound = r.t_bandwidth > r.t_latency ? IR_BOUND_BANDWIDTH : IR_BOUND_LATENCY;
    r.crossover = lat * bw;
    return r;
}

cost_coll_time cost_hop_time(const cost_hw *hw, double bytes, bool dcn)
{
    /* A calibrated host: the hand-off between two devices of the runtime
     * (the sender's copy into the receiver's mailbox, the wake-up of the
     * receiver blocked in rt_recv, its copy out) is what a 2-device
     * AllGather of the block does, whose measured fit holds the per-call
     * wake-up (t_launch + l_sync) that the profile's ici_latency (the
     * large-message fit's L_sync, about 0) leaves out. */
    if (hw->measured && !dcn)
        return cost_measured_coll_time(&hw->fit[COST_FIT_ALLGATHER], 2, 2 * bytes, 2);
    cost_coll_time r = {0};
    double lat = dcn ? 0 : hw->ici_latency, bw = dcn ? hw->dcn_bw : hw->ici_oneway_bw;
    r.t_latency = lat;
    r.t_bandwidth = bw > 0 ? bytes / bw : 0;
    r.time = r.t_latency + r.t_bandwidth;
    r.bound = r.t_bandwidth > r.t_latency ? IR_BOUND_BANDWIDTH : IR_BOUND_LATENCY;
    r.crossover = lat * bw;
    return r;
}

/* Hops along axis i (the longest path: |X|/2 on a ring, |X|-1 on a line);
 * 0 for an axis of one device.  `*wraps` says which case applies. */
static double axis_hops(const cost_hw *hw, const int64_t *sizes, const bool *ovr, int i, bool *wraps)
{
    *wraps = axis_wraps(hw, sizes, ovr, i);
    if (sizes[i] <= 1)
        return 0;
    double x = (double)sizes[i];
    return *wraps ? x / 2 : x - 1;
}

cost_coll_time cost_allgather_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                   const bool *wrap_override, double v)
{
    double hops = 0, bw = 0;
    for (int i = 0; i < naxes; i++) {
        bool wraps;
        double h = axis_hops(hw, sizes, wrap_override, i, &wraps);
        if (h == 0)
            continue;
        double x = (double)sizes[i];
        hops += h;
        bw += wraps ? hw->ici_bidi_bw : hw->ici_oneway_bw * x / (x - 1);
    }
    return finish(hw->ici_latency * hops, bw, v);
}

cost_coll_time cost_allreduce_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                   const bool *wrap_override, double v)
{
    /* Two ways to reduce V bytes over a group of P devices, the cheaper one
     * wins.  Seed 001's: ReduceScatter then AllGather of the same bytes,
     * both terms double (the crossover stays that of one AllGather).  When
     * that is latency-bound, as the activations of a decode step are (seed
     * 002, appendix C, "latency-bound communication": a [B, D] AllReduce
     * of 8-way Megatron is under the crossover), each device can instead
     * gather all P partial sums and add them itself: one AllGather of P V
     * bytes, the hops paid once. */
    cost_coll_time ag = cost_allgather_time(hw, sizes, naxes, wrap_override, v);
    cost_coll_time r = ag;
    r.t_latency = 2 * ag.t_latency;
    r.t_bandwidth = 2 * ag.t_bandwidth;
    r.time = 2 * ag.time;
    double p = 1;
    for (int i = 0; i < naxes; i++)
        p *= (double)(sizes[i] > 1 ? sizes[i] : 1);
    cost_coll_time once = cost_allgather_time(hw, sizes, naxes, wrap_override, p * v);
    if (p > 1 && once.time < r.time) {
        once.crossover = ag.crossover;
        return once;
    }
    return r;
}

cost_coll_time cost_alltoall_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                  const bool *wrap_override, double local_bytes)
{
    double hops = 0, maxeff = 0;
    for (int i = 0; i < naxes; i++) {
        bool wraps;
        double h = axis_hops(hw, sizes, wrap_override, i, &wraps);
        if (h == 0)
            continue;
        hops += h;
        /* A line: half of its one-way AllGather (seed 001 question 10),
         * (|X| - 1) local / (2 W_1way), written as local * eff / (4 W). */
        double x = (double)sizes[i];
        double eff = wraps ? x : 2 * (x - 1) * hw->ici_bidi_bw / hw->ici_oneway_bw;
        maxeff = fmax(maxeff, eff);
    }
    /* T_bw = local * maxeff / (4 W): an effective bandwidth 4 W / maxeff. */
    double bw = maxeff > 0 ? 4 * hw->ici_bidi_bw / maxeff : 0;
    return finish(hw->ici_latency * hops, bw, local_bytes);
}

/* The divisor d of `size` closest to size^(1/k) in log terms, ties to the
 * smaller: the first sub-axis of an even split of `size` over k axes. */
static int64_t even_divisor(int64_t size, int k)
{
    double want = log((double)size) / k, best_err = INFINITY;
    int64_t best = 1;
    for (int64_t d = 1; d <= size / d; d++) {
        if (size % d != 0)
            continue;
        int64_t pair[2] = {d, size / d};
        for (int j = 0; j < 2; j++) {
            double err = fabs(log((double)pair[j]) - want);
            if (err < best_err || (err == best_err && pair[j] < best)) {
                best_err = err;
                best = pair[j];
            }
        }
    }
    return best;
}

int cost_axis_split(int64_t size, int phys, int64_t *out)
{
    if (phys < 1)
        phys = 1;
    int64_t left = size > 1 ? size : 1;
    /* Greedy: each sub-axis takes the divisor nearest the k-th root of
     * what is left, so a perfect power splits exactly (64 over 3 -> 4^3). */
    for (int k = phys; k > 1; k--) {
        out[phys - k] = even_divisor(left, k);
        left /= out[phys - k];
    }
    out[phys - 1] = left;
    for (int i = 1; i < phys; i++) /* ascending: a stable, printable order */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return phys;
}

/* `ici` followed by a DCN step of `dcn_s` seconds: the steps run one after
 * the other, so their times add; the DCN step has no latency figure and
 * counts as bandwidth. */
static cost_coll_time add_dcn_step(cost_coll_time ici, double dcn_s)
{
    cost_coll_time r = ici;
    r.t_bandwidth += dcn_s;
    r.time += dcn_s;
    r.bound = r.t_bandwidth > r.t_latency ? IR_BOUND_BANDWIDTH : IR_BOUND_LATENCY;
    return r;
}

cost_coll_time cost_coll_links_time(const cost_hw *hw, ir_op_kind kind, const int64_t *sizes,
                                    const bool *dcn, int n, double v)
{
    int64_t ici[COST_MAX_LINKS];
    int nici = 0;
    double pods = 1, n_ici = 1;
    for (int i = 0; i < n && i < COST_MAX_LINKS; i++) {
        /* A profile without a DCN figure times every link on ICI. */
        if (dcn && dcn[i] && hw->dcn_bw > 0) {
            pods *= (double)(sizes[i] > 1 ? sizes[i] : 1);
        } else {
            ici[nici++] = sizes[i];
            n_ici *= (double)(sizes[i] > 1 ? sizes[i] : 1);
        }
    }
    cost_coll_time r;
    double dcn_bytes; /* what each chip moves across the pods */
    switch (kind) {
    case IR_OP_ALLGATHER:
    case IR_OP_REDUCESCATTER:
        r = cost_allgather_time(hw, ici, nici, NULL, v);
        dcn_bytes = v / n_ici;
        break;
    case IR_OP_ALLREDUCE:
        r = cost_allreduce_time(hw, ici, nici, NULL, v);
        dcn_bytes = 2 * v / n_ici;
        break;
    case IR_OP_ALLTOALL:
        r = cost_alltoall_time(hw, ici, nici, NULL, v);
        dcn_bytes = (pods - 1) / pods * v;
        break;
    default:
        return finish(0, 0, 0);
    }
    /* pods > 1 only with a DCN figure (above), so the division is safe. */
    return pods > 1 ? add_dcn_step(r, dcn_bytes / hw->dcn_bw) : r;
}

/* Seconds beyond the main fit's `line` for a buffer of `bytes` on a group
 * of p, from the largest buffers' own rate (fit->large_*, calibrate/fit.c,
 * fit_large): from large_at bytes on, the buffer takes at least its (P -
 * 1) shards at large_bw; between large_from and large_at the gap the line
 * leaves at large_at is added in proportion to log(bytes / large_from), so
 * the time is continuous.  One line cannot bend up where the buffers leave
 * the last-level cache: on MPI it priced llama2_layer's 40 MiB AllReduces
 * 39-62% under their time (docs/performance-history.md, section 5, "The
 * largest buffers' rate"). */
static double large_extra(const cost_coll_fit *fit, double p, double bytes, double line)
{
    if (!(fit->large_bw > 0) || !(bytes > fit->large_from) || !(fit->large_at > fit->large_from))
        return 0;
    double floor_at = (p - 1) * fit->large_at / p / fit->large_bw;
    if (bytes >= fit->large_at)
        return fmax(0.0, floor_at * bytes / fit->large_at - line);
    cost_coll_fit line_only = *fit;
    line_only.large_bw = 0;
    double gap = fmax(0.0, floor_at - cost_measured_coll_time(&line_only, p, fit->large_at, p).time);
    return gap * log(bytes / fit->large_from) / log(fit->large_at / fit->large_from);
}

cost_coll_time cost_measured_coll_time(const cost_coll_fit *fit, double p, double buffer_bytes,
                                       double runs)
{
    if (p <= 1)
        return finish(0, 0, 0);
    double steps = p - 1;
    bool small = buffer_bytes < fit->small_below;
    double t_launch = small ? fit->small_t_launch : fit->t_launch;
    double l_sync = small ? fit->small_l_sync : fit->l_sync;
    double bw = small ? fit->small_bw : fit->bw;
    double bw_local = small ? fit->small_bw_local : fit->bw_local;
    double t_run = small ? fit->small_t_run : fit->t_run;
    cost_coll_time r = {0};
    /* Extra runs are a per-call cost like the launch: latency. */
    r.t_latency = t_launch + steps * l_sync + (runs > p ? (runs - p) * t_run : 0);
    r.t_bandwidth = steps * buffer_bytes / p / bw;
    if (bw_local > 0)
        r.t_bandwidth += buffer_bytes / p / bw_local;
    if (!small)
        r.t_bandwidth += large_extra(fit, p, buffer_bytes, r.t_latency + r.t_bandwidth);
    /* The measured model adds the terms (the steps are synchronous), where
     * the seed's ICI formula takes their max. */
    r.time = r.t_latency + r.t_bandwidth;
    r.bound = r.t_bandwidth > r.t_latency ? IR_BOUND_BANDWIDTH : IR_BOUND_LATENCY;
    double per_byte = steps / (p * bw) + (bw_local > 0 ? 1 / (p * bw_local) : 0);
    r.crossover = r.t_latency / per_byte;
    return r;
}

/* y at `at` on the curve (x[i], y[i]), i < n, x ascending: linear in
 * log(x) between points, clamped at the ends. */
static double interp_log(const double *x, const double *y, int n, double at)
{
    if (n == 1 || at <= x[0])
        return y[0];
    if (at >= x[n - 1])
        return y[n - 1];
    int i = 1;
    while (i < n - 1 && x[i] < at)
        i++;
    double x0 = log(x[i - 1]), x1 = log(x[i]);
    double w = (log(at) - x0) / (x1 - x0);
    return y[i - 1] + w * (y[i] - y[i - 1]);
}

double cost_measured_ew_bw(const cost_hw *hw, double bytes)
{
    if (hw->ew_npoints <= 0)
        return hw->elementwise_bw;
    return interp_log(hw->ew_bytes, hw->ew_bw, hw->ew_npoints, bytes);
}

/* The bandwidth is looked up at the bytes of the add whose result is the
 * same size when a streamed loop reads less than that add (3 x written):
 * w is the ratio of the scale to the add over the same arrays
 * (calibrate/profile.c, write_weight), so the scale of arrays of S bytes
 * is priced at the add's bandwidth for 3S bytes, as it was measured.  At
 * its own 2S bytes the curve is the add's over smaller arrays, faster
 * near the last-level cache's size: a unary loop over 8 MiB per device
 * was priced 16% under what its device took (docs/performance-history.md,
 * section 5, "The unary loop's memory time"). */
double cost_measured_ew_seconds(const cost_hw *hw, double read, double written, bool streamed)
{
    double bytes = read + written;
    if (bytes <= 0)
        return 0;
    double w = streamed ? hw->ew_write_weight : 1;
    double at = streamed ? fmax(bytes, 3 * written) : bytes;
    return (read + w * written) * 3 / (2 + w) / cost_measured_ew_bw(hw, at);
}

double cost_measured_gemm_rate(const cost_hw *hw, ir_dtype t, double flops)
{
    int d = (int)t >= 0 && (int)t < 3 ? (int)t : IR_F32;
    if (hw->gemm_npoints[d] <= 0)
        return hw->peak_flops[d];
    return interp_log(hw->gemm_flop[d], hw->gemm_rate[d], hw->gemm_npoints[d], flops);
}

double cost_measured_gemm_seconds(const cost_hw *hw, ir_dtype t, double flops,
                                  double result_elems)
{
    int d = (int)t >= 0 && (int)t < 3 ? (int)t : IR_F32;
    return flops / cost_measured_gemm_rate(hw, t, flops) + result_elems * hw->gemm_result_time[d];
}

bool cost_measured_overlaps(const cost_hw *hw, double devices)
{
    if (!hw->measured)
        return true;
    return hw->cal_cores > 0 && hw->cal_cores >= 2 * devices;
}

/* Cores one device's work gets with `devices` devices on `cores` cores:
 * einc's own loops run on the device's thread, which shares a core with
 * the devices beyond the cores (cores / max(devices, cores)); BLAS calls
 * run on one OpenBLAS thread per device when there are several devices
 * (the same share) and on OpenBLAS's own threads over every core for a
 * lone device (runtime/backend_threads.c and backend_mpi.c call
 * openblas_set_num_threads(1) only for meshes of two or more; a lone MPI
 * rank bound to one core has one CPU for them: the caller passes !blas). */
static double core_share(double cores, double devices, bool blas)
{
    if (blas && devices <= 1)
        return cores;
    return cores / fmax(fmax(devices, 1), cores);
}

static double contention(const cost_hw *hw, double devices, bool blas)
{
    if (hw->cal_devices <= 0 || hw->cal_cores <= 0)
        return 1;
    return core_share(hw->cal_cores, hw->cal_devices, blas) / core_share(hw->cal_cores, devices, blas);
}

double cost_measured_contention(const cost_hw *hw, double devices)
{
    return contention(hw, devices, false);
}

double cost_measured_blas_contention(const cost_hw *hw, double devices)
{
    return contention(hw, devices, !hw->cal_mpi);
}

double cost_collective_matmul_exposed(const cost_hw *hw, double comm_s, double matmul_s, int64_t group)
{
    if (!hw || !hw->collective_matmul || group < 2 || !(matmul_s > 0))
        return comm_s;
    return fmax(0.0, comm_s - matmul_s * (double)(group - 1) / (double)group);
}
