//! `[cluster]`: the membership core's own settings ([`CoreConfig`]) and, beside them in the same
//! table, what only the node needs: where it listens and is reached, its seed nodes, how long a
//! graceful leave may take, the transport's limits (`[cluster.transport]`) and its TLS
//! (`[cluster.tls]`, in `cluster_tls.rs`).

use std::time::Duration;

use convoke_membership::Address;
use convoke_membership::config::{Config as CoreConfig, text};

/// The default of `cluster.shutdown_after_unsuccessful_join_seed_nodes` for a node.
pub const DEFAULT_JOIN_GIVE_UP: Duration = Duration::from_secs(60);
use serde::{Deserialize, Serialize};

use super::{ClusterTlsSettings, SettingsError};

/// The default cluster transport port.
pub const DEFAULT_CLUSTER_PORT: u16 = 25520;

/// `[cluster]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterSettings {
    /// The membership core's keys of `[cluster]` and its sub-tables `failure_detector` and
    /// `split_brain_resolver`. Read from the same table on its own (see `sources.rs`).
    #[serde(flatten, skip_deserializing)]
    pub core: CoreConfig,
    /// The host peers connect to; `"<getHostAddress>"` = this machine's address, found at start.
    pub hostname: String,
    /// The advertised transport port; 0 picks a free one.
    pub port: u16,
    /// The interface to bind; `""` means `hostname`.
    pub bind_hostname: String,
    /// The port to bind; `""` means `port`.
    #[serde(with = "text::opt_port")]
    pub bind_port: Option<u16>,
    /// Static seed nodes (`convoke://system@host:port`); when set, bootstrap is not used.
    pub seed_nodes: Vec<String>,
    /// How long a graceful leave may take before the node stops anyway.
    #[serde(with = "text::duration")]
    pub leave_timeout: Duration,
    /// `[cluster.transport]`.
    pub transport: TransportSettings,
    /// `[cluster.tls]`: mutual TLS on the transport.
    pub tls: ClusterTlsSettings,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            core: node_core_defaults(),
            hostname: "127.0.0.1".into(),
            port: DEFAULT_CLUSTER_PORT,
            bind_hostname: String::new(),
            bind_port: None,
            seed_nodes: Vec::new(),
            leave_timeout: Duration::from_secs(15),
            transport: TransportSettings::default(),
            tls: ClusterTlsSettings::default(),
        }
    }
}

/// The core's defaults as a node uses them: unlike the core's (and Akka's) "off",
/// `shutdown_after_unsuccessful_join_seed_nodes` is [`DEFAULT_JOIN_GIVE_UP`], so a node that cannot
/// join exits non-zero and Kubernetes restarts it instead of leaving it waiting for ever.
fn node_core_defaults() -> CoreConfig {
    let mut core = CoreConfig::default();
    core.shutdown_after_unsuccessful_join_seed_nodes = Some(DEFAULT_JOIN_GIVE_UP);
    core
}

impl ClusterSettings {
    /// Checks the node's keys; the core checks its own ([`CoreConfig::validate`]).
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (i, s) in self.seed_nodes.iter().enumerate() {
            s.parse::<Address>().map_err(|e| {
                SettingsError::new(
                    format!("cluster.seed_nodes[{i}]"),
                    format!("{s:?}"),
                    e.to_string(),
                )
            })?;
        }
        self.transport.validate()?;
        self.tls.validate()?;
        self.core.validate()?;
        Ok(())
    }
}

/// `[cluster.transport]`: limits of the TCP transport.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportSettings {
    /// Largest frame accepted or sent, in bytes.
    pub max_frame_size: usize,
    /// Largest decompressed gossip accepted, in bytes.
    pub max_decompressed_size: usize,
    /// Most inbound connections at once.
    pub max_connections: usize,
    /// Messages queued per peer before the oldest non-heartbeat one is dropped (a newer gossip or
    /// gossip status replaces a queued one rather than queueing behind it).
    pub outbound_queue_size: usize,
    /// Time a new connection has to complete the handshake.
    #[serde(with = "text::duration")]
    pub handshake_timeout: Duration,
    /// An inbound connection with no frame for this long is closed.
    #[serde(with = "text::duration")]
    pub idle_timeout: Duration,
    /// Longest wait between reconnection attempts.
    #[serde(with = "text::duration")]
    pub max_reconnect_backoff: Duration,
    /// Time a connection attempt may take.
    #[serde(with = "text::duration")]
    pub connect_timeout: Duration,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            max_frame_size: 4 * 1024 * 1024,
            max_decompressed_size: 32 * 1024 * 1024,
            max_connections: 4096,
            outbound_queue_size: 1024,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_reconnect_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl TransportSettings {
    fn validate(&self) -> Result<(), SettingsError> {
        for (key, v) in [
            ("cluster.transport.max_frame_size", self.max_frame_size),
            ("cluster.transport.max_decompressed_size", self.max_decompressed_size),
            ("cluster.transport.max_connections", self.max_connections),
            ("cluster.transport.outbound_queue_size", self.outbound_queue_size),
        ] {
            if v == 0 {
                return Err(SettingsError::new(key, "0", "a number greater than 0"));
            }
        }
        Ok(())
    }
}
