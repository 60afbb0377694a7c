"""The model's seconds for one run of a partitioned (per-device) program: each kernel's
compute at the machine's rates (a roofline over its flops and the bytes it reads and
writes, for an op that does not fuse, as problem.py prices ops; a fused kernel's ops
and bytes together: fused_kernel_seconds) and each collective on its link (cost_model.py), the
ops of loop bodies as often as they run. The search compares whole plans with it, so a
plan the partitioner realises differently from the search's picture is judged by what
the partitioner made."""
from __future__ import annotations

import numpy as np

from ..cost_model import Machine, bucketed_values, collective_seconds, is_product, product_elements, rounds
from ...ir.ops.registry import op_flops
from ..kernel_traffic import KernelTraffic, nbytes
from ..report import collective_ops

# bytes a device receives, per byte of the larger of a collective's buffers
_RECEIVED = {"all_reduce": lambda g: 2 * (g - 1) / g, "all_gather": lambda g: (g - 1) / g,
             "reduce_scatter": lambda g: (g - 1) / g, "all_to_all": lambda g: (g - 1) / g,
             "collective_permute": lambda g: 1.0}


def op_seconds(graph, machine) -> dict:
    """{op: its seconds} of the ops of `graph` (not its collectives, nor the ops inside
    its sub-graphs): an op that does not fuse is a kernel of its own, its roofline (the
    longer of its compute and its bytes) and its fixed cost (Machine.call); the ops of a
    fused kernel (kernel_traffic.kernels) share one price and one fixed cost, which each
    op gets in proportion to its own part (fused_kernel_seconds); views cost nothing.
    Positional ops (a stencil's boundary masks) cost no arithmetic: the code generator
    decides them per region of the loop nest."""
    traffic = KernelTraffic(graph, machine.cache_bytes if machine.cache_bandwidth is not None else 0.0)
    out, fused = {}, {}
    for op in graph.ops:
        if _sub_graphs(op) or op.opdef.collective.reshards is not None or op.opdef.collective.phase is not None \
                or op in traffic.views:
            continue
        near, far = traffic.split[op]
        compute = 0.0 if op in traffic.positional else \
            machine.compute_seconds(op_flops(op), product_elements(op), is_product(op))
        if op in traffic.kernel:
            fused.setdefault(traffic.kernel[op], []).append((op, compute, machine.stream_seconds(near, far)))
        else:
            out[op] = max(compute, machine.stream_seconds(near, far)) + (machine.call if op.operands else 0.0)
    for ops in fused.values():
        divides = sum(c for op, c, _ in ops if op.opdef.divider)
        rest = sum(b for _, _, b in ops) + sum(c for op, c, _ in ops if not op.opdef.divider)
        t = fused_kernel_seconds(divides, rest) + (machine.call if any(op.operands for op, *_ in ops) else 0.0)
        own = [c + b for _, c, b in ops]
        whole = sum(own)
        for (op, *_), w in zip(ops, own):
            out[op] = t * (w / whole if whole > 0.0 else 1.0 / len(ops))
    return out


def fused_kernel_seconds(divides, rest) -> float:
    """A fused kernel's seconds: the element-ops of its divides and square roots
    (`divides`: OpDef.divider) run on a unit of their own, beside the rest: its other
    ops and its loads and stores (`rest`), which add up. Measured on one device
    (a stencil sweep's grid in the cache): a Jacobi sweep, Game of Life's rules and a
    3-D heat sweep take about their ops and their bytes together, not the longer of
    the two; the cavity flow's pressure sweep, a divide an element besides, no longer
    than the same sweep multiplying instead."""
    return max(divides, rest)


def compute_seconds(graph, machine, runs=1, unknown_trips=1) -> float:
    """The seconds of `graph`'s ops (op_seconds): fused ops move only what enters and
    leaves their kernel (kernel_traffic.KernelTraffic: what a kernel stores for readers
    in other kernels too), at the cache's rate what the cache still holds. A body the
    data decides how often to run (a while's) counts `unknown_trips` times."""
    t = runs * sum(op_seconds(graph, machine).values())
    for op in graph.ops:
        for k in _sub_graphs(op):
            t += compute_seconds(op.attrs[k], machine, runs * _trips(op, k, unknown_trips), unknown_trips)
    return t


def _sub_graphs(op) -> list:
    return [k for k in sorted(op.attrs) if hasattr(op.attrs[k], "ops") and hasattr(op.attrs[k], "inputs")]


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
        for k in _sub_graphs(op):
            n = runs * _trips(op, k, unknown_trips)
            for inner in op.attrs[k].ops:
                out[inner] = n
            _loop_runs(op.attrs[k], unknown_trips, n, out)
    return out


def repacked_bytes(op) -> float:
    """Bytes a rank copies to line up a collective's blocks where it calls the collective
    from Python (Collective.repacked: MPI's communicator)."""
    rule = op.opdef.collective.repacked
    if rule is None:
        return 0.0
    operand, result = rule(op.attrs)
    return 2.0 * (operand * nbytes(op.operands[0]) + result * nbytes(op.results[0]))


def collective_rows(graph, mesh, network, machine=None) -> list:
    """Each collective of the program: op, axes, group_size, bytes (the larger buffer),
    runs, and its seconds per run on its link; with `machine`, where its link's ranks
    call it from Python (Link.rendezvous), its blocks' copies (repacked_bytes) at the
    machine's rates besides."""
    rows = []
    for op, _, _, runs in collective_ops(graph):
        kind = op.opdef.collective.async_of or op.name
        x = op.operands[0]
        r = x if op.opdef.collective.phase == "start" else op.results[0]
        size = max(x.size, r.size) * np.dtype(x.dtype).itemsize
        g = int(op.attrs["group_size"])
        axes = tuple(op.attrs["axes"])
        share = _RECEIVED.get(kind, lambda g: 1.0)(g)
        link = network.link(mesh, axes)
        copied = repacked_bytes(op) if machine is not None and link.rendezvous > 0.0 else 0.0
        rows.append({"op": kind, "axes": axes, "group_size": g, "bytes": int(size), "runs": runs,
                     "seconds": collective_seconds(kind, share * size, g, link)
                     + (copied / machine.bandwidth_for(copied) if copied > 0.0 else 0.0),
                     "latency": rounds(kind, g) * link.latency, "loc": op.loc, "result": op.results[0]})
    return rows


def comm_seconds(graph, mesh, network, buckets=False, unknown_trips=1, machine=None) -> float:
    """`buckets`: the program's all-reduces are not combined yet (a partitioned program,
    before the compiler's passes): those of values only fused ops read on
    (cost_model.bucketed_values) pay one latency per mesh axes, as combine's buckets will.
    `machine`: as collective_rows'."""
    rows = collective_rows(graph, mesh, network, machine)
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
        for k in _sub_graphs(op):
            n += _trips(op, k, unknown_trips) * made_bytes(op.attrs[k], unknown_trips)
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


def meeting_machine(graph, machine, network) -> Machine:
    """The machine a run of `graph` meets: where it exchanges (a collective anywhere),
    Machine.crowded by its link's slowdown (ranks that are processes meet at its
    collectives, and with more of them than cores one that waits there polls on a core
    another needs); where it does not, `machine` (each process's turn on a core runs at
    the machine's rates)."""
    slow = network.within.slowdown
    if slow == 1.0 or next(collective_ops(graph), None) is None:
        return machine
    return machine.crowded(slow)


def program_seconds(graph, mesh, machine, network, buckets=False, unknown_trips=1) -> dict:
    """The model's seconds of one run: compute + communication + the fixed cost of a call
    (no overlap of computation and communication is assumed), on the machine the run
    meets (meeting_machine). `buckets`: as comm_seconds'. `unknown_trips`: how often a
    body runs whose count the data decides (a while's). (Link.handoff is left to the
    caller: handoff_seconds.)"""
    machine = meeting_machine(graph, machine, network)
    c = compute_seconds(graph, machine, unknown_trips=unknown_trips)
    m = comm_seconds(graph, mesh, network, buckets, unknown_trips, machine)
    return {"seconds": c + m + machine.step, "compute_seconds": c, "comm_seconds": m,
            "step_seconds": machine.step}
