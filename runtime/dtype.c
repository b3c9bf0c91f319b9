/*
 * dtype.c - element sizes, bf16 conversion, reading one element as a double.
 *
 * i8 (quantized weights and KV caches, seed 002) is stored as is, one byte
 * per element, in memory and in .npy files ('|i1').
 *
 * bf16 is the upper 16 bits of an IEEE f32 (einrt.h); arithmetic happens in
 * f32 and results are rounded back to nearest even, as TPUs and PyTorch do.
 */
#include <string.h>

#include "rt_internal.h"

size_t rt_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case RT_F32: return 4;
    case RT_F64: return 8;
    case RT_BF16: return 2;
    case RT_I32: return 4;
    case RT_I8: return 1;
    default: return 0;
    }
}

const char *rt_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case RT_F32: return "f32";
    case RT_F64: return "f64";
    case RT_BF16: return "bf16";
    case RT_I32: return "i32";
    case RT_I8: return "i8";
    default: return "?";
    }
}

void rt_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = rt_bf16_to_f32(src[i]);
}

void rt_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = rt_f32_to_bf16(src[i]);
}

size_t rt_file_elem_size(int32_t dtype)
{
    return dtype == RT_BF16 ? 4 : rt_dtype_size(dtype);
}

double rt_element(int32_t dtype, const void *x, int64_t i)
{
    switch (dtype) {
    case RT_F64: return ((const double *)x)[i];
    case RT_BF16: return rt_bf16_to_f32(((const uint16_t *)x)[i]);
    case RT_I32: return ((const int32_t *)x)[i];
    case RT_I8: return ((const int8_t *)x)[i];
    default: return ((const float *)x)[i];
    }
}
