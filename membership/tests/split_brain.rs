//! Split-brain resolver scenarios on the virtual-time network, modelled on Akka's SBR multi-node
//! specs and checked against the simulator's safety invariants S1–S4 and S14: after a
//! partition at most one side keeps running Up members, every node of the other sides is downed
//! and stops, indirectly connected nodes are downed, and continued instability downs all.

mod net;

use std::time::Duration;

use convoke_membership::MemberStatus;
use convoke_membership::config::{Config, SwitchDuration};
use convoke_membership::sbr::{Decision, DecisionTrigger, InMemoryLeaseTable};

use net::{Net, test_config};

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// The harness's fast settings with `strategy` and `stable_after = 3s` (down-all-when-unstable
/// then defaults to 4 s).
fn sbr_config(strategy: &str) -> Config {
    let mut c = test_config();
    c.split_brain_resolver.active_strategy = strategy.to_owned();
    c.split_brain_resolver.stable_after = SECS(3);
    c
}

/// Splits the cluster into `sides`: no message crosses from one side to another.
fn split(net: &mut Net, sides: &[&[u16]]) {
    for (i, a) in sides.iter().enumerate() {
        for b in &sides[i + 1..] {
            net.partition(a, b);
        }
    }
}

/// S1 and S14 once resolved: the `survivors` are exactly the members, all Up and converged, and
/// every node in `stopped` has shut itself down.
fn resolved(net: &Net, survivors: &[u16], stopped: &[u16]) -> bool {
    stopped.iter().all(|p| !net.is_running(*p)) && (survivors.is_empty() || net.all_up(survivors))
}

/// Runs until the partition is resolved as expected, failing with every node's view otherwise.
fn await_resolution(net: &mut Net, max: Duration, survivors: &[u16], stopped: &[u16]) {
    if net.run_until(max, |n| resolved(n, survivors, stopped)) {
        return;
    }
    let mut report = String::new();
    for (addr, node) in &net.nodes {
        let p = addr.port();
        let view = match &node.core {
            Some(c) => format!(
                "running, members {:?}, unreachable {:?}",
                c.gossip().members().map(|m| (m.address().port(), m.status())).collect::<Vec<_>>(),
                c.state().unreachable.iter().map(|(m, _)| m.address().port()).collect::<Vec<_>>()
            ),
            None => "stopped".to_owned(),
        };
        report.push_str(&format!("\n  {p}: {view}"));
        for (at, d) in &node.decisions {
            report.push_str(&format!("\n     at {at:?}: {d}"));
        }
    }
    panic!("not resolved to survivors {survivors:?}, stopped {stopped:?} after {max:?}:{report}");
}

/// The decisions `port` took, without the ones that downed nobody.
fn decisions(net: &Net, port: u16) -> Vec<(Decision, DecisionTrigger)> {
    net.nodes[&net::addr(port)]
        .decisions
        .iter()
        .filter(|(_, d)| !d.nodes.is_empty())
        .map(|(_, d)| (d.decision, d.trigger))
        .collect()
}

#[test]
fn keep_majority_3_2_the_majority_survives_and_the_minority_shuts_down() {
    let mut net = Net::new(101);
    let cfg = sbr_config("keep-majority");
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    split(&mut net, &[&[1, 2, 3], &[4, 5]]);
    await_resolution(&mut net, SECS(60), &[1, 2, 3], &[4, 5]);
    assert_eq!(decisions(&net, 1), [(Decision::DownUnreachable, DecisionTrigger::Stable)]);
    assert_eq!(decisions(&net, 4), [(Decision::DownReachable, DecisionTrigger::Stable)]);
    for p in [2, 3, 5] {
        assert_eq!(decisions(&net, p), [], "only the leaders decide");
    }

    // After the heal, restarted nodes (new incarnations) join the survivors.
    net.heal();
    for p in [4, 5] {
        net.start_node(p, cfg.clone());
        net.join_seeds(p, &[1, 2, 3]);
    }
    assert!(net.run_until(SECS(60), |n| n.all_up(&[1, 2, 3, 4, 5])));
}

#[test]
fn keep_majority_2_2_the_half_with_the_lowest_address_survives() {
    let mut net = Net::new(102);
    net.form_cluster(&[1, 2, 3, 4], &sbr_config("keep-majority"));
    split(&mut net, &[&[1, 2], &[3, 4]]);
    await_resolution(&mut net, SECS(60), &[1, 2], &[3, 4]);
}

#[test]
fn keep_majority_3_way_split_keeps_the_part_with_the_majority() {
    let mut net = Net::new(103);
    net.form_cluster(&[1, 2, 3, 4, 5, 6, 7], &sbr_config("keep-majority"));
    split(&mut net, &[&[1, 2, 3, 4], &[5, 6], &[7]]);
    await_resolution(&mut net, SECS(60), &[1, 2, 3, 4], &[5, 6, 7]);
}

#[test]
fn keep_majority_3_way_split_without_a_majority_downs_every_part() {
    let mut net = Net::new(104);
    net.form_cluster(&[1, 2, 3, 4, 5], &sbr_config("keep-majority"));
    split(&mut net, &[&[1, 2], &[3, 4], &[5]]);
    await_resolution(&mut net, SECS(60), &[], &[1, 2, 3, 4, 5]);
}

#[test]
fn indirectly_connected_3_nodes_only_the_node_that_reaches_both_survives() {
    // Only 2 <-> 3 is cut: both still talk to 1, and through it to each other.
    let mut net = Net::new(105);
    net.form_cluster(&[1, 2, 3], &sbr_config("keep-majority"));
    net.partition(&[2], &[3]);
    await_resolution(&mut net, SECS(60), &[1], &[2, 3]);
    assert_eq!(decisions(&net, 1), [(Decision::DownIndirectlyConnected, DecisionTrigger::Stable)]);
}

#[test]
fn indirectly_connected_by_a_one_way_block_both_ends_are_downed() {
    let mut net = Net::new(106);
    net.form_cluster(&[1, 2, 3], &sbr_config("keep-majority"));
    net.block(2, 3);
    await_resolution(&mut net, SECS(60), &[1], &[2, 3]);
}

#[test]
fn indirectly_connected_5_nodes_with_a_clean_partition_only_node_1_survives() {
    // {1, 2, 3} | {4, 5} and 2 <-> 3 cut: 2 and 3 are indirectly connected, {4, 5} the minority
    // of the clean partition.
    let mut net = Net::new(107);
    net.form_cluster(&[1, 2, 3, 4, 5], &sbr_config("keep-majority"));
    split(&mut net, &[&[1, 2, 3], &[4, 5]]);
    net.partition(&[2], &[3]);
    await_resolution(&mut net, SECS(60), &[1], &[2, 3, 4, 5]);
    assert_eq!(decisions(&net, 1), [(Decision::DownIndirectlyConnected, DecisionTrigger::Stable)]);
}

#[test]
fn flapping_reachability_during_a_partition_downs_all() {
    // Modelled on DownAllUnstable5NodeSpec: stable_after 10 s, down_all_when_unstable 7 s.
    let mut net = Net::new(108);
    let mut cfg = sbr_config("keep-majority");
    cfg.split_brain_resolver.stable_after = SECS(10);
    cfg.split_brain_resolver.down_all_when_unstable = SwitchDuration::After(SECS(7));
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    split(&mut net, &[&[1, 2, 3], &[4, 5]]);
    assert!(net.run_until(SECS(20), |n| {
        [1, 2, 3].iter().all(|p| n.unreachable_in(*p, 4) && n.unreachable_in(*p, 5))
    }));
    net.run_for(SECS(2));
    assert!([1, 2, 3, 4, 5].iter().all(|p| net.status(1, *p) == Some(MemberStatus::Up)));
    // Reachability keeps changing inside the majority: no stable period comes.
    net.partition(&[2], &[3]);
    net.run_for(SECS(7));
    net.unblock(2, 3);
    await_resolution(&mut net, SECS(30), &[], &[1, 2, 3, 4, 5]);
    // Every node of the majority watches for instability; the first to see it downs them all.
    let majority: Vec<_> = [1, 2, 3].iter().flat_map(|p| decisions(&net, *p)).collect();
    let down_all = (Decision::DownAll, DecisionTrigger::Unstable);
    assert!(!majority.is_empty() && majority.iter().all(|d| *d == down_all), "{majority:?}");
}

/// A 3 | 2 split under lease-majority with `holder` holding the lease beforehand (or nobody).
fn lease_majority_split(seed: u64, holder: Option<u16>) -> Net {
    let mut net = Net::new(seed);
    let table = InMemoryLeaseTable::new();
    net.lease = Some(table.clone());
    let mut cfg = sbr_config("lease-majority");
    cfg.split_brain_resolver.lease_majority.release_after = SECS(5);
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    if let Some(p) = holder {
        assert!(table.acquire("test-convoke-sbr", &format!("127.0.0.1:{p}"), net.now, None));
    }
    split(&mut net, &[&[1, 2, 3], &[4, 5]]);
    net
}

#[test]
fn lease_majority_the_minority_holding_the_lease_survives() {
    let mut net = lease_majority_split(109, Some(4));
    await_resolution(&mut net, SECS(60), &[4, 5], &[1, 2, 3]);
    // The minority's leader found the lease held at once, without waiting out its delay.
    let minority = Decision::AcquireLeaseAndDownUnreachable { acquire_delay: SECS(2) };
    assert_eq!(decisions(&net, 4), [(minority, DecisionTrigger::LeaseHeld)]);
    assert_eq!(decisions(&net, 1), [(Decision::DownReachable, DecisionTrigger::LeaseDenied)]);
}

#[test]
fn lease_majority_the_majority_takes_the_free_lease_and_releases_it_later() {
    let mut net = lease_majority_split(110, None);
    let table = net.lease.clone().unwrap();
    await_resolution(&mut net, SECS(60), &[1, 2, 3], &[4, 5]);
    let majority = Decision::AcquireLeaseAndDownUnreachable { acquire_delay: Duration::ZERO };
    assert_eq!(decisions(&net, 1), [(majority, DecisionTrigger::LeaseAcquired)]);
    // The minority waited 2 s and found the lease taken.
    assert_eq!(decisions(&net, 4), [(Decision::DownReachable, DecisionTrigger::LeaseDenied)]);
    assert_eq!(table.holder("test-convoke-sbr", net.now).as_deref(), Some("127.0.0.1:1"));
    // Released release_after (5 s) after the downed nodes were removed.
    assert!(net.run_until(SECS(10), |n| table.holder("test-convoke-sbr", n.now).is_none()));
}

#[test]
fn a_crashed_node_is_downed_and_removed_after_stable_after() {
    let mut net = Net::new(111);
    net.form_cluster(&[1, 2, 3, 4, 5], &sbr_config("keep-majority"));
    let crashed_at = net.now;
    net.crash(5);
    assert!(net.run_until(SECS(20), |n| [1, 2, 3, 4].iter().all(|p| n.unreachable_in(*p, 5))));
    let unreachable_at = net.now;
    assert!(net.run_until(SECS(30), |n| {
        n.removed_everywhere(&[1, 2, 3, 4], 5) && n.all_up(&[1, 2, 3, 4])
    }));
    let took = net.now - crashed_at;
    assert!(net.now - unreachable_at >= SECS(2), "waited for stable_after: {took:?}");
    assert!(took <= SECS(15), "detection + stable_after + removal took {took:?}");
    let names = net.event_names_about(2, 5);
    assert!(names.ends_with(&["MemberDowned", "MemberRemoved"]), "{names:?}");
}

#[test]
fn keep_oldest_the_side_with_the_oldest_survives_even_as_the_minority() {
    let mut net = Net::new(112);
    net.form_cluster(&[1, 2, 3, 4, 5], &sbr_config("keep-oldest"));
    assert_eq!(net.core(3).state().oldest, Some(net::addr(1)));
    split(&mut net, &[&[1, 2], &[3, 4, 5]]);
    await_resolution(&mut net, SECS(60), &[1, 2], &[3, 4, 5]);
}

#[test]
fn static_quorum_the_side_with_the_quorum_survives() {
    let mut net = Net::new(113);
    let mut cfg = sbr_config("static-quorum");
    cfg.split_brain_resolver.static_quorum.quorum_size = 3;
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    split(&mut net, &[&[1, 2], &[3, 4, 5]]);
    await_resolution(&mut net, SECS(60), &[3, 4, 5], &[1, 2]);
}

#[test]
fn down_all_downs_every_node_on_a_partition() {
    let mut net = Net::new(114);
    net.form_cluster(&[1, 2, 3], &sbr_config("down-all"));
    split(&mut net, &[&[1, 2], &[3]]);
    await_resolution(&mut net, SECS(60), &[], &[1, 2, 3]);
}

#[test]
fn downing_off_leaves_a_partition_unresolved() {
    let mut net = Net::new(115);
    net.form_cluster(&[1, 2, 3], &sbr_config("off"));
    split(&mut net, &[&[1, 2], &[3]]);
    net.run_for(SECS(60));
    assert!([1, 2, 3].iter().all(|p| net.is_running(*p)));
    assert!([1, 2, 3].iter().all(|p| net.status(1, *p) == Some(MemberStatus::Up)));
}

#[test]
fn a_brief_partition_healed_within_stable_after_downs_nobody() {
    let mut net = Net::new(116);
    let mut cfg = sbr_config("keep-majority");
    cfg.split_brain_resolver.stable_after = SECS(10);
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    split(&mut net, &[&[1, 2, 3], &[4, 5]]);
    assert!(net.run_until(SECS(20), |n| n.unreachable_in(1, 4) && n.unreachable_in(4, 1)));
    net.heal();
    net.run_for(SECS(30));
    assert!(net.all_up(&[1, 2, 3, 4, 5]));
}

#[test]
fn a_node_quarantined_by_a_member_downs_itself_but_not_by_a_stranger() {
    let mut net = Net::new(117);
    net.form_cluster(&[1, 2, 3], &sbr_config("keep-majority"));
    let stranger = net.start_node(9, sbr_config("keep-majority"));
    net.with(3, |c, now| c.handle_quarantined_by(now, &stranger));
    net.run_for(SECS(5));
    assert!(net.all_up(&[1, 2, 3]), "a quarantine by a non-member is ignored");

    let member = net.core(1).self_node().clone();
    net.with(3, |c, now| c.handle_quarantined_by(now, &member));
    assert_eq!(
        decisions(&net, 3),
        [(Decision::DownSelfQuarantinedByRemote, DecisionTrigger::QuarantinedByRemote)]
    );
    await_resolution(&mut net, SECS(30), &[1, 2], &[3]);
}
