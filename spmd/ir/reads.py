"""How a value's readers read it: the positions of it one element of theirs uses."""
from __future__ import annotations

# re-indexings followed from a value to the ops that compute with it
_DEPTH = 4
# the ops a kernel may compute again, at the places it reads a value, rather than have
# the value stored and read back (a float64 grid's 16 bytes an element, from memory where
# it is large). Measured on one device, 1024^2 and 96^3 grids, 5 steps: a 5-point Jacobi
# sweep fused into the next (24 ops again) runs 0.65 ms a step, stored 0.8; a 9-point
# sweep (64) and a 3-D heat sweep (63) 1.33 fused, 0.8 stored
RECOMPUTE_LIMIT = 32
# ops of a value's making counted, at most
_CONE = 16


def recomputed_ops(value, users, cheap=frozenset()) -> int:
    """The ops a kernel that read `value` at its every place (places_read) would compute
    again, were `value` fused into it: the places after the first, times the elementwise
    ops that make `value` from what is in memory (its producers, through re-indexings;
    `cheap`, positional ops, are not counted: decided per region), at most _CONE."""
    places = places_read(value, users)
    return 0 if places <= 1 else (places - 1) * _making_ops(value, cheap)


def _making_ops(value, cheap) -> int:
    seen, stack, n = set(), [value.producer], 0
    while stack and len(seen) < _CONE:
        op = stack.pop()
        if op is None or op in seen or op in cheap or op.opdef.fusion not in ("elementwise", "reindex"):
            continue
        seen.add(op)
        n += op.opdef.fusion == "elementwise"
        stack.extend(o.producer for o in op.operands)
    return n


def places_read(value, users) -> int:
    """How many different positions of `value` its readers use for one element they
    compute, following re-indexings (slices, pads, broadcasts: copied into the kernels
    that read them). 1 where every reader reads it at the element it computes (elementwise
    ops, reductions) or through one same re-indexing; a stencil's sweep reads the grid
    the last sweep made at 5 or 7 shifted places. A view of less than half of it (a
    boundary row copied to the next: `p[:, -1] = p[:, -2]`) is not a place: what its
    readers compute again there is a row's work. `users`: {Value: the ops reading it}.
    Fused into such readers, a computed value is computed again at each place."""
    return len(_places(value, users, _DEPTH))


def _places(value, users, depth) -> set:
    out = set()
    for u in users.get(value, ()):
        if u.opdef.fusion == "reindex" and len(u.results) == 1 and depth > 0:
            if 2 * u.results[0].size < value.size:
                continue
            hop = _hop(u, value)
            out |= {(hop,) * (hop is not None) + p for p in _places(u.results[0], users, depth - 1) or {()}}
        else:
            out.add(())
    return out


def _hop(op, value):
    """Where re-indexing `op` reads `value` for an element it makes: None where its
    affine index map shifts nothing (a broadcast: a row's maximum, read for each element
    of the row, is read once a row; a reshape; a transpose); else the offsets and
    coefficients of that map (a shifted slice, a reversal), or the op and its attributes
    where it has no such map (a pad, a concatenation)."""
    reindex = op.opdef.reindex
    if reindex.index_map is None and reindex.index_pieces is None and op.results[0].size == value.size:
        return None                       # (a reshape: the same elements, in their order)
    if reindex.index_map is not None and op.operands and op.operands[0] is value:
        names = tuple(f"d{k}" for k in range(op.results[0].ndim))
        index = reindex.index_map(tuple((((n, 1),), 0) for n in names), value.shape, op.attrs)
        key = tuple((tuple(c for _, c in terms), repr(const)) for terms, const in index)
        return None if all(const == "0" for _, const in key) else key
    return op.name, repr(sorted(op.attrs.items())), op.operands.index(value)
