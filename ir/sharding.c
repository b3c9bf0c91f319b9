/*
 * sharding.c - shardings in the seeds' notation (seed 001, "Sharding
 * notation"): per-dim ordered mesh axes, unreduced axes, local sizes.
 */
#include <string.h>

#include "checked.h"
#include "ir.h"

ir_sharding ir_sharding_replicated(void)
{
    ir_sharding s;
    memset(&s, 0, sizeof s);
    return s;
}

ir_sharding ir_sharding_without_first(const ir_sharding *s, int rank)
{
    ir_sharding r = ir_sharding_replicated();
    for (int d = 1; d < rank; d++) {
        r.naxes[d - 1] = s->naxes[d];
        memcpy(r.axes[d - 1], s->axes[d], sizeof r.axes[d - 1]);
    }
    return r;
}

ir_sharding ir_sharding_with_first(const ir_sharding *s, int rank)
{
    ir_sharding r = ir_sharding_replicated();
    for (int d = 0; d < rank; d++) {
        r.naxes[d + 1] = s->naxes[d];
        memcpy(r.axes[d + 1], s->axes[d], sizeof r.axes[d + 1]);
    }
    return r;
}

ir_sharding ir_stack_sharding(const ir_module *m, const ir_sharding *layer, int rank, int dim)
{
    ir_sharding r = ir_sharding_with_first(layer, rank);
    if (m->pipe.axis >= 0 && dim == m->pipe.dim) {
        r.naxes[0] = 1;
        r.axes[0][0] = (int8_t)m->pipe.axis;
    }
    return r;
}

bool ir_sharding_equal(const ir_sharding *a, const ir_sharding *b, int rank)
{
    if (a->unreduced != b->unreduced || (a->unreduced && a->red != b->red))
        return false;
    for (int d = 0; d < rank; d++) {
        if (a->naxes[d] != b->naxes[d])
            return false;
        for (int k = 0; k < a->naxes[d]; k++)
            if (a->axes[d][k] != b->axes[d][k])
                return false;
    }
    return true;
}

ir_axes ir_sharding_dim_axes(const ir_sharding *s, int d)
{
    ir_axes on = 0;
    for (int k = 0; k < s->naxes[d]; k++)
        on |= 1u << s->axes[d][k];
    return on;
}

ir_axes ir_sharding_used_axes(const ir_sharding *s, int rank)
{
    ir_axes used = 0;
    for (int d = 0; d < rank; d++)
        used |= ir_sharding_dim_axes(s, d);
    return used;
}

void ir_sharding_push(ir_sharding *s, int d, int axis)
{
    if (s->naxes[d] < IR_MAX_AXES)
        s->axes[d][s->naxes[d]++] = (int8_t)axis;
}

/* Products here saturate at IR_SIZE_HUGE (checked.h), so a dim "split"
 * into more parts than fit in 64 bits is never divisible and never divides
 * by a wrapped 0. */
int64_t ir_sharding_dim_parts(const ir_sharding *s, const ir_mesh *mesh, int d)
{
    int64_t n = 1;
    for (int k = 0; k < s->naxes[d]; k++)
        n = ir_size_mul(n, mesh->axes[s->axes[d][k]].size, NULL);
    return n;
}

int64_t ir_local_size(const ir_module *m, const ir_type *t, int d)
{
    int64_t parts = ir_sharding_dim_parts(&t->sh, &m->mesh, d);
    return m->dims[t->dims[d]].size / (parts > 0 ? parts : 1);
}

int64_t ir_local_elems(const ir_module *m, const ir_type *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n = ir_size_mul(n, ir_local_size(m, t, d), NULL);
    return n;
}

int64_t ir_local_bytes(const ir_module *m, const ir_type *t)
{
    return ir_size_mul(ir_local_elems(m, t), (int64_t)ir_dtype_size(t->dtype), NULL);
}

int64_t ir_global_bytes(const ir_module *m, const ir_type *t)
{
    int64_t n = (int64_t)ir_dtype_size(t->dtype);
    for (int d = 0; d < t->rank; d++)
        n = ir_size_mul(n, m->dims[t->dims[d]].size, NULL);
    return n;
}

const char *ir_axes_str(const ir_mesh *mesh, const int8_t *axes, int naxes, char *buf, size_t size)
{
    size_t n = 0;
    for (int k = 0; k < naxes && n + 1 < size; k++) {
        int a = axes[k];
        buf[n++] = (a >= 0 && a < mesh->naxes) ? mesh->axes[a].name : '?';
    }
    if (size)
        buf[n < size ? n : size - 1] = 0;
    return buf;
}

/* Appends `s` to buf at *n, never writing past size - 1. */
static void put(char *buf, size_t size, size_t *n, const char *s)
{
    while (*s && *n + 1 < size)
        buf[(*n)++] = *s++;
    buf[*n] = 0;
}

const char *ir_type_str(const ir_module *m, const char *name, const ir_type *t, char *buf, size_t size)
{
    size_t n = 0;
    char ax[IR_MAX_AXES + 1];
    if (!size)
        return buf;
    buf[0] = 0;
    if (name)
        put(buf, size, &n, name);
    put(buf, size, &n, "[");
    for (int d = 0; d < t->rank; d++) {
        if (d)
            put(buf, size, &n, ", ");
        put(buf, size, &n, m->dims[t->dims[d]].name);
        if (t->sh.naxes[d]) {
            put(buf, size, &n, "_");
            put(buf, size, &n, ir_axes_str(&m->mesh, t->sh.axes[d], t->sh.naxes[d], ax, sizeof ax));
        }
    }
    put(buf, size, &n, "]");
    if (t->sh.unreduced) {
        /* Partial maxima / minima are not the seeds' sums: say which. */
        put(buf, size, &n, t->sh.red == IR_RED_MAX ? "{max U_" : t->sh.red == IR_RED_MIN ? "{min U_" : "{U_");
        for (int a = 0; a < m->mesh.naxes; a++)
            if (t->sh.unreduced & (1u << a)) {
                char c[2] = {m->mesh.axes[a].name, 0};
                put(buf, size, &n, c);
            }
        put(buf, size, &n, "}");
    }
    return buf;
}
