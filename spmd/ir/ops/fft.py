"""Discrete Fourier transforms (numpy.fft): one op, `fft`, with attributes

- kind: "fft" (complex -> complex, forward), "ifft" (complex -> complex, inverse),
  "rfft" (real -> complex: the last axis of `axes` keeps n//2+1 coefficients) or
  "irfft" (complex -> real: the last axis grows from n//2+1 coefficients to n samples);
- axes: the transformed dims, in numpy's order (the real-signal axis last);
- n: the real-signal length along the last axis (rfft: the operand's, irfft: the
  result's; c2c: the operand's);
- norm: numpy's "backward" / "ortho" / "forward".

The operand is already padded or truncated to the transform lengths (the numpy layer
emits pad / slice for numpy's `n=` / `s=`), so the op is a pure transform; its reference
is numpy's pocketfft.

Sharding: every dim is a pass-through or `permute` factor, and the op has its own
partition rule (sharding/partition_rules/fft.py): transformed dims that are whole on a device are transformed locally;
a transformed dim that arrives split is made whole by an all_to_all that moves its split
to a dim the transform does not need now (a batch dim, or one already transformed: the
pencil decomposition of a distributed multi-dimensional FFT), never by gathering the
array. Only an array whose every dim still needs transforming and has no other dim to
hold the split is gathered, with a ReshardWarning naming the user's line.

Derivatives follow JAX's convention (a complex cotangent is conjugate-linear): the DFT
matrix is symmetric, so a c2c transform's VJP is the same transform; rfft's is the real
part of a forward c2c transform of the zero-extended cotangent; irfft's is the
conjugate of an rfft (with the dual normalisation) weighted 2 for the coefficients that
stand for a conjugate pair.
"""
import numpy as np

from ..factors import einsum_rule, letters
from .elementwise import aval
from .names import BROADCAST_IN_DIM, CONJ, CONSTANT, FFT, MULTIPLY, PAD, REAL
from .registry import OpDef, check, register

KINDS = ("fft", "ifft", "rfft", "irfft")
NORMS = ("backward", "ortho", "forward")
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}
REAL_OF = {v: k for k, v in COMPLEX_OF.items()}
DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _infer(x, kind, axes, n, norm):
    check(kind in KINDS, f"unknown fft kind {kind!r} (takes {', '.join(KINDS)})")
    check(norm in NORMS, f"unknown fft norm {norm!r} (takes {', '.join(NORMS)})")
    axes = tuple(axes)
    check(len(axes) >= 1 and len(set(axes)) == len(axes) and all(0 <= a < len(x.shape) for a in axes),
          f"fft axes {list(axes)} must be distinct dims of a rank-{len(x.shape)} operand")
    check(isinstance(n, int) and n >= 1, f"fft length n must be a positive int, got {n!r}")
    last = axes[-1]
    shape = list(x.shape)
    check(all(shape[a] >= 1 for a in axes), f"fft of an empty axis: shape {shape}, axes {list(axes)}")
    if kind in ("fft", "ifft"):
        check(x.dtype in REAL_OF, f"{kind} takes complex64/complex128, got {x.dtype}")
        check(shape[last] == n, f"{kind}: n={n} but the operand has {shape[last]} along dim {last}")
        return aval(shape, x.dtype)
    if kind == "rfft":
        check(x.dtype in COMPLEX_OF, f"rfft takes float32/float64, got {x.dtype}")
        check(shape[last] == n, f"rfft: n={n} but the operand has {shape[last]} along dim {last}")
        shape[last] = n // 2 + 1
        return aval(shape, COMPLEX_OF[x.dtype])
    check(x.dtype in REAL_OF, f"irfft takes complex64/complex128, got {x.dtype}")
    check(shape[last] == n // 2 + 1, f"irfft: n={n} needs {n // 2 + 1} coefficients along dim {last}, "
                                     f"the operand has {shape[last]}")
    shape[last] = n
    return aval(shape, REAL_OF[x.dtype])


def _ref(x, kind, axes, n, norm):
    axes = list(axes)
    if kind == "fft":
        out, dt = np.fft.fftn(x, axes=axes, norm=norm), x.dtype
    elif kind == "ifft":
        out, dt = np.fft.ifftn(x, axes=axes, norm=norm), x.dtype
    elif kind == "rfft":
        out, dt = np.fft.rfftn(x, axes=axes, norm=norm), COMPLEX_OF[x.dtype.name]
    else:
        s = [x.shape[a] for a in axes[:-1]] + [n]
        out, dt = np.fft.irfftn(x, s=s, axes=axes, norm=norm), REAL_OF[x.dtype.name]
    return np.ascontiguousarray(out, dtype=dt)


def _vjp(g, op, ct):
    x = op.operands[0]
    kind, axes, n, norm = (op.attrs[k] for k in ("kind", "axes", "n", "norm"))
    last = axes[-1]
    if kind in ("fft", "ifft"):
        return (g.emit(FFT, ct, **op.attrs),)
    if kind == "rfft":
        m = ct.shape[last]
        zero = g.emit(CONSTANT, value=np.zeros((), ct.dtype))
        hi = [0] * ct.ndim
        hi[last] = n - m
        full = g.emit(PAD, ct, zero, low=(0,) * ct.ndim, high=tuple(hi), interior=(0,) * ct.ndim)
        return (g.emit(REAL, g.emit(FFT, full, kind="fft", axes=axes, n=n, norm=norm)),)
    # irfft: w * conj(rfft(ct, dual norm)), w = 1 at the coefficients with no conjugate pair
    u = g.emit(CONJ, g.emit(FFT, ct, kind="rfft", axes=axes, n=n, norm=DUAL[norm]))
    m = n // 2 + 1
    w = np.full(m, 2.0, REAL_OF[x.dtype])
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    wv = g.emit(CONSTANT, value=w.astype(x.dtype))
    wb = g.emit(BROADCAST_IN_DIM, wv, shape=x.shape, broadcast_dimensions=(last,))
    return (g.emit(MULTIPLY, u, wb),)


def _factors(ins, outs, attrs):
    """Every dim passes through; the transformed ones are `permute` factors (they may
    arrive split: the partition rule moves the split, see the module doc). The real
    axis of rfft / irfft changes length; its factor spans both sizes, as pad's does."""
    a = letters(len(ins[0].shape))
    return einsum_rule(f"{a}->{a}", ins, outs, permute="".join(a[d] for d in attrs["axes"]))


def _flops(ins, out, attrs):
    size = max(int(np.prod(ins[0].shape, dtype=np.int64)), int(np.prod(out.shape, dtype=np.int64)))
    n = int(np.prod([max(ins[0].shape[a], out.shape[a]) for a in attrs["axes"]], dtype=np.int64))
    return int(5 * size * max(1.0, np.log2(max(n, 1))))


register(OpDef("fft", family="fft", infer=_infer, ref=_ref, vjp=_vjp, factors=_factors, flops=_flops,
               dtypes=("float32", "float64", "complex64", "complex128"), linear=((0,),),
               lowering="spectral"))
