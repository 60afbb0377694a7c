"""Solving a Problem (problem.py): one option per node, least total seconds, the
arguments' bytes per device within a memory budget.

    exact     an integer program (scipy.optimize.milp, HiGHS): a binary per node option,
              a continuous variable per edge pair of distinct layouts (made, wanted), whose
              margins are the ends' options making / wanting each (Alpa's formulation,
              on layouts rather than options: far fewer pairs), within a time limit
    refine    where the program is too large for that: each node in graph order takes
              its cheapest option given the nodes before it (or every node its unsplit
              option), then sweeps in graph order give each node its cheapest option
              given all its neighbours until none changes (iterated conditional modes);
              a plan from each start; a memory budget enters as a price per byte,
              doubled until the plan fits

Both are deterministic: ties go to the earlier option (options are listed unsplit first).
"""
from __future__ import annotations

import numpy as np

EXACT_LIMIT = 20_000          # edge layout pairs above which `refine` runs instead (HiGHS took 2-4 s
                              # on train_gpt L1-L2, 40-80 thousand pairs: the refined plans were as good)
TIME_LIMIT = 10.0             # seconds HiGHS may take


def total(pb, choice) -> float:
    t = sum(n.cost[choice[id(n)]] for n in pb.nodes)
    for e in pb.edges:
        t += e.costs[choice[id(e.src)], choice[id(e.dst)]]
    return float(t)


def memory(pb, choice) -> float:
    return float(sum(n.memory[choice[id(n)]] for n in pb.nodes))


def solve(pb, budget=None) -> list:
    """-> [(method, {id(node): option})]: the exact plan where the problem is small
    enough, and the two refined ones ("refine greedy", "refine unsplit"), each within the
    budget where a plan fits it (the model of the whole program judges between them:
    choose.py)."""
    out = []
    if sum(e.small.size for e in pb.edges) <= EXACT_LIMIT:
        got = _exact(pb, budget)
        if got is not None:
            out.append(("exact", got))
    return out + _refine(pb, budget)


def _exact(pb, budget):
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import coo_matrix
    start, n = {}, 0
    for node in pb.nodes:
        start[id(node)] = n
        n += node.n
    nx = n
    c = np.concatenate([node.cost for node in pb.nodes] + [e.small.ravel() for e in pb.edges])
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0
    for node in pb.nodes:                       # one option per node
        s = start[id(node)]
        for i in range(node.n):
            rows.append(r), cols.append(s + i), vals.append(1.0)
        lo.append(1.0), hi.append(1.0)
        r += 1
    for e in pb.edges:
        # a variable per pair of distinct layouts (made, wanted); its margins are the sums of
        # the ends' options that make / want each layout
        nh, nw = e.small.shape
        base = n
        n += nh * nw
        pair = np.arange(nh * nw).reshape(nh, nw) + base
        for margin, ends, s in ((pair, e.made, start[id(e.src)]), (pair.T, e.wanted, start[id(e.dst)])):
            r = _margins(rows, cols, vals, lo, hi, r, margin, ends, s)
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


def _margins(rows, cols, vals, lo, hi, r, margin, ends, start) -> int:
    """Rows tying an edge's pair variables to one end: for each layout h of that end (a
    row of `margin`: the pair variables with h on this side), the pairs' sum equals the
    sum of the end's options whose layout is h (`ends`: each option's layout). -> the next row."""
    for h, pairs in enumerate(margin):
        for p in pairs:
            rows.append(r), cols.append(int(p)), vals.append(1.0)
        for a in np.flatnonzero(ends == h):
            rows.append(r), cols.append(start + int(a)), vals.append(-1.0)
        lo.append(0.0), hi.append(0.0)
        r += 1
    return r


def refine_greedy(pb) -> dict:
    """The refined greedy plan, no memory budget: {id(node): option} (a loop body's plan
    for one layout of its carries, problem.loop_seconds)."""
    return _icm(pb, 0.0, True)


def _refine(pb, budget) -> list:
    out = []
    for how, greedy in (("refine greedy", True), ("refine unsplit", False)):
        price = 0.0
        for _ in range(40):
            c = _icm(pb, price, greedy)
            if budget is None or memory(pb, c) <= budget:
                break
            price = max(price * 2, 1e-12)
        out.append((how, c))        # (over the budget only where no plan fits: the memory planner says so)
    return out


def _icm(pb, price, greedy=True):
    ins = {id(n): [] for n in pb.nodes}
    outs = {id(n): [] for n in pb.nodes}
    for e in pb.edges:
        outs[id(e.src)].append(e)
        ins[id(e.dst)].append(e)
    choice = {}
    for node in pb.nodes:                       # greedy, in graph order (or all unsplit)
        t = node.cost + price * node.memory
        for e in ins[id(node)]:
            if id(e.src) in choice:
                t = t + e.costs[choice[id(e.src)], :]
        choice[id(node)] = int(np.argmin(t)) if greedy else 0
    for _ in range(50):                         # then every node against all its neighbours
        changed = False
        for node in pb.nodes:
            t = node.cost + price * node.memory
            for e in ins[id(node)]:
                t = t + e.costs[choice[id(e.src)], :]
            for e in outs[id(node)]:
                t = t + e.costs[:, choice[id(e.dst)]]
            best = int(np.argmin(t))
            if t[best] < t[choice[id(node)]] - 1e-15:
                choice[id(node)] = best
                changed = True
        if not changed:
            break
    return choice
