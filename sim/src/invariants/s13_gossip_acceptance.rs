//! S13: gossip acceptance rules.
//!
//! A node must not take in a gossip addressed to another incarnation (`to` ≠ its uid), from a
//! sender it does not know or marks unreachable, that does not contain it, that waited in its
//! inbox longer than `gossip_time_to_live`, or before it has joined (except from a member that
//! holds it: a joiner whose Welcome was lost takes that gossip in its place). It must not admit a
//! joiner of another actor system, nor a new incarnation of an address while the old one is still
//! a member.
//! A step that changed the gossip after such an input is a violation.
//!
//! One exception: gossip from a node that is not a member, that holds this node as a member and
//! its sender as Joining or WeaklyUp (or Leaving without an up number: asked to leave while
//! joining), comes from a joiner welcomed by a member whose word of it
//! never spread. The core admits the sender again as a joiner, under the rules of a Join, and
//! takes in nothing else of that gossip.

use convoke_membership::UniqueAddress;
use convoke_membership::member::MemberStatus;
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
                    // A joiner whose Welcome was lost takes the gossip in its place.
                    let welcome = gossip.has_member(me) && gossip.has_member(from);
                    (!welcome).then(|| "this node has not joined".to_owned())
                } else if !obs.before.has_member(from) {
                    let joiner = gossip.member(from);
                    let joining =
                        joiner.is_some_and(|m| m.status().is_joining() || m.left_while_joining());
                    let before = obs.before;
                    let of_this_cluster = gossip.members().all(|m| {
                        m.node() == from
                            || m.status().is_joining()
                            || m.status() == MemberStatus::Down
                            || before.has_member(m.node())
                            || before.tombstones().contains_key(m.node())
                    });
                    if joining && gossip.has_member(me) && of_this_cluster {
                        return readmitted(obs, from);
                    }
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
            Delivered::Join { node } => admitted(obs, node),
            Delivered::Welcome | Delivered::Other(_) => Ok(()),
        }
    }
}

/// The rules of a Join from `node`: not of another actor system, not next to its old incarnation.
fn admitted(obs: &Observation<'_>, node: &UniqueAddress) -> Result<(), String> {
    let me = obs.self_node;
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

/// A forgotten joiner's gossip: the step may add its sender as Joining, or down the sender's old
/// incarnation (as a Join does), and change nothing else.
fn readmitted(obs: &Observation<'_>, from: &UniqueAddress) -> Result<(), String> {
    let me = obs.self_node;
    for m in obs.after.members() {
        let allowed = match obs.before.member(m.node()) {
            None => m.node() == from && m.status() == MemberStatus::Joining,
            Some(b) => {
                b.status() == m.status()
                    || (m.status() == MemberStatus::Down && m.address() == &from.address)
            }
        };
        if !allowed {
            return Err(format!(
                "{me} took in a gossip from {from}, not a member, beyond readmitting it as a \
                 joiner: {} is {} now",
                m.node(),
                m.status()
            ));
        }
    }
    if let Some(gone) = obs.before.members().find(|m| !obs.after.has_member(m.node())) {
        return Err(format!(
            "{me} took in a gossip from {from}, not a member, and dropped {}",
            gone.node()
        ));
    }
    admitted(obs, from)
}
