"""spmd.jit(memory_limit=bytes): values recomputed until the plan fits, the same results
bit for bit, or MemoryLimitError before anything runs, naming what is live at the peak
and the lines that made it; and a run that does not fit the machine's free memory is
refused before it starts."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd
from spmd.jit import placing, running

L, D, B = 6, 128, 512


def loss(ws, x):
    h = x
    for w in ws:
        h = np.maximum(h @ w, 0)       # the line every activation is made at
    return np.mean(h ** 2)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    ws = [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32) for _ in range(L)]
    return ws, rng.standard_normal((B, D)).astype(np.float32)


def _peak(f, *args):
    return f.lower(*args).memory()["peak_bytes"]


def test_a_limit_is_met_by_recomputing_and_the_results_are_the_same_bits():
    ws, x = _inputs()
    free = spmd.jit(spmd.value_and_grad(loss))
    want = free(ws, x)
    limit = int(0.7 * _peak(free, ws, x))
    f = spmd.jit(spmd.value_and_grad(loss), memory_limit=limit)
    low = f.lower(ws, x)
    assert low.memory()["peak_bytes"] <= limit
    assert low.as_text("remat").count("maximum(") > free.lower(ws, x).as_text().count("maximum(")  # recomputed
    got = f(ws, x)
    assert np.array_equal(got[0], want[0]) and all(np.array_equal(a, b) for a, b in zip(got[1], want[1]))


@settings(max_examples=8, deadline=None)
@given(frac=st.floats(0.2, 1.0), backend=st.sampled_from(["numpy", "llvm"]))
def test_any_limit_either_fits_with_the_same_results_or_says_so(frac, backend):
    ws, x = _inputs(1)
    free = spmd.jit(spmd.value_and_grad(loss), backend=backend)
    limit = int(frac * _peak(free, ws, x))
    f = spmd.jit(spmd.value_and_grad(loss), backend=backend, memory_limit=limit)
    try:
        low = f.lower(ws, x)
    except spmd.MemoryLimitError as e:
        assert "memory_limit" in str(e) and "test_memory_limit.py" in str(e)
        return
    assert low.memory()["peak_bytes"] <= limit
    want, got = free(ws, x), f(ws, x)
    assert np.array_equal(got[0], want[0]) and all(np.array_equal(a, b) for a, b in zip(got[1], want[1]))


def test_a_limit_below_the_arguments_fails_up_front_naming_them():
    ws, x = _inputs()
    f = spmd.jit(spmd.value_and_grad(loss), memory_limit=(D * D * 4) * 2)
    with pytest.raises(spmd.MemoryLimitError) as e:
        f.lower(ws, x)
    msg = str(e.value)
    assert "argument ws[0] float32[128, 128]" in msg and "argument x float32[512, 128]" in msg, msg
    assert "the arguments alone take" in msg and "FSDP" in msg, msg


def test_what_cannot_be_recomputed_is_named_with_its_line():
    ws, x = _inputs()
    free = spmd.jit(spmd.value_and_grad(loss))
    args = sum(w.nbytes for w in ws) + x.nbytes
    f = spmd.jit(spmd.value_and_grad(loss), memory_limit=args + 2 * B * D * 4)
    with pytest.raises(spmd.MemoryLimitError) as e:
        f(ws, x)
    msg = str(e.value)
    assert "over memory_limit" in msg and "test_memory_limit.py:18" in msg and "spmd.checkpoint" in msg, msg
    assert _peak(free, ws, x) > args + 2 * B * D * 4


def test_a_run_that_does_not_fit_the_machine_is_refused_before_it_starts(monkeypatch):
    ws, x = _inputs()
    f = spmd.jit(spmd.value_and_grad(loss))
    need = _peak(f, ws, x) - sum(w.nbytes for w in ws) - x.nbytes
    ran = []
    with monkeypatch.context() as m:
        m.setattr(placing, "free_memory_bytes", lambda: need // 2)
        m.setattr(running, "execute", lambda *a: ran.append(a))
        with pytest.raises(spmd.MemoryLimitError, match="would be killed") as e:
            f(ws, x)
    assert "test_memory_limit.py:18" in str(e.value) and not ran
    monkeypatch.setattr(placing, "free_memory_bytes", lambda: need * 2)
    spmd.jit(spmd.value_and_grad(loss))(ws, x)
    monkeypatch.setenv("SPMD_MEMORY_CHECK", "0")
    monkeypatch.setattr(placing, "free_memory_bytes", lambda: 1)
    spmd.jit(spmd.value_and_grad(loss))(ws, x)


# -- layers whose activation is more than one cheap op from a matmul (a bias, then ReLU) --
BL, BD, BB = 12, 64, 1024


def bias_loss(ws, bs, x):
    h = x
    for w, b in zip(ws, bs):
        h = np.maximum(h @ w + b, 0)
    return np.mean(h ** 2)


def _segment(h, ws, bs):
    for w, b in zip(ws, bs):
        h = np.maximum(h @ w + b, 0)
    return h


def _grouped_loss(g):
    def f(ws, bs, x):
        h = x
        for i in range(0, len(ws), g):
            h = spmd.checkpoint(_segment)(h, ws[i:i + g], bs[i:i + g])
        return np.mean(h ** 2)
    return f


def _bias_inputs():
    rng = np.random.default_rng(3)
    ws = [(rng.standard_normal((BD, BD)) / np.sqrt(BD)).astype(np.float32) for _ in range(BL)]
    bs = [np.full(BD, 0.01, np.float32) for _ in range(BL)]
    return ws, bs, rng.standard_normal((BB, BD)).astype(np.float32)


def _flat(out):
    return [np.asarray(a) for a in spmd.tree_flatten(out)[0]]


@pytest.mark.slow
def test_a_limit_a_hand_grouping_reaches_is_reached_with_the_same_results():
    """Each layer's activation is bias-add and ReLU after a matmul: recomputing it needs
    the matmul, so only segments of layers recomputed from a kept activation (as
    spmd.checkpoint on groups of layers does by hand) bring the peak down."""
    ws, bs, x = _bias_inputs()
    free = spmd.jit(spmd.value_and_grad(bias_loss, argnums=(0, 1)))
    want = _flat(free(ws, bs, x))
    hand = min(_peak(spmd.jit(spmd.value_and_grad(_grouped_loss(g), argnums=(0, 1))), ws, bs, x) for g in (3, 4))
    assert hand < 0.8 * _peak(free, ws, bs, x)
    f = spmd.jit(spmd.value_and_grad(bias_loss, argnums=(0, 1)), memory_limit=hand)
    low = f.lower(ws, bs, x)
    assert low.memory()["peak_bytes"] <= hand
    got = _flat(f(ws, bs, x))
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
