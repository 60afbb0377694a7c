"""explain lists exactly the collectives of the per-device program, with their lines, in
one line each, and the annotations, in one line each; each collective names the
annotation whose split it moves, and changing that annotation removes it."""
import inspect
import io
import os
import sys

import numpy as np
import pytest

import spmd
from spmd.sharding.explain import collective_rows
from paths import ROOT

MESH = spmd.Mesh((2, 2), ("data", "model"))
GRID = spmd.Mesh((2, 2), ("x", "y"))


def fwd(p, x):
    h = np.maximum(x @ p["w1"], 0)
    return h @ p["w2"]          # contracts the split hidden dim: one all_reduce over model


LINE = inspect.getsourcelines(fwd)[1] + 2


def step(params, x, y):         # README.md's example
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    l, g = spmd.value_and_grad(loss)(params)
    return l, {k: params[k] - 0.1 * g[k] for k in params}


def readme_args():
    f32 = lambda *s: spmd.ShapeDtype(s, "float32")  # noqa: E731
    return {"w1": f32(16, 32), "w2": f32(32, 4)}, f32(8, 16), f32(8, 4)


def readme_shardings(w1=(None, "model"), w2=("model", None), x=("data", None), y=("data", None)):
    return ({"w1": MESH.sharding(*w1), "w2": MESH.sharding(*w2)}, MESH.sharding(*x), MESH.sharding(*y))


def heat_step(u):
    u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


def heat_lowered(spec=("x", "y")):
    block = GRID.sharding(*spec)
    return spmd.jit(heat_step, in_shardings=block, out_shardings=block).lower(spmd.ShapeDtype((16, 16), "float64"))


def body_lines(text):
    """The rows under the collectives and annotations headers (not the headers)."""
    out, section = {"collectives": [], "annotations": []}, None
    for ln in text.splitlines():
        if not ln.startswith(" "):
            section = ln.split(" ")[0] if ln.split(" ")[0] in out else None
        elif section is not None and not ln.strip().startswith(("op ", "op  ")):
            out[section].append(ln)
    return out


def test_explain_lists_exactly_the_collectives():
    p = {"w1": np.ones((8, 16), np.float32), "w2": np.ones((16, 4), np.float32)}
    x = np.ones((6, 8), np.float32)
    shardings = ({"w1": MESH.sharding(None, "model"), "w2": MESH.sharding("model", None)}, MESH.sharding("data", None))
    f = spmd.jit(fwd, in_shardings=shardings)
    text = f.lower(p, x).explain(file=io.StringIO())
    rows = body_lines(text)["collectives"]
    assert len(rows) == 1
    assert "all_reduce" in rows[0] and "model" in rows[0] and f"test_explain.py:{LINE}" in rows[0]
    assert " 48 " in rows[0]                    # 3x4 float32 per device
    assert text.startswith("collectives (1, 48 bytes per device)")
    # the pending sum comes from the two weights' splits of the hidden dim
    assert "in_shardings for p['w1']: dim 1 over model" in rows[0]
    assert "in_shardings for p['w2']: dim 0 over model" in rows[0]
    out = io.StringIO()
    assert text == spmd.explain(fwd, p, x, in_shardings=shardings, file=out) == out.getvalue().rstrip("\n")


def test_no_collectives_for_pure_data_parallel_forward():
    def f(x):
        return np.tanh(x) * 2
    f = spmd.jit(f, in_shardings=MESH.sharding("data", None))
    text = f.lower(np.ones((8, 4), np.float32)).explain(file=io.StringIO())
    assert text.startswith("collectives (0, 0 bytes per device)")
    (note,) = body_lines(text)["annotations"]
    assert note.split() == ["in_shardings", "for", "x", "f32[8,4]", "{data,", "_}"]


@pytest.mark.parametrize("program", ["readme", "heat"])
def test_short_explain_is_a_line_per_collective_and_per_annotation(program):
    if program == "readme":
        low = spmd.jit(step, in_shardings=readme_shardings()).lower(*readme_args())
        want_notes = 4
    else:
        low = heat_lowered()
        want_notes = 2                          # in_shardings for u, out_shardings[0]
    text = low.explain(file=io.StringIO())
    colls = low.report()["collectives"]
    parts = body_lines(text)
    assert len(parts["collectives"]) == len(colls) > 0
    assert len(parts["annotations"]) == want_notes
    # two headers, the table's column names, the memory line, nothing else
    assert len(text.splitlines()) == len(colls) + want_notes + 4
    for row, c in zip(parts["collectives"], colls):
        assert row.split()[0] == c["op"] and c["loc"] in row and f" {c['bytes']} " in row
    assert "shardings:" not in text and "via" not in text
    verbose = low.explain(file=io.StringIO(), verbose=True)
    assert verbose.startswith(text) and "shardings:" in verbose


def test_verbose_chains_say_a_run_of_one_op_once():
    text = heat_lowered().explain(file=io.StringIO(), verbose=True)
    chains = [part.split(" via ")[1] for ln in text.splitlines() for part in ln.split("; ") if " via " in part]
    assert chains and any(" x3 (test_explain.py:" in c for c in chains), chains
    for c in chains:
        hops = c.split(" -> ")
        assert all(a != b for a, b in zip(hops, hops[1:])), c


def _without(spec, axes):
    return tuple(None if a is None else (tuple(x for x in ((a,) if isinstance(a, str) else a) if x not in axes)
                                        or None) for a in spec)


def test_changing_the_named_annotation_removes_the_collective():
    """For each collective of the README example, dropping its axes from the annotations
    explain names leaves no collective over those axes at that line."""
    base = {"w1": (None, "model"), "w2": ("model", None), "x": ("data", None), "y": ("data", None)}
    label = {"in_shardings for params['w1']": "w1", "in_shardings for params['w2']": "w2",
             "in_shardings for x": "x", "in_shardings for y": "y"}
    low = spmd.jit(step, in_shardings=readme_shardings()).lower(*readme_args())
    for r in collective_rows(low.stages):
        assert r["comes_from"], r
        spec = dict(base)
        for name, d, axes in r["comes_from"]:
            spec[label[name]] = _without(spec[label[name]], axes)
        again = spmd.jit(step, in_shardings=readme_shardings(**spec)).lower(*readme_args())
        left = [c for c in again.report()["collectives"] if c["loc"] == r["loc"] and set(c["axes"]) & set(r["axes"])]
        assert not left, (r, spec, left)


def test_changing_the_named_annotation_removes_the_halo():
    for r in collective_rows(heat_lowered().stages):
        assert [(n, d) for n, d, _ in r["comes_from"]][0] == ("in_shardings for u", 0 if r["axes"] == ("x",) else 1)
        spec = _without(("x", "y"), r["axes"])
        # the grid split one way only: the other axis's halos are gone (only the out_sharding's local slice)
        left = [c for c in heat_lowered(spec).report()["collectives"] if set(c["axes"]) & set(r["axes"])]
        assert not left, (r, left)


def test_the_explained_heat_example_is_short():
    """examples/heat2d.py, one step on 2x2: a line per collective and per annotation."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        from heat2d import diffuse
    finally:
        sys.path.pop(0)
    block = GRID.sharding("x", "y")
    f = spmd.jit(lambda u: diffuse(u, 1), in_shardings=block, out_shardings=block)
    text = spmd.explain(f, spmd.ShapeDtype((16, 16), "float64"), file=io.StringIO())
    n = len(f.lower(spmd.ShapeDtype((16, 16), "float64")).report()["collectives"])
    assert len(text.splitlines()) == n + 2 + 4           # and the memory line
    assert all("in_shardings for u: dim" in ln for ln in body_lines(text)["collectives"])
