"""Structured control flow: `while`, `cond` and `scan`, whose bodies are sub-graphs held
as attributes (StableHLO's regions). Sub-graphs are closed: a value of the enclosing
program a body uses is an explicit operand (tracing captures it, frontend/control.py).

    while(carry..., captured...)   {cond: Graph, body: Graph, num_carry}
        cond: (carry..., captured...) -> bool[]; body: (carry..., captured...) -> carry...
        results: the carry when cond is false
    cond(pred, args...)             {true: Graph, false: Graph}
        both branches: (args...) -> results..., the same avals
    scan(carry..., xs..., captured...)  {body: Graph, num_carry, num_xs, length, reverse}
        body: (carry..., x[i]..., captured...) -> (carry..., y...)
        results: the final carry, then each y stacked along a new leading dim of `length`

Sharding (GSPMD's rules): a loop-carried value keeps one sharding (operand i, result i
and the body's input and output i share their factors); the scanned dimension of xs and
ys is not split; a predicate is replicated (the partitioner lowers the sub-graphs with
the predicate's output replicated, one collective). Their partition rules
(sharding/partition_rules/control.py) reshard the operands, then propagate and
partition each sub-graph with those shardings pinned at its inputs and outputs, so
every device runs the same loop.

The reference (`ref`) interprets the sub-graphs op by op with each op's reference
(collectives get the communicator, so a per-device loop body may hold collectives).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..aval import Aval
from .names import ADD, BROADCAST_IN_DIM, COND, CONSTANT, SCAN
from .registry import OpDef, check, graph_flops, register

SUBGRAPHS = {"while": ("cond", "body"), "cond": ("true", "false"), "scan": ("body",)}


def run_graph(g, args, comm=None, run=None):
    """Run Graph g on ndarrays: with `run` (a backend's executor of its compiled sub-graph,
    run(g, args) -> outputs), else interpreted with each op's numpy reference."""
    if run is not None:
        # fresh arrays: a backend may reuse its output buffers on the next call
        return [np.array(x, dtype=v.dtype, copy=True) for x, v in zip(run(g, list(args)), g.outputs)]
    env = dict(zip(g.inputs, args))
    for op in g.ops:
        d = op.opdef
        xs = [env[o] for o in op.operands]
        if d.subgraphs:
            out = d.ref(*xs, comm=comm, run=run, **op.attrs)
        else:
            out = d.ref(*xs, comm=comm, **op.attrs) if d.needs_comm else d.ref(*xs, **op.attrs)
        outs = [out] if len(op.results) == 1 else list(out)
        for r, x in zip(op.results, outs):
            env[r] = np.asarray(x, dtype=r.dtype)
    return [env[v] for v in g.outputs]


def _avals(vs):
    return [Aval(v.shape, v.dtype) for v in vs]


def _same(got, want, what):
    check(len(got) == len(want), f"{what}: {len(got)} values where {len(want)} are expected")
    for i, (a, b) in enumerate(zip(got, want)):
        check(tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype,
              f"{what}: value {i} is {a.dtype}{list(a.shape)}, expected {b.dtype}{list(b.shape)}")


# -- while ---------------------------------------------------------------------------------
def _while_infer(*operands, cond, body, num_carry):
    carry = list(operands[:num_carry])
    _same(_avals(cond.inputs), operands, "while: the cond function's inputs")
    _same(_avals(body.inputs), operands, "while: the body's inputs")
    check(len(cond.outputs) == 1 and cond.outputs[0].shape == () and cond.outputs[0].dtype == "bool",
          "while: cond_fun must return a bool scalar")
    _same(_avals(body.outputs), carry, "while: the body's results (they must match the loop carry)")
    return _one(list(carry))


def _one(avals):
    """Infer's result: one Aval for a single-result op (graph.emit then returns a Value)."""
    return avals[0] if len(avals) == 1 else avals


def _while_ref(*operands, cond, body, num_carry, comm=None, run=None):
    carry, rest = list(operands[:num_carry]), list(operands[num_carry:])
    while bool(run_graph(cond, carry + rest, comm, run)[0]):
        carry = run_graph(body, carry + rest, comm, run)
    return _ret(carry)


def _ret(xs):
    """A ref's result: the array itself for a single-result op, else the list."""
    return xs[0] if len(xs) == 1 else xs


def _carry_factors(avals_in, avals_out, num_carry, start=0):
    """Factor names: carry i in and out share theirs; every other operand its own."""
    from ..factors import FactorRule
    sizes, ops, res = {}, [], []
    for i, a in enumerate(avals_in):
        fs = []
        for d, n in enumerate(a.shape):
            name = f"c{i - start}_{d}" if start <= i < start + num_carry else f"o{i}_{d}"
            sizes[name] = n
            fs.append((name,))
        ops.append(tuple(fs))
    for j, a in enumerate(avals_out):
        fs = []
        for d, n in enumerate(a.shape):
            name = f"c{j}_{d}" if j < num_carry else f"r{j}_{d}"
            sizes[name] = max(sizes.get(name, 0), n)
            fs.append((name,))
        res.append(tuple(fs))
    return FactorRule(tuple(ops), tuple(res), sizes)


def _while_factors(avals_in, avals_out, attrs):
    return _carry_factors(avals_in, avals_out, attrs["num_carry"])



CF_DTYPES = ("float32", "float64", "int32", "int64", "float16", "bfloat16")


# flops: a while's body once (its trip count is not known), a scan's `length` times, a
# cond's dearer branch
def _while_flops(avals_in, aval_out, attrs):
    return graph_flops(attrs["cond"]) + graph_flops(attrs["body"])


def _cond_flops(avals_in, aval_out, attrs):
    return max(graph_flops(attrs["true"]), graph_flops(attrs["false"]))


def _scan_flops(avals_in, aval_out, attrs):
    return attrs["length"] * graph_flops(attrs["body"])


register(OpDef("while", family="control", infer=_while_infer, ref=_while_ref, factors=_while_factors, needs_comm=True,
               dtypes=CF_DTYPES, flops=_while_flops, subgraphs=("cond", "body"), lowering="subprogram",
               captured_from=lambda attrs: attrs["num_carry"]))


# -- cond ----------------------------------------------------------------------------------
def _cond_infer(pred, *args, true, false):
    check(pred.shape == () and pred.dtype == "bool", f"cond: the predicate must be a bool scalar, got "
                                                    f"{pred.dtype}{list(pred.shape)}")
    _same(_avals(true.inputs), args, "cond: true_fun's inputs")
    _same(_avals(false.inputs), args, "cond: false_fun's inputs")
    _same(_avals(false.outputs), _avals(true.outputs), "cond: false_fun's results (they must match "
                                                        "true_fun's)")
    return _one(_avals(true.outputs))


def _cond_ref(pred, *args, true, false, comm=None, run=None):
    return _ret(run_graph(true if bool(pred) else false, list(args), comm, run))


def _cond_factors(avals_in, avals_out, attrs):
    """A result shares its factors with the first argument of its shape and dtype (a
    preference only: the branches are lowered with the shardings chosen, whatever they are)."""
    rule = _carry_factors(avals_in, avals_out, 0)
    ops = list(rule.operands)
    sizes = dict(rule.sizes)
    for j, a in enumerate(avals_out):
        for i in range(1, len(avals_in)):
            if tuple(avals_in[i].shape) == tuple(a.shape) and avals_in[i].dtype == a.dtype:
                ops[i] = rule.results[j]
                for fs, n in zip(rule.results[j], a.shape):
                    for f in fs:
                        sizes[f] = n
                break
    for i in range(len(ops)):
        for fs in ops[i]:
            for f in fs:
                sizes.setdefault(f, 0)
    return dataclasses.replace(rule, operands=tuple(ops), sizes={f: n for f, n in sizes.items() if any(
        f in fs for arr in tuple(ops) + rule.results for fs in arr)})



register(OpDef("cond", family="control", infer=_cond_infer, ref=_cond_ref, factors=_cond_factors, needs_comm=True,
               dtypes=CF_DTYPES, flops=_cond_flops, subgraphs=("true", "false"), vjp=lambda *a: _cond_vjp(*a),
               lowering="subprogram"))


# -- scan ----------------------------------------------------------------------------------
def _scan_infer(*operands, body, num_carry, num_xs, length, reverse):
    carry = list(operands[:num_carry])
    xs = operands[num_carry:num_carry + num_xs]
    for i, x in enumerate(xs):
        check(len(x.shape) >= 1 and x.shape[0] == length,
              f"scan: xs[{i}] has shape {list(x.shape)}; its leading dim must be length={length}")
    want = carry + [Aval(tuple(x.shape[1:]), x.dtype) for x in xs] + list(operands[num_carry + num_xs:])
    _same(_avals(body.inputs), want, "scan: the body's inputs")
    outs = _avals(body.outputs)
    _same(outs[:num_carry], carry, "scan: the body's carry (it must match the initial carry)")
    return _one(carry + [Aval((length,) + tuple(y.shape), y.dtype) for y in outs[num_carry:]])


def _scan_ref(*operands, body, num_carry, num_xs, length, reverse, comm=None, run=None):
    carry = list(operands[:num_carry])
    xs = operands[num_carry:num_carry + num_xs]
    rest = list(operands[num_carry + num_xs:])
    ys = [np.empty((length,) + v.shape, v.dtype) for v in body.outputs[num_carry:]]
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        out = run_graph(body, carry + [x[i] for x in xs] + rest, comm, run)
        carry = out[:num_carry]
        for y, v in zip(ys, out[num_carry:]):
            y[i] = v
    return _ret(carry + ys)


def _scan_factors(avals_in, avals_out, attrs):
    import dataclasses
    nc, nx = attrs["num_carry"], attrs["num_xs"]
    rule = _carry_factors(avals_in, avals_out, nc)
    # the scanned dim of xs and ys is read one slice an iteration: not split
    lead = {rule.operands[i][0][0] for i in range(nc, nc + nx)} | \
        {rule.results[j][0][0] for j in range(nc, len(avals_out))}
    return dataclasses.replace(rule, replicate=frozenset(lead))


register(OpDef("scan", family="control", infer=_scan_infer, ref=_scan_ref, factors=_scan_factors, needs_comm=True,
               dtypes=CF_DTYPES, flops=_scan_flops, runs=lambda attrs, key: attrs["length"],
               subgraphs=("body",), vjp=lambda *a: _scan_vjp(*a),
               lowering="scan_loop", captured_from=lambda attrs: attrs["num_carry"] + attrs["num_xs"]))


# -- reverse mode ---------------------------------------------------------------------------
def _is_float(dt):
    return dt in ("float32", "float64", "float16", "bfloat16")


def _zeros(g, shape, dtype):
    z = g.emit(CONSTANT, value=np.zeros((), dtype))
    return g.emit(BROADCAST_IN_DIM, z, shape=tuple(shape), broadcast_dimensions=())


def _replay(dst, body, inputs):
    """Emit body's ops into graph dst on `inputs` (one per body input); -> its outputs."""
    vmap = dict(zip(body.inputs, inputs))
    for op in body.ops:
        out = dst.emit(op.name, *[vmap[o] for o in op.operands], loc=op.loc, **op.attrs)
        for r, nr in zip(op.results, out if isinstance(out, tuple) else (out,)):
            vmap[r] = nr
    return [vmap[v] for v in body.outputs]


def _scan_vjp(g, op, cts, differentiate):
    """The derivative of a scan is a scan the other way. A forward scan first records the
    carry each step starts from (the body's values are recomputed from it); the backward
    body replays the forward body and differentiates it, carrying the carry's cotangent
    and summing the captured values' cotangents."""
    from ..graph import Graph
    a = op.attrs
    nc, nx, L, body = a["num_carry"], a["num_xs"], a["length"], a["body"]
    carry0, xs, ks = op.operands[:nc], op.operands[nc:nc + nx], op.operands[nc + nx:]
    ys = op.results[nc:]
    ny = len(ys)
    # 1. the carries each step starts from, as extra ys
    rec = Graph(body.name + "_record")
    for v in body.inputs:
        rec.add_input(v.shape, v.dtype)
    rec.outputs = _replay(rec, body, rec.inputs) + list(rec.inputs[:nc])
    fw = g.emit(SCAN, *op.operands, body=rec, num_carry=nc, num_xs=nx, length=L, reverse=a["reverse"])
    fw = fw if isinstance(fw, tuple) else (fw,)
    C = list(fw[nc + ny:])
    ci = [i for i in range(nc) if _is_float(carry0[i].dtype)]
    xi = [i for i in range(nx) if _is_float(xs[i].dtype)]
    ki = [i for i in range(len(ks)) if _is_float(ks[i].dtype)]
    yi = [j for j in range(ny) if _is_float(ys[j].dtype)]
    # 2. the backward body: (ct_c, ct_k | c_i, x_i, ct_y_i | k) -> (ct_c, ct_k | ct_x_i)
    bb = Graph(body.name + "_vjp")
    in_ctc = [bb.add_input(carry0[i].shape, carry0[i].dtype) for i in ci]
    in_ctk = [bb.add_input(ks[i].shape, ks[i].dtype) for i in ki]
    in_c = [bb.add_input(c.shape, c.dtype) for c in carry0]
    in_x = [bb.add_input(x.shape[1:], x.dtype) for x in xs]
    in_cty = [bb.add_input(ys[j].shape[1:], ys[j].dtype) for j in yi]
    in_k = [bb.add_input(k.shape, k.dtype) for k in ks]
    start = len(bb.ops)
    outs = _replay(bb, body, in_c + in_x + in_k)
    wrt = [in_c[i] for i in ci] + [in_x[i] for i in xi] + [in_k[i] for i in ki]
    grads = differentiate(bb, start, wrt, [outs[i] for i in ci] + [outs[nc + j] for j in yi], in_ctc + in_cty)
    grads = [gr if gr is not None else _zeros(bb, w.shape, w.dtype) for gr, w in zip(grads, wrt)]
    g_c, g_x, g_k = grads[:len(ci)], grads[len(ci):len(ci) + len(xi)], grads[len(ci) + len(xi):]
    bb.outputs = g_c + [bb.emit(ADD, t, d) for t, d in zip(in_ctk, g_k)] + g_x
    # 3. the backward scan
    ct_c = [cts[i] if cts[i] is not None else _zeros(g, carry0[i].shape, carry0[i].dtype) for i in ci]
    ct_k = [_zeros(g, ks[i].shape, ks[i].dtype) for i in ki]
    ct_y = [cts[nc + j] if cts[nc + j] is not None else _zeros(g, ys[j].shape, ys[j].dtype) for j in yi]
    nb = len(ci) + len(ki)
    bw = g.emit(SCAN, *ct_c, *ct_k, *C, *xs, *ct_y, *ks, body=bb, num_carry=nb, num_xs=nc + nx + len(yi),
                length=L, reverse=not a["reverse"])
    bw = bw if isinstance(bw, tuple) else (bw,)
    out = [None] * len(op.operands)
    for n, i in enumerate(ci):
        out[i] = bw[n]
    for n, i in enumerate(ki):
        out[nc + nx + i] = bw[len(ci) + n]
    for n, i in enumerate(xi):
        out[nc + i] = bw[nb + n]
    return tuple(out)


def _cond_vjp(g, op, cts, differentiate):
    """The derivative of a branch is a branch: the same predicate picks the VJP of the
    branch that ran."""
    from ..graph import Graph
    pred, args = op.operands[0], op.operands[1:]
    ai = [i for i in range(len(args)) if _is_float(args[i].dtype)]
    ri = [j for j in range(len(op.results)) if _is_float(op.results[j].dtype) and cts[j] is not None]
    if not ai or not ri:
        return (None,) * len(op.operands)
    branches = {}
    for k in ("true", "false"):
        br = op.attrs[k]
        bg = Graph(br.name + "_vjp")
        ins = [bg.add_input(x.shape, x.dtype) for x in args]
        cin = [bg.add_input(op.results[j].shape, op.results[j].dtype) for j in ri]
        start = len(bg.ops)
        outs = _replay(bg, br, ins)
        grads = differentiate(bg, start, [ins[i] for i in ai], [outs[j] for j in ri], cin)
        bg.outputs = [gr if gr is not None else _zeros(bg, ins[i].shape, ins[i].dtype) for gr, i in zip(grads, ai)]
        branches[k] = bg
    res = g.emit(COND, pred, *args, *[cts[j] for j in ri], true=branches["true"], false=branches["false"])
    res = res if isinstance(res, tuple) else (res,)
    out = [None] * len(op.operands)
    for n, i in enumerate(ai):
        out[1 + i] = res[n]
    return tuple(out)
