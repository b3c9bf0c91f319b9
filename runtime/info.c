/*
 * info.c - --info: the program in the book's notation (seed 001).
 *
 * rt_tensor_desc carries no dim names, so a dim is written by its global
 * size with the mesh axes that shard it as subscript: x[256_X, 512_Y] is the
 * book's x[B_X, D_Y] with |B| = 256, |D| = 512; x[256_XY] is sharded over X
 * then Y (X major).
 */
#include "rt_internal.h"
#include "rt_job.h"

void rt_format_sharding(char *buf, size_t len, const rt_program *prog, const rt_tensor_desc *t)
{
    size_t n = (size_t)snprintf(buf, len, "%s[", t->name);
    for (int32_t d = 0; d < t->rank && n < len; d++) {
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "",
                              (long long)t->global_shape[d]);
        if (t->dim_naxes[d] > 0 && n < len)
            n += (size_t)snprintf(buf + n, len - n, "_");
        for (int32_t k = 0; k < t->dim_naxes[d] && n < len; k++)
            n += (size_t)snprintf(buf + n, len - n, "%c", prog->axis_names[t->dim_axes[d][k]]);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Writes "(a, b)" for a shape. */
static void print_shape(FILE *f, int32_t rank, const int64_t *shape)
{
    fputc('(', f);
    for (int32_t d = 0; d < rank; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fputs(rank == 1 ? ",)" : ")", f);
}

static void print_tensors(FILE *f, const rt_program *p, const rt_tensor_desc *ts, int32_t n,
                          const char *kind)
{
    for (int32_t i = 0; i < n; i++) {
        const rt_tensor_desc *t = &ts[i];
        char s[512];
        rt_format_sharding(s, sizeof s, p, t);
        fprintf(f, "  %-6s %-5s %s  global ", t->role == RT_ROLE_PARAM ? "param" : t->role == RT_ROLE_STATE ? "state" : kind,
                rt_dtype_name(t->dtype), s);
        print_shape(f, t->rank, t->global_shape);
        fputs(" per device ", f);
        print_shape(f, t->rank, t->local_shape);
        fputc('\n', f);
    }
}

void rt_print_info(FILE *f, const rt_program *p)
{
    fprintf(f, "program: %s\n", p->source_name ? p->source_name : "(unknown source)");
    fprintf(f, "mesh: ");
    for (int32_t a = 0; a < p->naxes; a++)
        fprintf(f, "%s%c=%lld", a ? ", " : "", p->axis_names[a], (long long)p->axis_sizes[a]);
    fprintf(f, "%s(%lld devices)\n", p->naxes ? " " : "", (long long)rt_mesh_size(p));
    fprintf(f, "tensors (dims as global sizes with mesh-axis subscripts):\n");
    print_tensors(f, p, p->inputs, p->ninputs, "input");
    print_tensors(f, p, p->outputs, p->noutputs, "output");
    fprintf(f, "reference program for --check: %s\n", p->reference ? "yes" : "no");
    if (p->trains)
        fprintf(f, "trains: each run is one step (--steps); loss: %s\n",
                p->loss_output >= 0 ? p->outputs[p->loss_output].name : "(none)");
    if (p->info && *p->info) {
        fputs("--- IR ---\n", f);
        fputs(p->info, f);
        size_t n = 0;
        while (p->info[n])
            n++;
        if (p->info[n - 1] != '\n')
            fputc('\n', f);
    }
}
