"""spmd.explain: why the program communicates, and where every value's sharding came from.

Short by default, one line per collective and one per annotation:

- every collective of the per-device program: op, mesh axes, bytes per device, the user
  line, the op of the user's program that needed it and why, and the annotation its
  split comes from (changing that annotation is what would remove it);
- every annotation: in_shardings, out_shardings, spmd.shard;
- memory per device (lowered.memory()): the peak, the op and user line where it is
  reached, and its bytes by kind; with verbose=True also the largest values live
  there, with the lines that made them.

With verbose=True, also every value of the propagated program: its sharding, and for
each split dim the annotation it came from and the ops it flowed through.
"""
from __future__ import annotations

import numpy as np

from .report import collective_ops, collectives, table_lines


def _names(graph):
    return {v: f"%{i}" for i, v in enumerate(graph.values())}


def _source(holder, op):
    """What a collective of the per-device program was made for: a global op, a global
    output Value, or None (not known: a control-flow body's)."""
    return holder.needed_by.get(op)


def collective_rows(stages) -> list:
    """One dict a collective: the report's keys (op, axes, bytes, loc, ...) plus
    `needed_by` (the user's op, or the program's output, that needed it), `why` (what
    the collective does to the layout) and `comes_from` ([(annotation, dim, axes)]: the
    annotations that split the data it moves)."""
    g = stages.get("partitioned")
    if g is None:
        return []
    prop = stages.get("propagated")
    rows = []
    for (op, holder, _, _), c in zip(collective_ops(g), collectives(g)):
        src = _source(holder, op)
        axes = set(c["axes"])
        if src is None:
            need, origin = "an op of a loop or branch body", []
        elif hasattr(src, "opdef"):
            need, origin = src.name, origins(prop, src, axes)
        else:
            need = "the program's output"
            origin = origins(prop, src.producer, axes) if src.producer is not None else []
            note = prop.annotations.get(src)
            if note is not None and any(set(src.sharding.dim_axes(d)) & axes for d in range(src.ndim)):
                origin = _unique(origin + [(note, d, tuple(src.sharding.dim_axes(d)))
                                           for d in range(src.ndim) if set(src.sharding.dim_axes(d)) & axes])
        rows.append(dict(c, needed_by=need, why=op.opdef.collective.reshards, comes_from=origin))
    return rows


def _unique(items):
    out = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def origins(graph, op, axes) -> list:
    """[(annotation, dim, axes)]: the annotations whose split over `axes` the data of
    global `op` has, each with the dim of the annotated value it splits: first where
    propagation took the split of each operand and result from (for a pending sum over
    `axes`, of the dims it summed), then any other annotation of an operand's inputs
    that splits a dim over `axes` (it would split the data again were the first one
    changed)."""
    if graph is None or op is None:
        return []
    why = graph.why
    notes = graph.annotations
    tensors = list(op.operands) + list(op.results)
    for t in list(tensors):
        if t.sharding is not None and set(t.sharding.partial) & axes and t.producer is not None:
            tensors += list(t.producer.operands)
    found = []
    for t in tensors:
        for d in range(t.ndim):
            if t.sharding is not None and set(t.sharding.dim_axes(d)) & axes:
                root = _root(t, d, axes, why, notes)
                if root is not None:
                    found.append(root)
    for v in _ancestors(op.operands, graph):
        if v in notes:
            found += [(notes[v], d, tuple(a for a in v.sharding.dim_axes(d) if a in axes))
                      for d in range(v.ndim) if set(v.sharding.dim_axes(d)) & axes]
    return _unique(found)


def _ancestors(values, graph) -> list:
    """The values of `graph` that `values` are computed from (themselves included), in
    program order."""
    seen, stack = set(), list(values)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.producer is not None:
            stack.extend(v.producer.operands)
    return [v for v in graph.values() if v in seen]


def _root(v, d, axes, why, notes, limit=10000):
    """(annotation, dim, axes) where the split of dim d of v over `axes` was fixed."""
    seen = set()
    while (v, d) not in seen and len(seen) < limit:
        seen.add((v, d))
        if v in notes:
            return notes[v], d, tuple(a for a in v.sharding.dim_axes(d) if a in axes)
        entry = next((e for e in why.get(v, []) if e[0] == d and axes & set(e[1])), None)
        if entry is None:
            return None
        _, _, _, v, d = entry
    return None


def annotation_rows(graph) -> list:
    """[(annotation, type, sharding text)] of every annotated value, in program order."""
    from ..ir.text import type_str
    if graph is None:
        return []
    notes = graph.annotations
    return [(notes[v], type_str(v), v.sharding.text()) for v in graph.values() if v in notes]


def provenance(graph) -> list:
    """[(name, type, sharding text, explanation)] for each value of the propagated graph:
    the annotation that fixed it, or for each split dim the annotation the split came
    from and the ops it flowed through."""
    from ..ir.text import type_str
    why = graph.why
    notes = graph.annotations
    names = _names(graph)
    rows = []
    for v in graph.values():
        if v in notes:
            expl = f"annotation: {notes[v]}"
        elif why.get(v):
            expl = "; ".join(f"dim {d} on {','.join(axes)}: {_path(v, d, axes, why, notes, names)}"
                             for d, axes, *_ in why[v])
        else:
            expl = "replicated: nothing splits it" if v.sharding.is_replicated else ""
        if v.sharding.partial and v not in notes:
            expl += ("; " if expl else "") + f"partial over {','.join(v.sharding.partial)}: a contraction " \
                                            f"over a split dim, summed where a consumer needs it"
        rows.append((names[v], type_str(v), v.sharding.text(), expl))
    return rows


def _path(v, d, axes, why, notes, names, limit=1000):
    """'from <annotation> %k via op (line) -> op x3 (line)': follow a split back to where
    it was fixed; a run of one op at one line is written once, with its count."""
    hops, seen = [], set()
    axes = set(axes)
    while (v, d) not in seen and len(hops) < limit:
        seen.add((v, d))
        entry = next((e for e in why.get(v, []) if e[0] == d and axes & set(e[1])), None)
        if entry is None:
            break
        _, _, op, src, sd = entry
        hops.append(f"{op.name}{' (' + op.loc + ')' if op.loc else ''}")
        if src in notes:
            return f"from {notes[src]} {names[src]} via " + _chain(reversed(hops))
        v, d = src, sd
    return "via " + _chain(reversed(hops)) if hops else ""


def _chain(hops) -> str:
    runs = []
    for h in hops:
        if runs and runs[-1][0] == h:
            runs[-1][1] += 1
        else:
            runs.append([h, 1])
    out = []
    for h, n in runs:
        name, _, loc = h.partition(" ")
        out.append(h if n == 1 else f"{name} x{n}" + (f" {loc}" if loc else ""))
    return " -> ".join(out)


def _removal(origin, shown=3) -> str:
    if not origin:
        return "-"
    text = "; ".join(f"{label}: dim {d} over {','.join(axes)}" for label, d, axes in origin[:shown])
    return text + (f"; and {len(origin) - shown} more" if len(origin) > shown else "")


def explain_program(stages, memory, breaks, file=None, verbose=False, auto=None) -> str:
    """Print and return the explanation (see the module docstring) of a program: its
    stages' graphs by name, its memory figures (lowered.memory()) and its graph breaks
    [(line, what, value)]; with `auto` (spmd.AUTO's AutoPlan) first what it chose and why."""
    rows = collective_rows(stages)
    total = sum(r["bytes"] for r in rows)
    lines = [f"collectives ({len(rows)}, {total} bytes per device):"]
    if rows:
        table = [("op", "axes", "bytes", "line", "needed by: why", "split by (the annotation that would remove it)")]
        for r in rows:
            need = f"{r['needed_by']}: {r['why']}" + (f" [in {r['inside']}]" if r.get("inside") else "")
            table.append((r["op"], ",".join(r["axes"]), str(r["bytes"]), r["loc"] or "?", need,
                          _removal(r["comes_from"])))
        lines += table_lines(table, right=(2,))
    g = stages.get("propagated")
    notes = annotation_rows(g)
    lines.append(f"annotations ({len(notes)}):")
    if notes:
        lines += table_lines(notes)
    lines += memory_lines(memory, largest=5 if verbose else 0)
    if auto is not None:
        lines = auto.explain_lines() + lines
    if breaks:
        lines.append(f"graph breaks ({len(breaks)}): the program is compiled in parts, each value "
                     f"taken from the data by the part before")
        lines += [f"  {loc}: {what} -> {np.asarray(v).tolist() if np.size(v) <= 8 else f'an array of {np.size(v)}'}"
                  for loc, what, v in breaks]
    if verbose and g is not None:
        lines.append("shardings:")
        for name, typ, shs, expl in provenance(g):
            lines.append(f"  {name:<5} {typ:<16} {shs:<24} {expl}")
    text = "\n".join(lines)
    print(text, file=file)
    return text


def _size(n) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def memory_lines(mem, largest=3) -> list:
    """The peak per device of lowered.memory() in a few lines: where, of what kinds, and
    the largest values live there (what to split, recompute or checkpoint)."""
    peak = mem["peak"]
    where = f"{peak['op']} ({peak['loc'] or '?'})" if peak["op"] else "the end"
    kinds = ", ".join(f"{k} {_size(b)}" for k, b in peak["by_kind"].items() if b)
    lines = [f"memory per device: peak {_size(mem['peak_bytes'])}, at {where}: {kinds or 'nothing'}"]
    if peak["live"] and largest:
        table = [("largest live there", "shape", "bytes", "kind", "made by")]
        for r in peak["live"][:largest]:
            shape = ",".join(map(str, r["shape"]))
            table.append((r["value"], f"{r['dtype']}[{shape}]", _size(r["bytes"]), r["kind"],
                          r["op"] + (f" ({r['loc']})" if r["loc"] else "")))
        lines += table_lines(table, right=(2,))
    return lines
