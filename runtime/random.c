/*
 * random.c - --random-inputs: reproducible inputs without files.
 *
 * Element i (flat row-major index in the GLOBAL array) of tensor `name` is
 *   h = splitmix64(seed ^ fnv1a64(name) ^ splitmix64(i))
 *   f32/bf16: ((h >> 40) * 2^-24) * 2 - 1   (24 random bits, exact in f32;
 *                                            bf16 then rounds to nearest even)
 *   f64:      ((h >> 11) * 2^-53) * 2 - 1   (53 random bits)
 * which is uniform in [-1, 1); an i8 element is (h >> 11) % 255 - 127,
 * uniform over the integers in [-127, 127].  A device computes only the elements of its
 * block, yet they equal the global array's, so sharded and reference runs
 * see the same data (tests/runtime/npy_random.py reproduces it in NumPy).
 */
#include "rt_internal.h"

uint64_t rt_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The 64 random bits of element `index` for a tensor key (seed ^ fnv(name)). */
static uint64_t bits(uint64_t key, int64_t index)
{
    return rt_splitmix64(key ^ rt_splitmix64((uint64_t)index));
}

void rt_random_fill_block(uint64_t seed, const rt_tensor_desc *t, const int64_t *start,
                          const int64_t *local_shape, void *dst)
{
    uint64_t key = seed ^ fnv1a64(t->name);
    int64_t gstride[RT_MAX_RANK], s = 1;
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        gstride[d] = s;
        s *= t->global_shape[d];
    }
    int64_t n = rt_numel(t->rank, local_shape);
    int64_t idx[RT_MAX_RANK] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t g = 0;
        for (int32_t d = 0; d < t->rank; d++)
            g += (start[d] + idx[d]) * gstride[d];
        uint64_t h = bits(key, g);
        if (t->dtype == RT_I32) {
            /* Indices: uniform over the rows they look up (0 if unknown). */
            uint64_t bound = t->index_bound > 0 ? (uint64_t)t->index_bound : 1;
            ((int32_t *)dst)[e] = (int32_t)((h >> 11) % bound);
        } else if (t->dtype == RT_I8) {
            /* Quantized values: uniform over the symmetric range [-127, 127]
             * a symmetric int8 quantizer produces. */
            ((int8_t *)dst)[e] = (int8_t)((int64_t)((h >> 11) % 255) - 127);
        } else if (t->dtype == RT_F64) {
            ((double *)dst)[e] = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
        } else {
            float f = (float)((double)(h >> 40) * 0x1p-24 * 2.0 - 1.0);
            if (t->dtype == RT_BF16)
                ((uint16_t *)dst)[e] = rt_f32_to_bf16(f);
            else
                ((float *)dst)[e] = f;
        }
        for (int32_t d = t->rank - 1; d >= 0 && ++idx[d] == local_shape[d]; d--)
            idx[d] = 0;
    }
}
