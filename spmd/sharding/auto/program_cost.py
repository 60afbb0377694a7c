"""The model's seconds for one run of a partitioned (per-device) program: each op's
compute at the machine's rates (a roofline over its flops and the bytes it reads and
writes, as problem.py prices ops) and each collective on its link (cost_model.py), the
ops of loop bodies as often as they run. The search compares whole plans with it, so a
plan the partitioner realises differently from the search's picture is judged by what
the partitioner made."""
from __future__ import annotations

import numpy as np

from ..cost_model import bucketed_values, collective_seconds, is_product, product_elements, rounds
from ...ir.ops.registry import op_flops
from ..kernel_traffic import KernelTraffic
from ..report import collective_ops

# bytes a device receives, per byte of the larger of a collective's buffers
_RECEIVED = {"all_reduce": lambda g: 2 * (g - 1) / g, "all_gather": lambda g: (g - 1) / g,
             "reduce_scatter": lambda g: (g - 1) / g, "all_to_all": lambda g: (g - 1) / g,
             "collective_permute": lambda g: 1.0}


def _op_seconds(op, machine, traffic) -> float:
    flops = op_flops(op)
    near, far, ends = traffic.moved(op)
    t = max(machine.compute_seconds(flops, product_elements(op), is_product(op)), machine.stream_seconds(near, far))
    # a kernel's fixed cost: an op that does not fuse is a kernel of its own; a fused
    # one whose result leaves its kernel ends one (what only feeds fused ops is inside)
    if op.operands and ends:
        t += machine.call
    return t


def compute_seconds(graph, machine, runs=1, unknown_trips=1) -> float:
    """Each op's roofline; fused ops move only what enters and leaves their kernel
    (kernel_traffic.KernelTraffic: what a kernel stores for readers in other kernels
    too), at the cache's rate what the cache still holds; each kernel its fixed cost
    (Machine.call). A body the data decides how often to run (a while's)
    counts `unknown_trips` times."""
    traffic = KernelTraffic(graph, machine.cache_bytes if machine.cache_bandwidth is not None else 0.0)
    t = 0.0
    for op in graph.ops:
        subs = [k for k in sorted(op.attrs) if hasattr(op.attrs[k], "ops") and hasattr(op.attrs[k], "inputs")]
        if subs:
            for k in subs:
                t += compute_seconds(op.attrs[k], machine, runs * _trips(op, k, unknown_trips), unknown_trips)
            continue
        if op.opdef.collective.reshards is not None or op.opdef.collective.phase is not None:
            continue
        t += runs * _op_seconds(op, machine, traffic)
    return t


def _trips(op, key, unknown_trips) -> float:
    """How often a run of `op` runs its sub-graph `key`: a scan's length; a while's
    `unknown_trips` (the data decides); a cond's branches once each (either may run)."""
    n = op.opdef.runs(op.attrs, key) if op.opdef.runs is not None else None
    if n is not None:
        return n
    return unknown_trips if "num_carry" in op.attrs else 1


def _loop_runs(graph, unknown_trips, runs=1, out=None) -> dict:
    """{op: how often a run of the program runs it} for the ops inside sub-graphs whose
    count the data decides, by _trips."""
    out = {} if out is None else out
    for op in graph.ops:
        for k in sorted(op.attrs):
            sub = op.attrs[k]
            if hasattr(sub, "ops") and hasattr(sub, "inputs"):
                n = runs * _trips(op, k, unknown_trips)
                for inner in sub.ops:
                    out[inner] = n
                _loop_runs(sub, unknown_trips, n, out)
    return out


def collective_rows(graph, mesh, network) -> list:
    """Each collective of the program: op, axes, group_size, bytes (the larger buffer),
    runs, and its seconds per run on its link."""
    rows = []
    for op, _, _, runs in collective_ops(graph):
        kind = op.opdef.collective.async_of or op.name
        x = op.operands[0]
        r = x if op.opdef.collective.phase == "start" else op.results[0]
        nbytes = max(x.size, r.size) * np.dtype(x.dtype).itemsize
        g = int(op.attrs["group_size"])
        axes = tuple(op.attrs["axes"])
        share = _RECEIVED.get(kind, lambda g: 1.0)(g)
        link = network.link(mesh, axes)
        rows.append({"op": kind, "axes": axes, "group_size": g, "bytes": int(nbytes), "runs": runs,
                     "seconds": collective_seconds(kind, share * nbytes, g, link),
                     "latency": rounds(kind, g) * link.latency, "loc": op.loc, "result": op.results[0]})
    return rows


def comm_seconds(graph, mesh, network, buckets=False, unknown_trips=1) -> float:
    """`buckets`: the program's all-reduces are not combined yet (a partitioned program,
    before the compiler's passes): those of values only fused ops read on
    (cost_model.bucketed_values) pay one latency per mesh axes, as combine's buckets will."""
    rows = collective_rows(graph, mesh, network)
    late = bucketed_values(graph) if buckets else set()
    inside = _loop_runs(graph, unknown_trips) if unknown_trips != 1 else {}
    t, paid = 0.0, set()
    for r in rows:
        s = r["seconds"]
        if r["op"] == "all_reduce" and r["result"] in late:
            if r["axes"] in paid:
                s -= r["latency"]
            paid.add(r["axes"])
        runs = r["runs"] if r["runs"] is not None else inside.get(r["result"].producer, 1)
        t += runs * s
    return t


def made_bytes(graph, unknown_trips=1) -> float:
    """The bytes of every value a run of `graph` makes, a loop's body as often as it runs
    (_trips)."""
    n = 0.0
    for op in graph.ops:
        n += sum(float(r.size) * np.dtype(r.dtype).itemsize for r in op.results)
        for k in sorted(op.attrs):
            sub = op.attrs[k]
            if hasattr(sub, "ops") and hasattr(sub, "inputs"):
                n += _trips(op, k, unknown_trips) * made_bytes(sub, unknown_trips)
    return n


def handoff_seconds(graph, mesh, network, unknown_trips=1) -> float:
    """Link.handoff where the ranks of a run of `graph` run on threads of their own: the
    program exchanges (a collective anywhere), or makes more than the link's solo_bytes.
    A fixed cost of the call that lowered.cost() predicts; spmd.AUTO's search leaves it
    out: the plans it compares, of one program, pay it alike (but where a plan that
    exchanges nothing is small), and its own estimates of plans it does not make
    (problem.py, op by op) cannot hold it."""
    link = network.within
    if link.handoff <= 0.0 or mesh is None or mesh.size <= 1:
        return 0.0
    if next(collective_ops(graph), None) is not None or made_bytes(graph, unknown_trips) > link.solo_bytes:
        return link.handoff
    return 0.0


def program_seconds(graph, mesh, machine, network, buckets=False, unknown_trips=1) -> dict:
    """The model's seconds of one run: compute + communication + the fixed cost of a call
    (no overlap of computation and communication is assumed). `buckets`: as comm_seconds'.
    `unknown_trips`: how often a body runs whose count the data decides (a while's).
    (Link.handoff is left to the caller: handoff_seconds.)"""
    c = compute_seconds(graph, machine, unknown_trips=unknown_trips)
    m = comm_seconds(graph, mesh, network, buckets, unknown_trips)
    return {"seconds": c + m + machine.step, "compute_seconds": c, "comm_seconds": m,
            "step_seconds": machine.step}
