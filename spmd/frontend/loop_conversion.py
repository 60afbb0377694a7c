"""Python loops on traced data as one traced while loop, not graph breaks.

    t = 4.0
    while loss(w - t * g) > f - 0.5 * t * (g @ g):      # the test needs the data
        t *= 0.5

    for i in range(maxiter):                              # a static range ...
        ...
        if np.sqrt(rs_new) < tol:                         # ... left on the data
            break
        ...

Where tracing a jitted function needs a value for such a loop's test (jit asks
`loop_needing_value`), jit traces instead the function with that loop rewritten from its
source (`convert`; a loop of a function it calls by a global name: the caller runs with a
copy of its globals where that name is the rewritten function): the loop's test and body become functions of the loop's state, run by
`run_while` / `run_for_break` through spmd.while_loop (and spmd.cond for the statements
after the `if ...: break`). The state is the names the body assigns that the loop or the
code after it reads (`_carried`). Python numbers in it stay weak (NEP 50: a Python float
times a float32 array is float32), and jit returns a weak number as numpy's Python number.

A test's `and`, `or` and `not` (`while err > tol and it < maxit:`) become calls that take
traced values (`all_of`, `any_of`, `not_`): Python's short circuit cannot branch on a
traced operand, so from one on the rest are evaluated too (a test runs nothing the
rewrite lets change state) and combined with logical and / or, which is the test's truth.

The rewrite refuses (`Refused`; jit then keeps the graph breaks) what it cannot keep
exact: return / yield / continue / another break / try / with / global / nonlocal / del /
a def or lambda / an attribute store in the body, an `else:` on the loop, calls that
change Python objects or draw random numbers (list.append, rng.normal, print), a state
that is not numbers or arrays, a carry whose dtype, shape or weakness changes, a name both
rebound and written in place. An array written in place (x += v, x[i] = v) is carried and
its final value written into the array the name held before the loop (aliases see it, as
in numpy). Any failure tracing the rewritten function makes jit trace the original.
"""
from __future__ import annotations

import ast
import copy
import dis
import sys
import threading
import types

import numpy as np

from . import control, core
from .functionalize import is_scalar
from .numpy_buffers import NumpyBuffer
from .returned_scalars import code_position, source_tree
from ..errors import ConcreteValueError, SpmdError
from .trace import Tracer, current_trace

MODULE = "__spmd_loops"

# method calls that change a Python object or draw random numbers: traced once, they would
# run once instead of once per iteration
CHANGING = {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard",
            "setdefault", "popitem", "sort", "reverse", "fill", "resize", "put", "itemset", "write",
            "send", "shuffle", "permutation", "seed", "set_state"}
CHANGING_FUNCTIONS = {"print", "next", "setattr", "delattr", "exec", "eval", "input", "open", "iter",
                      "globals", "locals", "vars"}
REFUSED_NODES = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Continue, ast.Try, ast.With,
                 ast.AsyncWith, ast.Global, ast.Nonlocal, ast.Delete, ast.FunctionDef, ast.AsyncFunctionDef,
                 ast.Lambda, ast.ClassDef, ast.NamedExpr, ast.Import, ast.ImportFrom, ast.Starred,
                 ast.AsyncFor)


class Refused(Exception):
    """This loop is not converted: jit keeps the graph breaks."""


# -- finding the loop whose test needs a value -----------------------------------------------------
def _function_node(code):
    """The FunctionDef of `code` in its file's syntax tree (None: no source)."""
    tree = source_tree(code.co_filename)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == code.co_name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if first == code.co_firstlineno:
                return node
    return None


def _span(node):
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _contains(node, pos):
    line, end_line, col, end_col = pos
    (l0, c0), (l1, c1) = _span(node)
    return (l0, c0) <= (line, col) and (end_line, end_col) <= (l1, c1)


def loop_key(node):
    return (node.lineno, node.col_offset)


def _break_if(loop):
    """The top-level `if test: break` of a `for i in range(...)` body, else None."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"
            and 1 <= len(loop.iter.args) <= 3 and not loop.iter.keywords):
        return None
    ifs = [s for s in loop.body if isinstance(s, ast.If) and not s.orelse and len(s.body) == 1
           and isinstance(s.body[0], ast.Break)]
    return ifs[0] if len(ifs) == 1 else None


def loop_needing_value(codes, tb=None):
    """(path, loop key) where the innermost user function of the trace (the traced
    function, as written or converted: a key of `codes`, or a function it calls by a
    global name, and so on inward) is evaluating the test of a while loop or of a for
    loop's `if ...: break` that `convert` could take; path: the global names of the calls
    from the traced function to it, () for the traced function itself. None otherwise.
    The frames are the current stack, or traceback `tb`'s (an error raised there)."""
    if tb is None:
        frames, f = [], sys._getframe(1)
        while f is not None and f.f_code not in codes:
            frames.append((f, f.f_lasti))
            f = f.f_back
        if f is None:
            return None
        frames = [(f, f.f_lasti)] + frames[::-1]
    else:
        frames = []
        while tb is not None:
            if tb.tb_frame.f_code in codes:
                frames = []
            frames.append((tb.tb_frame, tb.tb_lasti))
            tb = tb.tb_next
        if not frames or frames[0][0].f_code not in codes:
            return None
    path, (frame, lasti) = (), frames[0]
    at = frame                      # the frame whose position is asked (frame's, or a branch's of it)
    inward = True
    for inner, inner_lasti in frames[1:]:
        name = inner.f_code.co_name
        if name.startswith("__spmd_") and inner.f_code in at.f_code.co_consts:
            at, lasti = inner, inner_lasti      # a converted if's branch (run by spmd.cond): frame's lines
            continue
        called = frame.f_globals.get(name)
        if inward and at is frame and isinstance(called, types.FunctionType) and called.__code__ is inner.f_code:
            path, frame, lasti = path + (name,), inner, inner_lasti
            at = frame
        else:
            inward = False          # (spmd's own frames, a method, a function passed in)
    code = codes.get(frame.f_code) or _ORIGINAL.get(frame.f_code, frame.f_code)
    pos = code_position(at.f_code, lasti)
    fn_node = _function_node(code)
    if pos is None or fn_node is None:
        return None
    breaks = set()
    for node in ast.walk(fn_node):
        if isinstance(node, ast.While) and _contains(node.test, pos):
            return path, loop_key(node)
        brk = _break_if(node) if isinstance(node, ast.For) else None
        if brk is not None:
            breaks.add(id(brk))
            if _contains(brk.test, pos):
                return path, loop_key(node)
    for node in ast.walk(fn_node):
        if isinstance(node, ast.If) and id(node) not in breaks and _contains(node.test, pos) and _if_takes(node):
            return path, loop_key(node)
    return None


def _if_takes(node) -> bool:
    """Could visit_If rewrite this if statement (checked before asking for it: a refusal
    drops every conversion of the function)?"""
    try:
        _check_body(node.body + node.orelse)
        assigned, inplace = _stores(node.body + node.orelse)
    except Refused:
        return False
    return not assigned & inplace


# -- static analysis -------------------------------------------------------------------------------
def _stores(nodes):
    """(names assigned, names written in place: x += v, x[i] = v) by statements `nodes`."""
    assigned, inplace, aug = set(), set(), set()
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                inplace.add(n.target.id)
                aug.add(id(n.target))
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
                if not isinstance(n.value, ast.Name):
                    raise Refused("a write into something other than a named array")
                inplace.add(n.value.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                raise Refused("an attribute store")
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in aug:
                assigned.add(n.id)
    return assigned, inplace


def _reads(node):
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
    return out


def _definite(stmt):
    """Names surely bound once `stmt` has run."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {m.id for t in targets for m in ast.walk(t) if isinstance(m, ast.Name)
                and isinstance(m.ctx, ast.Store)}
    if isinstance(stmt, ast.If):
        return _definite_all(stmt.body) & _definite_all(stmt.orelse)
    return set()


def _definite_all(stmts):
    out = set()
    for s in stmts:
        out |= _definite(s)
    return out


def _exposed(stmts, defined=()):
    """Names `stmts` may read before they assign them (a value from before)."""
    defined, out = set(defined), set()
    for s in stmts:
        out |= _reads(s) - defined
        defined |= _definite(s)
    return out


def _check_body(nodes, allowed_break=None):
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, REFUSED_NODES):
                raise Refused(f"{type(n).__name__} in the loop")
            if isinstance(n, ast.Break) and n is not allowed_break:
                raise Refused("a break the conversion does not take")
            if isinstance(n, (ast.For, ast.While)) and n.orelse:
                raise Refused("a loop with else:")
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name) and f.id in CHANGING_FUNCTIONS:
                    raise Refused(f"{f.id}() in the loop")
                if isinstance(f, ast.Attribute) and f.attr in CHANGING:
                    raise Refused(f".{f.attr}() in the loop")
                if any(isinstance(m, ast.Attribute) and m.attr == "random" or isinstance(m, ast.Name)
                       and m.id == "random" for m in ast.walk(f)):
                    raise Refused("random numbers in the loop")


def _read_after(fn_node, loop):
    """Names read by code that runs after `loop`: below it, or anywhere in a loop around it."""
    out = set()
    (_, _), end = _span(loop)
    for n in ast.walk(fn_node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and (n.lineno, n.col_offset) >= end:
            out.add(n.id)
    for outer in ast.walk(fn_node):
        if isinstance(outer, (ast.For, ast.While)) and outer is not loop and \
                any(n is loop for n in ast.walk(outer)):
            out |= _reads(outer)
    return out


def _loop_reads(loop):
    out = set()
    for part in [loop.test if isinstance(loop, ast.While) else loop.iter] + loop.body:
        out |= _reads(part)
    return sorted(out)


def _carried(fn_node, loop, body, head_reads):
    assigned, inplace = _stores(body)
    live = head_reads | _exposed(body) | _read_after(fn_node, loop)
    both = assigned & inplace & live
    if both:          # (which array a write goes into would depend on the iteration)
        raise Refused(f"{sorted(both)} both rebound and written in place in the loop")
    return sorted((assigned | inplace) & live), sorted(inplace & live)


# -- the rewrite -----------------------------------------------------------------------------------
def _parse(src, loc):
    stmts = ast.parse(src).body
    for s in stmts:
        for n in ast.walk(s):
            if "lineno" in n._attributes:
                ast.copy_location(n, loc)
                n.end_lineno, n.end_col_offset = loc.end_lineno, loc.end_col_offset
    return stmts


def _tuple(names):
    return "(" + "".join(f"{n}, " for n in names) + ")"


def _truth_ops(node):
    """Test `node` with its and / or / not (and theirs, recursively) as calls of
    all_of / any_of / not_; the operands after the first are passed unevaluated (lambdas)."""
    def call(fn, args):
        f = ast.Attribute(ast.Name(MODULE, ast.Load()), fn, ast.Load())
        return ast.copy_location(ast.Call(f, args, []), node)
    if isinstance(node, ast.BoolOp):
        first, *rest = [_truth_ops(v) for v in node.values]
        none = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        later = [ast.copy_location(ast.Lambda(none, v), v) for v in rest]
        return call("all_of" if isinstance(node.op, ast.And) else "any_of", [first] + later)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return call("not_", [_truth_ops(node.operand)])
    return node


class _Rewriter(ast.NodeTransformer):
    def __init__(self, fn_node, keys):
        self.fn_node, self.keys, self.done, self.n = fn_node, keys, set(), 0

    def visit_While(self, node):
        if loop_key(node) not in self.keys:
            return self.generic_visit(node)
        if node.orelse:
            raise Refused("a while loop with else:")
        original = node
        _check_body([node.test] + node.body)
        names, inplace = _carried(self.fn_node, node, node.body, _reads(node.test))
        reads = _loop_reads(node)
        # an if on data in the body, rewritten where it is (in the function's tree, so its
        # analysis sees this loop around it); this loop's own was done as written
        node = self.generic_visit(node)
        k, self.n = self.n, self.n + 1
        st = _tuple(names)
        cond = _parse(f"def __spmd_cond{k}(__spmd_s):\n    {st} = __spmd_s\n    return 0\n", node)
        cond[0].body[-1].value = _truth_ops(node.test)
        body = _parse(f"def __spmd_body{k}(__spmd_s):\n    {st} = __spmd_s\n    return {st}\n", node)
        body[0].body[1:1] = node.body
        call = _parse(f"{st} = {MODULE}.run_while(__spmd_cond{k}, __spmd_body{k}, "
                      f"{MODULE}.state(locals(), {names!r}, {inplace!r}, {reads!r}))\n", node)
        self.done.add(loop_key(original))
        return cond + body + call

    def visit_If(self, node):
        if loop_key(node) not in self.keys:
            return self.generic_visit(node)
        original = node
        branches = node.body + node.orelse
        _check_body(branches)
        assigned, inplace = _stores(branches)
        live = _exposed(node.body) | _exposed(node.orelse) | _read_after(self.fn_node, node)
        both = assigned & inplace & live
        if both:
            raise Refused(f"{sorted(both)} both rebound and written in place in the if statement")
        names, inplace = sorted((assigned | inplace) & live), sorted(inplace & live)
        definite = sorted(_definite_all(node.body) & _definite_all(node.orelse))
        reads = sorted(_reads(node))
        node = self.generic_visit(node)                 # (an elif on data: an if in its else)
        k, self.n = self.n, self.n + 1
        st = _tuple(names)
        out = []
        for part, stmts in (("then", node.body), ("else", node.orelse)):
            fdef = _parse(f"def __spmd_{part}{k}(__spmd_s):\n    {st} = __spmd_s\n    return {st}\n", node)
            fdef[0].body[1:1] = stmts
            out += fdef
        call = _parse(f"{st} = {MODULE}.run_if(0, __spmd_then{k}, __spmd_else{k}, locals(), {names!r}, "
                      f"{inplace!r}, {definite!r}, {reads!r})\n", node)
        call[0].value.args[0] = _truth_ops(node.test)
        self.done.add(loop_key(original))
        return out + call

    def visit_For(self, node):
        if loop_key(node) not in self.keys:
            return self.generic_visit(node)
        brk = _break_if(node)
        if brk is None or node.orelse:
            raise Refused("not a for loop over range() with one top-level if ...: break")
        _check_body([node.iter] + node.body, brk.body[0])
        at = node.body.index(brk)
        before, after = node.body[:at], node.body[at + 1:]
        target = node.target.id
        names, inplace = _carried(self.fn_node, node, node.body, {target})
        index_read = target in names or target in _read_after(self.fn_node, node)
        names = [n for n in names if n != target]
        after_assigned, _ = _stores(after)
        if (_exposed(after) & after_assigned) - set(names):
            raise Refused("a name of the loop read and then assigned after the break")
        k, self.n = self.n, self.n + 1
        st = _tuple(names)
        body = _parse(f"def __spmd_body{k}(__spmd_i, __spmd_s):\n    {st} = __spmd_s\n    {target} = __spmd_i\n"
                      f"    __spmd_b = 0\n"
                      f"    def __spmd_rest{k}(__spmd_s):\n        {st} = __spmd_s\n        return {st}\n"
                      f"    return __spmd_b, {MODULE}.unless(__spmd_b, __spmd_rest{k}, {st})\n", node)
        fdef = body[0]
        fdef.body[2].value = _truth_ops(brk.test)
        fdef.body[3].body[1:1] = after
        fdef.body[2:2] = before
        out = _tuple(names + [target]) if index_read else st
        call = _parse(f"{out} = {MODULE}.run_for_break(range(0), __spmd_body{k}, "
                      f"{MODULE}.state(locals(), {names!r}, {inplace!r}, {_loop_reads(node)!r}), "
                      f"{index_read!r})\n", node)
        call[0].value.args[0] = node.iter
        self.done.add(loop_key(node))
        return body + call


_lock = threading.Lock()
_converted = {}         # (code, loop keys) -> the rewritten function's code, or the Refused
_ORIGINAL = {}          # a rewritten function's code -> the code as written


def convertible(fn) -> bool:
    """Is fn a Python function (or a bound method of one), whose source may be rewritten?"""
    return isinstance(getattr(fn, "__func__", fn), types.FunctionType)


def convert(fn, loops):
    """fn with the loops `loops` rewritten: (path, loop key) pairs as loop_needing_value
    gives, a loop of fn itself (path ()) or of a function it calls by a global name (a
    path of those names): fn then runs with its globals copied and that name bound to the
    converted function. Refused where it cannot be."""
    own = frozenset(k for p, k in loops if not p)
    inner = {}
    for p, k in sorted(loops):
        if p:
            inner.setdefault(p[0], set()).add((p[1:], k))
    if isinstance(fn, types.MethodType):
        return types.MethodType(convert(fn.__func__, loops), fn.__self__)
    g = fn.__globals__
    if inner:
        if _writes_globals(fn.__code__):
            raise Refused(f"{fn.__name__} assigns globals: a copy of them would not see it")
        g = dict(g)
        for name, sub in inner.items():
            called = g.get(name)
            if not isinstance(called, types.FunctionType):
                raise Refused(f"{name} is no longer a Python function")
            g[name] = convert(called, frozenset(sub))
    return _with_loops(fn, own, g)


def _writes_globals(code) -> bool:
    return any(i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") for i in dis.get_instructions(code))


def _with_loops(fn, keys, g):
    """fn with the loops at `keys` (loop_key) rewritten, running with globals g."""
    code = fn.__code__
    if not keys:
        got = code
    else:
        with _lock:
            got = _converted.get((code, keys))
            if got is None:
                try:
                    got = _rewrite(code, keys)
                except Refused as e:
                    got = e
                except SyntaxError as e:
                    got = Refused(f"the rewritten source does not compile: {e}")
                _converted[(code, keys)] = got
                if isinstance(got, types.CodeType):
                    _ORIGINAL[got] = code
        if isinstance(got, Refused):
            raise got
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    closure = tuple(cells[n] if n in cells else types.CellType(sys.modules[__name__])
                    for n in got.co_freevars)
    new = types.FunctionType(got, g, fn.__name__, fn.__defaults__, closure or None)
    new.__kwdefaults__, new.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    new.__spmd_original__ = fn
    return new


def _rewrite(code, keys):
    fn_node = _function_node(code)
    if fn_node is None:
        raise Refused("no source")
    fn_node = _copy(fn_node)
    fn_node.decorator_list = []
    # the file's text now must be the function's: compiled as it is, it has its names,
    # constants and lines (not its bytes: how CPython compiles a call varies with context)
    if _fingerprint(_compiled(_copy(fn_node), code)) != _fingerprint(code):
        raise Refused("the source file does not match the function (edited since?)")
    rw = _Rewriter(fn_node, keys)
    new = rw.visit(fn_node)
    if rw.done != set(keys):
        raise Refused("a loop to convert was not found")
    return _compiled(new, code)


def _compiled(new, code):
    # a factory whose parameters are fn's free names and the helpers' module: the rewritten
    # function closes over them, and takes fn's own cells (rebinding is seen)
    params = list(code.co_freevars) + [MODULE]
    factory = ast.FunctionDef(name="__spmd_factory", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[new, ast.Return(ast.Name(new.name, ast.Load()))], decorator_list=[], returns=None,
        type_params=[])
    ast.copy_location(factory, new)
    factory.body[-1] = ast.copy_location(factory.body[-1], new)
    factory.body[-1].value = ast.copy_location(factory.body[-1].value, new)
    mod = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    compiled = compile(mod, code.co_filename, "exec")
    outer = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    return next(c for c in outer.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name)


def _fingerprint(code):
    consts = tuple(repr(c) for c in code.co_consts if not isinstance(c, types.CodeType))
    lines = sorted({line for _, _, line in code.co_lines() if line is not None})
    return code.co_names, code.co_varnames, code.co_cellvars, consts, lines


def _copy(node):
    return copy.deepcopy(node)


# -- what the rewritten loops run --------------------------------------------------------------------
def _weak(x) -> bool:
    if isinstance(x, Tracer):
        return x.weak
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def _memory(v):
    """What v's elements live in: arrays sharing it are views of one another."""
    if isinstance(v, Tracer):
        return v._buf if v._buf is not None else v
    if isinstance(v, NumpyBuffer):
        return v._root if v._root is not None else v
    return v


def state(names_values, names, inplace, reads):
    """The loop's state on entry, with per name its weakness and whether the loop writes it
    in place: (values, weak, inplace). A loop writing in place into an array that another
    name it reads views would read a stale copy there: refused."""
    # (a Python number is never written in place: `it += 1` rebinds it, and equal small
    # ints are one object)
    written = {id(_memory(names_values[n])): n for n in inplace if n in names_values and n in names
               and not _weak(names_values[n])}
    for n in set(reads) | set(names):
        m = id(_memory(names_values.get(n)))
        if n in names_values and not _weak(names_values[n]) and m in written and written[m] != n:
            raise Refused(f"{n} and {written[m]} are the same array, written in place in the loop")
        if n in inplace and isinstance(names_values.get(n), np.ndarray) \
                and not isinstance(names_values[n], NumpyBuffer):
            raise Refused(f"{n} is a numpy array from outside the function, written in the loop")
    values = []
    for n in names:
        if n not in names_values:
            raise Refused(f"{n} is carried by the loop but not bound before it")
        v = names_values[n]
        ok = isinstance(v, (Tracer, np.ndarray, np.generic)) or _weak(v)
        if not ok:
            raise Refused(f"{n} is a {type(v).__name__}, not an array or a number")
        values.append(v)
    return tuple(values), tuple(_weak(v) for v in values), tuple(n in inplace for n in names)


def _traced(t, values, weak):
    out = []
    for v, w in zip(values, weak):
        x = core.asarray(v, t=t)
        if x.ndim == 0 and w != x.weak:
            x = Tracer(x.value, x._tr, w)
        out.append(x)
    return tuple(out)


def _rewrapped(values, weak):
    out = []
    for v, w in zip(values, weak):
        if isinstance(v, Tracer) and v.weak != w:
            v = Tracer(v.value, v._tr, w)
        out.append(v)
    return tuple(out)


def _check_weak(outs, weak, what):
    got = tuple(_weak(v) for v in outs)
    if got != weak:
        raise Refused(f"{what}: a carry changes between a Python number and a numpy value")


def _written_back(entry, outs, inplace):
    """x += v in the loop wrote into the array x held before it (numpy): that array takes
    the final value, and the name keeps it."""
    final = []
    for before, after, w in zip(entry, outs, inplace):
        if w and isinstance(before, (Tracer, NumpyBuffer)) and not _weak(before) and \
                not (isinstance(before, Tracer) and is_scalar(before)):
            before[...] = after
            after = before
        final.append(after)
    return tuple(final)


def run_while(cond_fun, body_fun, entry):
    values, weak, inplace = entry
    t = current_trace()
    if t is None:
        while cond_fun(values):
            values = body_fun(values)
        return values

    def body(s):
        out = tuple(body_fun(_rewrapped(s, weak)))
        _check_weak(out, weak, "the loop's body")
        return out
    outs = control.while_loop(lambda s: cond_fun(_rewrapped(s, weak)), body, _traced(t, values, weak))
    return _written_back(values, _rewrapped(outs, weak), inplace)


def run_for_break(r, body_fun, entry, index=False):
    """The loop's state after it; with `index` (the loop's index is read after the loop)
    and the index's last value, a weak int: the one that broke, else the range's last."""
    values, weak, inplace = entry
    if index and len(r) == 0:
        raise Refused("the loop's index is read after a loop over an empty range (it keeps its old binding)")
    t = current_trace()
    if t is None:
        for i in r:
            broke, values = body_fun(i, values)
            if broke:
                break
        return tuple(values) + (i,) if index else values
    if r.step == 0 or len(r) == 0:
        return values
    n = len(r)

    def cond(s):
        return (s[0] < n) & ~s[1]

    def body(s):
        k, _, vals = s[0], s[1], s[2:]
        i = Tracer(core.asarray(r.start + k * r.step, t=current_trace()).value, current_trace(), True)
        broke, out = body_fun(i, _rewrapped(vals, weak))
        out = tuple(out)
        _check_weak(out, weak, "the loop's body")
        broke = core.asarray(broke, t=current_trace())
        if broke.shape != () :
            raise Refused("the break's test is not one value")
        return (k + 1, broke.astype(bool)) + out
    start = (core.asarray(0, "int64", t), core.asarray(False, t=t))
    outs = control.while_loop(cond, body, start + _traced(t, values, weak))
    final = _written_back(values, _rewrapped(outs[2:], weak), inplace)
    if not index:
        return final
    last = core.asarray(r.start - r.step, t=t) + outs[0] * r.step      # k iterations ran: index k - 1
    return final + (Tracer(last.value, last._tr, True),)


def _truth(v):
    """A traced test operand's truth (numpy's bool() of one value: nonzero, NaN true)."""
    if v.shape != ():
        raise Refused("an and / or / not operand in the test is not one value")
    return v.astype(bool)


def _short_circuit(first, later, decides):
    """Python's `first and/or later...` (decides: the truth that ends it, False for and)
    while no operand is traced; from a traced one on, every operand up to one that decides
    by itself, combined (& for and, | for or) as the truth of the whole."""
    acc, v = None, first
    for k in range(len(later) + 1):
        if k:
            v = later[k - 1]()
        if isinstance(v, Tracer):
            tv = _truth(v)
            acc = tv if acc is None else (acc | tv if decides else acc & tv)
        elif bool(v) == decides:
            return v if acc is None else (acc | True if decides else acc & False)
    return v if acc is None else acc


def all_of(first, *later):
    return _short_circuit(first, later, False)


def any_of(first, *later):
    return _short_circuit(first, later, True)


def not_(v):
    return ~_truth(v) if isinstance(v, Tracer) else not v


def unless(broke, rest, values):
    """The statements after `if ...: break`, run where the test was false."""
    if not isinstance(broke, Tracer):
        return values if broke else tuple(rest(values))
    if broke.shape != ():
        raise Refused("the break's test is not one value")
    weak = tuple(_weak(v) for v in values)

    def go_on(*s):
        out = tuple(rest(_rewrapped(s, weak)))
        _check_weak(out, weak, "the statements after the break")
        return out
    t = current_trace()
    outs = control.cond(broke, lambda *s: s, go_on, *_traced(t, values, weak))
    return _rewrapped(outs, weak)


UNBOUND = object()      # a name an if statement assigns that was not bound before it


def run_if(test, then_fun, else_fun, names_values, names, inplace, definite, reads):
    """An if statement whose test needed a value of the data, as spmd.cond: both branches
    traced, the names they assign (`names`) selected by the test. As Python runs it where
    the test is not traced, and where it cannot be a cond (the test is not one value, the
    branches leave a name of different kinds -- a Python number and a numpy value --, or
    the state is not arrays and numbers): then bool(test) is the graph break it was."""
    full = tuple(names_values.get(n, UNBOUND) for n in names)

    def as_python():
        return tuple(then_fun(full) if test else else_fun(full))
    if not isinstance(test, Tracer) or test.shape != ():
        return as_python()
    bound = [n for n in names if n in names_values]
    if any(n not in names_values and n not in definite for n in names):
        return as_python()
    try:
        values, weak, written = state(names_values, bound, inplace, reads)
    except Refused:
        return as_python()
    t = current_trace()
    kinds = {}

    def branch(fun):
        def run(*s):
            given = iter(_rewrapped(s, weak))
            out = tuple(fun(tuple(next(given) if n in names_values else UNBOUND for n in names)))
            if any(v is UNBOUND for v in out):
                raise Refused("a name the branch leaves unbound")
            kinds[fun] = tuple(_weak(v) for v in out)
            return out
        return run
    try:
        outs = control.cond(_truth(test), branch(then_fun), branch(else_fun), *_traced(t, values, weak))
    except ConcreteValueError:
        raise                       # (a value a branch asks for: jit converts or drops the conversions)
    except (Refused, SpmdError):
        return as_python()
    if kinds.get(then_fun) != kinds.get(else_fun):
        return as_python()
    outs = _rewrapped(outs, kinds[then_fun])
    at = {n: i for i, n in enumerate(bound)}
    before = tuple(values[at[n]] if n in at else UNBOUND for n in names)
    flags = tuple(n in at and written[at[n]] for n in names)
    return _written_back(before, outs, flags)
