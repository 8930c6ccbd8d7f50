//! The node's settings, one table per concern: `[cluster]` ([`ClusterSettings`], which holds the
//! membership core's own [`CoreConfig`]), `[management]` ([`ManagementSettings`]), `[bootstrap]`
//! (the bootstrap crate's [`BootstrapSettings`]) and `[discovery]` ([`DiscoverySettings`], with
//! the discovery crate's [`DnsSettings`] and [`KubernetesSettings`]), `[singleton]`,
//! `[sharding]`, `[data]` ([`DataSettings`], the replicated store) and `[runtime]`
//! ([`RuntimeSettings`], the process's threads).
//! Library types are the tables themselves, so each default and each check is written once, next
//! to the type it belongs to.
//!
//! Layout: `sources.rs` (the layers: defaults, file, `CONVOKE_*`, `--set`, and the two tables a
//! library type shares with the runtime), `error.rs` ([`SettingsError`]), `cluster.rs`,
//! `lease.rs` (where the split-brain lease lives), `management.rs`, `discovery.rs`, `host.rs`
//! (`"<getHostAddress>"`), `singleton.rs`, `sharding.rs`, `data.rs`, `runtime.rs`. Adding a setting: see
//! `docs/architecture.md`, "Adding a setting".

mod cluster;
mod cluster_tls;
mod data;
mod discovery;
mod error;
mod host;
mod lease;
mod management;
mod rolling_update;
mod runtime;
mod sharding;
mod singleton;
mod sources;

pub use cluster::{ClusterSettings, DEFAULT_CLUSTER_PORT, DEFAULT_JOIN_GIVE_UP, TransportSettings};
pub use cluster_tls::{ClusterTlsSettings, TlsFiles, TlsMaterial, crypto_provider};
pub use convoke_bootstrap::{BootstrapSettings, ContactPointSettings};
pub use convoke_discovery::settings::{DnsSettings, KubernetesSettings};
pub use convoke_membership::config::Config as CoreConfig;
pub use data::{DataSettings, SyncMode};
pub use discovery::{
    AggregateDiscoverySettings, ConfigDiscoverySettings, ConfigService, DiscoverySettings,
    Endpoint, METHODS,
};
pub use error::SettingsError;
pub use host::{HOST_ADDRESS, host_address};
pub use lease::KubernetesLeaseSettings;
pub use management::{
    AuthSettings, DEFAULT_MANAGEMENT_PORT, HealthCheckSettings, ManagementLimits,
    ManagementSettings, TlsSettings, route_path,
};
pub use rolling_update::{KubernetesRollingUpdateSettings, POD_NAME_ENV, RollingUpdateSettings};
pub use runtime::RuntimeSettings;
pub use sharding::{RememberEntities, ShardingSettings};
pub use singleton::SingletonSettings;
pub use sources::Sources;

use serde::{Deserialize, Serialize};

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
    /// `[singleton]`: cluster singletons' hand-over and proxies.
    pub singleton: SingletonSettings,
    /// `[sharding]`: defaults of sharded entity types.
    pub sharding: ShardingSettings,
    /// `[data]`: the replicated store.
    pub data: DataSettings,
    /// `[rolling_update]`: the pod-deletion-cost annotation of the oldest members' pods.
    pub rolling_update: RollingUpdateSettings,
    /// `[runtime]`: the threads `convoke run` runs the node on.
    pub runtime: RuntimeSettings,
    /// The Kubernetes location of the split-brain lease, read from
    /// `[cluster.split_brain_resolver.lease_majority]` beside the core's keys.
    #[serde(skip)]
    pub lease: KubernetesLeaseSettings,
}

impl Settings {
    /// Layers the defaults, the file, `CONVOKE_*` variables and `--set`s, and checks the result.
    ///
    /// # Errors
    /// The first bad or unknown key.
    pub fn load(sources: &Sources<'_>) -> Result<Settings, SettingsError> {
        let fig = sources::layered(&Settings::default().to_table(), sources)?;
        let mut settings: Settings = sources::part(&fig, "")?;
        let cluster_keys = sources::keys_of(&settings.cluster);
        sources::known_keys_only(&fig, "cluster", &cluster_keys)?;
        settings.cluster.core = sources::part(&fig, "cluster")?;
        let mut lease_keys =
            sources::keys_of(&settings.cluster.core.split_brain_resolver.lease_majority);
        lease_keys.extend(sources::keys_of(&settings.lease));
        sources::known_keys_only(&fig, lease::TABLE, &lease_keys)?;
        settings.lease = sources::part(&fig, lease::TABLE)?;
        settings.resolve_host_address()?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what serde cannot: value ranges and cross-field rules, each table by its own type.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.cluster.validate()?;
        self.lease.validate(&self.cluster.core.split_brain_resolver.active_strategy)?;
        self.management.validate()?;
        self.bootstrap.validate().map_err(|e| SettingsError::new(e.key, e.value, e.expected))?;
        self.discovery.validate()?;
        self.singleton.validate()?;
        self.sharding.validate()?;
        self.data.validate()?;
        self.rolling_update.kubernetes.validate()?;
        if self.sharding.remember_entities.any() && !self.data.enabled {
            let value = toml::Value::try_from(&self.sharding.remember_entities)
                .map_or_else(|_| "true".to_owned(), |v| v.to_string());
            return Err(SettingsError::new(
                "sharding.remember_entities",
                value,
                "false while data.enabled is false: remembered entities are kept in the store",
            ));
        }
        self.runtime.validate()
    }

    /// The membership core's configuration, checked (without the RNG seed, which the node sets).
    ///
    /// # Errors
    /// The first bad key, named as in the settings file.
    pub fn core_config(&self) -> Result<CoreConfig, SettingsError> {
        self.cluster.core.validate()?;
        Ok(self.cluster.core.clone())
    }

    /// The effective settings as one TOML table, every key in its table.
    pub fn to_table(&self) -> toml::Table {
        let mut table = toml::Table::try_from(self).unwrap_or_default();
        let lease = toml::Table::try_from(&self.lease).unwrap_or_default();
        let lease_table =
            lease::TABLE.split('.').try_fold(&mut table, |t, key| t.get_mut(key)?.as_table_mut());
        if let Some(t) = lease_table {
            t.extend(lease);
        }
        table
    }

    /// The effective settings as TOML, for `--print-config`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(&self.to_table())
            .unwrap_or_else(|e| format!("# cannot print settings: {e}\n"))
    }
}

/// `Option<Duration>` written as a duration, or as `keyword` (`"auto"`, `"off"`) for `None`; the
/// `serde(with)` modules of such keys call these two.
mod keyword_duration {
    use std::time::Duration;

    use convoke_membership::config::text;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(
        d: &Option<Duration>,
        keyword: &str,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&text::format_duration(*d)),
            None => s.serialize_str(keyword),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        keyword: &str,
        example: &str,
    ) -> Result<Option<Duration>, D::Error> {
        let t = String::deserialize(d)?;
        if t.trim() == keyword {
            return Ok(None);
        }
        text::parse_duration("", &t).map(Some).map_err(|_| {
            D::Error::custom(format!(
                "{t:?} is not valid: expected \"{keyword}\" or a duration like \"{example}\""
            ))
        })
    }
}

#[cfg(test)]
mod tests;
