/*
 * fuzz_util.h - what every harness shares: the libFuzzer entry point's
 * declaration and a check that aborts (so libFuzzer records the input as a
 * crash, and the replay runner in CTest fails on it).  fuzz_ein.h adds
 * what the .ein harnesses share.
 *
 * Every harness is one LLVMFuzzerTestOneInput.  With -DEINC_FUZZ=ON (clang)
 * it is linked with libFuzzer; in every other build it is linked with
 * replay.c, which runs it on the files of tests/fuzz/corpus/ (the seeds
 * and every input that once crashed), so the crashes stay fixed in CTest.
 */
#ifndef EINC_FUZZ_UTIL_H
#define EINC_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry point libFuzzer (or replay.c) calls with each input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with a message if `cond` is false: a broken invariant is a crash. */
#define FUZZ_CHECK(cond, ...)                                                             \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#endif
