//! `/ready` and `/alive`: plain-text health checks for Kubernetes probes (spec §2).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::AppState;

/// A user health check: resolves to `Ok(true)` when healthy, `Ok(false)` when not, `Err(why)`
/// when it could not tell.
pub type Check =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send>> + Send + Sync>;

/// User checks added to the built-in readiness and liveness checks. Cheap to clone; all clones
/// share the same lists, so checks can be added while the server runs.
#[derive(Clone, Default)]
pub struct HealthChecks {
    readiness: Arc<RwLock<Vec<(String, Check)>>>,
    liveness: Arc<RwLock<Vec<(String, Check)>>>,
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
            .finish()
    }
}

impl HealthChecks {
    /// Adds a readiness check named `name`.
    pub fn add_readiness<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, String>> + Send + 'static,
    {
        let check: Check = Arc::new(move || Box::pin(check()));
        self.readiness.write().expect("health checks lock").push((name.into(), check));
    }

    /// Adds a liveness check named `name`.
    pub fn add_liveness<F, Fut>(&self, name: impl Into<String>, check: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool, String>> + Send + 'static,
    {
        let check: Check = Arc::new(move || Box::pin(check()));
        self.liveness.write().expect("health checks lock").push((name.into(), check));
    }

    fn list(l: &RwLock<Vec<(String, Check)>>) -> Vec<(String, Check)> {
        l.read().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Runs `checks` in parallel, each with its own timeout; the first failure in list order wins.
async fn run(checks: Vec<(String, Check)>, timeout: Duration) -> Result<(), String> {
    let results = futures::future::join_all(checks.iter().map(|(name, check)| {
        let fut = check();
        async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(true)) => Ok(()),
                Ok(Ok(false)) => Err(format!("Not Healthy: Check [{name}] not ok")),
                Ok(Err(why)) => Err(format!("Health Check Failed: Check [{name}] failed: {why}")),
                Err(_) => {
                    Err(format!("Health Check Failed: Check [{name}] timed out after {timeout:?}"))
                }
            }
        }
    }))
    .await;
    results.into_iter().collect()
}

fn answer(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "OK".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

pub(super) async fn ready(State(app): State<AppState>) -> impl IntoResponse {
    let status = app.node.self_status();
    let ready = &app.settings.health_checks.ready_states;
    if !ready.iter().any(|s| s == status.name()) {
        return answer(Err(format!(
            "Not Healthy: Check [cluster-membership] not ok: this member is {status}; ready states are {}",
            ready.join(", ")
        )));
    }
    let timeout = app.settings.health_checks.check_timeout.0;
    answer(run(HealthChecks::list(&app.checks.readiness), timeout).await)
}

pub(super) async fn alive(State(app): State<AppState>) -> impl IntoResponse {
    let timeout = app.settings.health_checks.check_timeout.0;
    if !app.node.ping(timeout).await {
        return answer(Err(format!(
            "Health Check Failed: Check [cluster-driver] timed out after {timeout:?} (the node's driver does not answer or has stopped)"
        )));
    }
    answer(run(HealthChecks::list(&app.checks.liveness), timeout).await)
}
