//! The sans-IO cluster membership core of convoke.
//!
//! One node's view of cluster membership as a deterministic state machine: gossip with vector
//! clocks, reachability, convergence and leader actions, the join handshake, phi-accrual failure
//! detection over a heartbeat ring, the split-brain resolver that downs unreachable members, and
//! the cluster events computed from consecutive states. It does no IO, reads no clock and uses no
//! global RNG: the driver passes `now` in, pulls transmits, events and the next deadline out, and
//! the configuration carries the RNG seed. The same inputs give the same outputs, bit for bit.
//!
//! Layout:
//! - [`address`]: `Address`, `UniqueAddress`, `Uid`.
//! - [`member`], [`version`]: members, statuses and their transitions, app versions.
//! - [`vclock`], [`reachability`], [`gossip`]: the replicated state and its merge rules.
//! - [`state`]: convergence, leader, role leaders and oldest, computed from a gossip.
//! - [`phi`], [`ring`], [`heartbeat`]: failure detection.
//! - [`message`], [`wire`]: the protocol messages and their protobuf encoding.
//! - [`event`]: cluster events and the current-state snapshot.
//! - [`sbr`]: the split-brain resolver: downing strategies, decisions and the lease seam.
//! - [`config`]: settings with their defaults and validation; [`compat`]: the join-compatibility
//!   check.
//! - [`timers`]: the typed deadline table of every sans-IO machine in convoke.
//! - [`cluster`]: the core state machine, [`Cluster`], that ties it all together.
//!
//! # Example
//!
//! Two cores form a cluster over an in-memory network with a virtual clock: the caller delivers
//! every transmit and fires every deadline, which is all a driver does (the `convoke` crate's
//! over TCP and Tokio, the simulator's over a modelled network).
//!
//! ```
//! use std::time::Instant;
//!
//! use convoke_membership::gossip::WallMillis;
//! use convoke_membership::{Address, Cluster, Config, MemberStatus, Uid, UniqueAddress};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let node = |port: u16| -> Result<UniqueAddress, Box<dyn std::error::Error>> {
//!     let uid = Uid::new(u64::from(port)).ok_or("a uid is not zero")?;
//!     Ok(UniqueAddress::new(Address::new("convoke", "127.0.0.1", port)?, uid))
//! };
//! let mut now = Instant::now();
//! let wall = WallMillis(1_700_000_000_000);
//! let mut cores = [
//!     Cluster::new(Config::default(), node(25520)?, now, wall)?,
//!     Cluster::new(Config::default(), node(25521)?, now, wall)?,
//! ];
//! // The first node forms the cluster; the second joins through it.
//! let seed = cores[0].self_address().clone();
//! for core in &mut cores {
//!     core.join_seed_nodes(now, vec![seed.clone()])?;
//! }
//! let all_up = |cores: &[Cluster]| {
//!     cores.iter().all(|c| {
//!         let up = c.state().members.iter().filter(|m| m.status() == MemberStatus::Up).count();
//!         up == cores.len()
//!     })
//! };
//! for _round in 0..10_000 {
//!     if all_up(&cores) {
//!         break;
//!     }
//!     // Deliver what each core wants to send...
//!     let mut sent = Vec::new();
//!     for core in &mut cores {
//!         while let Some(t) = core.poll_transmit() {
//!             sent.push((core.self_node().clone(), t));
//!         }
//!     }
//!     for (from, t) in sent {
//!         if let Some(to) = cores.iter_mut().find(|c| c.self_address() == &t.to) {
//!             to.handle_message(now, from, t.message);
//!         }
//!     }
//!     // ...then move the clock to the earliest deadline and fire the timers that are due.
//!     now = cores.iter().filter_map(Cluster::poll_timeout).min().ok_or("a core has a timer")?;
//!     for core in &mut cores {
//!         if core.poll_timeout().is_some_and(|t| t <= now) {
//!             core.handle_timeout(now);
//!         }
//!     }
//! }
//! assert!(all_up(&cores), "two cores form a cluster within a few simulated seconds");
//! // Each core reports what changed as events, in order.
//! let events: Vec<_> = std::iter::from_fn(|| cores[1].poll_event()).collect();
//! assert!(events.iter().any(|e| e.type_name() == "MemberUp"));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod address;
pub mod cluster;
pub mod compat;
pub mod config;
pub mod event;
pub mod gossip;
pub mod heartbeat;
pub mod member;
pub mod message;
pub mod phi;
pub mod reachability;
pub mod ring;
pub mod sbr;
pub mod state;
pub mod timers;
pub mod vclock;
pub mod version;
pub mod wire;

pub use address::{Address, AddressError, Uid, UniqueAddress};
pub use cluster::{Cluster, JoinError, ShutdownReason};
pub use config::Config;
pub use event::{ClusterEvent, CurrentClusterState};
pub use member::{Member, MemberStatus};
pub use message::{Message, Transmit};
