"""FSDP parameters made already split: a jitted init with out_shardings, spmd.random
and np.zeros inside, makes each device's shard alone (Threefry of the element's global
index: the numbers of the same init on one device), so a device holds its shards and
no more, from before the first step."""
import numpy as np

import spmd

L, D = 3, 256


def init(key):
    keys = spmd.random.split(key, L)
    p = {f"w{i}": spmd.random.normal(keys[i], (D, D), dtype=np.float32) / float(np.sqrt(D))
         for i in range(L)}
    zeros = {k: np.zeros((D, D), np.float32) for k in p}
    return p, {"m": zeros, "v": dict(zeros)}


def test_parameters_and_state_are_made_on_their_shards():
    mesh = spmd.Mesh((4,), ("data",))
    row = {f"w{i}": mesh.sharding("data", None) for i in range(L)}
    f = spmd.jit(init, out_shardings=(row, {"m": row, "v": row}))
    key = spmd.random.key(7)
    mem = f.lower(key).memory()
    one = D * D * 4 // 4                             # a quarter of one parameter
    shards = 3 * L * one                             # p, m and v
    # the shards, and a draw's temporaries (of one shard's size) while it is made
    assert mem["peak_bytes"] <= shards + 3 * one, (mem["peak_bytes"], shards)
    assert mem["peak_bytes"] < 0.35 * 4 * shards     # (all of them whole: 4 x the shards)
    p, opt = f(key)
    want_p, _ = spmd.jit(init)(key)                  # the same init on one device
    for k in p:
        assert p[k].sharding.spec == ("data", None)
        assert p[k].dtype == np.float32 and sorted(np.shape(data) for _, _, data in p[k].shards) == [(D // 4, D)] * 4
        assert np.array_equal(np.asarray(p[k]), np.asarray(want_p[k]))
        assert not np.asarray(opt["m"][k]).any() and opt["v"][k].sharding.spec == ("data", None)
    assert abs(float(np.asarray(p["w0"]).std()) * np.sqrt(D) - 1) < 0.05
