"""spmd.AUTO against the hand-annotated plan and the simple baseline (every argument's
largest dimension on the largest mesh axis that divides it), side by side, on a 2x2 local
mesh: train_gpt (default, and d256 L4 T128), the MLP step of benchmarks/kernels.py, the
stencils of benchmarks/stencil_programs.py (Jacobi, nine-point, 3-D heat, diffusion, life,
the cavity step; by hand: 2-D blocks), CG.

Per plan: the measured step time (median of `--runs`, the plans' runs interleaved, each
plan first in turn, in one process on the same inputs; a run is a step after an untimed
one of the same plan, as a training loop's steps follow each other; where other guests of
the host took more than STOLEN_LIMIT of the CPUs' time during a program's timed steps
(/proc/stat's steal), they are measured again, RETRIES times at most, and the attempt
with the least kept: on this kind of shared VM a burst of it made one program's steps
2-3x slower while the rates measured just before and after did not see it), bytes per step (lowered.report()), the model's
prediction (lowered.cost(); `--rates fresh`, the default: with the rates measured in this
process, as `spmd doctor --calibrate` measures them, before, halfway through and after
each program's timed runs, each rate the median of the three (median_rates): the machine
is shared, and rates stored earlier were taken under another load; `--rates
stored`: the stored ones, else defaults) and its ratio to the measured time (`/meas`:
to the median; `/fast`: to the runs' fast end, calibrate.fast(), the statistic the
rates are taken with: what the machine does when other work leaves it alone), the
search's solve time (wall / the search thread's CPU: the CPU figure is what a loaded
machine does not inflate); and whether the plan's results equal the hand plan's (or the first
plan's). Read the ratios, not the milliseconds.

The FSDP row: train_gpt with spmd.AUTO and memory_limit at its unconstrained plan's peak
less half of what its parameters and Adam state take replicated (fsdp_limit); printed with the plan's peak per device (lowered.memory()),
the measured one (tracemalloc's peak during a step: per process under MPI; the local
devices' threads share one process, so there its fourth; less the Python objects the
step leaves allocated, which the plan does not count and which are printed beside,
measured_peak) and the limit, against the
example's hand FSDP plan (fsdp_shardings, the batch pinned per layer).

Under `mpiexec -n 4` (`--mpi`; spmd.init() detects it) the 2x2 mesh is the 4 processes;
rank 0 prints; every process starts each timed step after an exchange, and a step
takes from the earliest process's start to the last one's finish (the processes of one
host read one clock). A program with no collective, such as a replicated one, lets the
processes drift apart: timed by each process alone, its step would be its own run
while the others, four on two cores, waited for a core (half of what the step takes
them all). An exchange after the step would time them all too, but costs a millisecond
itself on that host (MPI's waits sleep there). The prediction uses the stored
machine rates (`spmd doctor --calibrate`) and, with `--rates fresh`, the MPI link
measured before, halfway through and after each program's timed runs, the median (as `mpiexec
-n 4 python -m spmd.jit.calibrate` measures it: a link stored under another load was
off by 2x on the stencils' write-back gathers); `--rates stored`: the stored one
(MPI's, which spmd.AUTO plans with too; where it was not measured, the local
transport's).

Where no rates are stored, `spmd doctor --calibrate`'s measurement is taken and stored
first: spmd.AUTO plans with the stored rates (the defaults are another machine's).

    PYTHONPATH=. python benchmarks/auto.py [--quick] [--runs 31] [--only NAME]
    PYTHONPATH=. mpiexec -n 4 python benchmarks/auto.py --mpi --only gpt
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import spmd  # noqa: E402
from spmd.jit.calibrate import fast  # noqa: E402


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baseline_shardings(mesh, args):
    """Every argument's largest dim on the largest mesh axis dividing it (else the largest)."""
    axes = sorted(mesh.axis_names, key=lambda a: (-mesh.axis_size(a), mesh.axis_names.index(a)))

    def one(x):
        shape = np.shape(x)
        spec = [None] * len(shape)
        if shape:
            d = max(range(len(shape)), key=lambda k: (shape[k], -k))
            fit = [a for a in axes if shape[d] % mesh.axis_size(a) == 0]
            if fit or shape[d] > 1:
                spec[d] = (fit or axes)[0]
        return mesh.sharding(*spec)
    return tuple(spmd.tree_map(one, a) for a in args)


def copy(args):
    return spmd.tree_map(lambda x: np.array(x, copy=True) if isinstance(x, np.ndarray) else x, args)


def gpt(mesh, d, layers, seq, batch=16, fsdp=False):
    tg = _load("train_gpt_auto", "examples/train_gpt.py")
    params = tg.init_params(np.random.default_rng(0), d, layers, seq)
    opt = {"m": {k: np.zeros_like(v) for k, v in params.items()},
           "v": {k: np.zeros_like(v) for k, v in params.items()}, "t": np.float32(0.0)}
    tok = np.random.default_rng(1).integers(0, tg.VOCAB, (batch, seq + 1)).astype(np.int32)
    x, y = tok[:, :-1], tok[:, 1:]
    psh = (tg.fsdp_shardings if fsdp else tg.param_shardings)(mesh, params)
    hand = (psh, {"m": psh, "v": psh, "t": mesh.sharding()}, mesh.sharding("data", None), mesh.sharding("data", None))
    if fsdp:   # the hand FSDP plan pins the batch per layer; AUTO gets the plain step
        return (tg.make_step(layers, 4, 3e-3, mesh, False, False), tg.make_step(layers, 4, 3e-3, mesh, False, True)), \
            (params, opt, x, y), hand
    return tg.make_step(layers, 4, 3e-3, mesh, False, False), (params, opt, x, y), hand


def state_bytes(args):
    """Bytes of a training step's parameters and Adam state (its first two arguments)."""
    return sum(int(np.asarray(v).nbytes) for v in spmd.tree_flatten(args[:2])[0])


def mlp(mesh):
    K = _load("kernels_auto", "benchmarks/kernels.py")
    rng = np.random.default_rng(0)
    d, h, b = 256, 1024, 256
    p = {"w1": (rng.standard_normal((d, h)) * 0.05).astype(np.float32),
         "w2": (rng.standard_normal((h, d)) * 0.05).astype(np.float32)}
    x = rng.standard_normal((b, d)).astype(np.float32)
    y = rng.standard_normal((b, d)).astype(np.float32)
    hand = ({"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)},
            mesh.sharding("data", None), mesh.sharding("data", None))
    return K.spmd_mlp_step, (p, x, y), hand


def stencil(mesh, name, n2d=1024, n3d=96, ncavity=256, steps=5):
    """A program of benchmarks/stencil_programs.py's suite, its hand plan 2-D
    blocks of the grids it exchanges (the first two dims), as benchmarks/stencil.py
    splits them."""
    S = _load("stencil_programs_suite_auto", "benchmarks/stencil_programs.py")
    prog = {p.name: p for p in S.suite(n2d=n2d, n3d=n3d, steps=steps, ncavity=ncavity)}[name]
    arrays = prog.inputs()
    blk = [mesh.sharding("data", "model", *([None] * (a.ndim - 2))) if a.ndim >= 2 else mesh.sharding()
           for a in arrays]

    def run(*a):
        return prog.fn(*a, prog.steps)
    run.halo = lambda sharding: prog.step_halo_bytes(arrays, grid(sharding)) * prog.steps
    return run, tuple(arrays), tuple(blk)


def jacobi(mesh):
    return stencil(mesh, "jacobi")


def cg(mesh):
    return stencil(mesh, "cg", n2d=512)


def grid(sharding):
    """How many blocks `sharding` splits each dim into."""
    return tuple(sharding.dim_shards(d) for d in range(len(sharding.spec)))


def leaves(out):
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in spmd.tree_flatten(out)[0]]


def fresh_rates():
    """(Machine, Network) measured now (spmd.jit.calibrate.measure), the rates each of the
    4 local devices gets while all run."""
    from spmd.jit.calibrate import measure
    from spmd.jit.rates import machine_from
    from spmd.sharding.cost_model import Link, Network
    m = measure(4)
    mc, w = m["machine"], m["network"]["within"]
    machine = machine_from(mc, 4)
    print(f"rates: {machine.flops / 1e9:.1f} GFLOP/s ({machine.product_element * 1e9:.2f} ns a product's element), "
          f"an element-op {machine.element * 1e12:.1f} ps, "
          f"{machine.bandwidth / 1e9:.2f} GB/s "
          f"({(machine.cache_bandwidth or 0) / 1e9:.2f} in the cache), a kernel {machine.call * 1e6:.1f} us, "
          f"a call {machine.step * 1e6:.0f} us (a leaf {machine.leaf * 1e6:.0f} us more, a MiB of results "
          f"{machine.output * 2**20 * 1e6:.0f} us, a numpy argument "
          f"{machine.placing * 1e6:.0f} us), a round {w['latency'] * 1e6:.0f} us, {w['bandwidth'] / 1e9:.2f} GB/s, "
          f"a handoff {w.get('handoff', 0.0) * 1e6:.0f} us")
    return machine, Network(within=Link(latency=w["latency"], bandwidth=w["bandwidth"],
                                        handoff=w.get("handoff", 0.0), solo_bytes=w.get("solo_bytes", 0.0)))


# the processes' rendezvous and slowdown between kernels (calibrate.measure_crowding),
# measured with the first link of the run: each takes some seconds
_CROWD = {}


def fresh_mpi_link():
    """(None, Network): under MPI, the link over the processes measured now
    (calibrate.measure_link, as `mpiexec -n 4 python -m spmd.jit.calibrate` measures it;
    the crowding figures the first time);
    the machine's rates stay the stored ones (None: lowered.cost() reads them, slowed as
    the link's slowdown says)."""
    from spmd.jit.calibrate import measure_link
    from spmd.sharding.cost_model import Link, Network
    w = measure_link(spmd.Mesh((spmd.device_count(),), ("x",)), runs=7, threads=False, crowd=_CROWD.get("figures"))
    _CROWD["figures"] = {k: w[k] for k in ("rendezvous", "slowdown") if k in w}
    if spmd.process_index() == 0:
        print(f"MPI link: a round {w['latency'] * 1e6:.0f} us, {w['bandwidth'] / 1e9:.2f} GB/s, "
              f"a call {w.get('rendezvous', 0.0) * 1e6:.0f} us, an array's gather "
              f"{w.get('gather_bandwidth', 0.0) / 1e9:.2f} GB/s, the ranks' work {w.get('slowdown', 1.0):.2f}x")
    return None, Network(within=Link(latency=w["latency"], bandwidth=w["bandwidth"],
                                     rendezvous=w.get("rendezvous", 0.0),
                                     gather_bandwidth=w.get("gather_bandwidth", 0.0),
                                     slowdown=w.get("slowdown", 1.0)))


def median_rates(samples):
    """Field by field, the median of (Machine, Network) measurements (a field any sample
    lacks: None): the one sample in three that a burst of load on a shared host threw
    off (a product's element, the difference of two timings, came out 0.00 ns in one
    and 4.67 ns in another of the same run; a MiB of results 172 us and 688 us) does
    not move it, as it moved a mean of two."""
    import dataclasses
    from spmd.sharding.cost_model import Network

    def median(objs):
        values = {f.name: [getattr(o, f.name) for o in objs] for f in dataclasses.fields(objs[0])}
        return dataclasses.replace(objs[0], **{k: None if None in v else float(np.median(v))
                                               for k, v in values.items()})
    machines = [m for m, _ in samples]
    return (None if None in machines else median(machines)), Network(within=median([n.within for _, n in samples]))


def timed_steps(fns, inputs, runs, first=0) -> dict:
    """plan -> the seconds of its `runs` timed steps, the plans' steps interleaved (the
    i-th run's turns begin with plan (first + i) mod the plans)."""
    starts, ends = {p: [] for p in fns}, {p: [] for p in fns}
    order = list(fns)
    many = spmd.process_count() > 1
    for i in range(first, first + runs):   # interleaved: the plans see the same load
        for p in order[i % len(order):] + order[:i % len(order)]:     # (each first in turn)
            # a turn is WARM_STEPS untimed steps, then the timed one: a step as a training
            # loop runs it, after one of its own. The first step after another plan's finds
            # the cache holding that plan's arrays (3-D heat's 7 MB ones: 1.6x slower)
            for _ in range(WARM_STEPS):
                fns[p](*copy(inputs[p]))
            f, a = fns[p], copy(inputs[p])
            if many:
                spmd.process_allgather(np.zeros(1))
            starts[p].append(time.monotonic())
            f(*a)
            ends[p].append(time.monotonic())
    if many:            # (the earliest start to the last finish, over the processes)
        times = {p: list(np.max(spmd.process_allgather(np.asarray(ends[p])), axis=0)
                         - np.min(spmd.process_allgather(np.asarray(starts[p])), axis=0)) for p in fns}
    else:
        times = {p: list(np.asarray(ends[p]) - np.asarray(starts[p])) for p in fns}
    return times


def stolen_ticks():
    """(ticks the hypervisor gave this machine's CPUs to other guests, all ticks) so far,
    from /proc/stat; None where it is not there."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks)


def share_stolen(before, after):
    """The share of the CPU time between two stolen_ticks() that other guests took."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


WARM_STEPS = 1
# the rates an attempt measures (--rates fresh): before its timed steps, between their
# chunks (RATE_SAMPLES - 1 of them), and after; each field taken as the samples' median
RATE_SAMPLES = 3
# a program's timed steps during which other guests of the host took more than this share
# of the CPUs are measured again, up to RETRIES times; the attempt with the least is kept
STOLEN_LIMIT = 0.10
RETRIES = 2


def run_program(name, fn, args, hand, mesh, runs, rates=None, memory_limit=None, devices_per_process=4):
    """`fn`: the step, or (the step AUTO and the baseline run, the hand plan's step).
    `memory_limit`: AUTO's (then the rows hold the planned and measured peaks)."""
    fn, hand_fn = fn if isinstance(fn, tuple) else (fn, fn)
    plans = {"hand": dict(in_shardings=hand), "auto": dict(mesh=mesh, in_shardings=spmd.AUTO),
             "baseline": dict(in_shardings=baseline_shardings(mesh, args))}
    if memory_limit is not None:
        plans["auto"]["memory_limit"] = memory_limit
    if hand is None:
        del plans["hand"]
    rows, fns, outs, lows = {}, {}, {}, {}
    for plan, kw in plans.items():
        f = spmd.jit(hand_fn if plan == "hand" else fn, **kw)
        t0 = time.perf_counter()
        low = f.lower(*copy(args))
        lower_s = time.perf_counter() - t0
        low.compile()
        lows[plan] = low
        solve = (low.auto.solve_seconds, low.auto.solve_cpu_seconds) if low.auto is not None else None
        rows[plan] = {"bytes": low.report()["comm_bytes"], "solve": solve, "in_shardings": low.in_shardings,
                      "run_bytes": low.report()["bytes_per_run"],
                      "lower": lower_s, "chosen": low.auto.chosen if low.auto is not None else ""}
        fns[plan] = f
        outs[plan] = leaves(f(*copy(args)))
        if memory_limit is not None:
            rows[plan]["planned_peak"] = low.memory()["peak_bytes"]
            rows[plan]["peak"], rows[plan]["objects"] = measured_peak(
                spmd.jit(hand_fn if plan == "hand" else fn, **kw), low, args, devices_per_process)
    inputs = {p: copy(args) for p in plans}
    attempts = []
    for _ in range(1 + RETRIES):
        stolen0 = stolen_ticks()
        times, samples = {p: [] for p in plans}, []
        chunks = RATE_SAMPLES - 1 if rates is not None else 1
        for c in range(chunks):          # (a rate sample before each chunk of the steps, and after)
            if rates is not None:
                samples.append(rates())
            done = len(next(iter(times.values())))
            for p, t in timed_steps(fns, inputs, runs * (c + 1) // chunks - done, first=done).items():
                times[p] += t
        if rates is not None:
            samples.append(rates())
        stolen = share_stolen(stolen0, stolen_ticks())
        if spmd.process_count() > 1:      # (every process decides alike: the most any saw)
            stolen = float(np.max(spmd.process_allgather(np.asarray([-1.0 if stolen is None else stolen]))))
            stolen = None if stolen < 0 else stolen
        got = median_rates(samples) if rates is not None else (None, None)
        attempts.append((stolen, times, got))
        if stolen is None or stolen <= STOLEN_LIMIT:
            break
    stolen, times, got = min(attempts, key=lambda a: a[0] or 0.0)
    for p in plans:
        rows[p]["stolen"], rows[p]["attempts"] = stolen, len(attempts)
    ref = outs.get("hand", outs["baseline"])
    for p in plans:
        rows[p]["predicted"] = lows[p].cost(machine=got[0], network=got[1])["seconds"]
        rows[p]["losses"] = float(np.ravel(outs[p][0])[0])
        rows[p]["ms"] = 1e3 * float(np.median(times[p]))
        rows[p]["fast_ms"] = 1e3 * fast(times[p])
        # train_gpt: the loss (Adam's first step is sign(g) where g is ~0, which the order of
        # a sum decides); the other programs: every result
        pick = slice(0, 1) if name.startswith("gpt") else slice(None)
        rows[p]["same"] = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(outs[p][pick], ref[pick]))
    return rows


def fsdp_limit(fn, args, mesh):
    """The FSDP row's memory_limit: AUTO's unconstrained plan's peak per device less half
    of the parameters and Adam state (the plan keeps them replicated, and at this size
    the activations alone outweigh half the state: a limit of half the state itself no
    plan meets without recomputing). A plan fits only by splitting the state."""
    low = spmd.jit(fn, mesh=mesh, in_shardings=spmd.AUTO).lower(*copy(args))
    return int(low.memory()["peak_bytes"] - state_bytes(args) // 2)


def measured_peak(f, low, args, devices_per_process):
    """(bytes a device holds at the peak of a step, bytes of Python objects the step left
    behind a device): its arguments' shards (placed as `low` lays them out) and
    tracemalloc's peak over the first two calls of `f` (a new jit of the plan, compiled
    first), shared out over the devices of this process, less the Python objects (not
    arrays: tracemalloc's domain 0, numpy's buffers are traced in a domain of their own)
    the calls left allocated: the native schedule's instructions and the interpreter's
    own tables (its interned strings' table doubles when it fills, ~1 MB at once, at
    whatever call that falls in), which lowered.memory() does not count (its
    `not_counted`). Python objects made and freed within the step stay in the figure."""
    import tracemalloc
    placed = spmd.tree_unflatten(spmd.tree_flatten(args)[1], [
        spmd.device_put(np.asarray(x), s) for x, s in zip(spmd.tree_flatten(copy(args))[0], low.in_shardings)])
    f.lower(*placed).compile()
    objects = [tracemalloc.DomainFilter(True, 0)]

    def python_bytes():
        return sum(t.size for t in tracemalloc.take_snapshot().filter_traces(objects).traces)
    tracemalloc.start()                     # (before the first run: its buffers and arena too)
    base = tracemalloc.get_traced_memory()[0]
    before = python_bytes()
    f(*placed)
    f(*placed)
    peak = tracemalloc.get_traced_memory()[1] - base
    left = python_bytes() - before
    tracemalloc.stop()
    # (the arguments, made before tracemalloc started: a shard each a device)
    held = sum(int(np.prod(x.local_shape)) * np.dtype(x.dtype).itemsize for x in spmd.tree_flatten(placed)[0])
    return (peak - left) / devices_per_process + held, left / devices_per_process


def ensure_rates():
    """Store `spmd doctor --calibrate`'s measurement where none is stored (AUTO plans with it)."""
    from spmd.jit.calibrate import measure, store
    from spmd.jit.rates import stored
    if stored() is None:
        print("no stored rates: measuring them (spmd doctor --calibrate) ...")
        store(measure(4))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=31)
    ap.add_argument("--quick", action="store_true", help="skip train_gpt d256")
    ap.add_argument("--only", default=None)
    ap.add_argument("--rates", choices=("fresh", "stored"), default="fresh")
    ap.add_argument("--mpi", action="store_true", help="run under mpiexec -n 4: the ranks are the processes")
    a = ap.parse_args(argv)
    if a.mpi:
        spmd.init()
    else:
        ensure_rates()
        spmd.init(backend="local", num_devices=4)
    lead = spmd.process_index() == 0
    per_process = 1 if a.mpi else 4
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    progs = [("gpt d64 L2 T64", lambda: gpt(mesh, 64, 2, 64)),
             ("gpt d256 L4 T128", lambda: gpt(mesh, 256, 4, 128)),
             ("gpt d64 L2 T64 fsdp", lambda: gpt(mesh, 64, 2, 64, fsdp=True)),
             ("mlp step", lambda: mlp(mesh)), ("jacobi 1024", lambda: jacobi(mesh)),
             ("nine_point 1024", lambda: stencil(mesh, "nine_point")),
             ("heat3d 96", lambda: stencil(mesh, "heat3d")),
             ("diffusion 1024", lambda: stencil(mesh, "diffusion")),
             ("life 1024", lambda: stencil(mesh, "life")),
             ("cavity 256", lambda: stencil(mesh, "cavity")),
             ("cg 512", lambda: cg(mesh))]
    if a.quick:
        progs = [p for p in progs if "d256" not in p[0]]
    if a.only:
        progs = [p for p in progs if a.only in p[0]]
    hdr = f"{'program':<22} {'plan':<9} {'ms/step':>9} {'x hand':>7} {'bytes/step':>11} {'model ms':>9} {'/meas':>6} " \
          f"{'/fast':>6} " \
          f"{'solve s/cpu':>11} {'lower s':>8} {'same':>5} chosen"
    say = print if lead else (lambda *x, **k: None)
    say(hdr)
    for name, make in progs:
        rates = (fresh_mpi_link if a.mpi else fresh_rates) if a.rates == "fresh" else None
        fn, args, hand = make()
        limit = fsdp_limit(fn[0], args, mesh) if name.endswith("fsdp") else None
        hand_rows = run_program(name, fn, args, hand, mesh, a.runs, rates, limit, per_process)
        ref = hand_rows.get("hand", hand_rows["baseline"])["ms"]
        for plan, r in hand_rows.items():
            solve = "" if r["solve"] is None else f"{r['solve'][0]:.2f}/{r['solve'][1]:.2f}"
            say(f"{name:<22} {plan:<9} {r['ms']:9.2f} {r['ms'] / ref:7.2f} {r['bytes']:11d} "
                f"{r['predicted'] * 1e3:9.3f} {r['predicted'] * 1e3 / r['ms']:6.2f} {r['predicted'] * 1e3 / r['fast_ms']:6.2f} {solve:>11} {r['lower']:8.2f} {str(r['same']):>5} {r['chosen']}")
            if hasattr(fn, "halo"):
                halo = fn.halo(r["in_shardings"][0])
                say(f"{'':<22} {'':<9} split {grid(r['in_shardings'][0])}: bytes a step / the halo a "
                    f"hand-written exchange of that split moves ({halo}): {r['run_bytes'] / halo if halo else float('nan'):.2f}")
            if limit is not None:
                say(f"{'':<22} {'':<9} peak per device: planned {r['planned_peak'] / 2**20:.2f} MiB, measured "
                    f"{r['peak'] / 2**20:.2f} MiB (Python objects left besides: {r['objects'] / 2**20:.2f} MiB), "
                    f"limit (AUTO's) {limit / 2**20:.2f} MiB; loss {r['losses']:.6f}")
        r = next(iter(hand_rows.values()))
        if r["stolen"] is not None:
            say(f"{'':<22} timed steps: {100 * r['stolen']:.0f}% of the CPUs' time went to other guests of the "
                f"host (attempt {r['attempts']} of at most {1 + RETRIES}: more than {100 * STOLEN_LIMIT:.0f}% is measured again)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
