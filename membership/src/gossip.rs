//! The replicated cluster state: members, seen set, reachability, vector clock and tombstones.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sha1::{Digest, Sha1};

use crate::address::UniqueAddress;
use crate::member::{Member, MemberStatus};
use crate::reachability::Reachability;
use crate::vclock::VectorClock;

/// A wall-clock time in milliseconds since the Unix epoch, used only to age tombstones. Its own
/// type, because the core otherwise measures time with `Instant`s, and a wall-clock reading must
/// not be mistaken for a duration or a monotonic time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallMillis(pub u64);

impl WallMillis {
    /// `d` later, rounded down to a millisecond and saturating at the largest time.
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }

    /// `d` earlier, rounded down to a millisecond and saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
    }
}

/// One version of the cluster state, as gossiped between nodes.
///
/// Invariants (checked by [`Gossip::check_invariants`], and asserted in debug builds after every
/// change the core makes): no member is Removed; every reachability observer and versioned node is
/// a member; every seen node is a member; the vector clock has no more entries than there are
/// members plus tombstoned nodes pruned since.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gossip {
    /// Shared between copies until one changes it: a node takes in a received gossip by copying it
    /// and adding itself to the seen set, which leaves the members as they were.
    members: Arc<Members>,
    /// Shared the same way: a copy taken in by a node that has already seen it, and the
    /// resolver's view of who has seen the current version, hold the same set.
    seen: Arc<SeenSet>,
    reachability: Reachability,
    version: VectorClock,
    tombstones: BTreeMap<UniqueAddress, WallMillis>,
}

/// Reads, prints and compares a table held with values computed from it as the table alone:
/// the computed values are not part of the state.
macro_rules! table_with_cache {
    ($wrapper:ty, $field:ident, $table:ty) => {
        impl std::ops::Deref for $wrapper {
            type Target = $table;

            fn deref(&self) -> &Self::Target {
                &self.$field
            }
        }

        impl std::fmt::Debug for $wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.$field.fmt(f)
            }
        }

        impl PartialEq for $wrapper {
            fn eq(&self, other: &Self) -> bool {
                self.$field == other.$field
            }
        }

        impl Eq for $wrapper {}
    };
}

table_with_cache!(Members, map, BTreeMap<UniqueAddress, Member>);
table_with_cache!(SeenSet, set, BTreeSet<UniqueAddress>);

/// The members of a gossip by node, with what every view asks of all of them computed once.
#[derive(Clone, Default)]
struct Members {
    map: BTreeMap<UniqueAddress, Member>,
    /// The data center of every member when they are all in one (`None` when there are none or
    /// several), computed on first use: most views filter members by data center, most clusters
    /// have one, and a table is shared by the copies of a gossip on many nodes.
    one_data_center: OnceLock<Option<Arc<str>>>,
    /// Every role of every member, in order, computed on first use: the events compare the
    /// role leaders of two versions whenever members change.
    roles: OnceLock<Vec<String>>,
}

impl Members {
    fn new(map: BTreeMap<UniqueAddress, Member>) -> Self {
        Self { map, one_data_center: OnceLock::new(), roles: OnceLock::new() }
    }

    /// The table, for a change: what was computed from it is dropped.
    fn map_mut(&mut self) -> &mut BTreeMap<UniqueAddress, Member> {
        self.one_data_center = OnceLock::new();
        self.roles = OnceLock::new();
        &mut self.map
    }

    fn roles(&self) -> &[String] {
        self.roles.get_or_init(|| {
            // Few distinct roles among many members: a short list first, then sorted.
            let mut roles: Vec<&String> = Vec::new();
            for r in self.map.values().flat_map(|m| m.roles().iter()) {
                if !roles.contains(&r) {
                    roles.push(r);
                }
            }
            roles.sort_unstable();
            roles.into_iter().cloned().collect()
        })
    }

    fn nodes_in_data_center<'a>(
        &'a self,
        dc: &'a str,
    ) -> impl Iterator<Item = &'a UniqueAddress> + 'a {
        let all = self.all_in_data_center(dc);
        (self.map.iter()).filter(move |(_, m)| all || m.data_center() == dc).map(|(n, _)| n)
    }

    fn all_in_data_center(&self, dc: &str) -> bool {
        let one = self.one_data_center.get_or_init(|| {
            let mut members = self.map.values();
            let first = members.next()?.data_center();
            members.all(|m| m.data_center() == first).then(|| first.into())
        });
        match one {
            Some(one) => **one == *dc,
            None => self.map.is_empty(),
        }
    }
}

/// The nodes that have seen a gossip version, with its digest computed once.
#[derive(Clone, Default)]
pub struct SeenSet {
    set: BTreeSet<UniqueAddress>,
    digest: OnceLock<[u8; 20]>,
}

impl SeenSet {
    /// The set, for a change: the digest is computed again.
    fn set_mut(&mut self) -> &mut BTreeSet<UniqueAddress> {
        self.digest = OnceLock::new();
        &mut self.set
    }

    /// SHA-1 of the nodes as text, comma-separated, in node order.
    fn digest(&self) -> [u8; 20] {
        *self.digest.get_or_init(|| {
            /// Feeds formatted text straight into the hash, without a string per node.
            struct Feed<'a>(&'a mut Sha1);
            impl std::fmt::Write for Feed<'_> {
                fn write_str(&mut self, s: &str) -> std::fmt::Result {
                    self.0.update(s.as_bytes());
                    Ok(())
                }
            }
            let mut hasher = Sha1::new();
            for (i, node) in self.set.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                std::fmt::Write::write_fmt(&mut Feed(&mut hasher), format_args!("{node}"))
                    .expect("hashing text cannot fail");
            }
            hasher.finalize().into()
        })
    }
}

impl From<BTreeSet<UniqueAddress>> for SeenSet {
    fn from(set: BTreeSet<UniqueAddress>) -> Self {
        Self { set, digest: OnceLock::new() }
    }
}

/// A gossip's member table, held apart from the gossip (see [`Gossip::member_table`]).
#[derive(Clone, Debug, Default)]
pub struct MemberTable(Arc<Members>);

impl MemberTable {
    /// Whether `gossip` has this very table (see [`Gossip::shares_members_with`]).
    pub fn is_of(&self, gossip: &Gossip) -> bool {
        Arc::ptr_eq(&self.0, &gossip.members)
    }

    /// The members in member ordering.
    pub fn members(&self) -> impl DoubleEndedIterator<Item = &Member> + Clone {
        self.0.values()
    }

    /// See [`Gossip::all_in_data_center`].
    pub fn all_in_data_center(&self, dc: &str) -> bool {
        self.0.all_in_data_center(dc)
    }

    /// See [`Gossip::nodes_in_data_center`].
    pub fn nodes_in_data_center<'a>(
        &'a self,
        dc: &'a str,
    ) -> impl Iterator<Item = &'a UniqueAddress> + 'a {
        self.0.nodes_in_data_center(dc)
    }
}

/// A gossip that breaks a structural invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid gossip: {0}")]
pub struct InvalidGossip(pub String);

impl Gossip {
    /// An empty gossip (a node that has not joined).
    pub fn empty() -> Self {
        Self::default()
    }

    /// A gossip with these members and nothing else.
    pub fn with_members(members: impl IntoIterator<Item = Member>) -> Self {
        Self {
            members: Arc::new(Members::new(
                members.into_iter().map(|m| (m.node().clone(), m)).collect(),
            )),
            ..Self::default()
        }
    }

    /// Assembles a gossip from its parts (for decoding); see [`Gossip::check_invariants`].
    pub fn from_parts(
        members: impl IntoIterator<Item = Member>,
        seen: BTreeSet<UniqueAddress>,
        reachability: Reachability,
        version: VectorClock,
        tombstones: BTreeMap<UniqueAddress, WallMillis>,
    ) -> Self {
        Self {
            members: Arc::new(Members::new(
                members.into_iter().map(|m| (m.node().clone(), m)).collect(),
            )),
            seen: Arc::new(SeenSet::from(seen)),
            reachability,
            version,
            tombstones,
        }
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members in member ordering.
    pub fn members(&self) -> impl DoubleEndedIterator<Item = &Member> + ExactSizeIterator + Clone {
        self.members.values()
    }

    /// The member with this identity.
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// Whether `node` is a member.
    pub fn has_member(&self, node: &UniqueAddress) -> bool {
        self.members.contains_key(node)
    }

    /// Whether another incarnation of `node`'s address (another uid) is a member too.
    pub fn has_other_incarnation(&self, node: &UniqueAddress) -> bool {
        // Members are ordered by address, then uid: another incarnation is a neighbour.
        let before = self.members.range(..node).next_back();
        let after = self.members.range((Bound::Excluded(node), Bound::Unbounded)).next();
        before.into_iter().chain(after).any(|(n, _)| n.address == node.address)
    }

    /// The members at `node`'s address other than `node` (other uids), in member ordering.
    pub fn other_incarnations<'a>(
        &'a self,
        node: &'a UniqueAddress,
    ) -> impl Iterator<Item = &'a Member> + 'a {
        // Members are ordered by address, then uid: the incarnations of an address are neighbours.
        let same_address = move |(n, _): &(&UniqueAddress, &Member)| n.address == node.address;
        let mut before: Vec<&Member> =
            self.members.range(..node).rev().take_while(same_address).map(|(_, m)| m).collect();
        before.reverse();
        let after = self.members.range((Bound::Excluded(node), Bound::Unbounded));
        before.into_iter().chain(after.take_while(same_address).map(|(_, m)| m))
    }

    /// Whether every member is in data center `dc` (true when there are none). Computed once
    /// per member table.
    pub fn all_in_data_center(&self, dc: &str) -> bool {
        self.members.all_in_data_center(dc)
    }

    /// Every role of every member (including `dc-` roles), sorted, each once. Computed once per
    /// member table.
    pub fn roles(&self) -> &[String] {
        self.members.roles()
    }

    /// The nodes of the members in data center `dc`, in member ordering; when all are there, the
    /// members themselves are not read.
    pub fn nodes_in_data_center<'a>(
        &'a self,
        dc: &'a str,
    ) -> impl Iterator<Item = &'a UniqueAddress> + 'a {
        self.members.nodes_in_data_center(dc)
    }

    /// The member nodes in member ordering.
    pub fn nodes(&self) -> impl DoubleEndedIterator<Item = &UniqueAddress> + ExactSizeIterator {
        self.members.keys()
    }

    /// Whether `other` shares this gossip's member table: a copy that changed no member (only
    /// the seen set, the clock or reachability), so both hold the same members. False says
    /// nothing: equal tables built apart are not shared.
    pub fn shares_members_with(&self, other: &Gossip) -> bool {
        Arc::ptr_eq(&self.members, &other.members)
    }

    /// A handle on the member table, to tell later whether a gossip still has these members
    /// ([`MemberTable::is_of`]) or what changed, without copying them.
    pub fn member_table(&self) -> MemberTable {
        MemberTable(self.members.clone())
    }

    /// The member nodes.
    pub fn member_nodes(&self) -> BTreeSet<UniqueAddress> {
        self.members.keys().cloned().collect()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The members in member ordering, each with whether it has seen this version: one pass over
    /// both sorted tables instead of a seen-set lookup per member.
    pub fn members_with_seen(&self) -> impl Iterator<Item = (&Member, bool)> + '_ {
        let mut seen = self.seen.iter().peekable();
        self.members.iter().map(move |(node, m)| (m, advance_to(&mut seen, node)))
    }

    /// The members of `self` that `before` does not have or has in another version, each with
    /// its version there, in member ordering: the walk reads only the tables, not the members
    /// they share.
    pub fn changed_members<'a>(
        &'a self,
        before: &'a Gossip,
    ) -> impl Iterator<Item = (Option<&'a Member>, &'a Member)> + 'a {
        let shared = Arc::ptr_eq(&self.members, &before.members);
        let mut old = before.members.iter().peekable();
        self.members.iter().take_while(move |_| !shared).filter_map(move |(node, m)| {
            while old.next_if(|(o, _)| *o < node).is_some() {}
            match old.next_if(|(o, _)| *o == node) {
                Some((_, o)) if o.is_same_version(m) => None,
                was => Some((was.map(|(_, o)| o), m)),
            }
        })
    }

    /// The members of `self` that `other` does not have, in member ordering.
    pub fn members_missing_from<'a>(
        &'a self,
        other: &'a Gossip,
    ) -> impl Iterator<Item = &'a Member> + 'a {
        self.changed_members(other).filter_map(|(was, m)| was.is_none().then_some(m))
    }

    /// Nodes that have seen this version.
    pub fn seen(&self) -> &BTreeSet<UniqueAddress> {
        &self.seen
    }

    /// The seen set, shared rather than copied.
    pub fn shared_seen(&self) -> Arc<SeenSet> {
        self.seen.clone()
    }

    /// Whether `node` has seen this version.
    pub fn seen_by(&self, node: &UniqueAddress) -> bool {
        self.seen.contains(node)
    }

    /// The reachability table.
    pub fn reachability(&self) -> &Reachability {
        &self.reachability
    }

    /// The vector clock.
    pub fn version(&self) -> &VectorClock {
        &self.version
    }

    /// Removed nodes with the wall-clock time of their removal.
    pub fn tombstones(&self) -> &BTreeMap<UniqueAddress, WallMillis> {
        &self.tombstones
    }

    /// Marks this version as seen by `node` (a member).
    pub fn add_seen(&mut self, node: &UniqueAddress) {
        // Copied only when it changes: a node taking in a version it has seen shares the set.
        if !self.seen.contains(node) && self.members.contains_key(node) {
            Arc::make_mut(&mut self.seen).set_mut().insert(node.clone());
        }
    }

    /// Only `node` has seen this version.
    pub fn only_seen(&mut self, node: &UniqueAddress) {
        self.clear_seen();
        self.add_seen(node);
    }

    /// Nobody has seen this version.
    pub fn clear_seen(&mut self) {
        if !self.seen.is_empty() {
            self.seen = Arc::default();
        }
    }

    /// Adds the nodes that have seen `other` (the same version) and are members here.
    pub fn merge_seen(&mut self, other: &Gossip) {
        // One pass over the sorted tables: a node's gossip is mostly taken in this way, and a
        // lookup per seen node costs a cluster of thousands more than the rest of it. A first
        // pass finds whether `other` adds anyone at all: mostly it does not.
        if Arc::ptr_eq(&self.seen, &other.seen) || !self.adds_to_seen(other) {
            return;
        }
        let mut members = self.members.keys().peekable();
        let mut theirs = other.seen.iter().filter(|n| advance_to(&mut members, n)).peekable();
        let mut ours = self.seen.iter().peekable();
        let mut union = Vec::with_capacity(self.seen.len().max(other.seen.len()));
        loop {
            let next = match (ours.peek(), theirs.peek()) {
                (Some(a), Some(b)) => match a.cmp(b) {
                    Ordering::Less => ours.next(),
                    Ordering::Greater => theirs.next(),
                    Ordering::Equal => {
                        theirs.next();
                        ours.next()
                    }
                },
                (Some(_), None) => ours.next(),
                (None, Some(_)) => theirs.next(),
                (None, None) => break,
            };
            union.extend(next);
        }
        if union.len() != self.seen.len() {
            let seen: BTreeSet<UniqueAddress> = union.into_iter().cloned().collect();
            self.seen = Arc::new(SeenSet::from(seen));
        }
    }

    /// Whether a member here has seen `other` but not this version.
    fn adds_to_seen(&self, other: &Gossip) -> bool {
        let mut members = self.members.keys().peekable();
        let mut ours = self.seen.iter().peekable();
        other.seen.iter().any(|n| !advance_to(&mut ours, n) && advance_to(&mut members, n))
    }

    /// Bumps `node`'s vector-clock entry: a local change.
    pub fn increment_version(&mut self, node: &UniqueAddress) {
        self.version.increment(node);
    }

    /// Replaces the vector clock.
    pub fn set_version(&mut self, version: VectorClock) {
        self.version = version;
    }

    /// Mutable access to the reachability table.
    pub fn reachability_mut(&mut self) -> &mut Reachability {
        &mut self.reachability
    }

    /// Adds or replaces members (by identity).
    pub fn update(&mut self, changed: impl IntoIterator<Item = Member>) {
        for m in changed {
            Arc::make_mut(&mut self.members).map_mut().insert(m.node().clone(), m);
        }
    }

    /// Marks `node` Down and drops it from the seen set. Returns false when it is not a member, is
    /// already Down, or may not move to Down.
    pub fn mark_as_down(&mut self, node: &UniqueAddress) -> bool {
        let Some(m) = self.members.get(node) else { return false };
        if m.status() == MemberStatus::Down {
            return false;
        }
        let Ok(down) = m.with_status(MemberStatus::Down) else { return false };
        Arc::make_mut(&mut self.members).map_mut().insert(node.clone(), down);
        self.remove_seen(node);
        true
    }

    fn remove_seen(&mut self, node: &UniqueAddress) {
        if self.seen.contains(node) {
            Arc::make_mut(&mut self.seen).set_mut().remove(node);
        }
    }

    /// Removes `node` for good: from members, seen, reachability and the vector clock, leaving a
    /// tombstone stamped `at`.
    pub fn remove(&mut self, node: &UniqueAddress, at: WallMillis) {
        Arc::make_mut(&mut self.members).map_mut().remove(node);
        self.remove_seen(node);
        self.reachability.remove([node]);
        self.version.prune(node);
        self.tombstones.insert(node.clone(), at);
    }

    /// Drops tombstones older than `cutoff`; returns whether any was dropped.
    pub fn prune_tombstones(&mut self, cutoff: WallMillis) -> bool {
        let before = self.tombstones.len();
        self.tombstones.retain(|_, ts| *ts > cutoff);
        before != self.tombstones.len()
    }

    /// Prunes the vector-clock entry of `node` (for concurrent merges of removed members).
    pub fn prune_version(&mut self, node: &UniqueAddress) {
        self.version.prune(node);
    }

    /// Merges two concurrent versions. Nobody has seen the result.
    ///
    /// A member that only one side has is kept unless the other side's tombstone says it was
    /// removed. Akka also drops a one-sided Down or Exiting member, assuming the other side removed
    /// it; but the other side may simply never have heard of it (it joined and was downed while the
    /// two were apart), and dropping it loses the Down: a third node that still knows it as Joining
    /// then brings it back, and a leader may move a downed incarnation Up (reliability S5). A kept
    /// Down member is removed by the leader like any other, once it is unreachable.
    pub fn merge(&self, that: &Gossip) -> Gossip {
        // Two nodes may record one removal at different wall-clock times (each leader that
        // removed it stamps its own). The later time is kept whichever side it comes from, so the
        // merge is commutative and two merges of the same versions hold the same state.
        let mut tombstones = self.tombstones.clone();
        for (node, at) in &that.tombstones {
            let kept = tombstones.entry(node.clone()).or_insert(*at);
            *kept = (*kept).max(*at);
        }

        let mut version = self.version.merge(&that.version);
        for node in tombstones.keys() {
            version.prune(node);
        }

        // Both tables in node order, walked side by side; one shared table is its own merge.
        let members = if Arc::ptr_eq(&self.members, &that.members) {
            self.members.clone()
        } else {
            let mut merged: Vec<(UniqueAddress, Member)> =
                Vec::with_capacity(self.members.len().max(that.members.len()));
            let one_sided = |(node, m): (&UniqueAddress, &Member)| {
                (!tombstones.contains_key(node)).then(|| (node.clone(), m.clone()))
            };
            let (mut ours, mut theirs) =
                (self.members.iter().peekable(), that.members.iter().peekable());
            loop {
                let next = match (ours.peek(), theirs.peek()) {
                    (Some((a, _)), Some((b, _))) => match a.cmp(b) {
                        Ordering::Less => ours.next().and_then(one_sided),
                        Ordering::Greater => theirs.next().and_then(one_sided),
                        Ordering::Equal => {
                            let (node, a) = ours.next().expect("peeked");
                            let (_, b) = theirs.next().expect("peeked");
                            Some((node.clone(), Member::highest_priority_of(a, b).clone()))
                        }
                    },
                    (Some(_), None) => ours.next().and_then(one_sided),
                    (None, Some(_)) => theirs.next().and_then(one_sided),
                    (None, None) => break,
                };
                merged.extend(next);
            }
            Arc::new(Members::new(merged.into_iter().collect()))
        };

        let never_flagged = |r: &Reachability| r.is_empty() && r.versions().is_empty();
        let reachability = if never_flagged(&self.reachability) && never_flagged(&that.reachability)
        {
            Reachability::new()
        } else {
            let allowed: BTreeSet<UniqueAddress> = members.keys().cloned().collect();
            self.reachability.merge(&allowed, &that.reachability)
        };
        Gossip { members, seen: Arc::default(), reachability, version, tombstones }
    }

    /// Whether `other` holds the same members (with status and up-number), reachability and
    /// tombstones (with their removal times); seen sets and clocks are not compared.
    pub fn same_state_as(&self, other: &Gossip) -> bool {
        let state = |m: &Member| (m.node().clone(), m.status(), m.up_number());
        self.members.values().map(state).eq(other.members.values().map(state))
            && self.reachability == other.reachability
            && self.tombstones == other.tombstones
    }

    /// A digest of the seen set, so two nodes can tell cheaply whether they agree on who has seen.
    /// Computed once per seen set, which the copies of a version share.
    pub fn seen_digest(&self) -> [u8; 20] {
        self.seen.digest()
    }

    /// Checks the structural invariants.
    ///
    /// # Errors
    /// Names the first one broken.
    pub fn check_invariants(&self) -> Result<(), InvalidGossip> {
        self.check_invariants_beside(None)
    }

    /// [`check_invariants`](Self::check_invariants) for a gossip received by a node holding
    /// `valid`, a gossip that meets them: a member table the two share is not read again.
    ///
    /// # Errors
    /// Names the first one broken.
    pub fn check_received(&self, valid: &Gossip) -> Result<(), InvalidGossip> {
        self.check_invariants_beside(Some(valid))
    }

    fn check_invariants_beside(&self, valid: Option<&Gossip>) -> Result<(), InvalidGossip> {
        let members_checked = valid.is_some_and(|v| self.shares_members_with(v));
        if let Some(m) = (self.members.values())
            .take_while(|_| !members_checked)
            .find(|m| m.status() == MemberStatus::Removed)
        {
            return Err(InvalidGossip(format!("member {} is Removed", m.node())));
        }
        let seen_checked =
            members_checked && valid.is_some_and(|v| Arc::ptr_eq(&v.seen, &self.seen));
        let mut members = self.members.keys().peekable();
        if let Some(n) =
            self.seen.iter().take_while(|_| !seen_checked).find(|n| !advance_to(&mut members, n))
        {
            return Err(InvalidGossip(format!("seen node {n} is not a member")));
        }
        // The same members and the same table as the valid gossip: the table refers to members.
        let reachability_checked =
            members_checked && valid.is_some_and(|v| v.reachability == self.reachability);
        if let Some(n) = (self.reachability.versions().keys())
            .take_while(|_| !reachability_checked)
            .find(|n| !self.members.contains_key(*n))
        {
            return Err(InvalidGossip(format!("reachability observer {n} is not a member")));
        }
        if let Some(s) = (self.reachability.subjects())
            .take_while(|_| !reachability_checked)
            .find(|s| !self.members.contains_key(*s))
        {
            return Err(InvalidGossip(format!("reachability subject {s} is not a member")));
        }
        let tombstones_checked =
            members_checked && valid.is_some_and(|v| v.tombstones == self.tombstones);
        // Both are in node order, so the first tombstone that is a member is the first member
        // that is tombstoned.
        let mut members = self.members.keys().peekable();
        if let Some(n) = (self.tombstones.keys())
            .take_while(|_| !tombstones_checked)
            .find(|n| advance_to(&mut members, n))
        {
            return Err(InvalidGossip(format!("member {n} is also tombstoned")));
        }
        let clock_checked = tombstones_checked && valid.is_some_and(|v| v.version == self.version);
        let mut tombstones = self.tombstones.keys().peekable();
        if let Some((n, _)) = (self.version.entries())
            .take_while(|_| !clock_checked)
            .find(|(n, _)| advance_to(&mut tombstones, n))
        {
            return Err(InvalidGossip(format!("vector clock has an entry for removed {n}")));
        }
        Ok(())
    }
}

/// Moves the sorted `keys` past every key below `key`; returns whether `key` is among them (and
/// moves past it too). Walking a sorted table this way for keys taken in order costs one pass over
/// it, where a lookup per key costs a tree search each.
fn advance_to<'a, I>(keys: &mut std::iter::Peekable<I>, key: &UniqueAddress) -> bool
where
    I: Iterator<Item = &'a UniqueAddress>,
{
    while let Some(k) = keys.peek() {
        match (*k).cmp(key) {
            Ordering::Less => {
                keys.next();
            }
            Ordering::Equal => {
                keys.next();
                return true;
            }
            Ordering::Greater => return false,
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::member::UpNumber;
    use crate::member::tests::{member, member_up, node};
    use MemberStatus::*;
    use proptest::prelude::*;

    fn n(i: u64) -> UniqueAddress {
        node(&format!("h{i}:1"), 1)
    }

    #[test]
    fn merge_keeps_the_highest_priority_status_of_each_member() {
        let g1 = Gossip::with_members([member("h1:1", Up), member("h2:1", Leaving)]);
        let g2 = Gossip::with_members([member("h1:1", Down), member("h2:1", Up)]);
        let m = g1.merge(&g2);
        assert_eq!(m.member(&n(1)).unwrap().status(), Down);
        assert_eq!(m.member(&n(2)).unwrap().status(), Leaving);
        assert!(m.seen().is_empty());
    }

    #[test]
    fn merge_does_not_resurrect_removed_members() {
        let mut g1 = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        g1.increment_version(&n(2));
        g1.remove(&n(2), WallMillis(100));
        let g2 = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let m = g1.merge(&g2);
        assert!(!m.has_member(&n(2)));
        assert!(m.tombstones().contains_key(&n(2)));
        assert_eq!(m.version().counter(&n(2)), 0);
        m.check_invariants().unwrap();
    }

    #[test]
    fn merge_keeps_a_one_sided_down_or_exiting_member_the_other_side_never_heard_of() {
        let g1 = Gossip::with_members([
            member("h1:1", Up),
            member("h2:1", Exiting),
            member("h3:1", Down),
        ]);
        let g2 = Gossip::with_members([member("h1:1", Up)]);
        for m in [g1.merge(&g2), g2.merge(&g1)] {
            assert_eq!(m.member(&n(2)).map(Member::status), Some(Exiting));
            assert_eq!(m.member(&n(3)).map(Member::status), Some(Down));
        }
    }

    #[test]
    fn a_downed_member_stays_down_through_a_view_that_never_knew_it() {
        // n3 joined on one side and was downed there; n2's view never had it; a stale view still
        // has it Joining. Merging through n2's view must not forget the Down.
        let downed = Gossip::with_members([member("h1:1", Up), member("h3:1", Down)]);
        let never_knew = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let stale = Gossip::with_members([member("h1:1", Up), member("h3:1", Joining)]);
        let m = never_knew.merge(&downed).merge(&stale);
        assert_eq!(m.member(&n(3)).map(Member::status), Some(Down));
    }

    #[test]
    fn merge_drops_a_one_sided_member_the_other_side_removed() {
        let mut g1 = Gossip::with_members([member("h1:1", Up), member("h3:1", Down)]);
        g1.remove(&n(3), WallMillis(7));
        let g2 = Gossip::with_members([member("h1:1", Up), member("h3:1", Down)]);
        assert!(!g1.merge(&g2).has_member(&n(3)));
        assert!(!g2.merge(&g1).has_member(&n(3)));
    }

    #[test]
    fn merge_keeps_a_one_sided_joining_member() {
        let g1 = Gossip::with_members([member("h1:1", Up), member("h2:1", Joining)]);
        let g2 = Gossip::with_members([member("h1:1", Up)]);
        assert!(g1.merge(&g2).has_member(&n(2)));
    }

    #[test]
    fn merge_drops_reachability_of_non_members() {
        let mut g1 = Gossip::with_members([member("h1:1", Up), member("h2:1", Down)]);
        g1.reachability_mut().unreachable(&n(1), &n(2));
        g1.remove(&n(2), WallMillis(5));
        let mut g2 = Gossip::with_members([member("h1:1", Up), member("h2:1", Down)]);
        g2.reachability_mut().unreachable(&n(1), &n(2));
        let m = g1.merge(&g2);
        assert!(m.reachability().is_empty());
        m.check_invariants().unwrap();
    }

    #[test]
    fn marking_down_removes_from_seen() {
        let mut g = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        g.add_seen(&n(1));
        g.add_seen(&n(2));
        assert!(g.mark_as_down(&n(2)));
        assert!(!g.seen_by(&n(2)));
        assert!(!g.mark_as_down(&n(2)), "already down");
        assert!(!g.mark_as_down(&n(9)), "not a member");
    }

    #[test]
    fn tombstones_older_than_the_cutoff_are_pruned() {
        let mut g =
            Gossip::with_members([member("h1:1", Up), member("h2:1", Up), member("h3:1", Up)]);
        g.remove(&n(2), WallMillis(100));
        g.remove(&n(3), WallMillis(200));
        assert!(g.prune_tombstones(WallMillis(150)));
        assert_eq!(g.tombstones().keys().cloned().collect::<Vec<_>>(), [n(3)]);
        assert!(!g.prune_tombstones(WallMillis(150)));
    }

    #[test]
    fn the_seen_digest_changes_with_the_seen_set() {
        let mut g = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        let empty = g.seen_digest();
        g.add_seen(&n(1));
        let one = g.seen_digest();
        g.add_seen(&n(2));
        assert_ne!(empty, one);
        assert_ne!(one, g.seen_digest());
    }

    #[test]
    fn other_incarnations_are_the_members_at_the_same_address_in_member_order() {
        let at = |host: &str, uid: u64| {
            Member::joining(node(host, uid), BTreeSet::new(), Default::default())
        };
        let g = Gossip::with_members([
            at("h1:1", 3),
            at("h2:1", 1),
            at("h2:1", 2),
            at("h2:1", 5),
            at("h3:1", 2),
        ]);
        let uids = |of: &UniqueAddress| -> Vec<UniqueAddress> {
            g.other_incarnations(of).map(|m| m.node().clone()).collect()
        };
        assert_eq!(uids(&node("h2:1", 2)), vec![node("h2:1", 1), node("h2:1", 5)]);
        assert_eq!(uids(&node("h2:1", 3)), vec![node("h2:1", 1), node("h2:1", 2), node("h2:1", 5)]);
        assert_eq!(uids(&node("h1:1", 3)), Vec::<UniqueAddress>::new());
        assert!(g.has_other_incarnation(&node("h3:1", 1)));
        assert!(!g.has_other_incarnation(&node("h4:1", 1)));
    }

    #[test]
    fn data_centers_and_roles_are_recomputed_when_members_change() {
        let in_dc = |host: &str, dc: &str| {
            let roles = BTreeSet::from([format!("dc-{dc}")]);
            Member::joining(node(host, 1), roles, Default::default())
        };
        assert!(Gossip::empty().all_in_data_center("anything"));
        let mut g = Gossip::with_members([in_dc("h1:1", "a"), in_dc("h2:1", "a")]);
        assert!(g.all_in_data_center("a"));
        assert!(!g.all_in_data_center("b"));
        let before = g.clone();
        g.update([in_dc("h3:1", "b")]);
        assert!(!g.all_in_data_center("a") && !g.all_in_data_center("b"));
        assert_eq!(g.roles(), ["dc-a", "dc-b"]);
        assert!(before.all_in_data_center("a"), "the copy keeps its own table");
        assert_eq!(before.roles(), ["dc-a"]);
        g.remove(&n(3), WallMillis(1));
        assert!(g.all_in_data_center("a"));
        assert!(g.member_table().all_in_data_center("a"));
    }

    #[test]
    fn the_seen_digest_is_sha1_of_the_nodes_as_text_comma_separated() {
        let mut g = Gossip::with_members([member("h1:1", Up), member("h2:1", Up)]);
        g.add_seen(&n(2));
        g.add_seen(&n(1));
        let text = format!("{},{}", n(1), n(2));
        let expected: [u8; 20] = Sha1::digest(text.as_bytes()).into();
        assert_eq!(g.seen_digest(), expected);
        let copy = g.clone();
        g.remove(&n(2), WallMillis(1));
        let one: [u8; 20] = Sha1::digest(n(1).to_string().as_bytes()).into();
        assert_eq!(g.seen_digest(), one, "a changed set is digested again");
        assert_eq!(copy.seen_digest(), expected);
    }

    #[test]
    fn invariant_checks_name_the_broken_rule() {
        let g = Gossip::with_members([member("h1:1", Removed)]);
        assert!(g.check_invariants().unwrap_err().to_string().contains("Removed"));
        let mut g = Gossip::with_members([member("h1:1", Up)]);
        Arc::make_mut(&mut g.seen).set_mut().insert(n(2));
        assert!(g.check_invariants().unwrap_err().to_string().contains("seen"));
    }

    /// `k` valid views of one cluster history over a small universe of nodes, as real nodes could
    /// hold them: each member's status per view lies on its lifecycle; a node absent from a view
    /// either was never heard of there (and is then nowhere Down or Exiting) or is tombstoned there;
    /// each observer's reachability rows are one of its successive row sets, identified by version.
    pub(crate) fn arb_views(k: usize) -> impl Strategy<Value = Vec<Gossip>> {
        let statuses = [Joining, WeaklyUp, Up, PreparingForShutdown, Leaving, Exiting, Down];
        let node_fate = (
            prop::collection::vec(0usize..statuses.len(), k), // status per view
            prop::collection::vec(0u8..4, k),                 // 0 = absent, else present
            any::<bool>(),                                    // removed (tombstoned where absent)
            1u32..4,                                          // up-number
        );
        let observer_history =
            prop::collection::vec(prop::collection::btree_map(1u64..7, any::<bool>(), 0..3), 1..4);
        (
            prop::collection::vec(node_fate, 6),
            prop::collection::vec(observer_history, 6),
            prop::collection::vec(prop::collection::vec(0usize..4, 6), k),
            prop::collection::vec(prop::collection::btree_map(1u64..7, 1u64..4, 0..4), k),
            prop::collection::vec(prop::collection::btree_set(1u64..7, 0..6), k),
        )
            .prop_map(move |(fates, histories, picks, clocks, seens)| {
                (0..k)
                    .map(|view| {
                        let mut g = Gossip::empty();
                        for (i, (st, present, removed, up)) in fates.iter().enumerate() {
                            let id = i as u64 + 1;
                            let ever_gone = st.iter().any(|s| statuses[*s].is_down_or_exiting());
                            let absent = present[view] == 0 && (*removed || !ever_gone);
                            if absent {
                                if *removed {
                                    // Each view records the removal at its own time.
                                    let at = id * 10 + view as u64;
                                    g.tombstones.insert(n(id), WallMillis(at));
                                }
                                continue;
                            }
                            let status = statuses[st[view]];
                            let up_number = if matches!(status, Joining | WeaklyUp) {
                                UpNumber::UNASSIGNED
                            } else {
                                UpNumber(*up)
                            };
                            g.update([member_up(&format!("h{id}:1"), status, up_number)]);
                        }
                        for (i, history) in histories.iter().enumerate() {
                            let observer = n(i as u64 + 1);
                            let pick = picks[view][i] % (history.len() + 1);
                            if pick == 0 || !g.has_member(&observer) {
                                continue;
                            }
                            let rows = &history[pick - 1];
                            if rows.keys().any(|s| !g.has_member(&n(*s))) {
                                continue; // this view predates the observer's rows
                            }
                            let records =
                                rows.iter().map(|(s, unreachable)| crate::reachability::Record {
                                    observer: observer.clone(),
                                    subject: n(*s),
                                    status: if *unreachable {
                                        crate::reachability::ReachabilityStatus::Unreachable
                                    } else {
                                        crate::reachability::ReachabilityStatus::Terminated
                                    },
                                    version: pick as u64,
                                });
                            let mut r = Reachability::from_parts(
                                records,
                                [(observer.clone(), pick as u64)],
                            );
                            r = g.reachability.merge(&g.member_nodes(), &r);
                            g.reachability = r;
                        }
                        g.version = VectorClock::from_entries(
                            clocks[view]
                                .iter()
                                .filter(|(i, _)| g.has_member(&n(**i)))
                                .map(|(i, v)| (n(*i), *v)),
                        );
                        for s in &seens[view] {
                            g.add_seen(&n(*s));
                        }
                        g
                    })
                    .collect()
            })
    }

    fn without_seen(mut g: Gossip) -> Gossip {
        g.clear_seen();
        g
    }

    fn same_state(a: &Gossip, b: &Gossip) -> bool {
        a.members.len() == b.members.len()
            && a.members.values().zip(b.members.values()).all(|(x, y)| x.same_state(y))
            && a.reachability == b.reachability
            && a.version == b.version
            && a.tombstones == b.tombstones
    }

    proptest! {
        /// The one-pass walks over sorted tables agree with a lookup per node, with and without
        /// seen nodes that are not members (which the walks must step over).
        #[test]
        fn walks_over_sorted_tables_agree_with_lookups(
            v in arb_views(2),
            strays in prop::collection::btree_set(0u64..9, 0..4),
        ) {
            let (mut a, b) = (v[0].clone(), v[1].clone());
            Arc::make_mut(&mut a.seen).set_mut().extend(strays.iter().map(|i| n(*i)));
            let flags: Vec<(UniqueAddress, bool)> =
                a.members_with_seen().map(|(m, seen)| (m.node().clone(), seen)).collect();
            let looked_up: Vec<(UniqueAddress, bool)> =
                a.members().map(|m| (m.node().clone(), a.seen_by(m.node()))).collect();
            prop_assert_eq!(flags, looked_up);

            let missing: Vec<&Member> = a.members_missing_from(&b).collect();
            let by_lookup: Vec<&Member> = a.members().filter(|m| !b.has_member(m.node())).collect();
            prop_assert_eq!(missing, by_lookup);
            prop_assert_eq!(a.members_missing_from(&a.clone()).count(), 0);

            let changed: Vec<(Option<&Member>, &Member)> = a.changed_members(&b).collect();
            let by_lookup: Vec<(Option<&Member>, &Member)> = a
                .members()
                .map(|m| (b.member(m.node()), m))
                .filter(|(was, m)| !was.is_some_and(|w| w.is_same_version(m)))
                .collect();
            prop_assert_eq!(changed, by_lookup);
            let mut copy = a.clone();
            prop_assert_eq!(copy.changed_members(&a).count(), 0);
            if let Some(first) = a.members().next().cloned() {
                copy.update([first.clone()]);
                let changed: Vec<&Member> =
                    copy.changed_members(&a).map(|(_, m)| m).collect();
                prop_assert!(changed.is_empty(), "the same version put back is no change");
            }

            for dc in ["default", "other"] {
                let nodes: Vec<&UniqueAddress> = a.nodes_in_data_center(dc).collect();
                let by_member: Vec<&UniqueAddress> =
                    a.members().filter(|m| m.data_center() == dc).map(Member::node).collect();
                prop_assert_eq!(nodes, by_member);
            }

            let mut merged = a.clone();
            merged.merge_seen(&b);
            let mut expected = BTreeSet::clone(a.seen());
            expected.extend(b.seen.iter().filter(|s| a.has_member(s)).cloned());
            prop_assert_eq!(merged.seen(), &expected);

            let strays_are_members = strays.iter().all(|i| a.has_member(&n(*i)));
            prop_assert_eq!(a.check_invariants().is_ok(), v[0].check_invariants().is_ok()
                && strays_are_members);
        }

        #[test]
        fn merge_is_commutative(v in arb_views(2)) {
            prop_assert!(same_state(&v[0].merge(&v[1]), &v[1].merge(&v[0])));
        }

        #[test]
        fn merge_is_associative(v in arb_views(3)) {
            let (a, b, c) = (&v[0], &v[1], &v[2]);
            prop_assert!(same_state(&a.merge(b).merge(c), &a.merge(&b.merge(c))));
        }

        #[test]
        fn merge_is_idempotent(v in arb_views(1)) {
            let a = &v[0];
            let once = a.merge(a);
            prop_assert!(same_state(&once, &without_seen(a.clone())));
            prop_assert!(same_state(&once.merge(&once), &once));
        }

        #[test]
        fn merge_of_valid_gossips_is_valid(v in arb_views(2)) {
            prop_assert!(v[0].check_invariants().is_ok());
            prop_assert!(v[0].merge(&v[1]).check_invariants().is_ok());
        }
    }
}
