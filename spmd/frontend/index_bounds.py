"""numpy's IndexError for traced indices. numpy raises at the line where an index falls
outside its axis; a traced index is known only when the program runs. So an index the
trace cannot bound within [-n, n) (an argument, a value computed from the data) gets a
check the program computes -- any element outside -- and jit raises numpy's IndexError
after the run, naming the user's line (core.error_at_run). Where the trace bounds the
index (np.argmax, k % n, np.clip, an iota, np.unique's inverse) there is no check and no
cost. Inside a loop body or a branch, which run many times or not at all, nothing can be
raised: there an index out of range clamps to the axis."""
from __future__ import annotations

from . import elementwise as ew


def check(k, n, axis):
    """Record numpy's IndexError for any element of the traced integer k outside [-n, n)."""
    ew.error_if_outside(k, -n, n, IndexError, f"an index is out of bounds for axis {axis} with size {n} "
                                              f"(a traced index, checked as the program ran)")
