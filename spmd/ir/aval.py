"""Aval: an abstract value, what an op's shape rule sees of an operand. Its own module so
the op rules (ir/ops) and the graph (ir/graph.py) both import it at module level."""
from __future__ import annotations

from typing import NamedTuple


class Aval(NamedTuple):
    shape: tuple
    dtype: str
