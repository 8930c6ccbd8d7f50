"""The Grafana dashboard and the alert rules against the real tools and a live cluster.

Usage: operator_kit.py DASHBOARD RULES PROMTOOL CONVOKE_TARGET_DIR WORK_DIR

- The dashboard's JSON: every panel has a unique id and a grid position, every query names the
  dashboard's data source variable, and every PromQL expression is accepted by `promtool check
  rules` (each written out as a recording rule, Grafana's variables replaced by values).
- A live cluster of three processes on loopback: the singleton example (the oldest, so it hosts
  the singleton) and two counter examples (sharding). After one counter is killed with SIGKILL the
  split-brain resolver of the leader (the survivor with the lowest address) downs it. Every metric name the dashboard and the rules use must be a
  series one of these nodes served at /metrics along the way.
"""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nodes

DASHBOARD, RULES, PROMTOOL, TARGET, WORK = sys.argv[1:6]

METRIC = re.compile(r"\bconvoke_[a-z0-9_]+")


def fail(message):
    raise SystemExit(f"operator-kit: {message}")


def check_dashboard(path):
    """The dashboard's shape, and its expressions through promtool. Returns the expressions."""
    dashboard = json.loads(Path(path).read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for needed in ("datasource", "instance"):
        if needed not in variables:
            fail(f"{path}: no template variable {needed!r}")
    ids, exprs = set(), []
    for panel in dashboard["panels"]:
        title = panel.get("title", "?")
        if panel["id"] in ids:
            fail(f"{path}: panel id {panel['id']} twice")
        ids.add(panel["id"])
        if not {"x", "y", "w", "h"} <= panel.get("gridPos", {}).keys():
            fail(f"{path}: panel {title!r} has no full gridPos")
        if panel["type"] == "row":
            continue
        targets = panel.get("targets", [])
        if not targets:
            fail(f"{path}: panel {title!r} has no query")
        for t in targets:
            if t.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{path}: panel {title!r} does not query the ${{datasource}} variable")
            exprs.append(t["expr"])
    # promtool parses each expression as the rule of a recording rule.
    concrete = [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in exprs]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(concrete)],
            }
        ]
    }
    out = Path(WORK) / "dashboard-exprs.rules.json"
    out.write_text(json.dumps(rules))
    # promtool reads YAML, of which JSON is a subset.
    subprocess.run([PROMTOOL, "check", "rules", str(out)], check=True)
    print(f"dashboard: {len(ids)} panels, {len(exprs)} expressions accepted by promtool")
    return exprs


def used_metrics(dashboard_exprs, rules_path):
    names = set()
    for e in dashboard_exprs:
        names.update(METRIC.findall(e))
    for line in Path(rules_path).read_text().splitlines():
        if line.strip().startswith("expr:"):
            names.update(METRIC.findall(line))
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process(nodes.Node):
    """A node process of an example, with the /metrics of its management server."""

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()


def samples(text):
    """The metric names of the samples in a /metrics text."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}


def wait_for(what, predicate, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    fail(f"timed out after {timeout} s waiting for {what}")


def live_names():
    """Every sample name three live nodes served, before and after a SIGKILL and its downing."""
    seen = set()
    port = free_port()
    seed = f'cluster.seed_nodes=["convoke://convoke@127.0.0.1:{port}"]'
    common = [seed]
    started = []
    try:
        # The singleton example first: the oldest member hosts the singleton.
        started.append(Process([f"{TARGET}/examples/singleton"], common + [f"cluster.port={port}"]))
        for _ in range(2):
            started.append(Process([f"{TARGET}/examples/counter", "--http-port", "0"], common))
        oldest, counter, victim = started

        def scrape(node):
            text = node.metrics()
            seen.update(samples(text))
            return text

        wait_for("three Up members", lambda: 'convoke_members{status="Up"} 3' in scrape(oldest))
        wait_for(
            "the singleton running on the oldest",
            lambda: 'convoke_singleton_running{name="ticker"} 1' in scrape(oldest),
        )
        wait_for("phi of monitored members", lambda: "convoke_member_phi{" in scrape(counter))
        wait_for("a shard region", lambda: "convoke_sharding_shards{" in scrape(counter))
        victim.kill9()
        # The leader decides: the survivor with the lowest address, whichever it is.
        wait_for(
            "the resolver's decision on a survivor",
            lambda: any("convoke_sbr_decisions_total{" in scrape(n) for n in (oldest, counter)),
        )
        wait_for("the killed member removed", lambda: 'convoke_members{status="Up"} 2' in scrape(oldest))
        for node in (oldest, counter):
            scrape(node)
    finally:
        for node in started:
            node.stop()
    return seen


def main():
    exprs = check_dashboard(DASHBOARD)
    used = used_metrics(exprs, RULES)
    if not used:
        fail("no convoke_ metric found in the dashboard or the rules")
    seen = live_names()
    missing = sorted(used - seen)
    if missing:
        fail(f"metrics used by the dashboard or the rules but served by no live node: {missing}")
    print(f"{len(used)} metric names used by the dashboard and the rules, all served by live nodes:")
    print("  " + " ".join(sorted(used)))


if __name__ == "__main__":
    main()
