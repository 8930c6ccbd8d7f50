//! `[cluster.split_brain_resolver]`: the active strategy, its timing, one table per strategy, and
//! for lease-majority the lease (a Kubernetes `Lease` object) and where its API server is.

use std::time::Duration;

use convoke_membership::config::{
    Config as CoreConfig, LeaseMajorityConfig, SplitBrainResolverConfig,
};
use serde::{Deserialize, Serialize};

use super::{Dur, SettingsError, Switch};

const PREFIX: &str = "cluster.split_brain_resolver";

/// `[cluster.split_brain_resolver]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SplitBrainResolverSettings {
    /// keep-majority | static-quorum | keep-oldest | down-all | lease-majority | off.
    pub active_strategy: String,
    /// How long membership must be stable before deciding.
    pub stable_after: Dur,
    /// `"on"`, `"off"` or a duration.
    pub down_all_when_unstable: Switch,
    /// `[cluster.split_brain_resolver.keep_majority]`.
    pub keep_majority: KeepMajoritySettings,
    /// `[cluster.split_brain_resolver.static_quorum]`.
    pub static_quorum: StaticQuorumSettings,
    /// `[cluster.split_brain_resolver.keep_oldest]`.
    pub keep_oldest: KeepOldestSettings,
    /// `[cluster.split_brain_resolver.lease_majority]`.
    pub lease_majority: LeaseMajoritySettings,
}

impl Default for SplitBrainResolverSettings {
    fn default() -> Self {
        let sbr = CoreConfig::default().split_brain_resolver;
        Self {
            active_strategy: sbr.active_strategy,
            stable_after: Dur(sbr.stable_after),
            down_all_when_unstable: Switch(sbr.down_all_when_unstable),
            keep_majority: KeepMajoritySettings { role: sbr.keep_majority.role },
            static_quorum: StaticQuorumSettings {
                quorum_size: sbr.static_quorum.quorum_size,
                role: sbr.static_quorum.role,
            },
            keep_oldest: KeepOldestSettings {
                down_if_alone: sbr.keep_oldest.down_if_alone,
                role: sbr.keep_oldest.role,
            },
            lease_majority: LeaseMajoritySettings::from_core(&sbr.lease_majority),
        }
    }
}

/// `[cluster.split_brain_resolver.keep_majority]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct KeepMajoritySettings {
    /// Count only members with this role; `""` counts all.
    pub role: String,
}

/// `[cluster.split_brain_resolver.static_quorum]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct StaticQuorumSettings {
    /// The side with at least this many members survives. Required (at least 1) when the
    /// strategy is static-quorum; `0` means unset.
    pub quorum_size: usize,
    /// Count only members with this role; `""` counts all.
    pub role: String,
}

/// `[cluster.split_brain_resolver.keep_oldest]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepOldestSettings {
    /// The oldest member cut off alone from two or more others downs itself.
    pub down_if_alone: bool,
    /// The oldest among members with this role decides; `""` considers all.
    pub role: String,
}

impl Default for KeepOldestSettings {
    fn default() -> Self {
        let core = CoreConfig::default().split_brain_resolver.keep_oldest;
        Self { down_if_alone: core.down_if_alone, role: core.role }
    }
}

/// The default of `kubernetes_ca_path`: the service-account mount of every pod.
const DEFAULT_KUBERNETES_CA_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The default of `kubernetes_token_path`.
const DEFAULT_KUBERNETES_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// `[cluster.split_brain_resolver.lease_majority]`: the strategy's settings and its lease, a
/// `coordination.k8s.io/v1` Lease object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseMajoritySettings {
    /// The lease both sides contend for; `""` is `"<system_name>-convoke-sbr"`.
    pub lease_name: String,
    /// How long the minority waits before it tries to take the lease.
    pub acquire_lease_delay_for_minority: Dur,
    /// How long the winner keeps the lease after the downed nodes are removed.
    pub release_after: Dur,
    /// Count only members with this role when deciding which side is the minority.
    pub role: String,
    /// How often the holder renews the lease.
    pub heartbeat_interval: Dur,
    /// A lease not renewed for this long has expired and may be taken by the other side.
    pub heartbeat_timeout: Dur,
    /// A lease operation taking longer has failed (the lease counts as not taken).
    pub lease_operation_timeout: Dur,
    /// The Kubernetes API server; `""`: in-cluster (`KUBERNETES_SERVICE_HOST`/`_PORT`).
    pub kubernetes_api_url: String,
    /// The CA certificate (PEM) of the API server; `""`: the platform's trusted roots.
    pub kubernetes_ca_path: String,
    /// The bearer token file (re-read every minute); `""`: send no token.
    pub kubernetes_token_path: String,
    /// The namespace of the Lease object; `""`: `KUBERNETES_NAMESPACE`, else the pod's
    /// namespace file, else `default`.
    pub kubernetes_namespace: String,
}

impl Default for LeaseMajoritySettings {
    fn default() -> Self {
        Self::from_core(&CoreConfig::default().split_brain_resolver.lease_majority)
    }
}

impl LeaseMajoritySettings {
    fn from_core(core: &LeaseMajorityConfig) -> Self {
        Self {
            lease_name: core.lease_name.clone(),
            acquire_lease_delay_for_minority: Dur(core.acquire_lease_delay_for_minority),
            release_after: Dur(core.release_after),
            role: core.role.clone(),
            heartbeat_interval: Dur(Duration::from_secs(12)),
            heartbeat_timeout: Dur(Duration::from_secs(120)),
            lease_operation_timeout: Dur(Duration::from_secs(5)),
            kubernetes_api_url: String::new(),
            kubernetes_ca_path: DEFAULT_KUBERNETES_CA_PATH.into(),
            kubernetes_token_path: DEFAULT_KUBERNETES_TOKEN_PATH.into(),
            kubernetes_namespace: String::new(),
        }
    }

    /// Checks the lease timing: every duration positive, and renewals at least twice within a
    /// `heartbeat_timeout`, so that one slow or failed renewal does not lose the lease.
    fn validate(&self) -> Result<(), SettingsError> {
        let key = |k: &str| format!("{PREFIX}.lease_majority.{k}");
        for (k, d) in [
            ("heartbeat_interval", self.heartbeat_interval.0),
            ("heartbeat_timeout", self.heartbeat_timeout.0),
            ("lease_operation_timeout", self.lease_operation_timeout.0),
        ] {
            if d.is_zero() {
                return Err(SettingsError::new(key(k), "\"0s\"", "a duration greater than 0"));
            }
        }
        if self.heartbeat_interval.0 * 2 > self.heartbeat_timeout.0 {
            return Err(SettingsError::new(
                key("heartbeat_interval"),
                format!(
                    "{:?}",
                    convoke_membership::config::format_duration(self.heartbeat_interval.0)
                ),
                format!(
                    "at most half of heartbeat_timeout ({}), so that the lease is renewed at \
                     least twice before it expires",
                    convoke_membership::config::format_duration(self.heartbeat_timeout.0)
                ),
            ));
        }
        if self.lease_operation_timeout.0 >= self.heartbeat_timeout.0 {
            return Err(SettingsError::new(
                key("lease_operation_timeout"),
                format!(
                    "{:?}",
                    convoke_membership::config::format_duration(self.lease_operation_timeout.0)
                ),
                format!(
                    "less than heartbeat_timeout ({})",
                    convoke_membership::config::format_duration(self.heartbeat_timeout.0)
                ),
            ));
        }
        let url = &self.kubernetes_api_url;
        if !(url.is_empty() || url.starts_with("https://") || url.starts_with("http://")) {
            return Err(SettingsError::new(
                key("kubernetes_api_url"),
                format!("{:?}", self.kubernetes_api_url),
                "\"\" (in-cluster) or a URL like \"https://10.96.0.1:443\"",
            ));
        }
        Ok(())
    }
}

impl SplitBrainResolverSettings {
    /// Checks what the core does not: the lease settings, and that this build can run the
    /// chosen strategy.
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        if self.active_strategy == "lease-majority" {
            if !cfg!(feature = "kubernetes") {
                return Err(SettingsError::new(
                    format!("{PREFIX}.active_strategy"),
                    "\"lease-majority\"",
                    "keep-majority, static-quorum, keep-oldest, down-all or off: lease-majority \
                     needs convoke built with the `kubernetes` feature (its lease is a Kubernetes \
                     Lease object)",
                ));
            }
            self.lease_majority.validate()?;
        }
        Ok(())
    }

    /// Writes these settings into the core's configuration (validated by the core afterwards).
    pub(super) fn apply_to(&self, core: &mut SplitBrainResolverConfig) {
        core.active_strategy.clone_from(&self.active_strategy);
        core.stable_after = self.stable_after.0;
        core.down_all_when_unstable = self.down_all_when_unstable.0;
        core.keep_majority.role.clone_from(&self.keep_majority.role);
        core.static_quorum.quorum_size = self.static_quorum.quorum_size;
        core.static_quorum.role.clone_from(&self.static_quorum.role);
        core.keep_oldest.down_if_alone = self.keep_oldest.down_if_alone;
        core.keep_oldest.role.clone_from(&self.keep_oldest.role);
        let lease = &self.lease_majority;
        core.lease_majority.lease_name.clone_from(&lease.lease_name);
        core.lease_majority.acquire_lease_delay_for_minority =
            lease.acquire_lease_delay_for_minority.0;
        core.lease_majority.release_after = lease.release_after.0;
        core.lease_majority.role.clone_from(&lease.role);
    }
}
