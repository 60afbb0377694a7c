"""transports/mpi/mpi_heartbeat.py: which ranks a rank takes for dead, without MPI. A lost
host silences all its ranks at once, their last heartbeats up to a period apart: the
first past the timeout names the host's others that missed their last heartbeat too,
and no rank of another host that still beats."""
from spmd.transports.mpi import mpi_heartbeat, mpi_peers


def test_a_silent_host_is_named_with_all_its_ranks(monkeypatch):
    monkeypatch.setenv("SPMD_HEARTBEAT_TIMEOUT", "4")
    monkeypatch.setattr(mpi_peers, "PEERS", {0: ("h1", 10), 1: ("h1", 11), 2: ("h2", 20), 3: ("h2", 21)})
    monkeypatch.setattr(mpi_heartbeat, "PEERS", mpi_peers.PEERS)
    beat = mpi_heartbeat.Heartbeat()
    now = 100.0
    period = mpi_heartbeat.period_of(4.0)
    beat.heard = {1: (now - 0.2, "wait"), 2: (now - 4.1, "busy"), 3: (now - 4.1 + 0.9 * period, "busy")}
    assert beat.silent([1, 2, 3], now) == [2, 3]
    # the host's other rank beat within the last period: alive, not named
    beat.heard[3] = (now - 0.5, "busy")
    assert beat.silent([1, 2, 3], now) == [2]
    # nobody past the timeout: nobody named, however quiet
    beat.heard = {1: (now - 3.9, "wait"), 2: (now - 3.5, "busy"), 3: (now - 3.9, "busy")}
    assert beat.silent([1, 2, 3], now) == []
