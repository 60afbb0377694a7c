/* sparse: result += M vector after vector += i + 1, M the star stencil (radius r,
   periodic) of a 2^lsize x 2^lsize grid in CSR with 4r+1 entries a row, entry (row, col)
   = 1 / (col + 1). Rows split in blocks; the vector whole on every rank (each updates
   it). Rate: MFlops/s, 2 a nonzero. */
#include "prk.h"

int main(int argc, char **argv) {
    prk_init(&argc, &argv, 4, "iterations runs lsize radius");
    int iters = atoi(argv[1]), runs = atoi(argv[2]), lsize = atoi(argv[3]), r = atoi(argv[4]);
    long size = 1L << lsize, total = size * size, rows = total / prk_size, r0 = prk_rank * rows;
    int per = 4 * r + 1;
    double *restrict vals = prk_alloc(rows * per), *restrict vec = prk_alloc(total), *restrict res = prk_alloc(rows);
    long *restrict cols = (long *)prk_alloc(rows * per);
    for (long l = 0; l < rows; l++) {
        long row = r0 + l, i = row % size, j = row / size, e = l * per;
        cols[e++] = row;
        for (int k = 1; k <= r; k++) {
            cols[e++] = (i + k) % size + j * size;
            cols[e++] = (i - k + size) % size + j * size;
        }
        for (int k = 1; k <= r; k++) {
            cols[e++] = i + ((j + k) % size) * size;
            cols[e++] = i + ((j - k + size) % size) * size;
        }
        for (long m = l * per; m < e; m++) vals[m] = 1.0 / (cols[m] + 1.0);
    }
    double rates[PRK_MAX_RUNS];
    int valid = 1;
    for (int run = 0; run < runs; run++) {
        for (long i = 0; i < total; i++) vec[i] = 0.0;
        for (long i = 0; i < rows; i++) res[i] = 0.0;
        double t0 = 0;
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            for (long i = 0; i < total; i++) vec[i] += (double)(i + 1);
            for (long l = 0; l < rows; l++) {
                double s = 0.0;
                for (long m = l * per; m < (l + 1) * per; m++) s += vals[m] * vec[cols[m]];
                res[l] += s;
            }
        }
        double t = prk_elapsed(t0), s = 0;
        for (long i = 0; i < rows; i++) s += res[i];
        s = prk_sum(s);
        double nnz = (double)total * per, want = 0.5 * nnz * (iters + 1) * (iters + 2);
        valid &= fabs(s - want) / want < PRK_EPS;
        rates[run] = 1e-6 * 2.0 * nnz * iters / t;
    }
    prk_report(rates, runs, valid);
    return 0;
}
