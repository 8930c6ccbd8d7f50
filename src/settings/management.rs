//! `[management]`: the HTTP management server — where it listens, its base path, whether writes
//! are allowed, health-check paths and states, authentication, TLS and the limits that keep slow
//! or greedy clients from holding it.

use std::path::Path;
use std::time::Duration;

use convoke_membership::MemberStatus;
use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// The default management HTTP port.
pub const DEFAULT_MANAGEMENT_PORT: u16 = 8558;

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
    #[serde(with = "text::opt_port")]
    pub bind_port: Option<u16>,
    /// A path prefix for every route, with or without the leading `/` (`"mgmt"` and `"/mgmt"`
    /// both serve `/mgmt/cluster/members`); see [`ManagementSettings::route_prefix`].
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
            bind_port: None,
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
    /// The startup path (under `base_path`), for a Kubernetes startup probe.
    pub startup_path: String,
    /// How long each check may take; a slower one fails the probe.
    #[serde(with = "text::duration")]
    pub check_timeout: Duration,
    /// How long `/alive` stays healthy while this node is in no cluster (bootstrap still probing,
    /// seed nodes not answering), counted from the node's start; after it `/alive` fails, saying
    /// why, so that Kubernetes restarts a pod that would otherwise wait for ever. `None`
    /// (`"off"`) never fails for this.
    #[serde(with = "text::off_or_duration")]
    pub join_deadline: Option<Duration>,
    /// `/ready` fails until the region of every entity type started on this node has been
    /// registered with its coordinator (which has then read its table).
    pub sharding: bool,
    /// `/ready` fails until the manager of every singleton started on this node knows the
    /// oldest member with the singleton's role.
    pub singletons: bool,
}

impl Default for HealthCheckSettings {
    fn default() -> Self {
        Self {
            ready_states: vec!["Up".into(), "WeaklyUp".into()],
            readiness_path: "/ready".into(),
            liveness_path: "/alive".into(),
            startup_path: "/startup".into(),
            check_timeout: Duration::from_secs(1),
            join_deadline: Some(Duration::from_secs(5 * 60)),
            sharding: true,
            singletons: true,
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
    /// Paths (under `base_path`) whose reads (GET, HEAD) are served without credentials: probes
    /// and bootstrap must keep working. Writes always need credentials.
    pub exempt_paths: Vec<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            bearer_tokens: Vec::new(),
            bearer_token_files: Vec::new(),
            basic: Vec::new(),
            exempt_paths: vec![
                "/ready".into(),
                "/alive".into(),
                "/startup".into(),
                "/bootstrap/seed-nodes".into(),
            ],
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
    #[serde(with = "text::duration")]
    pub header_read_timeout: Duration,
    /// A request must be answered within this time (event streams excepted).
    #[serde(with = "text::duration")]
    pub request_timeout: Duration,
    /// Most open connections at once; more are closed on accept.
    pub max_connections: usize,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Events buffered per event-stream client; a client further behind is disconnected.
    pub event_buffer: usize,
    /// Most event-stream clients at once.
    pub max_event_clients: usize,
    /// How often an idle event stream sends a keep-alive comment, so proxies and load balancers
    /// with an idle timeout keep the connection open.
    #[serde(with = "text::duration")]
    pub event_keep_alive: Duration,
}

impl Default for ManagementLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_connections: 256,
            body_limit: 16 * 1024,
            event_buffer: 128,
            max_event_clients: 64,
            event_keep_alive: Duration::from_secs(10),
        }
    }
}

impl ManagementSettings {
    /// Checks value ranges and cross-field rules.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for s in &self.health_checks.ready_states {
            if !MemberStatus::ALL.iter().any(|m| m.name() == s) {
                return Err(SettingsError::new(
                    "management.health_checks.ready_states",
                    format!("{s:?}"),
                    "member statuses such as \"Up\", \"WeaklyUp\", \"Leaving\"",
                ));
            }
        }
        let hc = &self.health_checks;
        for (key, path) in [
            ("management.health_checks.readiness_path", &hc.readiness_path),
            ("management.health_checks.liveness_path", &hc.liveness_path),
            ("management.health_checks.startup_path", &hc.startup_path),
        ] {
            if route_path(path).is_empty() || !is_plain_path(path) {
                return Err(SettingsError::new(
                    key,
                    format!("{path:?}"),
                    "a path like \"/ready\" or \"ready\"",
                ));
            }
        }
        let mut paths =
            [&hc.readiness_path, &hc.liveness_path, &hc.startup_path].map(|p| route_path(p));
        paths.sort();
        if paths.windows(2).any(|w| w[0] == w[1]) {
            return Err(SettingsError::new(
                "management.health_checks",
                format!(
                    "readiness_path {:?}, liveness_path {:?}, startup_path {:?}",
                    hc.readiness_path, hc.liveness_path, hc.startup_path
                ),
                "three different paths",
            ));
        }
        if hc.join_deadline.is_some_and(|d| d.is_zero()) {
            return Err(SettingsError::new(
                "management.health_checks.join_deadline",
                "\"0s\"",
                "\"off\" or a duration greater than 0, like \"5m\"",
            ));
        }
        if let Some(auth) = &self.auth {
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
        if let Some(tls) = &self.tls {
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
        let l = &self.limits;
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
        if l.event_keep_alive.is_zero() {
            return Err(SettingsError::new(
                "management.limits.event_keep_alive",
                "\"0s\"",
                "a duration greater than 0, like \"10s\"",
            ));
        }
        if !is_plain_path(&self.base_path) {
            return Err(SettingsError::new(
                "management.base_path",
                format!("{:?}", self.base_path),
                "\"\" or a path like \"/mgmt\" or \"mgmt\" (no spaces, '?' or '#')",
            ));
        }
        Ok(())
    }

    /// The prefix every route is served under: [`base_path`](Self::base_path) with one leading
    /// `/` and no trailing one (`"mgmt"`, `"/mgmt"` and `"/mgmt/"` give `"/mgmt"`); `""` for none.
    pub fn route_prefix(&self) -> String {
        route_path(&self.base_path)
    }
}

/// `path` with one leading `/` and no trailing one; `""` for `""` or `"/"`. Akka writes paths
/// without the leading slash (`base-path = "mgmt"`, `readiness-path = "ready"`); both forms are
/// taken.
pub fn route_path(path: &str) -> String {
    let inner = path.trim().trim_matches('/');
    if inner.is_empty() { String::new() } else { format!("/{inner}") }
}

fn is_plain_path(path: &str) -> bool {
    !path
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '{' | '}' | '*'))
}

fn redact(credential: &str) -> String {
    credential.split(':').next().unwrap_or_default().to_owned() + ":***"
}
