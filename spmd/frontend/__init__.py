"""numpy in: tracing a user's function into a Graph.

    trace.py          Trace and Tracer: the graph being recorded, a traced array
    views.py          view chains (base value <-> view value) and the Buffer of a base
    core.py           what every builder shares: emitting ops, dtype rules, asarray, axes
    elementwise.py    ufuncs on the IR's elementwise ops      \\
    shapes.py         reshape, transpose, concatenate, take    | the numpy builders
    reductions.py     sum, mean, max, argmax, cumsum, ...      |
    contractions.py   matmul, dot, einsum, ...                 /
    functionalize.py  writes: x[i] = v, x += v, out=, copyto (and numpy's views)
    indexing.py       numpy's indexing, reads and writes
    masked.py         x[mask] under jit: the selection kept in place beside the mask
    padded.py         nonzero / argwhere padded to a fixed length (spmd.numpy)
    numpy_lib/        numpy functions composed of the above, one module per theme
    numpy_api.py      the table: numpy name -> builder; installs numpy's surface on Tracer
    control.py        structured control flow (while_loop, cond, scan)
    autodiff.py       reverse-mode autodiff on the traced graph
    annotate.py       spmd.shard inside traced code
    creation.py       spmd.numpy: array creation that works while tracing
    random.py         spmd.random's counter-based keys
    random_guard.py   np.random inside traced code is an error
    numpy_buffers.py  arrays numpy makes inside traced code (np.zeros, ...), traced when written

Importing the package gives the Tracer class numpy's methods, operators and protocols
(from numpy_api's table) and guards np.random, so a Tracer behaves as an ndarray from the
first one made.
"""
from . import numpy_api, numpy_buffers, random_guard
from .trace import NumpyBuffer, Tracer

numpy_api.install(Tracer)
numpy_buffers.install(NumpyBuffer)
random_guard.install()
