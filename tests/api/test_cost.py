"""The cost model (sharding/cost_model.py), lowered.cost(), spmd.plan on a mesh this machine
does not have, and `spmd doctor --calibrate`'s stored rates."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import spmd
from spmd.sharding.cost_model import Link, Machine, Network, collective_seconds, rounds

MESH = spmd.Mesh((2, 2), ("data", "model"))
pytestmark = pytest.mark.filterwarnings("ignore::spmd.ReshardWarning")


def _mlp(p, x):
    return np.tanh(x @ p["w1"]) @ p["w2"]


def _args(b=64, d=32, h=64):
    rng = np.random.default_rng(0)
    return ({"w1": rng.standard_normal((d, h)).astype(np.float32),
             "w2": rng.standard_normal((h, d)).astype(np.float32)}, rng.standard_normal((b, d)).astype(np.float32))


def _lower(w1, w2, x, network=None):
    return spmd.jit(_mlp, in_shardings=({"w1": w1, "w2": w2}, x), network=network).lower(*_args())


def test_link_is_across_hosts_where_a_group_spans_them():
    net = Network(ranks_per_host=2)
    # ranks are row-major: a "model" group is {0,1} (one host), a "data" group {0,2} (two)
    assert net.link(MESH, ("model",)) is net.within
    assert net.link(MESH, ("data",)) is net.across
    assert net.link(MESH, ("data", "model")) is net.across
    one = Network()
    assert one.link(MESH, ("data",)) is one.within              # one host: every group within


def test_collective_seconds_grow_with_bytes_and_rounds():
    link = Link(latency=1e-5, bandwidth=1e9)
    assert collective_seconds("all_reduce", 2e6, 4, link) > collective_seconds("all_reduce", 1e6, 4, link)
    assert rounds("all_reduce", 4) == 2 * rounds("all_gather", 4) == 4
    assert collective_seconds("all_gather", 0, 1, link) == 0.0
    assert collective_seconds("all_gather", 1e6, 4, link) == pytest.approx(2 * 1e-5 + 1e6 / 1e9)
    assert Machine(flops=1e9, bandwidth=1e9, call=0).kernel_seconds(2e9, 1e9) == pytest.approx(2.0)


def test_cost_agrees_with_report_and_memory():
    low = _lower(MESH.sharding(None, "model"), MESH.sharding("model", None), MESH.sharding("data", None))
    c = low.cost()
    rep = low.report()
    assert len(c["collectives"]) == len(rep["launched"])
    assert sorted(r["bytes"] for r in c["collectives"]) == sorted(r["bytes"] for r in rep["launched"])
    assert c["peak_bytes"] == low.memory()["peak_bytes"]
    assert c["seconds"] == pytest.approx(c["compute_seconds"] + c["comm_seconds"] + c["step_seconds"]
                                         + c["args_seconds"] + c["outputs_seconds"])
    assert "predicted step" in str(c)


def test_more_communication_predicts_more_seconds():
    net = Network(within=Link(latency=1e-4, bandwidth=1e8))
    megatron = _lower(MESH.sharding(None, "model"), MESH.sharding("model", None), MESH.sharding("data", None), net)
    # w1 split on its rows: x must be split to match and the product summed over the devices twice
    worse = _lower(MESH.sharding("model", None), MESH.sharding(None, "model"), MESH.sharding("data", None), net)
    assert worse.report()["comm_bytes"] > megatron.report()["comm_bytes"]
    assert worse.cost()["comm_seconds"] > megatron.cost()["comm_seconds"]


def test_network_changes_the_prediction_as_the_formula_says():
    low = _lower(MESH.sharding(None, "model"), MESH.sharding("model", None), MESH.sharding("data", None))
    slow, fast = Network(within=Link(2e-4, 1e9)), Network(within=Link(1e-4, 1e9))
    a, b = low.cost(network=slow), low.cost(network=fast)
    n_rounds = sum((r["runs"] or 1) * rounds(r["op"], r["group_size"]) for r in a["collectives"])
    assert n_rounds > 0
    assert a["comm_seconds"] - b["comm_seconds"] == pytest.approx(n_rounds * 1e-4)
    assert a["compute_seconds"] == b["compute_seconds"]


def test_plan_on_a_mesh_this_machine_does_not_have():
    mesh = spmd.Mesh((64, 8), ("data", "model"))
    S = spmd.ShapeDtype
    p = {"w1": S((256, 1024), np.float32), "w2": S((1024, 256), np.float32)}
    x = S((4096, 256), np.float32)
    given = {"w1": mesh.sharding(None, "model"), "w2": mesh.sharding("model", None)}
    low = spmd.plan(_mlp, p, x, mesh=mesh, in_shardings=(given, mesh.sharding("data", None)),
                    network=Network(ranks_per_host=8))
    c = low.cost()
    assert c["seconds"] > 0 and c["peak_bytes"] > 0
    assert low.in_shardings[:2] == [given["w1"], given["w2"]]
    # 8 ranks a host: the model axis (8 ranks, contiguous) stays within a host, data crosses
    assert {r["axes"]: r["seconds"] for r in c["collectives"]}
    auto = spmd.plan(_mlp, p, x, mesh=mesh)            # spmd.AUTO by default
    assert auto.auto is not None and auto.cost()["seconds"] > 0


@pytest.mark.slow
def test_calibration_is_stored_and_read(tmp_path):
    env = {**os.environ, "SPMD_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "spmd.launcher.cli", "doctor", "--calibrate", "--devices", "2"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    assert "stored in" in out.stdout
    got = json.loads((tmp_path / "machine.json").read_text())
    assert got["machine"]["flops"] > 0 and got["network"]["within"]["latency"] > 0
    assert "rendezvous" not in got["network"]["within"]     # (no collective runs from Python there)
    script = ("from spmd.jit.rates import rates; m, n, s = rates(devices=2); "
              "print(s.split()[0], m.flops, n.within.latency, m.step)")
    line = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=120).stdout.split()
    assert line[0] == "calibrated"
    assert got["machine"]["flops_devices"] > 0 and got["machine"]["bandwidth_devices"] > 0
    assert got["machine"]["element"] > 0 and got["machine"]["element_devices"] > 0
    assert float(line[1]) == pytest.approx(got["machine"]["flops_devices"])     # (2 devices: the rate each gets)
    assert float(line[2]) == pytest.approx(got["network"]["within"]["latency"])
    assert float(line[3]) == pytest.approx(got["machine"]["step_devices"])
    assert got["machine"]["argument"] >= 0 and got["machine"]["written_back"] >= 0
    assert got["machine"]["call"] >= 0 and got["machine"]["call_devices"] >= 0
    assert got["machine"]["leaf_devices"] >= 0 and got["machine"]["placing"] >= 0
    if "cache_capacity" in got["machine"]:                  # (where the system says what its caches hold)
        assert got["machine"]["cache_bandwidth"] > 0 and got["machine"]["cache_bandwidth_devices"] > 0
        assert got["machine"]["cache_bytes"] == pytest.approx(got["machine"]["cache_capacity"] / 2)


def test_stored_rates_are_read_once_per_change_of_the_file(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"

    def write(flops, ns):
        f.write_text(json.dumps({"machine": {"flops": flops, "bandwidth": 1e9, "step": 1e-4}}))
        os.utime(f, ns=(ns, ns))
    write(1e9, 10**18)
    assert R.rates()[0].flops == 1e9
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k))
    write(2e9, 10**18)                   # rewritten, the same mtime: what was read stands
    reads.clear()
    assert R.rates()[0].flops == 1e9 and R.rates()[0].flops == 1e9
    assert not [p for p in reads if str(p).endswith("machine.json")]
    write(3e9, 10**18 + 1)               # a new mtime: read again
    assert R.rates()[0].flops == 3e9
    f.unlink()
    assert R.rates()[0].flops == R.Machine().flops


def test_under_mpi_the_stored_mpi_link_is_taken(tmp_path, monkeypatch):
    """`mpiexec -n 4 python -m spmd.jit.calibrate` stores MPI's link beside the local
    one: programs run under MPI take it (their ranks are processes exchanging through
    MPI), those on the local transport the local one; a calibration stored before
    written_back was apart is read less the private copy it counted."""
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4, "argument": 1e-9,
                                         "written": 4e-9},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9}},
                             "networks": {"mpi": {"ranks": 4, "within": {"latency": 5e-4, "bandwidth": 1e8}}}}))
    os.utime(f, ns=(10**18 + 7, 10**18 + 7))
    monkeypatch.setattr(R, "transport", lambda: "local")
    m, n, _ = R.rates(devices=4)
    assert (n.within.latency, n.within.bandwidth) == (1e-6, 2e9)
    assert m.written == pytest.approx(3e-9)
    monkeypatch.setattr(R, "transport", lambda: "mpi")
    m, n, _ = R.rates(devices=4)
    assert (n.within.latency, n.within.bandwidth) == (5e-4, 1e8)
    given = Network(within=Link(latency=1.0, bandwidth=1.0))
    assert R.rates(network=given)[1] is given          # network= wins


def _dp_step(p, x, y):
    def loss(p):
        h = np.maximum(x @ p["w1"], 0)
        return np.mean((h @ p["w2"] - y) ** 2)
    lv, g = spmd.value_and_grad(loss)(p)
    return lv, {k: p[k] - 0.1 * g[k] for k in p}


def test_gradient_all_reduces_share_one_latency_before_they_are_combined():
    from spmd.sharding.auto.program_cost import collective_rows, comm_seconds
    from spmd.sharding.cost_model import bucketed_values
    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((32, 64)).astype(np.float32), "w2": rng.standard_normal((64, 32)).astype(np.float32)}
    x, y = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    rep = MESH.sharding(None, None)
    low = spmd.jit(_dp_step, in_shardings=({"w1": rep, "w2": rep}, MESH.sharding("data", None),
                                           MESH.sharding("data", None))).lower(p, x, y)
    g = low.stages["partitioned"]
    late = bucketed_values(g)
    net = Network(within=Link(latency=1e-3, bandwidth=1e9))
    rows = collective_rows(g, MESH, net)
    late_rows = [r for r in rows if r["op"] == "all_reduce" and r["result"] in late]
    # the two gradients' and the loss's (an output): all over data, none depending on another
    assert sorted(r["bytes"] for r in late_rows) == [4, 64 * 32 * 4, 64 * 32 * 4]
    assert all(r["axes"] == ("data",) for r in late_rows)
    saved = comm_seconds(g, MESH, net) - comm_seconds(g, MESH, net, buckets=True)
    assert saved == pytest.approx(2 * rounds("all_reduce", 2) * 1e-3)        # one latency paid of three
    # a value a contraction reads on is not bucketed: the hidden activations
    dots = [op for op in g.ops if op.name in ("dot_general", "matmul", "dot")]
    assert dots and not any(o in late for op in dots for o in op.operands if o.producer is not None)


def _relax(u):
    u[1:-1] = 0.5 * (u[:-2] + u[2:])
    return u.sum()


def test_numpy_arguments_are_priced_placing_them_and_writing_them_back():
    """A call on a mesh copies its numpy arguments onto the devices, and the new value of
    one the program writes back into the caller's array: lowered.cost() counts those
    bytes at the machine's per-byte rates; spmd.Arrays cost nothing of the kind."""
    machine = Machine(argument=1e-9, written=3e-9)
    u, v = np.ones((256, 64)), np.ones((256, 64))
    row = MESH.sharding("data", None)
    f = spmd.jit(lambda u, v: _relax(u) + v.sum(), in_shardings=(row, row))
    c = f.lower(u, v).cost(machine=machine, network=Network())
    # u: placed, written back, and each of the 4 devices' private copy of its half
    assert c["args_seconds"] == pytest.approx(u.nbytes * (1e-9 + 3e-9) + 4 * (u.nbytes / 2) * 1e-9
                                              + v.nbytes * 1e-9)
    assert c["seconds"] == pytest.approx(c["compute_seconds"] + c["comm_seconds"] + c["step_seconds"]
                                         + c["args_seconds"] + c["outputs_seconds"])
    placed = spmd.jit(lambda u, v: _relax(u) + v.sum(), in_shardings=(row, row))
    c2 = placed.lower(spmd.device_put(u, row), spmd.device_put(v, row)).cost(machine=machine, network=Network())
    assert c2["args_seconds"] == 0.0
    # one program serves both kinds of argument: each lower() prices its own call's
    c3 = f.lower(spmd.device_put(u, row), v).cost(machine=machine, network=Network())
    assert c3["args_seconds"] == pytest.approx(v.nbytes * 1e-9)
    assert placed.lower(u, v).cost(machine=machine, network=Network())["args_seconds"] == c["args_seconds"]
    assert f.lower(u, v).cost(machine=machine, network=Network())["args_seconds"] == c["args_seconds"]
    # rates not given: copies at the machine's bandwidth, two more to write one back
    m = Machine(bandwidth=1e9)
    assert m.numpy_argument_seconds(1e6) == pytest.approx(2e-3)
    assert m.numpy_argument_seconds(1e6, written=True) == pytest.approx(6e-3)
    assert m.numpy_argument_seconds(1e6, written=True, private=1e6) == pytest.approx(8e-3)


def _jacobi(u):
    for _ in range(2):
        u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
    return u


@pytest.mark.parametrize("spec, copies", [(("data", "model"), 1), (("data", None), 2), ((None, "model"), 2),
                                          ((("data", "model"), None), 1), ((None, None), 4)])
def test_a_written_numpy_argument_costs_the_devices_private_copies_of_its_layout(spec, copies):
    """A stencil writing its numpy argument in place: each device copies its shard before
    the run (replicas share the placed buffer), so a layout with replicas copies the
    array more often: 2-D blocks or a 4-way split once, rows or columns of a 2x2 mesh
    twice, replicated four times; the placing and the write back are the array once
    each whatever the layout. Counted by hand in bytes, at given rates."""
    machine = Machine(argument=1e-9, written=5e-9)
    u = np.ones((64, 48))
    f = spmd.jit(_jacobi, in_shardings=(MESH.sharding(*spec),))
    c = f.lower(u).cost(machine=machine, network=Network())
    assert c["args_seconds"] == pytest.approx(u.nbytes * 1e-9 + u.nbytes * 5e-9 + copies * u.nbytes * 1e-9)
    # read only: placed once, no private copy, nothing written back
    g = spmd.jit(lambda u: u.sum(), in_shardings=(MESH.sharding(*spec),))
    assert g.lower(u).cost(machine=machine, network=Network())["args_seconds"] == pytest.approx(u.nbytes * 1e-9)


@pytest.mark.parametrize("spec, shard", [(("data", "model"), 33 * 24), (("data", None), 33 * 48),
                                         ((None, "model"), 65 * 24), ((("data", "model"), None), 17 * 48),
                                         ((None, None), 0)])
def test_a_written_argument_gathered_back_into_each_process_is_every_other_devices_shard(spec, shard):
    """Under several processes a written numpy argument's new value reaches each process's
    array from every device's shard, padding included (replicas too: each device sends
    its own), but those of its own devices; none where every device holds it whole."""
    from spmd.sharding.cost_model import gathered_back_bytes
    for local in (1, 2):
        assert gathered_back_bytes((65, 48), 8, MESH.sharding(*spec), 4, local) == (4 - local) * shard * 8


def _dots(k):
    def f(x, w):
        for _ in range(k):
            x = x @ w
        return x
    return f


def test_each_kernel_costs_at_least_its_call():
    """A chain of tiny matrix products is as many kernels, each at least Machine.call
    (its launch and the wait for the next), however few its flops and bytes."""
    x, w = np.ones((8, 8), np.float32), np.eye(8, dtype=np.float32)
    row = MESH.sharding("data", None)
    machine = Machine(call=1e-3)
    c = {k: spmd.jit(_dots(k), in_shardings=(row, MESH.sharding(None, None))).lower(x, w).cost(
        machine=machine, network=Network())["compute_seconds"] for k in (1, 9)}
    assert c[9] - c[1] == pytest.approx(8e-3, rel=0.01)


def test_a_kernel_whose_data_fits_the_cache_streams_at_the_cache_rate():
    u = np.ones((64, 64), np.float32)          # 16 KiB a device: in any cache
    row = MESH.sharding("data", None)
    f = spmd.jit(lambda u: np.tanh(u) * 2.0 + u.T, in_shardings=(row,))
    low = f.lower(u)
    # (tanh's flops, at a rate that leaves the bytes to decide)
    memory_only = low.cost(machine=Machine(flops=1e12, bandwidth=1e9, call=0.0), network=Network())["compute_seconds"]
    cached = low.cost(machine=Machine(flops=1e12, bandwidth=1e9, call=0.0, cache_bytes=1 << 20, cache_bandwidth=1e10),
                      network=Network())["compute_seconds"]
    assert cached < memory_only / 5          # (its flops, at the compute rate, are left)
    big = low.cost(machine=Machine(flops=1e12, bandwidth=1e9, call=0.0, cache_bytes=1 << 10, cache_bandwidth=1e10),
                   network=Network())["compute_seconds"]
    assert big == pytest.approx(memory_only)                # larger than the cache: memory's rate


def test_a_value_the_ops_of_one_fused_kernel_read_counts_once():
    """p * 2 + p * 3 + p * 4 is one fused kernel: it reads p once and writes its result
    once, though three of its ops read p."""
    p = np.ones((256, 64))
    row = MESH.sharding("data", None)
    low = spmd.jit(lambda p: p * 2.0 + p * 3.0 + p * 4.0, in_shardings=(row,)).lower(p)
    c = low.cost(machine=Machine(flops=1e18, bandwidth=1e9, call=0.0), network=Network())
    local = p.nbytes / 2
    assert c["compute_seconds"] == pytest.approx(2 * local / 1e9)


def test_a_fused_kernels_divides_run_beside_its_other_ops_and_bytes():
    """(x / y) * 0.5 + z is one fused kernel: it reads three arrays and writes one, and its
    divide is many element-ops, on a unit of its own; the kernel costs the longer of its
    divides and the rest (its multiply and add, and its bytes, which add up), not the
    sum of all, nor each op's own roofline summed."""
    from spmd.ir.ops.registry import op_flops
    x = np.ones((256, 64))
    rep = MESH.sharding(None, None)
    low = spmd.jit(lambda x, y, z: (x / y) * 0.5 + z, in_shardings=(rep, rep, rep)).lower(x, x, x)
    divides = sum(op_flops(op) for op in low.graph.ops if op.name == "divide")
    others = sum(op_flops(op) for op in low.graph.ops if op.name != "divide")
    assert divides > 5 * others > 0
    b = 1e-10        # seconds a byte
    # divide-bound; bound by the rest; both alike (where a sum of all would count both)
    for element in (1e-9, 1e-13, 4 * x.nbytes * b / divides):
        m = Machine(flops=1e18, bandwidth=1.0 / b, call=0.0, element=element)
        c = low.cost(machine=m, network=Network())["compute_seconds"]
        assert c == pytest.approx(max(divides * element, others * element + 4 * x.nbytes * b))


def test_a_stencils_boundary_masks_cost_no_arithmetic():
    """The masks a sweep computes from element positions (iota, compares, ands) are
    decided per region of the loop nest: a sweep's arithmetic is its update's alone."""
    from spmd.ir.ops.registry import op_flops
    from spmd.sharding.kernel_traffic import positional_ops
    u = np.ones((128, 128))
    low = spmd.jit(_sweeps(1), in_shardings=(MESH.sharding(None, None),)).lower(u)
    masks = positional_ops(low.graph)
    assert any(op.name == "compare" for op in masks)
    update = sum(op_flops(op) for op in low.graph.ops if op not in masks)
    m = Machine(flops=1e18, bandwidth=1e18, call=0.0, element=1e-9)
    assert low.cost(machine=m, network=Network())["compute_seconds"] == pytest.approx(update * 1e-9)
    assert update < sum(op_flops(op) for op in low.graph.ops)


def test_one_device_prices_the_whole_cache_several_their_share(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    (tmp_path / "machine.json").write_text(json.dumps({"machine": {
        "flops": 1e10, "bandwidth": 1e10, "bandwidth_devices": 5e9, "step": 1e-4, "cache_capacity": 8e6,
        "cache_bandwidth": 6e10, "cache_bytes": 2e6, "cache_bandwidth_devices": 2e10}}))
    one, four = R.rates(devices=1)[0], R.rates(devices=4)[0]
    assert (one.cache_bytes, one.cache_bandwidth) == (8e6, 6e10)
    assert (four.cache_bytes, four.cache_bandwidth) == (2e6, 2e10)


def test_fewer_devices_than_calibrated_get_their_share_of_the_cores(tmp_path, monkeypatch):
    """Calibrated with 4 devices on 2 cores (each got half a core): 2 devices get a core
    each, twice the compute and cache rates, and half of the memory bandwidth all four
    shared, at most the machine's alone; as many devices as calibrated or more (a mesh
    planned on paper), and MPI's processes, keep the calibrated rates."""
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SPMD_LOCAL_CORES", "2")
    monkeypatch.setattr(R, "transport", lambda: "local")
    (tmp_path / "machine.json").write_text(json.dumps({"devices": 4, "machine": {
        "flops": 2e11, "bandwidth": 2.4e10, "step": 1e-5, "flops_devices": 6e10, "bandwidth_devices": 5e9,
        "element_devices": 4e-11, "product_element_devices": 5e-10, "cache_capacity": 4.8e7, "cache_bytes": 1.2e7,
        "cache_bandwidth_devices": 1.2e10, "step_devices": 2e-4, "call_devices": 5e-6}}))
    four, two, three, eight = (R.rates(devices=d)[0] for d in (4, 2, 3, 8))
    assert (four.flops, four.bandwidth, four.element) == (6e10, 5e9, 4e-11)
    assert two.flops == pytest.approx(1.2e11) and two.element == pytest.approx(2e-11)
    assert two.product_element == pytest.approx(2.5e-10) and two.cache_bandwidth == pytest.approx(2.4e10)
    assert two.bandwidth == pytest.approx(1e10) and two.cache_bytes == pytest.approx(2.4e7)
    assert (two.step, two.call) == (four.step, four.call)
    assert three.flops == pytest.approx(6e10 * 2 / 1.5) and three.bandwidth == pytest.approx(2e10 / 3)
    assert eight == four
    (tmp_path / "machine.json").write_text(json.dumps({"devices": 4, "machine": {
        "flops": 2e11, "bandwidth": 6e9, "flops_devices": 6e10, "bandwidth_devices": 5e9}}))
    assert R.rates(devices=2)[0].bandwidth == pytest.approx(6e9)          # (the machine's alone)
    monkeypatch.setattr(R, "transport", lambda: "mpi")
    assert R.rates(devices=2)[0].flops == 6e10


def _sweeps(k):
    def f(u):
        for _ in range(k):
            u[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        return u
    return f


def test_a_stencil_sweep_stores_its_grid_between_halo_exchanges():
    """On 2-D blocks each Jacobi sweep sends its new grid's edges to the neighbours and the
    next sweep needs them back: the sweeps are kernels of their own, each reading its
    device's block and storing the new one (kernel_traffic.fused_kernels), though only fused
    ops read the grid between them. The boundary masks (iota, compares) are computed
    again in each kernel, not stored. At given rates each more sweep costs its block
    read and written once (and its halo's few rows sent and received)."""
    from spmd.sharding.kernel_traffic import fused_kernels
    u = np.ones((128, 128))
    block = u.nbytes / 4
    machine = Machine(flops=1e18, bandwidth=1e9, call=0.0)
    lows = {k: spmd.jit(_sweeps(k), in_shardings=(MESH.sharding("data", "model"),)).lower(u) for k in (2, 3)}
    c = {k: low.cost(machine=machine, network=Network())["compute_seconds"] for k, low in lows.items()}
    assert 2 * block / 1e9 < c[3] - c[2] < 2.2 * block / 1e9
    stored = fused_kernels(lows[3].graph)
    assert len(stored) == 2 and all(v.shape == (64, 64) for v in stored)     # the first two sweeps' grids
    # without a halo exchange (one device holds the grid) the sweeps are one kernel: a
    # 5-point sweep's few ops are cheaper computed again at the next sweep's places than
    # its grid stored and read back (ir.RECOMPUTE_LIMIT)
    whole = spmd.jit(_sweeps(3), in_shardings=(MESH.sharding(None, None),)).lower(u)
    assert not fused_kernels(whole.graph)


KINDS = ("all_reduce", "collective_permute", "all_gather", "reduce_scatter", "all_to_all")


def test_every_collective_pays_the_links_rendezvous_once_a_call():
    """Link.rendezvous: the seconds of a collective's call from Python (MPI's), paid once
    by every collective over more than one rank, whatever its kind, rounds and bytes;
    a program of all_to_alls pays it once each."""
    from spmd.sharding.auto.program_cost import comm_seconds
    slow, fast = Link(latency=1e-6, bandwidth=1e9, rendezvous=1e-3), Link(latency=1e-6, bandwidth=1e9)
    for kind in KINDS:
        for nbytes in (0.0, 1e3, 1e6):
            assert collective_seconds(kind, nbytes, 4, slow) - collective_seconds(kind, nbytes, 4, fast) \
                == pytest.approx(1e-3)
        assert collective_seconds(kind, 0.0, 1, slow) == collective_seconds(kind, 0.0, 1, fast) == 0.0
    row, col = MESH.sharding("data", None), MESH.sharding(None, "data")
    f = spmd.jit(lambda x: spmd.shard(spmd.shard(x * 2.0, col) + 1.0, row) * 3.0, in_shardings=(row,))
    g = f.lower(np.ones((8, 8), np.float32)).graph
    assert [op.name for op in g.ops if op.opdef.needs_comm] == ["all_to_all", "all_to_all"]
    assert comm_seconds(g, MESH, Network(within=slow)) - comm_seconds(g, MESH, Network(within=fast)) \
        == pytest.approx(2e-3)


def test_a_collective_called_from_python_pays_for_lining_up_its_blocks():
    """Where a link's ranks call collectives from Python (Link.rendezvous: MPI's), a
    gather along a dim other than the first copies the received blocks into its result
    (read and written once) at the machine's rates; along the first dim, or where the
    ranks meet in native code, nothing is copied and nothing more is paid."""
    from spmd.sharding.auto.program_cost import comm_seconds
    machine = Machine(bandwidth=4e9, cache_bytes=0.0)
    python, native = Link(latency=1e-6, bandwidth=1e9, rendezvous=1e-4), Link(latency=1e-6, bandwidth=1e9)
    whole = MESH.sharding(None, None)
    for split, dim in ((MESH.sharding(None, "data"), 1), (MESH.sharding("data", None), 0)):
        f = spmd.jit(lambda x: spmd.shard(x * 2.0, whole) + 1.0, in_shardings=(split,))
        g = f.lower(np.ones((64, 32), np.float32)).graph
        gathers = [op for op in g.ops if op.name == "all_gather"]
        assert [op.attrs["dimension"] for op in gathers] == [dim]
        extra = comm_seconds(g, MESH, Network(within=python), machine=machine) - comm_seconds(g, MESH, Network(within=python))
        assert extra == pytest.approx(2 * 64 * 32 * 4 / 4e9 if dim else 0.0)
        assert comm_seconds(g, MESH, Network(within=native), machine=machine) == comm_seconds(g, MESH, Network(within=native))


def test_a_links_slowdown_slows_the_work_of_a_program_that_exchanges_alone():
    """Link.slowdown (MPI's processes, measured where kernels run between collectives):
    a program with a collective pays its element-ops, bytes, kernels' fixed costs and
    the call's own seconds that many times over (Machine.crowded); a program that
    exchanges nothing runs at the machine's rates (each process's turn on a core); a
    matrix product's rates stay."""
    from spmd.sharding.auto.program_cost import meeting_machine
    m = Machine(flops=5e10, bandwidth=1e10, call=2e-6, step=1e-4, element=2e-11, cache_bytes=1e6,
                cache_bandwidth=3e10, leaf=1e-5, placing=1e-5, output=1e-10, product_element=1e-10)
    c = m.crowded(3.0)
    assert (c.flops, c.product_element) == (m.flops, m.product_element)
    assert c.element == pytest.approx(3 * m.element) and c.bandwidth == pytest.approx(m.bandwidth / 3)
    assert c.cache_bandwidth == pytest.approx(m.cache_bandwidth / 3)
    for k in ("call", "step", "leaf", "placing", "output"):
        assert getattr(c, k) == pytest.approx(3 * getattr(m, k)), k
    assert c.argument == pytest.approx(3 * 2.0 / m.bandwidth) and c.written == pytest.approx(3 * 4.0 / m.bandwidth)
    assert m.crowded(1.0) is m
    mesh = spmd.Mesh((4,), ("x",))
    row = mesh.sharding("x", None)
    x = np.ones((64, 256), np.float32)
    total = spmd.jit(lambda x: x * 2.0 + x.sum(axis=0), in_shardings=(row,), out_shardings=row).lower(x)
    alone = spmd.jit(lambda x: x * 2.0 + 1.0, in_shardings=(row,), out_shardings=row).lower(x)
    plain, slow = Link(latency=1e-5, bandwidth=1e9), Link(latency=1e-5, bandwidth=1e9, slowdown=3.0)
    for low, times in ((total, 3.0), (alone, 1.0)):
        a, b = low.cost(network=Network(within=plain), machine=m), low.cost(network=Network(within=slow), machine=m)
        assert b["compute_seconds"] == pytest.approx(times * a["compute_seconds"])
        assert b["step_seconds"] == pytest.approx(times * a["step_seconds"])
        assert b["comm_seconds"] == pytest.approx(a["comm_seconds"])
        assert b["machine"] is m               # (the rates as given: crowded where it runs)
        assert (meeting_machine(low.graph, m, Network(within=slow)) is m) == (times == 1.0)
    lin = spmd.jit(lambda x, w: (x @ w).sum(axis=0), in_shardings=(row, mesh.sharding(None, None)))
    low = lin.lower(x, np.ones((256, 256), np.float32))
    a, b = low.cost(network=Network(within=plain), machine=m), low.cost(network=Network(within=slow), machine=m)
    # (the product's flops at the same rate: less than 3x the whole)
    assert a["compute_seconds"] < b["compute_seconds"] < 3 * a["compute_seconds"]


def test_crowding_parts_the_rendezvous_from_the_slowdown():
    """calibrate.crowding: two chains of one collective an iteration alike, whose
    kernels differ, give back the slowdown f of their compute; a third, whose
    collective costs R more than the model says, R (its compute f times the model's
    taken off); the slowdown is held to [0.5, 8] and the rendezvous to 0 or more."""
    from spmd.jit.calibrate import crowding
    for R, f in ((2e-4, 1.8), (5e-5, 1.0), (0.0, 3.0)):
        small, large = (1e-4 + 3e-5 + f * 2e-5, 2e-5, 1e-4), (1e-4 + 3e-5 + f * 8e-4, 8e-4, 1e-4)
        exchange = (6e-5 + R + f * 1e-5, 1e-5, 6e-5)
        got = crowding(small, large, exchange)
        assert got["rendezvous"] == pytest.approx(R, abs=1e-12) and got["slowdown"] == pytest.approx(f)
    ex = (1e-4, 1e-5, 1e-5)
    assert crowding((1e-3, 1e-5, 1e-4), (1e-3, 1e-3, 1e-4), ex)["slowdown"] == 0.5
    assert crowding((1e-3, 1e-5, 1e-4), (1e-1, 1e-3, 1e-4), ex)["slowdown"] == 8.0
    assert crowding((1e-4, 1e-4, 1e-5), (1e-2, 1e-3, 1e-5), (1e-5, 1e-4, 1e-5))["rendezvous"] == 0.0


@pytest.mark.parametrize("transport", ["local", "mpi"])
def test_a_stored_rendezvous_is_read_for_mpis_link_alone(tmp_path, monkeypatch, transport):
    """The local transport's collectives meet in the native code: a calibration stored
    before all_to_all ran there (its rendezvous measured with them) prices none of
    them; MPI's link, measured under mpiexec, keeps its own."""
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9, "rendezvous": 3e-4}},
                             "networks": {"mpi": {"within": {"latency": 5e-5, "bandwidth": 5e8,
                                                             "rendezvous": 2e-4, "gather_bandwidth": 3e9,
                                                             "slowdown": 1.7}}}}))
    os.utime(f, ns=(10**18 + 11, 10**18 + 11))
    monkeypatch.setattr(R, "transport", lambda: transport)
    link = R.rates(devices=4)[1].within
    assert (link.latency, link.rendezvous) == ((1e-6, 0.0) if transport == "local" else (5e-5, 2e-4))
    assert link.slowdown == (1.0 if transport == "local" else 1.7)
    # (the gather of whole arrays, measured with MPI's link; the local runtime has none:
    # its link's own bandwidth)
    assert link.whole_gathers().bandwidth == (3e9 if transport == "mpi" else 2e9)


def test_mpis_call_and_rounds_part_as_the_two_chains_say():
    """calibrate.part_call_and_rounds: an all_reduce of 2k rounds and a gather of k,
    each a call of R seconds and rounds of L, give back R and L; gathers no faster than
    the all_reduces, or so much faster that no call is left, leave it all to the
    all_reduces' rounds."""
    from spmd.jit.calibrate import part_call_and_rounds
    for R, L, k in ((2e-4, 3e-5, 2), (5e-4, 1e-6, 3), (1e-6, 1e-4, 1)):
        got = part_call_and_rounds(R + 2 * k * L, R + k * L, k)
        assert got["latency"] == pytest.approx(L) and got["rendezvous"] == pytest.approx(R)
    assert part_call_and_rounds(4e-4, 5e-4, 2) == {"latency": 1e-4, "rendezvous": 0.0}
    assert part_call_and_rounds(4e-4, 1e-4, 2) == {"latency": 1e-4, "rendezvous": 0.0}


def test_a_streaming_rate_is_measured_without_the_calls_fixed_cost():
    """calibrate._streaming_seconds: a loop of k kernel steps against one, so that the
    call's fixed seconds (and the copy of its result into numpy) cancel: a call of
    20 ms and 5 ms a step gives 5 ms, where one call's time would give 25."""
    import time
    from spmd.jit.calibrate import _streaming_seconds

    def make(k):
        return lambda: time.sleep(0.02 + 0.005 * k)
    assert _streaming_seconds(make, (), 3, 9) == pytest.approx(0.005, rel=0.2)


def test_a_value_read_back_after_the_cache_was_overwritten_comes_from_memory():
    """KernelTraffic's reuse distance: a product's result read right away is in the cache;
    read again after a pass over an array larger than the cache (a forward pass's
    activation read by the backward pass) it comes from memory, at `bandwidth`."""
    from spmd.sharding.kernel_traffic import KernelTraffic, nbytes

    def f(x, big):
        y = x @ x
        s = (big * 3.0).sum()
        return y * s

    x, big = np.ones((64, 64), np.float32), np.ones((1024, 1024), np.float32)
    rep = MESH.sharding(None, None)
    g = spmd.jit(f, in_shardings=(rep, rep)).lower(x, big).graph
    y = next(op.results[0] for op in g.ops if op.name == "dot_general")
    reader = next(op for op in g.ops if y in op.operands)
    small_cache = KernelTraffic(g, cache_bytes=4 * x.nbytes)      # holds y, not big
    large_cache = KernelTraffic(g, cache_bytes=4 * big.nbytes)
    assert small_cache.split[reader][1] >= nbytes(y)               # from memory
    assert large_cache.split[reader][1] == 0                       # all in the cache
    fast = Machine(flops=1e18, bandwidth=1e9, call=0.0, cache_bytes=4 * x.nbytes, cache_bandwidth=1e12)
    assert fast.stream_seconds(1e6, 0) == pytest.approx(1e-6) and fast.stream_seconds(0, 1e6) == pytest.approx(1e-3)


def test_a_thin_factorization_costs_m_n_squared():
    """np.polyfit's least squares on 200,000 points factor a 200000 x 3 matrix: about
    m n^2 flops, not m^3 (which made the cost model price a 30 ms fit at hours)."""
    x = np.linspace(0.0, 1.0, 200_000)
    low = spmd.jit(lambda x, y: np.linalg.svd(np.vander(x, 3), compute_uv=False) + y[:3]).lower(x, x)
    assert 200_000 * 9 <= low.report()["flops"] <= 200_000 * 9 * 20, low.report()["flops"]


def test_a_call_whose_ranks_run_on_threads_pays_the_links_handoff():
    """Link.handoff: the local transport hands the ranks of a program that exchanges, or
    makes more than `solo_bytes` a rank, to the devices' threads and waits for them all;
    a small program that exchanges nothing runs its ranks in turn on the caller's thread
    and pays Machine.step alone."""
    machine = Machine(step=1e-4)
    threads = Network(within=Link(handoff=1e-3, solo_bytes=1 << 18))
    plain = Network()
    row = MESH.sharding("data", None)

    def step(f, x):
        low = spmd.jit(f, in_shardings=(row,)).lower(x)
        return [low.cost(machine=machine, network=n)["step_seconds"] for n in (threads, plain)]
    small = np.ones((8, 8), np.float32)
    assert step(lambda x: x * 2.0, small) == [pytest.approx(1e-4)] * 2                 # in turn
    assert step(lambda x: x.sum(axis=0), small) == [pytest.approx(1.1e-3), pytest.approx(1e-4)]  # an all_reduce
    big = np.ones((1024, 256), np.float32)            # 512 KiB a rank, no collective
    assert step(lambda x: x * 2.0, big) == [pytest.approx(1.1e-3), pytest.approx(1e-4)]


def test_stored_handoff_is_read(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9, "handoff": 7e-4,
                                                    "solo_bytes": 4096.0}}}))
    os.utime(f, ns=(10**18 + 13, 10**18 + 13))
    monkeypatch.setattr(R, "transport", lambda: "local")
    link = R.rates(devices=4)[1].within
    assert (link.handoff, link.solo_bytes) == (7e-4, 4096.0)


def test_the_cache_a_streaming_loop_stays_in_is_where_its_rate_falls():
    """calibrate.capacity_of: the largest size still near the cache's rate (above the
    geometric mean of the fastest and memory's, or 1.5x memory's); a small size measured
    slow under load does not stop it, no size at memory's rate passes, and a cache
    behind a faster one counts whole."""
    from spmd.jit.calibrate import capacity_of
    mib = float(1 << 20)
    sizes = [mib * 2 ** k for k in range(7)]              # 1 .. 64 MiB
    assert capacity_of(sizes, [30, 31, 35, 40, 8, 7, 7]) == 8 * mib
    assert capacity_of(sizes, [9, 31, 35, 40, 20, 7, 7]) == 16 * mib
    assert capacity_of(sizes, [40, 7, 7, 7, 7, 7, 7]) == mib
    # a small fast cache, then a large one at a third of its rate, then memory's
    sizes = [mib * 2 ** (k / 2) for k in range(14)]      # 1 .. 90 MiB
    three = [65, 40, 30, 22, 23, 21, 24, 22, 21, 24, 19, 9, 8, 8]
    assert capacity_of(sizes, three) == sizes[10]
    assert capacity_of(sizes, three[:-3] + [6, 8, 9]) == sizes[10]      # memory's: the median


def test_a_grid_the_next_sweep_reads_after_a_sweeps_bytes_comes_from_memory():
    """KernelTraffic's reuse distance counts from the start of the op that last touched
    a value: a Jacobi sweep writes its new block while it reads the old one, so the next
    sweep reads the block after a block's bytes more. A cache of a block and a half holds
    neither: the sweeps read their grid from memory; a cache of three blocks holds it."""
    from spmd.sharding.kernel_traffic import KernelTraffic, fused_kernels
    u = np.ones((128, 128))
    block = u.nbytes / 4
    g = spmd.jit(_sweeps(3), in_shardings=(MESH.sharding("data", "model"),)).lower(u).graph
    stored = fused_kernels(g)
    readers = [op for op in g.ops if any(o in stored for o in op.operands)]

    def far(cache):
        t = KernelTraffic(g, cache_bytes=cache)
        return sum(t.split[op][1] for op in readers if any(t.first.get(o) is op for o in op.operands if o in stored))
    assert far(1.5 * block) >= 2 * block            # both stored grids from memory
    assert far(3 * block) == 0


def test_a_calls_leaves_cost_machine_leaf_and_its_numpy_arguments_placing():
    """A training step passes its parameters and optimizer state as many leaves: each
    argument and result leaf beyond the one of each Machine.step was measured with costs
    Machine.leaf (the ranks and the caller handle it from Python), and each argument given
    as numpy Machine.placing more (split into its shards), besides its bytes."""
    import dataclasses
    row = MESH.sharding("data", None)
    p = {f"w{i}": np.ones((8, 4), np.float32) for i in range(5)}
    def jitted():
        return spmd.jit(lambda p: {k: v * 2.0 for k, v in p.items()}, in_shardings=({k: row for k in p},))
    low = jitted().lower(p)
    base = Machine(argument=0.0, written=0.0)
    some = dataclasses.replace(base, leaf=1e-3, placing=1e-2)
    c0, c1 = (low.cost(machine=m, network=Network()) for m in (base, some))
    assert c1["step_seconds"] - c0["step_seconds"] == pytest.approx((4 + 4) * 1e-3)
    assert c1["args_seconds"] - c0["args_seconds"] == pytest.approx(5 * 1e-2)
    placed = jitted().lower({k: spmd.device_put(v, row) for k, v in p.items()}).cost(machine=some, network=Network())
    assert placed["args_seconds"] == 0.0
    assert placed["step_seconds"] == pytest.approx(c1["step_seconds"])


def test_stored_leaf_and_placing_are_read(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4, "leaf_devices": 2e-5,
                                         "placing": 4e-5},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9}}}))
    os.utime(f, ns=(10**18 + 17, 10**18 + 17))
    monkeypatch.setattr(R, "transport", lambda: "local")
    m = R.rates(devices=4)[0]
    assert (m.leaf, m.placing) == (2e-5, 4e-5)
    assert (R.rates(devices=1)[0].leaf, R.rates(devices=1)[0].placing) == (0.0, 0.0)   # (no mesh: numpy in and out)


def test_a_transcendental_function_costs_its_code_not_its_polynomials_multiply_adds():
    """exp costs what the backend's code for it takes against a float32 add (Machine.element:
    ~30 adds an element on x86-64), far more than a multiply; the double-precision
    functions cost more again (float64 exp, log and tanh, vector code of their own, 2-10x
    the float32 ones: half as many to a vector, tables' gathers, more terms); a kernel of
    them is priced at that where memory is fast."""
    fast_memory = Machine(flops=1e12, element=1e-9, bandwidth=1e18, call=0.0)

    def seconds(f, dtype=np.float32):
        x = np.ones((256, 64), dtype)
        return spmd.jit(f).lower(x).cost(machine=fast_memory, network=Network())["compute_seconds"] / x.size
    assert seconds(np.exp) >= 10e-9
    assert seconds(np.tanh) >= 10e-9
    assert seconds(np.sin) >= 10 * seconds(np.exp)           # (a call of libm an element)
    assert seconds(lambda x: x * 2.0) <= 2e-9
    assert 2 * seconds(np.exp) <= seconds(np.exp, np.float64) <= 6 * seconds(np.exp)
    assert 2 * seconds(np.log) <= seconds(np.log, np.float64) <= 6 * seconds(np.log)
    assert 4 * seconds(np.tanh) <= seconds(np.tanh, np.float64) <= 12 * seconds(np.tanh)
    # a power of a small constant integer is multiplies (the LLVM backend's code for it),
    # any other exponent a call of libm's pow
    assert seconds(lambda x: x ** 3) == pytest.approx(4e-9)
    assert seconds(lambda x: x ** 3, np.float64) == pytest.approx(8e-9)
    assert seconds(lambda x: x ** 2.5) >= 100 * seconds(lambda x: x ** 3)
    assert seconds(lambda x: x ** x) >= 100 * seconds(lambda x: x ** 3)


@pytest.mark.parametrize("dtype,per", [(np.float32, 1), (np.int32, 1), (np.float64, 2), (np.int64, 2)])
def test_a_kernel_of_many_element_ops_is_priced_at_the_element_rate(dtype, per):
    """A fused kernel of many adds an element (a stencil's update, Game of Life's rules) is
    bound by its ops, which run at Machine.element each (a vector's lanes, far below a
    matrix product's `flops`), not by its bytes: 31 adds of an element of 4 bytes cost 31
    element-ops, of 8 bytes (half as many to a vector) 62. With no calibrated `element`
    they are priced at `flops`."""
    def adds(a, b, c, d):
        for _ in range(8):
            a, b, c, d = a + b, b - c, c + d, d - a
        return a + b + c + d
    xs = [np.ones(4096, dtype)] * 4
    low = spmd.jit(adds).lower(*xs)
    ops = 8 * 4 + 3
    got = low.cost(machine=Machine(flops=1e15, element=1e-9, bandwidth=1e18, call=0.0),
                   network=Network())["compute_seconds"]
    assert got == pytest.approx(per * ops * 4096 * 1e-9, rel=0.05)
    at_flops = low.cost(machine=Machine(flops=1e9, bandwidth=1e18, call=0.0), network=Network())["compute_seconds"]
    assert at_flops == pytest.approx(per * ops * 4096 / 1e9, rel=0.05)


def test_an_element_op_is_an_add_of_a_kernel_of_nine_layers_against_one():
    """calibrate.element_op_seconds: the kernel of 9 layers of adds (32 element-ops more an
    element than the kernel of one layer), its runs interleaved with the other's: a call
    of 1 ms that takes 32 us more at 9 layers over 1000 elements a device gives 1 ns."""
    import time
    from spmd.jit.calibrate import adds, element_op_seconds

    def make(k):
        return lambda: time.sleep(0.001 + 4e-6 * (k - 1))
    assert element_op_seconds(make, (), 1000, 3) == pytest.approx(1e-9, rel=0.5)
    x = np.arange(8.0, dtype=np.float32)
    a, b, c, d = x, x + 1, x * 2, x - 3
    want = [a, b, c, d]
    for _ in range(2):
        want = [want[0] + want[1], want[1] - want[2], want[2] + want[3], want[3] - want[0]]
    np.testing.assert_array_equal(adds(2)(a, b, c, d), sum(want[1:], want[0]))


@pytest.mark.parametrize("devices,cores,want", [(4, 2, 2.0), (4, 4, 1.0), (2, 8, 1.0), (6, 4, 1.5)])
def test_devices_element_op_is_one_devices_times_the_devices_a_core_holds(devices, cores, want):
    """Machine.element_devices: a core runs its devices' kernels one after another, so
    each device's element-op takes the devices a core holds times one alone; more cores
    than devices leave it one device's."""
    from spmd.jit.calibrate import shared_cores
    assert shared_cores(devices, cores) == want


def _adam(p, m, v, g):
    m = 0.9 * m + 0.1 * g
    v = 0.99 * v + 0.01 * g * g
    return p - 1e-3 * m / (np.sqrt(v) + 1e-8), m, v


def test_a_kernel_writing_several_results_pays_one_call():
    """Adam's update of a parameter is one fused kernel that writes the new m and v (read
    on by the parameter's update) and the parameter: one Machine.call, not one per result."""
    row = MESH.sharding("data", None)
    args = [np.ones((64, 8), np.float32) for _ in range(4)]
    low = spmd.jit(_adam, in_shardings=(row,) * 4).lower(*args)
    c = low.cost(machine=Machine(flops=1e18, bandwidth=1e18, call=1e-3), network=Network())
    assert c["compute_seconds"] == pytest.approx(1e-3, rel=1e-6)


@pytest.mark.parametrize("rows,cols", [(64, 16), (256, 64), (8, 128)])
def test_a_matrix_product_costs_its_elements_besides_its_flops(rows, cols):
    """Machine.product_element: a product's compute is its flops at `flops` and each
    element of its operands and result (a device's shards) at product_element."""
    x, w = np.ones((rows, cols), np.float32), np.ones((cols, cols), np.float32)
    low = spmd.jit(lambda x, w: x @ w,
                   in_shardings=(MESH.sharding("data", None), MESH.sharding(None, None))).lower(x, w)
    plain = Machine(flops=1e9, bandwidth=1e15, call=0.0)
    c = {e: low.cost(machine=Machine(flops=1e9, bandwidth=1e15, call=0.0, product_element=e),
                     network=Network())["compute_seconds"] for e in (0.0, 1e-9)}
    local = rows // 2 * cols
    assert c[1e-9] - c[0.0] == pytest.approx((local + cols * cols + local) * 1e-9)
    assert c[0.0] == pytest.approx(low.cost(machine=plain, network=Network())["compute_seconds"])
    assert c[0.0] == pytest.approx(2 * local * cols / 1e9)


def test_product_rates_are_fitted_to_a_square_and_thin_products():
    from spmd.jit.calibrate import THIN, product_rates
    n, flops, element = 512, 2e10, 3e-9

    def seconds(f, e):
        return f / flops + e * element
    square = seconds(2 * n ** 3, 3 * n * n)
    thins = [seconds(2 * n * c * c, 2 * n * c + c * c) for c in THIN]
    assert len(THIN) >= 3
    assert product_rates(n, square, thins) == pytest.approx((flops, element), rel=1e-6)
    # the widest thin product slowed by a burst of load: the fit errs less than the two
    # equations of it and the square product alone would
    slowed = thins[-1] * 1.5
    got = product_rates(n, square, [*thins[:-1], slowed])
    c = THIN[-1]
    f1, e1, f2, e2 = 2.0 * n ** 3, 3.0 * n * n, 2.0 * n * c * c, 2.0 * n * c + c * c
    det = f1 * e2 - f2 * e1
    two = (det / (square * e2 - slowed * e1), (f1 * slowed - f2 * square) / det)
    assert abs(got[0] / flops - 1) < abs(two[0] / flops - 1)
    assert abs(got[1] / element - 1) < abs(two[1] / element - 1)
    # thin products measured faster than any rate allows (the load slowed the square
    # one): no per-element cost, never a negative one
    f, e = product_rates(n, square, [t / 10 for t in thins])
    assert f > 0 and e == 0.0
    # a thin layer whose product left nothing once its scale's kernel was paid (0 s): the
    # others fit; with none left, the square product's rate alone
    assert product_rates(n, square, [0.0, *thins[1:]]) == pytest.approx((flops, element), rel=1e-6)
    assert product_rates(n, square, [0.0] * len(THIN)) == (2 * n ** 3 / square, 0.0)


def test_a_calibration_takes_the_fast_end_of_its_sample():
    """calibrate.fast: a load on a shared machine only slows runs, so the figure is a low
    quantile of the sample: runs a burst of load slowed (here more than half of them,
    which take a median 8x up) do not move it, nor does one run a timer's hiccup made
    absurdly fast."""
    from spmd.jit.calibrate import fast
    quiet = [1.00, 1.01, 1.02, 1.00, 1.03, 1.01, 1.02, 1.00, 1.01, 1.02, 1.01]
    loaded = quiet[:7] + [9.0, 8.5, 7.9, 9.3, 8.8, 9.9, 8.1, 9.4, 8.6]
    assert fast(loaded) == pytest.approx(1.0, rel=0.02)
    assert fast(quiet) == pytest.approx(fast(loaded), rel=0.02)
    assert float(np.median(loaded)) > 7.0
    assert fast([0.01] + quiet) >= 1.0


def test_a_calibration_interleaves_the_programs_it_compares():
    """calibrate.timed: one run of each program in turn, `runs` rounds at least and more
    while the rounds took less than `seconds`, after a warm-up of each: the programs
    whose difference is a figure see the same load."""
    from spmd.jit.calibrate import timed
    order = []
    calls = [(lambda k=k: order.append(k), ()) for k in "ab"]
    assert len(timed(calls, 3, seconds=0.0)) == 2
    assert order == ["a", "b"] + ["a", "b"] * 3
    order.clear()
    timed(calls, 1, seconds=0.05)
    assert order[:4] == ["a", "b", "a", "b"] and len(order) > 4


def test_a_layers_product_is_its_time_less_the_models_scale_kernel():
    """calibrate.layer_product_seconds: products are calibrated in layers, each product's
    result read by an elementwise scale (a pure chain of products, their results read
    by nothing but products, runs about half as fast on the local devices as a
    network's products do); the product's share is the layer's seconds less the model's
    seconds of the scale's kernel and the two kernels' fixed costs, so that the model
    prices the same layer back at what it took."""
    from spmd.jit.calibrate import layer_product_seconds
    m = Machine(bandwidth=1e9, call=1e-5)
    elements = 1000                   # the scale reads and writes 8000 bytes: 8 us
    assert layer_product_seconds(1e-3, elements, m) == pytest.approx(1e-3 - 8e-6 - 2e-5)
    assert layer_product_seconds(1e-6, elements, m) == 0.0
    x, w = np.ones((8, 16), np.float32), np.ones((16, 16), np.float32)
    low = spmd.jit(lambda x, w: (x @ w) * 0.25).lower(x, w)
    rate = Machine(flops=1e9, bandwidth=1e9, call=1e-5)
    layer = low.cost(machine=rate, network=Network())["compute_seconds"]
    assert layer_product_seconds(layer, x.size, rate) == pytest.approx(2 * 8 * 16 * 16 / 1e9, rel=0.05)


def test_a_calls_results_cost_their_new_buffers():
    """Machine.output: each byte of the results a device makes costs a call `output`
    seconds besides the kernel writing it (a result's buffer is new each call), in
    lowered.cost()'s outputs_seconds and its total: a result split on the mesh's four
    devices costs a device a quarter of a replicated one."""
    x = np.ones((64, 32))
    m = Machine(output=1e-9)
    split = spmd.jit(lambda x: x + 1.0, in_shardings=MESH.sharding(("data", "model"), None),
                     out_shardings=MESH.sharding(("data", "model"), None)).lower(x)
    whole = spmd.jit(lambda x: x + 1.0, in_shardings=MESH.sharding(("data", "model"), None),
                     out_shardings=MESH.sharding(None, None)).lower(x)
    c = split.cost(machine=m, network=Network())
    assert c["outputs_seconds"] == pytest.approx(x.nbytes / 4 * 1e-9)
    assert whole.cost(machine=m, network=Network())["outputs_seconds"] == pytest.approx(x.nbytes * 1e-9)
    plain = split.cost(machine=Machine(), network=Network())
    assert plain["outputs_seconds"] == 0.0
    assert c["seconds"] - plain["seconds"] == pytest.approx(c["outputs_seconds"])
    assert "results' buffers" in str(c)


def test_stored_output_rate_is_read_for_a_program_on_several_devices(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4, "output_devices": 3e-10}}))
    os.utime(f, ns=(10**18 + 13, 10**18 + 13))
    assert R.rates(devices=4)[0].output == 3e-10
    assert R.rates(devices=1)[0].output == 0.0


def test_stored_product_element_and_element_are_read(tmp_path, monkeypatch):
    from spmd.jit import rates as R
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    f = tmp_path / "machine.json"
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4, "product_element": 1e-9,
                                         "flops_devices": 5e8, "product_element_devices": 3e-9,
                                         "element": 1e-11, "element_devices": 2e-11},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9}}}))
    os.utime(f, ns=(10**18 + 19, 10**18 + 19))
    monkeypatch.setattr(R, "transport", lambda: "local")
    assert R.rates(devices=4)[0].product_element == 3e-9
    assert R.rates(devices=1)[0].product_element == 1e-9
    assert R.rates(devices=4)[0].element == 2e-11 and R.rates(devices=1)[0].element == 1e-11
    f.write_text(json.dumps({"machine": {"flops": 1e9, "bandwidth": 1e9, "step": 1e-4},
                             "network": {"within": {"latency": 1e-6, "bandwidth": 2e9}}}))
    os.utime(f, ns=(10**18 + 23, 10**18 + 23))
    assert R.rates(devices=4)[0].product_element == 0.0      # (a calibration without it: flops alone)
    assert R.rates(devices=4)[0].element == 0.0
