"""Run a command with a private, empty /dev/shm and /tmp and say what it left there.

    unshare -m python private_tmp.py SIGNAL|none -- command...

(as root, in a new mount namespace: tmpfs on /dev/shm and /tmp; the repository, the
working directory and the compile cache bound back where they live under /tmp). With a signal, it is
sent to the command's process group once every rank said "ready <pid>" (as a terminal's
Ctrl-C reaches every process of the job) -- or, for SIGKILL and SIGTERM, to mpiexec
alone. After the command ends, waits for the ranks to be gone, then prints one JSON
line: {"code", "stderr", "left"} (left: the names in /dev/shm and /tmp, less the
compile cache if it is under /tmp).
"""
import json
import os
import signal
import subprocess
import sys
import time

import tempfile

sig_name, cmd = sys.argv[1], sys.argv[3:]
# the repository, the working directory and the compile cache may live under /tmp (a CI
# clone): they are bound back into the private /tmp, through a holding place outside it
here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
keep = sorted({os.path.realpath(x) for x in (here, os.getcwd(), os.environ.get("SPMD_CACHE_DIR", ""))
               if x and os.path.realpath(x).startswith(("/tmp/", "/dev/shm/"))})
hold = tempfile.mkdtemp(dir="/var/tmp", prefix="spmd-private-tmp-") if keep else None
for i, k in enumerate(keep):
    os.mkdir(f"{hold}/{i}")
    subprocess.run(["mount", "--bind", k, f"{hold}/{i}"], check=True)
for where in ("/dev/shm", "/tmp"):
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", where], check=True)
for i, k in enumerate(keep):
    os.makedirs(k, exist_ok=True)
    subprocess.run(["mount", "--bind", f"{hold}/{i}", k], check=True)
    subprocess.run(["umount", f"{hold}/{i}"], check=True)
    os.rmdir(f"{hold}/{i}")
if hold:
    os.rmdir(hold)
n = int(os.environ.get("RANKS", "2"))
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
pids = []
if sig_name != "none":
    while len(pids) < n:
        line = p.stdout.readline()
        if not line:
            break
        if "ready " in line:
            pids.append(int(line.split("ready ")[1]))
    time.sleep(0.5)
    sig = getattr(signal, sig_name)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
out, err = p.communicate(timeout=90)
pids += [int(ln.split("ready ")[1]) for ln in out.splitlines() if "ready " in ln]
deadline = time.monotonic() + 30
while time.monotonic() < deadline and any(os.path.exists(f"/proc/{q}") for q in pids):
    time.sleep(0.1)
cache = os.environ.get("SPMD_CACHE_DIR", "")
left = [os.path.join(d, f) for d in ("/dev/shm", "/tmp") for f in sorted(os.listdir(d))]
left = [x for x in left if not any(k and (k + "/").startswith(x + "/") for k in keep + [cache])]
print(json.dumps({"code": p.returncode, "stderr": err, "left": left}))
