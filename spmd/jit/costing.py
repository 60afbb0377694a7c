"""`lowered.cost()`: the cost model's step (sharding/cost_model.py) applied to the program
every rank runs, with this machine's rates (rates.py)."""
from __future__ import annotations

import numpy as np

from ..runtime.current_runtime import started
from ..sharding.auto.program_cost import collective_rows, handoff_seconds, meeting_machine, program_seconds
from ..sharding.cost_model import collective_seconds, gathered_back_bytes, private_copy_bytes
from ..sharding.kernel_traffic import nbytes
from .rates import rates


class Cost(dict):
    """lowered.cost(): a dict (keys in Lowered.cost's docstring) that prints as a summary."""

    def __str__(self):
        lines = [f"predicted step: {self['seconds'] * 1e3:.3f} ms per device (compute "
                 f"{self['compute_seconds'] * 1e3:.3f} ms, communication {self['comm_seconds'] * 1e3:.3f} ms, "
                 f"a call {self['step_seconds'] * 1e3:.3f} ms, its results' buffers {self['outputs_seconds'] * 1e3:.3f} ms, "
                 f"numpy arguments {self['args_seconds'] * 1e3:.3f} ms; "
                 f"no overlap assumed); peak memory "
                 f"{self['peak_bytes'] / 2**20:.2f} MiB per device; rates: {self['source']}"]
        for r in self["collectives"]:
            lines.append(f"  {r['op']:<18} {','.join(r['axes']):<12} {r['bytes']:>12} bytes "
                         f"{r['seconds'] * 1e6:9.1f} us" + (f" x{r['runs']}" if (r["runs"] or 1) != 1 else ""))
        return "\n".join(lines)


def predict(low, network=None, machine=None) -> Cost:
    mesh = low.mesh
    m, n, source = rates(network, machine, mesh.size if mesh is not None else 1)
    g = low.graph
    out = Cost(program_seconds(g, mesh, m, n))
    given, m = m, meeting_machine(g, m, n)        # (the call's own work as its program's)
    fixed = handoff_seconds(g, mesh, n) + leaves_seconds(low, m)
    out["step_seconds"] += fixed
    out["seconds"] += fixed
    # the arguments lower() was given as numpy arrays: a call with such arguments on a
    # mesh copies them onto the devices, and back into those the program writes (without
    # a mesh the program reads and writes the caller's arrays)
    # (a process's copies of its numpy arguments run outside the program, all processes
    # at once: the devices-at-once rates, not slowed by the program's meetings)
    out["args_seconds"] = 0.0 if mesh is None else numpy_arguments_seconds(low, m if _processes() == 1 else given, n)
    out["outputs_seconds"] = outputs_seconds(g, m)
    out["seconds"] += out["args_seconds"] + out["outputs_seconds"]
    out["collectives"] = collective_rows(g, mesh, n, m) if mesh is not None else []
    out["peak_bytes"] = low.memory()["peak_bytes"]
    out.update(machine=given, network=n, source=source)
    return out


def leaves_seconds(low, machine) -> float:
    """Machine.leaf for each argument and result leaf of a call beyond the one of each
    that Machine.step was measured with (the arguments a call passes: static ones are
    not leaves). 0 without a mesh: its leaves are the caller's numpy arrays, used as they are."""
    if low.mesh is None:
        return 0.0
    g = low.stages["traced"]
    return machine.leaf * (max(len(g.inputs) - 1, 0) + max(len(g.outputs) - 1, 0))


def outputs_seconds(graph, machine) -> float:
    """Machine.output for each byte of the results a device makes in a call (the
    partitioned program's outputs: a device's shards)."""
    return machine.output * sum(nbytes(v) for v in graph.outputs)


def numpy_arguments_seconds(low, machine, network=None) -> float:
    """Seconds a call spends on the arguments lower() was given as numpy arrays: placing
    each; for those the program writes (or is donated), the devices' private copies of
    their shards (cost_model.private_copy_bytes: they depend on the layout); and the
    write back of those it writes. One process (the local runtime's) places every
    device's shard and writes the whole value back, at the calibrated per-byte rates
    (Machine.numpy_argument_seconds). Under several processes (MPI, Ray) each copies
    only its own devices' shards, every process at once, and then writes the whole new
    value into its caller's array: those copies at the machine's streaming rate (two
    bytes moved a byte copied; the per-byte rates, measured with one process copying
    while nothing else ran, priced a replicated 8 MiB grid's copies under 4 processes on
    2 cores at 0.4x), after the gather of the other processes' shards
    (cost_model.gathered_back_bytes, an all_gather over the processes, and the small one
    checking they all read alike)."""
    private = low.reused | low.donated
    ins = low.stages.get("propagated", low.stages["traced"]).inputs
    devices = _local_devices(low.mesh)
    processes = _processes()
    copy = 2.0 / machine.bandwidth
    t = 0.0
    for k, size in sorted(low.numpy_args.items()):
        v = ins[k]
        itemsize = np.dtype(v.dtype).itemsize
        copies = private_copy_bytes(v.shape, itemsize, v.sharding, devices) if k in private else 0.0
        if processes == 1:
            t += machine.numpy_argument_seconds(size, k in low.updates, copies)
        else:
            mine = private_copy_bytes(v.shape, itemsize, v.sharding, 1) * _shards_held(v.sharding, low.mesh)
            t += machine.placing + (mine + copies + (size if k in low.updates else 0.0)) * copy
        if k in low.updates and processes > 1 and network is not None:
            got = gathered_back_bytes(v.shape, itemsize, v.sharding, low.mesh.size, devices)
            if got > 0:
                link = network.link(low.mesh, tuple(low.mesh.axis_names)).whole_gathers()
                t += collective_seconds("all_gather", got, processes, link) \
                    + collective_seconds("all_gather", 0.0, processes, link)
    return t


def _shards_held(sharding, mesh) -> int:
    """How many different shards of a value split by `sharding` the devices of this
    process of a started runtime hold (placing copies each once: its replicas here share
    the buffer)."""
    return len({sharding.shard_index(int(d)) for d in started().local_devices(mesh)})


def _processes() -> int:
    """The processes of the started runtime (1 where none is started: the local runtime's)."""
    rt = started()
    return 1 if rt is None else int(rt.process_count())


def _local_devices(mesh) -> int:
    """The devices of `mesh` this process runs (all of them where no runtime is started:
    the local runtime's)."""
    rt = started()
    return mesh.size if rt is None else len(rt.local_devices(mesh))
