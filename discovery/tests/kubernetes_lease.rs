//! The Kubernetes lease: the real kube client against a stand-in API server keeping Lease
//! objects with resourceVersion checks. Time is a manual clock shared by the contenders.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use convoke_discovery::kubernetes::lease::WallClock;
use convoke_discovery::kubernetes::{KubernetesLease, LEASE_VERBS};
use convoke_discovery::testkit::FakeApiServer;
use convoke_membership::sbr::{Lease, LeaseError, LeaseSettings};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const NAMESPACE: &str = "orders-ns";
const LEASE: &str = "orders-sbr";

#[derive(Clone)]
struct ManualClock(Arc<Mutex<SystemTime>>);

impl ManualClock {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000))))
    }
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
    fn wall_clock(&self) -> WallClock {
        let clock = self.clone();
        Arc::new(move || clock.now())
    }
    fn rfc3339(&self) -> String {
        Timestamp::try_from(self.now()).unwrap().to_string()
    }
}

struct Setup {
    server: FakeApiServer,
    clock: ManualClock,
    _dir: tempfile::TempDir,
    a: KubernetesLease,
    b: KubernetesLease,
}

/// Two contenders, `10.0.0.1:25520` and `10.0.0.2:25520`, whose leases last 10 s.
async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start("token").await.unwrap();
    let api = server.client_settings(dir.path(), "token", NAMESPACE).unwrap();
    let clock = ManualClock::new();
    let contender = |owner: &str| {
        let mut settings = LeaseSettings::new(LEASE, owner);
        settings.heartbeat_timeout = Duration::from_secs(10);
        KubernetesLease::from_api_settings(&api, settings).unwrap().with_clock(clock.wall_clock())
    };
    let (a, b) = (contender("10.0.0.1:25520"), contender("10.0.0.2:25520"));
    Setup { server, clock, _dir: dir, a, b }
}

impl Setup {
    fn stored(&self) -> Value {
        self.server.lease(NAMESPACE, LEASE).expect("the Lease object exists")
    }
    fn holder(&self) -> Value {
        self.stored()["spec"]["holderIdentity"].clone()
    }
    fn statuses(&self, method: &str) -> Vec<u16> {
        let requests = self.server.requests().into_iter();
        requests.filter(|r| r.method == method).map(|r| r.status).collect()
    }
}

#[tokio::test]
async fn of_two_contenders_the_first_creates_and_holds_the_lease_and_the_second_is_refused() {
    let s = setup().await;

    assert!(s.a.acquire().await.unwrap());
    assert!(!s.b.acquire().await.unwrap());

    assert!(s.a.check_lease());
    assert!(!s.b.check_lease());
    let stored = s.stored();
    assert_eq!(stored["spec"]["holderIdentity"], "10.0.0.1:25520");
    assert_eq!(stored["spec"]["leaseDurationSeconds"], 10);
    assert_eq!(
        stored["spec"]["renewTime"].as_str().map(|t| t.parse::<Timestamp>().unwrap()),
        Some(s.clock.rfc3339().parse().unwrap())
    );
    assert_eq!(s.statuses("POST"), [201]);

    // Renewing keeps the holder and moves renewTime, through a replace on the read version.
    let version = stored["metadata"]["resourceVersion"].clone();
    s.clock.advance(Duration::from_secs(4));
    assert!(s.a.acquire().await.unwrap());
    let renewed = s.stored();
    assert_ne!(renewed["metadata"]["resourceVersion"], version);
    assert_eq!(renewed["spec"]["leaseTransitions"], 0);
    assert_eq!(s.statuses("PUT"), [200]);
}

#[tokio::test]
async fn once_the_holder_stops_renewing_the_lease_expires_and_the_other_contender_takes_it() {
    let s = setup().await;
    assert!(s.a.acquire().await.unwrap());

    s.clock.advance(Duration::from_secs(9));
    assert!(!s.b.acquire().await.unwrap(), "still within leaseDurationSeconds");
    assert!(s.a.check_lease());

    s.clock.advance(Duration::from_secs(1));
    assert!(!s.a.check_lease(), "the holder no longer counts on a lease it did not renew");
    assert!(s.b.acquire().await.unwrap());
    assert!(s.b.check_lease());
    assert_eq!(s.holder(), "10.0.0.2:25520");
    assert_eq!(s.stored()["spec"]["leaseTransitions"], 1);

    assert!(!s.a.acquire().await.unwrap(), "the former holder is refused now");
}

#[tokio::test]
async fn a_released_lease_has_no_holder_and_the_other_contender_acquires_it_at_once() {
    let s = setup().await;
    assert!(s.a.acquire().await.unwrap());

    assert!(!s.b.release().await.unwrap(), "only the holder releases");
    assert!(s.a.release().await.unwrap());
    assert!(!s.a.check_lease());
    assert_eq!(s.holder(), Value::Null);

    assert!(s.b.acquire().await.unwrap());
    assert_eq!(s.holder(), "10.0.0.2:25520");
}

#[tokio::test]
async fn a_write_on_a_stale_resource_version_is_refused_and_the_contender_decides_on_the_fresh_lease()
 {
    let s = setup().await;
    assert!(s.a.acquire().await.unwrap());
    s.clock.advance(Duration::from_secs(11));

    // B reads the expired lease; before its replace lands, A renews it.
    let renewed_at = s.clock.rfc3339();
    s.server.interleave_lease_writes(1, move |lease| {
        lease["spec"]["renewTime"] = json!(renewed_at);
    });
    assert!(!s.b.acquire().await.unwrap());

    assert_eq!(s.statuses("PUT"), [409], "B's replace carried the stale resourceVersion");
    assert_eq!(s.holder(), "10.0.0.1:25520");
    assert!(!s.b.check_lease());
}

#[tokio::test]
async fn a_lease_changed_under_every_attempt_gives_a_conflict_error() {
    let s = setup().await;
    assert!(s.a.acquire().await.unwrap());
    assert!(s.a.release().await.unwrap());

    // Some other writer touches the free lease after every read.
    s.server.interleave_lease_writes(usize::MAX, |lease| {
        lease["metadata"]["annotations"] = json!({"touched": "yes"});
    });
    let error = s.b.acquire().await.unwrap_err();

    assert!(matches!(error, LeaseError::Conflict(_)), "{error:?}");
    assert!(error.to_string().contains(LEASE), "{error}");
    assert_eq!(s.statuses("PUT"), [200, 409, 409, 409]);
    assert!(!s.b.check_lease());
}

#[tokio::test]
async fn contenders_racing_for_an_absent_lease_end_with_exactly_one_holder() {
    let s = setup().await;

    let (a, b) = tokio::join!(s.a.acquire(), s.b.acquire());

    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "exactly one wins: a={a} b={b}");
    let winner = if a { "10.0.0.1:25520" } else { "10.0.0.2:25520" };
    assert_eq!(s.holder(), winner);
    assert_eq!((s.a.check_lease(), s.b.check_lease()), (a, b));
}

#[tokio::test]
async fn the_lease_uses_exactly_the_rbac_verbs_it_declares() {
    let s = setup().await;
    assert!(s.a.acquire().await.unwrap()); // create
    s.clock.advance(Duration::from_secs(4));
    assert!(s.a.acquire().await.unwrap()); // get, update
    assert!(!s.b.acquire().await.unwrap());
    assert!(s.a.release().await.unwrap());
    assert!(s.b.acquire().await.unwrap());

    let mut used: Vec<(String, String)> = s.server.requests().iter().map(|r| r.rbac()).collect();
    used.sort();
    used.dedup();
    let mut declared: Vec<(String, String)> =
        LEASE_VERBS.iter().map(|v| ("leases".to_owned(), (*v).to_owned())).collect();
    declared.sort();
    assert_eq!(used, declared);
}
