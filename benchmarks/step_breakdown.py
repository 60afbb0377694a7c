"""Where a step's time goes, against where lowered.cost() says it goes: one program of
benchmarks/auto.py in one plan, on the 2x2 local mesh.

The model's side: its compute by kind of op (matrix products, fused elementwise and
re-indexing, reductions, the rest), its collectives by kind (native ones in the
native segments, the communicator's from Python), the call's fixed cost, its results'
buffers and its numpy arguments.

The measured side, summed over `--runs` steps and given per step: the wall and the CPU
seconds (time.thread_time: the thread's own, which other programs on a shared machine
do not stretch) of
    segments     the native segments (the local transport's hosts: each core's thread
                 runs its ranks' segments in lockstep, backends/llvm/schedule.py), per
                 device (summed over the device threads, / 4)
    python <op>  each collective the communicator runs from Python, per device
    native runs  a host's thread running its ranks' segment (per host: 2 threads run
                 the 4 devices' segments), apart from the wait for the ranks it runs
                 with to arrive, which `segments` holds besides
    placing, private copies, write back
                 the calling thread's work on numpy arguments (runtime/execute.py,
                 Jitted._write_back)
    run          the runtime's run of the ranks, the calling thread's wall
    call         the whole call
and the process's minor page faults per call (new memory mapped as it is first
written). Read the model's compute against the segments' CPU: a device's compute at
the rates of 4 devices at once is what a core spends on its 2 devices, so the segments'
CPU summed over the threads is 2 x the model's compute per device where they agree.

`--segments`: each native segment of rank 0 besides (its wall, the wait for its host's
other ranks and its native collectives' waits included) against the model's compute of
its ops, with its kernels and collectives: what a segment costs beyond its ops.
`--rates fresh`: the model with rates measured in this process first, as
benchmarks/auto.py measures them (the stored ones may be another day's).

The accounting wraps those functions in this process (the wrappers' own cost is a
few microseconds a call); run it apart from other timed runs.

    PYTHONPATH=. python benchmarks/step_breakdown.py gpt64 baseline [--runs 30] [--segments] [--rates fresh]
"""
import argparse
import collections
import os
import resource
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import auto  # noqa: E402
import spmd  # noqa: E402
from spmd.jit import jitted  # noqa: E402
from spmd.jit.calibrate import fast  # noqa: E402
from spmd.runtime import execute  # noqa: E402
from spmd.sharding.auto.program_cost import _op_seconds, collective_rows  # noqa: E402
from spmd.sharding.kernel_traffic import KernelTraffic  # noqa: E402
from spmd.backends.llvm import schedule  # noqa: E402
from spmd.backends.llvm.plan import KernelStep  # noqa: E402
from spmd.transports.local import local_communicator, local_rendezvous, local_runtime  # noqa: E402

PROGRAMS = {"gpt64": lambda mesh: auto.gpt(mesh, 64, 2, 64), "gpt256": lambda mesh: auto.gpt(mesh, 256, 4, 128),
            "fsdp": lambda mesh: auto.gpt(mesh, 64, 2, 64, fsdp=True), "mlp": auto.mlp,
            "jacobi": auto.jacobi, "cg": auto.cg}


class Accounts:
    """Wall and CPU seconds per key, summed over the threads that add to them."""

    def __init__(self):
        self.wall = collections.defaultdict(float)
        self.cpu = collections.defaultdict(float)
        self.calls = collections.Counter()
        self.lock = threading.Lock()

    def add(self, key, wall, cpu):
        with self.lock:
            self.wall[key] += wall
            self.cpu[key] += cpu
            self.calls[key] += 1

    def timing(self, inner, key):
        """`inner`, each call's wall and CPU seconds added to `key` (or key(args))."""
        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.add(key(args) if callable(key) else key, time.perf_counter() - t0, time.thread_time() - c0)
        return timed

    def wrap(self, owner, name, key):
        setattr(owner, name, self.timing(getattr(owner, name), key))

    def clear(self):
        self.wall.clear()
        self.cpu.clear()
        self.calls.clear()


def accounted() -> Accounts:
    acc = Accounts()
    inner = local_rendezvous.Host.run

    def run(self, i, key, prog, n, run_multi):
        # the native run itself (a host's thread runs its ranks' segment), apart from the
        # wait for the host's other ranks to arrive
        return inner(self, i, key, prog, n, acc.timing(run_multi, "native runs"))
    local_rendezvous.Host.run = run
    acc.wrap(local_rendezvous.Host, "run", "segments")
    acc.wrap(local_communicator.LocalCommunicator, "_collective", lambda a: "python " + a[1])
    acc.wrap(local_runtime.LocalRuntime, "run", "run")
    acc.wrap(execute, "_placed", "placing")
    acc.wrap(execute, "_private", "private copies")
    acc.wrap(jitted.Jitted, "_write_back", "write back")
    return acc


def model_rows(low, machine=None, network=None):
    """[(component, seconds per device)] of lowered.cost() and its compute by kind of op
    (`machine`, `network`: the rates, else the stored ones)."""
    c = low.cost(machine=machine, network=network)
    m = c["machine"]
    traffic = KernelTraffic(low.graph, m.cache_bytes if m.cache_bandwidth is not None else 0.0)
    kinds, per_op = collections.Counter(), {}
    for op in low.graph.ops:
        if op.opdef.collective.reshards is not None or op.opdef.collective.phase is not None:
            continue
        kind = "products" if op.opdef.family == "dot" else (op.opdef.fusion or "other")
        per_op[op] = _op_seconds(op, m, traffic)
        kinds[f"compute: {kind}"] += per_op[op]
    coll = collections.Counter()
    for r in collective_rows(low.graph, low.mesh, c["network"]):
        coll[f"collective: {r['op']}"] += (r["runs"] or 1) * r["seconds"]
    rows = [("total", c["seconds"]), ("compute", c["compute_seconds"]), *sorted(kinds.items()),
            ("communication", c["comm_seconds"]), *sorted(coll.items()), ("call", c["step_seconds"]),
            ("results' buffers", c["outputs_seconds"]), ("numpy arguments", c["args_seconds"])]
    return rows, c["source"], per_op


class Segments:
    """Rank 0's native segments: each one's wall seconds a run (its arguments' addresses,
    its run and the wait for the ranks its host runs with) and what it holds."""

    def __init__(self):
        self.wall = collections.defaultdict(list)
        self.held = {}
        inner = schedule.Schedule._run_segment

        def run_segment(sched, seg, prog_at, arena, env, slots, comm, si, known):
            t0 = time.perf_counter()
            try:
                return inner(sched, seg, prog_at, arena, env, slots, comm, si, known)
            finally:
                if comm.rank == 0:
                    self.wall[si].append(time.perf_counter() - t0)
                    self.held[si] = (sched, seg)
        schedule.Schedule._run_segment = run_segment

    def clear(self):
        self.wall.clear()

    def rows(self, per_op) -> list:
        """[(segment, median wall seconds, the model's compute seconds of its ops, its
        kernels, its steps that are collectives, its ops' most frequent names)]."""
        out = []
        for si in sorted(self.wall):
            sched, seg = self.held[si]
            steps = [sched.exe.steps[k] for k in seg.steps]
            ops = [o for st in steps for o in (st.kernel.ops if isinstance(st, KernelStep) else [st])]
            names = collections.Counter(o.name for o in ops if o.opdef.fusion not in ("reindex",)
                                        and o.name != "constant")
            out.append((si, float(np.median(self.wall[si])), sum(per_op.get(o, 0.0) for o in ops),
                        sum(isinstance(st, KernelStep) for st in steps),
                        sum(not isinstance(st, KernelStep) and (st.opdef.collective.reshards is not None
                                                                 or st.opdef.collective.phase == "start")
                            for st in steps), ", ".join(k for k, _ in names.most_common(4))))
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("plan", choices=("hand", "auto", "baseline"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--segments", action="store_true",
                    help="also each native segment of rank 0: its wall against the model's compute of its ops")
    ap.add_argument("--rates", choices=("fresh", "stored"), default="stored",
                    help="fresh: measured in this process before the runs, as auto.py measures them")
    a = ap.parse_args(argv)
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    fn, args, hand = PROGRAMS[a.program](mesh)
    fn, hand_fn = fn if isinstance(fn, tuple) else (fn, fn)
    kw = {"hand": dict(in_shardings=hand), "auto": dict(mesh=mesh, in_shardings=spmd.AUTO),
          "baseline": dict(in_shardings=auto.baseline_shardings(mesh, args))}[a.plan]
    if a.program == "fsdp" and a.plan == "auto":
        kw["memory_limit"] = auto.fsdp_limit(fn, args, mesh)
    f = spmd.jit(hand_fn if a.plan == "hand" else fn, **kw)
    low = f.lower(*auto.copy(args))
    rows, source, per_op = model_rows(low, *(auto.fresh_rates() if a.rates == "fresh" else (None, None)))
    acc = accounted()
    segments = Segments() if a.segments else None
    f(*auto.copy(args))
    f(*auto.copy(args))
    acc.clear()
    if segments is not None:
        segments.clear()
    inputs = [auto.copy(args) for _ in range(a.runs)]
    ts, faults = [], 0
    for x in inputs:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0, c0 = time.perf_counter(), time.thread_time()
        f(*x)
        ts.append(time.perf_counter() - t0)
        acc.cpu["call"] += time.thread_time() - c0
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    acc.wall["call"] = sum(ts)
    n = a.runs
    print(f"{a.program} {a.plan}: measured {1e3 * float(np.median(ts)):.2f} ms median, {1e3 * fast(ts):.2f} fast end; "
          f"load {os.getloadavg()[0]:.2f}; rates: {source}")
    print(f"  {'model (ms a device)':<34}")
    for k, s in rows:
        print(f"    {k:<32} {s * 1e3:9.3f}")
    devices = mesh.size
    print(f"  {'measured (ms a step)':<34} {'wall':>9} {'CPU':>9} {'calls':>7}")
    for k in sorted(acc.wall):
        per = devices if k == "segments" or k.startswith("python ") else 2 if k == "native runs" else 1
        label = k + (" (a device)" if per == devices else " (a host)" if per > 1 else "")
        print(f"    {label:<32} {acc.wall[k] / n / per * 1e3:9.3f} {acc.cpu[k] / n / per * 1e3:9.3f} "
              f"{acc.calls[k] / n / per:7.1f}")
    print(f"    {'segments CPU / 2 cores':<32} {'':>9} {acc.cpu['segments'] / n / 2 * 1e3:9.3f}"
          f"   (against the model's compute + native collectives)")
    print(f"    {'minor page faults a call (process)':<32} {faults / n:9.0f}")
    if segments is not None:
        print(f"  {'rank 0 segment':<16} {'wall ms':>8} {'model ms':>9} {'kernels':>7} {'coll.':>5}  ops")
        for si, wall, model, kernels, colls, names in segments.rows(per_op):
            print(f"    {si:<14d} {wall * 1e3:8.3f} {model * 1e3:9.3f} {kernels:7d} {colls:5d}  {names}")


if __name__ == "__main__":
    main()
