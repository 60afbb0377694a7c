"""Rematerialisation in the IR: the op of spmd.checkpoint, and the barrier that keeps a
recomputation from being merged back into what it recomputes.

    checkpoint(args...)              {body: Graph, saved: int}
        body: (args...) -> (results..., saved...): the function spmd.checkpoint wraps,
        traced (values it closes over are extra args). Its last `saved` outputs are the
        values its policy keeps for the backward pass (matmul results, named values);
        everything else inside is computed again there. The forward pass is the body as
        written: the compiler replaces the op by its body's ops before propagation
        (`inlined`, compiler/passes/inline.py). The VJP is what makes it a checkpoint:
        the body is emitted again on the args and the saved values (read through
        barriers), and that copy is differentiated, so the backward pass holds only the
        args and the saved values of the forward pass.

    optimization_barrier(x, after...) -> x
        x itself (StableHLO's optimization_barrier, on one value), through which passes
        cannot see: common-subexpression elimination cannot merge what is computed from
        it with what is computed from x, and since it reads `after` (the cotangents that
        reach the checkpoint), the recomputation cannot run before the backward pass gets
        there. The optimiser drops the barriers last (compiler/passes/barriers.py).
"""
from __future__ import annotations

from ..aval import Aval
from ..factors import FactorRule
from .control import CF_DTYPES, run_graph
from .elementwise import ALL, aval
from .names import OPTIMIZATION_BARRIER
from .registry import OpDef, check, graph_flops, register


# -- optimization_barrier ----------------------------------------------------------------------
def _barrier_infer(x, *after):
    return aval(x.shape, x.dtype)


def _barrier_ref(x, *after):
    return x


def _barrier_vjp(g, op, ct):
    # the value is x: its cotangent goes to x; `after` only orders
    return (ct,) + (None,) * (len(op.operands) - 1)


def _barrier_factors(avals_in, avals_out, attrs):
    """x and the result share their factors; every `after` operand has factors of its own."""
    sizes, ops = {}, []
    for i, a in enumerate(avals_in):
        fs = []
        for d, n in enumerate(a.shape):
            name = f"x{d}" if i == 0 else f"a{i}_{d}"
            sizes[name] = n
            fs.append((name,))
        ops.append(tuple(fs))
    return FactorRule(tuple(ops), (ops[0],), sizes)


register(OpDef("optimization_barrier", family="annotation", infer=_barrier_infer, ref=_barrier_ref, vjp=_barrier_vjp,
               factors=_barrier_factors, flops=lambda ins, out, attrs: 0, dtypes=ALL, priority=0, linear=((0,),),
               lowering="annotation", identity_of=0))


# -- checkpoint -------------------------------------------------------------------------------
def _avals(vs):
    return [Aval(v.shape, v.dtype) for v in vs]


def _checkpoint_infer(*args, body, saved):
    check(len(body.inputs) == len(args), f"checkpoint: the body takes {len(body.inputs)} values, "
                                         f"the op has {len(args)}")
    for i, (a, b) in enumerate(zip(args, body.inputs)):
        check(tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype,
              f"checkpoint: argument {i} is {a.dtype}{list(a.shape)}, the body takes {b.dtype}{list(b.shape)}")
    check(isinstance(saved, int) and 0 <= saved < len(body.outputs) + 1, f"checkpoint: saved={saved!r}")
    outs = _avals(body.outputs)
    return outs[0] if len(outs) == 1 else outs


def _checkpoint_ref(*args, body, saved, comm=None, run=None):
    out = run_graph(body, list(args), comm, run)
    return out[0] if len(out) == 1 else out


def _checkpoint_factors(avals_in, avals_out, attrs):
    """No constraint between args and results (the op is replaced by its body before
    propagation, which then sees the body's own rules)."""
    sizes, ops, res = {}, [], []
    for side, avals, out in (("i", avals_in, ops), ("r", avals_out, res)):
        for i, a in enumerate(avals):
            fs = []
            for d, n in enumerate(a.shape):
                sizes[f"{side}{i}_{d}"] = n
                fs.append((f"{side}{i}_{d}",))
            out.append(tuple(fs))
    return FactorRule(tuple(ops), tuple(res), sizes)


def _checkpoint_flops(avals_in, aval_out, attrs):
    return graph_flops(attrs["body"])


def _checkpoint_vjp(g, op, cts, differentiate):
    """The body again, on the args read through barriers that come after the cotangents,
    with the saved values in place of their ops' results; then its VJP. The saved ops
    are walked by the differentiation as they were (stand-ins reading the recomputed
    operands and giving the saved result), so a saved matmul's operands are recomputed
    for its gradient but the matmul itself is not."""
    from ..graph import Op
    body, k = op.attrs["body"], op.attrs["saved"]
    n = len(body.outputs) - k
    out_cts = list(cts[:n])
    after = [c for c in out_cts if c is not None][:1]      # (one is enough to come after)
    if not after:
        return (None,) * len(op.operands)
    # the saved values are read through barriers too: what is computed from them again
    # must not be merged with what the forward pass computed from them
    xs = [g.emit(OPTIMIZATION_BARRIER, x, *after, loc=op.loc) for x in op.operands]
    saved = {v: g.emit(OPTIMIZATION_BARRIER, r, *after, loc=op.loc)
             for v, r in zip(body.outputs[n:], op.results[n:])}
    vmap = dict(zip(body.inputs, xs))
    walk = []
    for b in body.ops:
        operands = [vmap[o] for o in b.operands]
        if b.results and all(r in saved for r in b.results):
            stand = Op(b.name, operands, dict(b.attrs), [saved[r] for r in b.results], b.loc)
            walk.append(stand)
            for r in b.results:
                vmap[r] = saved[r]
            continue
        out = g.emit(b.name, *operands, loc=b.loc, **b.attrs)
        walk.append(g.ops[-1])
        for r, nr in zip(b.results, out if isinstance(out, tuple) else (out,)):
            vmap[r] = nr
    outs = [vmap[v] for v in body.outputs[:n]]
    grads = differentiate(g, len(g.ops), xs, outs, out_cts, ops=walk)
    return tuple(grads)


register(OpDef("checkpoint", family="control", infer=_checkpoint_infer, ref=_checkpoint_ref, vjp=_checkpoint_vjp,
               factors=_checkpoint_factors, dtypes=CF_DTYPES, flops=_checkpoint_flops, subgraphs=("body",),
               lowering="subprogram", inlined="body"))
