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
