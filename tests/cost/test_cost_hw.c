/*
 * test_cost_hw.c - loading hardware profiles: the shipped ones carry the
 * seeds' figures, lookup by name/path/EINC_HW_DIR works, and every kind of
 * bad profile is an error that names the file and the field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "costmodel.h"
#include "cunit_main.h"

/* A valid profile; variants are made by replacing one piece of it. */
static const char *BASE =
    "{\"name\": \"testchip\", \"status\": \"datasheet\",\n"
    " \"peak_flops\": {\"bf16\": 2e14, \"f32\": 5e13, \"f64\": 1e13, \"bf16_source\": \"x\"},\n"
    " \"hbm_bytes\": 1.6e10, \"hbm_bandwidth\": 8e11,\n"
    " \"ici_oneway_bandwidth\": 4e10, \"ici_bidi_bandwidth\": 8e10,\n"
    " \"ici_latency\": 1e-6, \"dcn_bandwidth\": 3e9,\n"
    " \"wraparound\": {\"rule\": \"size_equals\", \"size\": 16}}\n";

/* BASE with the first `from` replaced by `to`, written into `buf`. */
static const char *variant(const char *from, const char *to, char *buf, size_t size)
{
    const char *at = strstr(BASE, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(buf, size, "%.*s%s%s", (int)(at - BASE), BASE, to, at + strlen(from));
    return buf;
}

/* Parses `json`, expects failure with `needle` in the message. */
static void expect_error(const char *json, const char *needle)
{
    cost_hw hw;
    char err[512] = "";
    int rc = cost_hw_parse(json, "test.json", &hw, err, sizeof err);
    CU_ASSERT_EQUAL(rc, -1);
    if (!strstr(err, needle) || !strstr(err, "test.json"))
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", err, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "test.json"));
}

static void test_base_parses(void)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(BASE, "test.json", &hw, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(hw.name, "testchip");
    CU_ASSERT_DOUBLE_EQUAL(hw.peak_flops[IR_BF16], 2e14, 1);
    CU_ASSERT_DOUBLE_EQUAL(hw.peak_flops[IR_F64], 1e13, 1);
    CU_ASSERT_EQUAL(hw.wrap, COST_WRAP_SIZE_EQUALS);
    CU_ASSERT_EQUAL(hw.wrap_size, 16);
    CU_ASSERT_TRUE(hw.calibrated);
}

/* The shipped profiles hold the seeds' figures. */
static void test_shipped_profiles(void)
{
    static const struct { const char *name; double bf16, hbm_bw, oneway, bidi; cost_wrap_rule wrap; } want[] = {
        {"tpu-v5e", 1.97e14, 8.1e11, 4.5e10, 9e10, COST_WRAP_SIZE_EQUALS},
        {"tpu-v5p", 4.59e14, 2.8e12, 9e10, 1.8e11, COST_WRAP_SIZE_MULTIPLE_OF},
        {"tpu-v4", 2.75e14, 1.2e12, 4.5e10, 9e10, COST_WRAP_SIZE_MULTIPLE_OF},
        {"h100", 9.9e14, 3.4e12, 4.5e11, 9e11, COST_WRAP_ALWAYS},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cost_hw hw;
        char err[512] = "";
        int rc = cost_hw_load(want[i].name, &hw, err, sizeof err);
        if (rc)
            fprintf(stderr, "\n  %s\n", err);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_STRING_EQUAL(hw.name, want[i].name);
        CU_ASSERT_DOUBLE_EQUAL(hw.peak_flops[IR_BF16], want[i].bf16, want[i].bf16 * 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(hw.hbm_bw, want[i].hbm_bw, want[i].hbm_bw * 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(hw.ici_oneway_bw, want[i].oneway, want[i].oneway * 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(hw.ici_bidi_bw, want[i].bidi, want[i].bidi * 1e-9);
        CU_ASSERT_EQUAL(hw.wrap, want[i].wrap);
        CU_ASSERT_TRUE(hw.calibrated);
        CU_ASSERT_FALSE(hw.measured);
    }
    /* host is written by `einc calibrate` on this machine: its figures are
     * measurements, so only their shape is fixed. */
    cost_hw host;
    CU_ASSERT_EQUAL_FATAL(cost_hw_load("host", &host, NULL, 0), 0);
    CU_ASSERT_STRING_EQUAL(host.name, "host");
    CU_ASSERT_TRUE(host.calibrated);
    CU_ASSERT_TRUE(host.measured);
    CU_ASSERT_EQUAL(host.wrap, COST_WRAP_ALWAYS);
    for (int k = 0; k < COST_FIT_COUNT; k++) {
        CU_ASSERT_TRUE(host.fit[k].bw > 0);
        CU_ASSERT_TRUE(host.fit[k].t_launch >= 0 && host.fit[k].l_sync >= 0);
    }
    CU_ASSERT_TRUE(host.peak_flops[IR_F32] > 0 && host.elementwise_bw > 0);
    /* seed 000: C / W_ici = 2550 on v5p */
    cost_hw v5p;
    CU_ASSERT_EQUAL_FATAL(cost_hw_load("tpu-v5p", &v5p, NULL, 0), 0);
    CU_ASSERT_DOUBLE_EQUAL(v5p.peak_flops[IR_BF16] / v5p.ici_bidi_bw, 2550, 1);
    /* seed 000: C_int8 / W_ici = 5100 on v5p; int8 is twice bf16 on the
     * TPUs that have it (HARDWARE.md), fp8 only on H100, none on host */
    CU_ASSERT_DOUBLE_EQUAL(v5p.peak_int8 / v5p.ici_bidi_bw, 5100, 1);
    CU_ASSERT_EQUAL(v5p.peak_fp8, 0);
    cost_hw h100;
    CU_ASSERT_EQUAL_FATAL(cost_hw_load("h100", &h100, NULL, 0), 0);
    CU_ASSERT_DOUBLE_EQUAL(h100.peak_fp8, 1.979e15, 1e6);
    CU_ASSERT_EQUAL(host.peak_int8, 0);
}

static void test_load_by_path_and_env(void)
{
    cost_hw hw;
    char err[512] = "";
    char path[600];
    snprintf(path, sizeof path, "%s/tpu-v5p.json", EINC_HW_DIR);
    CU_ASSERT_EQUAL(cost_hw_load(path, &hw, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(hw.name, "tpu-v5p");

    /* EINC_HW_DIR points name lookup at another directory. */
    char dir[] = "/tmp/einc-cost-hwXXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char file[600];
    snprintf(file, sizeof file, "%s/testchip.json", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(BASE, f);
    fclose(f);
    setenv("EINC_HW_DIR", dir, 1);
    int rc = cost_hw_load("testchip", &hw, err, sizeof err);
    int rc_missing = cost_hw_load("tpu-v5e", &hw, err, sizeof err); /* not in that dir */
    unsetenv("EINC_HW_DIR");
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(rc_missing, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown hardware profile 'tpu-v5e'"));
    /* A name ending in .json is a path, relative to the working directory. */
    CU_ASSERT_EQUAL(cost_hw_load(file, &hw, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(hw.name, "testchip");
    remove(file);
    rmdir(dir);
}

static void test_missing_files(void)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL(cost_hw_load("no-such-chip", &hw, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown hardware profile 'no-such-chip'"));
    CU_ASSERT_EQUAL(cost_hw_load("/nonexistent/dir/x.json", &hw, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open"));
    CU_ASSERT_EQUAL(cost_hw_load("", &hw, err, sizeof err), -1);
    /* A directory is not a profile. */
    CU_ASSERT_EQUAL(cost_hw_load("/tmp/", &hw, err, sizeof err), -1);
}

static void test_bad_profiles(void)
{
    char buf[2048];
#define V(from, to) variant(from, to, buf, sizeof buf)
    expect_error("{ \"name\": ", "invalid JSON");
    expect_error("[1, 2]", "JSON object");
    expect_error(V("\"name\": \"testchip\"", "\"nom\": \"x\""), "\"name\"");
    expect_error(V("\"hbm_bandwidth\": 8e11,", ""), "missing field \"hbm_bandwidth\"");
    expect_error(V("\"ici_latency\": 1e-6", "\"ici_latency\": 0"), "\"ici_latency\" must be > 0");
    expect_error(V("\"dcn_bandwidth\": 3e9", "\"dcn_bandwidth\": -3e9"), "\"dcn_bandwidth\" must be > 0");
    expect_error(V("\"hbm_bytes\": 1.6e10", "\"hbm_bytes\": \"16GB\""), "\"hbm_bytes\" must be a number");
    expect_error(V(", \"f64\": 1e13", ""), "\"peak_flops.f64\"");
    expect_error(V(", \"f64\": 1e13", ", \"f64\": 1e13, \"int8\": -4e14"),
                 "\"peak_flops.int8\" must be > 0");
    expect_error(V(", \"f64\": 1e13", ", \"f64\": 1e13, \"fp8\": \"fast\""),
                 "\"peak_flops.fp8\" must be a number");
    expect_error(V("\"peak_flops\"", "\"peak\""), "\"peak_flops\"");
    expect_error(V("\"size_equals\"", "\"sometimes\""), "unknown \"wraparound.rule\" \"sometimes\"");
    expect_error(V(", \"size\": 16", ""), "\"wraparound.size\"");
    expect_error(V("\"size\": 16", "\"size\": 2.5"), "whole number");
    expect_error(V("\"wraparound\"", "\"wrap\""), "\"wraparound\"");
#undef V
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a valid profile parses", test_base_parses},
        {"shipped profiles hold the seeds' figures", test_shipped_profiles},
        {"lookup by path and EINC_HW_DIR", test_load_by_path_and_env},
        {"missing profile files", test_missing_files},
        {"bad profiles name the field", test_bad_profiles},
    };
    einc_add_suite("hardware profiles", tests, (int)(sizeof tests / sizeof tests[0]));
}
