/*
 * eval.c - held-out evaluation during training: --eval-data and
 * --eval-every.
 *
 * A compiled training program has one entry, `run`, which is a whole step:
 * forward, backward and the optimizer's in-place update of its params and
 * states (einrt.h).  There is no forward-only entry, so an evaluation runs
 * that step on copies: each device copies its blocks of every param and
 * state into scratch buffers, feeds the held-out batch into its own input
 * buffers, runs `run` on those with scratch outputs, reads the loss, and
 * drops the copies.  The training buffers are never written, so params,
 * optimizer moments and the optimizer's step count are exactly what they
 * were, and the outputs of the last training step (--output) stay that
 * step's.  The cost is one step's compute and one extra copy of the params
 * and states per device while it runs (counted by --stats).
 *
 * The held-out set is read in order, without --seed's shuffle: batch j is
 * rows j*B .. j*B+B-1 of every --eval-data file (rt_data_row at step j of
 * an unshuffled set), j = 0 .. N div B - 1; the N mod B rows after the
 * last whole batch are not used (as --data's drop_last).  The reported
 * eval_loss is the mean of the batches' losses: with a loss that is a mean
 * over its batch (the examples'), the mean over the N - N mod B rows used.
 *
 * --eval-data feeds exactly the inputs --data feeds (each needs its
 * held-out rows, or a batch would pair held-out images with training
 * labels); inputs given by --input keep their value.  Evaluations happen
 * after every K-th step of --eval-every K and after the last step, on
 * every device in the same order, so the collectives inside `run` match
 * on threads and on MPI ranks alike.  --profile and --trace are about the
 * training steps: an evaluation turns them off on its device while it runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

/* Bytes of the per-device block of `t`. */
static size_t block_bytes(const rt_tensor_desc *t)
{
    return (size_t)(rt_numel(t->rank, t->local_shape) * (int64_t)rt_dtype_size(t->dtype));
}

/* Matches the --eval-data pairs to the inputs that --data feeds and opens
 * their files into tr->eval. */
static int resolve_eval_data(const rt_job *job, rt_train *tr, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    for (int i = 0; i < o->neval_data; i++) {
        const char *name = o->eval_data[i].name;
        int32_t k = rt_find_tensor(p->inputs, p->ninputs, name);
        if (k < 0 || tr->data_file[k] < 0)
            return rt_errf(err, errlen, "--eval-data %s: %s; held-out data replaces the rows "
                           "of the inputs --data feeds, and only those", name,
                           k < 0 ? "the program has no input of that name"
                                 : "that input is not fed by --data");
        if (tr->eval_file[k] >= 0)
            return rt_errf(err, errlen, "input '%s' is given twice with --eval-data", name);
        if (rt_data_add(&tr->eval, &p->inputs[k], o->eval_data[i].path, err, errlen))
            return -1;
        tr->eval_file[k] = tr->eval.nfiles - 1;
    }
    for (int32_t k = 0; k < p->ninputs; k++)
        if (tr->data_file[k] >= 0 && tr->eval_file[k] < 0)
            return rt_errf(err, errlen, "--eval-data gives no file for input '%s', which --data "
                           "feeds: a held-out batch needs rows of every such input",
                           p->inputs[k].name);
    return 0;
}

int rt_eval_prepare(rt_job *job, rt_train *tr, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    tr->eval.flag = "--eval-data";
    tr->eval_every = o->eval_every;
    if (o->eval_every && !o->neval_data)
        return rt_errf(err, errlen, "--eval-every needs --eval-data NAME=file.npy (the "
                       "held-out rows to evaluate on)");
    if (!o->neval_data)
        return 0;
    if (p->loss_output < 0)
        return rt_errf(err, errlen, "--eval-data: the program has no loss (a `loss` "
                       "statement) to evaluate");
    tr->eval_file = malloc((size_t)(p->ninputs + 1) * sizeof *tr->eval_file);
    if (!tr->eval_file)
        return rt_errf(err, errlen, "out of memory");
    for (int32_t k = 0; k < p->ninputs; k++)
        tr->eval_file[k] = -1;
    return resolve_eval_data(job, tr, err, errlen);
}

int rt_eval_due(const rt_train *tr, int64_t s)
{
    return tr->eval.nfiles > 0 && !tr->reference &&
           (s == tr->total || (tr->eval_every && s % tr->eval_every == 0));
}

double rt_eval_device(rt_device *dev, rt_job *job, void *const *in)
{
    const rt_program *p = job->prog;
    const rt_train *tr = job->train;
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    int profiling = dev->profiling;
    dev->profiling = RT_PROFILE_OFF;
    void **ein = rt_xmalloc(dev, (size_t)(p->ninputs + 1) * sizeof *ein);
    void **eout = rt_xmalloc(dev, (size_t)(p->noutputs + 1) * sizeof *eout);
    /* Own buffers for what `run` writes (params, states: updated in
     * place) and for the held-out inputs; the rest are read only. */
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        int own = t->role != RT_ROLE_INPUT || tr->eval_file[k] >= 0;
        ein[k] = own ? rt_alloc(dev, (int64_t)block_bytes(t)) : in[k];
    }
    for (int32_t i = 0; i < p->noutputs; i++)
        eout[i] = rt_alloc(dev, (int64_t)block_bytes(&p->outputs[i]));
    double sum = 0;
    for (int64_t j = 0; j < tr->eval.batches; j++) {
        for (int32_t k = 0; k < p->ninputs; k++) {
            const rt_tensor_desc *t = &p->inputs[k];
            if (t->role != RT_ROLE_INPUT)
                memcpy(ein[k], in[k], block_bytes(t));
            else if (tr->eval_file[k] >= 0)
                rt_data_fill(dev, &tr->eval, tr->eval_file[k], t, j, ein[k]);
        }
        dev->ops->barrier(dev, all);
        p->run(dev, ein, eout);
        dev->ops->barrier(dev, all);
        if (dev->id == 0)
            sum += rt_element(p->outputs[p->loss_output].dtype, eout[p->loss_output], 0);
    }
    for (int32_t i = 0; i < p->noutputs; i++)
        rt_free(dev, eout[i]);
    for (int32_t k = 0; k < p->ninputs; k++)
        if (ein[k] != in[k])
            rt_free(dev, ein[k]);
    free(ein);
    free(eout);
    dev->profiling = profiling;
    return dev->id == 0 ? sum / (double)tr->eval.batches : NAN;
}
