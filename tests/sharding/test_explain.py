"""explain lists exactly the collectives of the per-device program, with their lines."""
import io
import inspect

import numpy as np

import spmd

MESH = spmd.Mesh((2, 2), ("data", "model"))


def fwd(p, x):
    h = np.maximum(x @ p["w1"], 0)
    return h @ p["w2"]          # contracts the split hidden dim: one all_reduce over model


LINE = inspect.getsourcelines(fwd)[1] + 2


def test_explain_lists_exactly_the_collectives():
    p = {"w1": np.ones((8, 16), np.float32), "w2": np.ones((16, 4), np.float32)}
    x = np.ones((6, 8), np.float32)
    f = spmd.jit(fwd, in_shardings=({"w1": MESH.sharding(None, "model"), "w2": MESH.sharding("model", None)},
                                    MESH.sharding("data", None)))
    out = io.StringIO()
    text = f.lower(p, x).explain(file=out)
    table = text.split("shardings:")[0]
    rows = [ln for ln in table.splitlines()[2:] if ln.strip()]
    assert len(rows) == 1
    assert "all_reduce" in rows[0] and "model" in rows[0] and f"test_explain.py:{LINE}" in rows[0]
    assert "48" in rows[0]                      # 3x4 float32 per device
    assert text.startswith("collectives (1, 48 bytes per device)")
    # provenance: the hidden activation's split came from the annotations through the dot
    hidden = [ln for ln in text.splitlines() if "f32[6,16]" in ln and "dot_general" in ln]
    assert hidden and "in_shardings" in hidden[0]
    assert text == spmd.explain(fwd, p, x, in_shardings=({"w1": MESH.sharding(None, "model"),
                                                          "w2": MESH.sharding("model", None)},
                                                         MESH.sharding("data", None)))


def test_no_collectives_for_pure_data_parallel_forward():
    f = spmd.jit(lambda x: np.tanh(x) * 2, in_shardings=MESH.sharding("data", None))
    text = f.lower(np.ones((8, 4), np.float32)).explain(file=io.StringIO())
    assert text.startswith("collectives (0, 0 bytes per device)")
