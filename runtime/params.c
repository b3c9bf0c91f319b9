/*
 * params.c - --params DIR: every param of a program from a training
 * checkpoint (checkpoint.c's format: DIR/NAME.npy global arrays and
 * DIR/steps.txt), so that a model trained by one program (its `optimize`
 * statement) is served by another, a decode program with the same param
 * names.
 *
 * Only params are read: a checkpoint also holds the optimizer's states
 * (W.m, W.v, W.mom, the step counter) that a serving program does not
 * have, and its own states (a KV cache) start at zero or come from
 * --input.  Each param's file is the one --resume would take (the staged
 * NAME.npy.next while a save is being applied).  Names are matched here,
 * before the run: a param with no file in DIR is an error listing the
 * params DIR has; dtypes and shapes are then checked with every other
 * input file's (rt_check_input_files: the file's dtype and global shape
 * against the param's).  Shardings need no check: the files hold global
 * arrays, and each device reads its own block of them.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_job.h"

/* Appends to err (already holding n characters) the NAME of every
 * DIR/NAME.npy, the tensors the checkpoint holds. */
static void list_checkpoint(const char *dir, char *err, size_t errlen, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int found = 0;
    for (struct dirent *e; (e = readdir(d)) && n < errlen;) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".npy"))
            continue;
        int w = snprintf(err + n, errlen - n, "%s%.*s", found++ ? ", " : "; it holds: ",
                         (int)(len - 4), e->d_name);
        n += w > 0 ? (size_t)w : 0;
    }
    closedir(d);
}

int rt_params_resolve(rt_job *job, char *err, size_t errlen)
{
    const rt_program *p = job->prog;
    const char *dir = job->opt->params;
    if (!dir)
        return 0;
    if (job->opt->resume)
        return rt_errf(err, errlen, "--params %s and --resume %s: --resume already reads every "
                       "param (and state) of its checkpoint; give one of them", dir,
                       job->opt->resume);
    int64_t steps;
    if (rt_checkpoint_steps("--params", dir, &steps, err, errlen))
        return -1;
    job->param_paths = calloc((size_t)p->ninputs + 1, sizeof *job->param_paths);
    if (!job->param_paths)
        return rt_errf(err, errlen, "out of memory");
    int nparams = 0;
    for (int32_t k = 0; k < p->ninputs; k++) {
        const rt_tensor_desc *t = &p->inputs[k];
        if (t->role != RT_ROLE_PARAM)
            continue;
        nparams++;
        if (job->in_paths[k])
            return rt_errf(err, errlen, "param '%s' is given by both --input and --params %s",
                           t->name, dir);
        char *path = rt_checkpoint_file(dir, t->name);
        if (!path)
            return rt_errf(err, errlen, "out of memory");
        job->param_paths[k] = path;
        if (access(path, R_OK) != 0) {
            int n = snprintf(err, errlen, "--params %s: the checkpoint (step %lld) has no file "
                             "for param '%s' (%s: %s)", dir, (long long)steps, t->name, path,
                             strerror(errno));
            if (n > 0 && (size_t)n < errlen)
                list_checkpoint(dir, err, errlen, (size_t)n);
            return -1;
        }
        job->in_paths[k] = path;
    }
    if (nparams == 0)
        return rt_errf(err, errlen, "--params %s: the program has no params", dir);
    return 0;
}
