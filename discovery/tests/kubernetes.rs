//! Kubernetes API discovery: the real kube client against a stand-in API server (TLS, bearer
//! token) serving `PodList` fixtures.

use std::net::IpAddr;
use std::time::Duration;

use convoke_discovery::kubernetes::{KubernetesApiDiscovery, KubernetesSettings, POD_VERBS};
use convoke_discovery::testkit::FakeApiServer;
use convoke_discovery::{DiscoveryError, Lookup, ResolvedTarget, ServiceDiscovery};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(10);
const NAMESPACE: &str = "orders-ns";

fn pods_fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/pods.json")).unwrap()
}

fn target(ip: &str, port: Option<u16>) -> ResolvedTarget {
    ResolvedTarget::new(ip, port, Some(ip.parse::<IpAddr>().unwrap()))
}

/// A server with the fixture under `app=orders` in the namespace, and settings reaching it
/// (namespace read from the service-account style file).
async fn setup(dir: &tempfile::TempDir) -> (FakeApiServer, KubernetesSettings) {
    let server = FakeApiServer::start("token-1").await.unwrap();
    server.set_pods(NAMESPACE, "app=orders", pods_fixture());
    let api = server.client_settings(dir.path(), "token-1", NAMESPACE).unwrap();
    (server, KubernetesSettings::new(api))
}

#[tokio::test]
async fn running_pods_give_one_target_per_container_port_named_like_the_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, settings) = setup(&dir).await;
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();
    assert_eq!(discovery.namespace(), NAMESPACE);

    let lookup = Lookup::new("orders").with_port_name("management").with_protocol("tcp");
    let resolved = discovery.lookup(&lookup, TIMEOUT).await.unwrap();

    // a1: one container; b2: the app's and the sidecar's "management" ports; f6: its app
    // container waits, which only matters with container_name. c3 (Pending, no IP), d4
    // (deleting), e5 (no IP) and g7 (Succeeded) are skipped.
    assert_eq!(
        resolved.targets,
        vec![
            target("10.244.0.11", Some(8558)),
            target("10.244.0.12", Some(8558)),
            target("10.244.0.12", Some(9558)),
            target("10.244.0.16", Some(8558)),
        ]
    );
}

#[tokio::test]
async fn without_a_port_name_each_running_pod_gives_one_target_without_a_port() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, settings) = setup(&dir).await;
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();

    let resolved = discovery.lookup(&Lookup::new("orders"), TIMEOUT).await.unwrap();

    assert_eq!(
        resolved.targets,
        vec![target("10.244.0.11", None), target("10.244.0.12", None), target("10.244.0.16", None)]
    );
}

#[tokio::test]
async fn a_pod_whose_named_container_is_waiting_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, settings) = setup(&dir).await;
    let settings = settings.with_container_name(Some("app".into()));
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();

    let resolved = discovery.lookup(&Lookup::new("orders"), TIMEOUT).await.unwrap();

    assert_eq!(resolved.targets, vec![target("10.244.0.11", None), target("10.244.0.12", None)]);
}

#[tokio::test]
async fn hosts_are_pod_dns_names_when_raw_ip_is_off_and_the_selector_template_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (server, settings) = setup(&dir).await;
    server.set_pods(NAMESPACE, "app.kubernetes.io/name=orders", pods_fixture());
    let settings = settings
        .with_use_raw_ip(false)
        .with_pod_domain("cluster.example")
        .with_pod_label_selector("app.kubernetes.io/name=%s");
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();

    let resolved = discovery.lookup(&Lookup::new("orders"), TIMEOUT).await.unwrap();

    let hosts: Vec<_> = resolved.targets.iter().map(|t| t.host.as_str()).collect();
    assert_eq!(
        hosts,
        [
            "10-244-0-11.orders-ns.pod.cluster.example",
            "10-244-0-12.orders-ns.pod.cluster.example",
            "10-244-0-16.orders-ns.pod.cluster.example",
        ]
    );
    assert_eq!(resolved.targets[0].address, Some("10.244.0.11".parse().unwrap()));
}

#[tokio::test]
async fn a_forbidden_list_says_to_check_rbac_and_names_the_verb_resource_and_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let (server, settings) = setup(&dir).await;
    server.forbid(NAMESPACE);
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();

    let error = discovery.lookup(&Lookup::new("orders"), TIMEOUT).await.unwrap_err();

    let DiscoveryError::Forbidden(message) = &error else { panic!("{error:?}") };
    for needle in ["RBAC", "\"list\"", "\"pods\"", NAMESPACE] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
}

#[tokio::test]
async fn a_rotated_token_is_picked_up_by_later_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let (server, settings) = setup(&dir).await;
    let mut settings = settings;
    settings.api.token_reload_interval = Duration::ZERO;
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();
    let lookup = Lookup::new("orders");
    discovery.lookup(&lookup, TIMEOUT).await.unwrap();

    // The old token expires: the server accepts only the new one, which is not written yet.
    server.set_tokens(&["token-2"]);
    let error = discovery.lookup(&lookup, TIMEOUT).await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");

    std::fs::write(dir.path().join("token"), "token-2\n").unwrap();
    let resolved = discovery.lookup(&lookup, TIMEOUT).await.unwrap();
    assert_eq!(resolved.targets.len(), 3);

    let tokens: Vec<_> = server.requests().into_iter().map(|r| (r.token, r.status)).collect();
    let some = |t: &str| Some(t.to_owned());
    assert_eq!(tokens, [(some("token-1"), 200), (some("token-1"), 401), (some("token-2"), 200)]);
}

#[tokio::test]
async fn discovery_uses_exactly_the_rbac_verbs_it_declares() {
    let dir = tempfile::tempdir().unwrap();
    let (server, settings) = setup(&dir).await;
    let discovery = KubernetesApiDiscovery::new(settings).unwrap();
    let lookup = Lookup::new("orders").with_port_name("management").with_protocol("tcp");
    discovery.lookup(&lookup, TIMEOUT).await.unwrap();
    discovery.lookup(&Lookup::new("orders"), TIMEOUT).await.unwrap();

    let mut used: Vec<(String, String)> = server.requests().iter().map(|r| r.rbac()).collect();
    used.dedup();
    let declared: Vec<(String, String)> =
        POD_VERBS.iter().map(|v| ("pods".to_owned(), (*v).to_owned())).collect();
    assert_eq!(used, declared);
}
