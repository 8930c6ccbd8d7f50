//! The heartbeat sender: which nodes to heartbeat, and the failure detectors fed by their responses.
//!
//! [`HeartbeatSender`] is the sans-IO half of the heartbeat protocol that runs on every initialized
//! node. It learns the members of its data center from membership changes, picks its receivers on
//! the [`HeartbeatNodeRing`], tells the driver whom to send a `Heartbeat` on each tick, and feeds
//! each `HeartbeatRsp` into a [`FailureDetectorRegistry`] that the reaper then asks which nodes are
//! available. Answering heartbeats is stateless and lives with the message handling.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::address::{Address, UniqueAddress};
use crate::phi::{PhiAccrualFailureDetector, PhiSettings};
use crate::ring::{DEFAULT_MONITORED_BY_NR_OF_MEMBERS, HeartbeatNodeRing};

/// One phi-accrual failure detector per monitored [`Address`] (host:port, whatever the uid),
/// created on the first heartbeat from that address.
#[derive(Clone, Debug)]
pub struct FailureDetectorRegistry {
    settings: PhiSettings,
    detectors: BTreeMap<Address, PhiAccrualFailureDetector>,
}

impl FailureDetectorRegistry {
    /// An empty registry whose detectors will use `settings`.
    pub fn new(settings: PhiSettings) -> Self {
        Self { settings, detectors: BTreeMap::new() }
    }

    /// Records a heartbeat from `address` at `now`, starting to monitor it if it was unknown.
    pub fn heartbeat(&mut self, address: &Address, now: Instant) {
        if let Some(detector) = self.detectors.get_mut(address) {
            detector.heartbeat(now);
            return;
        }
        let mut detector = PhiAccrualFailureDetector::new(self.settings);
        detector.heartbeat(now);
        self.detectors.insert(address.clone(), detector);
    }

    /// Whether `address` counts as alive at `now`; true for an address never heard from.
    pub fn is_available(&self, address: &Address, now: Instant) -> bool {
        self.detectors.get(address).is_none_or(|d| d.is_available(now))
    }

    /// Whether a heartbeat from `address` has been recorded (and not removed since).
    pub fn is_monitoring(&self, address: &Address) -> bool {
        self.detectors.get(address).is_some_and(PhiAccrualFailureDetector::is_monitoring)
    }

    /// Whether any address counts as not alive at `now`.
    pub fn any_unavailable(&self, now: Instant) -> bool {
        self.detectors.values().any(|d| !d.is_available(now))
    }

    /// The suspicion level of `address` at `now`; `None` when it is not monitored.
    pub fn phi(&self, address: &Address, now: Instant) -> Option<f64> {
        self.detectors.get(address).map(|d| d.phi(now))
    }

    /// The detector of `address`, if monitored.
    pub fn detector(&self, address: &Address) -> Option<&PhiAccrualFailureDetector> {
        self.detectors.get(address)
    }

    /// The monitored addresses, in [`Address`] order.
    pub fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.detectors.keys()
    }

    /// Forgets everything about `address`; a later heartbeat starts from scratch.
    pub fn remove(&mut self, address: &Address) {
        self.detectors.remove(address);
    }

    /// Forgets every address.
    pub fn reset(&mut self) {
        self.detectors.clear();
    }
}

/// Tuning of a [`HeartbeatSender`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeartbeatSettings {
    /// The failure detector of each receiver.
    pub phi: PhiSettings,
    /// How often the driver calls [`HeartbeatSender::tick`].
    pub heartbeat_interval: Duration,
    /// How long after the first heartbeat to a node its first response is expected; if none arrived
    /// by then, monitoring starts anyway so that a node that never answers is still detected.
    pub expected_response_after: Duration,
    /// How many reachable nodes heartbeat each node.
    pub monitored_by_nr_of_members: usize,
}

impl Default for HeartbeatSettings {
    fn default() -> Self {
        Self {
            phi: PhiSettings::default(),
            heartbeat_interval: Duration::from_secs(1),
            expected_response_after: Duration::from_secs(1),
            monitored_by_nr_of_members: DEFAULT_MONITORED_BY_NR_OF_MEMBERS,
        }
    }
}

/// The heartbeat sender of one node: its ring, its active receivers and their failure detectors.
///
/// A driver:
/// 1. feeds membership of the node's own data center with [`init`](Self::init), then
///    [`add_member`](Self::add_member), [`remove_member`](Self::remove_member),
///    [`unreachable_member`](Self::unreachable_member) and
///    [`reachable_member`](Self::reachable_member) as it changes;
/// 2. every `heartbeat_interval` calls [`tick`](Self::tick) and sends a `Heartbeat` carrying the
///    returned sequence number to each returned node;
/// 3. passes every `HeartbeatRsp` to [`handle_response`](Self::handle_response);
/// 4. calls [`handle_timeout`](Self::handle_timeout) once [`next_deadline`](Self::next_deadline)
///    has passed;
/// 5. asks [`is_available`](Self::is_available) when reaping unreachable nodes.
///
/// Membership inputs take `now` because a receiver that leaves the ring slice is only forgotten if
/// its detector says it is available at that moment; otherwise it stays an *old receiver now
/// unreachable* and keeps being heartbeated until it answers, so it can be seen to come back.
#[derive(Clone, Debug)]
pub struct HeartbeatSender {
    settings: HeartbeatSettings,
    ring: HeartbeatNodeRing,
    /// `ring.my_receivers()`, kept in step with every ring change.
    ring_receivers: BTreeSet<UniqueAddress>,
    old_receivers_now_unreachable: BTreeSet<UniqueAddress>,
    registry: FailureDetectorRegistry,
    sequence_nr: u64,
    /// When to start monitoring a receiver that has not answered its first heartbeat. One entry per
    /// active receiver at most: the earliest, which is the one that matters.
    expected_first_heartbeat: BTreeMap<UniqueAddress, Instant>,
}

impl HeartbeatSender {
    /// A sender for `self_node` that knows no other node yet.
    pub fn new(self_node: UniqueAddress, settings: HeartbeatSettings) -> Self {
        Self {
            settings,
            ring: HeartbeatNodeRing::new(self_node, settings.monitored_by_nr_of_members),
            ring_receivers: BTreeSet::new(),
            old_receivers_now_unreachable: BTreeSet::new(),
            registry: FailureDetectorRegistry::new(settings.phi),
            sequence_nr: 0,
            expected_first_heartbeat: BTreeMap::new(),
        }
    }

    /// The node this sender runs on.
    pub fn self_node(&self) -> &UniqueAddress {
        self.ring.self_node()
    }

    /// The settings this sender was built with.
    pub fn settings(&self) -> &HeartbeatSettings {
        &self.settings
    }

    /// The ring of tracked nodes.
    pub fn ring(&self) -> &HeartbeatNodeRing {
        &self.ring
    }

    /// The failure detectors of the receivers.
    pub fn registry(&self) -> &FailureDetectorRegistry {
        &self.registry
    }

    /// Former receivers that were unavailable when they left the ring slice and have not answered
    /// since, in [`UniqueAddress`] order.
    pub fn old_receivers_now_unreachable(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.old_receivers_now_unreachable.iter()
    }

    /// The sequence number of the last [`tick`](Self::tick); 0 before the first.
    pub fn sequence_nr(&self) -> u64 {
        self.sequence_nr
    }

    /// Replaces the tracked nodes with `nodes` (self is always tracked) of which `unreachable` are
    /// unreachable.
    pub fn init(
        &mut self,
        nodes: impl IntoIterator<Item = UniqueAddress>,
        unreachable: impl IntoIterator<Item = UniqueAddress>,
        now: Instant,
    ) {
        self.ring = HeartbeatNodeRing::with_nodes(
            self.self_node().clone(),
            nodes,
            unreachable,
            self.settings.monitored_by_nr_of_members,
        );
        self.ring_changed(now);
    }

    /// Starts tracking `node`. Self is always tracked, so adding it is a no-op.
    pub fn add_member(&mut self, node: UniqueAddress, now: Instant) {
        if node == *self.self_node() || !self.ring.add_node(node) {
            return;
        }
        self.ring_changed(now);
    }

    /// Starts tracking `nodes`, with one recomputation of the receivers for all of them: a node
    /// that takes in a gossip with many new members (a forming cluster) would otherwise walk the
    /// ring once per member.
    pub fn add_members(&mut self, nodes: impl IntoIterator<Item = UniqueAddress>, now: Instant) {
        let mut added = false;
        for node in nodes {
            if node != *self.self_node() {
                added |= self.ring.add_node(node);
            }
        }
        if added {
            self.ring_changed(now);
        }
    }

    /// Stops tracking `node` and forgets its failure detector. Removing self is ignored: the node is
    /// shutting down and the owner should drop the sender.
    pub fn remove_member(&mut self, node: &UniqueAddress, now: Instant) {
        if node == self.self_node() {
            return;
        }
        if self.ring.remove_node(node) {
            self.ring_changed(now);
        }
        self.registry.remove(&node.address);
        self.old_receivers_now_unreachable.remove(node);
        self.expected_first_heartbeat.remove(node);
    }

    /// Records that `node` is unreachable, which widens the ring slice past it.
    pub fn unreachable_member(&mut self, node: &UniqueAddress, now: Instant) {
        if self.ring.set_unreachable(node, true) {
            self.ring_changed(now);
        }
    }

    /// Records that `node` is reachable again.
    pub fn reachable_member(&mut self, node: &UniqueAddress, now: Instant) {
        if self.ring.set_unreachable(node, false) {
            self.ring_changed(now);
        }
    }

    /// Whom to heartbeat: the ring receivers plus the old receivers now unreachable, in
    /// [`UniqueAddress`] order.
    pub fn active_receivers(&self) -> Vec<UniqueAddress> {
        self.ring_receivers.union(&self.old_receivers_now_unreachable).cloned().collect()
    }

    /// Whether `node` is heartbeated, and so whether its responses count.
    pub fn is_active_receiver(&self, node: &UniqueAddress) -> bool {
        self.ring_receivers.contains(node) || self.old_receivers_now_unreachable.contains(node)
    }

    /// One heartbeat round at `now`: the next sequence number, shared by all receivers, and the
    /// nodes to send a `Heartbeat` to. Arms the expected-first-heartbeat deadline
    /// `now + expected_response_after` of each receiver whose detector is not monitoring yet.
    pub fn tick(&mut self, now: Instant) -> (u64, Vec<UniqueAddress>) {
        self.sequence_nr = self.sequence_nr.wrapping_add(1);
        let receivers = self.active_receivers();
        let deadline = now.checked_add(self.settings.expected_response_after).unwrap_or(now);
        for to in &receivers {
            if !self.registry.is_monitoring(&to.address) {
                self.expected_first_heartbeat.entry(to.clone()).or_insert(deadline);
            }
        }
        (self.sequence_nr, receivers)
    }

    /// A `HeartbeatRsp` from `from` arrived at `now`. Ignored unless `from` is an active receiver.
    /// An old receiver that answers has come back: it stops being heartbeated unless it is a ring
    /// receiver again, in which case its detector is kept.
    pub fn handle_response(&mut self, from: &UniqueAddress, now: Instant) {
        if !self.is_active_receiver(from) {
            return;
        }
        self.registry.heartbeat(&from.address, now);
        self.expected_first_heartbeat.remove(from);
        if self.old_receivers_now_unreachable.remove(from) && !self.ring_receivers.contains(from) {
            self.registry.remove(&from.address);
        }
    }

    /// Fires the expected-first-heartbeat deadlines due at `now`: a receiver that is still active and
    /// still not monitored gets an artificial heartbeat, so that a node that never answers is
    /// detected like one that stopped answering.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<UniqueAddress> = self
            .expected_first_heartbeat
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(node, _)| node.clone())
            .collect();
        for node in due {
            self.expected_first_heartbeat.remove(&node);
            if self.is_active_receiver(&node) && !self.registry.is_monitoring(&node.address) {
                self.registry.heartbeat(&node.address, now);
            }
        }
    }

    /// The earliest pending expected-first-heartbeat deadline. The heartbeat tick itself is
    /// scheduled by the driver every `heartbeat_interval`.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.expected_first_heartbeat.values().min().copied()
    }

    /// Whether `address` counts as alive at `now`; true when it is not monitored.
    pub fn is_available(&self, address: &Address, now: Instant) -> bool {
        self.registry.is_available(address, now)
    }

    /// Whether any address counts as not alive at `now` (see [`Self::is_available`]).
    pub fn any_unavailable(&self, now: Instant) -> bool {
        self.registry.any_unavailable(now)
    }

    /// Forgets the failure-detector state of `address`, so a node that (re)joins there starts
    /// with fresh statistics.
    pub fn forget(&mut self, address: &Address) {
        self.registry.remove(address);
    }

    /// Whether heartbeat responses from `address` are being monitored.
    pub fn is_monitoring(&self, address: &Address) -> bool {
        self.registry.is_monitoring(address)
    }

    /// The suspicion level of `address` at `now`; `None` when it is not monitored.
    pub fn phi(&self, address: &Address, now: Instant) -> Option<f64> {
        self.registry.phi(address, now)
    }

    /// Recomputes the ring receivers after a ring change. A receiver that dropped out is forgotten
    /// if its detector says it is available, and otherwise kept as an old receiver now unreachable.
    fn ring_changed(&mut self, now: Instant) {
        let receivers = self.ring.my_receivers();
        for dropped in self.ring_receivers.difference(&receivers) {
            if self.registry.is_available(&dropped.address, now) {
                self.registry.remove(&dropped.address);
            } else {
                self.old_receivers_now_unreachable.insert(dropped.clone());
            }
        }
        self.ring_receivers = receivers;
        let ring_receivers = &self.ring_receivers;
        let old = &self.old_receivers_now_unreachable;
        self.expected_first_heartbeat
            .retain(|node, _| ring_receivers.contains(node) || old.contains(node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Uid;

    #[allow(clippy::disallowed_methods, reason = "tests need a base instant; only offsets matter")]
    fn t0() -> Instant {
        Instant::now()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn node(host: &str, uid: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, 2552).unwrap(), Uid::new(uid).unwrap())
    }

    /// Nodes whose uids put them on the ring in the order aa, bb, cc, dd, ee.
    fn nodes() -> [UniqueAddress; 5] {
        [node("aa", 1), node("bb", 2), node("cc", 3), node("dd", 4), node("ee", 5)]
    }

    fn sender(monitored_by: usize) -> HeartbeatSender {
        let settings =
            HeartbeatSettings { monitored_by_nr_of_members: monitored_by, ..Default::default() };
        HeartbeatSender::new(nodes()[0].clone(), settings)
    }

    fn list<const K: usize>(nodes: [&UniqueAddress; K]) -> Vec<UniqueAddress> {
        let mut v: Vec<UniqueAddress> = nodes.into_iter().cloned().collect();
        v.sort();
        v
    }

    #[test]
    fn the_registry_treats_unknown_addresses_as_available_and_unmonitored() {
        let registry = FailureDetectorRegistry::new(PhiSettings::default());
        let a = node("aa", 1).address;
        assert!(registry.is_available(&a, t0()));
        assert!(!registry.is_monitoring(&a));
        assert_eq!(registry.phi(&a, t0()), None);
        assert!(registry.detector(&a).is_none());
    }

    #[test]
    fn the_registry_creates_a_detector_on_the_first_heartbeat_and_forgets_it_on_remove() {
        let mut registry = FailureDetectorRegistry::new(PhiSettings::default());
        let [aa, bb, ..] = nodes();
        let t = t0();
        registry.heartbeat(&aa.address, t);
        assert!(registry.is_monitoring(&aa.address));
        assert!(!registry.is_monitoring(&bb.address));
        assert_eq!(registry.phi(&aa.address, t), Some(0.0));
        assert!(!registry.is_available(&aa.address, t + secs(10)));
        assert!(registry.is_available(&bb.address, t + secs(10)));
        assert_eq!(registry.addresses().collect::<Vec<_>>(), [&aa.address]);
        registry.remove(&aa.address);
        assert!(!registry.is_monitoring(&aa.address));
        assert!(registry.is_available(&aa.address, t + secs(10)));
        registry.heartbeat(&aa.address, t);
        registry.heartbeat(&bb.address, t);
        registry.reset();
        assert_eq!(registry.addresses().count(), 0);
    }

    #[test]
    fn the_registry_is_keyed_by_address_whatever_the_uid() {
        let mut registry = FailureDetectorRegistry::new(PhiSettings::default());
        let old = node("aa", 1);
        let restarted = node("aa", 99);
        let t = t0();
        registry.heartbeat(&old.address, t);
        assert!(registry.is_monitoring(&restarted.address));
    }

    #[test]
    fn an_empty_sender_has_no_active_receivers() {
        let mut s = sender(3);
        assert!(s.active_receivers().is_empty());
        assert_eq!(s.tick(t0()), (1, vec![]));
        assert_eq!(s.next_deadline(), None);
        s.init([], [], t0());
        assert!(s.active_receivers().is_empty());
    }

    #[test]
    fn init_uses_the_given_nodes_with_or_without_self() {
        let [aa, bb, cc, ..] = nodes();
        let mut s = sender(3);
        s.init([aa.clone(), bb.clone(), cc.clone()], [], t0());
        assert_eq!(s.active_receivers(), list([&bb, &cc]));
        let mut s = sender(3);
        s.init([bb.clone(), cc.clone()], [], t0());
        assert_eq!(s.active_receivers(), list([&bb, &cc]));
        assert!(s.ring().contains(&aa));
    }

    #[test]
    fn added_members_are_receivers_even_when_unreachable() {
        let [_, bb, cc, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.add_member(bb.clone(), t);
        s.add_member(cc.clone(), t);
        assert_eq!(s.active_receivers(), list([&bb, &cc]));
        s.unreachable_member(&bb, t);
        assert_eq!(s.active_receivers(), list([&bb, &cc]));
    }

    #[test]
    fn members_added_together_give_the_receivers_of_members_added_one_by_one() {
        let [aa, bb, cc, dd, ee] = nodes();
        let t = t0();
        let (mut one_by_one, mut together) = (sender(2), sender(2));
        for n in [&ee, &cc, &bb, &dd] {
            one_by_one.add_member(n.clone(), t);
        }
        together.add_members([ee.clone(), cc.clone(), aa.clone(), bb.clone(), dd.clone()], t);
        assert_eq!(together.active_receivers(), one_by_one.active_receivers());
        assert_eq!(together.active_receivers(), list([&bb, &cc]));
        assert_eq!(together.ring(), one_by_one.ring());
    }

    #[test]
    fn removed_members_are_not_receivers() {
        let [_, bb, cc, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.add_member(bb.clone(), t);
        s.add_member(cc.clone(), t);
        s.remove_member(&bb, t);
        assert_eq!(s.active_receivers(), list([&cc]));
    }

    #[test]
    fn self_is_never_a_receiver_and_cannot_be_added_or_removed() {
        let [aa, bb, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.add_member(aa.clone(), t);
        s.add_member(bb.clone(), t);
        s.remove_member(&aa, t);
        assert!(s.ring().contains(&aa));
        assert_eq!(s.active_receivers(), list([&bb]));
    }

    #[test]
    fn the_specified_number_of_members_are_receivers() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(3);
        for n in [&bb, &cc, &dd, &ee] {
            s.add_member(n.clone(), t);
        }
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
    }

    #[test]
    fn unreachable_members_extend_the_receivers_beyond_the_specified_number() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(2);
        s.init([bb.clone(), cc.clone(), dd.clone(), ee.clone()], [], t);
        assert_eq!(s.active_receivers(), list([&bb, &cc]));
        s.unreachable_member(&bb, t);
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
    }

    #[test]
    fn responses_feed_the_detector_only_for_active_receivers() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(3);
        for n in [&bb, &cc, &dd] {
            s.add_member(n.clone(), t);
        }
        for n in [&bb, &cc, &dd, &ee] {
            s.handle_response(n, t);
        }
        assert!(s.is_monitoring(&bb.address));
        assert!(s.is_monitoring(&cc.address));
        assert!(s.is_monitoring(&dd.address));
        assert!(!s.is_monitoring(&ee.address));
        assert_eq!(s.phi(&ee.address, t), None);
        assert_eq!(s.phi(&bb.address, t), Some(0.0));
    }

    /// Self aa with cc, dd, ee as receivers (monitored by 3); cc and dd answer every second for
    /// ten seconds while ee answers only at the start, so ee is unavailable at the returned time.
    fn with_ee_silent() -> (HeartbeatSender, Instant) {
        let [_, _, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(3);
        for n in [&cc, &dd, &ee] {
            s.add_member(n.clone(), t);
            s.handle_response(n, t);
        }
        for i in 1..=10 {
            s.handle_response(&cc, t + secs(i));
            s.handle_response(&dd, t + secs(i));
        }
        let now = t + secs(10);
        assert!(s.is_available(&cc.address, now));
        assert!(!s.is_available(&ee.address, now));
        (s, now)
    }

    #[test]
    fn a_receiver_that_drops_out_while_available_is_forgotten() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(3);
        for n in [&cc, &dd, &ee] {
            s.add_member(n.clone(), t);
            s.handle_response(n, t);
        }
        s.add_member(bb.clone(), t + ms(500));
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
        assert_eq!(s.old_receivers_now_unreachable().count(), 0);
        assert!(!s.is_monitoring(&ee.address));
    }

    #[test]
    fn an_unreachable_old_receiver_is_heartbeated_until_it_answers() {
        let [_, bb, cc, dd, ee] = nodes();
        let (mut s, now) = with_ee_silent();
        s.add_member(bb.clone(), now);
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd, &ee]));
        assert_eq!(s.old_receivers_now_unreachable().collect::<Vec<_>>(), [&ee]);
        assert!(s.tick(now).1.contains(&ee));
        s.handle_response(&ee, now + secs(1));
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
        assert_eq!(s.old_receivers_now_unreachable().count(), 0);
        assert!(!s.is_monitoring(&ee.address));
    }

    #[test]
    fn an_old_receiver_is_dropped_when_its_member_is_removed() {
        let [_, bb, cc, dd, ee] = nodes();
        let (mut s, now) = with_ee_silent();
        s.add_member(bb.clone(), now);
        s.remove_member(&ee, now);
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
        assert_eq!(s.old_receivers_now_unreachable().count(), 0);
        assert!(!s.is_monitoring(&ee.address));
    }

    #[test]
    fn an_old_receiver_back_in_the_ring_slice_keeps_its_detector_when_it_answers() {
        let [_, bb, cc, dd, ee] = nodes();
        let (mut s, now) = with_ee_silent();
        s.add_member(bb.clone(), now);
        s.remove_member(&bb, now);
        assert_eq!(s.active_receivers(), list([&cc, &dd, &ee]));
        assert_eq!(s.old_receivers_now_unreachable().count(), 1);
        s.handle_response(&ee, now + secs(1));
        assert_eq!(s.old_receivers_now_unreachable().count(), 0);
        assert!(s.is_monitoring(&ee.address));
        assert_eq!(s.active_receivers(), list([&cc, &dd, &ee]));
    }

    #[test]
    fn a_member_coming_back_reachable_narrows_the_slice_but_keeps_unavailable_receivers() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(2);
        s.init([bb.clone(), cc.clone(), dd.clone(), ee.clone()], [bb.clone()], t);
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
        for n in [&bb, &cc, &dd] {
            s.handle_response(n, t);
        }
        for i in 1..=10 {
            s.handle_response(&bb, t + secs(i));
            s.handle_response(&cc, t + secs(i));
        }
        // dd is silent and unavailable when bb is reachable again and dd leaves the slice.
        s.reachable_member(&bb, t + secs(10));
        assert_eq!(s.ring().my_receivers().len(), 2);
        assert_eq!(s.active_receivers(), list([&bb, &cc, &dd]));
        assert_eq!(s.old_receivers_now_unreachable().collect::<Vec<_>>(), [&dd]);
    }

    #[test]
    fn removing_a_member_forgets_its_detector() {
        let [_, bb, cc, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone(), cc.clone()], [], t);
        s.handle_response(&bb, t);
        assert!(s.is_monitoring(&bb.address));
        s.remove_member(&bb, t);
        assert!(!s.is_monitoring(&bb.address));
        assert_eq!(s.registry().addresses().count(), 0);
    }

    #[test]
    fn the_sequence_number_is_shared_by_all_receivers_and_grows_per_tick() {
        let [_, bb, cc, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone(), cc.clone()], [], t);
        assert_eq!(s.sequence_nr(), 0);
        assert_eq!(s.tick(t), (1, list([&bb, &cc])));
        assert_eq!(s.tick(t + secs(1)), (2, list([&bb, &cc])));
        assert_eq!(s.sequence_nr(), 2);
    }

    #[test]
    fn a_tick_arms_the_first_heartbeat_deadline_only_for_unmonitored_receivers() {
        let [_, bb, cc, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone(), cc.clone()], [], t);
        s.handle_response(&bb, t);
        s.tick(t);
        assert_eq!(s.next_deadline(), Some(t + secs(1)));
        s.tick(t + ms(500));
        assert_eq!(s.next_deadline(), Some(t + secs(1)), "the earliest deadline is kept");
        s.handle_timeout(t + ms(999));
        assert!(!s.is_monitoring(&cc.address));
        s.handle_timeout(t + secs(1));
        assert!(s.is_monitoring(&cc.address));
        assert_eq!(s.next_deadline(), None);
        s.tick(t + secs(2));
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn a_first_response_cancels_the_expected_first_heartbeat() {
        let [_, bb, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone()], [], t);
        s.tick(t);
        s.handle_response(&bb, t + ms(300));
        assert_eq!(s.next_deadline(), None);
        s.handle_timeout(t + secs(1));
        // φ is measured from the real response at 0.3 s, not from an artificial one at 1 s.
        assert!(!s.is_available(&bb.address, t + ms(300 + 5400)));
    }

    #[test]
    fn the_expected_first_heartbeat_of_a_node_that_left_the_receivers_does_not_fire() {
        let [_, bb, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone()], [], t);
        s.tick(t);
        s.remove_member(&bb, t + ms(500));
        assert_eq!(s.next_deadline(), None);
        s.handle_timeout(t + secs(2));
        assert!(!s.is_monitoring(&bb.address));
    }

    #[test]
    fn a_receiver_that_never_answers_becomes_unavailable_after_the_expected_response_and_phi_time()
    {
        let [_, bb, ..] = nodes();
        let t = t0();
        let mut s = sender(3);
        s.init([bb.clone()], [], t);
        let mut first_unavailable = None;
        for step in 0..10_000u64 {
            let now = t + ms(step);
            if step % 1000 == 0 {
                let (_, to) = s.tick(now);
                assert_eq!(to, list([&bb]));
            }
            if s.next_deadline().is_some_and(|d| d <= now) {
                s.handle_timeout(now);
            }
            if !s.is_available(&bb.address, now) {
                first_unavailable = Some(now - t);
                break;
            }
        }
        let at = first_unavailable.expect("bb is detected").as_secs_f64();
        // 1 s until the artificial first heartbeat, then ≈5.31 s for φ to reach 8.
        assert!((at - 6.31).abs() <= 0.02, "unavailable after {at} s");
    }

    #[test]
    fn responses_from_nodes_that_are_not_receivers_are_ignored() {
        let [_, bb, cc, dd, ee] = nodes();
        let t = t0();
        let mut s = sender(1);
        s.init([bb.clone(), cc.clone(), dd.clone()], [], t);
        assert_eq!(s.active_receivers(), list([&bb]));
        s.handle_response(&cc, t);
        s.handle_response(&ee, t);
        s.handle_response(&node("bb", 77), t);
        assert_eq!(s.registry().addresses().count(), 0);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Add(usize),
            Remove(usize),
            Unreachable(usize),
            Reachable(usize),
            Respond(usize),
            Tick,
            Timeout,
            Advance(u64),
        }

        /// Self plus nodes that include two incarnations on one host:port.
        fn pool() -> Vec<UniqueAddress> {
            vec![
                node("aa", 40),
                node("bb", 7),
                node("cc", 93),
                node("dd", 12),
                node("ee", 55),
                node("ff", 3),
                node("gg", 71),
                node("bb", 28),
            ]
        }

        fn op() -> impl Strategy<Value = Op> {
            let i = 0..pool().len();
            prop_oneof![
                2 => i.clone().prop_map(Op::Add),
                1 => i.clone().prop_map(Op::Remove),
                1 => i.clone().prop_map(Op::Unreachable),
                1 => i.clone().prop_map(Op::Reachable),
                3 => i.prop_map(Op::Respond),
                1 => Just(Op::Tick),
                1 => Just(Op::Timeout),
                2 => (0..4000u64).prop_map(Op::Advance),
            ]
        }

        fn run(ops: &[Op]) -> Vec<(u64, Vec<UniqueAddress>)> {
            let pool = pool();
            let settings =
                HeartbeatSettings { monitored_by_nr_of_members: 3, ..Default::default() };
            let mut s = HeartbeatSender::new(pool[0].clone(), settings);
            let mut removed = BTreeSet::new();
            let mut now = t0();
            let mut sent = Vec::new();
            for op in ops {
                match op {
                    Op::Add(i) => {
                        s.add_member(pool[*i].clone(), now);
                        removed.remove(&pool[*i]);
                    }
                    Op::Remove(i) => {
                        s.remove_member(&pool[*i], now);
                        if *i != 0 {
                            removed.insert(pool[*i].clone());
                        }
                    }
                    Op::Unreachable(i) => s.unreachable_member(&pool[*i], now),
                    Op::Reachable(i) => s.reachable_member(&pool[*i], now),
                    Op::Respond(i) => s.handle_response(&pool[*i], now),
                    Op::Tick => sent.push(s.tick(now)),
                    Op::Timeout => s.handle_timeout(now),
                    Op::Advance(d) => now += ms(*d),
                }
                check_invariants(&s, &removed);
            }
            sent
        }

        fn check_invariants(s: &HeartbeatSender, removed: &BTreeSet<UniqueAddress>) {
            let active = s.active_receivers();
            let mut expected: BTreeSet<UniqueAddress> = s.ring().my_receivers();
            expected.extend(s.old_receivers_now_unreachable().cloned());
            assert_eq!(active, expected.into_iter().collect::<Vec<_>>());
            assert!(!active.contains(s.self_node()));
            assert!(active.iter().all(|n| s.ring().contains(n)));
            assert!(active.iter().all(|n| !removed.contains(n)));
            let active_addresses: BTreeSet<&Address> = active.iter().map(|n| &n.address).collect();
            assert!(s.registry().addresses().all(|a| active_addresses.contains(a)));
            for node in s.expected_first_heartbeat.keys() {
                assert!(s.is_active_receiver(node));
            }
            let reachable_others =
                s.ring().nodes().filter(|n| *n != s.self_node() && !s.ring().is_unreachable(n));
            let reachable_receivers =
                s.ring().my_receivers().into_iter().filter(|n| !s.ring().is_unreachable(n)).count();
            assert_eq!(reachable_receivers, reachable_others.count().min(3));
        }

        proptest! {
            #[test]
            fn random_operations_keep_the_sender_consistent_and_deterministic(
                ops in proptest::collection::vec(op(), 0..200)
            ) {
                let first = run(&ops);
                let second = run(&ops);
                prop_assert_eq!(first, second);
            }
        }
    }
}
