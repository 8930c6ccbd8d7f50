//! `[discovery]`: how bootstrap finds contact points — the method (`config`, `dns`,
//! `kubernetes-api`, or `aggregate` of several) and one table per method.

use std::collections::BTreeMap;
use std::time::Duration;

use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// The single discovery methods, which `aggregate` combines.
pub const METHODS: &[&str] = &["config", "dns", "kubernetes-api"];

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
    #[serde(with = "text::duration")]
    pub cache_ttl_cap: Duration,
}

impl Default for DnsDiscoverySettings {
    fn default() -> Self {
        Self { nameservers: Vec::new(), cache_ttl_cap: Duration::from_secs(5) }
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
    #[serde(with = "text::duration")]
    pub token_reload_interval: Duration,
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
            token_reload_interval: Duration::from_secs(60),
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

impl DiscoverySettings {
    /// Checks the method names.
    ///
    /// # Errors
    /// An unknown method, or an empty or unknown list for `aggregate`.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let methods = METHODS;
        if self.method != "aggregate" && !methods.contains(&self.method.as_str()) {
            return Err(SettingsError::new(
                "discovery.method",
                format!("{:?}", self.method),
                format!("one of {}, aggregate", methods.join(", ")),
            ));
        }
        if self.method == "aggregate" {
            let names = &self.aggregate.discovery_methods;
            if names.is_empty() || names.iter().any(|n| !methods.contains(&n.as_str())) {
                return Err(SettingsError::new(
                    "discovery.aggregate.discovery_methods",
                    format!("{names:?}"),
                    format!("a non-empty list of {}", methods.join(", ")),
                ));
            }
        }
        Ok(())
    }
}
