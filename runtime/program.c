/*
 * program.c - checks the descriptors of an rt_program before anything runs,
 * so that a bad or mismatched object file gives one clear message instead
 * of a crash inside a device.
 */
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

static int check_tensor(const rt_program *p, const rt_tensor_desc *t, const char *what,
                        char *err, size_t errlen)
{
    if (!t->name || !*t->name)
        return rt_errf(err, errlen, "%s without a name", what);
    /* An output is a value computed by `run`, never a param or state: those
     * are inputs that a training program updates in place. */
    int output = !strcmp(what, "output");
    if (output ? t->role != RT_ROLE_INPUT
               : t->role < RT_ROLE_INPUT || t->role > RT_ROLE_STATE)
        return rt_errf(err, errlen, "%s '%s': role %d, expected %s", what, t->name, t->role,
                       output ? "0 (an output has the role of an input)"
                              : "0 (input), 1 (param) or 2 (state)");
    if (!rt_dtype_size(t->dtype))
        return rt_errf(err, errlen, "%s '%s': unknown dtype %d", what, t->name, t->dtype);
    if (t->rank < 0 || t->rank > RT_MAX_RANK)
        return rt_errf(err, errlen, "%s '%s': rank %d out of range", what, t->name, t->rank);
    uint32_t used = 0;
    for (int32_t d = 0; d < t->rank; d++) {
        if (t->dim_naxes[d] < 0 || t->dim_naxes[d] > RT_MAX_AXES)
            return rt_errf(err, errlen, "%s '%s': dim %d sharded over %d axes", what, t->name, d,
                        t->dim_naxes[d]);
        int64_t blocks = 1;
        for (int32_t k = 0; k < t->dim_naxes[d]; k++) {
            int32_t a = t->dim_axes[d][k];
            if (a < 0 || a >= p->naxes)
                return rt_errf(err, errlen, "%s '%s': dim %d sharded over mesh axis %d, mesh has "
                            "%d axes", what, t->name, d, a, p->naxes);
            if (used & (1u << a))
                return rt_errf(err, errlen, "%s '%s': mesh axis %c shards more than one dim",
                            what, t->name, p->axis_names[a]);
            used |= 1u << a;
            blocks *= p->axis_sizes[a];
        }
        if (t->global_shape[d] < 0 || t->local_shape[d] < 0 ||
            t->local_shape[d] * blocks != t->global_shape[d])
            return rt_errf(err, errlen, "%s '%s': dim %d has global size %lld but per-device size "
                        "%lld on %lld blocks", what, t->name, d, (long long)t->global_shape[d],
                        (long long)t->local_shape[d], (long long)blocks);
    }
    return 0;
}

/* Checks a list of tensors and that their names are unique. */
static int check_list(const rt_program *p, const rt_tensor_desc *ts, int32_t n, const char *what,
                      char *err, size_t errlen)
{
    if (n < 0 || (n > 0 && !ts))
        return rt_errf(err, errlen, "program has a bad %s list", what);
    for (int32_t i = 0; i < n; i++) {
        if (check_tensor(p, &ts[i], what, err, errlen))
            return -1;
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(ts[i].name, ts[j].name))
                return rt_errf(err, errlen, "two %ss are named '%s'", what, ts[i].name);
    }
    return 0;
}

/* The training fields: `trains` is a flag, and a training program's loss
 * (if it names one) is a scalar output, which the runtime reads every step
 * from device 0's buffer.  `loss_output` of a program that does not train is
 * ignored (einrt.h), so codegen may leave it at any value there. */
static int check_training(const rt_program *p, char *err, size_t errlen)
{
    if (p->trains != 0 && p->trains != 1)
        return rt_errf(err, errlen, "program has trains = %d (0 or 1)", p->trains);
    if (!p->trains || p->loss_output == -1)
        return 0;
    if (p->loss_output < 0 || p->loss_output >= p->noutputs)
        return rt_errf(err, errlen, "loss_output %d is not an output of the program (it has %d; "
                       "-1 for none)", p->loss_output, p->noutputs);
    const rt_tensor_desc *t = &p->outputs[p->loss_output];
    if (t->rank != 0 || t->dtype == RT_I32)
        return rt_errf(err, errlen, "the loss output '%s' is %s of rank %d; a loss is a "
                       "floating-point scalar (rank 0)", t->name, rt_dtype_name(t->dtype),
                       t->rank);
    return 0;
}

const char *rt_program_op_name(const rt_program *p, int64_t op, const char *fallback)
{
    if (!p || !p->op_names || !p->op_name_offsets || op < 0 || op >= p->nops)
        return fallback;
    return p->op_names + p->op_name_offsets[op];
}

int rt_check_program(const rt_program *p, char *err, size_t errlen)
{
    if (!p)
        return rt_errf(err, errlen, "no program");
    if (p->abi_version != RT_ABI_VERSION)
        return rt_errf(err, errlen, "program built for runtime ABI %d, this runtime is ABI %d; "
                    "rebuild it with a matching einc", p->abi_version, RT_ABI_VERSION);
    if (p->naxes < 0 || p->naxes > RT_MAX_AXES)
        return rt_errf(err, errlen, "program mesh has %d axes (at most %d)", p->naxes, RT_MAX_AXES);
    for (int32_t a = 0; a < p->naxes; a++)
        if (p->axis_sizes[a] < 1 || p->axis_sizes[a] > RT_MAX_DEVICES)
            return rt_errf(err, errlen, "mesh axis %c has size %lld", p->axis_names[a],
                        (long long)p->axis_sizes[a]);
    if (rt_mesh_size(p) > RT_MAX_DEVICES)
        return rt_errf(err, errlen, "mesh of %lld devices (at most %d)", (long long)rt_mesh_size(p),
                    RT_MAX_DEVICES);
    if (!p->run)
        return rt_errf(err, errlen, "program has no run function");
    if (check_list(p, p->inputs, p->ninputs, "input", err, errlen) ||
        check_list(p, p->outputs, p->noutputs, "output", err, errlen))
        return -1;
    return check_training(p, err, errlen);
}
