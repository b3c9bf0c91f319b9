/*
 * cg_internal.h - what the codegen folder shares between its files.
 *
 * The stages of cg_emit, one file each:
 *   target.c      native target machine (triple, host CPU and features)
 *   types.c       LLVM mirrors of the runtime ABI structs (runtime/einrt.h)
 *   plan.c        fusion and buffer liveness over the op list (no LLVM)
 *   run.c         the SPMD run function: buffers, rt_einsum, rt_collective
 *   elementwise.c fused elementwise loop nests
 *   reduce.c      unary einsums (sum, max, min reductions) as loop nests
 *   rowgroup.c    row groups (ir/rowgroup.c) and their streamed results
 *   stream.c      non-temporal stores of a streamed result's rows
 *   gather.c      gathers (embedding lookups) as calls of rt_gather
 *   meshslice.c   MeshSlice ops as calls of the runtime's pipelined loop
 *   program.c     the constant rt_program and its tensor descriptors
 *   link.c        linking the objects with the runtime by posix_spawn of cc
 *   emit.c        cg_emit: the pipeline in c3c's order, the reference
 *                 program's module on a second thread
 */
#ifndef EINC_CG_INTERNAL_H
#define EINC_CG_INTERNAL_H

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "codegen.h"
#include "einrt.h"

/* LLVM types used everywhere, including the ABI struct mirrors. */
typedef struct cg_types {
    LLVMTypeRef i1, i8, i16, i32, i64; /* integer types */
    LLVMTypeRef f32, f64;              /* IEEE float types */
    LLVMTypeRef ptr;                   /* the opaque pointer (address space 0) */
    LLVMTypeRef voidt;                 /* void */
    LLVMTypeRef tensor_desc;           /* struct rt_tensor_desc */
    LLVMTypeRef coll_desc;             /* struct rt_coll_desc */
    LLVMTypeRef einsum_desc;           /* struct rt_einsum_desc */
    LLVMTypeRef program;               /* struct rt_program */
    LLVMTypeRef run_fn;                /* void (ptr dev, ptr in, ptr out) */
} cg_types;

/* Declarations of the runtime entry points emitted code calls. */
typedef struct cg_runtime_fns {
    LLVMTypeRef alloc_ty;  /* ptr rt_alloc(ptr dev, i64 bytes) */
    LLVMValueRef alloc;
    LLVMTypeRef free_ty;   /* void rt_free(ptr dev, ptr p) */
    LLVMValueRef free;
    LLVMTypeRef coll_ty;   /* void rt_collective(ptr, ptr desc, ptr in, ptr out) */
    LLVMValueRef coll;
    LLVMTypeRef einsum_ty; /* void rt_einsum(ptr, ptr desc, ptr a, ptr b, ptr c) */
    LLVMValueRef einsum;
    LLVMTypeRef einsum_bounded_ty; /* void rt_einsum_bounded(ptr, ptr desc, ptr a, ptr b, ptr c,
                                      ptr pos, i32 row_label, i32 pos_label) */
    LLVMValueRef einsum_bounded;
    LLVMTypeRef mark_ty;   /* void rt_op_begin/rt_op_end(ptr dev, i32 op_id) */
    LLVMValueRef op_begin;
    LLVMValueRef op_end;
    LLVMTypeRef coord_ty;  /* i64 rt_coord(ptr dev, i32 axis) */
    LLVMValueRef coord;
} cg_runtime_fns;

/* State of one cg_emit call (no globals: everything lives here). */
typedef struct cg_ctx {
    LLVMContextRef llctx;   /* owns every type and constant below */
    LLVMModuleRef mod;      /* the module being built */
    LLVMBuilderRef b;       /* the one instruction builder */
    LLVMTargetDataRef td;   /* data layout of the target machine (owned) */
    cg_types t;             /* cached types */
    cg_runtime_fns rt;      /* runtime declarations */
    diag_ctx *d;            /* where errors go */
    int nglobals;           /* counter for unique private global names */
} cg_ctx;

/* Fusion and liveness of one module, computed before any LLVM is built.
 * Op indices are positions in program order (the op_id passed to the
 * runtime); value indices are ir_value.id.  Arrays are malloc-owned. */
typedef struct cg_plan {
    int nops;           /* ops in the module */
    ir_op **ops;        /* ops[i]: the i-th op in program order */
    int nvalues;        /* m->nvalues */
    int *fused_into;    /* per op: the op whose loop computes it inline, or -1 */
    int *def_index;     /* per value: index of its defining op, -1 for inputs */
    int *last_use;      /* per value: last emitted op that reads its buffer, -1 if none */
    int *out_index;     /* per value: first runtime output (position in `out`) it is
                           written to, -1 if none */
    int *rt_output;     /* per module output: its position in `out`, -1 for an update */
    int noutputs;       /* runtime outputs: the module's outputs that are not updates */
    int *update_slot;   /* per value: position in `in` of the param or state it overwrites at
                           the end of the run (an update), -1 if none */
    int *input_index;   /* per value: position in the `in` array, -1 if not an input, param
                           or state */
    int *reuse;         /* per op: the dead operand whose buffer the result takes over, or -1 */
    int ninputs;        /* inputs, params and states */
    /* Every elementwise nest in a function of its own (elementwise.c): the
     * program's expression nodes exceed IR_OUTLINE_EW_NODES. */
    bool outline_elementwise;
    int *row_group;     /* per op: the first op of its row group (rowgroup.c), or -1 */
    bool *row_local;    /* per value: its buffer holds one row of its row group */
    bool *row_stream;   /* per value: a row group computes it into a one-row stage and
                           copies each row out with non-temporal stores (rowgroup.c) */
} cg_plan;

/* Bytes of the stage a streamed loop nest computes each chunk of its result
 * into before copying it out (elementwise.c, stream_chunk): four cache
 * lines, four vectors of AVX-512. */
#define CG_STREAM_CHUNK_BYTES 256

/* ---- emit.c ---- */

/* The highest -O levels of the passes and of the back end of the
 * reference program that --check runs, in an executable (the sharded
 * program gets the level asked for).  Passes at -O2 vectorise its loops
 * as the sharded program's are, so that both call the same vector exp and
 * log (at -O1 the scalar libm calls made fortunes' two training steps
 * differ by 1.4e-4, past --check's 1e-4; 3.7e-5 at -O2).  The back end at
 * level 0 (FastISel, the fast register allocator): `einc -o` of
 * llama2_13b.ein took 75 ms less CPU than with the reference at -O3, and
 * a --check of llama2_layer.ein ran as fast, its time being in BLAS
 * (docs/performance.md, section 4). */
#define CG_REFERENCE_OPT 2
#define CG_REFERENCE_CODEGEN_OPT 0

/* ---- target.c ---- */

/* Initialises the native target and creates a machine for the host CPU
 * (PIC, default code model) at `opt_level` 0..3.  NULL after reporting
 * through `d` on failure.  Dispose with LLVMDisposeTargetMachine. */
LLVMTargetMachineRef cg_target_machine_new(int opt_level, diag_ctx *d);

/* ---- rowgroup.c ---- */

/* Fills p->row_group and p->row_local (ir_row_groups: runs of a
 * trailing-dim reduction and the elementwise ops around it that run one
 * row at a time) and p->row_stream, after fusion and liveness and before
 * the in-place decisions. */
void cg_plan_row_groups(cg_plan *p, const ir_module *m);
/* The last member of the row group whose first op is `first`. */
int cg_row_group_end(const cg_plan *p, int first);
/* Bytes per device of one row of a value of type `t` in a row group whose
 * rows are its first `nrow` positions: its local bytes over their local
 * sizes. */
int64_t cg_row_bytes(const ir_module *m, const ir_type *t, int nrow);

/* ---- types.c ---- */

/* Fills `t` with the basic types of `llctx` and the ABI struct mirrors.
 * The structs are non-packed LLVM structs whose members have the C members'
 * types in order, so LLVM's natural alignment reproduces the C layout on
 * x86-64 (checked against sizeof/offsetof by tests/codegen/test_layout.c). */
void cg_types_init(cg_types *t, LLVMContextRef llctx);

/* ---- plan.c ---- */

/* calloc that ends the compiler on out-of-memory (like ir_alloc); n may be 0. */
void *cg_calloc(size_t n, size_t size);
/* realloc that ends the compiler on out-of-memory; `p` is NULL or from cg_calloc. */
void *cg_realloc(void *p, size_t size);

/* Computes fusion and liveness for `m`.  Returns 0, or reports through `d`
 * and returns -1 (an op kind codegen cannot lower).  Free with cg_plan_free. */
int cg_plan_build(cg_plan *p, const ir_module *m, diag_ctx *d);
void cg_plan_free(cg_plan *p);

/* ---- run.c ---- */

/* Emits the SPMD run function of `m` (with plan `p`) named `name`, internal
 * linkage, and returns it. */
LLVMValueRef cg_emit_run(cg_ctx *c, ir_module *m, const cg_plan *p, const char *name);
/* Constant arrays of `len` elements: the first `n` from `v`, the rest `pad`. */
LLVMValueRef cg_const_i64s(cg_ctx *c, const int64_t *v, int n, int len, int64_t pad);
LLVMValueRef cg_const_i32s(cg_ctx *c, const int32_t *v, int n, int len, int32_t pad);
/* i32 / i64 constants. */
LLVMValueRef cg_i32(cg_ctx *c, int64_t v);
LLVMValueRef cg_i64(cg_ctx *c, int64_t v);
/* A private constant global holding `d` (an rt_coll_desc, einrt.h, member
 * by member in the LLVM mirror of types.c), its name starting `prefix`. */
LLVMValueRef cg_coll_desc_const(cg_ctx *c, const rt_coll_desc *d, const char *prefix);
/* Per-device shape of `t` into `shape` (t->rank entries). */
void cg_local_shape(const ir_module *m, const ir_type *t, int64_t *shape);

/* Per-run-function state shared by run.c and elementwise.c. */
typedef struct cg_fn {
    ir_module *m;          /* the module being lowered */
    const cg_plan *plan;   /* its fusion and liveness */
    LLVMValueRef fn;       /* the run function */
    LLVMValueRef dev;      /* argument 0: rt_device * */
    LLVMValueRef *buf;     /* per value id: its per-device buffer (ptr), or NULL */
    /* Inside a row group (rowgroup.c): its row positions and their current
     * indices (i64), the leading positions of every tensor it touches;
     * nrow is 0 outside one. */
    int nrow;
    LLVMValueRef row_idx[IR_MAX_RANK];
    LLVMValueRef stream_stage; /* NULL, or fn's stage of CG_STREAM_CHUNK_BYTES (an entry
                                  alloca) that every streamed loop nest of fn shares */
    /* A pipelined run (pipeline.c): per value id, the buffer a LayerStack
     * adds each layer's block into rather than copying it (a gradient
     * summed over the microbatches), or NULL; NULL array otherwise. */
    LLVMValueRef *stack_sum;
    /* An interleaved pipelined run (pipeline.c): a loop over the pipelined
     * layer dim runs one chunk, the chunk_trips local layers from
     * chunk_first (an i64 value) of the stage's stacks, and a LayerStack of
     * it writes into stack_buf[value id] when that is not NULL (the stack
     * the microbatch's first chunk made, kept in its frame).  chunk_trips
     * 0: the loop runs every local layer (ir_loop_trips). */
    int64_t chunk_trips;
    LLVMValueRef chunk_first;
    LLVMValueRef *stack_buf;
} cg_fn;

/* How many layer blocks of one microbatch's rows lie between two layers of
 * stacked value `v`: M for a state of a pipelined program stacked on the
 * pipelined layers with the batch dim second (it holds the whole batch's
 * rows of each layer, and the ops see one microbatch), else 1 (run.c). */
int64_t cg_layer_stride(const ir_module *m, const ir_value *v);

/* The LLVM loop of the repeated block being emitted. */
typedef struct cg_loop {
    int begin;                /* op index of its LoopBegin, -1 outside a body */
    LLVMValueRef layer;       /* i64 phi: the iteration i = 0 .. |L|-1 */
    LLVMValueRef index;       /* i64: the layer l, i or (reverse) |L| - 1 - i */
    LLVMBasicBlockRef body;   /* the loop's first block (holds the phi) */
} cg_loop;

/* ---- run.c: what the pipelined run function (pipeline.c) shares ---- */

/* Emits op i of f's plan (not fused into another) through its hook, with
 * `out` the run function's output array and `lp` the repeated block being
 * emitted (lp->begin < 0 outside one); returns the index of the last op
 * emitted (a row group emits several). */
int cg_run_op(cg_ctx *c, cg_fn *f, LLVMValueRef out, cg_loop *lp, int i);
/* Frees the scratch buffers whose last read (f->plan->last_use) was op i,
 * and a result nobody reads, among the values defined by ops lo..hi; sets
 * their f->buf to NULL. */
void cg_free_dead(cg_ctx *c, cg_fn *f, int i, int lo, int hi);
/* Loads element `k` of the pointer array `arr`. */
LLVMValueRef cg_load_ptr_at(cg_ctx *c, LLVMValueRef arr, int k, const char *name);
/* The end of a run function: the outputs not computed in place (inputs,
 * values that are several outputs) copied out, the updates written over
 * their params and states, the last scratch buffers freed.  No return. */
void cg_emit_run_tail(cg_ctx *c, cg_fn *f, LLVMValueRef in, LLVMValueRef out);

/* ---- pipeline.c ---- */

/* dst[i] += src[i] for the n elements of `dtype` (f32, f64; bf16 in f32,
 * rounded back) at dst and src: a sum over a pipeline's microbatches. */
void cg_emit_add_into(cg_ctx *c, cg_fn *f, LLVMValueRef dst, LLVMValueRef src, int64_t n, ir_dtype dtype);

/* Emits the body of the run function of a pipelined program (m->pipe,
 * docs/pipeline.md) into f, its tail included: each stage runs its
 * schedule of microbatch forwards and backwards, then the optimizer's
 * update.  cg_pipeline_check must have passed. */
void cg_emit_pipelined_body(cg_ctx *c, cg_fn *f, LLVMValueRef in, LLVMValueRef out);
/* Checks that codegen can run pipelined module `m` with plan `p` (the
 * pipeline pass ran, the batch dim leads every input holding it, the
 * forward loop, its backward and the update in that order, the outputs
 * the loss and the updates); reports through `d` and returns false if
 * not. */
bool cg_pipeline_check(const ir_module *m, const cg_plan *p, diag_ctx *d);

/* ---- elementwise.c ---- */

/* Checks that elementwise `op` can be lowered (labels and per-device sizes
 * agree); reports through `d` and returns false if not. */
bool cg_ew_check(const ir_module *m, const ir_op *op, diag_ctx *d);
/* Emits the loop nest of elementwise `op` or of an unrolled einsum
 * (ir_einsum_unrolled_terms), and of every op fused into it, at the
 * builder's position, writing the result into `dst`. */
void cg_emit_elementwise(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst);
/* The same nest in the row group being emitted, also adding every element
 * it stores (in the compute type, which is the stored value for f32 and
 * f64 results) to the accumulator `acc` (cg_row_sum_begin), with
 * reassociation; with `dst` NULL the elements are only summed (the sum is
 * the result's one reader).  Not for outlined nests (no row group has
 * them). */
void cg_emit_elementwise_sum(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst,
                             LLVMValueRef acc);
/* Loads element `off` (i64) of a buffer of `dtype` as compute type `ct`
 * (f32 for f32, bf16 and i8, f64 for f64); bf16 and i8 are widened exactly. */
LLVMValueRef cg_load_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef base, ir_dtype dtype,
                          LLVMValueRef off);
/* `v` (of compute type `ct`) rounded to `dtype` and widened back to `ct`:
 * the value a store in `dtype` and a load would give, without memory (a
 * fused cast, ir_ew_converts); bf16 rounds to nearest even. */
LLVMValueRef cg_round_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v, ir_dtype dtype);
/* Converts `v` (of type `ct`) to `dtype` and stores it at element `off`;
 * bf16 rounds to nearest even and keeps NaN quiet; i8 as cg_i8_from_float,
 * i32 as cg_i32_from_float. */
void cg_store_elem(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v, ir_dtype dtype, LLVMValueRef base,
                   LLVMValueRef off);
/* The i32 of `v` (of type `ct`, an integer: an i32 elementwise result,
 * ir_ew_integer), clamped to i32's range. */
LLVMValueRef cg_i32_from_float(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v);

/* ---- elementwise_i8.c ---- */

/* `v` (f32 or f64, type `ct`) as an LLVM i8: rounded to nearest even,
 * saturated to [-128, 127], NaN to 0 (the cast i8(x), docs/language.md). */
LLVMValueRef cg_i8_from_float(cg_ctx *c, LLVMTypeRef ct, LLVMValueRef v);

/* ---- reduce.c ---- */

/* A counted loop 0..n-1 (n >= 1), bottom-tested: cg_for_begin emits the
 * header at the builder's position and leaves the builder in the body;
 * cg_for_end closes it and leaves the builder after it. */
typedef struct cg_for {
    LLVMBasicBlockRef pre, body; /* the block before the loop, the loop's first block */
    LLVMValueRef phi;            /* the index (i64) */
    int64_t n;                   /* trip count */
} cg_for;
cg_for cg_for_begin(cg_ctx *c, cg_fn *f, int64_t n);
void cg_for_end(cg_ctx *c, cg_fn *f, cg_for *l);
/* An alloca of type `t` in the entry block of f->fn (where mem2reg
 * promotes a scalar one to a register): stack storage for the whole
 * function, however often the code that uses it runs. */
LLVMValueRef cg_entry_alloca(cg_ctx *c, cg_fn *f, LLVMTypeRef t, const char *name);

/* Emits the unary einsum `op` (a sum, max or min reduction and/or
 * transpose of one operand, times its scale) as a loop nest at the
 * builder's position, writing `dst`.  Two-operand einsums go to rt_einsum
 * (BLAS) instead. */
void cg_emit_reduce(cg_ctx *c, cg_fn *f, const ir_op *op, LLVMValueRef dst);

/* ---- stream.c ---- */

/* An i1: whether pointer `p` is 64-byte (cache line) aligned. */
LLVMValueRef cg_line_aligned(cg_ctx *c, LLVMValueRef p);
/* Copies `row_bytes` (a multiple of 64, >= 64) from the 64-byte aligned
 * one-row `stage` to `dst`, with non-temporal 64-byte stores when
 * `aligned` (an i1, cg_line_aligned of dst's row), else with memcpy; the
 * builder continues after the copy. */
void cg_emit_stream_row(cg_ctx *c, cg_fn *f, LLVMValueRef dst, LLVMValueRef stage,
                        int64_t row_bytes, LLVMValueRef aligned);
/* Byte offset of the current row of a tensor of type `t` whose leading
 * positions are the rows of the group being emitted: the row index flat
 * over the row positions times the bytes of one row. */
LLVMValueRef cg_row_offset(cg_ctx *c, const cg_fn *f, const ir_type *t);
/* Orders every non-temporal store before what follows (a full fence). */
void cg_emit_stream_fence(cg_ctx *c);

/* Whether value `v`'s buffer holds one row inside the row group being
 * emitted: a row-local value, or a streamed one's stage (rowgroup.c). */
static inline bool cg_one_row(const cg_fn *f, int v)
{
    return f->nrow > 0 && (f->plan->row_local[v] || f->plan->row_stream[v]);
}

/* A sum reduction of a row group whose operand the elementwise member
 * before it computes, the two in one loop over the row (run.c):
 * cg_row_sum_fits says whether `sum` is such a reduction of `ew`'s result
 * (its operand exactly that result, its dims the rows, both f32 or both
 * f64), cg_row_sum_begin makes its accumulator and sets it to 0 at the
 * builder's position (inside the row loops), cg_row_sum_end stores scale *
 * accumulator as the row's result into `dst`. */
bool cg_row_sum_fits(const cg_fn *f, const ir_op *ew, const ir_op *sum);
LLVMValueRef cg_row_sum_begin(cg_ctx *c, cg_fn *f, const ir_op *sum);
void cg_row_sum_end(cg_ctx *c, cg_fn *f, const ir_op *sum, LLVMValueRef dst, LLVMValueRef acc);

/* ---- gather.c ---- */

/* Emits the gather einsum `op` (op index `id`) as a call of rt_gather, or
 * the scatter-add einsum as a call of rt_scatter_add, writing the result
 * into `dst`. */
void cg_emit_gather(cg_ctx *c, cg_fn *f, const ir_op *op, int id, LLVMValueRef dst);

/* ---- update.c ---- */

/* Whether ops of kind k name a buffer they do not own: a LayerSlice (a
 * view of one layer of an input, param or state) and an UpdateSlice (its
 * storage operand's buffer, written in place). */
static inline bool cg_is_view(ir_op_kind k)
{
    return k == IR_OP_LAYERSLICE || k == IR_OP_UPDATESLICE;
}

/* Emits UpdateSlice `op` (op index `id`) as a call of rt_update_slice
 * that writes its slice into its storage operand's buffer in place (the
 * result names that buffer). */
void cg_emit_update_slice(cg_ctx *c, cg_fn *f, const ir_op *op, int id);

/* ---- meshslice.c ---- */

/* Emits the MeshSlice op `op` (op index `id`) as a call of rt_meshslice
 * with its constant descriptors, writing the result into `dst`. */
void cg_emit_meshslice(cg_ctx *c, cg_fn *f, const ir_op *op, int id, LLVMValueRef dst);

/* ---- program.c ---- */

/* A private constant global holding `init`; returns the global (a ptr). */
LLVMValueRef cg_const_global(cg_ctx *c, LLVMValueRef init, const char *prefix);
/* A private NUL-terminated string constant; NULL `s` gives a null pointer. */
LLVMValueRef cg_const_string(cg_ctx *c, const char *s);
/* Calls runtime function `fname(dev, desc, ...)`, all pointer arguments
 * (nargs <= 8), declaring it on first use: `args[1]` is set to a private
 * constant of the struct of `fields` (the descriptor, whose C struct has
 * 8-byte members, so no padding); the caller fills the others. */
void cg_call_with_desc(cg_ctx *c, const char *fname, LLVMValueRef *fields, unsigned nfields,
                       LLVMValueRef *args, unsigned nargs);
/* Emits the rt_program of `m` with run function `run` as global `name`;
 * `reference` is the reference program's global or NULL.  `exported`:
 * external linkage (einc_program) or private (the reference). */
LLVMValueRef cg_emit_program(cg_ctx *c, ir_module *m, const cg_plan *p, LLVMValueRef run,
                             LLVMValueRef reference, const char *name, bool exported,
                             const cg_options *opts);

/* ---- link.c ---- */

/* Links the `nobjs` objects `objs` with the runtime library into
 * executable opts->output by running cc (or mpicc).  The linker's output
 * is passed through `d`.  Returns 0 on success. */
int cg_link(const char *const *objs, int nobjs, const cg_options *opts, diag_ctx *d);

#endif
