//! S7: structural gossip invariants (`Gossip.assertInvariants`).
//!
//! No member is Removed; every node in the seen set, every reachability observer and subject is a
//! member; no member is tombstoned; the vector clock has no entry for a tombstoned node. Checked on
//! every gossip a node installs, with this file's own code (the core has its own check, which is
//! what is being tested).

use convoke_membership::member::MemberStatus;

use super::view::take_key;
use super::{Invariant, Observation};

/// The S7 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct GossipStructure;

/// The first structural rule `g` breaks.
pub(super) fn structure_error(g: &convoke_membership::gossip::Gossip) -> Option<String> {
    if let Some(m) = g.members().find(|m| m.status() == MemberStatus::Removed) {
        return Some(format!("member {} has status Removed", m.node()));
    }
    if let Some(n) = g.reachability().versions().keys().find(|n| !g.has_member(n)) {
        return Some(format!("reachability observer {n} is not a member"));
    }
    if let Some(s) = g.reachability().subjects().find(|s| !g.has_member(s)) {
        return Some(format!("reachability subject {s} is not a member"));
    }
    if let Some(n) = g.tombstones().keys().find(|n| g.has_member(n)) {
        return Some(format!("member {n} is also tombstoned"));
    }
    seen_or_clock_error(g)
}

/// The rules on the parts of `g` that change most often, its seen set and clock, once the rest
/// is known to hold: every node in the seen set is a member, the clock has no entry for a
/// tombstoned node.
fn seen_or_clock_error(g: &convoke_membership::gossip::Gossip) -> Option<String> {
    // All three in node order: one walk over each.
    let mut members = g.members().map(|m| m.node()).peekable();
    if let Some(n) = g.seen().iter().find(|n| take_key(&mut members, *n, |m| *m).is_none()) {
        return Some(format!("seen node {n} is not a member"));
    }
    let mut tombstones = g.tombstones().keys().peekable();
    if let Some((n, _)) =
        g.version().entries().find(|(n, _)| take_key(&mut tombstones, *n, |t| *t).is_some())
    {
        return Some(format!("vector clock has an entry for removed {n}"));
    }
    None
}

impl Invariant for GossipStructure {
    fn id(&self) -> &'static str {
        "S7"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        // `before` passed when it was installed (every change is checked, and a new incarnation
        // starts empty): when a step kept its members, reachability and tombstones, only the
        // seen set and the clock can break a rule.
        let after = obs.after;
        let error =
            if obs.content_kept() { seen_or_clock_error(after) } else { structure_error(after) };
        match error {
            Some(e) => Err(format!("{}'s gossip: {e}", obs.self_node)),
            None => Ok(()),
        }
    }
}
