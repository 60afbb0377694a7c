"""jit's lowering stage: a traced Graph -> every stage's Graph (compiler/pipeline.py), held
by a `Lowered`: what a user inspects of a program (its text at each stage, explain,
report, memory) and, called, what runs it (compiling.py and running.py).

    traced -> propagated -> partitioned -> optimized -> executable

(autodiff happens during tracing; without a mesh there is nothing to propagate or
partition.)
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .running import run


# what lowered.memory()'s figures leave out: memory the program does not plan
NOT_COUNTED = ("the communicator's own memory: MPI's internal buffers and shared-memory segments, the "
               "result buffers the MPI and Ray communicators keep for reuse (up to 4 of each size, "
               "transports/buffer_pool.py), the per-member blocks a float all_reduce over MPI or Ray gathers "
               "to reduce in group order; the compiled code; Python's and numpy's own objects (but those of "
               "the arrays a run makes, counted in scratch_bytes)")


class Lowered:
    """A traced and compiled program for one input signature: every stage's Graph,
    the mesh, the per-leaf input/output shardings, and (lazily) the executable."""

    def __init__(self, stages: dict, in_tree, out_tree, backend, mesh=None):
        self.stages = stages
        self.in_tree, self.out_tree = in_tree, out_tree
        self.backend = backend
        self.mesh = mesh
        self._exe = None
        self._planned = None          # the executable planned, not built (memory figures)
        self.updates = []             # argument leaves the program writes (extra outputs)
        self.numpy_args = {}          # leaf -> bytes of the arguments lower() was given as numpy (cost())
        self.returned = {}            # result position -> a written argument leaf it is
        self.scalars = {}             # result position -> float | int (a returned float(x))
        self.int_arguments = {}       # argument leaf -> [dtypes] its Python int must fit (Graph)
        # numpy's global random state as the function leaves it (it seeded it: random_guard)
        self.np_random_state = None
        self.donated = frozenset()    # argument leaves whose buffers the program may reuse
        self.breaks = []              # (loc, what, value) the trace took from the data (graph_breaks.py)
        # outputs after the results: the breaks' values as this program computes them, so a
        # call can run the path whole and check them (graph_breaks.Path)
        self.checks = 0
        # then (exception class, message) per flag (Graph.errors): a call raises the first set
        self.errors = []
        self.timings = {}             # seconds per stage, from the pipeline
        # with spmd.checkpoint: the plan that runs ("as written", "held", "merged"); else None
        self.checkpoints = None
        self.runs = None              # how calls run it (running.py: made at the first call)
        self.auto = None              # with spmd.AUTO: the search's AutoPlan (sharding/auto/choose.py)
        self.network = None           # jit's network= (the cost model's links), or None: this machine's

    def as_text(self, stage="optimized", source=False, compact=False):
        """The program at `stage` as text: exact (it parses back) by default;
        `source=True` puts each op's user line and code in a comment column;
        `compact=True` also folds index arithmetic (masks, slice offsets) into one line
        each (ir/text.py)."""
        from ..ir.text import print_graph
        if stage not in self.stages:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(self.stages)}")
        return print_graph(self.stages[stage], source=source, compact=compact)

    @property
    def graph(self):
        """The program every rank runs."""
        return self.stages["optimized"]

    @property
    def in_shardings(self):
        return [v.sharding for v in self.stages.get("propagated", self.stages["traced"]).inputs]

    @property
    def out_shardings(self):
        return [v.sharding for v in self.stages.get("propagated", self.stages["traced"]).outputs]

    def shardings(self):
        """The in and out shardings as pytrees of the arguments and results; printed, the
        code that pins them: `spmd.jit(f, in_shardings=..., out_shardings=...)` with what
        spmd.AUTO chose written out, so a plan can be frozen."""
        from ..tree import tree_unflatten
        from .plan_text import PlanShardings
        ins = tree_unflatten(self.in_tree, self.in_shardings[:self.in_tree.num_leaves])
        outs = tree_unflatten(self.out_tree, self.out_shardings[:self.out_tree.num_leaves])
        return PlanShardings(ins, outs)

    def cost(self, network=None, machine=None):
        """The cost model's prediction of one run, per device (costing.py): `seconds`
        (compute + communication + a call's fixed cost: no overlap assumed),
        `compute_seconds`, `comm_seconds`, `step_seconds` (a call's fixed cost: Machine.step,
        Machine.leaf per argument and result leaf more, and Link.handoff where its ranks
        run on the devices' threads), `outputs_seconds` (the new
        buffers of the results a device makes: Machine.output a byte), `args_seconds` (the call's
        copies of the arguments lower() was given as numpy arrays: placing them, writing
        back those the program writes; none for spmd.Arrays), `collectives` (each with its
        seconds), `peak_bytes` (the memory plan's), and the rates used and their `source`
        (given, `spmd doctor --calibrate`'s, or defaults). Needs no devices."""
        from .costing import predict
        return predict(self, network or self.network, machine)

    def report(self) -> dict:
        """Per-device collectives (op, axes, group_size, in/out shapes, dtype, bytes) and
        comm_bytes of the partitioned program; `launched` / `launched_bytes`, the same for
        the program that runs (independent all-reduces combined); flops; out_shardings."""
        from ..sharding.report import report
        return report(self.stages, self.out_shardings)

    def explain(self, file=None, verbose=False) -> str:
        """Print what spmd.AUTO chose and why (if it did), the collectives and why, the
        annotations and the peak memory per device;
        with verbose=True also where every value's sharding came from and the largest
        values live at the peak."""
        from ..sharding.explain import explain_program
        return explain_program(self.stages, self.memory(), self.breaks, file, verbose, self.auto)

    def memory(self) -> dict:
        """Per-device memory of one run of the compiled program, in bytes.

        `peak_bytes`: the most a device holds at once: its arguments, the arena of
        temporaries and the scratch (allocated for every run), and the largest set of
        buffers made per call live at one step (outputs, collectives' results, ops run
        through numpy; a native segment makes the buffers it writes when it starts and
        holds them until it returns: the schedule the current runtime runs). `peak`: the busiest step: its `op` and user line (`loc`),
        `live_bytes`, those bytes `by_kind` (arguments, constants, outputs, activations:
        made before the step and read after it, temporaries: made or last read by it)
        and the largest values `live` there (value, shape, dtype, bytes, kind, and the op
        and user line that made it). Also `temp_bytes` (the arena),
        `scratch_bytes` (what the native schedule holds besides: copies of dot operands
        BLAS cannot read in place, the native all-reduces' mailboxes, its argument blocks,
        and Python's objects of the arrays a run makes),
        `temporary_bytes` (what a run needs besides its arguments, constants and outputs:
        XLA's temp allocation), `peak_live_bytes` (the largest set of temporaries the arena
        holds at once), `argument_bytes`,
        `output_bytes`, `in_place` (values written into a dying input's buffer),
        `in_outputs` (temporaries computed in an output's buffer before the output is
        written: the arena and these figures leave them out, as XLA's do),
        `temporaries_in_outputs` (the largest of them: value, shape, dtype, bytes, the
        `output` whose buffer holds it, op and user line) and
        `donated` (argument positions whose buffers the program reuses). The numpy
        backend plans nothing: every result is a new array (None for the plan's figures).
        `not_counted` says what none of these figures holds: the communicator's own
        memory, the compiled code, Python's and numpy's objects."""
        from ..ir.text import name_values
        g = self.graph
        size = lambda vs: int(sum(v.size * np.dtype(v.dtype).itemsize for v in vs))  # noqa: E731
        rep = {"temp_bytes": None, "peak_live_bytes": None, "argument_bytes": size(g.inputs),
               "output_bytes": size(g.outputs), "in_place": None, "donated": []}
        exe = self.planned()
        if hasattr(exe, "memory_report"):
            rep.update(exe.memory_report(_FakeComm(self.mesh)))
            prof = exe.memory_profile(_FakeComm(self.mesh))
        else:
            from ..backends.memory_profile import profile_of_ops
            prof = profile_of_ops(g)
        # values named as in the printed program (as_text("optimized"))
        rep.update(prof.report(name_values(g)))
        rep["not_counted"] = NOT_COUNTED
        return rep

    @property
    def reused(self) -> frozenset:
        """Argument leaves the program writes in place (`updates`) whose buffers it may also
        reuse: numpy writes into them anyway, and the old value is read by no one after
        the run (a stencil step computes its new grid in the old one's buffers). The new
        value ends in them where the memory plan allows; else it is copied in after."""
        if self.checks or self.errors:   # run before its breaks and errors are checked: the arguments stay as they were
            return frozenset()
        return frozenset(self.updates) - self.donated

    def replace_stage(self, name, graph):
        """`graph` as stage `name` and the program that runs (compiled afresh); checked
        as the pipeline's stages are (SPMD_VERIFY)."""
        from ..compiler.pipeline import verifying
        if verifying():
            from ..ir.verify import verify
            verify(graph, name)
        self.stages[name] = self.stages["optimized"] = graph
        self._exe = self._planned = None

    def memory_profile(self):
        """What one run holds per device, step by step (backends/memory_profile.py)."""
        exe = self.planned()
        if hasattr(exe, "memory_profile"):
            return exe.memory_profile(_FakeComm(self.mesh))
        from ..backends.memory_profile import profile_of_ops
        return profile_of_ops(self.graph)

    def planned(self):
        """The executable compile() makes, or one planned alike without compiling its code
        (its memory figures are the same; the memory-limit search asks them of programs
        it never runs)."""
        if self._exe is not None:
            return self._exe
        if self._planned is None:
            self._planned = self._make(build=False)
        return self._planned

    def _make(self, build):
        from ..backends import compile_graph
        from ..compiler.gc_pause import paused
        n = len(self.graph.outputs) - len(self.updates)
        with paused():
            return compile_graph(self.graph, self.backend, donated=sorted(self.donated | self.reused),
                                 written={n + j: k for j, k in enumerate(self.updates)}, build=build)

    def compile(self):
        if self._exe is None:
            exe = self._make(build=True)
            n = len(self.graph.outputs) - len(self.updates)
            # a result that is a written argument (the same value, laid out alike) is not
            # copied: the caller is handed the argument itself (Jitted.__call__)
            outs = self.graph.outputs
            same = {i: n + self.updates.index(k) for i, k in self.returned.items()
                    if outs[i] is outs[n + self.updates.index(k)]}
            if same:
                exe.same = same
            self._exe = exe
        return self._exe

    def __call__(self, *flat_args):
        """Run it on the flattened arguments: its flat results (with the new values of the
        arguments it writes after them), raising Python's error where a condition it
        computes holds (Graph.errors: math.sqrt of a negative)."""
        outs = self.run_flat(*flat_args)
        n = len(outs) - len(self.updates)
        k = n - len(self.errors)
        for flag, (exc, msg) in zip(outs[k:n], self.errors):
            if bool(np.asarray(flag)):
                raise exc(msg)
        return list(outs[:k - self.checks]) + list(outs[n:])

    def run_flat(self, *flat_args):
        """Every output a run gives, as jit reads them: the results, the graph breaks'
        values (`checks`), the errors' flags, the written arguments' new values."""
        return run(self, list(flat_args))


class _FakeComm:
    """What the executable asks a communicator when it plans a run: the mesh's size,
    whether the ranks are threads of one process, and what they exchange natively
    (Runtime.native_scope: a native schedule then runs those collectives in its segments,
    which makes their buffers when they start, backends/llvm/schedule.py)."""

    def __init__(self, mesh):
        from ..runtime.current_runtime import get_runtime
        self.size = 1 if mesh is None else mesh.size
        scope = get_runtime().native_scope(mesh)
        self.ranks_in_process = self.size if scope == "process" else 1
        # (what the executable reads of a NativeExchange to pick the schedule)
        self.native_exchange = None if scope is None else SimpleNamespace(scope=scope)




def lower_graph(graph, mesh, in_shardings, out_shardings, in_tree, out_tree, backend, done=None,
                hints=None) -> Lowered:
    """The traced `graph` through every stage after tracing (compiler/pipeline.py);
    `done`, `hints`: as pipeline.lower's (spmd.AUTO's)."""
    from ..compiler import pipeline      # (loaded when a program is first lowered, not with spmd)
    stages, timings = pipeline.lower(graph, mesh, in_shardings, out_shardings, done, hints)
    low = Lowered(stages, in_tree, out_tree, backend, mesh)
    low.timings = timings
    return low
