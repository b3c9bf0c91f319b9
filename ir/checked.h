/*
 * checked.h - products of sizes that cannot overflow.
 *
 * Every size in a program comes from its text or from -D: a dim or a mesh
 * axis may be any integer up to 2^63 - 1, so the product of a few of them
 * (a dim's parts over its mesh axes, a mesh's devices, a tensor's elements
 * or bytes) can exceed int64_t.  Signed overflow is undefined behaviour in
 * C, and in practice it wrapped to 0 and a later `size % parts` trapped
 * (SIGFPE).  All such products in the compiler go through ir_size_mul,
 * which saturates: a product that does not fit is IR_SIZE_HUGE, larger than
 * any real size, so a divisibility check fails and a limit check rejects it
 * instead of computing with a wrapped value.
 */
#ifndef EINC_CHECKED_H
#define EINC_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* What ir_size_mul returns for a product that does not fit in int64_t. */
#define IR_SIZE_HUGE INT64_MAX

/* a * b for sizes (a, b >= 0).  On overflow, or if either is already
 * IR_SIZE_HUGE, the result is IR_SIZE_HUGE and, when `overflow` is not
 * NULL, *overflow is set to true (it is never cleared, so one flag can
 * collect a whole product). */
static inline int64_t ir_size_mul(int64_t a, int64_t b, bool *overflow)
{
    int64_t r;
    if (a == IR_SIZE_HUGE || b == IR_SIZE_HUGE || __builtin_mul_overflow(a, b, &r)) {
        if (overflow)
            *overflow = true;
        return IR_SIZE_HUGE;
    }
    return r;
}

#endif
