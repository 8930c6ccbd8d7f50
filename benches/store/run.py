#!/usr/bin/env python3
"""The replicated store against etcd, side by side in one run (docs/data.md, "Against etcd").

Three convoke nodes (the release binary, data.replicas = 3, R = W = quorum, data.sync = "always")
and a three-member etcd cluster (Debian's etcd-server, installed here when missing; it syncs its
log on every write), both on loopback, both driven over HTTP by the same load generator
(src/main.rs) with the same number of requests in flight:

- puts/s and gets/s, with p50 and p99 latency, of `--keys` keys written once and read once;
- bytes on disk per key once they are written;
- the time a fourth node takes to take over its share of those keys (convoke: until every key is
  on exactly three nodes again, the newcomer among them for its share; etcd: until the new
  member serves all of them);
- with --million, on a fresh three-node convoke cluster: 1,000,000 keys written, and the
  resident memory per key of a node (at N = 3 each of the three holds every key).

Each system runs alone in its turn; runs alternate etcd and convoke. Medians of `--runs`.

Usage: python3 benches/store/run.py [--runs 3] [--keys 100000] [--in-flight 64] [--million]
       python3 benches/store/run.py --only million --million    # the million-key measurement alone
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "benches", "store")


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def build():
    sh("cargo", "build", "--release", "--locked", "--quiet", "--bin", "convoke", cwd=ROOT)
    sh("cargo", "build", "--release", "--quiet", cwd=HERE)
    if shutil.which("etcd") is None:
        if os.geteuid() != 0:
            sys.exit("etcd is missing: install Debian's etcd-server as root")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        sh("apt-get", "update", "-qq", env=env)
        sh("apt-get", "install", "-y", "-qq", "--no-install-recommends", "etcd-server", env=env)


def get_json(url, body=None, timeout=5):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait(what, pred, timeout=120, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:
            pass
        time.sleep(every)
    sys.exit(f"timed out waiting for {what}")


def load(target, endpoints, phase, ops, in_flight, start=0):
    out = subprocess.run(
        [os.path.join(HERE, "target", "release", "store-bench"), "--target", target,
         "--endpoints", ",".join(endpoints), "--phase", phase, "--ops", str(ops),
         "--from", str(start), "--in-flight", str(in_flight)],
        check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    if r["errors"]:
        sys.exit(f"{target} {phase}: {r['errors']} errors")
    return r


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Etcd:
    def __init__(self, work):
        self.work, self.procs = work, {}

    def client(self, i):
        return f"http://127.0.0.1:{23790 + i}"

    def peer(self, i):
        return f"http://127.0.0.1:{23800 + i}"

    def start(self, i, members, state):
        cluster = ",".join(f"e{m}={self.peer(m)}" for m in members)
        d = os.path.join(self.work, f"e{i}")
        self.procs[i] = subprocess.Popen(
            ["etcd", "--name", f"e{i}", "--data-dir", d,
             "--listen-client-urls", self.client(i), "--advertise-client-urls", self.client(i),
             "--listen-peer-urls", self.peer(i), "--initial-advertise-peer-urls", self.peer(i),
             "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--quota-backend-bytes", str(8 << 30)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(f"etcd e{i}", lambda: get_json(self.client(i) + "/health")["health"] == "true")

    def count(self, i):
        body = {"key": "AA==", "range_end": "AA==", "count_only": True, "serializable": True}
        return int(get_json(self.client(i) + "/v3/kv/range", body).get("count", 0))

    def stop(self):
        for p in self.procs.values():
            p.terminate()
            p.wait()


class Convoke:
    def __init__(self, work, extra):
        self.work, self.procs, self.extra = work, {}, extra
        self.ports = {}

    def url(self, i):
        return f"http://127.0.0.1:{self.ports[i][1]}"

    def start(self, i, seeds):
        if i not in self.ports:
            self.ports[i] = (free_port(), free_port())
        port, mport = self.ports[i]
        seed_list = ",".join(f'"convoke://convoke@127.0.0.1:{self.ports[s][0]}"' for s in seeds)
        sets = [
            f"cluster.port={port}", f"management.port={mport}", "management.read_only=false",
            "bootstrap.enabled=false", f"cluster.seed_nodes=[{seed_list}]",
            "data.enabled=true", f'data.dir="{os.path.join(self.work, f"c{i}")}"',
            'data.sync="always"', "management.limits.max_connections=1024",
        ] + self.extra
        args = [os.path.join(ROOT, "target", "release", "convoke"), "run"]
        for s in sets:
            args += ["--set", s]
        self.procs[i] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def members_up(self, i, n):
        m = get_json(self.url(i) + "/cluster/members")["members"]
        return len(m) == n and all(x["status"] == "Up" for x in m)

    def stats(self, i):
        return get_json(self.url(i) + "/data/stats")

    def stop(self):
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            p.wait()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_etcd(keys, in_flight):
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as work:
        e = Etcd(work)
        try:
            # The three must start together: each waits for the others before it is healthy.
            procs = [threading_start(e, i) for i in range(3)]
            for t in procs:
                t.join()
            eps = [e.client(i) for i in range(3)]
            put = load("etcd", eps, "put", keys, in_flight)
            get = load("etcd", eps, "get", keys, in_flight)
            disk = sum(du(os.path.join(work, f"e{i}")) for i in range(3)) / 3 / keys
            # etcd refuses a member change until every member has been connected for a while.
            wait("etcd to accept a new member",
                 lambda: "member" in get_json(e.client(0) + "/v3/cluster/member/add", {"peerURLs": [e.peer(3)]}),
                 every=0.5)
            t0 = time.monotonic()
            e.start(3, range(4), "existing")
            wait("the new etcd member to hold every key", lambda: e.count(3) >= keys, timeout=600, every=0.02)
            takeover = time.monotonic() - t0
        finally:
            e.stop()
    return {"put": put, "get": get, "disk_per_key": disk, "takeover_s": takeover}


def threading_start(e, i):
    import threading
    t = threading.Thread(target=e.start, args=(i, range(3), "new"))
    t.start()
    return t


def start_convoke(c, n):
    """Starts nodes 0..n of `c` as one cluster and waits for all of them Up."""
    for i in range(n):
        c.ports[i] = (free_port(), free_port())
    for i in range(n):
        c.start(i, list(range(n)))
    for i in range(n):
        wait(f"convoke node {i}", lambda i=i: c.members_up(i, n))
    return [c.url(i) for i in range(n)]


def run_convoke(keys, in_flight, extra):
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as work:
        c = Convoke(work, extra)
        try:
            eps = start_convoke(c, 3)
            put = load("convoke", eps, "put", keys, in_flight)
            get = load("convoke", eps, "get", keys, in_flight)
            disk = sum(c.stats(i)["bytesOnDisk"] for i in range(3)) / 3 / keys
            t0 = time.monotonic()
            c.start(3, [0, 1, 2])
            wait("the fourth node Up", lambda: c.members_up(3, 4))
            # Done when every key is on exactly three nodes again, the newcomer holding its share.
            wait("every key on three nodes, the newcomer among them",
                 lambda: sum(c.stats(i)["keys"] for i in range(4)) == 3 * keys and c.stats(3)["keys"] > 0,
                 timeout=1200, every=0.1)
            takeover = time.monotonic() - t0
            share = c.stats(3)["keys"]
        finally:
            c.stop()
    return {"put": put, "get": get, "disk_per_key": disk, "takeover_s": takeover, "newcomer_keys": share}


def run_million(in_flight, extra):
    """1,000,000 keys written to a fresh three-node cluster (N = 3: every node holds every key);
    each node's resident memory, before and after."""
    keys = 1_000_000
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as work:
        c = Convoke(work, extra)
        try:
            eps = start_convoke(c, 3)
            before = [rss(c.procs[i].pid) for i in range(3)]
            put = load("convoke", eps, "put", keys, in_flight)
            after = [rss(c.procs[i].pid) for i in range(3)]
            held = [c.stats(i)["keys"] for i in range(3)]
        finally:
            c.stop()
    return {
        "put": put,
        "rss_bytes_before": before,
        "rss_bytes": after,
        "keys_held": held,
        "rss_per_key": statistics.median(a / k for a, k in zip(after, held) if k),
        "rss_growth_per_key": statistics.median((a - b) / max(k, 1) for a, b, k in zip(after, before, held)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--convoke-set", action="append", default=[], metavar="KEY=VALUE",
                    help="another setting of the convoke nodes (repeatable)")
    ap.add_argument("--only", choices=["etcd", "convoke", "million"],
                    help="run one system only, or only the million-key measurement (with --million)")
    a = ap.parse_args()
    build()
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    runs = {"etcd": [], "convoke": []}
    for r in range(0 if a.only == "million" else a.runs):
        if a.only != "convoke":
            runs["etcd"].append(run_etcd(a.keys, a.in_flight))
            print(f"run {r} etcd:    {json.dumps(runs['etcd'][-1])}", flush=True)
        if a.only != "etcd":
            runs["convoke"].append(run_convoke(a.keys, a.in_flight, a.convoke_set))
            print(f"run {r} convoke: {json.dumps(runs['convoke'][-1])}", flush=True)
    if any(runs.values()):
        print(f"\n{a.keys} keys, {a.in_flight} in flight, medians of {a.runs} runs:")
        print("| system | puts/s | put p50 ms | put p99 ms | gets/s | get p50 ms | get p99 ms | disk B/key | takeover s |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, rs in runs.items():
        if not rs:
            continue
        m = lambda f: statistics.median(f(x) for x in rs)
        print(f"| {name} | {m(lambda x: x['put']['ops_per_s']):,.0f} | {m(lambda x: x['put']['p50_ms']):.2f} | "
              f"{m(lambda x: x['put']['p99_ms']):.2f} | {m(lambda x: x['get']['ops_per_s']):,.0f} | "
              f"{m(lambda x: x['get']['p50_ms']):.2f} | {m(lambda x: x['get']['p99_ms']):.2f} | "
              f"{m(lambda x: x['disk_per_key']):.0f} | {m(lambda x: x['takeover_s']):.1f} |")
    if a.million:
        million = run_million(a.in_flight, a.convoke_set)
        print(f"\nconvoke with 1,000,000 keys on 3 nodes: {json.dumps(million)}")


if __name__ == "__main__":
    main()
