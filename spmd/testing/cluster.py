"""A test bed of hosts on one machine: each host a network namespace with its own
hostname, address, /etc/hosts and sshd, joined by shaped links to one switch.

    with Cluster(n=2, rate="1gbit") as c:
        c.run("h1", ["hostname"]).stdout          # "h1\\n"
        c.run("h1", ["ssh", "h2", "hostname"])     # over the link, with the bed's own keys
        c.cut("h2"); c.heal("h2")                  # pull and replug h2's cable
        c.kill("h2")                               # SIGKILL every process on h2
        c.counters("h2")                           # {"rx": bytes, "tx": bytes} of h2's link

What a host is made of (all created here, all removed by close()):
- a network namespace `spmdtb<pid>-hK` (pid: the process that made the bed, so a crashed
  run's leftovers are recognised and removed by the next bed, `clean_stale`), whose only
  interfaces are loopback and `eth0`, one end of a veth pair; the other end is a port
  of a bridge in a namespace of its own (the switch), so the machine's own network
  namespace is never touched. Addresses are 10.77.0.K/24, inside these namespaces only.
- a UTS namespace (its hostname, `hK`), kept in a file under the bed's directory;
- /etc/netns/<namespace>/hosts, naming every host of the bed: `ip netns exec`
  bind-mounts it over /etc/hosts for everything run on the host;
- an sshd listening on the host's address, with its own config, host key and
  authorized_keys in the bed's directory (root's ~/.ssh and the machine's sshd are left
  alone). Commands run on a host find an `ssh` first on PATH that uses the bed's key
  and known_hosts, so `ssh h2`, MPICH's hydra and `spmd run --hosts` work as on a
  real cluster;
- its own /tmp/ray (a directory of the bed's, bind-mounted there for everything run on
  the host): Ray keeps a node's sockets and address under /tmp/ray, which two hosts
  sharing one /tmp would mix up;
- a token-bucket filter on eth0 (`rate`), shaping each host's traffic out; `delay`
  needs the kernel's netem.

Everything run on a host sees the machine's file system (as hosts sharing a network
file system would) and gets `env()`: PATH with the bed's ssh first, UCX_TLS=tcp,self,
so MPICH's UCX moves bytes over the link between hosts rather than through shared memory
(which it would find between namespaces of one machine), and UCX_NET_DEVICES=eth0: with
loopback in it too, UCX's address is long enough that MPICH sends it to a PMI server in
segments, which SLURM's PMI-2 server (srun --mpi=pmi2) now and then splits wrongly
("mpi/pmi2: value not properly terminated in client request"; MPICH issue 6924); even
without loopback it does on a loaded machine, so srun's ranks use libfabric's TCP
(slurm.py).

Needs root and iproute2, util-linux (nsenter, unshare), openssh-server and
openssh-client; `unavailable()` says what is missing. It works from inside a network
namespace of loopback only (.ci/run runs the tests so): the hosts are namespaces of
their own, not children of the caller's.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "spmdtb"
SUBNET = "10.77.0"
TOOLS = ("ip", "tc", "nsenter", "unshare", "mount", "umount", "sshd", "ssh", "ssh-keygen")
NETNS_ETC = "/etc/netns"


def _which(tool):
    return shutil.which(tool) or next((p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}")
                                       if os.path.exists(p)), None)


def _sh(*cmd, check=True, timeout=30, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=check,
                          timeout=timeout, **kw)


def unavailable() -> str | None:
    """Why this machine cannot make a test bed, or None if it can."""
    if not sys.platform.startswith("linux"):
        return "the test bed needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the test bed needs root (ip netns, veth, tc, sshd)"
    missing = [t for t in TOOLS if _which(t) is None]
    if missing:
        return (f"the test bed needs {', '.join(missing)} (Debian: apt-get install iproute2 util-linux "
                f"openssh-server openssh-client)")
    probe = f"{PREFIX}{os.getpid()}-probe"
    p = _sh("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"this machine does not allow network namespaces: ip netns add: {p.stderr.strip()}"
    _sh("ip", "netns", "del", probe, check=False)
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _netns_list():
    p = _sh("ip", "-j", "netns", "list", check=False)
    try:
        return [e["name"] for e in json.loads(p.stdout or "[]")]
    except ValueError:
        return []


def _kill_netns_processes(ns):
    """SIGKILL every process whose network namespace is `ns`; True if there were any."""
    pids = [int(p) for p in _sh("ip", "netns", "pids", ns, check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(pids)


def _remove_netns(ns):
    for _ in range(50):         # killed processes leave the namespace when the kernel reaps them
        if not _kill_netns_processes(ns):
            break
        time.sleep(0.1)
    _sh("ip", "netns", "del", ns, check=False)
    shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)


def _remove_dir(path):
    """A bed's directory: its UTS namespace files are mount points, unmounted first."""
    for name in os.listdir(path) if os.path.isdir(path) else ():
        if name.endswith(".uts"):
            _sh("umount", os.path.join(path, name), check=False)
    shutil.rmtree(path, ignore_errors=True)


def clean_stale():
    """Remove what beds made by processes that are gone left behind (a run that was
    killed before it could clean up)."""
    for ns in _netns_list():
        m = re.match(rf"{PREFIX}(\d+)-", ns)
        if m and not _alive(int(m.group(1))):
            _remove_netns(ns)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.fullmatch(rf"{PREFIX}(\d+)-[\w-]+", name)
        if m and not _alive(int(m.group(1))):
            _remove_dir(os.path.join(tmp, name))


def rate_bytes(rate: str) -> float:
    """tc's rate notation ('1gbit', '100mbit', '500kbit', '10mbps') in bytes per second."""
    m = re.fullmatch(r"([\d.]+)\s*([kmgt]?)(bit|bps)", rate.strip().lower())
    if not m:
        raise ValueError(f"rate {rate!r}: write it as tc does, e.g. '1gbit' or '100mbit'")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return float(m.group(1)) * scale / (8 if m.group(3) == "bit" else 1)


class Host:
    def __init__(self, name, ip, netns, uts):
        self.name, self.ip, self.netns, self.uts = name, ip, netns, uts

    def __repr__(self):
        return f"Host({self.name}, {self.ip})"


class Cluster:
    """n hosts h1..hn (see the module docstring). A context manager; close() also runs
    at exit, and a new bed removes what crashed runs left."""

    def __init__(self, n=2, rate="1gbit", delay=None, names=None):
        why = unavailable()
        if why:
            raise RuntimeError(why)
        if not 1 <= n <= 250:
            raise ValueError(f"a test bed has 1 to 250 hosts, not {n}")
        self.rate, self.delay = rate, delay
        rate_bytes(rate)                # a rate tc would refuse fails here, before anything is made
        self.tag = f"{PREFIX}{os.getpid()}-{os.urandom(2).hex()}"
        self.dir = tempfile.mkdtemp(prefix=self.tag + "-", dir=tempfile.gettempdir())
        names = list(names or [f"h{k}" for k in range(1, n + 1)])
        self.switch = f"{self.tag}-sw"
        self.hosts = [Host(name, f"{SUBNET}.{k}", f"{self.tag}-{name}", os.path.join(self.dir, f"{name}.uts"))
                      for k, name in enumerate(names, start=1)]
        self._procs = []             # Popen objects started here, stopped by close()
        self._closed = False
        atexit.register(self.close)

    # -- making and removing ------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        clean_stale()
        self._make_switch()
        for k, h in enumerate(self.hosts, start=1):
            self._make_host(h, k)
        self._make_ssh()
        for h in self.hosts:
            self.start_sshd(h)
        self._wait_for_ssh()
        return self

    def _make_switch(self):
        _sh("ip", "netns", "add", self.switch)
        _sh("ip", "-n", self.switch, "link", "set", "lo", "up")
        _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.switch, "link", "set", "br0", "up")

    def _make_host(self, h, k):
        _sh("ip", "netns", "add", h.netns)
        _sh("ip", "-n", h.netns, "link", "set", "lo", "up")
        port = f"p{k}"
        _sh("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
        _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0")
        _sh("ip", "-n", self.switch, "link", "set", port, "up")
        _sh("ip", "-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
        _sh("ip", "-n", h.netns, "link", "set", "eth0", "up")
        self._shape(h)
        open(h.uts, "w").close()
        os.makedirs(os.path.join(self.dir, f"{h.name}_ray"))
        os.makedirs("/tmp/ray", exist_ok=True)          # the mount point of each host's own
        _sh("unshare", f"--uts={h.uts}", "hostname", h.name)
        etc = os.path.join(NETNS_ETC, h.netns)
        os.makedirs(etc, exist_ok=True)
        with open(os.path.join(etc, "hosts"), "w") as f:
            f.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
            f.writelines(f"{o.ip}\t{o.name}\n" for o in self.hosts)
        with open(os.path.join(etc, "hostname"), "w") as f:
            f.write(h.name + "\n")

    def _shape(self, h):
        burst = max(32 << 10, int(rate_bytes(self.rate) / 1000))       # 1 ms at the rate
        if self.delay:
            p = _sh("tc", "-n", h.netns, "qdisc", "add", "dev", "eth0", "root", "netem", "rate", self.rate,
                    "delay", self.delay, check=False)
            if p.returncode != 0:
                raise RuntimeError(f"test bed: a link delay needs the kernel's netem (sch_netem): "
                                   f"{p.stderr.strip()}")
        else:
            _sh("tc", "-n", h.netns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", self.rate,
                "burst", str(burst), "latency", "50ms")

    def _make_ssh(self):
        d = self.dir
        os.makedirs(os.path.join(d, "bin"))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "spmd test bed", "-f", os.path.join(d, "id_ed25519"))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "spmd test bed host",
            "-f", os.path.join(d, "host_ed25519"))
        shutil.copy(os.path.join(d, "id_ed25519.pub"), os.path.join(d, "authorized_keys"))
        host_key = open(os.path.join(d, "host_ed25519.pub")).read().split()[:2]
        with open(os.path.join(d, "known_hosts"), "w") as f:
            f.writelines(f"{h.name},{h.ip} {' '.join(host_key)}\n" for h in self.hosts)
        with open(os.path.join(d, "ssh_config"), "w") as f:
            f.write(f"Host *\n  User root\n  IdentityFile {d}/id_ed25519\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
                    f"  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 5\n")
        wrapper = os.path.join(d, "bin", "ssh")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec {_which('ssh')} -F {d}/ssh_config \"$@\"\n")
        os.chmod(wrapper, 0o755)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)     # sshd's privilege separation directory
        for h in self.hosts:
            with open(os.path.join(d, f"sshd_{h.name}.conf"), "w") as f:
                f.write(f"ListenAddress {h.ip}\nPort 22\nHostKey {d}/host_ed25519\nPidFile {d}/sshd_{h.name}.pid\n"
                        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
                        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                        f"StrictModes no\nPrintMotd no\nMaxStartups 200\nMaxSessions 200\nLogLevel ERROR\n")

    def start_sshd(self, host):
        """(Re)start the host's sshd (after kill(), a host comes back with it)."""
        h = self.host(host)
        conf = os.path.join(self.dir, f"sshd_{h.name}.conf")
        with open(os.path.join(self.dir, f"sshd_{h.name}.log"), "a") as log:
            self.popen(h, [_which("sshd"), "-D", "-e", "-f", conf], stdout=subprocess.DEVNULL, stderr=log)

    def _wait_for_ssh(self, timeout=20):
        first = self.hosts[0]
        deadline = time.monotonic() + timeout
        for h in self.hosts:
            while True:
                p = self.run(first, ["ssh", h.name, "true"], timeout=10, check=False)
                if p.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"test bed: sshd on {h.name} did not answer within {timeout} s: "
                                       f"{p.stderr.strip()}")
                time.sleep(0.1)

    def reset(self):
        """Back to a fresh bed after a test cut links or killed hosts: every link up,
        every process on the hosts stopped, every sshd started again."""
        for h in self.hosts:
            self.heal(h)
            self.kill(h)
        self._procs = [p for p in self._procs if p.poll() is None]
        for h in self.hosts:
            self.start_sshd(h)
        self._wait_for_ssh()

    def close(self):
        """Stop everything the bed started and remove the namespaces and files."""
        if self._closed:
            return
        self._closed = True
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for h in self.hosts:
            _remove_netns(h.netns)
        _remove_netns(self.switch)
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        _remove_dir(self.dir)
        atexit.unregister(self.close)

    # -- using ----------------------------------------------------------------------------
    def host(self, host) -> Host:
        if isinstance(host, Host):
            return host
        for h in self.hosts:
            if h.name == host:
                return h
        raise KeyError(f"no host {host!r} in the test bed ({', '.join(h.name for h in self.hosts)})")

    @property
    def names(self):
        return [h.name for h in self.hosts]

    def env(self, extra=None, base=None) -> dict:
        """The environment for commands on the hosts: the bed's ssh first on PATH, and
        MPICH's UCX kept to TCP between hosts."""
        e = dict(os.environ if base is None else base)
        e["PATH"] = os.path.join(self.dir, "bin") + os.pathsep + e.get("PATH", "")
        e["UCX_TLS"] = "tcp,self"
        e["UCX_NET_DEVICES"] = "eth0"
        e.update(extra or {})
        return e

    def prefix(self, host) -> list:
        """The command prefix that runs a program on `host`."""
        h = self.host(host)
        private = os.path.join(self.dir, f"{h.name}_ray")
        return ["ip", "netns", "exec", h.netns, _which("nsenter"), f"--uts={h.uts}", "--",
                "sh", "-c", 'mount --bind "$0" /tmp/ray && exec "$@"', private]

    def run(self, host, cmd, timeout=120, env=None, check=False, **kw):
        """Run cmd on host and wait (output captured as text). A command still running
        at the timeout is killed, with everything it started on the host."""
        p = self.popen(host, cmd, env=env, stdout=kw.pop("stdout", subprocess.PIPE),
                       stderr=kw.pop("stderr", subprocess.PIPE), text=True, **kw)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(p.args, timeout, out, err) from None
        r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check and r.returncode:
            raise subprocess.CalledProcessError(r.returncode, cmd, out, err)
        return r

    def popen(self, host, cmd, env=None, **kw) -> subprocess.Popen:
        """Start cmd on host (in a session of its own, stopped by close())."""
        p = subprocess.Popen(self.prefix(host) + [str(c) for c in cmd], env=self.env() if env is None else env,
                             start_new_session=True, **kw)
        self._procs.append(p)
        return p

    def cut(self, host):
        """Pull the host's cable: its switch port goes down, so its packets are dropped
        silently (the host's own interface stays configured, as with a real cut)."""
        _sh("ip", "-n", self.switch, "link", "set", self._port(host), "down")

    def heal(self, host):
        _sh("ip", "-n", self.switch, "link", "set", self._port(host), "up")

    def _port(self, host):
        return f"p{self.hosts.index(self.host(host)) + 1}"

    def kill(self, host):
        """SIGKILL every process on the host, its sshd too (a crashed host);
        start_sshd(host) brings it back."""
        h = self.host(host)
        for _ in range(50):
            if not _kill_netns_processes(h.netns):
                return
            time.sleep(0.1)

    def pids(self, host) -> list:
        return [int(p) for p in _sh("ip", "netns", "pids", self.host(host).netns).stdout.split()]

    def counters(self, host) -> dict:
        """Bytes through the host's link so far: {"rx": ..., "tx": ...}."""
        out = _sh("ip", "-n", self.host(host).netns, "-j", "-s", "link", "show", "dev", "eth0").stdout
        stats = json.loads(out)[0]["stats64"]
        return {"rx": stats["rx"]["bytes"], "tx": stats["tx"]["bytes"]}

    def hostfile(self, slots=None) -> str:
        """A hostfile (MPICH's `host:slots` lines) naming every host."""
        path = os.path.join(self.dir, "hostfile")
        with open(path, "w") as f:
            f.writelines(f"{h.name}:{slots}\n" if slots else f"{h.name}\n" for h in self.hosts)
        return path
