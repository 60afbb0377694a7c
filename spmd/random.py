"""spmd.random: counter-based random numbers, the same on any mesh and any backend.
The implementation and its description are in frontend/random.py."""
from .frontend.random import bernoulli, bits, fold_in, integers, key, normal, permutation, split, threefry2x32, uniform  # noqa: F401
