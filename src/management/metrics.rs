//! `GET /metrics`: the node's metrics in the Prometheus text format ([`crate::metrics`]).

use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::AppState;
use crate::metrics::{RegionFigures, Scrape, SingletonFigures};

/// How long the driver and each shard region may take to report; one that takes longer is left
/// out of this scrape rather than delaying it.
const REPORT_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    let state = app.node.control.state();
    let is_leader = state.leader.as_ref() == Some(&app.node.self_node.address);
    let mut scrape = Scrape::of(state, is_leader);
    if let Ok(Ok(phi)) = tokio::time::timeout(REPORT_TIMEOUT, app.node.control.phi()).await {
        scrape.phi = phi;
    }
    if let Some(sharding) = &app.node.sharding {
        for name in sharding.type_names() {
            let report = tokio::time::timeout(REPORT_TIMEOUT, sharding.report(&name)).await;
            if let Ok(Some(report)) = report {
                scrape.regions.push(RegionFigures {
                    entity_type: name,
                    shards: report.shards.len(),
                    entities: report.shards.iter().map(|s| s.num_entities).sum(),
                    coordinator_here: report.coordinator.is_some(),
                });
            }
        }
    }
    scrape.singletons = app
        .node
        .singletons
        .list()
        .into_iter()
        .map(|s| SingletonFigures { name: s.name, running_here: s.running_here })
        .collect();
    (
        [(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        app.node.metrics.render(&scrape),
    )
}
