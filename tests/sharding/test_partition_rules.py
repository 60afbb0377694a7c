"""The partition rules (sharding/partition_rules/) against the registry and against the
context they are written for: every table key is a registered op of the module's family,
no op has two rules, the partitioner defines every member PartitionContext declares, and
the rules use no member it does not declare."""
import ast
import inspect
import pathlib

import pytest

from spmd.ir import REGISTRY, Graph
from spmd.sharding import Mesh, partition_rules
from spmd.sharding.partition import Partitioner
from spmd.sharding.partition_rules import LOCAL, OPS, PartitionContext

RULES_DIR = pathlib.Path(partition_rules.__file__).parent


def declared_members():
    """The members PartitionContext declares: its annotated attributes and its methods."""
    attrs = set(PartitionContext.__annotations__)
    methods = {n for n, v in vars(PartitionContext).items() if inspect.isfunction(v) and not n.startswith("_")}
    return attrs, methods


def test_every_rule_is_for_a_registered_op_of_its_family():
    bad = []
    for family in partition_rules.FAMILIES:
        fam = family.__name__.rsplit(".", 1)[1]
        for table in ("OPS", "LOCAL"):
            for name, rule in getattr(family, table, {}).items():
                if name not in REGISTRY:
                    bad.append(f"{fam}.{table}[{name!r}]: no such op")
                elif REGISTRY[name].family != fam:
                    bad.append(f"{fam}.{table}[{name!r}]: the op is of family {REGISTRY[name].family}")
                if not callable(rule):
                    bad.append(f"{fam}.{table}[{name!r}]: not callable")
    assert not bad, "\n".join(bad)


def test_the_tables_hold_every_family_module():
    """A family module the package does not list would never be dispatched to."""
    modules = {p.stem for p in RULES_DIR.glob("*.py")} - {"__init__", "partition_context"}
    assert modules == {f.__name__.rsplit(".", 1)[1] for f in partition_rules.FAMILIES}


def test_no_op_has_two_rules():
    assert not set(OPS) & set(LOCAL), "an op with a whole-op rule never reaches its local one"
    total = sum(len(getattr(f, t, {})) for f in partition_rules.FAMILIES for t in ("OPS", "LOCAL"))
    assert total == len(OPS) + len(LOCAL)


def test_the_rules_tables_are_the_ones_expected():
    """What the IR used to carry on its entries (OpDef.partition / partition_local), each
    op once: a rule lost in the move would fall back to the generic partitioning."""
    assert set(OPS) == {"constant", "slice", "pad", "concatenate", "reverse", "roll", "while", "cond", "scan",
                        "fft", "cumulative", "sharding_constraint", "debug_print", "order_statistic"}
    assert set(LOCAL) == {"iota", "dynamic_slice", "dynamic_update_slice", "gather", "scatter"}


def test_the_partitioner_defines_every_declared_member():
    """Partitioner subclasses the Protocol, so a member it forgot would be the Protocol's
    empty stub (returning None): each must be its own."""
    attrs, methods = declared_members()
    g = Graph("empty")
    g.mesh = Mesh((2,), ("x",))
    p = Partitioner(g)
    for name in methods:
        assert inspect.isfunction(getattr(Partitioner, name)) and getattr(Partitioner, name) is not \
            vars(PartitionContext)[name], f"Partitioner does not define {name}"
    for name in attrs:
        assert name in vars(p), f"Partitioner does not set {name}"


def undeclared_uses(root, members):
    """(module:line, member) for each `ctx.<member>` in a rule module that PartitionContext
    does not declare. A rule is any function whose first parameter is `ctx`."""
    found = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or not fn.args.args or fn.args.args[0].arg != "ctx":
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == "ctx" and node.attr not in members:
                    found.append(f"{path.stem}:{node.lineno} ctx.{node.attr}")
    return sorted(set(found))


def test_rules_use_only_declared_members():
    attrs, methods = declared_members()
    bad = undeclared_uses(RULES_DIR, attrs | methods)
    assert not bad, "rules reach for members PartitionContext does not declare:\n" + "\n".join(bad)


def test_the_check_sees_an_undeclared_member(tmp_path):
    (tmp_path / "rule.py").write_text("def _r(ctx, op):\n    ctx.get(op)\n    return ctx.halo.window_plan()\n"
                                      "def _helper(em, ctx):\n    return ctx.anything\n")
    assert undeclared_uses(tmp_path, {"get"}) == ["rule:3 ctx.halo"]


@pytest.mark.parametrize("table", ["OPS", "LOCAL"])
def test_rules_take_the_context_first(table):
    for name, rule in getattr(partition_rules, table).items():
        params = list(inspect.signature(rule).parameters)
        assert params[:2] == ["ctx", "op"], f"{name}: {params}"
        if table == "LOCAL":
            assert params == ["ctx", "op", "rule", "assign", "locals_", "shardings", "have"], name
