//! convoke-sim: a deterministic simulator for the convoke membership core.
//!
//! It drives many sans-IO [`Cluster`](convoke_membership::Cluster) cores over a modelled network
//! in virtual time, in one thread, with no async runtime (the TigerBeetle / FoundationDB approach
//! of `design/STYLE.md`). A run is a pure function of its seed and options: every fault schedule,
//! latency, uid and clock drift is drawn from streams derived from the seed, and the trace hash
//! proves that two runs did the same thing. After every step the safety invariants of
//! `spec/reliability.md` §2.1 are checked; chaos runs end with a liveness phase that heals every
//! fault and demands convergence within a bound (§2.2).
//!
//! Layout:
//! - [`world`]: the simulator itself — slots, the event queue, the step, actions.
//! - [`time`]: virtual time and drifting node clocks.
//! - [`net`]: latency, loss, duplication, reordering, partitions and clogs.
//! - [`faults`]: the nemesis that injects random faults in chaos runs.
//! - [`operator`]: downing, quarantine and restarts on behalf of what does not exist yet (the
//!   split-brain resolver, the transport, a process supervisor).
//! - [`invariants`]: one checker per safety invariant, and the seam for the resolver's.
//! - [`liveness`]: the post-heal checks and their bound.
//! - [`counters`]: traffic per node and message type, with real wire sizes.
//! - [`commands`]: `converge`, `detect` and `chaos` as functions returning reports.
//! - [`stats`], [`trace`]: summaries and the trace hash.

#![warn(missing_docs)]

pub mod commands;
pub mod counters;
pub mod faults;
pub mod invariants;
pub mod liveness;
pub mod net;
pub mod operator;
pub mod stats;
pub mod time;
pub mod trace;
pub mod world;
