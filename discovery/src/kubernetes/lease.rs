//! The lease of the lease-majority split-brain strategy on a `coordination.k8s.io/v1` Lease
//! object.
//!
//! The holder is `spec.holderIdentity` (the owner name, the node's `host:port`). A lease whose
//! `renewTime + leaseDurationSeconds` has passed is expired and may be taken by anyone. Every
//! write replaces the object read just before, carrying its `resourceVersion`, so two contenders
//! cannot both win: the API server answers the slower one 409 Conflict, and that one reads the
//! lease again and decides anew (at most [`ATTEMPTS`] times).
//!
//! Clocks: expiry compares the writer's `renewTime` with the reader's clock, as client-go's
//! leader election does; clocks of the nodes must agree to well within `heartbeat_timeout`.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use convoke_membership::sbr::{Lease as LeaseTrait, LeaseError, LeaseFuture, LeaseSettings};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::{ApiServerSettings, api_client};
use crate::DiscoveryError;

/// The RBAC verbs the lease needs on `leases` (`coordination.k8s.io`): it reads the Lease,
/// creates it when absent and replaces it to take, renew or release it.
/// `k8s/overlays/lease-majority/role.yaml` grants exactly these.
pub const LEASE_VERBS: [&str; 3] = ["get", "create", "update"];

/// How many read-decide-write rounds an operation makes before giving up on conflicts.
pub const ATTEMPTS: usize = 3;

/// A wall clock, injectable so that tests can move time.
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A [`Lease`](convoke_membership::sbr::Lease) on a Kubernetes Lease object.
pub struct KubernetesLease {
    api: Api<Lease>,
    namespace: String,
    object_name: String,
    settings: LeaseSettings,
    clock: WallClock,
    /// Until when this owner may believe it holds the lease: the start of its last successful
    /// acquire plus `heartbeat_timeout`.
    held_until: Mutex<Option<SystemTime>>,
}

impl fmt::Debug for KubernetesLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubernetesLease")
            .field("namespace", &self.namespace)
            .field("object_name", &self.object_name)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl KubernetesLease {
    /// A contender for the Lease object named after `settings.lease_name` (made a valid
    /// Kubernetes name: see [`object_name`](Self::object_name)) in `namespace`, through
    /// `client`. Reads the system clock.
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        settings: LeaseSettings,
    ) -> Self {
        let namespace = namespace.into();
        Self {
            api: Api::namespaced(client, &namespace),
            object_name: object_name(&settings.lease_name),
            namespace,
            settings,
            clock: Arc::new(SystemTime::now),
            held_until: Mutex::new(None),
        }
    }

    /// A contender using a client built from `api` ([`api_client`]) in its namespace. Must be
    /// called inside a tokio runtime.
    pub fn from_api_settings(
        api: &ApiServerSettings,
        settings: LeaseSettings,
    ) -> Result<Self, DiscoveryError> {
        Ok(Self::new(api_client(api)?, api.resolve_namespace(), settings))
    }

    /// Reads time from `clock` instead of the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: WallClock) -> Self {
        self.clock = clock;
        self
    }

    /// The Lease object's name: the lease name lower-cased, with every character other than
    /// `a-z`, `0-9`, `-` and `.` replaced by `-`, trimmed to 63 characters.
    pub fn object_name(&self) -> &str {
        &self.object_name
    }

    /// The namespace of the Lease object.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn now(&self) -> SystemTime {
        (self.clock)()
    }

    fn set_held_until(&self, until: Option<SystemTime>) {
        *self.held_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = until;
    }

    fn lease_duration_seconds(&self) -> i32 {
        let timeout = self.settings.heartbeat_timeout;
        let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }

    async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        let limit = self.settings.operation_timeout;
        tokio::time::timeout(limit, fut).await.unwrap_or(Err(LeaseError::Timeout(limit)))
    }

    async fn try_acquire(&self) -> Result<bool, LeaseError> {
        let owner = &self.settings.owner_name;
        for _ in 0..ATTEMPTS {
            let now = self.now();
            let stamp = micro_time(now);
            let written = match self
                .api
                .get_opt(&self.object_name)
                .await
                .map_err(|e| self.error("get", e))?
            {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.object_name.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: Some(LeaseSpec {
                            holder_identity: Some(owner.clone()),
                            acquire_time: Some(stamp.clone()),
                            renew_time: Some(stamp),
                            lease_duration_seconds: Some(self.lease_duration_seconds()),
                            lease_transitions: Some(0),
                            ..LeaseSpec::default()
                        }),
                    };
                    self.api.create(&PostParams::default(), &lease).await
                }
                Some(mut lease) => {
                    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
                    let mine = holder == Some(owner.as_str());
                    if !mine && holder.is_some() && !self.expired(spec, now) {
                        self.set_held_until(None);
                        return Ok(false);
                    }
                    if !mine {
                        spec.holder_identity = Some(owner.clone());
                        spec.acquire_time = Some(stamp.clone());
                        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    }
                    spec.renew_time = Some(stamp);
                    spec.lease_duration_seconds = Some(self.lease_duration_seconds());
                    self.api.replace(&self.object_name, &PostParams::default(), &lease).await
                }
            };
            match written {
                Ok(_) => {
                    self.set_held_until(Some(now + self.settings.heartbeat_timeout));
                    return Ok(true);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(lease = %self.object_name, "lease changed concurrently; reading it again");
                }
                Err(error) => return Err(self.error("write", error)),
            }
        }
        Err(self.conflict())
    }

    async fn try_release(&self) -> Result<bool, LeaseError> {
        // Whatever the outcome, this owner no longer counts on the lease.
        self.set_held_until(None);
        for _ in 0..ATTEMPTS {
            let Some(mut lease) =
                self.api.get_opt(&self.object_name).await.map_err(|e| self.error("get", e))?
            else {
                return Ok(false);
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.settings.owner_name.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            match self.api.replace(&self.object_name, &PostParams::default(), &lease).await {
                Ok(_) => return Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(error) => return Err(self.error("update", error)),
            }
        }
        Err(self.conflict())
    }

    fn expired(&self, spec: &LeaseSpec, now: SystemTime) -> bool {
        let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
            return true;
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.heartbeat_timeout, Duration::from_secs);
        SystemTime::from(renewed.0) + duration <= now
    }

    fn conflict(&self) -> LeaseError {
        LeaseError::Conflict(format!(
            "Lease {}/{} changed under every one of {ATTEMPTS} attempts",
            self.namespace, self.object_name
        ))
    }

    fn error(&self, verb: &str, error: kube::Error) -> LeaseError {
        let (ns, name) = (&self.namespace, &self.object_name);
        match error {
            kube::Error::Api(status) if status.code == 403 => LeaseError::Unavailable(format!(
                "Forbidden to {verb} Lease {ns}/{name}. Check RBAC settings: the pod's service \
                 account needs a Role granting verbs \"get\", \"create\" and \"update\" on \
                 resource \"leases\" (API group \"coordination.k8s.io\") in namespace {ns:?}. \
                 The API server said: {}",
                status.message
            )),
            kube::Error::Api(status) => LeaseError::Unavailable(format!(
                "{verb} Lease {ns}/{name}: {} {}: {}",
                status.code, status.reason, status.message
            )),
            other => LeaseError::Unavailable(format!("{verb} Lease {ns}/{name}: {other}")),
        }
    }
}

impl LeaseTrait for KubernetesLease {
    fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn acquire(&self) -> LeaseFuture<'_, bool> {
        Box::pin(self.timed(self.try_acquire()))
    }

    fn release(&self) -> LeaseFuture<'_, bool> {
        Box::pin(self.timed(self.try_release()))
    }

    fn check_lease(&self) -> bool {
        let held_until = *self.held_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held_until.is_some_and(|until| self.now() < until)
    }
}

fn micro_time(time: SystemTime) -> MicroTime {
    MicroTime(Timestamp::try_from(time).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn object_name(lease_name: &str) -> String {
    let name: String = lease_name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .collect();
    let name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let name: String = name.chars().take(63).collect();
    let name = name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if name.is_empty() { "convoke-lease".to_owned() } else { name.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_become_valid_kubernetes_object_names() {
        assert_eq!(object_name("convoke-sbr"), "convoke-sbr");
        assert_eq!(object_name("My_System@SBR"), "my-system-sbr");
        assert_eq!(object_name("_x_"), "x");
        assert_eq!(object_name(&"a".repeat(80)).len(), 63);
        assert_eq!(object_name("___"), "convoke-lease");
    }
}
