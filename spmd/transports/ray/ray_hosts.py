"""`spmd run --backend ray --hosts h1,h2[:slots]`: a Ray cluster on those hosts for one job.

The first host is the head (`ray start --head`), the others join it (`ray start
--address`); each node is started over ssh under transports/ray/ray_node.py, with as many CPUs
as the host has ranks, so the placement group's one-CPU bundles fill each host with its
ranks. The script then runs here as the driver (RAY_ADDRESS: the head), and the nodes
are stopped when it ends: closing their ssh connections stops them, so they also stop
when this process is killed by any signal. The cluster takes a token of its own (Ray's
token authentication), sent to each node on its standard input and to the driver in
its environment, so no other process can join it or run code on it.

To use a Ray cluster that is already running, do not name hosts: RAY_ADDRESS=head:6379
spmd run --backend ray -n N script.py joins it.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

from ...launcher.hosts import ranks_text
from ...launcher.ssh import passed_env, say_lost_hosts, ssh

PORT = 6379
START_TIMEOUT = 120


def _address(host) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError as e:
        raise SystemExit(f"spmd run: cannot resolve host {host}: {e}") from None


class _Node:
    """One `ray start` over ssh; stopped by closing its standard input."""

    def __init__(self, host, ranks, options, token):
        self.host, self.ranks = host, ranks
        cmd = ssh(host, [sys.executable, "-m", "spmd.transports.ray.ray_node", *options])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.proc.stdin.write(token + "\n")
        self.proc.stdin.flush()
        self.ready = threading.Event()
        self.log = []
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            if line.strip() == "READY":
                self.ready.set()
            else:
                self.log.append(line)

    def wait_ready(self, deadline):
        while not self.ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = "".join(self.log[-15:]).rstrip()
                why = "it exited" if self.proc.poll() is not None else f"no answer in {START_TIMEOUT} s"
                raise SystemExit(f"spmd run: Ray did not start on host {self.host} ({ranks_text(self.ranks)}): "
                                 f"{why}\n{tail}")

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def wait(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_on_hosts(placement, args) -> int:
    hosts = [(h, rs) for h, rs in placement if rs]
    head, head_ranks = hosts[0]
    address = f"{_address(head)}:{int(os.environ.get('SPMD_RAY_PORT', PORT))}"
    common = ["--disable-usage-stats", "--include-dashboard=false"]
    token = secrets.token_hex(32)
    nodes = []
    try:
        # the ranks at the priority of any program, as MPI's are (Ray's workers run at nice
        # 15); the other nodes take the head's system config
        nodes.append(_Node(head, head_ranks, ["--head", f"--node-ip-address={_address(head)}",
                                              f"--port={address.rsplit(':', 1)[1]}", f"--num-cpus={len(head_ranks)}",
                                              '--system-config={"worker_niceness": 0}', *common], token))
        deadline = time.monotonic() + START_TIMEOUT
        # the other nodes start at once: `ray start --address` waits for the head's GCS
        for h, rs in hosts[1:]:
            nodes.append(_Node(h, rs, [f"--address={address}", f"--node-ip-address={_address(h)}",
                                       f"--num-cpus={len(rs)}", "--disable-usage-stats"], token))
        for n in nodes:
            n.wait_ready(deadline)
        # (the caller's environment may hold RAY_AUTH_MODE already: ray.init sets it)
        env = {**os.environ, **passed_env(), "RAY_ADDRESS": address, "SPMD_BACKEND": "ray",
               "SPMD_NUM_DEVICES": str(args.n), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        env.setdefault("SPMD_RAY_STRATEGY", "PACK")
        driver = subprocess.Popen([sys.executable, args.script, *args.args], env=env)
        while True:
            try:
                code = driver.wait()
                break
            except KeyboardInterrupt:
                driver.send_signal(signal.SIGINT)
        if code != 0:
            say_lost_hosts(hosts, placed=False)
        return code
    finally:
        for n in nodes:
            n.stop()
        for n in nodes:
            n.wait(30)
