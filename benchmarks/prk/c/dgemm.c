/* dgemm: C += A B, order n, no BLAS (as the PRK's C kernel): the rows of A and C split in
   blocks over the ranks, B whole on every rank; a tiled i-k-j loop that vectorises
   along C's rows. Rate: MFlops/s, 2 n^3 an iteration. */
#include "prk.h"

#define TB 64
#define MIN(x, y) ((x) < (y) ? (x) : (y))

int main(int argc, char **argv) {
    prk_init(&argc, &argv, 3, "iterations runs order");
    int iters = atoi(argv[1]), runs = atoi(argv[2]);
    long n = atol(argv[3]), rows = n / prk_size;
    double *restrict a = prk_alloc(rows * n), *restrict bm = prk_alloc(n * n), *restrict c = prk_alloc(rows * n);
    double rates[PRK_MAX_RUNS];
    int valid = 1;
    for (int run = 0; run < runs; run++) {
        for (long i = 0; i < rows; i++)
            for (long j = 0; j < n; j++) { a[i * n + j] = (double)j; c[i * n + j] = 0.0; }
        for (long i = 0; i < n; i++)
            for (long j = 0; j < n; j++) bm[i * n + j] = (double)j;
        double t0 = 0;
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            for (long it = 0; it < rows; it += TB)
                for (long kt = 0; kt < n; kt += TB)
                    for (long jt = 0; jt < n; jt += TB)
                        for (long i = it; i < MIN(it + TB, rows); i++)
                            for (long kk = kt; kk < MIN(kt + TB, n); kk++) {
                                double aik = a[i * n + kk];
                                const double *restrict brow = bm + kk * n;
                                double *restrict crow = c + i * n;
                                for (long j = jt; j < MIN(jt + TB, n); j++) crow[j] += aik * brow[j];
                            }
        }
        double t = prk_elapsed(t0), s = 0;
        for (long i = 0; i < rows * n; i++) s += c[i];
        s = prk_sum(s);
        double want = 0.25 * (double)n * n * n * (n - 1.0) * (n - 1.0) * (iters + 1);
        valid &= fabs(s - want) / want < PRK_EPS;
        rates[run] = 1e-6 * 2.0 * (double)n * n * n * iters / t;
    }
    prk_report(rates, runs, valid);
    return 0;
}
