"""The native code of the collectives between local threads (exchange.py says how they
work): a permute's two halves, spmd_permute_post and spmd_permute_recv_of, their waits (spmd_wait: spin, then yield; stop on a failed rank, a
finished peer, the timeout) and spmd_store8 (a value known from the rank)."""
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


def exchange_ir() -> str:
    loads = []
    for j in range(PERMUTE_FIELDS):
        kind = "ptr" if j in PTR_FIELDS else "i64"
        name = f"%p{j}" if j in PTR_FIELDS else f"%f{j}"
        loads += [f"  %g{j} = getelementptr i64, ptr %a, i64 {j}", f"  {name} = load {kind}, ptr %g{j}"]
    return EXCHANGE_IR.replace("{loads}", "\n".join(loads)).replace("{row}", str(BOARD_ROW)) \
        .replace("{count_at}", str(COUNT_AT))


EXCHANGE_NAMES = ["spmd_permute_post", "spmd_permute_recv_of", "spmd_store8"]
