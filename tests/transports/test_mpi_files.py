"""transports/mpi/mpi_files.py: which of MPICH's files a rank finds to unlink, without MPI."""
import os
import subprocess
import sys

from spmd.transports.mpi import mpi_files


def test_mapped_segments_are_mpichs_named_ones(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f10 rw-s 00000000 00:27 6   /dev/shm/mpich_shm_f8a402e5_0\n"
        "7f10-7f20 rw-s 00000000 00:27 7   /dev/shm/mpich_vci_f8a402e5_0\n"
        "7f20-7f30 rw-s 00000000 00:27 2   /dev/shm/ucx_shm_posix_4fe1111f (deleted)\n"
        "7f30-7f40 rw-s 00000000 00:27 9   /dev/shm/mpich_shm_0badc0de_0 (deleted)\n"
        "7f40-7f50 rw-s 00000000 00:27 3   /dev/shm/someone_elses\n"
        "7f50-7f60 r-xp 00000000 08:01 5   /usr/lib/libmpi.so.12\n"
        "7f60-7f70 rw-p 00000000 00:00 0\n")
    assert mpi_files.mapped_segments(str(maps)) == ["/dev/shm/mpich_shm_f8a402e5_0",
                                                    "/dev/shm/mpich_vci_f8a402e5_0"]
    assert mpi_files.mapped_segments(str(tmp_path / "none")) == []


def test_launcher_files_are_the_topology_files_an_ancestor_holds_open(tmp_path):
    """A parent holding a hydra_hwloc_xmlfile_* open (as hydra's proxy does) is found
    from its child; other files it holds are not."""
    topo = tmp_path / "hydra_hwloc_xmlfile_AbC123"
    other = tmp_path / "unrelated.xml"
    topo.write_text("<topology/>")
    other.write_text("x")
    child = (f"import sys; sys.path.insert(0, {os.getcwd()!r}); from spmd.transports.mpi import mpi_files; "
             "print(mpi_files.launcher_files())")
    holder = (f"import subprocess, sys; a = open({str(topo)!r}); b = open({str(other)!r}); "
              f"sys.exit(subprocess.run([sys.executable, '-c', {child!r}]).returncode)")
    p = subprocess.run([sys.executable, "-c", holder], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == repr([str(topo)])


def test_the_topology_file_waits_until_every_rank_of_the_host_started(monkeypatch):
    """Without the segment (which proves every rank of the host attached) and with other
    ranks on the host, the topology file stays until the caller knows all started."""
    monkeypatch.setattr(mpi_files, "mapped_segments", lambda: [])
    monkeypatch.setattr(mpi_files, "launcher_files", lambda: ["/nonexistent/hydra_hwloc_xmlfile_x"])
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    tried = []
    monkeypatch.setattr(mpi_files.os, "unlink", tried.append)
    mpi_files.unlink_run_files()
    assert tried == []
    mpi_files.unlink_run_files(everyone_started=True)
    assert tried == ["/nonexistent/hydra_hwloc_xmlfile_x"]
    monkeypatch.setenv("MPI_LOCALNRANKS", "1")        # alone on its host: nobody else to wait for
    tried.clear()
    mpi_files.unlink_run_files()
    assert tried == ["/nonexistent/hydra_hwloc_xmlfile_x"]
