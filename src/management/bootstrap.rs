//! `/bootstrap/seed-nodes` (the contact-point route every node serves: other nodes' bootstrap
//! probes it to learn whether this node is in a cluster and who its seeds are) and
//! `/bootstrap/status` (what this node's bootstrap is doing and why).

use axum::Json;
use axum::extract::State;
use convoke_bootstrap::{SeedNodes, StatusView};
use convoke_membership::CurrentClusterState;

use super::AppState;

/// The seed nodes `state` advertises (see [`SeedNodes::advertised`]).
pub fn seed_nodes(state: &CurrentClusterState) -> SeedNodes {
    SeedNodes::advertised(state)
}

pub(super) async fn get_seed_nodes(State(app): State<AppState>) -> Json<SeedNodes> {
    let answer = seed_nodes(&app.node.control.state());
    tracing::debug!(seed_nodes = answer.seed_nodes.len(), "bootstrap request");
    Json(answer)
}

pub(super) async fn get_status(State(app): State<AppState>) -> Json<StatusView> {
    Json(app.node.bootstrap.borrow().view(tokio::time::Instant::now()))
}
