/*
 * sample_rows.c - a command-line front to rt_sample_row and
 * rt_sample_uniform (runtime/sample.c) for run_sample.py, which checks the
 * tokens against a NumPy implementation of the same rule.
 *
 *   sample_rows f32|f64 T K P SEED < rows
 *
 * reads "R V" and then R rows of V logits (decimal text; each rounded to
 * f32 first with f32) and prints, one a line, the token chosen for row r
 * with the uniform draw of step r / 4, sequence r % 4 (so both parts of
 * the counter vary).  Exit status 1 and a message on bad input.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rt_generate.h"
#include "rt_internal.h"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s f32|f64 T K P SEED < rows\n", argv[0]);
        return 1;
    }
    int32_t dtype = argv[1][1] == '3' ? RT_F32 : RT_F64;
    rt_sampling s = {.temperature = strtod(argv[2], NULL), .top_k = strtoll(argv[3], NULL, 10),
                     .top_p = strtod(argv[4], NULL), .seed = strtoull(argv[5], NULL, 10)};
    long long rows, vocab;
    if (scanf("%lld %lld", &rows, &vocab) != 2 || rows < 1 || vocab < 1) {
        fprintf(stderr, "sample_rows: expected 'R V' first\n");
        return 1;
    }
    double *row = malloc((size_t)vocab * sizeof *row);
    float *row32 = malloc((size_t)vocab * sizeof *row32);
    rt_sample_entry *work = malloc((size_t)vocab * sizeof *work);
    if (!row || !row32 || !work) {
        fprintf(stderr, "sample_rows: out of memory\n");
        return 1;
    }
    for (long long r = 0; r < rows; r++) {
        for (long long v = 0; v < vocab; v++) {
            if (scanf("%lf", &row[v]) != 1) {
                fprintf(stderr, "sample_rows: row %lld has fewer than %lld numbers\n", r, vocab);
                return 1;
            }
            row32[v] = (float)row[v];
        }
        double u = rt_sample_uniform(s.seed, r / 4, r % 4);
        printf("%d\n", rt_sample_row(&s, dtype, dtype == RT_F32 ? (void *)row32 : (void *)row,
                                     vocab, u, work));
    }
    free(row);
    free(row32);
    free(work);
    return 0;
}
