"""A value a step run from Python made may be numpy's view of an operand (a dynamic_slice
of a concatenation the memory plan placed in the arena). A native segment that
exchanges (llvm/reorder.py) may move its instructions past each other only where their
memory is apart, so it must see that view as lying in the operand's memory: else a
permute's post and the copies feeding it move up over a read of the view while they
overwrite the arena bytes under it (minibatches cut from an array split over 4 local
devices gave a wrong answer, in any schedule of its all-reduces)."""
import os
from contextlib import contextmanager

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import spmd
from spmd.backends.llvm.schedule import Segment


def sgd(w, X, batch):
    """minibatch gradient steps over the rows of X (split over the devices): each batch
    is resharded (permutes, a concatenation, a dynamic_slice at the device's offset)"""
    for s in range(0, X.shape[0], batch):
        xb = X[s:s + batch]
        w -= 0.1 * (xb.T @ np.tanh(xb @ w))
    return w


@contextmanager
def collectives_blocking_where_first_read():
    """The per-device programs scheduled with every collective that may be split left one
    blocking call where its result is first read, after the computation that does not
    need it (what a schedule keeping a collective with little to overlap whole makes)."""
    from spmd.compiler import pipeline
    from spmd.compiler.passes.bodies import in_bodies
    from spmd.compiler.passes.schedule_async import async_order, earliest_first, rebuild

    def blocking_late(g):
        if not any(op.opdef.collective.async_pair for op in g.ops):
            return g
        items, overlapped = async_order(g, earliest_first(g))
        return rebuild(g, items, dict.fromkeys(overlapped, False))

    old, old_cache = pipeline.OPTIMIZE, os.environ.get("SPMD_PROGRAM_CACHE")
    pipeline.OPTIMIZE = tuple((name, in_bodies(blocking_late) if name == "schedule" else fn) for name, fn in old)
    os.environ["SPMD_PROGRAM_CACHE"] = "0"       # (the lowered programs differ from the cached ones)
    try:
        yield
    finally:
        pipeline.OPTIMIZE = old
        if old_cache is None:
            os.environ.pop("SPMD_PROGRAM_CACHE", None)
        else:
            os.environ["SPMD_PROGRAM_CACHE"] = old_cache


def _run(devices, rows, batch, d, h, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((devices * rows, d))
    w = 0.3 * rng.standard_normal((d, h))
    mesh = spmd.Mesh((devices,), ("d",))
    want_w = w.copy()
    want = sgd(want_w, X, batch)
    f = spmd.jit(sgd, in_shardings=(mesh.sharding(), mesh.sharding("d", None)), mesh=mesh, static_argnums=(2,),
                 backend="llvm")
    got_w = w.copy()
    got = f(got_w, X, batch)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-9, atol=1e-12)      # (written in place, as numpy does)


@settings(max_examples=12, deadline=None)
@given(devices=st.sampled_from([2, 4]), rows=st.sampled_from([2, 4, 8]), per=st.sampled_from([1, 2]),
       d=st.integers(1, 3), h=st.integers(1, 2), seed=st.integers(0, 2 ** 16), late=st.booleans())
@example(devices=4, rows=4, per=1, d=2, h=1, seed=0, late=False)     # (wrong on the default schedule)
@example(devices=4, rows=4, per=1, d=2, h=1, seed=0, late=True)
def test_minibatches_of_a_split_array_match_numpy(devices, rows, per, d, h, seed, late):
    """batches of one device's rows (per=1) or two's; `late`: the all-reduces blocking,
    after the next batch's resharding"""
    if late:
        with collectives_blocking_where_first_read():
            _run(devices, rows, rows * per, d, h, seed)
    else:
        _run(devices, rows, rows * per, d, h, seed)


def test_a_view_made_in_python_lies_in_its_operands_memory():
    """The schedule's record of the dynamic_slice's result (run from Python: numpy's view
    of the concatenation) covers the arena bytes of the concatenation it is cut from."""
    mesh = spmd.Mesh((4,), ("d",))
    X = np.ones((16, 2))
    w = np.ones((2, 1))
    f = spmd.jit(sgd, in_shardings=(mesh.sharding(), mesh.sharding("d", None)), mesh=mesh, static_argnums=(2,),
                 backend="llvm")
    exe = f.lower(w, X, 4).compile()
    sched = exe.schedule(1, native_comm="process")
    assert any(isinstance(it, Segment) for it in sched.items)
    checked = 0
    for it in sched.items:
        if isinstance(it, Segment):
            continue
        step = exe.steps[it]
        for r in getattr(step, "results", ()):
            for o in exe.memory.may_view.get(r, ()):
                if exe.memory.place(o) is not None:
                    assert set(sched.locations(o)) <= set(sched.locations(r)), (step.name, r, o)
                    checked += 1
    assert checked >= 4          # (a dynamic_slice of each batch's concatenation)
