//! Service discovery for cluster bootstrap: given a service name (and optionally a port name and
//! protocol), find the hosts that may be contact points.
//!
//! Layout:
//! - [`ServiceDiscovery`], [`Lookup`], [`Resolved`], [`ResolvedTarget`], [`DiscoveryError`]: the
//!   interface every method implements.
//! - [`config`]: static endpoints per service from the node's configuration.
//! - [`aggregate`]: tries several methods in order.
//! - [`settings`]: the settings of the DNS and Kubernetes methods, which are also the tables of a
//!   node's settings file.
//! - `dns` (feature `dns`): A/AAAA and SRV lookups through hickory-resolver.
//! - `kubernetes` (feature `kubernetes`): pods by label through the Kubernetes API (kube), the
//!   API client settings shared with the Kubernetes lease, and that lease.
//! - `testkit` (feature `testkit`): a DNS server and a stand-in Kubernetes API server for tests.
//!
//! The features keep hickory and kube out of builds that do not need them.
//!
//! # Example
//!
//! Every method answers the same [`Lookup`]; here the static one, with an aggregate that falls
//! back to it when the first method finds nothing:
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use convoke_discovery::{AggregateDiscovery, ConfigDiscovery, Lookup, ResolvedTarget, ServiceDiscovery};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), convoke_discovery::DiscoveryError> {
//! let target = |host: &str| ResolvedTarget::new(host, Some(8558), None);
//! let services = BTreeMap::from([("orders".to_owned(), vec![target("10.0.0.1"), target("10.0.0.2")])]);
//! let static_list: Arc<dyn ServiceDiscovery> = Arc::new(ConfigDiscovery::new(services));
//! let resolved = static_list.lookup(&Lookup::new("orders"), Duration::from_secs(1)).await?;
//! assert_eq!(resolved.targets.len(), 2);
//! assert_eq!(resolved.targets[0].host, "10.0.0.1");
//!
//! // A method that knows no such service fails; the aggregate tries the next one.
//! let knows_nothing: Arc<dyn ServiceDiscovery> = Arc::new(ConfigDiscovery::new(BTreeMap::new()));
//! let methods = vec![("first".to_owned(), knows_nothing), ("config".to_owned(), static_list)];
//! let both = AggregateDiscovery::new(methods);
//! assert_eq!(both.lookup(&Lookup::new("orders"), Duration::from_secs(1)).await?.targets.len(), 2);
//! let missing = both.lookup(&Lookup::new("billing"), Duration::from_secs(1)).await;
//! assert!(missing.is_err(), "every method failed");
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod aggregate;
pub mod config;
#[cfg(feature = "dns")]
pub mod dns;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod settings;
#[cfg(feature = "testkit")]
pub mod testkit;

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;

pub use aggregate::AggregateDiscovery;
pub use config::ConfigDiscovery;

/// What to look up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lookup {
    /// The service name (a DNS name, a Kubernetes `app` label value, or a config key).
    pub service_name: String,
    /// The port name (SRV `_port`, a Kubernetes container port name); `None` = any port.
    pub port_name: Option<String>,
    /// The protocol (SRV `_proto`); only used together with `port_name`.
    pub protocol: Option<String>,
}

impl Lookup {
    /// A lookup of `service_name` with no port name or protocol.
    pub fn new(service_name: impl Into<String>) -> Self {
        Self { service_name: service_name.into(), port_name: None, protocol: None }
    }

    /// Sets the port name.
    #[must_use]
    pub fn with_port_name(mut self, port_name: impl Into<String>) -> Self {
        self.port_name = Some(port_name.into());
        self
    }

    /// Sets the protocol.
    #[must_use]
    pub fn with_protocol(mut self, protocol: impl Into<String>) -> Self {
        self.protocol = Some(protocol.into());
        self
    }
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.port_name, &self.protocol) {
            (Some(port), Some(proto)) => write!(f, "_{port}._{proto}.{}", self.service_name),
            (Some(port), None) => write!(f, "{} (port {port})", self.service_name),
            _ => f.write_str(&self.service_name),
        }
    }
}

/// One discovered target.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedTarget {
    /// The host name (or the IP in text form when there is no name).
    pub host: String,
    /// The port, when the method knows it.
    pub port: Option<u16>,
    /// The IP address, when the method knows it.
    pub address: Option<IpAddr>,
}

impl ResolvedTarget {
    /// A target with a host and optional port and IP.
    pub fn new(host: impl Into<String>, port: Option<u16>, address: Option<IpAddr>) -> Self {
        Self { host: host.into(), port, address }
    }
}

/// The answer to a lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The service that was looked up.
    pub service_name: String,
    /// What was found; may be empty.
    pub targets: Vec<ResolvedTarget>,
    /// What was found but left out, and why (a pod that is not Running yet, ...), so that the
    /// operator can be told.
    pub dropped: Vec<DroppedTarget>,
}

impl Resolved {
    /// An answer with `targets` and nothing dropped.
    pub fn new(service_name: impl Into<String>, targets: Vec<ResolvedTarget>) -> Self {
        Self { service_name: service_name.into(), targets, dropped: Vec::new() }
    }
}

/// A target discovery found and left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedTarget {
    /// What was left out (a pod name, a host and port).
    pub target: String,
    /// Why.
    pub reason: String,
}

impl DroppedTarget {
    /// `target`, left out because of `reason`.
    pub fn new(target: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { target: target.into(), reason: reason.into() }
    }
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The lookup did not finish within its timeout.
    #[error("discovery of {lookup} timed out after {timeout:?}")]
    Timeout {
        /// What was looked up.
        lookup: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The name does not exist (NXDOMAIN, unknown config service).
    #[error("{lookup} not found: {reason}")]
    NotFound {
        /// What was looked up.
        lookup: String,
        /// Details.
        reason: String,
    },
    /// The method is misconfigured.
    #[error("discovery is misconfigured: {0}")]
    Config(String),
    /// The API refused access.
    #[error("{0}")]
    Forbidden(String),
    /// Any other failure of the method (transport, protocol, parse).
    #[error("discovery of {lookup} failed: {reason}")]
    Failed {
        /// What was looked up.
        lookup: String,
        /// Details.
        reason: String,
    },
}

/// A way to find the contact points of a service.
///
/// Implementations are cheap to share (`Arc<dyn ServiceDiscovery>`) and may be called concurrently.
pub trait ServiceDiscovery: Send + Sync + fmt::Debug {
    /// Looks up `lookup`, giving up after `timeout`.
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>>;
}

/// Runs `fut` with `timeout`, mapping an elapsed timer to [`DiscoveryError::Timeout`].
pub async fn with_timeout<F>(
    lookup: &Lookup,
    timeout: Duration,
    fut: F,
) -> Result<Resolved, DiscoveryError>
where
    F: Future<Output = Result<Resolved, DiscoveryError>>,
{
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(DiscoveryError::Timeout { lookup: lookup.to_string(), timeout }),
    }
}
