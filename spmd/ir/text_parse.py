"""Parse the IR's text form (see text.py) back into a Graph.

A small recursive-descent parser over one string. Every op line goes through
graph.emit, so a parsed graph is shape-checked like a traced one, and its declared
result types must agree with inference. Any malformed input raises ParseError with the
line, the column and what was expected — never another exception, never a hang.
"""
from __future__ import annotations

import json
import re

import numpy as np

from ..errors import ParseError, SpmdError
from . import dtypes
from .graph import Graph

MAX_DEPTH = 64
_NUM = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUE = re.compile(r"%\d+")
_STR = re.compile(r'"(?:[^"\\\n]|\\.)*"')


class _Cursor:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def error(self, msg):
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        snippet = self.s[self.s.rfind("\n", 0, self.i) + 1:].split("\n", 1)[0][:80]
        raise ParseError(f"line {line}, column {col}: {msg}\n  {snippet}")

    def ws(self, newlines=False):
        chars = " \t\r\n" if newlines else " \t"
        while self.i < len(self.s) and self.s[self.i] in chars:
            self.i += 1

    def peek(self, lit):
        self.ws()
        return self.s.startswith(lit, self.i)

    def accept(self, lit):
        if self.peek(lit):
            self.i += len(lit)
            return True
        return False

    def expect(self, lit, what=None):
        if not self.accept(lit):
            self.error(f"expected {what or repr(lit)}")

    def match(self, rx, what):
        self.ws()
        m = rx.match(self.s, self.i)
        if not m:
            self.error(f"expected {what}")
        self.i = m.end()
        return m.group(0)

    def integer(self, what="an integer"):
        tok = self.match(re.compile(r"-?\d+"), what)
        if len(tok) > 30:
            self.error(f"{what} {tok[:20]}... is too large")
        return int(tok)

    def eol(self):
        self.ws()
        if self.i < len(self.s) and self.s[self.i] != "\n":
            self.error("expected the end of the line")
        self.ws(newlines=True)


def parse_graph(text: str) -> Graph:
    if not isinstance(text, str):
        raise ParseError(f"parse_graph takes a str, got {type(text).__name__}")
    c = _Cursor(text)
    try:
        return _parse(c)
    except ParseError:
        raise
    except SpmdError as e:
        c.error(str(e))
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError, MemoryError) as e:
        c.error(f"{type(e).__name__}: {e}")


def _parse(c: _Cursor) -> Graph:
    c.ws(newlines=True)
    c.expect("func", "'func'")
    c.expect("@", "'@' and the function name")
    g = Graph(c.match(_IDENT, "a function name"))
    if c.accept("mesh<"):
        g.mesh = _mesh(c)
    c.expect("(")
    names = {}
    if not c.accept(")"):
        while True:
            name = c.match(_VALUE, "an argument name like %0")
            c.expect(":")
            shape, dt, sh = _type(c, g)
            if name in names:
                c.error(f"{name} is defined twice")
            names[name] = g.add_input(shape, dt, sh)
            if c.accept(")"):
                break
            c.expect(",", "',' or ')'")
    c.expect("->")
    c.expect("(")
    out_types = []
    if not c.accept(")"):
        while True:
            out_types.append(_type(c, g))
            if c.accept(")"):
                break
            c.expect(",", "',' or ')'")
    c.expect("{")
    c.eol()
    while True:
        c.ws(newlines=True)
        if c.accept("return"):
            outs = []
            if not c.peek("\n"):
                while True:
                    outs.append(_use(c, names))
                    if not c.accept(","):
                        break
            c.eol()
            break
        _op_line(c, g, names)
    c.expect("}")
    c.ws(newlines=True)
    if c.i != len(c.s):
        c.error("expected the end of the text after '}'")
    if len(outs) != len(out_types):
        c.error(f"the function declares {len(out_types)} results but returns {len(outs)}")
    for v, (shape, dt, sh) in zip(outs, out_types):
        if v.shape != shape or v.dtype != dt:
            c.error(f"a returned value is {dt}{list(v.shape)}... declared {dt}{list(shape)}")
    g.outputs = outs
    return g


def _use(c, names):
    name = c.match(_VALUE, "a value name like %3")
    if name not in names:
        c.error(f"{name} is used before it is defined")
    return names[name]


def _mesh(c):
    from ..sharding.mesh import Mesh
    axes, sizes, devices = [], [], None
    while True:
        key = c.match(_IDENT, "a mesh axis name")
        c.expect("=")
        if key == "devices" and c.peek("["):
            c.expect("[")
            devices = []
            while not c.accept("]"):
                devices.append(c.integer("a device id"))
                if not c.peek("]"):
                    c.expect(",", "',' or ']'")
        else:
            axes.append(key)
            sizes.append(c.integer("an axis size"))
        if c.accept(">"):
            break
        c.expect(",", "',' or '>'")
    if any(s < 1 or s > 1 << 20 for s in sizes):
        c.error(f"mesh axis sizes {sizes} out of range")
    if devices is not None:
        devices = np.asarray(devices).reshape(sizes) if len(devices) == int(np.prod(sizes)) else c.error(
            "the mesh's devices list has the wrong length")
    return Mesh(tuple(sizes), tuple(axes), devices)


def _type(c, g):
    short = c.match(re.compile(r"[a-z]+\d*"), "a type like f32[4,8]")
    if short not in dtypes.LONG:
        c.error(f"unknown element type {short!r} (takes {', '.join(dtypes.LONG)})")
    c.expect("[")
    shape = []
    if not c.accept("]"):
        while True:
            d = c.integer("a dimension size")
            if d < 0:
                c.error(f"negative dimension {d}")
            shape.append(d)
            if c.accept("]"):
                break
            c.expect(",", "',' or ']'")
    sh = None
    if c.s.startswith("{", c.i):
        start = c.i
        end = c.s.find("}", start)
        if end < 0 or "\n" in c.s[start:end]:
            c.error("unterminated sharding")
        c.i = end + 1
        m = re.compile(r" partial\([\w,]*\)").match(c.s, c.i)
        if m:
            c.i = m.end()
        if g.mesh is None:
            c.error("a sharding annotation needs a mesh<...> in the function header")
        from ..sharding.spec import Sharding
        sh = Sharding.from_text(c.s[start:c.i], g.mesh).for_rank(len(shape))
    return tuple(shape), dtypes.LONG[short], sh


def _op_line(c, g, names):
    results = []
    while True:
        results.append(c.match(_VALUE, "a result name like %3 (or 'return')"))
        if not c.accept(","):
            break
    c.expect("=")
    name = c.match(_IDENT, "an op name")
    from .ops.registry import REGISTRY
    if name not in REGISTRY:
        c.error(f"unknown op {name!r}")
    c.expect("(")
    operands = []
    if not c.accept(")"):
        while True:
            operands.append(_use(c, names))
            if c.accept(")"):
                break
            c.expect(",", "',' or ')'")
    attrs = {}
    if c.accept("{"):
        if not c.accept("}"):
            while True:
                key = c.match(_IDENT, "an attribute name")
                if key in attrs:
                    c.error(f"attribute {key} given twice")
                c.expect("=")
                attrs[key] = _attr(c, 0)
                if c.accept("}"):
                    break
                c.expect(",", "',' or '}'")
    c.expect(":")
    types = []
    while True:
        types.append(_type(c, g))
        if not c.accept(","):
            break
    loc = None
    if c.accept("loc("):
        loc = json.loads(c.match(_STR, "a quoted location"))
        c.expect(")")
    c.eol()
    if len(types) != len(results):
        c.error(f"{len(results)} results but {len(types)} types")
    for r in results:
        if r in names:
            c.error(f"{r} is defined twice")
    try:
        out = g.emit(name, *operands, loc=loc, **attrs)
    except TypeError as e:
        c.error(f"{name}: bad attributes: {e}")
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(results):
        c.error(f"{name} has {len(outs)} results, the line names {len(results)}")
    for r, v, (shape, dt, sh) in zip(results, outs, types):
        if v.shape != shape or v.dtype != dt:
            c.error(f"{name} gives {dtypes.SHORT[v.dtype]}{list(v.shape)} but the line declares "
                    f"{dtypes.SHORT[dt]}{list(shape)}")
        v.sharding = sh
        names[r] = v


def _attr(c, depth):
    if depth > MAX_DEPTH:
        c.error("attribute nested too deeply")
    c.ws()
    if c.accept("["):
        items = []
        if not c.accept("]"):
            while True:
                items.append(_attr(c, depth + 1))
                if c.accept("]"):
                    break
                c.expect(",", "',' or ']'")
        return tuple(items)
    if c.accept("dense<"):
        shape, dt, _ = _type(c, Graph())
        c.expect(",")
        if c.peek('"'):
            hexs = json.loads(c.match(_STR, "a hex string"))
            if not hexs.startswith("0x"):
                c.error("dense hex data must start with 0x")
            raw = bytes.fromhex(hexs[2:])
            arr = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<")).astype(dt)
        else:
            flat = _attr(c, depth + 1)
            if not isinstance(flat, tuple):
                c.error("dense data must be a list or a hex string")
            arr = np.array([_scalar(c, x, dt) for x in flat], dtype=dt)
        c.expect(">")
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if arr.size != n:
            c.error(f"dense data has {arr.size} elements, the type {list(shape)} needs {n}")
        return arr.reshape(shape)
    if c.peek('"'):
        return json.loads(c.match(_STR, "a string"))
    for word, val in (("true", True), ("false", False), ("none", None)):
        if re.compile(word + r"\b").match(c.s, c.i):
            c.i += len(word)
            return val
    tok = c.match(_NUM, "an attribute value")
    if len(tok) > 400:
        c.error("number too long")
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    return float(tok)


def _scalar(c, x, dt):
    if dt == "bool":
        if not isinstance(x, bool):
            c.error(f"expected true/false in bool dense data, got {x!r}")
        return x
    if isinstance(x, (bool, tuple, str)) or x is None:
        c.error(f"expected a number in dense data, got {x!r}")
    if dt in dtypes.INTS:
        if not isinstance(x, int):
            c.error(f"expected an integer in {dt} dense data, got {x!r}")
        info = np.iinfo(dt)
        if not info.min <= x <= info.max:
            c.error(f"{x} does not fit {dt}")
    return x
