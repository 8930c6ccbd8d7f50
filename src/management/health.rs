//! `/ready` and `/alive`: plain-text health checks for Kubernetes probes. The built-in checks
//! (this member's status is a ready state; the driver answers) run first, then the user's
//! ([`crate::health`]).

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
    let timeout = app.settings.health_checks.check_timeout;
    answer(app.node.health.ready(timeout).await)
}

pub(super) async fn alive(State(app): State<AppState>) -> impl IntoResponse {
    let timeout = app.settings.health_checks.check_timeout;
    if !app.node.control.ping(timeout).await {
        return answer(Err(Unhealthy::DriverUnresponsive { timeout }));
    }
    answer(app.node.health.alive(timeout).await)
}
