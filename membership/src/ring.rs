//! The heartbeat ring: which nodes a node sends heartbeats to, so that every node is monitored by a
//! bounded number of others instead of by everyone.
//!
//! All tracked nodes, self included, sit on a ring ordered by uid and then by [`UniqueAddress`]
//! ordering. Uids are random, so the placement is pseudo-random yet identical on every node that
//! knows the same members. A node heartbeats the next `monitored_by_nr_of_members` reachable nodes
//! clockwise after itself; unreachable nodes met along the way are heartbeated too (without counting)
//! so that someone keeps watching them and can see them come back or go away.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::address::UniqueAddress;

/// The default number of nodes that heartbeat each node.
pub const DEFAULT_MONITORED_BY_NR_OF_MEMBERS: usize = 9;

/// The nodes of one data center on the heartbeat ring, and which of them are unreachable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatNodeRing {
    self_node: UniqueAddress,
    nodes: BTreeSet<RingPosition>,
    unreachable: BTreeSet<UniqueAddress>,
    monitored_by_nr_of_members: usize,
}

impl HeartbeatNodeRing {
    /// A ring holding only `self_node`.
    pub fn new(self_node: UniqueAddress, monitored_by_nr_of_members: usize) -> Self {
        let nodes = BTreeSet::from([RingPosition(self_node.clone())]);
        Self { self_node, nodes, unreachable: BTreeSet::new(), monitored_by_nr_of_members }
    }

    /// A ring of `nodes` (self is added if missing) of which `unreachable` are unreachable.
    pub fn with_nodes(
        self_node: UniqueAddress,
        nodes: impl IntoIterator<Item = UniqueAddress>,
        unreachable: impl IntoIterator<Item = UniqueAddress>,
        monitored_by_nr_of_members: usize,
    ) -> Self {
        let mut ring = Self::new(self_node, monitored_by_nr_of_members);
        ring.nodes.extend(nodes.into_iter().map(RingPosition));
        ring.unreachable.extend(unreachable);
        ring
    }

    /// The node this ring belongs to.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// How many reachable nodes heartbeat each node.
    pub fn monitored_by_nr_of_members(&self) -> usize {
        self.monitored_by_nr_of_members
    }

    /// The nodes in ring order.
    pub fn nodes(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.nodes.iter().map(|p| &p.0)
    }

    /// The nodes marked unreachable, in [`UniqueAddress`] order. May name nodes not (yet) on the ring.
    pub fn unreachable(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.unreachable.iter()
    }

    /// The number of nodes on the ring, self included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: the ring holds at least self.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether `node` is on the ring.
    pub fn contains(&self, node: &UniqueAddress) -> bool {
        self.nodes.contains(&RingPosition(node.clone()))
    }

    /// Whether `node` is marked unreachable.
    pub fn is_unreachable(&self, node: &UniqueAddress) -> bool {
        self.unreachable.contains(node)
    }

    /// Puts `node` on the ring; returns whether it was new.
    pub fn add_node(&mut self, node: UniqueAddress) -> bool {
        self.nodes.insert(RingPosition(node))
    }

    /// Takes `node` off the ring and forgets that it was unreachable; returns whether anything
    /// changed. Self cannot be removed.
    pub fn remove_node(&mut self, node: &UniqueAddress) -> bool {
        if *node == self.self_node {
            return false;
        }
        let was_unreachable = self.unreachable.remove(node);
        self.nodes.remove(&RingPosition(node.clone())) || was_unreachable
    }

    /// Marks `node` unreachable (`true`) or reachable (`false`); returns whether that changed.
    pub fn set_unreachable(&mut self, node: &UniqueAddress, unreachable: bool) -> bool {
        if unreachable {
            self.unreachable.insert(node.clone())
        } else {
            self.unreachable.remove(node)
        }
    }

    /// Replaces the unreachable set.
    pub fn reset_unreachable(&mut self, unreachable: impl IntoIterator<Item = UniqueAddress>) {
        self.unreachable = unreachable.into_iter().collect();
    }

    /// The nodes that `sender` heartbeats.
    ///
    /// When there are no more than `monitored_by_nr_of_members` other nodes, that is every node but
    /// `sender`. Otherwise walk the ring clockwise from just after `sender`, wrapping around, and take
    /// nodes until `monitored_by_nr_of_members` reachable ones are taken. An unreachable node met on
    /// the way is taken without counting while fewer than `monitored_by_nr_of_members` nodes have been
    /// taken in total, and skipped after that. So the result can be larger than
    /// `monitored_by_nr_of_members` when unreachable nodes sit in the slice.
    ///
    /// A `sender` that is not on the ring starts the walk at the first node after where it would be.
    pub fn receivers(&self, sender: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        let n = self.monitored_by_nr_of_members;
        if n >= self.nodes.len().saturating_sub(1) {
            return self.nodes().filter(|node| *node != sender).cloned().collect();
        }
        let from = RingPosition(sender.clone());
        let after =
            self.nodes.range((std::ops::Bound::Excluded(&from), std::ops::Bound::Unbounded));
        let before = self.nodes.range(..&from);
        let mut taken = BTreeSet::new();
        let mut reachable_left = n;
        for RingPosition(node) in after.chain(before) {
            if reachable_left == 0 {
                break;
            }
            if self.unreachable.contains(node) {
                if taken.len() < n {
                    taken.insert(node.clone());
                }
                continue;
            }
            taken.insert(node.clone());
            reachable_left -= 1;
        }
        taken
    }

    /// The nodes this node heartbeats: [`receivers`](Self::receivers) of self.
    pub fn my_receivers(&self) -> BTreeSet<UniqueAddress> {
        self.receivers(&self.self_node)
    }
}

/// A node ordered by its place on the ring: uid first, then [`UniqueAddress`] order. The uid is random
/// per incarnation, which spreads nodes pseudo-randomly; the tie-break keeps the order total.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RingPosition(UniqueAddress);

impl Ord for RingPosition {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.uid.get().cmp(&other.0.uid.get()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for RingPosition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Address, Uid};

    fn node(host: &str, uid: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, 2552).unwrap(), Uid::new(uid).unwrap())
    }

    /// Six nodes whose uids put them on the ring in the order aa, bb, cc, dd, ee, ff.
    fn six() -> [UniqueAddress; 6] {
        [node("aa", 1), node("bb", 2), node("cc", 3), node("dd", 4), node("ee", 5), node("ff", 6)]
    }

    fn set<const K: usize>(nodes: [&UniqueAddress; K]) -> BTreeSet<UniqueAddress> {
        nodes.into_iter().cloned().collect()
    }

    #[test]
    fn nodes_are_ordered_by_uid_then_by_address() {
        let ring = HeartbeatNodeRing::with_nodes(
            node("zz", 1),
            [node("aa", 30), node("mm", 2), node("bb", 2), node("cc", u64::MAX)],
            [],
            3,
        );
        let order: Vec<String> = ring.nodes().map(|n| n.address.host().to_owned()).collect();
        assert_eq!(order, ["zz", "bb", "mm", "aa", "cc"]);
    }

    #[test]
    fn each_node_has_the_specified_number_of_receivers_when_all_are_reachable() {
        let [_, _, cc, ..] = six();
        let ring = HeartbeatNodeRing::with_nodes(cc.clone(), six(), [], 3);
        assert_eq!(ring.my_receivers(), ring.receivers(&cc));
        for n in six() {
            let receivers = ring.receivers(&n);
            assert_eq!(receivers.len(), 3, "{n}");
            assert!(!receivers.contains(&n));
        }
    }

    #[test]
    fn receivers_are_the_next_nodes_clockwise_wrapping_around() {
        let [aa, bb, cc, dd, ee, ff] = six();
        let ring = HeartbeatNodeRing::with_nodes(cc.clone(), six(), [], 3);
        assert_eq!(ring.receivers(&aa), set([&bb, &cc, &dd]));
        assert_eq!(ring.receivers(&dd), set([&ee, &ff, &aa]));
        assert_eq!(ring.receivers(&ff), set([&aa, &bb, &cc]));
    }

    #[test]
    fn every_node_is_monitored_by_the_specified_number_of_others_when_all_are_reachable() {
        let nodes: Vec<UniqueAddress> =
            (1..=20).map(|i| node(&format!("n{i}"), i * 7919 % 101 + 1)).collect();
        let ring = HeartbeatNodeRing::with_nodes(nodes[0].clone(), nodes.clone(), [], 5);
        for monitored in &nodes {
            let watchers = nodes.iter().filter(|s| ring.receivers(s).contains(monitored)).count();
            assert_eq!(watchers, 5, "{monitored}");
        }
    }

    #[test]
    fn unreachable_nodes_in_the_slice_are_taken_without_counting() {
        let [aa, bb, cc, dd, ee, ff] = six();
        let ring = HeartbeatNodeRing::with_nodes(
            cc.clone(),
            six(),
            [aa.clone(), dd.clone(), ee.clone()],
            3,
        );
        assert_eq!(ring.my_receivers(), ring.receivers(&cc));
        // After three nodes are taken, further unreachable ones are skipped.
        assert_eq!(ring.receivers(&aa), set([&bb, &cc, &dd, &ff]));
        assert_eq!(ring.receivers(&bb), set([&cc, &dd, &ee, &ff]));
        assert_eq!(ring.receivers(&cc), set([&dd, &ee, &ff, &bb]));
        assert_eq!(ring.receivers(&dd), set([&ee, &ff, &aa, &bb, &cc]));
        assert_eq!(ring.receivers(&ee), set([&ff, &aa, &bb, &cc]));
        assert_eq!(ring.receivers(&ff), set([&aa, &bb, &cc]));
    }

    #[test]
    fn everyone_but_self_receives_when_there_are_at_most_that_many_others() {
        let [aa, bb, cc, dd, ee, ff] = six();
        let expected = set([&aa, &bb, &dd, &ee, &ff]);
        for n in [5, 6, 7] {
            let ring = HeartbeatNodeRing::with_nodes(cc.clone(), six(), [], n);
            assert_eq!(ring.my_receivers(), expected, "monitored by {n}");
        }
        let all_unreachable = HeartbeatNodeRing::with_nodes(cc.clone(), six(), six(), 5);
        assert_eq!(all_unreachable.my_receivers(), expected);
    }

    #[test]
    fn a_ring_of_one_has_no_receivers() {
        let [_, _, cc, ..] = six();
        let ring = HeartbeatNodeRing::new(cc.clone(), 3);
        assert_eq!(ring.len(), 1);
        assert!(ring.my_receivers().is_empty());
        let ring = HeartbeatNodeRing::new(cc, 0);
        assert!(ring.my_receivers().is_empty());
    }

    #[test]
    fn zero_monitors_means_no_receivers_in_a_larger_ring() {
        let [_, _, cc, ..] = six();
        let ring = HeartbeatNodeRing::with_nodes(cc, six(), [], 0);
        assert!(ring.my_receivers().is_empty());
    }

    #[test]
    fn the_walk_stops_after_one_lap_when_too_few_nodes_are_reachable() {
        let [aa, bb, cc, dd, ee, ff] = six();
        let ring = HeartbeatNodeRing::with_nodes(
            aa.clone(),
            six(),
            [bb.clone(), cc.clone(), dd.clone(), ee.clone()],
            3,
        );
        // bb, cc, dd are taken uncounted; ee is skipped as three are taken; ff is the only reachable.
        assert_eq!(ring.my_receivers(), set([&bb, &cc, &dd, &ff]));
    }

    #[test]
    fn a_sender_not_on_the_ring_starts_after_its_would_be_position() {
        let [aa, _, cc, dd, ee, _] = six();
        let ring = HeartbeatNodeRing::with_nodes(aa, six(), [], 3);
        let stranger = node("zz", 2);
        assert!(!ring.contains(&stranger));
        // Uid 2 with host "zz" sorts after bb (uid 2, host "bb") and before cc.
        assert_eq!(ring.receivers(&stranger), set([&cc, &dd, &ee]));
    }

    #[test]
    fn adding_and_removing_nodes_changes_receivers_and_self_stays() {
        let [aa, bb, cc, dd, ee, _] = six();
        let mut ring = HeartbeatNodeRing::new(aa.clone(), 2);
        assert!(ring.add_node(bb.clone()));
        assert!(!ring.add_node(bb.clone()));
        ring.add_node(cc.clone());
        ring.add_node(dd.clone());
        assert_eq!(ring.my_receivers(), set([&bb, &cc]));
        assert!(ring.set_unreachable(&bb, true));
        assert!(!ring.set_unreachable(&bb, true));
        assert_eq!(ring.my_receivers(), set([&bb, &cc, &dd]));
        assert!(ring.remove_node(&bb));
        assert!(!ring.is_unreachable(&bb));
        assert_eq!(ring.my_receivers(), set([&cc, &dd]));
        assert!(!ring.remove_node(&aa));
        assert!(ring.contains(&aa));
        assert!(!ring.remove_node(&ee));
        assert!(ring.set_unreachable(&cc, true));
        assert!(ring.set_unreachable(&cc, false));
        assert!(!ring.is_unreachable(&cc));
    }

    #[test]
    fn an_unreachable_mark_survives_until_the_node_is_added() {
        let [aa, bb, cc, dd, ..] = six();
        let mut ring = HeartbeatNodeRing::with_nodes(aa.clone(), [bb.clone(), cc.clone()], [], 1);
        ring.set_unreachable(&bb, true);
        ring.add_node(dd.clone());
        assert_eq!(ring.my_receivers(), set([&bb, &cc]));
        ring.reset_unreachable([]);
        assert_eq!(ring.my_receivers(), set([&bb]));
    }

    #[test]
    fn receivers_are_the_same_whatever_order_nodes_were_added_in() {
        let [aa, ..] = six();
        let mut forward = HeartbeatNodeRing::new(aa.clone(), 2);
        let mut backward = HeartbeatNodeRing::new(aa, 2);
        for n in six() {
            forward.add_node(n);
        }
        for n in six().into_iter().rev() {
            backward.add_node(n);
        }
        assert_eq!(forward, backward);
        for n in six() {
            assert_eq!(forward.receivers(&n), backward.receivers(&n));
        }
    }
}
