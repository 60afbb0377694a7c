"""Each exchange moves down to its first use (compiler/passes/exchanges_late.py): the
halos of a step are made first and their exchanges stand together; no exchange passes
another collective, and every op reads the same values as before."""
import numpy as np

from spmd.backends.llvm import compile_llvm
from spmd.compiler.passes import exchanges_late
from spmd.ir import Graph
from spmd.ir.ops.names import ADD, ALL_REDUCE, COLLECTIVE_PERMUTE, CONCATENATE, MULTIPLY, SLICE
from spmd.transports.local.local_runtime import LocalRuntime
from spmd.sharding import Mesh

RT = LocalRuntime()


def _column_halos(g, x, between=None):
    """the column halos of a (rows, cols) shard sent both ways along "y", as the
    partitioner emits them: make one, send it, make the other, send it"""
    n, m = x.shape
    lo = g.emit(SLICE, x, start=(0, m - 1), limit=(n, m), stride=(1, 1))
    right = g.emit(COLLECTIVE_PERMUTE, lo, axes=("y",), pairs=((0, 1),), group_size=2)
    if between is not None:
        between(g)
    hi = g.emit(SLICE, x, start=(0, 0), limit=(n, 1), stride=(1, 1))
    left = g.emit(COLLECTIVE_PERMUTE, hi, axes=("y",), pairs=((1, 0),), group_size=2)
    return g.emit(CONCATENATE, right, x, left, dimension=1)


def _names(g):
    return [op.name for op in g.ops]


def test_the_halos_are_made_first_and_their_exchanges_stand_together():
    g = Graph("halo")
    x = g.add_input((4, 5), "float64")
    g.outputs = [g.emit(MULTIPLY, _column_halos(g, x), _column_halos(g, x))]
    out = exchanges_late(g)
    assert _names(out)[:5] == ["slice", "slice", "collective_permute", "collective_permute", "concatenate"], \
        _names(out)
    mesh = Mesh((1, 2), ("x", "y"))
    xs = {d: [np.arange(20.0).reshape(4, 5) * (d + 1)] for d in range(2)}
    want = RT.run(compile_llvm(g), mesh, xs)
    got = RT.run(compile_llvm(out), mesh, xs)
    for d in range(2):
        np.testing.assert_array_equal(got[d][0], want[d][0])


def test_an_exchange_does_not_pass_another_collective():
    g = Graph("halo")
    x = g.add_input((4, 5), "float64")
    s = g.add_input((3,), "float64")
    made = []
    g.outputs = [_column_halos(g, x, lambda g: made.append(g.emit(ALL_REDUCE, s, axes=("y",), group_size=2,
                                                                    reduction="sum")))]
    g.outputs.append(made[0])
    names = _names(exchanges_late(g))
    assert names.index("all_reduce") > names.index("collective_permute")
    assert names.count("collective_permute") == 2


def test_a_program_without_exchanges_is_the_same_graph():
    g = Graph("plain")
    x = g.add_input((4,), "float64")
    g.outputs = [g.emit(ADD, x, x)]
    assert exchanges_late(g) is g
