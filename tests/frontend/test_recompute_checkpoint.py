"""spmd.checkpoint (frontend/remat.py, ir/ops/remat.py): the backward pass computes the
function again instead of holding what it made. Gradients are the un-checkpointed ones
bit for bit; the recomputation is really there (not merged back by the optimiser) and
really holds less; it composes with jit, grad, scan and shardings."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import spmd


def gelu(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


ACTS = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh, "gelu": gelu}


def _layer(act):
    def layer(h, w):
        a = spmd.checkpoint_name(h @ w, "pre")
        return ACTS[act](a) + 0.5 * a
    return layer


def _loss(ws, x, act, ck, policy=None):
    layer = _layer(act)
    f = spmd.checkpoint(layer, policy=policy) if ck else layer
    h = x
    for w in ws:
        h = f(h, w)
    return np.mean(h ** 2)


def _inputs(rng, layers, d, b):
    ws = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(layers)]
    return ws, rng.standard_normal((b, d)).astype(np.float32)


POLICIES = [None, "dots", spmd.checkpoint_policies.save_only_these_names("pre")]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), act=st.sampled_from(sorted(ACTS)), policy=st.sampled_from(range(3)),
       backend=st.sampled_from(["numpy", "llvm"]))
def test_gradients_are_the_unchecked_ones_bit_for_bit(seed, act, policy, backend):
    rng = np.random.default_rng(seed)
    ws, x = _inputs(rng, int(rng.integers(1, 4)), int(rng.choice([3, 8, 16])), int(rng.choice([1, 5, 12])))
    want = spmd.jit(spmd.value_and_grad(lambda ws, x: _loss(ws, x, act, False)), backend=backend)(ws, x)
    got = spmd.jit(spmd.value_and_grad(lambda ws, x: _loss(ws, x, act, True, POLICIES[policy])),
                   backend=backend)(ws, x)
    assert np.array_equal(np.asarray(want[0]), np.asarray(got[0]))
    for a, b in zip(want[1], got[1]):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _optimized(f, *args):
    return spmd.jit(f).lower(*args).as_text("optimized")


def test_the_backward_pass_recomputes_what_the_policy_does_not_save():
    rng = np.random.default_rng(0)
    ws, x = _inputs(rng, 3, 16, 8)

    def count(ck, policy=None, op="dot_general("):
        return _optimized(spmd.grad(lambda ws, x: _loss(ws, x, "tanh", ck, policy)), ws, x).count(op)
    plain = count(False)
    assert count(True) == plain + 3                       # each layer's matmul again
    assert count(True, "dots") == plain                   # saved: not again...
    assert count(True, "dots", "tanh(") == 2 * count(False, None, "tanh(")     # ...but the rest is
    assert count(True, POLICIES[2]) == plain              # the named value is the matmul
    assert "optimization_barrier" not in _optimized(spmd.grad(lambda ws, x: _loss(ws, x, "tanh", True)), ws, x)


def test_checkpointing_each_block_lowers_the_peak():
    """Residual MLP blocks (d -> 4d -> d, GELU): a block holds its input and its 4d
    pre-activation for the backward pass (the GELU and its tanh are made again from it);
    checkpointed, a block holds its input alone: the planned peak drops by more than half."""
    rng = np.random.default_rng(0)
    d, n = 32, 12
    w1 = [(rng.standard_normal((d, 4 * d)) / np.sqrt(d)).astype(np.float32) for _ in range(n)]
    w2 = [(rng.standard_normal((4 * d, d)) / np.sqrt(4 * d)).astype(np.float32) for _ in range(n)]
    x = rng.standard_normal((1024, d)).astype(np.float32)

    def block(h, a, b):
        return h + gelu(h @ a) @ b

    def loss(ck):
        def f(w1, w2, x):
            h = x
            for a, b in zip(w1, w2):
                h = (spmd.checkpoint(block) if ck else block)(h, a, b)
            return np.mean(h ** 2)
        return spmd.jit(spmd.value_and_grad(f, argnums=(0, 1)))
    peak = {ck: loss(ck).lower(w1, w2, x).memory()["peak_bytes"] for ck in (False, True)}
    assert peak[True] <= 0.5 * peak[False], peak
    want, got = loss(False)(w1, w2, x), loss(True)(w1, w2, x)
    assert np.array_equal(want[0], got[0])
    for a, b in zip(spmd.tree_flatten(want[1])[0], spmd.tree_flatten(got[1])[0]):
        assert np.array_equal(a, b)


def test_composes_with_scan_and_grad_of_grad():
    rng = np.random.default_rng(1)
    ws, x = _inputs(rng, 3, 8, 4)
    stacked = np.stack(ws)

    def scanned(ck):
        layer = _layer("gelu")
        f = spmd.checkpoint(layer) if ck else layer
        return lambda ws, x: np.sum(spmd.scan(lambda h, w: (f(h, w), None), x, ws)[0] ** 2)
    a = spmd.jit(spmd.grad(scanned(False)))(stacked, x)
    b = spmd.jit(spmd.grad(scanned(True)))(stacked, x)
    np.testing.assert_array_equal(a, b)

    def hvp(ck):                 # d/dx sum(grad_w(loss)^2): differentiates the recomputation too
        return lambda ws, x: spmd.grad(lambda x: sum(np.sum(g * g) for g in spmd.grad(
            lambda ws: _loss(ws, x, "gelu", ck))(ws)))(x)
    np.testing.assert_allclose(spmd.jit(hvp(True))(ws, x), spmd.jit(hvp(False))(ws, x), rtol=1e-5, atol=1e-7)


def test_composes_with_shardings():
    spmd.init(backend="local", num_devices=4)
    mesh = spmd.Mesh((2, 2), ("data", "model"))
    rng = np.random.default_rng(2)
    ws, x = _inputs(rng, 3, 8, 8)

    def loss(ck):
        def f(ws, x):
            x = spmd.shard(x, mesh.sharding("data", None))
            return _loss(ws, x, "relu", ck)
        return f
    sh = ([mesh.sharding(None, "model")] * 3, mesh.sharding("data", None))
    a = spmd.jit(spmd.grad(loss(False)), in_shardings=sh)(ws, x)
    b = spmd.jit(spmd.grad(loss(True)), in_shardings=sh)(ws, x)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_outside_tracing_it_is_the_function():
    rng = np.random.default_rng(3)
    ws, x = _inputs(rng, 2, 4, 3)
    assert np.array_equal(spmd.checkpoint(_layer("tanh"))(x, ws[0]), _layer("tanh")(x, ws[0]))
    assert spmd.checkpoint_name(x, "a") is x


def test_python_arguments_pass_through_and_closures_are_kept():
    rng = np.random.default_rng(4)
    ws, x = _inputs(rng, 2, 4, 3)

    def layer(h, k, scale):            # k closed over by the caller below; scale a Python float
        return np.tanh(h @ k) * scale

    def loss(ck):
        def f(ws, x):
            g = spmd.checkpoint(lambda h, s: layer(h, ws[0], s)) if ck else (lambda h, s: layer(h, ws[0], s))
            return np.sum(g(x, 0.5) ** 2) + np.sum(ws[1])
        return f
    a = spmd.jit(spmd.grad(loss(False)))(ws, x)
    b = spmd.jit(spmd.grad(loss(True)))(ws, x)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_a_policy_that_is_not_one_says_what_is():
    with pytest.raises(TypeError, match="'nothing', 'dots'"):
        spmd.checkpoint(np.tanh, policy="matmuls")


# -- the peak and the bits, on layers as users write them -------------------------------------
def _mlp(bias, act, res, norm, ck):
    def layer(h, w, b):
        z = h @ w
        if bias:
            z = z + b
        if norm:
            mu = z.mean(axis=-1, keepdims=True)
            z = (z - mu) / np.sqrt(((z - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        a = ACTS[act](z)
        return h + a if res else a

    def loss(ws, bs, x, y):
        h = x
        for w, b in zip(ws, bs):
            h = (spmd.checkpoint(layer) if ck else layer)(h, w, b)
        return np.mean((h - y[:, :h.shape[1]]) ** 2)
    return loss


def _mlp_inputs(layers, d, batch, seed=0):
    rng = np.random.default_rng(seed)
    ws = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(layers)]
    bs = [(0.1 * rng.standard_normal(d)).astype(np.float32) for _ in range(layers)]
    return ws, bs, rng.standard_normal((batch, d)).astype(np.float32), rng.standard_normal((batch, 2 * d)).astype(np.float32)


@settings(max_examples=10, deadline=None)
@given(bias=st.booleans(), act=st.sampled_from(sorted(ACTS)), res=st.booleans(), norm=st.booleans(),
       seed=st.integers(0, 2**16))
def test_loss_and_gradients_are_the_same_bits_with_checkpoint_on_every_layer(bias, act, res, norm, seed):
    """A loss whose reduction is fused next to a value the backward pass keeps, and a
    layer norm's sums made again in the backward pass, in other kernels than the forward
    pass's: a sum's order and a multiply-add's fusing are the op's own, not the kernel's."""
    args = _mlp_inputs(4, 64, 512, seed)
    outs = [_flat_all(spmd.jit(spmd.value_and_grad(_mlp(bias, act, res, norm, ck), argnums=(0, 1)))(*args))
            for ck in (False, True)]
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


def _flat_all(out):
    return [np.asarray(a) for a in spmd.tree_flatten(out)[0]]


@pytest.mark.parametrize("bias,act,res", [(False, "relu", False), (True, "relu", False), (True, "tanh", True)])
def test_checkpoint_on_every_layer_never_holds_more_than_without(bias, act, res):
    """A layer of one matmul and an activation holds one value for the backward pass
    either way; checkpointed, the planner also merges neighbouring layers into segments
    (or holds, where that is lower): the peak is never above the program's without."""
    args = _mlp_inputs(8, 64, 1024)
    peak = {ck: spmd.jit(spmd.value_and_grad(_mlp(bias, act, res, False, ck), argnums=(0, 1)))
            .lower(*args).memory()["peak_bytes"] for ck in (False, True)}
    assert peak[True] <= peak[False], peak


def test_which_plan_runs_is_said():
    args = _mlp_inputs(8, 64, 1024)
    low = spmd.jit(spmd.value_and_grad(_mlp(True, "relu", False, False, True), argnums=(0, 1))).lower(*args)
    assert low.checkpoints in ("as written", "held", "merged")
    assert spmd.jit(spmd.value_and_grad(_mlp(True, "relu", False, False, False), argnums=(0, 1))) \
        .lower(*args).checkpoints is None
