"""The Parallel Research Kernels in numpy, written here in the PRK's style: each kernel's
inputs, one iteration of its work as a numpy function (the same function runs under plain
numpy and under spmd.jit), the PRK's validation of the final state, and the PRK's rate.

An iteration updates its arrays in place and returns them. A run is `iters + 1`
iterations; the first is the warm-up and is not timed (the PRK's convention), so the
validation counts `iters + 1` updates.
"""
import numpy as np

SCALAR = 3.0          # nstream's triad scalar
EPS = 1e-8            # the PRK's validation tolerance


# -- nstream: the STREAM triad ------------------------------------------------------------------
def nstream_inputs(n):
    return np.zeros(n), np.full(n, 2.0), np.full(n, 2.0)


def nstream(a, b, c):
    a += b + SCALAR * c
    return a


def nstream_check(abs_sum_a, n, iters):
    want = (iters + 1) * (2.0 + SCALAR * 2.0) * n
    return abs(abs_sum_a - want) / want < EPS


def nstream_work(n):
    """Bytes an iteration moves (the PRK counts four arrays' worth: a read and written, b, c)."""
    return 4.0 * 8 * n


# -- stencil: star or box, radius r, on an n x n grid --------------------------------------------
def stencil_weights(r, star):
    """The PRK's weights as ((di, dj, w), ...): a star reads r points each way along the two
    axes, w = +-1/(2 j r) at distance j; a box reads the (2r+1)^2 square, ring j's edge points
    +-1/(4 j (2j - 1) r) and its diagonal corners +-1/(4 j r). Either, applied to a linear
    function a(i, j) = i + j, gives exactly 2 (cx + cy), which the validation uses."""
    w = {}
    for j in range(1, r + 1):
        if star:
            for d in (j, -j):
                w[(0, d)] = w.get((0, d), 0.0) + d / abs(d) / (2.0 * j * r)
                w[(d, 0)] = w.get((d, 0), 0.0) + d / abs(d) / (2.0 * j * r)
        else:
            edge = 1.0 / (4.0 * j * (2 * j - 1) * r)
            for i in range(-j + 1, j):
                w[(i, j)], w[(i, -j)] = edge, -edge
                w[(j, i)], w[(-j, i)] = edge, -edge
            w[(j, j)], w[(-j, -j)] = 1.0 / (4.0 * j * r), -1.0 / (4.0 * j * r)
    return tuple((di, dj, wt) for (di, dj), wt in sorted(w.items()))


def stencil_inputs(n):
    i = np.arange(n, dtype=np.float64)
    return i[:, None] + i[None, :], np.zeros((n, n))


def stencil(inp, out, weights, r):
    """out's interior += the stencil applied to inp; then inp += 1 (the PRK's update)."""
    n0, n1 = inp.shape
    acc = None
    for di, dj, w in weights:
        term = w * inp[r + di:n0 - r + di, r + dj:n1 - r + dj]
        acc = term if acc is None else acc + term
    out[r:n0 - r, r:n1 - r] += acc
    inp += 1.0
    return inp, out


def stencil_check(abs_sum_interior, n, r, iters):
    norm = abs_sum_interior / float((n - 2 * r) ** 2)
    want = (iters + 1) * 2.0
    return abs(norm - want) / want < EPS


def stencil_work(n, r, star):
    """Flops of an iteration: (2 * points + 1) per active grid point, as the PRK counts."""
    points = 4 * r + 1 if star else (2 * r + 1) ** 2
    return (2.0 * points + 1) * (n - 2 * r) ** 2


# -- transpose: B += A^T; A += 1 ----------------------------------------------------------------
def transpose_inputs(n):
    i = np.arange(n, dtype=np.float64)
    return i[:, None] * n + i[None, :], np.zeros((n, n))


def transpose(a, b):
    b += a.T
    a += 1.0
    return a, b


def transpose_error(b_block, row0, n, iters):
    """Sum of |B - expected| over rows row0.. of B (a rank checks its own block)."""
    i = np.arange(row0, row0 + b_block.shape[0], dtype=np.float64)[:, None]
    j = np.arange(n, dtype=np.float64)[None, :]
    want = (iters + 1.0) * (j * n + i) + iters * (iters + 1.0) / 2.0
    return float(np.abs(b_block - want).sum())


def transpose_check(abs_err):
    return abs_err < EPS


def transpose_work(n):
    return 2.0 * 8 * n * n


# -- dgemm: C += A @ B -------------------------------------------------------------------------
def dgemm_inputs(n):
    j = np.arange(n, dtype=np.float64)
    a = np.broadcast_to(j, (n, n)).copy()
    return a, a.copy(), np.zeros((n, n))


def dgemm(a, b, c):
    c += a @ b
    return c


def dgemm_check(sum_c, n, iters):
    want = 0.25 * n ** 3 * (n - 1.0) ** 2 * (iters + 1)
    return abs(sum_c - want) / want < EPS


def dgemm_work(n):
    return 2.0 * n ** 3


# -- sparse: a 2-D grid's star stencil matrix (periodic) times a vector --------------------------
def sparse_inputs(lsize, r):
    """The PRK's matrix, in CSR with every row the same length (so the row pointers are
    implicit): row i + j*size of a (2^lsize)^2 grid reads its star neighbours up to r away,
    wrapping around; entry (row, col) is 1 / (col + 1). Returns the (rows, 4r+1) values and
    column indices, the vector and the result (zeros)."""
    size = 1 << lsize
    rows = size * size
    row = np.arange(rows)
    i, j = row % size, row // size
    offs = [(0, 0)] + [(d, 0) for k in range(1, r + 1) for d in (k, -k)] + [(0, d) for k in range(1, r + 1) for d in (k, -k)]
    cols = np.stack([(i + di) % size + ((j + dj) % size) * size for di, dj in offs], axis=1)
    vals = 1.0 / (cols + 1.0)
    return vals, cols.astype(np.int64), np.zeros(rows), np.zeros(rows)


def sparse(vals, cols, vector, result):
    """vector += i + 1; result += matrix @ vector (the PRK's update)."""
    vector += np.arange(1, vector.shape[0] + 1, dtype=np.float64)
    result += (vals * vector[cols]).sum(axis=1)
    return vector, result


def sparse_check(sum_result, nnz, iters):
    want = 0.5 * nnz * (iters + 1) * (iters + 2)
    return abs(sum_result - want) / want < EPS


def sparse_work(nnz):
    return 2.0 * nnz
