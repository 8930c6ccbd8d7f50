//! S9: no convergence while anything is unreachable (unless it is Down or Exiting).
//!
//! Whenever the core reports convergence, this file's own reading of the gossip
//! ([`super::view`]) must agree: every member that must have seen the gossip has, and every member
//! some non-Down observer marks unreachable is Down or Exiting (self and members whose
//! `ExitingConfirmed` arrived excepted).

use super::view::not_converged_because;
use super::{Invariant, Observation};

/// The S9 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoConvergenceWhileUnreachable;

impl Invariant for NoConvergenceWhileUnreachable {
    fn id(&self) -> &'static str {
        "S9"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        if !obs.converged {
            return Ok(());
        }
        match not_converged_because(obs.after, obs.self_node, obs.exiting_confirmed) {
            Some(why) => Err(format!("{} reports convergence, but {why}", obs.self_node)),
            None => Ok(()),
        }
    }
}
