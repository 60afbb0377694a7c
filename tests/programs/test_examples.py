"""Every example runs with small settings on the local backend and gets the right answer
(mlp under mpiexec: tests/transports/test_mpi.py)."""
import importlib.util
import os

import numpy as np
import pytest
from paths import ROOT



def example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_train_gpt_loss_falls_on_2x2(capsys):
    gpt = example("train_gpt")
    losses = gpt.main(["--steps", "12", "--batch", "8", "--seq", "32", "--d-model", "32", "--layers", "1",
                       "--heads", "2", "--corpus-bytes", "300000", "--plot", "", "--quiet"])
    assert len(losses) == 12
    assert losses[0] > 5.0 and losses[-1] < 4.6, losses
    out = capsys.readouterr().out
    assert "communication per step per device" in out


def test_train_gpt_sharded_equals_single_device():
    gpt = example("train_gpt")
    args = ["--steps", "3", "--batch", "4", "--seq", "16", "--d-model", "16", "--layers", "1", "--heads", "2",
            "--corpus-bytes", "100000", "--plot", "", "--quiet"]
    one = gpt.main(args + ["--mesh", "1x1"])
    four = gpt.main(args + ["--mesh", "2x2"])
    np.testing.assert_allclose(four, one, rtol=1e-5)


def test_train_gpt_scan_over_layers_gives_the_same_losses(capsys):
    gpt = example("train_gpt")
    args = ["--steps", "3", "--batch", "4", "--seq", "16", "--d-model", "16", "--layers", "2", "--heads", "2",
            "--corpus-bytes", "100000", "--plot", "", "--mesh", "2x2"]
    unrolled = gpt.main(args)
    scanned = gpt.main(args + ["--scan"])
    np.testing.assert_allclose(scanned, unrolled, rtol=1e-5)
    out = capsys.readouterr().out
    assert "compile:" in out and "(unrolled 2 layers)" in out and "(scan over 2 layers)" in out


def test_train_gpt_over_one_devices_memory_limit_fails_up_front_and_trains_with_fsdp_on_four(capsys):
    """Parameters + Adam state (1.4 MB) over a 1.2 MB memory_limit: one device stops
    before a step, naming what is live at the peak and FSDP; four devices with --fsdp
    hold a quarter of them and train, with the single device's losses."""
    gpt = example("train_gpt")
    args = ["--steps", "2", "--batch", "8", "--seq", "32", "--d-model", "64", "--layers", "2", "--heads", "2",
            "--corpus-bytes", "100000", "--plot", "", "--quiet"]
    with pytest.raises(SystemExit) as e:
        gpt.main(args + ["--mesh", "1x1", "--memory-limit", "1.2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "over memory_limit=1.2 MB" in err and "train_gpt.py:" in err and "params['wte']" in err, err
    assert "FSDP" in err, err
    fsdp = gpt.main(args + ["--mesh", "4x1", "--fsdp", "--memory-limit", "1.2"])
    one = gpt.main(args + ["--mesh", "1x1"])
    np.testing.assert_allclose(fsdp, one, rtol=1e-5)


def test_mlp_loss_falls():
    losses = example("mlp").main(["--steps", "10"])
    assert losses[-1] < 0.45 < losses[0], losses


def test_heat2d_equals_single_device():
    got, want = example("heat2d").main(["--n", "48", "--steps", "10", "--unroll", "5"])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_heat2d_uneven_grid_on_2x2():
    got, want = example("heat2d").main(["--n", "37", "--steps", "4", "--unroll", "2"])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_matmul2d_equals_numpy(capsys):
    got, want = example("matmul2d").main(["--n", "96", "--repeats", "1"])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert "GFLOP/s" in capsys.readouterr().out
