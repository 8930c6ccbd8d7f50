//! Health checks: the user's readiness and liveness checks, and how a list of them is run. The
//! management server answers `/ready` and `/alive` with [`HealthChecks::ready`] and
//! [`HealthChecks::alive`], after its own built-in checks.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Why a user check could not tell: any error (`"text".into()` makes one from a message, `?`
/// converts others).
pub type CheckError = Box<dyn std::error::Error + Send + Sync>;

/// A user health check: resolves to `Ok(true)` when healthy, `Ok(false)` when not, `Err(why)`
/// when it could not tell.
pub type Check =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<bool, CheckError>> + Send>> + Send + Sync>;

/// Why a health probe fails. Displays as the plain-text body the probe answers with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unhealthy {
    /// A check answered "not healthy".
    #[error("Not Healthy: Check [{name}] not ok")]
    NotOk {
        /// The check.
        name: String,
    },
    /// This member's status is not one of the ready states.
    #[error(
        "Not Healthy: Check [cluster-membership] not ok: this member is {status}; ready states are {ready}"
    )]
    NotReadyStatus {
        /// This member's status.
        status: String,
        /// The configured ready states, comma-separated.
        ready: String,
    },
    /// A check failed with an error.
    #[error("Health Check Failed: Check [{name}] failed: {source}")]
    Failed {
        /// The check.
        name: String,
        /// Its error.
        source: CheckError,
    },
    /// A check did not answer in time.
    #[error("Health Check Failed: Check [{name}] timed out after {}", spelled(*timeout))]
    TimedOut {
        /// The check.
        name: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// The node has been in no cluster for longer than
    /// `management.health_checks.join_deadline`.
    #[error(
        "Health Check Failed: Check [cluster-join-deadline] failed: this node has not joined a cluster in {waited:.0?} (management.health_checks.join_deadline = {deadline:?}); see /bootstrap/status"
    )]
    NotJoined {
        /// How long it has been waiting.
        waited: Duration,
        /// The deadline.
        deadline: Duration,
    },
    /// Entity types whose region has not been registered with a coordinator yet, singletons
    /// whose manager does not know the oldest member yet (each list may be empty, not both).
    #[error("{}", not_serving(sharding, singletons))]
    NotServing {
        /// The entity types.
        sharding: Vec<String>,
        /// The singletons.
        singletons: Vec<String>,
    },
    /// The driver did not answer a ping in time, or has stopped.
    #[error(
        "Health Check Failed: Check [cluster-driver] timed out after {} (the node's driver does not answer or has stopped)",
        spelled(*timeout)
    )]
    DriverUnresponsive {
        /// How long it was given.
        timeout: Duration,
    },
}

/// User checks added to the built-in readiness, liveness and startup checks. Cheap to clone; all
/// clones share the same lists, so checks can be added while the server runs.
#[derive(Clone, Default)]
pub struct HealthChecks {
    readiness: Arc<RwLock<Vec<(String, Check)>>>,
    liveness: Arc<RwLock<Vec<(String, Check)>>>,
    startup: Arc<RwLock<Vec<(String, Check)>>>,
}

impl std::fmt::Debug for HealthChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |l: &RwLock<Vec<(String, Check)>>| {
            l.read()
                .map(|v| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        f.debug_struct("HealthChecks")
            .field("readiness", &names(&self.readiness))
            .field("liveness", &names(&self.liveness))
            .field("startup", &names(&self.startup))
            .finish()
    }
}

impl HealthChecks {
    /// Adds a readiness check named `name`.
    pub fn add_readiness<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, CheckError>> + Send + 'static,
    {
        self.readiness.write().expect("health checks lock").push((name.into(), boxed(check)));
    }

    /// Adds a liveness check named `name`.
    pub fn add_liveness<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, CheckError>> + Send + 'static,
    {
        self.liveness.write().expect("health checks lock").push((name.into(), boxed(check)));
    }

    /// Adds a startup check named `name` (served at `/startup`, for a Kubernetes startup probe).
    pub fn add_startup<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, CheckError>> + Send + 'static,
    {
        self.startup.write().expect("health checks lock").push((name.into(), boxed(check)));
    }

    /// Runs the startup checks, each within `timeout`.
    ///
    /// # Errors
    /// The first failure in the order the checks were added.
    pub async fn startup(&self, timeout: Duration) -> Result<(), Unhealthy> {
        run(list(&self.startup), timeout).await
    }

    /// Runs the readiness checks, each within `timeout`.
    ///
    /// # Errors
    /// The first failure in the order the checks were added.
    pub async fn ready(&self, timeout: Duration) -> Result<(), Unhealthy> {
        run(list(&self.readiness), timeout).await
    }

    /// Runs the liveness checks, each within `timeout`.
    ///
    /// # Errors
    /// The first failure in the order the checks were added.
    pub async fn alive(&self, timeout: Duration) -> Result<(), Unhealthy> {
        run(list(&self.liveness), timeout).await
    }
}

fn boxed<F, Fut>(check: F) -> Check
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool, CheckError>> + Send + 'static,
{
    Arc::new(move || Box::pin(check()))
}

fn list(l: &RwLock<Vec<(String, Check)>>) -> Vec<(String, Check)> {
    l.read().map(|v| v.clone()).unwrap_or_default()
}

/// The text of [`Unhealthy::NotServing`]: one sentence per failing check, each named.
fn not_serving(sharding: &[String], singletons: &[String]) -> String {
    let mut parts = Vec::new();
    if !sharding.is_empty() {
        parts.push(format!(
            "Check [sharding] not ok: the region of {} has not been registered with its coordinator yet (management.health_checks.sharding)",
            sharding.join(", ")
        ));
    }
    if !singletons.is_empty() {
        parts.push(format!(
            "Check [singletons] not ok: the manager of {} does not know the oldest member yet (management.health_checks.singletons)",
            singletons.join(", ")
        ));
    }
    format!("Not Healthy: {}", parts.join("; "))
}

/// A duration as Akka writes one in health-check messages: `1 second`, `500 milliseconds`.
fn spelled(d: Duration) -> String {
    let (n, unit) = if d.subsec_nanos() == 0 {
        (u128::from(d.as_secs()), "second")
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        (d.as_millis(), "millisecond")
    } else {
        (d.as_nanos(), "nanosecond")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Runs `checks` in parallel, each with its own timeout. As in Akka, a check that failed or timed
/// out wins over one that answered "not healthy"; among those of one kind, the first in list
/// order wins.
async fn run(checks: Vec<(String, Check)>, timeout: Duration) -> Result<(), Unhealthy> {
    let results = futures::future::join_all(checks.iter().map(|(name, check)| {
        let fut = check();
        async move {
            let name = name.clone();
            match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) => Err(Unhealthy::NotOk { name }),
                Ok(Err(source)) => Err(Unhealthy::Failed { name, source }),
                Err(_) => Err(Unhealthy::TimedOut { name, timeout }),
            }
        }
    }))
    .await;
    let mut failures: Vec<Unhealthy> = results.into_iter().filter_map(Result::err).collect();
    match failures.iter().position(|f| !matches!(f, Unhealthy::NotOk { .. })) {
        Some(i) => Err(failures.swap_remove(i)),
        None if failures.is_empty() => Ok(()),
        None => Err(failures.swap_remove(0)),
    }
}
