//! Cluster bootstrap: N nodes started at once, with no seed list, find each other through service
//! discovery and form exactly one cluster.
//!
//! Each node looks its service up, probes every discovered contact point's
//! `GET /bootstrap/seed-nodes`, and feeds what it learned to a pure join decider. What to look up
//! and probe, when, and when to decide is a sans-IO state machine, [`BootstrapMachine`]; the
//! [`Coordinator`] drives it with tokio, a [`ServiceDiscovery`](convoke_discovery::ServiceDiscovery)
//! and a [`Prober`] (`docs/architecture.md`, "Bootstrap's state machine"). A node joins an
//! existing cluster as soon as any contact point reports one; otherwise, once the discovered set
//! has been stable for the stable margin and enough contact points have answered, only the node
//! with the lowest contact-point address forms a new cluster, and the others join it when it
//! starts advertising itself.
//!
//! Configuration comes in two parts: [`BootstrapSettings`] is the `[bootstrap]` table of the
//! node's settings file (serde, with its defaults and [`BootstrapSettings::validate`]), and
//! [`LocalNode`] holds what is known about this node only at run time (its contact point, its
//! cluster transport address, the probe scheme and base path, the jitter seed).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use convoke_bootstrap::*;
//! # async fn run(discovery: Arc<dyn convoke_discovery::ServiceDiscovery>) -> Result<(), Box<dyn std::error::Error>> {
//! let settings: BootstrapSettings = toml::from_str("required_contact_point_nr = 3")?;
//! settings.validate()?;
//! let local = LocalNode::new("convoke", SelfContactPoint::new("10.0.0.1", 8558), ("10.0.0.1".into(), 25520));
//! let (coordinator, _status) = Coordinator::new(&settings, local, discovery, Arc::new(HttpProber::new(None)?));
//! let decision = coordinator.run().await; // JoinSelf or JoinOthers(seed nodes): the caller joins.
//! # let _ = decision; Ok(()) }
//! ```
//!
//! Settings are checked before anything starts, and a bad value is refused with its key, the value
//! and what was expected:
//!
//! ```
//! use convoke_bootstrap::BootstrapSettings;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let settings: BootstrapSettings = toml::from_str("required_contact_point_nr = 3")?;
//! settings.validate()?;
//! let bad: BootstrapSettings = toml::from_str("required_contact_point_nr = 0")?;
//! let error = bad.validate().expect_err("no contact point is too few").to_string();
//! assert!(error.contains("bootstrap.required_contact_point_nr"), "{error}");
//! # Ok(())
//! # }
//! ```
//!
//! Layout:
//! - [`settings`]: the `[bootstrap]` table ([`BootstrapSettings`], [`ContactPointSettings`]),
//!   its defaults and checks.
//! - [`local_node`]: [`LocalNode`], the run-time facts about this node.
//! - [`contact_point`]: the [`ContactPoint`] type, its ordering, host selection by fallback port,
//!   and matching this node's own contact point.
//! - [`decider`]: the join decider, a pure function of (now, observations, settings, this node's
//!   contact point).
//! - [`probe`]: the contact-point probe ([`Prober`], the HTTP implementation and its
//!   [`HttpProberError`], the `seed-nodes` JSON).
//! - [`machine`]: the sans-IO state machine ([`BootstrapMachine`], its [`Action`]s): the lookup
//!   backoff, each probe and its timing, giving a contact point up, and when to run the decider.
//! - [`coordinator`]: the tokio driver of the machine, running its lookups and probes.
//! - [`status`]: what `GET /bootstrap/status` shows.
#![warn(missing_docs)]

pub mod contact_point;
pub mod coordinator;
pub mod decider;
pub mod local_node;
pub mod machine;
pub mod probe;
pub mod settings;
pub mod status;

pub use contact_point::{ContactPoint, SelfContactPoint};
pub use coordinator::Coordinator;
pub use decider::{Decision, Verdict};
pub use local_node::LocalNode;
pub use machine::{Action, BootstrapMachine};
pub use probe::{HttpProber, HttpProberError, ProbeError, Prober, SeedNode, SeedNodes};
pub use settings::{BootstrapSettings, ContactPointSettings, InvalidSetting};
pub use status::{BootstrapStatus, Dropped, StatusView};
