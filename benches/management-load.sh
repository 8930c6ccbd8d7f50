#!/usr/bin/env bash
# Requests/s and latency of `GET /cluster/members` on one node of a 10-node cluster, measured with
# wrk, next to a trivial axum handler measured the same way in the same run, both answering "ok"
# and answering a body as large as the members view. Each target is
# measured ROUNDS times, alternating; the medians are printed at the end. The nodes and the
# trivial server run on WORKERS tokio worker threads each (default 1, the node's default
# `runtime.worker_threads`).
#
#   bash benches/management-load.sh            # 10 nodes, 3 rounds of 10 s, 32 connections
#   NODES=10 ROUNDS=5 DURATION=20s CONNECTIONS=64 WORKERS=2 bash benches/management-load.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NODES=${NODES:-10}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
WORKERS=${WORKERS:-1}
export CONVOKE_RUNTIME__WORKER_THREADS=$WORKERS
TARGET_DIR=${CARGO_TARGET_DIR:-target}

if ! command -v wrk >/dev/null; then
    echo "installing wrk from Debian's packages"
    apt-get update -qq && apt-get install -y -qq wrk
fi
cargo build --release --locked --bin convoke --example trivial_http
BIN=$TARGET_DIR/release/convoke
TRIVIAL=$TARGET_DIR/release/examples/trivial_http

# shellcheck source=benches/local-cluster.sh
source benches/local-cluster.sh
start_local_cluster "$BIN" "$NODES" 25600 8600
members=http://127.0.0.1:8601/cluster/members
for _ in $(seq 1 120); do
    sees_up 8601 "$NODES" && break
    sleep 1
done
sees_up 8601 "$NODES" || { echo "the cluster did not reach $NODES Up members"; exit 1; }
size=$(curl -sf "$members" | wc -c)
echo "cluster of $NODES Up; response size $size bytes"
# The trivial server's /sized answers a body of the same size: it tells the cost of the bytes
# (writing, and wrk reading them on the same cores) from the cost of the route.
"$TRIVIAL" 8600 "$size" "$WORKERS" &
pids+=($!)
for _ in $(seq 1 50); do curl -sf http://127.0.0.1:8600/ >/dev/null && break; sleep 0.1; done

# Prints "requests/s p50_ms p99_ms" for one wrk run.
measure() {
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "$1" | awk '
        /Requests\/sec/ { rps = $2 }
        function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; return v * 1000 }
        $1 == "50%" { p50 = ms($2) }
        $1 == "99%" { p99 = ms($2) }
        /Non-2xx/ { bad = $NF }
        END { if (bad) { print "non-2xx answers: " bad > "/dev/stderr"; exit 1 }; printf "%.0f %.3f %.3f\n", rps, p50, p99 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >/tmp/convoke-load-members
: >/tmp/convoke-load-trivial
: >/tmp/convoke-load-sized
for round in $(seq 1 "$ROUNDS"); do
    m=$(measure "$members"); echo "round $round  /cluster/members  $m"; echo "$m" >>/tmp/convoke-load-members
    t=$(measure http://127.0.0.1:8600/); echo "round $round  trivial axum      $t"; echo "$t" >>/tmp/convoke-load-trivial
    z=$(measure http://127.0.0.1:8600/sized); echo "round $round  trivial, same size $z"; echo "$z" >>/tmp/convoke-load-sized
done

report() {
    printf '%-20s requests/s %8s   p50 %6s ms   p99 %6s ms\n' "$1" \
        "$(cut -d' ' -f1 "$2" | median)" "$(cut -d' ' -f2 "$2" | median)" "$(cut -d' ' -f3 "$2" | median)"
}
echo
echo "medians of $ROUNDS rounds, wrk -t1 -c$CONNECTIONS -d$DURATION, $NODES-node cluster," \
    "$WORKERS worker thread(s) per server:"
report "GET /cluster/members" /tmp/convoke-load-members
report "trivial axum GET /" /tmp/convoke-load-trivial
report "trivial, $size bytes" /tmp/convoke-load-sized
ratio() { awk -v a="$(cut -d' ' -f1 "$1" | median)" -v b="$(cut -d' ' -f1 "$2" | median)" 'BEGIN { printf "%.2f", a / b }'; }
echo "GET /cluster/members / trivial: $(ratio /tmp/convoke-load-members /tmp/convoke-load-trivial)x;" \
    "/ trivial with a body of the same size: $(ratio /tmp/convoke-load-members /tmp/convoke-load-sized)x"
