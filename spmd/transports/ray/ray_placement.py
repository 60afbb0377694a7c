"""Starting the ranks on Ray: connect to (or start) a Ray cluster, reserve one bundle per
rank with a placement group, and start one rank actor in each bundle.

    connect(num_devices) -> bool            True if this process started or joined Ray itself
    place_ranks(actor_cls, n) -> (pg, [actor handles])

Which cluster:
- Ray already initialised in this process (the user called ray.init, a test connected
  to a ray.cluster_utils.Cluster): use it;
- RAY_ADDRESS set (a `ray job submit` entrypoint, or RAY_ADDRESS=auto / host:port to
  join a cluster started with `ray start`): join it;
- otherwise start a private single-node Ray for this process (what `spmd run --backend
  ray` does on one machine), on loopback, with room for every rank: lean, and reaped
  when this process dies (transports/ray/ray_private.py).

Knobs (environment): SPMD_RAY_STRATEGY = PACK (default) | SPREAD | STRICT_PACK |
STRICT_SPREAD, how bundles are placed over nodes; SPMD_RAY_CPUS_PER_RANK (default 1),
each bundle's CPUs; SPMD_RAY_PLACEMENT_TIMEOUT (default 60 s) before a placement group
that does not fit fails with the cluster's resources in the message.
"""
from __future__ import annotations

import os
import sys

from ...errors import SpmdError

# Ray rewrites 127.0.0.1 into the machine's outward address; every other 127/8 address
# is loopback too on Linux and is kept as given, so a private Ray's nodes talk over
# loopback. (Ray 2.60's gRPC servers still listen on every interface whatever address
# they are given; .ci/run confines the tests with a network namespace.)
LOOPBACK = "127.0.0.2"
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def cpus_per_rank() -> float:
    return float(os.environ.get("SPMD_RAY_CPUS_PER_RANK", "1"))


def connect(num_devices=None) -> bool:
    import ray
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        kw = {}
        host = address.rsplit(":", 1)[0]
        if host.startswith("127.") and host != "127.0.0.1":
            kw["_node_ip_address"] = host    # a cluster on loopback: this process is on its node
        ray.init(address=address, log_to_driver=True, **kw)
        return True
    n = num_devices or os.cpu_count() or 1
    kw = {}
    if sys.platform.startswith("linux"):
        kw["_node_ip_address"] = LOOPBACK
    mem = os.environ.get("SPMD_RAY_OBJECT_STORE_MB")
    if mem:
        kw["object_store_memory"] = int(mem) << 20
    if os.environ.get("SPMD_RAY_PREALLOCATE") == "1":
        # touch the whole object store once at start: a put then copies into warm pages
        # (about 2x faster for MBs on a VM where page faults are dear), at the price of
        # holding that memory from the start
        kw["_system_config"] = {"preallocate_plasma_memory": True}
    from . import ray_driver_rank, ray_private
    # rank 0 runs in this process when it starts its own Ray (ray_driver_rank.wanted): the
    # others need a worker each
    actors = n - 1 if ray_driver_rank.wanted(True) else n
    ray_private.start(actors, max(os.cpu_count() or 1, int(n * cpus_per_rank() + 0.999)), log_to_driver=True, **kw)
    return True


def default_num_devices() -> int:
    """Ranks when spmd.init gives no num_devices: as many as the cluster has room for."""
    import ray
    return max(1, int(ray.cluster_resources().get("CPU", 1) // max(cpus_per_rank(), 1e-9)))


def place_ranks(actor_cls, n, first=0, **actor_kwargs):
    """A placement group of n - first bundles and one actor per bundle, the actor of rank
    first + i in bundle i (ranks below `first` run elsewhere: in the driver)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = os.environ.get("SPMD_RAY_STRATEGY", "PACK").upper()
    if strategy not in STRATEGIES:
        raise SpmdError(f"SPMD_RAY_STRATEGY={strategy!r}: takes one of {', '.join(STRATEGIES)}")
    cpus = cpus_per_rank()
    if n <= first:
        return None, []
    pg = placement_group([{"CPU": cpus}] * (n - first), strategy=strategy)
    # the actors are created at once: each waits for its bundle, and the wait for the
    # group below runs while they start
    actors = [actor_cls.options(num_cpus=cpus,
                                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i - first)
                                ).remote(i, **actor_kwargs)
              for i in range(first, n)]
    wait = float(os.environ.get("SPMD_RAY_PLACEMENT_TIMEOUT", "60"))
    ready, _ = ray.wait([pg.ready()], timeout=wait)
    if not ready:
        for a in actors:
            ray.kill(a)
        remove_placement_group(pg)
        raise SpmdError(f"spmd.init(backend='ray'): could not place {n - first} ranks of {cpus:g} CPU each "
                        f"({strategy}) within {wait:g} s; the cluster has {ray.cluster_resources()} "
                        f"(free: {ray.available_resources()}). Use fewer devices or set "
                        f"SPMD_RAY_CPUS_PER_RANK lower")
    return pg, actors


def restart_rank(actor_cls, pg, i, first=0, **actor_kwargs):
    """A fresh actor for rank i in its bundle, i - first (the old one died)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    return actor_cls.options(num_cpus=cpus_per_rank(),
                             scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i - first)
                             ).remote(i, **actor_kwargs)
