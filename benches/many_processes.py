#!/usr/bin/env python3
"""Many `convoke run` processes on loopback, formed by cluster bootstrap, then one killed.

Each process is a node with the default settings on its own address 127.0.NET.x (x = 1..N) and
the standard ports (cluster 25520, management 8558), the way the pods of one Deployment see each
other. There are no seed nodes: the processes find each other through bootstrap with
`discovery.method = "config"` listing all N contact points, and form one cluster by the
lowest-address rule. For each N it reports:

- formation: seconds from starting the processes until every node's `/cluster/members` lists all
  N Up (and the time the first member was Up, i.e. when the lowest address joined itself);
- per-process RSS (VmRSS, median and largest) once formed and again after SETTLE more seconds
  (with its anonymous part, RssAnon, the process's own memory), and the CPU each process used in
  that window (percent of one core, median and largest);
- detection: seconds from `kill -9` of the highest-address node until every survivor lists it
  unreachable.

    python3 benches/many_processes.py                      # N = 200
    python3 benches/many_processes.py --nodes 50,100,200   # one run per N, then a table

Results go to stdout as one JSON object per N, then a Markdown table. Needs only Python 3 and a
release build of `convoke` (built first unless --no-build).
"""

import argparse
import concurrent.futures
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER_PORT = 25520
MANAGEMENT_PORT = 8558
TICK = os.sysconf("SC_CLK_TCK")


def ip(net, i):
    return f"127.0.{net}.{i}"


def members(net, i, timeout=2.0):
    """Node i's /cluster/members as JSON, or None if it did not answer."""
    url = f"http://{ip(net, i)}:{MANAGEMENT_PORT}/cluster/members"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.load(r)
    except Exception:  # noqa: BLE001 - a node that does not answer is simply not there yet
        return None


def up_count(view):
    return sum(1 for m in view["members"] if m["status"] == "Up") if view else 0


def proc_status_kb(pid, field):
    """A kB field of /proc/PID/status: VmRSS, RssAnon (the process's own memory) or RssFile
    (pages of the binary and libraries, shared between the processes)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def proc_rss_kb(pid):
    return proc_status_kb(pid, "VmRSS")


def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def write_config(path, nodes, net):
    endpoints = ", ".join(
        f'{{ host = "{ip(net, i)}", port = {MANAGEMENT_PORT} }}' for i in range(1, nodes + 1)
    )
    with open(path, "w") as f:
        f.write("[discovery]\nmethod = \"config\"\n\n")
        f.write(f"[discovery.config.services.convoke]\nendpoints = [{endpoints}]\n")


def poll_all(pool, net, which, check, deadline, interval):
    """Polls nodes `which` until `check(view)` holds for each; returns when each first held (s
    since the call) or None for those that never did before `deadline`."""
    start = time.monotonic()
    pending = set(which)
    seen = {}
    while pending and time.monotonic() < deadline:
        round_start = time.monotonic()
        views = dict(zip(pending, pool.map(lambda i: members(net, i), list(pending))))
        for i, view in views.items():
            if view is not None and check(view):
                seen[i] = time.monotonic() - start
                pending.discard(i)
        time.sleep(max(0.0, interval - (time.monotonic() - round_start)))
    return {i: seen.get(i) for i in which}


def run(args, nodes):
    bin_path = args.bin
    net = args.net
    tmp = tempfile.mkdtemp(prefix="convoke-many-")
    config = os.path.join(tmp, "convoke.toml")
    write_config(config, nodes, net)
    procs = {}
    logs = []
    result = {"nodes": nodes, "settings": args.set}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.pollers)
    try:
        t0 = time.monotonic()
        for i in range(1, nodes + 1):
            log = open(os.path.join(tmp, f"node-{i}.log"), "w")
            logs.append(log)
            procs[i] = subprocess.Popen(
                [bin_path, "run", "--config", config,
                 "--set", f'cluster.hostname="{ip(net, i)}"',
                 "--set", f'management.hostname="{ip(net, i)}"',
                 *[a for kv in args.set for a in ("--set", kv)]],
                stdout=subprocess.DEVNULL, stderr=log,
                env={**os.environ, "RUST_LOG": "warn"},
            )
        result["started_s"] = round(time.monotonic() - t0, 2)
        deadline = t0 + args.timeout

        # The lowest address forms the cluster: its view shows the first member Up.
        first_up = None
        while time.monotonic() < deadline:
            if up_count(members(net, 1)) >= 1:
                first_up = time.monotonic() - t0
                break
            time.sleep(0.2)
        result["first_up_s"] = round(first_up, 2) if first_up is not None else None
        if first_up is None:
            result["error"] = "no member Up before the timeout"
            return result

        all_up = poll_all(pool, net, range(1, nodes + 1), lambda v: up_count(v) == nodes,
                          deadline, 1.0)
        missing = [i for i, t in all_up.items() if t is None]
        formed = time.monotonic() - t0
        if missing:
            result["error"] = f"{len(missing)} nodes never saw all {nodes} Up: {missing[:10]}"
            return result
        result["all_up_s"] = round(formed, 2)

        pids = {i: p.pid for i, p in procs.items()}
        rss_formed = [proc_rss_kb(pid) for pid in pids.values()]
        cpu_before = {i: proc_cpu_ticks(pid) for i, pid in pids.items()}
        window_start = time.monotonic()
        time.sleep(args.settle)
        window = time.monotonic() - window_start
        cpu_pct = [100.0 * (proc_cpu_ticks(pid) - cpu_before[i]) / TICK / window
                   for i, pid in pids.items()]
        rss_settled = [proc_rss_kb(pid) for pid in pids.values()]
        anon_settled = [proc_status_kb(pid, "RssAnon") for pid in pids.values()]
        result["rss_formed_kb"] = {"median": statistics.median(rss_formed),
                                   "max": max(rss_formed)}
        result["rss_settled_kb"] = {"median": statistics.median(rss_settled),
                                    "max": max(rss_settled)}
        result["rss_anon_settled_kb"] = {"median": statistics.median(anon_settled),
                                         "max": max(anon_settled)}
        result["steady_cpu_pct_of_core"] = {"median": round(statistics.median(cpu_pct), 2),
                                            "max": round(max(cpu_pct), 2),
                                            "total": round(sum(cpu_pct), 1),
                                            "window_s": round(window, 1)}

        victim = nodes
        victim_addr = f"{ip(net, victim)}:{CLUSTER_PORT}"
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()
        t_kill = time.monotonic()
        survivors = range(1, nodes)
        seen = poll_all(
            pool, net, survivors,
            lambda v: any(u["node"].endswith("@" + victim_addr) for u in v["unreachable"]),
            t_kill + args.detect_timeout, 0.5)
        late = [i for i, t in seen.items() if t is None]
        if late:
            result["error"] = f"{len(late)} survivors never saw the killed node unreachable"
        else:
            times = sorted(seen.values())
            result["detected_by_all_s"] = round(times[-1], 2)
            result["detected_by_median_s"] = round(statistics.median(times), 2)
        return result
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs.values():
            p.wait()
        for log in logs:
            log.close()
        result["logs"] = tmp


def table(results):
    rows = ["| N | first Up (s) | all Up on every node (s) | RSS per process, formed: median / max (MB) "
            "| after settle: median / max (MB) | of which RssAnon: median / max (MB) "
            "| steady CPU per process: median / max (% of a core) "
            "| all processes (% of a core) | kill -9 seen unreachable by all (s) |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        if "error" in r and "all_up_s" not in r:
            rows.append(f"| {r['nodes']} | {r.get('first_up_s')} | {r['error']} | | | | | | |")
            continue
        mb = lambda kb: f"{kb / 1024:.1f}"  # noqa: E731
        cpu = r["steady_cpu_pct_of_core"]
        rows.append(
            f"| {r['nodes']} | {r['first_up_s']} | {r['all_up_s']} "
            f"| {mb(r['rss_formed_kb']['median'])} / {mb(r['rss_formed_kb']['max'])} "
            f"| {mb(r['rss_settled_kb']['median'])} / {mb(r['rss_settled_kb']['max'])} "
            f"| {mb(r['rss_anon_settled_kb']['median'])} / {mb(r['rss_anon_settled_kb']['max'])} "
            f"| {cpu['median']} / {cpu['max']} | {cpu['total']} "
            f"| {r.get('detected_by_all_s', r.get('error'))} |")
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="200", help="comma-separated process counts (default 200)")
    p.add_argument("--net", type=int, default=0, help="third byte of the addresses 127.0.NET.x")
    p.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "convoke"))
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--settle", type=float, default=30.0,
                   help="seconds between the two RSS readings, over which CPU is measured")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to form")
    p.add_argument("--detect-timeout", type=float, default=120.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting given to every process, as `convoke run --set` takes it")
    p.add_argument("--pollers", type=int, default=16, help="concurrent management requests")
    args = p.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    if any(not 1 <= n <= 254 for n in counts):
        sys.exit(f"--nodes {args.nodes}: every count must be 1..254 (one address 127.0.NET.x each)")
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "convoke"],
                       cwd=ROOT, check=True)
    results = []
    for n in counts:
        r = run(args, n)
        print(json.dumps(r), flush=True)
        results.append(r)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
