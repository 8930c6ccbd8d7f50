//! Router tests with `oneshot` against an in-memory node: the real core and driver, with no
//! transport and no socket.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use convoke_membership::{Address, Cluster, MemberStatus, Uid};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::control::Termination;
use crate::settings::{AuthSettings, Settings};

/// Settings of a node without its own management server (the tests build the routes).
fn no_server() -> Settings {
    let mut s = Settings::default();
    s.management.enabled = false;
    s
}

/// A node that has not joined: its handle, built in memory.
fn unjoined(s: &Settings) -> Handle {
    let self_node = UniqueAddress::new(
        "convoke://convoke@127.0.0.1:25520".parse().unwrap(),
        Uid::new(7).unwrap(),
    );
    let now = tokio::time::Instant::now().into_std();
    let core =
        Cluster::new(s.core_config().unwrap(), self_node.clone(), now, crate::driver::wall_clock())
            .unwrap();
    let metrics = Metrics::default();
    let control = crate::driver::spawn(core, None, None, metrics.clone());
    let bootstrap = crate::bootstrap::start(s, None, &self_node.address, &control).unwrap();
    Handle {
        self_node,
        control,
        bootstrap,
        health: HealthChecks::default(),
        metrics,
        started_at: tokio::time::Instant::now(),
        singletons: Default::default(),
        sharding: None,
        data: crate::data::Data::disabled(),
    }
}

/// The calls these tests make on a node, on its handle.
trait TestNode {
    fn self_address(&self) -> &Address;
    fn self_node(&self) -> &UniqueAddress;
    fn health_checks(&self) -> &HealthChecks;
    fn self_status(&self) -> convoke_membership::MemberStatus;
    async fn stop(&self);
    async fn terminated(&self) -> Termination;
}

impl TestNode for Handle {
    fn self_address(&self) -> &Address {
        &self.self_node.address
    }

    fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    fn health_checks(&self) -> &HealthChecks {
        &self.health
    }

    fn self_status(&self) -> convoke_membership::MemberStatus {
        self.control.self_status()
    }

    async fn stop(&self) {
        self.control.stop().await;
    }

    async fn terminated(&self) -> Termination {
        self.control.terminated().await
    }
}

async fn node() -> Handle {
    let mut s = no_server();
    s.cluster.core.periodic_tasks_initial_delay = Duration::from_millis(50);
    s.cluster.core.leader_actions_interval = Duration::from_millis(50);
    let node = unjoined(&s);
    node.control.join(node.self_address().clone()).await.unwrap();
    let mut rx = node.control.watch();
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|s| {
            s.state
                .self_member()
                .is_some_and(|m| m.status() == convoke_membership::MemberStatus::Up)
        }),
    )
    .await
    .unwrap()
    .unwrap();
    node
}

fn settings(read_only: bool) -> ManagementSettings {
    ManagementSettings { read_only, ..ManagementSettings::default() }
}

/// Sends `body` (a urlencoded form, when not empty) with `auth` as the Authorization header.
pub(super) async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    body: &str,
    auth: Option<&str>,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if !body.is_empty() {
        req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    if let Some(a) = auth {
        req = req.header(header::AUTHORIZATION, a);
    }
    answer(router, req.body(Body::from(body.to_owned())).unwrap()).await
}

/// The status and body text of the answer to `req`; an empty text when the body does not end
/// within 5 s.
async fn answer(router: &Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
    let text = match bytes {
        Ok(Ok(b)) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        _ => String::new(),
    };
    (status, text)
}

fn message(text: &str) -> String {
    serde_json::from_str::<Message>(text)
        .map(|m| m.message)
        .unwrap_or_else(|_| format!("(not a message: {text})"))
}

#[tokio::test]
async fn get_members_reports_self_leader_oldest_and_roles() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let (status, text) = call(&router, "GET", "/cluster/members", "", None).await;
    assert_eq!(status, StatusCode::OK);
    let m: ClusterMembers = serde_json::from_str(&text).unwrap();
    let me = node.self_address().to_string();
    assert_eq!(m.self_node, me);
    assert_eq!(m.leader.as_deref(), Some(me.as_str()));
    assert_eq!(m.oldest.as_deref(), Some(me.as_str()));
    assert_eq!(m.oldest_per_role.get("dc-default"), Some(&me));
    assert_eq!(m.members.len(), 1);
    assert_eq!(m.members[0].status, "Up");
    assert_eq!(m.members[0].node_uid, node.self_node().uid.to_string());
    assert!(m.unreachable.is_empty());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["members"][0]["nodeUid"].is_string(), "nodeUid is a string");
    node.stop().await;
}

#[tokio::test]
async fn a_member_is_found_by_full_address_or_system_at_host_port_and_unknown_is_404() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let full = node.self_address().to_string();
    let short = full.trim_start_matches("convoke://").to_owned();
    for given in [full.clone(), short, full.replace("://", "%3A%2F%2F")] {
        let (status, text) =
            call(&router, "GET", &format!("/cluster/members/{given}"), "", None).await;
        assert_eq!(status, StatusCode::OK, "{given}: {text}");
        let m: ClusterMember = serde_json::from_str(&text).unwrap();
        assert_eq!(m.node, full);
    }
    let (status, text) = call(&router, "GET", "/cluster/members/convoke@nowhere:1", "", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message(&text), "Member [convoke@nowhere:1] not found");
    node.stop().await;
}

#[tokio::test]
async fn read_only_mode_answers_405_to_every_write_with_a_hint() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let me = node.self_address().to_string();
    for (method, uri, body) in [
        ("POST", "/cluster/members".to_owned(), "address=convoke://convoke@127.0.0.1:1"),
        ("PUT", format!("/cluster/members/{me}"), "operation=down"),
        ("DELETE", format!("/cluster/members/{me}"), ""),
        ("PUT", "/cluster/members/convoke@unknown:1".to_owned(), "operation=down"),
        ("PUT", "/cluster".to_owned(), "operation=prepare-for-full-shutdown"),
    ] {
        let (status, text) = call(&router, method, &uri, body, None).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert!(message(&text).contains("management.read_only = false"), "{text}");
    }
    assert_eq!(node.self_status(), convoke_membership::MemberStatus::Up);
    node.stop().await;
}

#[tokio::test]
async fn full_mode_validates_operations_and_members() {
    let node = node().await;
    let router = router(node.clone(), &settings(false));
    let me = node.self_address().to_string();
    let cases = [
        (
            "PUT",
            format!("/cluster/members/{me}"),
            "operation=join",
            StatusCode::BAD_REQUEST,
            "Operation not supported",
        ),
        (
            "PUT",
            format!("/cluster/members/{me}"),
            "",
            StatusCode::BAD_REQUEST,
            "Request is missing required form field 'operation'",
        ),
        (
            "PUT",
            "/cluster/members/convoke@unknown:1".to_owned(),
            "operation=down",
            StatusCode::NOT_FOUND,
            "Member [convoke@unknown:1] not found",
        ),
        (
            "DELETE",
            "/cluster/members/convoke@unknown:1".to_owned(),
            "",
            StatusCode::NOT_FOUND,
            "Member [convoke@unknown:1] not found",
        ),
        (
            "POST",
            "/cluster/members".to_owned(),
            "",
            StatusCode::BAD_REQUEST,
            "Request is missing required form field 'address'",
        ),
        (
            "POST",
            "/cluster/members".to_owned(),
            "address=not-an-address",
            StatusCode::BAD_REQUEST,
            "invalid address",
        ),
        (
            "PUT",
            "/cluster".to_owned(),
            "operation=explode",
            StatusCode::BAD_REQUEST,
            "Operation not supported",
        ),
        (
            "POST",
            "/cluster/members".to_owned(),
            "address=convoke://convoke@127.0.0.1:1",
            StatusCode::BAD_REQUEST,
            "already a member",
        ),
    ];
    for (method, uri, body, want, text_part) in cases {
        let (status, text) = call(&router, method, &uri, body, None).await;
        assert_eq!(status, want, "{method} {uri} {body}: {text}");
        assert!(message(&text).contains(text_part), "{method} {uri} {body}: {text}");
    }
    // Operations are case-insensitive and answered with a message.
    let (status, text) =
        call(&router, "PUT", "/cluster", "operation=Prepare-For-Full-Shutdown", None).await;
    assert_eq!(
        (status, message(&text)),
        (StatusCode::OK, "Preparing for full cluster shutdown".to_owned())
    );
    let (status, text) =
        call(&router, "PUT", &format!("/cluster/members/{me}"), "operation=LEAVE", None).await;
    assert_eq!((status, message(&text)), (StatusCode::OK, format!("Leaving {me}")));
    tokio::time::timeout(Duration::from_secs(30), node.terminated()).await.unwrap();
}

#[tokio::test]
async fn health_routes_answer_in_plain_text_and_user_checks_count() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    assert_eq!(call(&router, "GET", "/ready", "", None).await, (StatusCode::OK, "OK".to_owned()));
    assert_eq!(call(&router, "GET", "/alive", "", None).await, (StatusCode::OK, "OK".to_owned()));
    node.health_checks().add_readiness("warm-cache", || async { Ok(false) });
    node.health_checks().add_liveness("db", || async { Err("connection refused".into()) });
    let (status, text) = call(&router, "GET", "/ready", "", None).await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "Not Healthy: Check [warm-cache] not ok")
    );
    let (status, text) = call(&router, "GET", "/alive", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(text, "Health Check Failed: Check [db] failed: connection refused");
    node.stop().await;
    let (status, text) = call(&router, "GET", "/alive", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    let (status, text) = call(&router, "GET", "/ready", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
}

#[tokio::test]
async fn auth_protects_every_route_but_the_exempt_ones_also_under_a_base_path() {
    let node = node().await;
    let auth = AuthSettings { bearer_tokens: vec!["t0ken".into()], ..AuthSettings::default() };
    for base in ["", "/mgmt"] {
        let s = ManagementSettings {
            auth: Some(auth.clone()),
            base_path: base.into(),
            ..settings(false)
        };
        let router = router(node.clone(), &s);
        let exempt = [
            "/ready",
            "/alive",
            "/startup",
            "/bootstrap/seed-nodes",
            "/dashboard",
            "/dashboard/app.js",
            "/dashboard/app.css",
        ];
        for (method, path) in ROUTES.iter().filter(|(_, p)| !exempt.contains(p)) {
            let path = path.replace("{address}", "convoke@unknown:1");
            let (status, text) = call(&router, method, &format!("{base}{path}"), "", None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {base}{path}: {text}");
            let (status, _) =
                call(&router, method, &format!("{base}{path}"), "", Some("Bearer wrong")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {base}{path}");
        }
        for path in exempt {
            assert_eq!(
                call(&router, "GET", &format!("{base}{path}"), "", None).await.0,
                StatusCode::OK
            );
        }
        let (status, _) =
            call(&router, "GET", &format!("{base}/cluster/members"), "", Some("Bearer t0ken"))
                .await;
        assert_eq!(status, StatusCode::OK);
    }
    let open = router(node.clone(), &settings(true));
    assert_eq!(call(&open, "GET", "/cluster/members", "", None).await.0, StatusCode::OK);
    node.stop().await;
}

#[tokio::test]
async fn the_openapi_document_and_the_router_describe_the_same_routes() {
    let doc: serde_norway::Value = serde_norway::from_str(OPENAPI).unwrap();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_mapping().unwrap() {
        for (method, _) in item.as_mapping().unwrap() {
            let method = method.as_str().unwrap().to_ascii_uppercase();
            if method != "PARAMETERS" {
                documented.insert((method, path.as_str().unwrap().to_owned()));
            }
        }
    }
    let served: BTreeSet<(String, String)> =
        ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
    assert_eq!(documented, served, "openapi/openapi.yaml and ROUTES differ");

    // Every listed route is served: the answer is never the router's own 404 or 405.
    let node = node().await;
    let router = router(node.clone(), &settings(false));
    for (method, path) in ROUTES {
        let path = path.replace("{address}", "convoke@unknown:1");
        let body = if *method == "GET" { "" } else { "operation=none" };
        let (status, text) = call(&router, method, &path, body, None).await;
        assert_ne!(message(&text), "No such route", "{method} {path}");
        assert_ne!(message(&text), "Method not allowed on this route", "{method} {path}");
        assert!(
            status != StatusCode::NOT_FOUND
                || text.contains("Member [")
                || text.contains("Shard Region {name} is not started"),
            "{method} {path}: {status} {text}"
        );
    }
    // And nothing else is.
    let (status, text) = call(&router, "GET", "/cluster/nothing", "", None).await;
    assert_eq!((status, message(&text)), (StatusCode::NOT_FOUND, "No such route".to_owned()));
    let (status, _) = call(&router, "PATCH", "/cluster/members", "", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    node.stop().await;
}

#[tokio::test]
async fn domain_events_replay_the_state_with_the_type_filter() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let req =
        Request::builder().uri("/cluster/domain-events?type=MemberUp").body(Body::empty()).unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let frame =
        tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap().unwrap().unwrap();
    let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
    assert!(text.contains("event: MemberUp") || text.contains("event:MemberUp"), "{text}");
    assert!(text.contains("\"type\":\"MemberUp\""), "{text}");
    assert!(text.contains(&format!("\"longUid\":{}", node.self_node().uid)), "{text}");
    node.stop().await;
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let (status, text) = call(&router, "GET", "/metrics", "", None).await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        "convoke_members{status=\"Up\"} 1",
        "convoke_unreachable_members 0",
        "convoke_convergence 1",
        "convoke_is_leader 1",
        "convoke_heartbeat_round_trip_seconds",
        "convoke_dropped_frames_total",
        "convoke_self_status{status=\"Up\"} 1",
        "convoke_self_status{status=\"Joining\"} 0",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    // A family without series is left out: one node monitors nobody, has taken no decision and
    // runs no region or singleton (metrics::tests render them; .ci/operator-kit sees them live).
    for absent in ["convoke_member_phi", "convoke_sbr_decisions", "convoke_sharding_shards"] {
        assert!(!text.contains(absent), "{absent} without a series in\n{text}");
    }
    node.stop().await;
}

#[tokio::test]
async fn seed_nodes_are_empty_before_joining_and_list_self_with_a_numeric_uid_after() {
    let s = no_server();
    let alone = unjoined(&s);
    let router_alone = router(alone.clone(), &settings(true));
    let (status, text) = call(&router_alone, "GET", "/bootstrap/seed-nodes", "", None).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["selfNode"], alone.self_address().to_string());
    assert_eq!(v["seedNodes"], serde_json::json!([]));
    alone.stop().await;

    let node = node().await;
    let (status, text) =
        call(&router(node.clone(), &settings(true)), "GET", "/bootstrap/seed-nodes", "", None)
            .await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["seedNodes"][0]["node"], node.self_address().to_string());
    assert_eq!(v["seedNodes"][0]["nodeUid"], node.self_node().uid.signed());
    assert_eq!(v["seedNodes"][0]["status"], "Up");
    node.stop().await;
}

#[tokio::test]
async fn bootstrap_status_says_why_bootstrap_is_not_used() {
    let node = node().await;
    let (status, text) =
        call(&router(node.clone(), &settings(true)), "GET", "/bootstrap/status", "", None).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["phase"], "not-used");
    assert!(v["note"].as_str().unwrap().contains("management.enabled = false"), "{text}");
    node.stop().await;
}

#[tokio::test]
async fn an_idle_event_stream_sends_keep_alives_at_the_configured_interval() {
    let node = node().await;
    let mut s = settings(true);
    s.limits.event_keep_alive = Duration::from_millis(100);
    // No event passes this filter, so the first frame can only be a keep-alive comment; at the
    // default interval (10 s) none would come within the 5 s waited here.
    let req = Request::builder()
        .uri("/cluster/domain-events?type=MemberRemoved")
        .body(Body::empty())
        .unwrap();
    let resp = router(node.clone(), &s).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let frame =
        tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap().unwrap().unwrap();
    let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
    assert!(text.starts_with(':'), "a keep-alive comment: {text:?}");
    node.stop().await;
}

/// A `multipart/form-data` body with `fields`, as `curl -F name=value` sends it.
fn multipart(fields: &[(&str, &str)]) -> (String, String) {
    let boundary = "------------------------convoke0123456789";
    let mut body = String::new();
    for (name, value) in fields {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn call_with_type(
    router: &Router,
    method: &str,
    uri: &str,
    (content_type, body): (String, String),
) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap();
    answer(router, req).await
}

#[tokio::test]
async fn write_routes_take_multipart_forms_as_curl_f_sends_them() {
    let node = node().await;
    let router = router(node.clone(), &settings(false));
    let me = node.self_address().to_string();
    let path = format!("/cluster/members/{me}");
    let (status, text) =
        call_with_type(&router, "PUT", &path, multipart(&[("operation", "bogus")])).await;
    assert_eq!(
        (status, message(&text).as_str()),
        (StatusCode::BAD_REQUEST, "Operation not supported")
    );
    let (status, text) = call_with_type(&router, "PUT", &path, multipart(&[("other", "x")])).await;
    assert_eq!(
        (status, message(&text).as_str()),
        (StatusCode::BAD_REQUEST, "Request is missing required form field 'operation'")
    );
    let (status, text) = call_with_type(
        &router,
        "POST",
        "/cluster/members",
        multipart(&[("address", "not an address")]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let broken = ("multipart/form-data; boundary=xyz".to_owned(), "no parts here".to_owned());
    let (status, text) = call_with_type(&router, "PUT", &path, broken).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(message(&text).starts_with("The multipart form cannot be read"), "{text}");
    let (status, text) =
        call_with_type(&router, "PUT", &path, multipart(&[("operation", "Leave")])).await;
    assert_eq!((status, message(&text)), (StatusCode::OK, format!("Leaving {me}")));
    let mut rx = node.control.watch();
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|s| s.state.self_member().is_none_or(|m| m.status() != MemberStatus::Up)),
    )
    .await
    .expect("the multipart leave reached the node")
    .unwrap();
    node.stop().await;
}

#[tokio::test]
async fn oldest_per_role_is_an_empty_object_while_no_member_is_up() {
    let s = no_server();
    let alone = unjoined(&s);
    let (status, text) =
        call(&router(alone.clone(), &settings(true)), "GET", "/cluster/members", "", None).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["oldestPerRole"], serde_json::json!({}), "{text}");
    assert!(v.get("leader").is_none() && v.get("oldest").is_none(), "{text}");
    alone.stop().await;
}

#[tokio::test]
async fn startup_answers_while_the_driver_runs_and_runs_the_startup_checks() {
    let s = no_server();
    let node = unjoined(&s);
    let router = router(node.clone(), &settings(true));
    // Not joined yet: a startup probe passes (the process is up), readiness does not.
    assert_eq!(call(&router, "GET", "/startup", "", None).await, (StatusCode::OK, "OK".into()));
    assert_eq!(call(&router, "GET", "/ready", "", None).await.0, StatusCode::SERVICE_UNAVAILABLE);
    node.health.add_startup("migrations", || async { Ok(false) });
    assert_eq!(
        call(&router, "GET", "/startup", "", None).await,
        (StatusCode::SERVICE_UNAVAILABLE, "Not Healthy: Check [migrations] not ok".into())
    );
    node.stop().await;
    assert_eq!(call(&router, "GET", "/startup", "", None).await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn base_paths_and_probe_paths_are_taken_with_or_without_the_leading_slash() {
    let node = node().await;
    for base in ["mgmt", "/mgmt", "mgmt/", "/mgmt/"] {
        let mut s = ManagementSettings { base_path: base.into(), ..settings(true) };
        s.health_checks.readiness_path = "ready".into();
        s.health_checks.liveness_path = "/alive".into();
        s.health_checks.startup_path = "startup/".into();
        s.validate().unwrap();
        assert_eq!(s.route_prefix(), "/mgmt");
        let router = router(node.clone(), &s);
        for path in ["/mgmt/cluster/members", "/mgmt/ready", "/mgmt/alive", "/mgmt/startup"] {
            let (status, text) = call(&router, "GET", path, "", None).await;
            assert_eq!(status, StatusCode::OK, "base_path {base:?}: {path}: {text}");
        }
        assert_eq!(
            call(&router, "GET", "/cluster/members", "", None).await.0,
            StatusCode::NOT_FOUND
        );
    }
    for bad in ["/mg mt", "mgmt?x", "/a#b"] {
        let s = ManagementSettings { base_path: bad.into(), ..settings(true) };
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("management.base_path"), "{err}");
    }
    node.stop().await;
}

#[tokio::test]
async fn the_event_stream_ends_with_cluster_shutting_down_when_the_node_stops() {
    let node = node().await;
    let router = router(node.clone(), &settings(true));
    let req = Request::builder()
        .uri("/cluster/domain-events?type=ClusterShuttingDown")
        .body(Body::empty())
        .unwrap();
    let resp = router.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    node.stop().await;
    let bytes = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("the stream ends once the node has stopped")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let events: Vec<&str> = text.lines().filter(|l| l.starts_with("event:")).collect();
    assert_eq!(events, ["event: ClusterShuttingDown"], "{text}");
    assert!(text.contains(r#"data: {"type":"ClusterShuttingDown"}"#), "{text}");
}

#[tokio::test(start_paused = true)]
async fn alive_fails_once_the_node_has_been_in_no_cluster_past_the_join_deadline() {
    let s = no_server();
    let node = unjoined(&s);
    let deadline = s.management.health_checks.join_deadline.expect("on by default");
    let router = router(node.clone(), &settings(true));
    assert_eq!(call(&router, "GET", "/alive", "", None).await.0, StatusCode::OK);
    tokio::time::advance(deadline + Duration::from_secs(1)).await;
    let (status, text) = call(&router, "GET", "/alive", "", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("has not joined a cluster"), "{text}");
    assert!(text.contains("management.health_checks.join_deadline"), "{text}");

    let mut off = settings(true);
    off.health_checks.join_deadline = None;
    assert_eq!(
        call(&super::router(node.clone(), &off), "GET", "/alive", "", None).await.0,
        StatusCode::OK
    );

    // Once it is a member the deadline no longer matters.
    node.control.join(node.self_address().clone()).await.unwrap();
    let mut rx = node.control.watch();
    rx.wait_for(|s| s.state.self_member().is_some()).await.unwrap();
    assert_eq!(call(&router, "GET", "/alive", "", None).await.0, StatusCode::OK);
    node.stop().await;
}

#[tokio::test]
async fn the_dashboard_is_small_self_contained_cached_and_locked_to_this_node() {
    let node = node().await;
    let auth = AuthSettings { bearer_tokens: vec!["t0ken".into()], ..AuthSettings::default() };
    for (read_only, base) in [(true, ""), (false, "/mgmt")] {
        let s = ManagementSettings {
            auth: Some(auth.clone()),
            base_path: base.into(),
            ..settings(read_only)
        };
        let router = router(node.clone(), &s);
        let mut served = 0;
        for (path, content_type) in [
            ("/dashboard", "text/html; charset=utf-8"),
            ("/dashboard/app.js", "text/javascript; charset=utf-8"),
            ("/dashboard/app.css", "text/css; charset=utf-8"),
        ] {
            // Served without credentials: the page must load to ask for a token.
            let req = Request::builder().uri(format!("{base}{path}")).body(Body::empty()).unwrap();
            let resp = router.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{base}{path}");
            let h = resp.headers();
            assert_eq!(h[header::CONTENT_TYPE], content_type);
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            for directive in ["default-src 'none'", "script-src 'self'", "style-src 'self'"] {
                assert!(csp.contains(directive), "{csp}");
            }
            assert!(!csp.contains("unsafe-inline") && !csp.contains("http"), "{csp}");
            let etag = h[header::ETAG].clone();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            served += body.len();
            let text = String::from_utf8_lossy(&body);
            if path == "/dashboard" {
                assert!(text.contains(&format!("data-read-only=\"{read_only}\"")), "{text}");
                // No inline script, style or handler, and nothing from elsewhere.
                assert_eq!(text.matches("<script").count(), text.matches("<script src=").count());
                for banned in [" style=", " onclick=", " onload=", "http://", "https://", "//cdn"] {
                    assert!(!text.contains(banned), "{banned} in the page");
                }
            }
            let again = Request::builder()
                .uri(format!("{base}{path}"))
                .header(header::IF_NONE_MATCH, etag)
                .body(Body::empty())
                .unwrap();
            let resp = router.clone().oneshot(again).await.unwrap();
            assert_eq!(resp.status(), StatusCode::NOT_MODIFIED, "{base}{path}");
        }
        assert!(served <= 60 * 1024, "the dashboard is {served} bytes");
        // The built-in size, but for the read-only flag filled into the page.
        assert!(
            served.abs_diff(DASHBOARD_SIZE) <= 12,
            "{served} served, {DASHBOARD_SIZE} built in"
        );
        // The data it reads stays behind the credentials.
        let (status, _) = call(&router, "GET", &format!("{base}/cluster/members"), "", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    node.stop().await;
}

// --- Writes: refused unless read-only is off and, with [management.auth], authenticated --------

/// The routes that change something: every route of [`ROUTES`] (the list the OpenAPI document
/// and the router are checked against) that is not a GET. A write route added to the router is
/// listed there, and from then on every check below covers it.
fn write_routes() -> Vec<(&'static str, &'static str)> {
    let writes: Vec<_> = ROUTES.iter().copied().filter(|(method, _)| *method != "GET").collect();
    assert!(writes.len() >= 4, "the write routes of ROUTES: {writes:?}");
    writes
}

/// Each write route as requested: `{address}` filled with `address`, and also with a trailing
/// slash (the router serves `/cluster/members/` and `/cluster/` as well).
fn write_requests(address: &str) -> Vec<(&'static str, String)> {
    write_routes()
        .into_iter()
        .flat_map(|(method, template)| {
            let path = template.replace("{address}", address);
            [(method, path.clone()), (method, format!("{path}/"))]
        })
        .collect()
}

fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(credentials))
}

#[tokio::test]
async fn every_write_route_needs_credentials_when_auth_is_configured_and_writes_are_on() {
    let node = node().await;
    let me = node.self_address().to_string();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "f1le-token\n").unwrap();
    let auth = AuthSettings {
        bearer_tokens: vec!["t0ken".into()],
        bearer_token_files: vec![token_file.display().to_string()],
        basic: vec!["ops:pw".into()],
        ..AuthSettings::default()
    };
    // Had any of these reached its handler it would have downed this node, made it leave, or
    // answered 400 (already a member, operation not supported): never 401.
    let body = format!("operation=down&address={me}");
    let refused = [
        None,
        Some("Bearer wrong".to_owned()),
        Some("Bearer t0ken-and-more".to_owned()),
        Some("Bearer ".to_owned()),
        Some("t0ken".to_owned()),
        Some("Token t0ken".to_owned()),
        Some(basic("ops:wrong")),
        Some(basic("ops")),
        Some("Basic not-base64!".to_owned()),
    ];
    for base in ["", "/mgmt"] {
        let s = ManagementSettings {
            auth: Some(auth.clone()),
            base_path: base.into(),
            ..settings(false)
        };
        let router = router(node.clone(), &s);
        for (method, path) in write_requests(&me) {
            for credentials in &refused {
                let uri = format!("{base}{path}");
                let mut req = Request::builder()
                    .method(method)
                    .uri(&uri)
                    .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                if let Some(c) = credentials {
                    req = req.header(header::AUTHORIZATION, c);
                }
                let resp = router
                    .clone()
                    .oneshot(req.body(Body::from(body.clone())).unwrap())
                    .await
                    .unwrap();
                let (status, challenge) =
                    (resp.status(), resp.headers().get(header::WWW_AUTHENTICATE).cloned());
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} with {credentials:?}");
                assert!(challenge.is_some(), "{method} {uri}: 401 without WWW-Authenticate");
            }
        }
        // The test can fail: each kind of credential gets through to the handler, which answers
        // for the unknown member or the unusable form (and changes nothing).
        for (method, path) in write_requests("convoke@unknown:1") {
            for credentials in ["Bearer t0ken", "Bearer f1le-token", &basic("ops:pw")] {
                let uri = format!("{base}{path}");
                let (status, text) = call(
                    &router,
                    method,
                    &uri,
                    "operation=none&address=nowhere",
                    Some(credentials),
                )
                .await;
                // The store does not run on this node: its handler answers so.
                let store_off = path.starts_with("/data/")
                    && status == StatusCode::SERVICE_UNAVAILABLE
                    && message(&text).contains("data.enabled");
                assert!(
                    status == StatusCode::NOT_FOUND
                        || status == StatusCode::BAD_REQUEST
                        || store_off,
                    "{method} {uri} with {credentials}: {status} {text}"
                );
                assert!(!message(&text).contains("read_only"), "{text}");
            }
        }
    }
    let state = node.control.state();
    assert_eq!(node.self_status(), MemberStatus::Up, "a refused write changed nothing");
    assert_eq!(state.members.len(), 1);
    node.stop().await;
}

#[tokio::test]
async fn exempt_paths_never_open_a_write() {
    let node = node().await;
    let me = node.self_address().to_string();
    // An operator who exempts every path, say to let monitoring read the members without a token,
    // still needs credentials to change the cluster.
    let exempt: Vec<String> = ROUTES
        .iter()
        .map(|(_, template)| template.replace("{address}", &me))
        .flat_map(|path| [path.clone(), format!("{path}/")])
        .collect();
    let auth = AuthSettings {
        bearer_tokens: vec!["t0ken".into()],
        exempt_paths: exempt,
        ..AuthSettings::default()
    };
    let s = ManagementSettings { auth: Some(auth), ..settings(false) };
    let router = router(node.clone(), &s);
    let (status, text) = call(&router, "GET", &format!("/cluster/members/{me}"), "", None).await;
    assert_eq!(status, StatusCode::OK, "reads of an exempt path need no token: {text}");
    let body = format!("operation=down&address={me}");
    for (method, path) in write_requests(&me) {
        for credentials in [None, Some("Bearer wrong")] {
            let (status, text) = call(&router, method, &path, &body, credentials).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
        }
    }
    assert_eq!(node.self_status(), MemberStatus::Up, "a refused write changed nothing");
    node.stop().await;
}

#[tokio::test]
async fn every_write_route_is_refused_in_read_only_mode_even_with_valid_credentials() {
    let node = node().await;
    let me = node.self_address().to_string();
    let auth = AuthSettings { bearer_tokens: vec!["t0ken".into()], ..AuthSettings::default() };
    let body = format!("operation=down&address={me}");
    for base in ["", "/mgmt"] {
        let with_auth = ManagementSettings {
            auth: Some(auth.clone()),
            base_path: base.into(),
            ..settings(true)
        };
        let without_auth = ManagementSettings { base_path: base.into(), ..settings(true) };
        let with_auth = router(node.clone(), &with_auth);
        let without_auth = router(node.clone(), &without_auth);
        for (method, path) in write_requests(&me) {
            let uri = format!("{base}{path}");
            for (router, credentials) in [(&with_auth, Some("Bearer t0ken")), (&without_auth, None)]
            {
                let (status, text) = call(router, method, &uri, &body, credentials).await;
                assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}: {text}");
                assert!(message(&text).contains("management.read_only = false"), "{text}");
            }
            // Without credentials the answer is 401 before read-only is even considered.
            let (status, text) = call(&with_auth, method, &uri, &body, None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}: {text}");
        }
    }
    assert_eq!(node.self_status(), MemberStatus::Up, "a refused write changed nothing");
    node.stop().await;
}

#[tokio::test]
async fn the_router_serves_no_method_that_routes_does_not_list() {
    // So that a write added to a listed path without a ROUTES entry (and so without the checks
    // above) fails here: every other method on a listed path is the router's own 405.
    let node = node().await;
    let router = router(node.clone(), &settings(false));
    let mut paths: Vec<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    paths.dedup();
    for template in paths {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if ROUTES.contains(&(method, template)) {
                continue;
            }
            let path = template.replace("{address}", "convoke@unknown:1");
            let (status, text) = call(&router, method, &path, "operation=none", None).await;
            assert_eq!(
                (status, message(&text).as_str()),
                (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed on this route"),
                "{method} {path} is served but not in ROUTES"
            );
        }
    }
    node.stop().await;
}
