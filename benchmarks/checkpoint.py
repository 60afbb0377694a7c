"""Checkpoint throughput: spmd.save / spmd.load of a model sharded over 4 local devices,
against the disk's own write speed measured in the same run (numpy.tofile + fsync).

    python benchmarks/checkpoint.py [--mb 1024] [--dir /tmp]
"""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import spmd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    spmd.init(num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    d = tempfile.mkdtemp(dir=args.dir)
    n_layers = 8
    rows = (args.mb << 20) // 4 // n_layers // 1024
    rng = np.random.default_rng(0)
    params = {f"w{i}": spmd.device_put(rng.standard_normal((rows, 1024), dtype=np.float32),
                                       mesh.sharding("data", "model")) for i in range(n_layers)}
    nbytes = sum(p.nbytes for p in params.values())
    raw = np.concatenate([np.asarray(p).reshape(-1) for p in params.values()])
    disk, save, load = [], [], []
    for r in range(args.repeats):
        f = os.path.join(d, "raw.bin")
        t0 = time.perf_counter()
        with open(f, "wb") as fh:
            raw.tofile(fh)
            fh.flush()
            os.fsync(fh.fileno())
        disk.append(time.perf_counter() - t0)
        os.remove(f)
        path = os.path.join(d, "ckpt")
        t0 = time.perf_counter()
        spmd.save(path, params)
        save.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        back = spmd.load(path, {k: mesh.sharding("data", "model") for k in params})
        load.append(time.perf_counter() - t0)
        del back
    mb = nbytes / 1e6
    print(f"{mb:.0f} MB over 4 devices (2x2), medians of {args.repeats}:")
    print(f"  disk write (tofile+fsync) {mb / np.median(disk):8.0f} MB/s")
    print(f"  spmd.save                 {mb / np.median(save):8.0f} MB/s   ({np.median(disk) / np.median(save):.2f}x disk)")
    print(f"  spmd.load (resharded in)  {mb / np.median(load):8.0f} MB/s")
    shutil.rmtree(d)


if __name__ == "__main__":
    main()
