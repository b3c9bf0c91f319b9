/* rt_test_util.h - helpers shared by the runtime's CUnit tests. */
#ifndef EINC_RT_TEST_UTIL_H
#define EINC_RT_TEST_UTIL_H

#include "rt_internal.h"

/* Stores v as element i of an array of `dtype` (bf16 rounded to nearest even). */
static inline void test_store(int32_t dtype, void *p, int64_t i, double v)
{
    if (dtype == RT_F64)
        ((double *)p)[i] = v;
    else if (dtype == RT_F32)
        ((float *)p)[i] = (float)v;
    else
        ((uint16_t *)p)[i] = rt_f32_to_bf16((float)v);
}

/* Element i of an array of `dtype`, as double. */
static inline double test_load(int32_t dtype, const void *p, int64_t i)
{
    if (dtype == RT_F64)
        return ((const double *)p)[i];
    if (dtype == RT_F32)
        return ((const float *)p)[i];
    return rt_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* A `run` for programs that tests only use for their mesh. */
static inline void test_noop_run(rt_device *dev, void *const *in, void *const *out)
{
    (void)dev;
    (void)in;
    (void)out;
}

#endif
