//! S8: leader actions only with convergence.
//!
//! A node's own step (a timer or a command, never a received gossip, which only merges) that moves
//! a member Joining/WeaklyUp → Up, Leaving → Exiting, PreparingForShutdown → ReadyForShutdown, or
//! removes a Down or Exiting member, is a leader action: the gossip it acted on must have converged
//! and the node must have been its leader. Downing and WeaklyUp promotion need no convergence and
//! are not checked here.

use convoke_membership::member::MemberStatus;

use super::view::{leader, not_converged_because};
use super::{Cause, Invariant, Observation};

/// The S8 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct LeaderActionsNeedConvergence;

impl Invariant for LeaderActionsNeedConvergence {
    fn id(&self) -> &'static str {
        "S8"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        use MemberStatus::*;
        if !matches!(obs.cause, Cause::Timer | Cause::Command(_)) {
            return Ok(());
        }
        let action = obs.before.members().find_map(|old| {
            let what = match (old.status(), obs.after.member(old.node()).map(|m| m.status())) {
                (Joining | WeaklyUp, Some(Up)) => "moved Up",
                (Leaving, Some(Exiting)) => "moved to Exiting",
                (PreparingForShutdown, Some(ReadyForShutdown)) => "moved to ReadyForShutdown",
                (Down | Exiting, None) => "removed",
                _ => return None,
            };
            Some(format!("{what} {}", old.node()))
        });
        let Some(action) = action else { return Ok(()) };
        if let Some(why) = not_converged_because(obs.before, obs.self_node, obs.exiting_confirmed) {
            return Err(format!("{} {action} without convergence: {why}", obs.self_node));
        }
        match leader(obs.before, obs.self_node) {
            Some(l) if l == obs.self_node => Ok(()),
            l => Err(format!(
                "{} {action} but the leader of that gossip is {}",
                obs.self_node,
                l.map_or("nobody".to_owned(), ToString::to_string)
            )),
        }
    }
}
