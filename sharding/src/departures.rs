//! [`Departures`]: members downed, or gone from the membership without a graceful leave, kept
//! until a removal margin after their removal. A coordinator does not allocate a shard its table
//! does not know while such a member may still host it (see docs/sharding-design.md, "When the
//! table is lost anyway").

use std::collections::BTreeMap;
use std::mem;
use std::time::{Duration, Instant};

use convoke_membership::{Member, MemberStatus, UniqueAddress};

/// Members that may still run entities the cluster no longer counts on, each with the time its
/// removal margin starts: a member seen `Down`, from when it was first seen so (a node cut off
/// from the others downs itself within the margin of the decision), and again from its removal
/// when that is seen; a member removed from the membership while last seen `Up` (or preparing
/// for a full shutdown), from the removal. A member last seen `Leaving` or `Exiting` left
/// gracefully: a node hands its shards off before it leaves, and an observer may miss the
/// `Exiting` step between two views. (It may also miss a `Down` step: a member cut off while
/// leaving, whose down went unseen, counts as gone gracefully.)
///
/// Both the region and the coordinator keep one: a coordinator that starts after a member went
/// learns of it from its node's region.
#[derive(Clone, Debug, Default)]
pub struct Departures {
    /// The latest membership, by node.
    last: BTreeMap<UniqueAddress, Member>,
    /// Departed members as last seen, and when the removal margin starts for each.
    gone: BTreeMap<UniqueAddress, (Member, Instant)>,
}

impl Departures {
    /// Takes in the membership seen at `now`. A departure is forgotten once its margin has run
    /// out, unless the member is still down (it is then not counted again).
    pub fn update(&mut self, members: &[Member], now: Instant, margin: Duration) {
        let current: BTreeMap<UniqueAddress, Member> =
            members.iter().map(|m| (m.node().clone(), m.clone())).collect();
        let down =
            |n: &UniqueAddress| current.get(n).is_some_and(|m| m.status() == MemberStatus::Down);
        self.gone.retain(|n, (_, at)| down(n) || *at + margin > now);
        for m in members.iter().filter(|m| m.status() == MemberStatus::Down) {
            self.gone.entry(m.node().clone()).or_insert_with(|| (m.clone(), now));
        }
        let previous = mem::replace(&mut self.last, current);
        self.note_removed(previous, now);
    }

    /// Takes in what another observer on the same node saw (the coordinator from its node's
    /// region): members that observer knew and this one never saw count as removed at `now`. A
    /// member both saw go counts from the earlier sighting while it is still down in both
    /// views (its first sighting), and from the later one otherwise (its removal).
    pub fn merge(&mut self, other: &Departures, now: Instant) {
        self.note_removed(other.last.clone(), now);
        let down = |d: &Departures, n: &UniqueAddress| {
            d.last.get(n).is_some_and(|m| m.status() == MemberStatus::Down)
        };
        for (node, (member, at)) in &other.gone {
            let still_down = down(self, node) && down(other, node);
            self.gone
                .entry(node.clone())
                .and_modify(|seen| {
                    seen.1 = if still_down { seen.1.min(*at) } else { seen.1.max(*at) }
                })
                .or_insert_with(|| (member.clone(), *at));
        }
    }

    /// The departed members and when the removal margin started for each.
    pub fn iter(&self) -> impl Iterator<Item = (&Member, Instant)> {
        self.gone.values().map(|(m, at)| (m, *at))
    }

    /// Members of `previous` that are not in the latest membership were removed at `now`.
    fn note_removed(&mut self, previous: BTreeMap<UniqueAddress, Member>, now: Instant) {
        for (node, member) in previous {
            if !self.last.contains_key(&node) && could_host(member.status()) {
                self.gone.insert(node, (member, now));
            }
        }
    }
}

/// Whether a member last seen with `status` may have hosted shards it did not hand off: it had
/// been up (a downed member was, unless it was downed while joining), and was not leaving.
fn could_host(status: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(status, Up | PreparingForShutdown | ReadyForShutdown | Down)
}
