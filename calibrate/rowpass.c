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
 * Both groups go into compute.ein (programs.c): rows of ROW_COLS f32
 * (4 KiB, the row and the group's two row buffers fit a 32 KiB first-level
 * cache), ROW_ROWS rows per device, 4 MiB arrays that stream from memory
 * as a model's activations do; each group reads its own input, untouched
 * since the run before, so both find it in the same place.  A small
 * elementwise op between them ends the first group (codegen groups
 * consecutive ops over the same rows).
 */
#include <stdio.h>
#include <string.h>

#include "calibrate_internal.h"

/* Columns of a row: 1024 f32 = 4 KiB. */
#define ROW_COLS 1024
/* Rows per device: 2^20 elements, 4 MiB per array per device. */
#define ROW_ROWS 1024
/* Members of the two groups; their difference is the passes timed. */
#define LO_PASSES 2
#define HI_PASSES 6

void cal_write_row_groups(const cal_state *c, FILE *f)
{
    int nd = c->o->ranks;
    fprintf(f, "# row groups of %d and %d passes (calibrate/rowpass.c)\n", LO_PASSES, HI_PASSES);
    fprintf(f, "dim RGR = %lld, RGC = %d, RGQ = %d\n", (long long)ROW_ROWS * nd, ROW_COLS, 16 * nd);
    fprintf(f, "input RGXL[RGR_X, RGC] : f32\ninput RGXH[RGR_X, RGC] : f32\n"
               "input RGZ[RGQ_X] : f32\n");
    /* 2 passes: a sum, a divide. */
    fprintf(f, "RGLS[RGR_X] = sum(RGXL[RGR, RGC])\n"
               "RGLY[RGR_X, RGC] = RGXL[RGR, RGC] / RGLS[RGR]\noutput RGLY\n");
    fprintf(f, "RGW[RGQ_X] = RGZ[RGQ] * 2\noutput RGW\n");
    /* 6 passes: a max, a subtract, a sum, a divide, a sum, a divide.  Each
     * row-local value has two readers in the group, so none is fused into
     * its reader: every statement is a pass. */
    fprintf(f, "RGHM[RGR_X] = max(RGXH[RGR, RGC])\n"
               "RGHE[RGR_X, RGC] = RGXH[RGR, RGC] - RGHM[RGR]\n"
               "RGHS[RGR_X] = sum(RGHE[RGR, RGC])\n"
               "RGHF[RGR_X, RGC] = RGHE[RGR, RGC] / RGHS[RGR]\n"
               "RGHT[RGR_X] = sum(RGHF[RGR, RGC])\n"
               "RGHY[RGR_X, RGC] = RGHF[RGR, RGC] / RGHT[RGR]\noutput RGHY\n");
}

bool cal_on_row_group(cal_state *c, const char *name, double t)
{
    /* A group's time is on its first op (`--profile`: "row group to ..."). */
    if (!strcmp(name, "RGLS"))
        c->row_s[0] = t;
    else if (!strcmp(name, "RGHM"))
        c->row_s[1] = t;
    else
        return false;
    return true;
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
