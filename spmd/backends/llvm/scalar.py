"""The scalar builder the op registry's `scalar=` lowerings call: `b.add(x, y)` and friends
emit one LLVM instruction (or a short inline sequence) as IR text and return the result.

Values are `SV(name, dtype)`: an SSA name (or a literal) and an spmd dtype. float32 exp, log,
log1p, tanh and logistic are inline polynomials (Cephes / Eigen, the ones XLA uses) rather
than libm calls, so the loop vectoriser can vectorise loops that use them; float64 keeps
libm for full accuracy.
"""
from __future__ import annotations

import decimal
import functools
import struct
from typing import NamedTuple

import numpy as np

LL = {"float32": "float", "float64": "double", "int32": "i32", "int64": "i64", "bool": "i1",
      # LLVM's integers have no sign: an unsigned dtype is the same iN, its instructions
      # (udiv, icmp ult, lshr, zext, uitofp) say how the bits are read
      "int8": "i8", "int16": "i16", "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64",
      # complex: a (real, imaginary) pair of floats, as numpy lays it out
      "complex64": "<2 x float>", "complex128": "<2 x double>"}
MEM = {**LL, "bool": "i8", "float16": "i16", "bfloat16": "i16"}   # numpy stores a bool in a byte
# alignment (complex: its parts'); byte sizes of the ints and floats
SIZE = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1, "float16": 2, "bfloat16": 2,
        "int8": 1, "int16": 2, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
        "complex64": 4, "complex128": 8}
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
PART = {"complex64": "float32", "complex128": "float64"}
# 2-byte floats are stored as 2 bytes and computed on as float32 inside a kernel: loads
# extend, each op's result is rounded back to the storage type (so elementwise results are
# numpy's / ml_dtypes', which also compute these in float32 and round per op), stores narrow
HALFS = ("float16", "bfloat16")
# float16 <-> float32 with the CPU's instructions (x86 F16C: vcvtph2ps / vcvtps2ph) where it
# has them; otherwise integer code, so no kernel ever calls a conversion libcall
# (__extendhfsf2 / __truncsfhf2) that the JIT could not resolve. Set by the code generator.
HARD_F16 = {"on": None}


def hard_f16():
    if HARD_F16["on"] is None:
        import os

        import llvmlite.binding as llvm
        from .jit import target_machine
        target_machine()                   # initialises the native target
        HARD_F16["on"] = "+f16c" in llvm.get_host_cpu_features().flatten().split(",") and \
            os.environ.get("SPMD_SOFT_F16", "0") != "1"
    return HARD_F16["on"]


HARD_FMA = {"on": None}


def hard_fma():
    """Does this CPU have fused multiply-add (x86 FMA3; every aarch64)?"""
    if HARD_FMA["on"] is None:
        import platform

        import llvmlite.binding as llvm
        from .jit import target_machine
        target_machine()
        feats = llvm.get_host_cpu_features().flatten().split(",")
        HARD_FMA["on"] = "+fma" in feats or platform.machine().lower() in ("aarch64", "arm64")
    return HARD_FMA["on"]


def compute_dtype(dtype):
    """The dtype a kernel computes a value of `dtype` in."""
    return "float32" if dtype in HALFS else dtype


class Unsupported(Exception):
    """This op/dtype has no native lowering: the op runs through its numpy reference."""


class SV(NamedTuple):
    name: str
    dtype: str


def literal(value, dtype) -> str:
    """An LLVM literal of `value` in `dtype` (floats as exact hex doubles)."""
    if dtype == "bool":
        return "true" if bool(value) else "false"
    if dtype in INTS:          # the bits as a signed number: LLVM reads iN literals so
        bits = SIZE[dtype] * 8
        v = int(value) % (1 << bits)
        return str(v - (1 << bits) if v >> (bits - 1) else v)
    if dtype in HALFS:             # kernels hold 2-byte floats as float32
        value, dtype = np.asarray(value).astype(dtype).astype(np.float32), "float32"
    if dtype in PART:
        c, t = complex(value), LL[PART[dtype]]
        return f"<{t} {literal(c.real, PART[dtype])}, {t} {literal(c.imag, PART[dtype])}>"
    v = float(np.float32(value)) if dtype == "float32" else float(value)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


_FOLD = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply}


def _literal_value(name):
    """The value of a float literal as `literal` writes it (0x + 16 hex digits), else None."""
    if isinstance(name, str) and name.startswith("0x") and len(name) == 18:
        return struct.unpack("<d", int(name, 16).to_bytes(8, "little"))[0]
    return None


def is_float(dtype):
    return dtype in ("float32", "float64")


def is_complex(dtype):
    return dtype in PART


def is_unsigned(dtype):
    return dtype in UNSIGNED


def _signed(dtype, pred):
    """An icmp predicate (lt, le, gt, ge) for the dtype's reading of its bits (bool: unsigned)."""
    return ("u" if dtype == "bool" or dtype in UNSIGNED else "s") + pred


@functools.lru_cache(maxsize=None)
def _exp2_table() -> tuple:
    """(hi, lo): 2^(j/128) for j < 128 as hi + lo, two doubles, from 40 decimal digits."""
    with decimal.localcontext() as c:
        c.prec = 40
        ln2 = decimal.Decimal(2).ln()
        exact = [(ln2 * j / 128).exp() for j in range(128)]
        hi = [float(v) for v in exact]
        return tuple(hi), tuple(float(v - decimal.Decimal(h)) for v, h in zip(exact, hi))


@functools.lru_cache(maxsize=None)
def _declarations(prefix, names, make) -> tuple:
    """The constant double tables `make()` returns, one per name, as LLVM global
    definitions @<prefix>_<name>: made once (every kernel emitting the function that reads
    them, and each dry run of one, declares them)."""
    def values(part):
        return ", ".join(f"double {literal(v, 'float64')}" for v in part)
    return tuple(f"@{prefix}_{name} = private unnamed_addr constant [{len(part)} x double] [{values(part)}]"
                 for name, part in zip(names, make()))


@functools.lru_cache(maxsize=None)
def _ln2_128() -> tuple:
    """ln2/128 as hi + lo, two doubles, from 40 decimal digits."""
    with decimal.localcontext() as c:
        c.prec = 40
        v = decimal.Decimal(2).ln() / 128
        return float(v), float(v - decimal.Decimal(float(v)))


# m is in [0.705, 1.41): these bits put 1.0 at the middle of its interval (the 75th), so
# x near 1 is r = x - 1, and where a neighbour's log(c) cancels r the two are of one size
_LOG_OFF = 0x3FE6900000000000


@functools.lru_cache(maxsize=None)
def _log_table() -> tuple:
    """(invc, logc_hi, logc_lo) for the 128 intervals of m: invc is 1/c rounded (c the
    interval's middle, 1 for the interval holding 1.0, so that x near 1 is r = x - 1 with
    no table term), and -log(invc) of that double is exact to 40 digits as hi + lo."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        invc, hi, lo = [], [], []
        for i in range(128):
            a, b = (struct.unpack("<d", struct.pack("<q", _LOG_OFF + j * (1 << 45)))[0] for j in (i, i + 1))
            c = 1.0 if a <= 1.0 < b else (a + b) / 2
            inv = 1.0 / c
            v = -decimal.Decimal(inv).ln()
            invc.append(inv)
            hi.append(float(v))
            lo.append(float(v - decimal.Decimal(hi[-1])))
        return tuple(invc), tuple(hi), tuple(lo)


@functools.lru_cache(maxsize=None)
def _ln2_parts() -> tuple:
    """ln 2 as hi + lo, hi with 40 significant bits (times an exponent, below 2^11, exact)."""
    with decimal.localcontext() as c:
        c.prec = 40
        v = decimal.Decimal(2).ln()
        hi = float(int(v * 2 ** 40)) / 2 ** 40
        return hi, float(v - decimal.Decimal(hi))


class ScalarBuilder:
    """Emits instructions through `emit(line)`; `fresh()` gives new SSA names."""

    def __init__(self, emit, fresh, declare):
        self.emit_line, self.fresh, self.declare = emit, fresh, declare

    # -- plumbing -----------------------------------------------------------------------
    def const(self, value, dtype):
        return SV(literal(value, dtype), dtype)

    def _op(self, text, dtype):
        r = self.fresh()
        self.emit_line(f"  {r} = {text}")
        return SV(r, dtype)

    def _bin(self, iop, fop, x, y, flags=""):
        a, b = _literal_value(x.name), _literal_value(y.name)
        if a is not None and b is not None and fop in _FOLD and is_float(x.dtype):
            # both constant (an exponent's y - 1 in a VJP): folded, so later rules see a literal
            with np.errstate(all="ignore"):
                r = _FOLD[fop](np.dtype(x.dtype).type(a), np.dtype(x.dtype).type(b))
            return SV(literal(r, x.dtype), x.dtype)
        t = LL[x.dtype]
        if is_complex(x.dtype):          # part by part (add, subtract)
            if fop not in ("fadd", "fsub"):
                raise Unsupported(f"{fop} of complex")
            return self._op(f"{fop} {t} {x.name}, {y.name}", x.dtype)
        op = (fop + flags) if is_float(x.dtype) else iop
        return self._op(f"{op} {t} {x.name}, {y.name}", x.dtype)

    # -- complex parts ------------------------------------------------------------------
    def part(self, x, i):
        """The real (0) or imaginary (1) part of a complex value."""
        return self._op(f"extractelement {LL[x.dtype]} {x.name}, i32 {i}", PART[x.dtype])

    def make_complex(self, re, im, dtype):
        t = LL[dtype]
        v = self._op(f"insertelement {t} poison, {LL[re.dtype]} {re.name}, i32 0", dtype)
        return self._op(f"insertelement {t} {v.name}, {LL[im.dtype]} {im.name}, i32 1", dtype)

    def real(self, x):
        return self.part(x, 0)

    def imag(self, x):
        return self.part(x, 1)

    def conj(self, x):
        return self.make_complex(self.part(x, 0), self.neg(self.part(x, 1)), x.dtype)

    def _call(self, fn, dtype, *args):
        t = LL[dtype]
        self.declare(f"declare {t} @{fn}({', '.join([t] * len(args))})")
        return self._op(f"call {t} @{fn}({', '.join(f'{t} {a.name}' for a in args)})", dtype)

    def _intr(self, name, x, *more):
        suffix = "f32" if x.dtype == "float32" else "f64"
        return self._call(f"llvm.{name}.{suffix}", x.dtype, x, *more)

    def icmp(self, pred, x, y):
        return self._op(f"icmp {pred} {LL[x.dtype]} {x.name}, {y.name}", "bool")

    def fcmp(self, pred, x, y):
        return self._op(f"fcmp {pred} {LL[x.dtype]} {x.name}, {y.name}", "bool")

    def select(self, p, x, y):
        t = LL[x.dtype]
        return self._op(f"select i1 {p.name}, {t} {x.name}, {t} {y.name}", x.dtype)

    # -- arithmetic ---------------------------------------------------------------------
    def add(self, x, y):
        return self._bin("add", "fadd", x, y)

    def sub(self, x, y):
        return self._bin("sub", "fsub", x, y)

    def mul(self, x, y):
        if is_complex(x.dtype):      # (a + bi)(c + di) = (ac - bd) + (ad + bc)i
            a, b, c, d = self.part(x, 0), self.part(x, 1), self.part(y, 0), self.part(y, 1)
            return self.make_complex(self.sub(self.mul(a, c), self.mul(b, d)),
                                     self.add(self.mul(a, d), self.mul(b, c)), x.dtype)
        return self._bin("mul", "fmul", x, y)

    def div(self, x, y):
        if is_complex(x.dtype):
            raise Unsupported("complex divide (numpy's scaled algorithm runs through the reference)")
        if is_float(x.dtype):
            return self._bin("", "fdiv", x, y)
        zero, one, m1 = self.const(0, x.dtype), self.const(1, x.dtype), self.const(-1, x.dtype)
        if is_unsigned(x.dtype):       # x / 0 == 0 (udiv would trap)
            y0 = self.icmp("eq", y, zero)
            return self.select(y0, zero, self._bin("udiv", "", x, self.select(y0, one, y)))
        # XLA semantics: x / 0 == 0; MIN / -1 wraps (sdiv would trap on both)
        y0, ym1 = self.icmp("eq", y, zero), self.icmp("eq", y, m1)
        bad = self._op(f"or i1 {y0.name}, {ym1.name}", "bool")
        q = self._bin("sdiv", "", x, self.select(bad, one, y))
        q = self.select(ym1, self.neg(x), q)
        return self.select(y0, zero, q)

    def rem(self, x, y):
        if is_float(x.dtype):
            return self._bin("", "frem", x, y)
        zero, one, m1 = self.const(0, x.dtype), self.const(1, x.dtype), self.const(-1, x.dtype)
        if is_unsigned(x.dtype):       # x % 0 == 0 (urem would trap)
            y0 = self.icmp("eq", y, zero)
            return self.select(y0, zero, self._bin("urem", "", x, self.select(y0, one, y)))
        bad = self._op(f"or i1 {self.icmp('eq', y, zero).name}, {self.icmp('eq', y, m1).name}", "bool")
        r = self._bin("srem", "", x, self.select(bad, one, y))
        return self.select(bad, zero, r)

    def pow(self, x, y):
        if not is_float(x.dtype):
            raise Unsupported("integer power")
        n = _literal_value(y.name)
        # (not x ** -2 .. -4 as 1 / x^k: x^k overflows to inf where the true result is a
        # denormal, 1e155 ** -2 == 1e-310; pow() gets those right)
        if n is not None and np.isfinite(n) and n == int(n) and -1 <= n <= 4:
            # a small constant integer exponent (x ** 2, x ** 3, 1 / x): multiplies, which
            # vectorise, instead of a libm pow call per element (as XLA expands it)
            n = int(n)
            if n == 0:
                return self.const(1, x.dtype)
            r = x
            for _ in range(abs(n) - 1):
                r = self.mul(r, x)
            return r if n > 0 else self.div(self.const(1, x.dtype), r)
        return self._intr("pow", x, y)

    def _pick(self, pred, x, y):
        """np.maximum / np.minimum: NaN if either is NaN, else x if x `pred` y, else y (so
        a tie of -0.0 and 0.0 gives the second operand, as numpy does; llvm.maximum would
        order -0.0 below 0.0 and make the numpy and LLVM backends disagree)."""
        r = self.select(self.fcmp(pred, x, y), x, y)          # y NaN: y
        return self.select(self.fcmp("uno", x, x), x, r)      # x NaN: x

    def max(self, x, y):
        if is_float(x.dtype):
            return self._pick("ogt", x, y)
        if x.dtype == "bool":
            return self.or_(x, y)
        return self.select(self.icmp(_signed(x.dtype, "gt"), x, y), x, y)

    def ordered_extreme(self, kind, x, y):
        """max or min of two floats, NaN if either is NaN, -0.0 below 0.0 (llvm.maximum /
        llvm.minimum): a reduction's combiner, which the loop vectoriser vectorises."""
        return self._intr("maximum" if kind == "max" else "minimum", x, y)

    def min(self, x, y):
        if is_float(x.dtype):
            return self._pick("olt", x, y)
        if x.dtype == "bool":
            return self.and_(x, y)
        return self.select(self.icmp(_signed(x.dtype, "lt"), x, y), x, y)

    def and_(self, x, y):
        return self._op(f"and {LL[x.dtype]} {x.name}, {y.name}", x.dtype)

    def or_(self, x, y):
        return self._op(f"or {LL[x.dtype]} {x.name}, {y.name}", x.dtype)

    def xor(self, x, y):
        return self._op(f"xor {LL[x.dtype]} {x.name}, {y.name}", x.dtype)

    def shift(self, x, y, left):
        """numpy's shift: LLVM's shl/ashr/lshr are poison for counts outside [0, bits), so
        such counts shift by 0 and the result is picked: 0, or the sign for a right shift
        of a signed value (an unsigned one shifts in zeros: lshr)."""
        t, bits = LL[x.dtype], SIZE[x.dtype] * 8
        ok = self._op(f"icmp ult {t} {y.name}, {bits}", "bool")      # unsigned: negatives too
        s = self.select(ok, y, self.const(0, x.dtype))
        right = "lshr" if is_unsigned(x.dtype) else "ashr"
        r = self._op(f"{'shl' if left else right} {t} {x.name}, {s.name}", x.dtype)
        out = (self.const(0, x.dtype) if left or is_unsigned(x.dtype)
               else self._op(f"ashr {t} {x.name}, {bits - 1}", x.dtype))
        return self.select(ok, r, out)

    def not_(self, x):
        return self._op(f"xor {LL[x.dtype]} {x.name}, {'true' if x.dtype == 'bool' else -1}", x.dtype)

    def neg(self, x):
        if is_float(x.dtype) or is_complex(x.dtype):
            return self._op(f"fneg {LL[x.dtype]} {x.name}", x.dtype)
        return self._op(f"sub {LL[x.dtype]} 0, {x.name}", x.dtype)

    def abs(self, x):
        if is_float(x.dtype):
            return self._intr("fabs", x)
        if is_unsigned(x.dtype):
            return x
        return self.select(self.icmp("slt", x, self.const(0, x.dtype)), self.neg(x), x)

    def sign(self, x):
        zero, one, m1 = self.const(0, x.dtype), self.const(1, x.dtype), self.const(-1, x.dtype)
        if is_float(x.dtype):      # keeps NaN; np.sign(-0.0) is +0.0
            rest = self.select(self.fcmp("uno", x, x), x, zero)
            return self.select(self.fcmp("ogt", x, zero), one, self.select(self.fcmp("olt", x, zero), m1, rest))
        if is_unsigned(x.dtype):
            return self.select(self.icmp("ne", x, zero), one, zero)
        return self.select(self.icmp("sgt", x, zero), one, self.select(self.icmp("slt", x, zero), m1, zero))

    def floor(self, x):
        return self._intr("floor", x)

    def sqrt(self, x):
        return self._intr("sqrt", x)

    def rsqrt(self, x):
        return self.div(self.const(1, x.dtype), self.sqrt(x))

    def sin(self, x):
        return self._intr("sin", x)

    def cos(self, x):
        return self._intr("cos", x)

    def fma(self, a, b, c):
        """a * b + c: one fused multiply-add where the CPU has the instruction, else a
        multiply and an add. Always the one or always the other, never LLVM's choice
        (a `contract` pair is fused in some kernels and not in others, so the same tanh
        gave other bits once fused with other ops: a recomputed forward pass differed
        from the original)."""
        if a.dtype in ("float32", "float64") and hard_fma():
            return self._intr("fma", a, b, c)
        return self._bin("", "fadd", self._bin("", "fmul", a, b), c)

    def poly(self, x, coeffs):
        """Horner: coeffs[0] * x^n + ... + coeffs[n]."""
        acc = self.const(coeffs[0], x.dtype)
        for c in coeffs[1:]:
            acc = self.fma(acc, x, self.const(c, x.dtype))
        return acc

    def clamp(self, x, lo, hi):
        """Clamp keeping NaN (a comparison with NaN is false, so NaN passes both selects)."""
        lo, hi = self.const(lo, x.dtype), self.const(hi, x.dtype)
        x = self.select(self.fcmp("olt", x, lo), lo, x)
        return self.select(self.fcmp("ogt", x, hi), hi, x)

    # -- transcendental functions -------------------------------------------------------
    def exp(self, x):
        if x.dtype == "float64":
            return self._exp64(x)
        if x.dtype != "float32":
            return self._intr("exp", x)
        # Cephes expf: exp(x) = 2^n * exp(r), |r| <= ln2/2, 2^n added to the exponent bits.
        # Results below the smallest normal float (x < -87.33: n < -125) are denormals, as
        # numpy's: 2^(n + 64) goes into the exponent bits, then one multiply by 2^-64 rounds
        # once; below -104 the result is 0; above 128 ln2 it is inf; NaN stays NaN.
        # Below -104 the steps run on 0, not on the clamp: at -104 the last multiply
        # makes a denormal, which the CPU computes in microcode at ~7x the time, and a
        # masked score of -1e9 (half of a causal softmax's) would pay it.
        f = "float32"
        under = self.fcmp("olt", x, self.const(-104.0, f))
        xc = self._intr("minnum", self.select(under, self.const(0.0, f), x), self.const(88.7228, f))
        fx = self.floor(self.fma(xc, self.const(1.44269504088896341, f), self.const(0.5, f)))
        r = self.fma(fx, self.const(-0.693359375, f), xc)
        r = self.fma(fx, self.const(2.12194440e-4, f), r)
        p = self.poly(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                          1.6666665459e-1, 5.0000001201e-1])
        y = self.add(self.fma(p, self.mul(r, r), r), self.const(1.0, f))
        n = self._op(f"fptosi float {fx.name} to i32", "int32")
        tiny = self.icmp("slt", n, self.const(-125, "int32"))
        n = self.select(tiny, self.add(n, self.const(64, "int32")), n)
        bits = self._op(f"shl i32 {n.name}, 23", "int32")
        y = self.bitcast(self.add(self.bitcast(y, "int32"), bits), f)
        y = self.select(tiny, self.mul(y, self.const(2.0 ** -64, f)), y)
        y = self.select(self.fcmp("ogt", x, self.const(88.72283935546875, f)), self.const(np.inf, f), y)
        y = self.select(under, self.const(0.0, f), y)
        return self.select(self.fcmp("uno", x, x), x, y)

    def _table_at(self, table, n, j):
        """The address of element `j` (int64) of the module's constant [n x double] `table`."""
        return self._op(f"getelementptr inbounds [{n} x double], ptr {table}, i64 0, i64 {j.name}", "ptr")

    def _exp64(self, x):
        # exp(x) = 2^k * 2^(j/128) * exp(r): n = round(x * 128/ln2) = 128k + j, r = x - n ln2/128
        # (|r| <= ln2/256; ln2/128 in two parts, each step a fused multiply-add, so r is
        # exact), 2^(j/128) from a table as a sum of two doubles, exp(r) - 1 a degree-5
        # polynomial, summed so that one rounding is the result's: within 0.51 ulp, vector
        # code (a gather for the table) where libm's exp is a call an element (10x
        # numpy's). Denormal results (k < -1021) take 2^(k + 64) in the exponent bits, then
        # one multiply by 2^-64; below -746 the steps run on 0 (no denormal on the way) and
        # the result is 0; above ln(DBL_MAX) it is inf; NaN stays NaN.
        f, i = "float64", "int64"
        under = self.fcmp("olt", x, self.const(-746.0, f))
        big = self.const(709.782712893384, f)
        k, hi, lo, p = self._exp64_parts(self._intr("minnum", self.select(under, self.const(0.0, f), x), big))
        y = self.add(hi, self.fma(hi, p, lo))
        tiny = self.icmp("slt", k, self.const(-1021, i))
        k = self.select(tiny, self.add(k, self.const(64, i)), k)
        y = self.bitcast(self.add(self.bitcast(y, i), self._op(f"shl i64 {k.name}, 52", i)), f)
        y = self.select(tiny, self.mul(y, self.const(2.0 ** -64, f)), y)
        y = self.select(self.fcmp("ogt", x, big), self.const(np.inf, f), y)
        y = self.select(under, self.const(0.0, f), y)
        return self.select(self.fcmp("uno", x, x), x, y)

    def _exp64_parts(self, x):
        """(k, hi, lo, p) with exp(x) = 2^k (hi + lo) (1 + p), for finite x in exp's range."""
        f, i = "float64", "int64"
        for line in _declarations("spmd_exp2_128", ("hi", "lo"), _exp2_table):
            self.declare(line)
        kd = self.floor(self.fma(x, self.const(128 / np.log(2.0), f), self.const(0.5, f)))
        r = self.fma(kd, self.const(-_ln2_128()[0], f), x)
        r = self.fma(kd, self.const(-_ln2_128()[1], f), r)
        p = self.fma(self.mul(r, r), self.poly(r, [1 / 120, 1 / 24, 1 / 6, 0.5]), r)
        n = self._op(f"fptosi double {kd.name} to i64", i)
        j = self._op(f"and i64 {n.name}, 127", i)
        k = self._op(f"ashr i64 {n.name}, 7", i)
        hi, lo = (self._op(f"load double, ptr {self._table_at(f'@spmd_exp2_128_{t}', 128, j).name}", f)
                  for t in ("hi", "lo"))
        return k, hi, lo, p

    def log(self, x):
        if x.dtype == "float64" and hard_fma():
            return self._log64(x)
        if x.dtype != "float32":
            return self._intr("log", x)
        f = "float32"
        # denormals: scale into the normal range first
        tiny = self.fcmp("olt", x, self.const(1.17549435e-38, f))
        xs = self.select(tiny, self.mul(x, self.const(8388608.0, f)), x)
        eadj = self.select(tiny, self.const(-23.0, f), self.const(0.0, f))
        bits = self.bitcast(xs, "int32")
        e = self._op(f"ashr i32 {bits.name}, 23", "int32")
        e = self._op(f"and i32 {e.name}, 255", "int32")
        e = self._op(f"sitofp i32 {self.sub(e, self.const(126, 'int32')).name} to float", f)
        e = self.add(e, eadj)
        mb = self._op(f"and i32 {bits.name}, -2139095041", "int32")          # 0x807FFFFF
        mb = self._op(f"or i32 {mb.name}, 1056964608", "int32")              # 0x3F000000
        m = self.bitcast(mb, f)                                              # in [0.5, 1)
        small = self.fcmp("olt", m, self.const(0.707106781186547524, f))
        e = self.select(small, self.sub(e, self.const(1.0, f)), e)
        m = self.sub(self.select(small, self.add(m, m), m), self.const(1.0, f))
        z = self.mul(m, m)
        p = self.poly(m, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                          3.3333331174e-1])
        y = self.mul(self.mul(p, m), z)
        y = self.fma(e, self.const(-2.12194440e-4, f), y)
        y = self.fma(z, self.const(-0.5, f), y)
        r = self.fma(e, self.const(0.693359375, f), self.add(m, y))
        zero = self.const(0.0, f)
        r = self.select(self.fcmp("oeq", x, self.const(np.inf, f)), x, r)
        r = self.select(self.fcmp("oeq", x, zero), self.const(-np.inf, f), r)
        return self.select(self.fcmp("ult", x, zero), self.const(np.nan, f), r)   # x < 0 or NaN

    def _log64(self, x):
        # x = 2^k m with m in [0.705, 1.41) (denormals scaled by 2^52 first); the top 7
        # bits of m pick c, and log x = k ln2 - log(1/c) + log1p(r), r = m/c - 1 from one
        # fused multiply-add (|r| < 2^-8), log(1/c) from a table as hi + lo, log1p(r) - r a
        # degree-7 Taylor polynomial; the large terms summed exactly, so the result has
        # about one rounding: within 0.92 ulp of the true value (r's rounding, where x is
        # near 1; else 0.56), vector code (gathers for the table) where libm's log is a
        # call an element (6x numpy's). Needs the fused multiply-add.
        f, i = "float64", "int64"
        for line in _declarations("spmd_log_128", ("invc", "hi", "lo"), _log_table):
            self.declare(line)
        tiny = self.fcmp("olt", x, self.const(2.2250738585072014e-308, f))
        xs = self.select(tiny, self.mul(x, self.const(2.0 ** 52, f)), x)
        bits = self.bitcast(xs, i)
        t = self.sub(bits, self.const(_LOG_OFF, i))
        k = self._op(f"ashr i64 {t.name}, 52", i)
        k = self.select(tiny, self.sub(k, self.const(52, i)), k)
        j = self._op(f"lshr i64 {t.name}, 45", i)
        j = self._op(f"and i64 {j.name}, 127", i)
        m = self.bitcast(self.sub(bits, self._op(f"and i64 {t.name}, -4503599627370496", i)), f)  # 0xFFF << 52
        invc, chi, clo = (self._op(f"load double, ptr {self._table_at(f'@spmd_log_128_{n}', 128, j).name}", f)
                          for n in ("invc", "hi", "lo"))
        r = self._intr("fma", m, invc, self.const(-1.0, f))
        kd = self._op(f"sitofp i64 {k.name} to double", f)
        ln2_hi, ln2_lo = _ln2_parts()
        a = self.mul(kd, self.const(ln2_hi, f))                  # exact
        w = self.add(a, chi)
        werr = self.add(self.sub(a, w), chi)                      # w + werr = a + chi (|a| > |chi| or a = 0)
        hi = self.add(w, r)
        lo = self.add(self.sub(w, hi), r)                         # hi + lo = w + r (|w| > |r| or w = 0)
        lo = self.add(lo, self.add(werr, self.fma(kd, self.const(ln2_lo, f), clo)))
        q = self.poly(r, [1 / 7, -1 / 6, 1 / 5, -1 / 4, 1 / 3, -1 / 2])
        y = self.add(hi, self.fma(self.mul(r, r), q, lo))
        zero = self.const(0.0, f)
        y = self.select(self.fcmp("oeq", x, self.const(np.inf, f)), x, y)
        y = self.select(self.fcmp("oeq", x, zero), self.const(-np.inf, f), y)
        return self.select(self.fcmp("ult", x, zero), self.const(np.nan, f), y)    # x < 0 or NaN

    def log1p(self, x):
        one = self.const(1.0, x.dtype)
        u = self.add(one, x)
        if x.dtype == "float64" and hard_fma():
            # log1p(x) = log(u) + (x - (u - 1)) / u: the second term is what rounding
            # 1 + x lost, exact until the divide: within 1.3 ulp of the true value
            r = self.add(self.log(u), self.div(self.sub(x, self.sub(u, one)), u))
            r = self.select(self.fcmp("oeq", u, one), x, r)          # |x| < 2^-53 (-0.0 stays -0.0)
            r = self.select(self.fcmp("oeq", u, self.const(0.0, x.dtype)), self.const(-np.inf, x.dtype), r)
            return self.select(self.fcmp("oeq", x, self.const(np.inf, x.dtype)), x, r)
        if x.dtype != "float32":
            return self._call("log1p", x.dtype, x)
        # log1p(x) = log(u) * x / (u - 1), u = 1 + x (Goldberg): exact where u rounds to 1
        r = self.mul(self.log(u), self.div(x, self.sub(u, one)))
        r = self.select(self.fcmp("oeq", u, one), x, r)
        return self.select(self.fcmp("oeq", x, self.const(np.inf, x.dtype)), x, r)

    def tanh(self, x):
        if x.dtype == "float64" and hard_fma():
            return self._tanh64(x)
        if x.dtype != "float32":
            return self._call("tanh", x.dtype, x)
        # Eigen / XLA's rational approximation on [-7.9, 7.9], where float32 tanh is +-1
        xc = self.clamp(x, -7.90531110763549805, 7.90531110763549805)
        x2 = self.mul(xc, xc)
        p = self.mul(xc, self.poly(x2, [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                        5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                        4.89352455891786e-03]))
        q = self.poly(x2, [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                           4.89352518554385e-03])
        small = self.fcmp("olt", self.abs(x), self.const(0.0004, "float32"))
        r = self.select(small, x, self.div(p, q))
        # past the clamp the rational is stuck at 1 - 4 ulp; float32 tanh is 1 - k 2^-24,
        # k = 3, 2, 1, 0, beyond these points (1 - 2 e^-2x rounded), 1.0 from 9.0109
        ax = self.abs(x)
        for lim, k in ((8.037958272751633, 3), (8.206194391062239, 2), (8.461607202945235, 1),
                       (9.010913347279288, 0)):
            r = self.select(self.fcmp("oge", ax, self.const(lim, "float32")),
                            self.select(self.fcmp("olt", x, self.const(0.0, "float32")),
                                        self.const(-(1 - k * 2.0 ** -24), "float32"),
                                        self.const(1 - k * 2.0 ** -24, "float32")), r)
        return r

    def _tanh64(self, x):
        # Below |x| = 0.55: tanh|x| = t / (t + 2), t = expm1(2|x|) from exp's parts,
        # 2^k hi - 1 (exact: 2^k hi is in [1, 4)) + 2^k (hi p + lo); above: 1 - 2 / (e + 1),
        # e = e^2|x|, whose second term is at most a half. Within 2 ulp, vector code where libm's tanh is a call an
        # element (15x numpy's); x's sign copied back (-0.0 stays -0.0), NaN passes.
        f, i = "float64", "int64"
        one, two = self.const(1.0, f), self.const(2.0, f)
        ax = self.abs(x)
        y = self.mul(self._intr("minnum", ax, self.const(22.0, f)), two)
        k, hi, lo, p = self._exp64_parts(y)
        scale = self.bitcast(self._op(f"shl i64 {self.add(k, self.const(1023, i)).name}, 52", i), f)
        t = self.add(self.sub(self.mul(hi, scale), one), self.mul(self.fma(hi, p, lo), scale))
        d = self.add(t, two)
        dlo = self.sub(t, self.sub(d, two))                       # d + dlo = t + 2 exactly
        q = self.div(t, d)
        res = self.sub(self.fma(self.neg(q), d, t), self.mul(q, dlo))
        near = self.add(q, self.div(res, d))                      # one Newton step on the quotient
        e = self.mul(self.add(hi, self.fma(hi, p, lo)), scale)
        far = self.sub(one, self.div(two, self.add(e, one)))
        r = self.select(self.fcmp("olt", ax, self.const(0.55, f)), near, far)
        r = self.select(self.fcmp("olt", ax, self.const(2.0 ** -28, f)), ax, r)
        r = self._intr("copysign", r, x)
        return self.select(self.fcmp("uno", x, x), x, r)

    def logistic(self, x):
        one = self.const(1.0, x.dtype)
        return self.div(one, self.add(one, self.exp(self.neg(x))))

    # -- compare, convert ---------------------------------------------------------------
    def cmp(self, direction, x, y):
        if is_complex(x.dtype):        # equal when both parts are
            if direction not in ("EQ", "NE"):
                raise Unsupported("ordering of complex numbers")
            pred, join = ("oeq", self.and_) if direction == "EQ" else ("une", self.or_)
            p = [self.fcmp(pred, self.part(x, i), self.part(y, i)) for i in (0, 1)]
            return join(p[0], p[1])
        if is_float(x.dtype):
            pred = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}[direction]
            return self.fcmp(pred, x, y)
        pred = {"EQ": "eq", "NE": "ne", "LT": _signed(x.dtype, "lt"), "LE": _signed(x.dtype, "le"),
                "GT": _signed(x.dtype, "gt"), "GE": _signed(x.dtype, "ge")}[direction]
        return self.icmp(pred, x, y)

    # -- 2-byte floats ------------------------------------------------------------------
    def i32(self, text):
        return self._op(text, "int32")

    def half_bits(self, x, dtype):
        """float32 x -> the i16 bits of `dtype` (float16 / bfloat16), rounding to nearest even;
        NaN stays NaN, overflow gives inf."""
        if dtype == "float16" and hard_f16():
            h = self._op(f"fptrunc float {x.name} to half", "f16")
            return self._op(f"bitcast half {h.name} to i16", "i16")
        u = self.bitcast(x, "int32")
        if dtype == "bfloat16":
            hi = self.i32(f"lshr i32 {u.name}, 16")
            odd = self.i32(f"and i32 {hi.name}, 1")
            r = self.i32(f"add i32 {u.name}, 32767")
            r = self.i32(f"add i32 {r.name}, {odd.name}")
            r = self.i32(f"lshr i32 {r.name}, 16")
            qnan = self.i32(f"or i32 {hi.name}, 64")                 # a quiet NaN of the same sign
            r = self.select(self.fcmp("uno", x, x), qnan, r)
            return self._op(f"trunc i32 {r.name} to i16", "i16")
        sign = self.i32(f"lshr i32 {u.name}, 16")
        sign = self.i32(f"and i32 {sign.name}, 32768")
        a = self.i32(f"and i32 {u.name}, 2147483647")
        # normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even
        odd = self.i32(f"lshr i32 {a.name}, 13")
        odd = self.i32(f"and i32 {odd.name}, 1")
        n = self.i32(f"add i32 {a.name}, -939520001")               # -(112 << 23) + 0xFFF
        n = self.i32(f"add i32 {n.name}, {odd.name}")
        n = self.i32(f"lshr i32 {n.name}, 13")
        # below 2^-14 (subnormal or zero): adding 0.5 rounds |x| to a multiple of 2^-24
        # (float32's spacing at 0.5), leaving the count of 2^-24 steps in the low bits
        s = self.add(self.bitcast(a, "float32"), self.const(0.5, "float32"))
        s = self.i32(f"sub i32 {self.bitcast(s, 'int32').name}, 1056964608")
        r = self.select(self.icmp("ult", a, self.const(0x38800000, "int32")), s, n)
        r = self.select(self.icmp("uge", a, self.const(0x477FF000, "int32")), self.const(0x7C00, "int32"), r)
        r = self.select(self.icmp("ugt", a, self.const(0x7F800000, "int32")), self.const(0x7E00, "int32"), r)
        r = self.i32(f"or i32 {r.name}, {sign.name}")
        return self._op(f"trunc i32 {r.name} to i16", "i16")

    def half_value(self, h, dtype):
        """i16 bits of `dtype` -> the float32 value (exact)."""
        if dtype == "float16" and hard_f16():
            f = self._op(f"bitcast i16 {h.name} to half", "f16")
            return self._op(f"fpext half {f.name} to float", "float32")
        w = self.i32(f"zext i16 {h.name} to i32")
        if dtype == "bfloat16":
            return self.bitcast(self.i32(f"shl i32 {w.name}, 16"), "float32")
        sign = self.i32(f"and i32 {w.name}, 32768")
        sign = self.i32(f"shl i32 {sign.name}, 16")
        e = self.i32(f"and i32 {w.name}, 31744")                     # 0x7C00
        m = self.i32(f"and i32 {w.name}, 1023")
        bits = self.i32(f"and i32 {w.name}, 32767")
        n = self.i32(f"shl i32 {bits.name}, 13")
        n = self.i32(f"add i32 {n.name}, 939524096")                 # 112 << 23: rebias
        inf = self.i32(f"or i32 {n.name}, 2139095040")               # exponent 31: inf / NaN
        n = self.select(self.icmp("eq", e, self.const(31744, "int32")), inf, n)
        sub = self.mul(self._op(f"sitofp i32 {m.name} to float", "float32"), self.const(2.0 ** -24, "float32"))
        n = self.select(self.icmp("eq", e, self.const(0, "int32")), self.bitcast(sub, "int32"), n)
        return self.bitcast(self.i32(f"or i32 {n.name}, {sign.name}"), "float32")

    def _to_f32_odd(self, x):
        """float64 -> float32 rounded to odd: truncated toward zero, the last bit set when
        inexact (float32 keeps 13 more bits than a 2-byte float, so rounding this once
        more gives the correctly rounded result)."""
        t = self._op(f"fptrunc double {x.name} to float", "float32")
        back = self._op(f"fpext float {t.name} to double", "float64")
        exact = self.fcmp("oeq", back, x)
        away = self.fcmp("ogt", self.abs(back), self.abs(x))
        b = self.bitcast(t, "int32")
        down = self.i32(f"sub i32 {b.name}, 1")
        b2 = self.select(away, down, b)
        b2 = self.i32(f"or i32 {b2.name}, 1")
        return self.select(exact, t, self.bitcast(b2, "float32"))

    def round_to(self, x, dtype):
        """A float32 x rounded to the nearest `dtype` (float16 / bfloat16) value, as float32."""
        return self.half_value(self.half_bits(x, dtype), dtype)

    def convert(self, x, dtype):
        src, dst = x.dtype, dtype
        if dst in HALFS:
            if dst == "float16" and src not in ("float32", "bool"):
                # float64 (and integers, through it): to float32 rounding to odd, so that the
                # rounding to float16 is numpy's single rounding, not a double one (ml_dtypes
                # rounds to bfloat16 through float32, twice: bfloat16 follows it)
                return self.round_to(self._to_f32_odd(self.convert(x, "float64")), dst)
            return self.round_to(self.convert(x, "float32"), dst)
        if src == dst:
            return x
        if is_complex(dst):          # from a float or a complex: part by part
            if is_complex(src):
                return self.make_complex(self.convert(self.part(x, 0), PART[dst]),
                                         self.convert(self.part(x, 1), PART[dst]), dst)
            if not is_float(src):
                raise Unsupported(f"{src} to {dst}")
            return self.make_complex(self.convert(x, PART[dst]), self.const(0, PART[dst]), dst)
        if is_complex(src):
            if not is_float(dst):
                raise Unsupported(f"{src} to {dst}")
            return self.convert(self.part(x, 0), dst)
        ts, td = LL[src], LL[dst]
        if dst == "bool":
            if is_float(src):
                return self.fcmp("une", x, self.const(0, src))
            return self.icmp("ne", x, self.const(0, src))
        if is_float(src) and is_float(dst):
            op = "fpext" if dst == "float64" else "fptrunc"
        elif is_float(dst):
            op = "uitofp" if src == "bool" or is_unsigned(src) else "sitofp"
        elif is_float(src):
            return self._float_to_int(x, dst)
        elif src == "bool":
            op = "zext"                       # i1 to any width
        elif SIZE[dst] == SIZE[src]:
            return SV(x.name, dst)            # int32 <-> uint32: the same bits
        elif is_unsigned(src):
            op = "zext" if SIZE[dst] > SIZE[src] else "trunc"
        else:
            op = "sext" if SIZE[dst] > SIZE[src] else "trunc"
        return self._op(f"{op} {ts} {x.name} to {td}", dst)

    def bitcast(self, x, dtype):
        """x.view(dtype): the same bits read as another dtype of the same size."""
        if LL[x.dtype] == LL[dtype]:
            return SV(x.name, dtype)          # int32 <-> uint32: LLVM's iN has no sign
        return self._op(f"bitcast {LL[x.dtype]} {x.name} to {LL[dtype]}", dtype)

    def _to_signed(self, x, dst):
        """fptosi is poison for NaN, inf and values out of range: numpy (x86's cvttsd2si)
        gives the integer minimum there, so such inputs convert 0 and pick it."""
        bits = SIZE[dst] * 8
        lim = self.const(2.0 ** (bits - 1), x.dtype)
        ok = self._op(f"and i1 {self.fcmp('olt', x, lim).name}, {self.fcmp('oge', x, self.neg(lim)).name}",
                      "bool")
        safe = self.select(ok, x, self.const(0, x.dtype))
        r = self._op(f"fptosi {LL[x.dtype]} {safe.name} to {LL[dst]}", dst)
        return self.select(ok, r, self.const(-(2 ** (bits - 1)), dst))

    def _float_to_int(self, x, dst):
        """A float to an integer dtype as numpy converts it: exact for values in the
        dtype's range (truncated toward zero). Outside it C leaves the result undefined;
        this gives what numpy gives on x86: int8/int16/uint8/uint16 go through int32
        (-1.0 -> 255 as uint8, 300.0 -> 44); uint32 and uint64 below 2**(bits-1) through
        the signed int of their width (-1.0 -> 2**bits - 1), above it as x - 2**(bits-1)
        with the top bit set (2**bits and more: 0); NaN: the signed minimum's bits."""
        if dst in ("int32", "int64"):
            return self._to_signed(x, dst)
        if SIZE[dst] < 4:
            return self._op(f"trunc i32 {self._to_signed(x, 'int32').name} to {LL[dst]}", dst)
        signed, bits = ("int32", 32) if dst == "uint32" else ("int64", 64)
        top = self.const(2.0 ** (bits - 1), x.dtype)
        hi = self.fcmp("oge", x, top)
        low = self._to_signed(self.select(hi, self._bin("", "fsub", x, top), x), signed)
        r = self._op(f"xor {LL[signed]} {low.name}, {literal(2 ** (bits - 1), signed)}", signed)
        return SV(self.select(hi, r, low).name, dst)
