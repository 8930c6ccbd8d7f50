//! convoke: cluster membership, management and bootstrap for Rust services.
//!
//! A node embeds the sans-IO membership core ([`membership`]) and runs it here: [`node::Node`]
//! starts the driver task that owns the core ([`driver`]) and the TCP transport ([`transport`]),
//! configured by [`settings`]. The `convoke` binary (`src/main.rs`) runs one node (`convoke run`)
//! or a demo cluster in one process ([`demo`]).

#![warn(missing_docs)]

pub use convoke_membership as membership;

pub mod admin;
pub mod bootstrap;
pub mod demo;
pub mod driver;
mod lease;
pub mod management;
pub mod node;
pub mod settings;
pub mod transport;

pub use node::{Node, Subscription};
