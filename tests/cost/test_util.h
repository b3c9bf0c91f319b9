/* test_util.h - helpers shared by the cost model's tests. */
#ifndef EINC_TEST_COST_UTIL_H
#define EINC_TEST_COST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costmodel.h"
#include "cunit_main.h"

/* |got - want| <= 2% of want: the seeds' worked numbers are rounded. */
#define ASSERT_NEAR2(got, want) \
    CU_ASSERT(fabs((double)(got) - (double)(want)) <= 0.02 * fabs((double)(want)))

/* Loads profile `name` from hw/ or stops the test with the loader's message. */
static inline cost_hw test_load_hw(const char *name)
{
    cost_hw hw;
    char err[512];
    int rc = cost_hw_load(name, &hw, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    return hw;
}

/* A replicated f32 value of module m with dims `dims` (dim ids). */
static inline ir_value *test_f32_value(ir_module *m, const char *name, ir_value_kind kind, int rank,
                                       const int *dims)
{
    ir_type t;
    memset(&t, 0, sizeof t);
    t.dtype = IR_F32;
    t.rank = rank;
    t.sh = ir_sharding_replicated();
    memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
    return ir_value_new(m, name, kind, &t, 0);
}

#endif
