"""The cost model of a step, in seconds per device: one for the whole system.

A step costs its kernels (a roofline: a fused kernel takes the longer of its flops at the
machine's compute rate and its bytes at the machine's memory bandwidth; a matrix product's
compute counts the elements of its operands and result too, Machine.product_element) plus its
collectives (an alpha-beta model: a collective costs the latency of each of its rounds plus
the bytes a device receives at the link's bandwidth). The link depends on where the group
of ranks lies: within one host (shared memory) or across hosts (the network).

Rates are plain numbers in a `Machine` and a `Network`. They are measured once per machine
(`spmd doctor --calibrate`, which stores them) or given (`spmd.jit(..., network=...)`,
`spmd.plan(..., network=...)`); where neither, `Machine()` and `Network()` hold modest
defaults for a current x86 server. This module only computes with them: who measures and
where they are kept is the caller's business (sharding/ imports the IR alone).

Left out: on the local transport with more ranks than cores, where the hosts' native
segments are separated by collectives the communicator runs from Python (those the
native code does not cover: a reduction its fold loops do not, an operand it cannot
copy), the device threads a rendezvous wakes often wait for the core another host's
native run holds, so the hosts' next segments run partly one after the
other rather than side by side. The wait grows with the segment that holds the core, up
to the time the system takes to move the waiting thread to a free core, so no rate per
collective or per segment prices it; such steps run up to about 1.7x the prediction
(benchmarks/step_breakdown.py --waits measures the wake-ups and the threads' time
runnable without a core).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True)
class Link:
    """One kind of connection between ranks: `latency` in seconds per round of a
    collective, `bandwidth` in bytes per second one device receives. `rendezvous`: the
    seconds every collective costs besides its rounds and bytes where each is a call the
    ranks make from Python (MPI's: the communicator's checks and buffers, the MPI call,
    and, with more ranks than cores, each rank's process scheduled in turn); 0 where the
    ranks meet in their native code (the local transport's threads, which run every
    collective there: what the native code does not cover is priced as native).
    `handoff`: the seconds more a call costs whose ranks run on threads of their own
    (the local transport's device threads: handing each its part and waiting for them
    all), which a program pays that exchanges anything or makes more than `solo_bytes`
    a rank (the local transport runs a smaller program that exchanges nothing on the
    caller's thread, a rank after another, at Machine.step's cost); 0 where every rank
    is a process of its own (MPI). `gather_bandwidth`: bytes a second a process receives
    where the runtime gathers a whole array from the processes (writing a numpy argument
    back, reading an spmd.Array: one MPI Allgather called directly, which moves a byte
    faster than a program's collectives); 0: `bandwidth`. `slowdown`: how many times as
    long the ranks' own work runs as the machine's rates say, where each rank is a
    process (Machine.crowded: measured under mpiexec with kernels between the
    collectives; with more ranks than cores the processes take turns on them, and one
    that waits in a collective polls on a core the others need); 1: as they say."""
    latency: float = 5e-6
    bandwidth: float = 5e9
    rendezvous: float = 0.0
    handoff: float = 0.0
    solo_bytes: float = 0.0
    gather_bandwidth: float = 0.0
    slowdown: float = 1.0

    def seconds(self, nbytes, rounds=1) -> float:
        return rounds * self.latency + max(float(nbytes), 0.0) / self.bandwidth

    def whole_gathers(self) -> "Link":
        """This link as the runtime's gathers of whole arrays meet it (gather_bandwidth)."""
        return replace(self, bandwidth=self.gather_bandwidth) if self.gather_bandwidth > 0 else self


@dataclass(frozen=True)
class Network:
    """How ranks are connected: `within` a host and `across` hosts, and how many ranks
    share a host (`ranks_per_host`; None: all ranks are on one host). Ranks are placed on
    hosts in order (ranks 0..R-1 on the first host), as mpiexec, srun and `spmd run` do."""
    within: Link = field(default_factory=Link)
    across: Link = field(default_factory=lambda: Link(latency=20e-6, bandwidth=1.2e9))
    ranks_per_host: int | None = None

    def link(self, mesh, axes) -> Link:
        """The link a collective over mesh `axes` uses: `across` when some group of those
        axes holds ranks of more than one host."""
        if self.ranks_per_host is None or not axes:
            return self.within
        per = self.ranks_per_host
        devices = np.asarray(mesh.devices)
        moved = [mesh.axis_names.index(a) for a in axes]
        groups = np.moveaxis(devices, moved, list(range(devices.ndim - len(moved), devices.ndim)))
        groups = groups.reshape(-1, int(np.prod([mesh.shape[i] for i in moved])))
        hosts = groups // per
        return self.across if bool((hosts != hosts[:, :1]).any()) else self.within


@dataclass(frozen=True)
class Machine:
    """One device's rates: `flops` per second (float32 multiply-adds count two) in a
    kernel that computes (a matrix product, besides its elements at `product_element`),
    `bandwidth` in bytes per second a streaming kernel reads and writes, `call` seconds
    a kernel costs however small (its launch, the wait for the next), and `step` the
    fixed seconds of running a program once (argument checks, the hand-off to the devices).
    `argument`: seconds a call spends per byte of an argument given as a numpy array
    (copied into the devices' shards), and per byte of the devices' private copies of
    one the program writes (private_copy_bytes: as many bytes as the devices' shards);
    `written`: more seconds per byte of one the program writes (the new value gathered
    and copied back into the caller's array, as numpy updates it in place). None:
    copies at `bandwidth` (a copy reads and writes each byte: one copy placing, two
    more writing back)."""
    flops: float = 20e9
    bandwidth: float = 8e9
    call: float = 1e-6
    step: float = 50e-6
    argument: float | None = None
    written: float | None = None
    # a kernel that moves at most `cache_bytes` (a device's share of the last-level cache)
    # streams at `cache_bandwidth`: its data stays in the cache between kernels, where
    # `bandwidth` (measured streaming arrays far larger than the cache) is memory's; 0:
    # one rate for all
    cache_bytes: float = 0.0
    cache_bandwidth: float | None = None
    # a call's seconds per argument and result leaf beyond the one of each that `step`
    # was measured with (each rank checks, addresses and returns its buffers from Python,
    # and the caller makes an spmd.Array of each result: a training step's parameters
    # and optimizer state are many leaves); `placing`: more seconds per argument given as
    # a numpy array (splitting it into the devices' shards, besides its bytes at `argument`)
    leaf: float = 0.0
    placing: float = 0.0
    # seconds a matrix product spends per element of its operands and result besides its
    # flops at `flops`: BLAS packs its operands into panels and loads and stores its
    # result's tiles, which a product with few flops per element (a 64-wide product, an
    # attention head's) cannot hide: such a product runs at about half of `flops`
    product_element: float = 0.0
    # seconds a call spends per byte of the results a device makes, besides the kernels
    # that compute them: a call's results are new buffers, which the system maps and
    # clears as they are first written (the arena of temporaries is the program's own,
    # written before); a kernel's price of its bytes holds memory already in use
    output: float = 0.0
    # seconds of one element-op of a kernel that is not a matrix product: an element of a
    # float32 add in a fused kernel whose data the cache holds (the ops' `flops` count
    # element-ops: an add one, a float64 one two, exp scores of them, ir/ops/elementwise.py).
    # Such a kernel's code runs far below a matrix product's rate (no register blocking, a
    # vector's lanes at most): a kernel of many ops an element (a stencil's update, Game of
    # Life's rules) is bound by them, not by its bytes. 0: at `flops`
    element: float = 0.0

    def crowded(self, slowdown) -> "Machine":
        """This machine where each device is a process of its own (MPI's ranks), whose
        work runs `slowdown` times as long as the local calibration's devices-at-once
        rates say (Link.slowdown): its kernels' element-ops, bytes and fixed costs, and
        a call's own seconds (its step, leaves, numpy arguments and new buffers). A
        matrix product's rates stay: the slowdown is measured on streaming kernels, and
        training steps, mostly products, run under MPI about as the products' own rates
        say (benchmarks/auto.py --mpi: 0.8-1.0 of the prediction with them kept; their
        compute slowed too would put train_gpt's rows at about 1.3-1.4)."""
        if slowdown == 1.0:
            return self
        f = float(slowdown)
        element = self.element if self.element > 0.0 else 1.0 / self.flops     # (element_seconds' unit)
        return replace(self, element=element * f, bandwidth=self.bandwidth / f,
                       cache_bandwidth=None if self.cache_bandwidth is None else self.cache_bandwidth / f,
                       call=self.call * f, step=self.step * f, leaf=self.leaf * f, placing=self.placing * f,
                       output=self.output * f, argument=self.argument_per_byte() * f,
                       written=self.written_per_byte() * f)

    def argument_per_byte(self) -> float:
        """Seconds a numpy argument's byte costs placed (`argument`; None: a copy at
        `bandwidth`, which reads and writes it)."""
        return self.argument if self.argument is not None else 2.0 / self.bandwidth

    def written_per_byte(self) -> float:
        """Seconds more a byte of a written numpy argument costs, written back (`written`;
        None: two more copies at `bandwidth`)."""
        return self.written if self.written is not None else 4.0 / self.bandwidth

    def element_seconds(self, ops) -> float:
        """Seconds of `ops` element-ops (the flops of an op that is not a matrix product)."""
        return float(ops) * self.element if self.element > 0.0 else float(ops) / self.flops

    def compute_seconds(self, op_flops, product_elements, product) -> float:
        """An op's compute seconds: a matrix product's (`product`) at product_seconds, any
        other op's flops as element-ops."""
        if product:
            return self.product_seconds(op_flops, product_elements)
        return self.element_seconds(op_flops)

    def stream_seconds(self, near, far) -> float:
        """Seconds to move `near` bytes the cache holds (at `cache_bandwidth`) and `far`
        bytes from memory (at `bandwidth`)."""
        fast = self.bandwidth if self.cache_bandwidth is None else max(self.cache_bandwidth, self.bandwidth)
        return float(near) / fast + float(far) / self.bandwidth

    def bandwidth_for(self, nbytes) -> float:
        if self.cache_bandwidth is not None and nbytes <= self.cache_bytes:
            return max(self.cache_bandwidth, self.bandwidth)
        return self.bandwidth

    def product_seconds(self, flops, elements) -> float:
        """A matrix product's compute seconds: its flops at `flops` and its operands'
        and result's `elements` at `product_element` each."""
        return float(flops) / self.flops + float(elements) * self.product_element

    def kernel_seconds(self, flops, nbytes) -> float:
        """A kernel's seconds: its launch (`call`, which a small kernel cannot go below)
        and the longer of its element-ops (`flops`: not a matrix product's) and its bytes
        at their rates."""
        return self.call + max(self.element_seconds(flops), float(nbytes) / self.bandwidth_for(nbytes))

    def numpy_argument_seconds(self, nbytes, written=False, private=0.0) -> float:
        """Seconds a call spends on a numpy argument of `nbytes` (`written`: the program
        writes it) besides the program's run: `placing`, and its bytes. `private`: bytes
        more copied before the run (private_copy_bytes: the devices' own buffers of a
        written argument whose shards have replicas), each at the rate of placing one."""
        per = self.argument_per_byte()
        t = self.placing + float(nbytes) * per + float(private) * per
        if written:
            t += float(nbytes) * self.written_per_byte()
        return t


def private_copy_bytes(shape, itemsize, sharding, devices) -> float:
    """Bytes a call copies, before the run, for an argument given as numpy that the
    program writes (or is donated), placed by `sharding` on the `devices` of this
    process: each device writes its own copy of its shard (runtime/execute.py's
    _private: placing shares one buffer among a shard's replicas), so the bytes are the
    devices' shards, padding included: the array once where each shard is one device's
    (2-D blocks on a 2x2 mesh), twice for rows on that mesh (each half on two devices),
    four times replicated."""
    return float(devices) * float(np.prod(sharding.local_shape(shape), dtype=np.float64)) * itemsize


def gathered_back_bytes(shape, itemsize, sharding, devices, local) -> float:
    """Bytes each process receives, under a runtime of several processes, when a numpy
    argument the program writes gets its new value back (numpy updates the caller's
    array in place, and every process holds one): every device's shard, padding included,
    but those of its own `local` devices (runtime all_shards, an all_gather over the
    processes); 0 where every device holds the whole value (each process reads its own)."""
    if all(e is None for e in sharding.spec):
        return 0.0
    shard = float(np.prod(sharding.local_shape(shape), dtype=np.float64)) * itemsize
    return float(devices - local) * shard


def rounds(kind: str, group_size: int) -> int:
    """Latency rounds a collective of `kind` over `group_size` ranks takes (a ring for the
    gathers and reductions, as MPI's large-message algorithms; a tree's log2 rounds for
    small ones would be fewer, which the latency term cannot tell apart at these sizes)."""
    if group_size <= 1 or kind == "slice" or kind == "make_partial":
        return 0
    if kind == "all_reduce":
        return 2 * math.ceil(math.log2(group_size))
    if kind == "permute" or kind == "collective_permute":
        return 1
    return math.ceil(math.log2(group_size))


def collective_seconds(kind, nbytes, group_size, link: Link) -> float:
    """Seconds one collective of `kind` takes, a device receiving `nbytes`: its rounds,
    its bytes, and the link's rendezvous (a call from Python, where they are)."""
    r = rounds(kind, group_size)
    if r == 0 and nbytes <= 0:
        return 0.0
    return link.seconds(nbytes, r) + (link.rendezvous if r > 0 else 0.0)


FUSED = ("elementwise", "reindex")


def fuses(op) -> bool:
    """Does `op` run inside a fused kernel (elementwise math, slices, pads, transposes,
    broadcasts), so that it moves only what enters and leaves the kernel?"""
    return op.opdef.fusion in FUSED


def is_product(op) -> bool:
    """Is `op` a matrix product (a BLAS call: Machine.product_element)?"""
    return op.opdef.family == "dot"


def product_elements(op, sizes=None) -> float:
    """Elements of the operands and results of `op` that a matrix product packs or
    stores (Machine.product_element), 0 for any other op. `sizes`: the operands' then
    the results' element counts (a device's shards), else their own."""
    if not is_product(op):
        return 0.0
    if sizes is None:
        sizes = [o.size for o in op.operands] + [r.size for r in op.results]
    return float(sum(sizes))


def moved_values(op, read_by_unfused, outputs, first_reads=None) -> tuple:
    """(operands, results) of `op` whose bytes go through memory: all of them for an op
    that does not fuse; for one that fuses, the operands made outside any fused kernel
    (arguments, contractions, reductions, collectives) and the results an unfused op or
    the program's outputs read. `read_by_unfused`: Values some unfused op reads.
    `first_reads` (first_fused_reads): such an operand counts at its first fused reader
    only, once."""
    if not fuses(op):
        return list(op.operands), list(op.results)
    ins = [o for o in op.operands if o.producer is None or not fuses(o.producer)]
    if first_reads is not None:
        ins = [o for i, o in enumerate(ins) if first_reads.get(o) is op and o not in ins[:i]]
    outs = [r for r in op.results if r in read_by_unfused or r in outputs]
    return ins, outs


def first_fused_reads(graph, stored=frozenset(), skip=frozenset()) -> dict:
    """{Value: the first fused op that reads it} of the values made outside fused
    kernels, and of `stored` ones (a fused kernel's results stored for others). A fused
    kernel reads each of its inputs once however many of its ops use it (p * ap,
    x + alpha * p and r + beta * p read p once between them); the fused readers of one
    value are taken to share a kernel, so its bytes count once. Readers in `skip` (views
    read in place) do not count."""
    out = {}
    for op in graph.ops:
        if fuses(op) and op not in skip:
            for o in op.operands:
                if (o in stored or o.producer is None or not fuses(o.producer)) and o not in out:
                    out[o] = op
    return out


def bucketed_values(graph) -> set:
    """Values from which only fused ops lead on (to the outputs, or nowhere): a training
    step's gradients, read by the optimizer's elementwise update alone. Their all-reduces
    depend on no other's result, so the compiler's combine pass (compiler/passes/
    combine.py) buckets those over the same axes into a few: each pays its bytes, and the
    latency of a round is paid once per bucket, not per value."""
    consumers = {}
    for op in graph.ops:
        for o in op.operands:
            consumers.setdefault(o, []).append(op)
    out = set()
    for op in reversed(graph.ops):              # (consumers before producers)
        for r in op.results:
            if all(fuses(c) and all(x in out for x in c.results) for c in consumers.get(r, ())):
                out.add(r)
    return out
