//! The runtime side of the lease-majority strategy: the lease the core's requests are performed
//! on (a Kubernetes `Lease` object), off the driver task, and the renewal of a held lease.
//!
//! The core emits a [`LeaseRequest`] and waits for its answer, holding back other inputs. The
//! driver hands each request to [`LeaseRuntime::request`]: a check is answered at once from the
//! lease's own belief; an acquire or release goes to one worker task, which performs the
//! operations one at a time (so a renewal and a release never race), each bounded by
//! `lease_operation_timeout`, and sends the answer back on a channel of its own, which the driver
//! reads through [`LeaseRuntime::answer`]. An error or a timeout answers `false`.
//!
//! A lease has no renewal of its own: while this node holds it, the driver asks the worker to
//! acquire it again every `heartbeat_interval` ([`LeaseRuntime::next_renewal`]), until the core
//! releases it or a renewal fails.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use convoke_membership::UniqueAddress;
use convoke_membership::sbr::{Lease, LeaseOp, LeaseRequest};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::settings::{Settings, SettingsError};

/// What the lease worker performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseJob {
    /// A request of the core; its answer goes back to the core.
    Core(LeaseOp),
    /// A renewal of the held lease; its answer stays in the runtime.
    Renew,
}

/// The outcome of one [`LeaseJob`], sent to the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseAnswer {
    pub(crate) job: LeaseJob,
    pub(crate) granted: bool,
}

/// The lease of one node and what the driver knows about it.
pub(crate) struct LeaseRuntime {
    lease: Arc<dyn Lease>,
    operation_timeout: Duration,
    heartbeat_interval: Duration,
    jobs: Option<mpsc::UnboundedSender<LeaseJob>>,
    answers: Option<mpsc::UnboundedReceiver<LeaseAnswer>>,
    /// Whether this node holds the lease and keeps renewing it.
    held: bool,
    next_renewal: Option<Instant>,
}

impl fmt::Debug for LeaseRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRuntime")
            .field("lease", &self.lease)
            .field("held", &self.held)
            .field("next_renewal", &self.next_renewal)
            .finish_non_exhaustive()
    }
}

impl LeaseRuntime {
    /// The lease of `self_node` when the strategy is lease-majority, `None` otherwise. Builds the
    /// Kubernetes API client, so it must be called inside a tokio runtime.
    ///
    /// # Errors
    /// A lease setting that cannot be used (no API server URL outside a pod, a missing CA or
    /// token file), named by its key.
    pub(crate) fn from_settings(
        settings: &Settings,
        self_node: &UniqueAddress,
    ) -> Result<Option<Self>, SettingsError> {
        let sbr = &settings.cluster.core.split_brain_resolver;
        if sbr.active_strategy != "lease-majority" {
            return Ok(None);
        }
        let lease = kubernetes::lease(settings, self_node)?;
        let l = &sbr.lease_majority;
        Ok(Some(Self::new(lease, l.lease_operation_timeout, l.heartbeat_interval)))
    }

    /// A runtime for `lease`. Nothing runs until [`start`](Self::start).
    pub(crate) fn new(
        lease: Arc<dyn Lease>,
        operation_timeout: Duration,
        heartbeat_interval: Duration,
    ) -> Self {
        Self {
            lease,
            operation_timeout,
            heartbeat_interval,
            jobs: None,
            answers: None,
            held: false,
            next_renewal: None,
        }
    }

    /// Starts the worker. It stops when this runtime is dropped.
    pub(crate) fn start(&mut self) {
        let (jobs, job_rx) = mpsc::unbounded_channel();
        let (answer_tx, answers) = mpsc::unbounded_channel();
        self.jobs = Some(jobs);
        self.answers = Some(answers);
        tokio::spawn(worker(self.lease.clone(), self.operation_timeout, job_rx, answer_tx));
    }

    /// The worker's next answer; pending for ever before [`start`](Self::start).
    pub(crate) async fn answer(&mut self) -> Option<LeaseAnswer> {
        match &mut self.answers {
            Some(answers) => answers.recv().await,
            None => std::future::pending().await,
        }
    }

    /// Takes a request of the core. A check is answered at once (`Some`), the others later
    /// through [`answer`](Self::answer).
    pub(crate) fn request(&mut self, req: &LeaseRequest) -> Option<bool> {
        let settings = self.lease.settings();
        if req.lease_name != settings.lease_name || req.owner != settings.owner_name {
            tracing::warn!(
                requested = %req.lease_name, owner = %req.owner,
                lease = %settings.lease_name, lease_owner = %settings.owner_name,
                "the split-brain resolver asks for a lease other than the configured one; using the configured one"
            );
        }
        match req.op {
            LeaseOp::Check => Some(self.lease.check_lease()),
            LeaseOp::Release => {
                // Stop renewing first: the worker runs jobs in order, so no renewal can follow.
                self.held = false;
                self.next_renewal = None;
                self.submit(LeaseJob::Core(LeaseOp::Release))
            }
            LeaseOp::Acquire => self.submit(LeaseJob::Core(LeaseOp::Acquire)),
        }
    }

    fn submit(&mut self, job: LeaseJob) -> Option<bool> {
        match &self.jobs {
            Some(jobs) if jobs.send(job).is_ok() => None,
            // No worker: the request cannot be performed, so it is refused.
            _ => Some(false),
        }
    }

    /// Takes the worker's answer; returns the core's operation and its answer when it was the
    /// core's request.
    pub(crate) fn answered(
        &mut self,
        answer: LeaseAnswer,
        now: Instant,
    ) -> Option<(LeaseOp, bool)> {
        let name = &self.lease.settings().lease_name;
        match answer.job {
            LeaseJob::Core(LeaseOp::Acquire) => {
                if answer.granted {
                    if !self.held {
                        tracing::info!(lease = %name, every = ?self.heartbeat_interval, "acquired the split-brain lease; renewing it");
                    }
                    self.held = true;
                    self.next_renewal = Some(now + self.heartbeat_interval);
                } else {
                    self.held = false;
                    self.next_renewal = None;
                    tracing::warn!(lease = %name, "the split-brain lease was not acquired (held by another node, or the lease store failed)");
                }
                Some((LeaseOp::Acquire, answer.granted))
            }
            LeaseJob::Core(op) => {
                if op == LeaseOp::Release {
                    tracing::info!(lease = %name, released = answer.granted, "released the split-brain lease");
                }
                Some((op, answer.granted))
            }
            LeaseJob::Renew => {
                if !self.held {
                    // Released meanwhile.
                } else if answer.granted {
                    tracing::debug!(lease = %name, "renewed the split-brain lease");
                    self.next_renewal = Some(now + self.heartbeat_interval);
                } else {
                    tracing::warn!(lease = %name, "could not renew the split-brain lease; it will expire");
                    self.held = false;
                    self.next_renewal = None;
                }
                None
            }
        }
    }

    /// When the held lease is to be renewed next, if it is held.
    pub(crate) fn next_renewal(&self) -> Option<Instant> {
        self.next_renewal
    }

    /// The renewal is due: ask the worker to acquire the lease again.
    pub(crate) fn renew(&mut self) {
        // The next renewal is scheduled when this one is answered.
        self.next_renewal = None;
        if self.held && self.submit(LeaseJob::Renew).is_some() {
            self.held = false;
        }
    }

    /// The node stops: give a held lease up at once rather than let it expire, so that the rest
    /// of the cluster is not left without one for `heartbeat_timeout`.
    pub(crate) async fn release_on_stop(&mut self) {
        if !std::mem::take(&mut self.held) {
            return;
        }
        self.next_renewal = None;
        let released = tokio::time::timeout(self.operation_timeout, self.lease.release()).await;
        let name = &self.lease.settings().lease_name;
        match released {
            Ok(Ok(released)) => {
                tracing::info!(lease = %name, released, "released the split-brain lease on stop")
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %name, %error, "could not release the split-brain lease on stop")
            }
            Err(_) => {
                tracing::warn!(lease = %name, "releasing the split-brain lease on stop timed out")
            }
        }
    }
}

async fn worker(
    lease: Arc<dyn Lease>,
    operation_timeout: Duration,
    mut jobs: mpsc::UnboundedReceiver<LeaseJob>,
    answers: mpsc::UnboundedSender<LeaseAnswer>,
) {
    while let Some(job) = jobs.recv().await {
        let op = match job {
            LeaseJob::Core(op) => op,
            LeaseJob::Renew => LeaseOp::Acquire,
        };
        let outcome = match op {
            LeaseOp::Acquire => tokio::time::timeout(operation_timeout, lease.acquire()).await,
            LeaseOp::Release => tokio::time::timeout(operation_timeout, lease.release()).await,
            LeaseOp::Check => Ok(Ok(lease.check_lease())),
        };
        let name = &lease.settings().lease_name;
        let granted = match outcome {
            Ok(Ok(granted)) => granted,
            Ok(Err(error)) => {
                tracing::warn!(lease = %name, %op, %error, "split-brain lease operation failed");
                false
            }
            Err(_) => {
                tracing::warn!(lease = %name, %op, timeout = ?operation_timeout, "split-brain lease operation timed out");
                false
            }
        };
        if answers.send(LeaseAnswer { job, granted }).is_err() {
            return;
        }
    }
}

#[cfg(feature = "kubernetes")]
mod kubernetes {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use convoke_discovery::kubernetes::{
        ApiServerSettings, KubernetesLease, SERVICE_HOST_ENV, SERVICE_PORT_ENV,
    };
    use convoke_membership::UniqueAddress;
    use convoke_membership::sbr::{Lease, LeaseSettings};

    use crate::settings::{Settings, SettingsError};

    const PREFIX: &str = "cluster.split_brain_resolver.lease_majority";

    /// The Kubernetes lease configured in `[cluster.split_brain_resolver.lease_majority]`, owned
    /// by `self_node`'s `host:port`.
    pub(super) fn lease(
        settings: &Settings,
        self_node: &UniqueAddress,
    ) -> Result<Arc<dyn Lease>, SettingsError> {
        let l = &settings.lease;
        let key = |k: &str| format!("{PREFIX}.{k}");
        let mut api = ApiServerSettings::in_cluster();
        if l.kubernetes_api_url.is_empty() {
            let set = |v: &str| std::env::var(v).is_ok_and(|v| !v.is_empty());
            if !(set(SERVICE_HOST_ENV) && set(SERVICE_PORT_ENV)) {
                return Err(SettingsError::new(
                    key("kubernetes_api_url"),
                    "\"\"",
                    "the URL of the Kubernetes API server, like \"https://10.96.0.1:443\", when \
                     not running in a pod (in a pod, KUBERNETES_SERVICE_HOST and \
                     KUBERNETES_SERVICE_PORT say where it is)",
                ));
            }
        } else {
            api = api.with_api_url(&l.kubernetes_api_url);
        }
        api = api
            .with_api_ca_path(existing_file(&key("kubernetes_ca_path"), &l.kubernetes_ca_path)?)
            .with_api_token_path(existing_file(
                &key("kubernetes_token_path"),
                &l.kubernetes_token_path,
            )?);
        if !l.kubernetes_namespace.is_empty() {
            api = api.with_namespace(&l.kubernetes_namespace);
        }
        let core = &settings.cluster.core;
        let lease = LeaseSettings::for_node(
            &core.split_brain_resolver.lease_majority,
            &core.system_name,
            self_node.address.host_port(),
        );
        let lease = KubernetesLease::from_api_settings(&api, lease).map_err(|e| {
            SettingsError::new(PREFIX, format!("{:?}", l.kubernetes_api_url), e.to_string())
        })?;
        tracing::info!(
            namespace = lease.namespace(),
            object = lease.object_name(),
            "split-brain resolver: lease-majority on a Kubernetes Lease"
        );
        Ok(Arc::new(lease))
    }

    fn existing_file(key: &str, path: &str) -> Result<Option<PathBuf>, SettingsError> {
        if path.is_empty() {
            return Ok(None);
        }
        if !Path::new(path).is_file() {
            return Err(SettingsError::new(
                key,
                format!("{path:?}"),
                "an existing file, or \"\" to go without",
            ));
        }
        Ok(Some(PathBuf::from(path)))
    }
}

#[cfg(not(feature = "kubernetes"))]
mod kubernetes {
    use std::sync::Arc;

    use convoke_membership::UniqueAddress;
    use convoke_membership::sbr::Lease;

    use crate::settings::{Settings, SettingsError};

    /// Without the `kubernetes` feature there is no lease; the settings refuse lease-majority.
    pub(super) fn lease(
        _settings: &Settings,
        _self_node: &UniqueAddress,
    ) -> Result<Arc<dyn Lease>, SettingsError> {
        Err(SettingsError::new(
            "cluster.split_brain_resolver.active_strategy",
            "\"lease-majority\"",
            "a strategy other than lease-majority: this build has no `kubernetes` feature",
        ))
    }
}
