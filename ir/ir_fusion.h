/*
 * ir_fusion.h - how ops run together: fusion (fusion.c), unrolled small
 * einsums (einsum_unroll.c) and row groups (rowgroup.c).
 *
 * Codegen and the cost model must agree on which ops share a loop, or the
 * model prices a program other than the one that runs: so these decisions
 * are pure functions of the module, made in the ir layer, which both call.
 * Part of ir.h, which includes it after the types it needs: include ir.h.
 */
#ifndef EINC_IR_FUSION_H
#define EINC_IR_FUSION_H

#ifndef EINC_IR_H
#error "ir_fusion.h is part of ir.h: include ir.h"
#endif

/* Most expression nodes in one fused elementwise loop (fusion.c).  Real
 * fusions (GELU, RMSNorm, rotary embeddings, a softmax's exp and divide)
 * have tens of nodes; this keeps codegen's recursion over a fused group a
 * few thousand frames deep at most. */
#define IR_FUSED_MAX_NODES 1024
/* Elementwise expression nodes in one program past which codegen puts
 * every elementwise nest in a function of its own and forms no row group.
 * The largest example (a Transformer's training step) has a few thousand;
 * a generated chain of 100,000 statements has 500,000. */
#define IR_OUTLINE_EW_NODES 50000
/* Per-device bytes from which a result is written with non-temporal
 * stores (codegen: a row group's, rowgroup.c; a loop nest's,
 * elementwise.c; docs/codegen.md, "Streamed results"): several times the
 * private caches of a core (1-2 MiB of L2 on current x86), so its lines
 * would leave them before any reader came; such a store moves the line
 * once instead of reading it for ownership and writing it back. */
#define IR_STREAM_MIN_BYTES (4 << 20)
/* Whether an elementwise loop nest that is not a row group's member writes
 * its result of `result_bytes` per device with non-temporal stores
 * (codegen, elementwise.c, which also wants an innermost loop of at least
 * four cache lines) and the cost model prices it so: a result of
 * m->stream_min_bytes or more. */
static inline bool ir_ew_streams(const ir_module *m, int64_t result_bytes)
{
    return result_bytes >= m->stream_min_bytes;
}

/* Whether `v` is one of m's outputs (an update's new value included). */
bool ir_value_is_output(const ir_module *m, const ir_value *v);

/* Which elementwise ops (and unrolled einsums, ir_einsum_unrolled_terms)
 * run inside the loop of an elementwise consumer (fusion.c): for
 * the `nops` ops `ops` in program order, fused_into[i] is the index of the
 * op whose loop computes op i (chains resolved to the op that emits the
 * loop), or -1.  Returns 0, or -1 when out of memory (then nothing fuses).
 * Used by codegen (plan.c) and the cost model. */
int ir_fuse_elementwise(const ir_module *m, ir_op *const *ops, int nops, int *fused_into);

/* The value a cast `v` converts, when the cast is folded into the GEMM
 * that reads it, else NULL (fusion.c).  Folded: `v` is the result of an
 * elementwise op that only converts its one operand (the tree's root is
 * the operand, which has the result's dims, in any order) from a narrower dtype (i8 or bf16 to f32, f32 to f64), its
 * one use is a binary sum einsum that runs as a GEMM (no gather or
 * scatter, not unrolled: ir_einsum_unrolled_terms), it is no output, and
 * m->no_cast_fold (einc --fold-casts=off) is not set.
 * Codegen then emits no cast: the einsum reads the source directly and the
 * runtime converts it block by block as its GEMM reads it (plan.c,
 * runtime/einsum_mixed.c), so no converted copy is ever in memory; the cost
 * model prices the einsum at the source's bytes and the cast at nothing
 * (passes/costmodel/cost_fusion.c).  Pure. */
const ir_value *ir_folded_cast_source(const ir_module *m, const ir_value *v);

/* Largest number of products an unrolled einsum sums per result element
 * (ir_einsum_unrolled_terms); chosen by measurement, docs/codegen.md,
 * "Small contractions". */
#define IR_EINSUM_UNROLL_MAX 8
/* Whether codegen runs einsum `op` as a loop nest over its result, each
 * element the unrolled sum over the contracted labels of the operands'
 * product, instead of a GEMM (einsum_unroll.c): a binary sum einsum (no
 * gather, scatter, max or min; operands of the result's float dtype) whose
 * contracted labels have at most m->einsum_unroll_max (by default
 * IR_EINSUM_UNROLL_MAX) index combinations per device (a label in both operands with the same per-device size).
 * Returns that number of combinations (the terms of each element's sum,
 * 1 when nothing is summed), or 0 when the einsum is a GEMM.  Pure; used
 * by codegen, fusion (ir_fuse_elementwise) and the cost model. */
int ir_einsum_unrolled_terms(const ir_module *m, const ir_op *op);
/* The contracted labels of einsum `op` (in an operand, not in the result),
 * each once, in the order the operands read them: their dim ids into
 * labels[] and their per-device sizes into sizes[] (room for
 * IR_MAX_OPERANDS * IR_MAX_RANK each).  Returns how many, or -1 when a
 * contracted label has different per-device sizes where it appears.
 * Pure (einsum_unroll.c). */
int ir_einsum_contracted(const ir_module *m, const ir_op *op, int *labels, int64_t *sizes);

/* A unary sum, max or min einsum over trailing dims of its operand: its
 * result labels are the operand's first labels, in order (rowgroup.c). */
bool ir_is_row_reduction(const ir_op *op);

/* Row groups (rowgroup.c): for the `nops` ops `ops` in program order with
 * fusion `fused_into` (ir_fuse_elementwise), row_group[i] is the index of
 * the first op of op i's row group, or -1 (fused ops are never members);
 * row_local[value id] (m->nvalues entries) says that a member's result
 * never needs more than the current row (a one-row buffer in codegen, no
 * memory traffic in the cost model).  Returns 0, or -1 when out of memory
 * (then no group).  Pure: both codegen and the cost model call it. */
int ir_row_groups(const ir_module *m, ir_op *const *ops, int nops, const int *fused_into,
                  int *row_group, bool *row_local);
/* The last member of the row group whose first op is `first`. */
int ir_row_group_end(const int *row_group, const int *fused_into, int nops, int first);

/* A contraction that may stop, for each row b, at position pos[b] along
 * label `pos_label` (pos_bound.c; docs/codegen.md, "Contractions bounded
 * by a position"): `pos` is an i32 input, global [B] with the same
 * per-device block as the einsum result's rows and `row_label` the
 * einsum's batch label B (in both operands and the result), or a scalar
 * (every row at pos[0]) and `row_label` -1; `pos_label` is S, whole on
 * every device.  Either S is contracted and one operand is exactly 0 at
 * s > pos[b] (a masked softmax), or S is kept and every reader of the
 * result reads it only where S <= pos[B] (under `where(S <= pos[B], ...)`).
 * Skipping s > pos[b] then leaves every value the program reads unchanged
 * (assuming the other operand finite there). */
typedef struct ir_pos_bound {
    const ir_value *pos;
    int row_label;
    int pos_label;
} ir_pos_bound;
/* Whether binary sum einsum `op` may be bounded so; fills *out.  False
 * when m->no_pos_bound (einc --pos-bound=off).  Pure. */
bool ir_einsum_pos_bound(const ir_module *m, const ir_op *op, ir_pos_bound *out);

#endif
