"""A 2-layer MLP trained with data + tensor parallelism on a (data, model) mesh.

The batch is split over `data`; w1's columns and w2's rows over `model` (Megatron).
spmd infers the rest and inserts the collectives: run with SPMD_DUMP=dump to see them.

    python examples/mlp.py              # 4 local devices
    mpiexec -n 4 python examples/mlp.py # 4 MPI processes
"""
import argparse

import numpy as np

import spmd


def step(params, x, y):
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    l, g = spmd.value_and_grad(loss)(params)
    return l, {k: params[k] - 0.1 * g[k] for k in params}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", default="2x2", help="data x model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backend", default=None)
    args = ap.parse_args(argv)
    dp, mp = (int(v) for v in args.mesh.split("x"))
    spmd.init(backend=args.backend, num_devices=dp * mp)
    mesh = spmd.Mesh((dp, mp), ("data", "model"))
    row = mesh.sharding("data", None)

    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((64, 256)).astype(np.float32) / 8,
              "w2": rng.standard_normal((256, 8)).astype(np.float32) / 16}
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = np.tanh(x[:, :8])

    f = spmd.jit(step, in_shardings=({"w1": mesh.sharding(None, "model"),
                                      "w2": mesh.sharding("model", None)}, row, row))
    losses = []
    for i in range(args.steps):
        loss, params = f(params, x, y)
        losses.append(float(loss))
        if spmd.process_index() == 0:
            print(f"step {i:3d}  loss {losses[-1]:.6f}")
    if spmd.process_index() == 0:
        rep = f.lower(params, x, y).report()
        print("collectives per step:", ", ".join(f"{c['op']}{list(c['axes'])} {c['bytes']}B"
                                                 for c in rep["collectives"]))
    return losses


if __name__ == "__main__":
    main()
