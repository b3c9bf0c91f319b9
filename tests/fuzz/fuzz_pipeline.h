/*
 * fuzz_pipeline.h - what the harnesses that plan share (fuzz_compile,
 * fuzz_plan): the default pass pipeline on a module the frontend built, as
 * `einc --dump-ir` runs it, with its invariants checked.
 */
#ifndef EINC_FUZZ_PIPELINE_H
#define EINC_FUZZ_PIPELINE_H

#include <stdbool.h>
#include <time.h>

#include "fuzz_ein.h"
#include "pass.h"

/* Process CPU seconds (the planner's own time, not the machine's load). */
static inline double fuzz_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs PASS_DEFAULT_PIPELINE (autodiff, propagate, pipeline, regather, meshslice, cost) on `m`
 * with diagnostics into fd (opened by fuzz_diag_open; closed here, so
 * fd->text holds every message).  Aborts if the pipeline fails without an
 * error or leaves IR that does not verify.  Returns 0 if it succeeded, -1
 * if it reported an error; *seconds (if not NULL) is the CPU time of the
 * passes. */
static inline int fuzz_run_pipeline(ir_module *m, fuzz_diag *fd, double *seconds)
{
    pass_registry reg;
    pass_registry_init(&reg);
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &reg;
    pm.dump = fd->d.out;
    FUZZ_CHECK(pass_manager_parse(&pm, PASS_DEFAULT_PIPELINE, fd->d.out) == 0,
               "the default pipeline does not parse");
    /* hw NULL: the cost passes use their default profile. */
    pass_ctx ctx = {.diag = &fd->d};
    int before = fd->d.nerrors;
    double t0 = fuzz_cpu_seconds();
    int rc = pass_manager_run(&pm, &ctx, m);
    if (seconds)
        *seconds = fuzz_cpu_seconds() - t0;
    bool verified = rc == 0 && ir_verify(m, &fd->d) == 0;
    if (verified)
        ir_print(fd->d.out, m);
    pass_registry_free(&reg);
    fuzz_diag_close(fd);
    FUZZ_CHECK(rc != 0 || verified, "the pipeline left IR that does not verify:\n%s", fd->text);
    FUZZ_CHECK(rc == 0 || fd->d.nerrors > before, "the pipeline failed without an error:\n%s",
               fd->text);
    return rc == 0 ? 0 : -1;
}

#endif
