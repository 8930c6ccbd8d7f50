//! The Kubernetes location of the lease-majority strategy's lease: the keys `kubernetes_*` of
//! `[cluster.split_brain_resolver.lease_majority]`. The rest of that table is the core's
//! (`LeaseMajorityConfig`: the lease's name, timing and the strategy's delays); both are read from
//! the same table (see `sources.rs`).

use convoke_discovery::settings::SERVICE_ACCOUNT_DIR;
use serde::{Deserialize, Serialize};

use super::SettingsError;

/// The table these keys share with the core's lease-majority settings.
pub(super) const TABLE: &str = "cluster.split_brain_resolver.lease_majority";

/// Where the lease-majority strategy's lease lives: a `coordination.k8s.io/v1` Lease object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KubernetesLeaseSettings {
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

impl Default for KubernetesLeaseSettings {
    fn default() -> Self {
        Self {
            kubernetes_api_url: String::new(),
            // The service-account mount of every pod.
            kubernetes_ca_path: format!("{SERVICE_ACCOUNT_DIR}/ca.crt"),
            kubernetes_token_path: format!("{SERVICE_ACCOUNT_DIR}/token"),
            kubernetes_namespace: String::new(),
        }
    }
}

impl KubernetesLeaseSettings {
    /// Checks, when the active strategy is lease-majority, that this build can run it and that
    /// the API server URL is usable.
    ///
    /// # Errors
    /// The first bad key.
    pub fn validate(&self, active_strategy: &str) -> Result<(), SettingsError> {
        if active_strategy != "lease-majority" {
            return Ok(());
        }
        if !cfg!(feature = "kubernetes") {
            return Err(SettingsError::new(
                "cluster.split_brain_resolver.active_strategy",
                "\"lease-majority\"",
                "keep-majority, static-quorum, keep-oldest, down-all or off: lease-majority \
                 needs convoke built with the `kubernetes` feature (its lease is a Kubernetes \
                 Lease object)",
            ));
        }
        let url = &self.kubernetes_api_url;
        if !(url.is_empty() || url.starts_with("https://") || url.starts_with("http://")) {
            return Err(SettingsError::new(
                format!("{TABLE}.kubernetes_api_url"),
                format!("{url:?}"),
                "\"\" (in-cluster) or a URL like \"https://10.96.0.1:443\"",
            ));
        }
        Ok(())
    }
}
