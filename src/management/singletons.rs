//! `GET /cluster/singletons`: the singletons started on this node, as this node sees them.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::AppState;
use crate::singleton::epoch_millis;

/// `GET /cluster/singletons`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSingletons {
    /// This node's address.
    pub self_node: String,
    /// Every singleton started on this node, by name.
    pub singletons: Vec<ClusterSingleton>,
}

/// One singleton.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSingleton {
    /// Its name.
    pub name: String,
    /// The role its hosts need; absent when any member may host it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub role: Option<String>,
    /// Where it runs or is about to run as this node sees it: the oldest Up or Leaving member
    /// with the role; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<String>,
    /// The host's incarnation uid, as a string.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host_uid: Option<String>,
    /// Whether its instance runs on this node now.
    pub running_here: bool,
    /// This node's manager's state: `idle`, `younger`, `becoming-oldest`,
    /// `waiting-for-removal`, `acquiring-lease`, `running`, `handing-over`, `was-oldest` or
    /// `stopped`.
    pub state: String,
    /// Since when (milliseconds since the Unix epoch) the manager has been in that state.
    pub since: u64,
}

/// `GET /cluster/singletons`.
pub(super) async fn get_singletons(State(state): State<AppState>) -> Json<ClusterSingletons> {
    let singletons = state
        .node
        .singletons
        .list()
        .into_iter()
        .map(|s| ClusterSingleton {
            name: s.name,
            role: s.role,
            host: s.oldest.as_ref().map(|o| o.address.to_string()),
            host_uid: s.oldest.as_ref().map(|o| o.uid.signed().to_string()),
            running_here: s.running_here,
            state: s.phase.as_str().to_owned(),
            since: epoch_millis(s.since),
        })
        .collect();
    Json(ClusterSingletons { self_node: state.node.self_node.address.to_string(), singletons })
}
