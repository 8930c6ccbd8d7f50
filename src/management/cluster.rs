//! `/cluster/members` and `/cluster`: the cluster routes and their JSON, in the shapes Akka
//! Management answers with (README, "Management API").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use convoke_membership::member::UpNumber;
use convoke_membership::{Address, CurrentClusterState, Member};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::{ApiError, Message};
use super::form::Form;
use crate::control::Snapshot;

/// `GET /cluster/members`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembers {
    /// This node's address.
    pub self_node: String,
    /// Every member, sorted by address text.
    pub members: Vec<ClusterMember>,
    /// Unreachable members with their observers, sorted by address text.
    pub unreachable: Vec<ClusterUnreachableMember>,
    /// The leader, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub leader: Option<String>,
    /// The oldest member whose status is Up or later, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub oldest: Option<String>,
    /// The oldest member whose status is Up or later, per role; always present (`{}` while no
    /// member is Up), as Akka sends it.
    #[serde(default)]
    pub oldest_per_role: BTreeMap<String, String>,
}

/// One member.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// Its address.
    pub node: String,
    /// Its incarnation uid, as a string.
    pub node_uid: String,
    /// Its status (`Up`, `WeaklyUp`, ...).
    pub status: String,
    /// Its roles, including `dc-<data center>`.
    pub roles: Vec<String>,
    /// Its up-number (lower is older) once it has been moved Up; not in Akka's JSON, which
    /// clients ignore as an unknown field.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub up_number: Option<u32>,
    /// Its `cluster.app_version` (`1.2.3`, `1.2.3-RC1`): shard allocation prefers the newest.
    /// Not in Akka's JSON; empty when read from a node that does not send it.
    #[serde(default)]
    pub app_version: String,
}

/// One unreachable member.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMember {
    /// Its address.
    pub node: String,
    /// The members that see it unreachable.
    pub observed_by: Vec<String>,
}

impl ClusterMember {
    fn of(m: &Member) -> Self {
        Self {
            node: m.address().to_string(),
            node_uid: m.node().uid.to_string(),
            status: m.status().name().to_owned(),
            roles: m.roles().iter().cloned().collect(),
            up_number: (m.up_number() != UpNumber::UNASSIGNED).then_some(m.up_number().0),
            app_version: m.app_version().as_str().to_owned(),
        }
    }
}

impl ClusterMembers {
    /// The JSON view of a snapshot.
    pub fn of(state: &CurrentClusterState) -> Self {
        let mut members: Vec<ClusterMember> = state.members.iter().map(ClusterMember::of).collect();
        members.sort_by(|a, b| a.node.cmp(&b.node));
        let mut unreachable: Vec<ClusterUnreachableMember> = state
            .unreachable
            .iter()
            .map(|(m, observers)| {
                let mut observed_by: Vec<String> =
                    observers.iter().map(|o| o.address.to_string()).collect();
                observed_by.sort();
                ClusterUnreachableMember { node: m.address().to_string(), observed_by }
            })
            .collect();
        unreachable.sort_by(|a, b| a.node.cmp(&b.node));
        Self {
            self_node: state.self_node.as_ref().map(|n| n.address.to_string()).unwrap_or_default(),
            members,
            unreachable,
            leader: state.leader.as_ref().map(ToString::to_string),
            oldest: state.oldest.as_ref().map(ToString::to_string),
            oldest_per_role: state
                .oldest_per_role
                .iter()
                .map(|(role, a)| (role.clone(), a.to_string()))
                .collect(),
        }
    }
}

/// Finds a member by its full address (`convoke://sys@host:port`) or `sys@host:port`.
pub fn find<'a>(state: &'a CurrentClusterState, given: &str) -> Option<&'a Member> {
    let given = given.trim_start_matches('/');
    state.members.iter().find(|m| {
        let full = m.address().to_string();
        full == given || full.strip_prefix("convoke://") == Some(given)
    })
}

/// The serialized `/cluster/members` body of one snapshot, kept until the next one: monitoring
/// polls the route far more often than the membership changes, so most requests cost a copy of a
/// reference rather than a table built and serialized.
#[derive(Debug, Default)]
pub(super) struct BodyCache {
    // Held weakly: a weak reference keeps its allocation, so no later snapshot takes its address.
    last: Mutex<Option<(Weak<Snapshot>, Bytes)>>,
}

impl BodyCache {
    fn body(&self, snapshot: &Arc<Snapshot>) -> Bytes {
        let last = || self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((s, body)) = last().as_ref()
            && std::ptr::eq(s.as_ptr(), Arc::as_ptr(snapshot))
        {
            return body.clone();
        }
        let body = Bytes::from(
            serde_json::to_vec(&ClusterMembers::of(&snapshot.state))
                .expect("the members view serializes"),
        );
        *last() = Some((Arc::downgrade(snapshot), body.clone()));
        body
    }
}

pub(super) async fn get_members(State(app): State<AppState>) -> Response {
    let body = app.members_body.body(&app.node.control.snapshot());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) async fn get_member(
    State(app): State<AppState>,
    Path(address): Path<String>,
) -> Result<Json<ClusterMember>, ApiError> {
    let state = app.node.control.state();
    find(&state, &address)
        .map(|m| Json(ClusterMember::of(m)))
        .ok_or_else(|| ApiError::member_not_found(&address))
}

pub(super) async fn post_members(
    State(app): State<AppState>,
    form: Result<Form, ApiError>,
) -> Result<Json<Message>, ApiError> {
    app.writable()?;
    let form = form?;
    let text = form.field("address")?;
    let address: Address = text
        .parse()
        .map_err(|e: convoke_membership::AddressError| ApiError::bad_request(e.to_string()))?;
    app.node
        .control
        .join(address.clone())
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Message::new(format!("Joining {address}")))
}

pub(super) async fn delete_member(
    State(app): State<AppState>,
    Path(address): Path<String>,
) -> Result<Json<Message>, ApiError> {
    app.writable()?;
    let target = app.member_address(&address)?;
    app.node.control.leave(target.clone()).await.map_err(|_| ApiError::node_stopped())?;
    Ok(Message::new(format!("Leaving {target}")))
}

pub(super) async fn put_member(
    State(app): State<AppState>,
    Path(address): Path<String>,
    form: Result<Form, ApiError>,
) -> Result<Json<Message>, ApiError> {
    app.writable()?;
    let target = app.member_address(&address)?;
    match form?.field("operation")?.to_ascii_lowercase().as_str() {
        "down" => {
            app.node.control.down(target.clone()).await.map_err(|_| ApiError::node_stopped())?;
            Ok(Message::new(format!("Downing {target}")))
        }
        "leave" => {
            app.node.control.leave(target.clone()).await.map_err(|_| ApiError::node_stopped())?;
            Ok(Message::new(format!("Leaving {target}")))
        }
        _ => Err(ApiError::bad_request("Operation not supported")),
    }
}

pub(super) async fn put_cluster(
    State(app): State<AppState>,
    form: Result<Form, ApiError>,
) -> Result<Json<Message>, ApiError> {
    app.writable()?;
    if !form?.field("operation")?.eq_ignore_ascii_case("prepare-for-full-shutdown") {
        return Err(ApiError::bad_request("Operation not supported"));
    }
    app.node.control.prepare_for_full_shutdown().await.map_err(|_| ApiError::node_stopped())?;
    Ok(Message::new("Preparing for full cluster shutdown"))
}

impl AppState {
    pub(super) fn writable(&self) -> Result<(), ApiError> {
        if self.settings.read_only { Err(ApiError::read_only()) } else { Ok(()) }
    }

    fn member_address(&self, given: &str) -> Result<Address, ApiError> {
        let state = self.node.control.state();
        find(&state, given)
            .map(|m| m.address().clone())
            .ok_or_else(|| ApiError::member_not_found(given))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use convoke_membership::member::UpNumber;
    use convoke_membership::version::AppVersion;
    use convoke_membership::{Uid, UniqueAddress};

    use convoke_membership::MemberStatus;

    use super::*;

    fn node(text: &str, uid: u64) -> UniqueAddress {
        UniqueAddress::new(text.parse().unwrap(), Uid::new(uid).unwrap())
    }

    fn member(text: &str, uid: u64, up: u32, status: MemberStatus, roles: &[&str]) -> Member {
        let roles = roles.iter().map(|r| (*r).to_owned()).chain(["dc-default".to_owned()]);
        Member::from_parts(
            node(text, uid),
            UpNumber(up),
            status,
            roles.collect(),
            AppVersion::default(),
        )
    }

    fn state() -> CurrentClusterState {
        let a = member("convoke://Main@hostname.com:3311", 1, 1, MemberStatus::Up, &["frontend"]);
        let b = member("convoke://Main@[::1]:3311", 2, 2, MemberStatus::Up, &["backend"]);
        let c = member("convoke://Main@hostname.com:3312", 3, 3, MemberStatus::Up, &["backend"]);
        let d = member("convoke://Main@hostname.com:3313", 4, 0, MemberStatus::Joining, &[]);
        CurrentClusterState {
            self_node: Some(a.node().clone()),
            members: vec![a.clone(), b.clone(), c.clone(), d],
            unreachable: vec![(c.clone(), BTreeSet::from([b.node().clone(), a.node().clone()]))],
            leader: Some(a.address().clone()),
            // As the core computes them: the smallest up-number among Up-or-later members.
            oldest: Some(a.address().clone()),
            oldest_per_role: [("backend", &b), ("dc-default", &a), ("frontend", &a)]
                .into_iter()
                .map(|(role, m)| (role.to_owned(), m.address().clone()))
                .collect(),
            ..CurrentClusterState::default()
        }
    }

    #[test]
    fn members_json_lists_unreachable_members_with_their_observers_and_the_oldest_per_role() {
        let json = serde_json::to_value(ClusterMembers::of(&state())).unwrap();
        assert_eq!(json["selfNode"], "convoke://Main@hostname.com:3311");
        assert_eq!(json["leader"], "convoke://Main@hostname.com:3311");
        assert_eq!(json["oldest"], "convoke://Main@hostname.com:3311");
        assert_eq!(
            json["unreachable"],
            serde_json::json!([{
                "node": "convoke://Main@hostname.com:3312",
                "observedBy": ["convoke://Main@[::1]:3311", "convoke://Main@hostname.com:3311"],
            }])
        );
        assert_eq!(
            json["oldestPerRole"],
            serde_json::json!({
                "backend": "convoke://Main@[::1]:3311",
                "dc-default": "convoke://Main@hostname.com:3311",
                "frontend": "convoke://Main@hostname.com:3311",
            })
        );
        let joining = &json["members"].as_array().unwrap()[3];
        assert_eq!(joining["status"], "Joining");
        assert_eq!(joining["nodeUid"], "4");
    }

    #[test]
    fn a_member_is_found_by_full_or_short_address_including_ipv6() {
        let state = state();
        for given in [
            "convoke://Main@hostname.com:3311",
            "Main@hostname.com:3311",
            "convoke://Main@[::1]:3311",
            "Main@[::1]:3311",
        ] {
            let found = find(&state, given).unwrap_or_else(|| panic!("{given} not found"));
            assert_eq!(
                found.address().to_string().strip_prefix("convoke://"),
                given.strip_prefix("convoke://").or(Some(given))
            );
        }
        assert!(find(&state, "Main@[::2]:3311").is_none());
        assert!(find(&state, "Main@hostname.com:9999").is_none());
    }
}
