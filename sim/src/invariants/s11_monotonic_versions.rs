//! S11: vector clocks are monotonic.
//!
//! A node's version never moves backwards: every entry of the clock before a step is at most the
//! same entry after it, unless that node stopped being a member (removal prunes its entry). And
//! two gossips with the same clock carry the same state (members with status and up-number,
//! reachability, tombstones): a clock that fails to tick on a local change, or a merge that is not
//! deterministic, shows up as two different states under one version. The second check keeps one
//! content hash per clock hash seen.
//!
//! The merge laws (commutative, associative, idempotent) are property tests in the core.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use convoke_membership::UniqueAddress;
use convoke_membership::gossip::Gossip;

use super::s10_single_leader::{node_key, version_hash};
use super::view::take_key;
use super::{Invariant, Observation};

/// The S11 checker.
#[derive(Debug, Default)]
pub struct MonotonicVersions {
    /// Clock hash → (content hash, who held it first).
    contents: BTreeMap<u64, (u64, UniqueAddress)>,
}

/// A hash of everything in a gossip except its seen set and clock.
pub(super) fn content_hash(g: &Gossip) -> u64 {
    let mut h = crate::key_hasher();
    for m in g.members() {
        node_key(m.node()).hash(&mut h);
        m.status().hash(&mut h);
        m.up_number().hash(&mut h);
    }
    g.reachability().hash(&mut h);
    for (n, at) in g.tombstones() {
        node_key(n).hash(&mut h);
        at.hash(&mut h);
    }
    h.finish()
}

impl Invariant for MonotonicVersions {
    fn id(&self) -> &'static str {
        "S11"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        // Both clocks in node order: one walk over the two.
        let mut after = obs.after.version().entries().peekable();
        for (n, c) in obs.before.version().entries() {
            let now = take_key(&mut after, n, |(a, _)| *a).map_or(0, |(_, now)| now);
            if now < c && obs.after.has_member(n) {
                return Err(format!(
                    "{}'s clock entry for {n} went back from {c} to {now}",
                    obs.self_node
                ));
            }
        }
        if obs.after.is_empty() || obs.content_kept() && obs.after.version() == obs.before.version()
        {
            // The clock and content `before` was checked with.
            return Ok(());
        }
        let key = version_hash(obs.after);
        let content = content_hash(obs.after);
        match self.contents.get(&key) {
            Some((c, who)) if *c != content => Err(format!(
                "{} holds a gossip with the same vector clock as one {who} held, but different \
                 members, reachability or tombstones",
                obs.self_node
            )),
            Some(_) => Ok(()),
            None => {
                self.contents.insert(key, (content, obs.self_node.clone()));
                Ok(())
            }
        }
    }
}
