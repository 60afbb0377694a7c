/* transpose: B += A^T; A += 1. Rows of both split in blocks of b = n / ranks. Rank p
   needs, for each rank q, q's b x b block A[q rows, p cols] transposed: each rank packs
   the transposed blocks it sends (64 x 64 tiles), one MPI_Alltoall moves them, and each
   rank adds what it received into B (contiguous rows). One rank transposes in place,
   tiled, with no packing. Rate: MB/s, 2 doubles a point. */
#include "prk.h"

#define TILE 64
#define MIN(x, y) ((x) < (y) ? (x) : (y))

/* dst[j * ldd + i] (+)= src[i * lds + j] for a rows x cols block, in TILE x TILE tiles */
static void tile_transpose(double *restrict dst, long ldd, const double *restrict src, long lds, long rows, long cols, int add) {
    for (long it = 0; it < rows; it += TILE)
        for (long jt = 0; jt < cols; jt += TILE)
            for (long i = it; i < MIN(it + TILE, rows); i++)
                for (long j = jt; j < MIN(jt + TILE, cols); j++)
                    dst[j * ldd + i] = (add ? dst[j * ldd + i] : 0.0) + src[i * lds + j];
}

int main(int argc, char **argv) {
    prk_init(&argc, &argv, 3, "iterations runs order");
    int iters = atoi(argv[1]), runs = atoi(argv[2]);
    long n = atol(argv[3]), b = n / prk_size, r0 = prk_rank * b;
    double *restrict a = prk_alloc(b * n), *restrict bm = prk_alloc(b * n);
    double *restrict sendbuf = prk_alloc(b * n), *restrict recvbuf = prk_alloc(b * n);
    double rates[PRK_MAX_RUNS];
    int valid = 1;
    for (int run = 0; run < runs; run++) {
        for (long i = 0; i < b; i++)
            for (long j = 0; j < n; j++) { a[i * n + j] = (double)((r0 + i) * n + j); bm[i * n + j] = 0.0; }
        double t0 = 0;
        for (int k = 0; k <= iters; k++) {
            if (k == 1) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
            if (prk_size == 1) {
                tile_transpose(bm, n, a, n, n, n, 1);
            } else {
                /* block q of sendbuf: (A[my rows, q cols])^T, b x b, for rank q */
                for (int q = 0; q < prk_size; q++) tile_transpose(sendbuf + q * b * b, b, a + q * b, n, b, b, 0);
                MPI_Alltoall(sendbuf, b * b, MPI_DOUBLE, recvbuf, b * b, MPI_DOUBLE, MPI_COMM_WORLD);
                /* block q received: B[my rows, q cols] += it */
                for (int q = 0; q < prk_size; q++)
                    for (long i = 0; i < b; i++) {
                        double *restrict d = bm + i * n + q * b;
                        const double *restrict s = recvbuf + q * b * b + i * b;
                        for (long j = 0; j < b; j++) d[j] += s[j];
                    }
            }
            for (long i = 0; i < b * n; i++) a[i] += 1.0;
        }
        double t = prk_elapsed(t0), err = 0;
        for (long i = 0; i < b; i++)
            for (long j = 0; j < n; j++) {
                double want = (iters + 1.0) * (double)(j * n + r0 + i) + iters * (iters + 1.0) / 2.0;
                err += fabs(bm[i * n + j] - want);
            }
        err = prk_sum(err);
        valid &= err < PRK_EPS;
        rates[run] = 1e-6 * 2.0 * sizeof(double) * (double)(n * n) * iters / t;
    }
    prk_report(rates, runs, valid);
    return 0;
}
