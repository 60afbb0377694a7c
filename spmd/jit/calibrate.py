"""`spmd doctor --calibrate` (`python -m spmd.jit.calibrate`): this machine's rates for the
cost model, measured with spmd's own compiled programs and stored for every later process
(rates.py reads them). It runs in a process of its own: it starts local devices.

    compute     float32 matrix products on one device, in chains of layers each of
                which scales its product's result (as a network's activations read
                them), of large square products and of thin ones (16, 32 and 64
                columns: attention heads' widths): flops per second (`flops`) and the
                seconds a product spends per element of its operands and result
                besides (`product_element`: packing them for BLAS and storing the
                result's tiles), the products' seconds (a layer's, less the model's
                seconds of its scale's kernel) fitted for both
    element     a fused kernel of many float32 adds (a tree of them over four arrays the
                cache holds): the seconds of an add's element (`element`, the unit of
                the flops of every op but a matrix product: ir/ops/elementwise.py), a
                kernel of 9 layers of adds against one of one
    bandwidth   a fused streaming kernel (x * 0.5 + y, its result carried) run in a loop
                of a program on one device: bytes read and written per second (the
                loop's steps against one step, so neither a call's fixed cost nor the
                copy of a result back into numpy counts: a kernel inside a program pays
                neither)
    step        the fixed seconds of a jitted call of a tiny program on one device, and
                on the local devices (step_devices)
    call        a kernel's fixed seconds (a chain of tiny matrix products), on one device
                and on the local devices (call_devices)
    cache_*     the cache a streaming loop's data stays in (cache_capacity's measure),
                and a device's share of it with the local devices running
                (cache_bytes: over the devices); the rate of a streaming kernel whose
                arrays fit it, in a loop as `bandwidth`, on one device
                (cache_bandwidth) and on the local devices at once
                (cache_bandwidth_devices)
    output      seconds a call spends per byte of the results a device makes
                (output_devices: their new buffers, first written), besides the model's
                price of the kernels that write them: a program of two large results
                against one of one
    leaf        seconds a call spends per argument and result leaf (leaf_devices: a
                tiny program of many leaves against one of one, their kernels' `call`
                taken off), and per argument given as numpy more (`placing`: splitting
                it into shards, besides its bytes)
    argument    seconds per byte a call spends on an argument given as numpy (placed on
                the local devices, or the devices' private copies of one written),
                `written_back` more per byte where the program writes it (copied back
                into the caller's array): a tiny program called on numpy and on placed
                arrays, apart
    *_devices   compute and bandwidth again with every local device running the kernel
                at once, each on its own block (flops_devices, bandwidth_devices): what
                a device gets while the others compute too (the devices share the
                cores); element_devices is `element` times the devices a core holds
                (shared_cores)
    link        on the local transport's devices (threads of this process, `devices` of
                them): a chain of dependent all_reduces, small (its latency per round)
                and large (the bytes a device receives per second), which price every
                collective there (the native code runs all_reduce, all_gather,
                reduce_scatter, all_to_all and collective_permute between the threads)
    mpi link    run under mpiexec (`mpiexec -n 4 spmd doctor --calibrate`): the same
                chain over the MPI ranks, and a chain of small all_gathers besides,
                which part the seconds of a round from those every collective costs as
                a call from Python (`rendezvous`, where no machine is stored for the
                chains below); an spmd.Array read whole, large against small, every
                process reading at once (`gather_bandwidth`: the runtime's gather of a
                whole array, MPI's Allgather called directly, which moves a byte
                faster than the programs' collectives); and chains of a kernel and a
                collective (all_reduces, halo exchanges) every process runs at once
                (measure_crowding): the `rendezvous` a collective costs between
                kernels, against the stored machine, and the `slowdown` of the
                processes' work there; stored beside the rest as networks.mpi; the
                model takes it for programs run under MPI (processes on one host
                exchange through MPI and poll while they wait: on a host with fewer
                cores than ranks, far slower than the local transport's threads)

Each figure is the fast end of a sample of runs (fast(): a low quantile), taken after a
warm-up, the runs of the programs it compares interleaved: a shared machine's other work
only slows a run, so two calibrations, under different loads, agree on this machine's
own rates (the load a program meets is not the model's). The whole takes some seconds
(`quick=True`: smaller sizes, for tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from ..sharding.cost_model import Machine, private_copy_bytes
from ..runtime.current_runtime import get_runtime
from ..runtime.cores import local_cores
from .rates import path


# the quantile of a sample of timings a figure takes (fast): a load on a shared machine
# only slows a run, so the sample's fast end is the machine's own time; not its fastest
# run alone, which one timer's hiccup would decide
FAST = 0.2


# seconds each of calibrate's comparisons samples for at least, and the most rounds it runs
SAMPLING = 0.15
MAX_ROUNDS = 400


def fast(ts, q=FAST) -> float:
    """The low quantile `q` of timings `ts` (the run at that rank of the sorted sample): the
    runs a burst of other work slowed, however many below 1 - q of them, do not move it,
    where they take a median with them once they are half."""
    s = sorted(ts)
    return s[int(q * (len(s) - 1))]


def _result(out):
    np.asarray(out.numpy() if hasattr(out, "numpy") else out)


def timed(calls, runs, seconds=SAMPLING) -> list:
    """fast() seconds of each (fn, args) of `calls`, after a warm-up of each: rounds of one
    run of each in turn, so that all of them see the same load (their differences, which
    the figures are, then hold the programs' own costs, not a change of load); `runs`
    rounds at least, and more while the rounds have taken less than `seconds` (up to
    MAX_ROUNDS): a program of a millisecond gets hundreds of runs, whose fast end a
    shared machine's bursts of load do not reach."""
    for fn, args in calls:
        _result(fn(*args))
    ts = [[] for _ in calls]
    start = time.perf_counter()
    while len(ts[0]) < runs or (len(ts[0]) < MAX_ROUNDS and _any_process(time.perf_counter() - start < seconds)):
        for (fn, args), got in zip(calls, ts):
            t0 = time.perf_counter()
            _result(fn(*args))
            got.append(time.perf_counter() - t0)
    return [fast(t) for t in ts]


def _any_process(want) -> bool:
    """Does any process of the run want another round? Under mpiexec the programs timed
    are collectives over every process, so all must run the same rounds: a process
    whose clock passed the sampling time a round before another's would leave it
    waiting in a collective nobody else enters."""
    from ..runtime.current_runtime import started
    rt = started()
    if rt is None or rt.process_count() <= 1:
        return want
    return any(b == b"1" for b in rt.allgather_bytes(b"1" if want else b"0", "calibrating: another round?"))


def _seconds(fn, args, runs, seconds=SAMPLING):
    return timed([(fn, args)], runs, seconds)[0]


def _chain(k):
    def f(x):
        for _ in range(k):
            x = x + x.sum(axis=0) * 1e-6
        return x
    return f


def measure(devices=4, quick=False) -> dict:
    import spmd
    runs = 3 if quick else 7
    n = 256 if quick else 512
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    thin = {c: (np.ones((n, c), np.float32), rng.standard_normal((c, c)).astype(np.float32)) for c in THIN}
    m = (1 << 18) if quick else (1 << 23)
    x = np.ones(m, np.float32)
    bandwidth = 3.0 * m * 4 / _streaming_seconds(lambda k: spmd.jit(_stream(k)), (x, x), runs, 9)
    tiny = np.ones(4, np.float32)
    step = _seconds(spmd.jit(lambda x: x + 1.0), (tiny,), runs * 2)
    small = np.eye(8, dtype=np.float32)
    call = _kernel_seconds(lambda k: spmd.jit(_dots(k)), (small, small), runs)
    alone = Machine(bandwidth=bandwidth, call=call)
    quad = [rng.standard_normal(1 << 15).astype(np.float32) for _ in range(4)]
    element_op = element_op_seconds(lambda k: spmd.jit(adds(k)), quad, quad[0].size, runs)
    flops, element = product_rates(n, *_products_seconds(
        lambda k: spmd.jit(_layers(k, n)), (a, a), lambda k, c: spmd.jit(_layers(k, c)), thin,
        runs, alone, n))
    out = {"machine": {"flops": flops, "product_element": element, "bandwidth": bandwidth, "step": step,
                       "call": call, "element": element_op}, "devices": devices,
           "transport": "local", "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    cache = cache_capacity(last_level_cache(), runs)
    if cache:
        out["machine"]["cache_capacity"] = cache
        out["machine"]["cache_bandwidth"] = _cache_bandwidth(cache, None, runs)
    if devices > 1:
        spmd.init(backend="local", num_devices=devices)
        mesh = spmd.Mesh((devices,), ("x",))
        row, whole = mesh.sharding("x", None), mesh.sharding(None, None)
        tiny = spmd.device_put(np.ones((devices, 4), np.float32), row)
        out["machine"]["step_devices"] = _seconds(
            spmd.jit(lambda x: x + 1.0, in_shardings=row, out_shardings=row), (tiny,), runs * 2)
        flat = mesh.sharding("x")
        xs = spmd.device_put(np.ones(m * devices, np.float32), flat)
        t = _streaming_seconds(lambda k: spmd.jit(_stream(k), in_shardings=(flat, flat), out_shardings=flat),
                               (xs, xs), runs, 9)
        out["machine"]["bandwidth_devices"] = 3.0 * m * 4 / t
        out["machine"].update(_numpy_arguments(devices, row, (1 << 12) if quick else (1 << 15), runs))
        out["machine"]["element_devices"] = element_op * shared_cores(devices, local_cores())
        rows8 = spmd.device_put(np.tile(small, (devices, 1)), row)
        whole8 = spmd.device_put(small, whole)
        out["machine"]["call_devices"] = _kernel_seconds(
            lambda k: spmd.jit(_dots(k), in_shardings=(row, whole), out_shardings=row), (rows8, whole8), runs)
        out["machine"].update(_leaves(row, out["machine"]["call_devices"], 9 if quick else 33, runs))
        if cache:
            out["machine"]["cache_bytes"] = cache / devices
            # (the faster of two samples: a burst of load on a shared host halved one
            # sample in four on a 2-core VM, and never doubles one)
            out["machine"]["cache_bandwidth_devices"] = max(_cache_bandwidth(cache / devices, flat, runs)
                                                            for _ in range(2))
        several = Machine(bandwidth=out["machine"]["bandwidth_devices"], call=out["machine"]["call_devices"],
                          cache_bytes=out["machine"].get("cache_bytes", 0.0),
                          cache_bandwidth=out["machine"].get("cache_bandwidth_devices"),
                          step=out["machine"]["step_devices"], leaf=out["machine"]["leaf_devices"])
        out["machine"]["output_devices"] = _outputs(flat, (1 << 16) if quick else (1 << 20), several, runs)
        rows = spmd.device_put(np.tile(a, (devices, 1)), row)
        thins = {c: (spmd.device_put(np.ones((devices * n, c), np.float32), row), spmd.device_put(thin[c][1], whole))
                 for c in THIN}
        layers = (lambda k: spmd.jit(_layers(k, n), in_shardings=(row, whole), out_shardings=row),
                  (rows, spmd.device_put(a, whole)),
                  lambda k, c: spmd.jit(_layers(k, c), in_shardings=(row, whole), out_shardings=row),
                  thins, runs, several, n)
        first = _products_seconds(*layers)
        out["network"] = {"within": measure_link(spmd.Mesh((devices,), ("x",)), quick, runs)}
        # the products again, seconds later, the faster of the two samples of each: with
        # more devices than cores, how the system schedules the devices' threads can slow
        # a whole sample (the rate halves), and does not last
        again = _products_seconds(*layers)
        got = (min(first[0], again[0]), [min(x, y) for x, y in zip(first[1], again[1])])
        out["machine"]["flops_devices"], out["machine"]["product_element_devices"] = product_rates(n, *got)
    return out


def measure_link(mesh, quick=False, runs=7, threads=True, crowd=None) -> dict:
    """{latency, bandwidth} of the started runtime's collectives over the 1-D `mesh`: a
    chain of 17 dependent all_reduces against one, small (its latency per round) and
    large (the bytes a device receives per second); sixteen differences, not eight, so
    that the load a shared machine carries moves the figure less. `threads` (the local
    transport's devices): also the handoff to the devices' threads; else (MPI's
    processes, whose every collective is a call from Python) the seconds of such a call
    apart from its rounds (part_call_and_rounds: Link.rendezvous), then the rendezvous
    and slowdown between kernels (measure_crowding; `crowd`: those figures, measured
    before)."""
    import spmd
    devices = mesh.size
    row = mesh.sharding("x", None)
    rounds = 2 * int(np.ceil(np.log2(devices)))
    # (MPI's processes, whose every collective is a call from Python: the small chain's
    # runs interleaved with a chain of small all_gathers', which part a call's seconds
    # from a round's: part_call_and_rounds)
    parted = not threads and devices > 1
    per = {}
    for cols in (16, (1 << 14) if quick else (1 << 18)):
        xs = spmd.device_put(np.ones((devices, cols), np.float32), row)
        calls = [(spmd.jit(_chain(k), in_shardings=row, out_shardings=row), (xs,)) for k in (1, 17)]
        if parted and cols == 16:
            whole = mesh.sharding(None, None)
            calls += [(spmd.jit(_gathers(k, row, whole), in_shardings=row, out_shardings=row), (xs,))
                      for k in (1, 17)]
        t = timed(calls, runs)
        per[cols] = max((t[1] - t[0]) / 16, 1e-7)
        if cols == 16:
            small_t1, gather = t[0], max((t[3] - t[2]) / 16, 0.0) if parted else None
    small, large = sorted(per)
    received = 2 * (devices - 1) / devices * large * 4
    latency = per[small] / rounds
    out = {"latency": latency, "bandwidth": received / max(per[large] - per[small], 1e-7)}
    if parted:
        out.update(part_call_and_rounds(per[small], gather, rounds // 2))
        out["gather_bandwidth"] = _gather_bandwidth(row, devices, large, runs)
        out.update(crowd if crowd is not None else measure_crowding(mesh, out, quick))
    if threads and devices > 1:
        xs = spmd.device_put(np.ones((devices, 16), np.float32), row)
        # the chain of one small all_reduce against a program as small that exchanges
        # nothing (its ranks run in turn on this thread): the devices' threads' handoff
        t0, again = timed([(spmd.jit(lambda x: x * 1.0001, in_shardings=row, out_shardings=row), (xs,)),
                           (spmd.jit(_chain(1), in_shardings=row, out_shardings=row), (xs,))], runs)
        small_t1 = min(small_t1, again)
        out["handoff"] = max(small_t1 - t0 - rounds * latency, 0.0)
        out["solo_bytes"] = float(get_runtime().solo_bytes)
    return out


# columns of the chains measure_crowding compares, 64 rows a device: a kernel between
# two collectives of a few microseconds, and one of about a millisecond
CROWD_COLS = (256, 8192)


def measure_crowding(mesh, link, quick=False, runs=9, windows=3) -> dict:
    """{rendezvous, slowdown} of MPI's processes (Link.rendezvous, Link.slowdown) as a
    program meets them, with kernels between its collectives: where the ranks are
    more than the cores they take turns on them, and one that waits in a collective
    polls on a core another needs, so a collective costs more there than in a chain of
    collectives alone, and the work between them runs slower than the local devices'
    rates say (a switch of processes refetches a core's data). Chains of a kernel and
    a collective, run by every process at once (throughput, the programs' rounds
    interleaved), against the model's seconds of each with the measured `link`'s
    bandwidth (no latency, no rendezvous) and the stored machine: all_reduces of a
    scalar after kernels small and large (CROWD_COLS) part the slowdown, and halo
    exchanges (a row to the next rank, a stencil's collective) after the small kernel
    the rendezvous; each figure the median of `windows` such measures (a spell of slow
    turns can outlast one). {} where no machine is stored."""
    import spmd
    from .rates import machine_from, stored
    from ..sharding.cost_model import Link, Network
    m = (stored() or {}).get("machine")
    if not m:
        return {}
    machine = machine_from(m, mesh.size)
    # (no latency: the rendezvous holds all a collective costs between kernels beyond
    # its bytes, whatever the chains without kernels said of a round; a round's latency
    # is then counted twice, tens of microseconds against hundreds, where the two
    # parted as the moment's load would have it, 0 to 360 us a round on one host)
    bare = Network(within=Link(latency=0.0, bandwidth=link["bandwidth"]))
    row = mesh.sharding("x", None)
    calls = []
    for chain, cols in ((_summed, CROWD_COLS[0]), (_summed, CROWD_COLS[1]), (_shifted, CROWD_COLS[0])):
        xs = spmd.device_put(np.ones((mesh.size * 64, cols), np.float32), row)
        calls += [(spmd.jit(chain(k), in_shardings=row, out_shardings=row), (xs,)) for k in (1, 17)]
    costs = [f.lower(*a).cost(machine=machine, network=bare) for f, a in calls]
    got = []
    for _ in range(1 if quick else windows):
        t = throughput(calls, 3 if quick else runs)
        got.append(crowding(*[((t[i + 1] - t[i]) / 16,
                               (costs[i + 1]["compute_seconds"] - costs[i]["compute_seconds"]) / 16,
                               (costs[i + 1]["comm_seconds"] - costs[i]["comm_seconds"]) / 16) for i in (0, 2, 4)]))
    return {k: float(np.median([g[k] for g in got])) for k in ("rendezvous", "slowdown")}


def _summed(k):
    """A chain of k kernels, each followed by an all_reduce of a scalar (the same
    collective whatever the kernel's size)."""
    def f(x):
        for _ in range(k):
            x = x + x.sum() * 1e-9
        return x
    return f


def _shifted(k):
    """A chain of k kernels, each after a collective_permute of a row (each rank's
    last to the next rank: np.roll over the split rows), as a stencil's halo exchange."""
    def f(x):
        for _ in range(k):
            x = x + np.roll(x, 1, axis=0) * 1e-3
        return x
    return f


def crowding(small, large, exchange) -> dict:
    """{rendezvous, slowdown} of three chains' (measured, model's compute, model's
    collectives) seconds an iteration: `small` and `large` with one collective an
    iteration alike, whose kernels differ (their compute `slowdown` times the model's),
    `exchange` a collective of `rendezvous` more than the model's: the slowdown within
    [0.5, 8], the rendezvous not below 0."""
    (ts, ks, cs), (tl, kl, cl), (te, ke, ce) = small, large, exchange
    f = ((tl - cl) - (ts - cs)) / (kl - ks) if kl > ks else 1.0
    f = min(max(f, 0.5), 8.0)
    return {"rendezvous": max(te - ce - f * ke, 0.0), "slowdown": f}


def throughput(calls, runs, each=6) -> list:
    """The fast() seconds of a call of each (fn, args) of `calls` where every process
    runs `each` of them back to back between two meetings of the processes (the
    rounds of the calls interleaved), the mean of the processes' figures (every
    process gets the same): under MPI, with more processes than cores, a call timed
    alone on one process shows its own turn on a core, not what the processes
    together take. Such processes go through spells, seconds long, in which every
    collective waits up to about a millisecond (the scheduler's turns, not the
    program's): the fast end of the interleaved rounds leaves them out, as a shared
    machine's bursts of load."""
    from ..runtime.current_runtime import started
    rt = started()
    many = rt is not None and rt.process_count() > 1

    def meet():
        if many:
            rt.allgather_bytes(b"1", "calibrating: a round of calls")
    for fn, args in calls:
        fn(*args)
    ts = [[] for _ in calls]
    for _ in range(runs):
        for (fn, args), got in zip(calls, ts):
            meet()
            t0 = time.perf_counter()
            for _ in range(each):
                fn(*args)
            meet()
            got.append((time.perf_counter() - t0) / each)
    mine = [fast(t) for t in ts]
    if not many:
        return mine
    every = [json.loads(b) for b in rt.allgather_bytes(json.dumps(mine).encode(), "calibrating: the figures")]
    return [float(np.mean(col)) for col in zip(*every)]


def _gather_bandwidth(row, devices, cols, runs) -> float:
    """Link.gather_bandwidth: bytes a process receives a second where the runtime gathers
    a whole array from the processes (reading an spmd.Array, writing a numpy argument
    back: all_shards), a read of `cols` float32 a device against one of 16, every
    process reading at once (throughput: the processes copy what they receive on the
    cores they share)."""
    import spmd
    xs = [spmd.device_put(np.ones((devices, c), np.float32), row) for c in (16, cols)]
    small, large = throughput([(_read_whole, (x,)) for x in xs], runs, each=3)
    return (devices - 1) * (cols - 16) * 4 / max(large - small, 1e-7)


def _read_whole(x):
    return x.numpy()


def part_call_and_rounds(all_reduce, gather, k) -> dict:
    """{latency, rendezvous}: a small all_reduce of 2k rounds taking `all_reduce`
    seconds and an all_gather of k taking `gather`, each a call of `rendezvous` seconds
    (Link.rendezvous: the communicator's checks and buffers, the MPI call, each rank's
    process scheduled in turn where they are more than the cores) and rounds of
    `latency`. Where they do not part so (the gathers no faster, or slower than the
    all_reduces), the all_reduces' rounds hold it all."""
    latency = (all_reduce - gather) / k
    if latency <= 0.0 or gather - k * latency <= 0.0:
        return {"latency": all_reduce / (2 * k), "rendezvous": 0.0}
    return {"latency": latency, "rendezvous": gather - k * latency}


def _gathers(k, row, whole):
    """A chain of k all_gathers: each value made whole, then taken by rows again (a
    slice of what every rank holds: no collective)."""
    import spmd

    def f(x):
        for _ in range(k):
            x = spmd.shard(spmd.shard(x * 1.0001, whole) + 1.0, row)
        return x
    return f


def measure_mpi(quick=False) -> dict:
    """Under mpiexec: the MPI transport's link over all its ranks (measure_link), which
    the cost model takes for programs run under MPI (rates.py): processes exchanging
    through MPI, not threads of one process."""
    import spmd
    spmd.init()
    n = spmd.device_count()
    return {"ranks": n, "within": measure_link(spmd.Mesh((n,), ("x",)), quick, 3 if quick else 7, False),
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def _dots(k):
    def f(x, w):
        for _ in range(k):
            x = x @ w
        return x
    return f


# the columns of the thin products that calibrate Machine.product_element: attention
# heads' and small models' widths, where a product's flops per element are few
THIN = (16, 32, 64)


def _layers(k, cols):
    """A chain of k layers x = (x @ w) * (1 / sqrt(cols)): each product's result read by an
    elementwise kernel, as a network's products are (an activation, a scale, a residual
    add); the scale keeps a random w's products at the operands' size."""
    c = float(1.0 / np.sqrt(cols))

    def f(x, w):
        for _ in range(k):
            x = (x @ w) * c
        return x
    return f


def _products_seconds(make_square, square_args, make_thin, thin_args, runs, machine, n) -> tuple:
    """(seconds of one n x n by n x n product, [seconds of one n x c by c x c one for each
    c of THIN]), each from a chain of layers (_layers: 3 against one, 9 against one, all
    their runs interleaved, so that the products, solved together, see the same load),
    less what `machine`'s model gives each layer besides its product: the scale's kernel
    (its bytes at machine's rates) and the two kernels' fixed cost. make_thin(k, c) and
    thin_args[c]: the thin chains."""
    calls = [(make_square(1), square_args), (make_square(3), square_args)]
    for c in THIN:
        calls += [(make_thin(1, c), thin_args[c]), (make_thin(9, c), thin_args[c])]
    t = timed(calls, runs)
    return (layer_product_seconds((t[1] - t[0]) / 2, n * n, machine),
            [layer_product_seconds((t[3 + 2 * i] - t[2 + 2 * i]) / 8, n * c, machine) for i, c in enumerate(THIN)])


def layer_product_seconds(layer, elements, machine) -> float:
    """The product's seconds of a layer (_layers) that took `layer` seconds, its product's
    result of `elements` float32: less what `machine`'s model gives the rest, the scale's
    kernel (reading and writing the result) and the product's kernel's fixed cost."""
    return max(layer - machine.kernel_seconds(0.0, 8.0 * elements) - machine.call, 0.0)


def product_rates(n, t_square, t_thins) -> tuple:
    """(flops per second, seconds per element: Machine.flops, Machine.product_element) of
    an n x n by n x n product taking `t_square` seconds and n x c by c x c ones taking
    t_thins (one for each c of THIN): each is flops / rate + elements * per-element. The
    square product, nearly all flops and the longest run, is fitted exactly; the thin
    ones, whose elements weigh more, give the per-element cost by least squares of their
    relative errors (one noisy sample moves it less than a solution of two equations
    did). Where they give none (measured no slower than their flops at the square's
    rate: the load slowed the square one more), the square product's rate alone."""
    f1, e1 = 2.0 * n ** 3, 3.0 * n * n
    num = den = 0.0
    for c, t in zip(THIN, t_thins):
        if t <= 0.0:
            continue                          # (nothing left of the layer once its scale is paid)
        f, e = 2.0 * n * c * c, 2.0 * n * c + c * c
        x = (e - f * e1 / f1) / t             # t's part per second of per-element cost, relative
        y = (t - f * t_square / f1) / t       # what the square's rate alone leaves of t, relative
        num, den = num + x * y, den + x * x
    element = max(num / den, 0.0) if den > 0.0 else 0.0
    inv = (t_square - e1 * element) / f1
    if inv <= 0.0:
        return f1 / t_square, 0.0
    return 1.0 / inv, element


def _stream(k):
    """A loop of k steps of one streaming kernel (it reads x and y and writes x: the
    carry is stored each step, as a rolled loop of a program stores it)."""
    import spmd

    def f(x, y):
        return spmd.fori_loop(0, k, lambda i, x: x * 0.5 + y, x)
    return f


def _streaming_seconds(make, args, runs, k) -> float:
    """Seconds of one step of make(k)'s loop: k steps against one, their runs interleaved
    (a call's fixed cost and the return of its result cancel)."""
    t1, tk = timed([(make(1), args), (make(k), args)], runs)
    # (a load that slowed the one-step run more than the k-step one leaves no difference:
    # then the k-step run's time a step, fixed cost and all, which is more than a step takes)
    return (tk - t1) / (k - 1) if tk > t1 else tk / k


def _cache_bandwidth(share, flat, runs) -> float:
    """Bytes per second of a streaming kernel whose data stays in the cache: three arrays
    filling a quarter of a device's `share` of it, in a loop as `bandwidth`; on one
    device, or (`flat`: the devices' 1-D sharding) on each of the local devices at once.
    (The rate falls as the arrays grow: 100 GB/s in 256 KiB on one device of this 2-core
    host, 86 in 1.5 MiB, 68 in 22 MiB. A quarter of the cache prices the grids of a
    sweep that fit it well, at the cost of those that barely do.)"""
    import spmd
    mc = max(int(share / 4 / 12), 1024)
    if flat is None:
        xs = np.ones(mc, np.float32)
        make = lambda k: spmd.jit(_stream(k))      # noqa: E731
    else:
        xs = spmd.device_put(np.ones(mc * flat.mesh.size, np.float32), flat)
        make = lambda k: spmd.jit(_stream(k), in_shardings=(flat, flat), out_shardings=flat)   # noqa: E731
    return 3.0 * mc * 4 / _streaming_seconds(make, (xs, xs), runs, 17)


def adds(k):
    """A fused kernel of k layers of four adds and subtracts over four arrays, one tree a
    layer (each element's ops independent of the next element's: the code runs at the
    vectors' rate, not at an add's latency), and three adds that sum it."""
    def f(a, b, c, d):
        for _ in range(k):
            a, b, c, d = a + b, b - c, c + d, d - a
        return a + b + c + d
    return f


def element_op_seconds(make, args, elements, runs) -> float:
    """Machine.element: seconds of an element of a float32 add in a fused kernel, the
    kernel of 9 layers of adds (adds) against one of one layer, on arrays the cache
    holds (four of `elements`, 128 KiB, a device), their runs interleaved; 0 where the
    load left no difference (the model then prices element-ops at `flops`)."""
    t1, t9 = timed([(make(1), args), (make(9), args)], runs * 2)
    return max((t9 - t1) / (32 * elements), 0.0)


def shared_cores(devices, cores) -> float:
    """How many devices share a core: Machine.element_devices is the element-op of one
    device times this. Derived, not timed: the devices' kernels of adds over arrays the
    cache holds are each a few microseconds, and where devices outnumber cores the
    threads' handoffs (hundreds of microseconds) swamp them (a timed 4 devices on 2
    cores ranged -17 to 116 ps against 13 alone); a core's element-op is its own."""
    return max(1.0, devices / max(cores, 1))


def _kernel_seconds(make, args, runs) -> float:
    """A kernel's fixed seconds: a chain of 33 tiny matrix products (none fuses with the
    next) against one, per product, their runs interleaved."""
    t1, t33 = timed([(make(1), args), (make(33), args)], runs * 2)
    return max((t33 - t1) / 32, 0.0)


def cache_capacity(largest, runs=7) -> float:
    """Bytes of cache a streaming loop's data stays in, measured: numpy adding arrays of a
    total of 1 MiB, then each size 1.41x the last, up to twice `largest` (the system's
    size of its largest cache), over and over; capacity_of those rates. A process gets
    less than the system's size where the cache is shared with other cores and other
    guests of the host: a 2 MiB grid a device of four, 17 MiB in all, streamed at
    memory's rate on a host whose system says 32 MiB. 0 where `largest` is."""
    if not largest:
        return 0.0
    sizes, rates = [], []
    size = float(1 << 20)
    while size <= 2 * largest:
        n = max(int(size // 24), 1)
        x, y, z = np.ones(n), np.ones(n), np.empty(n)

        def add(x=x, y=y, z=z):
            np.add(x, y, out=z)
            return np.add(z, y, out=x)
        sizes.append(size)
        rates.append(2 * 3 * n * 8 / _seconds(add, (), runs, 0.05))
        size *= 2 ** 0.5
    return min(capacity_of(sizes, rates), float(largest))


def capacity_of(sizes, rates) -> float:
    """The largest of `sizes` (ascending, the last far larger than any cache) whose rate
    is at least the geometric mean of the fastest and memory's (the median of the last
    three), or 1.5x memory's where that is lower: a load on the machine slows a
    measurement, never speeds it up, so a size the cache does not hold does not pass,
    whatever a smaller one measured. (A host with a large last-level cache behind a
    small fast one has three rates: 65 GB/s in 1 MiB, 20-25 up to 45 MiB, 8 beyond. The
    geometric mean of the first and the last falls among the middle ones, which then
    passed in one measurement and not the next: 2 MiB, then 45.)"""
    memory = float(np.median(rates[-3:]))
    slow = min((max(rates) * memory) ** 0.5, 1.5 * memory)
    return max([s for s, r in zip(sizes, rates) if r >= slow and s < sizes[-1]], default=0.0)


def last_level_cache() -> int:
    """Bytes of this host's largest CPU cache (0 where the system does not say)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            with open(os.path.join(base, d, "size")) as f:
                txt = f.read().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
            best = max(best, int(txt.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        pass
    return best


def _write_row(x):
    x[0] += 1.0
    return x[0]


def _numpy_arguments(devices, row, cols, runs) -> dict:
    """Seconds per byte a call spends on a numpy argument (`argument`: placed on the
    devices) and more on one the program writes (`written`: copied back into it): the
    same tiny program called on a numpy array and on the array already placed, apart."""
    import spmd
    x = np.ones((devices * 8, cols))
    placed = spmd.device_put(x, row)
    nbytes = float(x.nbytes)
    read = spmd.jit(lambda x: x[0] + 1.0, in_shardings=row)
    write = spmd.jit(_write_row, in_shardings=row)
    t = timed([(read, (x,)), (read, (placed,)), (write, (x,)), (write, (placed,))], runs)
    t_read, t_write = t[0] - t[1], t[2] - t[3]
    argument = max(t_read, 0.0) / nbytes
    # the written call also made the devices' private copies (the array once in this
    # layout: cost_model.private_copy_bytes), which the model prices at `argument`
    private = private_copy_bytes(x.shape, x.itemsize, row, devices)
    return {"argument": argument, "written_back": max(t_write - t_read - private * argument, 0.0) / nbytes}


def _dropped(fn):
    """`fn` returning nothing (timed() would read its results back into numpy)."""
    def run(*args):
        fn(*args)
    return run


def _outputs(flat, n, machine, runs) -> float:
    """Machine.output: seconds a call spends per byte of a result a device makes, besides
    what the model (`machine`, its own output 0) gives: a program of two results of n
    float64 a device against one of one (x + 1 and x * 2, against x + 1), the model's
    difference of the two taken off, per byte of the second result."""
    import spmd
    from ..sharding.cost_model import Network
    xs = spmd.device_put(np.ones(n * flat.mesh.size), flat)
    one = spmd.jit(lambda x: x + 1.0, in_shardings=flat, out_shardings=flat)
    two = spmd.jit(lambda x: (x + 1.0, x * 2.0), in_shardings=flat, out_shardings=(flat, flat))
    t1, t2 = timed([(_dropped(one), (xs,)), (_dropped(two), (xs,))], runs)
    model = [f.lower(xs).cost(machine=machine, network=Network())["seconds"] for f in (one, two)]
    return max((t2 - t1) - (model[1] - model[0]), 0.0) / (n * 8.0)


def _plus_total(*xs):
    """Each argument plus a total of the first (an all_reduce: the ranks run on their
    own threads, as a program that exchanges does)."""
    s = xs[0].sum() * 1e-6
    return tuple(x + s for x in xs)


def _leaves(row, call, k, runs) -> dict:
    """Seconds a call spends per argument and result leaf (`leaf_devices`) and per
    argument given as a numpy array (`placing`), besides their bytes: a tiny program of
    k leaves in and out (one kernel each, at `call`) against one of one, on placed
    arrays and on numpy arrays."""
    import spmd
    t = {}
    for n in (1, k):
        f = spmd.jit(_plus_total, in_shardings=(row,) * n, out_shardings=(row,) * n)
        xs = [np.ones((row.mesh.size, 4), np.float32) for _ in range(n)]
        placed = [spmd.device_put(x, row) for x in xs]
        f(*placed)
        got = {False: [], True: []}
        for _ in range(runs * 4):         # (interleaved: the two see the same load)
            for numpy in (False, True):
                a = [x.copy() for x in xs] if numpy else placed
                t0 = time.perf_counter()
                f(*a)
                got[numpy].append(time.perf_counter() - t0)
        t[n] = fast(got[False]), fast(got[True])
    more = k - 1
    leaf = max((t[k][0] - t[1][0]) / more - call, 0.0) / 2
    placing = max((t[k][1] - t[k][0]) - (t[1][1] - t[1][0]), 0.0) / more
    return {"leaf_devices": leaf, "placing": placing}


def store(rates: dict) -> str:
    from ..compiler.disk_cache import write_atomic
    p = path()
    os.makedirs(os.path.dirname(p), exist_ok=True)
    write_atomic(p, json.dumps(rates, indent=1).encode())
    return p


def calibrate_mpi(quick=False, out=None) -> int:
    """Under mpiexec: measure the MPI link and store it beside the local rates (rank 0
    writes; a machine measured with no stored local rates gets them measured first,
    in one rank's process of its own, as `spmd doctor --calibrate` does)."""
    import spmd
    from .rates import stored
    out = out or sys.stdout
    link = measure_mpi(quick)
    if spmd.process_index() != 0:
        return 0
    got = stored() or {}
    got.setdefault("networks", {})["mpi"] = link
    p = store(got)
    w = link["within"]
    print(f"MPI collectives over {link['ranks']} ranks: {w.get('rendezvous', 0.0) * 1e6:.0f} us a call, "
          f"{w['latency'] * 1e6:.0f} us a round, {w['bandwidth'] / 1e9:.2f} GB/s (an array's gather "
          f"{w.get('gather_bandwidth', 0.0) / 1e9:.2f} GB/s); the ranks' work {w.get('slowdown', 1.0):.2f}x "
          f"the local devices' rates; stored in {p}", file=out)
    return 0


def calibrate(devices=4, quick=False, out=None) -> int:
    from .rates import stored
    out = out or sys.stdout
    rates = measure(devices, quick)
    if (stored() or {}).get("networks"):       # (the MPI link, measured under mpiexec, is kept)
        rates["networks"] = stored()["networks"]
    p = store(rates)
    mch = rates["machine"]
    print(f"compute {mch['flops'] / 1e9:.1f} GFLOP/s ({mch['product_element'] * 1e9:.2f} ns more a product's "
          f"element), memory {mch['bandwidth'] / 1e9:.1f} GB/s, a call {mch['step'] * 1e6:.0f} us", file=out)
    print(f"a fused kernel's element-op (a float32 add): {mch['element'] * 1e12:.1f} ps", file=out)
    if "cache_capacity" in mch:
        print(f"in the cache ({mch['cache_capacity'] / 2**20:.1f} MiB): {mch['cache_bandwidth'] / 1e9:.1f} GB/s",
              file=out)
    if "flops_devices" in mch:
        print(f"each of {devices} devices at once: compute {mch['flops_devices'] / 1e9:.1f} GFLOP/s "
              f"({mch['product_element_devices'] * 1e9:.2f} ns more a product's element), "
              f"an element-op {mch['element_devices'] * 1e12:.1f} ps, "
              f"memory {mch['bandwidth_devices'] / 1e9:.1f} GB/s", file=out)
    if "call_devices" in mch:
        print(f"a kernel: {mch['call'] * 1e6:.1f} us alone, {mch['call_devices'] * 1e6:.1f} us each of {devices} "
              f"devices at once" + (f"; in the cache ({mch['cache_bytes'] / 2**20:.1f} MiB a device): "
                                     f"{mch['cache_bandwidth_devices'] / 1e9:.1f} GB/s" if "cache_bytes" in mch else ""),
              file=out)
    if "output_devices" in mch:
        print(f"a call's results: {mch['output_devices'] * 2**20 * 1e6:.0f} us a MiB a device makes", file=out)
    if "argument" in mch:
        print(f"a numpy argument: {mch['argument'] * 2**20 * 1e6:.0f} us a MiB placed, "
              f"{mch['written_back'] * 2**20 * 1e6:.0f} us a MiB more written back", file=out)
    if "network" in rates:
        w = rates["network"]["within"]
        print(f"collectives over {devices} local devices: {w['latency'] * 1e6:.0f} us a round, "
              f"{w['bandwidth'] / 1e9:.2f} GB/s; a call on the devices' threads "
              f"{w.get('handoff', 0.0) * 1e6:.0f} us more", file=out)
    print(f"stored in {p}", file=out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="measure this machine's rates for spmd's cost model")
    ap.add_argument("--devices", type=int, default=4, help="local devices the collectives run over")
    ap.add_argument("--quick", action="store_true", help="small sizes (a rough figure, in a second)")
    a = ap.parse_args(argv)
    from ..runtime.current_runtime import detect_backend
    if detect_backend() == "mpi":        # under mpiexec: the MPI link (mpiexec -n 4 spmd doctor --calibrate)
        sys.exit(calibrate_mpi(a.quick))
    sys.exit(calibrate(a.devices, a.quick))


if __name__ == "__main__":
    main()
