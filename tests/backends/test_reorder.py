"""backends/llvm/reorder.py: the order a native segment with exchanges runs in. Whatever
the instructions, the order keeps every pair that touches the same memory (one writing
it) as the program had it, keeps a board's posts and receives in their order, each
receive after its post, never more than two posts of a board waiting, and no half
waiting across an instruction that exchanges inside (a loop); and a post leaves before
work that does not lead to it."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spmd.backends.llvm.reorder import SLOTS, Instr, dependences, reorder

KEYS = ["a", "b", ("range", "arena", 0, 64), ("range", "arena", 32, 96), ("range", "arena", 96, 128),
        ("range", "out", 0, 1 << 62), ("range", "out", 8, 16), ("range", "out", 16, 40)]


def overlap(k, q) -> bool:
    if all(isinstance(z, tuple) and z[0] == "range" for z in (k, q)):
        return k[1] == q[1] and k[2] < q[3] and q[2] < k[3]
    return k == q


def touches(ws, ks) -> bool:
    return any(overlap(w, k) for w in ws for k in ks)


def conflict(x, y) -> bool:
    return touches(x.writes, y.reads + y.writes) or touches(y.writes, x.reads)


@st.composite
def programs(draw):
    out, open_posts = [], {}
    keys = st.lists(st.sampled_from(KEYS), max_size=2)
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["work", "work", "post", "recv", "fence"]))
        if kind == "post":
            b = draw(st.sampled_from(["x", "y"]))
            post = Instr("post", None, draw(keys), [("mailbox", len(out))], board=b)
            out.append(post)
            open_posts.setdefault(b, []).append(post)
        elif kind == "recv" and any(open_posts.values()):
            b = draw(st.sampled_from(sorted(b for b, v in open_posts.items() if v)))
            post = open_posts[b].pop(0)
            out.append(Instr("recv", None, (), draw(keys), board=b, post=post))
        elif kind == "fence":
            # (a loop: what the program's order had waiting before it is received first)
            for b, posts in open_posts.items():
                out += [Instr("recv", None, (), draw(keys), board=b, post=p) for p in posts]
                posts.clear()
            out.append(Instr("loop", None, draw(keys), draw(keys), fence=True))
        else:
            out.append(Instr("work", None, draw(keys), draw(keys)))
    for b, posts in open_posts.items():
        out += [Instr("recv", None, (), draw(keys), board=b, post=p) for p in posts]
    # the program's own order sends each post's receive before a board's third post
    return out if _slots_kept(out) else [i for i in out if i.board is None]


def _slots_kept(order) -> bool:
    waiting = {}
    for ins in order:
        if ins.is_post:
            waiting.setdefault(ins.board, set()).add(id(ins))
            if len(waiting[ins.board]) > SLOTS:
                return False
        elif ins.is_recv:
            if id(ins.post) not in waiting.get(ins.board, ()):
                return False
            waiting[ins.board].remove(id(ins.post))
        elif ins.fence and any(waiting.values()):
            return False
    return not any(waiting.values())


@settings(max_examples=300, deadline=None)
@given(programs())
def test_the_order_keeps_every_dependence_and_the_mailbox_slots(prog):
    order = reorder(prog)
    assert sorted(map(id, order)) == sorted(map(id, prog))
    at = {id(ins): k for k, ins in enumerate(order)}
    for i, x in enumerate(prog):
        for y in prog[i + 1:]:
            if conflict(x, y):
                assert at[id(x)] < at[id(y)], "an instruction moved across one touching its memory"
            if x.board is not None and x.board == y.board and x.is_post == y.is_post:
                assert at[id(x)] < at[id(y)], "a board's halves out of order"
    assert _slots_kept(order)


def test_a_conflict_through_overlapping_ranges_of_one_buffer_is_one():
    """(a temporary the memory plan placed in an output's buffer and the output)"""
    w = Instr("w", None, (), [("range", "arena", 0, 64)])
    r = Instr("r", None, [("range", "arena", 63, 65)], ())
    apart = Instr("s", None, [("range", "arena", 64, 128)], ())
    other = Instr("o", None, [("range", "out", 0, 64)], ())
    whole = Instr("t", None, (), [("range", "out", 0, 1 << 62)])
    part = Instr("p", None, [("range", "out", 100, 108)], ())
    assert dependences([w, r, apart, other, whole, part]) == [set(), {0}, set(), set(), {3}, {4}]


def test_a_two_axis_halo_sends_all_four_before_it_waits():
    """the cavity sweep: x halos out and in, the column halos built from them, then sent:
    the y posts go together, the work not needing the halos runs before the receives"""
    px1 = Instr("post", None, ["p"], [("box", 1)], board="x")
    px2 = Instr("post", None, ["p"], [("box", 2)], board="x")
    rx1 = Instr("recv", None, (), ["hx1"], board="x", post=px1)
    rx2 = Instr("recv", None, (), ["hx2"], board="x", post=px2)
    col1 = Instr("col1", None, ["hx1", "hx2", "p"], ["c1"])
    py1 = Instr("post", None, ["c1"], [("box", 3)], board="y")
    ry1 = Instr("recv", None, (), ["hy1"], board="y", post=py1)
    col2 = Instr("col2", None, ["hx1", "hx2", "p"], ["c2"])
    py2 = Instr("post", None, ["c2"], [("box", 4)], board="y")
    ry2 = Instr("recv", None, (), ["hy2"], board="y", post=py2)
    other = Instr("other", None, ["q"], ["q2"])
    use = Instr("use", None, ["hy1", "hy2", "hx1", "hx2", "p"], ["out"])
    prog = [px1, rx1, px2, rx2, col1, py1, ry1, col2, py2, ry2, other, use]
    names = [i.fn for i in reorder(prog)]
    assert names == ["post", "post", "recv", "recv", "col1", "post", "col2", "post", "other", "recv", "recv",
                     "use"], names
