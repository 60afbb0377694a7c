"""The executor core both backends share: what an executable does around its steps.

`Executable.__call__(inputs, comm)` checks the inputs against the program's signature,
runs the steps (each backend's `run`), and hands back fresh outputs. In between, the
helpers here are the common parts of a run loop: running one op through its numpy
reference (with the communicator when it is a collective), checking what it produced
against the op's shape rule, dropping buffers after their last use, and putting each step
on the SPMD_TRACE timeline.
"""
from __future__ import annotations

import numpy as np

from ..errors import SpmdError
from ..ir.graph import any_op
from ..tools import timeline


def last_uses(graph, reads):
    """step index -> values no later step (nor the program's outputs) needs; `reads` is the
    list of each step's operands."""
    last = {}
    for i, rs in enumerate(reads):
        for v in rs:
            last[v] = i
    outs = set(graph.outputs)
    free = [[] for _ in reads]
    for v, i in last.items():
        if v not in outs:
            free[i].append(v)
    return free


def _subgraphs(op):
    return [op.attrs[k] for k in op.opdef.subgraphs if op.attrs.get(k) is not None]


def _talks(graph) -> bool:
    return any_op(graph, _exchanges)


def _exchanges(op) -> bool:
    c = op.opdef.collective
    return op.opdef.family == "collective" or c.reshards is not None or c.phase is not None or c.exchange


def _work(graph) -> float:
    """The bytes every value of a run makes, a scan's body once an iteration; infinite with
    a loop whose trip count is unknown (a while): a runtime running ranks in turn on the
    caller's thread, in native code, sees a Ctrl-C only after bounded work."""
    n = 0.0
    for op in graph.ops:
        n += sum(int(r.size) * np.dtype(r.dtype).itemsize for r in op.results)
        body = sum(_work(g) for g in _subgraphs(op))
        if op.opdef.family == "control" and "body" in op.opdef.subgraphs:
            if "length" not in op.attrs:
                return float("inf")
            body *= max(1, int(op.attrs["length"]))
        n += body
    return n


class Executable:
    """Subclasses set `self.graph` and implement `run(env, comm)`, which must leave every
    output of the program in `env`."""

    planned = frozenset()         # values whose buffers the executable reuses between calls
    # output position -> the input position whose new value it is (a numpy program writing
    # into its argument): where the output was computed in that input's buffer (the
    # input donated), it is handed back as that buffer, and no other output is
    written = {}
    # output position -> the written output (a key of `written`) it is the same value as:
    # the caller hands back the argument for it, so it is not copied (Lowered.compile)
    same = {}

    @property
    def talks(self) -> bool:
        """Does a run exchange anything with other ranks (a collective anywhere in the
        program, loop bodies too)? A runtime may run the ranks of a program that does
        not one after another (LocalRuntime, for small programs)."""
        t = self.__dict__.get("_talks")
        if t is None:
            t = self.__dict__["_talks"] = _talks(self.graph)
        return t

    @property
    def work_bytes(self) -> float:
        """The bytes of every value a run makes (a scan's body once an iteration, infinite
        with a while loop): a rough size of its work."""
        w = self.__dict__.get("_work")
        if w is None:
            w = self.__dict__["_work"] = _work(self.graph)
        return w

    @property
    def num_outputs(self) -> int:
        """How many outputs a call returns (a runtime that must ask for each rank's results
        before it runs, Ray's, reads it: Runtime.run)."""
        return len(self.graph.outputs)

    def __call__(self, inputs, comm=None, into=None):
        """`into`: {output position: array} buffers the caller gives for outputs (of the
        output's shape and dtype, contiguous, dead: read by no one, sharing memory with no
        input). A backend may compute the output there instead of in a new array (a loop's
        carried value written over the one of two iterations ago); the numpy backend does
        not."""
        env = self.check_inputs(inputs)
        given = [env[v] for v in self.graph.inputs]
        self.run_into(env, comm, into or {})
        keep = dict(into or {})
        for o, i in self.written.items():
            keep.setdefault(o, given[i])
        return self.results(env, keep, {id(given[i]) for i in self.written.values()})

    def run_into(self, env, comm, into):
        self.run(env, comm)

    def runner(self, comm):
        """A function run(inputs, comm) -> outputs doing what a call does, for the calls of
        one run on this thread (the one device of a program without a mesh, or the ranks
        of a run one after another; `comm`: the first one's, the others' alike): what is
        the same for all of them looked up once. A backend may give a shorter path than
        __call__ (the LLVM backend's, backends/llvm/direct_run.py)."""
        return self

    def check_inputs(self, inputs) -> dict:
        g = self.graph
        if len(inputs) != len(g.inputs):
            raise SpmdError(f"{g.name}: expected {len(g.inputs)} inputs, got {len(inputs)}")
        dtypes = self.__dict__.get("_input_dtypes")
        if dtypes is None:              # (dtype.name is slow: a loop body checks every iteration)
            dtypes = self.__dict__["_input_dtypes"] = [np.dtype(v.dtype) for v in g.inputs]
        env = {}
        for i, (v, x) in enumerate(zip(g.inputs, inputs)):
            x = np.asarray(x)
            if x.shape != v.shape or x.dtype != dtypes[i]:
                raise SpmdError(f"{g.name}: input {i} is {x.dtype.name}{list(x.shape)}, the program "
                                f"takes {v.dtype}{list(v.shape)}")
            env[v] = x
        return env

    def results(self, env, keep=None, kept_inputs=frozenset()):
        """Outputs are fresh, writeable arrays: never the caller's input, a constant the graph
        keeps, a view (a broadcast is read-only), a reused buffer, or the same array twice.
        `keep`: {output position: array} the caller takes back as it is where the output
        is in it (a buffer it gave, `into`, or an input it writes in place); any other
        output in one of `kept_inputs` (the inputs the caller keeps) is copied."""
        keep = keep or {}
        outs = self.graph.outputs
        out, seen = [None] * len(outs), set()
        for k, x in keep.items():
            if env[outs[k]] is x and id(x) not in seen:
                out[k] = x
                seen.add(id(x))
        copied = self.__dict__.get("_always_copied")
        if copied is None:          # (the outputs a run never returns as they are: asked once)
            copied = self.__dict__["_always_copied"] = [
                v.producer is None or v.producer.name == "constant" or v in self.planned for v in outs]
        for k, v in enumerate(outs):
            if out[k] is not None or (k in self.same and env[outs[self.same[k]]] is env[v]):
                continue
            x = env[v]
            if (copied[k] or id(x) in seen or id(x) in kept_inputs
                    or not x.flags.writeable or x.base is not None):
                x = x.copy()
            seen.add(id(x))
            out[k] = x
        for k, w in self.same.items():
            if out[k] is None:
                out[k] = out[w]
        return out

    def run_steps(self, steps, free_after, env, comm, run_step, label):
        """Run `run_step(step, env, comm)` for each step in order, dropping values after
        their last use; with SPMD_TRACE on, each step is a span (`label(step)` gives its
        name, category and source location)."""
        tracing = timeline.enabled()
        rank = getattr(comm, "rank", 0)
        started = {}                 # handle Value -> when its collective's start returned
        # collectives in flight move on between steps (MPI's progress only inside MPI calls)
        progress = getattr(comm, "progress", None)
        for step, free in zip(steps, free_after):
            t0 = timeline.now_us() if tracing else 0
            run_step(step, env, comm)
            if progress is not None:
                progress()
            if tracing:
                name, cat, loc = label(step)
                t1 = timeline.now_us()
                timeline.add(name, cat, rank, t0, t1 - t0, {"loc": loc})
                phase = getattr(getattr(getattr(step, "opdef", None), "collective", None), "phase", None)
                if phase == "start":
                    started[step.result] = t1
                elif phase == "done" and step.operands[0] in started:
                    x = step.operands[1]
                    timeline.add_async(f"{step.opdef.collective.async_of} in flight", "inflight", rank,
                                       started.pop(step.operands[0]), t0,
                                       {"loc": loc, "bytes": x.size * np.dtype(x.dtype).itemsize})
            for v in free:
                env.pop(v, None)


def op_label(op):
    return op.name, "collective" if op.opdef.needs_comm else "compute", op.loc


def part_groups(ops) -> dict:
    """{op: (its group, the parts its program takes of its operands)}, for ops that are
    one op per numpy result (an OpDef with `parts`: svd's u, s, vh) where two or more parts
    of the same operands and attributes are taken: numpy computes those in one call."""
    groups = {}
    for op in ops:
        if op.opdef.parts is not None:
            key = op.name, op.operands, tuple(sorted((k, v) for k, v in op.attrs.items() if k != "part"))
            groups.setdefault(key, []).append(op)
    return {op: (key, frozenset(o.attrs["part"] for o in g)) for key, g in groups.items() if len(g) > 1 for op in g}


_PARTS = object()       # env's entry for the parts computed with another part, not taken yet


def run_op(op, env, comm, run=None, out=None, parts=None):
    """One op through its numpy reference; its results go into env. `run(graph, inputs)`
    runs a control-flow op's body with the backend's own executable of it (interpreted
    with the numpy references when None). `out`: the array to write the result into, for
    an OpDef that `takes_out`. `parts`: the program's part_groups (the first op of a group
    computes every part the group takes, the others take theirs)."""
    opdef = op.opdef
    args = [env[o] for o in op.operands]
    kw = {} if out is None else {"out": out}
    group = parts.get(op) if parts else None
    try:
        if group is not None:
            key, wanted = group
            pending = env.setdefault(_PARTS, {})
            got = pending.get(key)
            if got is None or op.attrs["part"] not in got:      # (a part taken twice: again)
                got = pending[key] = opdef.parts(*args, wanted=wanted,
                                                 **{k: v for k, v in op.attrs.items() if k != "part"})
            out = got.pop(op.attrs["part"])
            if not got:
                del pending[key]
        elif opdef.subgraphs:
            out = opdef.ref(*args, comm=comm, run=run, **op.attrs)
        elif opdef.needs_comm:
            if comm is not None:                # the user line, for failure messages (transports/communicator.py)
                comm.loc = op.loc
            out = opdef.ref(*args, comm=comm, **kw, **op.attrs)
        else:
            out = opdef.ref(*args, **kw, **op.attrs)
    except SpmdError:
        raise
    except Exception as e:
        raise SpmdError(f"{op.name} at {op.loc} failed at run time: {type(e).__name__}: {e}") from e
    outs = [out] if len(op.results) == 1 else list(out)
    for r, x in zip(op.results, outs):
        env[r] = checked(op, r, x)


_DTYPES = {}      # a Value's dtype name -> numpy's builtin dtype of that name (its one instance)


def checked(op, v, x):
    """The ref's result as an ndarray; it must be exactly the type the op inferred."""
    x = np.asarray(x)
    want = _DTYPES.get(v.dtype)
    if want is None:
        want = _DTYPES[v.dtype] = np.dtype(v.dtype)
    # (dtype.name is slow: asked only where the dtype is not the builtin one itself)
    if x.shape != v.shape or (x.dtype is not want and x.dtype.name != v.dtype):
        raise SpmdError(f"internal error: {op.name} at {op.loc} computed {x.dtype.name}{list(x.shape)} "
                        f"but its shape rule says {v.dtype}{list(v.shape)}")
    return x
