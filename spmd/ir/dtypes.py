"""The dtypes the IR knows, with their short names for the text form."""
import ml_dtypes
import numpy as np

DTYPES = ("float32", "float64", "int32", "int64", "bool")
SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "pred"}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
# the small and unsigned integers (a uint8 image, int16 samples, uint32 hashes): numpy's
# promotion and wrap-around arithmetic; kernels compute on them at their own width
SMALL_INTS = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
DTYPES += SMALL_INTS
INTS += SMALL_INTS
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
SHORT.update(int8="i8", int16="i16", uint8="ui8", uint16="ui16", uint32="ui32", uint64="ui64")
# complex numbers: np.fft's results, and the elementwise math that makes sense on them
COMPLEX = ("complex64", "complex128")
DTYPES += COMPLEX
SHORT.update({"complex64": "c64", "complex128": "c128"})
REAL_OF = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}

# 2-byte storage floats: numpy's float16, and bfloat16 from ml_dtypes (the numpy dtype jax
# uses). Arrays hold 2 bytes an element; native kernels compute on them in float32.
bfloat16 = ml_dtypes.bfloat16
HALFS = ("float16", "bfloat16")
DTYPES += HALFS
FLOATS += HALFS
SHORT.update(float16="f16", bfloat16="bf16")
LONG = {v: k for k, v in SHORT.items()}


_NAMES = {}                                          # np.dtype -> its name, memoised


def canon(dtype) -> str:
    """Any numpy-understood dtype -> one of DTYPES, or a clear TypeError."""
    if type(dtype) is str and dtype in DTYPES:       # already canonical: the common case
        return dtype
    name = _NAMES.get(dtype) if isinstance(dtype, np.dtype) else None
    if name is None:
        name = np.dtype(dtype).name
        if isinstance(dtype, np.dtype):
            _NAMES[dtype] = name
    if name not in DTYPES:
        raise TypeError(f"spmd does not support dtype {name}; supported: {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def result_type(*tokens):
    """np.result_type over dtypes and (weak) Python scalars, extended to bfloat16, which numpy
    cannot promote with other dtypes: it promotes as float16 does (bool and int8/uint8 keep it,
    int32/int64 give float64, float32/float64 win, Python scalars are weak and keep it, as in
    jax), and bfloat16 with float16 gives float32 (as ml_dtypes' arithmetic and jax do)."""
    bf = np.dtype(bfloat16)
    strong = [np.dtype(t) for t in tokens if not isinstance(t, (bool, int, float, complex))]
    if bf not in strong:
        return np.result_type(*tokens)
    f16 = np.dtype(np.float16)
    has16 = f16 in strong
    r = np.result_type(*[f16 if not isinstance(t, (bool, int, float, complex)) and np.dtype(t) == bf else t
                         for t in tokens])
    if r == f16:
        return np.dtype(np.float32) if has16 else bf
    return r


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_unsigned(dtype: str) -> bool:
    return dtype in UNSIGNED


def is_complex(dtype: str) -> bool:
    return dtype in COMPLEX


def is_inexact(dtype: str) -> bool:
    """float or complex: the dtypes that carry derivatives."""
    return dtype in FLOATS or dtype in COMPLEX
