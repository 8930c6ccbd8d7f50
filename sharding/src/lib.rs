//! convoke-sharding: the sans-IO decision logic of the cluster singleton and of cluster sharding.
//!
//! A cluster singleton is one instance of a service that runs on exactly one member of the
//! cluster, the oldest one (by up-number) among the members that may host it, and moves to the
//! next oldest when that member leaves or is removed. The crate decides *where and when* the
//! instance runs; starting and stopping it, sending the hand-over messages and reading the
//! membership are the driver's job (the node runtime, or the simulator).
//!
//! Cluster sharding spreads many stateful entities over the members: each entity belongs to a
//! shard, each shard lives in the region of one node, and a coordinator (itself a singleton)
//! decides where. The crate holds the region, shard, coordinator and replica state machines; the
//! driver runs the entities and carries the messages.
//!
//! No tokio, no sockets, no clock reads: time comes in as `Instant`s, outputs go out as data, and
//! the same inputs give the same outputs. `clippy.toml` bans clocks, sleeps, threads and hash maps.
//!
//! Layout:
//! - [`singleton`]: the settings, hand-over messages, outputs, phases and status of a singleton;
//!   `singleton/manager.rs` holds [`SingletonManager`](singleton::SingletonManager), one per (node,
//!   singleton name); `singleton/view.rs` reads a membership list (who may host, who is the
//!   oldest). `docs/singleton.md` explains the protocol and the removal margin.
//! - [`sharding`]: ids, settings and protocol messages; one file per state machine
//!   ([`Coordinator`](sharding::Coordinator), [`Replica`](sharding::Replica),
//!   [`Region`](sharding::Region), [`Shard`](sharding::Shard)) and the
//!   [`Host`](sharding::Host) that ties them together for one entity type on one node, the
//!   frames they travel in ([`sharding::wire`]), the allocation rule and the default shard-id
//!   extractor. `docs/sharding-design.md` explains the design.

#![warn(missing_docs)]

pub mod sharding;
pub mod singleton;
