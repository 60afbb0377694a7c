"""The native code of the collectives between local threads (exchange.py and
exchange_reduce.py say how they work): a permute's two halves, spmd_permute_post and
spmd_permute_recv_of, an all-reduce's two, spmd_allreduce_post and spmd_allreduce_reduce
(with the element loops they fold with, spmd_ar_*; a reduce-scatter's are the same), an
all-gather's post and spmd_allgather_gather (an all-to-all's are the same), their waits
(spmd_wait: spin, then yield; stop on a failed rank, a finished peer, the timeout) and
spmd_store8 (a value known from the rank)."""
from __future__ import annotations

BOARD_ROW = 8              # int64 per member

# argument block of a permute: board me src dst send recv nbytes failed fin_src fin_dst
# timeout_ns status op_id sched_yield clock_gettime mailbox0 mailbox1, then for an
# operand that is a strided view: a copy function (native.py spmd_copy*, else 0) and
# its argument blocks into mailbox 0 and 1; then a cell the post half keeps the count in
PERMUTE_FIELDS = 20
COUNT_AT = 20

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

; the sender's half: count the permute (kept in the block for the receiving half), wait
; for the slot, copy the operand into the mailbox, publish
define void @spmd_permute_post(ptr %a) {
entry:
{loads}
  %row = mul i64 %f1, {row}
  %mine = getelementptr i64, ptr %p0, i64 %row
  %seqp = getelementptr i64, ptr %mine, i64 6
  %s0 = load i64, ptr %seqp
  %s = add i64 %s0, 1
  store i64 %s, ptr %seqp
  %gk = getelementptr i64, ptr %a, i64 {count_at}
  store i64 %s, ptr %gk
  %par = and i64 %s, 1
  %hasdst = icmp sge i64 %f3, 0
  br i1 %hasdst, label %free, label %x
free:
  ; the slot's last message must have been read before its mailbox is written again
  %mypub = getelementptr i64, ptr %mine, i64 %par
  %last = load i64, ptr %mypub
  %dpar = add i64 %par, 4
  %mydone = getelementptr i64, ptr %mine, i64 %dpar
  %c0 = call i64 @spmd_wait(ptr %mydone, i64 %last, ptr %p7, ptr %p9, i64 %f10, ptr %p11, ptr %p13, ptr %p14)
  %bad0 = icmp ne i64 %c0, 0
  br i1 %bad0, label %fail.dst, label %pub
pub:
  %odd = icmp ne i64 %par, 0
  %box = select i1 %odd, ptr %p16, ptr %p15
  %strided = icmp ne ptr %p17, null
  br i1 %strided, label %gather, label %flat
gather:
  ; (a strided operand: the copy's block for this mailbox)
  %cb = select i1 %odd, ptr %p19, ptr %p18
  call void %p17(ptr %cb)
  br label %boxed
flat:
  call void @llvm.memcpy.p0.p0.i64(ptr %box, ptr %p4, i64 %f6, i1 false)
  br label %boxed
boxed:
  %apar = add i64 %par, 2
  %myaddr = getelementptr i64, ptr %mine, i64 %apar
  store ptr %box, ptr %myaddr
  store atomic i64 %s, ptr %mypub release, align 8
  br label %x
fail.dst:
  call void @spmd_fail(ptr %p11, i64 %c0, i64 %f3, i64 %f12)
  br label %x
x:
  ret void
}

; the receiver's half, of the count its post kept
define void @spmd_permute_recv(ptr %a) {
entry:
{loads}
  %gk = getelementptr i64, ptr %a, i64 {count_at}
  %s = load i64, ptr %gk
  %par = and i64 %s, 1
  %hassrc = icmp sge i64 %f2, 0
  br i1 %hassrc, label %get, label %zero
zero:
  call void @llvm.memset.p0.i64(ptr %p5, i8 0, i64 %f6, i1 false)
  br label %x
get:
  %srow = mul i64 %f2, {row}
  %theirs = getelementptr i64, ptr %p0, i64 %srow
  %spub = getelementptr i64, ptr %theirs, i64 %par
  %c = call i64 @spmd_wait(ptr %spub, i64 %s, ptr %p7, ptr %p8, i64 %f10, ptr %p11, ptr %p13, ptr %p14)
  %bad = icmp ne i64 %c, 0
  br i1 %bad, label %fail.src, label %copy
copy:
  %sapar = add i64 %par, 2
  %saddrp = getelementptr i64, ptr %theirs, i64 %sapar
  %saddr = load ptr, ptr %saddrp
  call void @llvm.memcpy.p0.p0.i64(ptr %p5, ptr %saddr, i64 %f6, i1 false)
  %sdpar = add i64 %par, 4
  %sdone = getelementptr i64, ptr %theirs, i64 %sdpar
  store atomic i64 %s, ptr %sdone release, align 8
  br label %x
fail.src:
  call void @spmd_fail(ptr %p11, i64 %c, i64 %f2, i64 %f12)
  br label %x
x:
  ret void
}

; the receiving half when it is an instruction of its own: its block holds the address
; of its post's block
define void @spmd_permute_recv_of(ptr %r) {
entry:
  %a = load ptr, ptr %r
  call void @spmd_permute_recv(ptr %a)
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

PTR_FIELDS = (0, 4, 5, 7, 8, 9, 11, 13, 14, 15, 16, 17, 18, 19)

# argument block of a half of an all-reduce, all-gather, reduce-scatter or all-to-all
# (exchange_reduce.py): region G index stride data nbytes n fold accumulate failed fins
# timeout_ns status op_id sched_yield clock_gettime handle rows row_bytes row_n row_stride
# block_at. `region`: the group's shared memory for this collective, one slot of `stride`
# bytes per member: [0] the count of the member's last post, [64] the count it last
# finished reading, its mailbox from byte 128 (SLOT_HEAD). `data`: the operand (post)
# or the result (reduce, gather); the post copies `nbytes` (`n` elements) into the
# mailbox; `fold(out, a, b, n)`: out = a (op) b, `accumulate(out, b, n)`: out = out (op)
# b, elementwise; `fins`: G addresses of the members' finished cells; `handle`: where the
# post writes its count (a started all-reduce's handle), or null. The result in `rows`
# rows: a reduce's row r of `row_bytes` (`row_n` elements) folds the mailboxes' bytes at
# r * row_stride + index * block_at (an all-reduce: one row, block_at 0; a reduce-scatter
# of dim d: the rows of the dims before d, this member's block of each); a gather's
# result row r holds the G messages' rows r of `row_bytes` each, in group order, a
# message's row r at r * row_stride + index * block_at of it too (an all-gather: its rows
# one after another, block_at 0; an all-to-all: this member's block of each message).
# Then, for a post whose operand is a strided view (or an all-to-all's message laid out
# block by block): a copy function (native.py spmd_copy*, else 0) and its argument block
# into the mailbox; for a gather that reads each message's block strided (an
# all-to-all's between threads): a copy function (spmd_scopy*) and its argument block,
# whose destination and source the gather sets per message (at m * row_bytes of the
# result, at index * block_at of the message); then `direct` (1: the post leaves the operand's address at the slot's
# byte 8 instead of a copy, the readers read it there, and a drain
# (spmd_collective_drain) waits for them before the operand may change).
REDUCE_FIELDS = 25
REDUCE_PTRS = (0, 4, 7, 8, 9, 10, 12, 14, 15, 16, 22, 23)
SLOT_HEAD = 128

REDUCE_IR = """
; wait until every member but `index` of the region's G has published `count` at byte
; `at` of its slot (0: its post count, 64: its read count); a failed wait is reported
; (spmd_fail names the member) and returns 1
define i1 @spmd_wait_members(ptr %region, i64 %G, i64 %index, i64 %stride, i64 %at, i64 %count, ptr %failed,
                             ptr %fins, i64 %timeout, ptr %status, i64 %opid, ptr %yield, ptr %clock) {
entry:
  br label %h
h:
  %j = phi i64 [0, %entry], [%j1, %next]
  %more = icmp slt i64 %j, %G
  br i1 %more, label %b, label %ok
b:
  %self = icmp eq i64 %j, %index
  br i1 %self, label %next, label %w
w:
  %jo = mul i64 %j, %stride
  %slot = getelementptr i8, ptr %region, i64 %jo
  %cell = getelementptr i8, ptr %slot, i64 %at
  %fp = getelementptr i64, ptr %fins, i64 %j
  %fin = load ptr, ptr %fp
  %r = call i64 @spmd_wait(ptr %cell, i64 %count, ptr %failed, ptr %fin, i64 %timeout, ptr %status, ptr %yield, ptr %clock)
  %bad = icmp ne i64 %r, 0
  br i1 %bad, label %fail, label %next
next:
  %j1 = add i64 %j, 1
  br label %h
fail:
  call void @spmd_fail(ptr %status, i64 %r, i64 %j, i64 %opid)
  ret i1 1
ok:
  ret i1 0
}

; a member's post: wait until every other member finished reading its last message of
; this all-reduce, copy the operand into its mailbox, publish the count (release)
define void @spmd_allreduce_post(ptr %a) {
entry:
{loads}
  %off = mul i64 %f2, %f3
  %mine = getelementptr i8, ptr %p0, i64 %off
  %c0 = load i64, ptr %mine
  %c = add i64 %c0, 1
  %bad = call i1 @spmd_wait_members(ptr %p0, i64 %f1, i64 %f2, i64 %f3, i64 64, i64 %c0, ptr %p9, ptr %p10, i64 %f11, ptr %p12, i64 %f13, ptr %p14, ptr %p15)
  br i1 %bad, label %x, label %copy
copy:
  %direct = icmp ne i64 %f24, 0
  br i1 %direct, label %addr, label %boxed
addr:
  ; (direct: the readers read the operand where it lies, at the address in the slot)
  %ap = getelementptr i8, ptr %mine, i64 8
  store ptr %p4, ptr %ap
  br label %posted
boxed:
  %strided = icmp ne ptr %p22, null
  br i1 %strided, label %gath, label %flat
gath:
  ; (a strided operand: the copy's block, into this member's mailbox)
  call void %p22(ptr %p23)
  br label %posted
flat:
  %data = getelementptr i8, ptr %mine, i64 {head}
  call void @llvm.memcpy.p0.p0.i64(ptr %data, ptr %p4, i64 %f5, i1 false)
  br label %posted
posted:
  store atomic i64 %c, ptr %mine release, align 8
  %hash = icmp ne ptr %p16, null
  br i1 %hash, label %sh, label %x
sh:
  store i64 %c, ptr %p16
  br label %x
x:
  ret void
}

; a member's reduce: wait until every member posted its message of the count this
; member's post made, fold the mailboxes in group order into the result, mark them read
define void @spmd_allreduce_reduce(ptr %a) {
entry:
{loads}
  %off = mul i64 %f2, %f3
  %mine = getelementptr i8, ptr %p0, i64 %off
  %c = load i64, ptr %mine
  %bad = call i1 @spmd_wait_members(ptr %p0, i64 %f1, i64 %f2, i64 %f3, i64 0, i64 %c, ptr %p9, ptr %p10, i64 %f11, ptr %p12, i64 %f13, ptr %p14, ptr %p15)
  br i1 %bad, label %x, label %fold
fold:
  %boff = mul i64 %f2, %f21
  %one = icmp eq i64 %f1, 1
  br label %rh
rh:
  %row = phi i64 [0, %fold], [%row1, %rnext]
  %rmore = icmp slt i64 %row, %f17
  br i1 %rmore, label %rb, label %done
rb:
  %rso = mul i64 %row, %f20
  %so = add i64 %rso, %boff
  %oo = mul i64 %row, %f18
  %out = getelementptr i8, ptr %p4, i64 %oo
  %b0 = call ptr @spmd_box(ptr %p0, i64 0, i64 %f3, i64 %f24)
  %d0 = getelementptr i8, ptr %b0, i64 %so
  br i1 %one, label %single, label %pair
single:
  call void @llvm.memcpy.p0.p0.i64(ptr %out, ptr %d0, i64 %f18, i1 false)
  br label %rnext
pair:
  %b1 = call ptr @spmd_box(ptr %p0, i64 1, i64 %f3, i64 %f24)
  %d1 = getelementptr i8, ptr %b1, i64 %so
  call void %p7(ptr %out, ptr %d0, ptr %d1, i64 %f19)
  br label %fh
fh:
  %k = phi i64 [2, %pair], [%k1, %fb]
  %fm = icmp slt i64 %k, %f1
  br i1 %fm, label %fb, label %rnext
fb:
  %bk = call ptr @spmd_box(ptr %p0, i64 %k, i64 %f3, i64 %f24)
  %dk = getelementptr i8, ptr %bk, i64 %so
  call void %p8(ptr %out, ptr %dk, i64 %f19)
  %k1 = add i64 %k, 1
  br label %fh
rnext:
  %row1 = add i64 %row, 1
  br label %rh
done:
  %dp = getelementptr i8, ptr %mine, i64 64
  store atomic i64 %c, ptr %dp release, align 8
  br label %x
x:
  ret void
}

; a member's gather (an all-gather's, an all-to-all's): wait until every member posted
; its message of the count this member's post made, copy row r of message j (at
; index * block_at + r * row_stride of it) into block j of the result's row r, mark them
; read
define void @spmd_allgather_gather(ptr %a) {
entry:
{loads}
  %off = mul i64 %f2, %f3
  %mine = getelementptr i8, ptr %p0, i64 %off
  %c = load i64, ptr %mine
  %bad = call i1 @spmd_wait_members(ptr %p0, i64 %f1, i64 %f2, i64 %f3, i64 0, i64 %c, ptr %p9, ptr %p10, i64 %f11, ptr %p12, i64 %f13, ptr %p14, ptr %p15)
  br i1 %bad, label %x, label %copy
copy:
  %orow = mul i64 %f18, %f1
  br label %mh
mh:
  %m = phi i64 [0, %copy], [%m1, %mnext]
  %mmore = icmp slt i64 %m, %f1
  br i1 %mmore, label %mb, label %done
mb:
  %mm = call ptr @spmd_box(ptr %p0, i64 %m, i64 %f3, i64 %f24)
  ; (an all-to-all reads this member's block of each message; an all-gather all of it)
  %bat = mul i64 %f2, %f21
  %dm = getelementptr i8, ptr %mm, i64 %bat
  %bo = mul i64 %m, %f18
  %strided = icmp ne ptr %p22, null
  br i1 %strided, label %sc, label %rh
sc:
  ; (an all-to-all's strided read: the copy's block from this message's block to its
  ; place in the result)
  %sdst = getelementptr i8, ptr %p4, i64 %bo
  store ptr %sdst, ptr %p23
  %ssrc = getelementptr ptr, ptr %p23, i64 1
  store ptr %dm, ptr %ssrc
  call void %p22(ptr %p23)
  br label %mnext
rh:
  %row = phi i64 [0, %mb], [%row1, %rb]
  %rmore = icmp slt i64 %row, %f17
  br i1 %rmore, label %rb, label %mnext
rb:
  %so = mul i64 %row, %f20
  %src = getelementptr i8, ptr %dm, i64 %so
  %doo = mul i64 %row, %orow
  %dob = add i64 %doo, %bo
  %dst = getelementptr i8, ptr %p4, i64 %dob
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %f18, i1 false)
  %row1 = add i64 %row, 1
  br label %rh
mnext:
  %m1 = add i64 %m, 1
  br label %mh
done:
  %dp = getelementptr i8, ptr %mine, i64 64
  store atomic i64 %c, ptr %dp release, align 8
  br label %x
x:
  ret void
}

; where member k's message lies: its mailbox, or (direct) the operand whose address its
; post left in the slot
define ptr @spmd_box(ptr %region, i64 %k, i64 %stride, i64 %direct) {
entry:
  %ko = mul i64 %k, %stride
  %slot = getelementptr i8, ptr %region, i64 %ko
  %d = icmp ne i64 %direct, 0
  br i1 %d, label %at, label %box
at:
  %ap = getelementptr i8, ptr %slot, i64 8
  %a = load ptr, ptr %ap
  ret ptr %a
box:
  %b = getelementptr i8, ptr %slot, i64 {head}
  ret ptr %b
}

; after a direct read: wait until every other member finished reading this member's
; operand (its read count reached this member's post count), which may be written again
define void @spmd_collective_drain(ptr %a) {
entry:
{loads}
  %off = mul i64 %f2, %f3
  %mine = getelementptr i8, ptr %p0, i64 %off
  %c = load i64, ptr %mine
  %bad = call i1 @spmd_wait_members(ptr %p0, i64 %f1, i64 %f2, i64 %f3, i64 64, i64 %c, ptr %p9, ptr %p10, i64 %f11, ptr %p12, i64 %f13, ptr %p14, ptr %p15)
  br label %x
x:
  ret void
}
"""

# the element loops an all-reduce folds with: (reduction, dtype) -> (suffix, LLVM type,
# the instruction combining two elements); numpy's add, multiply, maximum and minimum of
# the dtype (integers wrap as numpy's do). Floats' max and min (NaN and signed zeros)
# stay numpy's.
REDUCE_KINDS = {}
for _dt, _t, _s in (("float32", "float", "f32"), ("float64", "double", "f64"),
                    ("int32", "i32", "i32"), ("int64", "i64", "i64")):
    _f = _t in ("float", "double")
    REDUCE_KINDS[("sum", _dt)] = (f"sum_{_s}", _t, "fadd" if _f else "add")
    REDUCE_KINDS[("prod", _dt)] = (f"prod_{_s}", _t, "fmul" if _f else "mul")
    if not _f:
        REDUCE_KINDS[("max", _dt)] = (f"max_{_s}", _t, "smax")
        REDUCE_KINDS[("min", _dt)] = (f"min_{_s}", _t, "smin")


def _combine(t, how, a, b, r):
    if how in ("smax", "smin"):
        pred = "sgt" if how == "smax" else "slt"
        return [f"  %q = icmp {pred} {t} {a}, {b}", f"  {r} = select i1 %q, {t} {a}, {t} {b}"]
    return [f"  {r} = {how} {t} {a}, {b}"]


def _fold_ir(suffix, t, how) -> str:
    """spmd_ar_<suffix>(out, a, b, n) and spmd_ar_acc_<suffix>(out, b, n), the
    buffers distinct (noalias: the loops vectorise without runtime checks)."""
    out = []
    for name, acc in ((f"spmd_ar_{suffix}", False), (f"spmd_ar_acc_{suffix}", True)):
        params = "ptr noalias %o, ptr noalias %b, i64 %n" if acc else \
            "ptr noalias %o, ptr noalias %a, ptr noalias %b, i64 %n"
        src = "%o" if acc else "%a"
        out += [f"define void @{name}({params}) {{", "entry:", "  br label %h", "h:",
                "  %i = phi i64 [0, %entry], [%i1, %body]", "  %c = icmp slt i64 %i, %n",
                "  br i1 %c, label %body, label %x", "body:",
                f"  %pa = getelementptr {t}, ptr {src}, i64 %i", f"  %va = load {t}, ptr %pa",
                f"  %pb = getelementptr {t}, ptr %b, i64 %i", f"  %vb = load {t}, ptr %pb"]
        out += _combine(t, how, "%va", "%vb", "%v")
        out += [f"  %po = getelementptr {t}, ptr %o, i64 %i", f"  store {t} %v, ptr %po",
                "  %i1 = add i64 %i, 1", "  br label %h", "x:", "  ret void", "}", ""]
    return "\n".join(out)


def _loads(n, ptrs) -> str:
    lines = []
    for j in range(n):
        kind = "ptr" if j in ptrs else "i64"
        name = f"%p{j}" if j in ptrs else f"%f{j}"
        lines += [f"  %g{j} = getelementptr i64, ptr %a, i64 {j}", f"  {name} = load {kind}, ptr %g{j}"]
    return "\n".join(lines)


def exchange_ir() -> str:
    permute = EXCHANGE_IR.replace("{loads}", _loads(PERMUTE_FIELDS, PTR_FIELDS)).replace("{row}", str(BOARD_ROW)) \
        .replace("{count_at}", str(COUNT_AT))
    reduce = REDUCE_IR.replace("{loads}", _loads(REDUCE_FIELDS, REDUCE_PTRS)).replace("{head}", str(SLOT_HEAD))
    return permute + reduce + "".join(_fold_ir(*k) for k in REDUCE_KINDS.values())


EXCHANGE_NAMES = ["spmd_permute_post", "spmd_permute_recv_of", "spmd_store8", "spmd_allreduce_post",
                  "spmd_allreduce_reduce", "spmd_allgather_gather", "spmd_collective_drain"] + \
    [f"spmd_ar{acc}_{k[0]}" for k in REDUCE_KINDS.values() for acc in ("", "_acc")]
