"""Solving a Problem (problem.py): one option per node, least total seconds, the
arguments' bytes per device within a memory budget.

    exact     an integer program (scipy.optimize.milp, HiGHS): a binary per node option,
              a continuous variable per edge option pair, tied to both ends' binaries
              (Alpa's formulation), within a time limit
    refine    where the program is too large for that: each node in graph order takes
              its cheapest option given the nodes before it, then sweeps in graph order
              give each node its cheapest option given all its neighbours until none
              changes (iterated conditional modes); a memory budget enters as a price
              per byte, doubled until the plan fits

Both are deterministic: ties go to the earlier option (options are listed unsplit first).
"""
from __future__ import annotations

import numpy as np

EXACT_LIMIT = 60_000          # edge option pairs above which `refine` runs instead
TIME_LIMIT = 10.0             # seconds HiGHS may take


def total(pb, choice) -> float:
    t = sum(n.cost[choice[id(n)]] for n in pb.nodes)
    for u, _, v, c in pb.edges:
        t += c[choice[id(u)], choice[id(v)]]
    return float(t)


def memory(pb, choice) -> float:
    return float(sum(n.memory[choice[id(n)]] for n in pb.nodes))


def solve(pb, budget=None) -> tuple:
    """-> ({id(node): option}, method): the plan and "exact" or "refine"."""
    pairs = sum(e[3].size for e in pb.edges)
    if pairs <= EXACT_LIMIT:
        got = _exact(pb, budget)
        if got is not None:
            return got, "exact"
    return _refine(pb, budget), "refine"


def _exact(pb, budget):
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import coo_matrix
    start, n = {}, 0
    for node in pb.nodes:
        start[id(node)] = n
        n += node.n
    nx = n
    c = np.concatenate([node.cost for node in pb.nodes] + [e[3].ravel() for e in pb.edges]) \
        if pb.edges else np.concatenate([node.cost for node in pb.nodes])
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    for node in pb.nodes:                       # one option per node
        s = start[id(node)]
        for i in range(node.n):
            rows.append(r), cols.append(s + i), vals.append(1.0)
        lo.append(1.0), hi.append(1.0)
        r += 1
    for u, _, v, cost in pb.edges:              # the pair variables' margins are the ends' choices
        su, sv = start[id(u)], start[id(v)]
        nu, nv = cost.shape
        base = n
        n += nu * nv
        for i in range(nu):
            for j in range(nv):
                rows.append(r), cols.append(base + i * nv + j), vals.append(1.0)
            rows.append(r), cols.append(su + i), vals.append(-1.0)
            lo.append(0.0), hi.append(0.0)
            r += 1
        for j in range(nv):
            for i in range(nu):
                rows.append(r), cols.append(base + i * nv + j), vals.append(1.0)
            rows.append(r), cols.append(sv + j), vals.append(-1.0)
            lo.append(0.0), hi.append(0.0)
            r += 1
    if budget is not None:
        for node in pb.nodes:
            s = start[id(node)]
            for i, m in enumerate(node.memory):
                if m:
                    rows.append(r), cols.append(s + i), vals.append(float(m))
        lo.append(-np.inf), hi.append(float(budget))
        r += 1
    a = coo_matrix((vals, (rows, cols)), shape=(r, n)).tocsr()
    integrality = np.zeros(n)
    integrality[:nx] = 1
    res = milp(c, constraints=LinearConstraint(a, lo, hi), integrality=integrality,
               bounds=(0, 1), options={"time_limit": TIME_LIMIT, "disp": False})
    if res.x is None:
        return None
    return {id(node): int(np.argmax(res.x[start[id(node)]:start[id(node)] + node.n]))
            for node in pb.nodes}


def _refine(pb, budget):
    price = 0.0
    for _ in range(40):
        choice = _icm(pb, price)
        if budget is None or memory(pb, choice) <= budget:
            return choice
        price = max(price * 2, 1e-12)
    return choice


def _icm(pb, price):
    ins = {id(n): [] for n in pb.nodes}
    outs = {id(n): [] for n in pb.nodes}
    for e in pb.edges:
        outs[id(e[0])].append(e)
        ins[id(e[2])].append(e)
    choice = {}
    for node in pb.nodes:                       # greedy, in graph order
        t = node.cost + price * node.memory
        for u, _, _, c in ins[id(node)]:
            if id(u) in choice:
                t = t + c[choice[id(u)], :]
        choice[id(node)] = int(np.argmin(t))
    for _ in range(50):                         # then every node against all its neighbours
        changed = False
        for node in pb.nodes:
            t = node.cost + price * node.memory
            for u, _, _, c in ins[id(node)]:
                t = t + c[choice[id(u)], :]
            for _, _, v, c in outs[id(node)]:
                t = t + c[:, choice[id(v)]]
            best = int(np.argmin(t))
            if t[best] < t[choice[id(node)]] - 1e-15:
                choice[id(node)] = best
                changed = True
        if not changed:
            break
    return choice
