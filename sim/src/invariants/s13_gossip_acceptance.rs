//! S13: gossip acceptance rules.
//!
//! A node must not take in a gossip addressed to another incarnation (`to` ≠ its uid), from a
//! sender it does not know or marks unreachable, that does not contain it, that waited in its
//! inbox longer than `gossip_time_to_live`, or before it has joined. It must not admit a joiner of
//! another actor system, nor a new incarnation of an address while the old one is still a member.
//! A step that changed the gossip after such an input is a violation.

use convoke_membership::reachability::ReachabilityStatus;

use super::{Cause, Delivered, Invariant, Observation};

/// The S13 checker.
#[derive(Debug, Default, Clone, Copy)]
pub struct GossipAcceptance;

impl Invariant for GossipAcceptance {
    fn id(&self) -> &'static str {
        "S13"
    }

    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        let Cause::Message(delivered) = obs.cause else { return Ok(()) };
        let me = obs.self_node;
        match delivered {
            Delivered::Gossip { from, to, gossip, queued_for } => {
                let reason = if to != me {
                    Some(format!("it was addressed to uid {}", to.uid))
                } else if obs.before.is_empty() {
                    Some("this node has not joined".to_owned())
                } else if !obs.before.has_member(from) {
                    Some(format!("the sender {from} is not a member"))
                } else if obs.before.reachability().status_by(me, from)
                    != ReachabilityStatus::Reachable
                {
                    Some(format!("this node marks the sender {from} unreachable"))
                } else if !gossip.has_member(me) {
                    Some("it does not contain this node".to_owned())
                } else if *queued_for > obs.config.gossip_time_to_live {
                    Some(format!("it waited {queued_for:?}, longer than gossip_time_to_live"))
                } else {
                    None
                };
                match reason {
                    Some(r) => Err(format!("{me} took in a gossip from {from} although {r}")),
                    None => Ok(()),
                }
            }
            Delivered::Join { node } => {
                if !obs.after.has_member(node) || obs.before.has_member(node) {
                    return Ok(());
                }
                if node.address.system() != obs.config.system_name {
                    return Err(format!("{me} admitted {node} of another actor system"));
                }
                if let Some(old) = obs.before.members().find(|m| m.address() == &node.address) {
                    return Err(format!(
                        "{me} admitted {node} while the previous incarnation {} is a member",
                        old.node()
                    ));
                }
                Ok(())
            }
            Delivered::Welcome | Delivered::Other(_) => Ok(()),
        }
    }
}
