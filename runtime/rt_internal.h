/*
 * rt_internal.h - what the runtime library keeps to itself.
 *
 * The runtime is split into a backend-neutral core and two backends:
 *
 *   core     device.c (rt_coord, rt_alloc, ...), collective.c (descriptor
 *            checks, the one-device path, Slice), p2p.c (rt_send / rt_recv
 *            checks), einsum*.c (BLAS GEMM),
 *            npy.c, random.c, cli.c, job.c (the per-device flow and what
 *            the root process does afterwards), info.c, layout.c, dtype.c.
 *   threads  backend_threads.c + coll_threads.c + barrier.c + p2p_threads.c:
 *            one pthread per device in one process, shared-memory
 *            collectives, a mailbox per device for point-to-point messages.
 *   mpi      backend_mpi.c + mpi_p2p.c (rt_mpi.h): one MPI rank per device,
 *            MPI collectives, buffered MPI_Isend for point-to-point.
 *
 * A device reaches its backend through `rt_device.ops`, a small table of
 * functions, so the reference run of --check (one device, no peers) can use
 * the "solo" table while the sharded run uses threads or MPI.  Which launcher
 * starts the job is chosen at link time: libeinrt's main.c passes the threads
 * launcher to rt_main, libeinrt_mpi's main_mpi.c the MPI launcher.
 */
#ifndef EINC_RT_INTERNAL_H
#define EINC_RT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "einrt.h"
#include "rt_bf16.h"
#include "rt_gemv.h"
#include "rt_files.h"

#define RT_NORETURN _Noreturn
/* noreturn for function pointers (the C11 keyword applies to functions only). */
#define RT_NORETURN_PTR __attribute__((noreturn))
#define RT_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Most devices a mesh may have (threads backend: one thread each). */
#define RT_MAX_DEVICES 4096

/* ---- dtypes (dtype.c) ---- */

/* Bytes per element of `dtype`; 0 for an unknown dtype. */
size_t rt_dtype_size(int32_t dtype);
/* "f32", "f64", "bf16", "i32", "i8" or "?" */
const char *rt_dtype_name(int32_t dtype);
/* bf16 <-> f32: a bf16 is the upper half of an f32; rounding to nearest,
 * ties to even, and a NaN stays a (quiet) NaN.  Inline and branch-free:
 * as functions of this shared library they could be interposed, so every
 * loop over them made one call per element (a bf16 GEMM's rounding of its
 * f32 result cost more than a nanosecond an element), and a branch keeps
 * a loop of them from vectorizing. */
static inline float rt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t rt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}
/* The same over n elements. */
void rt_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void rt_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);
/* Bytes per element of `dtype` in a .npy file: its own size, except bf16,
 * which files hold as f32 (NumPy has no bf16). */
size_t rt_file_elem_size(int32_t dtype);
/* Element i of an array of `dtype` as a double. */
double rt_element(int32_t dtype, const void *x, int64_t i);

/* ---- shapes and strided copies (layout.c) ---- */

/* Product of shape[0..rank-1] (1 for rank 0). */
int64_t rt_numel(int32_t rank, const int64_t *shape);
/* Whether every device holds the whole of t (its local shape is its global
 * one). */
int rt_replicated(const rt_tensor_desc *t);
/*
 * Calls fn(arg, dst, src, n) for each contiguous run of the box of extent
 * `ext` at index `doff` of a row-major array of shape `dshape` and at `soff`
 * of one of shape `sshape`: n elements starting at element dst of the
 * first and src of the second.  Innermost dims that are whole in both
 * arrays are merged, so the runs are as long as the layouts allow.
 */
void rt_box_runs(const int64_t *dshape, const int64_t *doff, const int64_t *sshape,
                 const int64_t *soff, const int64_t *ext, int32_t rank,
                 void (*fn)(void *arg, int64_t dst, int64_t src, int64_t n), void *arg);
/*
 * Copies the box of extent `ext` from `src` (shape `sshape`, starting at
 * index `soff`) to `dst` (shape `dshape`, starting at `doff`); all arrays
 * row-major with `esize`-byte elements.  Innermost dims that are whole in
 * both arrays are merged so each contiguous run is one memcpy.
 */
void rt_copy_box(void *dst, const int64_t *dshape, const int64_t *doff,
                 const void *src, const int64_t *sshape, const int64_t *soff,
                 const int64_t *ext, int32_t rank, size_t esize);
/*
 * Offset (in elements, per dim) of device `coord`'s block of tensor `t`
 * inside the global array: dim d starts at block_index(d) * local_shape[d],
 * where block_index is the mixed-radix number of the device's coordinates on
 * t->dim_axes[d] (first axis major; einrt.h "Layout").
 */
void rt_block_start(const rt_tensor_desc *t, const int64_t *axis_sizes,
                    const int64_t *coord, int64_t *start);
/* Copies the block `local` of the device at `coord` into its place in the
 * global array of `t`. */
/* The parts of the block of `t` that the device at `coord` holds: 1, or
 * t->cyclic_blocks when dim 0 is dealt block-cyclically (einrt.h).  Part j
 * is the box at global `start` with extent `ext` (local_shape, dim 0 cut to
 * local_shape[0] / v), at element offset *local_off of the device's
 * row-major block; rt_block_part fills them.  A part is contiguous in the
 * block (dim 0 is the outermost). */
int32_t rt_block_nparts(const rt_tensor_desc *t);
void rt_block_part(const rt_tensor_desc *t, const int64_t *axis_sizes, const int64_t *coord, int32_t j,
                   int64_t *start, int64_t *ext, int64_t *local_off);
void rt_place_block(const rt_program *p, const rt_tensor_desc *t, const int64_t *coord,
                    const void *local, void *global);
/* 1 if the device holds the copy of its block that outputs are taken from:
 * coordinate 0 on every mesh axis that does not shard `t`. */
int rt_is_primary_holder(const rt_tensor_desc *t, int32_t naxes, const int64_t *coord);

/* ---- devices (device.c) ---- */

typedef struct rt_device_ops rt_device_ops;
typedef struct rt_job rt_job;

/* One call of an op on one device, as rt_op_begin/rt_op_end saw it. */
typedef struct rt_span {
    int32_t op_id;     /* op id of the call */
    double begin;      /* rt_now() at rt_op_begin, seconds */
    double end;        /* rt_now() at rt_op_end, seconds */
} rt_span;

/* Most spans a device keeps (--profile medians, --trace); later calls are
 * still summed in seconds/calls but not kept one by one. */
#define RT_MAX_SPANS (1 << 20)

/*
 * What rt_op_begin / rt_op_end do.  --trace records the program's own
 * schedule (SPANS).  --profile runs the ops in step (IN_STEP): every device
 * passes a barrier over the whole mesh before each op, so an op's span is
 * its own cost with all devices doing it at once -- what the cost model
 * predicts and what `einc calibrate` measured -- and not its share of the
 * previous op's load imbalance, which a collective otherwise absorbs as
 * waiting for its late peers (profile.c).
 */
typedef enum rt_profile_mode {
    RT_PROFILE_OFF = 0,
    RT_PROFILE_SPANS = 1,
    RT_PROFILE_IN_STEP = 2,
} rt_profile_mode;

/* Per-op profile counters of one device (--profile, --trace). */
typedef struct rt_profile {
    int32_t n;         /* entries in use (op ids 0..n-1) */
    double *seconds;   /* total seconds per op id, malloc'd, owned */
    int64_t *calls;    /* calls per op id, malloc'd, owned */
    double *open_at;   /* start time of the open call per op id, or <0 */
    rt_span *spans;    /* every call in order (up to RT_MAX_SPANS), malloc'd, owned */
    int64_t nspans;    /* spans recorded */
    int64_t cap;       /* spans allocated */
    double origin;     /* rt_now() when the first run started (trace time 0) */
    double item_open;  /* rt_now() at the open pipeline item's rt_pipe_item_begin */
    int32_t item_id;   /* span id of the open item (rt_span_item_id); 0: none open */
} rt_profile;

/*
 * Span ids below 0 (rt_span.op_id) that are not ops: -1 no span (a padded
 * trace row), RT_SPAN_RECV_WAIT the time a device spent in rt_recv inside
 * a pipeline item (waiting for its neighbour, pipe_items.c), and from
 * RT_SPAN_ITEM_BASE down the pipeline items themselves (rt_span_item_id:
 * kind, microbatch and chunk).  Kept in the
 * ops' span list so --trace's collection carries them unchanged.
 */
#define RT_SPAN_NONE (-1)
#define RT_SPAN_RECV_WAIT (-2)
#define RT_SPAN_ITEM_BASE (-16)

/* Span ids of pipeline items: unit u = mb for an item without a chunk,
 * mb + (c + 1) 2^20 for one of chunk c (the interleaved schedule). */
#define RT_SPAN_ITEM_CHUNK_SHIFT 20

/* The span id of pipeline item `kind` ('F', 'B' or zero-bubble's 'W') of
 * microbatch `mb` (>= 0, below 2^20) and chunk `chunk` (-1: none; else
 * below 2^8). */
static inline int32_t rt_span_item_id(int32_t kind, int32_t mb, int32_t chunk)
{
    int32_t u = mb + (int32_t)((uint32_t)(chunk + 1) << RT_SPAN_ITEM_CHUNK_SHIFT);
    return RT_SPAN_ITEM_BASE - 3 * u - (kind == 'B') - 2 * (kind == 'W');
}

/* 1 and the item's kind ('F', 'B' or 'W'), microbatch and chunk (-1:
 * none) if span id `id` is a pipeline item (rt_span_item_id), else 0. */
static inline int rt_span_item(int64_t id, char *kind, int64_t *mb, int64_t *chunk)
{
    if (id > RT_SPAN_ITEM_BASE)
        return 0;
    int64_t k = RT_SPAN_ITEM_BASE - id;
    *kind = "FBW"[k % 3];
    *mb = (k / 3) & ((1 << RT_SPAN_ITEM_CHUNK_SHIFT) - 1);
    *chunk = ((k / 3) >> RT_SPAN_ITEM_CHUNK_SHIFT) - 1;
    return 1;
}

struct rt_device {
    const rt_program *prog;      /* the program this device runs */
    const rt_device_ops *ops;    /* backend functions for this device */
    void *backend;               /* backend state shared by the devices (not owned) */
    void *backend_local;         /* backend state of this device only (not owned) */
    int64_t id;                  /* linear device index: row-major over mesh axes */
    int64_t ndevices;            /* devices in the mesh */
    int64_t coord[RT_MAX_AXES];  /* coordinate on each mesh axis */
    int64_t live_bytes;          /* bytes currently allocated by rt_alloc */
    int64_t peak_bytes;          /* largest live_bytes seen */
    int64_t as_reserve;          /* address space rt_alloc leaves free under
                                    a `ulimit -v` (rt_check_address_space); 0: no limit */
    void *alloc_cache;           /* freed rt_alloc blocks kept for reuse (device.c), owned */
    int64_t cached_bytes;        /* bytes in alloc_cache (not counted in live_bytes) */
    int profiling;               /* rt_profile_mode: what rt_op_begin/end do */
    rt_profile profile;          /* per-op times when profiling */
    rt_gemv_split gemv;          /* narrow products' helper thread (rt_gemv.h): set by the
                                    backend (rt_gemv_split_plan), released with the device */
    struct rt_core_turns *core;  /* its CPU's turn (rt_turns.h, not owned); NULL: off */
    rt_bf16_gemm bf16;           /* how bf16 x bf16 GEMMs run (rt_bf16.h): set by
                                    rt_device_init */
};

/* A group as seen by one device: who its peers are and its own rank. */
typedef struct rt_group_view {
    int32_t naxes;               /* axes spanned by the group */
    int32_t axes[RT_MAX_AXES];   /* the axes, major first */
    int64_t sizes[RT_MAX_AXES];  /* their sizes */
    int64_t size;                /* G = product of those axes' sizes */
    int64_t rank;                /* this device's group rank */
    uint32_t mask;               /* bit a set for each axis a of the group */
} rt_group_view;

/* Backend functions a device calls (one table per backend). */
struct rt_device_ops {
    const char *name;            /* "threads", "mpi", "solo" */
    /* Blocks until every device of the group `mask` (a set of mesh axes) arrives. */
    void (*barrier)(rt_device *dev, uint32_t mask);
    /* A checked collective with G > 1 (AllGather, ReduceScatter, AllReduce, AllToAll). */
    void (*collective)(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                       const void *in, void *out);
    /* Root receives `v` of every device into all[device id]; all is NULL elsewhere. */
    void (*collect_i64)(rt_device *dev, int64_t v, int64_t *all);
    /* Copies this device's block `local` of output tensor `t` into the global
     * array `global` held by the root (NULL on other MPI ranks). */
    void (*gather)(rt_device *dev, const rt_tensor_desc *t, const void *local, void *global);
    /* Ends the whole job with status 1 after a fatal error (never returns). */
    void (*abort)(void) RT_NORETURN_PTR;
    /* Optional non-blocking collectives (async.c uses them when set, else a
     * communication thread): start returns a request that wait completes
     * and frees.  Same arguments as `collective`. */
    void *(*coll_start)(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                        const void *in, void *out);
    void (*coll_wait)(rt_device *dev, void *req);
    /* Point-to-point (p2p.c has checked the arguments; `peer` is the linear
     * id of another device, `bytes` >= 0): send queues a copy of buf[0..bytes)
     * for `peer` under `tag` and returns without waiting for it; recv blocks
     * until the first message from `peer` with `tag` not yet received has
     * arrived and copies it into buf, ending the job through
     * rt_p2p_size_mismatch when its size is not `bytes`. */
    void (*send)(rt_device *dev, int64_t peer, int32_t tag, const void *buf, int64_t bytes);
    void (*recv)(rt_device *dev, int64_t peer, int32_t tag, void *buf, int64_t bytes);
    /* Without waiting: 1 if a message from `peer` with `tag` has arrived
     * and not been received, else 0 (the message stays for recv). */
    int32_t (*probe)(rt_device *dev, int64_t peer, int32_t tag);
    /* Optional: NULL where the devices share memory (threads, solo), and
     * the caller reads device 0's data there instead.  Every device calls
     * it, in the same order with the same `bytes` (>= 0); device 0's
     * buf[0..bytes) is copied into every other device's buf.  `idle` 1:
     * the call may wait long (a server waiting for a request), so a device
     * that waits polls briefly, then sleeps between polls instead of
     * taking a core; 0: wait as the collectives do. */
    void (*broadcast)(rt_device *dev, void *buf, int64_t bytes, int idle);
    /* Optional: NULL where the devices read one clock (threads, solo).
     * Every device calls it, once, after its runs; it returns the seconds
     * the device's rt_now() reads ahead of device 0's, so that --profile
     * and --trace put the devices' spans on one clock (the MPI backend:
     * rt_mpi_clock_offset). */
    double (*clock_offset)(rt_device *dev);
};

/* The table for a device without peers (the --check reference, unit tests). */
extern const rt_device_ops rt_solo_ops;

/* Fills a device: id, coordinates from the mesh of `prog`, zeroed counters. */
void rt_device_init(rt_device *dev, const rt_program *prog, const rt_device_ops *ops,
                    void *backend, int64_t id);
/* Releases the profile arrays and the narrow-product helper of `dev`. */
void rt_device_release(rt_device *dev);
/* Coordinates of device `id` (row-major over the mesh axes, axis 0 major). */
void rt_mesh_coord(const rt_program *prog, int64_t id, int64_t *coord);
/* Devices in the mesh of `prog` (product of axis sizes). */
int64_t rt_mesh_size(const rt_program *prog);
/* Computes the group of `dev` for the axes of a collective. */
void rt_group_of(const rt_device *dev, int32_t naxes, const int32_t *axes, rt_group_view *g);
/* Linear id of the device of `dev`'s group whose group rank is `r`. */
int64_t rt_group_peer(const rt_device *dev, const rt_group_view *g, int64_t r);
/* This device's block index along a dim split over mesh axes `axes`
 * (naxes of them, major first; einrt.h's block numbering): the dim's
 * local block starts at this index times its per-device size.  Exits
 * through rt_fatal on an axis out of range. */
int64_t rt_block_index(rt_device *dev, const int64_t *axes, int64_t naxes);

/* ---- point-to-point transfers (p2p.c) ---- */

/* A receive found a message of `sent` bytes from device `peer` with `tag`
 * where it expected `expected`: ends the job with a message naming both
 * sizes (every backend reports it the same way). */
RT_NORETURN void rt_p2p_size_mismatch(const rt_device *dev, int64_t peer, int32_t tag,
                                      int64_t sent, int64_t expected);

/* ---- errors (fatal.c) ---- */

/* Prints "einrt: error: <msg>" (naming the device when `dev` is not NULL)
 * and ends the whole job through dev->ops->abort (_exit(1) for threads,
 * MPI_Abort for MPI; plain _exit(1) when dev is NULL). */
RT_NORETURN void rt_fatal(const rt_device *dev, const char *fmt, ...) RT_PRINTF(2, 3);
/* Formats a message into err (size errlen) and returns -1: the error
 * convention of the functions that report instead of ending the job. */
int rt_errf(char *err, size_t errlen, const char *fmt, ...) RT_PRINTF(3, 4);
/* malloc that ends the job on failure. */
void *rt_xmalloc(const rt_device *dev, size_t bytes);

/* ---- collectives (collective.c, coll_threads.c) ---- */

/* Copies descriptor `d` into `r` with axis_dim and axis_dim2 filled for
 * every axis (from dim and dim2 unless dim is RT_DIM_PER_AXIS; -1 past
 * naxes), so the code below reads one encoding.  Reads d's appended
 * members only when d->dim is RT_DIM_PER_AXIS (einrt.h: an older object's
 * descriptor ends before them).  Every collective entry point resolves its
 * descriptor first; the functions below take resolved ones. */
void rt_coll_resolve(const rt_coll_desc *d, rt_coll_desc *r);
/* Checks resolved `d` against the group; fatal with a message when
 * inconsistent. */
void rt_check_coll(const rt_device *dev, const rt_coll_desc *d, const rt_group_view *g);
/* The offset, per dim, of group rank r's block in an array of blocks of
 * shape `block` along the dims of resolved `d` (einrt.h's per-axis block
 * numbering): along axis_dim, or along axis_dim2 when `split` (an
 * AllToAll's split dims); 0 along dims no axis names. */
void rt_coll_block(const rt_coll_desc *d, const rt_group_view *g, int64_t r, int split,
                   const int64_t *block, int64_t *off);
/* The extent of the box one member of resolved AllToAll `d` sends another:
 * its input's shape with the split dims (axis_dim2) at their output size. */
void rt_alltoall_box(const rt_coll_desc *d, int64_t *ext);
/* Local semantics of the collective for a group of one device (copy), and
 * Slice for any group.  Used by every backend. */
void rt_coll_local(const rt_coll_desc *d, const rt_group_view *g, const void *in, void *out);
/*
 * The shared-memory algorithms of the threads backend.  `peer_in[j]` and
 * `peer_out[j]` are the buffers of group rank j, published before the call;
 * `sync` is the group barrier.  Each device writes only its own `out`.
 */
typedef struct rt_shared_bufs {
    const void *const *peer_in;  /* input buffer of each group rank */
    void *const *peer_out;       /* output buffer of each group rank */
} rt_shared_bufs;
/* AllGather: copies every peer's input into its block of out. */
void rt_threads_allgather(const rt_coll_desc *d, const rt_group_view *g, const rt_shared_bufs *b,
                          void *out);
/* ReduceScatter: reduces (d->reduce_op) this device's block of every peer's
 * input into out. */
void rt_threads_reducescatter(const rt_coll_desc *d, const rt_group_view *g,
                              const rt_shared_bufs *b, void *out);
/* AllReduce phase 1: this device reduces (d->reduce_op) its 1/G slice of the
 * flat array over the peers into its out. */
void rt_threads_allreduce_reduce(const rt_coll_desc *d, const rt_group_view *g,
                                 const rt_shared_bufs *b, void *out);
/* AllReduce phase 2 (after a barrier): copies the other slices from peers' outs. */
void rt_threads_allreduce_copy(const rt_coll_desc *d, const rt_group_view *g,
                               const rt_shared_bufs *b, void *out);
/* AllToAll: out's block of peer j along the grown dims = peer j's block of
 * this device along the split dims. */
void rt_threads_alltoall(const rt_coll_desc *d, const rt_group_view *g, const rt_shared_bufs *b,
                         void *out);
/*
 * dst = srcs[0] op srcs[1] op ... op srcs[G-1] element-wise over `n`
 * elements of `dtype`, folded in that order (group-rank order), with `op` an
 * enum rt_reduce_op: SUM adds (bf16 in f32, rounded once at the end); MAX
 * and MIN give the first NaN if any member has one, else the first of the
 * largest (smallest) elements -- an exact, associative choice, so any
 * grouping of the fold (MPI's) gives the same bits.  dst may be srcs[0] or
 * srcs[1] (each element is read before it is written).  The one
 * implementation of the combines: both backends and MeshSlice use it.
 */
void rt_reduce_arrays(int32_t op, int32_t dtype, void *dst, const void *const *srcs, int64_t G,
                      int64_t n);
/* rt_reduce_arrays with RT_REDUCE_SUM. */
void rt_sum_arrays(int32_t dtype, void *dst, const void *const *srcs, int64_t G, int64_t n);
/* "sum", "max", "min" or "?" for an enum rt_reduce_op. */
const char *rt_reduce_op_name(int32_t op);
/* Element range [lo, hi) of slice `r` of `n` elements cut into `G` near-equal slices. */
void rt_slice_range(int64_t n, int64_t G, int64_t r, int64_t *lo, int64_t *hi);

/* ---- barrier (barrier.c) ---- */

/*
 * What the barriers of one process know about all its device threads, to
 * detect a deadlock: the number of threads blocked in some barrier (low 32
 * bits) and of threads that have finished (high 32 bits), in one atomic word.
 * When every thread is blocked or finished and at least one is blocked, no
 * barrier can ever complete.
 */
typedef struct rt_waitstate {
    _Atomic uint64_t word;       /* blocked | finished << 32 */
    int64_t nthreads;            /* device threads of the process */
} rt_waitstate;

/* A reusable barrier for `count` threads (sense reversal by generation). */
typedef struct rt_barrier {
    pthread_mutex_t mu;          /* guards the fields below */
    pthread_cond_t cv;           /* signalled when a generation completes */
    int64_t count;               /* threads that take part */
    int64_t waiting;             /* threads arrived in the current generation */
    int64_t sleepers;            /* waiters of this generation asleep on cv (counted in ws) */
    _Atomic uint64_t generation; /* incremented each time all have arrived */
    int spin;                    /* polls of the generation before sleeping */
    int yield;                   /* 1: poll with sched_yield (devices outnumber cores); 0: pause */
    rt_waitstate *ws;            /* deadlock detection across barriers, or NULL */
} rt_barrier;
/* Initialises `b` for `count` threads; `ws` (may be NULL) is shared by all
 * barriers of the process for deadlock detection. */
void rt_barrier_init(rt_barrier *b, int64_t count, rt_waitstate *ws);
/* Waits for the other count-1 threads; 0 when they came, -1 (at once) when
 * waiting would never end because every device thread is blocked or done.
 * `dev` (NULL: none): the waiting device, whose CPU's turn it gives up. */
int rt_barrier_wait(rt_barrier *b, rt_device *dev);
/* Releases the mutex and condition variable of `b` (no thread may wait on it). */
void rt_barrier_destroy(rt_barrier *b);
/* Records that a device thread has finished; -1 if that leaves the threads
 * still blocked in barriers with no one to release them. */
int rt_waitstate_finish(rt_waitstate *ws);
/* Records that a device thread is about to sleep until another thread
 * wakes it (a barrier, a receive); -1 (and still counted) if every device
 * thread is now blocked or finished, so nothing could wake it. */
int rt_waitstate_block(rt_waitstate *ws);
/* Records that the thread which wakes `n` sleepers counted by
 * rt_waitstate_block has made them runnable again (before waking them). */
void rt_waitstate_wake(rt_waitstate *ws, int64_t n);

/* ---- threads backend (backend_threads.c) ---- */

/* Where the threads backend runs its device threads (--bind-to). */
typedef enum rt_bind {
    RT_BIND_NONE = 0, /* wherever the kernel schedules them */
    RT_BIND_CORE = 1, /* device d on the (d mod n)-th of the n CPUs the process may use */
    RT_BIND_CORE_ITEMS = 2, /* the same; with more devices than CPUs they take turns (rt_turns.h) */
} rt_bind;

/* One message of rt_send waiting in its receiver's mailbox (p2p_threads.c). */
typedef struct rt_msg {
    int64_t src;                 /* linear id of the sending device */
    int32_t tag;                 /* the sender's tag */
    int64_t bytes;               /* size of data */
    struct rt_msg *next;         /* next message of the mailbox, in arrival order */
    unsigned char data[];        /* the sender's bytes, copied */
} rt_msg;

/* The messages sent to one device and not yet received, in arrival order. */
typedef struct rt_mailbox {
    pthread_mutex_t mu;          /* guards the fields below */
    pthread_cond_t cv;           /* broadcast when a message arrives */
    rt_msg *head;                /* oldest message, or NULL (owned, malloc'd) */
    rt_msg **tail;               /* where the next message is linked */
    int64_t arrivals;            /* messages put so far (a sleeper's wake-up test) */
    int64_t sleepers;            /* receivers asleep on cv, counted in ws */
    rt_waitstate *ws;            /* the process's deadlock detection */
    struct rt_turn_waiter *turn; /* its receiver's wait for its CPU's turn (rt_turns.h), or NULL */
} rt_mailbox;

/* Initialises an empty mailbox whose sleepers count in `ws`. */
void rt_mailbox_init(rt_mailbox *mb, rt_waitstate *ws);
/* Appends a copy of buf[0..bytes) from device `src` with `tag` and wakes
 * the receivers waiting on `mb`; never blocks on them (`dev`: the sender,
 * for an out-of-memory error). */
void rt_mailbox_put(rt_device *dev, rt_mailbox *mb, int64_t src, int32_t tag, const void *buf,
                    int64_t bytes);
/* Receiver `dev`: waits for the oldest message of `mb` from `src` with
 * `tag`, copies it into buf and frees it.  Ends the job with a message
 * when its size is not `bytes`, or when waiting would never end (every
 * device thread blocked or finished). */
void rt_mailbox_take(rt_device *dev, rt_mailbox *mb, int64_t src, int32_t tag, void *buf,
                     int64_t bytes);
/* Whether `mb` holds a message from `src` with `tag` (1) or not (0); never
 * blocks beyond the mailbox's lock, and leaves the message in place. */
int32_t rt_mailbox_peek(rt_mailbox *mb, int64_t src, int32_t tag);
/* Frees what is left in `mb` and its mutex and condition variable; the
 * number of messages that were never received, the oldest of them
 * described in *first (its data pointer not usable) when there was one. */
int64_t rt_mailbox_destroy(rt_mailbox *mb, rt_msg *first);

/* Runs fn(dev, arg) on one thread per device of `prog`'s mesh and joins
 * them; every device uses the threads ops.  `profiling` is an
 * rt_profile_mode.  Used by the job and by tests. */
void rt_threads_launch(const rt_program *prog, int profiling, rt_bind bind,
                       void (*fn)(rt_device *dev, void *arg), void *arg);

/* ---- MPI backend (backend_mpi.c, only in libeinrt_mpi) ---- */

/* Runs fn(dev, arg) on this rank's device of `prog`'s mesh (MPI must be
 * initialised and the rank count equal the mesh size); every rank calls it. */
void rt_mpi_launch(const rt_program *prog, int profiling,
                   void (*fn)(rt_device *dev, void *arg), void *arg);

/* ---- einsum (einsum.c, einsum_kernels.c, einsum_mixed.c, gemv_narrow.c) ---- */

/*
 * One GEMM (or matrix-vector product) of rt_einsum, per batch index:
 * c = alpha op(a) op(b) + beta c, computed in `dtype` (RT_F32 or RT_F64).
 * a is [M x K] row-major with leading dimension lda (elements), or [K x M]
 * when ta; b is [K x N], or [N x K] when tb; c is [M x N], or [N x M] when
 * tc.  a and b are stored as adt and bdt: `dtype`, or a narrower dtype
 * (RT_I8, RT_BF16; RT_F32 under RT_F64) that rt_gemm_run converts block by
 * block.  At most one of a and b is narrow (rt_einsum widens the other),
 * except two bf16 operands (rt_bf16.h: oneDNN; without it, a is widened
 * whole first).
 */
typedef struct rt_gemm {
    int32_t dtype;
    int64_t M, N, K;
    double alpha, beta;
    const void *a;
    int64_t lda;
    int ta;
    int32_t adt;
    const void *b;
    int64_t ldb;
    int tb;
    int32_t bdt;
    void *c;
    int64_t ldc;
    int tc;
    rt_gemv_split *split; /* the device's helper for a large narrow product, or NULL */
    rt_bf16_gemm *bf16;   /* the device's bf16 route (a and b both bf16), or NULL: sgemm */
} rt_gemm;

/* Elements of the f32/f64 scratch rt_gemm_run needs for g's narrow
 * operand (rows of its stored matrix per block times its columns, or the
 * narrow matrix-vector sweep's: rt_gemv_narrow_scratch), or 0 when
 * neither operand is narrow.  Two bf16 operands: 0 on a device whose
 * oneDNN route is READY (a call oneDNN refuses then takes its own), else
 * what b needs once a is widened.  The same for every batch index. */
int64_t rt_gemm_scratch_elems(const rt_gemm *g);

/* Runs g through cblas_[sd]gemm or cblas_[sd]gemv (one row or one column:
 * gemv streams at memory bandwidth).  A narrow operand is converted into
 * `scratch` (rt_gemm_scratch_elems elements of g->dtype) a block of its
 * stored rows at a time, each block one GEMM over a slice of M, N or K
 * (a K slice adds into c); sizes must fit BLAS ints (the caller checks).
 * Two bf16 operands go to oneDNN (rt_gemm_bf16_dnnl) when g->bf16 has it,
 * else a is widened whole (malloc) and b converted by blocks as above. */
void rt_gemm_run(const rt_gemm *g, void *scratch);

/* The narrow matrix-vector products (gemv_narrow.c): rt_gemv.h. */

/* dst[i] = src[i] converted from src_dtype (RT_F32, RT_F64, RT_BF16, RT_I8)
 * to dst_dtype (RT_F32 or RT_F64), exactly, for i < n (einsum_mixed.c). */
void rt_convert_n(int32_t src_dtype, const void *src, int32_t dst_dtype, void *dst, int64_t n);

/*
 * dst = alpha * sum over the labels of src missing in dst, with dst's dims
 * in the order of `dlabels` (a permutation, sum and scale at once).  f32 or
 * f64.  Labels of dst must all occur in src, once.  `dev` is for errors.
 */
void rt_reduce_permute(rt_device *dev, int32_t dtype, const void *src, int32_t srank,
                       const int64_t *sshape, const int32_t *slabels, void *dst, int32_t drank,
                       const int32_t *dlabels, double alpha);

/*
 * Under an address-space limit (RLIMIT_AS, `ulimit -v`), the bytes that
 * the `ndevices` devices of this process must leave free for their fixed
 * needs (an OpenBLAS packing buffer, a stack, a malloc arena: 200 MiB
 * each); 0 when there is no limit.  Ends the job (rt_fatal on `dev`, NULL
 * for the whole process) when even that is not free.  OpenBLAS retries a
 * failed buffer allocation forever, so a shortage must surface in rt_alloc
 * instead: each device keeps the result in `as_reserve`, and rt_alloc
 * refuses an allocation that would eat into it.  Called before the
 * devices run.
 */
int64_t rt_check_address_space(const rt_device *dev, int64_t ndevices);

/* ---- random inputs (random.c) ---- */

/* The splitmix64 finaliser (increment 0x9e3779b97f4a7c15): 64 well-mixed
 * bits from `x`, the one hash of random inputs and the --seed shuffle. */
uint64_t rt_splitmix64(uint64_t x);

/* Fills the block of `t` at global `start` (extent local_shape) with the
 * values of the global array generated from (seed, t->name). */
void rt_random_fill_block(uint64_t seed, const rt_tensor_desc *t, const int64_t *start,
                          const int64_t *local_shape, void *dst);

/* ---- training data (data.c) ---- */

/* One --data file: the rows [N, rest...] of a role-INPUT tensor of global
 * shape [B, rest...], mapped once per process and read by all its devices. */
typedef struct rt_data_file {
    const char *name;            /* the input it feeds (the program's string) */
    const char *flag;            /* the flag that named it, for messages (its dataset's) */
    const char *path;            /* the file (points into argv) */
    int32_t dtype;               /* the input's enum rt_dtype */
    rt_npy_header header;        /* its checked header */
    int fd;                      /* open for the run, to notice a file that shrinks; or -1 */
    const unsigned char *map;    /* the whole file, mapped read-only; or NULL */
    size_t map_bytes;            /* bytes mapped */
    uint64_t hash;               /* hash of its data (after the header), once `hashed` */
    int hashed;                  /* 1 once rt_data_hash has computed `hash` */
} rt_data_file;

/* The --data files of a job and the order their rows are used in. */
typedef struct rt_dataset {
    rt_data_file *files;         /* one per --data pair, malloc'd, owned */
    int nfiles;                  /* entries in files */
    int64_t rows;                /* N: rows of every file */
    int64_t batch;               /* B: rows per step (dim 0 of the inputs) */
    int64_t batches;             /* N div B: steps per epoch (the remainder rows are unused) */
    int shuffle;                 /* 1: rows in a permutation per epoch (--seed) */
    uint64_t seed;               /* the permutation's seed */
    const char *flag;            /* "--eval-data" for the held-out set; NULL: "--data" */
} rt_dataset;

/* Opens, checks and maps --data file `path` for input `t` (global shape
 * [B, rest...]) and appends it to ds->files.  Checks, with a message
 * naming ds->flag (--data by default), the input and the file: the dtype, C order, the
 * rank and rest dims, N >= B, N equal to the other files', the size.
 * The first file sets ds->rows and ds->batch.  -1 on error. */
int rt_data_add(rt_dataset *ds, const rt_tensor_desc *t, const char *path, char *err,
                size_t errlen);
/* Unmaps and closes every file of `ds` and frees its list. */
void rt_data_close(rt_dataset *ds);
/* Position `i` (0 <= i < n) of the permutation of epoch `epoch` of n rows
 * drawn from `seed`: a 4-round Feistel network on the smallest even number
 * of bits that holds n, cycle-walked into [0, n) (docs/runtime.md gives
 * the rounds).  Computed from its arguments alone, so every rank and
 * thread agrees without communication and without storing the permutation. */
int64_t rt_shuffle_index(uint64_t seed, int64_t epoch, int64_t n, int64_t i);
/* The dataset row that holds row `i` (0 <= i < B) of the batch of the step
 * with 0-based index `step`: batch j = step mod (N div B) of epoch
 * e = step div (N div B) is positions j*B .. j*B+B-1 of the epoch's order
 * (the identity, or rt_shuffle_index with `seed`, e). */
int64_t rt_data_row(const rt_dataset *ds, int64_t step, int64_t i);
/* Copies the device's block of the batch of step `step` (0-based) of
 * ds->files[f] into `dst` (local shape of `t`, the input in the device's
 * program; bf16 rounded from the file's f32).  Ends the job with a message
 * if the file has shrunk since it was checked. */
void rt_data_fill(rt_device *dev, const rt_dataset *ds, int f, const rt_tensor_desc *t,
                  int64_t step, void *dst);
/* Computes the hash of the data of every file of `ds` not hashed yet
 * (splitmix64 chained over its little-endian 64-bit words; one pass over
 * each file); -1 and a message if a file has shrunk since it was checked. */
int rt_data_hash(rt_dataset *ds, char *err, size_t errlen);
/* The record of the data order after `steps` steps that a checkpoint
 * keeps (DIR/data.txt): the seed, N, B, the position of the next step and
 * per file its input, dtype, shape, hash (rt_data_hash first) and path;
 * malloc'd text, NULL when out of memory. */
char *rt_data_record(const rt_dataset *ds, int64_t steps);
/* --resume: compares record `rec` (read from `where`) with the one of
 * `ds` after `steps` steps; -1 and a message naming the difference (the
 * seed, a --data file missing, added or with other contents, the batch)
 * when the resumed run would read other batches.  Paths are not compared. */
int rt_data_check_record(const rt_dataset *ds, int64_t steps, const char *rec, const char *where,
                         char *err, size_t errlen);

/* ---- checkpoints of --save and --resume (checkpoint.c) ---- */

/* Before the run, with --params DIR (params.c): points job->in_paths of
 * every param at its file in checkpoint DIR (job->param_paths owns them).
 * -1 and a message if DIR is not a checkpoint, lacks a param's file (the
 * message lists what it holds), a param is also given by --input, the
 * program has no params, or --resume is given too.  Dtypes and shapes are
 * checked later with every input file's (rt_check_input_files). */
int rt_params_resolve(rt_job *job, char *err, size_t errlen);

/* The file --resume reads param or state NAME of checkpoint DIR from:
 * DIR/NAME.npy, or DIR/NAME.npy.next while a save staged in DIR is being
 * applied (checkpoint.c); malloc'd (the caller frees it), NULL when out
 * of memory. */
char *rt_checkpoint_file(const char *dir, const char *name);
/* The files of a checkpoint of `p` in DIR, as --save writes them and
 * --resume reads them: DIR/steps.txt, DIR/data.txt, DIR/hparams.txt,
 * DIR/NAME.npy for every param and state (the staged FILE.next aside).  *files is a malloc'd
 * array of *n malloc'd paths, freed by the caller (also on failure);
 * -1 when out of memory. */
int rt_checkpoint_files(const char *dir, const rt_program *p, char ***files, int *n);
/* Before the run, for --save DIR: creates DIR and its missing parents, or
 * checks that the existing path is a writable directory, and that every
 * param and state name of `p` can name a file.  -1 and a message if not. */
int rt_checkpoint_prepare(const char *dir, const rt_program *p, char *err, size_t errlen);
/* Reads the step count of checkpoint DIR into *steps (steps.txt, or
 * steps.txt.next while a staged save is applied); -1 and a message when
 * DIR is not a directory or has no valid step file (never saved, or its
 * first save was interrupted). */
int rt_checkpoint_read_steps(const char *dir, int64_t *steps, char *err, size_t errlen);
/* The same for the flag `flag` ("--params"), which starts its messages
 * (rt_checkpoint_read_steps's is "--resume"). */
int rt_checkpoint_steps(const char *flag, const char *dir, int64_t *steps, char *err,
                        size_t errlen);
/* Reads DIR/data.txt (or its staged data.txt.next, as for the step
 * count), the record of the data order, into *text (malloc'd) and its
 * path into *path (malloc'd, for messages); -1 and a message when it
 * cannot be read. */
int rt_checkpoint_read_record(const char *dir, char **text, char **path, char *err,
                              size_t errlen);
/* --resume: compares the hyperparameters recorded in checkpoint DIR
 * (hparams.txt, or its staged .next) with p->hparams, every optimized
 * param of the program against the checkpoint's line for it.  0 when they
 * agree; 1 and the first difference in `why` (naming the param, the
 * hyperparameter and both values); 2 when DIR has no record (saved by an
 * einc from before hyperparameters were recorded); -1 and a message when
 * it cannot be read. */
int rt_checkpoint_check_hparams(const char *dir, const rt_program *p, char *why, size_t whylen);
/* Writes checkpoint DIR after `steps` steps: stages data.txt from `record`
 * (rt_data_record), hparams.txt from p->hparams, NAME.npy for every param and state k of `p` from
 * values[k] (its global array) and the step file as FILE.next, each
 * atomically, then renames them into place, the step file last (first
 * finishing a save an earlier run left half applied).  -1 and a message on
 * the first failure; DIR then still holds one whole step, the previous or
 * the new one. */
int rt_checkpoint_write(const char *dir, const rt_program *p, void *const *values,
                        const char *record, int64_t steps, char *err, size_t errlen);

/* ---- program descriptors (program.c) ---- */

/* Checks the program's descriptors (ABI version, mesh, shapes); message and -1 if bad. */
int rt_check_program(const rt_program *prog, char *err, size_t errlen);

/* ---- measured vs predicted, traces (profile.c, trace.c) ---- */

/* Median of v[0..n) (sorts v in place); -1 if n == 0. */
double rt_median(double *v, int64_t n);
/* Appends a span to dev's profile (drops it past RT_MAX_SPANS). */
void rt_profile_add_span(rt_device *dev, int32_t op_id, double begin, double end);
/*
 * Root, --profile: per op, the calls, the measured median time per call
 * from the spans of every device in job->trace (profile.c says which
 * device's), the cost pass's prediction embedded by einc (prog->op_predicted,
 * for the profile prog->hw_name) and the relative error (predicted -
 * measured) / measured; then the sums.
 */
void rt_profile_print(FILE *f, const rt_job *job);
/* 1 if op label `name` ("V = AllGather_X U", codegen/program.c) names an
 * AllGather, ReduceScatter, AllReduce or AllToAll. */
int rt_op_label_is_collective(const char *name);
/* rt_recv's measure of its wait inside a pipeline item (pipe_items.c):
 * begin returns rt_now() when --trace/--profile is on and an item is open,
 * else -1; end, given that value, records the RT_SPAN_RECV_WAIT span from
 * it to now (nothing for -1). */
double rt_pipe_recv_begin(const rt_device *dev);
void rt_pipe_recv_end(rt_device *dev, double begin);
/*
 * Root, --profile of a pipelined program (prog->pipeline_axes != 0, after
 * rt_profile_print): the line "pipeline: Z stages, M microbatches,
 * <schedule>: measured bubble X% (median over runs), predicted Y%" from the
 * item spans in job->trace (pipe_bubble.c says how); nothing for a program
 * that is not pipelined.
 */
void rt_pipe_bubble_print(FILE *f, const rt_job *job);
/* rt_pipe_bubble_print for devices sharing `cpus` CPUs (the threads
 * backend: the CPUs the process may run on), device d pinned to the
 * (d mod cpus)-th when `pinned`: with fewer CPUs than devices the line
 * adds "; D devices on C CPUs: core-idle bubble X%" (pipe_bubble.c). */
void rt_pipe_bubble_print_cpus(FILE *f, const rt_job *job, int64_t cpus, bool pinned);
/* Spans per device that --trace keeps for `runs` runs of `prog`. */
int64_t rt_trace_capacity(const rt_program *prog, int64_t runs);
/* Every device calls this after its runs: sends its first job->trace_cap
 * spans (times from its origin, ns) to the root's job->trace through
 * collect_i64, the same number of calls on every device. */
void rt_trace_collect(rt_device *dev, rt_job *job);
/* Root: writes job->trace as a Chrome trace-event JSON file to `path`
 * atomically (temp file in the same directory, fsync, rename).  -1 and a
 * message in err on failure. */
int rt_trace_write(const rt_job *job, const char *path, char *err, size_t errlen);

/* Seconds from a monotonic clock. */
double rt_now(void);

#endif
