/*
 * elementwise_internal.h - what elementwise.c and elementwise_fn.c share:
 * the state of one loop nest, and the element-level emitters the nest
 * calls (the language's functions, intrinsics, constants in the compute
 * type).
 */
#ifndef EINC_CG_ELEMENTWISE_INTERNAL_H
#define EINC_CG_ELEMENTWISE_INTERNAL_H

#include "cg_internal.h"

/* State of one loop nest. */
typedef struct ew_nest {
    cg_ctx *c;          /* codegen context */
    cg_fn *f;           /* the run function */
    const ir_op *root;  /* the op that owns the loop */
    LLVMTypeRef ct;     /* compute type: f32 or f64 */
    LLVMValueRef dst;   /* result buffer */
    int64_t shape[IR_MAX_RANK]; /* result per-device shape */
    int nloops;         /* loops of the nest: runs of result positions merged */
    int last[IR_MAX_RANK]; /* per loop: the last (innermost) result position of its run */
    int64_t trips[IR_MAX_RANK]; /* per loop: its trip count, the product of its run's sizes */
    LLVMValueRef idx[IR_MAX_RANK]; /* current index per result position (i64; within a
                                      merged run the flat index is the run's last
                                      position's, the others are 0) */
    LLVMValueRef off[IR_MAX_RANK]; /* global offset of this device's block per result position (i64) */
    LLVMValueRef acc;   /* NULL, or an accumulator (entry alloca) each stored element is
                           added to, with reassociation (cg_emit_elementwise_sum) */
    int64_t chunk;      /* 0, or the elements of a streamed chunk (see stream_loop) */
    LLVMValueRef stage_at; /* inside a chunk: the element's index in f->stream_stage (i64) */
} ew_nest;

/* A call of the LLVM intrinsic `name` (e.g. "llvm.exp") overloaded on the
 * nest's compute type, on args[0..nargs). */
LLVMValueRef cg_ew_intrinsic(ew_nest *n, const char *name, LLVMValueRef *args, unsigned nargs);

/* The constant v in the nest's compute type. */
LLVMValueRef cg_ew_const(ew_nest *n, double v);

/* fn(x) in the nest's compute type (see elementwise_fn.c for how each
 * function is computed). */
LLVMValueRef cg_ew_call_fn(ew_nest *n, ir_func fn, LLVMValueRef x);

#endif
