//! `GET /cluster/domain-events`: cluster events as server-sent events, with Akka Management's
//! event names and JSON, filtered by `?type=`.

use std::collections::BTreeSet;
use std::convert::Infallible;

use axum::extract::{RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use convoke_membership::{ClusterEvent, Member};
use futures::Stream;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use crate::control::RecvError;

const MEMBER_EVENTS: [&str; 9] = [
    "MemberJoined",
    "MemberWeaklyUp",
    "MemberUp",
    "MemberLeft",
    "MemberExited",
    "MemberDowned",
    "MemberRemoved",
    "MemberPreparingForShutdown",
    "MemberReadyForShutdown",
];
const REACHABILITY_EVENTS: [&str; 2] = ["UnreachableMember", "ReachableMember"];
const OTHER_EVENTS: [&str; 3] = ["LeaderChanged", "RoleLeaderChanged", "ClusterShuttingDown"];

/// The event types a `type` filter value selects; unknown names select nothing.
fn expand(name: &str) -> Vec<&'static str> {
    let all = MEMBER_EVENTS.iter().chain(&REACHABILITY_EVENTS).chain(&OTHER_EVENTS);
    match name {
        "ClusterDomainEvent" => all.copied().collect(),
        "MemberEvent" => MEMBER_EVENTS.to_vec(),
        "ReachabilityEvent" => REACHABILITY_EVENTS.to_vec(),
        other => all.copied().filter(|n| *n == other).collect(),
    }
}

fn member_json(m: &Member) -> Value {
    json!({
        "dataCenter": m.data_center(),
        "roles": m.roles(),
        "status": m.status().name(),
        "uniqueAddress": { "address": m.address().to_string(), "longUid": m.node().uid.signed() },
    })
}

/// The JSON payload of one event: `type` plus the fields Akka Management sends for it.
pub fn event_json(e: &ClusterEvent) -> Value {
    let mut v = match e {
        ClusterEvent::MemberRemoved { member, previous_status } => {
            json!({ "member": member_json(member), "previousStatus": previous_status.name() })
        }
        ClusterEvent::LeaderChanged(leader) => match leader {
            Some(a) => json!({ "address": a.to_string() }),
            None => json!({}),
        },
        ClusterEvent::RoleLeaderChanged { role, leader } => match leader {
            Some(a) => json!({ "role": role, "address": a.to_string() }),
            None => json!({ "role": role }),
        },
        other => match other.member() {
            Some(m) => json!({ "member": member_json(m) }),
            None => json!({}),
        },
    };
    v["type"] = Value::from(e.type_name());
    v
}

pub(super) async fn domain_events(
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
) -> Response {
    let pairs: Vec<(String, String)> = query
        .as_deref()
        .map(|q| serde_urlencoded::from_str(q).unwrap_or_default())
        .unwrap_or_default();
    let requested: Vec<&str> =
        pairs.iter().filter(|(k, _)| k == "type").map(|(_, v)| v.as_str()).collect();
    let wanted: BTreeSet<&'static str> = if requested.is_empty() {
        expand("ClusterDomainEvent").into_iter().collect()
    } else {
        requested.iter().flat_map(|n| expand(n)).collect()
    };
    let Ok(permit) = app.event_clients.clone().try_acquire_owned() else {
        return ApiError::too_many_streams().into_response();
    };
    let Ok(mut subscription) = app.node.control.subscribe().await else {
        return ApiError::node_stopped().into_response();
    };
    let buffer = app.settings.limits.event_buffer;
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(buffer);
    // The forwarder drains the node's broadcast quickly; a client that cannot keep up fills its
    // own buffer and is cut off, so it never holds the node back.
    tokio::spawn(async move {
        let _permit = permit;
        loop {
            let e = match subscription.recv().await {
                Ok(e) => e,
                Err(RecvError::Lagged(_) | RecvError::Closed) => return,
            };
            if !wanted.contains(e.type_name()) {
                continue;
            }
            let event = Event::default().event(e.type_name()).data(event_json(&e).to_string());
            if tx.try_send(event).is_err() {
                tracing::info!(
                    "event-stream client too slow (management.limits.event_buffer); disconnecting it"
                );
                return;
            }
        }
    });
    let stream = tokio_stream(rx);
    let keep_alive = KeepAlive::new().interval(app.settings.limits.event_keep_alive);
    Sse::new(stream).keep_alive(keep_alive).into_response()
}

fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<Event>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_expand_to_event_types() {
        assert_eq!(expand("MemberEvent").len(), 9);
        assert_eq!(expand("ReachabilityEvent"), ["UnreachableMember", "ReachableMember"]);
        assert_eq!(expand("MemberUp"), ["MemberUp"]);
        assert!(expand("NoSuchEvent").is_empty());
        assert_eq!(expand("ClusterShuttingDown"), ["ClusterShuttingDown"]);
        assert_eq!(expand("ClusterDomainEvent").len(), 14);
    }
}
