"""How a value's readers read it: the positions of it one element of theirs uses."""
from __future__ import annotations

# re-indexings followed from a value to the ops that compute with it
_DEPTH = 4


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
            how = (u.name, repr(sorted(u.attrs.items())), u.operands.index(value))
            out |= {(how,) + p for p in _places(u.results[0], users, depth - 1) or {()}}
        else:
            out.add(())
    return out
