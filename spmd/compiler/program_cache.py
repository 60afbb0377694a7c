"""The disk cache of lowered programs. A second process that traces the same program
with the same shardings on the same mesh loads every stage's graph instead of running
propagation and partitioning again (1.4 s of the 2x2 GPT example's 1.9 s compile).

The key is a hash of everything the stages depend on: the traced program's exact text
(constants in full, user lines included, so error locations stay right), the mesh with
its device order, the requested shardings (and the interior ones spmd.AUTO asks for), the gradient bucket size (SPMD_BUCKET_BYTES),
and the source of spmd itself (any edit to a pass is a new key), numpy's and Python's
versions. A lowering that warned (a ReshardWarning) is not stored, so a warning is never
lost on a later run; a file that cannot be read is ignored and the program lowered
again. SPMD_PROGRAM_CACHE=0 turns this cache off (SPMD_CACHE=0 turns off every disk
cache).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time

import numpy as np

from ..errors import warnings_issued
from . import disk_cache

_source = None


def _source_hash() -> bytes:
    """A hash of every .py file of the installed spmd package (computed once)."""
    global _source
    if _source is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.blake2b(digest_size=16)
        for d, dirs, files in os.walk(root):
            dirs.sort()                      # a fixed order, whatever the file system's
            for f in sorted(files):
                if f.endswith(".py"):
                    p = os.path.join(d, f)
                    h.update(os.path.relpath(p, root).encode() + b"\0")
                    with open(p, "rb") as fh:
                        h.update(fh.read())
        h.update(f"{np.__version__} {sys.version}".encode())
        _source = h.digest()
    return _source


def _key(graph, mesh, in_shardings, out_shardings, extra="") -> str:
    from ..ir.text import print_graph
    h = hashlib.blake2b(_source_hash(), digest_size=20)
    h.update(print_graph(graph).encode())
    from .passes.combine import bucket_bytes
    from .passes.schedule_async import overlap_work
    for part in (mesh.text() if mesh is not None else "", _shardings(in_shardings),
                 _shardings(out_shardings), f"bucket {bucket_bytes()}", f"overlap {overlap_work()}", extra):
        h.update(b"\0" + part.encode())
    return h.hexdigest()


def _shardings(sh) -> str:
    texts = [None if s is None else s.text() for s in sh] if sh is not None else None
    return repr((texts, list(getattr(sh, "names", []) or [])))


def lower(run, graph, mesh, in_shardings, out_shardings, extra=""):
    """run() -> (stages, timings), through the cache. On a hit the timings are
    {"cache": seconds to load}."""
    if (not disk_cache.enabled() or os.environ.get("SPMD_PROGRAM_CACHE", "1") == "0"
            or os.environ.get("SPMD_DUMP")):
        return run()                         # a dump wants every stage actually run
    t0 = time.perf_counter()
    try:
        key = _key(graph, mesh, in_shardings, out_shardings, extra)
    except Exception:                        # a graph the printer cannot write: no caching
        return run()
    path = os.path.join(disk_cache.cache_dir(), "programs", key + ".pkl")
    blob = disk_cache.read(path)
    if blob is not None:
        try:
            stages = pickle.loads(blob)
        except Exception:
            stages = None
        if stages is not None:
            took = time.perf_counter() - t0
            if os.environ.get("SPMD_TIMINGS", "") not in ("", "0"):
                print(f"spmd: {graph.name}: stages loaded from the program cache in {took * 1e3:.1f} ms",
                      file=sys.stderr)
            return stages, {"cache": took}
    # (the warnings are counted, not caught: catching them would reset Python's record of
    # the lines that warned already, and each would show again on every lowering)
    warned = warnings_issued()
    stages, timings = run()
    if warnings_issued() == warned:
        try:
            disk_cache.write_atomic(path, pickle.dumps(stages, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:                    # an unpicklable attribute: only costs time
            pass
    return stages, timings
