//! Cluster bootstrap: N nodes started at once, with no seed list, find each other through service
//! discovery and form exactly one cluster.
//!
//! Each node looks its service up, probes every discovered contact point's
//! `GET /bootstrap/seed-nodes`, and feeds what it learned to a pure join decider. A node joins an
//! existing cluster as soon as any contact point reports one; otherwise, once the discovered set
//! has been stable for the stable margin and enough contact points have answered, only the node
//! with the lowest contact-point address forms a new cluster, and the others join it when it
//! starts advertising itself.
//!
//! Layout:
//! - [`contact_point`]: the [`ContactPoint`] type, its ordering, host selection by fallback port,
//!   and matching this node's own contact point.
//! - [`decider`]: the join decider, a pure function of (now, observations, settings).
//! - [`probe`]: the contact-point probe ([`Prober`], the HTTP implementation, the `seed-nodes`
//!   JSON).
//! - [`coordinator`]: the lookup loop with backoff, one prober task per target, and the decision.
//! - [`status`]: what `GET /bootstrap/status` shows.
//! - [`settings`]: the coordinator's settings and their defaults.
#![warn(missing_docs)]

pub mod contact_point;
pub mod coordinator;
pub mod decider;
pub mod probe;
pub mod settings;
pub mod status;

pub use contact_point::{ContactPoint, SelfContactPoint};
pub use coordinator::Coordinator;
pub use decider::{Decision, Verdict};
pub use probe::{HttpProber, ProbeError, Prober, SeedNode, SeedNodes};
pub use settings::{BootstrapConfig, InvalidConfig};
pub use status::{BootstrapStatus, StatusView};
