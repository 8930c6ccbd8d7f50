//! Safety invariants, one checker per file, evaluated after every step.
//!
//! A *step* is one input to one node's core: a delivered message, a timer, a command, or the
//! core's creation. After each step the simulator builds an [`Observation`] — the node's gossip
//! before and after, what caused the step, and a few views the core computed — and hands it to
//! every registered [`Invariant`] whose inputs could have changed. Checkers that need the whole
//! world (several nodes, processes, the real network) also get a [`WorldView`] after each step.
//!
//! Checkers recompute what they judge from the gossip with their own code (see [`view`]) rather
//! than asking the core, so a bug in the core's own convergence or reachability logic cannot hide
//! itself.
//!
//! What runs when: a step that leaves the node's gossip untouched (the same `Arc`) cannot break a
//! gossip invariant, so [`Invariant::check_step`] only runs when the gossip changed, or when the
//! step fed the core something the checkers track besides the gossip (an `ExitingConfirmed`).
//! Every checker is O(members) per call, about what the core itself spent on the change.
//!
//! Registered ([`registry`]): S5–S13 on the membership core; S1–S4 and S14 on the split-brain
//! resolver: S2, S3 and S4 judge each decision a resolver acted on (it reaches them in
//! [`Observation::decisions`]), S1 and S14 look at the whole world every half second of virtual
//! time; S17 on the cluster singleton, after every step of the singleton layer (the only steps
//! that start an instance), through [`Invariant::check_singletons`]. S18 (an entity runs in at
//! most one process of a cluster) is not a registered checker: the sharding layer checks it at
//! every entity start, with `Shardings::other_host` (`crate::sharding`)
//! and S17's test for two live clusters, whenever the checkers are on. Nor is B1 (processes that
//! bootstrap with the same discovery form one cluster, within a bound): the bootstrap layer
//! checks it while a formation is watched ([`OneClusterFormed`]).

pub mod b1_one_cluster_formed;
pub(crate) mod s01_one_live_cluster;
mod s02_complementary_decisions;
mod s03_indirectly_connected_downed;
pub(crate) mod s04_down_all_when_unstable;
mod s05_no_resurrection;
mod s06_transitions;
mod s07_structure;
mod s08_leader_actions_need_convergence;
mod s09_no_convergence_while_unreachable;
mod s10_single_leader;
mod s11_monotonic_versions;
mod s12_no_silent_disappearance;
mod s13_gossip_acceptance;
pub(crate) mod s14_downed_node_stops;
pub(crate) mod s17_one_singleton;
pub mod view;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::config::Config;
use convoke_membership::gossip::Gossip;
use convoke_membership::sbr::{Decision, DecisionTrigger, DowningDecision};
use convoke_membership::{Cluster, UniqueAddress};
use serde::Serialize;

pub use b1_one_cluster_formed::OneClusterFormed;
pub use s01_one_live_cluster::OneLiveCluster;
pub use s02_complementary_decisions::ComplementaryDecisions;
pub use s03_indirectly_connected_downed::IndirectlyConnectedDowned;
pub use s04_down_all_when_unstable::DownAllWhenUnstable;
pub use s05_no_resurrection::NoResurrection;
pub use s06_transitions::AllowedTransitions;
pub use s07_structure::GossipStructure;
pub use s08_leader_actions_need_convergence::LeaderActionsNeedConvergence;
pub use s09_no_convergence_while_unreachable::NoConvergenceWhileUnreachable;
pub use s10_single_leader::SingleLeader;
pub use s11_monotonic_versions::MonotonicVersions;
pub use s12_no_silent_disappearance::NoSilentDisappearance;
pub use s13_gossip_acceptance::GossipAcceptance;
pub use s14_downed_node_stops::DownedNodeStops;
pub use s17_one_singleton::OneSingleton;

/// What made a node's core take a step.
#[derive(Clone, Debug)]
pub enum Cause {
    /// The core was created (a start or a restart).
    Started,
    /// `handle_timeout`.
    Timer,
    /// A command: `join_seed_nodes`, `join`, `leave`, `down`, `prepare_for_full_shutdown`.
    Command(&'static str),
    /// A delivered message.
    Message(Delivered),
}

/// The parts of a delivered message that checkers judge. (The message itself is moved into the
/// core.)
#[derive(Clone, Debug)]
pub enum Delivered {
    /// A full gossip.
    Gossip {
        /// The sender named in the envelope.
        from: UniqueAddress,
        /// The receiver named in the envelope.
        to: UniqueAddress,
        /// The gossip.
        gossip: Arc<Gossip>,
        /// How long it waited in the node's inbox (while the node was paused).
        queued_for: Duration,
    },
    /// A join request.
    Join {
        /// The joiner.
        node: UniqueAddress,
    },
    /// A welcome.
    Welcome,
    /// Anything else, by type name.
    Other(&'static str),
}

/// One step of one node, as the checkers see it.
#[derive(Debug)]
pub struct Observation<'a> {
    /// The global step number.
    pub step: u64,
    /// Global virtual time.
    pub now: Duration,
    /// The node's slot.
    pub slot: usize,
    /// The node's identity (this incarnation).
    pub self_node: &'a UniqueAddress,
    /// What caused the step.
    pub cause: &'a Cause,
    /// The gossip before the step.
    pub before: &'a Gossip,
    /// The gossip after the step.
    pub after: &'a Gossip,
    /// The core's own verdict on convergence after the step.
    pub converged: bool,
    /// The leader the core computes after the step.
    pub leader: Option<&'a UniqueAddress>,
    /// Every node whose `ExitingConfirmed` reached this incarnation: a superset of the core's
    /// private `exiting_confirmed` set.
    pub exiting_confirmed: &'a BTreeSet<UniqueAddress>,
    /// The node's configuration.
    pub config: &'a Config,
    /// The split-brain resolver's decisions taken in this step, in order.
    pub decisions: &'a [SbrDecision],
    /// Whether the core reported a move in this step that only the leader makes (to WeaklyUp,
    /// Up or Exiting, or a removal). Such a move gives the gossip a new version before the
    /// resolver ticks, even when a decision in the same step then downs the moved member, so
    /// that `after` no longer shows it.
    pub leader_moved: bool,
}

/// A decision the split-brain resolver acted on, as the checkers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbrDecision {
    /// The decision.
    pub decision: Decision,
    /// Why it was taken then.
    pub trigger: DecisionTrigger,
    /// The members it downs.
    pub nodes: BTreeSet<UniqueAddress>,
    /// Whether the deciding node downs itself.
    pub downs_self: bool,
    /// The members it found indirectly connected.
    pub indirectly_connected: BTreeSet<UniqueAddress>,
}

impl From<&DowningDecision> for SbrDecision {
    fn from(d: &DowningDecision) -> Self {
        Self {
            decision: d.decision,
            trigger: d.trigger,
            nodes: d.nodes.clone(),
            downs_self: d.downs_self,
            indirectly_connected: d.indirectly_connected.clone(),
        }
    }
}

impl<'a> Observation<'a> {
    /// Whether the step kept the member table of `before` (the very table, not a copy).
    /// `before` was checked when it was installed (every change is checked, and an incarnation
    /// starts empty), so a checker that looks only at the members has nothing new to see.
    pub fn members_kept(&self) -> bool {
        self.after.shares_members_with(self.before)
    }

    /// Whether the step kept everything of `before` but its seen set and clock: its members
    /// (see [`members_kept`](Self::members_kept)), reachability and tombstones.
    pub fn content_kept(&self) -> bool {
        self.members_kept()
            && self.after.reachability() == self.before.reachability()
            && self.after.tombstones() == self.before.tombstones()
    }

    /// An observation of `core` after a step, given the gossip before it.
    #[allow(clippy::too_many_arguments)]
    pub fn of_core(
        step: u64,
        now: Duration,
        slot: usize,
        core: &'a Cluster,
        cause: &'a Cause,
        before: &'a Gossip,
        leader: Option<&'a UniqueAddress>,
        exiting_confirmed: &'a BTreeSet<UniqueAddress>,
        decisions: &'a [SbrDecision],
        leader_moved: bool,
    ) -> Self {
        Self {
            step,
            now,
            slot,
            self_node: core.self_node(),
            cause,
            before,
            after: core.gossip(),
            converged: core.convergence(),
            leader,
            exiting_confirmed,
            config: core.config(),
            decisions,
            leader_moved,
        }
    }
}

/// A cluster singleton instance, as the checkers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceView {
    /// The incarnation that runs it.
    pub node: UniqueAddress,
    /// When it started.
    pub since: Duration,
    /// Whether its manager has asked it to stop (it runs until it has ended).
    pub stopping: bool,
    /// When the first pause of its process since it started that has lasted longer than the
    /// removal margin its manager runs with began (the current pause counts once it has lasted
    /// that long): from then on the instance does not count for S17.
    pub long_pause_from: Option<Duration>,
    /// For an instance whose process resumed from such a pause, the latest it may still exist
    /// beside another instance: the resume, plus one retry interval for its manager to notice
    /// the freeze, plus the longest an instance takes to stop.
    pub stale_until: Option<Duration>,
    /// Whether its process is paused now.
    pub paused: bool,
    /// When its process last resumed from a pause since the instance started: that moment, plus
    /// one retry interval for its manager to notice the freeze, plus the longest stop.
    pub resume_grace_until: Option<Duration>,
    /// When the singleton runs with a lease: whether its host held the lease (by the lease
    /// store) when the instance started.
    pub leased: Option<bool>,
}

/// The whole world, for checkers of invariants that span nodes or processes.
pub trait WorldView {
    /// Global virtual time.
    fn now(&self) -> Duration;
    /// The number of node slots.
    fn slots(&self) -> usize;
    /// The running (or paused) core in `slot`, if any.
    fn core(&self, slot: usize) -> Option<&Cluster>;
    /// Whether the process in `slot` has stopped (crashed, or shut down by its core).
    fn is_stopped(&self, slot: usize) -> bool;
    /// Whether the network currently delivers messages from `from` to `to`.
    fn link_open(&self, from: usize, to: usize) -> bool;
    /// Whether the process in `slot` runs (neither paused nor stopped).
    fn is_running(&self, slot: usize) -> bool;
    /// How long the current (or last) process in `slot` has run since it started, time spent
    /// paused not counted.
    fn running_time(&self, slot: usize) -> Duration;
    /// The cluster singleton instance in `slot`, running or stopping, if there is one (whatever
    /// the process's state: a process that left may stay a while to hand its instance over).
    fn singleton(&self, slot: usize) -> Option<InstanceView> {
        let _ = slot;
        None
    }
}

/// A safety invariant.
pub trait Invariant: std::fmt::Debug {
    /// Its number, e.g. `"S7"` (the list is at [`registry`]).
    fn id(&self) -> &'static str;

    /// Checks one step of one node. Runs after every step that changed the node's gossip.
    ///
    /// # Errors
    /// A description of the violation.
    fn check_step(&mut self, obs: &Observation<'_>) -> Result<(), String> {
        let _ = obs;
        Ok(())
    }

    /// Whether [`Invariant::check_world`] must run after every step.
    fn wants_world(&self) -> bool {
        false
    }

    /// Checks the whole world after a step.
    ///
    /// # Errors
    /// A description of the violation.
    fn check_world(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let _ = world;
        Ok(())
    }

    /// Checks the cluster singleton instances after a step of the singleton layer.
    ///
    /// # Errors
    /// A description of the violation.
    fn check_singletons(&mut self, world: &dyn WorldView) -> Result<(), String> {
        let _ = world;
        Ok(())
    }

    /// Forgets what it tracked about an incarnation that stopped (so state stays bounded).
    fn forget(&mut self, node: &UniqueAddress) {
        let _ = node;
    }
}

/// A violated invariant, with where and when.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// The invariant, e.g. `"S7"`.
    pub invariant: String,
    /// The global step.
    pub step: u64,
    /// Virtual time in seconds.
    pub time_s: f64,
    /// The node's slot, when one node's step broke it.
    pub slot: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} violated at step {} (t={:.3}s", self.invariant, self.step, self.time_s)?;
        if let Some(s) = self.slot {
            write!(f, ", node {s}")?;
        }
        write!(f, "): {}", self.message)
    }
}

/// The registered checkers.
#[derive(Debug, Default)]
pub struct Checkers {
    checkers: Vec<Box<dyn Invariant>>,
    any_world: bool,
}

impl Checkers {
    /// These checkers.
    pub fn new(checkers: Vec<Box<dyn Invariant>>) -> Self {
        let any_world = checkers.iter().any(|c| c.wants_world());
        Self { checkers, any_world }
    }

    /// No checkers.
    pub fn none() -> Self {
        Self::default()
    }

    /// The ids of the registered checkers.
    pub fn ids(&self) -> Vec<&'static str> {
        self.checkers.iter().map(|c| c.id()).collect()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.checkers.is_empty()
    }

    /// Runs every step checker; the first violation.
    pub fn check_step(&mut self, obs: &Observation<'_>) -> Option<Violation> {
        for c in &mut self.checkers {
            if let Err(message) = c.check_step(obs) {
                return Some(Violation {
                    invariant: c.id().to_owned(),
                    step: obs.step,
                    time_s: obs.now.as_secs_f64(),
                    slot: Some(obs.slot),
                    message,
                });
            }
        }
        None
    }

    /// Whether any checker looks at the whole world.
    pub fn wants_world(&self) -> bool {
        self.any_world
    }

    /// Runs every world checker; the first violation.
    pub fn check_world(&mut self, step: u64, world: &dyn WorldView) -> Option<Violation> {
        let world_checkers = self.checkers.iter_mut().filter(|c| c.wants_world());
        first_violation(world_checkers, step, world, |c, w| c.check_world(w))
    }

    /// Runs every singleton checker; the first violation.
    pub fn check_singletons(&mut self, step: u64, world: &dyn WorldView) -> Option<Violation> {
        first_violation(self.checkers.iter_mut(), step, world, |c, w| c.check_singletons(w))
    }

    /// Tells every checker that an incarnation stopped.
    pub fn forget(&mut self, node: &UniqueAddress) {
        self.checkers.iter_mut().for_each(|c| c.forget(node));
    }
}

/// Runs `check` on each of `checkers` and `world` in turn; the first violation, as of `step`.
fn first_violation<'c>(
    checkers: impl Iterator<Item = &'c mut Box<dyn Invariant>>,
    step: u64,
    world: &dyn WorldView,
    mut check: impl FnMut(&mut dyn Invariant, &dyn WorldView) -> Result<(), String>,
) -> Option<Violation> {
    for c in checkers {
        if let Err(message) = check(c.as_mut(), world) {
            return Some(Violation {
                invariant: c.id().to_owned(),
                step,
                time_s: world.now().as_secs_f64(),
                slot: None,
                message,
            });
        }
    }
    None
}

/// The checkers for S1–S14 and S17, in order: S5–S13 check the membership core, S1–S4 and S14
/// the split-brain resolver and what it leads to, S17 the cluster singleton (S15 and S16 concern
/// the bootstrap and the transport, which the simulator does not model).
pub fn registry() -> Vec<Box<dyn Invariant>> {
    vec![
        Box::new(OneLiveCluster::default()),
        Box::new(ComplementaryDecisions::default()),
        Box::new(IndirectlyConnectedDowned),
        Box::new(DownAllWhenUnstable::default()),
        Box::new(NoResurrection::default()),
        Box::new(AllowedTransitions),
        Box::new(GossipStructure),
        Box::new(LeaderActionsNeedConvergence),
        Box::new(NoConvergenceWhileUnreachable),
        Box::new(SingleLeader::default()),
        Box::new(MonotonicVersions::default()),
        Box::new(NoSilentDisappearance),
        Box::new(GossipAcceptance),
        Box::new(DownedNodeStops::default()),
        Box::new(OneSingleton::default()),
    ]
}

#[cfg(test)]
mod tests;
