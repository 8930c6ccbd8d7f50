//! [`Departures`]: members downed, or gone from the membership without a graceful leave, kept for
//! the removal margin. A coordinator does not allocate a shard its table does not know while such
//! a member may still host it (see docs/sharding-design.md, "When the table is lost anyway").

use std::collections::BTreeMap;
use std::mem;
use std::time::{Duration, Instant};

use convoke_membership::{Member, MemberStatus, UniqueAddress};

/// Members seen downed, or removed from the membership with a last status other than `Exiting`
/// (so they did not hand their shards off first), with when that was first seen. Both the region
/// and the coordinator keep one: a coordinator that starts after a member went learns of it from
/// its node's region.
#[derive(Clone, Debug, Default)]
pub struct Departures {
    /// The latest membership, by node.
    last: BTreeMap<UniqueAddress, Member>,
    /// Departed members as last seen, and when they were first seen going.
    gone: BTreeMap<UniqueAddress, (Member, Instant)>,
}

impl Departures {
    /// Takes in the membership seen at `now`; departures older than `margin` are forgotten.
    pub fn update(&mut self, members: &[Member], now: Instant, margin: Duration) {
        self.gone.retain(|_, (_, at)| *at + margin > now);
        for m in members.iter().filter(|m| m.status() == MemberStatus::Down) {
            // A downed member may still run its entities until it has downed itself too.
            self.gone.entry(m.node().clone()).or_insert_with(|| (m.clone(), now));
        }
        let current = members.iter().map(|m| (m.node().clone(), m.clone())).collect();
        let previous = mem::replace(&mut self.last, current);
        for (node, member) in previous {
            if !self.last.contains_key(&node) && could_host(member.status()) {
                self.gone.entry(node).or_insert((member, now));
            }
        }
    }

    /// Takes in what another observer on the same node saw (the coordinator from its node's
    /// region): each departure counts from the earlier of the two sightings.
    pub fn merge(&mut self, other: &Departures) {
        for (node, (member, at)) in &other.gone {
            self.gone
                .entry(node.clone())
                .and_modify(|seen| seen.1 = seen.1.min(*at))
                .or_insert_with(|| (member.clone(), *at));
        }
    }

    /// The departed members and when each was seen gone.
    pub fn iter(&self) -> impl Iterator<Item = (&Member, Instant)> {
        self.gone.values().map(|(m, at)| (m, *at))
    }
}

/// Whether a member last seen with `status` may have hosted shards it did not hand off: it had
/// been up (a downed member was, unless it was downed while joining), and did not leave.
fn could_host(status: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!(status, Up | Leaving | PreparingForShutdown | ReadyForShutdown | Down)
}
