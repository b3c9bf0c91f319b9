/*
 * check.c - --check: run the unsharded reference program (prog->reference,
 * a mesh of one device) on the same inputs in the root's thread and compare
 * its results with the sharded run's.
 *
 * For an ordinary program that is every output.  For a training program
 * the reference runs the same steps from the same start (the same --input
 * and --resume files, zero states, the same --data batches in the same
 * order), and the comparison covers the loss of every step, every output
 * of the last step and the final value of every param and state: a
 * sharding bug in the backward pass or the optimizer shows in the weights
 * long before it moves the loss.
 *
 * Every comparison is one line, `check NAME: max_rel_err=E (tol T)`, with
 * E = max|a-b| / max(max|b|, 1e-30) over the elements finite in both, b
 * the reference.  NaN and Inf are counted, never fed to the error: a NaN
 * difference compares false with every maximum and tolerance, and Inf -
 * Inf is NaN, so either would let a broken result pass silently.  A NaN or
 * Inf fails even when the reference has it at the same place: the
 * reference is built from the same source, so a NaN in both is a bug of
 * the program, not a match.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_generate.h"
#include "rt_internal.h"
#include "rt_job.h"

/*
 * Relative-error tolerance of --check: --check-tol as given, else the
 * dtype's tolerance for one run, and for a training run of n steps that
 * times n.
 *
 * Why it grows: the sharded run and the reference sum in other orders, so
 * each step's gradients differ by rounding, and AdamW does not shrink that
 * difference with the gradient: its update lr * m_hat / (sqrt(v_hat) + eps)
 * is normalised by the gradient's own running size, so a rounding change
 * of relative size u in a small gradient moves the update by about lr * u,
 * as much as in a large one.  Why linearly, not as a random walk's
 * sqrt(n): the momentum m carries each step's perturbation into the
 * updates of the next 1 / (1 - beta1) steps (10 at beta1 = 0.9) with the
 * same sign, and perturbed params perturb the next gradients the same way,
 * so the perturbations add up rather than cancel.  Measured on
 * examples/fortunes_transformer.ein (FSDP+TP on 2x2 threads against the
 * reference): largest error 4.1e-5, 7.3e-5, 2.3e-4 after 10, 20, 40 steps
 * from examples/fortunes/init.py's params, 8.4e-4 and 1.4e-3 after 10 and
 * 20 from --random-inputs (saturated), and 1.12e-4 after 10 steps in issue
 * 26 item 4: all faster than sqrt(n), all within 1e-4 * n.  A wrong
 * gradient moves every update by a fraction of lr itself, not of lr * u:
 * relative to the params about lr / max|W| per step, typically 1e-3 and
 * more, ten times this bound's 1e-4 per step (tests/e2e/train_eval.py
 * shows a negated gradient failing at errors of order 1); a bug smaller
 * than that can pass a long run, and --check-tol asks for less.  i32 results stay exact;
 * an i8 result may be one quantization step off (below).
 */
static double check_tol(const rt_job *job, int32_t dtype)
{
    if (job->opt->check_tol > 0)
        return job->opt->check_tol;
    /* i32 results are positions (argmax): equal or wrong.  An i8 result is
     * a rounding of f32 values the sharded run may sum in another order, so
     * a value near a half step may round one step (1/127 of full scale)
     * the other way. */
    double one = dtype == RT_I32   ? 0
                 : dtype == RT_I8  ? 1.0 / 127
                 : dtype == RT_F64 ? 1e-10
                 : dtype == RT_BF16 ? 1e-2
                                    : 1e-4;
    int64_t steps = job->train ? job->train->total - job->train->done : 1;
    return one * (double)steps;
}

/* What --check found for one result. */
struct check_result {
    int64_t nonfinite_run; /* elements of the sharded run's result that are NaN or +-Inf */
    int64_t nonfinite_ref; /* the same in the reference's */
    double rel_err;        /* max|a-b| / max(max|b|, 1e-30) over the elements finite in both */
};

/* Compares `n` elements of `dtype` of the sharded run's result `a` with the
 * reference's `b`. */
static struct check_result compare(int32_t dtype, const void *a, const void *b, int64_t n)
{
    struct check_result r = {0, 0, 0.0};
    double maxdiff = 0, maxref = 0;
    for (int64_t e = 0; e < n; e++) {
        double x = rt_element(dtype, a, e), y = rt_element(dtype, b, e);
        int fx = isfinite(x), fy = isfinite(y);
        r.nonfinite_run += !fx;
        r.nonfinite_ref += !fy;
        if (fx && fy) {
            maxdiff = fmax(maxdiff, fabs(x - y));
            maxref = fmax(maxref, fabs(y));
        }
    }
    /* Finite f64 operands can still overflow in x - y; an Inf error then fails. */
    r.rel_err = maxdiff / fmax(maxref, 1e-30);
    return r;
}

/* The largest error reported so far, for a training run's last line. */
struct worst {
    double rel_err;   /* largest max_rel_err (NaN or Inf: a failure) */
    const char *name; /* of what, or NULL before the first */
};

/* Compares and reports result `name`, a `kind` ("output", "param",
 * "state"; NULL: `name` alone) of `n` elements of `dtype`, with tolerance
 * `tol`; `what` says what the elements are (" over 10 steps").  0 if it
 * passes. */
static int report(const char *name, const char *kind, const char *what, int32_t dtype,
                  double tol, const void *a, const void *b, int64_t n, struct worst *w)
{
    struct check_result r = compare(dtype, a, b, n);
    char label[300]; /* for messages: "output 'Out'" */
    snprintf(label, sizeof label, kind ? "%s '%s'" : "%s%s", kind ? kind : "", name);
    if (r.nonfinite_run || r.nonfinite_ref) {
        printf("check %s: FAILED: %lld of %lld elements are NaN or Inf in the run "
               "(%lld in the reference)\n", name, (long long)r.nonfinite_run, (long long)n,
               (long long)r.nonfinite_ref);
        fprintf(stderr, "einrt: error: --check: %s is not finite: %lld of %lld "
                        "elements are NaN or Inf in the run (%lld in the reference)\n",
                label, (long long)r.nonfinite_run, (long long)n, (long long)r.nonfinite_ref);
        w->rel_err = INFINITY;
        w->name = name;
        return -1;
    }
    printf("check %s: max_rel_err=%.3g%s (tol %g)\n", name, r.rel_err, what, tol);
    if (!w->name || r.rel_err > w->rel_err) {
        w->rel_err = r.rel_err;
        w->name = name;
    }
    /* Written so that a NaN error (never expected here) fails as well. */
    if (!(r.rel_err <= tol)) {
        fprintf(stderr, "einrt: error: --check: %s differs from the reference: "
                        "max_rel_err %.3g > %g\n", label, r.rel_err, tol);
        return -1;
    }
    return 0;
}

/* 1 if tensors `t` and `u` have the same dtype, rank and global shape. */
static int same_global(const rt_tensor_desc *t, const rt_tensor_desc *u)
{
    return t->dtype == u->dtype && t->rank == u->rank &&
           !memcmp(t->global_shape, u->global_shape, sizeof t->global_shape[0] * (size_t)t->rank);
}

/* A training run's own results: the loss of every step and the final
 * params and states against the reference job `rj`'s. */
static int compare_training(const rt_job *job, const rt_job *rj, struct worst *w)
{
    const rt_program *p = job->prog, *ref = rj->prog;
    const rt_train *tr = job->train, *rtr = rj->train;
    int status = 0;
    if (p->loss_output >= 0) {
        int64_t n = tr->total - tr->done;
        char what[64];
        snprintf(what, sizeof what, " over %lld step%s", (long long)n, n == 1 ? "" : "s");
        /* The losses are kept as doubles; the tolerance is the loss's dtype's. */
        if (report("loss curve", NULL, what, RT_F64, check_tol(job, p->outputs[p->loss_output].dtype),
                   tr->losses, rtr->losses, n, w))
            status = -1;
    }
    /* Optimizer state is f32 for a bf16 param (docs/language.md, "Mixed
     * precision") but made from bf16 gradients, whose roundings differ
     * between the sharded run and the reference by a bf16 step when their
     * f32 sums differ in order: a state gets the tolerance of the
     * narrowest param when that is looser than its own dtype's. */
    double state_tol = 0;
    for (int32_t k = 0; k < p->ninputs; k++)
        if (p->inputs[k].role == RT_ROLE_PARAM && p->inputs[k].dtype != RT_I32 &&
            check_tol(job, p->inputs[k].dtype) > state_tol)
            state_tol = check_tol(job, p->inputs[k].dtype);
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (t->role == RT_ROLE_INPUT)
            continue;
        double tol = check_tol(job, t->dtype);
        if (t->role == RT_ROLE_STATE && state_tol > tol)
            tol = state_tol;
        int32_t j = rt_find_tensor(ref->inputs, ref->ninputs, t->name);
        if (j < 0 || ref->inputs[j].role != t->role || !same_global(t, &ref->inputs[j])) {
            fprintf(stderr, "einrt: error: --check: %s '%s' has no matching %s in the "
                            "reference\n", t->role == RT_ROLE_PARAM ? "param" : "state",
                    t->name, t->role == RT_ROLE_PARAM ? "param" : "state");
            status = -1;
            continue;
        }
        if (report(t->name, t->role == RT_ROLE_PARAM ? "param" : "state", "", t->dtype,
                   tol, tr->final[k], rtr->final[j],
                   rt_numel(t->rank, t->global_shape), w))
            status = -1;
    }
    return status;
}

/* --generate: the tokens of the run and of the reference, which must be
 * equal (the first difference is reported). */
static int compare_tokens(const rt_generate *g, const rt_generate *r)
{
    int64_t len = g->prompt_len + g->n;
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t s = g->prompt_len; s < len; s++)
            if (g->ids[b * len + s] != r->ids[b * len + s]) {
                printf("check tokens: FAILED: sequence %lld, token %lld is %d, the reference's "
                       "is %d\n", (long long)b, (long long)(s - g->prompt_len),
                       g->ids[b * len + s], r->ids[b * len + s]);
                fprintf(stderr, "einrt: error: --check: the generated tokens differ from the "
                                "reference's\n");
                return -1;
            }
    printf("check tokens: equal (%lld sequences x %lld tokens)\n", (long long)g->batch,
           (long long)g->n);
    return 0;
}

/* Runs the reference on one device in this thread; fills rj (released by the caller). */
static int run_reference(const rt_job *job, rt_job *rj, rt_train *rtr, rt_generate *rgen)
{
    const rt_program *ref = job->prog->reference;
    char err[1024];
    if (!ref) {
        fprintf(stderr, "einrt: error: --check: this program has no reference (it was built "
                        "without one)\n");
        return -1;
    }
    if (rt_check_program(ref, err, sizeof err)) {
        fprintf(stderr, "einrt: error: --check: reference program: %s\n", err);
        return -1;
    }
    if (rt_mesh_size(ref) != 1) {
        fprintf(stderr, "einrt: error: --check: the reference program's mesh has %lld devices, "
                        "expected 1\n", (long long)rt_mesh_size(ref));
        return -1;
    }
    if (ref->trains != job->prog->trains) {
        fprintf(stderr, "einrt: error: --check: the program %s but its reference %s\n",
                job->prog->trains ? "trains" : "does not train",
                ref->trains ? "trains" : "does not");
        return -1;
    }
    rt_job_init(rj, ref, job->opt, job->launcher);
    rj->repeat = 1;
    if (job->train) {
        rj->train = rtr; /* released by the caller, also after a failure here */
        if (rt_train_for_reference(rtr, job->train, ref, job->prog, err, sizeof err)) {
            fprintf(stderr, "einrt: error: --check: %s\n", err);
            return -1;
        }
        rj->repeat = rtr->total - rtr->done;
    }
    if (job->gen) {
        rj->gen = rgen; /* released by the caller, also after a failure here */
        if (rt_generate_for_reference(rgen, job->gen, ref, job->prog, err, sizeof err)) {
            fprintf(stderr, "einrt: error: --check: %s\n", err);
            return -1;
        }
        rj->repeat = rgen->steps - rgen->first;
    }
    /* --trace and --profile are about the sharded run. */
    rt_job_alloc(rj, 1, 0);
    for (int32_t k = 0; k < ref->ninputs; k++) {
        int32_t j = rt_find_tensor(job->prog->inputs, job->prog->ninputs, ref->inputs[k].name);
        if (j < 0) {
            fprintf(stderr, "einrt: error: --check: reference input '%s' is not an input of "
                            "the program\n", ref->inputs[k].name);
            return -1;
        }
        rj->in_paths[k] = job->in_paths[j];
    }
    if (rt_check_input_files(rj, err, sizeof err)) {
        fprintf(stderr, "einrt: error: --check: %s\n", err);
        return -1;
    }
    rt_device_ops ops = rt_solo_ops;
    ops.abort = job->launcher->abort;
    rt_device dev;
    rt_device_init(&dev, ref, &ops, NULL, 0);
    rt_job_device(&dev, rj);
    rt_device_release(&dev);
    return 0;
}

int rt_run_check(const rt_job *job)
{
    rt_job rj;
    rt_train rtr;
    rt_generate rgen;
    memset(&rj, 0, sizeof rj);
    memset(&rtr, 0, sizeof rtr);
    memset(&rgen, 0, sizeof rgen);
    int status = 0;
    if (run_reference(job, &rj, &rtr, &rgen) == 0) {
        struct worst w = {0, NULL};
        const rt_program *ref = job->prog->reference;
        for (int32_t i = 0; i < job->prog->noutputs; i++) {
            const rt_tensor_desc *t = &job->prog->outputs[i];
            int32_t j = rt_find_tensor(ref->outputs, ref->noutputs, t->name);
            if (j < 0 || !same_global(t, &ref->outputs[j])) {
                fprintf(stderr, "einrt: error: --check: output '%s' has no matching output in "
                                "the reference\n", t->name);
                status = -1;
                continue;
            }
            if (report(t->name, "output", "", t->dtype, check_tol(job, t->dtype), job->global_out[i],
                       rj.global_out[j], rt_numel(t->rank, t->global_shape), &w))
                status = -1;
        }
        if (job->gen && compare_tokens(job->gen, &rgen))
            status = -1;
        if (job->train) {
            if (compare_training(job, &rj, &w))
                status = -1;
            if (w.name)
                printf("check: largest max_rel_err=%.3g (%s)\n", w.rel_err, w.name);
        }
    } else {
        status = -1;
    }
    char err[256];
    if (rj.train)
        rt_train_release(&rtr, rj.prog, err, sizeof err);
    rt_generate_release(&rgen);
    if (rj.prog)
        rt_job_release(&rj);
    return status;
}
