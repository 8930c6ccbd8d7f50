//! S6: member status transitions follow the allowed graph only.
//!
//! Between two consecutive gossips of one node, each member that is in both moves along the member
//! status graph ([`hop`]; several hops at once are fine: a merge can skip statuses). The graph is
//! written out here again rather than taken from the core, so that a mistake in the core's table
//! is caught rather than trusted.

use convoke_membership::member::MemberStatus;

use super::{Invariant, Observation};

/// The S6 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowedTransitions;

/// One allowed hop of the member status graph.
fn hop(from: MemberStatus, to: MemberStatus) -> bool {
    use MemberStatus::*;
    match from {
        Joining => matches!(to, WeaklyUp | Up | Leaving | Down | Removed),
        WeaklyUp => matches!(to, Up | Leaving | Down | Removed),
        Up => matches!(to, Leaving | Down | Removed | PreparingForShutdown),
        Leaving => matches!(to, Exiting | Down | Removed),
        Exiting => matches!(to, Removed | Down),
        Down => matches!(to, Removed),
        PreparingForShutdown => matches!(to, ReadyForShutdown | Removed | Leaving | Down),
        ReadyForShutdown => matches!(to, Removed | Leaving | Down),
        Removed => false,
    }
}

/// Whether `to` can be reached from `from` in zero or more allowed hops.
pub(super) fn reachable(from: MemberStatus, to: MemberStatus) -> bool {
    let mut seen = vec![from];
    let mut i = 0;
    while let Some(&s) = seen.get(i) {
        if s == to {
            return true;
        }
        for next in MemberStatus::ALL {
            if hop(s, next) && !seen.contains(&next) {
                seen.push(next);
            }
        }
        i += 1;
    }
    false
}

impl Invariant for AllowedTransitions {
    fn id(&self) -> &'static str {
        "S6"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if obs.members_kept() {
            return Ok(());
        }
        for (old, new) in super::view::before_and_after(obs.before, obs.after) {
            let Some(new) = new else { continue };
            if !reachable(old.status(), new.status()) {
                return Err(format!(
                    "{} saw {} move {} -> {}",
                    obs.self_node,
                    old.node(),
                    old.status(),
                    new.status()
                ));
            }
        }
        Ok(())
    }
}
