//! S12: no member disappears without removal.
//!
//! Between two consecutive gossips of a node, a member may vanish only if the new gossip has its
//! tombstone (the leader removed it) or it was Down or Exiting (a merge drops a one-sided Down or
//! Exiting member: the other side already removed it).

use convoke_membership::member::MemberStatus;

use super::{Invariant, Observation};

/// The S12 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSilentDisappearance;

impl Invariant for NoSilentDisappearance {
    fn id(&self) -> &'static str {
        "S12"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if obs.members_kept() {
            return Ok(());
        }
        let vanished = super::view::before_and_after(obs.before, obs.after)
            .filter_map(|(m, now)| now.is_none().then_some(m));
        for m in vanished {
            let removed = obs.after.tombstones().contains_key(m.node());
            if !removed && !matches!(m.status(), MemberStatus::Down | MemberStatus::Exiting) {
                return Err(format!(
                    "{} ({}) vanished from {}'s gossip without a tombstone",
                    m.node(),
                    m.status(),
                    obs.self_node
                ));
            }
        }
        Ok(())
    }
}
