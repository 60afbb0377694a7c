"""The numpy API on Tracers, as one table: each numpy name (ufunc, function, ndarray
method, Python operator) and the builder that emits its IR with numpy's semantics
(broadcasting, NEP 50 dtype promotion, axis conventions). The builders live in the
modules named below; `install` gives the Tracer class the methods, operators and numpy
protocols from this table, and eager mode (spmd/eager) runs the same builders on
spmd.Arrays. Anything numpy offers that is not here raises NotImplementedError naming
the function and the user's line."""
from __future__ import annotations

import numpy as np

from ..errors import user_loc
from . import contractions, core, flat, indexing, masked, shapes
from . import elementwise as ew
from . import functionalize as fz
from . import numpy_buffers as nb
from .trace import Tracer
from . import reductions as red
from .numpy_lib import complex_math as CM, convolve as CV
from .numpy_lib import data_sized as DS, fft as FFT, linalg as LA, math_funcs as MF, shape_funcs as SF, stats as ST
from .numpy_lib import polynomial as PL
from .numpy_lib import accumulate as AC, index_funcs as IF, int_funcs as INT, ranges as RG, set_funcs as SET
from .numpy_lib import bits as BT


U, F, M = "ufunc", "function", "method"
# The numpy API spmd traces, one row per numpy name: the builder that emits its IR, where
# numpy users reach it -- a ufunc (np.add(x, y) on a Tracer), a function np.NAME, an
# ndarray method x.NAME(...) (numpy's methods take the function's arguments after the
# array), a method with its own argument form, Python operators (__op__ and, for binary
# ones, the reflected __rop__). `install` puts the methods and operators on the Tracer.
API = (
    # name            builder                         surfaces   operators
    ("add",           ew.add,                         (U,),      ("add",)),
    ("subtract",      ew.subtract,                    (U,),      ("sub",)),
    ("multiply",      ew.multiply,                    (U,),      ("mul",)),
    ("divide",        ew.true_divide,                 (U,),      ()),
    ("true_divide",   ew.true_divide,                 (U,),      ("truediv",)),
    ("floor_divide",  ew.floor_divide,                (U,),      ("floordiv",)),
    ("remainder",     ew.mod,                         (U,),      ("mod",)),
    ("mod",           ew.mod,                         (U,),      ()),
    ("power",         ew.power,                       (U,),      ("pow",)),
    ("float_power",   lambda x, y: ew.power(core.asarray(x, "float64"), y), (U,), ()),
    ("maximum",       ew.maximum,                     (U,),      ()),
    ("minimum",       ew.minimum,                     (U,),      ()),
    ("fmax",          ew.fmax,                        (U,),      ()),
    ("fmin",          ew.fmin,                        (U,),      ()),
    ("negative",      ew.negative,                    (U,),      ("-neg",)),
    ("positive",      lambda x: x,                  (U,),      ("-pos",)),
    ("absolute",      ew.absolute,                    (U,),      ("-abs",)),
    ("conjugate",     ew.conjugate,                   (U, M),    ()),
    ("conj",          ew.conjugate,                   (M,),      ()),
    ("real",          fz.real_view,                   (F,),      ()),
    ("imag",          fz.imag_view,                   (F,),      ()),
    ("angle",         ew.angle,                       (F,),      ()),
    ("iscomplexobj",  ew.iscomplexobj,                (F,),      ()),
    ("isrealobj",     ew.isrealobj,                   (F,),      ()),
    ("fabs",          ew.absolute,                    (U,),      ()),
    ("sign",          CM.or_real(ew.sign, CM.sign),   (U,),      ()),
    ("floor",         ew.floor,                       (U,),      ()),
    ("ceil",          ew.ceil,                        (U,),      ()),
    ("reciprocal",    ew.reciprocal,                  (U,),      ()),
    ("exp",           ew.exp,                         (U,),      ()),
    ("expm1",         CM.or_real(MF.expm1, CM.expm1), (U,),      ()),
    ("log",           ew.log,                         (U,),      ()),
    ("log1p",         CM.or_real(ew.log1p, CM.log1p), (U,),      ()),
    ("log2",          CM.or_real(MF.log2, CM.log2),   (U,),      ()),
    ("log10",         CM.or_real(MF.log10, CM.log10), (U,),      ()),
    ("tanh",          CM.or_real(ew.tanh, CM.tanh),   (U,),      ()),
    ("sinh",          CM.or_real(MF.sinh, CM.sinh),   (U,),      ()),
    ("cosh",          CM.or_real(MF.cosh, CM.cosh),   (U,),      ()),
    ("sqrt",          ew.sqrt,                        (U,),      ()),
    ("square",        ew.square,                      (U,),      ()),
    ("sin",           CM.or_real(ew.sin, CM.sin),     (U,),      ()),
    ("cos",           CM.or_real(ew.cos, CM.cos),     (U,),      ()),
    ("tan",           CM.or_real(MF.tan, CM.tan),     (U,),      ()),
    ("equal",         ew.equal,                       (U,),      ("=eq",)),
    ("not_equal",     ew.not_equal,                   (U,),      ("=ne",)),
    ("less",          ew.less,                        (U,),      ("=lt",)),
    ("less_equal",    ew.less_equal,                  (U,),      ("=le",)),
    ("greater",       ew.greater,                     (U,),      ("=gt",)),
    ("greater_equal", ew.greater_equal,               (U,),      ("=ge",)),
    ("logical_and",   ew.logical_and,                 (U,),      ()),
    ("logical_or",    ew.logical_or,                  (U,),      ()),
    ("logical_xor",   ew.logical_xor,                 (U,),      ()),
    ("logical_not",   ew.logical_not,                 (U,),      ()),
    ("bitwise_and",   ew.bitwise_and,                 (U,),      ("and",)),
    ("bitwise_or",    ew.bitwise_or,                  (U,),      ("or",)),
    ("bitwise_xor",   ew.bitwise_xor,                 (U,),      ("xor",)),
    ("invert",        ew.invert,                      (U,),      ("-invert",)),
    ("left_shift",    ew.left_shift,                  (U,),      ("lshift",)),
    ("right_shift",   ew.right_shift,                 (U,),      ("rshift",)),
    ("matmul",        contractions.matmul,            (U,),      ("matmul",)),
    ("sum",           red.sum,                        (F, M),    ()),
    ("prod",          red.prod,                       (F, M),    ()),
    ("mean",          red.mean,                       (F, M),    ()),
    ("max",           red.max,                        (F, M),    ()),
    ("min",           red.min,                        (F, M),    ()),
    ("amax",          red.max,                        (F,),      ()),
    ("amin",          red.min,                        (F,),      ()),
    ("var",           red.var,                        (F, M),    ()),
    ("std",           red.std,                        (F, M),    ()),
    ("any",           red.any,                        (F, M),    ()),
    ("all",           red.all,                        (F, M),    ()),
    ("argmax",        red.argmax,                     (F, M),    ()),
    ("argmin",        red.argmin,                     (F, M),    ()),
    ("dot",           contractions.dot,               (F, M),    ()),
    ("vdot",          contractions.vdot,              (F,),      ()),
    ("inner",         contractions.inner,             (F,),      ()),
    ("outer",         contractions.outer,             (F,),      ()),
    ("tensordot",     contractions.tensordot,         (F,),      ()),
    ("einsum",        contractions.einsum,            (F,),      ()),
    ("cumsum",        red.cumsum,                     (F, M),    ()),
    ("cumprod",       red.cumprod,                    (F, M),    ()),
    # -- numpy_lib/shape_funcs.py
    ("hstack",        SF.hstack,                      (F,),      ()),
    ("vstack",        SF.vstack,                      (F,),      ()),
    ("dstack",        SF.dstack,                      (F,),      ()),
    ("column_stack",  SF.column_stack,                (F,),      ()),
    ("append",        SF.append,                      (F,),      ()),
    ("split",         SF.split,                       (F,),      ()),
    ("array_split",   SF.array_split,                 (F,),      ()),
    ("hsplit",        SF.hsplit,                      (F,),      ()),
    ("vsplit",        SF.vsplit,                      (F,),      ()),
    ("dsplit",        SF.dsplit,                      (F,),      ()),
    ("repeat",        SF.repeat,                      (F, M),    ()),
    ("roll",          SF.roll,                        (F,),      ()),
    ("flip",          SF.flip,                        (F,),      ()),
    ("fliplr",        SF.fliplr,                      (F,),      ()),
    ("flipud",        SF.flipud,                      (F,),      ()),
    ("rot90",         SF.rot90,                       (F,),      ()),
    ("atleast_2d",    SF.atleast_2d,                  (F,),      ()),
    ("atleast_3d",    SF.atleast_3d,                  (F,),      ()),
    ("broadcast_arrays",SF.broadcast_arrays,            (F,),      ()),
    ("meshgrid",      SF.meshgrid,                    (F,),      ()),
    ("pad",           SF.pad,                         (F,),      ()),
    ("diff",          SF.diff,                        (F,),      ()),
    ("unpackbits",    BT.unpackbits,                  (F,),      ()),
    ("packbits",      BT.packbits,                    (F,),      ()),
    ("gradient",      SF.gradient,                    (F,),      ()),
    ("tril",          SF.tril,                        (F,),      ()),
    ("triu",          SF.triu,                        (F,),      ()),
    ("diag",          SF.diag,                        (F,),      ()),
    ("diagflat",      SF.diagflat,                    (F,),      ()),
    ("insert",        SF.insert,                      (F,),      ()),
    ("diagonal",      SF.diagonal,                    (F, M),    ()),
    ("trace",         SF.trace,                       (F,),      ()),
    ("kron",          SF.kron,                        (F,),      ()),
    ("cross",         SF.cross,                       (F,),      ()),
    # -- numpy_lib/math_funcs.py
    ("isnan",         MF.isnan,                       (U,),      ()),
    ("isinf",         MF.isinf,                       (U,),      ()),
    ("isfinite",      MF.isfinite,                    (U,),      ()),
    ("isposinf",      MF.isposinf,                    (F,),      ()),
    ("isneginf",      MF.isneginf,                    (F,),      ()),
    ("nan_to_num",    MF.nan_to_num,                  (F,),      ()),
    ("signbit",       ew.signbit,                     (U,),      ()),
    ("copysign",      ew.copysign,                    (U,),      ()),
    ("arctan2",       MF.arctan2,                     (U,),      ()),
    ("arctan",        CM.or_real(MF.arctan, CM.arctan), (U,),      ()),
    ("arcsin",        CM.or_real(MF.arcsin, CM.arcsin), (U,),      ()),
    ("arccos",        CM.or_real(MF.arccos, CM.arccos), (U,),      ()),
    ("hypot",         MF.hypot,                       (U,),      ()),
    ("deg2rad",       MF.deg2rad,                     (U,),      ()),
    ("rad2deg",       MF.rad2deg,                     (U,),      ()),
    ("radians",       MF.deg2rad,                     (U,),      ()),
    ("degrees",       MF.rad2deg,                     (U,),      ()),
    ("sinc",          MF.sinc,                        (F,),      ()),
    ("arcsinh",       CM.or_real(MF.arcsinh, CM.arcsinh), (U,),      ()),
    ("arccosh",       CM.or_real(MF.arccosh, CM.arccosh), (U,),      ()),
    ("arctanh",       CM.or_real(MF.arctanh, CM.arctanh), (U,),      ()),
    ("exp2",          CM.or_real(MF.exp2, CM.exp2),   (U,),      ()),
    ("cbrt",          MF.cbrt,                        (U,),      ()),
    ("trunc",         MF.trunc,                       (U,),      ()),
    ("fix",           MF.fix,                         (F,),      ()),
    ("rint",          MF.rint,                        (U,),      ()),
    ("round",         MF.round_,                      (F, M),    ()),
    ("around",        MF.round_,                      (F,),      ()),
    ("fmod",          MF.fmod,                        (U,),      ()),
    ("divmod",        MF.divmod_,                     (U,),      ("divmod",)),
    ("logaddexp",     MF.logaddexp,                   (U,),      ()),
    ("logaddexp2",    MF.logaddexp2,                  (U,),      ()),
    ("heaviside",     MF.heaviside,                   (U,),      ()),
    ("isclose",       MF.isclose,                     (F,),      ()),
    ("allclose",      MF.allclose,                    (F,),      ()),
    ("array_equal",   MF.array_equal,                 (F,),      ()),
    ("select",        MF.select,                      (F,),      ()),
    # -- numpy_lib/stats.py
    ("sort",          ST.sort,                        (F,),      ()),
    ("sort",          ST.sort_in_place,               (M,),      ()),
    ("argsort",       ST.argsort,                     (F, M),    ()),
    ("partition",     ST.partition,                   (F,),      ()),
    ("partition",     ST.partition_in_place,          (M,),      ()),
    ("argpartition",  ST.argpartition,                (F, M),    ()),
    ("median",        ST.median,                      (F,),      ()),
    ("percentile",    ST.percentile,                  (F,),      ()),
    ("quantile",      ST.quantile,                    (F,),      ()),
    ("average",       ST.average,                     (F,),      ()),
    ("cov",           ST.cov,                         (F,),      ()),
    ("corrcoef",      ST.corrcoef,                    (F,),      ()),
    ("convolve",      CV.convolve,                    (F,),      ()),
    ("correlate",     CV.correlate,                   (F,),      ()),
    ("nansum",        ST.nansum,                      (F,),      ()),
    ("nanprod",       ST.nanprod,                     (F,),      ()),
    ("nanmean",       ST.nanmean,                     (F,),      ()),
    ("nanvar",        ST.nanvar,                      (F,),      ()),
    ("nanstd",        ST.nanstd,                      (F,),      ()),
    ("nanmax",        ST.nanmax,                      (F,),      ()),
    ("nanmin",        ST.nanmin,                      (F,),      ()),
    ("nanargmax",     ST.nanargmax,                   (F,),      ()),
    ("nanargmin",     ST.nanargmin,                   (F,),      ()),
    ("ptp",           ST.ptp,                         (F,),      ()),
    ("count_nonzero", ST.count_nonzero,               (F,),      ()),
    ("searchsorted",  ST.searchsorted,                (F, M),    ()),
    ("digitize",      ST.digitize,                    (F,),      ()),
    ("isin",          ST.isin,                        (F,),      ()),
    ("bincount",      DS.bincount,                    (F,),      ()),
    ("nonzero",       DS.nonzero,                     (F, M),    ()),
    ("flatnonzero",   DS.flatnonzero,                 (F,),      ()),
    ("argwhere",      DS.argwhere,                    (F,),      ()),
    ("unique",        SET.unique,                     (F,),      ()),
    ("histogram",     ST.histogram,                   (F,),      ()),
    ("interp",        ST.interp,                      (F,),      ()),
    # -- numpy_lib/set_funcs.py: sizes from the data, as np.unique
    ("intersect1d",   SET.intersect1d,                (F,),      ()),
    ("union1d",       SET.union1d,                    (F,),      ()),
    ("setdiff1d",     SET.setdiff1d,                  (F,),      ()),
    ("setxor1d",      SET.setxor1d,                   (F,),      ()),
    ("extract",       SET.extract,                    (F,),      ()),
    ("compress",      SET.compress,                   (F,),      ()),
    ("compress",      lambda a, condition, axis=None, out=None: SET.compress(condition, a, axis, out), (M,), ()),
    ("trim_zeros",    SET.trim_zeros,                 (F,),      ()),
    # -- numpy_lib/ranges.py, index_funcs.py, accumulate.py, int_funcs.py
    ("linspace",      RG.linspace,                    (F,),      ()),
    ("logspace",      RG.logspace,                    (F,),      ()),
    ("geomspace",     RG.geomspace,                   (F,),      ()),
    ("unravel_index", IF.unravel_index,               (F,),      ()),
    ("ravel_multi_index", IF.ravel_multi_index,       (F,),      ()),
    ("lexsort",       IF.lexsort,                     (F,),      ()),
    ("choose",        IF.choose,                      (F, M),    ()),
    ("triu_indices_from", IF.triu_indices_from,       (F,),      ()),
    ("tril_indices_from", IF.tril_indices_from,       (F,),      ()),
    ("delete",        IF.delete,                      (F,),      ()),
    ("resize",        IF.resize,                      (F,),      ()),
    ("piecewise",     IF.piecewise,                   (F,),      ()),
    ("apply_along_axis", IF.apply_along_axis,         (F,),      ()),
    ("lib.stride_tricks.sliding_window_view", IF.sliding_window_view, (F,), ()),
    ("trapezoid",     AC.trapezoid,                   (F,),      ()),
    ("nancumsum",     AC.nancumsum,                   (F,),      ()),
    ("nancumprod",    AC.nancumprod,                  (F,),      ()),
    ("ediff1d",       AC.ediff1d,                     (F,),      ()),
    ("gcd",           INT.gcd,                        (U,),      ()),
    ("lcm",           INT.lcm,                        (U,),      ()),
    ("bitwise_count", INT.bitwise_count, (U,), ()),
    # -- numpy_lib/polynomial.py
    ("vander",        PL.vander,                      (F,),      ()),
    ("polyval",       PL.polyval,                     (F,),      ()),
    ("polyfit",       PL.polyfit,                     (F,),      ()),
    ("nanmedian",     ST.nanmedian,                   (F,),      ()),
    ("nanpercentile", ST.nanpercentile,               (F,),      ()),
    ("nanquantile",   ST.nanquantile,                 (F,),      ()),
    # -- numpy_lib/linalg.py (np.linalg.NAME)
    ("linalg.inv",    LA.inv,                         (F,),      ()),
    ("linalg.det",    LA.det,                         (F,),      ()),
    ("linalg.slogdet", LA.slogdet,                     (F,),      ()),
    ("linalg.cholesky",LA.cholesky,                    (F,),      ()),
    ("linalg.solve",  LA.solve,                       (F,),      ()),
    ("linalg.eig",    LA.eig,                         (F,),      ()),
    ("linalg.eigvals", LA.eigvals,                    (F,),      ()),
    ("linalg.eigh",   LA.eigh,                        (F,),      ()),
    ("linalg.eigvalsh",LA.eigvalsh,                    (F,),      ()),
    ("linalg.svd",    LA.svd,                         (F,),      ()),
    ("linalg.svdvals", LA.svdvals,                     (F,),      ()),
    ("linalg.qr",     LA.qr,                          (F,),      ()),
    ("linalg.pinv",   LA.pinv,                        (F,),      ()),
    ("linalg.lstsq",  LA.lstsq,                       (F,),      ()),
    ("linalg.matrix_power",LA.matrix_power,                (F,),      ()),
    ("linalg.norm",   LA.norm,                        (F,),      ()),
    ("linalg.vector_norm",LA.vector_norm,                 (F,),      ()),
    ("linalg.matrix_norm",LA.matrix_norm,                 (F,),      ()),
    ("linalg.matrix_rank",LA.matrix_rank,                 (F,),      ()),
    ("linalg.cond",   LA.cond,                        (F,),      ()),
    ("linalg.multi_dot",LA.multi_dot,                   (F,),      ()),
    ("linalg.matrix_transpose", LA.matrix_transpose,  (F,),      ()),
    ("linalg.outer",  LA.outer,                       (F,),      ()),
    ("linalg.cross",  LA.cross,                       (F,),      ()),
    ("linalg.vecdot", LA.vecdot,                      (F,),      ()),
    ("linalg.diagonal", LA.diagonal,                  (F,),      ()),
    ("linalg.trace",  LA.trace,                       (F,),      ()),
    # -- numpy_lib/fft.py (np.fft.NAME)
    ("fft.fft",       FFT.fft,                        (F,),      ()),
    ("fft.ifft",      FFT.ifft,                       (F,),      ()),
    ("fft.rfft",      FFT.rfft,                       (F,),      ()),
    ("fft.irfft",     FFT.irfft,                      (F,),      ()),
    ("fft.hfft",      FFT.hfft,                       (F,),      ()),
    ("fft.ihfft",     FFT.ihfft,                      (F,),      ()),
    ("fft.fft2",      FFT.fft2,                       (F,),      ()),
    ("fft.ifft2",     FFT.ifft2,                      (F,),      ()),
    ("fft.rfft2",     FFT.rfft2,                      (F,),      ()),
    ("fft.irfft2",    FFT.irfft2,                     (F,),      ()),
    ("fft.fftn",      FFT.fftn,                       (F,),      ()),
    ("fft.ifftn",     FFT.ifftn,                      (F,),      ()),
    ("fft.rfftn",     FFT.rfftn,                      (F,),      ()),
    ("fft.irfftn",    FFT.irfftn,                     (F,),      ()),
    ("fft.fftshift",  FFT.fftshift,                   (F,),      ()),
    ("fft.ifftshift", FFT.ifftshift,                  (F,),      ()),
    ("transpose",     shapes.view_transpose,          (F,),      ()),
    ("transpose",     shapes.view_transpose_method,   (M,),      ()),
    ("reshape",       shapes.view_reshape,            (F,),      ()),
    ("reshape",       shapes.view_reshape_method,     (M,),      ()),
    ("swapaxes",      shapes.view_swapaxes,           (F, M),    ()),
    ("moveaxis",      shapes.view_moveaxis,           (F,),      ()),
    ("concatenate",   shapes.concatenate,             (F,),      ()),
    ("stack",         shapes.stack,                   (F,),      ()),
    ("broadcast_to",  shapes.view_broadcast_to,       (F,),      ()),
    ("expand_dims",   shapes.view_expand_dims,        (F,),      ()),
    ("squeeze",       shapes.view_squeeze,            (F, M),    ()),
    ("ravel",         shapes.view_ravel,              (F, M),    ()),
    ("flatten",       shapes.flatten,                 (M,),      ()),
    ("atleast_1d",    SF.atleast_1d,                  (F,),      ()),
    ("clip",          ew.clip,                        (F, M),    ()),
    ("where",         DS.where,                       (F,),      ()),
    ("zeros_like",    fz.makes_array(core.zeros_like), (F,),     ()),
    ("ones_like",     fz.makes_array(core.ones_like), (F,),      ()),
    ("full_like",     fz.makes_array(core.full_like), (F,),      ()),
    ("tile",          shapes.tile,                    (F,),      ()),
    ("take",          shapes.take,                    (F, M),    ()),
    ("copy",          shapes.copy,                    (F,),      ()),
    ("copy",          shapes.copy_method,             (M,),      ()),
    ("shape",         shapes.metadata(np.shape),      (F,),      ()),
    ("ndim",          shapes.metadata(np.ndim),       (F,),      ()),
    ("size",          shapes.metadata(np.size),       (F,),      ()),
    ("result_type",   lambda *xs: np.dtype(core.result_dtype(*xs)), (F,), ()),
    ("asarray",       lambda x, dtype=None, **k: core.asarray(x, dtype), (F,), ()),
    ("array",         shapes.array,                   (F,),      ()),
    ("astype",        shapes.astype,                  (F, M),    ()),
    ("getitem",       indexing.getitem,               (),        ("getitem",)),
    # writes (functionalize.py) and indexing (indexing.py)
    ("copyto",        fz.copyto,                      (F,),      ()),
    ("fill",          fz.fill,                        (M,),      ()),
    ("view",          fz.view_method,                 (M,),      ()),
    ("put",           indexing.put,                   (F, M),    ()),
    ("put_along_axis", indexing.put_along_axis,       (F,),      ()),
    ("take_along_axis", indexing.take_along_axis,     (F,),      ()),
    ("fill_diagonal", indexing.fill_diagonal,         (F,),      ()),
    ("ix_",           indexing.ix_,                   (F,),      ()),
    ("empty_like",    fz.makes_array(core.empty_like), (F,),     ()),
    ("trace",         red.trace_,                     (M,),      ()),
)


UFUNCS = {name: f for name, f, where_, _ in API if U in where_}


def _np_attr(name):
    """np.NAME, or np.linalg.NAME for "linalg.NAME" (np.fft.NAME for "fft.NAME"); None where
    this numpy has none."""
    obj = np
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj


FUNCTIONS = {_np_attr(name): f for name, f, where_, _ in API if F in where_ and _np_attr(name) is not None}
METHODS = {name: f for name, f, where_, _ in API if M in where_}
UFUNC_REDUCE = {"add": red.sum, "multiply": red.prod, "maximum": red.max, "minimum": red.min}
# ufunc.accumulate: the cumulative op's kind
UFUNC_ACCUMULATE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min"}


def operators():
    """Python's operator methods -> builders: "add" gives __add__ and the reflected
    __radd__, "-neg" a unary __neg__, "=eq" a comparison (Python reflects those itself)."""
    out = {}
    for _, f, _, ops in API:
        for o in ops:
            if o[0] in "-=":
                out[f"__{o[1:]}__"] = f
            else:
                out[f"__{o}__"] = f
                out[f"__r{o}__"] = (lambda g: lambda x, y: g(y, x))(f)
    out.pop("__rgetitem__")
    out["__pow__"] = ew.pow_operator
    return out


INPLACE = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor")


def inplace_operators():
    """x op= y: numpy stores op(x, y) into x (functionalize.inplace)."""
    ops = operators()
    return {f"__i{o}__": fz.inplace(ops[f"__{o}__"], o) for o in INPLACE}


def dispatch_ufunc(ufunc, method, inputs, kwargs):
    """np.<ufunc>(...) and np.<ufunc>.<method>(...) with a Tracer among the inputs."""
    if nb.has_buffers(inputs, kwargs):
        return nb.call(ufunc if method == "__call__" else getattr(ufunc, method), inputs, kwargs,
                       (0,) if method == "at" else ())
    name = ufunc.__name__
    what = f"np.{name}" + ("" if method == "__call__" else f".{method}")
    out = kwargs.pop("out", None)
    outs = out if isinstance(out, tuple) else (out,)
    where = kwargs.pop("where", True) if method == "__call__" else True
    if where is not True and any(o is None for o in outs):
        raise NotImplementedError(
            f"{what}(..., where=) without out= at {user_loc()}: numpy leaves the result uninitialised where "
            f"the condition is False. Pass out= (numpy keeps out's values there, and so does spmd), or "
            f"write np.where(condition, {what}(...), other)")
    if any(o is not None for o in outs):
        casting = kwargs.pop("casting", "same_kind")
        # numpy's casting= also governs the inputs' cast to a dtype= loop
        inner = dict(kwargs, casting=casting) if method == "__call__" and casting != "same_kind" else kwargs
        return fz.store_out(out, dispatch_ufunc(ufunc, method, inputs, inner), what, where, casting)
    if method == "at":
        return indexing.ufunc_at(ufunc, UFUNCS.get(name), *inputs)
    dtype = kwargs.pop("dtype", None)
    supported = {"__call__": UFUNCS, "reduce": {**UFUNC_REDUCE, **dict.fromkeys(AC.FOLDED)},
                 "accumulate": UFUNC_ACCUMULATE, "outer": UFUNCS if len(inputs) == 2 else {},
                 "reduceat": AC.REDUCEAT}
    if name not in supported.get(method, {}):
        raise NotImplementedError(f"{what} is not supported on traced arrays in spmd (at {user_loc()}); "
                                  f"supported ufuncs: {', '.join(sorted(UFUNCS))}")
    return _UFUNC_METHODS[method](name, inputs, dtype, kwargs)


def _ufunc_call(name, inputs, dtype, kwargs):
    casting = kwargs.pop("casting", "same_kind")
    core.no_extra(name, (), kwargs)
    loop = _ufunc_loop(name, inputs, dtype, casting) if dtype is not None or casting != "same_kind" else None
    if loop is None:
        r = UFUNCS[name](*inputs)
        return fz.fresh_result(core.astype(r, dtype) if dtype is not None else r, inputs)
    # numpy casts the inputs to the loop's dtypes first and computes in them
    # (np.add(x, 0.4, dtype=np.int64, casting="unsafe") adds the truncated values)
    nin = len(inputs)
    cast = [core.astype(x, loop[i].name) if isinstance(x, Tracer) else np.asarray(x).astype(loop[i])
            for i, x in enumerate(inputs)]
    r = UFUNCS[name](*cast)
    if isinstance(r, tuple):
        r = tuple(core.astype(v, loop[nin + i].name) for i, v in enumerate(r))
    else:
        r = core.astype(r, loop[nin].name)
    return fz.fresh_result(r, inputs)


def _ufunc_loop(name, inputs, dtype, casting):
    """numpy's loop dtypes (inputs, then outputs) for np.<name>(*inputs, dtype=, casting=):
    the loop whose outputs are `dtype`, the inputs cast to it under `casting` (numpy's
    UFuncTypeError where they cannot be). None where a dtype is not numpy's own (bfloat16):
    the result is then cast to dtype."""
    uf = getattr(np, name)
    tokens = []
    for x in inputs:
        s = core.sample(x)
        tokens.append(type(s) if type(s) in (int, float, complex) else np.asarray(s).dtype)
    out = np.dtype(dtype) if dtype is not None else None
    if any(isinstance(t, np.dtype) and t.isbuiltin != 1 for t in tokens) or (out is not None and out.isbuiltin != 1):
        return None
    try:
        return uf.resolve_dtypes(tuple(tokens) + (None,) * uf.nout,
                                 signature=(None,) * uf.nin + (out,) * uf.nout, casting=casting)
    except TypeError as e:
        raise TypeError(f"{e} (np.{name} at {user_loc()})") from None


def _ufunc_reduce(name, inputs, dtype, kwargs):
    axis = kwargs.pop("axis", 0)
    if name in AC.FOLDED:
        return AC.fold_reduce(name, inputs[0], axis=axis, dtype=dtype, **kwargs)
    if dtype is not None:
        if name not in ("add", "multiply"):
            raise NotImplementedError(f"np.{name}.reduce with dtype= (at {user_loc()})")
        kwargs["dtype"] = dtype
    return UFUNC_REDUCE[name](inputs[0], axis=axis, **kwargs)


def _ufunc_accumulate(name, inputs, dtype, kwargs):
    core.no_extra(f"{name}.accumulate", (), {k: v for k, v in kwargs.items() if k != "axis"})
    x = core.asarray(inputs[0])
    kind, axis = UFUNC_ACCUMULATE[name], kwargs.get("axis", 0)
    if kind in ("sum", "prod"):      # numpy promotes small ints and bools, as np.cumsum does
        return red.cumulative(kind, x, axis, dtype, red.sum_dtype)
    own = lambda v: v.value.dtype   # noqa: E731
    if x.value.dtype == "bool" and dtype is None:   # a running any / all
        return core.astype(red.cumulative(kind, core.astype(x, "int32"), axis, None, own), "bool")
    return red.cumulative(kind, x, axis, dtype, own)


def _ufunc_outer(name, inputs, dtype, kwargs):
    # every element of a with every element of b: a's dims, then b's
    core.no_extra(f"{name}.outer", (), kwargs)
    a, b = core.asarray(inputs[0]), core.asarray(inputs[1])
    r = UFUNCS[name](shapes.reshape(a, a.shape + (1,) * b.ndim), b)
    return fz.fresh_result(core.astype(r, dtype) if dtype is not None else r, inputs)


def _ufunc_reduceat(name, inputs, dtype, kwargs):
    core.no_extra(f"{name}.reduceat", (), {k: v for k, v in kwargs.items() if k != "axis"})
    return AC.reduceat(name, inputs[0], inputs[1], axis=kwargs.get("axis", 0), dtype=dtype)


_UFUNC_METHODS = {"__call__": _ufunc_call, "reduce": _ufunc_reduce, "accumulate": _ufunc_accumulate,
                  "outer": _ufunc_outer, "reduceat": _ufunc_reduceat}


def dispatch_function(func, args, kwargs):
    if nb.has_buffers(args, kwargs):
        return nb.call(func, args, kwargs, nb.WRITES.get(func, ()))
    impl = FUNCTIONS.get(func)
    if impl is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        module = "np" + module[len("numpy"):] if module.startswith("numpy") else module
        raise NotImplementedError(f"{module}.{func.__name__} is not supported on traced arrays in spmd "
                                  f"(at {user_loc()})")
    out = None if getattr(impl, "takes_out", False) else kwargs.pop("out", None)
    r = impl(*args, **kwargs)
    if out is not None:
        return fz.store_out(out, r, f"np.{func.__name__}")
    return r if func in (np.asarray, np.asanyarray) else fz.fresh_result(r, args)


# -- the Tracer's numpy surface ---------------------------------------------------------------
def install(cls):
    """Give the Tracer class numpy's surface from the table: ndarray methods and Python's
    operators (a result is a new array or a view, as in numpy, never `self`; out= stores
    into the array given), in-place operators (x += y returns the array it wrote), the
    views .T and .mT, .real and .imag, x[key] = v, and numpy's dispatch protocols."""
    for name, f in {**METHODS, **operators()}.items():
        setattr(cls, name, _method(name, f))
    for name, f in inplace_operators().items():
        setattr(cls, name, _with_buffers_read(_python_number_kept(f)))
    cls.T = property(shapes.view_transpose)
    cls.shape = property(lambda x: x.value.shape, shapes.set_shape)
    cls.mT = property(lambda x: shapes.view_swapaxes(x, -1, -2))
    cls.flat = property(flat.Flat, lambda x, v: flat.Flat(x).__setitem__(slice(None), v))
    # z.real = v sets the real parts, as numpy's attribute assignment does
    cls.real = property(fz.real_view, lambda x, v: indexing.setitem(fz.real_view(x), Ellipsis, v))
    cls.imag = property(fz.imag_view, lambda x, v: indexing.setitem(fz.imag_view(x), Ellipsis, v))
    cls.__setitem__ = _with_buffers_read(indexing.setitem)
    cls.__array_ufunc__ = _array_ufunc
    cls.__array_function__ = _array_function
    masked.install(operators(), UFUNCS, FUNCTIONS)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if _has_masked(inputs + tuple(kwargs.values())):
        return NotImplemented           # numpy asks the masked selection (masked.Masked)
    return dispatch_ufunc(ufunc, method, inputs, kwargs)


def _array_function(self, func, types, args, kwargs):
    if masked.Masked in types:
        return NotImplemented
    return dispatch_function(func, args, kwargs)


def _with_buffers_read(f):
    """f(x, *args) with numpy arrays made in the function read as what they hold."""
    def g(x, *args):
        if nb.has_buffers(args, {}):
            args = tuple(nb.resolve_all(a) for a in args)
        return f(x, *args)
    g.__name__, g.__doc__ = f.__name__, f.__doc__
    return g


def _has_masked(xs):
    return any(isinstance(x, masked.Masked) or (isinstance(x, tuple) and _has_masked(x)) for x in xs)


def _method(name, f):
    def m(self, *args, **kwargs):
        if name.startswith("__") and name != "__getitem__" and _has_masked(args):
            return NotImplemented       # Python asks the masked selection's reflected operator
        if nb.has_buffers(args, kwargs):
            return nb.call(getattr(self, name), args, kwargs)
        out = kwargs.pop("out", None) if name != "__getitem__" and not getattr(f, "takes_out", False) else None
        r = f(self, *args, **kwargs)
        if out is not None:
            return fz.store_out(out, r, f"ndarray.{name}")
        r = fz.fresh_result(r, (self,) + args)
        return _python_number(r, (self,) + args) if name in _OPERATOR_NAMES else r
    m.__name__ = m.__qualname__ = name
    return m


_OPERATOR_NAMES = set(operators()) - {"__getitem__", "__matmul__", "__rmatmul__"}


def _is_python_number(x) -> bool:
    if isinstance(x, Tracer):
        return x.weak
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def _python_number(r, operands):
    """Python's operators on Python numbers give a Python number: weak (NEP 50), so
    `t * 0.5` on a traced Python float t still promotes like one (a Python float times a
    float32 array is float32)."""
    if isinstance(r, Tracer) and not r.weak and r.ndim == 0 and all(_is_python_number(x) for x in operands):
        return Tracer(r.value, r._tr, True)
    return r


def _python_number_kept(f):
    def g(x, y):
        return _python_number(f(x, y), (x, y))
    g.__name__, g.__doc__ = f.__name__, f.__doc__
    return g
