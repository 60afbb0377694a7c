"""`return float(loss), grads`: a Python number made from a traced value only to be
returned. numpy gives the caller a Python float (or int); jit need not stop tracing for it
(a graph break): the compiled program gives the value as one more output and jit turns it
into the Python number after the run. The same for `loss.item()` (a Python number) and
numpy's scalar types, `np.float32(loss)` (a numpy scalar of that type).

That is sound only where nothing but the return can see the number, which this module
proves from the source, not from the value: the call being run is, in the file's syntax
tree, the whole `return` expression or one element of a returned tuple (no starred
element; no `finally:` after it, which may return something else), in the traced
function's own frame (called by jit itself, so no caller of ours uses the result), with
`float` / `int` the builtins and `np` a global name of the numpy module. Anything else
(an assignment, arithmetic, a comparison, a log line, a helper's return) keeps the graph
break.
"""
from __future__ import annotations

import ast
import builtins
import linecache

import numpy as np

_trees = {}             # filename -> (source lines, parsed module)


def returned_position(frame, entry_codes):
    """((), convert) if the conversion call running in `frame` (float(x), int(x),
    x.item(), np.float32(x) and numpy's other scalar types) is the whole return value of
    the traced function, ((k,), convert) if it is element k of its returned tuple, with
    `convert` what makes the caller's number of the value; None otherwise.
    entry_codes: (the traced function's code, the code of jit's frame that calls it)."""
    if entry_codes is None or frame is None:
        return None
    fn_code, caller_code = entry_codes
    code = frame.f_code
    if code is not fn_code or frame.f_back is None or frame.f_back.f_code is not caller_code:
        return None
    pos = code_position(code, frame.f_lasti)
    tree = source_tree(code.co_filename)
    if pos is None or tree is None:
        return None
    guarded = _under_finally(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None and id(node) not in guarded:
            parts = [((), node.value)]
            if isinstance(node.value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in node.value.elts):
                parts += [((k,), e) for k, e in enumerate(node.value.elts)]
            for where, e in parts:
                convert = _conversion(e, pos, frame)
                if convert is not None:
                    return where, convert
    return None


def item(value):
    """x.item()'s number of a 0-d array (a module-level function: a program keeps it)."""
    return np.asarray(value).item()


def _local(code, name) -> bool:
    return name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars


def _conversion(node, pos, frame):
    """What converts a returned value, if `node` is the conversion call at `pos`."""
    if not isinstance(node, ast.Call) or node.keywords or any(isinstance(a, ast.Starred) for a in node.args) \
            or (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) != tuple(pos):
        return None
    f, code = node.func, frame.f_code
    if isinstance(f, ast.Name) and f.id in ("float", "int") and len(node.args) == 1:
        if _local(code, f.id) or f.id in frame.f_globals or frame.f_builtins.get(f.id) is not getattr(builtins, f.id):
            return None
        return getattr(builtins, f.id)
    if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
        return item
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and len(node.args) == 1 \
            and not _local(code, f.value.id) and frame.f_globals.get(f.value.id) is np:
        kind = getattr(np, f.attr, None)
        if isinstance(kind, type) and issubclass(kind, (np.bool_, np.number)) and kind not in _ABSTRACT:
            return kind
    return None


_ABSTRACT = (np.number, np.integer, np.signedinteger, np.unsignedinteger, np.inexact, np.floating,
             np.complexfloating)


def code_position(code, lasti):
    """(line, end line, column, end column) of the instruction at byte offset lasti"""
    try:
        positions = list(code.co_positions())
    except AttributeError:          # (before Python 3.11: no columns, no proof)
        return None
    i = lasti // 2
    if not 0 <= i < len(positions) or None in positions[i]:
        return None
    return positions[i]


def source_tree(filename):
    """The parsed syntax tree of a source file (cached while its text is the same); None
    where there is no source."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    got = _trees.get(filename)
    if got is None or got[0] != lines:
        try:
            got = (lines, ast.parse("".join(lines)))
        except SyntaxError:
            return None
        _trees[filename] = got
    return got[1]


def _under_finally(tree) -> set:
    """ids of the return statements a `finally:` runs after (it may return something else)"""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and node.finalbody:
            for part in node.body + node.handlers + node.orelse:
                ids.update(id(n) for n in ast.walk(part) if isinstance(n, ast.Return))
    return ids
