/*
 * device.c - the functions emitted code calls about its own device:
 * coordinates, scratch memory with live/peak accounting, op markers.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "rt_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CACHE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CACHE_POISON(p, n) ((void)(p), (void)(n))
#define CACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Bytes in front of each rt_alloc block: its size, a tag and the next
 * block of the cache, keeping 64-byte alignment. */
#define ALLOC_HEADER 64
/* Tag of a live rt_alloc block, to catch frees of foreign or freed pointers. */
#define ALLOC_LIVE 0x65696e72745f6c76ull
#define ALLOC_DEAD 0x65696e72745f6464ull
#define ALLOC_CACHED 0x65696e72745f6361ull

/* rt_alloc blocks of at least this many bytes start on a 2 MiB boundary,
 * span whole 2 MiB pages and are advised as transparent huge pages
 * (MADV_HUGEPAGE) before their first touch.  Where the kernel gives huge
 * pages only on request (/sys/kernel/mm/transparent_hugepage/enabled =
 * madvise, the common default), a decode step's weights and KV cache were
 * otherwise read through 4 KiB pages, at whose boundaries the hardware
 * prefetchers stop: with huge pages the narrow GEMV kernels read
 * 1.07-1.35x the weights/s from memory at every shape of the int8 decode
 * step (bench/gemv_narrow.c, docs/runtime.md "narrow products").  A hint
 * only: where it is refused, the block has 4 KiB pages as before. */
#define ALLOC_HUGE_BYTES ((size_t)2 << 20)

typedef struct alloc_hdr {
    int64_t bytes;
    uint64_t tag;
    struct alloc_hdr *next; /* in dev->alloc_cache */
} alloc_hdr;

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t rt_mesh_size(const rt_program *prog)
{
    return rt_numel(prog->naxes, prog->axis_sizes);
}

void rt_mesh_coord(const rt_program *prog, int64_t id, int64_t *coord)
{
    for (int32_t a = prog->naxes - 1; a >= 0; a--) {
        coord[a] = id % prog->axis_sizes[a];
        id /= prog->axis_sizes[a];
    }
}

void rt_device_init(rt_device *dev, const rt_program *prog, const rt_device_ops *ops,
                    void *backend, int64_t id)
{
    memset(dev, 0, sizeof *dev);
    dev->prog = prog;
    dev->ops = ops;
    dev->backend = backend;
    dev->id = id;
    dev->ndevices = rt_mesh_size(prog);
    rt_mesh_coord(prog, id, dev->coord);
    rt_bf16_gemm_init(&dev->bf16);
}

static void release_cache(rt_device *dev);

void rt_device_release(rt_device *dev)
{
    release_cache(dev);
    rt_gemv_split_release(&dev->gemv);
    free(dev->profile.seconds);
    free(dev->profile.calls);
    free(dev->profile.open_at);
    free(dev->profile.spans);
    memset(&dev->profile, 0, sizeof dev->profile);
}

void rt_group_of(const rt_device *dev, int32_t naxes, const int32_t *axes, rt_group_view *g)
{
    if (naxes < 0 || naxes > RT_MAX_AXES)
        rt_fatal(dev, "collective over %d mesh axes (at most %d)", naxes, RT_MAX_AXES);
    memset(g, 0, sizeof *g);
    g->naxes = naxes;
    g->size = 1;
    for (int32_t k = 0; k < naxes; k++) {
        int32_t a = axes[k];
        if (a < 0 || a >= dev->prog->naxes)
            rt_fatal(dev, "collective over mesh axis %d, but the mesh has %d axes", a,
                     dev->prog->naxes);
        if (g->mask & (1u << a))
            rt_fatal(dev, "collective names mesh axis %c twice", dev->prog->axis_names[a]);
        g->mask |= 1u << a;
        g->axes[k] = a;
        g->sizes[k] = dev->prog->axis_sizes[a];
        g->size *= dev->prog->axis_sizes[a];
        g->rank = g->rank * dev->prog->axis_sizes[a] + dev->coord[a];
    }
}

int64_t rt_group_peer(const rt_device *dev, const rt_group_view *g, int64_t r)
{
    int64_t coord[RT_MAX_AXES];
    memcpy(coord, dev->coord, sizeof coord);
    for (int32_t k = g->naxes - 1; k >= 0; k--) {
        int32_t a = g->axes[k];
        coord[a] = r % dev->prog->axis_sizes[a];
        r /= dev->prog->axis_sizes[a];
    }
    int64_t id = 0;
    for (int32_t a = 0; a < dev->prog->naxes; a++)
        id = id * dev->prog->axis_sizes[a] + coord[a];
    return id;
}

int64_t rt_block_index(rt_device *dev, const int64_t *axes, int64_t naxes)
{
    int64_t blk = 0;
    for (int64_t k = 0; k < naxes; k++) {
        int32_t a = (int32_t)axes[k];
        int64_t c = rt_coord(dev, a); /* checks the axis before it indexes the sizes */
        blk = blk * dev->prog->axis_sizes[a] + c;
    }
    return blk;
}

int64_t rt_coord(rt_device *dev, int32_t axis)
{
    if (axis < 0 || axis >= dev->prog->naxes)
        rt_fatal(dev, "rt_coord: mesh axis %d out of range (mesh has %d axes)", axis,
                 dev->prog->naxes);
    return dev->coord[axis];
}

/* Whether `bytes` more of address space can be mapped now: a PROT_NONE
 * mapping is charged to RLIMIT_AS like any other and costs no memory. */
static bool address_space_free(size_t bytes)
{
    void *probe = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (probe == MAP_FAILED)
        return false;
    munmap(probe, bytes);
    return true;
}

/*
 * rt_alloc / rt_free keep a per-device cache of freed blocks and hand one
 * of exactly the requested size back, as XLA's and PyTorch's device
 * allocators do.  Every run of a program allocates the same sizes in the
 * same order, so from the second run on no buffer comes from the kernel:
 * a fresh allocation above malloc's mmap threshold is new pages, and
 * faulting in and zeroing them made the first write to a collective's
 * output cost 2-4x the copy itself, on every run.  Live and cached blocks
 * together stay within twice peak_bytes (the live high-water mark): a
 * freed block beyond that goes back to malloc, and a fresh allocation that
 * would pass it first returns cached blocks.  The bound is on the sum, not
 * on the cache alone, because the blocks a run frees last (a training
 * step's new params, freed after they are copied over the old ones) are
 * freed when nothing else is live: capped at one peak, the cache dropped
 * exactly those, and the next step faulted them in again (11 MiB took 44
 * ms of page faults in a VM).  Only the device's own thread calls these.
 * Under ASan the cached blocks are poisoned, so a use after rt_free is
 * still reported.
 */

/* Returns cached blocks to malloc until `need` more live bytes fit within
 * twice the peak (the essay above). */
static void trim_cache(rt_device *dev, int64_t need)
{
    int64_t peak = dev->live_bytes + need > dev->peak_bytes ? dev->live_bytes + need : dev->peak_bytes;
    while (dev->alloc_cache && dev->live_bytes + need + dev->cached_bytes > 2 * peak) {
        alloc_hdr *h = dev->alloc_cache;
        dev->alloc_cache = h->next;
        dev->cached_bytes -= h->bytes;
        CACHE_UNPOISON((char *)h + ALLOC_HEADER, (size_t)h->bytes);
        h->tag = ALLOC_DEAD;
        free(h);
    }
}

/* Whether rt_alloc puts a block of `total` bytes on huge pages. */
static bool huge_block(size_t total)
{
#ifdef MADV_HUGEPAGE
    return total >= ALLOC_HUGE_BYTES;
#else
    (void)total;
    return false;
#endif
}

/* `total` bytes rounded up to whole huge pages. */
static size_t huge_pages_of(size_t total)
{
    return (total + ALLOC_HUGE_BYTES - 1) / ALLOC_HUGE_BYTES * ALLOC_HUGE_BYTES;
}

/* The address space rt_alloc takes for a block of `total` bytes (a
 * multiple of 64): on huge pages, whole 2 MiB pages and up to one more of
 * alignment (aligned_alloc's); else total. */
static size_t block_address_space(size_t total)
{
    return huge_block(total) ? huge_pages_of(total) + ALLOC_HUGE_BYTES : total;
}

/* A block of `total` bytes (a multiple of 64) for rt_alloc, 64-byte
 * aligned; on huge pages (huge_block) 2 MiB aligned, whole pages, advised
 * MADV_HUGEPAGE before any touch.  NULL when out of memory.  Freed with
 * free(). */
static void *alloc_block(size_t total)
{
    if (!huge_block(total))
        return aligned_alloc(64, total);
    size_t whole = huge_pages_of(total);
    void *p = aligned_alloc(ALLOC_HUGE_BYTES, whole);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}

void *rt_alloc(rt_device *dev, int64_t bytes)
{
    if (bytes < 0)
        rt_fatal(dev, "rt_alloc of %lld bytes", (long long)bytes);
    alloc_hdr *h = NULL;
    for (alloc_hdr **pp = (alloc_hdr **)&dev->alloc_cache; *pp; pp = &(*pp)->next)
        if ((*pp)->bytes == bytes) {
            h = *pp;
            *pp = h->next;
            dev->cached_bytes -= bytes;
            CACHE_UNPOISON((char *)h + ALLOC_HEADER, (size_t)bytes);
            break;
        }
    if (!h) {
        trim_cache(dev, bytes);
        size_t total = ((size_t)bytes + ALLOC_HEADER + 63) / 64 * 64;
        /* Under `ulimit -v`, fail here rather than leave OpenBLAS without
         * its buffer (rt_check_address_space). */
        if (dev->as_reserve &&
            !address_space_free(block_address_space(total) + (size_t)dev->as_reserve))
            rt_fatal(dev, "out of memory: rt_alloc of %lld bytes (%lld live) would leave less "
                     "than %lld MiB of the address-space limit (ulimit -v) for BLAS buffers",
                     (long long)bytes, (long long)dev->live_bytes,
                     (long long)(dev->as_reserve >> 20));
        h = alloc_block(total);
        if (!h)
            rt_fatal(dev, "out of memory: rt_alloc of %lld bytes (%lld live)", (long long)bytes,
                     (long long)dev->live_bytes);
        h->bytes = bytes;
    }
    h->tag = ALLOC_LIVE;
    h->next = NULL;
    dev->live_bytes += bytes;
    if (dev->live_bytes > dev->peak_bytes)
        dev->peak_bytes = dev->live_bytes;
    return (char *)h + ALLOC_HEADER;
}

void rt_free(rt_device *dev, void *p)
{
    if (!p)
        return;
    alloc_hdr *h = (alloc_hdr *)((char *)p - ALLOC_HEADER);
    if (h->tag != ALLOC_LIVE)
        rt_fatal(dev, "rt_free of a pointer that rt_alloc did not return%s",
                 h->tag == ALLOC_DEAD || h->tag == ALLOC_CACHED ? " (freed twice)" : "");
    dev->live_bytes -= h->bytes;
    if (dev->live_bytes + dev->cached_bytes + h->bytes <= 2 * dev->peak_bytes) {
        h->tag = ALLOC_CACHED;
        h->next = dev->alloc_cache;
        dev->alloc_cache = h;
        dev->cached_bytes += h->bytes;
        CACHE_POISON(p, (size_t)h->bytes);
        return;
    }
    h->tag = ALLOC_DEAD;
    free(h);
}

/* Returns the blocks of dev's allocation cache to malloc. */
static void release_cache(rt_device *dev)
{
    for (alloc_hdr *h = dev->alloc_cache, *next; h; h = next) {
        next = h->next;
        CACHE_UNPOISON((char *)h + ALLOC_HEADER, (size_t)h->bytes);
        h->tag = ALLOC_DEAD;
        free(h);
    }
    dev->alloc_cache = NULL;
    dev->cached_bytes = 0;
}

/* Grows the profile arrays of `dev` to hold op `op_id`. */
static void profile_reserve(rt_device *dev, int32_t op_id)
{
    rt_profile *p = &dev->profile;
    if (op_id < p->n)
        return;
    int32_t n = op_id + 1 > 2 * p->n ? op_id + 1 : 2 * p->n;
    double *s = realloc(p->seconds, (size_t)n * sizeof *s);
    int64_t *c = realloc(p->calls, (size_t)n * sizeof *c);
    double *o = realloc(p->open_at, (size_t)n * sizeof *o);
    if (!s || !c || !o)
        rt_fatal(dev, "out of memory in the profiler");
    for (int32_t i = p->n; i < n; i++) {
        s[i] = 0;
        c[i] = 0;
        o[i] = -1;
    }
    p->seconds = s;
    p->calls = c;
    p->open_at = o;
    p->n = n;
}

void rt_op_begin(rt_device *dev, int32_t op_id)
{
    if (!dev->profiling || op_id < 0)
        return;
    profile_reserve(dev, op_id);
    if (dev->profiling == RT_PROFILE_IN_STEP)
        dev->ops->barrier(dev, (dev->prog->naxes ? (1u << dev->prog->naxes) - 1 : 0) &
                                   ~(uint32_t)dev->prog->pipeline_axes);
    dev->profile.open_at[op_id] = rt_now();
}

void rt_op_end(rt_device *dev, int32_t op_id)
{
    if (!dev->profiling || op_id < 0 || op_id >= dev->profile.n ||
        dev->profile.open_at[op_id] < 0)
        return;
    double now = rt_now();
    rt_profile_add_span(dev, op_id, dev->profile.open_at[op_id], now);
    dev->profile.seconds[op_id] += now - dev->profile.open_at[op_id];
    dev->profile.calls[op_id]++;
    dev->profile.open_at[op_id] = -1;
}

/* Address space one device needs beyond its tensors: OpenBLAS's packing
 * buffer (128 MiB on x86-64 builds), a glibc malloc arena (64 MiB
 * reserved per thread) and a thread stack (8 MiB). */
#define DEVICE_OVERHEAD_BYTES ((size_t)200 << 20)

int64_t rt_check_address_space(const rt_device *dev, int64_t ndevices)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    size_t need = (size_t)ndevices * DEVICE_OVERHEAD_BYTES;
    if (!address_space_free(need))
        rt_fatal(dev, "out of memory: the address-space limit (ulimit -v %llu KiB) leaves less "
                 "than the %zu MiB that %lld device%s need%s for BLAS buffers, stacks and malloc "
                 "arenas before any tensor; raise the limit",
                 (unsigned long long)(rl.rlim_cur >> 10), need >> 20, (long long)ndevices,
                 ndevices == 1 ? "" : "s", ndevices == 1 ? "s" : "");
    return (int64_t)need;
}
