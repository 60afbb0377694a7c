/* What the PRK-style C+MPI kernels share: the world, arguments, timing of one run
   (iterations + 1, the first untimed, the slowest rank's time), and the report
   (the median rate over runs and whether every run validated), printed by rank 0 as
   "rate <median> valid <0|1>". Written for spmd's PRK benchmark (benchmarks/prk). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRK_EPS 1e-8
#define PRK_MAX_RUNS 64

static int prk_rank, prk_size;

static void prk_init(int *argc, char ***argv, int nargs, const char *usage) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &prk_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &prk_size);
    if (*argc != nargs + 1) {
        if (prk_rank == 0) fprintf(stderr, "usage: %s %s\n", (*argv)[0], usage);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static double *prk_alloc(long n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(double)) != 0) MPI_Abort(MPI_COMM_WORLD, 3);
    return (double *)p;
}

/* the slowest rank's time since t0 */
static double prk_elapsed(double t0) {
    double t = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static double prk_sum(double x) {
    double s;
    MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

static int prk_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void prk_report(double *rates, int runs, int valid) {
    qsort(rates, runs, sizeof(double), prk_cmp);
    double med = runs % 2 ? rates[runs / 2] : 0.5 * (rates[runs / 2 - 1] + rates[runs / 2]);
    if (prk_rank == 0) printf("rate %.6f valid %d\n", med, valid);
    MPI_Finalize();
}
