//! `[discovery]`: how bootstrap finds contact points — the method (`config`, `dns`,
//! `kubernetes-api`, or `aggregate` of several) and one table per method; the DNS and Kubernetes
//! tables are the discovery crate's own settings types.

use std::collections::BTreeMap;

use convoke_discovery::settings::{DnsSettings, KubernetesSettings};
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
    /// `[discovery.dns]`: the DNS method's own settings.
    pub dns: DnsSettings,
    /// `[discovery.kubernetes_api]`: the Kubernetes API method's own settings.
    pub kubernetes_api: KubernetesSettings,
    /// `[discovery.aggregate]`.
    pub aggregate: AggregateDiscoverySettings,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            method: "config".into(),
            config: ConfigDiscoverySettings::default(),
            dns: DnsSettings::default(),
            kubernetes_api: KubernetesSettings::default(),
            aggregate: AggregateDiscoverySettings::default(),
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
