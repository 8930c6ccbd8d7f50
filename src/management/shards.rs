//! `GET /cluster/shards`, `/cluster/shards/{name}` (Akka Management's formats) and
//! `/cluster/shards/{name}/stats` (every member's shards of one entity type).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};

use super::{ApiError, AppState};

/// How long the local region may take to report (Akka Management's fixed 5 s).
const REGION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long each member may take to answer the cluster-wide stats.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /cluster/shards`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardEntityTypeKeys {
    /// The entity types whose region on this node hosts shards (proxies are not listed).
    pub entity_type_keys: Vec<String>,
}

/// `GET /cluster/shards/{name}`: the shards of this node's region (despite the key's name).
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardRegionStats {
    /// One entry per shard hosted here.
    pub regions: Vec<ShardDetails>,
}

/// One shard.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardDetails {
    /// The shard's id.
    pub shard_id: String,
    /// Its running (or stopping) entities.
    pub num_entities: u64,
}

/// `GET /cluster/shards/{name}/stats`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClusterShardingStats {
    /// Every member that answered, with its shards.
    pub regions: Vec<MemberShards>,
    /// Members that did not answer in time, with the reason.
    pub failed: Vec<FailedMember>,
}

/// One member's shards.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberShards {
    /// The member's address.
    pub address: String,
    /// Its shards (none for a proxy).
    pub shards: Vec<ShardDetails>,
}

/// A member that did not answer.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailedMember {
    /// The member's address.
    pub address: String,
    /// Why.
    pub error: String,
}

fn not_started(name: &str) -> ApiError {
    ApiError::not_found(format!("Shard Region {name} is not started"))
}

/// `GET /cluster/shards`.
pub(super) async fn get_shards(State(state): State<AppState>) -> Json<ShardEntityTypeKeys> {
    let entity_type_keys =
        state.node.sharding.as_ref().map(crate::sharding::Sharding::type_names).unwrap_or_default();
    Json(ShardEntityTypeKeys { entity_type_keys })
}

/// `GET /cluster/shards/{name}`.
pub(super) async fn get_region(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ShardRegionStats>, ApiError> {
    let sharding = state.node.sharding.as_ref().ok_or_else(|| not_started(&name))?;
    if !sharding.type_names().contains(&name) {
        return Err(not_started(&name));
    }
    let report = tokio::time::timeout(REGION_TIMEOUT, sharding.report(&name))
        .await
        .map_err(|_| {
            ApiError::unavailable(format!("Shard Region {name} did not answer within 5 s"))
        })?
        .ok_or_else(|| not_started(&name))?;
    let regions = report
        .shards
        .into_iter()
        .map(|s| ShardDetails { shard_id: s.shard_id, num_entities: s.num_entities })
        .collect();
    Ok(Json(ShardRegionStats { regions }))
}

/// `GET /cluster/shards/{name}/stats`.
pub(super) async fn get_cluster_stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ClusterShardingStats>, ApiError> {
    let sharding = state.node.sharding.as_ref().ok_or_else(|| not_started(&name))?;
    let stats =
        sharding.cluster_stats(&name, MEMBER_TIMEOUT).await.ok_or_else(|| not_started(&name))?;
    let regions = stats
        .regions
        .into_iter()
        .map(|(address, shards)| MemberShards {
            address,
            shards: shards
                .into_iter()
                .map(|s| ShardDetails { shard_id: s.shard_id, num_entities: s.num_entities })
                .collect(),
        })
        .collect();
    let failed =
        stats.failed.into_iter().map(|(address, error)| FailedMember { address, error }).collect();
    Ok(Json(ClusterShardingStats { regions, failed }))
}
