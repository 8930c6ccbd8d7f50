//! `[rolling_update]`: what helps a rolling update move each singleton and shard once. Today one
//! table, `[rolling_update.kubernetes]`: the pod-deletion-cost annotation of the oldest members'
//! pods (see `src/rolling_update.rs` and the README's "Rolling updates").

use std::time::Duration;

use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// The environment variable naming this pod, set from `metadata.name` by the Deployment.
pub const POD_NAME_ENV: &str = "KUBERNETES_POD_NAME";

/// `[rolling_update]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RollingUpdateSettings {
    /// `[rolling_update.kubernetes]`.
    pub kubernetes: KubernetesRollingUpdateSettings,
}

/// `[rolling_update.kubernetes]`: each of the `annotated_pods_nr` oldest members annotates its
/// own pod with `controller.kubernetes.io/pod-deletion-cost`, the oldest highest, through the
/// API server of `[discovery.kubernetes_api]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesRollingUpdateSettings {
    /// Whether to annotate.
    pub enabled: bool,
    /// This pod's name; `""`: `KUBERNETES_POD_NAME`, else `HOSTNAME` (a pod's host name is its
    /// name unless the spec sets another).
    pub pod_name: String,
    /// This pod's namespace; `""`: the namespace of `[discovery.kubernetes_api]`.
    pub namespace: String,
    /// How many of the oldest members annotate their pod: the oldest gets this number as its
    /// cost, the next one less, down to 1; every other pod has none (cost 0).
    pub annotated_pods_nr: u32,
    /// The wait after a failed patch before the next try; it doubles on each failure in a row,
    /// up to a minute.
    #[serde(with = "text::duration")]
    pub retry_backoff: Duration,
}

impl Default for KubernetesRollingUpdateSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            pod_name: String::new(),
            namespace: String::new(),
            annotated_pods_nr: 3,
            retry_backoff: Duration::from_secs(1),
        }
    }
}

impl KubernetesRollingUpdateSettings {
    /// The pod name to annotate: the setting, else `KUBERNETES_POD_NAME`, else `HOSTNAME`.
    ///
    /// # Errors
    /// None of them names a pod.
    pub fn resolve_pod_name(&self) -> Result<String, SettingsError> {
        resolve_pod_name(
            &self.pod_name,
            std::env::var(POD_NAME_ENV).ok(),
            std::env::var("HOSTNAME").ok(),
        )
    }

    /// Checks the ranges serde cannot.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        const KEY: &str = "rolling_update.kubernetes";
        if !self.enabled {
            return Ok(());
        }
        if !cfg!(feature = "kubernetes") {
            return Err(SettingsError::new(
                format!("{KEY}.enabled"),
                "true",
                "false: the pod-deletion-cost annotation needs convoke built with the \
                 `kubernetes` feature",
            ));
        }
        if self.annotated_pods_nr == 0 {
            return Err(SettingsError::new(
                format!("{KEY}.annotated_pods_nr"),
                "0",
                "at least 1 (or enabled = false)",
            ));
        }
        if self.retry_backoff.is_zero() {
            return Err(SettingsError::new(
                format!("{KEY}.retry_backoff"),
                "\"0s\"",
                "a positive duration such as \"1s\"",
            ));
        }
        self.resolve_pod_name().map(|_| ())
    }
}

fn resolve_pod_name(
    configured: &str,
    env: Option<String>,
    hostname: Option<String>,
) -> Result<String, SettingsError> {
    [Some(configured.to_owned()), env, hostname]
        .into_iter()
        .flatten()
        .map(|n| n.trim().to_owned())
        .find(|n| !n.is_empty())
        .ok_or_else(|| {
            SettingsError::new(
                "rolling_update.kubernetes.pod_name",
                "\"\"",
                format!(
                    "this pod's name: set it, or {POD_NAME_ENV} (from the pod's metadata.name), \
                     or HOSTNAME"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_name_comes_from_the_setting_then_the_environment_then_the_host_name() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(resolve_pod_name("set", some("env"), some("host")).unwrap(), "set");
        assert_eq!(resolve_pod_name("", some("env"), some("host")).unwrap(), "env");
        assert_eq!(resolve_pod_name(" ", some(""), some("host\n")).unwrap(), "host");
        let e = resolve_pod_name("", None, None).unwrap_err().to_string();
        assert!(
            e.contains("rolling_update.kubernetes.pod_name") && e.contains(POD_NAME_ENV),
            "{e}"
        );
    }
}
