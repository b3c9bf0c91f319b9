/*
 * einrt.h - the ABI between code emitted by einc and the runtime library.
 *
 * An einc executable is one object file from codegen plus libeinrt (threads
 * backend) or libeinrt_mpi (MPI backend), OpenBLAS and libm.  The object file
 * defines one constant `rt_program` named `einc_program`; the runtime defines
 * main(), which parses the command line, sets up one device per mesh position
 * (a thread, or an MPI rank), reads each device's shard of every input,
 * calls `program->run` on every device (SPMD: the same code everywhere), and
 * writes the outputs.
 *
 * Layout: a per-device buffer holds the device's block of a value in row-major
 * order over the value's dims (local shape).  A dim sharded over mesh axes
 * (a1..an) is cut into |a1|*...*|an| equal blocks; the device whose
 * coordinates on those axes are (c1..cn) holds block
 * ((c1*|a2| + c2)*|a3| + ...) + cn, i.e. a1 is the major axis (seed 001,
 * "A[I_XY, J]": the order of subscripts is the traversal order).
 *
 * Every descriptor below is emitted by codegen as a constant global; the
 * runtime only reads it.  Shapes in descriptors are PER-DEVICE unless named
 * `global_*`.  All sizes are in elements unless named `*_bytes`.
 *
 * Errors: any runtime function that fails (bad descriptor, out of memory, a
 * peer that died) ends the whole job with a message on stderr and exit status
 * 1 (MPI_Abort on the MPI backend); none returns an error code.
 */
#ifndef EINC_EINRT_H
#define EINC_EINRT_H

#include <stdint.h>

#define RT_ABI_VERSION 2
#define RT_MAX_RANK 8
#define RT_MAX_AXES 4

/* Element types, same numbering as ir_dtype. */
enum rt_dtype {
    RT_F32 = 0,
    RT_F64 = 1,
    RT_BF16 = 2, /* stored as the upper 16 bits of an f32; arithmetic in f32 */
    RT_I32 = 3,  /* int32: only the indices of a gather (.npy '<i4') */
    RT_I8 = 4,   /* int8: quantized weights and KV caches (.npy '|i1'); only moved
                    or converted, never reduced */
};

/* Collective and resharding kinds, same meaning as the IR ops.  With
 * `dim` = RT_DIM_PER_AXIS each axis works along its own dim (rt_coll_desc):
 * "along `dim`" below then means along every dim, by the block numbering
 * given there. */
enum rt_coll_kind {
    RT_ALLGATHER = 0,     /* out dim `dim` = concat over the group, in group-rank order */
    RT_REDUCESCATTER = 1, /* out = block `group rank` along `dim` of the reduction
                             (`reduce_op`) over the group */
    RT_ALLREDUCE = 2,     /* out = reduction (`reduce_op`) over the group (same shape) */
    RT_ALLTOALL = 3,      /* split `dim2` into G blocks, block j goes to group rank j,
                             received blocks concatenated along `dim` in group-rank order */
    RT_SLICE = 4,         /* out = block `group rank` along `dim`; no communication */
};

/* rt_coll_desc.dim of a collective whose axes work along different dims
 * (seed 001's AllGather_XY of [B_X, D_Y]): axes[k] works along
 * axis_dim[k] (and an AllToAll's along axis_dim2[k]). */
#define RT_DIM_PER_AXIS (-2)

/* The element-wise reduction of AllReduce and ReduceScatter (rt_coll_desc
 * `reduce_op`).  MAX and MIN follow numpy.maximum / numpy.minimum: a NaN in
 * any member's element makes that element NaN; otherwise the result is
 * exactly one of the inputs (bf16 compared in f32), so no rounding happens
 * and every member of the group gets the same bits.  A max reduction over a
 * sharded dim (a numerically stable softmax) is finished with
 * AllReduce(MAX). */
enum rt_reduce_op {
    RT_REDUCE_SUM = 0, /* the sum (bf16 summed in f32) */
    RT_REDUCE_MAX = 1, /* the largest element (NaN if any member's is NaN) */
    RT_REDUCE_MIN = 2, /* the smallest element (NaN if any member's is NaN) */
};

/* What an entry of rt_program.inputs is (rt_tensor_desc `role`). */
enum rt_tensor_role {
    RT_ROLE_INPUT = 0, /* `input`: data, given by --input (or --data for a training program) */
    RT_ROLE_PARAM = 1, /* `param`: a weight; a training program updates it in place */
    RT_ROLE_STATE = 2, /* program state kept across calls (an optimizer's momentum, m, v, step
                          count): zero at start unless --input gives it, updated in place by
                          `run`, sharded like the param it belongs to */
};

/* Opaque per-device context, created by the runtime and passed to `run`. */
typedef struct rt_device rt_device;

/* One tensor of the program interface (an input, param or output). */
typedef struct rt_tensor_desc {
    const char *name;                  /* source tensor name */
    int32_t dtype;                     /* enum rt_dtype */
    int32_t rank;
    int64_t global_shape[RT_MAX_RANK];
    int64_t local_shape[RT_MAX_RANK];  /* per-device block */
    /* dim_axes[d][k], k < dim_naxes[d]: mesh axes sharding dim d, major to minor */
    int32_t dim_naxes[RT_MAX_RANK];
    int32_t dim_axes[RT_MAX_RANK][RT_MAX_AXES];
    int32_t role;                      /* enum rt_tensor_role; RT_ROLE_INPUT for outputs */
    /* RT_I32 inputs: the indices must lie in [0, index_bound) (the size of
     * the dim they look up, or of the dim a state write puts them on),
     * which --random-inputs draws from; 0 otherwise.
     * Added in the struct's tail padding: size and offsets unchanged. */
    int32_t index_bound;
    /* 1: an RT_I32 input that gives a state write one position per row
     * (`KC[B, At[B], K, H]`), which --generate and --serve feed per slot;
     * 0 otherwise.  Appended: earlier members keep their offsets. */
    int32_t row_positions;
    /* A param: the 1-based step at which a training run counts the
     * elements of its block that the step left unchanged, and warns when
     * they are most of them (an SGD update of a bf16 param that rounds to
     * nothing; runtime/update_check.c); 0: not checked.  Appended. */
    int32_t update_check;
    /* v >= 2: dim 0 (a stacked tensor's layer dim under the interleaved
     * pipeline schedule, docs/pipeline.md) is dealt block-cyclically over
     * the G blocks of its axes: the global dim is G v blocks of
     * local_shape[0] / v rows, block q on the device whose block index
     * along dim 0 is q mod G, at its local rows (q div G) local_shape[0]/v;
     * so device group g holds blocks g, g + G, ..., g + (v-1) G (model
     * chunks).  0 or 1: one block per device, as for every other dim
     * (rt_block_start).  Appended: earlier members keep their offsets. */
    int32_t cyclic_blocks;
} rt_tensor_desc;

/* A collective or Slice over the group of devices that share every mesh
 * coordinate except those of `axes`.  The group rank of a device is the
 * mixed-radix number of its coordinates on axes[0..naxes-1] (axes[0] major).
 * G = product of those axes' sizes.  AllReduce and ReduceScatter combine
 * the members' elements with `reduce_op`; any other kind requires 0.
 *
 * Per-axis dims (`dim` = RT_DIM_PER_AXIS): the block of a group member
 * along dim d is the mixed-radix number of its coordinates on the axes k
 * with axis_dim[k] == d, in the order of `axes` (the first major), and G_d
 * is the product of their sizes; with one dim for every axis that is the
 * group rank and G.  Then, per device (shapes per device):
 *   AllGather      out[d] = G_d * in[d]; member r's input is its block of out
 *   ReduceScatter  in[d] = G_d * out[d]; out = this device's block of the
 *                  reduction over the group
 *   Slice          in[d] = G_d * out[d]; out = this device's block of in
 *   AllToAll       out[d] = G_d * in[d] on the axis_dim dims, which grow, and
 *                  in[e] = G2_e * out[e] on the axis_dim2 dims, which are
 *                  split (blocks numbered as above over the axes with
 *                  axis_dim2[k] == e); member r sends this device its block
 *                  along the split dims numbered by this device's
 *                  coordinates, which lands at member r's block along the
 *                  grown dims.  No dim both grows and is split. */
typedef struct rt_coll_desc {
    int32_t kind;                  /* enum rt_coll_kind */
    int32_t dtype;                 /* enum rt_dtype */
    int32_t naxes;
    int32_t axes[RT_MAX_AXES];
    int32_t rank;
    int64_t in_shape[RT_MAX_RANK]; /* per-device input shape */
    int64_t out_shape[RT_MAX_RANK];/* per-device output shape */
    int32_t dim;                   /* AG/RS/Slice: the dim; AllToAll: the dim that grows;
                                      RT_DIM_PER_AXIS: see axis_dim */
    int32_t dim2;                  /* AllToAll: the dim that is split; else -1 */
    int32_t op_id;                 /* index of the op in the program (tracing) */
    /* Added after ABI version 1 without a bump: it fills what was the
     * struct's tail padding, so the size and every offset above stay, and
     * a descriptor emitted before it (zero padding) reads as SUM. */
    int32_t reduce_op;             /* AllReduce, ReduceScatter: enum rt_reduce_op; else 0 */
    /* Added after ABI version 1 without a bump, appended: the struct grew
     * from 176 to 208 bytes, and every offset above stays.  The runtime
     * reads these only when `dim` is RT_DIM_PER_AXIS, which no descriptor
     * emitted before them holds, so an older object's shorter descriptor
     * is never read past its end; an older runtime rejects RT_DIM_PER_AXIS
     * as a dim out of range rather than misreading it.  Codegen emits
     * descriptors one global each, never in arrays, so the size is free to
     * grow. */
    int32_t axis_dim[RT_MAX_AXES];  /* RT_DIM_PER_AXIS: the dim axes[k] works along (AllToAll:
                                       the dim it leaves, which grows) */
    int32_t axis_dim2[RT_MAX_AXES]; /* RT_DIM_PER_AXIS, AllToAll: the dim axes[k] joins
                                       (which is split); else -1 */
} rt_coll_desc;

/* A local contraction c = alpha * einsum(a[, b]) on per-device blocks.
 * Labels are small integers; a label in a (and b) but not c is summed.
 * Arithmetic is in f64 when c is f64, else in f32 (bf16 and i8 operands are
 * converted to it exactly, a bf16 result rounded once at the end). */
typedef struct rt_einsum_desc {
    int32_t dtype;                        /* enum rt_dtype of c; of a and b too unless mixed */
    int32_t noperands;                    /* 1 or 2 */
    int32_t rank[3];                      /* a, b, c */
    int64_t shape[3][RT_MAX_RANK];        /* per-device shapes of a, b, c */
    int32_t labels[3][RT_MAX_RANK];       /* label of each position of a, b, c */
    double alpha;
    int32_t op_id;
    /* Per-operand dtypes, appended without an ABI bump: `mixed` fills what
     * was the struct's tail padding, so a descriptor emitted before it
     * (zero padding) reads as "a and b are `dtype`" and operand_dtype is
     * never read.  With mixed != 0, a is stored as operand_dtype[0] and b
     * as operand_dtype[1]: a cast folded into the GEMM (codegen's
     * ir_folded_cast_source: i8 or bf16 weights under an f32 einsum, f32
     * under f64), converted block by block as the GEMM reads it
     * (einsum_mixed.c), never as a whole copy. */
    int32_t mixed;
    int32_t operand_dtype[2];
} rt_einsum_desc;

/* The whole program, emitted by codegen as the global `einc_program`. */
typedef struct rt_program {
    int32_t abi_version;               /* RT_ABI_VERSION */
    int32_t naxes;
    char axis_names[RT_MAX_AXES];
    int64_t axis_sizes[RT_MAX_AXES];
    int32_t ninputs;                   /* inputs and params, in declaration order */
    const rt_tensor_desc *inputs;
    int32_t noutputs;
    const rt_tensor_desc *outputs;
    /* SPMD entry: reads per-device blocks `in[i]` (local_shape of inputs[i]),
     * writes per-device blocks `out[i]` (allocated by the runtime). */
    void (*run)(rt_device *dev, void *const *in, void *const *out);
    /* The same program compiled for a mesh of one device (every axis size 1),
     * used by --check as the unsharded reference; NULL inside a reference. */
    const struct rt_program *reference;
    const char *info;                  /* --dump-ir text, printed by --info */
    const char *source_name;           /* the .ein file it came from */
    /* Per op id 0..nops-1 (the ids passed to rt_op_begin/rt_op_end): what
     * --profile and --trace print.  Added after ABI version 1 without a bump:
     * every field above keeps its offset. */
    int32_t nops;                      /* entries of op_name_offsets and op_predicted */
    /* The ops' names (e.g. "In.1 = AllGather_Y In"), each NUL-terminated,
     * op k's at op_names + op_name_offsets[k]; NULL when nops is 0.  One
     * string rather than an array of pointers: LLVM rehashes a constant
     * array of pointers on every change to one element, which made -O3
     * superlinear in the number of ops (ABI version 2). */
    const char *op_names;
    const double *op_predicted;        /* cost pass's time per call, seconds per device; <0 unknown */
    const char *hw_name;               /* hardware profile the predictions are for ("host") */
    /* rt_op_begin/rt_op_end calls in one run: an op in a repeated block's
     * body is called once per iteration (sizes the --profile and --trace
     * buffers); 0 for nops. */
    int64_t calls_per_run;
    /* Training (an `optimize` statement).  `trains` is 1 when each call of
     * `run` is one training step: it reads the batch in its inputs, and
     * overwrites its params and states (role PARAM, STATE) in their `in`
     * buffers with their values after the step, after every other read of
     * them.  When `trains` is 1, `loss_output` is the index in `outputs` of
     * the scalar named by `loss` (or -1 if none); when 0 it is ignored, so a
     * descriptor that leaves both zero is an ordinary program.  Added after
     * ABI version 1 without a bump: appended. */
    int32_t loss_output;
    int32_t trains;
    const int64_t *op_name_offsets;    /* nops byte offsets into op_names (ABI version 2) */
    /* Training: one line per optimized param, "W adamw lr=0.001 beta1=0.9
     * ...\n" (every hyperparameter, given or the default), which --save
     * records and --resume compares (checkpoint.c); NULL or "" when the
     * program records none.  Appended after ABI version 2 without a bump. */
    const char *hparams;
    /* Bit a set: mesh axis a runs the stages of a pipeline (docs/pipeline.md),
     * whose devices run different ops at once, so --profile's in-step
     * barrier before each op spans the other axes only.  0: no pipeline
     * (a descriptor written before the member existed reads so).  Appended
     * without a bump. */
    int32_t pipeline_axes;
    /* The cost model's bubble fraction of a pipelined program's schedule,
     * in [0, 1), for --profile to print beside the measured one; < 0 when
     * unknown or not pipelined.  Appended without a bump (a descriptor
     * without it is never pipelined: pipeline_axes reads 0). */
    double pipeline_bubble;
} rt_program;

/* The name of op `op` of `p` (see op_names), or `fallback` when the
 * program has no name for it. */
const char *rt_program_op_name(const rt_program *p, int64_t op, const char *fallback);

/* ---- called by emitted code ---- */

/* Device coordinate along mesh axis `axis`. */
int64_t rt_coord(rt_device *dev, int32_t axis);
/* Per-device scratch memory: `bytes` aligned to 64, contents undefined;
 * never NULL (fatal on failure).  The runtime tracks live and peak bytes per
 * device, and keeps freed blocks to hand back to a later rt_alloc of the
 * same size (device.c).  Only the device's own thread may call these. */
void *rt_alloc(rt_device *dev, int64_t bytes);
void rt_free(rt_device *dev, void *p);
/* Runs collective `d` from `in` into `out` (distinct buffers, shapes per `d`).
 * Every device of the group must call it with the same descriptor. */
void rt_collective(rt_device *dev, const rt_coll_desc *d, const void *in, void *out);
/* Point-to-point transfers along mesh axis `axis`: the two halves of a
 * collective permute, as a pipeline's stage-to-stage hop uses them (an
 * activation to the next stage, its gradient to the previous one).  The
 * peer is the device whose coordinate along `axis` is this device's plus
 * `delta` (its other coordinates equal this device's).
 * rt_send copies `bytes` from `buf` into a message for the peer and returns
 * without waiting for the peer (the message is buffered), so `buf` may be
 * reused at once and two stages sending to each other cannot deadlock.
 * rt_recv blocks until the peer's message with tag `tag` has arrived and
 * copies its `bytes` into `buf`.  Messages of one sender with one tag
 * arrive in the order sent.  A peer outside the axis, a message whose size
 * differs from the receive's, or a failed job end the job with a message
 * (never a hang). */
void rt_send(rt_device *dev, int32_t axis, int32_t delta, int32_t tag, const void *buf,
             int64_t bytes);
void rt_recv(rt_device *dev, int32_t axis, int32_t delta, int32_t tag, void *buf, int64_t bytes);
/* Without waiting: 1 if the message rt_recv(dev, axis, delta, tag, ...)
 * would take has arrived, else 0; the message stays for that receive.
 * The peer is checked as rt_send's and rt_recv's (a peer outside the
 * axis, delta 0 or a negative tag end the job with a message), and a
 * device without peers (the solo backend) ends it as rt_recv does.
 * Threads: a look through the device's mailbox under its lock; MPI:
 * MPI_Iprobe.  Added without an ABI bump: a new entry point. */
int32_t rt_probe(rt_device *dev, int32_t axis, int32_t delta, int32_t tag);
/* The greedy W fill of zero-bubble and zb-h2 (`einc --w-fill=greedy`,
 * docs/pipeline.md "W items placed at run time"): which item of its row
 * of the schedule the stage runs next.  `row`: the stage's n item codes,
 * in table order, unit * 4 + kind (kind 0 F, 1 B, 2 W; unit the
 * microbatch), as codegen/pipeline.c's table holds them; `cursor`: the
 * first position of the row not yet run in table order (0 at the start);
 * `done`: n flags, 1 for each position already run (zeroed at the start).
 * Both are the caller's and updated here.  When the item at the cursor
 * starts with a receive (F on a stage z > 0, from z - 1 with tag 2 unit;
 * B on a stage z < Z - 1, from z + 1 with tag 2 unit + 1: the hops of
 * codegen/pipeline.c) whose message has not arrived (rt_probe), and the
 * earliest W of the row not yet run has its microbatch's B behind the
 * cursor, that W runs now instead; else the item at the cursor (a W
 * already run is skipped).  Returns the position to run, in [0, n).  W
 * items keep their table order among themselves, so every sum they add to
 * adds in the static table's order.  Called exactly n times per step;
 * one call more ends the job with a message. */
int32_t rt_pipe_next(rt_device *dev, int32_t axis, const int32_t *row, int32_t n, int32_t *cursor,
                     uint8_t *done);
/* A pipelined program's work items (codegen/pipeline.c): each stage runs
 * its schedule's items between rt_pipe_item_begin and rt_pipe_item_end,
 * `kind` 'F' (the forward of microbatch `microbatch` through the stage's
 * layers), 'B' (its backward; with zero-bubble its dL/dx half only) or 'W'
 * (zero-bubble's dL/dW half, no transfers), the item's own receive (rt_recv) at its
 * start and send at its end.  --trace draws each item as a span ("F3",
 * "B2") on the device's track, so the bubble shows; --profile measures
 * it: the share of the schedule's span that the devices spend outside
 * their items' work (waiting for a neighbour, before the first item and
 * after the last), beside the cost model's prediction
 * (rt_program.pipeline_bubble). */
void rt_pipe_item_begin(rt_device *dev, int32_t kind, int32_t microbatch);
/* rt_pipe_item_begin for an item of the interleaved schedule, which runs
 * the stage's local chunk `chunk` (in [0, 255)) of layers: --trace names it
 * "F3.1" (microbatch 3, chunk 1) and --profile counts 2 M v items a step. */
void rt_pipe_chunk_item_begin(rt_device *dev, int32_t kind, int32_t microbatch, int32_t chunk);
void rt_pipe_item_end(rt_device *dev);
/* Local contraction per `d` through BLAS GEMM; `c` is overwritten. */
void rt_einsum(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b, void *c);
/* rt_einsum that, for each row r (the local index along batch label
 * `row_label`, in a, b and c), stops label `pos_label` at position
 * pos[r] (local i32 rows, the rows of c; row_label -1: pos[0] for every
 * index, a scalar position): a contracted `pos_label` sums
 * s = 0..pos[r] only, a kept one computes c's entries s = 0..pos[r] and
 * writes 0 to the rest.  Emitted where the program's causal mask makes the
 * skipped terms 0 or unread (codegen's ir_einsum_pos_bound; docs/codegen.md,
 * "Contractions bounded by a position").  A row whose pos[r] is outside
 * 0..size-1, an einsum where `pos_label` is not the only label of its GEMM
 * class (M, N or K), or one that runs as a narrow-operand sweep
 * (gemv_narrow.c) computes everything as rt_einsum.  Added without an ABI
 * bump: a new entry point. */
void rt_einsum_bounded(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                       void *c, const int32_t *pos, int32_t row_label, int32_t pos_label);
/* Marks the begin / end of op `op_id` for --profile and --trace (cheap when off). */
void rt_op_begin(rt_device *dev, int32_t op_id);
void rt_op_end(rt_device *dev, int32_t op_id);

/* A gather (embedding lookup) on per-device blocks:
 *   c[i..., r...] = table[ids[i...] - offset, r...]  if that row is this
 *                   device's, else 0,
 * where the table's first dim (`rows` per device, `rows_global` in all) is
 * split over `rows_axes` and `offset` is this device's block start along it
 * (einrt.h's block numbering).  With the rows sharded this is the masked
 * local lookup of a vocab-parallel embedding, whose zeros make partial sums
 * for the following AllReduce or ReduceScatter.  c's layout is the indices'
 * dims then the table's other dims, each row `row_elems` contiguous
 * elements.  An index outside [0, rows_global) ends the job with a message
 * naming the index tensor, the element's global position and the value,
 * or with `zero_outside` gives a zero row (on every device: no partial
 * sum holds it).
 * All members are 8 bytes wide so the emitted constant needs no padding. */
typedef struct rt_gather_desc {
    int64_t dtype;                              /* enum rt_dtype of table and c */
    int64_t ids_rank;
    int64_t ids_shape[RT_MAX_RANK];             /* per-device shape of ids */
    int64_t ids_global_shape[RT_MAX_RANK];
    int64_t ids_naxes[RT_MAX_RANK];             /* mesh axes sharding each dim of ids */
    int64_t ids_axes[RT_MAX_RANK][RT_MAX_AXES];
    int64_t rows;                               /* table rows on this device */
    int64_t rows_global;                        /* all rows: the valid index range */
    int64_t rows_naxes;                         /* mesh axes sharding the rows */
    int64_t rows_axes[RT_MAX_AXES];
    int64_t row_elems;                          /* elements of one row on this device */
    const char *ids_name;                       /* the index tensor (messages) */
    const char *table_name;                     /* the table */
    int64_t op_id;
    int64_t zero_outside;                       /* 1: an index outside [0, rows_global) gives a
                                                   zero row, not an error (a gather the
                                                   select-gather pass made of a masked sum) */
} rt_gather_desc;

/* Runs gather `d`: ids (int32, per `d`), table block, into c (overwritten). */
void rt_gather(rt_device *dev, const rt_gather_desc *d, const int32_t *ids, const void *table,
               void *c);
/* The gather's adjoint, a scatter-add into the table block `table`
 * (overwritten; `d` describes it as for rt_gather):
 *   table[v - offset, r...] = sum over i of [ids[i...] == v] * rows[i..., r...]
 * for the rows v of this device's block, where `rows` holds one row of
 * `row_elems` elements per index (layout of rt_gather's c).  Indices are
 * checked as rt_gather checks them; bf16 rows are summed in f32. */
void rt_scatter_add(rt_device *dev, const rt_gather_desc *d, const int32_t *ids, const void *rows,
                    void *table);

/* A write into program state at a run-time position (an UpdateSlice op,
 * ir.h: a KV cache's new token, or a window of a prompt's), on this
 * device's block of the state, viewed as [outer, n, inner] around the
 * written dim, from rows [outer, window, inner]:
 *   state[o, pos + t - offset, i] = rows[o, t, i]  for each t < window
 *                     whose position this device's block of the dim holds,
 * where the written dim (`n` per device, `n_global` in all) is split over
 * `axes` and `offset` is this device's block start along it (einrt.h's
 * block numbering).  Every device checks pos and pos + window - 1 against
 * [0, n_global), so a position past the state ends the job with a message
 * naming the state, the position tensor and its value.  All members are 8 bytes wide so the
 * emitted constant needs no padding. */
typedef struct rt_update_desc {
    int64_t dtype;                /* enum rt_dtype of the state and rows */
    int64_t outer;                /* per-device elements before the written dim (product) */
    int64_t n;                    /* per-device size of the written dim */
    int64_t n_global;             /* its global size: the valid positions */
    int64_t inner;                /* per-device elements after it (product) */
    int64_t window;               /* rows written at pos, pos + 1, ... (1: one position) */
    int64_t naxes;                /* mesh axes splitting the written dim */
    int64_t axes[RT_MAX_AXES];    /* major first */
    const char *state_name;       /* messages */
    const char *pos_name;
    const char *dim_name;
    int64_t op_id;
    /* A per-row write (continuous batching: each slot at its own position):
     * pos holds one position per row of a dim before the written one, and
     * row b of the rows goes to pos[b] (a window: its row t to pos[b] + t).
     * row_n == 0 for a scalar pos. */
    int64_t row_n;                /* per-device size of the rows' dim (0: scalar position) */
    int64_t row_stride;           /* per-device elements of `outer` per row index step */
    int64_t row_local;            /* 1: pos holds this device's rows; 0: all rows (replicated) */
    int64_t row_naxes;            /* mesh axes splitting the rows' dim */
    int64_t row_axes[RT_MAX_AXES];/* major first */
} rt_update_desc;

/* Runs write `d`: the i32 position *pos (or per row, pos[b] for each row b
 * of the rows' dim: this device's block of pos, or all of it when
 * replicated), rows [outer, window, inner] into the state block [outer,
 * n, inner] (written in place).  A per-row position out of range (with a
 * window: a window passing the dim's end) ends the job with a message
 * naming the row (its global index). */
void rt_update_slice(rt_device *dev, const rt_update_desc *d, const int32_t *pos, const void *rows,
                     void *state);

/* ---- asynchronous collectives and the MeshSlice loop (async.c,
 * async_meshslice.c; docs/meshslice.md) ---- */

/* A device's queue of collectives in flight.  On the threads backend a
 * communication thread per open queue runs them (so they overlap the
 * device thread's GEMMs); on the MPI backend they are MPI's non-blocking
 * collectives (MPI_Iallgather, MPI_Ireduce_scatter_block). */
typedef struct rt_async rt_async;
/* Opens the queue of `dev` (owned by the caller; close with rt_async_close). */
rt_async *rt_async_open(rt_device *dev);
/* Starts collective `d` from `in` into `out` and returns its handle.  Every
 * device of the group must start the same collectives in the same order;
 * `in` and `out` must stay untouched until the handle is waited for.  At
 * most 8 collectives may be in flight per queue. */
int64_t rt_async_start(rt_async *q, const rt_coll_desc *d, const void *in, void *out);
/* Blocks until collective `handle` has completed (its `out` is ready). */
void rt_async_wait(rt_async *q, int64_t handle);
/* Waits for everything in flight, stops the queue and frees it. */
void rt_async_close(rt_async *q);

/* A MeshSlice 2D GEMM (seed 004, Fig. 5): K iterations, each moving
 * sub-shard k with the partial collectives `coll` and computing the partial
 * einsum `einsum`, software pipelined.  Sub-shard k of a per-device block
 * along the split dim (size L) is its blocks of `block` elements whose block
 * index j satisfies j mod K == k, concatenated (blocked slicing, Algorithm 2).
 * All members are 8 bytes wide so the emitted constant needs no padding. */
typedef struct rt_meshslice_desc {
    int64_t dataflow;               /* 0 OS (C-stn), 1 LS (A-stn), 2 RS (B-stn) */
    int64_t k;                      /* slices K >= 1 */
    int64_t block;                  /* elements per slicing block along the split dim */
    const rt_einsum_desc *einsum;   /* the partial einsum of one iteration (per-iteration shapes) */
    const rt_coll_desc *coll[2];    /* the partial collectives of one iteration (sub-shard shapes) */
    int64_t coll_operand[2];        /* what coll[i] moves: 0 = A, 1 = B (AllGather), -1 = C (ReduceScatter) */
    int64_t split_pos[3];           /* position of the split dim in A, B, C (-1: absent) */
    int64_t rank[3];                /* ranks of A, B, C */
    int64_t shape[3][RT_MAX_RANK];  /* per-device shapes of A, B, C as stored */
    int64_t op_id;                  /* index of the op in the program */
} rt_meshslice_desc;

/* Runs MeshSlice `d` on the per-device blocks a, b into c (overwritten). */
void rt_meshslice(rt_device *dev, const rt_meshslice_desc *d, const void *a, const void *b, void *c);

#endif
