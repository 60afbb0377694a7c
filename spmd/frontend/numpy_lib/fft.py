"""np.fft on Tracers, with numpy's signatures and semantics (NumPy 2): `n=` / `s=` zero-pad
or truncate the input along the transformed axes (irfft's `n` is the output length,
default 2 * (m - 1)), `norm=` is "backward" (default), "ortho" or "forward", and the
result keeps the input's precision (float32 / complex64 -> complex64; ints and bools are
computed in float64 / complex128).

Each transform is one `fft` op (ir/ops/fft.py) over all its axes, so a multi-dimensional
transform of an array split along a transformed axis runs as a pencil decomposition
(all_to_all, never a gather). numpy applies repeated axes one after another; so does
this layer. fftshift / ifftshift are rolls; fftfreq / rfftfreq take no arrays, so numpy
computes them itself (constants in a traced program).
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import ShapeError, user_loc
from ...ir.ops.names import CONJ, FFT
from .. import core
from . import shape_funcs as SF

NORMS = ("backward", "ortho", "forward")
SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _norm(norm, name):
    norm = "backward" if norm is None else norm
    if norm not in NORMS:
        raise ValueError(f'np.fft.{name}: invalid norm value {norm}; should be "backward", "ortho" or '
                         f'"forward" (at {user_loc()})')
    return norm


def _axis(a, ndim, name):
    a = int(a)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(f"np.fft.{name}: axis {a} is out of bounds for array of dimension "
                                      f"{ndim} (at {user_loc()})")
    return a % ndim


def _inexact(x, name, complex_=True):
    """x converted to the dtype numpy's pocketfft computes in."""
    x = core.asarray(x)
    dt = x.dtype.name
    if dt.startswith("complex"):
        if not complex_:
            raise TypeError(f"np.fft.{name} takes real input, got {dt}; use np.fft.fft for complex "
                            f"input (at {user_loc()})")
        return x
    real = dt if dt in ("float32", "float64") else "float64"
    if complex_:
        return core.astype(x, {"float32": "complex64", "float64": "complex128"}[real])
    return core.astype(x, real)


def _resize(x, axis, n, name):
    """numpy's n=: truncate to the first n, or zero-pad at the end."""
    if n < 1:
        raise ValueError(f"np.fft.{name}: invalid number of FFT data points ({n}) specified "
                         f"(at {user_loc()})")
    have = x.shape[axis]
    if have == n:
        return x
    if have > n:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, n)
        return x[tuple(idx)]
    width = [(0, 0)] * x.ndim
    width[axis] = (0, n - have)
    return SF.pad(x, width)


def _emit(x, kind, axes, n, norm):
    return core.emit(x._tr, FFT, x, kind=kind, axes=tuple(axes), n=int(n), norm=norm)


def _transform(a, kind, s, axes, norm, name):
    """One transform over axes (distinct), s per axis (irfft: the output lengths)."""
    x = _inexact(a, name, complex_=kind != "rfft")
    axes = list(axes)
    for ax, n in zip(axes[:-1], s[:-1]):
        x = _resize(x, ax, n, name)
    last, n = axes[-1], s[-1]
    if n < 1:
        raise ValueError(f"np.fft.{name}: invalid number of data points ({n}) specified (at {user_loc()})")
    x = _resize(x, last, n // 2 + 1 if kind == "irfft" else n, name)
    return core.order_like(_emit(x, kind, axes, n, norm), core.asarray(a))      # numpy: a's order of axes


# -- one-dimensional ---------------------------------------------------------------------------
def _one(kind, name):
    def f(a, n=None, axis=-1, norm=None, out=None):
        x = core.asarray(a)
        if x.ndim == 0:
            raise np.exceptions.AxisError(f"np.fft.{name}: axis {axis} is out of bounds for array of "
                                          f"dimension 0 (at {user_loc()})")
        ax = _axis(axis, x.ndim, name)
        if n is None:
            n = (x.shape[ax] - 1) * 2 if kind == "irfft" else x.shape[ax]
        return _transform(x, kind, [int(n)], [ax], _norm(norm, name), name)
    f.__name__ = name
    return f


fft = _one("fft", "fft")
ifft = _one("ifft", "ifft")
rfft = _one("rfft", "rfft")
irfft = _one("irfft", "irfft")


def hfft(a, n=None, axis=-1, norm=None, out=None):
    """The FFT of a Hermitian-symmetric signal: irfft of its conjugate, norms swapped."""
    x = _inexact(a, "hfft")
    ax = _axis(axis, x.ndim, "hfft")
    if n is None:
        n = (x.shape[ax] - 1) * 2
    return irfft(core.emit(x._tr, CONJ, x), n, ax, SWAP[_norm(norm, "hfft")])


def ihfft(a, n=None, axis=-1, norm=None, out=None):
    x = core.asarray(a)
    r = rfft(x, n, axis, SWAP[_norm(norm, "ihfft")])
    return core.emit(r._tr, CONJ, r)


# -- n-dimensional -------------------------------------------------------------------------------
def _cook(x, s, axes, invreal, name):
    """numpy's _cook_nd_args: the lengths and axes of an n-d transform."""
    shapeless = s is None
    if s is None:
        s = list(x.shape) if axes is None else [x.shape[_axis(a, x.ndim, name)] for a in axes]
    s = list(s)
    if axes is None:
        if not shapeless:
            warnings.warn("`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0); "
                          "pass axes explicitly", DeprecationWarning, stacklevel=4)
        axes = list(range(-len(s), 0))
    axes = [_axis(a, x.ndim, name) for a in axes]
    if len(s) != len(axes):
        raise ValueError(f"np.fft.{name}: shape and axes have different lengths (at {user_loc()})")
    if not axes:
        raise ShapeError(f"np.fft.{name}: no axes to transform (at {user_loc()})")
    if invreal and shapeless:
        s[-1] = (x.shape[axes[-1]] - 1) * 2
    s = [x.shape[a] if v == -1 or v is None else int(v) for v, a in zip(s, axes)]
    return s, axes


def _nd(kind, name):
    def f(a, s=None, axes=None, norm=None, out=None):
        x = core.asarray(a)
        norm_ = _norm(norm, name)
        s_, axes_ = _cook(x, s, axes, kind == "irfft", name)
        if len(set(axes_)) == len(axes_):
            return _transform(x, kind, s_, axes_, norm_, name)
        # repeated axes: numpy transforms one axis at a time
        if kind in ("fft", "ifft"):
            for ii in reversed(range(len(axes_))):
                x = _transform(x, kind, [s_[ii]], [axes_[ii]], norm_, name)
            return x
        if kind == "rfft":
            x = _transform(x, "rfft", [s_[-1]], [axes_[-1]], norm_, name)
            for ii in range(len(axes_) - 1):
                x = _transform(x, "fft", [s_[ii]], [axes_[ii]], norm_, name)
            return x
        for ii in range(len(axes_) - 1):
            x = _transform(x, "ifft", [s_[ii]], [axes_[ii]], norm_, name)
        return _transform(x, "irfft", [s_[-1]], [axes_[-1]], norm_, name)
    f.__name__ = name
    return f


fftn, ifftn, rfftn, irfftn = (_nd(k, k + "n") for k in ("fft", "ifft", "rfft", "irfft"))


def _two(nd, name):
    def f(a, s=None, axes=(-2, -1), norm=None, out=None):
        return nd(a, s, axes, norm)
    f.__name__ = name
    return f


fft2, ifft2, rfft2, irfft2 = (_two(f, k + "2") for f, k in ((fftn, "fft"), (ifftn, "ifft"),
                                                            (rfftn, "rfft"), (irfftn, "irfft")))


# -- shifts ----------------------------------------------------------------------------------------
def _shift(sign, name):
    def f(x, axes=None):
        x = core.asarray(x)
        if axes is None:
            axes = tuple(range(x.ndim))
        elif isinstance(axes, (int, np.integer)):
            axes = (int(axes),)
        axes = tuple(_axis(a, x.ndim, name) for a in axes)
        if not axes:
            return x
        shift = tuple(sign * (x.shape[a] // 2) for a in axes)
        return SF.roll(x, shift, axes)
    f.__name__ = name
    return f


fftshift = _shift(1, "fftshift")
ifftshift = _shift(-1, "ifftshift")
