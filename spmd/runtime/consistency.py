"""Every process runs the same program on the same inputs, or a clear error.

Under MPI each process traces and compiles its program itself. Ranks whose Python code
diverged (a `set` iterated in another order under another hash seed, a rank calling
another jitted function, a ragged last batch) would otherwise pair their collectives
wrongly: mixed data, or MPICH's bare "Message truncated" abort. So before every run of
a program (and every read of an Array) the processes exchange a small header — what
they are about to do and a fingerprint of the program (a hash of its per-device text,
without source locations) — in one small allgather. Every process sees every header,
so all of them agree on whether to go on, and all raise the same SpmdError naming the
ranks that differ and, for programs, the first op that differs with its user line
(the traced programs are exchanged only then, to say where).

Inputs: on the first run of a program in this process, every argument given as a
host value (a numpy array or scalar, not an spmd.Array) is hashed and the hashes go
in the same header: processes that pass different values for what jit treats as one
global array (a replicated argument each rank loaded itself) fail naming the argument.
SPMD_CHECK_INPUTS=0 turns the hashing off. With one process (local, ray) there is
nothing to compare and none of this runs.

Cost: one allgather of a 64-byte block per run of a program (tens of microseconds on
a cluster; a few ms on a host with more ranks than cores, where every collective waits
for the scheduler). SPMD_CHECK_PROGRAMS=0 turns the per-run check off for programs
whose ranks are known to stay in step (then nothing catches a divergence).
"""
from __future__ import annotations

import hashlib
import os
import re

import numpy as np

from ..errors import SpmdError, on_every_rank

_LOC = re.compile(r' loc\(".*"\)$')


def check_programs_enabled() -> bool:
    return os.environ.get("SPMD_CHECK_PROGRAMS", "1").lower() not in ("0", "false", "no", "off")


def check_inputs_enabled() -> bool:
    return os.environ.get("SPMD_CHECK_INPUTS", "1").lower() not in ("0", "false", "no", "off")


def _strip_locs(text):
    return [_LOC.sub("", ln) for ln in text.splitlines()]


def _locs(text):
    out = []
    for ln in text.splitlines():
        m = _LOC.search(ln)
        out.append(m.group(0)[6:-2] if m else None)
    return out


def fingerprint(lowered) -> str:
    """A hash of the program every rank runs (text without source locations, and the
    mesh's device order), cached on the Lowered."""
    fp = getattr(lowered, "_spmd_fingerprint", None)
    if fp is None:
        h = hashlib.blake2b(digest_size=12)
        h.update("\n".join(_strip_locs(lowered.as_text("optimized"))).encode())
        if lowered.mesh is not None:
            h.update(repr(lowered.mesh.devices.reshape(-1).tolist()).encode())
        fp = lowered._spmd_fingerprint = h.hexdigest()
    return fp


def value_hash(x) -> str:
    a = np.ascontiguousarray(np.asarray(x))
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.view(np.uint8).reshape(-1).data if a.size else b"")
    return h.hexdigest()


def leaf_names(in_tree, prefix="args"):
    """A readable path for every leaf of a flattened argument tree: args[1]['w1']..."""
    names = []
    if in_tree is None:
        return names

    def go(td, path):
        if td.kind == "leaf":
            names.append(path)
        elif td.kind == "dict":
            for k, c in zip(td.meta, td.children):
                go(c, f"{path}[{k!r}]")
        elif td.kind in ("list", "tuple"):
            for i, c in enumerate(td.children):
                go(c, f"{path}[{i}]")

    go(in_tree, prefix)
    return names


def _groups(values):
    """{value: [ranks]} in first-seen order."""
    out = {}
    for r, v in enumerate(values):
        out.setdefault(v, []).append(r)
    return out


def _differ(values, show):
    g = _groups(values)
    return "; ".join(f"rank(s) {rs}: {show(v)}" for v, rs in g.items())


def _digest(obj) -> bytes:
    return hashlib.blake2b(repr(obj).encode(), digest_size=12).digest()


def agree(rt, what, header):
    """Every process's `header` (a small tuple of plain values) must be equal: one short
    exchange of its hash; on a difference every process raises an SpmdError naming
    the ranks and their headers."""
    got = rt.allgather_bytes(_digest(header), what)
    if any(h != got[0] for h in got):
        full = rt.allgather_object(header, what)
        raise on_every_rank(SpmdError(f"rank {rt.process_index()}: the ranks are not doing the same thing "
                                      f"({what}): {_differ(full, repr)}"))


def check_program(rt, lowered, leaves, placed):
    """Before a run under several processes: the same program everywhere, and the same
    host-value inputs on the first run of it (see the module docstring). `placed[k]`:
    leaf k is an spmd.Array (its shards live on the devices; nothing to hash). The per-call
    cost is one fixed-size allgather of 25 bytes; the details (names, shapes, the
    traced programs) are exchanged only to report a difference."""
    if rt.process_count() <= 1 or not check_programs_enabled():
        return
    name = lowered.stages["traced"].name
    hashes = None
    if not getattr(lowered, "_spmd_inputs_checked", False) and check_inputs_enabled():
        hashes = tuple(None if p else value_hash(x) for x, p in zip(leaves, placed))
        lowered._spmd_inputs_checked = True
    fp = bytes.fromhex(fingerprint(lowered))
    quick = fp + (b"\1" + _digest(hashes) if hashes is not None else b"\0" + bytes(12))
    got = rt.allgather_bytes(quick, "running a program")
    same_program = all(g[:12] == fp for g in got)
    checked = all(g[12:13] == b"\1" for g in got)
    if same_program and (not checked or all(g == got[0] for g in got)):
        return
    from ..errors import user_loc
    # leaves are Arrays, ndarrays or Python scalars (eager mode passes those as inputs)
    sig = tuple(f"{x.dtype}{list(x.shape)}" if p else f"{np.asarray(x).dtype}{list(np.shape(x))}"
                for x, p in zip(leaves, placed))
    got = rt.allgather_object((fingerprint(lowered), name, sig, hashes, user_loc()), "running a program")
    me = rt.process_index()
    if not same_program:
        texts = rt.allgather_object(lowered.as_text("traced"), "running a program")
        raise on_every_rank(SpmdError(_program_mismatch(me, [("run",) + g[:3] + (None, g[4]) for g in got],
                                                        texts)))
    names = leaf_names(lowered.in_tree)
    for k in range(len(leaves)):
        vals = [g[3][k] for g in got]
        if vals[0] is not None and any(v != vals[0] for v in vals):
            who = _groups(vals)
            raise on_every_rank(SpmdError(
                f"rank {me}: argument {names[k] if k < len(names) else f'leaf {k}'} of {name} "
                f"({sig[k]}) has different values on different ranks ("
                + "; ".join(f"ranks {rs} agree" for rs in who.values())
                + "): a numpy argument of a jitted function is one global value, which every process "
                  "must pass whole. Weights each rank made with its own random numbers? Seed every rank "
                  "alike (np.random.default_rng(0), the same seed everywhere). Data each process loaded a "
                  "part of? Join the parts with "
                  "spmd.make_array_from_process_local_data(sharding, part). (SPMD_CHECK_INPUTS=0 turns "
                  "this check off.)"))


def _program_mismatch(me, got, texts):
    groups = _groups([h[:4] for h in got])
    sides = list(groups.items())
    (_, r0), (_, r1) = sides[0], sides[1]
    msg = [f"rank {me}: the ranks run different programs (their Python code diverged, so their "
           f"collectives would not pair up):"]
    for h, rs in sides:
        where = next((g[5] for g in got if g[:4] == h and g[5]), None)
        msg.append(f"  rank(s) {rs}: {h[2]}({', '.join(h[3])})" + (f" called at {where}" if where else ""))
    a, b = texts[r0[0]], texts[r1[0]]
    la, lb = _strip_locs(a), _strip_locs(b)
    locs_a, locs_b = _locs(a), _locs(b)
    found = False
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else "<end of program>"
        y = lb[i] if i < len(lb) else "<end of program>"
        if x != y and (i > 0 or len(la) < 2 or len(lb) < 2):     # line 0 is the signature, shown above
            what = "op" if i > 0 else "line"
            msg.append(f"  first differing {what} ({what} {i} of the traced program):")
            for r, line, locs in ((r0[0], x, locs_a), (r1[0], y, locs_b)):
                at = locs[i] if i < len(locs) and locs[i] else None
                msg.append(f"    rank {r}: {line.strip()}" + (f"  at {at}" if at else ""))
            found = True
            break
    if not found and la != lb:
        msg.append("  (the traced programs differ only in their inputs)")
    elif not found:
        msg.append("  (the traced programs agree; the compiled ones differ)")
    return "\n".join(msg)
