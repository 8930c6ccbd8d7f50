//! Cluster events, computed by diffing two consecutive states, and the current-state snapshot.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Address, UniqueAddress};
use crate::member::{Member, MemberStatus};
use crate::state::MembershipState;

/// A change in cluster membership as seen by one node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterEvent {
    /// A member asked to join.
    MemberJoined(Member),
    /// A member was promoted to WeaklyUp.
    MemberWeaklyUp(Member),
    /// A member was moved Up.
    MemberUp(Member),
    /// A member started leaving.
    MemberLeft(Member),
    /// A member was moved to Exiting.
    MemberExited(Member),
    /// A member was marked Down.
    MemberDowned(Member),
    /// A member is gone from the cluster.
    MemberRemoved {
        /// The member, with status Removed.
        member: Member,
        /// Its status before removal.
        previous_status: MemberStatus,
    },
    /// A member is preparing for a full cluster shutdown.
    MemberPreparingForShutdown(Member),
    /// A member is ready for a full cluster shutdown.
    MemberReadyForShutdown(Member),
    /// A member became unreachable for some observer.
    UnreachableMember(Member),
    /// A member is reachable again for every observer.
    ReachableMember(Member),
    /// The leader changed.
    LeaderChanged(Option<Address>),
    /// The leader of the members with a role changed.
    RoleLeaderChanged {
        /// The role.
        role: String,
        /// Its new leader.
        leader: Option<Address>,
    },
    /// This node is shutting down: it left, was downed, gave up joining or was stopped. The last
    /// event a subscriber receives. The core never emits it; the runtime sends it as the node
    /// stops, as Akka publishes `ClusterShuttingDown`.
    ClusterShuttingDown,
}

impl ClusterEvent {
    /// The event's type name as the management API reports it (`MemberUp`, `LeaderChanged`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::MemberJoined(_) => "MemberJoined",
            Self::MemberWeaklyUp(_) => "MemberWeaklyUp",
            Self::MemberUp(_) => "MemberUp",
            Self::MemberLeft(_) => "MemberLeft",
            Self::MemberExited(_) => "MemberExited",
            Self::MemberDowned(_) => "MemberDowned",
            Self::MemberRemoved { .. } => "MemberRemoved",
            Self::MemberPreparingForShutdown(_) => "MemberPreparingForShutdown",
            Self::MemberReadyForShutdown(_) => "MemberReadyForShutdown",
            Self::UnreachableMember(_) => "UnreachableMember",
            Self::ReachableMember(_) => "ReachableMember",
            Self::LeaderChanged(_) => "LeaderChanged",
            Self::RoleLeaderChanged { .. } => "RoleLeaderChanged",
            Self::ClusterShuttingDown => "ClusterShuttingDown",
        }
    }

    /// The member the event is about, for member and reachability events.
    pub fn member(&self) -> Option<&Member> {
        match self {
            Self::MemberJoined(m)
            | Self::MemberWeaklyUp(m)
            | Self::MemberUp(m)
            | Self::MemberLeft(m)
            | Self::MemberExited(m)
            | Self::MemberDowned(m)
            | Self::MemberPreparingForShutdown(m)
            | Self::MemberReadyForShutdown(m)
            | Self::UnreachableMember(m)
            | Self::ReachableMember(m) => Some(m),
            Self::MemberRemoved { member, .. } => Some(member),
            Self::LeaderChanged(_) | Self::RoleLeaderChanged { .. } | Self::ClusterShuttingDown => {
                None
            }
        }
    }

    fn for_status(member: &Member) -> Option<ClusterEvent> {
        let m = member.clone();
        Some(match member.status() {
            MemberStatus::Joining => Self::MemberJoined(m),
            MemberStatus::WeaklyUp => Self::MemberWeaklyUp(m),
            MemberStatus::Up => Self::MemberUp(m),
            MemberStatus::Leaving => Self::MemberLeft(m),
            MemberStatus::Exiting => Self::MemberExited(m),
            MemberStatus::Down => Self::MemberDowned(m),
            MemberStatus::PreparingForShutdown => Self::MemberPreparingForShutdown(m),
            MemberStatus::ReadyForShutdown => Self::MemberReadyForShutdown(m),
            MemberStatus::Removed => return None,
        })
    }
}

/// The events that lead from `old` to `new`: removals, then member status changes, then
/// unreachable, reachable, leader and role-leader changes.
pub fn diff(old: &MembershipState<'_>, new: &MembershipState<'_>) -> Vec<ClusterEvent> {
    // Both member maps iterate in member order: walk them side by side.
    let mut removed = Vec::new();
    let mut changed = Vec::new();
    // A shared member table holds the same members: most new versions only add to the seen set.
    let same_members = old.gossip.shares_members_with(new.gossip);
    let mut olds = old.gossip.members().take_while(|_| !same_members).peekable();
    for m in new.gossip.members().take_while(|_| !same_members) {
        while let Some(o) = olds.next_if(|o| o.node() < m.node()) {
            removed.push(o);
        }
        let before = olds.next_if(|o| o.node() == m.node());
        let same = |o: &Member| {
            o.is_same_version(m) || (o.status() == m.status() && o.up_number() == m.up_number())
        };
        if !before.is_some_and(same) {
            changed.extend(ClusterEvent::for_status(m));
        }
    }
    removed.extend(olds);
    // Reachability and leaders are functions of the member set, the statuses and the
    // reachability table; a change to the seen set or the clock alone leaves them as they were.
    let same_reachability = old.gossip.reachability() == new.gossip.reachability();
    if removed.is_empty() && changed.is_empty() && same_reachability {
        return changed;
    }
    let mut out: Vec<ClusterEvent> = removed
        .into_iter()
        .map(|m| ClusterEvent::MemberRemoved {
            member: m.as_removed(),
            previous_status: m.status(),
        })
        .collect();
    out.append(&mut changed);

    let old_unreachable = old.unreachable_members();
    let new_unreachable = new.unreachable_members();
    for n in new_unreachable.difference(&old_unreachable) {
        out.extend(new.gossip.member(n).cloned().map(ClusterEvent::UnreachableMember));
    }
    let old_only_unreachable = old.gossip.reachability().all_unreachable();
    for n in old_unreachable.difference(&new_unreachable) {
        if n == new.self_node || !old_only_unreachable.contains(n) {
            continue;
        }
        out.extend(new.gossip.member(n).cloned().map(ClusterEvent::ReachableMember));
    }

    let old_leader = old.leader().map(|n| n.address.clone());
    let new_leader = new.leader().map(|n| n.address.clone());
    if old_leader != new_leader {
        out.push(ClusterEvent::LeaderChanged(new_leader));
    }
    let roles: BTreeSet<&str> = old.all_roles().union(&new.all_roles()).copied().collect();
    for role in roles {
        let before = old.role_leader(role).map(|n| n.address.clone());
        let after = new.role_leader(role).map(|n| n.address.clone());
        if before != after {
            out.push(ClusterEvent::RoleLeaderChanged { role: role.to_owned(), leader: after });
        }
    }
    out
}

/// A snapshot of one node's view of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CurrentClusterState {
    /// The node taking the snapshot.
    pub self_node: Option<UniqueAddress>,
    /// Every member, in member ordering.
    pub members: Vec<Member>,
    /// Unreachable members (other than self) with the members that observe them unreachable.
    pub unreachable: Vec<(Member, BTreeSet<UniqueAddress>)>,
    /// Nodes that have seen the current gossip.
    pub seen_by: BTreeSet<Address>,
    /// The leader.
    pub leader: Option<Address>,
    /// The leader per role, for every role (including `dc-` roles).
    pub role_leaders: BTreeMap<String, Option<Address>>,
    /// The oldest Up (or later) member.
    pub oldest: Option<Address>,
    /// The oldest Up (or later) member per role.
    pub oldest_per_role: BTreeMap<String, Address>,
    /// Whether the gossip has converged.
    pub convergence: bool,
}

impl CurrentClusterState {
    /// The snapshot of `state`.
    pub fn of(state: &MembershipState<'_>, exiting_confirmed: &BTreeSet<UniqueAddress>) -> Self {
        let observers = state.gossip.reachability().observers_grouped_by_unreachable();
        let unreachable = state
            .unreachable_members()
            .into_iter()
            .filter_map(|n| {
                let m = state.gossip.member(&n)?.clone();
                Some((m, observers.get(&n).cloned().unwrap_or_default()))
            })
            .collect();
        let roles = state.all_roles();
        Self {
            self_node: Some(state.self_node.clone()),
            members: state.gossip.members().cloned().collect(),
            unreachable,
            seen_by: state.gossip.seen().iter().map(|n| n.address.clone()).collect(),
            leader: state.leader().map(|n| n.address.clone()),
            role_leaders: roles
                .iter()
                .map(|r| ((*r).to_owned(), state.role_leader(r).map(|n| n.address.clone())))
                .collect(),
            oldest: state.oldest().map(|m| m.address().clone()),
            oldest_per_role: roles
                .iter()
                .filter_map(|r| {
                    Some(((*r).to_owned(), state.oldest_with_role(r)?.address().clone()))
                })
                .collect(),
            convergence: state.convergence(exiting_confirmed),
        }
    }

    /// The member at `address`, if any.
    pub fn member(&self, address: &Address) -> Option<&Member> {
        self.members.iter().find(|m| m.address() == address)
    }

    /// This node's member record, if it is a member.
    pub fn self_member(&self) -> Option<&Member> {
        let me = self.self_node.as_ref()?;
        self.members.iter().find(|m| m.node() == me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::{Gossip, WallMillis};
    use crate::member::UpNumber;
    use crate::member::tests::{member, member_up, node};
    use MemberStatus::*;

    fn n(i: u64) -> UniqueAddress {
        node(&format!("h{i}:1"), 1)
    }

    fn events(old: &Gossip, new: &Gossip) -> Vec<ClusterEvent> {
        let me = n(1);
        diff(&MembershipState::new(old, &me, "default"), &MembershipState::new(new, &me, "default"))
    }

    fn names(ev: &[ClusterEvent]) -> Vec<&'static str> {
        ev.iter().map(ClusterEvent::type_name).collect()
    }

    #[test]
    fn no_change_gives_no_events() {
        let g = Gossip::with_members([member("h1:1", Up)]);
        assert!(events(&g, &g).is_empty());
    }

    #[test]
    fn the_initial_state_replays_as_member_events_and_leader() {
        let g = Gossip::with_members([member_up("h1:1", Up, UpNumber(1)), member("h2:1", Joining)]);
        let ev = events(&Gossip::empty(), &g);
        assert_eq!(names(&ev), ["MemberUp", "MemberJoined", "LeaderChanged", "RoleLeaderChanged"]);
    }

    #[test]
    fn status_changes_give_one_event_each_by_new_status() {
        let old =
            Gossip::with_members([member("h1:1", Up), member("h2:1", Joining), member("h3:1", Up)]);
        let new =
            Gossip::with_members([member("h1:1", Up), member("h2:1", Up), member("h3:1", Leaving)]);
        assert_eq!(names(&events(&old, &new)), ["MemberUp", "MemberLeft"]);
    }

    #[test]
    fn removed_members_report_their_previous_status() {
        let old = Gossip::with_members([member("h1:1", Up), member("h2:1", Exiting)]);
        let new = Gossip::with_members([member("h1:1", Up)]);
        let ev = events(&old, &new);
        match &ev[0] {
            ClusterEvent::MemberRemoved { member, previous_status } => {
                assert_eq!(member.status(), Removed);
                assert_eq!(*previous_status, Exiting);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unreachable_and_reachable_again_are_reported_once() {
        let old = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let mut new = old.clone();
        new.reachability_mut().unreachable(&n(1), &n(2));
        assert_eq!(names(&events(&old, &new)), ["UnreachableMember"]);
        let mut healed = new.clone();
        healed.reachability_mut().reachable(&n(1), &n(2));
        assert_eq!(names(&events(&new, &healed)), ["ReachableMember"]);
    }

    #[test]
    fn terminated_never_becomes_reachable_member() {
        let old =
            Gossip::with_members([member("h1:1", Up), member("h2:1", Up), member("h3:1", Up)]);
        let mut new = old.clone();
        new.reachability_mut().terminated(&n(1), &n(3));
        assert_eq!(names(&events(&old, &new)), ["UnreachableMember"]);
        let mut gone = new.clone();
        gone.remove(&n(3), WallMillis(1));
        assert_eq!(names(&events(&new, &gone)), ["MemberRemoved"]);
    }

    #[test]
    fn self_being_unreachable_is_not_reported() {
        let old = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let mut new = old.clone();
        new.reachability_mut().unreachable(&n(2), &n(1));
        assert!(events(&old, &new).is_empty());
    }

    #[test]
    fn leader_changes_are_reported_with_the_new_leader() {
        let old = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let new = Gossip::with_members([member("h1:1", Down), member("h2:1", Up)]);
        let ev = events(&old, &new);
        assert!(ev.contains(&ClusterEvent::LeaderChanged(Some(n(2).address))));
        assert!(ev.contains(&ClusterEvent::RoleLeaderChanged {
            role: "dc-default".into(),
            leader: Some(n(2).address)
        }));
    }

    #[test]
    fn the_snapshot_lists_unreachable_members_with_their_observers() {
        let mut g = Gossip::with_members([
            member_up("h1:1", Up, UpNumber(1)),
            member_up("h2:1", Up, UpNumber(2)),
            member_up("h3:1", Up, UpNumber(3)),
        ]);
        g.reachability_mut().unreachable(&n(1), &n(3));
        g.reachability_mut().unreachable(&n(2), &n(3));
        g.add_seen(&n(1));
        let me = n(1);
        let s =
            CurrentClusterState::of(&MembershipState::new(&g, &me, "default"), &BTreeSet::new());
        assert_eq!(s.members.len(), 3);
        assert_eq!(s.unreachable.len(), 1);
        assert_eq!(s.unreachable[0].1, BTreeSet::from([n(1), n(2)]));
        assert_eq!(s.leader, Some(n(1).address));
        assert_eq!(s.oldest, Some(n(1).address));
        assert_eq!(s.oldest_per_role.get("dc-default"), Some(&n(1).address));
        assert!(!s.convergence);
        assert_eq!(s.self_member().map(Member::status), Some(Up));
    }
}
