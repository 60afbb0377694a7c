"""The dtypes the IR knows, with their short names for the text form."""
import numpy as np

DTYPES = ("float32", "float64", "int32", "int64", "bool")
SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "pred"}
LONG = {v: k for k, v in SHORT.items()}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")


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
