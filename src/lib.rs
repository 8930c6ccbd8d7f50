//! convoke: cluster membership, management and bootstrap for Rust services.
//!
//! This crate is the node runtime around the sans-IO membership core ([`membership`]): the
//! settings a node is configured with ([`settings`]), and, as they land, the tokio driver, the TCP
//! transport, the management server and the `convoke` binary.

#![warn(missing_docs)]

pub use convoke_membership as membership;

pub mod settings;
pub mod transport;
