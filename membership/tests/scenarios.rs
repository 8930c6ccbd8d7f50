//! Multi-node scenarios of the membership core on a virtual-time network, modelled on the
//! multi-node specs listed in spec §11.

mod net;

use std::time::Duration;

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
