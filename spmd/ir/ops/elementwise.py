"""Elementwise ops: unary and binary math, compare, select, convert, logical ops.

Binary ops take operands of one shape and dtype (StableHLO); the tracer broadcasts and
promotes before it emits them.
"""
import functools
import math

import numpy as np

from ..aval import Aval
from ..dtypes import INTS, SMALL_INTS
from ..factors import einsum_rule, letters
from .names import (
    ABS, ADD, BROADCAST_IN_DIM, COMPARE, CONJ, CONSTANT, CONVERT, COS, DIVIDE, FLOOR, IMAG, LOG,
    MULTIPLY, NEGATE, POWER, REAL, SELECT, SIGN, SIN, SUBTRACT
)
from .registry import OpDef, check, is_const, producer_is, register, splat

NUM = ("float32", "float64", "int32", "int64", "float16", "bfloat16") + SMALL_INTS
FLOAT = ("float32", "float64", "float16", "bfloat16")
ALL = NUM + ("bool",)
INTS_BOOL = INTS + ("bool",)
CPLX = ("complex64", "complex128")
REAL_OF = {"complex64": "float32", "complex128": "float64"}


def aval(shape, dtype):
    return Aval(tuple(shape), dtype)


def elementwise_factors(avals_in, avals_out, attrs):
    r = letters(len(avals_out[0].shape))
    return einsum_rule(",".join([r] * len(avals_in)) + "->" + r, avals_in, avals_out)


def _infer_unary(allowed):
    def infer(x, **_):
        check(x.dtype in allowed, f"dtype {x.dtype} not supported (takes {', '.join(allowed)})")
        return aval(x.shape, x.dtype)
    return infer


def _infer_binary(allowed, out_dtype=None):
    def infer(x, y, **_):
        check(x.shape == y.shape, f"operand shapes differ: {list(x.shape)} vs {list(y.shape)}")
        check(x.dtype == y.dtype, f"operand dtypes differ: {x.dtype} vs {y.dtype}")
        check(x.dtype in allowed, f"dtype {x.dtype} not supported (takes {', '.join(allowed)})")
        return aval(x.shape, out_dtype or x.dtype)
    return infer


def sampled(allowed):
    """The dtypes the OpInfo tests feed an op: the small and unsigned ints have their own
    property tests (tests/frontend/test_small_ints.py), so the per-op tables stay small."""
    return tuple(d for d in allowed if d not in SMALL_INTS)


# an elementwise op's flops are element-ops, the unit of Machine.element: the seconds an
# element of a float32 add takes in a fused kernel (calibrated, a tree of adds over
# arrays the cache holds). `ops` is an op's weight in them for elements of 4 bytes or
# fewer, `wide` for 8 (float64, int64; complex: its parts'): by default twice `ops`, a
# vector register holding half as many. A function's weights are what the LLVM backend's
# code for it measured on x86-64 with AVX2 against that add (benchmarks/element_ops.py:
# float32 exp ~30, float64 exp ~120, float64 tanh ~1250, sin ~500 either: exp, the
# float32 log and tanh vectorise, libm's other double-precision ones and its sin, cos, pow
# and fmod are a call an element (float64 exp measured 49.5 against float32's 10.2 on an
# AVX-512 machine, whose float32 weights measure a third of AVX2's); a divide ~16,
# float64's ~27, sqrt ~14 and ~52: a kernel of layers of them, as calibrate's adds, benchmarks/element_ops.py's `--layers`), not the
# multiply-adds of its polynomial
def element_ops(ops, wide=None):
    """The `flops` rule of an elementwise op of weights (`ops`, `wide`), per result element."""
    wide = 2 * ops if wide is None else wide

    def flops(ins, out, attrs):
        # (math.prod: called per op by the cost model, numpy's reduction costs more than the product)
        size = max(_itemsize(a.dtype) for a in (out, *ins))
        return (ops if size <= 4 else wide * (size // 8)) * math.prod(int(d) for d in out.shape)
    return flops


@functools.cache
def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize


def _weighted(flops):
    """unary's and binary's `flops`: a weight, (ops, wide) weights (element_ops), or a rule."""
    if callable(flops):
        return flops
    return element_ops(*flops) if isinstance(flops, tuple) else element_ops(flops)


def unary(name, ref, vjp, allowed=FLOAT, scalar=None, flops=1, **rules):
    register(OpDef(name, family="elementwise", infer=_infer_unary(allowed), ref=ref, vjp=vjp,
                   factors=elementwise_factors, scalar=scalar, flops=_weighted(flops), dtypes=sampled(allowed), priority=0,
                   fusion="elementwise", lowering="elementwise", **rules))


def binary(name, ref, vjp, allowed=NUM, scalar=None, out_dtype=None, flops=1, **rules):
    register(OpDef(name, family="elementwise", infer=_infer_binary(allowed, out_dtype), ref=ref, vjp=vjp,
                   factors=elementwise_factors, scalar=scalar, flops=_weighted(flops), dtypes=sampled(allowed), priority=0,
                   fusion="elementwise", lowering="elementwise", **rules))


# -- simplification rules (see OpDef.simplify) ------------------------------------------------
def _unit_right(c):
    """x op c -> x."""
    return lambda rb, op, ops, uses: ops[0] if is_const(ops[1], c) else None


def _unit_either(c):
    """x op c -> x and c op x -> x."""
    def rule(rb, op, ops, uses):
        if is_const(ops[1], c):
            return ops[0]
        if is_const(ops[0], c):
            return ops[1]
        return None
    return rule


def _power_simplify(rb, op, ops, uses):
    """x**1 -> x, x**2 -> x*x, x**-1 -> 1/x (floats): each is exactly numpy's (its power
    loop squares and takes reciprocals for these exponents, one rounding each). x**3 stays
    a power: x*x*x rounds twice, and differs from numpy's pow in the last bits."""
    x, r = ops[0], op.result
    e = splat(ops[1])
    if r.dtype not in FLOAT or e is None:
        return None
    e = float(e)
    mul = lambda p, q: rb.emit(MULTIPLY, p, q, loc=op.loc, sharding=r.sharding)  # noqa: E731
    if e == 1:
        return x
    if e == 2:
        return mul(x, x)
    if e == -1:
        one = rb.emit(BROADCAST_IN_DIM, rb.emit(CONSTANT, value=np.array(1, r.dtype)),
                      shape=r.shape, broadcast_dimensions=())
        return rb.emit(DIVIDE, one, x, loc=op.loc, sharding=r.sharding)
    return None


def _is_zero(v, sign):
    """Is Value v all zeros of the given sign? (ints: any zero; floats: -0.0 is sign=-1.)"""
    s = splat(v)
    if s is None or s != 0:
        return False
    if v.dtype in CPLX:                 # both parts' zeros must have the sign
        c = complex(s)
        return all(bool(np.signbit(p)) == (sign < 0) for p in (c.real, c.imag))
    return v.dtype not in FLOAT or bool(np.signbit(s)) == (sign < 0)


def _add_simplify(rb, op, ops, uses):
    """x + 0 -> x, exact only for -0.0 on floats (numpy: -0.0 + 0.0 == +0.0)."""
    if _is_zero(ops[1], -1):
        return ops[0]
    if _is_zero(ops[0], -1):
        return ops[1]
    return None


def _sub_simplify(rb, op, ops, uses):
    """x - 0 -> x, exact only for +0.0 on floats (numpy: -0.0 - -0.0 == +0.0)."""
    return ops[0] if _is_zero(ops[1], +1) else None


def _negate_simplify(rb, op, ops, uses):
    """--x -> x."""
    return ops[0].producer.operands[0] if producer_is(ops[0], NEGATE) else None


def _select_simplify(rb, op, ops, uses):
    """select(p, x, x) -> x; a constant predicate picks its branch."""
    if ops[1] is ops[2]:
        return ops[1]
    p = splat(ops[0])
    if p is not None:
        return ops[1] if p else ops[2]
    return None


def _convert_simplify(rb, op, ops, uses):
    return ops[0] if ops[0].dtype == op.result.dtype else None


def _float_only(sets):
    """Linear only where the op is exact arithmetic on floats (integer division truncates)."""
    return lambda op: sets if op.result.dtype.startswith(("float", "complex")) else []


# -- VJP helpers: they build IR with the graph's emit -------------------------------------
def const_like(g, v, c):
    """A scalar constant broadcast to v's shape and dtype."""
    s = g.emit(CONSTANT, value=np.array(c, dtype=v.dtype))
    return g.emit(BROADCAST_IN_DIM, s, shape=v.shape, broadcast_dimensions=())


def _cast_ref(f):
    """numpy ufuncs may return a wider dtype for 0-d inputs; keep the operand's."""
    def ref(*xs, **_):
        with np.errstate(all="ignore"):
            out = f(*xs)
        return np.asarray(out, dtype=xs[-1].dtype)
    return ref


def _int_divide(x, y):
    if x.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            safe = np.where(y == 0, 1, y)
            # truncating division from numpy's floor division (no abs(): abs(INT_MIN) wraps)
            q = x // safe
            q = q + ((x % safe != 0) & ((x < 0) != (safe < 0)))
            return np.where(y == 0, 0, q).astype(x.dtype)
    return x / y


def _int_power(x, y):
    if x.dtype.kind in "iu":
        # integer power with a negative exponent is 0 (1 for base 1, +-1 for base -1), as in XLA
        ok = y >= 0
        with np.errstate(all="ignore"):
            r = np.power(x, np.where(ok, y, 0).astype(y.dtype))
        if x.dtype.kind == "u":
            return r
        # (in x's dtype: uint64 with int64 would make float64, and round)
        neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0)).astype(x.dtype)
        return np.where(ok, r, neg).astype(x.dtype)
    return np.power(x, y)


def _pick_vjp(g, x, y, ct, direction):
    """Gradient of max (GT) / min (LT): to the winner; split evenly on ties, as JAX does."""
    win = g.emit(CONVERT, g.emit(COMPARE, x, y, direction=direction), dtype=x.dtype)
    tie = g.emit(CONVERT, g.emit(COMPARE, x, y, direction="EQ"), dtype=x.dtype)
    wx = g.emit(ADD, win, g.emit(MULTIPLY, tie, const_like(g, tie, 0.5)))
    wy = g.emit(SUBTRACT, const_like(g, wx, 1.0), wx)
    return g.emit(MULTIPLY, ct, wx), g.emit(MULTIPLY, ct, wy)


def _max_vjp(g, op, ct):
    return _pick_vjp(g, *op.operands, ct, "GT")


def _min_vjp(g, op, ct):
    return _pick_vjp(g, *op.operands, ct, "LT")


def _pow_vjp(g, op, ct):
    x, y = op.operands
    out = op.result
    one = const_like(g, y, 1.0)
    dx = g.emit(MULTIPLY, ct, g.emit(MULTIPLY, y, g.emit(POWER, x, g.emit(SUBTRACT, y, one))))
    if x.dtype in CPLX:       # holomorphic: d/dy x**y = log(x) x**y (JAX: no conjugate)
        return dx, g.emit(MULTIPLY, ct, g.emit(MULTIPLY, g.emit(LOG, x), out))
    # d/dy x**y = log(x) x**y, taken as 0 where x <= 0 (as JAX does)
    pos = g.emit(COMPARE, x, const_like(g, x, 0.0), direction="GT")
    safe_x = g.emit(SELECT, pos, x, const_like(g, x, 1.0))
    dy = g.emit(MULTIPLY, ct, g.emit(MULTIPLY, g.emit(LOG, safe_x), out))
    return dx, dy


def _rem_vjp(g, op, ct):
    """fmod(x, y) = x - y * trunc(x / y): d/dx = 1, d/dy = -trunc(x / y) (away from jumps)."""
    x, y = op.operands
    q = g.emit(DIVIDE, x, y)
    trunc = g.emit(MULTIPLY, g.emit(SIGN, q), g.emit(FLOOR, g.emit(ABS, q)))
    return ct, g.emit(NEGATE, g.emit(MULTIPLY, ct, trunc))


E = lambda g, name, *a, **k: g.emit(name, *a, **k)  # noqa: E731

binary("add", _cast_ref(np.add), lambda g, op, ct: (ct, ct), NUM + CPLX,
       scalar=lambda b, x, y: b.add(x, y), linear=((0, 1),), simplify=_add_simplify, lowers_complex=True, infix="+",
       position=lambda a, b: a + b)
binary("subtract", _cast_ref(np.subtract), lambda g, op, ct: (ct, E(g, NEGATE, ct)),
       NUM + CPLX, scalar=lambda b, x, y: b.sub(x, y), linear=((0, 1),), simplify=_sub_simplify,
       lowers_complex=True, infix="-", position=lambda a, b: a - b)
binary("multiply", _cast_ref(np.multiply),
       lambda g, op, ct: (E(g, MULTIPLY, ct, op.operands[1]), E(g, MULTIPLY, ct, op.operands[0])),
       NUM + CPLX, scalar=lambda b, x, y: b.mul(x, y), linear=((0,), (1,)), simplify=_unit_either(1),
       lowers_complex=True, infix="*", position=lambda a, b: a * b)
# a divide's element-ops (float32, float64): benchmarks/element_ops.py --layers
DIVIDE_OPS = (16, 27)
binary("divide", _cast_ref(_int_divide),
       lambda g, op, ct: (E(g, DIVIDE, ct, op.operands[1]),
                          E(g, NEGATE, E(g, DIVIDE, E(g, MULTIPLY, ct, op.result), op.operands[1]))),
       NUM + CPLX, scalar=lambda b, x, y: b.div(x, y), linear=_float_only([(0,)]), simplify=_unit_right(1),
       infix="/", flops=DIVIDE_OPS, divider=True)
binary("maximum", _cast_ref(np.maximum), _max_vjp, scalar=lambda b, x, y: b.max(x, y), flops=(4, 8))
binary("minimum", _cast_ref(np.minimum), _min_vjp, scalar=lambda b, x, y: b.min(x, y), flops=(4, 8))
# a power of a constant integer exponent in -1..4 the LLVM backend computes as multiplies
# (backends/llvm/scalar.py's pow: x ** 3 is two, and vectorises; each waits for the last,
# ~2 adds), any other a call of libm's pow an element (x ** 2.5 or x ** y: ~450 adds of
# float32)
MULTIPLIED_EXPONENTS = range(-1, 5)
_POW = element_ops(450, 1100)
_MULTIPLIES = {n: element_ops(*DIVIDE_OPS) if n < 0 else element_ops(2 * max(n - 1, 0)) for n in MULTIPLIED_EXPONENTS}


def _power_flops(ins, out, attrs):
    e = splat(ins[1]) if getattr(ins[1], "producer", None) is not None else None
    n = float(e) if e is not None and out.dtype in FLOAT else None
    if n is not None and n.is_integer() and int(n) in MULTIPLIED_EXPONENTS:
        return _MULTIPLIES[int(n)](ins, out, attrs)
    return _POW(ins, out, attrs)


binary("power", _cast_ref(_int_power), _pow_vjp, NUM + CPLX, scalar=lambda b, x, y: b.pow(x, y), flops=_power_flops,
       simplify=_power_simplify, infix="**")
binary("remainder", _cast_ref(np.fmod), _rem_vjp, scalar=lambda b, x, y: b.rem(x, y), infix="%", flops=(1350, 1350))
binary("and", _cast_ref(np.bitwise_and), None, INTS_BOOL, scalar=lambda b, x, y: b.and_(x, y),
       infix="&", position=lambda a, b: a & b)
binary("or", _cast_ref(np.bitwise_or), None, INTS_BOOL, scalar=lambda b, x, y: b.or_(x, y),
       infix="|", position=lambda a, b: a | b)
binary("xor", _cast_ref(np.bitwise_xor), None, INTS_BOOL, scalar=lambda b, x, y: b.xor(x, y),
       infix="^")


def _shift_ref(left):
    """numpy's shifts, defined for every count: a count outside [0, bits) shifts every
    bit out (0; an arithmetic right shift leaves the sign: -1 or 0)."""
    def ref(x, y):
        ok = (y >= 0) & (y < x.dtype.itemsize * 8)
        s = np.where(ok, y, 0).astype(x.dtype)
        if left:
            return np.where(ok, np.left_shift(x, s), 0).astype(x.dtype)
        return np.where(ok, np.right_shift(x, s), np.where(x < 0, -1, 0).astype(x.dtype)).astype(x.dtype)
    return ref


binary("shift_left", _shift_ref(True), None, INTS, scalar=lambda b, x, y: b.shift(x, y, True),
       infix="<<")
binary("shift_right", _shift_ref(False), None, INTS, scalar=lambda b, x, y: b.shift(x, y, False),
       infix=">>")

unary("negate", _cast_ref(np.negative), lambda g, op, ct: (E(g, NEGATE, ct),), NUM + CPLX,
      scalar=lambda b, x: b.neg(x), linear=((0,),), simplify=_negate_simplify, lowers_complex=True, infix="-",
      position=lambda a: -a)
unary("not", _cast_ref(np.invert), None, INTS_BOOL, scalar=lambda b, x: b.not_(x), infix="~",
      position=lambda a: ~a)
def _abs_vjp(g, op, ct):
    x = op.operands[0]
    if x.dtype not in CPLX:
        return (E(g, MULTIPLY, ct, E(g, SIGN, x)),)
    # JAX's convention (the cotangent of a complex value is conjugate-linear):
    # ct * conj(x) / |x|, and 0 where x == 0
    r = op.result
    zero = E(g, COMPARE, r, const_like(g, r, 0), direction="EQ")
    safe = E(g, CONVERT, E(g, SELECT, zero, const_like(g, r, 1), r), dtype=x.dtype)
    u = E(g, SELECT, zero, const_like(g, x, 0), E(g, DIVIDE, E(g, CONJ, x), safe))
    return (E(g, MULTIPLY, E(g, CONVERT, ct, dtype=x.dtype), u),)


def _abs_infer(x, **_):
    check(x.dtype in NUM + CPLX, f"dtype {x.dtype} not supported (takes {', '.join(NUM + CPLX)})")
    return aval(x.shape, REAL_OF.get(x.dtype, x.dtype))


def _abs_ref(x):
    with np.errstate(all="ignore"):
        return np.asarray(np.abs(x), dtype=REAL_OF.get(x.dtype.name, x.dtype))


register(OpDef("abs", family="elementwise", infer=_abs_infer, ref=_abs_ref, vjp=_abs_vjp, factors=elementwise_factors,
               scalar=lambda b, x: b.abs(x), flops=element_ops(1), dtypes=sampled(NUM + CPLX), priority=0, fusion="elementwise",
               lowering="elementwise"))
unary("sign", _cast_ref(np.sign), lambda g, op, ct: (const_like(g, ct, 0),), NUM,
      scalar=lambda b, x: b.sign(x))
unary("floor", _cast_ref(np.floor), lambda g, op, ct: (const_like(g, ct, 0),),
      scalar=lambda b, x: b.floor(x))
unary("exp", _cast_ref(np.exp), lambda g, op, ct: (E(g, MULTIPLY, ct, op.result),), FLOAT + CPLX,
      scalar=lambda b, x: b.exp(x), flops=(30, 120))
unary("log", _cast_ref(np.log), lambda g, op, ct: (E(g, DIVIDE, ct, op.operands[0]),), FLOAT + CPLX,
      scalar=lambda b, x: b.log(x), flops=(50, 180))
unary("log1p", _cast_ref(np.log1p),
      lambda g, op, ct: (E(g, DIVIDE, ct, E(g, ADD, op.operands[0], const_like(g, ct, 1.0))),),
      scalar=lambda b, x: b.log1p(x), flops=(70, 200))
unary("tanh", _cast_ref(np.tanh),
      lambda g, op, ct: (E(g, MULTIPLY, ct, E(g, SUBTRACT, const_like(g, ct, 1.0),
                                                 E(g, MULTIPLY, op.result, op.result))),),
      scalar=lambda b, x: b.tanh(x), flops=(30, 260))
unary("logistic", _cast_ref(lambda x: 1 / (1 + np.exp(-x))),
      lambda g, op, ct: (E(g, MULTIPLY, ct, E(g, MULTIPLY, op.result,
                                                 E(g, SUBTRACT, const_like(g, ct, 1.0), op.result))),),
      scalar=lambda b, x: b.logistic(x), flops=(40, 330))
unary("sqrt", _cast_ref(np.sqrt),
      lambda g, op, ct: (E(g, DIVIDE, E(g, MULTIPLY, ct, const_like(g, ct, 0.5)), op.result),),
      FLOAT + CPLX, scalar=lambda b, x: b.sqrt(x), flops=(14, 52), divider=True)
unary("rsqrt", _cast_ref(lambda x: 1 / np.sqrt(x)),
      lambda g, op, ct: (E(g, MULTIPLY, ct, E(g, DIVIDE, E(g, MULTIPLY, op.result, const_like(g, ct, -0.5)),
                                                 op.operands[0])),),
      scalar=lambda b, x: b.rsqrt(x), flops=(30, 80), divider=True)
unary("sin", _cast_ref(np.sin), lambda g, op, ct: (E(g, MULTIPLY, ct, E(g, COS, op.operands[0])),),
      scalar=lambda b, x: b.sin(x), flops=(470, 780))
unary("cos", _cast_ref(np.cos),
      lambda g, op, ct: (E(g, NEGATE, E(g, MULTIPLY, ct, E(g, SIN, op.operands[0]))),),
      scalar=lambda b, x: b.cos(x), flops=(470, 870))


# -- compare, select, convert --------------------------------------------------------------
DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
              "GT": np.greater, "GE": np.greater_equal}
SYMBOLS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _compare_infer(x, y, direction):
    check(direction in DIRECTIONS, f"unknown comparison direction {direction!r}")
    check(x.dtype not in CPLX or direction in ("EQ", "NE"),
          f"complex numbers have no order: compare {direction} takes real operands, got {x.dtype}")
    return _infer_binary(ALL + CPLX, "bool")(x, y)


register(OpDef("compare", family="elementwise", infer=_compare_infer,
               ref=lambda x, y, direction: np.asarray(DIRECTIONS[direction](x, y)),
               factors=elementwise_factors, scalar=lambda b, x, y, direction: b.cmp(direction, x, y),
               flops=element_ops(1), dtypes=sampled(ALL + CPLX), priority=0, fusion="elementwise", lowering="elementwise",
               lowers_complex=True, infix=lambda attrs: SYMBOLS[attrs["direction"]],
               position=lambda a, b, direction: a.compare(b, direction)))


def _select_infer(p, a, b):
    check(p.dtype == "bool", f"predicate must be bool, got {p.dtype}")
    check(p.shape == a.shape == b.shape,
          f"shapes differ: pred {list(p.shape)}, on_true {list(a.shape)}, on_false {list(b.shape)}")
    check(a.dtype == b.dtype, f"branch dtypes differ: {a.dtype} vs {b.dtype}")
    return aval(a.shape, a.dtype)


def _select_vjp(g, op, ct):
    p = op.operands[0]
    zero = const_like(g, ct, 0)
    return None, g.emit(SELECT, p, ct, zero), g.emit(SELECT, p, zero, ct)


register(OpDef("select", family="elementwise", infer=_select_infer, ref=lambda p, a, b: np.where(p, a, b),
               vjp=_select_vjp, factors=elementwise_factors, scalar=lambda b, p, x, y: b.select(p, x, y),
               flops=element_ops(0), dtypes=sampled(ALL + CPLX), priority=0, fusion="elementwise", lowering="elementwise",
               linear=((1, 2),), simplify=_select_simplify, lowers_complex=True, picks=0))


def _convert_infer(x, dtype):
    from .. import dtypes
    return aval(x.shape, dtypes.canon(dtype))


def _convert_ref(x, dtype):
    if x.dtype.kind == "c" and np.dtype(dtype).kind not in "cb":
        x = x.real               # numpy keeps the real part (with a ComplexWarning)
    if x.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        with np.errstate(invalid="ignore"):
            return x.astype(dtype)
    return x.astype(dtype)


def _convert_vjp(g, op, ct):
    x, dt = op.operands[0], op.result.dtype
    if x.dtype in FLOAT + CPLX and dt in FLOAT + CPLX:
        if x.dtype in FLOAT and dt in CPLX:      # real -> complex: the real part comes back (JAX)
            ct = g.emit(REAL, ct)
        return (ct if ct.dtype == x.dtype else g.emit(CONVERT, ct, dtype=x.dtype),)
    return (None,)


def _inexact(dt):
    return dt.startswith(("float", "complex"))


register(OpDef("convert", family="elementwise", infer=_convert_infer, ref=_convert_ref, vjp=_convert_vjp,
               factors=elementwise_factors, scalar=lambda b, x, dtype: b.convert(x, dtype), flops=element_ops(0),
               dtypes=sampled(ALL + CPLX), priority=0, fusion="elementwise", lowering="elementwise", lowers_complex=True,
               simplify=_convert_simplify, position=lambda a, dtype: a.convert(dtype),
               linear=lambda op: [(0,)] if _inexact(op.operands[0].dtype) and _inexact(op.result.dtype) else []))


# -- bitcast: x.view(dtype) of a dtype of the same size ------------------------------------------
# numpy reinterprets the bytes; the dtypes here are those whose scalar code holds the bytes
# as they are in memory (a bool is a byte there but one bit in a kernel; a 2-byte float
# is computed on as float32)
BITCAST_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _bitcast_infer(x, dtype):
    from .. import dtypes
    dt = dtypes.canon(dtype)
    check(x.dtype in BITCAST_DTYPES and dt in BITCAST_DTYPES,
          f"bitcast takes {', '.join(BITCAST_DTYPES)}, got {x.dtype} to {dt}")
    check(np.dtype(x.dtype).itemsize == np.dtype(dt).itemsize,
          f"bitcast keeps the size of an element: {x.dtype} to {dt}")
    return aval(x.shape, dt)


register(OpDef("bitcast", family="elementwise", infer=_bitcast_infer,
               ref=lambda x, dtype: np.array(x, order="C").view(dtype),
               factors=elementwise_factors, scalar=lambda b, x, dtype: b.bitcast(x, dtype), flops=element_ops(0),
               dtypes=sampled(BITCAST_DTYPES), priority=0, fusion="elementwise", lowering="elementwise"))


# -- complex parts: real, imag, conj ---------------------------------------------------------
def _part_infer(x, **_):
    check(x.dtype in CPLX, f"takes complex64/complex128, got {x.dtype}")
    return aval(x.shape, REAL_OF[x.dtype])


def _imag_vjp(g, op, ct):
    """JAX's convention: imag(z) = Im z pulls a real cotangent back to -i * ct."""
    x = op.operands[0]
    return (E(g, MULTIPLY, E(g, CONVERT, ct, dtype=x.dtype), const_like(g, x, -1j)),)


def _part(name, f, vjp, scalar, infer=_part_infer, **rules):
    register(OpDef(name, family="elementwise", infer=infer, ref=lambda x: np.array(f(x), copy=True), vjp=vjp,
                   factors=elementwise_factors, scalar=scalar, flops=element_ops(1), dtypes=CPLX, priority=0,
                   fusion="elementwise", lowering="elementwise", linear=((0,),), lowers_complex=True, **rules))


_part("real", np.real, lambda g, op, ct: (E(g, CONVERT, ct, dtype=op.operands[0].dtype),),
      lambda b, x: b.real(x))
_part("imag", np.imag, _imag_vjp, lambda b, x: b.imag(x))
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}


def _complex_infer(re, im):
    check(re.dtype in COMPLEX_OF, f"takes float32/float64 parts, got {re.dtype}")
    return _infer_binary(tuple(COMPLEX_OF), COMPLEX_OF[re.dtype])(re, im)


def _complex_ref(re, im):
    # part by part: re + 1j * im would turn an infinite imaginary part's real part into nan
    out = np.empty(re.shape, COMPLEX_OF[re.dtype.name])
    out.real, out.imag = re, im
    return out


# the complex number with real part re and imaginary part im (StableHLO's complex): a
# write through z.real / z.imag sets one part and keeps the other bit for bit. Its
# transpose (JAX's convention, as real / imag above): (Re ct, -Im ct).
register(OpDef("complex", family="elementwise", infer=_complex_infer, ref=_complex_ref,
               vjp=lambda g, op, ct: (E(g, REAL, ct), E(g, NEGATE, E(g, IMAG, ct))),
               factors=elementwise_factors, scalar=lambda b, re, im: b.make_complex(re, im, COMPLEX_OF[re.dtype]),
               flops=element_ops(0), dtypes=tuple(COMPLEX_OF), priority=0, fusion="elementwise", lowering="elementwise",
               linear=((0, 1),), lowers_complex=True))
_part("conj", np.conjugate, lambda g, op, ct: (E(g, CONJ, ct),), lambda b, x: b.conj(x), infer=_infer_unary(CPLX),
      simplify=lambda rb, op, ops, uses: ops[0].producer.operands[0] if producer_is(ops[0], CONJ) else None)
