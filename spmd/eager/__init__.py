"""Eager mode: numpy on spmd.Arrays outside of jit runs as cached one-op partitioned
programs and returns spmd.Arrays (programs.py); the protocols on spmd.Array
(dispatch.py); indexing (indexing.py); which results are views of which arrays
(views.py); boolean selection x[mask] (mask_select.py)."""
from . import dispatch  # noqa: F401  (installs numpy's protocols on spmd.Array)
from .programs import STATS, reset_stats  # noqa: F401
