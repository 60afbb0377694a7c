"""Parse the IR's text form (see text.py) back into a Graph.

A small recursive-descent parser over one string. Every op line goes through
graph.emit, so a parsed graph is shape-checked like a traced one, and its declared
result types must agree with inference. Any malformed input raises ParseError with the
line, the column and what was expected — never another exception, never a hang:
sizes are bounded before anything is allocated (dimensions, meshes, dense data) and
nesting is bounded before recursion gets deep.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

from ..errors import ParseError, SpmdError
from . import dtypes
from .graph import Graph

MAX_DEPTH = 64                 # nesting of [...] in attributes
MAX_INT = 2 ** 63 - 1          # every integer in the text fits an int64
MAX_ELEMENTS = 2 ** 62         # elements of one value (so byte counts fit an int64 too)
MAX_DEVICES = 1 << 20          # devices of a mesh (its device array is allocated)

_INT = re.compile(r"-?\d+")
_NUM = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE = re.compile(r"%\d+")
_STR = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_DTYPE = re.compile(r"[a-z]+\d*")
_WORD_END = re.compile(r"(?![A-Za-z0-9_])")


class _Cursor:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def fail(self, msg, at=None) -> ParseError:
        at = self.i if at is None else at
        start = self.s.rfind("\n", 0, at) + 1
        line = self.s.count("\n", 0, at) + 1
        col = at - start + 1
        snippet = self.s[start:].split("\n", 1)[0]
        where = f"\n  {snippet[:100]!s}"
        if col <= 100:
            where += "\n  " + " " * (col - 1) + "^"
        e = ParseError(f"line {line}, column {col}: {msg}{where}")
        e.line, e.column = line, col
        return e

    def error(self, msg, at=None):
        raise self.fail(msg, at)

    def ws(self, newlines=False):
        chars = " \t\r\n" if newlines else " \t\r"
        while self.i < len(self.s) and self.s[self.i] in chars:
            self.i += 1

    def here(self):
        """The position of the next token."""
        self.ws()
        return self.i

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

    def word(self, w):
        """Accept the keyword `w` only as a whole word (`true`, not `trueish`)."""
        self.ws()
        if self.s.startswith(w, self.i) and _WORD_END.match(self.s, self.i + len(w)):
            self.i += len(w)
            return True
        return False

    def integer(self, what="an integer", lo=-MAX_INT, hi=MAX_INT):
        at = self.here()
        tok = self.match(_INT, what)
        if len(tok) > 20:
            self.error(f"{what} {tok[:20]}... is too large", at)
        v = int(tok)
        if not lo <= v <= hi:
            self.error(f"{what} {v} is out of range [{lo}, {hi}]", at)
        return v

    def string(self, what="a quoted string"):
        at = self.here()
        tok = self.match(_STR, what)
        try:
            return json.loads(tok)
        except ValueError as e:
            self.error(f"bad escape in {what}: {e}", at)

    def eol(self):
        self.ws()
        if self.i < len(self.s) and self.s[self.i] != "\n":
            self.error("expected the end of the line")
        self.ws(newlines=True)


def parse_graph(text: str) -> Graph:
    """Text -> Graph, the inverse of print_graph. Raises ParseError on malformed text."""
    if not isinstance(text, str):
        raise ParseError(f"parse_graph takes a str, got {type(text).__name__}")
    c = _Cursor(text)
    try:
        return _parse(c)
    except ParseError:
        raise
    except SpmdError as e:
        raise c.fail(str(e)) from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            ZeroDivisionError, RecursionError, MemoryError) as e:
        # a safety net: every expected problem is reported above with its own message
        raise c.fail(f"{type(e).__name__}: {e}") from None


def _parse(c: _Cursor) -> Graph:
    c.ws(newlines=True)
    if not c.word("func"):
        c.error("expected 'func'")
    g = _func(c, 0)
    c.ws(newlines=True)
    if c.i != len(c.s):
        c.error("expected the end of the text after '}'")
    return g


def _func(c: _Cursor, depth) -> Graph:
    """A function after its 'func' keyword, up to its closing '}' (a control-flow op's
    body is a nested one, an attribute; its value names are its own)."""
    c.expect("@", "'@' and the function name")
    g = Graph(c.string("a function name") if c.peek('"') else c.match(_IDENT, "a function name"))
    if c.accept("mesh<"):
        g.mesh = _mesh(c)
    c.expect("(")
    names = {}
    if not c.accept(")"):
        while True:
            at = c.here()
            name = c.match(_VALUE, "an argument name like %0")
            if name in names:
                c.error(f"{name} is defined twice", at)
            c.expect(":")
            shape, dt, sh = _type(c, g)
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
        ret_at = c.i
        if c.word("return"):
            outs = []
            if c.i < len(c.s) and not c.peek("\n"):
                while True:
                    outs.append(_use(c, names))
                    if not c.accept(","):
                        break
            c.eol()
            break
        _op_line(c, g, names, depth)
    c.expect("}", "'}' closing the function")
    if len(outs) != len(out_types):
        c.error(f"the function header declares {len(out_types)} results but return gives {len(outs)}", ret_at)
    for k, (v, decl) in enumerate(zip(outs, out_types)):
        got = (v.shape, v.dtype, v.sharding)
        if got != decl:
            c.error(f"returned value {k} is {_type_text(*got)} but the function header declares "
                    f"{_type_text(*decl)}", ret_at)
    g.outputs = outs
    return g


def _use(c, names):
    at = c.here()
    name = c.match(_VALUE, "a value name like %3")
    if name not in names:
        c.error(f"{name} is used before it is defined", at)
    return names[name]


def _type_text(shape, dt, sh=None):
    return f"{dtypes.SHORT[dt]}[{','.join(map(str, shape))}]" + (sh.text() if sh is not None else "")


def _mesh(c):
    """After 'mesh<': axis=size, ..., optionally devices=[...], then '>'."""
    from .mesh import Mesh
    start = c.i
    axes, sizes, devices = [], [], None
    if not c.accept(">"):
        while True:
            key = c.match(_AXIS, "a mesh axis name")
            c.expect("=")
            if key == "devices" and c.peek("["):
                if devices is not None:
                    c.error("the mesh's devices are given twice")
                c.expect("[")
                devices = []
                if not c.accept("]"):
                    while True:
                        devices.append(c.integer("a device id", 0, MAX_DEVICES))
                        if len(devices) > MAX_DEVICES:
                            c.error(f"a mesh has at most {MAX_DEVICES} devices")
                        if c.accept("]"):
                            break
                        c.expect(",", "',' or ']'")
            else:
                axes.append(key)
                sizes.append(c.integer("a mesh axis size", 1, MAX_DEVICES))
            if c.accept(">"):
                break
            c.expect(",", "',' or '>'")
    n = math.prod(sizes)
    if n > MAX_DEVICES:       # checked before Mesh allocates its device array
        c.error(f"a mesh of {n} devices is larger than the {MAX_DEVICES} spmd accepts", start)
    if devices is not None and len(devices) != n:
        c.error(f"the mesh's devices list has {len(devices)} entries, its axes need {n}", start)
    try:
        return Mesh(tuple(sizes), tuple(axes), None if devices is None else np.array(devices).reshape(sizes))
    except SpmdError as e:
        c.error(str(e), start)


def _type(c, g, sharding=True):
    """f32[4,8] with, where allowed, a sharding suffix {a, _} partial(b)."""
    at = c.here()
    short = c.match(_DTYPE, "a type like f32[4,8]")
    if short not in dtypes.LONG:
        c.error(f"unknown element type {short!r} (takes {', '.join(dtypes.LONG)})", at)
    if not c.s.startswith("[", c.i):
        c.error("expected '[' and the dimensions")
    c.i += 1
    shape = []
    if not c.accept("]"):
        while True:
            shape.append(c.integer("a dimension size", 0, MAX_ELEMENTS))
            if c.accept("]"):
                break
            c.expect(",", "',' or ']'")
    if math.prod(shape) > MAX_ELEMENTS:
        c.error(f"{short}{shape} has more than {MAX_ELEMENTS} elements", at)
    sh = None
    if c.s.startswith("{", c.i):       # no space: '{' after a space opens the attributes or the body
        if not sharding:
            c.error("a sharding is not allowed here")
        sh = _sharding(c, g, len(shape))
    return tuple(shape), dtypes.LONG[short], sh


def _sharding(c, g, ndim):
    """{a, _, (b,c)} partial(d): checked token by token, then built by Sharding.from_text."""
    start = c.i
    c.i += 1
    if not c.accept("}"):
        while True:
            if c.accept("("):
                while True:
                    c.match(_AXIS, "a mesh axis name")
                    if c.accept(")"):
                        break
                    c.expect(",", "',' or ')' in the sharding")
            else:
                c.match(_AXIS, "a mesh axis name, '_' or '(' in the sharding")
            if c.accept("}"):
                break
            c.expect(",", "',' or '}' in the sharding")
    if c.accept("partial("):
        if not c.accept(")"):
            while True:
                c.match(_AXIS, "a mesh axis name in partial(...)")
                if c.accept(")"):
                    break
                c.expect(",", "',' or ')' in partial(...)")
    if g is None or g.mesh is None:
        c.error("a sharding annotation needs a mesh<...> in the function header", start)
    from .mesh import Sharding
    try:
        return Sharding.from_text(c.s[start:c.i], g.mesh).for_rank(ndim)
    except SpmdError as e:
        c.error(str(e), start)


def _op_line(c, g, names, depth=0):
    start = c.here()
    results = []
    while True:
        at = c.here()
        r = c.match(_VALUE, "a result name like %3 (or 'return')")
        if r in names or r in results:
            c.error(f"{r} is defined twice", at)
        results.append(r)
        if not c.accept(","):
            break
    c.expect("=")
    name_at = c.here()
    name = c.match(_IDENT, "an op name")
    from .ops.registry import REGISTRY
    if name not in REGISTRY:
        c.error(f"unknown op {name!r}", name_at)
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
                at = c.here()
                key = c.match(_IDENT, "an attribute name")
                if key in attrs:
                    c.error(f"attribute {key} given twice", at)
                if key in ("name", "loc"):    # graph.emit's own parameters
                    c.error(f"{key!r} is not an attribute name spmd allows", at)
                c.expect("=")
                attrs[key] = _attr(c, depth)
                if c.accept("}"):
                    break
                c.expect(",", "',' or '}'")
    c.expect(":")
    types = []
    while True:
        types.append((c.here(), _type(c, g)))
        if not c.accept(","):
            break
    loc = None
    if c.accept("loc("):
        loc = c.string("a quoted location like \"file.py:12\"")
        c.expect(")")
    c.eol()
    if len(types) != len(results):
        c.error(f"the line names {len(results)} results but gives {len(types)} types", start)
    try:
        out = g.emit(name, *operands, loc=loc, **attrs)
    except SpmdError as e:
        c.error(str(e), name_at)
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(results):
        c.error(f"{name} has {len(outs)} results, the line names {len(results)}", start)
    for r, v, (at, (shape, dt, sh)) in zip(results, outs, types):
        if v.shape != shape or v.dtype != dt:
            c.error(f"{name} gives {_type_text(v.shape, v.dtype)} but the line declares "
                    f"{_type_text(shape, dt)}", at)
        v.sharding = sh
        names[r] = v


def _attr(c, depth):
    if depth > MAX_DEPTH:
        c.error("attribute nested too deeply")
    at = c.here()
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
        return _dense(c)
    if c.word("func"):                      # a nested function: a control-flow body
        return _func(c, depth + 1)
    if c.peek('"'):
        return c.string()
    for word, val in (("true", True), ("false", False), ("none", None)):
        if c.word(word):
            return val
    return _number(c, at, "an attribute value")


def _number(c, at, what):
    tok = c.match(_NUM, what)
    if not _WORD_END.match(c.s, c.i):
        c.error(f"expected {what}", at)
    if len(tok) > 400:
        c.error("number too long", at)
    if _INT.fullmatch(tok):
        v = int(tok)
        if not -MAX_INT - 1 <= v <= 2 * MAX_INT + 1:       # int64 .. uint64
            c.error(f"integer {tok[:20]}{'...' if len(tok) > 20 else ''} does not fit an int64 or uint64", at)
        return v
    v = float(tok)
    if math.isinf(v) and "inf" not in tok:
        c.error(f"{tok[:20]} does not fit a float64", at)
    return v


def _dense(c):
    """After 'dense<': type, then [flat values] or "0x<little-endian bytes>", then '>'."""
    shape, dt, _ = _type(c, None, sharding=False)
    n = math.prod(shape)
    c.expect(",")
    at = c.here()
    if c.peek('"'):
        hexs = c.string("a hex string")
        if not re.fullmatch(r"0x(?:[0-9a-fA-F]{2})*", hexs):
            c.error("dense hex data must be '0x' and pairs of hex digits", at)
        raw = bytes.fromhex(hexs[2:])
        need = n * np.dtype(dt).itemsize
        if len(raw) != need:
            c.error(f"dense hex data has {len(raw)} bytes, {_type_text(shape, dt)} needs {need}", at)
        if dt == "bool" and raw and max(raw) > 1:
            c.error("bool dense data bytes must be 00 or 01", at)
        arr = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<")).astype(dt)
    else:
        c.expect("[", "'[' or a hex string with the dense data")
        flat = []
        if not c.accept("]"):
            while True:
                flat.append(_scalar(c, dt))
                if len(flat) > n:
                    break
                if c.accept("]"):
                    break
                c.expect(",", "',' or ']'")
        if len(flat) != n:
            c.error(f"dense data has {'more than ' if len(flat) > n else ''}{len(flat)} elements, "
                    f"{_type_text(shape, dt)} needs {n}", at)
        arr = np.array(flat, dtype=dt)
    c.expect(">")
    return arr.reshape(shape)


def _scalar(c, dt):
    at = c.here()
    if dt == "bool":
        for word, val in (("true", True), ("false", False)):
            if c.word(word):
                return val
        c.error("expected true or false in bool dense data")
    x = _number(c, at, f"a number in {dt} dense data")
    if dt in dtypes.INTS:
        info = np.iinfo(dt)
        if not isinstance(x, int):
            c.error(f"expected an integer in {dt} dense data, got {x!r}", at)
        if not info.min <= x <= info.max:
            c.error(f"{x} does not fit {dt}", at)
        return x
    with np.errstate(over="ignore"):
        y = np.dtype(dt).type(x)
    if math.isfinite(x) and not np.isfinite(y):
        c.error(f"{x} does not fit {dt}", at)
    return y
