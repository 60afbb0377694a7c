"""One `mpiexec -n N` run of the PRK benchmark: each kernel under spmd (a mesh of the N
ranks, rows split) and written by hand with mpi4py, runs of the two interleaved, the
slowest rank's time. Rank 0 writes {kernel: {"spmd": [seconds an iteration, valid],
"mpi4py": [...]}} as JSON.

    mpiexec -n N python benchmarks/prk/worker.py OUT.json SIZES_JSON [KERNEL,...]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hand_mpi  # noqa: E402
import suite  # noqa: E402
import variants  # noqa: E402


def main():
    from mpi4py import MPI

    import spmd
    spmd.init()
    out_path, sizes, only = sys.argv[1], suite.Sizes(**json.loads(sys.argv[2])), sys.argv[3:]
    world = MPI.COMM_WORLD
    mesh = spmd.Mesh((world.Get_size(),), ("x",))
    rows = {}
    for kern in suite.suite(sizes):
        if only and kern.name not in only:
            continue
        vs = [variants.Spmd(kern, mesh), hand_mpi.variant(kern, world)]
        res = variants.interleaved_runs(vs, sizes.iters, sizes.runs, barrier=world.Barrier,
                                        slowest=lambda t: world.allreduce(t, MPI.MAX))
        rows[kern.name] = {"spmd": res[0], "mpi4py": res[1]}
    if world.Get_rank() == 0:
        with open(out_path, "w") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main()
