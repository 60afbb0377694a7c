"""Collectives made of rounds (transports/mpi/mpi_progress.py), without MPI: a fake request
completes when the test says so. A started collective makes a round's calls only after
the round before completed and the code between ran, moves on as far as `progress`
finds rounds complete (never blocking), and `finish` waits for the rest; the blocking
driver makes every call in order and returns the same result."""
from spmd.transports.mpi.mpi_progress import ProgressThread, Started, nonblocking, run_blocking


def rounds(log):
    log.append("before 1")
    yield [("c", "Alltoall", 1, "a"), ("c", "Allgather", 2, "b")]
    log.append("between")
    yield [("c", "Allgather", 3, "c")]
    log.append("after 2")
    return "result"


class Fake:
    """Requests that complete when `complete` names them."""

    def __init__(self):
        self.made, self.complete = [], set()

    def start(self, comm, name, send, recv):
        self.made.append((nonblocking(name), send))
        return send

    def test(self, reqs):
        return all(r in self.complete for r in reqs)

    def wait(self, reqs):
        self.complete.update(reqs)


def test_a_started_collective_moves_on_only_as_its_rounds_complete():
    log, f = [], Fake()
    s = Started(rounds(log), f.start, f.test)
    assert f.made == [("Ialltoall", 1), ("Iallgather", 2)] and log == ["before 1"]
    s.progress()                           # nothing completed: no second round
    assert len(f.made) == 2 and log == ["before 1"]
    f.complete.add(1)
    s.progress()
    assert len(f.made) == 2 and not s.done
    f.complete.add(2)
    s.progress()                           # the reduction between rounds ran, round 2 started
    assert f.made[2:] == [("Iallgather", 3)] and log == ["before 1", "between"] and not s.done
    assert s.finish(f.wait) == "result" and log[-1] == "after 2" and s.done


def test_finish_waits_for_every_round_and_blocking_makes_the_same_calls():
    log, f = [], Fake()
    assert Started(rounds(log), f.start, f.test).finish(f.wait) == "result"
    calls = []
    assert run_blocking(rounds([]), lambda *c: calls.append((c[1], c[2]))) == "result"
    assert [(n, s) for n, s in f.made] == [(nonblocking(n), s) for n, s in calls]
    assert calls == [("Alltoall", 1), ("Allgather", 2), ("Allgather", 3)]


def test_an_error_between_rounds_in_progress_is_raised_by_finish():
    def failing():
        yield [("c", "Alltoall", 1, "a")]
        raise ValueError("the reduction failed")

    f = Fake()
    s = Started(failing(), f.start, f.test)
    f.complete.add(1)
    s.progress()                           # (the progress thread must not die of it)
    try:
        s.finish(f.wait)
    except ValueError as e:
        assert "reduction failed" in str(e)
    else:
        raise AssertionError("finish did not raise")


def test_the_progress_thread_moves_a_started_collective_on():
    import time
    log, f = [], Fake()
    s = Started(rounds(log), f.start, f.test)
    t = ProgressThread()
    t.add(s)
    f.complete.update({1, 2, 3})
    deadline = time.monotonic() + 5
    while not s.done and time.monotonic() < deadline:
        time.sleep(0.01)
    t.remove(s)
    assert s.done and s.value == "result" and log == ["before 1", "between", "after 2"]
