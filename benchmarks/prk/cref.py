"""The C+MPI reference kernels (benchmarks/prk/c/*.c): built by the benchmark itself with
`mpicc -O3 -march=native` into a cache directory under /tmp (one binary per source and
flags, rebuilt when either changes), and run with mpiexec at a rank count."""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CDIR = os.path.join(HERE, "c")


def mpicc():
    exe = shutil.which("mpicc") or os.path.join(os.path.dirname(sys.executable), "mpicc")
    return exe if os.path.exists(exe) else None


def build(source, flags=()):
    """Path of the binary of c/<source>.c built with flags (cached by content)."""
    text = b"".join(open(os.path.join(CDIR, f), "rb").read() for f in (f"{source}.c", "prk.h"))
    key = hashlib.sha256(text + repr(flags).encode()).hexdigest()[:16]
    cache = os.path.join(tempfile.gettempdir(), "spmd-prk-c")
    os.makedirs(cache, exist_ok=True)
    exe = os.path.join(cache, f"{source}-{key}")
    if not os.path.exists(exe):
        tmp = f"{exe}.{os.getpid()}"
        cmd = [mpicc(), "-O3", "-march=native", *flags, "-o", tmp, os.path.join(CDIR, f"{source}.c"), "-lm"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
        os.replace(tmp, exe)
    return exe


def run(mpiexec, ranks, kern, iters, runs, timeout=600):
    """(median rate in the kernel's unit, every run valid) of the C kernel on `ranks` ranks."""
    source = "stencil" if kern.c_flags else kern.c_prog
    exe = build(source, kern.c_flags)
    cmd = [mpiexec, "-n", str(ranks), exe, str(iters), str(runs), *map(str, kern.c_args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    words = p.stdout.split()
    if p.returncode != 0 or len(words) < 4 or words[0] != "rate":
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return float(words[1]), words[3] == "1"
