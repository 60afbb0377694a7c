"""The dtypes the IR knows, with their short names for the text form."""
import numpy as np

DTYPES = ("float32", "float64", "int32", "int64", "bool")
SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "pred"}
LONG = {v: k for k, v in SHORT.items()}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
# complex numbers: np.fft's results, and the elementwise math that makes sense on them
COMPLEX = ("complex64", "complex128")
DTYPES += COMPLEX
SHORT.update({"complex64": "c64", "complex128": "c128"})
LONG.update({"c64": "complex64", "c128": "complex128"})
REAL_OF = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}


def canon(dtype) -> str:
    """Any numpy-understood dtype -> one of DTYPES, or a clear TypeError."""
    if type(dtype) is str and dtype in DTYPES:       # already canonical: the common case
        return dtype
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise TypeError(f"spmd does not support dtype {name}; supported: {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_complex(dtype: str) -> bool:
    return dtype in COMPLEX


def is_inexact(dtype: str) -> bool:
    """float or complex: the dtypes that carry derivatives."""
    return dtype in FLOATS or dtype in COMPLEX
