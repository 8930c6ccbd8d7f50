//! convoke: cluster membership, management and bootstrap for Rust services.
//!
//! This crate will host the node runtime (tokio driver, TCP transport, management server and the
//! `convoke` binary). For now it re-exports the sans-IO membership core, which everything else is
//! built on.

#![warn(missing_docs)]

pub use convoke_membership as membership;
