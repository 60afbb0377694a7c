"""numpy's concatenating index objects on traced values: `np.c_[np.ones(n), X]`,
`np.r_[x, 0.0, y]`, `np.r_["0,2", a, b]`.

`np.c_` and `np.r_` are instances whose `[...]` converts each item with `np.array`,
which a traced value can give only with a value of the data (a graph break). While a
thread traces, their class's `__getitem__` takes a key holding a traced item to the
traced ops instead, with numpy's rules: each item made at least `ndmin`-d (ones
prepended), a 1-d item moved to the axis `trans1d` names (np.c_: a column), slices as
numpy's ranges, scalars promoting as Python's or numpy's scalars do (NEP 50), the
directives in a leading string, then one concatenate along `axis`. A key without a traced
item goes to numpy's own method, so numpy is as it was for every other caller.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import user_loc
from . import core, shapes
from .patching import while_tracing
from .trace import NumpyBuffer, Tracer, current_trace, resolve

# the class numpy's np.r_ and np.c_ get their __getitem__ from
CONCATENATOR = next(c for c in type(np.r_).__mro__ if "__getitem__" in vars(c))


def _is_traced(x) -> bool:
    return isinstance(x, Tracer) or (isinstance(x, NumpyBuffer) and x.live())


def _directive(text, settings):
    """A leading string: 'axis', 'axis,ndmin' or 'axis,ndmin,trans1d' (numpy's errors)."""
    if text in ("r", "c"):
        raise NotImplementedError(f"np.r_ / np.c_ with the matrix directive {text!r} on traced values "
                                  f"(at {user_loc()}): np.matrix is not traced")
    try:
        numbers = [int(p) for p in text.split(",")]
    except ValueError:
        raise ValueError(f"unknown special directive {text!r} (at {user_loc()})") from None
    if len(numbers) > 3:
        raise ValueError(f"unknown special directive {text!r} (at {user_loc()})")
    for k, v in zip(("axis", "ndmin", "trans1d"), numbers):
        settings[k] = v


def _at_least(x, ndmin, trans1d):
    """x with ones prepended up to ndmin dims; with trans1d, x's own dims end at trans1d's
    place, as numpy arranges them (a 1-d x in np.c_ becomes a column)."""
    nd = x.ndim
    if nd >= ndmin:
        return x
    x = shapes.reshape(x, (1,) * (ndmin - nd) + tuple(x.shape))
    if trans1d == -1:
        return x
    added = ndmin - nd
    at = trans1d + added + 1 if trans1d < 0 else trans1d
    order = list(range(ndmin))
    return shapes.transpose(x, order[:at] + order[added:] + order[at:added])


def traced_getitem(conc, key):
    """conc[key] for a key holding traced values."""
    items = key if isinstance(key, tuple) else (key,)
    settings = {"axis": conc.axis, "ndmin": conc.ndmin, "trans1d": conc.trans1d}
    if conc.matrix:
        raise NotImplementedError(f"np.r_ / np.c_ making an np.matrix of traced values (at {user_loc()})")
    parts, kinds = [], []
    t = current_trace()
    for k, item in enumerate(items):
        if isinstance(item, str):
            if k != 0:
                raise ValueError(f"special directives must be the first entry (at {user_loc()})")
            _directive(item, settings)
            continue
        ndmin, trans1d = settings["ndmin"], settings["trans1d"]
        if isinstance(item, slice) or type(item) in np.ScalarType:
            # a range (numpy's, constant) or a scalar: numpy's own conversion of it alone
            alone = ORIGINAL(CONCATENATOR(0, False, ndmin, trans1d), (item,))
            parts.append(core.asarray(alone, t=t))
            kinds.append(item if type(item) in np.ScalarType else alone)
            continue
        x = core.asarray(resolve(item), t=t)
        parts.append(_at_least(x, ndmin, trans1d))
        kinds.append(x)
    if not parts:
        return np.array([])
    dt = core.result_dtype(*kinds)
    return np.concatenate([core.astype(p, dt) for p in parts], axis=settings["axis"])


def _getitem(original):
    @functools.wraps(original)
    def getitem(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if current_trace() is None or not any(_is_traced(x) for x in items):
            return original(self, key)
        return traced_getitem(self, key)
    getitem.spmd_original = original
    return getitem


ORIGINAL = vars(CONCATENATOR)["__getitem__"]


def _install():
    CONCATENATOR.__getitem__ = _getitem(ORIGINAL)


def _restore():
    CONCATENATOR.__getitem__ = ORIGINAL


# np.r_ / np.c_ take traced items while this context is open in any thread
intercepting = while_tracing(_install, _restore)
