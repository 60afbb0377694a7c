"""A corpus of small programs written as numpy users write them (CFD steppers, particle
methods, image filters, hand-written backprop, statistics, optimisation, signal
processing, filters, graph algorithms). Each module defines one step function `step`
and `make(rng)` returning its arguments and, per argument, the mesh axis names of its
sharding (None: replicated, or not an array). Optional module attributes: MESH (shape,
axis names), default ((4,), ("d",)); STATIC, the positions of static arguments; RTOL.

run() calls a program under numpy and under spmd.jit on the same arguments and
compares everything: results (values, shapes, dtypes) and the arguments it wrote."""
import copy
import importlib
import warnings

import numpy as np

import spmd
from spmd.errors import FallbackWarning

NAMES = [
    # CFD and PDE steppers
    "lbm_d2q9", "fv_advection", "fdtd_yee", "wave_leapfrog", "burgers", "shallow_water",
    "heat_ftcs", "poisson_sor", "advection_diffusion", "spectral_poisson", "crank_nicolson",
    "rk4_lorenz", "game_of_life",
    # particle methods
    "pic_deposit", "sph_density", "nbody", "lennard_jones",
    # image filters
    "gaussian_blur", "sobel", "median3", "erosion", "box_filter_cumsum", "hist_equalize", "mandelbrot",
    # ML with hand-written backprop and optimizers
    "convnet_im2col", "word2vec", "vae", "softmax_regression", "adam", "mlp_momentum",
    "kmeans_step", "pca_power", "logistic_sgd",
    "rnn_bptt", "knn_classify", "viterbi", "numerical_gradient", "attention",
    # statistics
    "bootstrap", "online_variance", "histogram", "correlation", "groupby_unique", "monte_carlo_option",
    # optimisation
    "admm_lasso", "irls_logistic", "projected_gradient", "conjugate_gradient", "backtracking",
    "gram_schmidt", "sinkhorn", "jacobi_out",
    # signal processing
    "fir_convolve", "fir_slices", "power_spectrum", "moving_average", "polyfit_detrend",
    # Kalman and other filters
    "kalman", "exp_smoothing", "particle_filter",
    # graph algorithms
    "pagerank", "bellman_ford", "label_propagation", "floyd_warshall",
]

# the ten run in one mpiexec launch (tests/mpi_scripts/corpus.py)
MPI_NAMES = ["fv_advection", "wave_leapfrog", "shallow_water", "heat_ftcs", "sph_density", "sobel",
             "word2vec", "conjugate_gradient", "kmeans_step", "groupby_unique"]

DEFAULT_MESH = ((4,), ("d",))


def load(name):
    return importlib.import_module(f"{__name__}.{name}")


def _leaves(x):
    """The arrays and numbers of a result or argument: dicts (by key), lists and tuples."""
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _leaves(x[k])]
    if isinstance(x, (list, tuple)):
        return [v for e in x for v in _leaves(e)]
    return [x]


def _numbers(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _same(got, want, rtol, what):
    got, want = _numbers(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, numpy's {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, numpy's {want.dtype}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


def kind_of(messages):
    """How a call ran, from its FallbackWarnings' messages."""
    if any("runs eagerly" in m for m in messages):
        return "eager"
    if any("graph break" in m for m in messages):
        return "breaks"
    return "compiled"


def run(name, mesh=None):
    """Run corpus program `name` under numpy and under spmd.jit (on `mesh`, else its
    MESH) and assert the same results and written arguments, three times (the second call
    runs the cached program, or its graph breaks' path; the third, a path taken twice run
    whole, its breaks' values checked: graph_breaks.Path); returns how the first ran
    ("compiled", "breaks" or "eager")."""
    mod = load(name)
    args, specs = mod.make(np.random.default_rng(0))
    static = tuple(getattr(mod, "STATIC", ()))
    rtol = getattr(mod, "RTOL", 1e-9)
    if mesh is None:
        mesh = spmd.Mesh(*getattr(mod, "MESH", DEFAULT_MESH))
    want_args = copy.deepcopy(args)
    want = _leaves(mod.step(*want_args))
    shardings = tuple(None if s is None else mesh.sharding(*s)
                      for i, s in enumerate(specs) if i not in static)
    f = spmd.jit(mod.step, in_shardings=shardings, mesh=mesh, static_argnums=static)
    messages = []
    for call in ("first call", "second call", "third call"):
        got_args = copy.deepcopy(args)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got = _leaves(f(*got_args))
        messages += [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        assert len(got) == len(want), f"{name}: {len(got)} results, numpy's {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, rtol, f"{name}, {call}: result {k}")
        for k, (g, w) in enumerate(zip(_leaves(got_args), _leaves(want_args))):
            if isinstance(w, np.ndarray):
                _same(g, w, rtol, f"{name}, {call}: argument {k} after the call (written in place)")
    return kind_of(messages)
