"""lowered.cost() of a stencil that writes its numpy argument, under mpiexec: the write
back gathers the other processes' shards into each (an all_gather over them, and the small
one checking that they all read alike), which the prediction holds besides the process's
own copies at the machine's streaming rate (its shard placed, its private copy, the whole
new value into its caller's array) (at Link.gather_bandwidth where it is given); and the
argument holds numpy's values after."""
import numpy as np

import spmd
from spmd.sharding.cost_model import Link, Machine, Network, collective_seconds

spmd.init()
P = spmd.process_count()
mesh = spmd.Mesh((P,), ("x",))


def jacobi(u):
    for _ in range(2):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


machine = Machine(bandwidth=2e9, argument=1e-9, written=5e-9)   # (a byte copied: 1e-9 s; the per-byte rates are one process's)
link = Link(latency=1e-5, bandwidth=1e8, rendezvous=1e-4)
u = np.random.default_rng(0).random((65, 48))
want = jacobi(u.copy())
f = spmd.jit(jacobi, in_shardings=(mesh.sharding("x", None),))
got = f.lower(u).cost(machine=machine, network=Network(within=link))["args_seconds"]
shard = (-(-65 // P)) * 48 * 8
local = (shard + shard + u.nbytes) * 1e-9
expect = local + collective_seconds("all_gather", (P - 1) * shard, P, link) + collective_seconds("all_gather", 0, P, link)
# the gather of whole arrays measured apart (Link.gather_bandwidth) prices the write back;
# the program's own collectives keep `bandwidth`
fast = Link(latency=1e-5, bandwidth=1e8, rendezvous=1e-4, gather_bandwidth=1e9)
got_fast = f.lower(u).cost(machine=machine, network=Network(within=fast))["args_seconds"]
whole = Link(latency=1e-5, bandwidth=1e9, rendezvous=1e-4)
expect_fast = local + collective_seconds("all_gather", (P - 1) * shard, P, whole) \
    + collective_seconds("all_gather", 0, P, whole)
a = u.copy()
f(a)
print(f"COST {spmd.process_index()} {got!r} {expect!r} {local!r} {np.array_equal(a, want)} "
      f"{got_fast!r} {expect_fast!r}", flush=True)
