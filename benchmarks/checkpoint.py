"""Checkpoint throughput: spmd.save / spmd.load of a model sharded over 4 ranks, against the
disk's own speed measured in the same run (numpy.tofile + fsync to write, numpy.fromfile
to read).

    python benchmarks/checkpoint.py [--mb 1024] [--dir DIR]              # local runtime, 4 devices
    mpiexec -n 4 python benchmarks/checkpoint.py [--mb 1024] [--dir DIR]  # 4 MPI processes
    spmd run -n 4 --backend ray benchmarks/checkpoint.py [--mb 1024]      # 4 Ray actors

The model is 8 float32 matrices split (data, model) over a 2x2 mesh. Each repeat:
  disk write   every process writes the bytes it holds with tofile + fsync (MPI: all at once)
  save         spmd.save (sha256 of every block, fsync, atomic rename included)
  load warm    spmd.load onto the same sharding, files still in the page cache
  load cold    the same after posix_fadvise(DONTNEED) dropped the files from the cache
  disk read    numpy.fromfile of the raw files, also dropped from the cache first
  reshard      spmd.load onto a 1-D mesh of 4 splitting the other dimension (cold)
MB/s are of the model's size (1 MB = 1e6 bytes); medians over the repeats.
"""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import spmd


def drop_cache(root):
    """Ask the kernel to forget the cached pages of every file under root (no privileges
    needed; the files are fsynced, so their pages are clean)."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024, help="model size in MiB")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if spmd.runtime.current_runtime.detect_backend() == "local":
        spmd.init(num_devices=4)
    else:
        spmd.init()             # mpiexec -n 4: this process is one of the 4 ranks
    rt = spmd.runtime.get_runtime()
    me, procs = spmd.process_index(), spmd.process_count()
    comm = getattr(rt, "world", None)

    def barrier():
        if comm is not None:
            comm.Barrier()

    mesh = spmd.Mesh((2, 2), ("data", "model"))
    spec = mesh.sharding("data", "model")
    other = spmd.Mesh((4,), ("x",)).sharding(None, "x")
    n_layers, cols = 8, 2048
    rows = (args.mb << 20) // 4 // n_layers // cols
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((rows, cols), dtype=np.float32)
    params = {f"w{i}": spmd.device_put(w0 if i == 0 else rng.standard_normal((rows, cols), dtype=np.float32), spec)
              for i in range(n_layers)}
    nbytes = sum(p.nbytes for p in params.values())
    held = [s.data for p in params.values() for s in p.shards]       # what this process holds
    base = tempfile.mkdtemp(dir=args.dir) if me == 0 else None
    if comm is not None:
        base = comm.bcast(base, root=0)
    raw_dir = os.path.join(base, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    times = {k: [] for k in ("disk write", "save", "load warm", "load cold", "disk read", "reshard cold")}

    def timed(name, fn):
        barrier()
        t0 = time.perf_counter()
        out = fn()
        barrier()
        times[name].append(time.perf_counter() - t0)
        return out

    def write_raw():
        for j, a in enumerate(held):
            with open(os.path.join(raw_dir, f"p{me}_{j}.bin"), "wb") as f:
                a.tofile(f)
                f.flush()
                os.fsync(f.fileno())

    def read_raw():
        return [np.fromfile(os.path.join(raw_dir, f"p{me}_{j}.bin"), np.float32) for j in range(len(held))]

    path = os.path.join(base, "ckpt")
    for _ in range(args.repeats):
        timed("disk write", write_raw)
        timed("save", lambda: spmd.save(path, params))
        back = timed("load warm", lambda: spmd.load(path, {k: spec for k in params}))
        del back
        if me == 0:
            drop_cache(path)
        back = timed("load cold", lambda: spmd.load(path, {k: spec for k in params}))
        del back
        drop_cache(raw_dir)
        timed("disk read", read_raw)
        if me == 0:
            drop_cache(path)
        back = timed("reshard cold", lambda: spmd.load(path, {k: other for k in params}))
        for sh in back["w0"].shards:           # the resharded pieces are right
            assert np.array_equal(sh.data, w0[sh.index])
        del back
        for f in os.listdir(raw_dir):
            if f.startswith(f"p{me}_"):
                os.remove(os.path.join(raw_dir, f))
    barrier()
    if me == 0:
        mb = nbytes / 1e6
        where = (f"{procs} MPI processes" if procs > 1 else
                 "4 Ray actors (the actors write and read)" if rt.name == "ray" else
                 "the local runtime (4 devices, 1 process)")
        print(f"{mb:.0f} MB model, 2x2 mesh, {where}; {args.repeats} repeats, medians; dir {base}")
        for k, v in times.items():
            t = float(np.median(v))
            print(f"  {k:<13} {mb / t:8.0f} MB/s   {t:6.2f} s")
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
