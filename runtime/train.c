/*
 * train.c - the training loop of an executable whose program trains
 * (rt_program.trains: each call of `run` is one step that overwrites its
 * params and states in place).
 *
 * Steps are numbered from 1 over the whole training: a run resumed from a
 * checkpoint of step 6 continues with step 7, and --steps N is the step to
 * reach (the total, as max_steps in PyTorch Lightning), not a count to add,
 * so `--steps 10` equals `--steps 6 --save D` then `--resume D --steps 10`.
 * Step s reads batch s-1 of the --data order (data.c), so a resumed run
 * sees the batches the uninterrupted run would have seen; a checkpoint
 * records that order (seed and data set) and --resume refuses another.
 * A resumed run's --metrics keeps the file's lines up to the checkpoint's
 * step and drops those the interrupted run wrote after it, so the file
 * ends as the uninterrupted run's.
 *
 * On each device a step is: barrier over the mesh, copy the device's block
 * of each --data batch into its input buffer, `run`, barrier.  Device 0
 * (in the root process: MPI rank 0 is device 0) then reads the loss from
 * its own buffer of the scalar loss output (replicated on every device),
 * records the step's time (between the barriers, with the batch copy) and
 * prints the step line and metrics while the other devices go on to the
 * next step's barrier.  A checkpoint gathers every param and state to the
 * root as outputs are gathered, passes a barrier (on threads the devices
 * place their blocks straight into the root's arrays) and device 0 writes
 * it; a failure there, as anywhere in a device, ends the whole job with a
 * message (rt_fatal), never a hang.
 *
 * With --eval-data, every device evaluates the held-out set after the
 * steps rt_eval_due names, between the step's closing barrier and device
 * 0's report, on copies of its params and states (eval.c), so the step
 * line and metrics line of that step carry eval_loss and training goes on
 * from the buffers the step left.
 *
 * A program compiled with skip_nonfinite=true has the scalar output
 * `opt.skipped`, 1 after a step whose gradients held NaN or Inf: the step
 * kept its params and state (the compiled update selects the old values),
 * and device 0 warns, marks the metrics line and counts it.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_job.h"

/* "input", "param" or "state": what a tensor's role is called in messages. */
static const char *role_name(int32_t role)
{
    return role == RT_ROLE_PARAM ? "param" : role == RT_ROLE_STATE ? "state" : "input";
}

/* Matches the --data pairs to role-INPUT tensors and opens their files. */
static int resolve_data(rt_job *job, rt_train *tr, rt_dataset *ds, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    for (int i = 0; i < o->ndata; i++) {
        const char *name = o->data[i].name;
        int32_t k = rt_find_tensor(p->inputs, p->ninputs, name);
        if (k < 0) {
            int n = snprintf(err, errlen, "--data %s: the program has no input named '%s'; its "
                             "inputs are:", name, name);
            for (int32_t j = 0; j < p->ninputs && n > 0 && (size_t)n < errlen; j++)
                if (p->inputs[j].role == RT_ROLE_INPUT)
                    n += snprintf(err + n, errlen - (size_t)n, " %s", p->inputs[j].name);
            return -1;
        }
        if (p->inputs[k].role != RT_ROLE_INPUT)
            return rt_errf(err, errlen, "--data %s: '%s' is a %s, not an input; a dataset feeds "
                           "inputs, a %s starts from --input or --resume", name, name,
                           role_name(p->inputs[k].role), role_name(p->inputs[k].role));
        if (job->in_paths[k])
            return rt_errf(err, errlen, "input '%s' is given by both --input and --data", name);
        if (tr->data_file[k] >= 0)
            return rt_errf(err, errlen, "input '%s' is given twice with --data", name);
        if (rt_data_add(ds, &p->inputs[k], o->data[i].path, err, errlen))
            return -1;
        tr->data_file[k] = ds->nfiles - 1;
    }
    return 0;
}

/* --resume DIR: the step count, and every param and state from DIR/NAME.npy. */
static int resolve_resume(rt_job *job, rt_train *tr, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const char *dir = job->opt->resume;
    if (rt_checkpoint_read_steps(dir, &tr->done, err, errlen))
        return -1;
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (t->role == RT_ROLE_INPUT)
            continue;
        if (job->in_paths[k])
            return rt_errf(err, errlen, "%s '%s' is given by both --input and --resume %s",
                           role_name(t->role), t->name, dir);
        char *path = rt_checkpoint_file(dir, t->name);
        if (!path)
            return rt_errf(err, errlen, "out of memory");
        tr->resume_paths[k] = path;
        if (access(path, R_OK) != 0)
            return rt_errf(err, errlen, "--resume %s: the checkpoint has no file for %s '%s' "
                           "(%s: %s)", dir, role_name(t->role), t->name, path, strerror(errno));
        job->in_paths[k] = path;
    }
    return 0;
}

/* --resume DIR: refuses a run whose --seed or --data would read other
 * batches than the run that saved DIR (its data.txt). */
static int check_order(const char *dir, const rt_train *tr, char *err, size_t errlen)
{
    char *text, *path, why[900];
    int rc = rt_checkpoint_read_record(dir, &text, &path, err, errlen);
    if (!rc && rt_data_check_record(tr->data, tr->done, text, path, why, sizeof why))
        rc = rt_errf(err, errlen, "--resume %s: %s", dir, why);
    free(text);
    free(path);
    return rc;
}

/* --resume DIR: refuses a checkpoint saved with other optimizers or
 * hyperparameters than the program's (a schedule resumed with another
 * peak lr, say, is silently another run), unless --resume-mismatch=ok,
 * which resumes with the program's and says what differs.  The root
 * alone speaks: every rank reads the same record. */
static int check_hparams(const rt_job *job, char *err, size_t errlen)
{
    const char *dir = job->opt->resume;
    char why[900];
    int rc = rt_checkpoint_check_hparams(dir, job->prog, why, sizeof why);
    if (rc < 0)
        return rt_errf(err, errlen, "--resume %s: %s", dir, why);
    if (rc == 2 && job->rank == 0)
        fprintf(stderr, "warning: --resume %s records no hyperparameters (saved by an older "
                "einc executable); resuming with the program's\n", dir);
    if (rc != 1)
        return 0;
    if (!job->opt->resume_mismatch_ok)
        return rt_errf(err, errlen, "--resume %s: %s; resume with another optimizer setting "
                       "only on purpose: --resume-mismatch=ok", dir, why);
    if (job->rank == 0)
        fprintf(stderr, "warning: --resume %s: %s; resuming with the program's "
                "(--resume-mismatch=ok)\n", dir, why);
    return 0;
}

/* The bytes at the start of metrics stream `f` that a run resumed after
 * step `done` keeps: its complete lines while their steps increase and are
 * at most `done`.  What follows was written after the checkpoint by the
 * run that saved it (steps the resumed run does again), or is a line cut
 * short when that run was killed.  -1 on a read error. */
static off_t kept_metrics(FILE *f, int64_t done)
{
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    off_t keep = 0;
    long long prev = 0, step;
    while ((n = getline(&line, &cap, f)) > 0) {
        int end = 0;
        if (line[n - 1] != '\n' || sscanf(line, "{\"step\": %lld,%n", &step, &end) != 1 ||
            end == 0 || step <= prev || step > done)
            break;
        prev = step;
        keep += n;
    }
    free(line);
    return ferror(f) ? -1 : keep;
}

/* Root: opens --metrics, truncated; resuming after step `done`, its lines
 * up to that step are kept and the rest cut off, so the file ends as the
 * uninterrupted run's would.  The cut is one ftruncate, then fsync: killed
 * at any point, the file holds a prefix of whole lines of that run. */
static int open_metrics(rt_train *tr, int resume, char *err, size_t errlen)
{
    const char *path = tr->metrics_path;
    /* fopen "w" or "a+", but with O_NONBLOCK until it is open: a FIFO no
     * process reads is refused at once (ENXIO) instead of blocking open(),
     * and one that --resume would read (and cut) is refused. */
    int fd = open(path, (resume ? O_RDWR | O_APPEND : O_WRONLY | O_TRUNC) | O_CREAT | O_NONBLOCK |
                  O_CLOEXEC, 0666);
    if (fd < 0)
        return rt_errf(err, errlen, "--metrics %s: cannot open it for writing: %s", path,
                       errno == ENXIO ? "a FIFO (named pipe) that no process reads"
                                      : strerror(errno));
    struct stat st;
    int flags;
    if (fstat(fd, &st) == 0 && resume && !S_ISREG(st.st_mode)) {
        close(fd);
        return rt_errf(err, errlen, "--metrics %s is %s; with --resume it is read and cut after "
                       "the checkpoint's step, which needs a regular file", path,
                       rt_file_kind(st.st_mode));
    }
    if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        !(tr->metrics = fdopen(fd, resume ? "a+" : "w"))) {
        int e = errno;
        close(fd);
        return rt_errf(err, errlen, "--metrics %s: cannot open it for writing: %s", path,
                       strerror(e));
    }
    if (!resume)
        return 0;
    off_t keep = kept_metrics(tr->metrics, tr->done);
    if (keep < 0 || ftruncate(fileno(tr->metrics), keep) != 0 ||
        fsync(fileno(tr->metrics)) != 0 || fseek(tr->metrics, 0, SEEK_END) != 0)
        return rt_errf(err, errlen, "--metrics %s: cannot cut it after step %lld of --resume: "
                       "%s", path, (long long)tr->done, strerror(errno));
    return 0;
}

/* 1 if some --output names a param or state (rather than an output). */
static int outputs_a_param(const rt_program *p, const rt_options *o)
{
    for (int i = 0; i < o->noutputs; i++)
        if (rt_find_tensor(p->outputs, p->noutputs, o->outputs[i].name) < 0 &&
            rt_find_tensor(p->inputs, p->ninputs, o->outputs[i].name) >= 0)
            return 1;
    return 0;
}

int rt_train_prepare(rt_job *job, rt_train *tr, rt_dataset *ds, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const rt_options *o = job->opt;
    memset(tr, 0, sizeof *tr);
    job->train = tr;
    tr->data = ds;
    tr->data_file = malloc((size_t)(p->ninputs + 1) * sizeof *tr->data_file);
    tr->resume_paths = calloc((size_t)p->ninputs + 1, sizeof *tr->resume_paths);
    if (!tr->data_file || !tr->resume_paths || rt_update_check_prepare(p, tr))
        return rt_errf(err, errlen, "out of memory");
    for (int32_t k = 0; k < p->ninputs; k++)
        tr->data_file[k] = -1;
    tr->log_every = o->log_every ? o->log_every : 1;
    tr->save_dir = o->save;
    tr->save_every = o->save_every;
    tr->metrics_path = o->metrics;
    tr->keep_final = o->check || outputs_a_param(p, o);
    tr->skip_output = rt_find_tensor(p->outputs, p->noutputs, "opt.skipped");
    ds->shuffle = o->shuffle;
    ds->seed = o->shuffle_seed;
    if (o->save_every && !o->save)
        return rt_errf(err, errlen, "--save-every needs --save DIR (where to save)");
    if (o->shuffle && !o->ndata)
        return rt_errf(err, errlen, "--seed shuffles the rows of --data files, and no --data is "
                       "given (--random-inputs SEED draws random values)");
    if (resolve_data(job, tr, ds, err, errlen) || rt_eval_prepare(job, tr, err, errlen))
        return -1;
    if (o->resume && resolve_resume(job, tr, err, errlen))
        return -1;
    tr->total = o->steps ? o->steps : tr->done + 1;
    if (tr->total <= tr->done)
        return rt_errf(err, errlen, "--resume %s holds %lld steps, and --steps %lld is the step "
                       "to reach, not a count to add: give --steps above %lld to train further",
                       o->resume, (long long)tr->done, (long long)tr->total, (long long)tr->done);
    job->repeat = tr->total - tr->done;
    /* Every rank checks its own files against the record (on several
     * hosts each reads its own copy); the root writes the records. */
    if ((o->resume || (o->save && job->rank == 0)) && rt_data_hash(ds, err, errlen))
        return -1;
    if (o->resume && check_order(o->resume, tr, err, errlen))
        return -1;
    if (o->resume_mismatch_ok && !o->resume)
        return rt_errf(err, errlen, "--resume-mismatch=ok goes with --resume DIR");
    if (o->resume && check_hparams(job, err, errlen))
        return -1;
    if (job->rank != 0)
        return 0;
    if (o->save && rt_checkpoint_prepare(o->save, p, err, errlen))
        return -1;
    if (o->metrics && open_metrics(tr, o->resume != NULL, err, errlen))
        return -1;
    return 0;
}

int rt_train_for_reference(rt_train *rtr, const rt_train *tr, const rt_program *ref,
                           const rt_program *prog, char *err, size_t errlen)
{
    memset(rtr, 0, sizeof *rtr);
    rtr->data = tr->data;
    rtr->done = tr->done;
    rtr->total = tr->total;
    rtr->reference = 1;
    rtr->log_every = 1;
    rtr->keep_final = 1;
    rtr->skip_output = rt_find_tensor(ref->outputs, ref->noutputs, "opt.skipped");
    rtr->data_file = malloc((size_t)(ref->ninputs + 1) * sizeof *rtr->data_file);
    if (!rtr->data_file)
        return rt_errf(err, errlen, "out of memory");
    for (int32_t k = 0; k < ref->ninputs; k++) {
        const rt_tensor_desc *t = &ref->inputs[k];
        int32_t j = rt_find_tensor(prog->inputs, prog->ninputs, t->name);
        rtr->data_file[k] = j >= 0 ? tr->data_file[j] : -1;
        if (rtr->data_file[k] < 0)
            continue;
        const rt_tensor_desc *u = &prog->inputs[j];
        if (t->dtype != u->dtype || t->rank != u->rank || t->role != u->role ||
            memcmp(t->global_shape, u->global_shape, sizeof t->global_shape[0] * (size_t)t->rank))
            return rt_errf(err, errlen, "reference input '%s' differs from the program's (dtype, "
                           "role or global shape)", t->name);
    }
    return 0;
}

void rt_train_alloc(rt_train *tr, const rt_program *p, int64_t runs)
{
    tr->losses = calloc((size_t)runs, sizeof *tr->losses);
    if (!tr->losses)
        rt_fatal(NULL, "out of memory");
    if (!tr->keep_final && !tr->save_dir)
        return;
    tr->final = calloc((size_t)p->ninputs + 1, sizeof *tr->final);
    if (!tr->final)
        rt_fatal(NULL, "out of memory");
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (t->role == RT_ROLE_INPUT)
            continue;
        tr->final[k] = malloc((size_t)(rt_numel(t->rank, t->global_shape) *
                                       (int64_t)rt_dtype_size(t->dtype)) + 1);
        if (!tr->final[k])
            rt_fatal(NULL, "out of memory for the final value of '%s'", t->name);
    }
}

int rt_train_release(rt_train *tr, const rt_program *p, char *err, size_t errlen)
{
    int rc = 0;
    if (tr->metrics && fclose(tr->metrics) != 0)
        rc = rt_errf(err, errlen, "--metrics %s: %s", tr->metrics_path, strerror(errno));
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (tr->resume_paths)
            free(tr->resume_paths[k]);
        if (tr->final)
            free(tr->final[k]);
    }
    free(tr->resume_paths);
    free(tr->final);
    free(tr->data_file);
    free(tr->eval_file);
    rt_update_check_free(p, tr);
    rt_data_close(&tr->eval);
    free(tr->losses);
    memset(tr, 0, sizeof *tr);
    return rc;
}

/* Every device: gathers each param and state to the root's `final` (the
 * MPI gathers match: every rank calls them in the same order). */
static void gather_state(rt_device *dev, rt_job *job, void *const *in)
{
    const rt_program *p = job->prog;
    rt_train *tr = job->train;
    for (int32_t k = 0; k < p->ninputs; k++)
        if (p->inputs[k].role != RT_ROLE_INPUT)
            dev->ops->gather(dev, &p->inputs[k], in[k], tr->final ? tr->final[k] : NULL);
}

/* Every device: --save's checkpoint after step `s`. */
static void save(rt_device *dev, rt_job *job, void *const *in, int64_t s, uint32_t all)
{
    rt_train *tr = job->train;
    gather_state(dev, job, in);
    /* On threads each device placed its blocks in the root's arrays; all
     * must be there before device 0 writes them. */
    dev->ops->barrier(dev, all);
    if (dev->id != 0)
        return;
    char err[1024];
    char *record = rt_data_record(tr->data, s);
    if (!record)
        rt_fatal(dev, "out of memory");
    if (rt_checkpoint_write(tr->save_dir, job->prog, tr->final, record, s, err, sizeof err))
        rt_fatal(dev, "--save %s: %s", tr->save_dir, err);
    free(record);
    if (s == tr->total || s % tr->log_every == 0) {
        printf("saved %s (step %lld)\n", tr->save_dir, (long long)s);
        fflush(stdout);
    }
}

/* Writes `v` as a JSON number with `fmt`, or null: JSON has no NaN or Inf. */
static void json_number(FILE *f, const char *fmt, double v)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

/* Device 0 after step `s`: the step line (every log_every-th step, the
 * last and one followed by an evaluation) and the metrics line;
 * `eval_loss` is the held-out loss after the step, NaN when none was
 * evaluated. */
static void report_step(rt_device *dev, const rt_job *job, int64_t s, double secs, double loss,
                        int skipped, double eval_loss)
{
    const rt_program *p = job->prog;
    const rt_train *tr = job->train;
    int has_loss = p->loss_output >= 0;
    int evaluated = rt_eval_due(tr, s);
    if (s == tr->total || s % tr->log_every == 0 || evaluated) {
        printf("step %lld/%lld", (long long)s, (long long)tr->total);
        if (has_loss)
            printf("  loss %.6g", loss);
        printf("  %.3f ms", 1e3 * secs);
        if (evaluated)
            printf("  eval_loss=%.6g", eval_loss);
        putchar('\n');
        /* Live progress, also when stdout is a pipe or a file. */
        fflush(stdout);
    }
    if (!tr->metrics)
        return;
    const char *loss_fmt =
        has_loss && p->outputs[p->loss_output].dtype == RT_F64 ? "%.17g" : "%.9g";
    fprintf(tr->metrics, "{\"step\": %lld, \"loss\": ", (long long)s);
    json_number(tr->metrics, loss_fmt, has_loss ? loss : NAN);
    fprintf(tr->metrics, ", \"seconds\": %.9g, \"samples_per_s\": ", secs);
    json_number(tr->metrics, "%.9g", tr->data->nfiles ? (double)tr->data->batch / secs : NAN);
    if (tr->skip_output >= 0)
        fprintf(tr->metrics, ", \"skipped\": %s", skipped ? "true" : "false");
    if (evaluated) {
        fputs(", \"eval_loss\": ", tr->metrics);
        json_number(tr->metrics, loss_fmt, eval_loss);
    }
    fputs("}\n", tr->metrics);
    if (fflush(tr->metrics) != 0 || ferror(tr->metrics))
        rt_fatal(dev, "--metrics %s: cannot write it: %s", tr->metrics_path, strerror(errno));
}

void rt_train_device(rt_device *dev, rt_job *job, void *const *in, void *const *out)
{
    const rt_program *p = job->prog;
    rt_train *tr = job->train;
    uint32_t all = p->naxes ? (1u << p->naxes) - 1 : 0;
    for (int64_t s = tr->done + 1; s <= tr->total; s++) {
        int64_t r = s - 1 - tr->done; /* index of the step in this run */
        dev->ops->barrier(dev, all);
        double t0 = rt_now();
        if (r == 0)
            dev->profile.origin = t0;
        for (int32_t k = 0; k < p->ninputs; k++)
            if (tr->data_file[k] >= 0)
                rt_data_fill(dev, tr->data, tr->data_file[k], &p->inputs[k], s - 1, in[k]);
        if (dev->id == 0)
            rt_update_check_before(p, tr, s, in);
        p->run(dev, in, out);
        dev->ops->barrier(dev, all);
        double secs = rt_now() - t0; /* the step's alone: the evaluation is not timed */
        double eval_loss = rt_eval_due(tr, s) ? rt_eval_device(dev, job, in) : NAN;
        if (dev->id == 0) {
            double loss = p->loss_output >= 0
                              ? rt_element(p->outputs[p->loss_output].dtype, out[p->loss_output], 0)
                              : NAN;
            job->times[r] = secs;
            tr->losses[r] = loss;
            int skipped = tr->skip_output >= 0 &&
                          rt_element(p->outputs[tr->skip_output].dtype, out[tr->skip_output], 0) != 0;
            if (skipped && !tr->reference) {
                tr->skipped++;
                fprintf(stderr, "warning: step %lld: the gradients hold NaN or Inf; the step is "
                        "skipped (params and optimizer state unchanged)\n", (long long)s);
            }
            rt_update_check_after(p, tr, s, in, skipped);
            if (!tr->reference)
                report_step(dev, job, s, secs, loss, skipped, eval_loss);
        }
        if (tr->save_dir && (s == tr->total || (tr->save_every && s % tr->save_every == 0)))
            save(dev, job, in, s, all);
    }
    /* With --save the last checkpoint has just gathered them. */
    if (tr->keep_final && !tr->save_dir)
        gather_state(dev, job, in);
}

void rt_train_summary(FILE *f, const rt_job *job)
{
    const rt_train *tr = job->train;
    int64_t n = tr->total - tr->done;
    double sum = 0;
    for (int64_t r = 0; r < n; r++)
        sum += job->times[r];
    fprintf(f, "trained %lld step%s (%lld to %lld) in %.3f s: mean %.3f ms per step", (long long)n,
            n == 1 ? "" : "s", (long long)tr->done + 1, (long long)tr->total, sum,
            1e3 * sum / (double)n);
    if (tr->data->nfiles)
        fprintf(f, ", %.1f samples/s (batch %lld, ", (double)(tr->data->batch * n) / sum,
                (long long)tr->data->batch);
    else
        fputs(" (", f);
    fprintf(f, "%s backend, %lld devices)", job->launcher->name,
            (long long)rt_mesh_size(job->prog));
    if (tr->skip_output >= 0)
        fprintf(f, "; %lld skipped (NaN or Inf gradients)", (long long)tr->skipped);
    fputs("\n", f);
}
