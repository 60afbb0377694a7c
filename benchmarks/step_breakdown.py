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
`--again` (with --segments): also the CPU seconds of rank 0's host running the segment
(its ranks' kernels: what the model's compute prices), as scheduled and, for a segment
without native collectives, run again at once (the same kernels on the data the first run
left in this core's cache: what the cache costs a segment after the Python collective
before it) and an instruction at a time (each a native run of its own: a segment's
costs beyond its instructions'); the run's results are then not the program's. And the
median gap between the two hosts' starts of it (a native collective across hosts spins
that long on the earlier host: CPU, yet a wait).
`--waits`: where the device threads wait, a step: each host's other ranks' wake-up after
their host's native run (from the run's end to their return from Host.run), each group
rendezvous' waiters' wake-up (from the last member's arrival to their return), and the
device threads' run-queue wait (/proc's schedstat: seconds runnable without a core: a
thread woken onto a core another thread's native run holds waits there), per step.
`--rates fresh`: the model with rates measured in this process first, as
benchmarks/auto.py measures them (the stored ones may be another day's).

The accounting wraps those functions in this process (the wrappers' own cost is a
few microseconds a call); run it apart from other timed runs.

    PYTHONPATH=. python benchmarks/step_breakdown.py gpt64 baseline [--runs 30] [--segments [--again]] [--rates fresh]
"""
import argparse
import collections
import ctypes
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
from spmd.sharding.auto.program_cost import collective_rows, op_seconds  # noqa: E402
from spmd.backends.llvm import schedule  # noqa: E402
from spmd.backends.llvm.plan import KernelStep  # noqa: E402
from spmd.transports.local import local_communicator, local_rendezvous, local_runtime  # noqa: E402

PROGRAMS = {"gpt64": lambda mesh: auto.gpt(mesh, 64, 2, 64), "gpt256": lambda mesh: auto.gpt(mesh, 256, 4, 128),
            "fsdp": lambda mesh: auto.gpt(mesh, 64, 2, 64, fsdp=True), "mlp": auto.mlp,
            "jacobi": auto.jacobi, "cg": auto.cg,
            **{name: (lambda mesh, _n=name: auto.stencil(mesh, _n))
               for name in ("nine_point", "heat3d", "diffusion", "life", "cavity")}}


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
    kinds, per_op = collections.Counter(), op_seconds(low.graph, m)
    for op, t in per_op.items():
        kind = "products" if op.opdef.family == "dot" else (op.opdef.fusion or "other")
        kinds[f"compute: {kind}"] += t
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


def one_by_one(run_multi, progs, nr, count) -> float:
    """CPU seconds of the `nr` ranks' programs at address `progs` (`count` instructions each)
    run an instruction at a time, each a native run of its own."""
    at = np.ctypeslib.as_array((ctypes.c_int64 * nr).from_address(progs))
    one = np.zeros(2, np.int64)
    where = np.array([one.ctypes.data], np.int64)
    t = 0.0
    for r in range(nr):
        instrs = np.ctypeslib.as_array((ctypes.c_int64 * (2 * count)).from_address(int(at[r])))
        for j in range(count):
            one[:] = instrs[2 * j: 2 * j + 2]
            c0 = time.thread_time()
            run_multi(where.ctypes.data, 1, 1)
            t += time.thread_time() - c0
    return t


def exchanges(sched, seg) -> bool:
    """Whether the segment may exchange: a collective among its steps, or a step with a
    body (a loop's may hold collectives)."""
    for k in seg.steps:
        st = sched.exe.steps[k]
        if isinstance(st, KernelStep):
            continue
        if st.opdef.collective.reshards is not None or st.opdef.collective.phase is not None \
                or any(hasattr(a, "ops") and hasattr(a, "inputs") for a in st.attrs.values()):
            return True
    return False


class HostRuns:
    """Rank 0's host's native runs of each segment (--again): CPU seconds as scheduled,
    run again at once and run an instruction at a time (the segments in `rerun`: set
    before the timed runs), and each host's start times."""

    def __init__(self):
        self.cpu = collections.defaultdict(list)
        self.again = collections.defaultdict(list)
        self.alone = collections.defaultdict(list)
        self.starts = collections.defaultdict(list)
        self.rerun = set()
        inner = local_rendezvous.Host.run

        def run(host, i, key, prog, n, run_multi):
            def timed(progs, nr, count):
                t0, c0 = time.perf_counter(), time.thread_time()
                run_multi(progs, nr, count)
                c1 = time.thread_time()
                self.starts[key[1], host.devices[0]].append(t0)
                if 0 in host.devices:
                    self.cpu[key[1]].append(c1 - c0)
                    if key[1] in self.rerun:
                        run_multi(progs, nr, count)
                        self.again[key[1]].append(time.thread_time() - c1)
                        self.alone[key[1]].append(one_by_one(run_multi, progs, nr, count))
            return inner(host, i, key, prog, n, timed)
        local_rendezvous.Host.run = run

    def clear(self):
        for d in (self.cpu, self.again, self.alone, self.starts):
            d.clear()

    def row(self, si) -> tuple:
        """(median CPU seconds, median CPU seconds run again and an instruction at a time, or
        None, median gap between the first two hosts' starts or None)."""
        med = (lambda x: float(np.median(x)) if len(x) else None)
        firsts = sorted(d for s, d in self.starts if s == si)
        gap = None
        if len(firsts) > 1:
            a, b = self.starts[si, firsts[0]], self.starts[si, firsts[1]]
            if len(a) == len(b):
                gap = med(np.abs(np.subtract(b, a)))
        return med(self.cpu[si]), med(self.again[si]), med(self.alone[si]), gap


class Waits:
    """--waits: the wake-ups of the local transport's rendezvous (local_rendezvous.Group.
    exchange, Host.run) and the device threads' run-queue wait."""

    def __init__(self):
        self.events = []           # (kind, id of the group, its generation, arrival, return, run's end)
        self.queued = 0.0
        exchange, run = local_rendezvous.Group.exchange, local_rendezvous.Host.run

        def timed_exchange(group, i, value, what):
            gen, t0 = group.gen, time.perf_counter()
            out = exchange(group, i, value, what)
            self.events.append(("group", id(group), gen, t0, time.perf_counter(), None))
            return out

        def timed_run(host, i, key, prog, n, run_multi):
            gen, t0, end = host.gen, time.perf_counter(), []

            def ran(*a):
                run_multi(*a)
                end.append(time.perf_counter())
            out = run(host, i, key, prog, n, ran)
            self.events.append(("host", id(host), gen, t0, time.perf_counter(), end[0] if end else None))
            return out
        local_rendezvous.Group.exchange = timed_exchange
        local_rendezvous.Host.run = timed_run

    @staticmethod
    def run_queue_seconds() -> float:
        """Seconds the device threads have waited runnable for a core (schedstat's second field)."""
        t = 0.0
        for th in threading.enumerate():
            if th.name.startswith("spmd-device-") and th.native_id is not None:
                try:
                    with open(f"/proc/self/task/{th.native_id}/schedstat") as f:
                        t += int(f.read().split()[1]) * 1e-9
                except (OSError, IndexError, ValueError):
                    pass
        return t

    def clear(self):
        self.events.clear()
        self.queued = -self.run_queue_seconds()

    def stop(self):
        self.queued += self.run_queue_seconds()

    def rows(self) -> list:
        """[(what, its count, median, p90 and sum of the waiters' wake-ups)] over the runs."""
        by = collections.defaultdict(list)
        for e in self.events:
            by[e[:3]].append(e)
        lags = {"host": [], "group": []}
        counts = collections.Counter()
        for (kind, _, _), es in by.items():
            if kind == "group":
                done = max(e[3] for e in es)
                lags[kind] += [e[4] - done for e in es if e[3] < done]
            else:
                ends = [e[5] for e in es if e[5] is not None]
                if not ends:
                    continue
                lags[kind] += [e[4] - ends[0] for e in es if e[5] is None]
            counts[kind] += 1
        return [(k, counts[k], float(np.median(v)), float(np.percentile(v, 90)), float(np.sum(v)))
                for k, v in lags.items() if v]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("plan", choices=("hand", "auto", "baseline"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--segments", action="store_true",
                    help="also each native segment of rank 0: its wall against the model's compute of its ops")
    ap.add_argument("--again", action="store_true",
                    help="with --segments: each segment's CPU on rank 0's host, run again at once and an "
                         "instruction at a time, and the hosts' start gap")
    ap.add_argument("--waits", action="store_true",
                    help="also the rendezvous' wake-ups and the device threads' run-queue wait, a step")
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
    hosts = HostRuns() if a.segments and a.again else None
    waits = Waits() if a.waits else None
    f(*auto.copy(args))
    f(*auto.copy(args))
    acc.clear()
    if waits is not None:
        waits.clear()
    if segments is not None:
        if hosts is not None:
            hosts.clear()
            hosts.rerun = {si for si, (sched, seg) in segments.held.items() if not exchanges(sched, seg)}
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
    if waits is not None:
        waits.stop()
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
    if waits is not None:
        print(f"  {'waits (a step)':<34} {'count':>9} {'median':>9} {'p90':>9} {'sum ms':>9}")
        names = {"host": "a host's ranks woken after its run", "group": "a rendezvous' waiters woken"}
        for k, c, med, p90, tot in waits.rows():
            print(f"    {names[k]:<32} {c / n:9.1f} {med * 1e3:9.3f} {p90 * 1e3:9.3f} {tot / n * 1e3:9.3f}")
        print(f"    {'device threads runnable, no core':<32} {'':>9} {'':>9} {'':>9} {waits.queued / n * 1e3:9.3f}")
    if segments is not None:
        extra = f" {'host cpu':>8} {'again':>7} {'alone':>7} {'gap':>7}" if hosts is not None else ""
        print(f"  {'rank 0 segment':<16} {'wall ms':>8} {'model ms':>9}{extra} {'kernels':>7} {'coll.':>5}  ops")
        total = np.zeros(5)
        ms = (lambda x: f"{x * 1e3:7.3f}" if x is not None else f"{'':>7}")
        for si, wall, model, kernels, colls, names in segments.rows(per_op):
            if hosts is not None:
                cpu, again, alone, gap = hosts.row(si)
                extra = f" {ms(cpu):>8} {ms(again)} {ms(alone)} {ms(gap)}"
                if again is not None:
                    total += (cpu, again, alone, model, 1)
            print(f"    {si:<14d} {wall * 1e3:8.3f} {model * 1e3:9.3f}{extra} {kernels:7d} {colls:5d}  {names}")
        if hosts is not None and total[4]:
            print(f"  segments without native collectives ({int(total[4])}), ms a step: host CPU {total[0] * 1e3:.3f}, "
                  f"run again {total[1] * 1e3:.3f}, an instruction at a time {total[2] * 1e3:.3f}, "
                  f"the model's compute (a device) {total[3] * 1e3:.3f}")


if __name__ == "__main__":
    main()
