//! `GET /metrics`: the node's metrics in the Prometheus text format ([`crate::metrics`]).

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::AppState;

pub(super) async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    let state = app.node.control.state();
    let is_leader = state.leader.as_ref() == Some(&app.node.self_node.address);
    (
        [(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        app.node.metrics.render(&state, is_leader),
    )
}
