"""A SLURM cluster on the test bed: slurmctld on the first host, a slurmd on every host,
one munged for all (the hosts share the file system, so its socket and key serve them
all), everything in the bed's directory.

    with Cluster(2) as bed, Slurm(bed) as slurm:
        slurm.run("h1", ["srun", "-N", "2", "-n", "4", "--mpi=pmi2", "python", "x.py"])
        slurm.env()        # bed.env() plus SLURM_CONF, for commands of your own

Plugins that need neither cgroups nor systemd: proctrack/linuxproc, task/none, no
accounting. Every slurm command is given SLURM_CONF (without one, SLURM looks for its
configuration in DNS). Needs slurm-wlm and munge (Debian's packages); `unavailable()`
says what is missing.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time

TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")

# MPICH puts each rank's network address into SLURM's PMI-2 key-value store at start-up.
# UCX's address (the test bed's default netmod) is long enough to go in segments, and
# SLURM's PMI-2 server, on a loaded machine, now and then reads a segment wrongly ("mpi/
# pmi2: value not properly terminated in client request"; MPICH issue 6924): MPI_Init
# aborts on those ranks. Under srun the ranks use MPICH's other netmod, libfabric's TCP
# provider, whose address is a socket address: one short value.
PMI2_SAFE = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}


def _which(tool):
    return shutil.which(tool) or next((p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}")
                                       if os.path.exists(p)), None)


def unavailable() -> str | None:
    missing = [t for t in TOOLS if _which(t) is None]
    if missing:
        return f"SLURM on the test bed needs {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)"
    return None


class Slurm:
    def __init__(self, bed, cpus_per_host=None):
        why = unavailable()
        if why:
            raise RuntimeError(why)
        self.bed = bed
        self.dir = os.path.join(bed.dir, "slurm")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.cpus = cpus_per_host or os.cpu_count() or 1
        self._procs = []

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def env(self, extra=None) -> dict:
        return self.bed.env({"SLURM_CONF": self.conf, **PMI2_SAFE, **(extra or {})})

    def start(self):
        for sub in ["state"] + [f"spool_{h.name}" for h in self.bed.hosts]:
            os.makedirs(os.path.join(self.dir, sub), mode=0o700)
        self._start_munge()
        self._write_conf()
        first = self.bed.hosts[0]
        self._daemon(first, [_which("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
        for h in self.bed.hosts:
            self._daemon(h, [_which("slurmd"), "-D", "-f", self.conf], f"slurmd_{h.name}")
        self._wait_idle()
        return self

    def _start_munge(self):
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        d = self.dir
        self.socket = os.path.join(d, "munge.socket")
        # one munged for every host: its socket is a file, reachable from every namespace
        self._daemon(self.bed.hosts[0], [_which("munged"), "--foreground", "--force", f"--key-file={key}",
                                         f"--socket={self.socket}", f"--pid-file={d}/munged.pid",
                                         f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"], "munged")
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline:
                raise RuntimeError(f"test bed: munged did not start: {self._log('munged')}")
            time.sleep(0.05)

    def _write_conf(self):
        d, hosts = self.dir, self.bed.hosts
        # slurmd loads a cgroup plugin whatever the other plugins; named, v1 is only
        # loaded, not used (no cgroup file system is mounted in a host's namespace)
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        nodes = "".join(f"NodeName={h.name} NodeAddr={h.ip} CPUs={self.cpus} State=UNKNOWN\n" for h in hosts)
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=spmdtb
SlurmctldHost={hosts[0].name}({hosts[0].ip})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool_%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd_%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd_%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=10
{nodes}PartitionName=bed Nodes={','.join(h.name for h in hosts)} Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, host, cmd, name):
        with open(os.path.join(self.dir, f"{name}.out"), "w") as log:
            self._procs.append(self.bed.popen(host, cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT))

    def _log(self, name):
        for fn in (f"{name}.log", f"{name}.out"):
            p = os.path.join(self.dir, fn)
            if os.path.exists(p):
                with open(p) as f:
                    tail = f.read()[-2000:]
                if tail.strip():
                    return tail
        return "(no log)"

    def _wait_idle(self, timeout=30):
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            p = self.bed.run(self.bed.hosts[0], ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10, env=self.env())
            last = p.stdout + p.stderr
            states = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
            if len(states) == len(self.bed.hosts) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"test bed: the SLURM nodes did not become idle in {timeout} s: {last}\n"
                           f"slurmctld: {self._log('slurmctld')}")

    def run(self, host, cmd, timeout=120, env=None, **kw):
        """Run cmd on host under this cluster's SLURM. A command still running at the
        timeout is killed and every job is cancelled, so the next command finds the
        nodes free (a job left behind would hold them and queue the next); the error
        says what SLURM was doing then."""
        try:
            return self.bed.run(host, cmd, timeout=timeout, env=self.env(env), **kw)
        except subprocess.TimeoutExpired as e:
            queue = self._quietly(host, ["squeue", "-h", "-o", "%i %j %T %M %R"])
            self._quietly(host, ["scancel", "--user", pwd.getpwuid(os.getuid()).pw_name])
            try:
                self._wait_idle()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass                       # (the error below is the one to see)
            raise RuntimeError(f"test bed: {' '.join(map(str, cmd))} on {host} still ran after {timeout} s "
                               f"(killed, its jobs cancelled). Its output: {e.stdout or ''}{e.stderr or ''}\n"
                               f"the queue then: {queue or '(empty)'}\n"
                               + "".join(f"slurmd on {h.name}: {self._log('slurmd_' + h.name)}\n"
                                         for h in self.bed.hosts)) from None

    def _quietly(self, host, cmd) -> str:
        """A short command's output, or why there is none (it must not hide the error at hand)."""
        try:
            p = self.bed.run(host, cmd, timeout=10, env=self.env())
        except subprocess.TimeoutExpired:
            return f"({cmd[0]} did not answer in 10 s)"
        return (p.stdout + p.stderr).strip()

    def close(self):
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._procs = []
