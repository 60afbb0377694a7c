"""The model's seconds for one run of a partitioned (per-device) program: each op's
compute at the machine's rates (a roofline over its flops and the bytes it reads and
writes, as problem.py prices ops) and each collective on its link (cost_model.py), the
ops of loop bodies as often as they run. The search compares whole plans with it, so a
plan the partitioner realises differently from the search's picture is judged by what
the partitioner made."""
from __future__ import annotations

import numpy as np

from ..cost_model import bucketed_values, collective_seconds, fuses, moved_values, rounds
from ..report import collective_ops

# bytes a device receives, per byte of the larger of a collective's buffers
_RECEIVED = {"all_reduce": lambda g: 2 * (g - 1) / g, "all_gather": lambda g: (g - 1) / g,
             "reduce_scatter": lambda g: (g - 1) / g, "all_to_all": lambda g: (g - 1) / g,
             "collective_permute": lambda g: 1.0}


def _op_seconds(op, machine, read_by_unfused, outputs) -> float:
    f = op.opdef.flops
    flops = 0.0
    if f is not None and op.results:
        flops = float(f([o.aval for o in op.operands], op.results[0].aval, op.attrs))
    ins, outs = moved_values(op, read_by_unfused, outputs)
    nbytes = sum(v.size * np.dtype(v.dtype).itemsize for v in ins + outs)
    return max(flops / machine.flops, nbytes / machine.bandwidth)


def compute_seconds(graph, machine, runs=1) -> float:
    """Each op's roofline; fused ops move only what enters and leaves their kernel
    (cost_model.moved_values), as problem.py prices them."""
    read_by_unfused = {o for op in graph.ops if not fuses(op) for o in op.operands}
    outputs = set(graph.outputs)
    t = 0.0
    for op in graph.ops:
        subs = [k for k in sorted(op.attrs) if hasattr(op.attrs[k], "ops") and hasattr(op.attrs[k], "inputs")]
        if subs:
            for k in subs:
                n = op.opdef.runs(op.attrs, k) if op.opdef.runs is not None else 1
                t += compute_seconds(op.attrs[k], machine, runs * (n or 1))
            continue
        if op.opdef.collective.reshards is not None or op.opdef.collective.phase is not None:
            continue
        t += runs * _op_seconds(op, machine, read_by_unfused, outputs)
    return t


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


def comm_seconds(graph, mesh, network, buckets=False) -> float:
    """`buckets`: the program's all-reduces are not combined yet (a partitioned program,
    before the compiler's passes): those of values only fused ops read on
    (cost_model.bucketed_values) pay one latency per mesh axes, as combine's buckets will."""
    rows = collective_rows(graph, mesh, network)
    late = bucketed_values(graph) if buckets else set()
    t, paid = 0.0, set()
    for r in rows:
        s = r["seconds"]
        if r["op"] == "all_reduce" and r["result"] in late:
            if r["axes"] in paid:
                s -= r["latency"]
            paid.add(r["axes"])
        t += (r["runs"] or 1) * s
    return t


def program_seconds(graph, mesh, machine, network, buckets=False) -> dict:
    """The model's seconds of one run: compute + communication + the fixed cost of a call
    (no overlap of computation and communication is assumed). `buckets`: as comm_seconds'."""
    c, m = compute_seconds(graph, machine), comm_seconds(graph, mesh, network, buckets)
    return {"seconds": c + m + machine.step, "compute_seconds": c, "comm_seconds": m,
            "step_seconds": machine.step}
