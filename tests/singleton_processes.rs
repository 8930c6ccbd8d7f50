//! The singleton example (`examples/singleton.rs`) as separate processes: one instance, on the
//! oldest; `kill -9` of its host moves it to the next oldest; SIGTERM hands it over without
//! overlap; a 3|2 partition with the host on the minority side stops the minority's instance
//! before the majority starts its own. Gaps are read off the processes' log timestamps and
//! printed (`--nocapture` shows them).
//!
//! The partition test needs root, `ip` and `iptables`, like `tests/partition.rs`, and is opt-in
//! like it: `.ci/netns` runs it.

mod support;

use std::time::Duration;

use support::fast_sets;
use support::netns::Network;
use support::process::{Proc, address, timestamp};

const T: Duration = Duration::from_secs(90);

/// The example's settings: fast failure detection, keep-majority after 2 s of stability and a
/// 2 s stop allowance (so the removal margin is 2 + 4 + 3 + 0.6 + 2 = 11.6 s: `stable_after`,
/// down-all-when-unstable, failure detection, stop), and `extra`.
fn sets(extra: &[String]) -> Vec<String> {
    let mut sets = fast_sets();
    sets.extend([
        "cluster.split_brain_resolver.active_strategy=\"keep-majority\"".to_owned(),
        "cluster.split_brain_resolver.stable_after=\"2s\"".to_owned(),
        "singleton.hand_over_timeout=\"2s\"".to_owned(),
    ]);
    sets.extend_from_slice(extra);
    sets
}

/// Three example processes on 127.0.0.1: the first forms the cluster, the others join it.
async fn three() -> Vec<Proc> {
    let forming = sets(&[
        "management.enabled=true".to_owned(),
        "management.hostname=\"127.0.0.1\"".to_owned(),
        "management.port=0".to_owned(),
        "management.read_only=false".to_owned(),
        "bootstrap.enabled=false".to_owned(),
    ]);
    let first = Proc::example("singleton", &[], 0, &forming).await;
    first.form().await;
    let seed = format!("cluster.seed_nodes=[\"{}\"]", address(first.port));
    let mut procs = vec![first];
    for _ in 0..2 {
        procs.push(Proc::example("singleton", &[], 0, &sets(std::slice::from_ref(&seed))).await);
    }
    procs[0].wait_log(&["ticker instance started"], T).await;
    // Every process reaches the instance through its proxy.
    let host = format!("host={}", address(procs[0].port));
    for p in &procs {
        p.wait_log(&["the ticker answered", &host], T).await;
    }
    procs
}

/// Which of `candidates` first logs a line with every one of `parts`.
async fn first_to_log(procs: &[Proc], candidates: &[usize], parts: &[&str]) -> usize {
    let waits = candidates.iter().map(|&i| {
        Box::pin(async move {
            procs[i].wait_log(parts, T).await;
            i
        })
    });
    futures::future::select_all(waits).await.0
}

/// The timestamps of `p`'s log lines containing every one of `parts`.
fn times(p: &Proc, parts: &[&str]) -> Vec<f64> {
    p.log().iter().filter(|l| parts.iter().all(|x| l.contains(x))).map(|l| timestamp(l)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_host_moves_the_singleton_to_the_next_oldest() {
    let _live = support::live().await;
    let mut procs = three().await;
    procs[0].wait_count(&["tick", "n=2"], 1, T).await;
    procs[0].kill9().await;
    // The next oldest (of the two that joined together, the lower address) takes over.
    let new = first_to_log(&procs, &[1, 2], &["ticker instance started"]).await;
    let other = 3 - new;
    procs[new].wait_log(&["tick", "n=1"], T).await;
    let last_old = *times(&procs[0], &["tick", "n="]).last().unwrap();
    let first_new = times(&procs[new], &["tick", "n=1"])[0];
    assert!(first_new > last_old);
    assert_eq!(procs[new].count(&["ticker instance started"]), 1);
    eprintln!(
        "kill -9 gap (last tick of the old host to first tick of the new): {:.2} s",
        first_new - last_old
    );
    let host = format!("host={}", address(procs[new].port));
    procs[other].wait_log(&["the ticker answered", &host], T).await;
    assert!(!procs[other].logged(&["ticker instance started"]), "only the next oldest starts it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_host_hands_the_singleton_over_without_overlap() {
    let _live = support::live().await;
    let mut procs = three().await;
    procs[0].wait_count(&["tick", "n=2"], 1, T).await;
    procs[0].term();
    let new = first_to_log(&procs, &[1, 2], &["ticker instance started"]).await;
    let other = 3 - new;
    procs[new].wait_log(&["tick", "n=1"], T).await;
    assert_eq!(procs[0].exit_code(T).await, Some(0));
    let stopped = times(&procs[0], &["ticker instance stopped"])[0];
    let started = times(&procs[new], &["ticker instance started"])[0];
    assert!(
        stopped <= started,
        "the new instance started {:.3} s before the old stopped",
        stopped - started
    );
    let last_old = *times(&procs[0], &["tick", "n="]).last().unwrap();
    let first_new = times(&procs[new], &["tick", "n=1"])[0];
    eprintln!(
        "SIGTERM hand-over: old stopped {:.3} s before the new started; tick gap {:.2} s",
        started - stopped,
        first_new - last_old
    );
    assert!(!procs[other].logged(&["ticker instance started"]));
}

#[ignore = "needs root and network namespaces; run by .ci/netns"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_stops_the_minority_instance_before_the_majority_starts_one() {
    let _live = support::live().await;
    const PORT: u16 = 25520;
    let net = Network::new(5);
    let addr = |i: usize| format!("convoke://convoke@{}:{PORT}", net.ip(i));
    let node_sets = |i: usize| {
        sets(&[
            format!("cluster.hostname=\"{}\"", net.ip(i)),
            format!("cluster.seed_nodes=[\"{}\"]", addr(0)),
            "management.enabled=true".to_owned(),
            "management.hostname=\"127.0.0.1\"".to_owned(),
            "management.port=8558".to_owned(),
        ])
    };
    let mut procs = Vec::new();
    for i in 0..5 {
        procs.push(Proc::example("singleton", &net.wrapper(i), PORT, &node_sets(i)).await);
    }
    procs[0].wait_log(&["ticker instance started"], T).await;
    let host = format!("host={}", addr(0));
    for p in &procs {
        p.wait_log(&["the ticker answered", &host], T).await;
    }
    // Partitioned only once every node sees all five Up: a partition of a cluster still
    // joining is a different story (the resolver downs everyone when it is unstable).
    let all: Vec<String> = (0..5).map(addr).collect();
    for i in 0..5 {
        net.wait_all_up(i, &all, T).await;
    }
    let (minority, majority) = ([0, 1], [2, 3, 4]);
    net.partition(&minority, &majority);
    let new = first_to_log(&procs, &majority, &["ticker instance started"]).await;
    for i in minority {
        assert_eq!(procs[i].exit_code(T).await, Some(1), "node {i} on the minority side is downed");
    }
    let old_stopped = *times(&procs[0], &["tick", "n="]).last().unwrap();
    let new_started = times(&procs[new], &["ticker instance started"])[0];
    assert!(
        old_stopped < new_started,
        "the majority started its instance {:.2} s before the minority's last tick",
        old_stopped - new_started
    );
    assert!(procs[0].logged(&["ticker instance stopped"]), "the downed host stopped its instance");
    eprintln!(
        "partition: minority's last tick {:.2} s before the majority's start",
        new_started - old_stopped
    );
    for i in majority.into_iter().filter(|&i| i != new) {
        assert!(!procs[i].logged(&["ticker instance started"]));
    }
}
