/*
 * calibrate_internal.h - what driver/calibrate*.c share: the measurements of
 * one collective kind and their fit (seed 004's measured model).
 */
#ifndef EINC_CALIBRATE_INTERNAL_H
#define EINC_CALIBRATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#define MAX_RANKS 16
#define MAX_SIZES 24
#define MAX_SAMPLES (MAX_RANKS * MAX_SIZES)
#define MAX_ROUNDS 15
#define NKINDS 4
#define NGEMM 4
#define NEW 4
#define NFN 4 /* sizes the functions are timed on (calibrate.c, FN_ELEMS) */
/* Buffers below this many bytes per device are fitted separately (they
 * stay in the caches; docs/cost-model.md). */
#define SPLIT_BYTES (1 << 20)

/* The command line of `einc calibrate`. */
typedef struct cal_options {
    const char *output;     /* -o: profile to write; NULL: this machine's cache file */
    const char *name;       /* --name: the profile's "name" */
    bool mpi;               /* --runtime=mpi */
    int ranks;              /* --ranks N: largest group, devices per program */
    bool quick;             /* --quick: few sizes, few runs (tests) */
    int64_t max_bytes;      /* --max-bytes: largest collective buffer */
    int repeat;             /* --repeat: runs per process */
    int rounds;             /* --rounds: processes per program (median over them) */
    bool keep;              /* --keep: leave the work directory */
    bool machine;           /* --machine: print the identity, measure nothing */
    const char *mpirun;     /* --mpirun: the launcher command */
} cal_options;

/* One timed collective. */
typedef struct sample {
    int p;                  /* group size */
    double bytes;           /* buffer bytes per device (nccl-tests' size) */
    double runs;            /* contiguous runs a device copies: P if flat, P x rows if strided */
    double t;               /* median seconds per call */
    double fit;             /* fitted seconds */
    bool outlier;           /* left out of the final fit */
} sample;

/* The measured model of one collective kind. */
typedef struct coll_fit {
    sample s[MAX_SAMPLES];  /* the measurements */
    int n;                  /* samples in s */
    double t_launch;        /* seconds */
    double l_sync;          /* seconds per step */
    double bw;              /* bytes/s of one step's shard */
    double bw_local;        /* bytes/s of the copy of the device's own shard; 0: free */
    double t_run;           /* seconds per contiguous run beyond one per peer block */
    double rms;             /* rms relative residual */
    double max;             /* largest relative residual of the samples used */
    int used;               /* samples in the final fit */
    bool has_small;         /* buffers below SPLIT_BYTES have their own fit */
    double small_t_launch;  /* that fit: seconds */
    double small_l_sync;    /* seconds per step */
    double small_bw;        /* bytes/s */
    double small_bw_local;  /* bytes/s; 0: free */
    double small_t_run;     /* seconds per extra run */
} coll_fit;

/* Fits T(P, S, runs) = T_launch + (P - 1) (L_sync + shard / BW) +
 * shard / BW_local + (runs - P) t_run to f's samples
 * (relative least squares, coefficients kept non-negative; buffers below
 * SPLIT_BYTES fitted separately when there are enough of them), fills each
 * sample's fitted time and the residual statistics.  `kind` names the
 * collective in messages.  Returns 0, or -1 after a message on stderr when
 * no fit exists (calibrate_fit.c). */
int cal_fit_kind(coll_fit *f, const char *kind);

/* Median of v[0..n) (sorts v in place); n >= 1 (calibrate_fit.c). */
double cal_median(double *v, int n);

#endif
