/*
 * cg_cases.h - hand-built, already propagated IR modules for the codegen
 * tests (before the frontend and the propagate pass exist, and afterwards
 * as cases that do not depend on them).
 *
 * Each case is built twice from one function: sharded on a 2x2 mesh (X, Y),
 * and as its reference (the same program with every axis of size 1, all
 * values replicated and the collectives left out), as cg_emit expects.
 * tests/codegen/e2e.py holds the NumPy formula of each case.
 */
#ifndef EINC_CG_CASES_H
#define EINC_CG_CASES_H

#include <stdbool.h>

#include "ir.h"

/* Names of the cases, NULL-terminated. */
extern const char *const cg_case_names[];

/* Builds case `name`; reference = the one-device version.  NULL if no such
 * case.  Free with ir_module_free. */
ir_module *cg_case_build(const char *name, bool reference);

#endif
