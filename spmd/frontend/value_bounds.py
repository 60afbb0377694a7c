"""What a builder knows of an integer value's range beyond the ops that made it.

numpy's `k % n` by a positive n lies in 0..n-1 whatever k is; np.unique's inverse of n
groups holds 0 and n - 1. The trace records such facts (Trace.ranges), and the IR's
value-range rules (ir/ops/value_ranges.py) take them where they walk the ops that made a
value: a size numpy takes from the data is then known while tracing.
"""
from __future__ import annotations


def known(x, lo, hi, attained=False):
    """Record that every element of the traced integer x lies in [lo, hi] (its builder
    knows: numpy's % by a positive n is 0..n-1); `attained`: lo and hi are x's least and
    greatest elements (np.unique's inverse of n groups: 0 and n - 1)."""
    x._tr.ranges[id(x.value)] = (x.value, lo, hi, attained)
    return x
