"""`lowered.report()`: what the per-device program communicates and computes.

Shapes and bytes are per device. A collective's `bytes` is the size of the larger of
its input and output buffers (an all_gather's output, a reduce_scatter's input, the
buffer of an all_reduce / all_to_all / collective_permute): the amount of data the
collective handles on each device, as XLA reports it.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops.registry import graph_flops


def collective_ops(graph, inside=None, runs=1):
    """(op, the graph holding it, inside, runs) for every collective of the program, in
    order; those of a control-flow body (while, cond, scan) too, with `inside`: the op and
    line of the loop or branch that runs them, and `runs`: how many times a run of the
    program runs them (None when the data decides: a while's trip count, a cond's branch)."""
    for op in graph.ops:
        for k in sorted(op.attrs):
            sub = op.attrs[k]
            if hasattr(sub, "ops") and hasattr(sub, "inputs"):
                n = op.opdef.runs(op.attrs, k) if op.opdef.runs is not None else None
                yield from collective_ops(sub, f"{op.name}.{k} at {op.loc}",
                                          None if runs is None or n is None else runs * n)
        if op.opdef.collective.reshards is not None or op.opdef.collective.phase == "start":
            yield op, graph, inside, runs


def collectives(graph) -> list:
    out = []
    for op, _, inside, runs in collective_ops(graph):
        x, r = op.operands[0], op.results[0]
        item = np.dtype(x.dtype).itemsize
        if op.opdef.collective.phase == "start":        # a started collective: its done holds the result
            r = op.operands[0]
        out.append({"op": op.opdef.collective.async_of or op.name, "axes": tuple(op.attrs["axes"]),
                    "group_size": int(op.attrs["group_size"]),
                    "in_shape": tuple(x.shape), "out_shape": tuple(r.shape), "dtype": x.dtype,
                    "bytes": max(x.size, r.size) * item, "runs": runs, "loc": op.loc})
        if op.opdef.collective.phase == "start":
            out[-1]["async"] = True         # overlapped with computation (passes/schedule_async.py)
        if inside is not None:
            out[-1]["inside"] = inside
    return out


def bytes_per_run(colls):
    """The bytes the collectives move in one run of the program (each as often as it
    runs), or None when a loop's trip count or a branch decides."""
    if any(c["runs"] is None for c in colls):
        return None
    return sum(c["bytes"] * c["runs"] for c in colls)


class Report(dict):
    """lowered.report(): a dict (of every key below) that prints as a
    table. Keys: `collectives` / `comm_bytes`, `launched` / `launched_bytes`,
    `bytes_per_run`, `flops`, `out_shardings` (see `report`)."""

    def table(self) -> str:
        lines = []
        for key, total, what in (("collectives", "comm_bytes", "the partitioner's reshards"),
                                 ("launched", "launched_bytes", "what the compiled program runs")):
            rows = self[key]
            lines.append(f"{key}: {len(rows)}, {self[total]} bytes per device ({what})")
            if key == "launched" and _same(rows, self["collectives"]):
                lines[-1] += ": the same"
                continue
            if rows:
                lines += table_lines([("op", "axes", "group", "local shapes", "dtype", "bytes", "line")] + [
                    (c["op"] + (" (async)" if c.get("async") else ""), ",".join(c["axes"]), str(c["group_size"]),
                     f"{list(c['in_shape'])} -> {list(c['out_shape'])}", c["dtype"], str(c["bytes"]),
                     (c["loc"] or "?") + (f" [in {c['inside']}{_times(c['runs'])}]" if c.get("inside") else ""))
                    for c in rows], right=(2, 5))
        per_run = self["bytes_per_run"]
        lines.append(f"bytes per run: {'decided by the data (a while loop or a branch)' if per_run is None else per_run}"
                     f" per device")
        lines.append(f"flops: {self['flops']} per device")
        outs = ", ".join("?" if s is None else s.text() for s in self["out_shardings"])
        lines.append(f"out_shardings: {outs}")
        return "\n".join(lines)

    __str__ = table
    __repr__ = table

    def _repr_pretty_(self, p, cycle):        # IPython prints the table, too
        p.text(self.table())


def _same(a, b) -> bool:
    """The same collectives, one for one (nothing was combined)."""
    key = lambda c: (c["op"], c["axes"], c["in_shape"], c["bytes"])  # noqa: E731
    return len(a) == len(b) and all(key(x) == key(y) for x, y in zip(a, b))


def _times(runs) -> str:
    return ", runs as the data decides" if runs is None else f", {runs} times a run"


def table_lines(rows, right=()) -> list:
    """Rows of text cells (the first the header) -> aligned lines, indented two spaces;
    the columns numbered in `right` are aligned right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def report(stages, out_shardings) -> Report:
    """`collectives` / `comm_bytes`: what the partitioner decided, one entry per reshard
    (what the golden comparisons with GSPMD read). `launched` / `launched_bytes`: what
    the compiled program runs, after the optimiser combined independent all-reduces into
    buckets (the combine pass): fewer, larger collectives moving the same bytes; those
    started early and finished late, overlapped with computation, say `"async": True`.
    Each collective of a loop body is listed once, with `runs` (how often a run of the
    program runs it); `bytes_per_run` counts each as often as it runs."""
    g = stages.get("partitioned", stages["optimized"])
    colls = collectives(g)
    ran = collectives(stages["optimized"])
    outs = [s.replace(partial=()) if s is not None else None for s in out_shardings]
    return Report({"collectives": colls, "comm_bytes": sum(c["bytes"] for c in colls),
                   "launched": ran, "launched_bytes": sum(c["bytes"] for c in ran),
                   "bytes_per_run": bytes_per_run(ran),
                   "flops": graph_flops(g), "out_shardings": outs})
