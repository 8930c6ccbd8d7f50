"""Node processes on loopback for the live checks of .ci/ (dashboard_test.py, operator_kit.py).

A `Node` starts a process that takes `convoke run`'s settings flags (`convoke run` itself or an
example), with intervals short enough that a killed node is seen unreachable in seconds and
downed 4 s later, and reads its log until it has said where it listens.
"""

import re
import subprocess
import threading

FAST = [
    'cluster.gossip_interval="200ms"',
    'cluster.leader_actions_interval="200ms"',
    'cluster.unreachable_nodes_reaper_interval="200ms"',
    'cluster.periodic_tasks_initial_delay="100ms"',
    'cluster.failure_detector.heartbeat_interval="200ms"',
    'cluster.failure_detector.acceptable_heartbeat_pause="1s"',
    'cluster.split_brain_resolver.stable_after="4s"',
    "cluster.port=0",
    "management.port=0",
    "bootstrap.enabled=false",
]


class Node:
    """A node process: `command` (the program and its own arguments) with `--set` for every
    entry of FAST and then of `sets` (later ones win); `address` and `url` once it has logged
    them."""

    def __init__(self, command, sets):
        args = list(command)
        for s in FAST + sets:
            args += ["--set", s]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={"RUST_LOG": "info", "PATH": "/usr/bin:/bin"},
        )
        self.address = self.url = None
        self.log = []
        started = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                if m := re.search(r"cluster node started node=(\S+)", line):
                    self.address = m.group(1)
                if m := re.search(r"management server listening url=(\S+)", line):
                    self.url = m.group(1)
                if self.address and self.url:
                    started.set()

        threading.Thread(target=read, daemon=True).start()
        if not started.wait(60):
            self.proc.kill()
            raise SystemExit("a node did not start:\n" + "".join(self.log))

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
