//! `/bootstrap/seed-nodes` (the contact-point route every node serves: other nodes' bootstrap
//! probes it to learn whether this node is in a cluster and who its seeds are) and
//! `/bootstrap/status` (what this node's bootstrap is doing and why).

use axum::Json;
use axum::extract::State;
use convoke_bootstrap::{SeedNode, SeedNodes, StatusView};
use convoke_membership::{CurrentClusterState, MemberStatus};

use super::AppState;

/// At most this many seed nodes are advertised.
const MAX_SEED_NODES: usize = 5;

/// The seed nodes `state` advertises: reachable Up, WeaklyUp or Joining members, the first five
/// in address order; none when this node is not in a cluster.
pub fn seed_nodes(state: &CurrentClusterState) -> SeedNodes {
    let self_node = state.self_node.as_ref().map(|n| n.address.to_string()).unwrap_or_default();
    let in_cluster = state.self_node.as_ref().is_some_and(|me| {
        state.members.iter().any(|m| m.node() == me && m.status() != MemberStatus::Removed)
    });
    let mut seeds: Vec<SeedNode> = if in_cluster {
        state
            .members
            .iter()
            .filter(|m| {
                matches!(
                    m.status(),
                    MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
                )
            })
            .filter(|m| !state.unreachable.iter().any(|(u, _)| u.node() == m.node()))
            .map(|m| SeedNode {
                node: m.address().to_string(),
                node_uid: m.node().uid.signed(),
                status: m.status().name().to_owned(),
                roles: m.roles().iter().cloned().collect(),
            })
            .collect()
    } else {
        Vec::new()
    };
    seeds.sort_by(|a, b| a.node.cmp(&b.node));
    seeds.truncate(MAX_SEED_NODES);
    SeedNodes { self_node, seed_nodes: seeds }
}

pub(super) async fn get_seed_nodes(State(app): State<AppState>) -> Json<SeedNodes> {
    let answer = seed_nodes(&app.node.control.state());
    tracing::debug!(seed_nodes = answer.seed_nodes.len(), "bootstrap request");
    Json(answer)
}

pub(super) async fn get_status(State(app): State<AppState>) -> Json<StatusView> {
    Json(app.node.bootstrap.borrow().view(tokio::time::Instant::now()))
}
