//! `/ready`, `/alive` and `/startup`: plain-text health checks for Kubernetes probes. The
//! built-in checks (this member's status is a ready state; the driver answers; the node has not
//! been outside a cluster past the join deadline) run first, then the user's ([`crate::health`]).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use super::AppState;
use crate::health::Unhealthy;

fn answer(result: Result<(), Unhealthy>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "OK".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
    }
}

pub(super) async fn ready(State(app): State<AppState>) -> impl IntoResponse {
    let status = app.node.control.self_status();
    let ready = &app.settings.health_checks.ready_states;
    if !ready.iter().any(|s| s == status.name()) {
        return answer(Err(Unhealthy::NotReadyStatus {
            status: status.to_string(),
            ready: ready.join(", "),
        }));
    }
    let checks = &app.settings.health_checks;
    let timeout = checks.check_timeout;
    let sharding = match &app.node.sharding {
        Some(s) if checks.sharding => s.unregistered(timeout).await,
        _ => Vec::new(),
    };
    let singletons =
        if checks.singletons { app.node.singletons.without_oldest() } else { Vec::new() };
    if !sharding.is_empty() || !singletons.is_empty() {
        return answer(Err(Unhealthy::NotServing { sharding, singletons }));
    }
    answer(app.node.health.ready(timeout).await)
}

pub(super) async fn alive(State(app): State<AppState>) -> impl IntoResponse {
    let timeout = app.settings.health_checks.check_timeout;
    if !app.node.control.ping(timeout).await {
        return answer(Err(Unhealthy::DriverUnresponsive { timeout }));
    }
    if let Err(why) = app.within_join_deadline() {
        return answer(Err(why));
    }
    answer(app.node.health.alive(timeout).await)
}

pub(super) async fn startup(State(app): State<AppState>) -> impl IntoResponse {
    let timeout = app.settings.health_checks.check_timeout;
    if !app.node.control.ping(timeout).await {
        return answer(Err(Unhealthy::DriverUnresponsive { timeout }));
    }
    answer(app.node.health.startup(timeout).await)
}

impl AppState {
    /// Fails once the node has been in no cluster for longer than
    /// `management.health_checks.join_deadline` since it started; logs that once.
    fn within_join_deadline(&self) -> Result<(), Unhealthy> {
        let Some(deadline) = self.settings.health_checks.join_deadline else { return Ok(()) };
        let waited = self.node.started_at.elapsed();
        if waited <= deadline || self.node.control.state().self_member().is_some() {
            return Ok(());
        }
        let why = Unhealthy::NotJoined { waited, deadline };
        if !self.join_deadline_logged.swap(true, Ordering::Relaxed) {
            let bootstrap = self.node.bootstrap.borrow();
            let reason = bootstrap.verdict.as_ref().map(|(_, v)| v.reason.clone());
            tracing::error!(
                phase = ?bootstrap.phase,
                bootstrap = reason.as_deref().unwrap_or("-"),
                "{why}; /alive now fails so that the node is restarted"
            );
        }
        Err(why)
    }
}
