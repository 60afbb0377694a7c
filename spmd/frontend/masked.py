"""numpy's x[mask] under jit, for a traced boolean mask: a Masked value.

numpy's x[mask] is a compacted array whose length (the mask's count of True elements)
depends on the data, which a compiled program cannot have. A Masked value keeps the
selected elements where they are instead: `vals` holds x's elements laid out as the basic
view the key's other entries select, the mask beside them (indexing's mask plan says
where numpy's compacted dim would be). Whatever does not depend on where a selected
element lands in the compacted array is computed exactly as numpy computes it:

  - elementwise math (ufuncs, operators, np.where, astype, ...) with scalars, with arrays
    that broadcast against numpy's selection without its data-dependent dim, and with
    other selections through the same mask: a Masked value again (the unselected
    positions hold values nothing reads);
  - reductions over all of it, or along its selected dim (sum, prod, mean, var, std, max,
    min, any, all, count_nonzero, .size): masked reductions, plain traced results;
  - writing it back through the same mask: x[mask] = f(x[mask]), x[mask] op= v.

Uses that need the compacted array itself (returning it, reshape, matmul, indexing by
position, sorting, ...) raise, naming the line and the alternatives that keep the shape.
Two masks are the same when they are one traced value or computed alike from the same
values (`x[x > 0] = x[x > 0] ** 2` evaluates x > 0 twice).
"""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import TraceError, user_loc
from ..ir import dtypes
from . import core, padded, shapes
from . import elementwise as ew
from . import reductions as red
from .trace import Tracer

# numpy functions that act on each element on its own: on a selection, a selection
ELEMENTWISE_FUNCTIONS = (np.where, np.clip, np.round, np.around, np.fix, np.real, np.imag, np.angle,
                         np.nan_to_num, np.isclose, np.sinc, np.isposinf, np.isneginf, np.copy)
# numpy functions whose spmd version takes a selection itself, uncompacted (np.bincount
# counts x[mask]'s elements where they are)
TAKES_SELECTIONS = (np.bincount,)
_TABLES = {}            # the numpy-API table's ufuncs, functions and operators (install)


def same_value(a, b, depth=24) -> bool:
    """Are the IR Values a and b the same array: one Value, or results of ops of the same
    kind and attributes on the same operands (constants by value)?"""
    if a is b:
        return True
    pa, pb = a.producer, b.producer
    if pa is None or pb is None or depth == 0 or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if pa.name != pb.name or a.index != b.index or len(pa.operands) != len(pb.operands):
        return False
    if pa.attrs.keys() != pb.attrs.keys():
        return False
    for k, v in pa.attrs.items():
        w = pb.attrs[k]
        if isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
            if not (isinstance(v, np.ndarray) and isinstance(w, np.ndarray) and v.dtype == w.dtype
                    and v.shape == w.shape and np.array_equal(v, w, equal_nan=v.dtype.kind in "fc")):
                return False
        elif v != w:
            return False
    return builtins.all(same_value(x, y, depth - 1) for x, y in zip(pa.operands, pb.operands))


class Masked:
    """numpy's x[mask] for a traced mask, kept in place (see the module docstring)."""
    __slots__ = ("plan", "vals", "loc")

    def __init__(self, plan, vals, loc=None):
        self.plan, self.vals, self.loc = plan, vals, loc or user_loc()

    # -- what it is ---------------------------------------------------------------------------
    dtype = property(lambda self: self.vals.dtype)
    ndim = property(lambda self: len(self.plan.sel))
    itemsize = property(lambda self: self.vals.dtype.itemsize)

    @property
    def size(self):
        """numpy's size: the count of selected elements (a traced int64)."""
        n = red.sum(core.astype(self.plan.mask, "int64"))
        rest = int(np.prod([s for s in self.plan.sel if s is not None], dtype=np.int64))
        return n if rest == 1 else ew.multiply(n, np.int64(rest))

    @property
    def shape(self):
        return self.compact("its .shape").shape

    def __repr__(self):
        shown = ", ".join("n_true" if s is None else str(s) for s in self.plan.sel)
        return f"Masked(x[mask] of {self.dtype.name}, shape ({shown}), selected at {self.loc})"

    def compact(self, what):
        """numpy's compacted array, its length taken from the data where the trace can (a
        graph break, spmd/jit/graph_breaks.py); else the TraceError naming `what` needed it."""
        if self.vals._tr.oracle is None:
            raise self.compacted(what)
        plan = self.plan
        n = self.count_from_data(what)
        r = self.vals[(slice(None),) * plan.p + padded.nonzero(plan.mask, size=n)]
        if plan.n_first and plan.p:        # numpy puts the selection first (see _MaskPlan)
            r = shapes.transpose(r, [plan.p] + list(range(plan.p)) + list(range(plan.p + 1, r.ndim)))
        return r

    def count_from_data(self, what) -> int:
        """The mask's count of True elements, from the data (a graph break)."""
        # asked of the oracle directly: int() inside `buf[x[mask]] = v` would read as numpy
        # storing a traced value into buf (trace._storing_into_numpy), and this is spmd's own need
        count = red.sum(core.astype(self.plan.mask, "int64"))
        return int(np.asarray(self.vals._tr.oracle(count, f"the length of x[mask] for {what}", user_loc())))

    def compacted(self, what):
        return TraceError(
            f"{what} at {user_loc()} needs numpy's x[mask] (selected at {self.loc}) as a compacted array, whose "
            f"length -- the mask's count of True elements -- depends on the data: spmd.jit cannot compile that. "
            f"Under jit, x[mask] takes elementwise math, reductions over all of it or along the selected dim "
            f"(sum, mean, max, min, any, all, count_nonzero, .size) and writing it back through the same mask "
            f"(x[mask] = f(x[mask])). Otherwise keep the full shape: np.where(mask, x, fill), or the positions "
            f"padded to a fixed length, spmd.numpy.nonzero(mask, size=n); or run this part eagerly, outside "
            f"spmd.jit.")

    # -- operands -----------------------------------------------------------------------------
    def aligned(self, other) -> bool:
        """Does `other` (a Masked value) select through the same mask, laid out alike?"""
        a, b = self.plan, other.plan
        return a.sel == b.sel and a.view.shape == b.view.shape and (a.p, a.k, a.n_first) == (b.p, b.k, b.n_first) \
            and same_value(a.mask.value, b.mask.value)

    def broadcasts(self, other) -> bool:
        """Does `other` select through the same mask, numpy's selection of it broadcasting
        to this one's (A[m] / d[m, None]: unit dims where this one has others)?"""
        a, b = self.plan, other.plan
        return len(a.sel) == len(b.sel) and (a.p, a.k, a.n_first) == (b.p, b.k, b.n_first) \
            and builtins.all(s == t or t == 1 for s, t in zip(a.sel, b.sel)) \
            and same_value(a.mask.value, b.mask.value)

    def operand(self, other, what):
        """other, laid out to combine with self.vals elementwise."""
        if isinstance(other, Masked):
            if not (self.aligned(other) or self.broadcasts(other)):
                raise TraceError(
                    f"{what} at {user_loc()}: two boolean selections through different masks (selected at "
                    f"{self.loc} and {other.loc}); numpy pairs their elements by position in the compacted "
                    f"arrays, which depends on the data. Combine the full arrays first and select once: "
                    f"(a + b)[mask], or np.where(mask1, a, 0) and np.where(mask2, b, 0).")
            return other.vals
        if isinstance(other, (Tracer, np.ndarray, list, tuple)) and np.ndim(other) > 0:
            # one entry per selected element (a compacted x[mask] worked on, written back:
            # `b = F[m, :][:, perm]; ...; F[m, :] = b`): the mask's count from the data
            # (a graph break), checked against it as numpy checks it
            per_element = self.plan.per_element(other) and self.vals._tr.oracle is not None
            return self.plan.to_view(other, what, self.count_from_data(what) if per_element else None)
        return other

    # -- elementwise --------------------------------------------------------------------------
    def apply(self, f, args, kwargs, what):
        """f(*args, **kwargs) on the selected elements (args hold self and maybe other
        selections, arrays, scalars): a Masked value of the result."""
        # the selection the others broadcast to leads (self's when they are alike)
        sels = [a for a in args if isinstance(a, Masked)]
        lead = next((c for c in [self] + sels if builtins.all(c.aligned(o) or c.broadcasts(o) for o in sels)), self)
        vals = [lead.operand(a, what) for a in args]
        return Masked(lead.plan, f(*vals, **kwargs), lead.loc)

    def assign(self, r, what):
        """self op= ...: the compacted copy numpy would write, with its dtype kept."""
        r = r.vals if isinstance(r, Masked) else r
        if not np.can_cast(r.dtype, self.dtype, "same_kind"):
            raise TypeError(f"{what} at {user_loc()}: Cannot cast ufunc output from {r.dtype!r} to {self.dtype!r} "
                            f"with casting rule 'same_kind' (numpy raises the same UFuncTypeError)")
        self.vals = core.astype(r, self.dtype)
        return self

    def astype(self, dtype, *args, **kwargs):
        return Masked(self.plan, core.astype(self.vals, dtype), self.loc)

    def copy(self, *args, **kwargs):
        return Masked(self.plan, self.vals, self.loc)

    real = property(lambda self: self.apply(ew.real, (self,), {}, "x[mask].real"))
    imag = property(lambda self: self.apply(ew.imag, (self,), {}, "x[mask].imag"))

    def conj(self):
        return self.apply(ew.conjugate, (self,), {}, "x[mask].conj()")

    conjugate = conj

    def clip(self, *args, **kwargs):
        return self.apply(ew.clip, (self,) + args, kwargs, "x[mask].clip")

    def round(self, *args, **kwargs):
        return self.apply(_TABLES["functions"][np.round], (self,) + args, kwargs, "x[mask].round")

    # -- reductions ---------------------------------------------------------------------------
    def _axes(self, axis, what):
        """The view dims numpy's axis (of the selection) reduces; they must include the
        selected dim (else the result keeps the data-dependent length)."""
        plan = self.plan
        nd = len(plan.sel)
        axes = core.normalize_axes(axis, nd, what)
        n_at = 0 if plan.n_first else plan.p
        if n_at not in axes:
            raise NotImplementedError(
                f"{what} at {user_loc()} along axis {axis} of numpy's x[mask] (selected at {self.loc}) keeps its "
                f"data-dependent dim; reduce over all of it or along the selected dim (axis={n_at}), or reduce "
                f"np.where(mask, x, identity) along the axis you want")
        out = []
        for j in axes:
            if j == n_at:
                out += range(plan.p, plan.p + plan.k)
            elif plan.n_first:
                out.append(j - 1 if j <= plan.p else j - 1 + plan.k)
            else:
                out.append(j if j < plan.p else j - 1 + plan.k)
        return tuple(sorted(out)), axes

    def _where(self, where_, what):
        m = self.plan.mask_in_view
        return m if where_ is None or where_ is True else ew.logical_and(m, self.operand(where_, what))

    def _keep(self, r, axes, keepdims):
        if not keepdims:
            return r
        return shapes.reshape(r, tuple(1 if j in axes else s for j, s in enumerate(self.plan.sel)))

    def _reduce(self, name, f, axis, keepdims, out, where_, **kw):
        try:
            vaxes, axes = self._axes(axis, f"x[mask].{name}")
        except NotImplementedError:
            if self.vals._tr.oracle is None:
                raise
            # along another dim: on the compacted array (its length from the data)
            c = self.compact(f"x[mask].{name}")
            kw = compact_all(kw, name)
            if where_ is not None:
                kw["where"] = compact_all(where_, name)
            return getattr(c, name)(axis=axis, out=out, keepdims=keepdims, **kw)
        r = self._keep(f(self.vals, axis=vaxes, where=self._where(where_, name), **kw), axes, keepdims)
        return r if out is None else red.into(out, r, name)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return self._reduce("sum", red.sum, axis, keepdims, out, where, dtype=dtype, initial=initial)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return self._reduce("prod", red.prod, axis, keepdims, out, where, dtype=dtype, initial=initial)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
        return self._reduce("mean", red.mean, axis, keepdims, out, where, dtype=dtype)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
        return self._reduce("var", red.var, axis, keepdims, out, where, dtype=dtype, ddof=ddof)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None):
        return self._reduce("std", red.std, axis, keepdims, out, where, dtype=dtype, ddof=ddof)

    def any(self, axis=None, out=None, keepdims=False, *, where=None):
        return self._reduce("any", red.any, axis, keepdims, out, where)

    def all(self, axis=None, out=None, keepdims=False, *, where=None):
        return self._reduce("all", red.all, axis, keepdims, out, where)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return self._extreme("max", axis, out, keepdims, initial, where)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return self._extreme("min", axis, out, keepdims, initial, where)

    def _extreme(self, kind, axis, out, keepdims, initial, where_):
        """numpy's max / min of the selected elements. numpy raises for an empty selection
        without initial=; a compiled program cannot, and gives NaN there (floats) or the
        dtype's identity (integers: its lowest value for max, highest for min)."""
        f = red.max if kind == "max" else red.min
        if initial is not None:
            return self._reduce(kind, f, axis, keepdims, out, where_, initial=initial)
        ew.require_ordered(kind, self.vals)
        vaxes, axes = self._axes(axis, f"x[mask].{kind}")
        m = self._where(where_, kind)
        dt = self.vals.value.dtype
        if dt == "bool":
            fill = kind == "min"
        elif dt in dtypes.FLOATS + dtypes.HALFS:
            fill = -np.inf if kind == "max" else np.inf
        else:
            fill = np.iinfo(dt).min if kind == "max" else np.iinfo(dt).max
        r = f(ew.where(m, self.vals, core.asarray(np.array(fill, self.vals.dtype), t=self.vals._tr)), axis=vaxes)
        if dt in dtypes.FLOATS + dtypes.HALFS:
            any_ = red.any(core.broadcast_to(m, self.vals.shape), axis=vaxes)
            r = ew.where(any_, r, core.asarray(np.array(np.nan, self.vals.dtype), t=self.vals._tr))
        r = self._keep(r, axes, keepdims)
        return r if out is None else red.into(out, r, kind)

    amax, amin = max, min

    def count_nonzero(self, axis=None, *, keepdims=False):
        nz = ew.not_equal(self.vals, False if self.dtype == np.bool_ else 0)
        return Masked(self.plan, nz, self.loc).sum(axis, dtype="int64", keepdims=keepdims)

    def size_along(self, axis=None):
        """np.size(x[mask], axis): numpy's length of that dim (the selected one: the count)."""
        if axis is None:
            return self.size
        n = self.plan.sel[core.normalize_axis(axis, self.ndim, "np.size")]
        return n if n is not None else red.sum(core.astype(self.plan.mask, "int64"))

    # -- numpy's protocols ----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
        if method == "reduce" and name in _REDUCE and isinstance(inputs[0], Masked) and len(inputs) == 1:
            kwargs.setdefault("axis", 0)
            return getattr(inputs[0], _REDUCE[name])(**kwargs)
        if method != "__call__" or name not in _TABLES["ufuncs"] or kwargs.get("where", True) is not True:
            return getattr(ufunc, method)(*compact_all(inputs, what), **compact_all(kwargs, what))
        out = kwargs.get("out")
        outs = out if isinstance(out, tuple) else (out,)
        if out is not None and (len(outs) != 1 or not isinstance(outs[0], Masked) or not self.aligned(outs[0])):
            # into another array (`total += np.sin(x[mask])` with total of numpy's compacted
            # shape): numpy's compacted operands, where the trace can take the count from the data
            what = f"{what}(..., out=) into an array that is not the same selection"
            return getattr(ufunc, method)(*compact_all(inputs, what), **compact_all(kwargs, what))
        kwargs.pop("out", None)
        r = self.apply(_TABLES["ufuncs"][name], inputs, kwargs, what)
        return r if out is None else outs[0].assign(r, what)

    def __array_function__(self, func, types, args, kwargs):
        name = getattr(func, "__name__", str(func))
        if func in _METHOD_FUNCTIONS and args and isinstance(args[0], Masked):
            return getattr(args[0], _METHOD_FUNCTIONS[func])(*args[1:], **kwargs)
        if func in (np.ndim,):
            return self.ndim
        if func in ELEMENTWISE_FUNCTIONS and func in _TABLES["functions"]:
            return self.apply(_TABLES["functions"][func], args, kwargs, f"np.{name}")
        if func in TAKES_SELECTIONS and func in _TABLES["functions"]:
            return _TABLES["functions"][func](*args, **kwargs)
        return func(*compact_all(args, f"np.{name}"), **compact_all(kwargs, f"np.{name}"))

    def spmd_not_an_array(self):
        """Returned from a jitted function (jit/tracing.py asks): the compacted array."""
        return self.compact("returning it from the jitted function")

    def __array__(self, *args, **kwargs):
        return np.asarray(self.compact("using it as an array (np.asarray, returning it from the jitted "
                                       "function, ...)"), *args, **kwargs)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)) and self.flat_selection():
            return self.element(int(key))
        return self.compact("indexing it (x[mask][...])")[key]

    def flat_selection(self) -> bool:
        """Does it select along vals' leading dims (numpy's x[mask] with the mask of x's
        shape or of its leading dims): elements or rows, in vals' row-major order?"""
        nd = self.plan.mask.ndim
        rest = tuple(self.vals.shape[nd:])
        return (tuple(self.plan.sel) == (None,) + rest and tuple(self.plan.mask.shape) == tuple(self.vals.shape[:nd]))

    def positions_of(self):
        """The 1-d mask m when this is np.nonzero(m)[0] itself (Positions), else None."""
        return None

    def element(self, k):
        """numpy's x[mask][k]: the selected element (or row) of rank k (from the end for k < 0),
        found where it is, so no length is taken from the data. numpy raises IndexError
        where fewer are selected; a traced position cannot raise, and there it is x's first
        element (traced indices are clamped, not checked)."""
        m = shapes.reshape(core.astype(self.plan.mask, "int64"), (-1,))
        vals = shapes.reshape(self.vals, (-1,) + tuple(self.vals.shape[self.plan.mask.ndim:]))
        rank = red.cumsum(m)                           # each selected element's rank, from 1
        want = np.int64(k + 1) if k >= 0 else ew.add(red.sum(m), np.int64(k + 1))
        hit = ew.logical_and(ew.equal(rank, want), core.astype(m, "bool"))
        return vals[red.argmax(hit)]

    def __setitem__(self, key, value):
        # numpy writes into the compacted copy: x is unchanged
        self.compact("writing into it by position (x[mask][...] = v)")[key] = value

    def __len__(self):
        return len(self.compact("len()"))

    def __iter__(self):
        return iter(self.compact("iterating over it"))

    def __bool__(self):
        return bool(self.compact("bool()"))

    def __float__(self):
        return float(self.compact("float()"))

    def __int__(self):
        return int(self.compact("int()"))

    def __index__(self):
        return self.compact("using it as an index").__index__()

    def __getattr__(self, name):
        # only reached for names the class lacks: numpy's methods that need the compacted array
        if not name.startswith("__") and hasattr(np.ndarray, name):
            return getattr(self.compact(f"x[mask].{name}"), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class Positions(Masked):
    """np.nonzero(m)[0] of a 1-d traced m: the positions 0..n-1 of m's True elements, in
    order. As an index along a dim of m's length it selects what m selects, so indexing
    takes it as the mask m (indexing._as_masks) and no length from the data. Math on it
    gives a plain Masked value."""
    __slots__ = ()

    def positions_of(self):
        return self.plan.mask


def compact_all(xs, what):
    """xs (a tuple, list or dict) with each Masked value in it compacted (Masked.compact)."""
    if isinstance(xs, dict):
        return {k: compact_all(v, what) for k, v in xs.items()}
    if isinstance(xs, (tuple, list)):
        return type(xs)(compact_all(x, what) for x in xs)
    return xs.compact(what) if isinstance(xs, Masked) else xs


_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min", "logical_and": "all",
           "logical_or": "any"}
_METHOD_FUNCTIONS = {np.sum: "sum", np.prod: "prod", np.mean: "mean", np.var: "var", np.std: "std",
                     np.max: "max", np.amax: "max", np.min: "min", np.amin: "min", np.any: "any", np.all: "all",
                     np.count_nonzero: "count_nonzero", np.size: "size_along"}


def _binary(op, reflected):
    def f(self, other):
        args = (other, self) if reflected else (self, other)
        return self.apply(op, args, {}, f"x[mask] {'reflected ' if reflected else ''}{op.__name__}")
    return f


def _unary(op):
    return lambda self: self.apply(op, (self,), {}, f"{op.__name__}(x[mask])")


def _inplace(op, name):
    def f(self, other):
        return self.assign(op(self.vals, self.operand(other, f"x[mask] {name}=")), f"x[mask] {name}=")
    return f


BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
UNARY = ("neg", "pos", "abs", "invert")


def install(operators, ufuncs, functions):
    """Give Masked numpy's operators (`operators`: numpy_api.operators(), builders by
    Python's method names), and the table's ufuncs and functions for its protocols."""
    _TABLES.update(ufuncs=ufuncs, functions=functions)
    for o in BINARY:
        op = operators[f"__{o}__"]
        setattr(Masked, f"__{o}__", _binary(op, False))
        setattr(Masked, f"__r{o}__", _binary(op, True))
        setattr(Masked, f"__i{o}__", _inplace(op, o))
    for o in COMPARE:
        setattr(Masked, f"__{o}__", _binary(operators[f"__{o}__"], False))
    for o in UNARY:
        setattr(Masked, f"__{o}__", _unary(operators[f"__{o}__"]))
    for o in ("matmul", "rmatmul", "imatmul", "divmod", "rdivmod"):
        setattr(Masked, f"__{o}__", _compacted_operator(o))


def _compacted_operator(name):
    def f(self, *args):
        return getattr(self.compact(f"x[mask] {name}"), f"__{name}__")(*compact_all(args, f"x[mask] {name}"))
    return f
