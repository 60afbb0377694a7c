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


def print_graph(graph) -> str:
    names = name_values(graph)
    mesh = ""
    if graph.mesh is not None:
        mesh = " " + graph.mesh.text()
    args = ", ".join(f"{names[v]}: {value_type(v)}" for v in graph.inputs)
    res = ", ".join(value_type(v) for v in graph.outputs)
    # a name that is not an identifier (spaces, '<lambda>'...) is quoted so the parser can read it
    name = graph.name if IDENT.fullmatch(str(graph.name)) else json.dumps(str(graph.name))
    lines = [f"func @{name}{mesh}({args}) -> ({res}) {{"]
    for op in graph.ops:
        lhs = ", ".join(names[r] for r in op.results)
        operands = ", ".join(names[o] for o in op.operands)
        attrs = ""
        if op.attrs:
            attrs = " {" + ", ".join(f"{k}={attr_str(op.attrs[k])}" for k in sorted(op.attrs)) + "}"
        types = ", ".join(value_type(r) for r in op.results)
        loc = f" loc({json.dumps(op.loc)})" if op.loc else ""
        lines.append(f"  {lhs} = {op.name}({operands}){attrs} : {types}{loc}")
    lines.append("  return " + ", ".join(names[v] for v in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
