//! A real network partition of `convoke run` processes: five nodes, each in its own network
//! namespace behind a router namespace (`support::netns`), split 3|2 by iptables DROP rules in
//! the router. The split-brain resolver (keep-majority) must keep exactly one side.
//!
//! Needs root, `ip` and `iptables` (`.ci/install-test-deps`), so it is opt-in: `.ci/netns` runs
//! it (`cargo test --test partition -- --ignored`). It fails, naming what is missing, rather than
//! skip.

mod support;

use std::time::{Duration, Instant};

use support::fast_sets;
use support::netns::Network;
use support::process::Proc;

const PORT: u16 = 25520;
const T: Duration = Duration::from_secs(90);

fn address(net: &Network, i: usize) -> String {
    format!("convoke://convoke@{}:{PORT}", net.ip(i))
}

/// `convoke run` settings of node `i`: fast failure detection, keep-majority after 2 s of
/// stability, seed node 0, management on 127.0.0.1:8558 of its own namespace.
fn sets(net: &Network, i: usize) -> Vec<String> {
    let mut sets = fast_sets();
    sets.extend([
        format!("cluster.hostname=\"{}\"", net.ip(i)),
        format!("cluster.seed_nodes=[\"{}\"]", address(net, 0)),
        "cluster.split_brain_resolver.active_strategy=\"keep-majority\"".to_owned(),
        "cluster.split_brain_resolver.stable_after=\"2s\"".to_owned(),
        "management.enabled=true".to_owned(),
        "management.hostname=\"127.0.0.1\"".to_owned(),
        "management.port=8558".to_owned(),
    ]);
    sets
}

fn start(net: &Network, i: usize) -> Proc {
    Proc::run_wrapped(&net.wrapper(i), PORT, &sets(net, i))
}

#[ignore = "needs root and network namespaces; run by .ci/netns"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_2_partition_keeps_the_three_up_the_two_exit_1_and_after_healing_the_restarted_pair_rejoins()
 {
    let _live = support::live().await;
    let net = Network::new(5);
    let all: Vec<String> = (0..5).map(|i| address(&net, i)).collect();
    let mut procs: Vec<Proc> = (0..5).map(|i| start(&net, i)).collect();
    for i in 0..5 {
        net.wait_all_up(i, &all, T).await;
    }

    let (majority, minority) = ([0, 1, 2], [3, 4]);
    net.partition(&majority, &minority);
    let cut = Instant::now();
    eprintln!("partitioned {majority:?} | {minority:?}:\n{}", net.rules());

    let mut outcome = Vec::new();
    for i in minority {
        let code = procs[i].exit_code(T).await;
        let exited_after = cut.elapsed();
        assert_eq!(code, Some(1), "node {i} on the minority side must exit 1");
        // `convoke run` says why: the driver's warning and the final line on stderr.
        procs[i].wait_log(&["cluster node shutting down", "this node was downed"], T).await;
        procs[i].wait_log(&["convoke: this node was downed"], T).await;
        outcome.push(format!("node {i} ({}): exited {code:?} after {exited_after:?}", net.ip(i)));
    }
    let survivors: Vec<String> = majority.iter().map(|&i| address(&net, i)).collect();
    for i in majority {
        net.wait_all_up(i, &survivors, T).await;
        for &j in &minority {
            procs[i].wait_log(&["membership change: MemberRemoved", &address(&net, j)], T).await;
        }
        assert!(procs[i].child.try_wait().unwrap().is_none(), "node {i} must keep running");
        outcome.push(format!(
            "node {i} ({}): Up, sees {} members Up after {:?}",
            net.ip(i),
            survivors.len(),
            cut.elapsed()
        ));
    }
    let decided: Vec<usize> = (0..5)
        .filter(|&i| procs[i].logged(&["split-brain resolver decision", "DownUnreachable"]))
        .collect();
    let reversed: Vec<usize> = (0..5)
        .filter(|&i| procs[i].logged(&["split-brain resolver decision", "DownReachable"]))
        .collect();
    assert!(decided.iter().all(|i| majority.contains(i)) && !decided.is_empty(), "{decided:?}");
    assert!(reversed.iter().all(|i| minority.contains(i)) && !reversed.is_empty(), "{reversed:?}");
    eprintln!(
        "partition outcome ({:?} to resolution):\n  {}\n  decided DownUnreachable: nodes {decided:?}; \
         DownReachable: nodes {reversed:?}",
        cut.elapsed(),
        outcome.join("\n  ")
    );

    net.heal();
    for i in minority {
        procs[i] = start(&net, i);
    }
    let rejoin = Instant::now();
    for i in 0..5 {
        net.wait_all_up(i, &all, T).await;
    }
    eprintln!(
        "after healing, the restarted pair rejoined: 5 Up everywhere after {:?}",
        rejoin.elapsed()
    );
    for p in &procs {
        p.term();
    }
    for p in &mut procs {
        assert_eq!(p.exit_code(T).await, Some(0), "port {}: a graceful leave exits 0", p.port);
    }
}
