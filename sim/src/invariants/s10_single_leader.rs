//! S10: leader uniqueness at convergence.
//!
//! All nodes that hold the same converged gossip compute the same leader. "The same gossip" is the
//! same vector clock (S11 separately checks that equal clocks carry equal state). The checker keeps,
//! per clock (by hash), the leader the first converged holder computed, and compares every later
//! converged holder with it; this is incremental, O(members) per step, instead of comparing all
//! nodes with each other after every step.
//!
//! A leader whose `ExitingConfirmed` reached the holder is gone, and so is its leadership: a
//! Leaving first member that another member sees unreachable still elects itself (a node ignores
//! verdicts on itself) and moves itself Exiting, confirms and stops; a member that then converges
//! on the same clock only because that confirmation excuses the unreachable leaver elects the next
//! member. The two never lead at once, so the record passes to the new leader.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use convoke_membership::UniqueAddress;

use super::{Invariant, Observation};

/// The S10 checker.
#[derive(Debug, Default)]
pub struct SingleLeader {
    /// Clock hash → (leader, the node that computed it).
    leaders: BTreeMap<u64, (Option<UniqueAddress>, UniqueAddress)>,
}

/// A hash of a vector clock, for keying per-version facts.
pub(super) fn version_hash(g: &convoke_membership::gossip::Gossip) -> u64 {
    let mut h = crate::key_hasher();
    for (n, counter) in g.version().entries() {
        node_key(n).hash(&mut h);
        counter.hash(&mut h);
    }
    h.finish()
}

/// What a key hashes of a node: its uid and port. Two incarnations in one run differ in their
/// uid (drawn at random, 64 bits) and the slots of a run in their port, so this tells nodes
/// apart as the whole address would, without hashing its strings.
pub(super) fn node_key(n: &convoke_membership::UniqueAddress) -> (u64, u16) {
    (n.uid.get(), n.address.port())
}

impl Invariant for SingleLeader {
    fn id(&self) -> &'static str {
        "S10"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if !obs.converged {
            return Ok(());
        }
        let key = version_hash(obs.after);
        let leader = obs.leader.cloned();
        match self.leaders.get(&key) {
            Some((Some(gone), _))
                if leader.as_ref() != Some(gone) && obs.exiting_confirmed.contains(gone) =>
            {
                self.leaders.insert(key, (leader, obs.self_node.clone()));
                Ok(())
            }
            Some((l, who)) if *l != leader => Err(format!(
                "{} and {who} hold the same converged gossip but compute leaders {} and {}",
                obs.self_node,
                leader.map_or("none".to_owned(), |l| l.to_string()),
                l.as_ref().map_or("none".to_owned(), ToString::to_string)
            )),
            Some(_) => Ok(()),
            None => {
                self.leaders.insert(key, (leader, obs.self_node.clone()));
                Ok(())
            }
        }
    }
}
