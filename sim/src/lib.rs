//! convoke-sim: a deterministic simulator for the convoke membership core.
//!
//! It drives many sans-IO [`Cluster`](convoke_membership::Cluster) cores over a modelled network
//! in virtual time, in one thread, with no async runtime (the approach of the FoundationDB and
//! TigerBeetle simulators). A run is a pure function of its seed and options: every fault
//! schedule, latency, uid and clock drift is drawn from streams derived from the seed, and the
//! trace hash proves that two runs did the same thing. After every step the safety invariants
//! (S1–S14 and S17, listed at [`invariants::registry`]) are checked; chaos runs end with a
//! liveness phase that heals every fault and demands convergence within a bound ([`liveness`]).
//!
//! Chaos runs also run a cluster singleton manager in every process ([`singleton`]): S17 demands
//! that at most one instance runs at a time, and the liveness phase (L8) that exactly one runs on
//! the oldest member soon after the membership settles. On top of it they run cluster sharding
//! ([`sharding`]): a region and a replica in every process, the coordinator as the singleton's
//! instance, and a load of asks; S18 demands that no entity runs in two processes of one cluster
//! at once, the liveness phase that the shards balance (L10) and every ask is answered (L9).
//!
//! The cores run the split-brain resolver, which downs nodes in chaos runs by default. What a
//! deployment adds around a core and the simulator does not model — the transport's quarantine,
//! Cluster Bootstrap, a process supervisor, an operator downing by hand — is played by the
//! [`operator`] and the [`processes`]' supervisor. The `bootstrap` command and `chaos --bootstrap`
//! form clusters by Cluster Bootstrap's own machine instead ([`bootstrap`], checked by B1).
//!
//! Layout:
//! - [`world`]: the simulator itself — [`world::Sim`] composes the parts below, takes the steps
//!   and applies the actions.
//! - [`queue`]: the event queue, in (time, sequence number) order.
//! - [`processes`]: the slots, the core in each, and their lives (start, pause, crash, stop,
//!   restart by the supervisor).
//! - [`delivery`]: transmits through the modelled network and its link state, and the traffic
//!   counters.
//! - [`trace`]: the trace hash and the step log.
//! - [`control`]: the actions, and the interface through which the nemesis and the operator act
//!   on the world.
//! - [`time`]: virtual time and drifting node clocks.
//! - [`net`]: latency, loss, duplication, reordering, partitions and clogs.
//! - [`faults`]: the nemesis that injects random faults in chaos runs.
//! - [`operator`]: quarantine, bootstrap, and oracle downing in place of the resolver.
//! - [`singleton`]: the cluster singleton managers, their instances and counters.
//! - [`lease`]: the lease store a singleton may run with.
//! - [`sharding`]: the sharded entity type's machines in every process, the load of asks, and
//!   counters.
//! - [`bootstrap`]: Cluster Bootstrap's machine in every bootstrapping process, over modelled
//!   discovery and contact-point probes.
//! - [`invariants`]: one checker per safety invariant, of the core and of the resolver.
//! - [`liveness`]: the post-heal checks and their bound.
//! - [`counters`]: traffic per node and message type, with real wire sizes.
//! - [`commands`]: `converge`, `detect` and `chaos` as functions returning reports.
//! - [`stats`]: summaries of samples.
//!
//! No module imports one that imports it back: the world uses the parts, and the nemesis and the
//! operator see the world only through [`control::Control`].

#![warn(missing_docs)]

pub mod bootstrap;
pub mod commands;
pub mod control;
pub mod counters;
pub mod data;
pub mod delivery;
pub mod faults;
pub mod invariants;
pub mod lease;
pub mod liveness;
pub mod net;
pub mod operator;
pub mod processes;
pub mod queue;
pub mod sharding;
pub mod singleton;
pub mod state;
pub mod stats;
pub mod time;
pub mod trace;
pub mod world;

#[cfg(test)]
mod tests;

/// A hasher for the keys the simulator derives from gossip (vector clocks, contents, message
/// sizes): the same in every run and on every machine, and several times faster than the
/// standard library's on the addresses a gossip is made of. Nothing in a trace depends on it.
pub(crate) fn key_hasher() -> foldhash::quality::FoldHasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::default().build_hasher()
}
