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
//! - [`driver`]: the task that owns the core; [`lease`](crate::lease) performs the split-brain
//!   lease's operations for it; [`transport`] carries its messages.
//! - [`control`] (commands in, snapshots out), [`health`], [`metrics`], [`settings`].
//!
//! The `convoke` binary (`src/bin/convoke/`) runs one node (`convoke run`), a demo cluster in one
//! process (`convoke demo`) or the admin client (`convoke members`, `shards`, ...), all through
//! this library's public API.

#![warn(missing_docs)]

pub use convoke_membership as membership;

pub mod bootstrap;
pub mod control;
mod driver;
pub mod health;
mod lease;
pub mod management;
pub mod messaging;
pub mod metrics;
pub mod node;
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
