/*
 * prop_fixture.h - small IR-building helpers for the propagation tests.
 *
 * Tensors are written in the seeds' notation, "A[I_X, J]{U_Y}", and parsed
 * against the module's dims and mesh, so each test reads like the seed's
 * example it checks.  Everything allocated lives in the module's arena.
 */
#ifndef EINC_PROP_FIXTURE_H
#define EINC_PROP_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>

#include "ir.h"

/* A module with mesh axes "X=2,Y=2" and dims "I=64,J=32" (f32 values). */
ir_module *fx_module(const char *mesh, const char *dims);
/* Parses "A[I_X, J]{U_Y}" into a type (f32) and the tensor name (copied
 * into name, size bytes); *has_sub says whether any subscript or {U_} was
 * written.  Aborts the test program on malformed text (a fixture bug). */
ir_type fx_type(ir_module *m, const char *text, char *name, int size, bool *has_sub);
/* An input value declared as `text`. */
ir_value *fx_input(ir_module *m, const char *text);
/* result = sum over the labels `result` lacks of a * b (b may be NULL: a
 * unary einsum).  Subscripts on `result` make it a constraint. */
ir_value *fx_einsum(ir_module *m, const char *result, ir_value *a, ir_value *b);
/* result = fn(a), elementwise. */
ir_value *fx_call(ir_module *m, const char *result, ir_func fn, ir_value *a);
/* result = a + b, elementwise (linear). */
ir_value *fx_add(ir_module *m, const char *result, ir_value *a, ir_value *b);
/* `output NAME` (text without brackets) or `output NAME[...]` (constraint). */
void fx_output(ir_module *m, const char *text, ir_value *v);
/* Runs pass_propagate then ir_verify; returns propagate's error count, and
 * *verify_errors the verifier's.  Diagnostics go to stderr. */
int fx_run(ir_module *m, int *verify_errors);
/* The same with the time objective on profile `hw` (NULL: fx_run). */
struct cost_hw;
int fx_run_hw(ir_module *m, const struct cost_hw *hw, int *verify_errors);
/* The same with diagnostics written to `diag_out`. */
int fx_run_hw_to(ir_module *m, const struct cost_hw *hw, FILE *diag_out, int *verify_errors);
/* The same with the passes' options as given on a command line (not owned;
 * NULL: all at their defaults). */
struct pass_options;
int fx_run_hw_opts(ir_module *m, const struct cost_hw *hw, FILE *diag_out,
                   const struct pass_options *options, int *verify_errors);
/* The planner's objective for a propagated module: the sum of every op's
 * estimated time on `hw` (cost_op_estimate), seconds. */
double fx_serial_time(const ir_module *m, const struct cost_hw *hw);
/* The inserted reshard ops in program order, "AllGather_X(Win) Slice_Y(B)",
 * into buf. */
const char *fx_collectives(const ir_module *m, char *buf, int size);
/* The first op of kind `k` (NULL if none). */
ir_op *fx_find(const ir_module *m, ir_op_kind k);
/* Sum of per-device bytes the inserted collectives move (seed 001 formulas,
 * from each op's operand and result types). */
double fx_bytes_moved(const ir_module *m);
/* "Name[...]" of the value an output ends as, into buf. */
const char *fx_output_type(const ir_module *m, int i, char *buf, int size);

#endif
