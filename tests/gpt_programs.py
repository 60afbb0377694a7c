"""examples/train_gpt.py as the tests load it (it is a script, not a package's module),
and a small training step of it with its arguments."""
import importlib.util
import os

import numpy as np

from paths import ROOT


def train_gpt(name="train_gpt_tests"):
    """The example's module, loaded under `name`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", "train_gpt.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def local_gpt_losses(args, name="train_gpt_local"):
    """The example's losses with `args` (its command line), on local threads: what a run
    across hosts or launchers must reproduce."""
    return train_gpt(name).main(args + ["--backend", "local"])


def tiny_gpt(mesh, d=32, layers=1, seq=16, batch=4):
    """(the example's jitted step on `mesh`, its arguments: parameters, Adam state, a batch)."""
    tg = train_gpt()
    params = tg.init_params(np.random.default_rng(0), d, layers, seq)
    opt = {"m": {k: np.zeros_like(v) for k, v in params.items()},
           "v": {k: np.zeros_like(v) for k, v in params.items()}, "t": np.float32(0.0)}
    tok = np.random.default_rng(1).integers(0, tg.VOCAB, (batch, seq + 1)).astype(np.int32)
    return tg.make_step(layers, 2, 3e-3, mesh, False, False), (params, opt, tok[:, :-1], tok[:, 1:])
