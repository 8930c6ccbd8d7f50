//! S4: down all when unstable.
//!
//! When a node's resolver acts because reachability kept changing for longer than `stable_after +
//! down_all_when_unstable`, it must down everything: the decision is DownAll and downs every member
//! of the gossip it decided on that is not already Down or Exiting, this node included.
//!
//! And it must get there in time: a running node that has held some member unreachable (an Up or
//! Leaving one, not yet Down or Exiting) for longer than `stable_after + down_all_when_unstable`,
//! with no decision of its own in between, must have acted by then. Its clock starts with the
//! first change of reachability (a member seen unreachable, or reachable again) while such a
//! member is unreachable, as the resolver's does (a joining member moved up while unreachable is
//! no change of reachability), and starts over when none is left (all healed, downed
//! or removed), when a decision lands (it takes one, or its gossip holds a member Down or removed
//! that it did not before), and when it resumes from a pause; it counts only the node's running
//! time. The bound adds two resolver ticks, the checker's look interval and 10 %
//! for clock drift. (That the cluster converges again afterwards is the liveness phase's to
//! check.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use convoke_membership::gossip::Gossip;
use convoke_membership::member::MemberStatus;
use convoke_membership::sbr::{Decision, DecisionTrigger, TICK_INTERVAL};
use convoke_membership::{Cluster, UniqueAddress};

use super::s01_one_live_cluster::{LOOK_EVERY, Pace};
use super::{Invariant, Observation, WorldView};

/// The S4 checker.
#[derive(Debug, Default)]
pub struct DownAllWhenUnstable {
    pace: Pace,
    /// Per running incarnation that holds an unresolved unreachable member: running time since.
    unstable_for: BTreeMap<UniqueAddress, Duration>,
    /// Incarnations whose clock starts over at the next look: since the last one, a decision
    /// landed in their gossip or nothing was left unresolved there for a moment.
    start_over: BTreeSet<UniqueAddress>,
    /// Incarnations whose set of unreachable members changed since the last look.
    changed: BTreeSet<UniqueAddress>,
}

/// How long a node may hold an unreachable member without deciding, or `None` when
/// down-all-when-unstable is off.
pub(crate) fn bound(config: &convoke_membership::Config) -> Option<Duration> {
    let sbr = &config.split_brain_resolver;
    let after = sbr.down_all_when_unstable_after()?;
    Some((sbr.stable_after + after + TICK_INTERVAL * 2).mul_f64(1.1) + LOOK_EVERY)
}

/// Whether `g`, held by `me`, holds some other member unreachable that is not Down, Exiting,
/// Joining or WeaklyUp (the members whose unreachability the resolver waits to settle).
fn holds_unresolved_unreachable(g: &Gossip, me: &UniqueAddress) -> bool {
    unresolved_among(g, g.reachability().all_unreachable_or_terminated(), me)
}

/// [`holds_unresolved_unreachable`], given `g`'s unreachable or terminated nodes.
fn unresolved_among(g: &Gossip, unreachable: &BTreeSet<UniqueAddress>, me: &UniqueAddress) -> bool {
    unreachable.iter().filter(|n| *n != me).any(|n| {
        g.member(n).is_some_and(|m| {
            use MemberStatus::*;
            matches!(m.status(), Up | Leaving | PreparingForShutdown | ReadyForShutdown)
        })
    })
}

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
        // A reachability change as the resolver counts one: another member became unreachable,
        // or reachable again while still a member. A member leaving the table by its removal is
        // not, nor are the others' verdicts on this node.
        let me = obs.self_node;
        let is = obs.after.reachability().all_unreachable_or_terminated();
        // Equal tables hold the same unreachable nodes (and comparing them is cheaper).
        if obs.before.reachability() != obs.after.reachability() {
            let was = obs.before.reachability().all_unreachable_or_terminated();
            if is.iter().any(|n| n != me && !was.contains(n))
                || was.iter().any(|n| n != me && !is.contains(n) && obs.after.has_member(n))
            {
                self.changed.insert(obs.self_node.clone());
            }
        }
        let landed = obs.before.members().any(|m| {
            m.status() != MemberStatus::Down
                && obs.after.member(m.node()).is_none_or(|now| now.status() == MemberStatus::Down)
        });
        if !obs.decisions.is_empty() || landed || !unresolved_among(obs.after, is, obs.self_node) {
            self.start_over.insert(obs.self_node.clone());
        }
        Ok(())
    }

    fn wants_world(&self) -> bool {
        true
    }

    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let now = world.now();
        let Some(elapsed) = self.pace.look(now) else {
            return Ok(());
        };
        let start_over = std::mem::take(&mut self.start_over);
        let changed = std::mem::take(&mut self.changed);
        let mut still = BTreeMap::new();
        for i in (0..world.slots()).filter(|&i| world.is_running(i)) {
            let Some(core) = world.core(i) else { continue };
            let me = core.self_node();
            let Some(bound) = bound(Cluster::config(core)) else { continue };
            let live = !matches!(core.self_status(), MemberStatus::Down | MemberStatus::Exiting);
            if !live
                || core.split_brain_resolver().is_none()
                || start_over.contains(me)
                || !holds_unresolved_unreachable(core.gossip(), me)
            {
                continue;
            }
            let total = match self.unstable_for.get(me) {
                Some(d) => *d + elapsed,
                None if changed.contains(me) => Duration::ZERO,
                None => continue,
            };
            if total > bound {
                return Err(format!(
                    "{me} has held an unreachable member for {:.1} s of running time without \
                     deciding (bound {:.1} s): down-all-when-unstable did not act",
                    total.as_secs_f64(),
                    bound.as_secs_f64()
                ));
            }
            still.insert(me.clone(), total);
        }
        // A node not running now (paused, stopped) starts over: the resolver does after a pause.
        self.unstable_for = still;
        Ok(())
    }

    fn forget(&mut self, node: &UniqueAddress) {
        self.unstable_for.remove(node);
        self.start_over.remove(node);
        self.changed.remove(node);
    }
}
