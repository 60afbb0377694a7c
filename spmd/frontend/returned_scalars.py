"""`return float(loss), grads`: a Python number made from a traced value only to be
returned. numpy gives the caller a Python float (or int); jit need not stop tracing for it
(a graph break): the compiled program gives the value as one more output and jit turns it
into the Python number after the run.

That is sound only where nothing but the return can see the number, which this module
proves from the source, not from the value: the `float(...)` / `int(...)` call being run
is, in the file's syntax tree, the whole `return` expression or one element of a returned
tuple (no starred element; no `finally:` after it, which may return something else), in the traced function's own frame (called by jit itself, so
no caller of ours uses the result), with `float` / `int` the builtins. Anything else (an
assignment, arithmetic, a comparison, a log line, a helper's return) keeps the graph break.
"""
from __future__ import annotations

import ast
import builtins
import linecache

_trees = {}             # filename -> (source lines, parsed module)


def returned_position(frame, name, entry_codes):
    """() if the `name(...)` call running in `frame` is the whole return value of the
    traced function, (k,) if it is element k of its returned tuple; None otherwise.
    entry_codes: (the traced function's code, the code of jit's frame that calls it)."""
    if entry_codes is None or frame is None:
        return None
    fn_code, caller_code = entry_codes
    code = frame.f_code
    if code is not fn_code or frame.f_back is None or frame.f_back.f_code is not caller_code:
        return None
    if name in code.co_varnames or name in code.co_cellvars or name in code.co_freevars:
        return None
    if name in frame.f_globals or frame.f_builtins.get(name) is not getattr(builtins, name):
        return None
    pos = code_position(code, frame.f_lasti)
    tree = source_tree(code.co_filename)
    if pos is None or tree is None:
        return None
    guarded = _under_finally(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None and id(node) not in guarded:
            got = _in_return(node.value, pos, name)
            if got is not None:
                return got
    return None


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


def _is_call(node, pos, name) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
            and len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred)
            and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == tuple(pos))


def _in_return(value, pos, name):
    if _is_call(value, pos, name):
        return ()
    if isinstance(value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in value.elts):
        for k, e in enumerate(value.elts):
            if _is_call(e, pos, name):
                return (k,)
    return None
