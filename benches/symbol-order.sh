#!/usr/bin/env bash
# Regenerates link/convoke.order: the functions of the release `convoke` binary that a running
# node executes, one symbol name per line. build.rs hands the file to the linker, which places
# those functions together (docs/benchmarks.md, "Memory of a node process").
#
# Workload: a cluster of NODES processes on 127.0.0.1 (default 20), started together, two of
# them under valgrind's callgrind. Those two form the cluster with the others, see all NODES Up,
# answer the management routes an operator and the probes use, run SETTLE seconds (default 20)
# and leave on SIGINT. Every function callgrind saw either of them execute in the binary is
# listed. Installs valgrind from Debian's packages when it is missing. Rerun it after a toolchain
# or dependency update: `bash benches/process-rss.sh` reports how many listed names the current
# binary still has.
#
#   bash benches/symbol-order.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NODES=${NODES:-20}
SETTLE=${SETTLE:-20}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=link/convoke.order

if ! command -v valgrind >/dev/null; then
    echo "installing valgrind from Debian's packages"
    apt-get update -qq && apt-get install -y -qq valgrind
fi
cargo build --release --locked --bin convoke
BIN=$TARGET_DIR/release/convoke

work=$(mktemp -d)
# shellcheck source=benches/local-cluster.sh
source benches/local-cluster.sh
trap 'stop_local_cluster; rm -rf "$work"' EXIT

# Two nodes run under callgrind: node 1, the seed every other node joins through and, with the
# lowest address, the leader (leader actions, downing decisions), and node NODES, an ordinary
# member that merges concurrent gossip while the cluster forms. Node NODES starts first and finds
# no seed listening yet: it logs the warning and retries, as members that start together with
# their seed do (the log formatting is a large part of the code such a member runs).
profile() {
    local i=$1
    RUST_LOG=warn valgrind --tool=callgrind --demangle=no \
        --callgrind-out-file="$work/callgrind.$i" "$BIN" run \
        --set "cluster.port=$((25900 + i))" \
        --set "management.port=$((8900 + i))" \
        --set 'cluster.seed_nodes=["convoke://convoke@127.0.0.1:25901"]' 2>"$work/valgrind.$i" &
    profiled+=($!)
    pids+=($!) # stopped with the others if the script ends early
}
profiled=()
profile "$NODES"
for _ in $(seq 1 60); do
    grep -q "cannot connect" "$work/valgrind.$NODES" && break
    sleep 1
done
grep -q "cannot connect" "$work/valgrind.$NODES" ||
    { echo "node $NODES logged no failed connection to the seed"; exit 1; }
profile 1
start_local_cluster "$BIN" "$((NODES - 1))" 25900 8900 2

for _ in $(seq 1 300); do
    sees_up 8901 "$NODES" && sees_up $((8900 + NODES)) "$NODES" && break
    sleep 1
done
for port in 8901 $((8900 + NODES)); do
    sees_up "$port" "$NODES" || { echo "the node on $port did not see $NODES Up members"; exit 1; }
done
echo "the profiled nodes see $NODES Up; running ${SETTLE}s with requests to their routes"
for _ in $(seq 1 "$SETTLE"); do
    for port in 8901 $((8900 + NODES)); do
        for route in /cluster/members /ready /alive /metrics /bootstrap/status; do
            curl -sf -o /dev/null "http://127.0.0.1:$port$route" || true
        done
    done
    sleep 1
done
kill -INT "${profiled[@]}"
wait "${profiled[@]}" || true
for i in 1 "$NODES"; do
    [ -s "$work/callgrind.$i" ] || { cat "$work/valgrind.$i"; exit 1; }
done

# callgrind names each object (ob=) and function (fn=) once as `(id) name`, later by `(id)`.
mkdir -p "$(dirname "$OUT")"
python3 - "$(realpath "$BIN")" "$OUT" "$work/callgrind.1" "$work/callgrind.$NODES" <<'EOF'
import re, sys
binary, order, *profiles = sys.argv[1:]
executed = set()
for profile in profiles:
    objects, functions, current = {}, {}, None
    for line in open(profile):
        m = re.match(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        kind, ident, name = m.groups()
        table = objects if kind.endswith("ob") else functions
        if name:
            table[ident] = name
        if kind == "ob":
            current = objects[ident]
        elif kind == "fn" and current == binary:
            # callgrind marks recursion levels with a 'N suffix, and names code it found no
            # symbol for by its address or as "(below main)": those are left out.
            name = re.sub(r"'\d+$", "", functions[ident])
            if not name.startswith(("0x", "(")):
                executed.add(name)
with open(order, "w") as f:
    f.writelines(name + "\n" for name in sorted(executed))
print(f"{len(executed)} functions written to {order}")
EOF
