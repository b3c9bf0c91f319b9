/* cunit_main.h - what a CUnit test file provides to tests/cunit_main.c. */
#ifndef EINC_CUNIT_MAIN_H
#define EINC_CUNIT_MAIN_H

#include <CUnit/CUnit.h>

/* Adds the file's suites to the CUnit registry (CU_add_suite, CU_add_test). */
void einc_register_tests(void);

/* Adds suite `name` with `n` tests {name, fn}; aborts on registry errors. */
typedef struct einc_test { const char *name; CU_TestFunc fn; } einc_test;
void einc_add_suite(const char *name, const einc_test *tests, int n);

#endif
