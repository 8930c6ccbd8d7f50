//! Multi-node scenarios of the membership core on a virtual-time network, modelled on Akka's
//! multi-node cluster specs.

mod net;

use std::collections::BTreeSet;
use std::time::Duration;

use convoke_membership::MemberStatus::*;

use net::{Net, test_config};

const SECS: fn(u64) -> Duration = Duration::from_secs;

#[test]
fn node_up_two_nodes_become_up_after_convergence() {
    let mut net = Net::new(1);
    net.form_cluster(&[1, 2], &test_config());
    assert_eq!(net.leader(2), Some(1));
    let names = net.event_names_about(2, 1);
    assert!(names.contains(&"MemberUp"), "{names:?}");
}

#[test]
fn node_up_join_to_a_non_member_is_ignored() {
    let mut net = Net::new(2);
    net.start_node(1, test_config());
    net.start_node(2, test_config());
    net.join(2, 1);
    net.run_for(SECS(5));
    assert_eq!(net.status(2, 2), None);
    assert_eq!(net.status(1, 2), None);
}

#[test]
fn node_membership_three_nodes_converge_on_the_same_gossip_and_ages_follow_join_order() {
    let mut net = Net::new(3);
    let cfg = test_config();
    net.start_node(1, cfg.clone());
    net.join(1, 1);
    net.run_for(SECS(1));
    for p in [2, 3] {
        net.start_node(p, cfg.clone());
        net.join(p, 1);
        assert!(net.run_until(SECS(20), |n| n.all_up(&[1, 2, 3][..p as usize])));
    }
    let versions: Vec<_> =
        [1, 2, 3].iter().map(|p| net.core(*p).gossip().version().clone()).collect();
    assert!(versions.windows(2).all(|w| w[0] == w[1]));
    let g = net.core(3).gossip();
    let m: Vec<_> = g.members().collect();
    assert!(m[0].is_older_than(m[1]) && m[1].is_older_than(m[2]));
}

#[test]
fn convergence_no_member_goes_up_while_a_node_is_unreachable() {
    let mut net = Net::new(4);
    let mut cfg = test_config();
    cfg.allow_weakly_up_members = None;
    net.form_cluster(&[1, 2, 3], &cfg);
    net.crash(3);
    assert!(net.run_until(SECS(20), |n| n.unreachable_in(1, 3) && n.unreachable_in(2, 3)));
    assert!(!net.core(1).convergence());
    net.start_node(4, cfg.clone());
    net.join(4, 1);
    net.run_for(SECS(20));
    assert_eq!(net.status(1, 4), Some(Joining), "a joiner is not moved Up without convergence");
    // Downing the dead node restores convergence, and the joiner goes Up.
    net.with(1, |c, now| c.down(now, &net::addr(3)));
    assert!(net.run_until(SECS(20), |n| n.all_up(&[1, 2, 4])));
}

#[test]
fn leader_election_the_next_address_takes_over_when_the_leader_is_killed_and_downed() {
    let mut net = Net::new(5);
    net.form_cluster(&[1, 2, 3, 4], &test_config());
    for (dead, next, alive) in [(1u16, 2u16, vec![2u16, 3, 4]), (2, 3, vec![3, 4])] {
        assert!(alive.iter().all(|p| net.leader(*p) == Some(dead)));
        net.crash(dead);
        assert!(net.run_until(SECS(20), |n| alive.iter().all(|p| n.unreachable_in(*p, dead))));
        net.with(next, |c, now| c.down(now, &net::addr(dead)));
        assert!(net.run_until(SECS(20), |n| n.all_up(&alive)));
        assert!(alive.iter().all(|p| net.leader(*p) == Some(next)));
    }
}

#[test]
fn leader_leaving_goes_through_exiting_to_removed_and_a_new_leader_is_elected() {
    let mut net = Net::new(6);
    net.form_cluster(&[1, 2, 3], &test_config());
    net.with(1, |c, now| c.leave(now, &net::addr(1)));
    assert!(net.run_until(SECS(30), |n| n.removed_everywhere(&[2, 3], 1) && n.all_up(&[2, 3])));
    assert!(!net.is_running(1), "the leaving node shut itself down");
    assert_eq!(net.leader(2), Some(2));
    for p in [2, 3] {
        let names = net.event_names_about(p, 1);
        assert!(names.contains(&"MemberLeft") || names.contains(&"MemberExited"), "{names:?}");
        assert_eq!(names.last(), Some(&"MemberRemoved"), "{names:?}");
        assert!(
            !names.contains(&"UnreachableMember"),
            "graceful leave is not a failure: {names:?}"
        );
    }
}

#[test]
fn node_leaving_and_exiting_and_being_removed() {
    let mut net = Net::new(7);
    net.form_cluster(&[1, 2, 3], &test_config());
    net.with(1, |c, now| c.leave(now, &net::addr(3)));
    assert!(net.run_until(SECS(30), |n| n.removed_everywhere(&[1, 2], 3)));
    for p in [1, 2] {
        let names = net.event_names_about(p, 3);
        assert!(names.contains(&"MemberExited"), "{names:?}");
        match net.events(p).iter().rev().find(|(_, e)| e.type_name() == "MemberRemoved") {
            Some((_, convoke_membership::ClusterEvent::MemberRemoved { previous_status, .. })) => {
                assert_eq!(*previous_status, Exiting);
            }
            other => panic!("{other:?}"),
        }
        assert!(!net.core(p).gossip().seen().iter().any(|n| n.address.port() == 3));
    }
}

#[test]
fn client_downing_a_node_that_is_up_removes_it() {
    let mut net = Net::new(8);
    net.form_cluster(&[1, 2, 3, 4], &test_config());
    net.with(2, |c, now| c.down(now, &net::addr(4)));
    assert!(
        net.run_until(SECS(30), |n| n.removed_everywhere(&[1, 2, 3], 4) && n.all_up(&[1, 2, 3]))
    );
    assert!(!net.is_running(4), "the downed node shut itself down");
}

#[test]
fn client_downing_a_node_that_is_unreachable_removes_it() {
    let mut net = Net::new(9);
    net.form_cluster(&[1, 2, 3, 4], &test_config());
    net.crash(3);
    assert!(net.run_until(SECS(20), |n| [1, 2, 4].iter().all(|p| n.unreachable_in(*p, 3))));
    net.with(4, |c, now| c.down(now, &net::addr(3)));
    assert!(
        net.run_until(SECS(30), |n| n.removed_everywhere(&[1, 2, 4], 3) && n.all_up(&[1, 2, 4]))
    );
}

#[test]
fn min_members_before_up_the_leader_waits_for_min_nr_of_members() {
    let mut net = Net::new(10);
    let mut cfg = test_config();
    cfg.min_nr_of_members = 3;
    net.start_node(1, cfg.clone());
    net.join(1, 1);
    net.start_node(2, cfg.clone());
    net.join(2, 1);
    net.run_for(SECS(10));
    assert_eq!(net.status(1, 1), Some(Joining));
    assert_eq!(net.status(1, 2), Some(Joining));
    net.start_node(3, cfg.clone());
    net.join(3, 1);
    assert!(net.run_until(SECS(20), |n| n.all_up(&[1, 2, 3])));
}

#[test]
fn min_members_before_up_per_role() {
    let mut net = Net::new(11);
    let mut front = test_config();
    front.roles.insert("frontend".into());
    front.role_min_nr_of_members.insert("backend".into(), 2);
    let mut back = front.clone();
    back.roles = ["backend".to_owned()].into();
    net.start_node(1, front.clone());
    net.join(1, 1);
    net.start_node(2, back.clone());
    net.join(2, 1);
    net.start_node(3, front.clone());
    net.join(3, 1);
    net.run_for(SECS(10));
    assert!([1, 2, 3].iter().all(|p| net.status(1, *p) == Some(Joining)));
    net.start_node(4, back);
    net.join(4, 1);
    assert!(net.run_until(SECS(20), |n| n.all_up(&[1, 2, 3, 4])));
}

#[test]
fn member_weakly_up_a_join_during_a_partition_goes_weakly_up_then_up_after_heal() {
    let mut net = Net::new(12);
    let mut cfg = test_config();
    cfg.allow_weakly_up_members = Some(SECS(3));
    net.form_cluster(&[1, 2, 3, 4, 5], &cfg);
    net.partition(&[1, 2, 3], &[4, 5]);
    assert!(net.run_until(SECS(20), |n| n.unreachable_in(1, 4) && n.unreachable_in(4, 1)));
    net.start_node(6, cfg.clone());
    net.join(6, 1);
    net.start_node(7, cfg.clone());
    net.join(7, 4);
    assert!(net.run_until(SECS(20), |n| {
        n.status(1, 6) == Some(WeaklyUp) && n.status(4, 7) == Some(WeaklyUp)
    }));
    net.heal();
    assert!(net.run_until(SECS(60), |n| n.all_up(&[1, 2, 3, 4, 5, 6, 7])));
}

#[test]
fn deterministic_oldest_when_joining_the_first_seed_in_the_list_gets_up_number_one() {
    let mut net = Net::new(13);
    let cfg = test_config();
    let seeds = [3u16, 2, 1];
    for p in [1, 2, 3] {
        net.start_node(p, cfg.clone());
    }
    for p in [1, 2, 3] {
        net.join_seeds(p, &seeds);
    }
    assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3])));
    for p in [1, 2, 3] {
        assert_eq!(net.core(p).state().oldest, Some(net::addr(3)));
    }
}

#[test]
fn join_seed_node_three_seeds_started_at_once_form_one_cluster_and_others_join_through_them() {
    let mut net = Net::new(14);
    let mut cfg = test_config();
    cfg.app_version = "1.0.0".into();
    for p in [1, 2, 3] {
        net.start_node(p, cfg.clone());
    }
    for p in [1, 2, 3] {
        net.join_seeds(p, &[1, 2, 3]);
    }
    assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3])));
    for p in [4, 5] {
        net.start_node(p, cfg.clone());
        net.join_seeds(p, &[1, 2, 3]);
    }
    assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3, 4, 5])));
    let v = net.core(1).gossip().members().map(|m| m.app_version().to_string()).collect::<Vec<_>>();
    assert!(v.iter().all(|v| v == "1.0.0"));
}

#[test]
fn disallow_join_of_two_clusters() {
    let mut net = Net::new(15);
    let cfg = test_config();
    net.form_cluster(&[1, 2], &cfg);
    net.form_cluster(&[3, 4], &cfg);
    net.form_cluster(&[5, 6], &cfg);
    // Members of formed clusters try to join other clusters: refused locally.
    for (p, to) in [(1u16, 3u16), (3, 5), (5, 1)] {
        let r = net.with(p, |c, now| c.join(now, net::addr(to)));
        assert!(r.is_err());
    }
    net.run_for(SECS(10));
    for (p, members) in [(1u16, vec![1u16, 2]), (3, vec![3, 4]), (5, vec![5, 6])] {
        assert_eq!(net.member_ports(p), members);
    }
}

#[test]
fn initial_heartbeat_a_node_blackholed_right_after_joining_is_still_detected() {
    let mut net = Net::new(16);
    let cfg = test_config();
    net.form_cluster(&[1, 2], &cfg);
    net.start_node(3, cfg.clone());
    net.join(3, 1);
    assert!(net.run_until(SECS(10), |n| n.status(3, 3).is_some() && n.status(1, 3).is_some()));
    // Cut node 3 off before any heartbeat round trip with it can complete.
    net.partition(&[3], &[1, 2]);
    assert!(net.run_until(SECS(30), |n| n.unreachable_in(1, 3) && n.unreachable_in(2, 3)));
}

#[test]
fn restart_node_a_new_incarnation_on_the_same_port_joins_after_the_old_one_is_downed() {
    let mut net = Net::new(17);
    let cfg = test_config();
    net.form_cluster(&[1, 2, 3], &cfg);
    let old = net.core(3).self_node().clone();
    net.crash(3);
    let new = net.start_node(3, cfg.clone());
    assert_ne!(old, new);
    net.join_seeds(3, &[1, 2]);
    // The new incarnation's Join marks the old one Terminated and Down; once it is removed the new
    // one is admitted on a retry.
    assert!(net.run_until(SECS(60), |n| n.all_up(&[1, 2, 3])));
    let members: Vec<_> = net.core(1).gossip().members().map(|m| m.node().clone()).collect();
    assert!(members.contains(&new) && !members.contains(&old));
}

#[test]
fn unreachable_node_joins_again_after_being_downed_and_removed() {
    let mut net = Net::new(18);
    let cfg = test_config();
    net.form_cluster(&[1, 2, 3, 4], &cfg);
    net.partition(&[4], &[1, 2, 3]);
    assert!(net.run_until(SECS(20), |n| [1, 2, 3].iter().all(|p| n.unreachable_in(*p, 4))));
    net.with(1, |c, now| c.down(now, &net::addr(4)));
    assert!(net.run_until(SECS(30), |n| n.removed_everywhere(&[1, 2, 3], 4)));
    net.crash(4);
    net.heal();
    net.start_node(4, cfg.clone());
    net.join_seeds(4, &[1, 2, 3]);
    assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3, 4])));
}

#[test]
fn node_churn_gossip_size_does_not_grow_across_rounds_of_joins_leaves_and_downs() {
    let mut net = Net::new(19);
    let mut cfg = test_config();
    cfg.prune_gossip_tombstones_after = SECS(1);
    net.form_cluster(&[1, 2, 3], &cfg);
    let mut sizes = Vec::new();
    for round in 0..5u16 {
        let a = 10 + round * 2;
        let b = a + 1;
        for p in [a, b] {
            net.start_node(p, cfg.clone());
            net.join_seeds(p, &[1, 2, 3]);
        }
        assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3, a, b])), "round {round} join");
        net.with(a, |c, now| c.leave(now, &net::addr(a)));
        net.crash(b);
        assert!(net.run_until(SECS(20), |n| n.unreachable_in(1, b)));
        net.with(1, |c, now| c.down(now, &net::addr(b)));
        assert!(net.run_until(SECS(30), |n| n.all_up(&[1, 2, 3])), "round {round} removal");
        net.run_for(SECS(3));
        let g = net.core(1).gossip();
        // What the departed leave behind: nothing. The survivors may keep their own reachability
        // versions (an observer's version outlives its rows, as it must to win merges), which
        // are bounded by the members, not by the churn.
        let members: BTreeSet<_> = g.members().map(|m| m.node().clone()).collect();
        assert!(g.reachability().nodes().is_subset(&members), "round {round}: {g:?}");
        sizes.push((g.len(), g.version().len(), g.tombstones().len()));
    }
    assert!(sizes.iter().all(|s| *s == sizes[0]), "gossip grew across churn: {sizes:?}");
    assert_eq!(sizes[0].2, 0, "tombstones were pruned");
}

#[test]
fn sunny_weather_a_stable_cluster_emits_no_events_over_ten_minutes() {
    let mut net = Net::new(20);
    net.form_cluster(&[1, 2, 3, 4, 5], &test_config());
    let before: Vec<usize> = [1, 2, 3, 4, 5].iter().map(|p| net.events(*p).len()).collect();
    net.run_for(Duration::from_secs(600));
    let after: Vec<usize> = [1, 2, 3, 4, 5].iter().map(|p| net.events(*p).len()).collect();
    assert_eq!(before, after);
    assert!(net.all_up(&[1, 2, 3, 4, 5]));
}

#[test]
fn cluster_shutdown_all_reach_ready_for_shutdown_a_joiner_stays_out_and_members_can_leave() {
    let mut net = Net::new(21);
    let cfg = test_config();
    net.form_cluster(&[1, 2, 3], &cfg);
    net.with(2, |c, now| c.prepare_for_full_shutdown(now));
    assert!(net.run_until(SECS(20), |n| {
        [1, 2, 3]
            .iter()
            .all(|p| [1, 2, 3].iter().all(|q| n.status(*p, *q) == Some(ReadyForShutdown)))
    }));
    net.start_node(4, cfg.clone());
    net.join(4, 1);
    net.run_for(SECS(10));
    assert_eq!(net.status(1, 4), None, "no new member during a full shutdown");
    for p in [1, 2, 3] {
        net.with(p, |c, now| c.leave(now, &net::addr(p)));
    }
    let done = net.run_until(SECS(60), |n| [1, 2, 3].iter().all(|p| !n.is_running(*p)));
    for p in [1u16, 2, 3] {
        if net.is_running(p) {
            eprintln!(
                "{p}: {:?} conv={}",
                [1u16, 2, 3].map(|q| net.status(p, q)),
                net.core(p).convergence()
            );
        }
    }
    assert!(done);
}

#[test]
fn a_run_is_a_pure_function_of_its_seed() {
    fn run(seed: u64) -> (u64, u64) {
        let mut net = Net::new(seed);
        net.max_delay = Duration::from_millis(50);
        net.drop_rate = 0.05;
        net.form_cluster(&[1, 2, 3, 4, 5], &test_config());
        net.crash(5);
        net.run_for(SECS(20));
        net.with(1, |c, now| c.down(now, &net::addr(5)));
        net.run_for(SECS(20));
        (net.trace_hash(), net.delivered)
    }
    assert_eq!(run(99), run(99));
    assert_ne!(run(99), run(100));
}

mod random_faults {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Fault {
        Crash(u16),
        Partition(Vec<u16>),
        Heal,
        Leave(u16, u16),
        Down(u16, u16),
        Join(u16),
        PrepareShutdown(u16),
        Wait(u64),
    }

    fn fault() -> impl Strategy<Value = Fault> {
        prop_oneof![
            (1u16..=6).prop_map(Fault::Crash),
            prop::collection::vec(1u16..=6, 1..4).prop_map(Fault::Partition),
            Just(Fault::Heal),
            (1u16..=6, 1u16..=6).prop_map(|(a, b)| Fault::Leave(a, b)),
            (1u16..=6, 1u16..=6).prop_map(|(a, b)| Fault::Down(a, b)),
            (7u16..=9).prop_map(Fault::Join),
            (1u16..=6).prop_map(Fault::PrepareShutdown),
            (1u64..20).prop_map(Fault::Wait),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Every status change any node reports follows the transition graph (the network checks
        /// each event), whatever crashes, partitions, leaves, downs and joins happen.
        #[test]
        fn no_member_status_moves_outside_the_allowed_graph(
            seed in any::<u64>(),
            faults in prop::collection::vec(fault(), 1..12),
        ) {
            let mut net = Net::new(seed);
            net.max_delay = Duration::from_millis(30);
            net.drop_rate = 0.02;
            let cfg = test_config();
            net.form_cluster(&[1, 2, 3, 4, 5, 6], &cfg);
            let all: Vec<u16> = (1..=6).collect();
            for f in faults {
                match f {
                    Fault::Crash(p) => net.crash(p),
                    Fault::Partition(side) => {
                        let other: Vec<u16> = all.iter().copied().filter(|p| !side.contains(p)).collect();
                        net.partition(&side, &other);
                    }
                    Fault::Heal => net.heal(),
                    Fault::Leave(by, p) if net.is_running(by) => net.with(by, |c, now| c.leave(now, &net::addr(p))),
                    Fault::Down(by, p) if net.is_running(by) => net.with(by, |c, now| c.down(now, &net::addr(p))),
                    Fault::Join(p) if !net.is_running(p) => {
                        net.start_node(p, cfg.clone());
                        net.join_seeds(p, &[1, 2, 3]);
                    }
                    Fault::PrepareShutdown(p) if net.is_running(p) => {
                        net.with(p, |c, now| c.prepare_for_full_shutdown(now));
                    }
                    Fault::Wait(s) => net.run_for(SECS(s)),
                    _ => {}
                }
                net.run_for(Duration::from_millis(500));
            }
            net.heal();
            net.run_for(SECS(30));
        }
    }
}

/// Found by `no_member_status_moves_outside_the_allowed_graph`: with this seed (2% of messages
/// dropped) node 4's Welcome is lost twice and one of its Join retries too. The other nodes admit
/// it and gossip to it; it takes that gossip in place of the lost Welcome instead of waiting for
/// join retries past the test's 30 s.
#[test]
fn six_nodes_form_with_seed_5535249343507809980_and_two_percent_drops() {
    let mut net = net::Net::new(5_535_249_343_507_809_980);
    net.max_delay = std::time::Duration::from_millis(30);
    net.drop_rate = 0.02;
    net.form_cluster(&[1, 2, 3, 4, 5, 6], &test_config());
}
