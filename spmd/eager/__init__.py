"""Eager mode: numpy on spmd.Arrays outside of jit runs as cached one-op partitioned
programs and returns spmd.Arrays (dispatch.py); boolean selection x[mask] (select.py)."""
from .dispatch import STATS, reset_stats  # noqa: F401,E402
