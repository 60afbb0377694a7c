"""spmd.visualize: which device holds which block of an array, as a text grid
(like jax.debug.visualize_array_sharding)."""
from __future__ import annotations

from ..errors import ShardingError


def layout(sharding, shape):
    """{(row_block, col_block): [devices]} and the block boundaries per dim, for a 1-d or
    2-d shape (a 1-d array is one row)."""
    if len(shape) > 2:
        raise ShardingError(f"visualize shows 1-d and 2-d arrays; got shape {list(shape)}")
    sh = sharding.for_rank(len(shape))
    shape2 = (1,) + tuple(shape) if len(shape) == 1 else tuple(shape) if shape else (1, 1)
    cells = {}
    for dev in sharding.mesh.devices.reshape(-1).tolist():
        box = sh.shard_box(tuple(shape), dev)
        if len(shape) == 1:
            box = ((0, 1),) + box
        elif not shape:
            box = ((0, 1), (0, 1))
        if any(a >= b for a, b in box) and all(n > 0 for n in shape2):
            continue     # an empty shard of an uneven split holds nothing
        cells.setdefault(box, []).append(dev)
    return cells, shape2


def visualize(x, shape=None, file=None) -> str:
    """Print (and return) the grid for an spmd.Array, or for a Sharding and a shape."""
    from ..ir.mesh import Sharding
    if isinstance(x, Sharding):
        if shape is None:
            raise ShardingError("visualize(sharding) needs shape=")
        sharding = x
    else:
        sharding, shape = x.sharding, x.shape if shape is None else shape
    shape = tuple(shape)
    cells, shape2 = layout(sharding, shape)
    rows = sorted({b[0] for b in cells})
    cols = sorted({b[1] for b in cells})
    text = {b: ",".join(map(str, sorted(d))) for b, d in cells.items()}
    width = {c: max([len(text.get((r, c), "")) for r in rows] + [len(_rng(c))]) + 2 for c in cols}
    out = [f"{_shape_str(shape)} {sharding.text()}  (cells: devices; header: column range)"]
    label_w = max(len(_rng(r)) for r in rows) + 1 if len(shape) == 2 else 0
    out.append(" " * label_w + " " + " ".join(_rng(c).center(width[c]) for c in cols))
    sep = " " * label_w + "+" + "+".join("-" * width[c] for c in cols) + "+"
    out.append(sep)
    for r in rows:
        label = _rng(r).rjust(label_w - 1) + " " if len(shape) == 2 else ""
        out.append(label + "|" + "|".join(text.get((r, c), "").center(width[c]) for c in cols) + "|")
        out.append(sep)
    s = "\n".join(out)
    print(s, file=file)
    return s


def _rng(box):
    a, b = box
    return f"{a}:{b}"


def _shape_str(shape):
    return "[" + ",".join(map(str, shape)) + "]"
