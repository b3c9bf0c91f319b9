/*
 * update_check.c - the run-time half of "an update that rounds to nothing
 * is warned about once" (docs/reliability.md).
 *
 * An SGD update of a bf16 param is lr g, and a bf16 element w moves only
 * when |lr g| is at least half its spacing (2^(e-8) for 2^e <= |w| <
 * 2^(e+1)); below that the step rounds back to w.  AdamW's update is
 * about lr whatever the gradient, so the frontend warns about it from
 * the line alone; SGD's depends on the gradient, which only the run
 * knows.  The optimize pass marks such a param (rt_tensor_desc
 * .update_check: the first step at the peak lr, after the warmup), and
 * device 0 compares its block before and after that step: when most of
 * its elements are bit for bit unchanged, the update is being lost, and
 * one warning names the param.  An embedding table is not marked (most of
 * its rows get no gradient in a step), and a step skipped for NaN or Inf
 * gradients moves the check to the next step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

int rt_update_check_prepare(const rt_program *p, rt_train *tr)
{
    tr->update_check = calloc((size_t)p->ninputs + 1, sizeof *tr->update_check);
    tr->update_snap = calloc((size_t)p->ninputs + 1, sizeof *tr->update_snap);
    if (!tr->update_check || !tr->update_snap)
        return -1;
    for (int32_t k = 0; k < p->ninputs; k++)
        if (p->inputs[k].role == RT_ROLE_PARAM)
            tr->update_check[k] = p->inputs[k].update_check;
    return 0;
}

void rt_update_check_before(const rt_program *p, rt_train *tr, int64_t s, void *const *in)
{
    if (!tr->update_check)
        return;
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (tr->update_check[k] != s)
            continue;
        size_t bytes = (size_t)rt_numel(p->inputs[k].rank, p->inputs[k].local_shape) * rt_dtype_size(p->inputs[k].dtype);
        tr->update_snap[k] = malloc(bytes ? bytes : 1);
        if (tr->update_snap[k])
            memcpy(tr->update_snap[k], in[k], bytes);
        else
            tr->update_check[k] = 0; /* no memory for a copy: not checked */
    }
}

void rt_update_check_after(const rt_program *p, rt_train *tr, int64_t s, void *const *in,
                           int skipped)
{
    if (!tr->update_snap)
        return;
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (!tr->update_snap[k])
            continue;
        const rt_tensor_desc *t = &p->inputs[k];
        int64_t n = rt_numel(t->rank, t->local_shape), same = 0;
        size_t w = rt_dtype_size(t->dtype);
        for (int64_t i = 0; i < n; i++)
            same += !memcmp((const char *)tr->update_snap[k] + (size_t)i * w,
                            (const char *)in[k] + (size_t)i * w, w);
        free(tr->update_snap[k]);
        tr->update_snap[k] = NULL;
        if (skipped) { /* nothing moved by design: judge the next step */
            tr->update_check[k] = s + 1;
            continue;
        }
        tr->update_check[k] = 0;
        if (n > 0 && 2 * same > n)
            fprintf(stderr,
                    "warning: step %lld left %lld of %lld elements of %s param '%s' unchanged "
                    "(device 0's block): its SGD update, lr times the gradient, is below half "
                    "the spacing of %s there, so it rounds to nothing; use a larger lr, or "
                    "keep '%s' in f32 (master=f32)\n",
                    (long long)s, (long long)same, (long long)n, rt_dtype_name(t->dtype), t->name,
                    rt_dtype_name(t->dtype), t->name);
    }
}

void rt_update_check_free(const rt_program *p, rt_train *tr)
{
    if (tr->update_snap)
        for (int32_t k = 0; k < p->ninputs; k++)
            free(tr->update_snap[k]);
    free(tr->update_snap);
    free(tr->update_check);
    tr->update_snap = NULL;
    tr->update_check = NULL;
}
