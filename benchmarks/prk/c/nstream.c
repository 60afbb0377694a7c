/* nstream (the STREAM triad a += b + s*c) on each rank's share of the vectors; no
   communication but the validation's sum. Rate: MB/s, 4 doubles a point. */
#include "prk.h"

int main(int argc, char **argv) {
    prk_init(&argc, &argv, 3, "iterations runs length");
    int iters = atoi(argv[1]), runs = atoi(argv[2]);
    long total = atol(argv[3]), n = total / prk_size;
    double *restrict a = prk_alloc(n), *restrict b = prk_alloc(n), *restrict c = prk_alloc(n);
    const double scalar = 3.0;
    double rates[PRK_MAX_RUNS];
    int valid = 1;
    for (int run = 0; run < runs; run++) {
        for (long i = 0; i < n; i++) { a[i] = 0.0; b[i] = 2.0; c[i] = 2.0; }
        double t0 = 0;
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            for (long i = 0; i < n; i++) a[i] += b[i] + scalar * c[i];
        }
        double t = prk_elapsed(t0), asum = 0;
        for (long i = 0; i < n; i++) asum += fabs(a[i]);
        asum = prk_sum(asum);
        double want = (iters + 1) * (2.0 + scalar * 2.0) * (double)(n * prk_size);
        valid &= fabs(asum - want) / want < PRK_EPS;
        rates[run] = 1e-6 * 4.0 * sizeof(double) * (double)(n * prk_size) * iters / t;
    }
    prk_report(rates, runs, valid);
    return 0;
}
