"""`spmd doctor --hosts h1,h2` (and `spmd run --check`): is every host ready for a job?
`spmd doctor` alone checks this machine's install (`local_doctor`).

For each host, over ssh: it answers; it runs this Python (same path, same version) with
the same spmd (version and a digest of its source), numpy, mpi4py, MPICH and Ray as this
machine; then the bandwidth of the link from the first host to each other one, measured
by sending data over TCP for about a second. Every failure is one line saying what is
wrong and what to do; the exit status is 1 if anything failed.

    python -m spmd.launcher.doctor facts         # this host's versions, as JSON (run over ssh)
    python -m spmd.launcher.doctor recv          # listen once, report bytes and seconds
    python -m spmd.launcher.doctor send HOST PORT SECONDS
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from .ssh import connect_timeout, last_line, run, ssh

# what must match across hosts, and what to do when it does not
SAME = {
    "python": "use the same Python on every host, at the same path",
    "spmd": "install the same spmd on every host (the same checkout or wheel)",
    "numpy": "install the same numpy on every host",
    "mpi4py": "install the same mpi4py on every host",
    "mpich": "install the same mpich on every host (its ranks must speak one wire protocol)",
    "ray": "install the same ray on every host (Ray refuses nodes of another version)",
}
BANDWIDTH_SECONDS = 1.0


# -- this host ----------------------------------------------------------------------------
def _version(dist):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def source_digest(package_dir) -> str:
    """A digest of a package's .py files: two checkouts of one version can differ."""
    h = hashlib.blake2b(digest_size=6)
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                h.update(os.path.relpath(path, package_dir).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def spmd_version(pkg) -> str:
    """spmd's __version__, read from its __init__.py (the launcher does not import the
    package above it)."""
    import re
    with open(os.path.join(pkg, "__init__.py")) as f:
        m = re.search(r"^__version__\s*=\s*[\"']([^\"']+)", f.read(), re.M)
    return m.group(1) if m else "?"


def facts() -> dict:
    import numpy
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"host": socket.gethostname(), "python": f"{sys.version.split()[0]} ({sys.executable})",
            "spmd": f"{spmd_version(pkg)} (source {source_digest(pkg)} at {pkg})", "numpy": numpy.__version__,
            "mpi4py": _version("mpi4py"), "mpich": _version("mpich"), "ray": _version("ray")}


# -- the checks ---------------------------------------------------------------------------
def check_host(host, here) -> tuple[list, dict | None]:
    """(failure lines, the host's facts or None)."""
    t = connect_timeout()
    code, out, err = run(ssh(host, [sys.executable, "-m", "spmd.launcher.doctor", "facts"], t), t + 60)
    if code is None or code == 255:
        return [f"FAIL {host}: cannot be reached over ssh: {last_line(err, 'no answer')} — check that it is up "
                f"and that `ssh {host} true` works without a password"], None
    if code != 0:
        why = last_line(err, f"exited with status {code}")
        if "No such file" in err or code == 127:
            return [f"FAIL {host}: {sys.executable} is not there — install the same Python environment at the "
                    f"same path on every host"], None
        return [f"FAIL {host}: cannot import spmd with {sys.executable}: {why} — install spmd there (or share "
                f"the checkout and PYTHONPATH)"], None
    try:
        there = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"FAIL {host}: the version check printed no answer: {last_line(out + err, '')}"], None
    fails = [f"FAIL {host}: {k} is {there.get(k) or 'missing'} there but {here[k]} here — {fix}"
             for k, fix in SAME.items() if here.get(k) and there.get(k) != here[k]]
    return fails, there


def bandwidth(src, dst) -> tuple[str | None, float | None]:
    """(failure line or None, bits per second) of the link from src to dst."""
    t = connect_timeout()
    recv = subprocess.Popen(ssh(dst, [sys.executable, "-m", "spmd.launcher.doctor", "recv"], t),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = recv.stdout.readline().split()
        if len(port) != 2 or port[0] != "port":
            return f"FAIL {src} -> {dst}: the receiver did not start: {last_line(recv.stderr.read(), '')}", None
        code, _, err = run(ssh(src, [sys.executable, "-m", "spmd.launcher.doctor", "send", dst, port[1],
                                      BANDWIDTH_SECONDS], t), t + 60)
        if code != 0:
            return (f"FAIL {src} -> {dst}: {src} cannot open a TCP connection to {dst}:{port[1]}: "
                    f"{last_line(err, '')} — a firewall between the hosts stops MPI and Ray too"), None
        out, _ = recv.communicate(timeout=30)
        got = json.loads(out.strip().splitlines()[-1])
        return None, 8 * got["bytes"] / max(got["seconds"], 1e-9)
    except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return f"FAIL {src} -> {dst}: the bandwidth test did not finish: {e}", None
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


def rate_text(bps) -> str:
    return f"{bps / 1e9:.2f} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:.0f} Mbit/s"


def doctor(hosts, out=None) -> int:
    """Check the hosts, print one line per finding; 0 if all is well, else 1."""
    out = out or sys.stdout
    here = facts()
    out.write(f"here: {here['host']}: Python {here['python']}, spmd {here['spmd']}, numpy {here['numpy']}, "
              f"mpi4py {here['mpi4py']}, mpich {here['mpich']}, ray {here['ray']}\n")
    with ThreadPoolExecutor(max(1, len(hosts))) as ex:
        results = list(ex.map(lambda h: check_host(h, here), hosts))
    failed = False
    for h, (fails, there) in zip(hosts, results):
        for line in fails:
            out.write(line + "\n")
        failed |= bool(fails)
        if not fails:
            out.write(f"ok   {h}: reachable (hostname {there['host']}), same Python, spmd, numpy, mpi4py, "
                      f"mpich and ray as here\n")
    up = [h for h, (_, there) in zip(hosts, results) if there is not None]
    for dst in up[1:]:
        fail, bps = bandwidth(up[0], dst)
        failed |= fail is not None
        out.write((fail if fail else f"link {up[0]} -> {dst}: {rate_text(bps)}") + "\n")
    out.flush()
    return 1 if failed else 0


# -- this machine alone -------------------------------------------------------------------
COMPILE_CHECK = ("import numpy as np, spmd, time; t = time.perf_counter(); "
                 "r = spmd.jit(lambda x: x * 2 + 1, backend='llvm')(np.arange(4.0)); "
                 "assert np.asarray(r).tolist() == [1.0, 3.0, 5.0, 7.0], r; "
                 "print(f'{1e3 * (time.perf_counter() - t):.0f}')")


def local_doctor(out=None) -> int:
    """This machine's install, a line per check ("ok", "--" for an extra not installed,
    "FAIL" with what to do); 0 unless something failed."""
    out = out or sys.stdout
    here = facts()
    lines, failed = [f"ok   Python {here['python']}", f"ok   spmd {here['spmd']}"], False
    llvmlite = _version("llvmlite")
    lines.append(f"ok   numpy {here['numpy']}, llvmlite {llvmlite}" if llvmlite else
                 "FAIL llvmlite is not installed: pip install llvmlite (spmd compiles its kernels with it)")
    failed |= llvmlite is None
    env = dict(os.environ, SPMD_CACHE="0", SPMD_BACKEND="local")
    p = subprocess.run([sys.executable, "-c", COMPILE_CHECK], capture_output=True, text=True, timeout=300, env=env)
    if p.returncode == 0:
        lines.append(f"ok   a jitted program compiled to LLVM kernels and ran ({last_line(p.stdout, '?')} ms)")
    else:
        failed = True
        lines.append(f"FAIL a jitted program did not compile and run: {last_line(p.stderr, 'no output')}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines.append(f"ok   {cores} cores: `python script.py` runs {os.environ.get('SPMD_NUM_DEVICES') or cores} "
                 f"local devices (SPMD_NUM_DEVICES=N for another number)")
    lines.append(_shm_line())
    mpiexec = _mpiexec()
    if here["mpi4py"] and mpiexec:
        lines.append(f"ok   MPI: mpi4py {here['mpi4py']}, mpich {here['mpich']}, {mpiexec}")
    else:
        lines.append("--   MPI: not installed (pip install 'spmd[mpi]' brings mpi4py and MPICH's mpiexec)")
    lines.append(f"ok   Ray {here['ray']}" if here["ray"] else
                 "--   Ray: not installed (pip install 'spmd[ray]')")
    out.write("\n".join(lines) + "\n")
    out.flush()
    return 1 if failed else 0


def _shm_line() -> str:
    try:
        st = os.statvfs("/dev/shm")
        free = st.f_bavail * st.f_frsize
    except OSError:
        return "--   /dev/shm: none (MPI's ranks on one host exchange through it)"
    ok = os.access("/dev/shm", os.W_OK)
    return (f"ok   /dev/shm: {free / 2**30:.1f} GB free" if ok else
            "FAIL /dev/shm is not writable: MPI's ranks on one host exchange through it")


def _mpiexec():
    from ..transports.mpi.mpi_launch import find_mpiexec
    return find_mpiexec()


# -- the remote halves --------------------------------------------------------------------
def _recv():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("0.0.0.0", 0))
    srv.listen(1)
    srv.settimeout(60)
    print("port", srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    conn.settimeout(60)
    total, start = 0, None
    buf = bytearray(1 << 20)
    while True:
        n = conn.recv_into(buf)
        if not n:
            break
        if start is None:
            start = time.perf_counter()
        total += n
    print(json.dumps({"bytes": total, "seconds": time.perf_counter() - (start or time.perf_counter())}), flush=True)


def _send(host, port, seconds):
    data = bytes(1 << 20)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        end = time.perf_counter() + float(seconds)
        while time.perf_counter() < end:
            s.sendall(data)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["facts"]:
        print(json.dumps(facts()))
    elif argv[:1] == ["recv"]:
        _recv()
    elif argv[:1] == ["send"] and len(argv) == 4:
        _send(*argv[1:])
    else:
        raise SystemExit("usage: python -m spmd.launcher.doctor facts | recv | send HOST PORT SECONDS")


if __name__ == "__main__":
    main()
