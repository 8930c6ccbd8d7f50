//! Views computed from one node's gossip: convergence, leader, role leaders, oldest.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus, UpNumber, leader_status_cmp};
use crate::reachability::Reachability;

/// One node's gossip seen from that node, in its own data center.
#[derive(Clone, Copy, Debug)]
pub struct MembershipState<'a> {
    /// The gossip.
    pub gossip: &'a Gossip,
    /// The node looking.
    pub self_node: &'a UniqueAddress,
    /// Its data center.
    pub self_dc: &'a str,
}

impl<'a> MembershipState<'a> {
    /// A view of `gossip` from `self_node` in data center `self_dc`.
    pub fn new(gossip: &'a Gossip, self_node: &'a UniqueAddress, self_dc: &'a str) -> Self {
        Self { gossip, self_node, self_dc }
    }

    fn in_dc(&self, node: &UniqueAddress) -> bool {
        self.gossip.member(node).is_some_and(|m| m.data_center() == self.self_dc)
    }

    /// Whether `node` is no member, a Down one, or one of another data center: an observer whose
    /// reachability rows the leader and convergence ignore.
    fn down_or_outside(&self, node: &UniqueAddress) -> bool {
        self.gossip
            .member(node)
            .is_none_or(|m| m.status() == MemberStatus::Down || m.data_center() != self.self_dc)
    }

    /// The member record of this node, if it is a member.
    pub fn self_member(&self) -> Option<&'a Member> {
        self.gossip.member(self.self_node)
    }

    /// This node's status; Removed when it is not a member.
    pub fn self_status(&self) -> MemberStatus {
        self.self_member().map_or(MemberStatus::Removed, Member::status)
    }

    /// Members of this node's data center.
    pub fn dc_members(&self) -> impl Iterator<Item = &'a Member> + '_ {
        let all = self.gossip.all_in_data_center(self.self_dc);
        self.gossip.members().filter(move |m| all || m.data_center() == self.self_dc)
    }

    /// Reachability without the rows of observers in other data centers.
    pub fn dc_reachability(&self) -> Reachability {
        self.gossip.reachability().filter_observers(|o| self.in_dc(o))
    }

    /// The reachability the leader is chosen by: rows of observers that are Down or in another
    /// data center are ignored.
    fn leader_reachability(&self) -> BTreeSet<&'a UniqueAddress> {
        self.gossip.reachability().not_reachable_by(|o| !self.down_or_outside(o), |_| true)
    }

    /// The reachability that matters for convergence: rows of Down observers and every record that
    /// touches another data center are ignored.
    pub fn convergence_reachability(&self) -> Reachability {
        self.gossip
            .reachability()
            .filter_observers(|o| !self.down_or_outside(o))
            .filter_records(|n| self.in_dc(n))
    }

    /// The members that [`Self::convergence_reachability`] holds unreachable or terminated,
    /// computed without copying the table.
    pub fn convergence_unreachable(&self) -> BTreeSet<&'a UniqueAddress> {
        (self.gossip.reachability())
            .not_reachable_by(|o| !self.down_or_outside(o) && self.in_dc(o), |n| self.in_dc(n))
    }

    /// Whether every relevant member has seen this gossip and every unreachable member is Down or
    /// Exiting. `exiting_confirmed` nodes count as seen and their unreachability is
    /// ignored.
    pub fn convergence(&self, exiting_confirmed: &BTreeSet<UniqueAddress>) -> bool {
        let first_member_in_dc = !self.dc_members().any(|m| m.status().is_leader_eligible());
        let needs_to_have_seen = |m: &Member| {
            m.status().is_leader_eligible() || (first_member_in_dc && m.status().is_joining())
        };
        let hindering = self.gossip.members_with_seen().any(|(m, seen)| {
            (first_member_in_dc || m.data_center() == self.self_dc)
                && needs_to_have_seen(m)
                && !seen
                && !exiting_confirmed.contains(m.node())
        });
        if hindering {
            return false;
        }
        self.convergence_unreachable()
            .into_iter()
            .filter(|n| *n != self.self_node && !exiting_confirmed.contains(*n))
            .filter_map(|n| self.gossip.member(n))
            .all(|m| m.status().is_down_or_exiting())
    }

    /// The leader among `candidates`: the first reachable leader-eligible member of
    /// this data center by member ordering, else the first by leader-status ordering.
    ///
    /// Reachability is read as for convergence, without the rows of Down observers. Akka counts
    /// them here, so while a Down node's stale "unreachable" verdict on the first member lingers,
    /// that member (which ignores verdicts on itself) elects itself while everyone else holding the
    /// same converged gossip elects the next one: two leaders acting at once (reliability S10).
    pub fn leader_of<'m>(
        &self,
        candidates: impl Iterator<Item = &'m Member>,
    ) -> Option<&'m Member> {
        let unreachable = self.leader_reachability();
        let pool = candidates
            .filter(|m| m.data_center() == self.self_dc && m.status() != MemberStatus::Down)
            .filter(|m| !unreachable.contains(m.node()) || m.node() == self.self_node);
        // The first eligible member, else the first of the lowest leader-status ordering.
        let mut fallback: Option<&Member> = None;
        for m in pool {
            if m.status().is_leader_eligible() {
                return Some(m);
            }
            if fallback.is_none_or(|f| leader_status_cmp(m, f) == std::cmp::Ordering::Less) {
                fallback = Some(m);
            }
        }
        fallback
    }

    /// The leader of this data center as this node sees it.
    pub fn leader(&self) -> Option<&'a UniqueAddress> {
        self.leader_of(self.gossip.members()).map(Member::node)
    }

    /// The leader among the members with `role`.
    pub fn role_leader(&self, role: &str) -> Option<&'a UniqueAddress> {
        self.leader_of(self.gossip.members().filter(|m| m.has_role(role))).map(Member::node)
    }

    /// Whether `node` is the leader.
    pub fn is_leader(&self, node: &UniqueAddress) -> bool {
        self.leader() == Some(node)
    }

    /// Every role of every member, including `dc-` roles.
    pub fn all_roles(&self) -> BTreeSet<&'a str> {
        self.gossip.roles().iter().map(String::as_str).collect()
    }

    /// The oldest member of this data center whose status is Up or later (Up, Leaving, preparing for
    /// shutdown); Joining, WeaklyUp, Down and Exiting members are not candidates.
    pub fn oldest(&self) -> Option<&'a Member> {
        self.oldest_matching(|_| true)
    }

    /// The oldest candidate, as [`Self::oldest`], among members with `role`.
    pub fn oldest_with_role(&self, role: &str) -> Option<&'a Member> {
        self.oldest_matching(|m| m.has_role(role))
    }

    fn oldest_matching(&self, filter: impl Fn(&Member) -> bool) -> Option<&'a Member> {
        self.dc_members()
            .filter(|m| m.status().is_leader_eligible() && filter(m))
            .min_by(|a, b| a.age_cmp(b))
    }

    /// The up-number the next member moved Up gets: one more than the youngest in this data center
    /// (unassigned counts as 0).
    pub fn next_up_number(&self) -> UpNumber {
        let youngest = self
            .dc_members()
            .map(|m| if m.up_number() == UpNumber::UNASSIGNED { 0 } else { m.up_number().0 })
            .max()
            .unwrap_or(0);
        UpNumber(youngest.saturating_add(1))
    }

    /// Whether gossip may be sent to `node`: it is another node and this node itself does not see it
    /// as unreachable.
    pub fn is_valid_gossip_target(&self, node: &UniqueAddress) -> bool {
        node != self.self_node && self.gossip.reachability().is_reachable_by(self.self_node, node)
    }

    /// Members that other members of this data center see as unreachable (Down observers count),
    /// excluding this node: what [`crate::event::ClusterEvent::UnreachableMember`] reports.
    pub fn unreachable_members(&self) -> BTreeSet<UniqueAddress> {
        (self.gossip.reachability().not_reachable_by(|n| self.in_dc(n), |n| self.in_dc(n)))
            .into_iter()
            .filter(|n| *n != self.self_node)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::tests::{member, member_up, node};
    use MemberStatus::*;

    fn n(i: u64) -> UniqueAddress {
        node(&format!("h{i}:1"), 1)
    }

    fn m(i: u64, status: MemberStatus) -> Member {
        member(&format!("h{i}:1"), status)
    }

    fn all_seen(g: &mut Gossip) {
        for node in g.member_nodes() {
            g.add_seen(&node);
        }
    }

    #[test]
    fn converges_when_all_up_members_have_seen_the_gossip() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up)]);
        let me = n(1);
        let s = MembershipState::new(&g, &me, "default");
        assert!(!s.convergence(&BTreeSet::new()));
        all_seen(&mut g);
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn joining_members_need_not_have_seen_once_the_dc_has_up_members() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Joining), m(3, WeaklyUp), m(4, Down)]);
        g.add_seen(&n(1));
        let me = n(1);
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn the_first_members_of_a_dc_must_all_have_seen_the_gossip() {
        let mut g = Gossip::with_members([m(1, Joining), m(2, Joining)]);
        g.add_seen(&n(1));
        let me = n(1);
        assert!(!MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
        g.add_seen(&n(2));
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn an_unreachable_up_member_blocks_convergence_until_down() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up), m(3, Up)]);
        g.reachability_mut().unreachable(&n(1), &n(3));
        all_seen(&mut g);
        let me = n(1);
        assert!(!MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
        g.mark_as_down(&n(3));
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn an_unreachable_joining_member_blocks_convergence() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Joining)]);
        g.reachability_mut().unreachable(&n(1), &n(2));
        all_seen(&mut g);
        let me = n(1);
        assert!(!MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn observations_by_down_members_are_ignored_for_convergence() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up), m(3, Down)]);
        g.reachability_mut().unreachable(&n(3), &n(2));
        all_seen(&mut g);
        let me = n(1);
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn being_unreachable_to_others_does_not_block_own_convergence() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up)]);
        g.reachability_mut().unreachable(&n(2), &n(1));
        all_seen(&mut g);
        let me = n(1);
        assert!(MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
    }

    #[test]
    fn exiting_confirmed_members_count_as_seen_and_may_be_unreachable() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Leaving)]);
        g.add_seen(&n(1));
        g.reachability_mut().unreachable(&n(1), &n(2));
        let me = n(1);
        let confirmed = BTreeSet::from([n(2)]);
        assert!(!MembershipState::new(&g, &me, "default").convergence(&BTreeSet::new()));
        assert!(MembershipState::new(&g, &me, "default").convergence(&confirmed));
    }

    #[test]
    fn the_leader_is_the_first_reachable_up_member_by_address() {
        let mut g = Gossip::with_members([m(1, Joining), m(2, Up), m(3, Up)]);
        let me = n(3);
        assert_eq!(MembershipState::new(&g, &me, "default").leader(), Some(&n(2)));
        g.reachability_mut().unreachable(&n(3), &n(2));
        assert_eq!(MembershipState::new(&g, &me, "default").leader(), Some(&n(3)));
    }

    #[test]
    fn without_up_members_the_leader_prefers_weakly_up_then_joining() {
        let g = Gossip::with_members([m(1, Joining), m(2, WeaklyUp), m(3, Exiting)]);
        let me = n(1);
        assert_eq!(MembershipState::new(&g, &me, "default").leader(), Some(&n(2)));
        let g = Gossip::with_members([m(1, Exiting), m(2, Joining)]);
        assert_eq!(MembershipState::new(&g, &me, "default").leader(), Some(&n(2)));
    }

    #[test]
    fn down_members_are_never_leader() {
        let g = Gossip::with_members([m(1, Down), m(2, Up)]);
        let me = n(1);
        assert_eq!(MembershipState::new(&g, &me, "default").leader(), Some(&n(2)));
    }

    #[test]
    fn a_down_observers_verdict_does_not_split_the_leadership_of_a_converged_gossip() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up), m(3, Down)]);
        g.reachability_mut().unreachable(&n(3), &n(1));
        all_seen(&mut g);
        for me in [n(1), n(2)] {
            let s = MembershipState::new(&g, &me, "default");
            assert!(s.convergence(&BTreeSet::new()));
            assert_eq!(s.leader(), Some(&n(1)), "as seen from {me}");
        }
    }

    #[test]
    fn self_is_a_leader_candidate_even_when_others_see_it_unreachable() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up)]);
        g.reachability_mut().unreachable(&n(2), &n(1));
        assert_eq!(MembershipState::new(&g, &n(1), "default").leader(), Some(&n(1)));
        assert_eq!(MembershipState::new(&g, &n(2), "default").leader(), Some(&n(2)));
    }

    #[test]
    fn role_leaders_are_computed_among_members_with_the_role() {
        let mut a = m(1, Up);
        let mut b = m(2, Up);
        let roles = |r: &str| BTreeSet::from(["dc-default".to_owned(), r.to_owned()]);
        a = Member::from_parts(
            a.node().clone(),
            a.up_number(),
            Up,
            roles("front"),
            a.app_version().clone(),
        );
        b = Member::from_parts(
            b.node().clone(),
            b.up_number(),
            Up,
            roles("back"),
            b.app_version().clone(),
        );
        let g = Gossip::with_members([a, b]);
        let me = n(1);
        let s = MembershipState::new(&g, &me, "default");
        assert_eq!(s.role_leader("back"), Some(&n(2)));
        assert_eq!(s.role_leader("front"), Some(&n(1)));
        assert_eq!(s.role_leader("none"), None);
        assert_eq!(s.role_leader("dc-default"), Some(&n(1)));
    }

    #[test]
    fn oldest_is_the_smallest_up_number_among_up_members() {
        let g = Gossip::with_members([
            member_up("h1:1", Up, UpNumber(3)),
            member_up("h2:1", Up, UpNumber(1)),
            member_up("h3:1", Exiting, UpNumber(0)),
            member("h0:1", Joining),
        ]);
        let me = n(1);
        let s = MembershipState::new(&g, &me, "default");
        assert_eq!(s.oldest().map(Member::node), Some(&n(2)));
        assert_eq!(s.next_up_number(), UpNumber(4));
    }

    #[test]
    fn the_first_up_number_is_one() {
        let g = Gossip::with_members([m(1, Joining)]);
        let me = n(1);
        assert_eq!(MembershipState::new(&g, &me, "default").next_up_number(), UpNumber(1));
    }

    #[test]
    fn gossip_targets_exclude_self_and_nodes_self_sees_unreachable() {
        let mut g = Gossip::with_members([m(1, Up), m(2, Up), m(3, Up)]);
        g.reachability_mut().unreachable(&n(1), &n(2));
        g.reachability_mut().unreachable(&n(3), &n(1));
        let me = n(1);
        let s = MembershipState::new(&g, &me, "default");
        assert!(!s.is_valid_gossip_target(&n(1)));
        assert!(!s.is_valid_gossip_target(&n(2)));
        assert!(s.is_valid_gossip_target(&n(3)));
        assert_eq!(s.unreachable_members(), BTreeSet::from([n(2)]));
    }
}
