//! The coordinator's settings, with the defaults of spec §4.1.

use std::time::Duration;

use crate::contact_point::SelfContactPoint;
use crate::decider::DeciderSettings;

/// Everything the coordinator needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapConfig {
    /// The service looked up.
    pub service_name: String,
    /// The port name of the lookup, if any.
    pub port_name: Option<String>,
    /// The protocol of the lookup, if any.
    pub protocol: Option<String>,
    /// Contact points needed before a new cluster is formed.
    pub required_contact_point_nr: usize,
    /// How long the discovered set must be unchanged before a new cluster is formed.
    pub stable_margin: Duration,
    /// Whether every discovered contact point must have answered.
    pub contact_with_all_contact_points: bool,
    /// Whether this node may form a new cluster.
    pub new_cluster_enabled: bool,
    /// Base interval between lookups.
    pub discovery_interval: Duration,
    /// The cap of the lookup backoff (before jitter).
    pub discovery_backoff_max: Duration,
    /// Jitter factor of the lookup backoff (0.2 = up to 20 % longer).
    pub discovery_backoff_random_factor: f64,
    /// The timeout of one lookup.
    pub resolve_timeout: Duration,
    /// The port probed for targets without one; also the filter port of host selection.
    pub fallback_port: u16,
    /// Whether multi-port hosts are filtered to the fallback port (when there is no port name).
    pub filter_on_fallback_port: bool,
    /// A prober whose last success is older than this gives up on its target.
    pub probing_failure_timeout: Duration,
    /// Interval between probes of one target.
    pub probe_interval: Duration,
    /// Jitter factor of the probe interval.
    pub probe_interval_jitter: f64,
    /// The timeout of one probe request; strictly shorter than `probing_failure_timeout`, so one
    /// slow answer does not end probing (unlike Pekko #209).
    pub probe_timeout: Duration,
    /// The scheme of probe URLs (`http` or `https`).
    pub scheme: String,
    /// The management base path (`""` or `/something`).
    pub base_path: String,
    /// This node's contact point (management host and port).
    pub self_contact_point: SelfContactPoint,
    /// This node's cluster transport `host:port`; a target equal to it is a misconfiguration.
    pub self_remoting: (String, u16),
    /// Seed of the jitter; `None` draws one from the OS.
    pub seed: Option<u64>,
}

impl BootstrapConfig {
    /// Defaults for a node whose management server is `self_contact_point` and whose cluster
    /// transport listens on `self_remoting`.
    pub fn new(
        service_name: impl Into<String>,
        self_contact_point: SelfContactPoint,
        self_remoting: (String, u16),
    ) -> Self {
        Self {
            service_name: service_name.into(),
            port_name: None,
            protocol: Some("tcp".into()),
            required_contact_point_nr: 2,
            stable_margin: Duration::from_secs(5),
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
            discovery_interval: Duration::from_secs(1),
            discovery_backoff_max: Duration::from_secs(15),
            discovery_backoff_random_factor: 0.2,
            resolve_timeout: Duration::from_secs(3),
            fallback_port: self_contact_point.port,
            filter_on_fallback_port: true,
            probing_failure_timeout: Duration::from_secs(3),
            probe_interval: Duration::from_secs(1),
            probe_interval_jitter: 0.2,
            probe_timeout: Duration::from_secs(1),
            scheme: "http".into(),
            base_path: String::new(),
            self_contact_point,
            self_remoting,
            seed: None,
        }
    }

    /// The decider's part.
    pub fn decider(&self) -> DeciderSettings {
        DeciderSettings {
            required_contact_point_nr: self.required_contact_point_nr,
            stable_margin: self.stable_margin,
            contact_with_all_contact_points: self.contact_with_all_contact_points,
            new_cluster_enabled: self.new_cluster_enabled,
            self_contact_point: self.self_contact_point.clone(),
        }
    }

    /// The lookup backoff after `failures` consecutive failed lookups, before jitter:
    /// `min(max, interval × 2^failures)`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.min(30));
        self.discovery_interval.saturating_mul(factor).min(self.discovery_backoff_max)
    }

    /// Checks the relations between settings.
    ///
    /// # Errors
    /// The first offending setting, by its key: a probe timeout not shorter than the probing
    /// failure timeout, a backoff cap below the interval, a jitter factor outside 0..=10, or an
    /// empty service name.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let invalid = |key: &'static str, value: String, expected: String| {
            Err(InvalidConfig { key, value, expected })
        };
        if self.probe_timeout >= self.probing_failure_timeout {
            return invalid(
                "bootstrap.contact_point.probe_timeout",
                format!("{:?}", self.probe_timeout),
                format!(
                    "shorter than bootstrap.contact_point.probing_failure_timeout ({:?})",
                    self.probing_failure_timeout
                ),
            );
        }
        if self.discovery_backoff_max < self.discovery_interval {
            return invalid(
                "bootstrap.discovery_backoff_max",
                format!("{:?}", self.discovery_backoff_max),
                format!("at least bootstrap.discovery_interval ({:?})", self.discovery_interval),
            );
        }
        for (key, v) in [
            ("bootstrap.discovery_backoff_random_factor", self.discovery_backoff_random_factor),
            ("bootstrap.contact_point.probe_interval_jitter", self.probe_interval_jitter),
        ] {
            if !(0.0..=10.0).contains(&v) {
                return invalid(key, v.to_string(), "a factor between 0 and 10".into());
            }
        }
        if self.service_name.is_empty() {
            return invalid("bootstrap.service_name", "\"\"".into(), "a service name".into());
        }
        Ok(())
    }
}

/// A bootstrap setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}: expected {expected}")]
pub struct InvalidConfig {
    /// The dotted key of the node's settings.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What would be accepted.
    pub expected: String,
}
