/*
 * maskpass.c - what a causal mask costs a softmax's row group: the
 * profile's "row_mask_seconds_per_element" (docs/cost-model.md,
 * "Calibration"), which passes/costmodel/cost_rowgroup.c charges, in place
 * of the row pass, to a member of a row group that is a `where` on the
 * elements' positions (`where(S <= T, L, -inf)`).
 *
 * A causal attention's softmax is a row group of five members: the mask,
 * then the softmax's max, exp and sum, scale.  The mask member reads the
 * scores from memory and writes its row into a row buffer that the max
 * reads again from the first-level cache, where an unmasked softmax's max
 * reads the scores from memory itself; and half of the exp's arguments
 * are -inf.  Priced as one more pass of rowpass.c (its loads, stores and
 * plain arithmetic), llama2_layer's causal softmax `M` was predicted 39%
 * under its time on the quick profile, the largest miss of
 * bench/cost_accuracy.py (docs/performance-history.md, section 5).  Part
 * of that was the exp: a -inf lane reached +0 through a product that
 * underflows, which the Zen 4 EPYC finishes in a microcode assist, 0.1 ns
 * an element of a causal row group; codegen's exp no longer underflows
 * there (codegen/elementwise_fn.c, exp_poly_f32).  What is left is
 * measured here rather than argued: two row groups over [B, T, S] arrays
 * with rows of MASK_COLS f32, one a softmax over S and one the same
 * softmax of where(S <= 2 T, X, -inf), S = 2 T (half of each device's
 * elements masked, as a causal attention's, and its condition a
 * comparison of positions, as `S <= T`), and the figure is the difference
 * of their times per element: the mask member whole (its pass included)
 * and whatever it changes in the members after it.
 *
 * They run in fnrow.ein (stream.c) beside rowpass.c's groups and are
 * timed as they are: copies for the devices of the full mesh a core runs,
 * each over arrays of its own, the fastest call of a copy from the trace,
 * the masked and unmasked copies alternating ROW_GROUP_TIMES times a run
 * so that they are timed close together.  Rows of MASK_COLS f32 like
 * rowpass.c's (4 KiB; the rows and the group's row buffers fit the
 * first-level cache), MASK_ROWS rows per device: 2 MiB arrays, half
 * rowpass.c's, which still stream from memory (a run touches 64 MiB of
 * them per device, 16 calls), and whose pages cost half as much to fault
 * in: each process's first run touches every array of fnrow.ein for the
 * first time, and beside other jobs the kernel's zeroing of those pages
 * took 0.3 to 7 s a process on the 2-core EPYC's virtual machine, with
 * or without these groups; with them a process took as long to 0.3 s
 * (docs/performance-history.md, section 5).
 */
#include <stdint.h>
#include <stdio.h>

#include "calibrate_internal.h"

/* Columns and rows per device of the masked groups: 1024 f32 = 4 KiB a
 * row, 2^19 elements per device. */
#define MASK_COLS 1024
#define MASK_ROWS 512

/* Writes copy k of the unmasked softmax and its end. */
static void write_plain(FILE *f, long long k)
{
    fprintf(f,
            "input RMXUk%lld[RMB_X, RMT, RMS] : f32\n"
            "RMUYk%lld[RMB_X, RMT, RMS] = softmax(RMXUk%lld[RMB, RMT, RMS], RMS)\noutput RMUYk%lld\n"
            "RMWUk%lld[RGQ_X] = RGZ[RGQ] * 2\noutput RMWUk%lld\n",
            k, k, k, k, k, k);
}

/* Writes copy k of the masked softmax and its end.  The mask is its own
 * statement, as llama2_layer's: with two readers in the group (the max
 * and the exp) it is a member, not fused into one. */
static void write_masked(FILE *f, long long k)
{
    fprintf(f,
            "input RMXMk%lld[RMB_X, RMT, RMS] : f32\n"
            "RMMMk%lld[RMB_X, RMT, RMS] = where(RMS <= 2 * RMT, RMXMk%lld[RMB, RMT, RMS], -inf)\n"
            "RMMYk%lld[RMB_X, RMT, RMS] = softmax(RMMMk%lld[RMB, RMT, RMS], RMS)\noutput RMMYk%lld\n"
            "RMWMk%lld[RGQ_X] = RGZ[RGQ] * 2\noutput RMWMk%lld\n",
            k, k, k, k, k, k, k, k);
}

void cal_write_mask_groups(FILE *f, int nd, int64_t copies)
{
    fprintf(f, "# softmax row groups with and without a causal mask (calibrate/maskpass.c)\n");
    fprintf(f, "dim RMB = %d, RMT = %d, RMS = %d\n", nd, MASK_ROWS, MASK_COLS);
    cal_write_alternating(f, copies, write_plain, write_masked);
}

double cal_row_mask_seconds(const cal_state *c)
{
    if (!(c->row_s[2] > 0 && c->row_s[3] > 0))
        return -1;
    double d = (c->row_s[3] - c->row_s[2]) / ((double)MASK_ROWS * MASK_COLS);
    /* A noisy run can time the masked group faster: the mask is then lost
     * in the noise, and costs nothing measurable. */
    return d > 0 ? d : 0;
}
