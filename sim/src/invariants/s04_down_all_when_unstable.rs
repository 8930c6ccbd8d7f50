//! S4: down all when unstable.
//!
//! When a node's resolver acts because reachability kept changing for longer than `stable_after +
//! down_all_when_unstable`, it must down everything: the decision is DownAll and downs every member
//! of the gossip it decided on that is not already Down or Exiting, this node included. (That the
//! resolver gets there at all in a flapping network is a liveness matter: the chaos runs' liveness
//! phase demands that the cluster converges again.)

use convoke_membership::sbr::{Decision, DecisionTrigger};

use super::{Invariant, Observation};

/// The S4 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct DownAllWhenUnstable;

impl Invariant for DownAllWhenUnstable {
    fn id(&self) -> &'static str {
        "S4"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        for d in obs.decisions.iter().filter(|d| d.trigger == DecisionTrigger::Unstable) {
            if d.decision != Decision::DownAll {
                return Err(format!(
                    "{} found reachability unstable but decided {:?}",
                    obs.self_node, d.decision
                ));
            }
            let spared = obs
                .before
                .members()
                .filter(|m| !m.status().is_down_or_exiting())
                .find(|m| !d.nodes.contains(m.node()));
            if let Some(m) = spared {
                return Err(format!(
                    "{} downed all for instability but spared {} ({})",
                    obs.self_node,
                    m.node(),
                    m.status()
                ));
            }
        }
        Ok(())
    }
}
