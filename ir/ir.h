/*
 * ir.h - the einc IR: a sharded tensor program over named dims on a device mesh.
 *
 * A module is a list of ops in program order (a doubly linked list, so passes
 * can insert collectives before the op that needs them).  Every value has a
 * GLOBAL shape over named dims (dim ids index ir_module.dims) and a sharding:
 * for each of its dims an ordered list of mesh axes (major to minor, the seeds'
 * `I_XY`), plus the mesh axes over which it holds unreduced partial sums (the
 * seeds' `{U_X}`).  A dim sharded over axes (a1..an) is split into
 * |a1|*...*|an| blocks; the device with coordinates (c1..cn) on those axes
 * holds block c1*|a2|*...*|an| + ... + cn (a1 major).  Per-device (local)
 * shapes are derived: ir_local_size().
 *
 * Ownership: everything reachable from an ir_module (values, ops, strings,
 * arrays) is allocated in the module's arena and freed at once by
 * ir_module_free(); nothing in the IR is freed individually.
 *
 * Ops come from one X-macro list (IR_OPS) that generates the op enum and
 * each layer's table of op traits and hooks (ir_op_traits here; the cost
 * model's and codegen's own).  Every value keeps a use-list of the operand
 * slots that read it (ir_value.uses), kept by the builder functions below.
 *
 * This header is the IR's one public header; parts of it live in their own
 * files so that each is read on its own: elementwise expressions (ir_ew.h)
 * and the cost and plan annotations (ir_annot.h), which need nothing else,
 * are included first; shardings (ir_sharding.h), fusion and row groups
 * (ir_fusion.h), the verifier (ir_verify.h), training (ir_train.h) and
 * elementwise dtypes (ir_ew_dtype.h), which need the types here, at the
 * end.  Include ir.h, never those alone (ir_ew.h and ir_annot.h may
 * be).
 */
#ifndef EINC_IR_H
#define EINC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "diag.h"
#include "ir_annot.h"
#include "ir_ew.h"

#define IR_MAX_RANK 8      /* dims of one value */
#define IR_MAX_AXES 4      /* axes of the mesh */
#define IR_MAX_PHYS 3      /* physical (torus) axes one mesh axis may span */
#define IR_MAX_OPERANDS 8  /* operands of one op */
/* ir_op.u.coll.dim of a collective whose axes work along different dims
 * (their dims in u.coll.dims, u.coll.dims2). */
#define IR_COLL_PER_AXIS (-2)

/* Element types. */
typedef enum ir_dtype {
    IR_F32,  /* IEEE binary32 */
    IR_F64,  /* IEEE binary64 */
    IR_BF16, /* bfloat16 storage (8-bit exponent, 7-bit mantissa) */
    IR_I32,  /* 32-bit two's complement integer: only the indices of a gather (an input,
                or an elementwise op's integer expression, ir_ew_integer) */
    IR_I8,   /* 8-bit two's complement integer: quantized weights and KV caches for
                serving (seed 002); read only through a cast, or moved */
} ir_dtype;

/* Size of one element of `t` in bytes. */
size_t ir_dtype_size(ir_dtype t);
/* Source spelling of `t`: "f32", "f64", "bf16", "i32", "i8". */
const char *ir_dtype_name(ir_dtype t);
/* True for the integer dtypes (i32, i8): they carry no gradient, take no
 * arithmetic of their own and are never reduced. */
bool ir_dtype_integer(ir_dtype t);

/* A bit set of mesh axes: bit i is axis i of ir_mesh.axes. */
typedef uint32_t ir_axes;

/* One named mesh axis. */
typedef struct ir_axis {
    char name;    /* single letter, as in the seeds (X, Y, Z) */
    int64_t size; /* number of devices along the axis, >= 1 */
    uint32_t loc; /* byte offset of its definition in the source */
    int phys;     /* physical torus axes it spans (`over 2`), 1..IR_MAX_PHYS (seed 001) */
    bool dcn;     /* between pods, on the data-center network (`over dcn`, seed 000) */
} ir_axis;

/* The device mesh: a grid of prod(sizes) devices. */
typedef struct ir_mesh {
    int naxes;                     /* 0..IR_MAX_AXES */
    ir_axis axes[IR_MAX_AXES];     /* in declaration order */
    /* `mesh auto`: the program leaves the mesh and every sharding to
     * auto-sharding (`--chips N`), which adds the axes; auto_loc is the
     * byte offset of the word `auto`. */
    bool is_auto;
    uint32_t auto_loc;
} ir_mesh;

/* A named dim and its global size. */
typedef struct ir_dimdef {
    const char *name; /* arena-owned */
    int64_t size;     /* global size, >= 1 */
    uint32_t loc;     /* byte offset of its definition */
} ir_dimdef;

/* The operator that combines partial results over the devices of an
 * unreduced axis, and that an einsum reduces its contracted dims with. */
typedef enum ir_reduce {
    IR_RED_SUM, /* + : partial sums, the seeds' {U_X}; an ordinary einsum */
    IR_RED_MAX, /* max: partial maxima (a max reduction over a sharded dim) */
    IR_RED_MIN, /* min */
    IR_RED_ARGMAX, /* an einsum only: the i32 position of the first maximum along its one
                      contracted dim, which is not sharded (numpy.argmax: NaN counts as
                      the maximum); never a sharding's partial results */
} ir_reduce;

/* "sum", "max", "min", "argmax". */
const char *ir_reduce_name(ir_reduce r);

/* How one value is split over the mesh. */
typedef struct ir_sharding {
    uint8_t naxes[IR_MAX_RANK];           /* number of mesh axes sharding dim d */
    int8_t axes[IR_MAX_RANK][IR_MAX_AXES];/* axes[d][0..naxes[d]-1]: mesh axis ids, major to minor */
    ir_axes unreduced;                    /* axes holding unreduced partial results ({U_X}) */
    uint8_t red;                          /* ir_reduce combining them; meaningful only when
                                             unreduced != 0 (IR_RED_SUM otherwise) */
} ir_sharding;

/* A value's type: dtype, global dims and sharding. */
typedef struct ir_type {
    ir_dtype dtype;
    int rank;                 /* 0..IR_MAX_RANK */
    int dims[IR_MAX_RANK];    /* dim ids (ir_module.dims) of each position, global sizes */
    ir_sharding sh;
} ir_type;

/* Where a value comes from. */
typedef enum ir_value_kind {
    IR_VAL_INPUT, /* `input` declaration: read from the user at run time */
    IR_VAL_PARAM, /* `param` declaration: a weight (matters for autodiff) */
    IR_VAL_OP,    /* result of ir_value.def */
    IR_VAL_STATE, /* program state kept across runs: an optimizer's momentum, m, v and
                     step count (zero at the start, sharded like the param it belongs
                     to, overwritten at the end of each run by an update, ir_output),
                     or a `state` declaration (a KV cache: zero or loaded from .npy,
                     written in place by UpdateSlice) */
} ir_value_kind;

/* True for the values the runtime holds before the program runs: inputs,
 * params and state (everything but op results). */
static inline bool ir_value_kind_is_argument(ir_value_kind k)
{
    return k == IR_VAL_INPUT || k == IR_VAL_PARAM || k == IR_VAL_STATE;
}
/* "input", "param", "state" or "value". */
const char *ir_value_kind_name(ir_value_kind k);

struct ir_op;

/* One use of a value: operand `operand` of op `op`. */
typedef struct ir_use {
    struct ir_op *op;
    int operand;
} ir_use;

/* An SSA value.  Its printed name is `tensor` for version 0 and
 * `tensor.N` for version N (ir_value_name). */
typedef struct ir_value {
    int id;              /* dense index in ir_module.values */
    const char *tensor;  /* the source-level tensor it derives from (arena-owned) */
    int version;         /* 0 for the first value of `tensor`, then 1, 2, ... (ir_module_renumber) */
    ir_value_kind kind;
    ir_type type;
    struct ir_op *def;   /* defining op (IR_VAL_OP), else NULL */
    uint32_t loc;        /* byte offset of the source construct that made it */
    bool has_constraint; /* true: `constraint` is a full sharding constraint from the source */
    ir_sharding constraint; /* the sharding the user wrote on the left side */
    bool master;         /* an IR_VAL_STATE that is an optimizer's f32 master copy of a
                            param (`optimize ... master=f32`, passes/optimize.c): the
                            cost model counts it as master weights, not moments */
    int32_t update_check; /* an IR_VAL_PARAM in bf16 that SGD updates with no f32 master
                            copy: the 1-based step at which the executable counts the
                            elements its update left unchanged (the first at the peak
                            learning rate, after the warmup; runtime/update_check.c),
                            since lr times the gradient can round to nothing and only the
                            run knows the gradient.  0: not checked */
    /* Its use-list: one entry per operand slot that holds it in an op of the
     * module's op list, in no particular order (program outputs are not
     * uses: see ir_module.outputs).  Arena-owned; kept by ir_op_append,
     * ir_op_insert_*, ir_op_remove, ir_op_set_operand and ir_replace_uses,
     * and checked by ir_verify (docs/ir.md, "Use-lists"). */
    ir_use *uses;
    int nuses;
    int uses_cap;
} ir_value;


/* Trait bits of an op kind (ir_op_traits.traits). */
typedef enum ir_op_trait {
    IR_TRAIT_COMPUTE = 1u << 0, /* computes new data from its operands (FLOPs): Einsum,
                                   Elementwise, MeshSlice */
    IR_TRAIT_RESHARD = 1u << 1, /* changes a sharding rather than compute: the collectives
                                   and Slice */
    IR_TRAIT_LOOP = 1u << 2,    /* structures a repeated block (docs/ir.md, "Repeated blocks") */
    IR_TRAIT_INPLACE = 1u << 3, /* its result is operand 0's storage, written in place */
    IR_TRAIT_TRANSFER = 1u << 4, /* moves blocks point to point, sharding kept: CollectivePermute */
} ir_op_trait;

/*
 * The op list.  X(ENUM, "Name", arm, min, max, traits):
 *   ENUM     -> IR_OP_ENUM, "Name" is the op's name in --dump-ir and JSON,
 *   arm      -> the member of ir_op's union that holds its attributes, and
 *               the suffix of the op's hook in every layer's table (ir:
 *               ir_verify_<arm>, ir_print_<arm>, ir_json_<arm>; cost model:
 *               cost_op_<arm>; codegen: cg_check_<arm>, cg_run_<arm>), so an
 *               op with a new arm and a missing hook does not compile or link,
 *   min, max -> the number of operands it takes (checked by the verifier),
 *   traits   -> its ir_op_trait bits.
 * Adding an op: a row here, its arm in ir_op's union, and one function per
 * hook in each layer (docs/ir.md, "Adding an op").
 */
#define IR_OPS(X)                                                                     \
    X(EINSUM, "Einsum", einsum, 1, IR_MAX_OPERANDS, IR_TRAIT_COMPUTE)                 \
    X(ELEMENTWISE, "Elementwise", ew, 0, IR_MAX_OPERANDS, IR_TRAIT_COMPUTE)           \
    X(ALLGATHER, "AllGather", coll, 1, 1, IR_TRAIT_RESHARD)                           \
    X(REDUCESCATTER, "ReduceScatter", coll, 1, 1, IR_TRAIT_RESHARD)                   \
    X(ALLREDUCE, "AllReduce", coll, 1, 1, IR_TRAIT_RESHARD)                           \
    X(ALLTOALL, "AllToAll", coll, 1, 1, IR_TRAIT_RESHARD)                             \
    X(SLICE, "Slice", coll, 1, 1, IR_TRAIT_RESHARD)                                   \
    X(MESHSLICE, "MeshSlice", ms, 2, 2, IR_TRAIT_COMPUTE)                             \
    X(LOOPBEGIN, "LoopBegin", loop, 1, 1, IR_TRAIT_LOOP)                              \
    X(LOOPEND, "LoopEnd", loop, 1, 1, IR_TRAIT_LOOP)                                  \
    X(LAYERSLICE, "LayerSlice", loop, 1, 1, IR_TRAIT_LOOP)                            \
    X(LAYERSTACK, "LayerStack", loop, 1, 1, IR_TRAIT_LOOP)                            \
    X(UPDATESLICE, "UpdateSlice", update, 3, 3, IR_TRAIT_INPLACE)                     \
    X(GRAD, "Grad", grad, 2, 2, 0)                                                    \
    X(PERMUTE, "CollectivePermute", perm, 1, 1, IR_TRAIT_TRANSFER)

typedef enum ir_op_kind {
#define X(e, s, arm, lo, hi, tr) IR_OP_##e,
    IR_OPS(X)
#undef X
    IR_OP_COUNT
} ir_op_kind;

/* "Einsum", "AllGather", ... */
const char *ir_op_name(ir_op_kind k);
/* True for AllGather, ReduceScatter, AllReduce, AllToAll and Slice: the
 * ops that change a sharding rather than compute. */
bool ir_op_is_reshard(ir_op_kind k);
/* True for a resharding op that is linear in its operand: AllGather,
 * Slice, AllToAll, and AllReduce / ReduceScatter that sum (not a max or
 * min), so it commutes with a sum over microbatches. */
bool ir_op_is_linear_reshard(const struct ir_op *op);
/* The storage an UpdateSlice writes, through earlier UpdateSlices and a
 * LayerSlice: the state value, or NULL if operand 0 of `op` leads to none. */
const struct ir_value *ir_update_target(const struct ir_op *op);
/* True for LoopBegin, LoopEnd, LayerSlice and LayerStack: the ops that
 * structure a repeated block rather than compute (docs/ir.md, "Repeated
 * blocks"). */
bool ir_op_is_loop(ir_op_kind k);

/* The 2D GEMM dataflows of seed 004 (Fig. 1, Table 1), named by the
 * matrix that stays on its devices. */
typedef enum ir_ms_dataflow {
    IR_MS_OS, /* output-stationary (C-stn): AllGather A and B, split the contracting dim */
    IR_MS_LS, /* left-stationary (A-stn): AllGather B, ReduceScatter C, split a free dim of B */
    IR_MS_RS, /* right-stationary (B-stn): AllGather A, ReduceScatter C, split a free dim of A */
} ir_ms_dataflow;

/* "OS", "LS", "RS". */
const char *ir_ms_dataflow_name(ir_ms_dataflow df);

/* One partial collective of a MeshSlice loop: in every iteration it moves
 * sub-shard k of one matrix over one mesh axis. */
typedef struct ir_ms_move {
    ir_op_kind kind; /* IR_OP_ALLGATHER (an operand, before the partial GEMM) or
                        IR_OP_REDUCESCATTER (the result, after it) */
    int operand;     /* 0 (A) or 1 (B) for an AllGather, -1 (the result) for a ReduceScatter */
    int axis;        /* the mesh axis it runs over */
    int dim;         /* position of the split dim in that operand / the result */
} ir_ms_move;

/* Which part of a training step an op belongs to (docs/ir.md): the
 * program as written, the backward pass that grad or optimize derived, or
 * the optimizer's update.  Ops a pass inserts take the phase of the op
 * they are inserted next to (ir_op_insert_before / _after). */
typedef enum ir_phase {
    IR_PHASE_FORWARD,
    IR_PHASE_BACKWARD,
    IR_PHASE_UPDATE,
} ir_phase;

/* "forward", "backward", "update". */
const char *ir_phase_name(ir_phase p);


/* The attributes of the resharding ops (ir_op.u.coll, and the steps of the
 * resharding planner, passes/reshard.h).  `axes` are mesh axes in order
 * (major to minor); the group is every device that shares the other mesh
 * coordinates.
 *  AllGather:     removes `axes` (the minor-most of dim `dim`) from dim `dim`.
 *  ReduceScatter: removes `axes` from unreduced, appends them to dim `dim`.
 *  AllReduce:     removes `axes` from unreduced (dim unused, -1).
 *  AllToAll:      removes `axes` from dim `dim` (minor-most), appends them
 *                 to dim `dim2`.
 *  Slice:         appends `axes` to dim `dim`; no communication.
 * AllReduce and ReduceScatter combine with `reduce`, which is the operand's
 * sharding.red.  `dim`/`dim2` are positions in the value's dims.
 *
 * One op may also work along a different dim per axis (seed 001's
 * AllGather_XY of [B_X, D_Y] -> [B, D]: X gathered along B, Y along D, in
 * one collective over the group X x Y).  Then `dim` is IR_COLL_PER_AXIS and
 * axes[k] works along position dims[k] (an AllToAll appends it to position
 * dims2[k]): the rule above holds for each dim with the axes that name it,
 * in their listed order, so an AllGather's axes along one dim are that
 * dim's minor-most axes in order, and a ReduceScatter, Slice or AllToAll
 * appends them in order.  An AllToAll's destination dims are none of its
 * source dims.  At least two dims differ (one dim is written in `dim`).
 * Read both encodings with ir_coll_dim / ir_coll_dim2. */
typedef struct ir_coll {
    int naxes;                 /* 1..IR_MAX_AXES */
    int8_t axes[IR_MAX_AXES];  /* mesh axis ids; the group rank is mixed radix over them */
    int dim;                   /* the dim of every axis, IR_COLL_PER_AXIS, or -1 (AllReduce) */
    int dim2;                  /* AllToAll: the dim receiving every axis; else -1 */
    int8_t dims[IR_MAX_AXES];  /* dim == IR_COLL_PER_AXIS: the dim of axes[k] */
    int8_t dims2[IR_MAX_AXES]; /* ... and for an AllToAll the dim receiving axes[k], else -1 */
    ir_reduce reduce;          /* AllReduce, ReduceScatter: the combining operator */
} ir_coll;

/* One op.  Operand i is `operands[i]`; for Einsum and Elementwise,
 * `labels[i][j]` is the dim id that indexes position j of operand i (equal
 * to the operand value's own dim id unless the source relabels it) and
 * `result_labels` those of the result. */
typedef struct ir_op {
    ir_op_kind kind;
    struct ir_op *prev, *next;          /* program order */
    int noperands;
    ir_value *operands[IR_MAX_OPERANDS];
    /* While the op is linked: where its use of operand i sits in
     * operands[i]->uses, so that dropping the use takes O(1). */
    int use_index[IR_MAX_OPERANDS];
    ir_value *result;
    uint32_t loc;                       /* byte offset of the source statement */
    /* Provenance of ops inserted by passes: the op and operand index they were
     * inserted for (for_operand = -1: for the op's result), and a sentence
     * saying why (arena-owned, NULL for ops written by the user). */
    struct ir_op *for_op;
    int for_operand;
    const char *reason;
    ir_cost cost;
    /* The LoopBegin of the repeated block whose body holds this op, or NULL
     * outside every loop (LoopBegin and LoopEnd themselves are outside).
     * Kept by ir_op_append / ir_op_insert_before / ir_op_insert_after, so an
     * op a pass inserts between two body ops is in the body too. */
    struct ir_op *loop;
    ir_phase phase;                     /* forward, backward or update */
    /* A copy of a forward op that the backward pass computes again rather
     * than keeping its result (--remat): its FLOPs are executed but are no
     * model FLOPs (seed 003 counts each FLOP of a training step once). */
    bool remat;
    union {
        /* IR_OP_EINSUM: result = scale * (reduction over labels not in the
         * result of the product of the operands) (1 to IR_MAX_OPERANDS;
         * propagate makes every einsum binary or unary).  The reduction is a
         * sum, or for a unary einsum also max or min (`max(x)`, `min(x)` in
         * the source): einsum over the (max, *) or (min, *) semiring. */
        struct {
            int labels[IR_MAX_OPERANDS][IR_MAX_RANK];
            int result_labels[IR_MAX_RANK];
            double scale; /* constant factor folded from the source term */
            ir_reduce reduce; /* IR_RED_SUM, or MAX / MIN with one operand */
            /* A gather (`Emb[Tok[B, T], D]`) is the einsum of a one-hot and
             * the table: operand 0 holds i32 indices into the first dim of
             * operand 1, whose label `gather_label` no other operand or the
             * result has; result = sum_v [ids == v] * table[v, ...].  So a
             * table sharded on that dim gives a masked local lookup and
             * partial sums (Megatron's vocab-parallel embedding), by the
             * einsum rule.  The result's labels are the indices' then the
             * table's others, in order. */
            bool gather;
            int gather_label;
            /* A gather whose index outside [0, |gather_label|) gives a row
             * of zeros instead of ending the run: the value of the masked
             * sum `sum(where(S == e, X[S, ...], 0), S)` that the
             * select-gather pass rewrites into this gather
             * (passes/select_gather.c), kept exactly.  False for the
             * gathers the source writes (`Emb[Tok[B, T], D]`), where an
             * index out of range is a bug worth a message. */
            bool gather_zero_outside;
            /* A scatter-add, the gather's adjoint (scatter = true, gather
             * false): operand 0 the i32 indices, operand 1 one row per
             * index (the indices' labels, then the table's others), and
             * the result table-shaped with `gather_label` (its first dim)
             * in no operand: result[v, ...] = sum_i [ids[i] == v] *
             * rows[i, ...].  The indices' dims are contracted, so rows
             * sharded along them give partial sums {U} by the einsum rule;
             * the table dim is computed whole on every device. */
            bool scatter;
        } einsum;
        /* IR_OP_ELEMENTWISE: result[r] = expr(operands broadcast to r). */
        struct {
            int labels[IR_MAX_OPERANDS][IR_MAX_RANK];
            int result_labels[IR_MAX_RANK];
            int nnodes;
            ir_ew_node *nodes; /* arena-owned, nodes[root] is the result */
            int root;
        } ew;
        ir_coll coll; /* the resharding ops: AllGather, ReduceScatter, AllReduce, AllToAll, Slice */
        /* IR_OP_MESHSLICE: result = einsum(A, B) as seed 004's MeshSlice loop
         * (Fig. 5): operands are the stationary-layout shards A and B as they
         * were before propagate's AllGathers, the result is the einsum's value
         * after propagate's ReduceScatter.  For k = 0..K-1: AllGather
         * sub-shard k of each moving operand, partial einsum, ReduceScatter
         * the partial result into sub-shard k of the result (software
         * pipelined).  Sub-shard k of a per-device block of size L along the
         * split dim is its blocks of `block` elements whose index j has
         * j mod K == k (blocked slicing, seed 004 Algorithm 2).  The first
         * three members mirror the einsum arm, so label helpers apply. */
        struct {
            int labels[IR_MAX_OPERANDS][IR_MAX_RANK]; /* as einsum.labels (2 operands) */
            int result_labels[IR_MAX_RANK];           /* as einsum.result_labels */
            double scale;                             /* as einsum.scale */
            ir_ms_dataflow dataflow;                  /* which matrix stays */
            int k;                                    /* slices K >= 1 (1: Collective 2D GEMM) */
            int block;                                /* elements per slicing block along the split dim */
            int row_axis;                             /* mesh axis of the mesh rows (along a column) */
            int col_axis;                             /* mesh axis of the mesh columns (along a row) */
            int split_label;                          /* dim id that is sliced */
            int nmoves;                               /* entries of `moves`: 2 */
            ir_ms_move moves[2];                      /* the partial collectives of one iteration */
        } ms;
        /* IR_OP_LOOPBEGIN, IR_OP_LOOPEND, IR_OP_LAYERSLICE: a repeated block
         * (`repeat L { ... }`), run once per index l = 0 .. |L|-1 of dim
         * `dim`.  The ops strictly between `begin` and `end` are the body.
         *  LoopBegin:  result = the loop-carried value at the top of each
         *              iteration; operand 0 is its value before the loop
         *              (the first iteration's).  Same type as operand 0.
         *  LoopEnd:    operand 0 is the body's new value of the carried
         *              value (the next iteration's, with begin's result's
         *              sharding); the result is the value after the loop.
         *  LayerSlice: result = operand 0 (an input or param whose first
         *              dim is `dim`, not sharded, or the result of a
         *              LayerStack of an earlier loop over `dim`) at index
         *              l: a view of its l-th block, no copy; its type is
         *              the operand's without the first dim.
         *  LayerStack: in a body; result = the values operand 0 (a body
         *              value) takes in all iterations, stacked on a new
         *              first dim `dim` (not sharded; the other dims keep
         *              operand 0's sharding, which holds no partial sums).
         *              Iteration l copies operand 0 into block l of the
         *              result, a buffer made before the loop; the result
         *              is read only after the loop (a scan's stacked
         *              output: the activations a backward loop reads).
         * With `reverse` set on the LoopBegin, iteration i of the loop is
         * layer l = |L| - 1 - i: LayerSlice and LayerStack index layer l,
         * so a backward loop visits the layers last to first. */
        struct {
            int dim;             /* dim id (ir_module.dims) counting the iterations */
            bool reverse;        /* (LoopBegin) the layers run last to first */
            struct ir_op *begin; /* the loop's LoopBegin (itself for a LoopBegin) */
            struct ir_op *end;   /* the loop's LoopEnd (itself for a LoopEnd) */
        } loop;
        /* IR_OP_UPDATESLICE: a write into program state at a position known
         * only at run time (a KV cache's new token; XLA's
         * DynamicUpdateSlice, done in place).  Operand 0 is the storage
         * written: a state value, a LayerSlice of one, or the result of an
         * earlier UpdateSlice of it; operand 1 the new slice, operand 0's
         * type without position `dim` (same sharding on the other dims,
         * nothing unreduced); operand 2 the position, a replicated i32
         * scalar.  result[..., p, ...] = operand 1 where p = operand 2, the
         * other elements operand 0's.  The result is operand 0's storage,
         * written in place: so after the op nothing reads operand 0, and
         * the state holds the write when the run ends (no update output).
         * On a sharded `dim` only the device whose block holds p writes.  A
         * position outside [0, |dim|) ends the run with an error.  A window
         * write has operand 1 of operand 0's rank, with a window dim of w
         * positions (unsharded) in place of `dim`: its row t goes to p + t,
         * and p + w must not pass |dim|.  A per-row write (`row` >= 0,
         * continuous batching: each slot of a batch at its own position)
         * has operand 2 an i32 vector over operand 0's dim `row` (< `dim`),
         * replicated or split like that dim: row b goes to operand2[b]
         * (a window's row t to operand2[b] + t, inside the dim). */
        struct {
            int dim; /* position in operand 0's dims that operand 2 indexes */
            int row; /* per-row write: position in operand 0's dims of operand 2's
                        only dim; -1 when operand 2 is a scalar */
        } update;
        /* IR_OP_GRAD: result = dL/dW, the gradient of operand 0 (the loss L,
         * a float scalar) with respect to operand 1 (W, a float tensor of
         * the result's dims and dtype), through the ops before this one.
         * The frontend writes one for each `grad(L, W)` statement and each
         * param an `optimize` line names; the autodiff pass replaces them
         * all by the backward ops (passes/autodiff.c), so no other pass and
         * no codegen ever sees one.  A constraint on the result is the
         * gradient's sharding. */
        struct {
            /* Unless a constraint of a Grad of the same W says otherwise,
             * the gradient is sharded like W (seed 000: FSDP's gradients
             * come out by ReduceScatter): set by the frontend for a grad
             * statement without a written sharding and for an optimized
             * param, in the sharded program (not its single-device
             * reference). */
            bool shard_like_w;
            /* Made for an `optimize` line (sharded program): a zero
             * gradient (the loss does not depend on W) is warned about at
             * `name_loc`, the param's name on that line. */
            bool optimize;
            uint32_t name_loc;
        } grad;
        /* IR_OP_PERMUTE: XLA's CollectivePermute along mesh axis `axis`:
         * the device at coordinate z sends its block of operand 0 to
         * z + delta (the other coordinates equal), where it is the
         * result's block; the pairs are every z with z + delta on the axis
         * (or all z, mod |axis|, when `cyclic`), and a device no pair sends
         * to holds zeros.  Same type and sharding as the operand, which
         * the axis neither splits nor holds partial over.  Only the
         * pipeline pass makes one, at a stage boundary (docs/pipeline.md,
         * "The transfers as ops"). */
        struct {
            int axis;    /* mesh axis id */
            int delta;   /* the shift, 1 <= |delta| < |axis| */
            bool cyclic; /* the pairs wrap around the axis (a ring) */
        } perm;
    } u;
} ir_op;

/* Position of the dim that axis k (0 <= k < naxes) of resharding op arm
 * `c` works along: the one it is gathered along, scattered or sliced into,
 * or (AllToAll) taken from; -1 for an AllReduce.  Reads both encodings of
 * the coll arm. */
static inline int ir_coll_dim(const ir_coll *c, int k)
{
    return c->dim == IR_COLL_PER_AXIS ? c->dims[k] : c->dim;
}
/* AllToAll: position of the dim axis k is appended to; -1 for other kinds. */
static inline int ir_coll_dim2(const ir_coll *c, int k)
{
    return c->dim == IR_COLL_PER_AXIS ? c->dims2[k] : c->dim2;
}
/* Sets the dims of resharding op arm `c` (naxes set) from one dim per axis
 * (dims2 for an AllToAll, else NULL): `dim`/`dim2` when every axis has the
 * same, else IR_COLL_PER_AXIS with the per-axis arrays (the two encodings
 * above). */
void ir_coll_set_dims(ir_coll *c, const int8_t *dims, const int8_t *dims2);

/* A program output: a value and, if `has_constraint`, the sharding it must
 * have (written as `output NAME[dims]`).  An output with `update` set is
 * not returned to the user: its value overwrites the param or state
 * `update` at the end of the run (a training step's new weights and
 * optimizer state), so it has update's dims, dtype and sharding (the
 * constraint), and `name` is update's tensor. */
typedef struct ir_output {
    const char *name;     /* the tensor name (arena-owned) */
    ir_value *value;      /* the value that holds it; passes update this */
    bool has_constraint;
    ir_sharding constraint;
    uint32_t loc;
    ir_value *update;     /* the IR_VAL_PARAM or IR_VAL_STATE value it overwrites, or NULL */
} ir_output;


#include "ir_pipeline.h"

/* What the backward pass keeps from the forward pass and what it computes
 * again (`einc --remat=`; docs/language.md, "Rematerialisation"): memory
 * traded for FLOPs, seed 003's activation checkpointing.  The autodiff
 * pass reads it (ir_module.remat). */
typedef enum ir_remat {
    IR_REMAT_NONE,        /* keep every forward value the backward pass reads */
    IR_REMAT_ELEMENTWISE, /* recompute elementwise results from their operands */
    IR_REMAT_LAYER,       /* in a repeated block keep only each layer's input and
                             recompute the layer in the backward loop */
} ir_remat;

/* A whole program. */
typedef struct ir_module {
    ir_arena arena;           /* owns everything below */
    const char *filename;     /* for diagnostics and dumps */
    ir_mesh mesh;
    int ndims;
    ir_dimdef *dims;          /* ndims entries; grows with ir_dim_add */
    int dims_cap;
    int nvalues;
    ir_value **values;        /* by id; grows with ir_value_new */
    int values_cap;
    ir_op *first, *last;      /* ops in program order */
    int noutputs;
    ir_output *outputs;       /* in declaration order */
    int outputs_cap;
    const char *loss;         /* training: the output named by `loss`, NULL if none */
    /* training: every optimized param's optimizer and hyperparameters, one
     * line each ("W adamw lr=0.001 beta1=0.9 ...\n", frontend/optimize.c), which
     * checkpoints record; NULL if none */
    const char *hparams;
    /* training: the `optimize` lines, in source order, until the optimize
     * pass lowers them (it then sets nopt_lines to 0) */
    struct ir_opt_line *opt_lines; /* (ir_train.h) */
    int nopt_lines;
    /* The single-device reference of the executable's --check: gradients
     * get no shardings and training gives no warnings (the program the
     * user wrote already gave them). */
    bool reference;
    ir_remat remat;           /* what the autodiff pass computes again */
    ir_totals totals;
    ir_plan_cert plan;
    /* ir_einsum_unrolled_terms's bound on the products summed per element: IR_EINSUM_UNROLL_MAX,
     * or --einsum-unroll=N (0: every binary einsum a GEMM, bench/small_contraction.py's baseline). */
    int einsum_unroll_max;
    /* Per-device bytes of a result from which codegen writes it with non-temporal
     * stores (priced so): IR_STREAM_MIN_BYTES, or --stream-min (INT64_MAX: never). */
    int64_t stream_min_bytes;
    bool no_cast_fold; /* --fold-casts=off: ir_folded_cast_source gives NULL */
    bool no_pos_bound; /* --pos-bound=off: ir_einsum_pos_bound gives false */
    ir_pipeline pipe;         /* pipeline parallelism, pipe.axis = -1 if none */
} ir_module;

/* The local trip count of loop `begin` (a LoopBegin): |L| / Z on a
 * pipelined layer dim (each stage runs its own layers), else |L|. */
int64_t ir_loop_trips(const ir_module *m, const ir_op *begin);
/* Whether a stacked value's first dim, the layer dim `dim` of a repeat
 * (a LayerSlice's operand, a LayerStack's result), is split as it may be:
 * not at all, or over the pipeline's axis alone when `dim` is the
 * pipelined layer dim (each stage holds its own layers). */
bool ir_stack_split_ok(const ir_module *m, const ir_type *t, int dim);


/* ---- module, dims, values, ops (builder.c) ---- */

/* A new empty module.  `filename` is copied.  Free with ir_module_free. */
ir_module *ir_module_new(const char *filename);
void ir_module_free(ir_module *m);

/* Adds a mesh axis; returns its id or -1 if the mesh is full. */
int ir_mesh_add_axis(ir_module *m, char name, int64_t size, uint32_t loc);
/* Mesh axis id of `name`, or -1. */
int ir_mesh_find_axis(const ir_mesh *mesh, char name);
/* Number of devices: product of all axis sizes. */
int64_t ir_mesh_devices(const ir_mesh *mesh);
/* Product of the sizes of the axes in `set`. */
int64_t ir_mesh_axes_size(const ir_mesh *mesh, ir_axes set);

/* Adds a dim (name copied); returns its id. */
int ir_dim_add(ir_module *m, const char *name, int64_t size, uint32_t loc);
/* Dim id of `name` (length `len`), or -1. */
int ir_dim_find(const ir_module *m, const char *name, size_t len);

/* A new value owned by the module; `tensor` is copied.  The version is set
 * by ir_module_renumber (called by the printers). */
ir_value *ir_value_new(ir_module *m, const char *tensor, ir_value_kind kind,
                       const ir_type *type, uint32_t loc);

/* A new op, not yet in the list; operands copied from `operands`.  Until
 * the op is linked its operands may be written directly (they are no uses
 * yet); after, only through ir_op_set_operand. */
ir_op *ir_op_new(ir_module *m, ir_op_kind kind, int noperands,
                 ir_value *const *operands, ir_value *result, uint32_t loc);
/* Links `op` at the end / before `before` / after `after`; sets result->def
 * and adds its operands' uses.  `op` must not be in the list. */
void ir_op_append(ir_module *m, ir_op *op);
void ir_op_insert_before(ir_module *m, ir_op *before, ir_op *op);
void ir_op_insert_after(ir_module *m, ir_op *after, ir_op *op);
/* Unlinks `op` and drops its operands' uses (its memory stays in the
 * arena; it may be linked again). */
void ir_op_remove(ir_module *m, ir_op *op);
/* Sets operand `i` (< op->noperands) of `op` to `v`, moving the use when
 * `op` is in the list. */
void ir_op_set_operand(ir_module *m, ir_op *op, int i, ir_value *v);
/* Appends a Grad op (dL/dW of scalar `loss` with respect to `w`, ir.h)
 * at `loc`; its result, named `tensor` (copied), has w's dims and dtype
 * and is replicated.  Returns the op (its grad attributes zero). */
ir_op *ir_grad_append(ir_module *m, const char *tensor, ir_value *loss, ir_value *w, uint32_t loc);
/* Replaces every use of `from` after op `after` (NULL: everywhere) by `to`,
 * including program outputs. */
void ir_replace_uses(ir_module *m, ir_value *from, ir_value *to, ir_op *after);
/* Number of times `op` runs in one step: the size of its loop's dim for an
 * op in a repeated block's body (op->loop), else 1. */
int64_t ir_op_trips(const ir_module *m, const ir_op *op);
/* Sets `op`'s provenance: inserted for operand `operand` of `for_op`, with a
 * printf-formatted reason (copied into the arena). */
void ir_op_set_reason(ir_module *m, ir_op *op, ir_op *for_op, int operand,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Sets the phase of every op after `after` (NULL: every op) to `p`. */
void ir_set_phase_after(ir_module *m, ir_op *after, ir_phase p);
/* Adds an output. */
ir_output *ir_output_add(ir_module *m, const char *name, ir_value *v, uint32_t loc);
/* Adds the update of param or state `target` to `v` at the end of the run:
 * an output named after target, constrained to target's sharding. */
ir_output *ir_update_add(ir_module *m, ir_value *target, ir_value *v, uint32_t loc);

/* Recomputes ir_value.version: in program order, the k-th value of a tensor
 * gets version k (inputs and params first). */
void ir_module_renumber(ir_module *m);
/* Writes the printed name of `v` ("Win", "Win.1") into buf; returns buf. */
const char *ir_value_name(const ir_value *v, char *buf, size_t size);


/* ---- printers (print.c, print_json.c) ---- */

/* --dump-ir text format (docs/ir.md): one op per line in the seeds' notation,
 * with reasons and costs as trailing comments. */
void ir_print(FILE *out, ir_module *m);
/* --dump-ir=json (docs/ir.md). */
void ir_print_json(FILE *out, ir_module *m);
/* "plan 45.2 ms, proven optimal among 1,769 candidate layouts; lower bound
 * 19.1 ms (plan/bound 2.37)": the planner's certificate (m->plan) and the
 * cost pass's lower bound (m->totals.bound_serial), then what the HBM
 * decided ("; memory-bound: ..."), into buf; empty when the planner left
 * none (plan_cert.c).  IR_PLAN_CERT_MAX bytes hold the longest. */
void ir_plan_cert_str(const ir_module *m, char *buf, size_t size);
#define IR_PLAN_CERT_MAX 1024

/* ---- op traits (op_traits.c) ---- */

struct cJSON;

/* What the ir layer knows of one op kind: a row of IR_OPS and its hooks.
 * Layers above ir (cost model, codegen) keep their own tables indexed by
 * ir_op_kind, generated from IR_OPS the same way. */
typedef struct ir_op_traits {
    const char *name;  /* "Einsum", ...: --dump-ir and JSON */
    int min_operands;  /* the verifier reports an op with fewer ... */
    int max_operands;  /* ... or more operands */
    unsigned traits;   /* ir_op_trait bits */
    /* The result sharding the op must have given its operands' (the
     * verifier compares it with the result's), into *out; false with a
     * reason in `why` when the op is malformed or not locally computable.
     * Called with operands already checked (defined, valid values). */
    bool (*verify)(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                   size_t why_size);
    /* Writes the op's right-hand side in --dump-ir text (after "R = ",
     * before the trailing comment), operands included. */
    void (*print)(FILE *out, const ir_module *m, const ir_op *op);
    /* Adds the op's attributes to its --dump-ir=json object `o` (and its
     * mesh axes to `axes`); `order` holds the module's nops ops in program
     * order, for attributes that name other ops by index. */
    void (*json)(const ir_module *m, const ir_op *op, struct cJSON *o, struct cJSON *axes,
                 const ir_op *const *order, int nops);
} ir_op_traits;

/* Where CollectivePermute `op` sends the block of the device at coordinate
 * `z` of its axis: the target's coordinate, or -1 for none (permute.c). */
int ir_perm_target(const ir_module *m, const ir_op *op, int z);

/* The traits of kind `k`, or NULL for a value outside ir_op_kind. */
const ir_op_traits *ir_op_traits_of(ir_op_kind k);
/* True if kind `k` has every bit of `trait` (false for unknown kinds). */
bool ir_op_has_trait(ir_op_kind k, unsigned trait);

/* The parts of this header that need the types above. */
#include "ir_sharding.h"
#include "ir_fusion.h"
#include "ir_verify.h"
#include "ir_train.h"
#include "ir_ew_dtype.h"

#endif
