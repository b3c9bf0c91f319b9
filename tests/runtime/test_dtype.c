/*
 * test_dtype.c - bf16 <-> f32: rt_f32_to_bf16 (and its loop,
 * rt_f32_to_bf16_n) against a rounding found another way, by comparing the
 * two bf16 neighbours of each f32 in double arithmetic: to nearest, ties
 * to even, overflow to infinity past the largest bf16 plus half its ulp, a
 * NaN kept a quiet NaN of the same sign.  Special values, every tie and a
 * stride through all 2^32 bit patterns.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The bf16 nearest f32 bit pattern u, found by distances in double. */
static uint16_t reference(uint32_t u)
{
    uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    if (mag == 0x7f800000u)
        return (uint16_t)(u >> 16);
    uint32_t lo = mag >> 16, hi = lo + 1;
    double x = from_bits(mag), vlo = from_bits(lo << 16);
    /* Above the largest finite bf16 the next step is 2^128 (infinity). */
    double vhi = hi == 0x7f80u ? ldexp(1.0, 128) : (double)from_bits(hi << 16);
    double dlo = x - vlo, dhi = vhi - x;
    uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u) ? hi : lo;
    return (uint16_t)((sign >> 16) | pick);
}

static void check_bits(uint32_t u)
{
    uint16_t want = reference(u), got = rt_f32_to_bf16(from_bits(u));
    if (got != want) {
        CU_FAIL("rt_f32_to_bf16 differs from the nearest bf16");
        fprintf(stderr, "  f32 bits %08x: got %04x, want %04x\n", u, got, want);
    }
}

static void test_special_values(void)
{
    static const uint32_t vals[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x3f800000u,
        0x3f808000u, /* 1 + 2^-8: a tie, kept even (down) */
        0x3f818000u, /* a tie, rounded up to even */
        0x3f80ffffu, 0x7f7fffffu, /* largest f32: past the largest bf16, to infinity */
        0x7f7f7fffu, 0x7f7f8000u, 0xff7fffffu, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0x7f800001u, /* a signalling NaN whose payload is in the low half */
        0xffffffffu,
    };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        check_bits(vals[i]);
    CU_ASSERT(isnan(rt_bf16_to_f32(rt_f32_to_bf16(from_bits(0x7f800001u)))));
    CU_ASSERT_EQUAL(rt_bf16_to_f32(rt_f32_to_bf16(1.0f)), 1.0f);
    CU_ASSERT_EQUAL(rt_bf16_to_f32(0x4049), 3.140625f);
}

static void test_every_tie_and_a_stride(void)
{
    /* Every tie (low half 0x8000) of every exponent and sign, and its two
     * neighbours; then a stride coprime to 2^32 through the bit patterns. */
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (uint32_t d = 0x7fffu; d <= 0x8001u; d++)
            check_bits(hi << 16 | d);
    uint32_t u = 0;
    for (int i = 0; i < (1 << 22); i++, u += 1021u)
        check_bits(u);
}

static void test_loops_agree(void)
{
    enum { N = 4099 }; /* not a multiple of any vector width */
    float *f = malloc(N * sizeof *f), *back = malloc(N * sizeof *back);
    uint16_t *h = malloc(N * sizeof *h);
    CU_ASSERT_FATAL(f && back && h);
    uint32_t u = 12345;
    for (int i = 0; i < N; i++) {
        u = u * 1664525u + 1013904223u;
        f[i] = from_bits(u);
    }
    rt_f32_to_bf16_n(f, h, N);
    rt_bf16_to_f32_n(h, back, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint32_t bits;
        memcpy(&bits, &f[i], sizeof bits);
        uint32_t wide;
        memcpy(&wide, &back[i], sizeof wide);
        bad += h[i] != reference(bits) || wide != (uint32_t)h[i] << 16;
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(f);
    free(back);
    free(h);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"bf16 rounding of special values", test_special_values},
        {"bf16 rounding of every tie and a stride of bit patterns", test_every_tie_and_a_stride},
        {"the loops convert as the element rules", test_loops_agree},
    };
    einc_add_suite("runtime dtype conversions", tests, (int)(sizeof tests / sizeof tests[0]));
}
