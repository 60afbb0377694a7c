import json

import numpy as np

import spmd
from spmd.tools import timeline


def test_trace_file_has_a_span_per_op(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    monkeypatch.setenv("SPMD_TRACE", str(path))
    timeline.take_events()
    f = spmd.jit(lambda x: np.tanh(x @ x.T).sum())
    x = np.ones((4, 3), np.float32)
    f(x)
    events = timeline.take_events()
    # the LLVM backend fuses ops into kernels: a kernel's span is named "tanh+reduce"
    names = [n for e in events for n in e["name"].split("+")]
    assert names.count("dot_general") == 1 and names.count("tanh") == 1
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["cat"] == "compute" for e in events)
    timeline.write(str(path), events)
    data = json.loads(path.read_text())
    assert {n for e in data["traceEvents"] if e["ph"] == "X" for n in e["name"].split("+")} >= \
        {"dot_general", "tanh", "reduce"}
    assert any(e["ph"] == "M" and e["args"]["name"] == "rank 0" for e in data["traceEvents"])


def test_no_events_without_env(monkeypatch):
    monkeypatch.delenv("SPMD_TRACE", raising=False)
    timeline.take_events()
    spmd.jit(lambda x: x + 1)(np.ones(3))
    assert timeline.take_events() == []
