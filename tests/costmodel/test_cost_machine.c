/*
 * test_cost_machine.c - the machine a profile was measured on: the
 * "machine" object parses into cost_hw.machine, prints back the same
 * (cost_machine_to_json), bad fields are errors naming the field, and
 * identity, description and cache key say what the driver relies on.
 */
#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "costmodel.h"
#include "cunit_main.h"

/* A valid profile with room for a "machine" object (%s: ", \"machine\": {...}" or ""). */
static const char *BASE_FMT =
    "{\"name\": \"host\", \"status\": \"calibrated\",\n"
    " \"peak_flops\": {\"bf16\": 4e10, \"f32\": 4e10, \"f64\": 2e10},\n"
    " \"hbm_bytes\": 6e9, \"hbm_bandwidth\": 1.4e10,\n"
    " \"ici_oneway_bandwidth\": 5e9, \"ici_bidi_bandwidth\": 5e9,\n"
    " \"ici_latency\": 1e-9, \"dcn_bandwidth\": 5e9,\n"
    " \"wraparound\": {\"rule\": \"always\"}%s}\n";

static const char *MACHINE =
    ", \"machine\": {\"cpu_model\": \"AMD EPYC (family 26, model 2)\", \"cores\": 2,"
    " \"isa\": \"avx512\", \"blas_core\": \"Haswell\","
    " \"blas_config\": \"OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell\"}";

static int parse_with(const char *machine, cost_hw *hw, char *err, size_t errsize)
{
    char json[2048];
    snprintf(json, sizeof json, BASE_FMT, machine);
    return cost_hw_parse(json, "m.json", hw, err, errsize);
}

static cost_machine sample_machine(void)
{
    cost_machine m;
    memset(&m, 0, sizeof m);
    snprintf(m.cpu_model, sizeof m.cpu_model, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz");
    m.cores = 8;
    snprintf(m.isa, sizeof m.isa, "avx512");
    snprintf(m.blas_core, sizeof m.blas_core, "SkylakeX");
    snprintf(m.blas_config, sizeof m.blas_config, "OpenBLAS 0.3.26 DYNAMIC_ARCH");
    return m;
}

static void test_parse_fields(void)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(parse_with(MACHINE, &hw, err, sizeof err), 0);
    CU_ASSERT_TRUE(hw.has_machine);
    CU_ASSERT_STRING_EQUAL(hw.machine.cpu_model, "AMD EPYC (family 26, model 2)");
    CU_ASSERT_EQUAL(hw.machine.cores, 2);
    CU_ASSERT_STRING_EQUAL(hw.machine.isa, "avx512");
    CU_ASSERT_STRING_EQUAL(hw.machine.blas_core, "Haswell");
    CU_ASSERT_STRING_EQUAL(hw.machine.blas_config, "OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell");
}

/* Absent: the profile says nothing about its machine, and still loads. */
static void test_absent(void)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(parse_with("", &hw, err, sizeof err), 0);
    CU_ASSERT_FALSE(hw.has_machine);
    CU_ASSERT_STRING_EQUAL(hw.machine.cpu_model, "");
    CU_ASSERT_EQUAL(hw.machine.cores, 0);
}

static void expect_error(const char *machine, const char *needle)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL(parse_with(machine, &hw, err, sizeof err), -1);
    if (!strstr(err, needle))
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", err, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "m.json"));
}

static void test_bad_fields(void)
{
    expect_error(", \"machine\": \"AMD\"", "\"machine\" must be an object");
    expect_error(", \"machine\": {\"cpu_model\": 3}", "\"machine.cpu_model\" must be a string");
    expect_error(", \"machine\": {\"blas_core\": null}", "\"machine.blas_core\" must be a string");
    expect_error(", \"machine\": {\"cores\": 0}", "\"machine.cores\"");
    expect_error(", \"machine\": {\"cores\": 2.5}", "\"machine.cores\"");
    expect_error(", \"machine\": {\"cores\": \"2\"}", "\"machine.cores\"");
}

/* Printed and read back, a machine is the same machine, field by field. */
static void test_print_parse_round_trip(void)
{
    cost_machine m = sample_machine();
    cJSON *j = cost_machine_to_json(&m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char field[1024];
    snprintf(field, sizeof field, ", \"machine\": %s", text);
    cJSON_free(text);
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(parse_with(field, &hw, err, sizeof err), 0);
    CU_ASSERT_TRUE(hw.has_machine);
    CU_ASSERT_TRUE(cost_machine_same(&hw.machine, &m));
    CU_ASSERT_STRING_EQUAL(hw.machine.cpu_model, m.cpu_model);
    CU_ASSERT_STRING_EQUAL(hw.machine.blas_config, m.blas_config);
    CU_ASSERT_EQUAL(hw.machine.cores, 8);
}

/* Every compared field tells machines apart; the BLAS build string does not. */
static void test_same(void)
{
    cost_machine a = sample_machine(), b = sample_machine();
    CU_ASSERT_TRUE(cost_machine_same(&a, &b));
    snprintf(b.blas_config, sizeof b.blas_config, "OpenBLAS 0.3.27");
    CU_ASSERT_TRUE(cost_machine_same(&a, &b));
    b = sample_machine();
    snprintf(b.cpu_model, sizeof b.cpu_model, "AMD EPYC");
    CU_ASSERT_FALSE(cost_machine_same(&a, &b));
    b = sample_machine();
    b.cores = 4;
    CU_ASSERT_FALSE(cost_machine_same(&a, &b));
    b = sample_machine();
    snprintf(b.isa, sizeof b.isa, "avx2");
    CU_ASSERT_FALSE(cost_machine_same(&a, &b));
    b = sample_machine();
    snprintf(b.blas_core, sizeof b.blas_core, "Haswell");
    CU_ASSERT_FALSE(cost_machine_same(&a, &b));
}

static void test_describe(void)
{
    cost_machine m = sample_machine();
    char buf[512];
    cost_machine_describe(&m, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, 8 cores, avx512, "
                                "OpenBLAS SkylakeX");
    cost_machine none;
    memset(&none, 0, sizeof none);
    cost_machine_describe(&none, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "unknown, unknown cores, unknown, OpenBLAS unknown");
}

/* Keys are file names: [a-z0-9-] only, bounded, and differ between machines. */
static void test_key(void)
{
    cost_machine a = sample_machine(), b = sample_machine();
    char ka[128], kb[128];
    cost_machine_key(&a, ka, sizeof ka);
    cost_machine_key(&b, kb, sizeof kb);
    CU_ASSERT_STRING_EQUAL(ka, kb);
    CU_ASSERT_PTR_NOT_NULL(strstr(ka, "intel-r-xeon-r-platinum-8481c"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ka, "-8c-avx512-skylakex-"));
    for (const char *p = ka; *p; p++)
        CU_ASSERT_TRUE((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-');
    CU_ASSERT_TRUE(strlen(ka) < sizeof ka - 1);
    /* The build string is not part of the identity, so not of the key. */
    snprintf(b.blas_config, sizeof b.blas_config, "another build");
    cost_machine_key(&b, kb, sizeof kb);
    CU_ASSERT_STRING_EQUAL(ka, kb);
    /* Names that slug alike still get their own key (the hash). */
    snprintf(b.cpu_model, sizeof b.cpu_model, "intel r xeon r platinum 8481c cpu 2 70ghz");
    cost_machine_key(&b, kb, sizeof kb);
    CU_ASSERT_STRING_NOT_EQUAL(ka, kb);
    /* A long model name is cut, the key still ends in the hash. */
    memset(b.cpu_model, 'x', sizeof b.cpu_model - 1);
    b.cpu_model[sizeof b.cpu_model - 1] = 0;
    cost_machine_key(&b, kb, sizeof kb);
    CU_ASSERT_TRUE(strlen(kb) < 128);
    CU_ASSERT_PTR_NOT_NULL(strstr(kb, "-8c-avx512-skylakex-"));
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"machine fields parse", test_parse_fields},
        {"no machine object", test_absent},
        {"bad machine fields name the field", test_bad_fields},
        {"print then parse gives the same machine", test_print_parse_round_trip},
        {"cost_machine_same compares the identity", test_same},
        {"description", test_describe},
        {"cache key", test_key},
    };
    einc_add_suite("profile machine identity", tests, (int)(sizeof tests / sizeof tests[0]));
}
