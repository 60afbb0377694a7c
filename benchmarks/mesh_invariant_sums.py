"""What the same bits on any mesh would cost: sums whose order does not depend on the split.

Today a sum split over G devices adds each device's part (in the order of the local
kernel, or BLAS's for a contraction), then the G parts in group order; on another mesh
the parts differ, so the last bits do. An order independent of the split: the summed
dim is cut into fixed blocks of B elements (B divides every shard: a power of two, with
the dim padded to a multiple of B x the largest mesh), each block summed alone, then the
block sums added pairwise as a balanced tree (a device holds whole subtrees when G is a
power of two, and the all_reduce adds the device sums as the top of the same tree
instead of in group order). Both halves are measured here on one device, against the
plain sum, in the same process, runs interleaved, medians:

- reduce: np.sum of N float32 vs the blocked tree sum of the same values;
- contraction: (M, K) @ (K, N) float32 by one BLAS call vs K/B calls of K=B (a BLAS
  call blocks K itself, differently by thread count) and a tree of M x N additions.

    python benchmarks/mesh_invariant_sums.py [--runs 7] [--block 4096] [--kblock 256]

The blocked results equal each other's bits for every split of the blocks over 1, 2, 4
devices (checked here on simulated splits); the plain ones do not.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved  # noqa: E402


def tree(parts):
    """Pairwise sum of a power-of-two list of equal arrays, as a balanced tree."""
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] for i in range(0, len(parts), 2)]
    return parts[0]


def blocked_sum(x, block):
    """Sum of a flat x: blocks of `block` summed alone, then the tree of block sums."""
    sums = x.reshape(-1, block).sum(axis=1)        # each block's own (pairwise) sum
    while sums.size > 1:
        sums = sums[0::2] + sums[1::2]
    return sums[0]


def split_sum(x, block, G):
    """The same on G devices: each sums its blocks as the subtree it holds, the device sums
    are added as the top of the tree."""
    return tree([np.asarray(blocked_sum(p, block)) for p in np.split(x, G)])


def blocked_dot(a, b, kb):
    K = a.shape[1]
    return tree([a[:, k:k + kb] @ b[k:k + kb] for k in range(0, K, kb)])


def split_dot(a, b, kb, G):
    K = a.shape[1]
    c = K // G
    return tree([blocked_dot(a[:, g * c:(g + 1) * c], b[g * c:(g + 1) * c], kb) for g in range(G)])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--kblock", type=int, default=256)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'case':40s} {'plain ms':>9s} {'blocked ms':>11s} {'ratio':>6s}  same bits on 1/2/4 devices: "
          f"plain, blocked")
    for n in (1 << 20, 1 << 24):
        x = rng.standard_normal(n).astype(np.float32)
        plain = [np.asarray(sum(np.sum(p) for p in np.split(x, G)), np.float32) for G in (1, 2, 4)]
        blocked = [split_sum(x, args.block, G) for G in (1, 2, 4)]
        t_plain, t_blocked = interleaved([lambda: np.sum(x), lambda: blocked_sum(x, args.block)], args.runs)
        print(f"{'sum of %d float32' % n:40s} {t_plain:9.2f} {t_blocked:11.2f} {t_blocked / t_plain:6.2f}  "
              f"{len({p.tobytes() for p in plain}) == 1}, {len({b.tobytes() for b in blocked}) == 1}")
    for m, k, n in ((256, 4096, 256), (1024, 1024, 1024), (64, 16384, 64)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        plain = [tree([a[:, g * (k // G):(g + 1) * (k // G)] @ b[g * (k // G):(g + 1) * (k // G)]
                       for g in range(G)]) for G in (1, 2, 4)]
        blocked = [split_dot(a, b, args.kblock, G) for G in (1, 2, 4)]
        t_plain, t_blocked = interleaved([lambda: a @ b, lambda: blocked_dot(a, b, args.kblock)], args.runs)
        print(f"{'(%d, %d) @ (%d, %d) float32' % (m, k, k, n):40s} {t_plain:9.2f} {t_blocked:11.2f} "
              f"{t_blocked / t_plain:6.2f}  {len({p.tobytes() for p in plain}) == 1}, "
              f"{len({b.tobytes() for b in blocked}) == 1}")


if __name__ == "__main__":
    main()
