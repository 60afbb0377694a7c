"""Array creation that works inside spmd.jit: `import spmd.numpy as snp`.
The implementation and its description are in frontend/creation.py."""
from .frontend.creation import (arange, array, asarray, empty, empty_like, eye, full, full_like,  # noqa: F401
                                identity, linspace, ones, ones_like, zeros, zeros_like)
