"""A fused Kernel -> one LLVM function, as IR text.

The loop nest is built around the kernel's root value: one loop per dimension of the
root (the outermost one runs over [start, end), so threads can split it), or a single
flat loop when the kernel is purely elementwise on one shape. Every value inside is
computed at an *index map*: an affine function from the open loop variables to the
value's own index. Elementwise ops keep the map, broadcast/transpose/slice/reshape
rewrite it, loads turn it into an address, and a reduction opens loops of its own over
the reduced axes.

Pads, concatenations and dynamic slices are guarded loads, and selects whose predicate is a
range test of positions (a stencil's masks) pick an operand by the index: each loop's
range is split where any of those tests changes (index_sets.py), and the nest is emitted
once per region with the tests decided there, so a stencil's interior is a clean affine
loop nest and its boundary strips are loops of their own. A kernel is generated again
until its regions are those its tests ask for (kernel_ir).

Each value is placed in the innermost loop its map depends on, so a row's max or sum is
computed once per row, before the loop that uses it (softmax and layernorm fuse into
one kernel with passes over the row while it is in cache). Loop counters and
accumulators live in allocas, which LLVM's SROA turns into SSA; the O3 pipeline then
vectorises the innermost loops.

The function signature is `void kN(ptr noalias %b0, ..., i64 %start, i64 %end, i64 %tid)`:
one pointer per input/output buffer, the range of the split loop, and the thread's index
(split reductions write partial results at tid).
"""
from __future__ import annotations

from collections import defaultdict

from ...ir import Value
from .emitters import Split, contiguous_strides
from .fuse import PARALLEL_WORK, Kernel, splat
from .index_sets import INTS, UNKNOWN, DeviceValues, Pos, InRange, anywhere, bounds, breakpoints, capped, decided, \
    each, known, tests, truth
from .index_sets import intervals as cut
from .lowering_table import lowering_of
from .scalar import HALFS, LL, MEM, SIZE, SV, ScalarBuilder, Unsupported, compute_dtype, literal

BIG_WORK, BIG_LOOP = 1 << 14, 64
# a reduction's operand that costs this many instructions an element (an exp) is kept in a
# row buffer for the loops after the reduction; the buffers of a kernel stay within L1/L2
ROW_COST, ROW_BYTES = 8, 1 << 17
# a region of at most 1/THIN_REGION of a kernel's elements is a strip, where a stencil of a
# stencil may be computed again at other shifts, THIN_RECOMPUTES times a kernel at most
# (check_recompute: more is a chain of them, whose code would grow as a power of its length)
THIN_REGION, THIN_RECOMPUTES = 16, 1024
ROW_DTYPES = ("float32", "float64", "int32", "int64")
# a nest reading an operand transposed runs in tiles of TILE x TILE elements when both dims
# span at least TILE_MIN and the lines of one column of the operand do not stay in cache:
# more than TILE_ROWS of them, or rows a multiple of 4 KiB apart (which share a few cache
# sets). Measured (float64, B + A.T, one core): untiled is 1.2-1.3x faster at order
# 1000-1500, tiles of 64 are 2x faster at 2048, 4000 and 4096
TILE, TILE_MIN, TILE_ROWS, SET_STRIDE = 64, 64, 2048, 4096


class Scope:
    """A loop (or the function body): a list of lines and nested loops. Code hoisted into
    an outer scope is inserted at `cursor`, just before the loop that is open inside it."""

    def __init__(self, parent=None, var=None, start="0", end="0", full=None):
        self.parent, self.var, self.start, self.end = parent, var, start, end
        self.step = 1             # a tile loop (codegen.nest_tiled) steps by the tile
        self.full = full          # the extent, when all threads together run the whole range
        self.depth = 0 if parent is None else parent.depth + 1
        self.items, self.cursor, self.closed = [], 0, False

    def insert(self, item):
        self.items.insert(self.cursor, item)
        self.cursor += 1

    def close(self):
        """This loop and every loop in it are done: values computed in them are out of scope."""
        self.closed = True
        for item in self.items:
            if isinstance(item, Scope):
                item.close()


def _coefficients(amap, strides):
    """({loop variable: elements the address steps by per step of it}, constant offset) of
    an index map into an array of these strides."""
    coefs, const = {}, 0
    for (terms, c), st in zip(amap, strides):
        const += c * st
        for var, k in terms:
            coefs[var] = coefs.get(var, 0) + k * st
    return coefs, const


def _identity(vars_):
    return tuple((((v, 1),), 0) for v in vars_)


class KernelCodegen:
    def __init__(self, kernel: Kernel, name: str, threads: int, devices=None, splits=None, tile=None):
        self.k, self.name = kernel, name
        self.tile = tile                 # None | (p, q): the root dims the nest runs in tiles of
        self.root_dim = {}               # root loop variable -> its dim
        self.transposed = None           # (p, q, bytes per step along q) of a read contiguous along p, strided along the last dim q
        self.member = set(kernel.ops)
        self.out_set = set(kernel.outputs)
        self.params = {}                 # Value -> param name
        for v in list(kernel.inputs) + list(kernel.outputs):
            if v not in self.params:
                self.params[v] = f"%b{len(self.params)}"
        self.n = 0
        self.allocas, self.decls = [], set()
        self.memo = {}                   # (value, map) -> (SV, scope)
        self.scopes = {}                 # loop var name -> Scope
        self.stored = set()              # (output, the intervals of its loops) stored
        self.store_family = {}           # output -> the loop keys it is stored in
        self.body = Scope()
        self.threads = threads
        self.par = None                  # None | "rows" | "reduction"
        self.extent = 0                  # total range of the split loop
        self.split_next_reduce = False
        self.flat = self._is_flat()
        self.const_extents = []          # trip counts known at compile time
        # index-set splitting (index_sets.py)
        self.devices = devices if devices is not None else DeviceValues(None, splat)
        self.splits = splits or {}       # loop key -> breakpoints its loops are cut at
        self.breaks = defaultdict(set)   # loop key -> breakpoints the tests asked for
        self.extents = {}                # loop key -> the loop's full extent
        self.loop_key = {}               # loop variable -> its loop key
        self.ranges = {}                 # index variable -> (lo, hi), inclusive (per device or not)
        self.positions = {}              # (value, map) -> its position (index_sets)
        self.clamps, self.offsets = {}, {}
        self.tid_offset = None
        self.decisions = {}              # id(condition) -> (condition, decided value)
        self.splats = {}                 # value -> splat(value)
        self.levels = None               # value -> stencil level (check_recompute)
        self.rlevels = None              # value -> reductions nested in it (reduction_level)
        self.shifts = {}                 # (value, index variables) -> the offsets it was computed at
        self.recomputed = []             # values check_recompute found read at a second shift
        self.thin_recomputes = 0         # reads at a second shift in strips (check_recompute)
        self.thin_shifts = {}            # (value, index variables) -> the offsets strips read it at
        self.rows = defaultdict(list)    # value -> [(index map, axis, loop, buffer)] (keep_row)
        self.row_bytes = 0

    # -- plumbing ---------------------------------------------------------------------
    def fresh(self):
        self.n += 1
        return f"%t{self.n}"

    def declare(self, line):
        self.decls.add(line)

    def builder(self, scope):
        return ScalarBuilder(scope.insert, self.fresh, self.declare)

    def alloca(self, prefix, t):
        """A new stack slot of LLVM type t (an accumulator), allocated at the function's entry."""
        self.n += 1
        name = f"{prefix}{self.n}"
        self.allocas.append(f"  {name} = alloca {t}")
        return name

    def open_loop(self, parent, extent, lo=0, hi=None, threaded=False, key=None, full=True):
        """A loop over [lo, hi) of a range of `extent`; `threaded`: the range is also cut to
        the thread's [%start, %end). `key` names the loop for index-set splitting (the
        loops of one key are cut at the same points)."""
        hi = extent if hi is None else hi
        start, end = str(lo), str(hi)
        if threaded:
            start = self._bounded(parent, "%start", lo, "max") if lo > 0 else "%start"
            end = self._bounded(parent, "%end", hi, "min") if hi < extent else "%end"
        var = f"%i{self.n + 1}"
        self.n += 1
        s = Scope(parent, var, start, end, extent if full else None)
        parent.items.insert(parent.cursor, s)          # hoisted code still goes before it
        self.scopes[var] = s
        self.allocas.append(f"  {var}.a = alloca i64")
        self.ranges[var] = (lo, hi - 1)
        if key is not None:
            self.loop_key[var] = key
            self.extents[key] = extent
        if not threaded:
            self.const_extents.append(extent)
        return s

    def _bounded(self, scope, arg, c, which):
        b = self.builder(scope)
        return getattr(b, which)(SV(arg, "int64"), SV(str(c), "int64")).name

    def close_loop(self, s):
        s.close()
        s.parent.cursor = s.parent.items.index(s) + 1

    def intervals(self, key, extent):
        """The [lo, hi) pieces the loops of `key` run over."""
        return cut(self.splits.get(key, ()), extent)

    def scope_of(self, amap):
        best = self.body
        for terms, _ in amap:
            for var, _c in terms:
                s = self.scopes[var]
                if s.depth > best.depth:
                    best = s
        return best

    def index_expr(self, scope, terms, const):
        """An i64 SSA value (or literal) for const + sum(coef * var)."""
        acc = None
        for var, c in terms:
            t = var
            if c != 1:
                t = self.fresh()
                scope.insert(f"  {t} = mul i64 {var}, {c}")
            if acc is None:
                acc = t
            else:
                r = self.fresh()
                scope.insert(f"  {r} = add i64 {acc}, {t}")
                acc = r
        if acc is None:
            return str(const)
        if const:
            r = self.fresh()
            scope.insert(f"  {r} = add i64 {acc}, {const}")
            acc = r
        return acc

    def address(self, scope, v, amap, strides, base_offset=None):
        coefs, const = _coefficients(amap, strides)
        terms = tuple((var, k) for var, k in coefs.items() if k)
        off = self.index_expr(scope, terms, const)
        if base_offset is not None:
            r = self.fresh()
            scope.insert(f"  {r} = add i64 {off}, {base_offset}")
            off = r
        p = self.fresh()
        scope.insert(f"  {p} = getelementptr inbounds {MEM[v.dtype]}, ptr {self.params[v]}, i64 {off}")
        return p

    def _strides(self, v, shape=None):
        return (1,) if self.flat else contiguous_strides(shape if shape is not None else v.shape)

    def load(self, v, amap, shape=None):
        scope = self.scope_of(amap)
        if not self.flat:
            self.note_transposed(_coefficients(amap, self._strides(v, shape))[0], SIZE.get(v.dtype, 1))
        p = self.address(scope, v, amap, self._strides(v, shape))
        r = self.fresh()
        scope.insert(f"  {r} = load {MEM[v.dtype]}, ptr {p}, align {SIZE[v.dtype]}")
        if v.dtype == "bool":
            b = self.fresh()
            scope.insert(f"  {b} = icmp ne i8 {r}, 0")
            r = b
        if v.dtype in HALFS:          # 2 bytes in memory, float32 in the kernel
            return self.builder(scope).half_value(SV(r, "i16"), v.dtype), scope
        return SV(r, v.dtype), scope

    def note_transposed(self, coefs, itemsize):
        """A read whose address steps by more than an element along the innermost root loop
        and by one along another root loop p (a transposed operand) makes the next
        generation run the nest in tiles over p and the last dim (kernel_ir)."""
        last = len(self.k.root.shape) - 1
        step = max((abs(k) for var, k in coefs.items() if self.root_dim.get(var) == last), default=0)
        if step <= 1:
            return
        for var, k in coefs.items():
            d = self.root_dim.get(var)
            if abs(k) == 1 and d is not None and d != last:
                self.transposed = (d, last, step * itemsize)

    def store(self, scope, v, x: SV, amap, base_offset=None):
        p = self.address(scope, v, amap, self._strides(v), base_offset)
        val = x.name
        if v.dtype == "bool":
            val = self.fresh()
            scope.insert(f"  {val} = zext i1 {x.name} to i8")
        if v.dtype in HALFS:
            val = self.builder(scope).half_bits(x, v.dtype).name
        scope.insert(f"  store {MEM[v.dtype]} {val}, ptr {p}, align {SIZE[v.dtype]}")

    # -- planning -----------------------------------------------------------------------
    def _is_flat(self):
        shape = self.k.root.shape
        for op in self.k.ops:
            if op.name in ("broadcast_in_dim", "constant") and splat(op.result) is not None:
                continue
            if op.opdef.family != "elementwise":
                return False
        return all(v.shape == shape for v in self.k.inputs if splat(v) is None) and \
            all(v.shape == shape for v in self.k.outputs)

    def splat(self, v):
        """splat(v), asked once per value (it evaluates small constant expressions)."""
        if v not in self.splats:
            self.splats[v] = splat(v)
        return self.splats[v]

    # -- emission -----------------------------------------------------------------------
    def emit(self, v: Value, amap):
        key = (v, amap)
        hit = self.memo.get(key)
        if hit is not None and not hit[1].closed:
            return hit[0]
        c = self.splat(v)
        if c is not None:
            return SV(literal(c, v.dtype), compute_dtype(v.dtype))
        op = v.producer
        kept = self.kept_row(v, amap) if v in self.rows else None
        if kept is not None:
            x, scope = kept
        elif op is None or op not in self.member:
            x, scope = self.load(v, amap)
        else:
            # (a select the region decides reads the operand it picks, which is checked
            # in turn; a value read at a second shift is left out of this generation)
            got = self.decided(op, v, amap)
            if got is None and self.check_recompute(op, v, amap):
                got = SV(literal(0, v.dtype), compute_dtype(v.dtype)), self.body
            if got is not None:
                x, scope = got
            else:
                if op.opdef.family == "elementwise":
                    self._emit_operands_first(op, amap)
                x, scope = self.emit_op(op, v, amap)
        self.memo[key] = (x, scope)
        if v in self.out_set and v is not self.k.root and self.storable(v, amap):
            self.store_escaping(scope, v, x, amap)
        return x

    def keep_row(self, v, amap, axis, loop, x, cost, inner=None):
        """A reduction's operand v, computed at amap in its loop over `axis`, which costs
        `cost` instructions an element to compute (softmax's exp): kept in a row buffer on the
        stack as it is reduced, so a later loop over the same row in the same iteration of the
        loops outside (softmax's division) reads it back from L1 instead of computing it again.
        `inner`: the loop x is computed in when the row's loop is cut in chunks of partial
        results (a float sum's lanes), else `loop` itself."""
        inner = loop if inner is None else inner
        n = v.shape[axis]
        size = SIZE[x.dtype] if x.dtype in ROW_DTYPES else 0
        if cost < ROW_COST or x.dtype not in ROW_DTYPES or self.flat or \
                self.memo.get((v, amap), (None, None))[1] is not inner or \
                len(self.intervals(self.loop_key.get(loop.var), n)) != 1 or \
                self.row_bytes + n * size > ROW_BYTES:
            return
        self.row_bytes += n * size
        buf = self.alloca("%row", f"[{n} x {LL[x.dtype]}], align 64")
        pos = self.index_expr(inner, *amap[axis])
        p = self.fresh()
        inner.insert(f"  {p} = getelementptr inbounds {LL[x.dtype]}, ptr {buf}, i64 {pos}")
        inner.insert(f"  store {LL[x.dtype]} {x.name}, ptr {p}")
        self.rows[v].append((amap, axis, loop, buf, x.dtype))

    def kept_row(self, v, amap):
        """(SV, scope) of v at amap read from a row keep_row kept, or None: the same index
        but along the row axis, there a loop that runs after the one that kept the row, in
        the same scope (so the same iteration of every loop outside)."""
        for kmap, axis, loop, buf, dtype in self.rows[v]:
            if loop.parent.closed or len(amap) != len(kmap) or \
                    any(a != b for d, (a, b) in enumerate(zip(amap, kmap)) if d != axis):
                continue
            terms, c = amap[axis]
            if c != 0 or len(terms) != 1 or terms[0][1] != 1:
                continue
            s = self.scopes.get(terms[0][0])
            if s is None or s.var != terms[0][0] or s.parent is not loop.parent or s.closed or \
                    loop.parent.items.index(s) < loop.parent.items.index(loop):
                continue
            p, r = self.fresh(), self.fresh()
            s.insert(f"  {p} = getelementptr inbounds {LL[dtype]}, ptr {buf}, i64 {s.var}")
            s.insert(f"  {r} = load {LL[dtype]}, ptr {p}")
            return SV(r, dtype), s
        return None

    def store_escaping(self, scope, v, x, amap):
        """Store an output on the way where this map covers a part of it not stored yet:
        the regions of one family of loops (the first it is met in), each region once."""
        loops = [terms[0][0] if terms else None for terms, _ in amap]
        family = tuple(self.loop_key.get(var) if var else None for var in loops)
        part = tuple(self.ranges[var] if var else None for var in loops)
        if self.store_family.setdefault(v, family) != family or (v, part) in self.stored:
            return
        self.stored.add((v, part))
        # in the loop of every index the store names, not only where x was computed: a
        # region can decide x without the innermost index (a select picking an operand
        # that is broadcast along it), and the store still runs once per element
        at = self.scope_of(amap)
        self.store(at if at.depth > scope.depth else scope, v, x, amap)

    def covered(self, v) -> bool:
        """Was output v stored in every region of its loop family?"""
        family = self.store_family.get(v)
        if family is None:
            return False
        need = 1
        for key in family:
            if key is not None:
                need *= len(self.intervals(key, self.extents[key]))
        return sum(1 for w, _ in self.stored if w is v) == need

    def check_recompute(self, op, v, amap) -> bool:
        """A stencil of a stencil (a value computed through guarded loads of values computed
        through guarded loads) read at several shifts of one index (the next step of an
        unrolled time loop) would be computed again at each: it is materialised instead
        (kernel_ir raises Split), so a chain of k steps costs k passes, not a growing cube
        of them. True where v is read at a second shift: emit() then leaves it out of
        this generation. A read at another shift in a thin region (a boundary strip:
        `p[0, :] = p[1, :]` on a split grid is a select of the grid shifted by a row, left
        undecided only in the row whose test differs between the devices) computes the
        strip again, a row's work, rather than storing and reloading the whole value; a
        generation before the regions settle may see the strip as part of a larger region,
        hence the decision after them."""
        if op.opdef.fusion == "reindex" or self.stencil_level(v) < 2:
            return False
        key = (v, tuple(t for t, _ in amap))          # (a region's own loop variables)
        consts = tuple(c for _, c in amap)
        if self.region_elements(amap) * THIN_REGION <= max(self.k.root.size, 1):
            seen = self.thin_shifts.setdefault(key, set())
            if consts not in seen:
                seen.add(consts)
                self.thin_recomputes += len(seen) > 1
            if self.thin_recomputes <= THIN_RECOMPUTES:
                return False
        elif self.shifts.setdefault(key, consts) == consts:
            return False
        self.recomputed.append(v)
        return True

    def region_elements(self, amap) -> int:
        """How many elements the loops an index map names run over here (their ranges in
        this region, the widest over the devices)."""
        n = 1
        for var in sorted({var for terms, _ in amap for var, _c in terms}):
            lo, hi = self.ranges[var]
            hi, lo = (max(hi) if isinstance(hi, tuple) else hi), (min(lo) if isinstance(lo, tuple) else lo)
            n *= max(hi - lo + 1, 0)
        return int(n)

    def stencil_level(self, v) -> int:
        """How many guarded loads (pad, concatenate, dynamic_slice) nest in v's computation
        in this kernel."""
        if self.levels is None:
            self.levels = {}
            for op in self.k.ops:
                lvl = max((self.levels.get(o, 0) for o in op.operands), default=0)
                self.levels[op.results[0]] = lvl + (op.opdef.reindex.index_pieces is not None)
        return self.levels.get(v, 0)

    def decided(self, op, v, amap):
        """(SV, scope) of v where the region decides it without computing it: a select whose
        predicate is known here is the operand it picks, a known range test its value."""
        d = op.opdef
        if d.picks is not None:
            t = self.decide(self.position(op.operands[d.picks], amap))
            if t is not None:
                return self.read_at(op.operands[d.picks + (1 if t else 2)], amap)
        if v.dtype == "bool" and d.position is not None:
            t = self.decide(self.position(v, amap))
            if t is not None:
                return SV("true" if t else "false", "bool"), self.body
        return None

    def needed(self, op, amap):
        """The operands computing op at amap reads (a decided select: the one it picks)."""
        d = op.opdef
        if d.picks is not None:
            t = self.decide(self.position(op.operands[d.picks], amap))
            if t is not None:
                return [op.operands[d.picks + (1 if t else 2)]]
        if op.results[0].dtype == "bool" and d.position is not None and \
                self.decide(self.position(op.results[0], amap)) is not None:
            return []
        return op.operands

    # -- positions and regions (index_sets.py) ---------------------------------------------
    def position(self, v, amap):
        """v at amap as a position (an integer affine in the index variables, or a range
        test of such), else UNKNOWN."""
        key = (v, amap)
        p = self.positions.get(key)
        if p is None:
            p = self.positions[key] = self._position(v, amap)
        return p

    def _position(self, v, amap):
        c = self.splat(v)
        if c is not None:
            if v.dtype in INTS:
                return Pos((), int(c))
            return known(bool(c)) if v.dtype == "bool" else UNKNOWN
        op = v.producer
        if op is None or op not in self.member:
            d = self.devices.of(v)
            return UNKNOWN if d is None else Pos((), d)
        rule = lowering_of(op).position
        return UNKNOWN if rule is None else rule(self, op, v, amap)

    def decide(self, cond):
        """True / False where a range test holds everywhere / nowhere in the current region
        on every device, else None (and the points where it changes are noted, for the
        next generation of the kernel to cut its loops at)."""
        if isinstance(cond, Pos) or cond is UNKNOWN:
            return None
        hit = self.decisions.get(id(cond))
        if hit is not None:
            return hit[1]
        r = decided(truth(cond, self.ranges))
        # (the ranges of the variables a condition names never change once they exist;
        # the condition is kept alive with its answer, so its id is not reused)
        self.decisions[id(cond)] = (cond, r)
        if r is None:
            for t in tests(cond):
                if decided(truth(t, self.ranges)) is not None:
                    continue
                for var, _ in t.pos.terms:
                    key = self.loop_key.get(var)
                    if key is None:
                        continue
                    lo, hi = self.ranges[var]
                    self.breaks[key] |= {b for b in breakpoints(t, var, self.ranges) if lo < b <= hi}
        return r

    def guard(self, guard):
        """A piece's guard (range tests of index expressions) as a condition."""
        cond = known(True)
        for expr, lo, hi in guard:
            cond = cond & InRange(Pos.of(expr), lo, hi)
        return cond

    def guard_value(self, scope, guard):
        """The guard computed per element (an i1 SV), or None where it always holds."""
        b = self.builder(scope)
        acc = None
        for expr, lo, hi in guard:
            t = InRange(Pos.of(expr), lo, hi)
            if self.decide(t):
                continue
            idx = SV(self.index_expr(scope, *expr), "int64")
            amin, amax = self._bounds(expr)
            low = anywhere(each(lambda a: a < lo, amin))
            high = anywhere(each(lambda a: a >= hi, amax))
            for ok in ([b.icmp("sge", idx, b.const(lo, "int64"))] if low else []) + \
                    ([b.icmp("slt", idx, b.const(hi, "int64"))] if high else []):
                acc = ok if acc is None else b.and_(acc, ok)
        return acc

    def _bounds(self, expr):
        return bounds(Pos.of(expr), self.ranges)

    def clamped(self, index, shape):
        """An operand index with each component that may leave [0, n) clamped into it (the
        guarded load of a piece that does not hold there reads a valid element, then
        discards it)."""
        out = []
        for (terms, c), n in zip(index, shape):
            lo, hi = self._bounds((terms, c))
            if not anywhere(each(lambda a, b: a < 0 or b > n - 1, lo, hi)):
                out.append((terms, c))
                continue
            if not terms:
                out.append(((), int(min(max(c, 0), n - 1))))
                continue
            key = (terms, c, n)
            var = self.clamps.get(key)
            if var is None or self.scopes[var].closed:
                scope = self.scope_of(((terms, c),))
                b = self.builder(scope)
                x = SV(self.index_expr(scope, terms, c), "int64")
                var = b.min(b.max(x, b.const(0, "int64")), b.const(n - 1, "int64")).name
                self.clamps[key] = var
                self.scopes[var] = scope
                self.ranges[var] = (each(lambda a: min(max(a, 0), n - 1), lo), each(lambda a: min(max(a, 0), n - 1), hi))
            out.append((((var, 1),), 0))
        return tuple(out)

    def offset(self, op):
        """offset(j, lo, hi): an index variable holding op's scalar operand j clamped to
        [lo, hi], read once (a dynamic slice's start)."""
        def get(j, lo, hi):
            key = (op, j, lo, hi)
            var = self.offsets.get(key)
            if var is not None:
                return var
            x = op.operands[j]
            sv, scope = self.read_at(x, tuple(((), 0) for _ in x.shape))
            b = self.builder(scope)
            if sv.dtype != "int64":
                sv = b.convert(sv, "int64")
            var = b.min(b.max(sv, b.const(lo, "int64")), b.const(hi, "int64")).name
            self.offsets[key] = var
            self.scopes[var] = scope
            d = self.devices.of(x)
            self.ranges[var] = (lo, hi) if d is None else (each(lambda a: min(max(a, lo), hi), d),) * 2
            return var
        return get

    def _emit_operands_first(self, op, amap):
        """Emit the chain of elementwise producers below op (same index map) bottom-up with
        an explicit stack, in the order the recursion would, so that a chain of thousands
        of ops never nests emit() more than a step deep."""
        stack = [(o, False) for o in self.by_reductions(self.needed(op, amap))]
        while stack:
            u, ready = stack.pop()
            hit = self.memo.get((u, amap))
            if (hit is not None and not hit[1].closed) or self.splat(u) is not None:
                continue
            p = u.producer
            if p is None or p not in self.member:
                continue                  # a load, made when its user is
            if p.opdef.family != "elementwise":
                if self.reduction_level(u):
                    self.emit(u, amap)    # its reductions now, in the order by_reductions says
                continue                  # (no deep chain there)
            if ready:
                self.emit(u, amap)
            else:
                stack.append((u, True))
                stack.extend((o, False) for o in self.by_reductions(self.needed(p, amap)))

    def by_reductions(self, operands):
        """Operands in the order to pop them from a stack: the one with the most reductions
        nested in it first, so the reductions outermost in the computation are emitted first
        (softmax's sum before its exp at the divide, so the divide reads the exp the sum
        kept: keep_row)."""
        return sorted(reversed(operands), key=self.reduction_level)

    def reduction_level(self, v) -> int:
        """How many reductions nest in v's computation in this kernel."""
        if self.rlevels is None:
            self.rlevels = {}
            for op in self.k.ops:
                lvl = max((self.rlevels.get(o, 0) for o in op.operands), default=0)
                self.rlevels[op.results[0]] = lvl + (op.opdef.fusion == "reduction")
        return self.rlevels.get(v, 0)

    def storable(self, v, amap):
        """Does this map visit each element of v exactly once (so v can be stored here)?"""
        if self.flat:
            return True
        seen = set()
        for (terms, c), n in zip(amap, v.shape):
            if not terms:
                if c != 0 or n != 1:
                    return False
                continue
            if len(terms) != 1 or c != 0 or terms[0][1] != 1:
                return False
            var = terms[0][0]
            s = self.scopes[var]
            if var in seen or s.var != var or s.full != n:      # (a loop's own variable)
                return False
            seen.add(var)
        return True

    def emit_op(self, op, v, amap):
        """op's result v at amap, as the op's row of the lowering table computes it."""
        emit = lowering_of(op).emit
        if emit is None:
            raise Unsupported(op.name)
        if self.flat and op.opdef.fusion != "elementwise":
            raise AssertionError(f"{op.name} in a flat kernel")
        return emit(self, op, v, amap)

    def rounded(self, scope, x, v):
        """A 2-byte float result, computed in float32, rounded to its dtype per op."""
        if v.dtype in HALFS and x.dtype != "bool":
            return self.builder(scope).round_to(x, v.dtype)
        return x

    def read_at(self, x, sub):
        """Operand x at index map sub (a re-indexing op's result is its operand, re-indexed)."""
        r = self.emit(x, sub)
        return r, self.memo[(x, sub)][1] if (x, sub) in self.memo else self.body

    # -- the kernel -----------------------------------------------------------------------
    def generate(self) -> str:
        root = self.k.root
        shape = (root.size,) if self.flat else root.shape
        self.work = work = max([v.size for op in self.k.ops for v in (*op.operands, *op.results)] + [root.size])
        # (not a float sum or product: split over threads, its order would be the thread
        # count's, and whether the kernel has other outputs)
        red = root.producer
        can_split_reduce = (red.opdef.fusion == "reduction" and len(self.k.outputs) == 1
                            and not self.flat and red.attrs["axes"]
                            and not (red.attrs.get("kind") in ("sum", "prod") and red.result.dtype[0] in "fbc"))
        if self.threads > 1 and work >= PARALLEL_WORK and shape and shape[0] >= 2 * self.threads:
            self.par, self.extent = "rows", shape[0]
        elif self.threads > 1 and work >= PARALLEL_WORK and can_split_reduce and root.size <= 64:
            first = root.producer.operands[0].shape[root.producer.attrs["axes"][0]]
            if first >= 2 * self.threads:
                self.par, self.extent = "reduction", first
                self.split_next_reduce = True
        if self.tile is not None:
            self.nest_tiled(self.body, shape, *self.tile)
        else:
            self.nest(self.body, shape, [])
        # worth the full O3 (unrolling): large, and no short constant loop for LLVM to unroll
        # completely (nested short loops blow code size and compile time up)
        self.big = self.work >= BIG_WORK and min(self.const_extents, default=BIG_LOOP) >= BIG_LOOP
        missing = [v for v in self.k.outputs if v is not root and not self.covered(v)]
        if missing:
            raise Split(missing[0])
        return self.render()

    def nest(self, scope, shape, vars_):
        """The root's loop nest, one copy per region: each dim's range cut where its tests
        change (self.splits), the dims' pieces nested in order (so a row is still visited
        left to right)."""
        d = len(vars_)
        if d == len(shape):
            self.region(vars_)
            return
        key = ("root", d)
        for lo, hi in self.intervals(key, shape[d]):
            s = self.open_loop(scope, shape[d], lo, hi, threaded=d == 0 and self.par == "rows", key=key)
            self.root_dim[s.var] = d
            self.nest(s, shape, vars_ + [s.var])
            self.close_loop(s)

    def nest_tiled(self, scope, shape, p, q):
        """The root's loop nest with dims p and q (the last) run in TILE x TILE blocks: the
        dims in order, p and q as loops over their tiles' starts, then the loops inside a
        tile, q innermost. A transposed operand read along q is then read TILE rows at a
        time, whose lines stay in L1 until the next TILE elements of each are used (one
        region: kernel_ir tiles only nests its tests do not cut)."""
        loops, tiles, vars_ = [], {}, [None] * len(shape)
        for d in range(len(shape)):
            threaded = d == 0 and self.par == "rows"
            s = self.open_loop(scope, shape[d], threaded=threaded, key=None if d in (p, q) else ("root", d))
            if d in (p, q):
                s.step, tiles[d] = TILE, s
            else:
                vars_[d] = s.var
                self.root_dim[s.var] = d
            loops.append(s)
            scope = s
        for d in (p, q):
            t = tiles[d]
            b = self.builder(scope)
            end = b.min(b.add(SV(t.var, "int64"), b.const(TILE, "int64")), SV(t.end, "int64")).name
            s = self.open_loop(scope, shape[d], key=("root", d))
            s.start, s.end = t.var, end
            vars_[d] = s.var
            self.root_dim[s.var] = d
            loops.append(s)
            scope = s
        self.region(vars_)
        for s in reversed(loops):
            self.close_loop(s)

    def region(self, vars_):
        """The root (and the outputs on the way) at the identity map of one region."""
        root = self.k.root
        amap = _identity(vars_)
        x = self.emit(root, amap)
        if self.par == "reduction":
            if self.tid_offset is None:
                self.tid_offset = self.fresh()
                self.body.insert(f"  {self.tid_offset} = mul i64 %tid, {max(root.size, 1)}")
            self.store(self.scope_of(amap), root, x, amap, base_offset=self.tid_offset)
        else:
            self.store(self.scope_of(amap), root, x, amap)

    def render(self, in_place=None) -> str:
        """The function text. `in_place` {output: input}: outputs the memory plan writes into
        an input's buffer. The signature stays (both pointers are passed, and are equal), but
        the body reads and writes such a buffer through the input's pointer only, so LLVM
        sees one buffer (noalias holds) and the same-index dependence in it."""
        params = [f"ptr noalias {p}" for p in self.params.values()]
        lines = [f"define void @{self.name}({', '.join(params + ['i64 %start', 'i64 %end', 'i64 %tid'])}) #0 {{",
                 "entry:"]
        lines += self.allocas
        self._render_scope(self.body, lines)
        lines += ["  ret void", "}"]
        text = "\n".join(lines)
        for r, x in (in_place or {}).items():
            text = text.replace(f"ptr {self.params[r]}, i64", f"ptr {self.params[x]}, i64")
        return text

    def _render_scope(self, scope, out):
        for item in scope.items:
            if isinstance(item, str):
                out.append(item)
                continue
            v, lbl = item.var, item.var[1:]
            out += [f"  store i64 {item.start}, ptr {v}.a", f"  br label %{lbl}.h", f"{lbl}.h:",
                    f"  {v} = load i64, ptr {v}.a", f"  {v}.c = icmp slt i64 {v}, {item.end}",
                    f"  br i1 {v}.c, label %{lbl}.b, label %{lbl}.x", f"{lbl}.b:"]
            self._render_scope(item, out)
            out += [f"  {v}.n = add i64 {v}, {item.step}", f"  store i64 {v}.n, ptr {v}.a", f"  br label %{lbl}.h",
                    f"{lbl}.x:"]


GENERATIONS = 4         # a kernel is generated at most this often while its regions settle


def kernel_ir(kernel: Kernel, name: str, threads: int, mesh=None):
    """(function IR text, declarations, codegen) for one kernel; raises Split or Unsupported.

    A first generation runs each loop over its whole range and notes where the tests it
    could not decide change; the next one cuts the loops there, and so on until no test
    asks for a new cut (deciding an outer test exposes the ones inside it)."""
    devices = DeviceValues(mesh, splat)
    splits, frozen = {}, set()
    for _ in range(GENERATIONS):
        cg = KernelCodegen(kernel, name, threads, devices, splits)
        text = cg.generate()
        new = {k: splits.get(k, set()) | b for k, b in cg.breaks.items() if k not in frozen and b - splits.get(k, set())}
        if not new:
            break
        wanted = {**splits, **new}
        splits = capped(wanted, cg.extents, [[k for k in cg.extents if k[0] == "root"]])
        frozen |= {k for k in wanted if splits[k] != wanted[k]}
    tile = tiling(kernel, cg, splits)
    if tile is not None:
        cg = KernelCodegen(kernel, name, threads, devices, splits, tile)
        text = cg.generate()
    if cg.recomputed:              # (left out of the code: it was a stand-in)
        raise Split(cg.recomputed[0])
    return text, cg.decls, cg


def tiling(kernel, cg, splits):
    """(p, q): the dims to run the root's nest in tiles over (KernelCodegen.nest_tiled), or
    None: the nest reads an operand transposed (along its last dim q where the operand is
    contiguous along p), both dims are large, the nest is one region along them, and no
    reduction is hoisted into it (a tile would compute a row's reduction once per tile)."""
    if cg.transposed is None or any(op.opdef.fusion == "reduction" for op in kernel.ops):
        return None
    p, q, stride = cg.transposed
    shape = kernel.root.shape
    if min(shape[p], shape[q]) < TILE_MIN or any(len(cut(splits.get(("root", d), ()), shape[d])) != 1 for d in (p, q)):
        return None
    if shape[q] < TILE_ROWS and stride % SET_STRIDE:
        return None
    return p, q
