# Sourced by the bench scripts: starts node processes on 127.0.0.1 and stops them on exit.
#
# start_local_cluster BIN NODES CLUSTER_BASE MANAGEMENT_BASE [FIRST]: node i (FIRST..NODES, FIRST
# defaults to 1) listens on CLUSTER_BASE + i and serves management on MANAGEMENT_BASE + i; all
# join through node 1. Their pids are in `pids`, killed when the script exits.
#
# sees_up PORT COUNT: whether the node serving management on PORT lists COUNT members Up.

pids=()
stop_local_cluster() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop_local_cluster EXIT

start_local_cluster() {
    local bin=$1 nodes=$2 cluster_base=$3 management_base=$4 first=${5:-1} i
    local seed="convoke://convoke@127.0.0.1:$((cluster_base + 1))"
    for i in $(seq "$first" "$nodes"); do
        RUST_LOG=warn "$bin" run \
            --set "cluster.port=$((cluster_base + i))" \
            --set "management.port=$((management_base + i))" \
            --set "cluster.seed_nodes=[\"$seed\"]" 2>/dev/null &
        pids+=($!)
    done
}

sees_up() {
    local up
    up=$(curl -sf "http://127.0.0.1:$1/cluster/members" | grep -o '"status":"Up"' | wc -l || true)
    [ "$up" -eq "$2" ]
}
