"""Regenerate docs/architecture.md: follow examples/mlp.py's training step through every
stage, with the real dumps. Run: python docs/make_architecture.py"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, ".."))

import spmd  # noqa: E402
from mlp import step  # noqa: E402

TEMPLATE = open(os.path.join(HERE, "architecture.template.md")).read()


def program_text(f):
    """The declared Program the runtime is handed for one call of f (its first call
    builds it), field by field."""
    from spmd.jit.running import runs_of
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((16, 32), dtype=np.float32),
              "w2": rng.standard_normal((32, 4), dtype=np.float32)}
    x, y = rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((8, 4), dtype=np.float32)
    f(params, x, y)
    prog = runs_of(f.lower(params, x, y)).program
    place = lambda p: f"{p.dtype}{list(p.shape)} {p.sharding.text()}"  # noqa: E731
    lines = [f"name        {prog.name}",
             f"executable  {type(prog.executable).__name__}",
             f"mesh        {prog.mesh.text()}",
             "inputs      " + ", ".join(f"{n}: {place(p)}" for n, p in zip(prog.leaf_names, prog.inputs)),
             "outputs     " + ", ".join(place(p) for p in prog.outputs),
             f"donated     {sorted(prog.donated)}   reused {sorted(prog.reused)}",
             f"fingerprint {prog.fingerprint or '(one process: nothing to compare)'}"]
    return "\n".join(lines)


def main():
    spmd.init(num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    row = mesh.sharding("data", None)
    f = spmd.jit(step, in_shardings=({"w1": mesh.sharding(None, "model"),
                                      "w2": mesh.sharding("model", None)}, row, row))
    params = {"w1": spmd.ShapeDtype((16, 32), "float32"), "w2": spmd.ShapeDtype((32, 4), "float32")}
    low = f.lower(params, spmd.ShapeDtype((8, 16), "float32"), spmd.ShapeDtype((8, 4), "float32"))
    parts = {stage: low.as_text(stage) for stage in low.stages}
    rep = low.report()
    coll = "\n".join(f"| {c['op']} | {', '.join(c['axes'])} | {c['in_shape']} -> {c['out_shape']} | {c['bytes']} |"
                     for c in rep["collectives"])
    out = TEMPLATE
    for stage, text in parts.items():
        out = out.replace("{{" + stage + "}}", text.rstrip())
    out = out.replace("{{collectives}}", coll).replace("{{comm_bytes}}", str(rep["comm_bytes"]))
    mem = {k: v for k, v in low.memory().items() if k in ("temp_bytes", "peak_live_bytes", "in_place",
                                                         "argument_bytes", "output_bytes")}
    out = out.replace("{{memory}}", str(mem))
    out = out.replace("{{program}}", program_text(f))
    with open(os.path.join(HERE, "architecture.md"), "w") as fh:
        fh.write(out)
    print("wrote docs/architecture.md")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
