/*
 * backend_mpi.c - the MPI backend: one rank per device.
 *
 * Setup: MPI_Init; the job checks that the number of ranks equals the mesh
 * size (else rank 0 prints an error and every rank exits 1).  The ranks form
 * a periodic Cartesian communicator with the mesh's dims (MPI_Cart_create,
 * no reordering, so rank = linear device id, row-major, axis 0 major).  For
 * every ordered sequence of mesh axes a communicator is created up front
 * (all ranks take part in each creation, so no lazy collective creation can
 * deadlock): ascending sequences with MPI_Cart_sub, whose rank order is the
 * mesh order, i.e. our mixed-radix group rank; other orders with
 * MPI_Comm_split keyed by the mixed-radix rank in that order.
 *
 * Collectives use MPI's own algorithms; only layout is ours:
 *   AllGather      MPI_Allgather of the whole block, then unpack the G blocks
 *                  into place along `dim` (the threads AllGather loop, fed
 *                  with pointers into the receive buffer)
 *   ReduceScatter  pack block j along `dim` to slot j, pairwise exchange of
 *                  the slots (MPI_Isend + MPI_Irecv), then
 *                  the reduction of the G blocks in group-rank order
 *                  (rt_reduce_arrays with the descriptor's reduce_op, as the
 *                  threads backend reduces); see rs_exchange
 *   AllReduce      MPI_Allreduce: MPI_SUM for sums; for max / min our own
 *                  MPI operators (make_reduce_ops), which run rt_reduce_arrays
 *                  too, since MPI_MAX / MPI_MIN do not define what a NaN gives
 *                  (Open MPI's compare and select drops a NaN in one operand
 *                  order), and numpy.maximum / minimum must give NaN
 *   AllToAll       pack block j along `dim2` to slot j, MPI_Alltoall, unpack
 *                  slot j to block j along `dim`
 * "Block j along `dim`" is, for a collective whose axes work along
 * different dims (seed 001's AllGather_XY of [B_X, D_Y]), the box of group
 * rank j along each of its dims (rt_coll_block): the communicator is the
 * one of its axes in their order, as for any group, and only the packing
 * and unpacking around MPI's call differ.
 * bf16 travels as f32 (converted before, rounded after), so sums are in f32.
 *
 * A broadcast from rank 0 (mpi_broadcast, only --serve's engine uses it)
 * is MPI_Ibcast on the Cartesian communicator, waited for or, when the
 * wait may be long, polled with sleeps in between.
 *
 * Point-to-point messages (rt_send / rt_recv) travel on a communicator of
 * their own (a duplicate of the Cartesian one, so no tag of theirs can
 * match the ReduceScatter exchange's), addressed by world rank = device id
 * and the caller's tag.  mpi_p2p.c has the details.
 */
#include <cblas.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"
#include "rt_job.h"
#include "rt_mpi.h"

/* Codes of ordered axis sequences: sum of (axis+1) * 5^k. */
#define NCODES 625

/* What the rank's device shares with the backend. */
typedef struct mworld {
    const rt_program *prog;      /* the program */
    MPI_Comm cart;               /* all devices, Cartesian */
    MPI_Comm comm[NCODES];       /* per ordered axis sequence, or MPI_COMM_NULL */
    MPI_Op reduce[3];            /* AllReduce operator per enum rt_reduce_op */
    rt_mpi_p2p p2p;              /* rt_send / rt_recv state (mpi_p2p.c) */
} mworld;

RT_NORETURN static void mpi_abort(void)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
    _Exit(1);
}

static int seq_code(int32_t n, const int32_t *axes)
{
    int code = 0;
    if (n > RT_MAX_AXES)
        n = RT_MAX_AXES; /* never: the program was checked; tells the compiler too */
    for (int32_t k = n - 1; k >= 0; k--)
        code = code * 5 + axes[k] + 1;
    return code;
}

/* Creates the communicators of every ordered sequence extending axes[0..n). */
static void make_comms(mworld *w, const int64_t *coord, int32_t n, int32_t *axes)
{
    const rt_program *p = w->prog;
    if (n > 0) {
        int ascending = 1;
        for (int32_t k = 1; k < n; k++)
            ascending &= axes[k] > axes[k - 1];
        MPI_Comm c;
        if (ascending) {
            int remain[RT_MAX_AXES] = {0};
            for (int32_t k = 0; k < n; k++)
                remain[axes[k]] = 1;
            MPI_Cart_sub(w->cart, remain, &c);
        } else {
            int64_t color = 0, key = 0;
            uint32_t mask = 0;
            for (int32_t k = 0; k < n; k++) {
                mask |= 1u << axes[k];
                key = key * p->axis_sizes[axes[k]] + coord[axes[k]];
            }
            for (int32_t a = 0; a < p->naxes; a++)
                color = color * p->axis_sizes[a] + ((mask >> a) & 1u ? 0 : coord[a]);
            MPI_Comm_split(w->cart, (int)color, (int)key, &c);
        }
        w->comm[seq_code(n, axes)] = c;
    }
    /* n < RT_MAX_AXES is implied by naxes <= RT_MAX_AXES; stated so that
     * the compiler sees axes[n] stays in bounds. */
    if (n >= p->naxes || n >= RT_MAX_AXES)
        return;
    for (int32_t a = 0; a < p->naxes; a++) {
        int used = 0;
        for (int32_t k = 0; k < n; k++)
            used |= axes[k] == a;
        if (used)
            continue;
        axes[n] = a;
        make_comms(w, coord, n + 1, axes);
    }
}

/*
 * The MPI operators of AllReduce(MAX) and AllReduce(MIN): inout = in op
 * inout with rt_reduce_arrays, the combine both backends use, on MPI_FLOAT
 * (f32, and bf16 on the wire) or MPI_DOUBLE.  Created non-commutative, so
 * MPI keeps the operands in rank order (in = the lower ranks); the combine
 * is exact and associative, so MPI's grouping gives the bits of the threads
 * backend's left fold on every rank.
 */
static void reduce_op_fn(int32_t op, void *in, void *inout, int *len, MPI_Datatype *type)
{
    const void *srcs[2] = {in, inout};
    rt_reduce_arrays(op, *type == MPI_DOUBLE ? RT_F64 : RT_F32, inout, srcs, 2, *len);
}

static void max_op_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    reduce_op_fn(RT_REDUCE_MAX, in, inout, len, type);
}

static void min_op_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    reduce_op_fn(RT_REDUCE_MIN, in, inout, len, type);
}

/* Fills w->reduce: MPI_SUM and the two operators above. */
static void make_reduce_ops(mworld *w)
{
    w->reduce[RT_REDUCE_SUM] = MPI_SUM;
    MPI_Op_create(max_op_fn, 0, &w->reduce[RT_REDUCE_MAX]);
    MPI_Op_create(min_op_fn, 0, &w->reduce[RT_REDUCE_MIN]);
}

/* Frees the operators make_reduce_ops created (MPI_SUM is MPI's own). */
static void free_reduce_ops(mworld *w)
{
    MPI_Op_free(&w->reduce[RT_REDUCE_MAX]);
    MPI_Op_free(&w->reduce[RT_REDUCE_MIN]);
}

static MPI_Comm comm_of(rt_device *dev, int32_t n, const int32_t *axes)
{
    mworld *w = dev->backend;
    if (n == 0)
        return MPI_COMM_SELF;
    MPI_Comm c = w->comm[seq_code(n, axes)];
    if (c == MPI_COMM_NULL)
        rt_fatal(dev, "no communicator for this group of mesh axes");
    return c;
}

static void mpi_barrier(rt_device *dev, uint32_t mask)
{
    int32_t axes[RT_MAX_AXES], n = 0;
    for (int32_t a = 0; a < dev->prog->naxes; a++)
        if ((mask >> a) & 1u)
            axes[n++] = a;
    if (n)
        MPI_Barrier(comm_of(dev, n, axes));
}

static int as_int(rt_device *dev, int64_t n)
{
    if (n > INT_MAX)
        rt_fatal(dev, "message of %lld elements exceeds MPI's int counts", (long long)n);
    return (int)n;
}

/*
 * ReduceScatter on MPI, in three steps: rs_pack lays out block j along
 * `dim` (the part rank j keeps) as slot j of a send buffer; rs_exchange
 * posts the pairwise exchange, rank r sending slot (r + s) mod G to that
 * rank and receiving from rank (r - s) mod G into slot (r - s) mod G of a
 * receive buffer, s = 1..G-1; after the requests complete, rs_reduce
 * combines the G blocks for r in group-rank order (sum, max or min).  Each
 * device sends and receives (G - 1)/G of its buffer once, what the ring of
 * seed 001 moves, in G - 1 messages.  Not MPI_Reduce_scatter_block: on
 * the 2-core VM, with ranks sharing cores, Open MPI 4.1's took 4.4 ms for
 * 7 MB where the exchange takes 2.5 ms, and 654 ms for 32 MiB over 4 ranks
 * against 442 (docs/runtime.md, "MPI backend"); and the reduction in rank
 * order makes both backends' results bitwise the same, for max and min as
 * for sums.
 */
static char *rs_pack(rt_device *dev, const rt_coll_desc *e, const rt_group_view *g, const void *in)
{
    size_t es = rt_dtype_size(e->dtype);
    int64_t nout = rt_numel(e->rank, e->out_shape);
    int64_t zero[RT_MAX_RANK] = {0}, off[RT_MAX_RANK];
    char *send = rt_xmalloc(dev, (size_t)(g->size * nout) * es);
    for (int64_t j = 0; j < g->size; j++) {
        rt_coll_block(e, g, j, 0, e->out_shape, off);
        rt_copy_box(send + (size_t)(j * nout) * es, e->out_shape, zero, in, e->in_shape, off,
                    e->out_shape, e->rank, es);
    }
    return send;
}

/* Message tag of the ReduceScatter exchange (point-to-point traffic of
 * the runtime's communicators is only this). */
#define RS_TAG 0x5253

/* Posts the 2 (G - 1) requests of the exchange (see rs_pack); the caller
 * waits for them and frees the returned array. */
static MPI_Request *rs_exchange(rt_device *dev, MPI_Comm comm, MPI_Datatype T, size_t es,
                                const rt_group_view *g, int64_t nout, const char *send, char *recv)
{
    int n = as_int(dev, nout);
    int64_t G = g->size, r = g->rank; /* comm's rank order is the group rank */
    MPI_Request *reqs = rt_xmalloc(dev, (size_t)(2 * G) * sizeof *reqs);
    for (int64_t s = 1; s < G; s++) {
        int64_t from = (r - s + G) % G, to = (r + s) % G;
        MPI_Irecv(recv + (size_t)(from * nout) * es, n, T, (int)from, RS_TAG, comm,
                  &reqs[2 * (s - 1)]);
        MPI_Isend(send + (size_t)(to * nout) * es, n, T, (int)to, RS_TAG, comm,
                  &reqs[2 * (s - 1) + 1]);
    }
    return reqs;
}

/* The MPI type of elements of `dtype` on the wire (bf16 travels as f32);
 * i8 is only moved, never reduced, so its type needs no reduction op. */
static MPI_Datatype wire_type(int32_t dtype)
{
    return dtype == RT_F64 ? MPI_DOUBLE : dtype == RT_I8 ? MPI_INT8_T : MPI_FLOAT;
}

/* out = the reduction (`op`, an enum rt_reduce_op) over group ranks
 * j = 0..G-1 of block r = g->rank of rank j: its own from `send`, the others
 * from `recv`. */
static void rs_reduce(rt_device *dev, const rt_group_view *g, int32_t op, int32_t dtype,
                      int64_t nout, const char *send, const char *recv, void *out)
{
    int64_t G = g->size, r = g->rank;
    size_t es = rt_dtype_size(dtype);
    const void **srcs = rt_xmalloc(dev, (size_t)G * sizeof *srcs);
    for (int64_t j = 0; j < G; j++)
        srcs[j] = j == r ? send + (size_t)(r * nout) * es : recv + (size_t)(j * nout) * es;
    rt_reduce_arrays(op, dtype, out, srcs, G, nout);
    free(srcs);
}

static void *mpi_coll_start(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                            const void *in, void *out);
static void mpi_coll_wait(rt_device *dev, void *req);

static void mpi_collective(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                           const void *in, void *out)
{
    if (d->kind == RT_REDUCESCATTER) { /* one implementation of the exchange: start, then wait */
        mpi_coll_wait(dev, mpi_coll_start(dev, d, g, in, out));
        return;
    }
    MPI_Comm comm = comm_of(dev, g->naxes, g->axes);
    int64_t G = g->size, nin = rt_numel(d->rank, d->in_shape), nout = rt_numel(d->rank, d->out_shape);
    int bf16 = d->dtype == RT_BF16;
    int32_t edt = bf16 ? RT_F32 : d->dtype; /* element type on the wire */
    size_t es = rt_dtype_size(edt);
    MPI_Datatype T = wire_type(edt);
    rt_coll_desc e = *d; /* the descriptor on wire elements */
    e.dtype = edt;
    const void *ein = in;
    void *eout = out;
    float *win = NULL, *wout = NULL;
    if (bf16) {
        win = rt_xmalloc(dev, (size_t)nin * sizeof *win);
        wout = rt_xmalloc(dev, (size_t)nout * sizeof *wout);
        rt_bf16_to_f32_n(in, win, nin);
        ein = win;
        eout = wout;
    }
    int64_t zero[RT_MAX_RANK] = {0};
    switch (d->kind) {
    case RT_ALLGATHER: {
        char *recv = rt_xmalloc(dev, (size_t)(G * nin) * es);
        MPI_Allgather(ein, as_int(dev, nin), T, recv, as_int(dev, nin), T, comm);
        const void **peers = rt_xmalloc(dev, (size_t)G * sizeof *peers);
        for (int64_t j = 0; j < G; j++)
            peers[j] = recv + (size_t)(j * nin) * es;
        rt_shared_bufs b = {peers, NULL};
        rt_threads_allgather(&e, g, &b, eout);
        free(peers);
        free(recv);
        break;
    }
    case RT_REDUCESCATTER: /* started and waited for above */
        break;
    case RT_ALLREDUCE:
        MPI_Allreduce(ein, eout, as_int(dev, nin), T,
                      ((mworld *)dev->backend)->reduce[d->reduce_op], comm);
        break;
    case RT_ALLTOALL: {
        /* Slot j of the send buffer is the box rank j gets (its block
         * along the split dims); slot j received lands at rank j's block
         * along the grown dims. */
        int64_t ext[RT_MAX_RANK], off[RT_MAX_RANK];
        rt_alltoall_box(d, ext);
        int64_t blk = rt_numel(d->rank, ext);
        char *send = rt_xmalloc(dev, (size_t)nin * es);
        char *recv = rt_xmalloc(dev, (size_t)nout * es);
        for (int64_t j = 0; j < G; j++) {
            rt_coll_block(d, g, j, 1, d->out_shape, off);
            rt_copy_box(send + (size_t)(j * blk) * es, ext, zero, ein, d->in_shape, off, ext,
                        d->rank, es);
        }
        MPI_Alltoall(send, as_int(dev, blk), T, recv, as_int(dev, blk), T, comm);
        for (int64_t j = 0; j < G; j++) {
            rt_coll_block(d, g, j, 0, d->in_shape, off);
            rt_copy_box(eout, d->out_shape, off, recv + (size_t)(j * blk) * es, ext, zero, ext,
                        d->rank, es);
        }
        free(send);
        free(recv);
        break;
    }
    }
    if (bf16)
        rt_f32_to_bf16_n(wout, out, nout);
    free(win);
    free(wout);
}

/* A non-blocking AllGather or ReduceScatter in flight (rt_async, async.c). */
typedef struct mreq {
    MPI_Request req;             /* the MPI request */
    rt_coll_desc e;              /* the descriptor on wire elements */
    rt_group_view g;             /* the group */
    char *recv;                  /* AllGather: the G received blocks */
    char *send;                  /* ReduceScatter: the packed send buffer */
    char *rs_recv;               /* ReduceScatter: the blocks received from the peers */
    MPI_Request *rs_reqs;        /* ReduceScatter: its 2 (G - 1) requests (rs_exchange) */
    float *win, *wout;           /* bf16 <-> f32 staging, or NULL */
    void *out;                   /* the caller's output */
} mreq;

/* Starts AllGather / ReduceScatter `d` with MPI_Iallgather / the
 * non-blocking pairwise exchange (packed as mpi_collective packs); other kinds
 * run at once.  The request is completed by mpi_coll_wait. */
static void *mpi_coll_start(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                            const void *in, void *out)
{
    mreq *r = rt_xmalloc(dev, sizeof *r);
    memset(r, 0, sizeof *r);
    r->req = MPI_REQUEST_NULL;
    r->g = *g;
    r->out = out;
    if (d->kind != RT_ALLGATHER && d->kind != RT_REDUCESCATTER) {
        mpi_collective(dev, d, g, in, out);
        return r;
    }
    MPI_Comm comm = comm_of(dev, g->naxes, g->axes);
    int64_t G = g->size, nin = rt_numel(d->rank, d->in_shape), nout = rt_numel(d->rank, d->out_shape);
    int bf16 = d->dtype == RT_BF16;
    int32_t edt = bf16 ? RT_F32 : d->dtype;
    size_t es = rt_dtype_size(edt);
    MPI_Datatype T = wire_type(edt);
    r->e = *d;
    r->e.dtype = edt;
    const void *ein = in;
    if (bf16) {
        r->win = rt_xmalloc(dev, (size_t)nin * sizeof *r->win);
        r->wout = rt_xmalloc(dev, (size_t)nout * sizeof *r->wout);
        rt_bf16_to_f32_n(in, r->win, nin);
        ein = r->win;
    }
    if (d->kind == RT_ALLGATHER) {
        r->recv = rt_xmalloc(dev, (size_t)(G * nin) * es);
        MPI_Iallgather(ein, as_int(dev, nin), T, r->recv, as_int(dev, nin), T, comm, &r->req);
    } else {
        r->send = rs_pack(dev, &r->e, g, ein);
        r->rs_recv = rt_xmalloc(dev, (size_t)nin * es);
        r->rs_reqs = rs_exchange(dev, comm, T, es, g, nout, r->send, r->rs_recv);
    }
    return r;
}

static void mpi_coll_wait(rt_device *dev, void *req)
{
    mreq *r = req;
    if (r->req != MPI_REQUEST_NULL)
        MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    int bf16 = r->win != NULL;
    void *eout = bf16 ? (void *)r->wout : r->out;
    if (r->rs_reqs) {
        MPI_Waitall((int)(2 * (r->g.size - 1)), r->rs_reqs, MPI_STATUSES_IGNORE);
        rs_reduce(dev, &r->g, r->e.reduce_op, r->e.dtype, rt_numel(r->e.rank, r->e.out_shape),
                  r->send, r->rs_recv, eout);
    }
    if (r->recv) {
        int64_t G = r->g.size, nin = rt_numel(r->e.rank, r->e.in_shape);
        size_t es = rt_dtype_size(r->e.dtype);
        const void **peers = rt_xmalloc(dev, (size_t)G * sizeof *peers);
        for (int64_t j = 0; j < G; j++)
            peers[j] = r->recv + (size_t)(j * nin) * es;
        rt_shared_bufs b = {peers, NULL};
        rt_threads_allgather(&r->e, &r->g, &b, eout);
        free(peers);
    }
    if (bf16 && (r->recv || r->send))
        rt_f32_to_bf16_n(r->wout, r->out, rt_numel(r->e.rank, r->e.out_shape));
    free(r->recv);
    free(r->send);
    free(r->rs_recv);
    free(r->rs_reqs);
    free(r->win);
    free(r->wout);
    free(r);
}

static void mpi_send(rt_device *dev, int64_t peer, int32_t tag, const void *buf, int64_t bytes)
{
    rt_mpi_p2p_send(dev, &((mworld *)dev->backend)->p2p, peer, tag, buf, bytes);
}

static void mpi_recv(rt_device *dev, int64_t peer, int32_t tag, void *buf, int64_t bytes)
{
    rt_mpi_p2p_recv(dev, &((mworld *)dev->backend)->p2p, peer, tag, buf, bytes);
}

static int32_t mpi_probe(rt_device *dev, int64_t peer, int32_t tag)
{
    return rt_mpi_p2p_probe(dev, &((mworld *)dev->backend)->p2p, peer, tag);
}

static void mpi_collect_i64(rt_device *dev, int64_t v, int64_t *all)
{
    mworld *w = dev->backend;
    MPI_Gather(&v, 1, MPI_INT64_T, all, 1, MPI_INT64_T, 0, w->cart);
}

/* How long a waiting rank polls an idle broadcast before it sleeps
 * between polls (seconds), and how long each sleep lasts (ns): a step's
 * broadcast arrives within the poll, a server with no requests costs
 * about 1000 wake-ups a second. */
#define IDLE_POLL_SECONDS 0.01
#define IDLE_SLEEP_NS 1000000L

/* MPI_Ibcast from rank 0 on the Cartesian communicator (rank = device id),
 * then MPI_Wait, or, when `idle`, MPI_Test with sched_yield for
 * IDLE_POLL_SECONDS and with sleeps after: a blocking MPI_Bcast would spin
 * a core in Open MPI's progress loop for as long as the server waits. */
static void mpi_broadcast(rt_device *dev, void *buf, int64_t bytes, int idle)
{
    mworld *w = dev->backend;
    MPI_Request req;
    MPI_Ibcast(buf, as_int(dev, bytes), MPI_BYTE, 0, w->cart, &req);
    if (!idle || dev->id == 0) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        return;
    }
    double start = rt_now();
    for (int done = 0;;) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        if (rt_now() - start < IDLE_POLL_SECONDS) {
            sched_yield();
        } else {
            struct timespec ts = {0, IDLE_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
}

static void mpi_gather(rt_device *dev, const rt_tensor_desc *t, const void *local, void *global)
{
    mworld *w = dev->backend;
    const rt_program *p = dev->prog;
    size_t es = rt_dtype_size(t->dtype);
    int64_t n = rt_numel(t->rank, t->local_shape);
    int bytes = as_int(dev, n * (int64_t)es);
    char *all = dev->id == 0 ? rt_xmalloc(dev, (size_t)bytes * (size_t)dev->ndevices) : NULL;
    MPI_Gather(local, bytes, MPI_BYTE, all, bytes, MPI_BYTE, 0, w->cart);
    if (dev->id != 0)
        return;
    for (int64_t id = 0; id < dev->ndevices; id++) {
        int64_t coord[RT_MAX_AXES];
        rt_mesh_coord(p, id, coord);
        if (rt_is_primary_holder(t, p->naxes, coord))
            rt_place_block(p, t, coord, all + (size_t)id * (size_t)bytes, global);
    }
    free(all);
}

static double mpi_clock_offset(rt_device *dev)
{
    double bound;
    return rt_mpi_clock_offset(((mworld *)dev->backend)->cart, 1, &bound);
}

static const rt_device_ops mpi_ops = {
    .name = "mpi",
    .barrier = mpi_barrier,
    .collective = mpi_collective,
    .collect_i64 = mpi_collect_i64,
    .gather = mpi_gather,
    .abort = mpi_abort,
    .coll_start = mpi_coll_start,
    .coll_wait = mpi_coll_wait,
    .send = mpi_send,
    .recv = mpi_recv,
    .probe = mpi_probe,
    .broadcast = mpi_broadcast,
    .clock_offset = mpi_clock_offset,
};

/* ---- the MPI launcher ---- */

/*
 * The collectives stage blocks in buffers as large as the tensor, malloc'd
 * and freed on every call, and Open MPI's own collectives allocate
 * temporaries as large as the message.  By default glibc gives such blocks
 * back to the kernel on free (mmap above M_MMAP_THRESHOLD, a heap trim
 * above M_TRIM_THRESHOLD), and the next call faults every page in again --
 * in a ReduceScatter, inside the peer's single-copy read as well: 7 MB
 * between two ranks took 80 ms instead of 4 on a 2-core VM, where a page
 * fault is a hypervisor exit.  Raising M_MMAP_THRESHOLD is not enough: glibc
 * caps it at 32 MiB, and an MPI_Allreduce of 32 MiB over 4 ranks then took
 * 185 ms instead of 25.  So no block is mmap'd (M_MMAP_MAX 0: every block
 * comes from the heap, which grows by brk) and the heap is never trimmed;
 * freed memory stays for the next call, and the peak is what the program
 * needs at once, as before.
 */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

static void launcher_init(int *argc, char ***argv, int *rank, int *nranks)
{
    MPI_Init(argc, argv);
    /* Errors end the job instead of returning codes we would have to thread through. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
}

void rt_mpi_launch(const rt_program *p, int profiling, void (*fn)(rt_device *dev, void *arg),
                   void *arg)
{
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != rt_mesh_size(p))
        rt_fatal(NULL, "the mesh has %lld devices but the job has %d ranks",
                 (long long)rt_mesh_size(p), nranks);
    mworld *w = calloc(1, sizeof *w);
    if (!w)
        rt_fatal(NULL, "out of memory");
    w->prog = p;
    for (int i = 0; i < NCODES; i++)
        w->comm[i] = MPI_COMM_NULL;
    if (p->naxes > 0) {
        int dims[RT_MAX_AXES], periods[RT_MAX_AXES];
        for (int32_t a = 0; a < p->naxes; a++) {
            dims[a] = (int)p->axis_sizes[a];
            periods[a] = 1;
        }
        MPI_Cart_create(MPI_COMM_WORLD, p->naxes, dims, periods, 0, &w->cart);
    } else {
        MPI_Comm_dup(MPI_COMM_WORLD, &w->cart);
    }
    /* Ranks of one node share its cores: one BLAS thread per rank. */
    if (nranks > 1)
        openblas_set_num_threads(1);
    keep_freed_memory();
    make_reduce_ops(w);
    rt_device dev;
    rt_device_init(&dev, p, &mpi_ops, w, rank);
    dev.profiling = profiling;
    dev.as_reserve = rt_check_address_space(&dev, 1);
    /* The ranks of this node share its cores (a rank mpirun bound to one
     * core gets no narrow-product helper: rt_gemv_split_plan). */
    MPI_Comm node;
    int local_size = 1, local_rank = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local_size);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_free(&node);
    }
    rt_gemv_split_plan(&dev.gemv, local_size, local_rank, 0);
    int32_t axes[RT_MAX_AXES];
    make_comms(w, dev.coord, 0, axes);
    rt_mpi_p2p_init(&dev, &w->p2p, w->cart);
    fn(&dev, arg);
    rt_mpi_p2p_finish(&dev, &w->p2p, w->cart);
    rt_device_release(&dev);
    for (int i = 0; i < NCODES; i++)
        if (w->comm[i] != MPI_COMM_NULL)
            MPI_Comm_free(&w->comm[i]);
    MPI_Comm_free(&w->cart);
    free_reduce_ops(w);
    free(w);
}

static void job_device(rt_device *dev, void *arg)
{
    rt_job_device(dev, arg);
}

static void launcher_run(rt_job *job)
{
    rt_mpi_launch(job->prog, job->opt->profile, job_device, job);
}

static int launcher_all_ok(int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

RT_NORETURN static void launcher_finish(int status)
{
    fflush(NULL);
    MPI_Finalize();
    exit(status);
}

const rt_launcher rt_mpi_launcher = {
    .name = "mpi",
    .init = launcher_init,
    .run = launcher_run,
    .all_ok = launcher_all_ok,
    .finish = launcher_finish,
    .abort = mpi_abort,
    .ranks_are_devices = 1,
};
