/*
 * rowpass.c - what one pass of a row group over a row in cache costs: the
 * profile's "row_pass_seconds_per_element" (docs/cost-model.md,
 * "Calibration"), which passes/costmodel/cost_rowgroup.c charges for every
 * member of a row group.
 *
 * A row group (codegen/rowgroup.c) reads its input from memory once and
 * writes its output once; between them each member runs a pass over a row
 * held in the first-level cache (a softmax's max, subtract, sum and
 * divide).  The memory traffic is priced by the elementwise curve; the
 * passes are not memory traffic, and on the Zen 4 EPYC they were about
 * half of a softmax's or an RMSNorm's time (docs/performance-history.md,
 * section 5).  Two row groups over arrays of the same shape, one with 2
 * members and one with 6, read one input and write one output each, so
 * the difference of their times is 4 passes (a max, a subtract, a sum and a
 * divide: a softmax's passes without its exp) and nothing else: no memory
 * traffic, no fixed cost of starting an op.  The figure is that difference
 * per pass and per element, the pass itself, with nothing subtracted.
 *
 * Both groups go into fnrow.ein (stream.c), timed as stream.ein's adds
 * are: on one device per core, each group once for every device of the
 * full mesh that core runs (copies over arrays of their own), the fastest
 * call of a copy from the trace, scaled back by the copies.  They were the
 * makespans of compute.ein's groups on the full mesh, and the difference
 * of two makespans taken a few milliseconds apart on 2 cores shared by 4
 * devices read 0.041 to 0.147 ns per element in three idle calibrations.
 * The copies of the two groups alternate, ROW_GROUP_TIMES times a run, so
 * that both are timed close together, and the group of 2, which moves as
 * many bytes in less time, has as many chances as the other to run when
 * the other core leaves it the memory it would have on an idle machine:
 * with one call per copy and run it was 230 us in some processes and 300
 * in others, the group of 6 435 us in all.
 * Rows of ROW_COLS f32 (4 KiB, the row and the group's two row buffers fit
 * a 32 KiB first-level cache), ROW_ROWS rows per device, 4 MiB arrays that
 * stream from memory as a model's activations do; each group reads its own
 * input, untouched since the run before, so both find it in the same
 * place.  A small elementwise op after each group ends it (codegen groups
 * consecutive ops over the same rows, and the next copy's group has rows
 * of the same shape).
 */
#include <stdint.h>
#include <stdio.h>

#include "calibrate_internal.h"

/* Columns of a row: 1024 f32 = 4 KiB. */
#define ROW_COLS 1024
/* Rows per device: 2^20 elements, 4 MiB per array per device. */
#define ROW_ROWS 1024
/* Members of the two groups; their difference is the passes timed. */
#define LO_PASSES 2
#define HI_PASSES 6

/* Writes copy k of the group of 2 passes and its end. */
static void write_lo(FILE *f, long long k)
{
    fprintf(f, "input RGXLk%lld[RGR_X, RGC] : f32\n", k);
    /* 2 passes: a sum, a divide. */
    fprintf(f,
            "RGLSk%lld[RGR_X] = sum(RGXLk%lld[RGR, RGC])\n"
            "RGLYk%lld[RGR_X, RGC] = RGXLk%lld[RGR, RGC] / RGLSk%lld[RGR]\noutput RGLYk%lld\n"
            "RGWLk%lld[RGQ_X] = RGZ[RGQ] * 2\noutput RGWLk%lld\n",
            k, k, k, k, k, k, k, k);
}

/* Writes copy k of the group of 6 passes and its end. */
static void write_hi(FILE *f, long long k)
{
    fprintf(f, "input RGXHk%lld[RGR_X, RGC] : f32\n", k);
    /* 6 passes: a max, a subtract, a sum, a divide, a sum, a divide.  Each
     * row-local value has two readers in the group, so none is fused into
     * its reader: every statement is a pass. */
    fprintf(f,
            "RGHMk%lld[RGR_X] = max(RGXHk%lld[RGR, RGC])\n"
            "RGHEk%lld[RGR_X, RGC] = RGXHk%lld[RGR, RGC] - RGHMk%lld[RGR]\n"
            "RGHSk%lld[RGR_X] = sum(RGHEk%lld[RGR, RGC])\n"
            "RGHFk%lld[RGR_X, RGC] = RGHEk%lld[RGR, RGC] / RGHSk%lld[RGR]\n"
            "RGHTk%lld[RGR_X] = sum(RGHFk%lld[RGR, RGC])\n"
            "RGHYk%lld[RGR_X, RGC] = RGHFk%lld[RGR, RGC] / RGHTk%lld[RGR]\noutput RGHYk%lld\n"
            "RGWHk%lld[RGQ_X] = RGZ[RGQ] * 2\noutput RGWHk%lld\n",
            k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k);
}

void cal_write_row_groups(FILE *f, int nd, int64_t copies)
{
    fprintf(f, "# row groups of %d and %d passes (calibrate/rowpass.c)\n", LO_PASSES, HI_PASSES);
    fprintf(f, "dim RGR = %lld, RGC = %d, RGQ = %d\ninput RGZ[RGQ_X] : f32\n",
            (long long)ROW_ROWS * nd, ROW_COLS, 16 * nd);
    cal_write_alternating(f, copies, write_lo, write_hi);
}

void cal_write_alternating(FILE *f, int64_t copies, void (*first)(FILE *, long long),
                           void (*second)(FILE *, long long))
{
    for (int j = 0; j < ROW_GROUP_TIMES; j++) {
        for (int64_t k = 0; k < copies; k++)
            first(f, (long long)(j * copies + k));
        for (int64_t k = 0; k < copies; k++)
            second(f, (long long)(j * copies + k));
    }
}

double cal_row_pass_seconds(const cal_state *c)
{
    if (!(c->row_s[0] > 0 && c->row_s[1] > 0))
        return -1;
    double d = (c->row_s[1] - c->row_s[0]) / ((HI_PASSES - LO_PASSES) * (double)ROW_ROWS * ROW_COLS);
    /* A noisy run can time the longer group faster: then the passes are
     * lost in the noise, and cost nothing measurable. */
    return d > 0 ? d : 0;
}
