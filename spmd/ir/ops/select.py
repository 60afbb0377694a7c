"""Order statistics along the last axis (what median, percentile and quantile pick), and
the per-device steps that find them along a split axis without gathering it.

`order_statistic(x, ranks)`: for each row of x (the last axis), the elements at the given
sorted positions, NaN sorting last (numpy's order): result[..., j] = sort(x)[..., ranks[..., j]],
ranks clipped to the axis. The selected axis is a reduction factor: a split passes into
it, and its partition rule (sharding/partition_rules/select.py) finds the elements by a
distributed selection; the rows (every other dim) pass through.

`select_step(*operands, stage=...)` is that selection's local work on one device, one
op whose `stage` names the step (`SELECT_STAGES`); it exists only in per-device
programs. The state of a search, one row of float64 per (row, rank) of x:
[lo, hi, rank left, found, value]: the element sought is the `rank left`-th (from 0)
of the device group's non-NaN elements strictly between lo and hi (NaN: no bound), or,
once `found`, `value`. Counts ride in float64: exact below 2**53 elements.
"""
import numpy as np
# numpy's selection (introselect: each kth element in its sorted place, NaN last), under a
# name that says so (the IR holds no partition *handlers*: tests/test_layers.py)
from numpy import partition as nth_elements

from ..factors import einsum_rule, letters
from .elementwise import NUM, aval
from .names import BROADCAST_IN_DIM, COMPARE, CONSTANT, CONVERT, DIVIDE, MAXIMUM, MULTIPLY, REDUCE
from .registry import OpDef, check, register

LO, HI, LEFT, FOUND, VALUE = range(5)
STATE = 5


# ---------------------------------------------------------------------------- the global op
def _infer(x, ranks):
    check(len(x.shape) >= 1, "order_statistic: x needs an axis to select along")
    check(ranks.dtype == "int64", f"order_statistic: ranks must be int64, got {ranks.dtype}")
    check(tuple(ranks.shape[:-1]) == tuple(x.shape[:-1]) and len(ranks.shape) == len(x.shape),
          f"order_statistic: ranks {list(ranks.shape)} must have x's rows {list(x.shape[:-1])} and one last dim")
    return aval(ranks.shape, x.dtype)


def order_statistic_ref(x, ranks):
    n = x.shape[-1]
    if x.size == 0 or ranks.size == 0:
        # an empty axis has no element to pick: NaN (zero for a dtype without NaN)
        return np.full(ranks.shape, np.nan if x.dtype.kind in "fc" else 0, x.dtype)
    r = np.clip(ranks, 0, n - 1)
    kth = np.unique(r)
    x = np.ascontiguousarray(x)        # rows in memory order (x is often a transpose's view)
    part = nth_elements(x, kth, axis=-1) if len(kth) < 64 else np.sort(x, axis=-1)
    return np.take_along_axis(part, r, axis=-1)


def _factors(ins, outs, attrs):
    b = letters(len(ins[0].shape) - 1)
    return einsum_rule(f"{b}n,{b}r->{b}r", ins, outs, reduction="n", replicate="r")


def _flops(ins, out, attrs):
    return int(np.prod(ins[0].shape, dtype=np.int64)) * 4


def _vjp(g, op, ct):
    """The cotangent of each picked element goes to the elements equal to it, shared
    evenly among ties (a subgradient; without ties, the picked element alone)."""
    x, ranks = op.operands
    v = op.result
    nd, n, r = x.ndim, x.shape[-1], v.shape[-1]
    shape = tuple(x.shape[:-1]) + (r, n)
    xb = g.emit(BROADCAST_IN_DIM, x, shape=shape, broadcast_dimensions=tuple(range(nd - 1)) + (nd,))
    vb = g.emit(BROADCAST_IN_DIM, v, shape=shape, broadcast_dimensions=tuple(range(nd)))
    hit = g.emit(CONVERT, g.emit(COMPARE, xb, vb, direction="EQ"), dtype=x.dtype)
    count = g.emit(REDUCE, hit, kind="sum", axes=(nd,))
    one = g.emit(BROADCAST_IN_DIM, g.emit(CONSTANT, value=np.array(1, x.dtype)), shape=count.shape,
                 broadcast_dimensions=())
    share = g.emit(DIVIDE, ct, g.emit(MAXIMUM, count, one))
    sb = g.emit(BROADCAST_IN_DIM, share, shape=shape, broadcast_dimensions=tuple(range(nd)))
    return g.emit(REDUCE, g.emit(MULTIPLY, hit, sb), kind="sum", axes=(nd - 1,)), None


register(OpDef("order_statistic", family="select", infer=_infer, ref=order_statistic_ref, vjp=_vjp, factors=_factors,
               flops=_flops, dtypes=NUM, lowering="sorting"))


# ---------------------------------------------------------------------------- the local steps
def _between(row, lo, hi):
    """The elements of a 1-d row strictly between lo and hi (NaN: no bound), NaN never."""
    if np.isnan(lo) and np.isnan(hi):
        nan = np.isnan(row)
        return row[~nan] if nan.any() else row      # (read only: no copy when there is no NaN)
    if np.isnan(lo):
        return row[row < hi]              # (NaN compares False: never kept)
    if np.isnan(hi):
        return row[row > lo]
    return row[(row > lo) & (row < hi)]


def _bracketed(x, st, kept=None):
    """Per (row, search) of the state, for the searches not yet found: (its index, the
    local elements of that row in its bracket as a 1-d array, whether they are sorted).
    From `kept` (the "keep" stage's sorted copy of an earlier, wider bracket) where it
    holds the search's elements, else from x. x's row is read once for all its searches
    (a median's two have about the same bracket): through the union of their brackets,
    then each search's own from that."""
    out = []
    for i in np.ndindex(st.shape[:-2]):
        s = st[i]
        live = [j for j in range(s.shape[0]) if not s[j, FOUND]]
        if kept is not None:
            for j in [j for j in live if kept[i + (j, 0)] >= 0]:
                k = kept[i + (j,)]
                e = k[1:1 + int(k[0])]
                a = 0 if np.isnan(s[j, LO]) else np.searchsorted(e, s[j, LO], "right")
                b = len(e) if np.isnan(s[j, HI]) else np.searchsorted(e, s[j, HI], "left")
                out.append((i + (j,), e[a:b], True))
                live.remove(j)
        if not live:
            continue
        los, his = s[live, LO], s[live, HI]
        lo = np.nan if np.isnan(los).any() else los.min()
        hi = np.nan if np.isnan(his).any() else his.max()
        e = _between(x[i], lo, hi)
        for j in live:
            same = np.array_equal(s[j, [LO, HI]], [lo, hi], equal_nan=True)
            out.append((i + (j,), e if same else _between(e, s[j, LO], s[j, HI]), False))
    return out


def _keep(x, st, cap):
    """Per search: [n, its n bracketed local elements sorted, NaN...] (cap + 1 places),
    or [-1, NaN...] when they are more than cap: later rounds read this, not x."""
    out = np.full(st.shape[:-1] + (cap + 1,), np.nan, x.dtype)
    out[..., 0] = 0
    done = {}           # the elements' id -> them sorted (searches sharing a bracket)
    for i, e, _ in _bracketed(x, st):
        if len(e) > cap:
            out[i + (0,)] = -1
        else:
            if id(e) not in done:
                done[id(e)] = np.sort(e)
            out[i + (0,)] = len(e)
            out[i][1:1 + len(e)] = done[id(e)]
    return out


def _nvalid(x):
    """(...,) float64: the non-NaN elements of each row."""
    return (~np.isnan(x)).sum(axis=-1).astype(np.float64)


def _init(ranks, nvalid, n):
    """The searches' first state: the whole row; a rank past the non-NaN elements is NaN."""
    st = np.full(ranks.shape + (STATE,), np.nan)
    r = np.clip(ranks, 0, max(n - 1, 0)).astype(np.float64)
    st[..., LEFT] = r
    past = r >= nvalid[..., None]
    st[..., FOUND] = past
    st[..., VALUE] = np.where(past, np.nan, 0.0)
    return st


def _stride_sample(x, size):
    """Every k-th element of each row, about `size` of them: (..., size)."""
    m = x.shape[-1]
    step = max(1, -(-m // size))
    s = x[..., ::step]
    if s.shape[-1] < size:
        s = np.concatenate([s, np.full(s.shape[:-1] + (size - s.shape[-1],), np.nan, x.dtype)], axis=-1)
    return s


def _guess(st, sample, nvalid, spread):
    """Two candidates around each search's target from a sorted sample of its row (NaN
    last) drawn from the whole group: the sample's elements some places either side
    of where the target's share of the row falls, `spread` standard deviations of that
    place (a binomial's) and two more. Only a guess: the counts that follow are exact
    whatever it is."""
    s = np.sort(sample, axis=-1)
    k = (~np.isnan(s)).sum(axis=-1)                          # (...,) valid sample elements
    out = np.full(st.shape[:-1] + (2,), np.nan, sample.dtype)
    for i in np.ndindex(st.shape[:-1]):
        row, kk = s[i[:-1]], k[i[:-1]]
        if st[i][FOUND] or kk == 0:
            continue
        pos = (st[i][LEFT] + 0.5) / max(nvalid[i[:-1]], 1.0) * kk      # the target's place in the sample
        p = min(max(pos / kk, 0.0), 1.0)
        margin = spread * np.sqrt(kk * p * (1 - p)) + 2
        a, b = int(np.floor(pos - margin)), int(np.ceil(pos + margin))
        if a >= 0:
            out[i + (0,)] = row[a]
        if b < kk:
            out[i + (1,)] = row[b]
    return np.sort(out, axis=-1)         # NaN (no bound on that side) last


def _quantiles(st, x, kept, count):
    """Per search: `count` of the bracketed local elements at evenly spaced sorted places
    (the first and last among them), NaN where the bracket holds none."""
    out = np.full(st.shape[:-1] + (count,), np.nan, x.dtype)
    for i, e, ordered in _bracketed(x, st, kept):
        if len(e):
            kth = (np.arange(count) * (len(e) - 1)) // (count - 1)
            if not ordered:
                e = nth_elements(e, np.unique(kth)) if count <= 32 else np.sort(e)
            out[i] = e[kth]
    return out


def _counts(x, st, cands, kept):
    """Per search and sorted candidate (NaN last): how many bracketed local elements are
    below it and how many at most it: (..., r, 2, c). A NaN candidate counts them all."""
    c = cands.shape[-1]
    out = np.zeros(st.shape[:-1] + (2, c))
    seen = {}           # (the elements' id, candidate) -> (lt, le): searches sharing a bracket share counts
    for i, e, ordered in _bracketed(x, st, kept):
        cs = cands[i]
        ok = ~np.isnan(cs)
        if c <= 8 and not ordered:          # a few candidates: compare (a pass each) rather than sort
            for v in cs[ok]:
                if (id(e), v) not in seen:
                    below = np.count_nonzero(e < v)
                    seen[(id(e), v)] = (below, below + np.count_nonzero(e == v))
            lt = [seen[(id(e), v)][0] if k else 0 for v, k in zip(cs, ok)]
            le = [seen[(id(e), v)][1] if k else 0 for v, k in zip(cs, ok)]
        else:
            e = e if ordered else np.sort(e)
            lt, le = np.searchsorted(e, cs, "left"), np.searchsorted(e, cs, "right")
        out[i + (0,)] = np.where(ok, lt, len(e))
        out[i + (1,)] = np.where(ok, le, len(e))
    return out


def _narrow(st, cands, counts):
    """The searches' state once the group's counts below and at each candidate are known:
    the target is a candidate (found), or strictly between two neighbouring ones."""
    st = st.copy()
    for i in np.ndindex(st.shape[:-1]):
        s = st[i]
        if s[FOUND]:
            continue
        cs, lt, le = cands[i], counts[i][0], counts[i][1]
        k = s[LEFT]
        j = int(np.searchsorted(le, k, "right"))             # candidates with le <= k
        if j < len(cs) and not np.isnan(cs[j]) and lt[j] <= k:
            s[FOUND], s[VALUE] = 1, cs[j]
            continue
        if j > 0:
            s[LO], s[LEFT] = cs[j - 1], k - le[j - 1]
        if j < len(cs) and not np.isnan(cs[j]):
            s[HI] = cs[j]
    return st


def _gather_bracket(x, st, kept, cap):
    """Per search: the bracketed local elements, NaN after them, `cap` places."""
    out = np.full(st.shape[:-1] + (cap,), np.nan, x.dtype)
    for i, e, _ in _bracketed(x, st, kept):
        if len(e) > cap:
            raise AssertionError(f"select_step: {len(e)} elements in a bracket bounded by {cap}")
        out[i][:len(e)] = e
    return out


def _finish(st, pool):
    """The element each search sought: its value once found, else the `rank left`-th of
    the group's bracketed elements (pool, NaN last)."""
    s = np.sort(pool, axis=-1)
    k = np.clip(np.nan_to_num(st[..., LEFT]), 0, max(s.shape[-1] - 1, 0)).astype(np.int64)
    picked = np.take_along_axis(s, k[..., None], axis=-1)[..., 0]
    return np.where(st[..., FOUND] != 0, st[..., VALUE].astype(pool.dtype), picked)


# stage -> (infer(*avals, **attrs) -> Aval, ref(*arrays, **attrs) -> array)
SELECT_STAGES = {
    # x (..., m) -> the same, each row contiguous in memory (the later stages read rows)
    "rows": (lambda x: aval(x.shape, x.dtype), lambda x: np.array(x, order="C")),
    # x (..., m) -> (...,) float64: the non-NaN elements of each local row
    "nvalid": (lambda x: aval(x.shape[:-1], "float64"), lambda x: _nvalid(x)),
    # ranks (..., r) int64, nvalid (...,) float64 (the group's) -> state (..., r, 5)
    "init": (lambda ranks, nv, n: aval(tuple(ranks.shape) + (STATE,), "float64"),
             lambda ranks, nv, n: _init(ranks, nv, n)),
    # x (..., m) -> (..., size): a regular sample of each local row
    "sample": (lambda x, size: aval(tuple(x.shape[:-1]) + (size,), x.dtype),
               lambda x, size: _stride_sample(x, size)),
    # state, the group's sample (..., s), its non-NaN count per row (...,) -> (..., r, 2)
    # candidates around each target
    "guess": (lambda st, sample, nv, spread: aval(tuple(st.shape[:-1]) + (2,), sample.dtype),
              lambda st, sample, nv, spread: _guess(st, sample, nv, spread)),
    # x, state -> (..., r, cap + 1): each search's bracketed local elements, sorted, if
    # they are at most cap (the later stages' `kept`)
    "keep": (lambda x, st, cap: aval(tuple(st.shape[:-1]) + (cap + 1,), x.dtype),
             lambda x, st, cap: _keep(x, st, cap)),
    # state, x (..., m), kept -> (..., r, count): bracketed local elements at even sorted places
    "quantiles": (lambda st, x, kept, count: aval(tuple(st.shape[:-1]) + (count,), x.dtype),
                  lambda st, x, kept, count: _quantiles(st, x, kept, count)),
    # x, state, sorted candidates (..., r, c)[, kept] -> (..., r, 2, c) float64 local counts
    "counts": (lambda x, st, cands, kept=None: aval(tuple(cands.shape[:-1]) + (2, cands.shape[-1]), "float64"),
               lambda x, st, cands, kept=None: _counts(x, st, cands, kept)),
    # state, sorted candidates, the group's counts -> state
    "narrow": (lambda st, cands, counts: aval(st.shape, "float64"),
               lambda st, cands, counts: _narrow(st, cands, counts)),
    # x, state, kept -> (..., r, cap): the bracketed local elements, NaN padded
    "bracket": (lambda x, st, kept, cap: aval(tuple(st.shape[:-1]) + (cap,), x.dtype),
                lambda x, st, kept, cap: _gather_bracket(x, st, kept, cap)),
    # state, the group's bracketed elements (..., r, c) -> (..., r) the elements sought
    "finish": (lambda st, pool: aval(st.shape[:-1], pool.dtype), lambda st, pool: _finish(st, pool)),
}


def _step_infer(*avals, stage, **attrs):
    check(stage in SELECT_STAGES, f"select_step: unknown stage {stage!r}")
    return SELECT_STAGES[stage][0](*avals, **attrs)


def _step_ref(*arrays, stage, **attrs):
    return SELECT_STAGES[stage][1](*arrays, **attrs)


register(OpDef("select_step", family="select", infer=_step_infer, ref=_step_ref, flops=_flops, dtypes=NUM,
               lowering="sorting"))
