"""spmd.explain: why the program communicates, and where every value's sharding came from.

Two tables:
- every collective of the per-device program: op, mesh axes, bytes per device, local
  shapes before -> after, the user line that needed it, and why (what kind of reshard);
- every value of the propagated program: its sharding, and for each split dim the
  annotation it came from and the ops it flowed through.
"""
from __future__ import annotations

from .report import collective_ops, collectives


def _names(graph):
    return {v: f"%{i}" for i, v in enumerate(graph.values())}


def _consumers(graph):
    uses = {}
    for op in graph.ops:
        for o in op.operands:
            uses.setdefault(o, []).append(op)
    return uses


def collective_rows(lowered) -> list:
    g = lowered.stages.get("partitioned")
    if g is None:
        return []
    uses = {}
    rows = []
    for (op, holder, _), c in zip(collective_ops(g), collectives(g)):
        if id(holder) not in uses:
            uses[id(holder)] = _consumers(holder)
        nxt = uses[id(holder)].get(op.result, [])
        need = next((u.name for u in nxt if u.opdef.reshards is None),
                    "the program's output" if not nxt else nxt[0].name)
        rows.append(dict(c, needed_by=need, why=op.opdef.reshards))
    return rows


def provenance(graph) -> list:
    """[(name, type, sharding text, explanation)] for each value of the propagated graph:
    the annotation that fixed it, or for each split dim the annotation the split came
    from and the ops it flowed through."""
    from ..ir.text import type_str
    why = getattr(graph, "why", {})
    notes = getattr(graph, "annotations", {})
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
    """'from <annotation> %k via op (line) -> op (line)': follow a split back to where it
    was fixed."""
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
            return f"from {notes[src]} {names[src]} via " + " -> ".join(reversed(hops))
        v, d = src, sd
    return "via " + " -> ".join(reversed(hops)) if hops else ""


def explain_lowered(lowered, file=None) -> str:
    lines = []
    rows = collective_rows(lowered)
    lines.append(f"collectives ({len(rows)}, {sum(r['bytes'] for r in rows)} bytes per device):")
    if rows:
        lines.append(f"  {'op':<18} {'axes':<14} {'bytes':>10}  {'local shape':<24} {'line':<18} needed by / why")
    for r in rows:
        shp = f"{list(r['in_shape'])}->{list(r['out_shape'])}"
        lines.append(f"  {r['op']:<18} {','.join(r['axes']):<14} {r['bytes']:>10}  {shp:<24} "
                     f"{r['loc'] or '?':<18} {r['needed_by']}: {r['why']}"
                     + (f" [in {r['inside']}]" if r.get("inside") else ""))
    g = lowered.stages.get("propagated")
    if g is not None:
        lines.append("")
        lines.append("shardings:")
        for name, typ, shs, expl in provenance(g):
            lines.append(f"  {name:<5} {typ:<16} {shs:<24} {expl}")
    text = "\n".join(lines)
    print(text, file=file)
    return text

