//! The node's settings: one TOML file, then `CONVOKE_*` environment variables, then `--set`
//! overrides, later wins (layered with figment). Unknown keys are errors, and every bad value is
//! reported with its dotted key, the value and what was expected.

mod host;
mod sbr;
mod types;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use convoke_membership::config::{
    Config as CoreConfig, ConfigError, SwitchDuration, TargetPreference,
};
use convoke_membership::{Address, MemberStatus};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use host::{HOST_ADDRESS, host_address};
pub use sbr::{
    KeepMajoritySettings, KeepOldestSettings, LeaseMajoritySettings, SplitBrainResolverSettings,
    StaticQuorumSettings,
};
pub use types::{Dur, OptPort, Switch};

/// The default cluster transport port.
pub const DEFAULT_CLUSTER_PORT: u16 = 25520;
/// The default management HTTP port.
pub const DEFAULT_MANAGEMENT_PORT: u16 = 8558;
/// The prefix of environment variables that set keys (`CONVOKE_CLUSTER__PORT=25521`).
pub const ENV_PREFIX: &str = "CONVOKE_";
/// The admin client's variables (`--url`, `--token`); they share the prefix but are not keys,
/// so `convoke run` ignores them and one environment can serve both.
pub const ADMIN_ENV_VARS: [&str; 2] = ["CONVOKE_URL", "CONVOKE_TOKEN"];

/// Everything a node is configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// `[cluster]`: membership and transport.
    pub cluster: ClusterSettings,
    /// `[management]`: the HTTP management server.
    pub management: ManagementSettings,
    /// `[bootstrap]`: forming a cluster without a seed list.
    pub bootstrap: BootstrapSettings,
    /// `[discovery]`: finding contact points for bootstrap.
    pub discovery: DiscoverySettings,
}

/// `[cluster]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Cluster name; nodes with different names never join.
    pub system_name: String,
    /// The host peers connect to; `"<getHostAddress>"` = this machine's address, found at start.
    pub hostname: String,
    /// The advertised transport port; 0 picks a free one.
    pub port: u16,
    /// The interface to bind; `""` means `hostname`.
    pub bind_hostname: String,
    /// The port to bind; `""` means `port`.
    pub bind_port: OptPort,
    /// Static seed nodes (`convoke://system@host:port`); when set, bootstrap is not used.
    pub seed_nodes: Vec<String>,
    /// This node's roles.
    pub roles: Vec<String>,
    /// This node's data center.
    pub data_center: String,
    /// The application version carried in the join request.
    pub app_version: String,
    /// Members needed before the leader moves any to Up.
    pub min_nr_of_members: usize,
    /// The same, per role.
    pub role_min_nr_of_members: BTreeMap<String, usize>,
    /// How long to wait for seed nodes to answer.
    pub seed_node_timeout: Dur,
    /// Gossip period.
    pub gossip_interval: Dur,
    /// Gossip not processed within this time of arrival is dropped.
    pub gossip_time_to_live: Dur,
    /// Leader-actions period.
    pub leader_actions_interval: Dur,
    /// Reaper period.
    pub unreachable_nodes_reaper_interval: Dur,
    /// Delay before periodic tasks first run.
    pub periodic_tasks_initial_delay: Dur,
    /// After how long without convergence joining members become WeaklyUp, or `"off"`.
    pub allow_weakly_up_members: Switch,
    /// Resend an unanswered join after this, or `"off"`.
    pub retry_unsuccessful_join_after: Switch,
    /// Give up joining seed nodes after this, or `"off"`.
    pub shutdown_after_unsuccessful_join_seed_nodes: Switch,
    /// How long removed members are remembered.
    pub prune_gossip_tombstones_after: Dur,
    /// `"always-prefer-unseen"` or `"reduced-probability"`.
    pub gossip_target_preference: String,
    /// Refuse to join a cluster whose compatibility-relevant settings differ.
    pub config_compat_enforce_on_join: bool,
    /// How long a graceful leave may take before the node stops anyway.
    pub leave_timeout: Dur,
    /// `[cluster.failure_detector]`.
    pub failure_detector: FailureDetectorSettings,
    /// `[cluster.split_brain_resolver]`.
    pub split_brain_resolver: SplitBrainResolverSettings,
    /// `[cluster.transport]`.
    pub transport: TransportSettings,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        let core = CoreConfig::default();
        Self {
            system_name: core.system_name,
            hostname: "127.0.0.1".into(),
            port: DEFAULT_CLUSTER_PORT,
            bind_hostname: String::new(),
            bind_port: OptPort(None),
            seed_nodes: Vec::new(),
            roles: Vec::new(),
            data_center: core.data_center,
            app_version: core.app_version,
            min_nr_of_members: core.min_nr_of_members,
            role_min_nr_of_members: BTreeMap::new(),
            seed_node_timeout: Dur(core.seed_node_timeout),
            gossip_interval: Dur(core.gossip_interval),
            gossip_time_to_live: Dur(core.gossip_time_to_live),
            leader_actions_interval: Dur(core.leader_actions_interval),
            unreachable_nodes_reaper_interval: Dur(core.unreachable_nodes_reaper_interval),
            periodic_tasks_initial_delay: Dur(core.periodic_tasks_initial_delay),
            allow_weakly_up_members: opt(core.allow_weakly_up_members),
            retry_unsuccessful_join_after: opt(core.retry_unsuccessful_join_after),
            shutdown_after_unsuccessful_join_seed_nodes: opt(
                core.shutdown_after_unsuccessful_join_seed_nodes
            ),
            prune_gossip_tombstones_after: Dur(core.prune_gossip_tombstones_after),
            gossip_target_preference: core.gossip_target_preference.as_str().into(),
            config_compat_enforce_on_join: core.config_compat_enforce_on_join,
            leave_timeout: Dur(Duration::from_secs(15)),
            failure_detector: FailureDetectorSettings::default(),
            split_brain_resolver: SplitBrainResolverSettings::default(),
            transport: TransportSettings::default(),
        }
    }
}

fn opt(d: Option<Duration>) -> Switch {
    d.map_or(Switch::OFF, Switch::after)
}

/// `[cluster.failure_detector]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailureDetectorSettings {
    /// Heartbeat period.
    pub heartbeat_interval: Dur,
    /// φ above which a node is unreachable.
    pub threshold: f64,
    /// Pause tolerated on top of the mean heartbeat interval.
    pub acceptable_heartbeat_pause: Dur,
    /// Lower bound on the interval standard deviation.
    pub min_std_deviation: Dur,
    /// Intervals kept for the statistics.
    pub max_sample_size: usize,
    /// How many nodes monitor each node.
    pub monitored_by_nr_of_members: usize,
    /// When to start monitoring a node that never answered.
    pub expected_response_after: Dur,
}

impl Default for FailureDetectorSettings {
    fn default() -> Self {
        let fd = CoreConfig::default().failure_detector;
        Self {
            heartbeat_interval: Dur(fd.heartbeat_interval),
            threshold: fd.threshold,
            acceptable_heartbeat_pause: Dur(fd.acceptable_heartbeat_pause),
            min_std_deviation: Dur(fd.min_std_deviation),
            max_sample_size: fd.max_sample_size,
            monitored_by_nr_of_members: fd.monitored_by_nr_of_members,
            expected_response_after: Dur(fd.expected_response_after),
        }
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
    /// Messages queued per peer before the oldest non-heartbeat one is dropped.
    pub outbound_queue_size: usize,
    /// Time a new connection has to complete the handshake.
    pub handshake_timeout: Dur,
    /// An inbound connection with no frame for this long is closed.
    pub idle_timeout: Dur,
    /// Longest wait between reconnection attempts.
    pub max_reconnect_backoff: Dur,
    /// Time a connection attempt may take.
    pub connect_timeout: Dur,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            max_frame_size: 4 * 1024 * 1024,
            max_decompressed_size: 32 * 1024 * 1024,
            max_connections: 4096,
            outbound_queue_size: 1024,
            handshake_timeout: Dur(Duration::from_secs(5)),
            idle_timeout: Dur(Duration::from_secs(60)),
            max_reconnect_backoff: Dur(Duration::from_secs(5)),
            connect_timeout: Dur(Duration::from_secs(5)),
        }
    }
}

/// `[management]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManagementSettings {
    /// Whether the management HTTP server runs.
    pub enabled: bool,
    /// The advertised host of the management server; `"<getHostAddress>"` as for `cluster`.
    pub hostname: String,
    /// The advertised management port; 0 picks a free one.
    pub port: u16,
    /// The interface to bind; `""` means `hostname`.
    pub bind_hostname: String,
    /// The port to bind; `""` means `port`.
    pub bind_port: OptPort,
    /// A path prefix for every route.
    pub base_path: String,
    /// Write routes answer 405 until this is false.
    pub read_only: bool,
    /// `[management.health_checks]`.
    pub health_checks: HealthCheckSettings,
    /// `[management.auth]`: no table, no authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSettings>,
    /// `[management.tls]`: no table, plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// `[management.limits]`: timeouts and caps that keep slow or greedy clients from holding the
    /// server.
    pub limits: ManagementLimits,
}

impl Default for ManagementSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            hostname: "127.0.0.1".into(),
            port: DEFAULT_MANAGEMENT_PORT,
            bind_hostname: String::new(),
            bind_port: OptPort(None),
            base_path: String::new(),
            read_only: true,
            health_checks: HealthCheckSettings::default(),
            auth: None,
            tls: None,
            limits: ManagementLimits::default(),
        }
    }
}

/// `[management.health_checks]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckSettings {
    /// Member statuses in which `/ready` answers 200.
    pub ready_states: Vec<String>,
    /// The readiness path (under `base_path`).
    pub readiness_path: String,
    /// The liveness path (under `base_path`).
    pub liveness_path: String,
    /// How long each check may take; a slower one fails the probe.
    pub check_timeout: Dur,
}

impl Default for HealthCheckSettings {
    fn default() -> Self {
        Self {
            ready_states: vec!["Up".into(), "WeaklyUp".into()],
            readiness_path: "/ready".into(),
            liveness_path: "/alive".into(),
            check_timeout: Dur(Duration::from_secs(1)),
        }
    }
}

/// `[management.auth]`: bearer tokens and/or basic credentials for the management routes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Accepted bearer tokens.
    pub bearer_tokens: Vec<String>,
    /// Files each holding one accepted token (re-read on every request, so rotation works).
    pub bearer_token_files: Vec<String>,
    /// Accepted basic credentials, as `"user:password"`.
    pub basic: Vec<String>,
    /// Paths (under `base_path`) served without credentials: probes and bootstrap must keep working.
    pub exempt_paths: Vec<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            bearer_tokens: Vec::new(),
            bearer_token_files: Vec::new(),
            basic: Vec::new(),
            exempt_paths: vec!["/ready".into(), "/alive".into(), "/bootstrap/seed-nodes".into()],
        }
    }
}

/// `[management.tls]`: serve HTTPS with this PEM certificate chain and key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// PEM certificate chain.
    pub cert_path: String,
    /// PEM private key.
    pub key_path: String,
}

/// `[management.limits]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManagementLimits {
    /// A client must send its request headers within this time.
    pub header_read_timeout: Dur,
    /// A request must be answered within this time (event streams excepted).
    pub request_timeout: Dur,
    /// Most open connections at once; more are closed on accept.
    pub max_connections: usize,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Events buffered per event-stream client; a client further behind is disconnected.
    pub event_buffer: usize,
    /// Most event-stream clients at once.
    pub max_event_clients: usize,
}

impl Default for ManagementLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Dur(Duration::from_secs(5)),
            request_timeout: Dur(Duration::from_secs(10)),
            max_connections: 256,
            body_limit: 16 * 1024,
            event_buffer: 128,
            max_event_clients: 64,
        }
    }
}

/// `[bootstrap]`: used when `cluster.seed_nodes` is empty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BootstrapSettings {
    /// Whether to bootstrap when there are no seed nodes.
    pub enabled: bool,
    /// The service to look up; `""` means `cluster.system_name`.
    pub service_name: String,
    /// The namespace of the service.
    pub service_namespace: String,
    /// The port name (SRV / Kubernetes named port).
    pub port_name: String,
    /// The protocol (SRV).
    pub protocol: String,
    /// Contact points needed before a new cluster is formed.
    pub required_contact_point_nr: usize,
    /// How long the discovered set must be unchanged before a new cluster is formed.
    pub stable_margin: Dur,
    /// Whether every contact point must have answered before forming.
    pub contact_with_all_contact_points: bool,
    /// Whether this node may form a new cluster at all.
    pub new_cluster_enabled: bool,
    /// Base interval between discovery lookups.
    pub discovery_interval: Dur,
    /// The cap of the lookup backoff after failures (jitter comes on top).
    pub discovery_backoff_max: Dur,
    /// Jitter of the lookup interval (0.2 = up to 20 % longer).
    pub discovery_backoff_random_factor: f64,
    /// The timeout of one lookup.
    pub resolve_timeout: Dur,
    /// `[bootstrap.contact_point]`: probing the discovered contact points.
    pub contact_point: ContactPointSettings,
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            service_name: String::new(),
            service_namespace: String::new(),
            port_name: String::new(),
            protocol: "tcp".into(),
            required_contact_point_nr: 2,
            stable_margin: Dur(Duration::from_secs(5)),
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
            discovery_interval: Dur(Duration::from_secs(1)),
            discovery_backoff_max: Dur(Duration::from_secs(15)),
            discovery_backoff_random_factor: 0.2,
            resolve_timeout: Dur(Duration::from_secs(3)),
            contact_point: ContactPointSettings::default(),
        }
    }
}

impl BootstrapSettings {
    /// The name looked up: `service_name` (or the system name lower-cased, with spaces and
    /// underscores as dashes), then `.service_namespace` when set.
    pub fn effective_service_name(&self, system_name: &str) -> String {
        let base = if self.service_name.is_empty() {
            system_name.to_lowercase().replace([' ', '_'], "-")
        } else {
            self.service_name.clone()
        };
        if self.service_namespace.is_empty() {
            base
        } else {
            format!("{base}.{}", self.service_namespace)
        }
    }
}

/// `[bootstrap.contact_point]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContactPointSettings {
    /// The port probed when discovery gives none; `""` = this node's management port.
    pub fallback_port: OptPort,
    /// Without a port name, keep only the fallback port of hosts listed with several ports.
    pub filter_on_fallback_port: bool,
    /// A contact point that has not answered for this long is given up until the next lookup.
    pub probing_failure_timeout: Dur,
    /// Interval between probes of one contact point.
    pub probe_interval: Dur,
    /// Jitter of the probe interval.
    pub probe_interval_jitter: f64,
    /// The timeout of one probe request; must be shorter than `probing_failure_timeout`.
    pub probe_timeout: Dur,
    /// A PEM CA certificate trusted when probing over HTTPS; `""` = the system roots.
    pub ca_path: String,
}

impl Default for ContactPointSettings {
    fn default() -> Self {
        Self {
            fallback_port: OptPort(None),
            filter_on_fallback_port: true,
            probing_failure_timeout: Dur(Duration::from_secs(3)),
            probe_interval: Dur(Duration::from_secs(1)),
            probe_interval_jitter: 0.2,
            probe_timeout: Dur(Duration::from_secs(1)),
            ca_path: String::new(),
        }
    }
}

/// `[discovery]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySettings {
    /// config | dns | kubernetes-api | aggregate.
    pub method: String,
    /// `[discovery.config]`.
    pub config: ConfigDiscoverySettings,
    /// `[discovery.dns]`.
    pub dns: DnsDiscoverySettings,
    /// `[discovery.kubernetes_api]`.
    pub kubernetes_api: KubernetesApiDiscoverySettings,
    /// `[discovery.aggregate]`.
    pub aggregate: AggregateDiscoverySettings,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            method: "config".into(),
            config: ConfigDiscoverySettings::default(),
            dns: DnsDiscoverySettings::default(),
            kubernetes_api: KubernetesApiDiscoverySettings::default(),
            aggregate: AggregateDiscoverySettings::default(),
        }
    }
}

/// `[discovery.dns]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsDiscoverySettings {
    /// Nameservers as `"ip"` or `"ip:port"`; empty = the system's `/etc/resolv.conf`.
    pub nameservers: Vec<String>,
    /// Answers are reused for at most min(TTL, this).
    pub cache_ttl_cap: Dur,
}

impl Default for DnsDiscoverySettings {
    fn default() -> Self {
        Self { nameservers: Vec::new(), cache_ttl_cap: Dur(Duration::from_secs(5)) }
    }
}

/// `[discovery.kubernetes_api]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesApiDiscoverySettings {
    /// The API server URL; `""` = `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`.
    pub api_url: String,
    /// The API server's CA; `""` = the service-account `ca.crt`.
    pub api_ca_path: String,
    /// The bearer token file; `""` = the service-account `token`.
    pub api_token_path: String,
    /// How often the token file is re-read (bound tokens expire).
    pub token_reload_interval: Dur,
    /// The namespace; `""` = `KUBERNETES_NAMESPACE`, then the service-account namespace file.
    pub namespace: String,
    /// The label selector; `%s` is replaced by the service name.
    pub pod_label_selector: String,
    /// The cluster domain of pod DNS names.
    pub pod_domain: String,
    /// Targets are pod IPs (`true`) or pod DNS names (`false`).
    pub use_raw_ip: bool,
    /// Skip pods whose container of this name is waiting; `""` = do not check.
    pub container_name: String,
}

impl Default for KubernetesApiDiscoverySettings {
    fn default() -> Self {
        Self {
            api_url: String::new(),
            api_ca_path: String::new(),
            api_token_path: String::new(),
            token_reload_interval: Dur(Duration::from_secs(60)),
            namespace: String::new(),
            pod_label_selector: "app=%s".into(),
            pod_domain: "cluster.local".into(),
            use_raw_ip: true,
            container_name: String::new(),
        }
    }
}

/// `[discovery.aggregate]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregateDiscoverySettings {
    /// The methods tried in order (`config`, `dns`, `kubernetes-api`).
    pub discovery_methods: Vec<String>,
}

impl Default for AggregateDiscoverySettings {
    fn default() -> Self {
        Self { discovery_methods: vec!["kubernetes-api".into(), "dns".into()] }
    }
}

/// `[discovery.config]`: static endpoints per service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigDiscoverySettings {
    /// `[discovery.config.services.<name>]`.
    pub services: BTreeMap<String, ConfigService>,
}

/// One statically configured service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigService {
    /// Its endpoints.
    pub endpoints: Vec<Endpoint>,
}

/// A host and optional port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Host name or IP.
    pub host: String,
    /// Port, if known.
    #[serde(default)]
    pub port: Option<u16>,
}

/// A setting that cannot be used: which key, the value, what was expected, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key} = {value}: expected {expected}{origin}")]
pub struct SettingsError {
    /// The dotted key (`cluster.port`).
    pub key: String,
    /// The offending value, as given.
    pub value: String,
    /// What would be accepted.
    pub expected: String,
    /// `" (from ...)"` naming the layer the value came from, or empty.
    pub origin: String,
}

impl SettingsError {
    pub(crate) fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            expected: expected.into(),
            origin: String::new(),
        }
    }
}

impl From<ConfigError> for SettingsError {
    fn from(e: ConfigError) -> Self {
        Self::new(e.key, e.value, e.expected)
    }
}

/// Where the settings come from, in increasing precedence.
#[derive(Clone, Debug, Default)]
pub struct Sources<'a> {
    /// A TOML file (must exist when given).
    pub file: Option<&'a Path>,
    /// Whether to read `CONVOKE_*` environment variables (`CONVOKE_CLUSTER__PORT=25521` sets
    /// `cluster.port`; `__` separates levels).
    pub env: bool,
    /// `--set KEY=VALUE` overrides.
    pub sets: Vec<String>,
}

impl Settings {
    /// Layers the defaults, the file, `CONVOKE_*` variables and `--set`s, and checks the result.
    ///
    /// # Errors
    /// The first bad or unknown key.
    pub fn load(sources: &Sources<'_>) -> Result<Settings, SettingsError> {
        let mut fig = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = sources.file {
            if !path.is_file() {
                return Err(SettingsError::new(
                    "--config",
                    path.display().to_string(),
                    "an existing TOML file",
                ));
            }
            fig = fig.merge(Toml::file_exact(path));
        }
        if sources.env {
            let admin = ADMIN_ENV_VARS.map(|v| &v[ENV_PREFIX.len()..]);
            fig = fig.merge(Env::prefixed(ENV_PREFIX).ignore(&admin).split("__"));
        }
        for set in &sources.sets {
            let toml = set_to_toml(set)?;
            fig = fig.merge(Toml::string(&toml));
        }
        let mut settings: Settings = fig.extract().map_err(from_figment)?;
        settings.resolve_host_address()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what serde cannot: value ranges and cross-field rules. The core's own checks run
    /// in [`Settings::core_config`].
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (i, s) in self.cluster.seed_nodes.iter().enumerate() {
            s.parse::<Address>().map_err(|e| {
                SettingsError::new(
                    format!("cluster.seed_nodes[{i}]"),
                    format!("{s:?}"),
                    e.to_string(),
                )
            })?;
        }
        for s in &self.management.health_checks.ready_states {
            if !MemberStatus::ALL.iter().any(|m| m.name() == s) {
                return Err(SettingsError::new(
                    "management.health_checks.ready_states",
                    format!("{s:?}"),
                    "member statuses such as \"Up\", \"WeaklyUp\", \"Leaving\"",
                ));
            }
        }
        let methods = crate::bootstrap::METHODS;
        if self.discovery.method != "aggregate"
            && !methods.contains(&self.discovery.method.as_str())
        {
            return Err(SettingsError::new(
                "discovery.method",
                format!("{:?}", self.discovery.method),
                format!("one of {}, aggregate", methods.join(", ")),
            ));
        }
        if self.discovery.method == "aggregate" {
            let names = &self.discovery.aggregate.discovery_methods;
            if names.is_empty() || names.iter().any(|n| !methods.contains(&n.as_str())) {
                return Err(SettingsError::new(
                    "discovery.aggregate.discovery_methods",
                    format!("{names:?}"),
                    format!("a non-empty list of {}", methods.join(", ")),
                ));
            }
        }
        if let Ok(placeholder) = Address::new(&self.cluster.system_name, "127.0.0.1", 1) {
            let management = std::net::SocketAddr::from(([127, 0, 0, 1], self.management.port));
            crate::bootstrap::config(self, management, &placeholder)?;
        }
        for (key, path) in [
            (
                "management.health_checks.readiness_path",
                &self.management.health_checks.readiness_path,
            ),
            (
                "management.health_checks.liveness_path",
                &self.management.health_checks.liveness_path,
            ),
        ] {
            if !path.starts_with('/') || path.len() < 2 {
                return Err(SettingsError::new(
                    key,
                    format!("{path:?}"),
                    "a path starting with '/', like \"/ready\"",
                ));
            }
        }
        if let Some(auth) = &self.management.auth {
            if auth.bearer_tokens.is_empty()
                && auth.bearer_token_files.is_empty()
                && auth.basic.is_empty()
            {
                return Err(SettingsError::new(
                    "management.auth",
                    "a table with no credentials",
                    "at least one of bearer_tokens, bearer_token_files or basic (or no [management.auth] table)",
                ));
            }
            if let Some(bad) = auth.basic.iter().find(|b| !b.contains(':')) {
                return Err(SettingsError::new(
                    "management.auth.basic",
                    format!("{:?}", redact(bad)),
                    "\"user:password\" entries",
                ));
            }
            if let Some(bad) = auth.bearer_tokens.iter().find(|t| t.trim().is_empty()) {
                return Err(SettingsError::new(
                    "management.auth.bearer_tokens",
                    format!("{bad:?}"),
                    "non-empty tokens",
                ));
            }
        }
        if let Some(tls) = &self.management.tls {
            for (key, path) in [
                ("management.tls.cert_path", &tls.cert_path),
                ("management.tls.key_path", &tls.key_path),
            ] {
                if !Path::new(path).is_file() {
                    return Err(SettingsError::new(
                        key,
                        format!("{path:?}"),
                        "an existing PEM file",
                    ));
                }
            }
        }
        let l = &self.management.limits;
        for (key, v) in [
            ("management.limits.max_connections", l.max_connections),
            ("management.limits.body_limit", l.body_limit),
            ("management.limits.event_buffer", l.event_buffer),
            ("management.limits.max_event_clients", l.max_event_clients),
        ] {
            if v == 0 {
                return Err(SettingsError::new(key, "0", "a number greater than 0"));
            }
        }
        self.cluster.split_brain_resolver.validate()?;
        if self.bootstrap.required_contact_point_nr == 0 {
            return Err(SettingsError::new(
                "bootstrap.required_contact_point_nr",
                "0",
                "a number of contact points of at least 1",
            ));
        }
        if !self.management.base_path.is_empty() && !self.management.base_path.starts_with('/') {
            return Err(SettingsError::new(
                "management.base_path",
                format!("{:?}", self.management.base_path),
                "\"\" or a path starting with '/'",
            ));
        }
        let t = &self.cluster.transport;
        for (key, v) in [
            ("cluster.transport.max_frame_size", t.max_frame_size),
            ("cluster.transport.max_decompressed_size", t.max_decompressed_size),
            ("cluster.transport.max_connections", t.max_connections),
            ("cluster.transport.outbound_queue_size", t.outbound_queue_size),
        ] {
            if v == 0 {
                return Err(SettingsError::new(key, "0", "a number greater than 0"));
            }
        }
        self.core_config().map(|_| ())
    }

    /// The membership core's configuration (without the RNG seed, which the node sets).
    ///
    /// # Errors
    /// The first bad key, named as in the settings file.
    pub fn core_config(&self) -> Result<CoreConfig, SettingsError> {
        let c = &self.cluster;
        let mut core = CoreConfig::default();
        core.system_name.clone_from(&c.system_name);
        core.roles = c.roles.iter().cloned().collect();
        core.data_center.clone_from(&c.data_center);
        core.app_version.clone_from(&c.app_version);
        core.min_nr_of_members = c.min_nr_of_members;
        core.role_min_nr_of_members.clone_from(&c.role_min_nr_of_members);
        core.seed_node_timeout = c.seed_node_timeout.0;
        core.gossip_interval = c.gossip_interval.0;
        core.gossip_time_to_live = c.gossip_time_to_live.0;
        core.leader_actions_interval = c.leader_actions_interval.0;
        core.unreachable_nodes_reaper_interval = c.unreachable_nodes_reaper_interval.0;
        core.periodic_tasks_initial_delay = c.periodic_tasks_initial_delay.0;
        core.allow_weakly_up_members = c.allow_weakly_up_members.resolve(Duration::from_secs(7));
        core.retry_unsuccessful_join_after =
            c.retry_unsuccessful_join_after.resolve(Duration::from_secs(10));
        core.shutdown_after_unsuccessful_join_seed_nodes = switch_without_on(
            "cluster.shutdown_after_unsuccessful_join_seed_nodes",
            c.shutdown_after_unsuccessful_join_seed_nodes,
        )?;
        core.prune_gossip_tombstones_after = c.prune_gossip_tombstones_after.0;
        core.gossip_target_preference = TargetPreference::parse(
            "cluster.gossip_target_preference",
            &c.gossip_target_preference,
        )?;
        core.config_compat_enforce_on_join = c.config_compat_enforce_on_join;
        let fd = &c.failure_detector;
        core.failure_detector.heartbeat_interval = fd.heartbeat_interval.0;
        core.failure_detector.threshold = fd.threshold;
        core.failure_detector.acceptable_heartbeat_pause = fd.acceptable_heartbeat_pause.0;
        core.failure_detector.min_std_deviation = fd.min_std_deviation.0;
        core.failure_detector.max_sample_size = fd.max_sample_size;
        core.failure_detector.monitored_by_nr_of_members = fd.monitored_by_nr_of_members;
        core.failure_detector.expected_response_after = fd.expected_response_after.0;
        c.split_brain_resolver.apply_to(&mut core.split_brain_resolver);
        core.validate()?;
        Ok(core)
    }

    /// The effective settings as TOML, for `--print-config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print settings: {e}\n"))
    }
}

fn redact(credential: &str) -> String {
    credential.split(':').next().unwrap_or_default().to_owned() + ":***"
}

fn switch_without_on(key: &str, s: Switch) -> Result<Option<Duration>, SettingsError> {
    match s.0 {
        SwitchDuration::On => {
            Err(SettingsError::new(key, "\"on\"", "\"off\" or a duration like \"60s\""))
        }
        SwitchDuration::Off => Ok(None),
        SwitchDuration::After(d) => Ok(Some(d)),
    }
}

/// Turns `--set cluster.port=25521` into a TOML line.
fn set_to_toml(set: &str) -> Result<String, SettingsError> {
    let Some((key, value)) = set.split_once('=') else {
        return Err(SettingsError::new(
            "--set",
            format!("{set:?}"),
            "KEY=VALUE, e.g. cluster.port=25521",
        ));
    };
    let key = key.trim();
    if key.is_empty()
        || !key
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(SettingsError::new(
            "--set",
            format!("{set:?}"),
            "a dotted key like cluster.port before '='",
        ));
    }
    Ok(toml_line(key, value.trim()))
}

fn toml_line(key: &str, value: &str) -> String {
    let line = format!("{key} = {value}\n");
    if line.parse::<toml::Table>().is_ok() {
        line
    } else {
        format!("{key} = {}\n", toml::Value::String(value.to_owned()))
    }
}

fn from_figment(e: figment::Error) -> SettingsError {
    use figment::error::Kind;
    let key =
        e.path.iter().filter(|p| p.as_str() != "default").cloned().collect::<Vec<_>>().join(".");
    let origin = e
        .metadata
        .as_ref()
        .map(|m| match m.source.as_ref() {
            Some(figment::Source::File(path)) => format!(" (from {})", path.display()),
            _ if m.name.contains("environment") => " (from the CONVOKE_* environment)".to_owned(),
            _ if m.name.contains("string") => " (from --set)".to_owned(),
            _ => String::new(),
        })
        .unwrap_or_default();
    let (key, value, expected) = match &e.kind {
        Kind::UnknownField(field, expected) => (
            join_key(&key, field),
            "(unknown key)".to_owned(),
            format!("one of the known keys: {}", expected.join(", ")),
        ),
        Kind::InvalidType(actual, expected) => (key, actual.to_string(), expected.clone()),
        Kind::InvalidValue(actual, expected) => (key, actual.to_string(), expected.clone()),
        Kind::InvalidLength(len, expected) => (key, format!("{len} elements"), expected.clone()),
        Kind::UnknownVariant(v, expected) => {
            (key, format!("{v:?}"), format!("one of {}", expected.join(", ")))
        }
        Kind::Message(msg) => match msg.split_once(" is not valid: expected ") {
            Some((value, expected)) => (key, value.to_owned(), expected.to_owned()),
            None => (key, String::new(), msg.clone()),
        },
        other => (key, String::new(), other.to_string()),
    };
    SettingsError { key, value, expected: plain_expected(&expected), origin }
}

/// serde names Rust types ("u16"); say what a user may write instead.
fn plain_expected(expected: &str) -> String {
    match expected {
        "u16" => "a whole number from 0 to 65535".to_owned(),
        "usize" | "u64" | "u32" => "a whole number of 0 or more".to_owned(),
        "f64" | "f32" => "a number".to_owned(),
        "a boolean" | "bool" => "true or false".to_owned(),
        "a sequence" => "a list, like [\"a\", \"b\"]".to_owned(),
        "a string" => "a quoted string".to_owned(),
        other => other.to_owned(),
    }
}

fn join_key(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_owned()
    } else if prefix == field || prefix.ends_with(&format!(".{field}")) {
        prefix.to_owned()
    } else {
        format!("{prefix}.{field}")
    }
}

#[cfg(test)]
mod tests;
