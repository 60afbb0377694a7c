/* stencil: out += W * in on an n x n grid, then in += 1. Rows are split in blocks over
   the ranks; each iteration first exchanges RADIUS ghost rows of `in` with the rank above
   and below (MPI_Sendrecv). RADIUS and STAR (1 star, 0 box) are fixed at compile time, as
   the PRK does, so the weight loops unroll. Rate: MFlops/s, (2 * points + 1) a point. */
#include "prk.h"

#ifndef RADIUS
#define RADIUS 2
#endif
#ifndef STAR
#define STAR 1
#endif
#define R RADIUS
#define W(ii, jj) w[(ii) + R][(jj) + R]

int main(int argc, char **argv) {
    prk_init(&argc, &argv, 3, "iterations runs n");
    int iters = atoi(argv[1]), runs = atoi(argv[2]);
    long n = atol(argv[3]);
    long rows = n / prk_size, r0 = prk_rank * rows;          /* this rank's global rows r0.. */
    long ld = n;                                               /* local arrays: rows + 2R ghost rows */
    double *restrict in = prk_alloc((rows + 2 * R) * ld), *restrict out = prk_alloc(rows * ld);
    double w[2 * R + 1][2 * R + 1];
    memset(w, 0, sizeof w);
    for (int j = 1; j <= R; j++) {
        if (STAR) {
            W(0, j) = W(j, 0) = 1.0 / (2.0 * j * R);
            W(0, -j) = W(-j, 0) = -1.0 / (2.0 * j * R);
        } else {
            double edge = 1.0 / (4.0 * j * (2.0 * j - 1) * R);
            for (int i = -j + 1; i < j; i++) {
                W(i, j) = W(j, i) = edge;
                W(i, -j) = W(-j, i) = -edge;
            }
            W(j, j) = 1.0 / (4.0 * j * R);
            W(-j, -j) = -1.0 / (4.0 * j * R);
        }
    }
    int up = prk_rank > 0 ? prk_rank - 1 : MPI_PROC_NULL;
    int down = prk_rank < prk_size - 1 ? prk_rank + 1 : MPI_PROC_NULL;
    long lo = r0 < R ? R - r0 : 0;                              /* local rows to compute */
    long hi = r0 + rows > n - R ? n - R - r0 : rows;
    double rates[PRK_MAX_RUNS];
    int valid = 1;
    for (int run = 0; run < runs; run++) {
        for (long i = 0; i < rows + 2 * R; i++)
            for (long j = 0; j < n; j++) in[i * ld + j] = (double)(r0 + i - R) + (double)j;
        for (long i = 0; i < rows * ld; i++) out[i] = 0.0;
        double t0 = 0;
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            MPI_Sendrecv(in + R * ld, R * ld, MPI_DOUBLE, up, 0, in + (rows + R) * ld, R * ld, MPI_DOUBLE, down, 0,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Sendrecv(in + rows * ld, R * ld, MPI_DOUBLE, down, 1, in, R * ld, MPI_DOUBLE, up, 1,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = lo; i < hi; i++) {
                const double *restrict c = in + (i + R) * ld;
                double *restrict o = out + i * ld;
                for (long j = R; j < n - R; j++) {
                    double s = 0.0;
#if STAR
                    for (int jj = -R; jj <= R; jj++) s += W(0, jj) * c[j + jj];
                    for (int ii = -R; ii < 0; ii++) s += W(ii, 0) * c[ii * ld + j];
                    for (int ii = 1; ii <= R; ii++) s += W(ii, 0) * c[ii * ld + j];
#else
                    for (int ii = -R; ii <= R; ii++)
                        for (int jj = -R; jj <= R; jj++) s += W(ii, jj) * c[ii * ld + j + jj];
#endif
                    o[j] += s;
                }
            }
            for (long i = R * ld; i < (rows + R) * ld; i++) in[i] += 1.0;
        }
        double t = prk_elapsed(t0), norm = 0;
        for (long i = lo; i < hi; i++)
            for (long j = R; j < n - R; j++) norm += fabs(out[i * ld + j]);
        norm = prk_sum(norm) / (double)((n - 2 * R) * (n - 2 * R));
        double want = (iters + 1) * 2.0;
        valid &= fabs(norm - want) / want < PRK_EPS;
        double points = STAR ? 4 * R + 1 : (2 * R + 1) * (2 * R + 1);
        rates[run] = 1e-6 * (2.0 * points + 1) * (double)((n - 2 * R) * (n - 2 * R)) * iters / t;
    }
    prk_report(rates, runs, valid);
    return 0;
}
