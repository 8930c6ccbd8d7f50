//! convoke: cluster membership, management and bootstrap for Rust services.
//!
//! A node embeds the sans-IO membership core ([`membership`]) and runs it here. The crate is
//! layered; each module depends only on the ones below it (see `docs/architecture.md`):
//!
//! - [`runtime`]: the composition root. [`Node::start`] builds every part below and hands them
//!   to the [`Node`], the user's plain handle ([`node`]).
//! - [`management`] (the HTTP routes, over a narrow [`management::Handle`]) and [`bootstrap`]
//!   (discovery and the join decision), both talking to the driver through [`control`].
//! - [`messaging`]: typed asks and tells between members on the transport's application
//!   stream, with member watch.
//! - [`singleton`]: cluster singletons and their proxies, over messaging.
//! - [`sharding`]: sharded entities over messaging, their coordinator a singleton.
//! - `driver`: the task that owns the core; `lease` performs the split-brain
//!   lease's operations for it; [`transport`] carries its messages.
//! - [`control`] (commands in, snapshots out), [`health`], [`metrics`], [`settings`].
//!
//! The `convoke` binary (`src/bin/convoke/`) runs one node (`convoke run`), a demo cluster in one
//! process (`convoke demo`) or the admin client (`convoke members`, `shards`, ...), all through
//! this library's public API.
//!
//! # Example
//!
//! A node that forms a cluster of its own, watches its membership events until it is Up, runs a
//! sharded counter entity and asks it, then leaves:
//!
//! ```
//! use std::time::Duration;
//!
//! use convoke::membership::ClusterEvent;
//! use convoke::settings::Settings;
//! use convoke::sharding::{Entity, EntityContext};
//! use convoke::Node;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Add(u64);
//!
//! struct Counter(u64);
//!
//! impl Entity for Counter {
//!     type Message = Add;
//!     type Reply = u64;
//!
//!     async fn handle(&mut self, Add(n): Add, _ctx: &mut EntityContext) -> u64 {
//!         self.0 += n;
//!         self.0
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut settings = Settings::default();
//! settings.cluster.port = 0; // any free port
//! settings.management.enabled = false;
//! let node = Node::start(&settings).await?;
//!
//! // Events from the current state on; joining itself forms a new cluster.
//! let mut events = node.subscribe().await?;
//! node.join_seed_nodes(vec![node.self_address().clone()]).await?;
//! loop {
//!     let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await??;
//!     if matches!(&event, ClusterEvent::MemberUp(m) if m.node() == node.self_node()) {
//!         break;
//!     }
//! }
//!
//! // Start the entity type (on every node that may host it), then ask any entity by its id.
//! let counters = node.sharding().start("counter", None, |_id: &str| Counter(0))?;
//! assert_eq!(counters.ask("c-1", &Add(2), Duration::from_secs(10)).await?, 2);
//! assert_eq!(counters.ask("c-1", &Add(3), Duration::from_secs(10)).await?, 5);
//!
//! node.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub use convoke_membership as membership;

pub mod bootstrap;
pub mod control;
pub mod data;
mod driver;
pub mod health;
mod lease;
pub mod management;
pub mod messaging;
pub mod metrics;
pub mod node;
mod rolling_update;
pub mod runtime;
pub mod settings;
pub mod sharding;
pub mod singleton;
pub mod transport;

pub use control::{Snapshot, Subscription, Termination};
pub use node::Node;
pub use runtime::StartError;

// The README's Rust snippets compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
