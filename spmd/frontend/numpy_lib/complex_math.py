"""numpy's elementwise math of complex numbers that the IR has no op for (sin, cos, tan,
sinh, cosh, tanh, their inverses, log1p, log2, log10, expm1, exp2, sign), composed from
real ops on the real and imaginary parts.

The formulas are the C99 ones (Annex G) that numpy's complex loops follow, so the parts
keep numpy's values where a textbook formula loses them: a part that overflows in the
plain formula though the result is finite takes the large-argument form; on the real
axis the imaginary part is the input's own zero (sin(2+0j) is real, inf stays inf); the
inverse functions take numpy's side of each branch cut from the sign of the zero part.
Each function takes a complex Tracer and returns one of the same dtype."""
from __future__ import annotations

import numpy as np

from ...ir import dtypes
from ...ir.ops.names import COMPLEX
from .. import core
from .. import elementwise as ew
from . import math_funcs as MF

_LN2, _LOG2E, _LOG10E = float(np.log(2.0)), float(np.log2(np.e)), float(np.log10(np.e))


def parts(z):
    return ew.real(z), ew.imag(z)


def combine(re, im):
    """The complex number re + i im (re, im real and of one dtype), with no arithmetic on
    them: re * 1 + im * 1j would turn an infinite part's zero partner into NaN."""
    return core.emit(re._tr, COMPLEX, re, im)


def _is_zero(v):
    return ew.equal(v, 0.0)


# ---------------------------------------------------------------------------- hyperbolic
def _sinh_cosh_parts(x, y, odd):
    """sinh(x + iy) (odd) or cosh(x + iy): (sinh x cos y, cosh x sin y) or (cosh x cos y,
    sinh x sin y). Where |x| is large, |sinh x| = cosh x = e^|x|/2, taken as (c t)(t/2) with
    t = e^(|x|/2), so a finite product with a small cos or sin does not overflow."""
    big = MF.big_hyperbolic(x)
    xs = ew.where(big, 0.0, x)
    t = ew.exp(ew.multiply(ew.absolute(x), 0.5))
    sgn = ew.copysign(1.0, x)
    cy, sy = ew.cos(y), ew.sin(y)
    sh, ch = MF.sinh(xs), MF.cosh(xs)
    first, second = (sh, ch) if odd else (ch, sh)
    big_re = ew.multiply(ew.multiply(cy, t), ew.multiply(t, 0.5))
    big_im = ew.multiply(ew.multiply(sy, t), ew.multiply(t, 0.5))
    re = ew.where(big, ew.multiply(big_re, sgn) if odd else big_re, ew.multiply(first, cy))
    im = ew.where(big, big_im if odd else ew.multiply(big_im, sgn), ew.multiply(second, sy))
    return re, im


def sinh(z):
    x, y = parts(z)
    re, im = _sinh_cosh_parts(x, y, odd=True)
    # on the real axis: sinh x, and y's own zero (sinh(inf + 0j) is inf + 0j, not inf + nan j)
    on_real = _is_zero(y)
    re = ew.where(on_real, MF.sinh(x), re)
    im = ew.where(on_real, y, im)
    # on the imaginary axis: x's own zero, and sin y (inf * 0 never made)
    on_imag = _is_zero(x)
    re = ew.where(on_imag, ew.multiply(x, ew.where(MF.isfinite(y), ew.cos(y), 1.0)), re)
    im = ew.where(on_imag, ew.sin(y), im)
    return _infinite_x(x, y, re, im)


def cosh(z):
    x, y = parts(z)
    re, im = _sinh_cosh_parts(x, y, odd=False)
    on_real = _is_zero(y)
    re = ew.where(on_real, MF.cosh(x), re)
    # C99: the zero's sign is that of x * y (y a zero; y itself for a NaN x); x = inf gives inf + 0j
    im = ew.where(on_real, ew.where(MF.isnan(x), y, ew.multiply(ew.copysign(1.0, x), y)), im)
    on_imag = _is_zero(x)
    re = ew.where(on_imag, ew.cos(y), re)
    im = ew.where(on_imag, ew.where(MF.isfinite(y), ew.multiply(x, ew.sin(y)), 0.0), im)
    return _infinite_x(x, y, re, im)


def _infinite_x(x, y, re, im):
    """sinh and cosh at x infinite and y not finite: inf + NaN j, as numpy gives."""
    both = ew.logical_and(MF.isinf(x), ew.logical_not(MF.isfinite(y)))
    return combine(ew.where(both, np.inf, re), ew.where(both, np.nan, im))


def tanh(z):
    """Kahan's form: with t = tan y, s = sinh x, b = 1 + t^2: (b s sqrt(1 + s^2), t) / (1 + b s^2);
    for |x| >= 22 (double) the real part is +-1 and the imaginary 4 sin y cos y e^(-2|x|)."""
    x, y = parts(z)
    limit = 22.0 if x.dtype == np.float64 else 9.0
    big = ew.greater_equal(ew.absolute(x), limit)
    xs = ew.where(big, 0.0, x)
    tn = MF.tan(y)
    b = ew.add(1.0, ew.square(tn))
    s = MF.sinh(xs)
    rho = ew.sqrt(ew.add(1.0, ew.square(s)))
    den = ew.add(1.0, ew.multiply(b, ew.square(s)))
    re = ew.true_divide(ew.multiply(ew.multiply(b, rho), s), den)
    im = ew.true_divide(tn, den)
    e = ew.exp(ew.negative(ew.absolute(x)))
    big_im = ew.multiply(ew.multiply(ew.multiply(4.0, ew.sin(y)), ew.cos(y)), ew.multiply(e, e))
    re = ew.where(big, ew.copysign(1.0, x), re)
    im = ew.where(big, big_im, im)
    on_real = _is_zero(y)
    re = ew.where(on_real, ew.tanh(x), re)
    im = ew.where(on_real, y, im)
    # y infinite or NaN: +-1 + 0j where x is infinite, x's zero + NaN j where x is one, else NaN
    inf_x, not_y = MF.isinf(x), ew.logical_not(MF.isfinite(y))
    re = ew.where(not_y, ew.where(inf_x, ew.copysign(1.0, x), ew.where(_is_zero(x), x, np.nan)), re)
    im = ew.where(not_y, ew.where(inf_x, ew.where(MF.isnan(y), 0.0, ew.copysign(0.0, y)), np.nan), im)
    return combine(re, im)


# ---------------------------------------------------------------------------- trigonometric
def _times_i(z):
    """i z."""
    x, y = parts(z)
    return combine(ew.negative(y), x)


def _times_minus_i(z):
    """-i z."""
    x, y = parts(z)
    return combine(y, ew.negative(x))


def sin(z):
    r = _times_minus_i(sinh(_times_i(z)))         # C99: csin(z) = -i csinh(iz)
    # y infinite and x not finite: NaN + inf j, the inf positive as numpy gives it
    re, im = parts(r)
    return combine(re, ew.where(ew.logical_and(MF.isinf(im), ew.logical_not(MF.isfinite(ew.real(z)))),
                                np.inf, im))


def cos(z):
    return cosh(_times_i(z))                      # ccos(z) = ccosh(iz)


def tan(z):
    return _times_minus_i(tanh(_times_i(z)))      # ctan(z) = -i ctanh(iz)


# ---------------------------------------------------------------------------- inverse functions
# Near the unit circle Kahan's forms ("Branch cuts for complex elementary functions") keep
# full accuracy and numpy's side of each cut; for a large |z| (where 1/z^2 is below the
# dtype's precision, and at the infinities) the leading term of each function's expansion:
# asin z = atan2(x, |y|) + i sgn(y) log 2|z|, and the like.
_LARGE = {"float64": 1e8, "float32": 1e4}


def _large(x, y):
    """(|z| is large, log 2|z|, |z|)."""
    h = MF.hypot(x, y)
    return ew.greater(h, _LARGE[x.dtype.name]), ew.add(ew.log(h), _LN2), h


def _sqrt_parts(x, y):
    """The parts of sqrt(x + iy) (the IR's complex sqrt: numpy's branch, the sign of a zero
    y choosing the side of the cut)."""
    return parts(ew.sqrt(combine(x, y)))


def arcsin(z):
    """Kahan's: (atan2(x, Re(sqrt(1-z) sqrt(1+z))), asinh(Im(conj(sqrt(1-z)) sqrt(1+z))))."""
    x, y = parts(z)
    ar, ai = _sqrt_parts(ew.subtract(1.0, x), ew.negative(y))
    br, bi = _sqrt_parts(ew.add(1.0, x), y)
    re = MF.arctan2(x, ew.subtract(ew.multiply(ar, br), ew.multiply(ai, bi)))
    im = MF.arcsinh(ew.subtract(ew.multiply(ar, bi), ew.multiply(ai, br)))
    large, log2h, _ = _large(x, y)
    re = ew.where(large, MF.arctan2(x, ew.absolute(y)), re)
    return combine(ew.where(_zero_and_nan(x, y), x, re), ew.where(large, ew.copysign(log2h, y), im))


def _zero_and_nan(x, y):
    """x a zero and y NaN, where numpy's inverse functions keep an exact real part."""
    return ew.logical_and(_is_zero(x), MF.isnan(y))


def arccos(z):
    """Kahan's: (2 atan2(Re sqrt(1-z), Re sqrt(1+z)), asinh(Im(conj(sqrt(1+z)) sqrt(1-z))))."""
    x, y = parts(z)
    ar, ai = _sqrt_parts(ew.subtract(1.0, x), ew.negative(y))
    br, bi = _sqrt_parts(ew.add(1.0, x), y)
    re = MF.arctan2(ar, br)
    im = MF.arcsinh(ew.subtract(ew.multiply(br, ai), ew.multiply(bi, ar)))
    large, log2h, _ = _large(x, y)
    re = ew.where(large, MF.arctan2(ew.absolute(y), x), ew.add(re, re))
    return combine(ew.where(_zero_and_nan(x, y), float(np.pi / 2), re),
                   ew.where(large, ew.negative(ew.copysign(log2h, y)), im))


def arcsinh(z):
    return _times_minus_i(arcsin(_times_i(z)))     # asinh(z) = -i asin(iz)


def arccosh(z):
    """Kahan's: (asinh(Re(conj(sqrt(z-1)) sqrt(z+1))), 2 atan2(Im sqrt(z-1), Re sqrt(z+1)))."""
    x, y = parts(z)
    ar, ai = _sqrt_parts(ew.subtract(x, 1.0), y)
    br, bi = _sqrt_parts(ew.add(x, 1.0), y)
    re = MF.arcsinh(ew.add(ew.multiply(ar, br), ew.multiply(ai, bi)))
    im = MF.arctan2(ai, br)
    large, log2h, _ = _large(x, y)
    im = ew.where(large, ew.copysign(MF.arctan2(ew.absolute(y), x), y), ew.add(im, im))
    return combine(ew.where(large, log2h, re), ew.where(_zero_and_nan(x, y), float(np.pi / 2), im))


def arctanh(z):
    """Re: log1p(4x / ((1-x)^2 + y^2)) / 4, or log(|1+z| / |1-z|) / 2 near z = +-1, where
    that quotient is not small; Im: atan2(2y, (1-x)(1+x) - y^2) / 2 (on the cut, x > 1 and y
    a zero, +-pi/2 by y's sign). For a large |z|: 1/z, plus +-pi/2 (atanh(1e9j) is
    (pi/2 - 1e-9)j: the imaginary part of 1/z counts, as numpy's does)."""
    x, y = parts(z)
    one_minus, one_plus = ew.subtract(1.0, x), ew.add(1.0, x)
    q = ew.true_divide(ew.multiply(4.0, x), ew.add(ew.square(one_minus), ew.square(y)))
    near_one = ew.logical_not(ew.less(ew.absolute(q), 0.5))
    by_logs = ew.multiply(ew.subtract(ew.log(MF.hypot(one_plus, y)), ew.log(MF.hypot(one_minus, y))), 0.5)
    re = ew.where(near_one, by_logs, ew.multiply(ew.log1p(ew.where(near_one, 0.0, q)), 0.25))
    im = ew.multiply(MF.arctan2(ew.add(y, y), ew.subtract(ew.multiply(one_minus, one_plus), ew.square(y))), 0.5)
    large, _, h = _large(x, y)
    inv_re = ew.where(MF.isinf(h), ew.where(MF.isnan(x), 0.0, ew.copysign(0.0, x)),
                      ew.true_divide(ew.true_divide(x, h), h))
    inv_im = ew.where(MF.isinf(h), 0.0, ew.true_divide(ew.true_divide(y, h), h))
    re = ew.where(_zero_and_nan(x, y), x, ew.where(large, inv_re, re))
    far = ew.where(MF.isnan(y), np.nan, ew.subtract(ew.copysign(float(np.pi / 2), y), inv_im))
    return combine(re, ew.where(large, far, im))


def arctan(z):
    re, im = parts(_times_minus_i(arctanh(_times_i(z))))    # atan(z) = -i atanh(iz)
    x, y = parts(z)
    # x infinite and y NaN: +-pi/2 + 0j, the zero positive as numpy gives it
    return combine(re, ew.where(ew.logical_and(MF.isinf(x), MF.isnan(y)), 0.0, im))


# ---------------------------------------------------------------------------- exp and log
def log1p(z):
    """numpy's: log|1 + z| + i arg(1 + z)."""
    x, y = parts(z)
    x1 = ew.add(x, 1.0)
    return combine(ew.log(MF.hypot(x1, y)), MF.arctan2(y, x1))


def _scaled_log(z, scale):
    """log(z) with each part times a real scale (numpy's log2 and log10: a complex product
    would make log(0)'s zero imaginary part NaN)."""
    x, y = parts(ew.log(z))
    return combine(ew.multiply(x, scale), ew.multiply(y, scale))


def log2(z):
    return _scaled_log(z, _LOG2E)


def log10(z):
    return _scaled_log(z, _LOG10E)


def expm1(z):
    """numpy's: (expm1(x) cos y - 2 sin^2(y/2), e^x sin y), accurate where z is near 0."""
    x, y = parts(z)
    a = ew.sin(ew.multiply(y, 0.5))
    re = ew.subtract(ew.multiply(MF.expm1(x), ew.cos(y)), ew.multiply(2.0, ew.square(a)))
    return combine(re, ew.multiply(ew.exp(x), ew.sin(y)))


def exp2(z):
    """numpy's: e^(z ln 2), the product taken part by part."""
    x, y = parts(z)
    return ew.exp(combine(ew.multiply(x, _LN2), ew.multiply(y, _LN2)))


def sign(z):
    """numpy's: z / |z|, and 0 at 0; with one part infinite, that part's sign (the other
    part 0)."""
    x, y = parts(z)
    r = MF.hypot(x, y)
    zero = _is_zero(r)
    safe = ew.where(zero, 1.0, r)
    re = ew.where(zero, 0.0, ew.true_divide(x, safe))
    im = ew.where(zero, 0.0, ew.true_divide(y, safe))
    inf_x, inf_y = MF.isinf(x), MF.isinf(y)
    one_inf = ew.not_equal(inf_x, inf_y)

    def unit(v, inf_v):
        return ew.where(inf_v, ew.copysign(1.0, v), 0.0)
    return combine(ew.where(one_inf, unit(x, inf_x), re), ew.where(one_inf, unit(y, inf_y), im))


def or_real(real_f, complex_f):
    """numpy's ufunc: complex_f for a complex argument, real_f for any other."""
    def f(x, *args, **kwargs):
        z = core.asarray(x)
        if dtypes.is_complex(z.value.dtype):
            core.no_extra(real_f.__name__, args, kwargs)
            return complex_f(z)
        return real_f(x, *args, **kwargs)
    f.__name__, f.__doc__ = real_f.__name__, real_f.__doc__
    return f
