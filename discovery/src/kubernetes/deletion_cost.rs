//! The pod-deletion-cost annotation of this node's own pod: a ReplicaSet that scales down (as a
//! Deployment's rolling update does) deletes the pods of lowest cost first, so the oldest
//! members, which host the singletons and the shard coordinators, are replaced last.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{ApiServerSettings, api_client};
use crate::DiscoveryError;

/// The annotation the ReplicaSet controller reads (Kubernetes 1.22 and later).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The RBAC verbs the annotation needs on `pods` (core API group): a merge patch of the pod's
/// own metadata. `k8s/base/role.yaml` grants these beside [`POD_VERBS`](super::POD_VERBS).
pub const DELETION_COST_VERBS: [&str; 1] = ["patch"];

/// A failed patch: the API server's status code when it answered (403 without the `patch`
/// verb, 404 for a pod name that does not exist, 409 on a conflict), and what it said.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PatchError {
    /// The HTTP status the API server answered; `None` when it could not be reached.
    pub status: Option<u16>,
    /// What went wrong.
    pub message: String,
}

/// Sets or removes the deletion cost of one pod.
#[derive(Clone)]
pub struct PodDeletionCost {
    api: Api<Pod>,
    namespace: String,
    pod_name: String,
}

impl std::fmt::Debug for PodDeletionCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodDeletionCost")
            .field("namespace", &self.namespace)
            .field("pod_name", &self.pod_name)
            .finish_non_exhaustive()
    }
}

impl PodDeletionCost {
    /// For pod `pod_name` in `namespace` (`None`: the namespace `api` resolves to), through a
    /// client built from `api` (see [`api_client`]). Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// The API server settings cannot make a client (see [`api_client`]).
    pub fn new(
        api: &ApiServerSettings,
        namespace: Option<&str>,
        pod_name: &str,
    ) -> Result<Self, DiscoveryError> {
        let client = api_client(api)?;
        let namespace = namespace.map_or_else(|| api.resolve_namespace(), str::to_owned);
        Ok(Self {
            api: Api::namespaced(client, &namespace),
            namespace,
            pod_name: pod_name.to_owned(),
        })
    }

    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The pod's name.
    pub fn pod_name(&self) -> &str {
        &self.pod_name
    }

    /// Annotates the pod with `cost`, or removes the annotation when `None`, by a JSON merge
    /// patch of its metadata.
    ///
    /// # Errors
    /// The API server refused the patch or could not be reached.
    pub async fn set(&self, cost: Option<i32>) -> Result<(), PatchError> {
        let value = cost.map(|c| c.to_string());
        let patch = json!({ "metadata": { "annotations": { DELETION_COST_ANNOTATION: value } } });
        match self.api.patch(&self.pod_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) => {
                Err(PatchError { status: Some(status.code), message: status.message.clone() })
            }
            Err(e) => Err(PatchError { status: None, message: e.to_string() }),
        }
    }
}
