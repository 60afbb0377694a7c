"""All-reduces, all-gathers, reduce-scatters and all-to-alls between the local runtime's
threads, and between Ray's rank processes of one host, as native instructions (the
communicator advertises a `native_exchange`, backends/native_exchange.py), so that a
training step's collectives (data parallelism's all-reduces, FSDP's gathers of the
weights and reduce-scatters of their gradients, the all-to-alls that move a split from
one dim to another) join its native segments instead of stopping them
for a rendezvous from Python: with the ranks more than the cores, every stop is a
hand-off between threads that share the GIL, and on Ray the stop's Python costs each rank
more than a small step's reduction itself. Everything the members share is in the region
(a process's mailbox is no use to another process).

Each is two instructions, its *post* and its *reduce* (or *gather*) (an all_reduce_start
is the post alone, its all_reduce_done the reduce): two, so that ranks run in lockstep on
one thread (transports/local/local_communicator.py's hosts) have all posted before any
reads. The group's members share a region of memory per group (its axes) of a schedule
(`native_exchange.shared`, freed with the schedule; a started all-reduce has one of its
own), one slot per member: a post count, a read count and a mailbox as large as the
largest operand of the group's collectives (exchange_ir.py's REDUCE_IR). The c-th post
into the region on a member (its collectives' runs, in the program's order, the same on
every member):

1. post: wait until every other member has finished reading post c - 1 (its read count),
   copy the operand into this member's mailbox (a strided view through native.py's copy
   loops), publish post count c (release); a started all-reduce writes c into its handle;
2. reduce: wait until every member's post count is c (acquire), fold the G mailboxes in
   group order into the result (out = x0 op x1, then out op x2, ...: what
   communicator.reduce_arrays computes, so every backend gives the same bits), and
   publish read count c. A reduce-scatter's folds only this member's block of each
   mailbox; gather: copy every mailbox into its block of the result, in group order. An
   all-to-all is a gather of only this member's block of each message: its post lays
   the operand out so that each block along the split dim is rows the reader can take
   (block after block, the strided copy; no copy where the operand's blocks already are:
   all_to_all_instrs), and the gather reads block `index` of each.

Between threads (scope "process") an all-gather's, reduce-scatter's or all-to-all's
contiguous operand is not copied: the post leaves its address in the slot, the readers
read it there, and a third instruction, the drain, waits until every member has read it
(the operand may be written again after it): no mailbox holds a whole gradient, and a
copy is saved. An all-to-all's operand of any layout is read there: where its blocks
are not rows (or it is a strided view), each member's block by a strided copy into its
place in the result (no mailbox holds the operand, and it is copied once).

Along a dimension d the blocks are contiguous runs of the rows the dims before d make
(one row where they are all 1): the reduce and the gather go row by row, so every
dimension runs natively. The operand is copied, so the result may be written over it
and the rank goes on at once; counts only grow (the region lives as long as the group),
so nothing is reset between runs. Waits stop as a permute's do (exchange.py): a failed
rank, a finished peer, the timeout. A gather copies bytes, of any dtype; only what the
fold loops cover reduces natively (exchange_ir.REDUCE_KINDS: sums and products of
float32/64 and int32/64, integer max and min). The rest (and a strided operand of
elements the copy loops do not move: 2 or 16 bytes; an all-to-all's too where its blocks
need laying out, or take more dims than the copy loops have: native.COPY_DIMS), every
collective of MPI, and Ray's across hosts run through the communicator.
"""
from __future__ import annotations

import numpy as np

from . import native
from .exchange import FromComm, libc_addrs, note_op
from .exchange_ir import REDUCE_KINDS, SLOT_HEAD
from .steps import Here


def native_kind(sched, op, x):
    """The fold loops' suffix for op's reduction of x, or None (it runs from Python)."""
    if not sched.native_comm:
        return None
    k = REDUCE_KINDS.get((op.attrs["reduction"], str(x.dtype)))
    return None if k is None else k[0]


def all_reduce_instrs(sched, op):
    x = op.operands[0]
    region = _region(sched, op, x, native_kind(sched, op, x))
    if region is None:
        return None
    opid = note_op(op)
    return [_post(sched, op, x, region, 0, opid), _reduce(sched, op, x, region, opid, _whole(x))]


def all_reduce_start_instrs(sched, op):
    """The post, into a region of its own (other collectives of the group run before
    its done); its handle holds the count, and the done finds the region by it."""
    x = op.operands[0]
    region = _region(sched, op, x, native_kind(sched, op, x), alone=True)
    if region is None:
        return None
    sched.native_starts[op.result] = region
    return [_post(sched, op, x, region, (op.result, 0), note_op(op))]


def all_reduce_done_instrs(sched, op):
    """The reduce, where its start posted natively (the same schedule built it: both are
    steps of one graph); else both run from Python."""
    h, x = op.operands
    region = sched.native_starts.get(h)
    if region is None:
        return None
    return [_reduce(sched, op, x, region, note_op(op), _whole(x))]


def reduce_scatter_instrs(sched, op):
    """The post of the whole operand, then the fold of this member's block of every
    mailbox: row by row, one row for each index of the dims before the scattered one."""
    x = op.operands[0]
    region = _region(sched, op, x, native_kind(sched, op, x), direct=True)
    if region is None:
        return None
    rows, row_n = _rows(x.shape, op.attrs["dimension"])
    n = row_n // op.attrs["group_size"]
    isz = np.dtype(x.dtype).itemsize
    opid = note_op(op)
    return [_post(sched, op, x, region, 0, opid),
            _reduce(sched, op, x, region, opid, (rows, n * isz, n, row_n * isz, n * isz))] + _drain(sched, op, x, region, opid)


def all_gather_instrs(sched, op):
    """The post, then the copy of every member's mailbox into its block of the result:
    row by row, one row for each index of the dims before the gathered one."""
    x = op.operands[0]
    region = _region(sched, op, x, "bytes", direct=True) if sched.native_comm else None
    if region is None:
        return None
    rows, row_n = _rows(x.shape, op.attrs["dimension"])
    isz = np.dtype(x.dtype).itemsize
    return _gather(sched, op, x, region, (rows, row_n * isz, row_n, row_n * isz, 0))


def all_to_all_instrs(sched, op):
    """The post of the operand, laid out so that the G blocks along the split dimension
    are each rows a reader takes (_message), then the all-gather's copy of every member's
    message into its block of the result along the concatenated dimension, of each
    message only the block this member is sent (at index * block_at). Between threads,
    an operand that is not such rows where it lies is read there by strided copies
    (_read_strided): no mailbox holds it."""
    if not sched.native_comm:
        return None
    x = op.operands[0]
    view = sched.dummy(x)[1]
    post, rows = _message(op, x, view)
    if sched.native_comm == "process" and not (post is view and view.flags.c_contiguous):
        return _read_strided(sched, op, x, view)
    region = _region(sched, op, x, "bytes", direct=True, post=post)
    if region is None:
        return None
    return _gather(sched, op, x, region, rows, post)


def _read_strided(sched, op, x, view):
    """Each member's block of the operand (any layout) copied where it lies into its
    place in the result, element by element (native.py spmd_scopy*; a dtype the copy
    loops do not move as its bytes): the gather's copy block, whose source and
    destination it sets per member (at index * block_at of the member's operand, at m *
    row_bytes of the result). None where the copy takes more dims than the loops have."""
    G, sd, cd, block = _a2a_block(op, x)
    isz = view.itemsize
    out = list(block)
    out[cd] *= G
    dst = [isz * _size(out[k + 1:]) for k in range(len(out))]
    dims = [(e, s, d) for e, s, d in zip(block, view.strides, dst) if e != 1]
    if isz not in (1, 4, 8):
        dims, isz = dims + [(isz, 1, 1)], 1
    if len(dims) > native.COPY_DIMS:
        return None
    pad = [(1, 0, 0)] * (native.COPY_DIMS - len(dims))
    ext, src_st, dst_st = (list(t) for t in zip(*(pad + dims)))
    region = _region(sched, op, x, "bytes", direct=True, anywhere=True)
    opid = note_op(op)
    entries = _block(sched, op, x, (op.result, 0), region, 0, opid,
                     (0, block[cd] * dst[cd], 0, 0, block[sd] * view.strides[sd]))
    at = len(entries) + 3
    gather = (sched.helpers["spmd_allgather_gather"],
              entries + [sched.helpers[f"spmd_scopy{isz}"], Here(at), region[3], 0, 0] + ext + src_st + dst_st)
    return [_post(sched, op, x, region, 0, opid), gather] + _drain(sched, op, x, region, opid)


def _message(op, x, view):
    """(the view of the operand its post copies, (rows, row_bytes, row_n, row_stride,
    block_at)) of an all_to_all: the reader of index i takes the rows of its block i (the
    split dim's i-th G-th) cut before the concatenated dim, row r at i * block_at + r *
    row_stride of each message. The operand as it is, row-major, where its blocks are
    such rows: the dims before the split dim all 1 (block i is a run of bytes), or the
    concatenated dim the split dim with ones between (block i is the i-th G-th of each
    row); else the operand laid out block after block (a strided view of it, the blocks'
    axis first, which the post copies)."""
    G, sd, cd, block = _a2a_block(op, x)
    shape = tuple(int(n) for n in x.shape)
    rows, row_n = _rows(block, cd)
    row_bytes = row_n * view.itemsize
    if _size(shape[:sd]) == 1:
        return view, (rows, row_bytes, row_n, row_bytes, rows * row_bytes)
    if cd <= sd and _size(shape[cd:sd]) == 1:
        return view, (rows, row_bytes, row_n, G * row_bytes, row_bytes)
    n, st = block[sd], view.strides
    split = np.lib.stride_tricks.as_strided(view, shape[:sd] + (G, n) + shape[sd + 1:],
                                            st[:sd] + (st[sd] * n, st[sd]) + st[sd + 1:])
    return np.moveaxis(split, sd, 0), (rows, row_bytes, row_n, row_bytes, rows * row_bytes)


def _a2a_block(op, x):
    """(G, split dim, concat dim, the shape of one member's block) of an all_to_all"""
    G, sd, cd = op.attrs["group_size"], op.attrs["split_dimension"], op.attrs["concat_dimension"]
    block = [int(n) for n in x.shape]
    block[sd] //= G
    return G, sd, cd, block


def _gather(sched, op, x, region, rows, post=None):
    """The post, the gather of `rows` (_block), the drain after a direct read"""
    opid = note_op(op)
    gather = (sched.helpers["spmd_allgather_gather"],
              _block(sched, op, x, (op.result, 0), region, 0, opid, rows) + [0, 0, region[3]])
    return [_post(sched, op, x, region, 0, opid, post), gather] + _drain(sched, op, x, region, opid)


def _whole(x):
    """An all-reduce's result as one row: (rows, row bytes, row elements, row stride, block_at)"""
    return (1, int(x.size) * np.dtype(x.dtype).itemsize, int(x.size), 0, 0)


def _rows(shape, dim):
    """(rows, elements of a row) of an array of `shape` cut before dim"""
    return _size(shape[:dim]), _size(shape[dim:])


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def _region(sched, op, x, kind, alone=False, direct=False, post=None, anywhere=False):
    """(key, G, kind, direct) of op's shared region, or None where it runs from Python (a
    strided operand its post cannot copy: _strided). The collectives of a group (its axes,
    in their order) share one region, whose slots fit the largest of them: a member posts
    the next only once every other has read its last, as a run of one op waits for the
    run before; a started all-reduce has one of its own (`alone`). `direct` (an
    all-gather's, reduce-scatter's or all-to-all's contiguous operand, between threads):
    the readers read the operand where it lies (no mailbox: a reduce-scatter's would hold
    the whole gradient), and a drain waits for them; `anywhere`: whatever its layout (an
    all-to-all's strided reads). `post`: the view of the operand the post copies (an
    all-to-all's blocks, _message), if not the operand's own."""
    if kind is None:
        return None
    view = sched.dummy(x)[1] if post is None else post
    if anywhere:
        direct = int(direct and sched.native_comm == "process")
    elif not view.flags.c_contiguous and _strided(view) is None:
        return None
    else:
        direct = int(direct and sched.native_comm == "process" and view.flags.c_contiguous)
    nbytes = 0 if direct else int(x.size) * np.dtype(x.dtype).itemsize
    G = op.attrs["group_size"]
    # (a started all-reduce's: numbered in the schedule, its starts so far; not by its
    # description, which ops of one line share)
    key = ("start", len(sched.native_starts)) if alone else ("group", tuple(op.attrs["axes"]))
    slot = max(SLOT_HEAD + -(-nbytes // 64) * 64, sched.slot_bytes.get(key, 0))
    sched.slot_bytes[key] = slot
    sched.mailboxes[key] = slot + 64 // G     # (and the region's alignment)
    return (key, G, kind, direct)


def _strided(view):
    """[extents..., strides...] of the copy of a strided operand into the mailbox
    (native.py spmd_copy*), or None where no copy loop fits it."""
    isz = view.itemsize
    return native.copy_entries(view, isz) if isz in (1, 4, 8) else None


def _post(sched, op, x, region, handle, opid, post=None):
    """The post's block; an operand that is a strided view (a transpose the native code
    reads where it lies; `post`, a view of it that starts where it does: an all-to-all's
    blocks) is gathered into the mailbox by a copy whose block follows."""
    base, view, dbase = sched.dummy(x)
    off = view.__array_interface__["data"][0] - dbase.__array_interface__["data"][0]
    entries = _block(sched, op, x, (base, off), region, handle, opid, _whole(x))
    view = view if post is None else post
    if view.flags.c_contiguous or region[3]:       # (direct: the post leaves the address alone)
        return (sched.helpers["spmd_allreduce_post"], entries + [0, 0, region[3]])
    key, G, kind, _ = region
    axes = op.attrs["axes"]

    def mailbox(c):
        stride = sched.slot_bytes[key]
        return _shared(c, sched, axes, region) + c.native_exchange.board(axes)["index"] * stride + SLOT_HEAD
    at = len(entries) + 3
    copy = [FromComm(mailbox, touches=("region", key)), (base, off)] + _strided(view)
    return (sched.helpers["spmd_allreduce_post"],
            entries + [sched.helpers[f"spmd_copy{view.itemsize}"], Here(at), 0] + copy)


def _reduce(sched, op, x, region, opid, rows):
    return (sched.helpers["spmd_allreduce_reduce"],
            _block(sched, op, x, (op.result, 0), region, 0, opid, rows) + [0, 0, region[3]])


def _drain(sched, op, x, region, opid):
    """[the drain after a direct read], or [] (the operand was copied)"""
    if not region[3]:
        return []
    return [(sched.helpers["spmd_collective_drain"], _block(sched, op, x, (op.result, 0), region, 0, opid,
                                                           (0, 0, 0, 0, 0)) + [0, 0, 1])]


def _shared(c, sched, axes, region):
    """The region's address on the rank of communicator c (its slots' size known once the
    schedule is built)"""
    key, G, kind, _ = region
    return c.native_exchange.shared(axes, sched, key, G * sched.slot_bytes[key])


def _block(sched, op, x, data, region, handle, opid, rows):
    """The argument block of a half (exchange_ir.py REDUCE_FIELDS); `opid`: the op a
    stopped wait names (exchange.note_op); `rows`: (rows, row_bytes, row_n, row_stride,
    block_at) of the result. The region's address and its slots' stride are read when
    the rank's communicator is (every op of the group lowered by then); the halves that
    name a region keep their order (reorder.py: its key, written)."""
    key, G, kind, _ = region
    axes = op.attrs["axes"]
    yld, clock = libc_addrs()
    nbytes = int(x.size) * np.dtype(x.dtype).itemsize
    fold, acc = (0, 0) if kind == "bytes" else (sched.helpers[f"spmd_ar_{kind}"], sched.helpers[f"spmd_ar_acc_{kind}"])

    def board(c):
        return c.native_exchange.board(axes)

    return [FromComm(lambda c: _shared(c, sched, axes, region), touches=("region", key)), G,
            FromComm(lambda c: board(c)["index"]), FromComm(lambda c: sched.slot_bytes[key]), data, nbytes,
            int(x.size), fold, acc,
            FromComm(lambda c: board(c)["failed"]), FromComm(lambda c: board(c)["fins"]),
            FromComm(lambda c: board(c)["timeout_ns"]), FromComm(lambda c: board(c)["status"]),
            opid, yld, clock, handle, *rows]
