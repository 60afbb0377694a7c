"""Warnings point at the user's line, once per line: a ReshardWarning names the file and
line of the numpy call that needs the gather (not spmd's own), and Python's default
filter shows it once, however many programs, lowerings or calls meet that line; the
user's filters (error, ignore) apply as to any warning."""
import inspect
import warnings

import numpy as np
import pytest

import spmd
from spmd.sharding.reshard import ReshardWarning

MESH = spmd.Mesh((2,), ("x",))


def sort_rows(x):
    return np.sort(x, axis=0) * 2           # the line the warning names


SORT_LINE = inspect.getsourcelines(sort_rows)[1] + 1


def shown(calls):
    """The warnings Python's default filters would show while calls() runs."""
    with warnings.catch_warnings(record=True) as got:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        calls()
    return [w for w in got if issubclass(w.category, ReshardWarning)]


@pytest.mark.parametrize("cache", ["0", "1"])
def test_a_reshard_warning_names_the_users_line_once(cache, monkeypatch, tmp_path):
    """Two jits of one function, one of them called again with new values and once with
    a new shape (lowered again), with the program cache off and on: one warning per line
    and message, pointing at the sort."""
    monkeypatch.setenv("SPMD_PROGRAM_CACHE", cache)
    monkeypatch.setenv("SPMD_CACHE_DIR", str(tmp_path))
    x = np.arange(24.).reshape(6, 4)

    def calls():
        for _ in range(2):
            f = spmd.jit(sort_rows, in_shardings=(MESH.sharding("x", None),), backend="numpy")
            np.testing.assert_array_equal(f(x).numpy(), np.sort(x, axis=0) * 2)
            f(x + 1)

    got = shown(calls)
    assert len(got) == 1, [str(w.message) for w in got]
    w = got[0]
    assert (w.filename, w.lineno) == (__file__, SORT_LINE), (w.filename, w.lineno)
    assert f"sort at test_warnings.py:{SORT_LINE}" in str(w.message)
    # another shape is another message: shown once more, from the same line
    got = shown(lambda: [spmd.jit(sort_rows, in_shardings=(MESH.sharding("x", None),), backend="numpy")(
        np.arange(40.).reshape(10, 4)) for _ in range(2)])
    assert [(w.filename, w.lineno) for w in got] == [(__file__, SORT_LINE)]


def test_the_users_filters_apply():
    x = np.arange(24.).reshape(6, 4)
    f = spmd.jit(sort_rows, in_shardings=(MESH.sharding("x", None),), backend="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReshardWarning)
        with pytest.raises(ReshardWarning, match="sort at test_warnings.py"):
            f(x)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("ignore", ReshardWarning)
        spmd.jit(sort_rows, in_shardings=(MESH.sharding("x", None),), backend="numpy")(x)
    assert not [w for w in got if issubclass(w.category, ReshardWarning)]
