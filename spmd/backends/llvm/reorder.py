"""The order a native segment runs its instructions in, when it exchanges with other
threads (exchange.py): every permute as two halves, its post and its receive, and the
halves placed so that messages leave as early and are waited for as late as the data
allows. The receives of one exchange then wait for messages that all left together
(the two directions of both axes of a 2-D halo), and work that does not need an
incoming halo runs while it travels.

The dependence rule: an instruction never moves across one that writes memory it reads
or writes, or reads memory it writes (`Instr.reads` / `writes`: byte ranges of the
arena and of other buffers). Then every instruction reads what it read in the program's
order, and each result is bit for bit the same.

The order of the halves is the same on every member (one schedule for all threads), and
two rules keep it free of deadlock: a board's posts keep their order, and a post leaves
at most two of its board's posts waiting for their receives (a member has two mailbox
slots). Then every wait is for an instruction an earlier position of the same order, so
the member furthest behind can always go on. An instruction that exchanges inside (a
native loop: `fence`) has no half of its segment outstanding across it.

Among the instructions ready to run, the first taken is a post, then work leading to a
post (a neighbour waits for it), then a receive leading to a post, then other work, then
the other receives; ties keep the program's order.
"""
from __future__ import annotations

import heapq

SLOTS = 2          # mailbox slots of a member (exchange.py): posts a board may have waiting


class Instr:
    """One native instruction and what the order must respect: `reads`, `writes`: keys of
    the memory it touches (a ("range", buffer, start, end) byte range of a buffer, or any
    other hashable naming what only the instructions naming it touch); `board`: the exchange board of a permute half; `post`: a
    receive's post; `fence`: it exchanges inside."""

    def __init__(self, fn, entries, reads=(), writes=(), board=None, post=None, fence=False):
        self.fn, self.entries = fn, entries
        self.reads, self.writes = tuple(reads), tuple(writes)
        self.board, self.post, self.fence = board, post, fence

    def __repr__(self):
        return f"Instr({self.fn}, reads={self.reads}, writes={self.writes}, board={self.board}, fence={self.fence})"

    @property
    def is_post(self) -> bool:
        return self.board is not None and self.post is None

    @property
    def is_recv(self) -> bool:
        return self.post is not None


def dependences(instrs) -> list:
    """[set of earlier positions each instruction must follow]"""
    cells = _cells(instrs)
    at = {id(ins): i for i, ins in enumerate(instrs)}
    last_write, readers = {}, {}
    preds = [set() for _ in instrs]
    board_last, halves_since_fence, last_fence = {}, [], None
    for i, ins in enumerate(instrs):
        p = preds[i]
        for key in _keys(ins.reads, cells):
            if key in last_write:
                p.add(last_write[key])
            readers.setdefault(key, []).append(i)
        for key in _keys(ins.writes, cells):
            if key in last_write:
                p.add(last_write[key])
            p.update(readers.pop(key, ()))
            last_write[key] = i
        if ins.post is not None:
            p.add(at[id(ins.post)])
        if ins.board is not None:
            # a board's halves keep their order among posts and among receives
            kind = (ins.board, ins.is_post)
            if kind in board_last:
                p.add(board_last[kind])
            board_last[kind] = i
            if last_fence is not None:
                p.add(last_fence)
            halves_since_fence.append(i)
        if ins.fence:
            # (after the halves since the last fence, and after that fence: the fences in a row)
            p.update(halves_since_fence)
            if last_fence is not None:
                p.add(last_fence)
            halves_since_fence = []
            last_fence = i
        p.discard(i)
    return preds


def _cells(instrs):
    """Each buffer's byte ranges cut at every range's ends: a range is the cells it covers."""
    ends = {}
    for ins in instrs:
        for k in ins.reads + ins.writes:
            if _is_range(k):
                ends.setdefault(k[1], set()).update(k[2:])
    return {(base, e): j for base, es in ends.items() for j, e in enumerate(sorted(es))}


def _is_range(key) -> bool:
    return isinstance(key, tuple) and len(key) == 4 and key[0] == "range"


def _keys(keys, cells):
    for k in keys:
        if _is_range(k):
            for j in range(cells[k[1], k[2]], cells[k[1], k[3]]):
                yield ("cell", k[1], j)
        else:
            yield k


def reorder(instrs) -> list:
    """The instructions in the order to run them (see the module's docstring)."""
    if not any(ins.board is not None for ins in instrs):
        return list(instrs)
    preds = dependences(instrs)
    succs = [[] for _ in instrs]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].append(i)
    feeds_post = _ancestors_of_posts(instrs, preds)
    waiting = [len(p) for p in preds]
    outstanding = {}
    ready, held, out = [], [], []

    def rank(i):
        ins = instrs[i]
        if ins.is_post:
            return 0
        if ins.is_recv:
            return 2 if feeds_post[i] else 4
        return 1 if feeds_post[i] else 3

    for i, n in enumerate(waiting):
        if n == 0:
            heapq.heappush(ready, (rank(i), i))
    while ready or held:
        # posts held for a slot go back to the ready ones once their board has one
        for i in [i for i in held if outstanding.get(instrs[i].board, 0) < SLOTS]:
            held.remove(i)
            heapq.heappush(ready, (rank(i), i))
        assert ready, "every ready instruction a post waiting for a slot"
        _, i = heapq.heappop(ready)
        ins = instrs[i]
        if ins.is_post and outstanding.get(ins.board, 0) >= SLOTS:
            held.append(i)
            continue
        if ins.is_post:
            outstanding[ins.board] = outstanding.get(ins.board, 0) + 1
        elif ins.is_recv:
            outstanding[ins.board] -= 1
        out.append(ins)
        for j in succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (rank(j), j))
    assert len(out) == len(instrs), "a dependence cycle in a segment"
    return out


def _ancestors_of_posts(instrs, preds) -> list:
    """[does the instruction lead to a later post]"""
    feeds = [False] * len(instrs)
    for i in range(len(instrs) - 1, -1, -1):
        if instrs[i].is_post or feeds[i]:
            for j in preds[i]:
                feeds[j] = True
    return feeds
