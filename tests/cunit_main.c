/*
 * cunit_main.c - shared main() of the CUnit test executables.
 *
 * Each test file defines `void einc_register_tests(void)`, which adds its
 * suites to the CUnit registry; this main runs them all with the basic
 * interface and exits 1 if any assertion failed.
 */
#include <CUnit/Basic.h>
#include <stdio.h>

#include "cunit_main.h"

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        return 1;
    }
    einc_register_tests();
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    if (ran == 0) {
        fprintf(stderr, "no test ran\n");
        return 1;
    }
    return failed ? 1 : 0;
}

void einc_add_suite(const char *name, const einc_test *tests, int n)
{
    CU_pSuite s = CU_add_suite(name, NULL, NULL);
    if (!s) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        return;
    }
    for (int i = 0; i < n; i++)
        CU_add_test(s, tests[i].name, tests[i].fn);
}
