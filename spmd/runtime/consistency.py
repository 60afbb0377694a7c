"""Every process runs the same program on the same inputs, or a clear error.

Under MPI each process traces and compiles its program itself. Ranks whose Python code
diverged (a `set` iterated in another order under another hash seed, a rank calling
another jitted function, a ragged last batch) would otherwise pair their collectives
wrongly: mixed data, or MPICH's bare "Message truncated" abort. So on the first run of
each program in a process (a new signature), the processes exchange a small header --
a fingerprint of the program (a hash of its per-device text, without source locations)
-- in one small allgather. Every process sees every header, so all of them agree on
whether to go on, and all raise the same SpmdError naming the ranks that differ and,
for programs, the first op that differs with its user line (the traced programs are
exchanged only then, to say where).

Runs after the first are not exchanged (a blocking exchange per call cost 0.3-3 ms on
a loaded host, more than the run of a small step): each process notes the programs it
ran since the processes last compared (`RunLog`: a few bytes per run, no
communication), and the next exchange among them -- a program's first run, a read of a
split Array -- compares those notes too. Ranks that ran different programs in between
(one rank ran a step once more) fail there, naming what each ran (a replicated Array is
read locally, with no exchange: a divergence shows at the next exchange). Between
exchanges, ranks running different programs whose collectives happen to pair up are
not caught; SPMD_CHECK_PROGRAMS=every exchanges before every run, as before, for that.

Inputs: on the first run of a program in this process, every argument given as a
host value (a numpy array or scalar, not an spmd.Array) is hashed and the hashes go
in the same header: processes that pass different values for what jit treats as one
global array (a replicated argument each rank loaded itself) fail naming the argument.
SPMD_CHECK_INPUTS=0 turns the hashing off. With one process (local, ray) there is
nothing to compare and none of this runs. SPMD_CHECK_PROGRAMS=0 turns the program
checks off (then nothing catches a divergence).
"""
from __future__ import annotations

import hashlib
import os
import re

import numpy as np

from ..errors import SpmdError, on_every_rank

_LOC = re.compile(r' loc\(".*"\)$')


def check_mode() -> str:
    """SPMD_CHECK_PROGRAMS: "off" (0, false, no, off), "every" (exchange before every run),
    else "first" (a program's first run; later runs noted)."""
    v = os.environ.get("SPMD_CHECK_PROGRAMS", "1").lower()
    return "off" if v in ("0", "false", "no", "off") else "every" if v == "every" else "first"


class RunLog:
    """The programs this process ran since the processes last compared notes: runs of
    one program in a row are one entry with a count; past LIMIT entries the oldest are
    folded into a hash (a loop of alternating programs between exchanges stays small)."""
    LIMIT = 32

    def __init__(self):
        self.clear()

    def clear(self):
        self.entries = []           # [fingerprint, name, runs]
        self.folded = b""
        self.dropped = 0            # runs folded into the hash (not named in errors)

    def note(self, fingerprint, name):
        e = self.entries
        if e and e[-1][0] == fingerprint:
            e[-1][2] += 1
            return
        e.append([fingerprint, name, 1])
        if len(e) > self.LIMIT:
            old = e[:len(e) // 2]
            del e[:len(e) // 2]
            self.folded = _digest((self.folded, [(f, n) for f, _, n in old]))
            self.dropped += sum(n for _, _, n in old)

    def digest(self) -> bytes:
        return _digest((self.folded, [(f, n) for f, _, n in self.entries])) if self.entries or self.folded \
            else bytes(12)

    def describe(self) -> str:
        runs = ", ".join(f"{name} x{n}" for _, name, n in self.entries) or "nothing"
        return runs + (f" (and {self.dropped} runs before)" if self.dropped else "")


RUNS = RunLog()


def note_run(program):
    """A run of `program` that was not exchanged: compared at the next exchange."""
    RUNS.note(program.fingerprint, program.name)


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
    """Every process's `header` (a small tuple of plain values), and the programs each
    ran since the last exchange (RUNS), must be equal: one short exchange of their
    hashes; on a difference every process raises an SpmdError naming the ranks, what
    each is doing and where, and what each ran since the processes last compared."""
    got = rt.allgather_bytes(_digest(header) + RUNS.digest(), what)
    if any(h != got[0] for h in got):
        from ..errors import user_loc
        full = rt.allgather_object((header, user_loc(), RUNS.describe()), what)
        raise on_every_rank(SpmdError(
            f"rank {rt.process_index()}: the ranks are not doing the same thing ({what}): "
            + "; ".join(f"rank(s) {rs}: {what} {h!r}" + (f" at {loc}" if loc else "")
                        + f", having run {runs} since the ranks last compared"
                        for (h, loc, runs), rs in _groups(full).items())))
    RUNS.clear()


def check_program(rt, program, leaves, placed, hash_inputs=True):
    """Before a run under several processes: the same program everywhere, the same runs
    since the last exchange, and (`hash_inputs`, on the first run of a program) the same
    host-value inputs (see the module docstring). `placed[k]`: leaf k is an spmd.Array
    (its shards live on the devices; nothing to hash). The cost is one fixed-size
    allgather of 37 bytes; the details (names, shapes, the traced programs) are exchanged
    only to report a difference."""
    name = program.name
    hashes = None
    if hash_inputs and check_inputs_enabled():
        hashes = tuple(None if p else value_hash(x) for x, p in zip(leaves, placed))
    fp = bytes.fromhex(program.fingerprint)
    ran = RUNS.digest()
    quick = fp + ran + (b"\1" + _digest(hashes) if hashes is not None else b"\0" + bytes(12))
    got = rt.allgather_bytes(quick, "running a program")
    same_program = all(g[:24] == fp + ran for g in got)
    checked = all(g[24:25] == b"\1" for g in got)
    if same_program and (not checked or all(g == got[0] for g in got)):
        RUNS.clear()
        return
    from ..errors import user_loc
    # leaves are Arrays, ndarrays or Python scalars (eager mode passes those as inputs)
    sig = tuple(f"{x.dtype}{list(x.shape)}" if p else f"{np.asarray(x).dtype}{list(np.shape(x))}"
                for x, p in zip(leaves, placed))
    got = rt.allgather_object((program.fingerprint, name, sig, hashes, user_loc(), RUNS.describe()),
                              "running a program")
    me = rt.process_index()
    if any(g[0] != got[0][0] for g in got):
        texts = rt.allgather_object(program.traced_text, "running a program")
        raise on_every_rank(SpmdError(_program_mismatch(me, [("run",) + g[:3] + (None, g[4]) for g in got],
                                                        texts)))
    if not same_program:
        raise on_every_rank(SpmdError(
            f"rank {me}: the ranks ran different programs before this run of {name} (their Python code "
            f"diverged): " + "; ".join(f"rank(s) {rs}: {runs}" for runs, rs in _groups([g[5] for g in got]).items())))
    names = program.leaf_names
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
    RUNS.clear()


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
