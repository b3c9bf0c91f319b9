/*
 * coll_threads.c - benchmark 2 (docs/performance.md), the einc side: the
 * threads runtime's AllGather, ReduceScatter, AllReduce and AllToAll over a
 * group of NDEV devices, driven through rt_collective as emitted code calls
 * it, and single-core memcpy of the same sizes as the second baseline.
 *
 *   usage: coll_threads NDEV [MIN_BYTES [MAX_BYTES]]   (defaults 1 KiB, 256 MiB)
 *
 * Sizes go up by 4x.  As in nccl-tests, "bytes" is the full per-rank buffer:
 * the output of AllGather, the input of ReduceScatter, the buffer of
 * AllReduce and AllToAll (f32 elements).  algbw = bytes / time; busbw =
 * algbw * (n-1)/n for AllGather, ReduceScatter and AllToAll and
 * algbw * 2(n-1)/n for AllReduce.  Time per iteration = wall time of device
 * 0 from a barrier before the loop to the return of the last collective
 * (every threads collective ends with a barrier of the group, so all devices
 * have finished then), divided by the iterations.
 *
 * Each device first checks one small instance of each collective against
 * the values it expects, so a fast wrong collective cannot pass unnoticed.
 * The program drives the backend through rt_threads_launch and the device's
 * barrier (rt_internal.h), the runtime's own entry for tests and tools.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "rt_internal.h"

/* The collectives measured, in print order. */
static const int32_t KINDS[4] = {RT_ALLGATHER, RT_REDUCESCATTER, RT_ALLREDUCE, RT_ALLTOALL};
static const char *const KIND_NAMES[4] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll"};

/* What every device thread reads. */
typedef struct coll_ctx {
    int64_t ndev;                /* devices in the group (the mesh has one axis) */
    int64_t min_bytes;           /* smallest buffer */
    int64_t max_bytes;           /* largest buffer */
} coll_ctx;

/* Fills `d` for kind `k` (index into KINDS) with a per-rank buffer of `nelem` f32. */
static void make_desc(rt_coll_desc *d, int k, int64_t G, int64_t nelem)
{
    memset(d, 0, sizeof *d);
    d->kind = KINDS[k];
    d->dtype = RT_F32;
    d->naxes = 1;
    d->axes[0] = 0;
    d->dim2 = -1;
    d->op_id = k;
    switch (d->kind) {
    case RT_ALLGATHER:
        d->rank = 1;
        d->in_shape[0] = nelem / G;
        d->out_shape[0] = nelem;
        break;
    case RT_REDUCESCATTER:
        d->rank = 1;
        d->in_shape[0] = nelem;
        d->out_shape[0] = nelem / G;
        break;
    case RT_ALLREDUCE:
        d->rank = 1;
        d->in_shape[0] = d->out_shape[0] = nelem;
        break;
    default: /* AllToAll [1, G*c] -> [G, c]: contiguous blocks, as MPI_Alltoall */
        d->rank = 2;
        d->dim = 0;
        d->dim2 = 1;
        d->in_shape[0] = 1;
        d->in_shape[1] = nelem;
        d->out_shape[0] = G;
        d->out_shape[1] = nelem / G;
        break;
    }
}

static int64_t in_elems(const rt_coll_desc *d)
{
    return rt_numel(d->rank, d->in_shape);
}

static int64_t out_elems(const rt_coll_desc *d)
{
    return rt_numel(d->rank, d->out_shape);
}

/* Runs one small instance of kind k with known values; fatal on a wrong result. */
static void self_check(rt_device *dev, int k, int64_t G)
{
    rt_coll_desc d;
    make_desc(&d, k, G, 64 * G);
    int64_t r = dev->coord[0], ni = in_elems(&d), no = out_elems(&d);
    float *in = rt_alloc(dev, ni * 4), *out = rt_alloc(dev, no * 4);
    for (int64_t i = 0; i < ni; i++)
        in[i] = (float)(1000 * r + i);
    rt_collective(dev, &d, in, out);
    for (int64_t i = 0; i < no; i++) {
        double want;
        int64_t blk = no / G;
        switch (d.kind) {
        case RT_ALLGATHER: /* block j = rank j's input */
            want = 1000.0 * (double)(i / blk) + (double)(i % blk);
            break;
        case RT_REDUCESCATTER: /* sum over ranks of in[r*blk + i] */
            want = 1000.0 * (double)(G * (G - 1) / 2) + (double)G * (double)(r * no + i);
            break;
        case RT_ALLREDUCE:
            want = 1000.0 * (double)(G * (G - 1) / 2) + (double)G * (double)i;
            break;
        default: /* block j = rank j's block r */
            want = 1000.0 * (double)(i / blk) + (double)(r * blk + i % blk);
            break;
        }
        if ((double)out[i] != want)
            rt_fatal(dev, "self-check of %s: element %lld is %g, expected %g", KIND_NAMES[k],
                     (long long)i, (double)out[i], want);
    }
    rt_free(dev, in);
    rt_free(dev, out);
}

static void device_run(rt_device *dev, void *arg)
{
    const coll_ctx *c = arg;
    int64_t G = c->ndev;
    for (int k = 0; k < 4; k++)
        self_check(dev, k, G);
    for (int k = 0; k < 4; k++) {
        for (int64_t bytes = c->min_bytes; bytes <= c->max_bytes; bytes *= 4) {
            rt_coll_desc d;
            make_desc(&d, k, G, bytes / 4);
            void *in = rt_alloc(dev, in_elems(&d) * 4), *out = rt_alloc(dev, out_elems(&d) * 4);
            memset(in, 1, (size_t)in_elems(&d) * 4);
            memset(out, 0, (size_t)out_elems(&d) * 4);
            int iters = bench_iters(bytes);
            rt_collective(dev, &d, in, out); /* warm-up */
            dev->ops->barrier(dev, 1u);
            double t0 = bench_now();
            for (int i = 0; i < iters; i++)
                rt_collective(dev, &d, in, out);
            double t = (bench_now() - t0) / iters;
            if (dev->id == 0) {
                double algbw = (double)bytes / t * 1e-9;
                double factor = d.kind == RT_ALLREDUCE ? 2.0 * (double)(G - 1) / (double)G
                                                       : (double)(G - 1) / (double)G;
                printf("RESULT bench=coll backend=threads coll=%s n=%lld bytes=%lld iters=%d "
                       "us=%.2f algbw=%.3f busbw=%.3f\n",
                       KIND_NAMES[k], (long long)G, (long long)bytes, iters, t * 1e6, algbw,
                       algbw * factor);
                fflush(stdout);
            }
            rt_free(dev, in);
            rt_free(dev, out);
        }
    }
}

/* Single-core memcpy of each size, the second baseline. */
static void memcpy_baseline(int64_t min_bytes, int64_t max_bytes)
{
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        char *src = malloc((size_t)bytes), *dst = malloc((size_t)bytes);
        if (!src || !dst) {
            fprintf(stderr, "coll_threads: out of memory\n");
            exit(1);
        }
        memset(src, 1, (size_t)bytes);
        memset(dst, 0, (size_t)bytes);
        int iters = bench_iters(bytes);
        memcpy(dst, src, (size_t)bytes);
        double t0 = bench_now();
        for (int i = 0; i < iters; i++) {
            memcpy(dst, src, (size_t)bytes);
            __asm__ volatile("" : : "r"(dst) : "memory"); /* keep every copy */
        }
        double t = (bench_now() - t0) / iters;
        printf("RESULT bench=memcpy bytes=%lld iters=%d us=%.2f bw=%.3f\n", (long long)bytes,
               iters, t * 1e6, (double)bytes / t * 1e-9);
        fflush(stdout);
        free(src);
        free(dst);
    }
}

int main(int argc, char **argv)
{
    coll_ctx c = {.ndev = argc > 1 ? atoll(argv[1]) : 2,
                  .min_bytes = argc > 2 ? atoll(argv[2]) : 1024,
                  .max_bytes = argc > 3 ? atoll(argv[3]) : (int64_t)256 << 20};
    if (c.ndev < 2 || c.ndev > RT_MAX_DEVICES || c.min_bytes < 4 * 64 * c.ndev ||
        c.max_bytes < c.min_bytes || c.min_bytes % (4 * c.ndev)) {
        fprintf(stderr, "usage: coll_threads NDEV [MIN_BYTES [MAX_BYTES]] (NDEV >= 2, "
                        "MIN_BYTES a multiple of 4*NDEV and >= 256*NDEV)\n");
        return 2;
    }
    printf("# coll_threads n=%lld bytes %lld..%lld (f32)\n", (long long)c.ndev,
           (long long)c.min_bytes, (long long)c.max_bytes);
    memcpy_baseline(c.min_bytes, c.max_bytes);
    rt_program prog = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'X'},
                       .axis_sizes = {c.ndev}};
    rt_threads_launch(&prog, 0, RT_BIND_NONE, device_run, &c);
    return 0;
}
