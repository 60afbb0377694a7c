"""The numpy functions of numpy_lib (shape_funcs, math_funcs, stats, linalg), table-driven:
each runs under jit on random inputs of several shapes (uneven and empty ones too) and
dtypes and must equal numpy -- values, shape and dtype -- on one device, and on a
4-device and a 2x2 mesh with its input split along each dim. Where the docs say a split
stays local (elementwise functions on any dim; reductions, sorts and linalg along the
dims they do not need whole), the lowered program must hold no collective that moves
data (`report()["collectives"]` has no all_gather / all_to_all); where an op needs a
split dim whole, the gather must come with a ReshardWarning naming the op and line.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import spmd
from spmd.sharding.reshard import ReshardWarning

from opinfo import seed_of

F = ("float64", "float32")
FI = ("float64", "int64", "int32")
ALLT = ("float64", "float32", "int64", "bool")
MESH4 = spmd.Mesh((4,), ("x",))
MESH22 = spmd.Mesh((2, 2), ("a", "b"))
GATHERS = ("all_gather", "all_to_all")


@dataclass
class C:
    name: str
    fn: Callable
    dtypes: tuple = FI
    shapes: tuple = ((5, 6), (7,), (1, 3))
    lo: float = -3.0
    hi: float = 3.0
    # dims of the first shape that may be split with no data movement ("all": every dim)
    local: object = "all"
    rtol: float = None
    nan: bool = False            # sprinkle NaN / inf into float inputs
    kw: dict = field(default_factory=dict)


def data(rng, shape, dt, c):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(int(np.floor(c.lo)), int(np.ceil(c.hi)) + 1, size=shape).astype(dt)
    x = rng.uniform(c.lo, c.hi, size=shape).astype(dt)
    if c.nan and x.size > 2:
        x.flat[rng.integers(x.size)] = np.nan
        x.flat[rng.integers(x.size)] = np.inf
        x.flat[rng.integers(x.size)] = -np.inf
    return x


def spd(x):
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    n = x.shape[-1]
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n, dtype=x.dtype)


BATCH = ((3, 4, 4), (2, 3, 3), (0, 2, 2))
CASES = [
    # -- shape functions: local on dims they do not move data along
    C("hstack", lambda x: np.hstack([x, x]), ALLT, local=(0,)),
    C("vstack", lambda x: np.vstack([x, 2 * x]), FI, local=(1,)),
    C("dstack", lambda x: np.dstack([x, x]), FI),
    C("column_stack", lambda x: np.column_stack([x, x]), FI, local=(0,)),
    C("append", lambda x: np.append(x, x, axis=0), FI, local=(1,)),
    C("append_flat", lambda x: np.append(x, [1, 2]), FI, local=()),
    C("split", lambda x: np.split(x, [1, 3], axis=-1)[1], FI, local=(0,)),
    C("array_split", lambda x: np.array_split(x, 3)[2], FI, local=(1,)),
    C("hsplit", lambda x: np.hsplit(x, [2])[0], FI, shapes=((5, 6), (4, 3)), local=(0,)),
    C("vsplit", lambda x: np.vsplit(x, [1])[1], FI, shapes=((5, 6), (4, 3)), local=(1,)),
    # an even split stays local (an uneven one reshards: the merged dim's shards no longer line up)
    C("repeat", lambda x: np.repeat(x, 3, axis=-1), ALLT, shapes=((5, 8), (7,), (1, 3))),
    C("repeat_flat", lambda x: np.repeat(x, 2), FI, local=()),
    C("repeat_list", lambda x: x.repeat(np.arange(x.shape[0]) % 3, axis=0), FI, local=(1,)),
    C("roll", lambda x: np.roll(x, 2, axis=0), FI, local=(1,)),
    C("roll_flat", lambda x: np.roll(x, -3), FI, local=()),
    C("flip", lambda x: np.flip(x, -1), ALLT, local=(0,)),
    C("fliplr_ud", lambda x: np.flipud(np.fliplr(x)), FI, shapes=((5, 6), (1, 3)), local=()),
    C("rot90", lambda x: np.rot90(x, 1), FI, shapes=((5, 6), (1, 3)), local=()),
    C("atleast_2d_3d", lambda x: np.atleast_3d(np.atleast_2d(x)), FI),
    C("broadcast_arrays", lambda x: np.broadcast_arrays(x, x[..., :1])[1], FI, local=(0,)),
    C("meshgrid", lambda x: np.meshgrid(x, x[:3])[0], FI, shapes=((7,), (1,)), local=()),
    C("pad_constant", lambda x: np.pad(x, ((1, 2),) + ((0, 1),) * (x.ndim - 1), constant_values=5), FI, local=()),
    C("pad_edge", lambda x: np.pad(x, 2, mode="edge"), FI, local=()),
    C("pad_wrap", lambda x: np.pad(x, ((7, 1),) + ((2, 3),) * (x.ndim - 1), mode="wrap"), FI, local=()),
    C("pad_reflect", lambda x: np.pad(x, ((3, 1),) + ((2, 9),) * (x.ndim - 1), mode="reflect"), FI,
      shapes=((5, 6), (7,)), local=()),
    C("pad_symmetric", lambda x: np.pad(x, 3, mode="symmetric"), FI, local=()),
    C("diff", lambda x: np.diff(x, 2, axis=-1), ALLT[:3] + ("int32",), local=(0,)),
    C("diff_bool", lambda x: np.diff(x > 0, prepend=0, axis=0), FI, local=(1,)),
    C("gradient", lambda x: np.gradient(x, 0.5, axis=0), FI, shapes=((5, 6), (7,)), local=(1,)),
    C("gradient2", lambda x: np.gradient(x, edge_order=2)[-1], F, shapes=((5, 6), (4, 3)), local=(0,)),
    C("triu", lambda x: np.triu(x, 1), ALLT, shapes=((5, 6), (3, 1)), local="all"),
    C("tril", lambda x: np.tril(x, -2), FI, shapes=((5, 6), (2, 3, 3)), local="all"),
    C("diag", lambda x: np.diag(x, -2), FI, shapes=((7,), (1,)), local=()),
    C("diag_of", lambda x: np.diag(x, 1), FI, shapes=((5, 6), (1, 3)), local=()),
    C("diagflat", lambda x: np.diagflat(x, -1), FI, shapes=((2, 3), (1,)), local=()),
    C("insert", lambda x: np.insert(x, [0, -1, -1], 2.5), ALLT, local=()),
    C("insert_axis", lambda x: np.insert(x, 1, x[:, -1] * 2, axis=1), FI, shapes=((5, 6), (1, 3)), local=()),
    C("insert_slice", lambda x: np.insert(x, slice(None, None, 2), [[7]], axis=0), FI,
      shapes=((5, 6), (2, 1)), local=()),
    C("cov", lambda x: np.cov(x), FI + ("float32",), shapes=((5, 6), (7,), (1, 3)), local=()),
    C("cov_cols", lambda x: np.cov(x, x[::-1] * 2, rowvar=False, ddof=0), F, shapes=((5, 6), (7,)), local=()),
    C("corrcoef", lambda x: np.corrcoef(x, rowvar=False), F, shapes=((5, 6), (7, 3)), local=()),
    C("convolve", lambda x: np.convolve(x.ravel(), np.array([1, -2, 3], dtype=x.dtype)), FI, local=()),
    C("convolve_same", lambda x: np.convolve(np.array([2, 1], dtype=x.dtype), x.ravel(), "same"), F + ("int32",),
      shapes=((5, 6), (7,), (1,)), local=()),
    C("convolve_valid", lambda x: np.convolve(x.ravel()[:4], x.ravel(), mode="valid"), FI,
      shapes=((5, 6), (7,), (2, 1)), local=()),
    C("correlate", lambda x: np.correlate(x.ravel(), np.array([1, -2, 3], dtype=x.dtype)), FI, local=()),
    C("correlate_modes", lambda x: np.correlate(np.array([2, 1], dtype=x.dtype), x.ravel(), "full")
      .sum() + np.correlate(x.ravel(), x.ravel()[::-1], mode="same"), F + ("int32",),
      shapes=((5, 6), (7,), (1, 2)), local=()),
    C("diagonal", lambda x: np.diagonal(x, -1, 1, 2), ALLT, shapes=((2, 5, 6), (3, 1, 1)), local=(0,)),
    C("trace", lambda x: np.trace(x), FI, shapes=((5, 6), (3, 1)), local=()),
    C("trace_batch", lambda x: np.trace(x, 1, axis1=-2, axis2=-1, dtype=np.float64), FI,
      shapes=((4, 5, 6),), local=(0,)),
    C("kron", lambda x: np.kron(x, np.array([[1, 2], [3, 4]], dtype=x.dtype)), FI, local=()),
    C("cross", lambda x: np.cross(x[..., :3], x[..., -3:]), FI, shapes=((5, 6), (3, 3)), local=(0,)),
    C("cross2", lambda x: np.cross(x[..., :2], x[..., -2:]), F, shapes=((5, 6),), local=(0,)),
    # -- numpy_lib/accumulate.py, index_funcs.py, int_funcs.py: local on the dims they do not work along
    C("nancumsum", lambda x: np.nancumsum(x, axis=-1) + np.nancumprod(x / 4, axis=-1), FI, local=(0,), nan=True),
    C("trapezoid", lambda x: np.trapezoid(x, dx=0.5, axis=-1), FI, local=(0,)),
    C("logical_reduce", lambda x: np.logical_xor.reduce(x, axis=-1) ^ np.logical_and.reduce(x > -2, axis=-1),
      FI, local=(0,)),
    C("bitwise_reduce", lambda x: np.bitwise_xor.reduce(x, axis=-1) | np.bitwise_and.reduce(x, axis=-1),
      ("int64", "int32"), local=(0,)),
    C("reduceat", lambda x: np.add.reduceat(x, [0, 2, 1, x.shape[-1] - 1], axis=-1)
      + np.maximum.reduceat(x, [1, 1, 0, x.shape[-1] - 1], axis=-1), FI, shapes=((5, 6), (7,), (1, 3)), local=(0,)),
    C("sliding_window", lambda x: np.lib.stride_tricks.sliding_window_view(x, 2, axis=-1).sum(-1), FI, local=(0,)),
    # each key after the first is permuted by np.take_along_axis, which gathers a split batch dim
    C("lexsort", lambda x: np.lexsort((x, np.round(x / 2)), axis=-1), FI, local=()),
    C("choose", lambda x: np.choose((x > 0).astype(int), [x, 2 * x]), FI),
    C("piecewise", lambda x: np.piecewise(x, [x < -1, x > 1], [np.negative, lambda v: v * 3, 7]), FI),
    C("gcd_lcm", lambda x: np.gcd(x, 6) + np.lcm(x, x + 1), ("int64", "int32"), lo=-20, hi=20),
    C("delete", lambda x: np.delete(x, [0, -1], axis=-1), FI, local=(0,)),
    C("resize", lambda x: np.resize(x, (3, 7)), FI, local=()),
    C("ediff1d", lambda x: np.ediff1d(x, to_begin=[1, 2]), FI, local=()),
    # -- elementwise math: local on every dim
    C("isnan_isinf", lambda x: np.stack([np.isnan(x), np.isinf(x), np.isfinite(x), np.isposinf(x),
                                         np.isneginf(x)]), ALLT, nan=True),
    C("nan_to_num", lambda x: np.nan_to_num(x, nan=-1.0, posinf=9.0), ALLT, nan=True),
    C("nan_to_num_default", lambda x: np.nan_to_num(x), F, nan=True),
    C("signbit", lambda x: np.signbit(np.round(x)) ^ np.signbit(x), FI + ("float32",)),
    C("copysign", lambda x: np.copysign(np.round(x) + 1, -x), FI),
    C("arctan2", lambda x: np.arctan2(x, np.flip(x, 0) * 0 + 0.5 - x), FI),
    C("arctan2_scalar", lambda x: np.arctan2(1.0, x), FI),
    C("arctan", lambda x: np.arctan(x), FI),
    C("arcsin_arccos", lambda x: np.arcsin(x) + 2 * np.arccos(x), F, lo=-1.0, hi=1.0),
    C("arcsin_edge", lambda x: np.arcsin(x / 3) - np.arccos(np.round(x / 3)), FI, nan=True),
    C("hypot", lambda x: np.hypot(x, 2 * x + 1), FI, nan=True),
    C("deg_rad", lambda x: np.deg2rad(x) + np.rad2deg(x) + np.radians(x) - np.degrees(x), FI),
    C("sinc", lambda x: np.sinc(np.round(x * 2) / 2), FI),
    C("sinh_cosh", lambda x: np.sinh(x) * np.cosh(x), FI),
    C("arcsinh", lambda x: np.arcsinh(x * 10), FI),
    C("arccosh", lambda x: np.arccosh(np.abs(x) * 10 + 1), FI),
    C("arctanh", lambda x: np.arctanh(x), F, lo=-0.99, hi=0.99),
    C("exp2", lambda x: np.exp2(x), FI),
    C("cbrt", lambda x: np.cbrt(x * 9), FI),
    C("trunc_fix", lambda x: np.trunc(x) + np.fix(x * 2), ALLT[:3]),
    C("rint", lambda x: np.rint(np.round(x * 4) / 2), FI),
    C("round", lambda x: np.round(x, 2) + np.around(x * 100, -1) + x.round(), FI),
    C("round_half", lambda x: np.round(np.round(x * 4) / 4, 1), F),
    C("fmod", lambda x: np.fmod(x, 1.5), F),
    # integer-only ufuncs; shift counts outside [0, bits) included (numpy defines them)
    C("shifts", lambda x: (x << (x % 70)) + (x >> 3) + np.right_shift(x, -x) + np.left_shift(3, x % 40),
      ("int64", "int32"), lo=-80, hi=80),
    C("reciprocal_int", lambda x: np.reciprocal(x), ("int64", "int32")),
    C("ufunc_outer", lambda x: np.multiply.outer(x, x.ravel()[:3]) - np.greater.outer(x.ravel()[:2], x)[1][..., None],
      FI, local=()),
    C("reciprocal", lambda x: np.reciprocal(x), F),
    C("fmod_int", lambda x: np.fmod(x, np.where(x == 0, 3, x) - 7), ("int64", "int32")),
    C("divmod", lambda x: np.stack(divmod(x, 1.25)), F),
    C("divmod_int", lambda x: np.stack(np.divmod(x, 3)), ("int64", "int32")),
    C("logaddexp", lambda x: np.logaddexp(x, 2 * x) + np.logaddexp2(x, -x), FI, nan=True),
    C("heaviside", lambda x: np.heaviside(np.round(x), 0.5), FI),
    C("isclose", lambda x: np.isclose(x, x + 1e-9 * np.round(x)) & np.isclose(x, np.round(x), atol=0.3), FI,
      nan=True),
    C("isclose_nan", lambda x: np.isclose(x, x, equal_nan=True), F, nan=True),
    C("allclose", lambda x: np.logical_and(np.allclose(x, x * (1 + 1e-7)), np.logical_not(np.allclose(x, x + 1))),
      FI, local=None),
    C("select", lambda x: np.select([x < -1, x > 1], [x, 2 * x], 9), FI),
    # -- reductions and statistics: local on the dims they keep
    C("sort0", lambda x: np.sort(x, axis=0), ALLT, local=(1,), nan=True),
    C("sort_last", lambda x: np.sort(x), ALLT, local=(0,), nan=True),
    C("sort_flat", lambda x: np.sort(x, axis=None), FI, local=()),
    C("argsort", lambda x: np.argsort(np.round(x), kind="stable", axis=-1), FI, local=(0,)),
    C("argsort_method", lambda x: x.argsort(0, kind="stable"), FI, local=(1,)),
    C("median", lambda x: np.median(x, axis=-1), FI, local=(0,), nan=True),
    C("median_all", lambda x: np.median(x), FI, local=(), shapes=((5, 6), (4,), (0, 3))),
    C("median_keep", lambda x: np.median(x, axis=0, keepdims=True), FI, local=(1,)),
    C("percentile", lambda x: np.percentile(x, [0, 10, 50, 99, 100], axis=-1), FI, local=(0,), nan=True),
    C("percentile_methods", lambda x: np.stack([np.percentile(x, 37, axis=-1, method=m) for m in
                                                ("lower", "higher", "nearest", "midpoint", "linear")]),
      FI, local=(0,)),
    C("percentile_methods_inf", lambda x: np.stack([np.percentile(x, 37, axis=-1, method=m) for m in
                                                    ("lower", "higher", "nearest")]), F, local=(0,), nan=True),
    C("quantile", lambda x: np.quantile(x, 0.3, axis=0, keepdims=True), FI, local=(1,)),
    C("nanmedian", lambda x: np.nanmedian(x, axis=-1) + np.nanmedian(x * np.nan, axis=-1), FI, local=(0,),
      nan=True),
    C("nanpercentile", lambda x: np.nanpercentile(x, [0, 35, 100], axis=0, keepdims=True), FI, local=(1,),
      nan=True),
    C("nanquantile", lambda x: np.stack([np.nanquantile(x, 0.4, axis=-1, method=m)
                                         for m in ("linear", "lower", "higher", "midpoint")]), F, local=(0,),
      nan=True),
    C("nanmedian_all", lambda x: np.nanmedian(x), FI, local=(), nan=True),
    # reductions with numpy's where= and initial= (masked-out elements count as the identity)
    C("sum_prod_where", lambda x: np.sum(x, axis=0, where=x > 0, initial=2) + x.prod(0, where=np.abs(x) < 2),
      FI, local=(1,)),
    C("max_min_where", lambda x: np.max(x, 0, where=x < 1, initial=-5) - x.min(axis=0, initial=0.5), FI,
      local=(1,), nan=True),
    C("mean_var_where", lambda x: np.mean(x, axis=0, where=x > -1) + np.var(x, axis=0, where=x < 2, ddof=1),
      FI, local=(1,)),
    C("any_all_where", lambda x: np.any(x > 1, 0, where=x < 2) & x.astype(bool).all(0, where=x > 0),
      ALLT, local=(1,)),
    C("average", lambda x: np.average(x, axis=0), FI, local=(1,)),
    C("average_w", lambda x: np.average(x, axis=-1, weights=np.arange(1, x.shape[-1] + 1)), FI, local=(0,)),
    C("average_ret", lambda x: np.stack(np.average(x, weights=np.ones_like(x) * 2, returned=True)), FI, local=()),
    C("nansum_nanmean", lambda x: np.nansum(x, 0) + np.nanmean(x, 0), FI, local=(1,), nan=True),
    C("nanmax_nanmin", lambda x: np.nanmax(x, -1) - np.nanmin(x, -1), FI, local=(0,), nan=True,
      shapes=((5, 6), (7,))),
    C("nanmax_allnan", lambda x: np.nanmax(x * np.nan, axis=0), F, local=(1,), shapes=((5, 6),)),
    C("triu_tril_indices_from", lambda x: np.concatenate([x[np.triu_indices_from(x)], x[np.tril_indices_from(x, k=-1)],
                                                          x[np.triu_indices_from(x, 2)]]), F, local=(), shapes=((5, 6), (4, 4))),
    # NaN is skipped (the first row stays a number: an all-NaN slice is numpy's ValueError)
    C("nanargmax_nanargmin", lambda x: np.nanargmax(np.where((x > 1) & (np.arange(5)[:, None] > 0), np.nan, x), 0) +
      10 * np.nanargmin(np.where((x < -1) & (np.arange(6) > 0), np.nan, x), axis=1, keepdims=True).ravel()[:1], F, local=(), shapes=((5, 6),)),
    C("nanstd_nanvar", lambda x: np.nanstd(x, 0) + np.nanvar(x, 0, ddof=1), FI, local=(1,), nan=False),
    # numpy's nanvar is NaN where ddof >= the count of numbers (np.var divides by 0: inf)
    C("nanvar_ddof_past_count", lambda x: np.nanvar(np.where(x > 0.5, np.nan, x), 0, ddof=3) +
      np.nanstd(np.where(x < -1, np.nan, x), 0, ddof=4), F, local=(1,), shapes=((5, 6), (7,))),
    C("nanprod", lambda x: np.nanprod(np.where(np.abs(x) > 2, np.nan, x), -1), F, local=(0,)),
    C("ptp", lambda x: np.ptp(x, axis=0), FI, local=(1,)),
    C("count_nonzero", lambda x: np.count_nonzero(x, axis=-1), ALLT, local=(0,)),
    C("count_nonzero_all", lambda x: np.count_nonzero(np.round(x)), FI, local=()),
    # dtype=bool: numpy's bool add / multiply loops, a logical or / and
    C("sum_prod_dtype_bool", lambda x: np.concatenate([np.ravel(f(np.where(x * 1 > 0.5, x, 0), 0, dtype=bool))
                                                       for f in (np.sum, np.prod, np.cumsum, np.cumprod)]),
      ALLT, local=(), shapes=((5, 6), (7,), (0, 3))),
    C("searchsorted", lambda x: np.searchsorted(np.array([-1.5, -1.0, 0.0, 0.0, 2.0]), x) +
      10 * np.searchsorted(np.array([-1, 0, 0, 2]), x, side="right"), FI, nan=True),
    C("digitize", lambda x: np.digitize(x, [-1, 0, 0.5, 2]) + 10 * np.digitize(x, [2, 1, -1], right=True), FI),
    C("isin", lambda x: np.isin(np.round(x), [0, 1, 7]) ^ np.isin(x, [2], invert=True), FI),
    C("histogram", lambda x: np.histogram(x, 4)[0], FI, local=(), shapes=((5, 6), (7,), (1,))),
    C("histogram_edges", lambda x: np.histogram(x, 3)[1], FI, local=(), shapes=((5, 6), (7,))),
    C("histogram_range", lambda x: np.histogram(x, 5, range=(-2, 2), weights=np.abs(x), density=True)[0],
      F, local=()),
    C("histogram_bins", lambda x: np.histogram(x, [-3, -1, 0, 0.5, 3])[0], FI, local=()),
    C("interp", lambda x: np.interp(x, [-2, -1, 0.5, 2], [3, 1, 2, 0]) +
      np.interp(x, [-1, 1], [0, 1], left=-5, right=5), FI),
    # -- linalg: local on batch dims, matrix dims gathered (with a warning)
    C("inv", lambda x: np.linalg.inv(spd(x)), FI, shapes=BATCH, local=(0,)),
    C("det", lambda x: np.linalg.det(spd(x)), FI, shapes=BATCH, local=(0,), rtol=1e-9),
    C("slogdet", lambda x: np.stack(np.linalg.slogdet(spd(x) * -1)), FI, shapes=BATCH, local=(0,)),
    C("cholesky", lambda x: np.linalg.cholesky(spd(x)) + np.linalg.cholesky(spd(x), upper=True), FI,
      shapes=BATCH, local=(0,)),
    C("solve", lambda x: np.linalg.solve(spd(x), x[..., :2]), FI, shapes=BATCH, local=(0,)),
    C("solve_vec", lambda x: np.linalg.solve(spd(x[0]), x[0, 0]), FI, shapes=BATCH[:2], local=()),
    C("eigh", lambda x: np.linalg.eigh(spd(x)).eigenvalues + np.linalg.eigvalsh(spd(x), UPLO="U"), FI,
      shapes=BATCH, local=(0,)),
    C("eigh_vectors", lambda x: np.abs(np.linalg.eigh(spd(x))[1]), F, shapes=BATCH, local=(0,)),
    # eig: complex where some eigenvalue is (x), real where all are (spd(x)), numpy's dtypes
    C("eig", lambda x: np.concatenate([np.linalg.eigvals(x).ravel(), np.linalg.eig(spd(x)).eigenvalues.ravel()]),
      FI, shapes=BATCH, local=(), rtol=1e-9),
    C("eig_vectors", lambda x: np.abs(np.linalg.eig(x)[1]) + np.linalg.eig(spd(x))[1] ** 2, F, shapes=BATCH,
      local=(), rtol=1e-9),
    C("svd", lambda x: np.linalg.svd(x, compute_uv=False), FI, shapes=BATCH + ((2, 3, 5),), local=(0,)),
    C("svd_uv", lambda x: np.abs(np.linalg.svd(x)[0]) + np.abs(np.linalg.svd(x, full_matrices=False).Vh), F,
      shapes=BATCH, local=(0,)),
    C("qr", lambda x: np.abs(np.linalg.qr(x)[1]) + np.abs(np.linalg.qr(x, mode="complete").Q), F,
      shapes=BATCH, local=(0,)),
    C("qr_r", lambda x: np.abs(np.linalg.qr(x, mode="r")), F, shapes=((2, 3, 5),), local=(0,)),
    # numpy 2's array-API spellings
    C("linalg_api", lambda x: np.linalg.matrix_transpose(x) + np.linalg.diagonal(x, offset=0)[..., None]
      + np.linalg.trace(x)[..., None, None] + np.linalg.vecdot(x, x)[..., None], FI, shapes=BATCH, local=(0,)),
    C("linalg_outer_cross", lambda x: np.linalg.outer(x[0, 0], x[0, 1]).sum()
      + np.linalg.cross(x[..., :3], x[..., 1:4]), FI, shapes=((3, 4, 4), (1, 2, 5)), local=()),
    C("pinv", lambda x: np.linalg.pinv(x), F, shapes=((2, 3, 5), (2, 4, 4), (1, 2, 1)), local=(0,)),
    C("lstsq", lambda x: np.linalg.lstsq(x[0], x[0, :, 0])[0], F, shapes=((2, 6, 3), (1, 4, 4)), local=()),
    C("lstsq_res", lambda x: np.concatenate([v.ravel() for v in np.linalg.lstsq(x[0], x[0, :, :2])[:2]]),
      F, shapes=((2, 6, 3),), local=()),
    C("matrix_power", lambda x: np.linalg.matrix_power(x, 5) + np.linalg.matrix_power(spd(x), -2)
      + np.linalg.matrix_power(x, 0), F, shapes=BATCH, local=(0,), lo=-0.5, hi=0.5),
    C("norm", lambda x: np.stack([np.linalg.norm(x), np.linalg.norm(x, 2), np.linalg.norm(x, -2),
                                  np.linalg.norm(x, "nuc"), np.linalg.norm(x, 1), np.linalg.norm(x, -1),
                                  np.linalg.norm(x, np.inf), np.linalg.norm(x, -np.inf),
                                  np.linalg.norm(x, "fro")]), FI, shapes=((5, 6), (1, 3)), local=()),
    C("matrix_rank_cond", lambda x: np.stack([np.linalg.matrix_rank(x).astype(float), np.linalg.cond(x),
                                              np.linalg.cond(x, 1), np.linalg.cond(x, -2), np.linalg.cond(x, "fro")]),
      F, shapes=((3, 4, 4), (2, 3, 3)), local=(0,), rtol=1e-8),
    C("matrix_rank_deficient", lambda x: np.linalg.matrix_rank(np.concatenate([x, x], -1)), F,
      shapes=((3, 4, 2), (2, 3, 1)), local=(0,)),
    C("multi_dot", lambda x: np.linalg.multi_dot([x, x.T, x[:, 0]]), FI, shapes=((5, 6), (1, 3)), local=()),
    C("vector_matrix_norm", lambda x: np.linalg.vector_norm(x, axis=(1, 2), ord=3) + np.linalg.vector_norm(x, axis=(-1, -2))
      + np.linalg.matrix_norm(x, ord=np.inf) + np.linalg.matrix_norm(x, keepdims=True)[:, 0, 0], FI,
      shapes=BATCH, local=(0,)),
    C("norm_vec", lambda x: np.stack([np.linalg.norm(x, o, axis=0) for o in (None, 1, 2, 0, 3.5, np.inf,
                                                                            -np.inf, -1)]),
      FI, local=(1,)),
    C("norm_batch", lambda x: np.linalg.norm(x, axis=(1, 2), keepdims=True)[:, 0, 0]
      + np.linalg.norm(x, 2, axis=(2, 1)),
      FI, shapes=BATCH, local=(0,)),
]


def _ids(c):
    return c.name


def _tol(dtype, c):
    if np.dtype(dtype).kind not in "fc":
        return 0, 0
    double = np.dtype(dtype) in (np.float64, np.complex128)
    if c.rtol is not None and double:
        return c.rtol, c.rtol
    return (1e-10, 1e-10) if double else (2e-4, 2e-4)


def _compare(got, want, c, what, in_dtype=None):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != numpy's {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != numpy's {want.dtype}"
    rtol, atol = _tol(want.dtype, c)
    if in_dtype == "float32" and rtol:
        rtol, atol = _tol("float32", c)        # computed in float32, widened at the end
    if rtol == 0:
        assert np.array_equal(got, want), f"{what}:\n got {got}\nwant {want}"
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def _numpy(c, x):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return c.fn(x)


@pytest.mark.parametrize("c", CASES, ids=_ids)
def test_function_matches_numpy(c):
    rng = np.random.default_rng(seed_of(c.name))
    for shape in c.shapes:
        for dt in c.dtypes:
            x = data(rng, shape, dt, c)
            want = _numpy(c, x)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = spmd.jit(c.fn, backend="numpy")(x)
            _compare(got, want, c, f"{c.name} of {dt}{list(shape)}", dt)


def _specs(ndim):
    """(mesh, spec, the dim it splits, or None for a 2x2 split over two dims)."""
    out = [(MESH4, tuple("x" if k == d else None for k in range(ndim)), d) for d in range(ndim)]
    if ndim >= 2:
        out.append((MESH22, ("a", "b") + (None,) * (ndim - 2), None))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("c", CASES, ids=_ids)
def test_function_sharded(c):
    """The first shape, first dtype, split along each dim of a 4-device mesh and over two
    dims of a 2x2 mesh: equal to numpy, and with no data movement where it is local."""
    rng = np.random.default_rng(1 + seed_of(c.name))
    shape, dt = c.shapes[0], c.dtypes[0]
    x = data(rng, shape, dt, c)
    want = _numpy(c, x)
    for mesh, spec, d in _specs(len(shape)):
        f = spmd.jit(c.fn, in_shardings=(mesh.sharding(*spec),), backend="numpy")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            low = f.lower(x)
            got = f(x)
        _compare(got, want, c, f"{c.name} of {dt}{list(shape)} split {spec} on {mesh.text()}", dt)
        local = c.local if c.local != "all" else tuple(range(len(shape)))
        if d is not None and local is not None and d in local:
            moved = [k for k in low.report()["collectives"] if k["op"] in GATHERS]
            assert not moved, f"{c.name} split on dim {d} should stay local, got {moved}"


def test_every_case_name_is_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# ----------------------------------------------------------------------- the warnings
def test_sort_along_a_split_axis_warns_naming_op_and_line():
    x = np.random.default_rng(0).standard_normal((8, 6))

    def f(x):
        return np.sort(x, axis=0)       # MARK-SORT

    g = spmd.jit(f, in_shardings=(MESH4.sharding("x", None),), backend="numpy")
    with pytest.warns(ReshardWarning, match=r"sort at .*test_numpy_functions\.py:\d+.*whole sorted axis"):
        got = g(x)
    np.testing.assert_array_equal(got.numpy(), np.sort(x, axis=0))
    # along the other axis: local, silent, no collective at all
    h = spmd.jit(lambda x: np.sort(x, axis=1), in_shardings=(MESH4.sharding("x", None),), backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        low = h.lower(x)
        got = h(x)
    assert low.report()["collectives"] == []
    np.testing.assert_array_equal(got.numpy(), np.sort(x, axis=1))


def test_linalg_on_split_rows_warns_and_batched_linalg_is_local():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5, 5)) + 6 * np.eye(5)
    rows = spmd.jit(np.linalg.inv, in_shardings=(MESH4.sharding(None, "x", None),), backend="numpy")
    with pytest.warns(ReshardWarning, match=r"inv at .*needs whole matrices"):
        got = rows(a)
    np.testing.assert_allclose(got.numpy(), np.linalg.inv(a), rtol=1e-12)
    for fn in (np.linalg.inv, np.linalg.det, lambda a: np.linalg.solve(a, a[..., :2]), np.linalg.cholesky,
               lambda a: np.linalg.eigh(a @ np.swapaxes(a, 1, 2))[0], lambda a: np.linalg.svd(a)[1]):
        batch = spmd.jit(fn, in_shardings=(MESH4.sharding("x", None, None),), backend="numpy")
        with warnings.catch_warnings():
            warnings.simplefilter("error", ReshardWarning)
            low = batch.lower(a)
            got = batch(a)
        # (but the one-byte flag of a matrix numpy would refuse, reduced over the batch)
        moved = [c for c in low.report()["collectives"] if not (c["dtype"] == "bool" and c["bytes"] == 1)]
        assert moved == [], low.report()["collectives"]
        np.testing.assert_allclose(got.numpy(), fn(a), rtol=1e-10, atol=1e-12)


def test_linalg_identities_hold():
    """The factorizations reproduce their matrix (numpy's sign conventions aside)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5, 4))

    def f(a):
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        q, r = np.linalg.qr(a)
        sym = a[:, :4] + np.swapaxes(a[:, :4], 1, 2)
        w, v = np.linalg.eigh(sym)
        return (u * s[:, None, :]) @ vh, q @ r, (v * w[:, None, :]) @ np.swapaxes(v, 1, 2), sym

    for got, want in zip(spmd.jit(f, backend="numpy")(a)[:3], (a, a, f(a)[3])):
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_llvm_backend_runs_the_functions():
    """One program through the LLVM backend: elementwise math fused into kernels, sorts and
    linalg ops through their numpy references."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-0.9, 0.9, (5, 6))
    a = rng.standard_normal((2, 4, 4)) + 5 * np.eye(4)

    def f(x, a):
        return (np.arctan2(x, 0.5 - x) + np.arcsin(x) + np.arccos(x) + np.arcsinh(x) + np.arctanh(x) + np.cbrt(x)
                + np.hypot(x, 1) + np.logaddexp(x, -x) + np.rint(10 * x) + np.round(x, 1) + np.sinc(x)
                + np.exp2(x) + np.copysign(1.0, x) + np.isclose(x, 0.1),
                np.sort(x, axis=0), np.median(x, axis=1), np.percentile(x, [5, 95]),
                np.linalg.inv(a), np.linalg.det(a), np.linalg.norm(x, 2), np.pad(x, 2, mode="reflect"),
                np.histogram(x, 4)[0], np.interp(x, [-1, 0, 1], [0, 2, 1]), np.diff(x), np.triu(x))

    want = f(x, a)
    got = spmd.jit(f, backend="llvm")(x, a)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12, err_msg=f"output {k}")
    x32 = x.astype(np.float32)
    got32 = spmd.jit(lambda x: np.arctan2(x, 0.5 - x) + np.cbrt(x) + np.arcsin(x), backend="llvm")(x32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, np.arctan2(x32, 0.5 - x32) + np.cbrt(x32) + np.arcsin(x32), rtol=2e-6)


def test_unsupported_forms_raise_clear_errors():
    x = np.arange(6.0)
    with pytest.raises(spmd.errors.ConcreteValueError, match=r"bincount.*depends on the data.*histogram"):
        spmd.jit(lambda x: np.bincount(x.astype(int)), backend="numpy", fallback=False)(x)
    with pytest.raises(NotImplementedError, match=r"pad mode='median'"):
        spmd.jit(lambda x: np.pad(x, 1, mode="median"), backend="numpy")(x)
    with pytest.raises(NotImplementedError, match=r"traced q"):
        spmd.jit(lambda x, q: np.percentile(x, q), backend="numpy")(x, np.float64(50))
    with pytest.raises(ValueError, match="equal division"):
        spmd.jit(lambda x: np.split(x, 4), backend="numpy")(x)
    # bools into a float function give float16, as in numpy (spmd has float16 now)
    got = spmd.jit(lambda x: np.arctan2(x > 1, x > 2), backend="numpy")(x)
    assert got.dtype == np.float16 and np.array_equal(got, np.arctan2(x > 1, x > 2))
    with pytest.raises(NotImplementedError, match=r"histogram with bins='auto'"):
        spmd.jit(lambda x: np.histogram(x, "auto"), backend="numpy")(x)


def test_traced_bools_of_allclose_cannot_branch():
    with pytest.raises(spmd.errors.TraceError if hasattr(spmd, "errors") else Exception):
        spmd.jit(lambda x: x if bool(np.allclose(x, 0)) else -x, backend="numpy", fallback=False)(np.ones(3))


# ----------------------------------------------------------------------- gradients
GRADS = {
    "median_percentile": lambda x: np.median(x, axis=1).sum() + np.percentile(x, [30, 70], axis=0).sum(),
    "norm": lambda x: np.linalg.norm(x, axis=1).sum() + np.linalg.norm(x),
    "math": lambda x: (np.logaddexp(x, 2 * x) + np.arcsinh(x) + np.arctan2(x, 2.0) + np.hypot(x, 1.5)
                       + np.cbrt(x + 3)).sum(),
    "pad_roll_sort": lambda x: (np.pad(x, 2, mode="reflect") ** 2).sum() + (np.roll(x, 1, 0) * x).sum()
    + (np.sort(x, 1) * np.arange(5.0)).sum(),
    "nanmean": lambda x: np.nanmean(np.where(x > 1, np.nan, x), 0).sum(),
}
GRADS_LINALG = {
    "inv_det": lambda a: np.linalg.inv(a).sum() + np.linalg.det(a).sum() + np.linalg.slogdet(a)[1].sum(),
    "solve_cholesky": lambda a: np.linalg.solve(a, a[..., :1]).sum()
    + np.linalg.cholesky(a @ np.swapaxes(a, 1, 2)).sum(),
    "trace_triu": lambda a: np.trace(a, axis1=1, axis2=2).sum() + (np.triu(a) ** 2).sum(),
}


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("name", sorted(GRADS) + sorted(GRADS_LINALG))
def test_gradients_match_finite_differences(name):
    """spmd.grad through the composed functions, on one device and split over 2."""
    rng = np.random.default_rng(0)
    f = GRADS.get(name) or GRADS_LINALG[name]
    v = rng.standard_normal((4, 5)) if name in GRADS else rng.standard_normal((3, 4, 4)) + 5 * np.eye(4)
    want = _fd(f, v)
    np.testing.assert_allclose(spmd.jit(spmd.grad(f), backend="numpy")(v), want, rtol=1e-5, atol=1e-5)
    mesh = spmd.Mesh((2,), ("x",))
    g = spmd.jit(spmd.grad(f), in_shardings=(mesh.sharding("x", *([None] * (v.ndim - 1))),), backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReshardWarning)
        got = g(v).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [{"axis": -1}, {}, {"axis": (0, 1)}, {"axis": (1, 2), "ord": "fro"},
                                {"axis": 0, "ord": 2}])
def test_complex_2_norms_sum_squares_of_the_parts_as_numpy(kw):
    """numpy sums (x.conj() * x).real for the 2- and Frobenius norms: |2.5-0.5j|**2 +
    |1.5-0.5j|**2 is 9 exactly, and the norm 3 (not 3.0000000000000004 from the moduli)."""
    x = np.array([[2.5 - 0.5j, 1.5 - 0.5j], [0.5 + 1j, -2 + 0.5j]])[None]
    for dt in (np.complex128, np.complex64):
        want = np.linalg.norm(x.astype(dt), **kw)
        got = np.asarray(spmd.jit(lambda x: np.linalg.norm(x, **kw), backend="numpy")(x.astype(dt)))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_size_with_an_axis_and_histogram_with_its_own_edges():
    """np.size(x, axis) as numpy's (an int, an axis tuple, a negative axis); np.histogram
    with the edges of an earlier np.histogram (traced constants) and with data-made edges
    (their numbers taken by a graph break) counts as numpy does."""
    x = np.random.default_rng(0).standard_normal((6, 5))

    def f(x):
        counts, edges = np.histogram(x, 8, range=(-3, 3))
        dens, _ = np.histogram(x, bins=edges, density=True)
        return x * np.size(x, 1) + np.size(x, -2) + np.size(x, (0, 1)), counts, dens

    want = f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", spmd.errors.FallbackWarning)     # constant edges: no break
        got = spmd.jit(f, backend="numpy")(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)

    def g(x):
        _, edges = np.histogram(x, 5)
        return np.histogram(x, bins=edges)[0]
    with pytest.warns(spmd.errors.FallbackWarning, match="graph break"):
        np.testing.assert_array_equal(np.asarray(spmd.jit(g, backend="numpy")(x)), g(x))


@pytest.mark.parametrize("mode", ["jit", "eager"])
@pytest.mark.parametrize("name", ["inv", "solve", "cholesky", "cholesky_upper"])
def test_a_matrix_numpy_refuses_raises_linalgerror_as_numpy_does(name, mode):
    """numpy raises LinAlgError for a singular (inv, solve) or not positive definite
    (cholesky) matrix: so does spmd, after the run, naming the user's line, whichever
    device holds it (an uneven batch too); a NaN in the matrix gives NaN, as numpy does."""
    fn = {"inv": np.linalg.inv, "cholesky": np.linalg.cholesky,
          "cholesky_upper": lambda a: np.linalg.cholesky(a, upper=True),
          "solve": lambda a: np.linalg.solve(a, np.ones(a.shape[:-1] + (2,)))}[name]
    good = np.stack([np.eye(3) * (k + 2) for k in range(5)])
    sh = MESH4.sharding("x", None, None)

    def call(a):
        if mode == "jit":
            return spmd.jit(fn, in_shardings=sh)(a).numpy()
        return fn(spmd.device_put(a, sh)).numpy()

    np.testing.assert_allclose(call(good), fn(good))
    for k in (0, 4):                          # on the first device, and in the last, uneven shard
        bad = good.copy()
        bad[k] = np.ones((3, 3)) if name in ("inv", "solve") else -np.eye(3)
        with pytest.raises(np.linalg.LinAlgError) as want:
            fn(bad)
        with pytest.raises(np.linalg.LinAlgError, match=str(want.value)) as got:
            call(bad)
        assert "test_numpy_functions.py" in str(got.value)
    with_nan = good.copy()
    with_nan[1, 0, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.array_equal(np.isnan(call(with_nan)), np.isnan(fn(with_nan)))
