#!/usr/bin/env bash
# Resident memory of each `convoke run` process in a cluster of NODES processes on 127.0.0.1
# (default 30, default settings: management server on), read from /proc once every node sees all
# NODES Up and the cluster has then run SETTLE seconds (default 10) without changes. Prints the
# smallest, median and largest VmRSS, the same for its anonymous and file-backed parts, and the
# proportional set size (Pss: shared pages divided among the processes that map them).
#
#   bash benches/process-rss.sh            # 30 processes
#   NODES=10 SETTLE=30 bash benches/process-rss.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NODES=${NODES:-30}
SETTLE=${SETTLE:-10}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

cargo build --release --locked --bin convoke
BIN=$TARGET_DIR/release/convoke

# build.rs has the linker place the functions listed in link/convoke.order together; names the
# binary no longer has (after a toolchain or dependency update) lose that, and RSS grows.
listed=$(wc -l <link/convoke.order)
found=$(LC_ALL=C comm -12 <(nm "$BIN" | awk '{ print $NF }' | LC_ALL=C sort -u) \
    <(LC_ALL=C sort -u link/convoke.order) | wc -l)
echo "link/convoke.order: $found of its $listed functions are in the binary" \
    "(regenerate with benches/symbol-order.sh when many are missing)"

# shellcheck source=benches/local-cluster.sh
source benches/local-cluster.sh
start_local_cluster "$BIN" "$NODES" 25700 8700

# Every node's own view must show all NODES Up.
all_up() {
    for i in $(seq 1 "$NODES"); do
        sees_up $((8700 + i)) "$NODES" || return 1
    done
}
for _ in $(seq 1 180); do
    all_up && break
    sleep 1
done
all_up || { echo "the cluster did not reach $NODES Up members on every node"; exit 1; }
echo "all $NODES processes see $NODES Up; letting the cluster run ${SETTLE}s"
sleep "$SETTLE"

# The binary's own pages (RssFile) are shared between the processes; RssAnon is each one's own.
# Pss counts each shared page as a share: a page mapped by all 30 processes counts 1/30 in each.
for field in VmRSS RssAnon RssFile Pss; do
    file=status
    [ "$field" = Pss ] && file=smaps_rollup
    for pid in "${pids[@]}"; do
        awk -v f="$field:" '$1 == f { print $2 }' "/proc/$pid/$file"
    done | sort -n | awk -v n="$NODES" -v f="$field" '
        { v[NR] = $1 }
        END { printf "%-7s per process over %d processes: min %.1f MiB, median %.1f MiB, max %.1f MiB\n",
              f, n, v[1] / 1024, v[int((NR + 1) / 2)] / 1024, v[NR] / 1024 }'
done
