import re

import pytest

from spmd.errors import ShardingError
from spmd.sharding import Mesh
from spmd.tools.visualize import visualize


def cells(text):
    """The device lists in the grid, row by row."""
    return [[c.strip() for c in line[line.index("|") + 1:].rstrip().rstrip("|").split("|")]
            for line in text.splitlines() if line.strip().endswith("|")]


def test_2d_both_dims_sharded():
    m = Mesh((2, 2), ("data", "model"))
    out = visualize(m.sharding("data", "model"), (8, 6))
    assert cells(out) == [["0", "1"], ["2", "3"]]
    assert "0:4" in out and "4:8" in out and "0:3" in out and "3:6" in out


def test_replicated_axis_lists_replicas():
    m = Mesh((2, 2), ("data", "model"))
    assert cells(visualize(m.sharding("data", None), (8, 6))) == [["0,1"], ["2,3"]]
    assert cells(visualize(m.sharding(), (4, 4))) == [["0,1,2,3"]]


def test_tuple_spec_orders_major_to_minor():
    m = Mesh((2, 2), ("data", "model"))
    # (model, data): model is major, so device 1 (model=1, data=0) holds the third block
    assert cells(visualize(m.sharding(("model", "data")), (8,))) == [["0", "2", "1", "3"]]


def test_uneven_split_shows_short_block_and_skips_empty():
    m = Mesh((4,), ("x",))
    out = visualize(m.sharding("x"), (5,))
    # ceil(5/4) = 2: blocks 0:2, 2:4, 4:5 and an empty 4th shard on device 3
    assert cells(out) == [["0", "1", "2"]]
    assert re.search(r"4:5", out)


def test_3d_is_refused_clearly():
    m = Mesh((2,), ("x",))
    with pytest.raises(ShardingError, match="1-d and 2-d"):
        visualize(m.sharding("x"), (2, 2, 2))
