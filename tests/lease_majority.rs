//! The lease-majority strategy through the node: in-process nodes whose split-brain resolver
//! takes a real Kubernetes Lease (the kube client against the stand-in API server of
//! `convoke_discovery::testkit`).

mod support;

use std::time::Duration;

use convoke::Node;
use convoke::control::Termination;
use convoke::membership::ShutdownReason;
use convoke::membership::sbr::{Lease, LeaseSettings};
use convoke::settings::Settings;
use convoke_discovery::kubernetes::{ApiServerSettings, KubernetesLease};
use convoke_discovery::testkit::FakeApiServer;
use serde_json::Value;
use support::{all_up, fast_settings, start_cluster, wait_for};

const T: Duration = Duration::from_secs(60);
const TOKEN: &str = "lease-test-token";
const NAMESPACE: &str = "orders-ns";
const LEASE: &str = "orders-sbr";

struct Api {
    server: FakeApiServer,
    settings: ApiServerSettings,
    dir: tempfile::TempDir,
}

async fn api_server() -> Api {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start(TOKEN).await.unwrap();
    let settings = server.client_settings(dir.path(), TOKEN, NAMESPACE).unwrap();
    Api { server, settings, dir }
}

impl Api {
    /// Fast node settings with lease-majority on this server's Lease `orders-sbr`, renewed every
    /// second, released `release_after` after the downed nodes are removed.
    fn node_settings(&self, release_after: Duration) -> Settings {
        let mut s = fast_settings();
        let sbr = &mut s.cluster.core.split_brain_resolver;
        sbr.active_strategy = "lease-majority".into();
        sbr.stable_after = Duration::from_secs(1);
        let l = &mut sbr.lease_majority;
        l.lease_name = LEASE.into();
        l.release_after = release_after;
        l.heartbeat_interval = Duration::from_secs(1);
        l.heartbeat_timeout = Duration::from_secs(4);
        l.lease_operation_timeout = Duration::from_secs(3);
        let k = &mut s.lease;
        k.kubernetes_api_url = self.server.url();
        k.kubernetes_ca_path = self.dir.path().join("ca.crt").display().to_string();
        k.kubernetes_token_path = self.dir.path().join("token").display().to_string();
        k.kubernetes_namespace = NAMESPACE.into();
        s
    }

    fn stored(&self) -> Option<Value> {
        self.server.lease(NAMESPACE, LEASE)
    }

    fn spec(&self, field: &str) -> Value {
        self.stored().map_or(Value::Null, |l| l["spec"][field].clone())
    }

    /// Polls the stored Lease until `pred` holds, or panics naming `what` after `T`.
    async fn wait_lease(&self, what: &str, pred: impl Fn(&Api) -> bool) {
        let deadline = tokio::time::Instant::now() + T;
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; lease: {:#?}",
                self.stored()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn host_port(node: &Node) -> String {
    node.self_address().host_port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_side_that_takes_the_kubernetes_lease_downs_the_crashed_node_renews_and_later_releases_it()
 {
    let _live = support::live().await;
    let api = api_server().await;
    let nodes = start_cluster(&api.node_settings(Duration::from_secs(4)), 3).await;
    assert!(api.stored().is_none(), "nobody asks for the lease before a failure");

    let crashed = nodes[2].self_address().clone();
    nodes[2].stop().await;
    for n in &nodes[..2] {
        wait_for(n, T, "the crashed node downed and removed", |s| {
            all_up(s, 2) && s.state.members.iter().all(|m| *m.address() != crashed)
        })
        .await;
    }
    // The leader of the surviving side took the lease in its own name.
    let survivors = [host_port(&nodes[0]), host_port(&nodes[1])];
    let holder = api.spec("holderIdentity");
    assert!(
        survivors.iter().any(|s| holder == s.as_str()),
        "holder {holder} is not one of the survivors {survivors:?}"
    );
    // While held it is renewed (acquired again) every heartbeat_interval ...
    api.wait_lease("a renewal of the held lease", |a| {
        a.spec("holderIdentity") == holder && a.spec("renewTime") != a.spec("acquireTime")
    })
    .await;
    // ... and once the downed node has been removed for release_after, it is released.
    api.wait_lease("the lease released", |a| a.spec("holderIdentity").is_null()).await;
    for n in &nodes[..2] {
        assert!(n.termination().is_none(), "{} terminated", n.self_address());
        n.stop().await;
    }
    let writes = api.server.requests();
    assert!(writes.iter().all(|r| r.token.as_deref() == Some(TOKEN)), "{writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_refused_the_kubernetes_lease_downs_itself_and_its_nodes_stop() {
    let _live = support::live().await;
    let api = api_server().await;
    // Another contender holds the lease for two minutes.
    let mut rival_settings = LeaseSettings::new(LEASE, "10.9.9.9:25520");
    rival_settings.heartbeat_timeout = Duration::from_secs(120);
    let rival = KubernetesLease::from_api_settings(&api.settings, rival_settings).unwrap();
    assert!(rival.acquire().await.unwrap());

    let nodes = start_cluster(&api.node_settings(Duration::from_secs(40)), 3).await;
    nodes[2].stop().await;
    // The survivors' leader asks for the lease, is refused, and takes the reverse decision:
    // down its own side. Both nodes see themselves downed and stop.
    for n in &nodes[..2] {
        let t = tokio::time::timeout(T, n.terminated()).await.unwrap_or_else(|_| {
            panic!("{} did not stop; state: {:#?}", n.self_address(), n.state())
        });
        assert_eq!(t, Termination::Core(ShutdownReason::Downed), "{}", n.self_address());
    }
    assert_eq!(api.spec("holderIdentity"), "10.9.9.9:25520");
    assert!(rival.check_lease());
}
