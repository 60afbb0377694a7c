"""The IR's text form, StableHLO-like, one op a line:

    func @step mesh<data=2, model=2>(%0: f32[8,4]{data, _}, %1: f32[4]) -> (f32[8,4]) {
      %2 = broadcast_in_dim(%1) {broadcast_dimensions=[1], shape=[8, 4]} : f32[8,4] loc("train.py:12")
      %3 = add(%0, %2) : f32[8,4]{data, _}
      return %3
    }

Attributes print sorted by name; arrays as dense<type, [values]> (small) or
dense<type, "0x..."> (raw little-endian bytes), so print -> parse -> print is exact.
A function name that is not an identifier is printed quoted: func @"my step"(...).
Control-flow ops (while, cond, scan) hold their bodies as attributes: nested functions,
printed in place (`{body=func @while_body(%0: f32[8]) -> (f32[8]) { ... }, ...}`).
The parser lives in text_parse.py.
"""
from __future__ import annotations

import json
import re

import numpy as np

from .dtypes import SHORT

INLINE_ELEMENTS = 16
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def type_str(v) -> str:
    return f"{SHORT[v.dtype]}[{','.join(map(str, v.shape))}]"


def value_type(v) -> str:
    s = type_str(v)
    if v.sharding is not None:
        s += v.sharding.text()
    return s


def attr_str(x) -> str:
    if isinstance(x, np.ndarray):
        t = f"{SHORT[x.dtype.name]}[{','.join(map(str, x.shape))}]"
        if x.size <= INLINE_ELEMENTS and x.dtype.kind != "c":     # complex: always hex
            return f"dense<{t}, {_list_str(x.reshape(-1).tolist(), x.dtype)}>"
        return f'dense<{t}, "0x{np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<")).tobytes().hex()}">'
    if isinstance(x, bool):
        return "true" if x else "false"
    if x is None:
        return "none"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return _float_str(x)
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, tuple):
        return "[" + ", ".join(attr_str(e) for e in x) + "]"
    if hasattr(x, "ops") and hasattr(x, "inputs"):        # a Graph: a control-flow body, nested
        return print_graph(x).rstrip("\n").replace("\n", "\n  ")
    raise TypeError(f"cannot print attribute {x!r}")


def _float_str(x: float) -> str:
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(float(x))


def _list_str(values, dtype) -> str:
    if dtype == np.bool_:
        return "[" + ", ".join("true" if v else "false" for v in values) + "]"
    if dtype.kind == "f" or dtype.name == "bfloat16":     # float16 / bfloat16 print exactly as float32
        return "[" + ", ".join(_float_str(float(np.asarray(v, dtype))) if dtype == np.float64
                               else _f32_str(v) for v in values) + "]"
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _f32_str(v) -> str:
    f = np.float32(v)
    if np.isnan(f) or np.isinf(f):
        return _float_str(float(f))
    return repr(float(f))


def name_values(graph) -> dict:
    names = {}
    for v in graph.values():
        names[v] = f"%{len(names)}"
    return names


def print_graph(graph, source=False, compact=False) -> str:
    """The text form (see the module docstring): exact, and parsed back by text_parse.

    For reading, not parsing: `source=True` replaces each op's loc(...) with a comment
    column, `# file:line`, and the user's code on the first op of each run of one line;
    `compact=True` (source too) folds index arithmetic -- the values computed only from
    constants, iotas and axis_index, which mask shards' padding and place slices -- into
    one line each where the program uses them, and shortens long constants."""
    if compact:
        return _print(graph, True, _Compact(graph))
    return _print(graph, source)


def _print(graph, source=False, compact=None) -> str:
    names = name_values(graph)
    attr = attr_str if compact is None else _short_attr
    mesh = ""
    if graph.mesh is not None:
        mesh = " " + graph.mesh.text()
    args = ", ".join(f"{names[v]}: {value_type(v)}" for v in graph.inputs)
    res = ", ".join(value_type(v) for v in graph.outputs)
    # a name that is not an identifier (spaces, '<lambda>'...) is quoted so the parser can read it
    name = graph.name if IDENT.fullmatch(str(graph.name)) else json.dumps(str(graph.name))
    lines = [f"func @{name}{mesh}({args}) -> ({res}) {{"]
    locs = []
    for op in graph.ops:
        if compact is not None and compact.folds(op):
            continue
        text = compact.line(op, names) if compact is not None else None
        if text is None:
            lhs = ", ".join(names[r] for r in op.results)
            operands = ", ".join(names[o] for o in op.operands)
            attrs = ""
            if op.attrs:
                attrs = " {" + ", ".join(f"{k}={attr(op.attrs[k])}" for k in sorted(op.attrs)) + "}"
            types = ", ".join(value_type(r) for r in op.results)
            loc = f" loc({json.dumps(op.loc)})" if op.loc and not source else ""
            text = f"{lhs} = {op.name}({operands}){attrs} : {types}{loc}"
        lines.append("  " + text)
        locs.append(op.loc)
    if source:
        lines[1:] = _comment_column(lines[1:], locs)
    lines.append("  return " + ", ".join(names[v] for v in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


COLUMN = 72      # where the comment column starts (a longer op line pushes its comment right)


def _comment_column(lines, locs) -> list:
    from ..errors import source_line
    out, prev = [], None
    width = min(COLUMN, max((len(ln) for ln in lines), default=0))
    for ln, loc in zip(lines, locs):
        if not loc:
            out.append(ln)
            prev = None
            continue
        note = f"# {loc}"
        if loc != prev:
            code = source_line(loc)
            if code:
                note += f"  {code}"
        out.append(f"{ln.ljust(width)}  {note}")
        prev = loc
    return out


def _short_attr(x) -> str:
    """attr_str, with arrays of more than a few elements shortened (one value when all
    are equal, else the first few) and control-flow bodies compact too."""
    if isinstance(x, np.ndarray) and x.size > INLINE_ELEMENTS:
        t = f"{SHORT[x.dtype.name]}[{','.join(map(str, x.shape))}]"
        flat = x.reshape(-1)
        if x.dtype.kind != "c" and np.all(flat == flat[0]) and not (x.dtype.kind == "f" and np.isnan(flat[0])):
            return f"dense<{t}, all {_list_str([flat[0]], x.dtype)[1:-1]}>"
        return f"dense<{t}, {_list_str(flat[:4].tolist(), x.dtype)[:-1]}, ...]>"
    if hasattr(x, "ops") and hasattr(x, "inputs"):
        return print_graph(x, compact=True).rstrip("\n").replace("\n", "\n  ")
    return attr_str(x)


# how tightly an infix symbol binds (Python's order), for the fewest parentheses
PRECEDENCE = {"**": 90, "~": 80, "neg": 80, "*": 70, "/": 70, "%": 70, "+": 60, "-": 60, "<<": 50, ">>": 50,
              "&": 40, "^": 35, "|": 30, "==": 20, "!=": 20, "<": 20, "<=": 20, ">": 20, ">=": 20}
ATOM = 100
LOWER = {">=": "<=", ">": "<"}       # x >= lo reads lo <= x in a range


class _Compact:
    """as_text(compact=True): each value computed from constants, iotas and axis_index
    alone (index arithmetic) is folded into an expression, printed once where other work
    reads it; every other op prints as usual, with long constants shortened."""

    def __init__(self, graph):
        self.index = set()
        for op in graph.ops:
            d = op.opdef
            if len(op.results) == 1 and not d.subgraphs and d.collective.reshards is None and d.collective.phase is None \
                    and not d.effect and all(o in self.index for o in op.operands):
                self.index.add(op.result)
        # an index value read by other work, or returned, keeps a line of its own
        used = {o for op in graph.ops if any(r not in self.index for r in op.results) for o in op.operands}
        outs = set(graph.outputs)
        self.rooted = {v for v in self.index if v in used or v in outs}
        self.exprs = {}

    def folds(self, op) -> bool:
        return len(op.results) == 1 and op.result in self.index and op.result not in self.rooted

    def line(self, op, names):
        if len(op.results) != 1 or op.result not in self.rooted:
            return None
        self.names = names
        return f"{names[op.result]} = {self.expr(op.result)[0]} : {value_type(op.result)}"

    def expr(self, v):
        """(text, precedence, (lhs, symbol, rhs) if a comparison)."""
        got = self.exprs.get(v)
        if got is None:
            got = self.exprs[v] = self._expr(v)
        return got

    def _expr(self, v):
        from .ops.registry import splat
        if v not in self.index:
            return self.names[v], ATOM, None
        op = v.producer
        d = op.opdef
        c = splat(v)
        if c is not None:
            text = _scalar_str(c)
            return text, ATOM if not text.startswith("-") else PRECEDENCE["neg"], None
        if not op.operands:           # iota(0), axis_index(x): the attributes that say which
            shown = [_bare(a) for k, a in sorted(op.attrs.items()) if k not in ("shape", "dtype")]
            return f"{op.name}({', '.join(shown)})", ATOM, None
        if d.fusion == "reindex" and op.operands[0].ndim == 0:
            return self.expr(op.operands[0])          # a scalar broadcast: the same value everywhere
        sym = d.infix(op.attrs) if callable(d.infix) else d.infix
        if sym is not None and len(op.operands) == 1:
            a, pa, _ = self.expr(op.operands[0])
            p = PRECEDENCE["neg" if sym == "-" else sym]
            return sym + (a if pa >= p else f"({a})"), p, None
        if sym is not None and len(op.operands) == 2:
            (a, pa, ca), (b, pb, cb) = self.expr(op.operands[0]), self.expr(op.operands[1])
            p = PRECEDENCE.get(sym, 0)
            if sym == "&" and ca and cb and ca[0] == cb[0] and ca[1] in LOWER and cb[1] in ("<", "<="):
                # (x >= lo) & (x < hi): the range lo <= x < hi
                return f"{ca[2]} {LOWER[ca[1]]} {ca[0]} {cb[1]} {cb[2]}", PRECEDENCE["<"], None
            text = f"{a if pa >= p else f'({a})'} {sym} {b if pb > p else f'({b})'}"
            return text, p, (a if pa > p else f"({a})", sym, b if pb > p else f"({b})") if p == 20 else None
        return f"{op.name}({', '.join(self.expr(o)[0] for o in op.operands)})", ATOM, None


def _bare(a) -> str:
    """An attribute as an argument: a name unquoted, names joined by commas."""
    if isinstance(a, str):
        return a
    if isinstance(a, tuple) and all(isinstance(x, str) for x in a):
        return ",".join(a)
    return attr_str(a)


def _scalar_str(c) -> str:
    c = np.asarray(c)
    if c.dtype == np.bool_:
        return "true" if c else "false"
    if c.dtype.kind in "iu":
        return str(int(c))
    if c.dtype.kind == "c":
        return repr(complex(c))
    return _float_str(float(c))
