"""The ways a kernel runs, each with the same three steps: `start()` makes the initial
state, `step()` does one iteration, `valid(iters)` checks the final state the PRK's way.
`prk_run` is the PRK's timed loop around them: iterations + 1, the first untimed.
"""
import time

import numpy as np


def prk_run(v, iters, barrier=None, slowest=None):
    """Seconds an iteration (the slowest rank's, under MPI) and whether the run validated."""
    v.start()
    t0 = time.perf_counter()
    for it in range(iters + 1):
        if it == 1:
            if barrier:
                barrier()
            t0 = time.perf_counter()
        v.step()
    t = time.perf_counter() - t0
    t = slowest(t) if slowest else t
    return t / iters, bool(v.valid(iters))


def interleaved_runs(variants, iters, runs, barrier=None, slowest=None):
    """Per variant: the median rate's seconds an iteration over `runs` runs, run after run
    of all variants in turn (so they share the machine's state alike), and whether every
    run validated."""
    times = [[] for _ in variants]
    ok = [True for _ in variants]
    for _ in range(runs):
        for i, v in enumerate(variants):
            t, good = prk_run(v, iters, barrier, slowest)
            times[i].append(t)
            ok[i] = ok[i] and good
    return [(float(np.median(t)), g) for t, g in zip(times, ok)]


class Numpy:
    """Plain numpy, one process."""

    def __init__(self, kern):
        self.k = kern

    def start(self):
        self.arrays = list(self.k.inputs())

    def step(self):
        self.k.fn(*self.arrays, *self.k.static)

    def valid(self, iters):
        return self.k.check([self.arrays[i] for i in self.k.updated], iters)


class Spmd:
    """spmd.jit of the same numpy iteration. With a mesh (a 1-D one, rows split or arrays
    whole): spmd.Arrays, the ones the iteration updates donated and replaced by the
    results each call. Without: one device, on numpy arrays the program updates in place
    (as a numpy user calls it)."""

    def __init__(self, kern, mesh=None):
        import spmd
        self.k, self.spmd, self.mesh = kern, spmd, mesh
        arrays = kern.inputs()
        self.host = arrays
        nargs = len(arrays)
        static = tuple(range(nargs, nargs + len(kern.static)))
        if mesh is None:
            self.f = spmd.jit(kern.fn, static_argnums=static)
            return
        self.shardings = [mesh.sharding("x", *[None] * (a.ndim - 1)) if split else mesh.sharding()
                          for a, split in zip(arrays, kern.split)]
        self.f = spmd.jit(kern.fn, static_argnums=static, donate_argnums=kern.updated)

    def start(self):
        if self.mesh is None:
            self.placed = [a.copy() for a in self.host]
        else:
            self.placed = [self.spmd.device_put(a, s) for a, s in zip(self.host, self.shardings)]

    def step(self):
        out = self.f(*self.placed, *self.k.static)
        out = out if isinstance(out, tuple) else (out,)
        for i, o in zip(self.k.updated, out):
            self.placed[i] = o

    def valid(self, iters):
        return self.k.check([np.asarray(self.placed[i]) for i in self.k.updated], iters)
