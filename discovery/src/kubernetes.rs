//! Discovery through the Kubernetes API: the pods of a namespace selected by a label,
//! and the client settings shared with the [`lease`] on `coordination.k8s.io/v1` Lease objects.
//!
//! Layout: this file holds [`KubernetesApiDiscovery`] (its settings and those of the API server
//! are in [`crate::settings`]); `client.rs` the API client ([`api_client`]), with the token
//! re-read periodically; `pods.rs` which pods are targets; [`lease`] the Kubernetes lease;
//! [`deletion_cost`] the pod-deletion-cost annotation of a rolling update.

mod client;
pub mod deletion_cost;
pub mod lease;
mod pods;

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

pub use self::client::{
    ApiServerSettings, ENV_VARS, NAMESPACE_ENV, SERVICE_ACCOUNT_DIR, SERVICE_HOST_ENV,
    SERVICE_PORT_ENV, api_client,
};
pub use self::deletion_cost::{
    DELETION_COST_ANNOTATION, DELETION_COST_VERBS, PatchError, PodDeletionCost,
};
pub use self::lease::{KubernetesLease, LEASE_VERBS};
use self::pods::HostStyle;
pub use crate::settings::KubernetesSettings;
use crate::{DiscoveryError, Lookup, Resolved, ServiceDiscovery, with_timeout};

/// The RBAC verbs pod discovery needs on `pods` (core API group): it lists the pods matching its
/// label selector. `k8s/base/role.yaml` grants these beside [`DELETION_COST_VERBS`].
pub const POD_VERBS: [&str; 1] = ["list"];

/// Discovery of the pods labelled with the service name, through the Kubernetes API.
#[derive(Clone)]
pub struct KubernetesApiDiscovery {
    client: kube::Client,
    namespace: String,
    settings: KubernetesSettings,
}

impl std::fmt::Debug for KubernetesApiDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesApiDiscovery")
            .field("namespace", &self.namespace)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl KubernetesApiDiscovery {
    /// Builds the API client from `settings.api` (see [`api_client`]) and resolves the
    /// namespace. Must be called inside a tokio runtime.
    pub fn new(settings: KubernetesSettings) -> Result<Self, DiscoveryError> {
        let client = api_client(&settings.api)?;
        let namespace = settings.api.resolve_namespace();
        Ok(Self::with_client(client, namespace, settings))
    }

    /// Discovery through an existing client, in `namespace` (`settings.api` is not used).
    pub fn with_client(
        client: kube::Client,
        namespace: impl Into<String>,
        settings: KubernetesSettings,
    ) -> Self {
        Self { client, namespace: namespace.into(), settings }
    }

    /// The namespace whose pods are listed.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn list(&self, lookup: &Lookup) -> Result<Resolved, DiscoveryError> {
        let selector = self.settings.pod_label_selector.replace("%s", &lookup.service_name);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| self.list_error(lookup, &selector, error))?;
        let host_style = if self.settings.use_raw_ip {
            HostStyle::RawIp
        } else {
            HostStyle::PodDns {
                namespace: self.namespace.clone(),
                pod_domain: self.settings.pod_domain.clone(),
            }
        };
        let (targets, dropped) = pods::targets(
            &list.items,
            lookup.port_name.as_deref(),
            self.settings.container_name.as_deref(),
            &host_style,
        );
        Ok(Resolved { dropped, ..Resolved::new(lookup.service_name.clone(), targets) })
    }

    fn list_error(&self, lookup: &Lookup, selector: &str, error: kube::Error) -> DiscoveryError {
        let ns = &self.namespace;
        match error {
            kube::Error::Api(status) if status.code == 403 => {
                tracing::warn!(namespace = %ns, message = %status.message, "Kubernetes API: forbidden");
                DiscoveryError::Forbidden(format!(
                    "Forbidden when listing pods (labelSelector {selector}) in namespace {ns} \
                     through the Kubernetes API. Check RBAC settings: the pod's service account \
                     needs a Role granting verb \"list\" on resource \"pods\" (API group \"\") in \
                     namespace {ns:?}, and a RoleBinding to it. The API server said: {}",
                    status.message
                ))
            }
            kube::Error::Api(status) if status.code == 401 => DiscoveryError::Failed {
                lookup: lookup.to_string(),
                reason: format!(
                    "the Kubernetes API server rejected the bearer token (401 Unauthorized); \
                     check discovery.kubernetes_api.api_token_path: {}",
                    status.message
                ),
            },
            kube::Error::Api(status) => DiscoveryError::Failed {
                lookup: lookup.to_string(),
                reason: format!(
                    "non-200 from the Kubernetes API server listing pods in namespace {ns}: {} \
                     {}: {}",
                    status.code, status.reason, status.message
                ),
            },
            other => DiscoveryError::Failed {
                lookup: lookup.to_string(),
                reason: format!(
                    "listing pods in namespace {ns} through the Kubernetes API: {other}"
                ),
            },
        }
    }
}

impl ServiceDiscovery for KubernetesApiDiscovery {
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>> {
        Box::pin(with_timeout(lookup, timeout, self.list(lookup)))
    }
}
