"""Graph breaks: where tracing needs a value of the data, the part before is compiled
and run, and the rest is traced with the value.

`float(x)`, `if x > 0:`, `.item()`, an index, `np.asarray` in a library, and numpy's
functions whose result's size depends on the data (np.nonzero, np.unique, np.bincount,
...) need a number while a function is traced. Under spmd.jit (fallback=True, the
default) the Tracer asks its trace's oracle (`Oracle`): it takes the program traced so
far down to that value -- its cone: the ops the value depends on, none with an effect --
compiles it like any program (sharded as the call's arguments are), runs it on the
call's arguments and hands the number back to Python, which goes on tracing with it.

The program traced to the end holds each such value as a constant: it is the right
program for every call whose values at the breaks are the same. So a signature's
programs form a tree (`Node`): a break's program, then per value it gave the next break
or the program of the whole function. A call runs the breaks' programs along its path,
then the program at its end; a value not seen before traces the function again (taking
the values already computed on this call) and adds a branch.

The program at the end computes a break's cone again, fused with the rest, and gives
the break's value as an extra output (Lowered.checks): once a signature's calls take one
path twice in a row, a call runs that program alone and checks the values it computed
at the breaks against the path's (`Path`): the part before a break is not run twice,
and a call whose values differ runs the breaks' programs as before (a check that fails
costs one more run). The program at the end writes no argument in place before its
checks hold (Lowered.reused), so a run whose checks fail leaves the arguments as they
were. It is
bounded: a trace with more than MAX_BREAKS breaks (a loop on data), or a break that has
given more than MAX_VALUES different values (a float that changes every call), makes
the signature run eagerly as before, with a FallbackWarning that says which.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConcreteValueError, SpmdError
from ..ir.graph import clone

MAX_BREAKS = 16
MAX_VALUES = 8


class BreakLimit(ConcreteValueError):
    """Graph breaks would not pay here: jit runs the signature eagerly (or, with
    fallback=False, raises this)."""


class Break:
    """A value tracing took from the data: the user's line, what needed it, and the
    compiled program (a Lowered) that computes it from the function's arguments."""

    def __init__(self, loc, what, low):
        self.loc, self.what, self.low = loc, what, low

    def run(self, leaves):
        (out,) = self.low(*leaves)
        return np.asarray(out)


class Node:
    """A break in a signature's tree of programs: its Break, and per value it gave (by
    value_key) the next Node, or the Lowered program of the whole function."""

    def __init__(self, brk):
        self.brk = brk
        self.next = {}


def value_key(v):
    a = np.asarray(v)
    return a.dtype.str, a.shape, a.tobytes()


def cone(graph, value):
    """A copy of `graph` (all its inputs) computing `value` alone: the ops it depends on."""
    g, vmap = clone(graph)
    need = {vmap[value]}
    kept = []
    for op in reversed(g.ops):
        if any(r in need for r in op.results):
            kept.append(op)
            need.update(op.operands)
    g.ops = kept[::-1]
    g.outputs = [vmap[value]]
    return g


def follow(entry, leaves):
    """Run the breaks' programs from `entry` (a Node, a Lowered or None) down the tree:
    (what is at the end of this call's path, a Lowered or None, and [(Break, value)])."""
    taken = []
    node = entry
    while isinstance(node, Node):
        v = node.brk.run(leaves)
        taken.append((node.brk, v))
        node = node.next.get(value_key(v))
    return node, taken


class Oracle:
    """The values of one trace's breaks, in order: those this call already computed
    (`known`, from follow), then new ones, computed by `lower_cone(graph, value)` -> a
    Lowered run on `leaves`."""

    def __init__(self, fname, known, lower_cone, leaves):
        self.fname, self.known, self.lower_cone, self.leaves = fname, known, lower_cone, leaves
        self.taken = []
        self.values = []          # the traced Value at each break, in this trace's graph
        self.before_new = None    # called before a new break: jit may convert a loop instead

    def __call__(self, tracer, what, loc):
        i = len(self.taken)
        if i < len(self.known):
            brk, v = self.known[i]
            if brk.loc != loc:
                raise SpmdError(f"spmd.jit: tracing {self.fname} again with the same values took another path: "
                                f"its break {i + 1} was at {brk.loc} ({brk.what}), now at {loc} ({what}). A "
                                f"function jit traces must do the same for the same values (no global state "
                                f"that changes between calls).")
        else:
            if self.before_new is not None:
                self.before_new()
            if i >= MAX_BREAKS:
                raise BreakLimit(f"{what} of a traced value at {loc}: tracing {self.fname} needed more than "
                                 f"{MAX_BREAKS} values of its data (a Python loop on data?); compiled in parts "
                                 f"it would run each part again per value. Use spmd.while_loop / "
                                 f"spmd.fori_loop for a loop on data.", loc)
            brk = Break(loc, what, self.lower_cone(tracer._tr.graph, tracer.value))
            v = brk.run(self.leaves)
        self.taken.append((brk, v))
        self.values.append(tracer.value)
        return v


class Path:
    """A signature's last path through its tree, run whole: the program at its end computes
    the breaks' values too (Lowered.checks), so a call whose breaks give the values that
    path took runs that one program, and the part before each break is not run again on
    its own. Two calls in a row that ended at the same program make it the guess; a call
    whose checked values differ runs the tree as before (its breaks' programs, then the
    program at the end) and drops the guess until the path repeats."""

    def __init__(self):
        self.last, self.guess = None, None

    def took(self, low):
        """A call ran the tree to `low`."""
        self.guess = low if low is self.last and low.checks and not low.donated else None
        self.last = low

    def holds(self, low, checks) -> bool:
        """Did a run of the guess `low` give, at every break, the value its path took?"""
        ok = all(value_key(np.asarray(c)) == value_key(v) for c, (_, _, v) in zip(checks, low.breaks))
        if not ok:
            self.guess = None
        return ok


def insert(cache, key, taken, low, fname):
    """Put the program `low` traced along the path `taken` into cache[key]'s tree."""
    if not taken:
        cache[key] = low
        return
    put = lambda node: cache.__setitem__(key, node)     # noqa: E731
    cur = cache.get(key)
    for brk, v in taken:
        if not isinstance(cur, Node):
            cur = Node(brk)
            put(cur)
        if value_key(v) not in cur.next and len(cur.next) >= MAX_VALUES:
            raise BreakLimit(f"{brk.what} of a traced value at {brk.loc}: tracing {fname} took {MAX_VALUES} "
                             f"different values there on calls with the same signature, so compiled in parts "
                             f"it would compile again for each. Pass that value as a static argument, or keep "
                             f"it an array (np.where for choices).", brk.loc)
        node, k = cur, value_key(v)
        put = lambda child, node=node, k=k: node.next.__setitem__(k, child)     # noqa: E731
        cur = cur.next.get(k)
    put(low)
