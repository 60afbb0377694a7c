"""What a communicator offers collectives that run as native instructions (the LLVM
backend's backends/llvm/exchange.py): the interface between the code that emits them and
the transport whose ranks they run between.

A communicator advertises it as `native_exchange`: an object of this interface, or None
when its collectives move from Python (MPI; Ray across hosts). The local transport's
ranks are threads of one process, which share memory, so its communicator gives one
(transports/local/local_native_exchange.py); Ray's ranks on one host are processes that
map shared regions, which serve the all-reduces (transports/ray/ray_native_exchange.py).

The memory a rank's native code reads and writes, all int64:

- the *board* of a group (`board(axes)["board"]`): one row of 8 cells per member, zero at
  the start of a run; exchange.py says what each cell holds;
- the world's *failed* cell, set when a rank of the run failed, and a *finished* cell
  per rank, set when its program returned (`board(axes)["finished"](j)` for group member
  j; a cell that stays zero for None);
- this rank's *status* cells [why, group index of the peer, op id], which the native code
  sets when it stops: why 1 a rank failed, 2 the peer finished, 3 the timeout;
- a *shared* region of a group per owner and key (`shared(axes, owner, key, nbytes)`):
  zeroed memory every member gets the same of, made once and kept as long as the group
  and the owner (a native schedule: an all-reduce's post counts and mailboxes,
  exchange_reduce.py).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..errors import CollectiveError


class NativeExchange(ABC):
    # int64[3]: why this rank's native collective stopped (zero while none did)
    status = None
    # "process": the ranks are threads of one process, and a rank's native code may read
    # what a peer names by its address (a permute's mailbox); "host": processes of one
    # host, sharing only the regions `shared` gives (all-reduces; permutes run from Python)
    scope = "process"

    @abstractmethod
    def board(self, axes) -> dict:
        """The addresses native collectives over `axes` use: {"board", "index" (this
        rank's in the group), "failed", "finished" (member index or None -> address),
        "fins" (the address of G int64: every member's finished cell's address),
        "timeout_ns", "status", "keep" (what must stay alive)}; the same dict each call."""

    @abstractmethod
    def shared(self, axes, owner, key, nbytes) -> int:
        """The address of `nbytes` of memory the members of this rank's group over `axes`
        share under (`owner`, `key`): zeroed when the first of them asks, the same for
        all, kept as long as the group and `owner` (an object all of them hold, weakly
        referenced: a dropped program's memory goes with it)."""

    @abstractmethod
    def failure(self, what, axes):
        """Raise the CollectiveError for why the native collective `what` over `axes`
        stopped (the status cells), and clear the status."""

    def take_status(self, devices):
        """(why, the peer's rank) of this rank's stopped native collective, whose group is
        `devices`; the status is cleared."""
        why, peer, _ = (int(v) for v in self.status)
        self.status[:] = 0
        return why, devices[peer] if 0 <= peer < len(devices) else peer

    @property
    def host(self):
        """None, or run(key, program address, instructions, run_multi, small) when several
        ranks' native segments run on one thread in lockstep (more ranks than cores)."""
        return None


def timeout_ns(seconds) -> int:
    """A communicator's stopwatch as the native waits read it: nanoseconds, at most 1e9 s
    (none set is infinite)."""
    return int(min(seconds, 1e9) * 1e9)


def timed_out(where, seconds, rank, devices) -> CollectiveError:
    """The error of a native wait (`where`: the collective and this rank) that reached the
    stopwatch (why 3) waiting for `rank` of the group `devices`."""
    return CollectiveError(f"{where}: timed out after {seconds:g} s waiting for rank(s) [{rank}] of group "
                           f"{list(devices)} (SPMD_COLLECTIVE_TIMEOUT)")
