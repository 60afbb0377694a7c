"""Collectives as native instructions between the threads of one process (the local
runtime), so that a stencil's halo exchanges join the native segments and loops around
them (schedule.py, loops.py) instead of stopping them for a Python rendezvous.

The group's ranks share a *board* (the communicator's `native_exchange.board`, whose
interface is backends/native_exchange.py): one row of 8 int64 per member, zero at the start of a run. Every member counts every permute of the
group (row slot 6), so the k-th permute is k for all of them; messages alternate
between two slots by k's parity. Row i, slot p: [p] the count of member i's last
message in it, [2 + p] its address, [4 + p] the count its reader last finished reading.
A collective_permute k:

1. the sender waits until its last message in slot p was read, copies its operand (a
   strided view too: a column's halo) into its mailbox p (scratch of its own, per
   instruction) and publishes the address, then
   the count (release); it does not wait for this message's reader, so a rank waits
   only for data it needs;
2. the receiver waits until its source's slot p holds count k (acquire), copies the
   message into its result, and marks it read (release); a member with no source
   writes zeros (as the op's reference does).

A wait spins a little, then yields the core (sched_yield: the ranks may be more than
the cores). It stops, and the instruction records why in the rank's status cells, when
a rank of the run failed (the world's failed cell), the rank it waits for finished its
program, or the communicator's timeout passed (clock_gettime). The segment's later
waits then stop at once; the schedule raises the communicator's CollectiveError.

Entries resolved per run from the communicator are `FromComm(fn)`: fn(comm) -> int.
"""
from __future__ import annotations

import ctypes
import threading

from . import native
from .steps import Here, Scratch

class FromComm:
    """An argument entry known once the rank's communicator is: fn(comm) -> int.
    `touches`: a key of the memory the entry points at that other instructions' entries
    name too (a group's shared region), which the instruction is taken to write
    (reorder.py keeps the order of the instructions naming it)."""

    def __init__(self, fn, touches=None):
        self.fn = fn
        self.touches = touches


_noted = []                # id -> (what, axes)
_noted_ids = {}            # (what, axes) -> id: one id per description, however often ops are lowered
_noted_lock = threading.Lock()


def note_op(op) -> int:
    """The id a native collective's instruction reports when it stops: the failure names
    the op, its axes and the user's line (ids are the process's: a loop's body is laid
    out inside its caller's block). Ops of the same description share one: a process that
    lowers many programs (spmd.AUTO's search plans hundreds) keeps a table of what its
    programs hold, not of every lowering."""
    loc = op.loc
    what = f"{op.name} over {tuple(op.attrs['axes'])}" + (f" at {loc}" if loc else "")
    key = (what, tuple(op.attrs["axes"]))
    with _noted_lock:
        k = _noted_ids.get(key)
        if k is None:
            k = _noted_ids[key] = len(_noted)
            _noted.append(key)
        return k


def noted_op(k):
    """(what, axes) of the op of id k"""
    return _noted[k]


_libc = []


def libc_addrs():
    """(sched_yield, clock_gettime) addresses"""
    if not _libc:
        lib = ctypes.CDLL(None)
        _libc.append((ctypes.cast(lib.sched_yield, ctypes.c_void_p).value,
                      ctypes.cast(lib.clock_gettime, ctypes.c_void_p).value))
    return _libc[0]


def permute_instrs(sched, op):
    """collective_permute between the local runtime's threads, natively; None elsewhere
    (MPI, Ray: the communicator moves the data from Python; a receiver reads the sender's
    mailbox at its address, which only threads of one process share). One argument
    block, run as two instructions: the post, and the receive that reads the same block
    (schedule.py places each)."""
    if sched.native_comm != "process":
        return None
    x = op.operands[0]
    base, view, dbase = sched.dummy(x)
    isz = view.itemsize
    strided = not view.flags.c_contiguous
    if strided and (isz not in (1, 4, 8) or native.copy_entries(view, isz) is None):
        return None
    off = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    axes, pairs = op.attrs["axes"], op.attrs["pairs"]
    src_of = {d: s for s, d in pairs}
    dst_of = {s: d for s, d in pairs}
    opid = note_op(op)
    nbytes = x.size * view.itemsize
    yld, clock = libc_addrs()

    def board(c):
        return c.native_exchange.board(axes)

    entries = [FromComm(lambda c: board(c)["board"]), FromComm(lambda c: board(c)["index"]),
               FromComm(lambda c: src_of.get(board(c)["index"], -1)),
               FromComm(lambda c: dst_of.get(board(c)["index"], -1)),
               (base, off), (op.result, 0), nbytes,
               FromComm(lambda c: board(c)["failed"]),
               FromComm(lambda c: board(c)["finished"](src_of.get(board(c)["index"]))),
               FromComm(lambda c: board(c)["finished"](dst_of.get(board(c)["index"]))),
               FromComm(lambda c: board(c)["timeout_ns"]), FromComm(lambda c: board(c)["status"]),
               opid, yld, clock]
    boxes = [(Scratch(nbytes, ("mailbox", opid, k)), 0) for k in (0, 1)]
    entries += boxes
    if not strided:
        return [(sched.helpers["spmd_permute_post"], entries + [0, 0, 0, 0])]
    # the sender gathers a strided operand into its mailbox (one copy block per mailbox)
    ext = native.copy_entries(view, isz)
    at = len(entries) + 4
    entries += [sched.helpers[f"spmd_copy{isz}"], Here(at), Here(at + 2 + len(ext)), 0]
    for box in boxes:
        entries += [box, (base, off)] + ext
    return [(sched.helpers["spmd_permute_post"], entries)]


def device_value_instrs(sched, op):
    """A value that differs per device only by its place in the mesh (axis_index): the
    rank's value, written once per run into the argument block and stored natively."""
    attrs = op.attrs
    ref = op.opdef.ref
    return [(sched.helpers["spmd_store8"], [(op.result, 0), FromComm(lambda c: int(ref(comm=c, **attrs)))])]
