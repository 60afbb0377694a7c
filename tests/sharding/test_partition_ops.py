"""Per-op validation of the partitioner (the idea of DTensor's sharding-strategy
validation): for every registry op, on its OpInfo samples, the one-op program is
partitioned for combinations of input shardings on meshes of 2 and 4 devices and a
2x2 mesh, run on the local runtime, and compared with plain numpy: exactly for integer
and bool results, to 1e-5 relative for float32.

On the 1-d meshes every combination of input shardings is tried (each dim whole or
split), for the samples of the op's first dtype; on the 2x2 mesh (each dim whole, split
over one axis, or over both in either order: too many combinations for three operands)
and for the other dtypes, CAP cases are drawn with a fixed seed. The result's sharding (what propagation would have said) is drawn
too, sometimes with a pending sum, and integer inputs are sometimes given as pending
sums (random addends on each device) so that the partial-value paths are exercised.
Padding of uneven shards is filled with garbage (NaN, 77), so a result that reads it
fails.
"""
import itertools
import warnings
import zlib

import numpy as np
import pytest

from opinfo import expected, ops_to_test, samples, tolerance
from partition_util import run_partitioned, specs
from spmd.ir import Graph
from spmd.errors import ShardingError
from spmd.ir.ops.names import CHECKPOINT
from spmd.ir.ops.registry import REGISTRY
from spmd.sharding import Mesh, Sharding
from spmd.sharding.partition import partition

CAP = 160          # drawn cases per op, beyond the complete 1-d enumeration
MESHES = [Mesh((2,), ("x",)), Mesh((4,), ("x",)), Mesh((2, 2), ("a", "b"))]
DTYPES = (np.float32, np.int32, np.bool_, np.complex64)


def _result_aval(name, operands, attrs):
    g = Graph(name)
    return g.emit(name, *[g.add_input(x.shape, x.dtype) for x in operands], **attrs)


def cases(name):
    """(operands, attrs, mesh, input shardings, result sharding) for op `name`: every
    combination of input specs on the 1-d meshes for the samples of the op's first
    dtype, and CAP more drawn from the rest (the 2x2 mesh, the other dtypes)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    every, more = [], []
    first = None
    for operands, attrs in samples(name, np.random.default_rng(1)):
        dt = operands[0].dtype if operands else np.asarray(attrs.get("value", np.zeros((), attrs.get("dtype")))).dtype
        if dt not in DTYPES:
            continue
        first = first or dt
        res = _result_aval(name, operands, attrs)
        for mesh in MESHES:
            for combo in itertools.product(*[specs(mesh, x.ndim) for x in operands]):
                (every if dt == first and mesh.ndim == 1 else more).append((operands, attrs, mesh, combo, res))
    if len(more) > CAP:
        more = [more[i] for i in sorted(rng.choice(len(more), CAP, replace=False))]
    out = []
    for operands, attrs, mesh, combo, res in every + more:
        ins = []
        for x, spec in zip(operands, combo):
            used = {a for e in spec if e for a in ((e,) if isinstance(e, str) else e)}
            free = [a for a in mesh.axis_names if a not in used]
            partial = tuple(free) if x.dtype == np.int32 and free and rng.random() < 0.25 else ()
            ins.append(Sharding(mesh, spec, partial))
        outs = specs(mesh, res.ndim)
        ospec = outs[rng.integers(len(outs))]
        used = {a for e in ospec if e for a in ((e,) if isinstance(e, str) else e)}
        free = [a for a in mesh.axis_names if a not in used]
        opart = tuple(free) if res.dtype != "bool" and free and rng.random() < 0.2 else ()
        out.append((operands, attrs, mesh, ins, Sharding(mesh, ospec, opart)))
    return out


def check(name, operands, attrs, mesh, ins, out_sh):
    g = Graph(name)
    g.mesh = mesh
    vals = [g.add_input(x.shape, x.dtype, s) for x, s in zip(operands, ins)]
    res = g.emit(name, *vals, loc="test.py:1", **attrs)
    res.sharding = out_sh
    g.outputs = [res]
    what = (f"{name} on {mesh.text()}: operands "
            f"{', '.join(f'{x.dtype}{list(x.shape)}{s.text()}' for x, s in zip(operands, ins))} -> "
            f"{out_sh.text()}; attrs { {k: v for k, v in attrs.items() if k != 'value'} }")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got,), _ = run_partitioned(g, operands, np.random.default_rng(0))
    want = expected(name, operands, attrs)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    rtol, atol = tolerance(want.dtype)
    if rtol == 0:
        assert np.array_equal(got, want), f"{what}\n got {got}\nwant {want}"
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def partitioned_ops():
    """Ops the partitioner meets: not those the compiler replaces by their body before
    propagation (OpDef.inlined: spmd.checkpoint's op), which it refuses."""
    return [n for n in ops_to_test() if not REGISTRY[n].inlined]


def test_the_partitioner_refuses_an_op_that_stands_for_its_body():
    (x, k), attrs = next(s for s in samples("checkpoint", np.random.default_rng(0)) if s[0][0].ndim == 1)
    mesh = MESHES[0]
    g = Graph("checkpoint")
    g.mesh = mesh
    vals = [g.add_input(a.shape, a.dtype, Sharding(mesh, ("x",) + (None,) * (a.ndim - 1))) for a in (x, k)]
    g.outputs = [g.emit(CHECKPOINT, *vals, loc="test.py:1", **attrs)]
    g.outputs[0].sharding = Sharding(mesh, (None,) * x.ndim)
    with pytest.raises(ShardingError, match="checkpoint at test.py:1: stands for its body"):
        partition(g)


@pytest.mark.slow
@pytest.mark.parametrize("name", partitioned_ops())
def test_op_partitions_exactly(name):
    todo = cases(name)
    assert todo, f"no samples for {name}"
    for case in todo:
        check(name, *case)
