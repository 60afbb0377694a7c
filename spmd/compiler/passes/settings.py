"""The passes' settings read from the environment: sizes given as a number (SPMD_BUCKET_BYTES,
SPMD_OVERLAP_WORK), with an error naming the variable when it is not one."""
from __future__ import annotations

import os


def count(name: str, default: int, unit: str, zero_means: str) -> int:
    """The non-negative number `name` holds (`unit`: what it counts), else `default`."""
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        n = int(float(v))
    except ValueError:
        raise ValueError(f"{name}={v!r} is not a number of {unit}") from None
    if n < 0:
        raise ValueError(f"{name}={v!r} must be >= 0 (0: {zero_means})")
    return n
