"""spmd.AUTO under memory_limit: a plan it returns compiles to a program whose planned
peak per device (lowered.memory(): the compiled program's, as its native schedule holds
it) is within the limit, or MemoryLimitError says it cannot fit. Over random small
training steps and chains of matmuls, meshes and limits."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import spmd

pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")

MESHES = [spmd.Mesh((2,), ("x",)), spmd.Mesh((4,), ("x",)), spmd.Mesh((2, 2), ("data", "model"))]
# given, so that the plans do not depend on the rates this machine stored
NET = spmd.Network(within=spmd.Link(latency=1.5e-4, bandwidth=2e9))


def adam_step(p, opt, x, y):
    def loss(p):
        h = np.tanh(x @ p["w1"])
        return np.mean((h @ p["w2"] - y) ** 2)
    lv, g = spmd.value_and_grad(loss)(p)
    m = {k: 0.9 * opt["m"][k] + 0.1 * g[k] for k in p}
    v = {k: 0.99 * opt["v"][k] + 0.01 * g[k] ** 2 for k in p}
    new = {k: p[k] - 1e-3 * m[k] / (np.sqrt(v[k]) + 1e-8) for k in p}
    return lv, new, {"m": m, "v": v}


def chain(x, w1, w2, w3):
    return np.tanh(np.tanh(x @ w1) @ w2) @ w3


def _args(kind, batch, d, h, seed):
    rng = np.random.default_rng(seed)
    if kind == "adam":
        p = {"w1": rng.standard_normal((d, h)).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((h, d)).astype(np.float32) * 0.1}
        opt = {"m": {k: np.zeros_like(w) for k, w in p.items()}, "v": {k: np.zeros_like(w) for k, w in p.items()}}
        return adam_step, (p, opt, rng.standard_normal((batch, d)).astype(np.float32),
                           rng.standard_normal((batch, d)).astype(np.float32))
    ws = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in ((d, h), (h, h), (h, d))]
    return chain, (rng.standard_normal((batch, d)).astype(np.float32), *ws)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["adam", "chain"]), mesh=st.sampled_from(MESHES), batch=st.sampled_from([8, 16, 32]),
       d=st.sampled_from([16, 32, 64]), h=st.sampled_from([32, 64, 128]), share=st.floats(0.3, 1.0),
       seed=st.integers(0, 3))
def test_a_plan_under_memory_limit_compiles_within_it(kind, mesh, batch, d, h, share, seed):
    fn, args = _args(kind, batch, d, h, seed)
    free = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO, network=NET).lower(*args)
    limit = int(share * free.memory()["peak_bytes"])
    try:
        low = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO, memory_limit=limit, network=NET).lower(*args)
    except spmd.MemoryLimitError:
        return
    assert low.memory()["peak_bytes"] <= limit, (low.memory()["peak_bytes"], limit)


def test_the_compiled_peak_counts_what_a_native_segment_makes_when_it_starts():
    """The local runtime runs a training step as one native segment, which makes every
    buffer it writes outside the arena (the new parameters and optimizer state) when it
    starts: the compiled profile holds them from its first step, so a limit between
    the plan without them and with them is refused or fitted, never passed over."""
    fn, args = _args("adam", 8, 64, 256, 0)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    low = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO, network=NET).lower(*args)
    prof = low.memory_profile()
    outputs = sum(b.nbytes for b in prof.own if b.end >= prof.n and b.start >= 0)
    # every output buffer is held from the segment's first step
    assert all(b.start == 0 for b in prof.own if b.end >= prof.n and b.start >= 0 and b.nbytes)
    assert outputs > 0
    limit = low.memory()["peak_bytes"] - 1
    try:
        fitted = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO, memory_limit=limit, network=NET).lower(*args)
    except spmd.MemoryLimitError:
        return
    assert fitted.memory()["peak_bytes"] <= limit
