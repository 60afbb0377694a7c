"""Array creation that works inside spmd.jit, and numpy's positions of nonzero elements
padded to a fixed length: `import spmd.numpy as snp`. The implementations and their
descriptions are in frontend/creation.py and frontend/padded.py."""
from .frontend.creation import (arange, array, asarray, empty, empty_like, eye, full, full_like,  # noqa: F401
                                identity, linspace, ones, ones_like, zeros, zeros_like)
from .frontend.padded import argwhere, flatnonzero, nonzero  # noqa: F401
