"""Python's math functions on traced 0-d values: `math.sqrt(var)`, `math.exp(-d * d / 2)`.

A math function converts its argument with float(), which a traced value cannot give
without a value of the data (a graph break, or the function running eagerly). While a
thread traces, the math module's functions (FUNCTIONS) take a traced 0-d argument to
numpy's ufunc instead: a float64 0-d value, weak as a Python float is (NEP 50), and
Python's own errors where math raises and numpy would give inf or NaN (`math.sqrt(-1)`
is a ValueError, `math.exp(1000)` an OverflowError): the program computes the condition
and jit raises it after the run, naming the line (core.error_at_run). Where that cannot
be (inside a loop body or branch) the function is math's own, as before. Any other
argument goes to math's function unchanged, so math is as it was for every other caller.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from . import core
from .patching import while_tracing
from .trace import Tracer, current_trace, resolve

DOMAIN, RANGE = "math domain error", "math range error"


def _overflow(r, *xs):
    """A finite argument giving an infinite result: math's OverflowError."""
    finite = np.logical_and(*[np.isfinite(x) for x in xs]) if len(xs) > 1 else np.isfinite(xs[0])
    return (OverflowError, RANGE, np.logical_and(np.isinf(r), finite))


def _domain(cond):
    return (ValueError, DOMAIN, cond)


def _log(x, base=None):
    r = np.log(x)
    if base is not None:
        r = np.divide(r, np.log(base))
    bad = np.less_equal(x, 0.0)
    if base is not None:
        bad = np.logical_or(bad, np.less_equal(base, 0.0))
    return r, [_domain(bad)]


def _pow(x, y):
    r = np.power(x, y)
    fractional = np.not_equal(np.floor(y), y)
    # Python's rules: a finite negative base to a finite fractional power, or 0 to a
    # finite negative one (0 ** -inf is inf; -inf to any power is a signed inf or 0)
    finite = np.logical_and(np.isfinite(x), np.isfinite(y))
    bad = np.logical_and(finite, np.logical_or(np.logical_and(np.less(x, 0.0), fractional),
                                               np.logical_and(np.equal(x, 0.0), np.less(y, 0.0))))
    return r, [_domain(bad), _overflow(r, x, y)]


def _unary(ufunc, *errors):
    """math's function as `ufunc`, with math's errors: each (exception, message,
    condition of the argument x and the result r)."""
    def f(x):
        r = ufunc(x)
        return r, [(exc, msg, cond(x, r)) for exc, msg, cond in errors]
    return f


def _over(x, r):
    return np.logical_and(np.isinf(r), np.isfinite(x))


def _at_inf(x, r):
    return np.isinf(x)


FUNCTIONS = {
    "sqrt": _unary(np.sqrt, (ValueError, DOMAIN, lambda x, r: np.less(x, 0.0))),
    "exp": _unary(np.exp, (OverflowError, RANGE, _over)),
    "expm1": _unary(np.expm1, (OverflowError, RANGE, _over)),
    "log": _log,
    "log2": _unary(np.log2, (ValueError, DOMAIN, lambda x, r: np.less_equal(x, 0.0))),
    "log10": _unary(np.log10, (ValueError, DOMAIN, lambda x, r: np.less_equal(x, 0.0))),
    "log1p": _unary(np.log1p, (ValueError, DOMAIN, lambda x, r: np.less_equal(x, -1.0))),
    "sin": _unary(np.sin, (ValueError, DOMAIN, _at_inf)),
    "cos": _unary(np.cos, (ValueError, DOMAIN, _at_inf)),
    "tan": _unary(np.tan, (ValueError, DOMAIN, _at_inf)),
    "asin": _unary(np.arcsin, (ValueError, DOMAIN, lambda x, r: np.greater(np.absolute(x), 1.0))),
    "acos": _unary(np.arccos, (ValueError, DOMAIN, lambda x, r: np.greater(np.absolute(x), 1.0))),
    "atan": _unary(np.arctan),
    "sinh": _unary(np.sinh, (OverflowError, RANGE, _over)),
    "cosh": _unary(np.cosh, (OverflowError, RANGE, _over)),
    "tanh": _unary(np.tanh),
    "fabs": _unary(np.absolute),
    "degrees": _unary(np.degrees),
    "radians": _unary(np.radians),
    "pow": _pow,
    "atan2": lambda y, x: (np.arctan2(y, x), []),
    "copysign": lambda x, y: (np.copysign(x, y), []),
}


def _traced_scalar(x):
    x = resolve(x)
    return isinstance(x, Tracer) and x.ndim == 0 and x.dtype.kind in "biuf"


def _wrap(name, f, traced):
    @functools.wraps(f)
    def g(*args):
        t = current_trace()
        if t is None or t.parent is not None or not any(_traced_scalar(a) for a in args):
            return f(*args)
        xs = [core.astype(core.asarray(resolve(a), t=t), "float64") for a in args]
        r, errors = traced(*xs)
        for exc, msg, cond in errors:
            if not core.error_at_run(cond, exc, msg):
                return f(*args)      # (not recorded: the caller's value of the data, as before)
        return Tracer(r.value, r._tr, weak=True)
    g.spmd_original = f
    return g


def _install():
    for name, traced in FUNCTIONS.items():
        setattr(math, name, _wrap(name, getattr(math, name), traced))


def _restore():
    for name in FUNCTIONS:
        setattr(math, name, getattr(math, name).spmd_original)


# math's FUNCTIONS take traced 0-d values while this context is open in any thread
intercepting = while_tracing(_install, _restore)
