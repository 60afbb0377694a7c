"""Collectives as native instructions between the threads of one process (the local
runtime), so that a stencil's halo exchanges join the native segments and loops around
them (schedule.py, loops.py) instead of stopping them for a Python rendezvous.

The group's ranks share a *board* (the communicator's `native_board`): one row of 8
int64 per member, zero at the start of a run. Row i: [0] the count of permutes at which
member i last published a send buffer, [1] its address, [2] the count at which its
reader last finished reading it, [3] member i's own count of the group's native
permutes. Every member counts every permute of the group, so the k-th permute is k for
all of them. A collective_permute:

1. the sender publishes: address, then the count (release);
2. the receiver waits until its source's count reaches k (acquire), copies the source's
   buffer into its own result, and marks it read (release); a member with no source
   writes zeros (as the op's reference does);
3. the sender waits until its buffer was read: only then may the program change it.

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

BOARD_ROW = 8              # int64 per member

# argument block of a permute: board me src dst send recv nbytes failed fin_src fin_dst
# timeout_ns status op_id sched_yield clock_gettime
PERMUTE_FIELDS = 15

EXCHANGE_IR = """
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define i64 @spmd_now(ptr %clock) {
entry:
  %ts = alloca [2 x i64]
  call i32 %clock(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %pn = getelementptr i64, ptr %ts, i64 1
  %n = load i64, ptr %pn
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}

; wait until *cell >= want; 0, or why not: 1 a rank failed, 2 the peer finished, 3 timeout,
; 4 this rank stopped already
define i64 @spmd_wait(ptr %cell, i64 %want, ptr %failed, ptr %fin, i64 %timeout, ptr %status,
                      ptr %yield, ptr %clock) {
entry:
  br label %spin
spin:
  %k = phi i64 [0, %entry], [%k1, %spin.next]
  %v = load atomic i64, ptr %cell acquire, align 8
  %ok = icmp sge i64 %v, %want
  br i1 %ok, label %done, label %spin.next
spin.next:
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, 256
  br i1 %more, label %spin, label %start
start:
  %t0 = call i64 @spmd_now(ptr %clock)
  %deadline = add i64 %t0, %timeout
  br label %slow
slow:
  %w = load atomic i64, ptr %cell acquire, align 8
  %ok2 = icmp sge i64 %w, %want
  br i1 %ok2, label %done, label %check
check:
  %st = load atomic i64, ptr %status monotonic, align 8
  %stopped = icmp ne i64 %st, 0
  br i1 %stopped, label %r4, label %c1
c1:
  %f = load atomic i64, ptr %failed acquire, align 8
  %isf = icmp ne i64 %f, 0
  br i1 %isf, label %r1, label %c2
c2:
  %g = load atomic i64, ptr %fin acquire, align 8
  %isg = icmp ne i64 %g, 0
  br i1 %isg, label %c2b, label %c3
c2b:
  ; (it may have done its part just before it finished)
  %w2 = load atomic i64, ptr %cell acquire, align 8
  %ok3 = icmp sge i64 %w2, %want
  br i1 %ok3, label %done, label %r2
c3:
  %now = call i64 @spmd_now(ptr %clock)
  %late = icmp sgt i64 %now, %deadline
  br i1 %late, label %r3, label %y
y:
  call i32 %yield()
  br label %slow
done:
  ret i64 0
r1:
  ret i64 1
r2:
  ret i64 2
r3:
  ret i64 3
r4:
  ret i64 4
}

define void @spmd_permute(ptr %a) {
entry:
{loads}
  %seqp = getelementptr i64, ptr %p0, i64 {seq_at}
  %row = mul i64 %f1, {row}
  %myseqp = getelementptr i64, ptr %seqp, i64 %row
  %s0 = load i64, ptr %myseqp
  %s = add i64 %s0, 1
  store i64 %s, ptr %myseqp
  %mypub = getelementptr i64, ptr %p0, i64 %row
  %hasdst = icmp sge i64 %f3, 0
  br i1 %hasdst, label %pub, label %recv
pub:
  %myaddr = getelementptr i64, ptr %mypub, i64 1
  store ptr %p4, ptr %myaddr
  store atomic i64 %s, ptr %mypub release, align 8
  br label %recv
recv:
  %hassrc = icmp sge i64 %f2, 0
  br i1 %hassrc, label %get, label %zero
zero:
  call void @llvm.memset.p0.i64(ptr %p5, i8 0, i64 %f6, i1 false)
  br label %back
get:
  %srow = mul i64 %f2, {row}
  %spub = getelementptr i64, ptr %p0, i64 %srow
  %c = call i64 @spmd_wait(ptr %spub, i64 %s, ptr %p7, ptr %p8, i64 %f10, ptr %p11, ptr %p13, ptr %p14)
  %bad = icmp ne i64 %c, 0
  br i1 %bad, label %fail.src, label %copy
copy:
  %saddrp = getelementptr i64, ptr %spub, i64 1
  %saddr = load ptr, ptr %saddrp
  call void @llvm.memcpy.p0.p0.i64(ptr %p5, ptr %saddr, i64 %f6, i1 false)
  %sdone = getelementptr i64, ptr %spub, i64 2
  store atomic i64 %s, ptr %sdone release, align 8
  br label %back
back:
  br i1 %hasdst, label %waitread, label %x
waitread:
  %mydone = getelementptr i64, ptr %mypub, i64 2
  %c2 = call i64 @spmd_wait(ptr %mydone, i64 %s, ptr %p7, ptr %p9, i64 %f10, ptr %p11, ptr %p13, ptr %p14)
  %bad2 = icmp ne i64 %c2, 0
  br i1 %bad2, label %fail.dst, label %x
fail.src:
  call void @spmd_fail(ptr %p11, i64 %c, i64 %f2, i64 %f12)
  br label %x
fail.dst:
  call void @spmd_fail(ptr %p11, i64 %c2, i64 %f3, i64 %f12)
  br label %x
x:
  ret void
}

; the first reason a rank stopped, with the peer it waited for and the op
define void @spmd_fail(ptr %status, i64 %code, i64 %peer, i64 %op) {
entry:
  %st = load i64, ptr %status
  %first = icmp eq i64 %st, 0
  %real = icmp ne i64 %code, 4
  %rec = and i1 %first, %real
  br i1 %rec, label %w, label %x
w:
  %pp = getelementptr i64, ptr %status, i64 1
  store i64 %peer, ptr %pp
  %po = getelementptr i64, ptr %status, i64 2
  store i64 %op, ptr %po
  store atomic i64 %code, ptr %status release, align 8
  br label %x
x:
  ret void
}

define void @spmd_store8(ptr %a) {
entry:
  %dst = load ptr, ptr %a
  %g1 = getelementptr i64, ptr %a, i64 1
  %v = load i64, ptr %g1
  store i64 %v, ptr %dst
  ret void
}
"""

PTR_FIELDS = (0, 4, 5, 7, 8, 9, 11, 13, 14)


def exchange_ir() -> str:
    loads = []
    for j in range(PERMUTE_FIELDS):
        kind = "ptr" if j in PTR_FIELDS else "i64"
        name = f"%p{j}" if j in PTR_FIELDS else f"%f{j}"
        loads += [f"  %g{j} = getelementptr i64, ptr %a, i64 {j}", f"  {name} = load {kind}, ptr %g{j}"]
    return EXCHANGE_IR.replace("{loads}", "\n".join(loads)).replace("{row}", str(BOARD_ROW)) \
        .replace("{seq_at}", "3")


EXCHANGE_NAMES = ["spmd_permute", "spmd_store8"]


class FromComm:
    """An argument entry known once the rank's communicator is: fn(comm) -> int."""

    def __init__(self, fn):
        self.fn = fn


_noted = []
_noted_lock = threading.Lock()


def note_op(op) -> int:
    """The id a native collective's instruction reports when it stops: the failure names
    the op, its axes and the user's line (ids are the process's: a loop's body is laid
    out inside its caller's block)."""
    loc = getattr(op, "loc", None)
    what = f"{op.name} over {tuple(op.attrs['axes'])}" + (f" at {loc}" if loc else "")
    with _noted_lock:
        _noted.append((what, tuple(op.attrs["axes"])))
        return len(_noted) - 1


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
    (MPI, Ray: the communicator moves the data from Python)."""
    if not sched.native_comm:
        return None
    x = op.operands[0]
    base, view, dbase = sched.dummy(x)
    if not view.flags.c_contiguous:
        return None
    off = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    axes, pairs = op.attrs["axes"], op.attrs["pairs"]
    src_of = {d: s for s, d in pairs}
    dst_of = {s: d for s, d in pairs}
    opid = note_op(op)
    yld, clock = libc_addrs()

    def board(c):
        return c.native_board(axes)

    entries = [FromComm(lambda c: board(c)["board"]), FromComm(lambda c: board(c)["index"]),
               FromComm(lambda c: src_of.get(board(c)["index"], -1)),
               FromComm(lambda c: dst_of.get(board(c)["index"], -1)),
               (base, off), (op.result, 0), x.size * view.itemsize,
               FromComm(lambda c: board(c)["failed"]),
               FromComm(lambda c: board(c)["finished"](src_of.get(board(c)["index"]))),
               FromComm(lambda c: board(c)["finished"](dst_of.get(board(c)["index"]))),
               FromComm(lambda c: board(c)["timeout_ns"]), FromComm(lambda c: board(c)["status"]),
               opid, yld, clock]
    return [(sched.helpers["spmd_permute"], entries)]


def device_value_instrs(sched, op):
    """A value that differs per device only by its place in the mesh (axis_index): the
    rank's value, written once per run into the argument block and stored natively."""
    attrs = op.attrs
    ref = op.opdef.ref
    return [(sched.helpers["spmd_store8"], [(op.result, 0), FromComm(lambda c: int(ref(comm=c, **attrs)))])]
