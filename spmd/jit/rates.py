"""The cost model's rates for this process: `network=` / `machine=` where given, else what
`spmd doctor --calibrate` measured and stored (calibrate.py), else cost_model's defaults;
`source` says which."""
from __future__ import annotations

import json
import os
from dataclasses import replace

from ..compiler.disk_cache import cache_dir
from ..runtime.cores import local_cores
from ..runtime.current_runtime import detect_backend, started
from ..sharding.cost_model import Link, Machine, Network

FILE = "machine.json"


def path() -> str:
    return os.path.join(cache_dir(), FILE)


# (path, mtime in ns) -> what was read there: the file is read once per process, and
# again only when `spmd doctor --calibrate` rewrote it
_read = {}


def stored() -> dict | None:
    """The stored calibration, or None (none, or unreadable: the defaults serve)."""
    p = path()
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        return None
    if _read.get("at") != (p, mtime):
        try:
            with open(p) as f:
                got = json.load(f)
        except (OSError, ValueError):
            got = None
        _read.update(at=(p, mtime), got=got)
    return _read["got"]


def transport() -> str:
    """The transport programs of this process run on: the started runtime's, else what
    the environment asks for (mpi under mpiexec)."""
    rt = started()
    return rt.name if rt is not None else detect_backend()


def rates(network=None, machine=None, devices=1) -> tuple:
    """-> (Machine, Network, source): source "given", "calibrated <date>" or "defaults".
    A program on more than one device takes the rates measured with several devices
    running at once (flops_devices, bandwidth_devices, step_devices), where there are;
    under MPI, the MPI link where `mpiexec -n N spmd doctor --calibrate` measured it
    (networks.mpi), else the local transport's."""
    got = stored() if network is None or machine is None else None
    source = "given" if network is not None and machine is not None else "defaults"
    if machine is None:
        m = (got or {}).get("machine")
        if m:
            # (the local transport's devices are threads sharing this machine's cores)
            machine = machine_from(m, devices, cores=local_cores() if transport() == "local" else None,
                                   measured=got.get("devices"))
            source = f"calibrated {got.get('measured', '')}".strip()
        else:
            machine = Machine()
    if network is None:
        n = (got or {}).get("network", {}).get("within")
        mpi = (got or {}).get("networks", {}).get("mpi")
        # (a call from Python per collective: MPI's, measured; the local transport's
        # collectives run in the native code, whatever an older calibration stored)
        rendezvous = gather = 0.0
        slowdown = 1.0
        if mpi and transport() == "mpi":    # ranks that are MPI processes: MPI's link, measured
            n = mpi["within"]
            rendezvous = float(n.get("rendezvous") or 0.0)
            gather = float(n.get("gather_bandwidth") or 0.0)
            slowdown = float(n.get("slowdown") or 1.0)
        network = Network(within=Link(latency=float(n["latency"]), bandwidth=float(n["bandwidth"]),
                                      rendezvous=rendezvous, handoff=float(n.get("handoff") or 0.0),
                                      solo_bytes=float(n.get("solo_bytes") or 0.0), gather_bandwidth=gather,
                                      slowdown=slowdown)) \
            if n else Network()
    elif source == "defaults" and got is None:
        source = "network given, machine defaults"
    return machine, network, source


def machine_from(m, devices=1, cores=None, measured=None) -> Machine:
    """The Machine of a calibration's `machine` entry (calibrate.measure) for a program on
    `devices` devices: on more than one, the rates measured with several devices running
    at once (flops_devices, product_element_devices, element_devices, bandwidth_devices, step_devices,
    call_devices, output_devices, cache_bandwidth_devices), the cache's share of a device
    and the cost of a call's leaves; on one, the whole cache (cache_capacity).
    `cores` (the devices are threads sharing them: the local transport) and `measured`
    (the devices the calibration ran at once): fewer devices than that get their share
    of the machine (fewer_devices)."""
    def rate(k):           # a program on several devices: the rate each gets while all run
        return m.get(f"{k}_devices") if devices > 1 and m.get(f"{k}_devices") else m.get(k)
    # a numpy argument is copied by the calling thread alone: where its rates were
    # not measured, copies at one device's bandwidth (Machine.numpy_argument_seconds)
    alone = float(m.get("bandwidth") or Machine().bandwidth)
    several = devices > 1
    machine = Machine(flops=float(rate("flops")), product_element=float(rate("product_element") or 0.0),
                      element=float(rate("element") or 0.0),
                      bandwidth=float(rate("bandwidth")),
                      step=float(rate("step") or Machine().step),
                      argument=float(m["argument"]) if m.get("argument") is not None else 2.0 / alone,
                      written=written_back(m, 4.0 / alone),
                      call=float(rate("call") or Machine().call),
                      cache_bytes=float(m.get("cache_bytes" if several else "cache_capacity") or 0.0),
                      cache_bandwidth=float(rate("cache_bandwidth")) if rate("cache_bandwidth") else None,
                      leaf=float(m.get("leaf_devices") or 0.0) if several else 0.0,
                      placing=float(m.get("placing") or 0.0) if several else 0.0,
                      output=float(rate("output") or 0.0))
    if several and cores and measured and devices < int(measured):
        return fewer_devices(machine, devices, int(measured), int(cores), alone)
    return machine


def fewer_devices(machine, devices, measured, cores, alone) -> Machine:
    """`machine` (the rates each of `measured` devices got while all ran, calibrated) for
    `devices` < `measured` of them on the same `cores`: a device's compute and cache rates
    as the share of a core it then gets (devices past the cores take turns on them), its
    memory bandwidth the calibration's whole (measured x a device's) split `devices` ways,
    at most the machine's `alone` (one program's bandwidth). Two devices on two cores
    priced at four's rates were ~3x over a cavity sweep; fixed costs are kept."""
    def share(d):                  # devices per core
        return max(d / cores, 1.0)
    k = share(measured) / share(devices)
    return replace(machine, flops=machine.flops * k, element=machine.element / k,
                   product_element=machine.product_element / k,
                   bandwidth=min(machine.bandwidth * measured / devices, max(alone, machine.bandwidth)),
                   cache_bandwidth=None if machine.cache_bandwidth is None else machine.cache_bandwidth * k,
                   cache_bytes=machine.cache_bytes * measured / devices)


def written_back(m, default) -> float:
    """Machine.written from a stored calibration: `written_back`; a calibration stored
    before the private copies were priced apart has `written`, which counted one such
    copy (the array once, at the rate of placing it)."""
    if m.get("written_back") is not None:
        return float(m["written_back"])
    if m.get("written") is not None:
        return max(float(m["written"]) - float(m.get("argument") or 0.0), 0.0)
    return default
