//! Compatibility with Akka/Pekko Management, case by case.
//!
//! The request/response cases of Pekko Management's own specs — the cluster-http routes spec, its
//! server-sent-event encoder spec, the health-check route and aggregation specs and the bootstrap
//! contact-point routes spec — restated as tests of convoke's router. Each test names the case it
//! restates. The cluster state the specs set up with a mocked cluster is served here by a
//! stand-in driver: a [`Control`] over a fixed snapshot whose commands are recorded, so the tests
//! see exactly what a route asked the node to do. Addresses use convoke's scheme
//! (`convoke://Main@hostname.com:3311` where the specs write `pekko://...`); everything else is
//! the specs' data. Where convoke answers differently on purpose (503 instead of 500 on a failed
//! health check, 405 on `PUT /cluster` in read-only mode, ...), the test says so and the README's
//! table of differences lists it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use convoke_membership::gossip::Gossip;
use convoke_membership::member::UpNumber;
use convoke_membership::version::AppVersion;
use convoke_membership::{
    Address, ClusterEvent, CurrentClusterState, Member, MemberStatus, Uid, UniqueAddress,
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tower::ServiceExt;

use super::tests::call;
use super::*;
use crate::control::{Command, Snapshot};

const M1: &str = "convoke://Main@hostname.com:3311";
const M2: &str = "convoke://Main@hostname2.com:3311";
const M3: &str = "convoke://Main@hostname3.com:3311";

/// A node with a uid as a JVM writes it (any signed 64-bit number but 0).
fn node(address: &str, uid: i64) -> UniqueAddress {
    UniqueAddress::new(address.parse().unwrap(), Uid::from_signed(uid).unwrap())
}

fn member(address: &str, uid: i64, up: u32, status: MemberStatus, roles: &[&str]) -> Member {
    versioned(address, uid, up, status, roles, "0.0.0")
}

fn versioned(
    address: &str,
    uid: i64,
    up: u32,
    status: MemberStatus,
    roles: &[&str],
    version: &str,
) -> Member {
    // Up-number 0 stands for "not assigned yet".
    let up = if up == 0 { UpNumber::UNASSIGNED } else { UpNumber(up) };
    Member::from_parts(
        node(address, uid),
        up,
        status,
        roles.iter().map(|r| (*r).to_owned()).collect(),
        AppVersion::parse(version),
    )
}

/// What a route asked the stand-in driver to do.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Join(String),
    Leave(String),
    Down(String),
    PrepareForFullShutdown,
}

/// A node whose driver serves `state` and records what it is asked.
struct StandIn {
    handle: Handle,
    asked: Arc<Mutex<Vec<Asked>>>,
    events: broadcast::Sender<ClusterEvent>,
}

impl StandIn {
    fn new(state: CurrentClusterState, initial_events: Vec<ClusterEvent>) -> Self {
        let self_node = state.self_node.clone().expect("the specs' states have a self node");
        let snapshot = Snapshot { state, gossip: Arc::new(Gossip::empty()) };
        let (_snapshots_tx, snapshots) = watch::channel(Arc::new(snapshot));
        let (_terminated_tx, terminated) = watch::channel(None);
        let (commands_tx, mut commands) = mpsc::channel::<Command>(16);
        let (events, _) = broadcast::channel(16);
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (log, sender) = (asked.clone(), events.clone());
        tokio::spawn(async move {
            // The channel ends live as long as the driver would.
            let _keep = (_snapshots_tx, _terminated_tx);
            while let Some(cmd) = commands.recv().await {
                let mut log = log.lock().unwrap();
                match cmd {
                    Command::Join(a, reply) => {
                        log.push(Asked::Join(a.to_string()));
                        let _ = reply.send(Ok(()));
                    }
                    Command::Leave(a) => log.push(Asked::Leave(a.to_string())),
                    Command::Down(a) => log.push(Asked::Down(a.to_string())),
                    Command::PrepareForFullShutdown => log.push(Asked::PrepareForFullShutdown),
                    Command::Subscribe(reply) => {
                        let _ = reply.send((initial_events.clone(), sender.subscribe()));
                    }
                    Command::Ping(reply) => {
                        let _ = reply.send(());
                    }
                    Command::Phi(reply) => {
                        let _ = reply.send(Vec::new());
                    }
                    Command::JoinSeedNodes(..) | Command::Stop => {}
                }
            }
        });
        let control = Control::new(commands_tx, snapshots, terminated);
        let (_, bootstrap) =
            watch::channel(convoke_bootstrap::BootstrapStatus::not_used("stand-in"));
        let handle = Handle {
            self_node,
            control,
            bootstrap,
            health: HealthChecks::default(),
            metrics: Metrics::default(),
            started_at: tokio::time::Instant::now(),
            singletons: Default::default(),
            sharding: None,
            data: crate::data::Data::disabled(),
        };
        Self { handle, asked, events }
    }

    fn router(&self, read_only: bool) -> Router {
        router(self.handle.clone(), &ManagementSettings { read_only, ..Default::default() })
    }

    /// What the routes asked since the last call. Commands are handled in order, so once a ping
    /// sent now is answered, every command sent before it has been recorded.
    async fn asked(&self) -> Vec<Asked> {
        assert!(self.handle.control.ping(Duration::from_secs(5)).await, "the stand-in answers");
        std::mem::take(&mut self.asked.lock().unwrap())
    }
}

/// Sends `form` (urlencoded, when not empty) as the specs do, without credentials.
async fn send(router: &Router, method: &str, uri: &str, form: &str) -> (StatusCode, String) {
    call(router, method, uri, form, None).await
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn msg(text: &str) -> Value {
    json!({ "message": text })
}

/// The state of the routes spec's "list of members with cluster leader and oldest" case.
fn members_state() -> CurrentClusterState {
    let m1 = member(M1, 1, 1, MemberStatus::Up, &["dc-one"]);
    let m2 = versioned(M2, 2, 0, MemberStatus::Joining, &["dc-one"], "1.2.3-RC1");
    let m3 = member(M3, 2, 3, MemberStatus::Up, &["dc-one"]);
    CurrentClusterState {
        self_node: Some(m1.node().clone()),
        members: vec![m1.clone(), m2.clone()],
        unreachable: vec![(m3, BTreeSet::from([m1.node().clone(), m2.node().clone()]))],
        leader: Some(m1.address().clone()),
        oldest: Some(m1.address().clone()),
        oldest_per_role: BTreeMap::from([("dc-one".to_owned(), m1.address().clone())]),
        ..CurrentClusterState::default()
    }
}

/// A cluster of one: `m`, which is this node.
fn only(m: Member) -> CurrentClusterState {
    CurrentClusterState {
        self_node: Some(m.node().clone()),
        members: vec![m],
        ..CurrentClusterState::default()
    }
}

/// The state of the routes spec's member cases: two Joining members without roles.
fn two_joining() -> CurrentClusterState {
    let m1 = member(M1, 1, 0, MemberStatus::Joining, &[]);
    let m2 = member(M2, 2, 0, MemberStatus::Joining, &[]);
    CurrentClusterState {
        self_node: Some(m1.node().clone()),
        members: vec![m1, m2],
        ..CurrentClusterState::default()
    }
}

// --- ClusterHttpManagementRoutesSpec -------------------------------------------------------------

#[tokio::test]
async fn routes_spec_get_members_with_leader_oldest_unreachable_and_oldest_per_role() {
    let node = StandIn::new(members_state(), vec![]);
    let (status, text) = send(&node.router(false), "GET", "/cluster/members", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json_of(&text),
        json!({
            "selfNode": M1,
            "members": [
                // upNumber and appVersion are convoke's additions to Akka's member JSON.
                { "node": M1, "nodeUid": "1", "status": "Up", "roles": ["dc-one"], "upNumber": 1,
                  "appVersion": "0.0.0" },
                { "node": M2, "nodeUid": "2", "status": "Joining", "roles": ["dc-one"],
                  "appVersion": "1.2.3-RC1" },
            ],
            "unreachable": [{ "node": M3, "observedBy": [M1, M2] }],
            "leader": M1,
            "oldest": M1,
            "oldestPerRole": { "dc-one": M1 },
        })
    );
}

#[tokio::test]
async fn routes_spec_post_members_joins_the_address_of_the_address_field() {
    let node = StandIn::new(two_joining(), vec![]);
    let router = node.router(false);
    for path in ["/cluster/members/", "/cluster/members"] {
        let (status, text) = send(&router, "POST", path, &format!("address={M3}")).await;
        assert_eq!((status, json_of(&text)), (StatusCode::OK, msg(&format!("Joining {M3}"))));
        assert_eq!(node.asked().await, [Asked::Join(M3.into())]);
    }
    // Pekko rejects a missing field with this text (as plain text; convoke answers JSON).
    let (status, text) = send(&router, "POST", "/cluster/members", "other=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json_of(&text), msg("Request is missing required form field 'address'"));
    // Pekko answers an address that does not parse with 500; convoke with 400 naming it.
    let (status, text) = send(&router, "POST", "/cluster/members", "address=nonsense").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(node.asked().await.is_empty());
}

#[tokio::test]
async fn routes_spec_get_member_by_full_or_short_address_including_ipv6() {
    for (address, given) in [
        (M1, M1.to_owned()),
        (M1, "Main@hostname.com:3311".to_owned()),
        ("convoke://Main@[::1]:3311", "Main@[::1]:3311".to_owned()),
        ("convoke://Main@[::1]:3311", "convoke://Main@[::1]:3311".to_owned()),
    ] {
        let m = member(address, 1, 0, MemberStatus::Joining, &[]);
        let state = only(m);
        let node = StandIn::new(state, vec![]);
        let (status, text) =
            send(&node.router(true), "GET", &format!("/cluster/members/{given}"), "").await;
        assert_eq!(status, StatusCode::OK, "{given}: {text}");
        assert_eq!(
            json_of(&text),
            json!({ "node": address, "nodeUid": "1", "status": "Joining", "roles": [],
                    "appVersion": "0.0.0" }),
            "{given}"
        );
    }
}

#[tokio::test]
async fn routes_spec_delete_and_put_leave_make_the_member_leave_under_either_spelling() {
    let node = StandIn::new(two_joining(), vec![]);
    let router = node.router(false);
    for given in [M1, "Main@hostname.com:3311"] {
        let path = format!("/cluster/members/{given}");
        for (method, form) in
            [("DELETE", ""), ("PUT", "operation=leave"), ("PUT", "operation=LEAVE")]
        {
            let (status, text) = send(&router, method, &path, form).await;
            assert_eq!(
                (status, json_of(&text)),
                (StatusCode::OK, msg(&format!("Leaving {M1}"))),
                "{method} {path} {form}"
            );
            assert_eq!(node.asked().await, [Asked::Leave(M1.into())]);
        }
    }
}

#[tokio::test]
async fn routes_spec_put_down_downs_the_member_under_either_spelling() {
    let node = StandIn::new(two_joining(), vec![]);
    let router = node.router(false);
    for given in [M1, "Main@hostname.com:3311"] {
        let path = format!("/cluster/members/{given}");
        let (status, text) = send(&router, "PUT", &path, "operation=down").await;
        assert_eq!((status, json_of(&text)), (StatusCode::OK, msg(&format!("Downing {M1}"))));
        assert_eq!(node.asked().await, [Asked::Down(M1.into())]);
    }
}

#[tokio::test]
async fn routes_spec_an_unknown_member_is_404_echoing_the_address_as_given() {
    let m1 = member(M1, 1, 0, MemberStatus::Joining, &[]);
    let state = only(m1);
    let node = StandIn::new(state, vec![]);
    let router = node.router(false);
    for given in ["convoke://Main2@hostname.com:3311", "Main2@hostname.com:3311"] {
        let path = format!("/cluster/members/{given}");
        // The member is looked up before the form is read: a missing or unknown operation on an
        // unknown member is still a 404.
        for form in ["operation=leave", "operation=down", "operation=unknown", ""] {
            let (status, text) = send(&router, "PUT", &path, form).await;
            assert_eq!(
                (status, json_of(&text)),
                (StatusCode::NOT_FOUND, msg(&format!("Member [{given}] not found"))),
                "PUT {path} {form:?}"
            );
        }
        for method in ["GET", "DELETE"] {
            let (status, text) = send(&router, method, &path, "").await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {text}");
        }
    }
    assert!(node.asked().await.is_empty());
}

#[tokio::test]
async fn routes_spec_an_unknown_operation_is_400_operation_not_supported() {
    let node = StandIn::new(two_joining(), vec![]);
    let router = node.router(false);
    for given in [M1, "Main@hostname.com:3311"] {
        // `join` is an operation Akka parses but does not perform on a member.
        for form in ["operation=unknown", "operation=join"] {
            let (status, text) =
                send(&router, "PUT", &format!("/cluster/members/{given}"), form).await;
            assert_eq!(
                (status, json_of(&text)),
                (StatusCode::BAD_REQUEST, msg("Operation not supported")),
                "{given} {form}"
            );
        }
    }
    assert!(node.asked().await.is_empty());
}

#[tokio::test]
async fn routes_spec_domain_events_replay_the_current_state_filtered_by_type() {
    let up = member(M1, 1, 1, MemberStatus::Up, &["dc-one"]);
    let mut state = members_state();
    state.members = vec![up.clone()];
    let node = StandIn::new(
        state,
        vec![ClusterEvent::MemberUp(up), ClusterEvent::LeaderChanged(Some(M1.parse().unwrap()))],
    );
    let req =
        Request::builder().uri("/cluster/domain-events?type=MemberUp").body(Body::empty()).unwrap();
    let resp = node.router(true).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = resp.into_body();
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the replayed state arrives at once")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
    assert!(text.contains("event: MemberUp"), "{text}");
    assert!(!text.contains("LeaderChanged"), "filtered out: {text}");
}

#[tokio::test]
async fn routes_spec_put_cluster_prepares_for_full_shutdown() {
    let node = StandIn::new(two_joining(), vec![]);
    let router = node.router(false);
    for path in ["/cluster", "/cluster/"] {
        let (status, text) =
            send(&router, "PUT", path, "operation=Prepare-For-Full-Shutdown").await;
        assert_eq!(
            (status, json_of(&text)),
            (StatusCode::OK, msg("Preparing for full cluster shutdown"))
        );
        assert_eq!(node.asked().await, [Asked::PrepareForFullShutdown]);
    }
    let (status, text) = send(&router, "PUT", "/cluster", "operation=down").await;
    assert_eq!((status, json_of(&text)), (StatusCode::BAD_REQUEST, msg("Operation not supported")));
    assert!(node.asked().await.is_empty());
}

// --- ClusterHttpManagementRouteProviderSpec: read-only and full route sets ----------------------

#[tokio::test]
async fn route_provider_spec_read_only_refuses_writes_with_405_and_still_reads() {
    let node = StandIn::new(two_joining(), vec![]);
    let read_only = node.router(true);
    assert_eq!(send(&read_only, "GET", "/cluster/members", "").await.0, StatusCode::OK);
    let (status, text) = send(&read_only, "GET", "/cluster/members/member1", "").await;
    assert_eq!(
        (status, json_of(&text)),
        (StatusCode::NOT_FOUND, msg("Member [member1] not found"))
    );
    for (method, path) in [
        ("POST", "/cluster/members"),
        ("DELETE", "/cluster/members/member1"),
        ("PUT", "/cluster/members/member1"),
        // Absent in Akka's read-only set (404); convoke serves it and refuses with 405 and a hint.
        ("PUT", "/cluster"),
    ] {
        let (status, text) = send(&read_only, method, path, "").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {text}");
        assert!(json_of(&text)["message"].as_str().unwrap().contains("management.read_only"));
    }
    let full = node.router(false);
    assert_eq!(send(&full, "GET", "/cluster/members", "").await.0, StatusCode::OK);
    for method in ["GET", "DELETE", "PUT"] {
        let (status, _) = send(&full, method, "/cluster/members/member1", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} on an unknown member, no form");
    }
    assert!(node.asked().await.is_empty());
}

// --- ClusterDomainEventServerSentEventEncoderSpec -------------------------------------------------

#[test]
fn sse_encoder_spec_member_events_carry_the_member_with_its_data_center_and_signed_uid() {
    // The spec's member has roles {one, two, dc-one}; convoke lists roles in sorted order.
    let roles = ["one", "two", "dc-one"];
    let member_json = |status: &str| {
        json!({
            "dataCenter": "one",
            "roles": ["dc-one", "one", "two"],
            "status": status,
            "uniqueAddress": { "address": M1, "longUid": 1 },
        })
    };
    let m = |status| member(M1, 1, 1, status, &roles);
    for (event, status) in [
        (ClusterEvent::MemberJoined(m(MemberStatus::Joining)), "Joining"),
        (ClusterEvent::MemberWeaklyUp(m(MemberStatus::WeaklyUp)), "WeaklyUp"),
        (ClusterEvent::MemberUp(m(MemberStatus::Up)), "Up"),
        (ClusterEvent::MemberLeft(m(MemberStatus::Leaving)), "Leaving"),
        (ClusterEvent::MemberExited(m(MemberStatus::Exiting)), "Exiting"),
        (ClusterEvent::MemberDowned(m(MemberStatus::Down)), "Down"),
        (ClusterEvent::UnreachableMember(m(MemberStatus::Up)), "Up"),
        (ClusterEvent::ReachableMember(m(MemberStatus::Up)), "Up"),
    ] {
        assert_eq!(
            event_json(&event),
            json!({ "member": member_json(status), "type": event.type_name() }),
            "{}",
            event.type_name()
        );
    }
    let removed = ClusterEvent::MemberRemoved {
        member: m(MemberStatus::Removed),
        previous_status: MemberStatus::Down,
    };
    assert_eq!(
        event_json(&removed),
        json!({ "member": member_json("Removed"), "previousStatus": "Down", "type": "MemberRemoved" })
    );
    // A Pekko uid is any signed 64-bit number; it is written as the signed number.
    let pekko_member = member(M1, -2_440_990_093_160_003_086, 1, MemberStatus::Up, &["dc-one"]);
    let v = event_json(&ClusterEvent::MemberUp(pekko_member));
    assert_eq!(v["member"]["uniqueAddress"]["longUid"], json!(-2_440_990_093_160_003_086_i64));
}

#[test]
fn sse_encoder_spec_leader_role_leader_and_shutting_down_events() {
    let a: Address = M1.parse().unwrap();
    assert_eq!(
        event_json(&ClusterEvent::LeaderChanged(Some(a.clone()))),
        json!({ "address": M1, "type": "LeaderChanged" })
    );
    assert_eq!(event_json(&ClusterEvent::LeaderChanged(None)), json!({ "type": "LeaderChanged" }));
    assert_eq!(
        event_json(&ClusterEvent::RoleLeaderChanged { role: "test-role".into(), leader: Some(a) }),
        json!({ "address": M1, "role": "test-role", "type": "RoleLeaderChanged" })
    );
    assert_eq!(
        event_json(&ClusterEvent::RoleLeaderChanged { role: "test-role".into(), leader: None }),
        json!({ "role": "test-role", "type": "RoleLeaderChanged" })
    );
    assert_eq!(
        event_json(&ClusterEvent::ClusterShuttingDown),
        json!({ "type": "ClusterShuttingDown" })
    );
}

#[tokio::test]
async fn sse_spec_filters_are_case_sensitive_and_unknown_names_select_nothing() {
    let up = member(M1, 1, 1, MemberStatus::Up, &["dc-one"]);
    let node = StandIn::new(members_state(), vec![ClusterEvent::MemberUp(up)]);
    let mut s = ManagementSettings::default();
    s.limits.event_keep_alive = Duration::from_millis(50);
    let router = router(node.handle.clone(), &s);
    // Unknown names (including the data-center reachability events convoke does not have) and
    // names in the wrong case are ignored: the stream opens and carries keep-alives only.
    for filter in ["memberup", "UnreachableDataCenter", "NoSuchEvent"] {
        let req = Request::builder()
            .uri(format!("/cluster/domain-events?type={filter}"))
            .body(Body::empty())
            .unwrap();
        let resp = router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{filter}");
        let mut body = resp.into_body();
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
        assert!(text.starts_with(':'), "{filter}: only a keep-alive, got {text:?}");
    }
    // ClusterShuttingDown is sent to a stream that asked for it, when the node stops.
    let req = Request::builder()
        .uri("/cluster/domain-events?type=ClusterShuttingDown")
        .body(Body::empty())
        .unwrap();
    let resp = router.oneshot(req).await.unwrap();
    let mut body = resp.into_body();
    node.events.send(ClusterEvent::ClusterShuttingDown).unwrap();
    let text = loop {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
        if !text.starts_with(':') {
            break text;
        }
    };
    assert!(text.contains("event: ClusterShuttingDown"), "{text}");
    assert!(text.contains(r#"data: {"type":"ClusterShuttingDown"}"#), "{text}");
}

// --- HealthCheckRoutesSpec and HealthChecksSpec ---------------------------------------------------

fn up_node() -> StandIn {
    let m1 = member(M1, 1, 1, MemberStatus::Up, &["dc-default"]);
    StandIn::new(only(m1), vec![])
}

const PROBES: [&str; 3] = ["/startup", "/ready", "/alive"];

/// Asserts that `/startup`, `/ready` and `/alive` all answer `status` with `body`.
async fn every_probe_answers(router: &Router, status: StatusCode, body: &str) {
    for path in PROBES {
        assert_eq!(send(router, "GET", path, "").await, (status, body.to_owned()), "{path}");
    }
}

#[tokio::test]
async fn health_routes_spec_succeed_with_200_ok_and_no_checks_is_healthy() {
    let node = up_node();
    let router = node.router(true);
    every_probe_answers(&router, StatusCode::OK, "OK").await;
    add_everywhere(&node.handle.health, "Ok", || async { Ok(true) });
    every_probe_answers(&router, StatusCode::OK, "OK").await;
}

/// Adds `check` as a startup, readiness and liveness check named `name`.
fn add_everywhere<F, Fut>(health: &HealthChecks, name: &str, check: F)
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<bool, crate::health::CheckError>> + Send + 'static,
{
    health.add_startup(name, check.clone());
    health.add_readiness(name, check.clone());
    health.add_liveness(name, check);
}

#[tokio::test]
async fn health_routes_spec_a_check_that_is_not_ok_fails_the_probe_naming_it() {
    let node = up_node();
    add_everywhere(&node.handle.health, "com.someclass.MyCheck", || async { Ok(false) });
    // Akka answers 500; convoke 503, the status a load balancer reads as "not now".
    let expected = "Not Healthy: Check [com.someclass.MyCheck] not ok";
    every_probe_answers(&node.router(true), StatusCode::SERVICE_UNAVAILABLE, expected).await;
}

#[tokio::test]
async fn health_routes_spec_a_check_that_fails_is_health_check_failed_with_its_message() {
    let node = up_node();
    add_everywhere(&node.handle.health, "Throws", || async { Err("darn it".into()) });
    let expected = "Health Check Failed: Check [Throws] failed: darn it";
    every_probe_answers(&node.router(true), StatusCode::SERVICE_UNAVAILABLE, expected).await;
}

#[tokio::test]
async fn health_checks_spec_a_failure_wins_over_not_ok_and_the_first_not_ok_is_reported() {
    let node = up_node();
    let health = &node.handle.health;
    add_everywhere(health, "Ok", || async { Ok(true) });
    add_everywhere(health, "False", || async { Ok(false) });
    add_everywhere(health, "AlsoFalse", || async { Ok(false) });
    let router = node.router(true);
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    every_probe_answers(&router, unavailable, "Not Healthy: Check [False] not ok").await;
    add_everywhere(health, "Throws", || async { Err("bad".into()) });
    let expected = "Health Check Failed: Check [Throws] failed: bad";
    every_probe_answers(&router, unavailable, expected).await;
}

#[tokio::test(start_paused = true)]
async fn health_checks_spec_a_slow_check_times_out_after_the_check_timeout() {
    let node = up_node();
    add_everywhere(&node.handle.health, "Slow", || async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(true)
    });
    add_everywhere(&node.handle.health, "Ok", || async { Ok(true) });
    let mut s = ManagementSettings::default();
    s.health_checks.check_timeout = Duration::from_millis(500);
    let router = router(node.handle.clone(), &s);
    let expected = "Health Check Failed: Check [Slow] timed out after 500 milliseconds";
    every_probe_answers(&router, StatusCode::SERVICE_UNAVAILABLE, expected).await;
    s.health_checks.check_timeout = Duration::from_secs(1);
    let (_, text) = send(&super::router(node.handle.clone(), &s), "GET", "/alive", "").await;
    assert_eq!(text, "Health Check Failed: Check [Slow] timed out after 1 second");
}

#[tokio::test]
async fn health_settings_spec_akka_style_paths_without_the_leading_slash() {
    let node = up_node();
    let mut s = ManagementSettings { base_path: "test".into(), ..Default::default() };
    s.health_checks.readiness_path = "ready".into();
    s.health_checks.liveness_path = "alive".into();
    s.health_checks.startup_path = "startup".into();
    let router = router(node.handle.clone(), &s);
    for path in ["/test/startup", "/test/ready", "/test/alive", "/test/bootstrap/seed-nodes"] {
        assert_eq!(send(&router, "GET", path, "").await.0, StatusCode::OK, "{path}");
    }
}

// --- HttpContactPointRoutesSpec and HttpBootstrapJsonProtocol --------------------------------------

#[tokio::test]
async fn contact_point_spec_seed_nodes_are_empty_outside_a_cluster() {
    let me = node(M1, 1);
    let node = StandIn::new(
        CurrentClusterState { self_node: Some(me), ..CurrentClusterState::default() },
        vec![],
    );
    let (status, text) = send(&node.router(true), "GET", "/bootstrap/seed-nodes", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains(r#""seedNodes":[]"#), "{text}");
    assert_eq!(json_of(&text)["selfNode"], M1);
}

#[tokio::test]
async fn contact_point_spec_seed_nodes_list_self_with_a_numeric_signed_uid_in_a_cluster() {
    let me = member(M1, -7_013_413_219_127_341_522, 1, MemberStatus::Up, &["dc-default"]);
    let node = StandIn::new(only(me), vec![]);
    let (status, text) = send(&node.router(true), "GET", "/bootstrap/seed-nodes", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json_of(&text),
        json!({
            "selfNode": M1,
            "seedNodes": [{
                "node": M1,
                "nodeUid": -7_013_413_219_127_341_522_i64,
                "status": "Up",
                "roles": ["dc-default"],
            }],
        })
    );
    let (status, _) = send(&node.router(true), "POST", "/bootstrap/seed-nodes", "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn bootstrap_json_protocol_a_pekko_contact_points_answer_parses_with_negative_uids() {
    // The shape a Pekko node answers `/bootstrap/seed-nodes` with (keys in its alphabetical
    // order, `pekko://` addresses, uids drawn from all 64 bits).
    let pekko = r#"{"seedNodes":[
        {"node":"pekko://System@10.0.0.1:7355","nodeUid":-2440990093160003086,"roles":["dc-default"],"status":"Up"},
        {"node":"pekko://System@10.0.0.2:7355","nodeUid":9223372036854775807,"roles":["dc-default","backend"],"status":"WeaklyUp"},
        {"node":"pekko://System@10.0.0.3:7355","nodeUid":-9223372036854775808,"roles":[],"status":"Joining"}
    ],"selfNode":"pekko://System@10.0.0.1:7355"}"#;
    let parsed: convoke_bootstrap::SeedNodes = serde_json::from_str(pekko).unwrap();
    assert_eq!(parsed.self_node, "pekko://System@10.0.0.1:7355");
    let uids: Vec<i64> = parsed.seed_nodes.iter().map(|s| s.node_uid).collect();
    assert_eq!(uids, [-2_440_990_093_160_003_086, i64::MAX, i64::MIN]);
    assert_eq!(parsed.seed_nodes[1].status, "WeaklyUp");
    // And back: what convoke serves reads in a JVM as a Long.
    let back = serde_json::to_value(&parsed).unwrap();
    assert_eq!(back["seedNodes"][0]["nodeUid"], json!(-2_440_990_093_160_003_086_i64));
}
