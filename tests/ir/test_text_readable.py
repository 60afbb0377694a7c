"""The text for reading: as_text(source=True) puts each op's user line (and its code) in
a comment column; as_text(compact=True) folds index arithmetic into one line per use,
and every folded line means what the program computes: evaluated at each element on
each device, it gives the values the ops give."""
import inspect
import re

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd
from spmd.ir.text import name_values

GRID = spmd.Mesh((2, 2), ("x", "y"))


def heat_step(u):
    u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


HEAT_LINE = inspect.getsourcelines(heat_step)[1] + 1


def heat(n=16, mesh=GRID, spec=("x", "y")):
    block = mesh.sharding(*spec)
    return spmd.jit(heat_step, in_shardings=block, out_shardings=block).lower(spmd.ShapeDtype((n, n), "float64"))


def op_lines(text):
    return [ln for ln in text.splitlines()[1:] if ln.startswith("  %")]


def test_source_column_names_each_ops_line_and_shows_its_code():
    low = heat()
    text = low.as_text("partitioned", source=True)
    lines = op_lines(text)
    assert len(lines) == len(low.stages["partitioned"].ops)
    here = f"# test_text_readable.py:{HEAT_LINE}"
    assert all(here in ln and " loc(" not in ln for ln in lines)
    code = "u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])"
    assert lines[0].endswith(f"{here}  {code}")        # the first op of a run of one line shows the code
    assert sum(code in ln for ln in lines) == 1
    # one column: every comment starts at the same place unless its op line is longer
    starts = {ln.index("# ") for ln in lines if len(ln.split("  # ")[0].rstrip()) < 70}
    assert len(starts) == 1


def test_source_column_follows_the_user_lines_of_a_model():
    mesh = spmd.Mesh((2, 2), ("data", "model"))

    def mlp(w1, w2, x):
        h = np.maximum(x @ w1, 0)
        return h @ w2

    first = inspect.getsourcelines(mlp)[1]
    f = spmd.jit(mlp, in_shardings=(mesh.sharding(None, "model"), mesh.sharding("model", None),
                                    mesh.sharding("data", None)))
    low = f.lower(*(spmd.ShapeDtype(s, "float32") for s in ((8, 16), (16, 4), (6, 8))))
    g = low.stages["partitioned"]
    for op, ln in zip(g.ops, op_lines(low.as_text("partitioned", source=True))):
        assert ln.rstrip().split("# ")[1].split("  ")[0] == op.loc
    shown = [ln.split("  ", 2)[-1] for ln in op_lines(low.as_text("partitioned", source=True)) if ".py:" in ln]
    assert any(s.endswith("h = np.maximum(x @ w1, 0)") for s in shown)
    assert any(s.endswith("return h @ w2") for s in shown)
    assert {f"test_text_readable.py:{first + 1}", f"test_text_readable.py:{first + 2}"} >= {op.loc for op in g.ops}


def test_compact_text_is_a_fraction_of_the_full_one():
    low = heat()
    full = low.as_text("partitioned")
    compact = low.as_text("partitioned", compact=True)
    assert len(compact.splitlines()) * 3 < len(full.splitlines())
    # no op of index arithmetic is left on a line of its own
    assert not re.search(r"%\d+ = (axis_index|iota|broadcast_in_dim|compare|and)\(", compact)
    # each mask is one line: the ranges of the global index each device keeps
    masks = [ln for ln in op_lines(compact) if ": pred[" in ln]
    assert masks and all("<=" in ln and "axis_index(x)" in ln and "iota(0)" in ln for ln in masks)
    # the rest of the program is still there, op for op
    g = low.stages["partitioned"]
    for name in ("select", "collective_permute", "concatenate", "slice"):
        assert compact.count(f"= {name}(") == sum(op.name == name for op in g.ops), name


GRID_SIZES = {"x": 2, "y": 2}


def group_index(axes, coords):
    """A device's index in its group over `axes` (major to minor) on the 2x2 grid."""
    idx = 0
    for a in axes:
        idx = idx * GRID_SIZES[a] + coords[a]
    return idx


def _evaluate(graph, coords):
    """Every value of the per-device program on the device at `coords` (numpy refs)."""
    class Comm:
        def group_index(self, axes):
            return group_index(axes, coords)
    env = {}
    for op in graph.ops:
        d = op.opdef
        # collectives (and what reads them) are not index arithmetic: not needed here
        if d.collective.reshards is not None or d.collective.phase or d.subgraphs or not all(o in env for o in op.operands):
            continue
        comm = {"comm": Comm()} if d.needs_comm else {}
        env[op.result] = np.asarray(d.ref(*[env[o] for o in op.operands], **comm, **op.attrs))
    return env


def _check_folded_lines_mean_what_the_ops_compute(low):
    g = low.stages["partitioned"]
    names = {n: v for v, n in name_values(g).items()}
    rooted = [re.match(r"  (%\d+) = (.*) : (\w+)\[", ln) for ln in op_lines(low.as_text("partitioned", compact=True))]
    rooted = [(names[m.group(1)], m.group(2)) for m in rooted
              if m and not re.match(r"^[a-z_]+\(%", m.group(2)) and "%" not in m.group(2)]
    assert rooted
    for cx in range(2):
        for cy in range(2):
            env = _evaluate(g, {"x": cx, "y": cy})
            for v, expr in rooted:
                want = env[v]
                got = np.empty(want.shape, want.dtype)
                for idx in np.ndindex(*want.shape):
                    scope = {"iota": lambda d: idx[d], "axis_index": lambda *a: group_index(a, {"x": cx, "y": cy}),
                             "x": "x", "y": "y", "true": True, "false": False}
                    got[idx] = eval(expr, {}, scope)
                np.testing.assert_array_equal(got, want, err_msg=f"{expr} on device ({cx}, {cy})")


def test_folded_masks_mean_what_the_ops_compute():
    _check_folded_lines_mean_what_the_ops_compute(heat())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(5, 13), spec=st.sampled_from([("x", "y"), ("y", "x"), ("x", None), (None, ("x", "y"))]))
def test_folded_lines_mean_what_the_ops_compute_on_uneven_grids(n, spec):
    _check_folded_lines_mean_what_the_ops_compute(heat(n, spec=spec))


def test_compact_text_of_a_sum_over_an_uneven_split_dim():
    """Padding masked before a reduction: the mask is one readable line, and exact."""
    f = spmd.jit(lambda x: x.sum(axis=0), in_shardings=GRID.sharding(("x", "y"), None))
    low = f.lower(spmd.ShapeDtype((10, 3), "float32"))
    text = low.as_text("partitioned", compact=True)
    (mask,) = [ln for ln in op_lines(text) if ": pred[" in ln]
    assert "iota(0)" in mask and "axis_index(x,y)" in mask and "< 10" in mask
    _check_folded_lines_mean_what_the_ops_compute(low)
