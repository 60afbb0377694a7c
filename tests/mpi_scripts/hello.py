"""Prints from the driver/process and from every device, for the launcher tests:
    spmd run -n N [--backend local|mpi|ray] hello.py"""
import sys
import time

import numpy as np

import spmd


class Hello:
    """A per-device program that prints where it runs (on Ray: inside the rank actors)."""
    num_outputs = 0

    def __call__(self, inputs, comm):
        # one write: print() writes the text and the newline apart, which the local
        # backend's device threads interleave ("hello from device 0hello from device 1")
        sys.stdout.write(f"hello from device {comm.rank}\n")
        sys.stdout.flush()
        comm.barrier()
        return []


rt = spmd.init()
mesh = spmd.Mesh((spmd.device_count(),), ("x",))
print(f"backend {rt.name} process {spmd.process_index()} of {spmd.process_count()} devices {spmd.device_count()}",
      flush=True)
rt.run(Hello(), mesh, {d: [] for d in rt.local_devices(mesh)})
total = float(spmd.jit(lambda x: x.sum(), in_shardings=mesh.sharding("x"))(np.arange(8.0)))   # every rank reads
if spmd.process_index() == 0:
    print(f"sum {total}", flush=True)
if rt.name == "ray":
    import ray
    print("ray nodes", sorted({n["NodeManagerAddress"] for n in ray.nodes()}), flush=True)
    time.sleep(1.5)      # Ray forwards the actors' output to the driver asynchronously
