//! The pure part of the split-brain resolver: the local model of the members, the decision each
//! strategy takes on it, and the nodes each decision downs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::address::{Address, UniqueAddress};
use crate::gossip::SeenSet;
use crate::member::{Member, MemberStatus};
use crate::reachability::Reachability;

use super::strategy::Strategy;

/// What a strategy decided. [`DowningModel::nodes_to_down`] turns it into nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Down the reachable members: this side gives up.
    DownReachable,
    /// Down the unreachable members: this side survives.
    DownUnreachable,
    /// Down every member.
    DownAll,
    /// Down the members that are unreachable from some members but still talk to others through
    /// third parties, plus what a clean partition among the rest calls for.
    DownIndirectlyConnected,
    /// Take the lease, then down the unreachable members; without the lease, down the reachable.
    AcquireLeaseAndDownUnreachable {
        /// How long to wait before trying (the minority's head start for the majority).
        acquire_delay: Duration,
    },
    /// Take the lease, then act as [`Decision::DownIndirectlyConnected`]; without the lease,
    /// act as [`Decision::ReverseDownIndirectlyConnected`].
    AcquireLeaseAndDownIndirectlyConnected {
        /// How long to wait before trying.
        acquire_delay: Duration,
    },
    /// The lease was denied during an indirect connection: down the indirectly connected and
    /// the reachable members.
    ReverseDownIndirectlyConnected,
    /// A current member quarantined this node: down this node.
    DownSelfQuarantinedByRemote,
    /// This node's process was paused for longer than `stable_after`, so the others may have
    /// downed and removed it meanwhile, and it heard from no member within `stable_after` of
    /// resuming: down this node rather than act on a view that may be out of date.
    DownSelfAfterPause,
}

impl Decision {
    /// Whether the decision is about indirectly connected members.
    pub fn is_indirectly_connected(self) -> bool {
        matches!(
            self,
            Self::DownIndirectlyConnected
                | Self::AcquireLeaseAndDownIndirectlyConnected { .. }
                | Self::ReverseDownIndirectlyConnected
        )
    }

    /// For a decision that needs the lease, how long to wait before acquiring it.
    pub fn acquire_delay(self) -> Option<Duration> {
        match self {
            Self::AcquireLeaseAndDownUnreachable { acquire_delay }
            | Self::AcquireLeaseAndDownIndirectlyConnected { acquire_delay } => Some(acquire_delay),
            _ => None,
        }
    }

    /// What to do instead when the lease a decision needs is denied; `None` for decisions that
    /// need no lease.
    pub fn reverse(self) -> Option<Decision> {
        match self {
            Self::AcquireLeaseAndDownUnreachable { .. } => Some(Self::DownReachable),
            Self::AcquireLeaseAndDownIndirectlyConnected { .. } => {
                Some(Self::ReverseDownIndirectlyConnected)
            }
            _ => None,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DownReachable => f.write_str("DownReachable"),
            Self::DownUnreachable => f.write_str("DownUnreachable"),
            Self::DownAll => f.write_str("DownAll"),
            Self::DownIndirectlyConnected => f.write_str("DownIndirectlyConnected"),
            Self::AcquireLeaseAndDownUnreachable { acquire_delay } => {
                write!(f, "AcquireLeaseAndDownUnreachable({acquire_delay:?})")
            }
            Self::AcquireLeaseAndDownIndirectlyConnected { acquire_delay } => {
                write!(f, "AcquireLeaseAndDownIndirectlyConnected({acquire_delay:?})")
            }
            Self::ReverseDownIndirectlyConnected => f.write_str("ReverseDownIndirectlyConnected"),
            Self::DownSelfQuarantinedByRemote => f.write_str("DownSelfQuarantinedByRemote"),
            Self::DownSelfAfterPause => f.write_str("DownSelfAfterPause"),
        }
    }
}

/// Indirect connections on both sides of a clean partition left a second indirectly-connected
/// decision after the observations between indirectly connected nodes were set aside. The caller
/// downs all instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the decision without the observations between indirectly connected nodes is again \
     {decision}; down all instead"
)]
pub struct DoubleIndirectlyConnected {
    /// The second decision.
    pub decision: Decision,
}

/// The resolver's view of its own data center: every member with its last known
/// status, which of them are unreachable, the unreachable records among them, and who has seen
/// the current gossip. The resolver keeps it up to date from the cluster's events; tests build it
/// directly.
#[derive(Clone, Debug)]
pub struct DowningModel {
    strategy: Strategy,
    self_dc: String,
    /// Members of the data center, any status, in member (address) order.
    members: BTreeMap<UniqueAddress, Member>,
    /// May hold Joining and WeaklyUp members, and Down ones (a downed member counts as
    /// unreachable until it is reachable again or removed).
    unreachable: BTreeSet<UniqueAddress>,
    /// Only Unreachable and Terminated records whose observer and subject are members here.
    reachability: Reachability,
    /// Shared with the gossip it was read from.
    seen_by: Arc<SeenSet>,
    /// Down members that have been in the seen set of a gossip showing them Down: they took their
    /// Down in, and a node that sees itself Down shuts down.
    acknowledged: BTreeSet<UniqueAddress>,
    /// Down members that the node whose model this is does not observe as unreachable: it still
    /// reaches them, so its gossip brings them their Down. (Empty for a model read without that
    /// node, see [`set_reachability`](Self::set_reachability).)
    in_touch: BTreeSet<UniqueAddress>,
    /// Members that a decision of this node downed as the other side of a partition that this
    /// side outweighed: deciding on their own view, they are outweighed too.
    outvoted: BTreeSet<UniqueAddress>,
    /// Members removed while Down before they were seen to take their Down in, kept here as Down
    /// and unreachable until the resolver's next decision has counted them (see
    /// [`note_removed`](Self::note_removed)).
    removed_unacknowledged: BTreeSet<UniqueAddress>,
    /// The table and node that `reachability` and `in_touch` were last read from, while the
    /// members they were read with are unchanged: most gossips leave the table as it was, and
    /// reading it again would give the same result. Cleared by every change to the members.
    reachability_read_from: Option<(Reachability, Option<UniqueAddress>)>,
}

impl DowningModel {
    /// An empty model for `strategy` in data center `self_dc`.
    pub fn new(strategy: Strategy, self_dc: impl Into<String>) -> Self {
        Self {
            strategy,
            self_dc: self_dc.into(),
            members: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            reachability: Reachability::new(),
            seen_by: Arc::default(),
            acknowledged: BTreeSet::new(),
            in_touch: BTreeSet::new(),
            outvoted: BTreeSet::new(),
            removed_unacknowledged: BTreeSet::new(),
            reachability_read_from: None,
        }
    }

    /// The strategy.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// The data center whose members count.
    pub fn self_dc(&self) -> &str {
        &self.self_dc
    }

    // ---- updates ------------------------------------------------------------------------------

    /// Adds `m` or replaces its previous version. Members of other data centers are ignored.
    pub fn add(&mut self, m: Member) {
        if m.data_center() == self.self_dc {
            self.reachability_read_from = None;
            self.members.insert(m.node().clone(), m);
        }
    }

    /// Adds or updates `m` and marks it unreachable.
    pub fn add_unreachable(&mut self, m: Member) {
        if m.data_center() == self.self_dc {
            self.unreachable.insert(m.node().clone());
            self.add(m);
        }
    }

    /// Adds or updates `m` and marks it reachable.
    pub fn add_reachable(&mut self, m: Member) {
        if m.data_center() == self.self_dc {
            self.unreachable.remove(m.node());
            self.add(m);
        }
    }

    fn is_active(&self, node: &UniqueAddress) -> bool {
        self.members.get(node).is_some_and(|m| !m.status().is_down_or_exiting())
    }

    /// Forgets a removed member.
    pub fn remove(&mut self, node: &UniqueAddress) {
        self.reachability_read_from = None;
        self.members.remove(node);
        self.unreachable.remove(node);
        self.acknowledged.remove(node);
        self.in_touch.remove(node);
        self.outvoted.remove(node);
        self.removed_unacknowledged.remove(node);
    }

    /// A decision of this node downed `nodes` as the other side of a partition it outweighed
    /// (see [`note_removed`](Self::note_removed)).
    pub fn note_outvoted(&mut self, nodes: impl IntoIterator<Item = UniqueAddress>) {
        self.outvoted.extend(nodes);
    }

    /// The cluster removed `node`: forgets it, unless it was Down, never seen to take that in,
    /// not [outvoted](Self::note_outvoted) by this node, and the Down members (it among them) are
    /// at least as many as the members still counted.
    ///
    /// Such a member may be running still, cut off with a view in which nobody downed it. The
    /// leader removes a Down member once a member that is not Down observes it as unreachable,
    /// whether it stopped or was cut off before its Down reached it; in the second case it goes
    /// on deciding on its own view. A member that this node downed as the minority of a
    /// partition is outweighed there too and downs itself, and so is one that a decision left
    /// outnumbered by the members it kept. One downed otherwise — as indirectly connected, while
    /// this node reached it and was cut off from it just after, or by another node's decision
    /// that kept no more members than it downed, on a view this node cannot check — may keep
    /// itself. Under keep-majority, the only strategy that counts downed members, the model keeps
    /// it as an unreachable Down member, counted on the other side by the next decision, until
    /// [`forget_removed_unacknowledged`](Self::forget_removed_unacknowledged).
    pub fn note_removed(&mut self, node: &UniqueAddress) {
        let down = self.members.values().filter(|m| m.status() == MemberStatus::Down).count();
        let keep = matches!(self.strategy, Strategy::KeepMajority { .. })
            && self.members.get(node).is_some_and(|m| m.status() == MemberStatus::Down)
            && !self.acknowledged.contains(node)
            && !self.outvoted.contains(node)
            && self.members(false, false).count() <= down;
        if !keep {
            self.remove(node);
            return;
        }
        self.reachability_read_from = None;
        self.in_touch.remove(node);
        self.unreachable.insert(node.clone());
        self.removed_unacknowledged.insert(node.clone());
    }

    /// Forgets the members [`note_removed`](Self::note_removed) kept.
    pub fn forget_removed_unacknowledged(&mut self) {
        for node in std::mem::take(&mut self.removed_unacknowledged) {
            self.remove(&node);
        }
    }

    /// The members removed while Down before they were seen to take that in, still kept.
    pub fn removed_unacknowledged(&self) -> &BTreeSet<UniqueAddress> {
        &self.removed_unacknowledged
    }

    /// Whether `node`, a Down member, may still be running with a view in which it keeps
    /// itself: it was never seen to take its Down in, and it was removed or this node does not
    /// reach it.
    fn may_keep_itself(&self, node: &UniqueAddress) -> bool {
        !self.acknowledged.contains(node)
            && (self.removed_unacknowledged.contains(node) || !self.in_touch.contains(node))
            && !self.superseded(node)
    }

    /// Whether a member that is not Down holds `node`'s address under another uid. Only one
    /// process can hold an address at a time, so that incarnation joined after `node`'s process
    /// had stopped: `node` is not running anywhere.
    fn superseded(&self, node: &UniqueAddress) -> bool {
        self.members.values().any(|m| {
            m.node().address == node.address
                && m.node().uid != node.uid
                && m.status() != MemberStatus::Down
        })
    }

    /// Whether an unreachable member calls for a decision: one that is neither Down nor removed,
    /// or a Down one that may keep itself. A Down member that took its
    /// Down in, or that this node still reaches, is on its way out.
    pub fn has_unreachable_to_decide(&self) -> bool {
        self.unreachable.iter().any(|n| {
            self.members.get(n).is_none_or(|m| m.status() != MemberStatus::Down)
                || self.may_keep_itself(n)
        })
    }

    /// Takes the Unreachable and Terminated records of `r` whose observer and subject are both
    /// members of this data center and neither is Down or Exiting.
    ///
    /// A member that is Down or Exiting is on its way out: that it is unreachable says nothing
    /// about how the others are connected, and what it observed is stale. (The reference counts
    /// such records, so a node that merely saw a downed node unreachable, and is unreachable
    /// itself, passes for indirectly connected. Two nodes cut off from each other can then each
    /// take the other for the indirectly connected one and keep themselves: two live clusters.)
    pub fn set_reachability(&mut self, r: &Reachability) {
        self.set_reachability_seen_from(r, None);
    }

    /// [`set_reachability`](Self::set_reachability) as `self_node` sees it: without the records
    /// of an observer that is cut off from `self_node`'s whole side — `self_node` and every
    /// member it reaches observe that observer as unreachable.
    ///
    /// Such records crossed before the cut (no path is left for fresher ones), and nothing on
    /// this side can tell whether they still hold. Where a partition cut its sides in steps, a
    /// record of the far side about this node can cross before the cut is complete: with this
    /// node's own record about the far node it forms a cycle, and the two would be taken for
    /// indirectly connected although the partition is clean. The node deciding would then down
    /// itself and the far node, decide on the rest counting both on its side, and keep a part
    /// that the far side (which saw no cycle) gave up: two live clusters (README, "Split brain
    /// resolver"). An observer that some member of this side still reaches keeps its records:
    /// that is an indirect connection (the reference keeps every record).
    pub fn set_reachability_seen_from(
        &mut self,
        r: &Reachability,
        self_node: Option<&UniqueAddress>,
    ) {
        if self
            .reachability_read_from
            .as_ref()
            .is_some_and(|(table, node)| node.as_ref() == self_node && table == r)
        {
            return;
        }
        self.reachability_read_from = Some((r.clone(), self_node.cloned()));
        let observed = self_node.map(|me| (me, r.all_unreachable_from(me)));
        let cut_off: BTreeSet<&UniqueAddress> =
            observed.as_ref().map_or_else(BTreeSet::new, |(me, observed)| {
                if observed.is_empty() {
                    // Nothing this node sees unreachable can be cut off (the common case, and the
                    // side below costs a look-up per member).
                    return BTreeSet::new();
                }
                let side: Vec<&UniqueAddress> = (self.members.keys())
                    .filter(|m| m == me || (self.is_active(m) && !observed.contains(*m)))
                    .collect();
                (observed.iter())
                    .filter(|o| side.iter().all(|m| m == o || !r.is_reachable_by(m, o)))
                    .collect()
            });
        self.reachability = r.unreachable_records_where(
            |o| self.is_active(o) && !cut_off.contains(o),
            |s| self.is_active(s),
            1,
        );
        self.in_touch = observed.as_ref().map_or_else(BTreeSet::new, |(_, observed)| {
            (self.members.values())
                .filter(|m| m.status() == MemberStatus::Down)
                .map(Member::node)
                .filter(|n| !self.removed_unacknowledged.contains(*n) && !observed.contains(*n))
                .cloned()
                .collect()
        });
    }

    /// The nodes that have seen the current gossip. The Down members among them have taken their
    /// Down in.
    pub fn set_seen_by(&mut self, seen_by: Arc<SeenSet>) {
        for m in self.members.values() {
            if m.status() == MemberStatus::Down && seen_by.contains(m.node()) {
                self.acknowledged.insert(m.node().clone());
            }
        }
        self.seen_by = seen_by;
    }

    // ---- views --------------------------------------------------------------------------------

    /// Every member of the data center, any status, in address order.
    pub fn all_members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// The nodes marked unreachable (Joining, WeaklyUp and Down ones included).
    pub fn unreachable(&self) -> &BTreeSet<UniqueAddress> {
        &self.unreachable
    }

    /// The unreachable records the decisions look at.
    pub fn reachability(&self) -> &Reachability {
        &self.reachability
    }

    /// Whether `node` is marked unreachable.
    pub fn is_unreachable(&self, node: &UniqueAddress) -> bool {
        self.unreachable.contains(node)
    }

    /// The Joining and WeaklyUp members.
    pub fn joining(&self) -> impl Iterator<Item = &Member> {
        self.members.values().filter(|m| m.status().is_joining())
    }

    /// The members that count: not Joining, WeaklyUp, Down or Exiting. `including_possibly_up`
    /// also counts Joining and WeaklyUp members (they may be Up on the other side of a
    /// partition); `excluding_possibly_exiting` leaves out Leaving members (they may be Exiting
    /// there). In address order.
    pub fn members(
        &self,
        including_possibly_up: bool,
        excluding_possibly_exiting: bool,
    ) -> impl Iterator<Item = &Member> {
        self.members.values().filter(move |m| match m.status() {
            MemberStatus::Joining | MemberStatus::WeaklyUp => including_possibly_up,
            MemberStatus::Leaving => !excluding_possibly_exiting,
            MemberStatus::Down | MemberStatus::Exiting => false,
            _ => true,
        })
    }

    /// [`members`](Self::members) restricted to the strategy's role.
    pub fn members_with_role(
        &self,
        including_possibly_up: bool,
        excluding_possibly_exiting: bool,
    ) -> impl Iterator<Item = &Member> {
        self.members(including_possibly_up, excluding_possibly_exiting)
            .filter(|m| self.has_strategy_role(m))
    }

    /// Whether `m` has the strategy's role, or the strategy has none.
    fn has_strategy_role(&self, m: &Member) -> bool {
        self.strategy.role().is_none_or(|r| m.has_role(r))
    }

    /// The reachable ones of [`members_with_role`](Self::members_with_role).
    pub fn reachable_members_with_role(
        &self,
        including_possibly_up: bool,
        excluding_possibly_exiting: bool,
    ) -> impl Iterator<Item = &Member> {
        self.members_with_role(including_possibly_up, excluding_possibly_exiting)
            .filter(|m| !self.is_unreachable(m.node()))
    }

    /// The unreachable ones of [`members_with_role`](Self::members_with_role).
    pub fn unreachable_members_with_role(
        &self,
        including_possibly_up: bool,
        excluding_possibly_exiting: bool,
    ) -> impl Iterator<Item = &Member> {
        self.members_with_role(including_possibly_up, excluding_possibly_exiting)
            .filter(|m| self.is_unreachable(m.node()))
    }

    /// The unreachable members with the strategy's role that are Down and [may keep
    /// themselves](Self::may_keep_itself): downed, but not removed yet, or removed before they
    /// were seen to take their Down in.
    ///
    /// At most one per address: of several Down incarnations of one address, only the last to
    /// start can be running (members are ordered by address, so incarnations are neighbours).
    fn unreachable_down_with_role(&self) -> impl Iterator<Item = &Member> {
        let mut last: Option<&Address> = None;
        self.members.values().filter(move |m| {
            let counts = m.status() == MemberStatus::Down
                && self.is_unreachable(m.node())
                && self.has_strategy_role(m)
                && self.may_keep_itself(m.node())
                && last != Some(&m.node().address);
            if counts {
                last = Some(&m.node().address);
            }
            counts
        })
    }

    /// Whether every unreachable member that counts is Down or Exiting (which, as such members do
    /// not count, means none is left), or nothing is unreachable.
    pub fn is_all_unreachable_down_or_exiting(&self) -> bool {
        self.unreachable.is_empty()
            || self
                .members(false, false)
                .filter(|m| self.is_unreachable(m.node()))
                .all(|m| m.status().is_down_or_exiting())
    }

    /// The members a decision may down: every member not already Down or Exiting.
    pub fn downable(&self) -> BTreeSet<UniqueAddress> {
        self.members
            .values()
            .filter(|m| !m.status().is_down_or_exiting())
            .map(|m| m.node().clone())
            .collect()
    }

    /// Whether `decision`, on an indirect connection, would keep `self_node` alone (with joiners
    /// at most, which count on no side) while `self_node` itself observes one of the indirectly
    /// connected members as unreachable. Its own link to them is broken, and only the others'
    /// records, possibly stale, make them the indirectly connected ones and not it; the members
    /// it still reaches it downs too, as the strategy's decision on the rest. Another node can
    /// reach the same conclusion about everyone but itself, or the members it gave up can keep
    /// themselves: each keeps itself, and two clusters grow from the survivors. (A node that
    /// reaches all the indirectly connected ones, their links to each other broken, is kept as
    /// usual, even alone.)
    pub fn keeps_itself_alone(&self, decision: Decision, self_node: &UniqueAddress) -> bool {
        let indirect = self.indirectly_connected();
        let observes_indirect = (self.reachability.all_unreachable_from(self_node))
            .iter()
            .any(|n| indirect.contains(n));
        if !observes_indirect {
            return false;
        }
        let Ok(downs) = self.nodes_to_down(decision, self_node) else { return false };
        let mut others =
            self.members(false, false).map(Member::node).filter(|n| *n != self_node).peekable();
        !downs.contains(self_node) && others.peek().is_some() && others.all(|n| downs.contains(n))
    }

    fn indirectly_connected_from_cycles(&self) -> BTreeSet<UniqueAddress> {
        let observers: BTreeSet<UniqueAddress> =
            self.reachability.records().map(|r| r.observer).collect();
        let subjects = self.reachability.all_unreachable_or_terminated();
        observers.intersection(subjects).cloned().collect()
    }

    fn indirectly_connected_from_seen(&self) -> BTreeSet<UniqueAddress> {
        self.reachability
            .records()
            .filter(|r| self.seen_by.contains(&r.subject))
            .flat_map(|r| [r.observer, r.subject])
            .collect()
    }

    /// Members that are unreachable from some members yet still talk to the cluster through
    /// others: those that both observe someone unreachable and are observed so (a
    /// cycle), and both ends of every record whose subject has seen the current gossip. Clean
    /// partitions and crashes produce none.
    pub fn indirectly_connected(&self) -> BTreeSet<UniqueAddress> {
        let mut out = self.indirectly_connected_from_cycles();
        out.extend(self.indirectly_connected_from_seen());
        out
    }

    // ---- decisions ----------------------------------------------------------------------------

    /// The strategy's decision on the current model.
    pub fn decide(&self) -> Decision {
        let indirect = !self.indirectly_connected().is_empty();
        match &self.strategy {
            Strategy::KeepMajority { .. } => {
                if indirect {
                    Decision::DownIndirectlyConnected
                } else {
                    self.keep_majority()
                }
            }
            Strategy::StaticQuorum { quorum_size, .. } => {
                let members = self.members_with_role(false, false).count();
                if members > (quorum_size * 2).saturating_sub(1) {
                    Decision::DownAll
                } else if indirect {
                    Decision::DownIndirectlyConnected
                } else if members - self.unreachable_members_with_role(false, false).count()
                    >= *quorum_size
                {
                    Decision::DownUnreachable
                } else {
                    Decision::DownReachable
                }
            }
            Strategy::KeepOldest { down_if_alone, .. } => {
                if indirect {
                    Decision::DownIndirectlyConnected
                } else {
                    self.keep_oldest(*down_if_alone)
                }
            }
            Strategy::DownAll => Decision::DownAll,
            Strategy::LeaseMajority { acquire_lease_delay_for_minority, .. } => {
                if indirect {
                    Decision::AcquireLeaseAndDownIndirectlyConnected {
                        acquire_delay: Duration::ZERO,
                    }
                } else {
                    let acquire_delay = if self.is_in_minority() {
                        *acquire_lease_delay_for_minority
                    } else {
                        Duration::ZERO
                    };
                    Decision::AcquireLeaseAndDownUnreachable { acquire_delay }
                }
            }
        }
    }

    /// Keep the larger side; on a tie, the side holding `lowest`, the member with the lowest
    /// address.
    fn majority_decision(&self, this_side: usize, other_side: usize, lowest: &Member) -> Decision {
        if this_side == other_side {
            if self.is_unreachable(lowest.node()) {
                Decision::DownReachable
            } else {
                Decision::DownUnreachable
            }
        } else if this_side > other_side {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    fn keep_majority(&self) -> Decision {
        let Some(lowest) = self.members_with_role(false, false).next() else {
            return Decision::DownAll;
        };
        let this_side = self.reachable_members_with_role(false, false).count();
        let other_side = self.unreachable_members_with_role(false, false).count();
        let decision = self.majority_decision(this_side, other_side, lowest);
        if decision != Decision::DownUnreachable {
            return decision;
        }
        // A membership change may have happened on the other side during the partition: count
        // this side without Leaving members (they may be Exiting there) and the other side with
        // Joining and WeaklyUp ones (they may be Up there), and with the unreachable members
        // that are Down but not yet removed. Those were downed by an earlier decision that may
        // not have reached them, taken on a view that may differ from theirs: they may have kept
        // themselves and downed this side (README, "Split brain resolver").
        // Only the same conclusion stands. On a tie, the downed members counted on the other side
        // count for the lowest address too: deciding on their own view, they count themselves.
        let lowest = (self.members_with_role(false, true))
            .chain(self.unreachable_down_with_role())
            .min_by(|a, b| a.node().cmp(b.node()));
        let Some(lowest) = lowest else {
            return Decision::DownAll;
        };
        let this_side = self.reachable_members_with_role(false, true).count();
        let other_side = self.unreachable_members_with_role(true, false).count()
            + self.unreachable_down_with_role().count();
        match self.majority_decision(this_side, other_side, lowest) {
            Decision::DownUnreachable => Decision::DownUnreachable,
            _ => Decision::DownAll,
        }
    }

    fn oldest_decision(
        down_if_alone: bool,
        oldest_on_this_side: bool,
        this_side: usize,
        other_side: usize,
    ) -> Decision {
        // Two nodes: the oldest is kept even though it is alone, as the other is no better off.
        if oldest_on_this_side {
            if down_if_alone && this_side == 1 && other_side >= 2 {
                Decision::DownReachable
            } else {
                Decision::DownUnreachable
            }
        } else if down_if_alone && other_side == 1 && this_side >= 2 {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    fn keep_oldest(&self, down_if_alone: bool) -> Decision {
        let oldest = |excluding_exiting: bool| {
            self.members_with_role(false, excluding_exiting).min_by(|a, b| a.age_cmp(b))
        };
        let Some(first) = oldest(false) else {
            return Decision::DownAll;
        };
        let decision = Self::oldest_decision(
            down_if_alone,
            !self.is_unreachable(first.node()),
            self.reachable_members_with_role(false, false).count(),
            self.unreachable_members_with_role(false, false).count(),
        );
        if decision != Decision::DownUnreachable {
            return decision;
        }
        // Membership changes during the partition: Leaving members may be Exiting on the other
        // side, and (only relevant to the alone test) Joining and WeaklyUp ones may be Up there.
        let Some(first) = oldest(true) else {
            return Decision::DownAll;
        };
        let again = Self::oldest_decision(
            down_if_alone,
            !self.is_unreachable(first.node()),
            self.reachable_members_with_role(down_if_alone, true).count(),
            self.unreachable_members_with_role(down_if_alone, true).count(),
        );
        match again {
            Decision::DownUnreachable => Decision::DownUnreachable,
            _ => Decision::DownAll,
        }
    }

    /// For lease-majority: whether this side is the smaller one, or the half without the lowest
    /// address on a tie. With no member of the role, no side is.
    fn is_in_minority(&self) -> bool {
        let Some(lowest) = self.members_with_role(false, false).next() else {
            return false;
        };
        let members = self.members_with_role(false, false).count();
        let unreachable = self.unreachable_members_with_role(false, false).count();
        if unreachable * 2 == members {
            self.is_unreachable(lowest.node())
        } else {
            unreachable * 2 > members
        }
    }

    // ---- resulting node sets ------------------------------------------------------------------

    /// The nodes `decision` downs, given `self_node`.
    ///
    /// # Errors
    /// [`DoubleIndirectlyConnected`] when indirect connections and a clean partition cannot be
    /// told apart; the caller then downs all ([`Decision::DownAll`]).
    pub fn nodes_to_down(
        &self,
        decision: Decision,
        self_node: &UniqueAddress,
    ) -> Result<BTreeSet<UniqueAddress>, DoubleIndirectlyConnected> {
        let downable = self.downable();
        Ok(match decision {
            Decision::DownUnreachable | Decision::AcquireLeaseAndDownUnreachable { .. } => {
                downable.intersection(&self.unreachable).cloned().collect()
            }
            Decision::DownReachable => downable.difference(&self.unreachable).cloned().collect(),
            Decision::DownAll => downable,
            Decision::DownIndirectlyConnected
            | Decision::AcquireLeaseAndDownIndirectlyConnected { .. } => {
                let mut nodes = self.indirectly_connected();
                nodes
                    .extend(self.additional_nodes_when_indirectly_connected(&downable, self_node)?);
                downable.intersection(&nodes).cloned().collect()
            }
            Decision::ReverseDownIndirectlyConnected => {
                let indirect = self.indirectly_connected();
                downable
                    .iter()
                    .filter(|n| indirect.contains(*n) || !self.unreachable.contains(*n))
                    .cloned()
                    .collect()
            }
            Decision::DownSelfQuarantinedByRemote | Decision::DownSelfAfterPause => {
                downable.into_iter().filter(|n| n == self_node).collect()
            }
        })
    }

    /// When indirect connections come with a clean partition or crashed nodes, the decision the
    /// strategy takes on the rest: set aside the observations between indirectly connected nodes
    /// (and about members no longer downable), decide again, and down what that decides.
    fn additional_nodes_when_indirectly_connected(
        &self,
        downable: &BTreeSet<UniqueAddress>,
        self_node: &UniqueAddress,
    ) -> Result<BTreeSet<UniqueAddress>, DoubleIndirectlyConnected> {
        let indirect = self.indirectly_connected();
        if self.unreachable.iter().all(|n| indirect.contains(n)) {
            return Ok(BTreeSet::new());
        }
        let cycles = self.indirectly_connected_from_cycles();
        let seen = self.indirectly_connected_from_seen();
        let records: Vec<_> = self
            .reachability
            .records()
            .filter(|r| {
                downable.contains(&r.observer)
                    && downable.contains(&r.subject)
                    && !(cycles.contains(&r.observer) && cycles.contains(&r.subject))
                    && !(seen.contains(&r.observer) && seen.contains(&r.subject))
            })
            .collect();
        let versions: Vec<_> = records.iter().map(|r| (r.observer.clone(), 1)).collect();
        let reachability = Reachability::from_parts(records, versions);
        let without = DowningModel {
            unreachable: reachability.all_unreachable_or_terminated().clone(),
            reachability,
            ..self.clone()
        };
        let decision = without.decide();
        if decision.is_indirectly_connected() {
            return Err(DoubleIndirectlyConnected { decision });
        }
        without.nodes_to_down(decision, self_node)
    }
}
