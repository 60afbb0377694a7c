"""The communication cost model, one for the whole system: what it costs to move a value
from one sharding to another is what the reshard planner's cheapest plan costs
(reshard.py: a shortest-path search over collectives, bytes per device plus a little
latency per collective). Propagation decides conflicts with it (keep the split whose
loss would move the most bytes) and the partitioner picks among an op's candidate
layouts with it, so the two never disagree about which layout is cheaper.
"""
from __future__ import annotations

from .reshard import LATENCY_BYTES, plan


def reshard_cost(src, dst, shape, dtype) -> float:
    """What the planner minimises: bytes one device receives, plus LATENCY_BYTES per
    collective (a local slice earns a little, so at equal bytes it is preferred)."""
    return sum(max(st.cost, 0.0) for st in plan(src, dst, shape, dtype))


def reshard_bytes(src, dst, shape, dtype) -> float:
    """Bytes one device receives to reshard a `shape`/`dtype` value from Sharding `src`
    to Sharding `dst` (same mesh) along the cheapest plan."""
    return sum(max(st.cost - LATENCY_BYTES, 0.0) for st in plan(src, dst, shape, dtype))


def reshard_seconds(src, dst, shape, dtype, network) -> float:
    """Seconds the cheapest plan from `src` to `dst` takes per device on `network`
    (cost_model.py: each step's rounds of latency plus its bytes at its link's rate)."""
    from .cost_model import collective_seconds
    mesh = src.mesh
    total = 0.0
    for st in plan(src, dst, shape, dtype):
        nbytes = max(st.cost - LATENCY_BYTES, 0.0)
        group = 1
        for a in st.axes:
            group *= mesh.axis_size(a)
        total += collective_seconds(st.kind, nbytes, group, network.link(mesh, st.axes))
    return total
