"""spmd run's host lists: --hosts, --hostfile, and which ranks each host gets."""
import pytest

from spmd.launcher.hosts import HostsError, describe, parse_hosts, place, read_hostfile


def test_hosts_parse_with_and_without_slots():
    assert parse_hosts("h1,h2:4") == [("h1", None), ("h2", 4)]
    assert parse_hosts(" a.example , b ") == [("a.example", None), ("b", None)]
    for bad, msg in (("", "names no host"), ("h1:0", "slots must be a positive"), ("h1:x", "slots"),
                     ("h 1", "not a host name")):
        with pytest.raises(HostsError, match=msg):
            parse_hosts(bad)


def test_hostfile_takes_mpich_and_open_mpi_lines(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the cluster\nh1:2\nh2 slots=3  # big one\n\nh3\n")
    assert read_hostfile(str(f)) == [("h1", 2), ("h2", 3), ("h3", None)]
    f.write_text("h1 slots=two\n")
    with pytest.raises(HostsError, match=r"hosts:1: .*slots"):
        read_hostfile(str(f))
    with pytest.raises(HostsError, match="No such file"):
        read_hostfile(str(tmp_path / "missing"))


@pytest.mark.parametrize("hosts, n, want", [
    ([("h1", None), ("h2", None)], 4, [("h1", [0, 1]), ("h2", [2, 3])]),        # blocks, even shares
    ([("h1", None), ("h2", None)], 3, [("h1", [0, 1]), ("h2", [2])]),
    ([("h1", 1), ("h2", None)], 4, [("h1", [0]), ("h2", [1, 2, 3])]),          # slots first, the rest shared
    ([("h1", 2), ("h2", 2)], 3, [("h1", [0, 1]), ("h2", [2])]),                # spare slots stay empty
])
def test_ranks_fill_hosts_in_blocks(hosts, n, want):
    assert place(hosts, n) == want


def test_too_few_slots_and_repeated_hosts_are_errors():
    with pytest.raises(HostsError, match="-n 5 but the hosts have 4 slots .h1:2,h2:2."):
        place([("h1", 2), ("h2", 2)], 5)
    with pytest.raises(HostsError, match="h1 named twice"):
        place([("h1", 2), ("h1", 2)], 4)
    assert describe([("h1", [0, 1]), ("h2", [3]), ("h3", [])]) == "h1 (ranks 0-1), h2 (rank 3)"
