//! S7: structural gossip invariants (`Gossip.assertInvariants`).
//!
//! No member is Removed; every node in the seen set, every reachability observer and subject is a
//! member; no member is tombstoned; the vector clock has no entry for a tombstoned node. Checked on
//! every gossip a node installs, with this file's own code (the core has its own check, which is
//! what is being tested).

use convoke_membership::member::MemberStatus;

use super::{Invariant, Observation};

/// The S7 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct GossipStructure;

/// The first structural rule `g` breaks.
pub(super) fn structure_error(g: &convoke_membership::gossip::Gossip) -> Option<String> {
    if let Some(m) = g.members().find(|m| m.status() == MemberStatus::Removed) {
        return Some(format!("member {} has status Removed", m.node()));
    }
    if let Some(n) = g.seen().iter().find(|n| !g.has_member(n)) {
        return Some(format!("seen node {n} is not a member"));
    }
    if let Some(n) = g.reachability().versions().keys().find(|n| !g.has_member(n)) {
        return Some(format!("reachability observer {n} is not a member"));
    }
    if let Some(r) = g.reachability().records().find(|r| !g.has_member(&r.subject)) {
        return Some(format!("reachability subject {} is not a member", r.subject));
    }
    if let Some(n) = g.tombstones().keys().find(|n| g.has_member(n)) {
        return Some(format!("member {n} is also tombstoned"));
    }
    if let Some((n, _)) = g.version().entries().find(|(n, _)| g.tombstones().contains_key(*n)) {
        return Some(format!("vector clock has an entry for removed {n}"));
    }
    None
}

impl Invariant for GossipStructure {
    fn id(&self) -> &'static str {
        "S7"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        match structure_error(obs.after) {
            Some(e) => Err(format!("{}'s gossip: {e}", obs.self_node)),
            None => Ok(()),
        }
    }
}
