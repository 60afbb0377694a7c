"""SPMD_TRACE=file.json: a Chrome / Perfetto trace with one track per rank.

Executables record a span per kernel and per collective (`span(...)`), and each
collective started early and finished late (all_reduce_start .. all_reduce_done) as an
"in flight" interval from its start to its done (`add_async`), on a track of its own
under its rank's, so the computation that overlaps it is visible; each process
keeps its events in memory. At exit (or `write()`), the process writes them; under MPI
and Ray the runtime gathers every rank's events first so one file holds all tracks
(`merge_events`). Open the file in chrome://tracing or ui.perfetto.dev.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time
from contextlib import contextmanager

_lock = threading.Lock()
_events: list = []
# timestamps are microseconds of wall-clock time (read through perf_counter for
# resolution): ranks in other processes, on other hosts (MPI, Ray actors) then share one
# time axis, as far as their clocks agree; `write` shifts them to start at 0
_t0 = time.perf_counter()
_wall0 = time.time()
_registered = False


def enabled() -> bool:
    return bool(os.environ.get("SPMD_TRACE"))


def now_us() -> float:
    return (_wall0 + time.perf_counter() - _t0) * 1e6


def add(name, cat, rank, start_us, dur_us, args=None):
    ev = {"name": name, "cat": cat, "ph": "X", "ts": round(start_us, 3), "dur": round(dur_us, 3),
          "pid": 0, "tid": int(rank)}
    if args:
        ev["args"] = args
    with _lock:
        _events.append(ev)
    _ensure_atexit()


def add_async(name, cat, rank, start_us, end_us, args=None):
    """An interval that overlaps the spans on `rank`'s track (a collective in flight, from
    its start to its done): a pair of async events, which the trace viewers draw on a
    track of their own under the rank's."""
    global _async_id
    with _lock:
        _async_id += 1
        i = _async_id
        key = f"r{int(rank)}.{i}"         # unique across the ranks whose events are merged
        b = {"name": name, "cat": cat, "ph": "b", "id": key, "ts": round(start_us, 3), "pid": 0, "tid": int(rank)}
        if args:
            b["args"] = args
        _events.append(b)
        _events.append({"name": name, "cat": cat, "ph": "e", "id": key, "ts": round(end_us, 3), "pid": 0,
                        "tid": int(rank)})
    _ensure_atexit()


_async_id = 0


@contextmanager
def span(name, cat, rank, **args):
    """Record the enclosed work as one span on `rank`'s track (no-op unless SPMD_TRACE)."""
    if not enabled():
        yield
        return
    t = now_us()
    try:
        yield
    finally:
        add(name, cat, rank, t, now_us() - t, args or None)


def take_events() -> list:
    """This process's events so far (and forget them): what a rank ships to its gatherer."""
    with _lock:
        out = list(_events)
        _events.clear()
    return out


def has_events() -> bool:
    return bool(_events)


def add_events(events: list):
    """Add events gathered from other processes (already on their ranks' tracks)."""
    with _lock:
        _events.extend(events)


def merge_events(per_process: list) -> list:
    """Merge event lists from several processes, each already on its ranks' tracks."""
    out = [e for evs in per_process for e in evs]
    out.sort(key=lambda e: (e["tid"], e["ts"]))
    return out


def write(path=None, events=None):
    path = path or os.environ.get("SPMD_TRACE")
    if not path:
        return None
    events = take_events() if events is None else events
    t_min = min((e["ts"] for e in events), default=0.0)
    events = [dict(e, ts=round(e["ts"] - t_min, 3)) for e in events]
    ranks = sorted({e["tid"] for e in events})
    meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}}
            for r in ranks]
    meta.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "spmd"}})
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms"}, f)
    os.replace(tmp, path)
    return path


# A runtime that gathers events across processes (MPI, Ray) replaces this hook so that
# only one process writes the merged file.
exit_hook = None


def _at_exit():
    if exit_hook is not None:
        exit_hook()
    elif _events:
        write()


def _ensure_atexit():
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_at_exit)


def set_exit_hook(hook):
    """A runtime that gathers events across processes (MPI, Ray) sets the hook that runs
    at exit instead of this process writing its own events; with SPMD_TRACE set, the
    exit handler is registered now."""
    global exit_hook
    exit_hook = hook
    if enabled():
        _ensure_atexit()
