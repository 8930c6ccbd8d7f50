//! The coordinator driving the machine in paused tokio time, with scripted discovery and
//! scripted probe answers: the machine's timing as the real driver carries it out.
#![allow(clippy::disallowed_methods, reason = "paused tokio time is the clock of these tests")]

use std::collections::BTreeSet;
use std::sync::Mutex;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::*;
use crate::contact_point::SelfContactPoint;
use crate::probe::SeedNode;
use crate::status::{Phase, ProbeOutcome};

type Script = dyn Fn(usize, Duration) -> Result<Vec<ContactPoint>, ()> + Send + Sync;

/// Answers lookup number `n` at elapsed time `t` with `script(n, t)`; records when it was asked.
struct ScriptedDiscovery {
    start: Instant,
    calls: Mutex<Vec<Instant>>,
    script: Box<Script>,
}

impl std::fmt::Debug for ScriptedDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedDiscovery")
    }
}

impl ScriptedDiscovery {
    fn new(
        script: impl Fn(usize, Duration) -> Result<Vec<ContactPoint>, ()> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            calls: Mutex::new(Vec::new()),
            script: Box::new(script),
        })
    }

    fn gaps(&self) -> Vec<Duration> {
        let calls = self.calls.lock().unwrap();
        calls.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

impl ServiceDiscovery for ScriptedDiscovery {
    fn lookup<'a>(
        &'a self,
        lookup: &'a Lookup,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Resolved, DiscoveryError>> {
        let now = Instant::now();
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(now);
            calls.len() - 1
        };
        let result = (self.script)(n, now - self.start)
            .map(|targets| {
                Resolved::new(
                    lookup.service_name.clone(),
                    targets
                        .into_iter()
                        .map(|t| convoke_discovery::ResolvedTarget::new(t.host, t.port, t.address))
                        .collect(),
                )
            })
            .map_err(|()| DiscoveryError::Failed {
                lookup: lookup.to_string(),
                reason: "scripted failure".into(),
            });
        Box::pin(async move { result })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    NoCluster,
    Cluster,
    Refused,
    Hang,
}

/// Answers each URL as `script(url)` says; records every probe.
struct ScriptedProber {
    script: Box<dyn Fn(&str) -> Answer + Send + Sync>,
    probes: Mutex<Vec<(Instant, String)>>,
}

impl std::fmt::Debug for ScriptedProber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedProber")
    }
}

impl ScriptedProber {
    fn new(script: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self { script: Box::new(script), probes: Mutex::new(Vec::new()) })
    }
}

impl Prober for ScriptedProber {
    fn probe<'a>(
        &'a self,
        url: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<SeedNodes, ProbeError>> {
        self.probes.lock().unwrap().push((Instant::now(), url.to_owned()));
        let host =
            url.split("//").nth(1).and_then(|r| r.split(':').next()).unwrap_or_default().to_owned();
        let answer = (self.script)(url);
        Box::pin(async move {
            let self_node = format!("convoke://convoke@{host}:25520");
            match answer {
                Answer::NoCluster => Ok(SeedNodes { self_node, seed_nodes: vec![] }),
                Answer::Cluster => Ok(SeedNodes {
                    self_node: self_node.clone(),
                    seed_nodes: vec![SeedNode {
                        node: self_node,
                        node_uid: 7,
                        status: "Up".into(),
                        roles: vec![],
                    }],
                }),
                Answer::Refused => Err(ProbeError::Request {
                    url: url.to_owned(),
                    reason: "connection refused".into(),
                }),
                Answer::Hang => {
                    tokio::time::sleep(timeout).await;
                    Err(ProbeError::Timeout { url: url.to_owned(), timeout })
                }
            }
        })
    }
}

fn cp(last_octet: u8) -> ContactPoint {
    let ip = std::net::IpAddr::from([10, 0, 0, last_octet]);
    ContactPoint::new(ip.to_string(), Some(8558), Some(ip))
}

fn settings() -> BootstrapSettings {
    BootstrapSettings {
        service_name: "svc".into(),
        required_contact_point_nr: 3,
        ..BootstrapSettings::default()
    }
}

/// Node `10.0.0.<self_octet>`: management port 8558, cluster transport port 25520.
fn local(self_octet: u8) -> LocalNode {
    let mut local = LocalNode::new(
        "convoke",
        SelfContactPoint::new(format!("10.0.0.{self_octet}"), 8558),
        (format!("10.0.0.{self_octet}"), 25520),
    );
    local.seed = Some(1);
    local
}

const LONG: Duration = Duration::from_secs(600);

#[tokio::test(start_paused = true)]
async fn failed_lookups_back_off_exponentially_up_to_the_cap() {
    let discovery = ScriptedDiscovery::new(|_, _| Err(()));
    let prober = ScriptedProber::new(|_| Answer::NoCluster);
    let mut s = settings();
    s.discovery_backoff_random_factor = 0.0;
    let (coordinator, status) = Coordinator::new(&s, local(1), discovery.clone(), prober);
    assert!(tokio::time::timeout(Duration::from_secs(60), coordinator.run()).await.is_err());
    let secs: Vec<u64> = discovery.gaps().iter().map(Duration::as_secs).collect();
    assert_eq!(secs[..5], [2, 4, 8, 15, 15], "{secs:?}");
    assert_eq!(status.borrow().phase, Phase::Probing);
    assert!(
        status
            .borrow()
            .last_lookup
            .as_ref()
            .unwrap()
            .1
            .as_ref()
            .unwrap_err()
            .contains("scripted failure")
    );
}

#[tokio::test(start_paused = true)]
async fn backoff_jitter_adds_at_most_the_random_factor() {
    let discovery = ScriptedDiscovery::new(|_, _| Err(()));
    let (coordinator, _status) = Coordinator::new(
        &settings(),
        local(1),
        discovery.clone(),
        ScriptedProber::new(|_| Answer::NoCluster),
    );
    assert!(tokio::time::timeout(Duration::from_secs(120), coordinator.run()).await.is_err());
    let gaps = discovery.gaps();
    let bases = [2u64, 4, 8, 15, 15, 15];
    let mut jittered = 0;
    for (gap, base) in gaps.iter().zip(bases) {
        let base = Duration::from_secs(base);
        assert!(
            *gap >= base && *gap <= base.mul_f64(1.2) + Duration::from_millis(1),
            "{gap:?} vs {base:?}"
        );
        jittered += usize::from(*gap > base);
    }
    assert!(jittered > 0, "no jitter at all: {gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn the_lowest_node_forms_a_cluster_once_the_set_has_been_stable_for_the_margin() {
    let discovery = ScriptedDiscovery::new(|_, _| Ok(vec![cp(1), cp(2), cp(3)]));
    let (coordinator, status) = Coordinator::new(
        &settings(),
        local(1),
        discovery,
        ScriptedProber::new(|_| Answer::NoCluster),
    );
    let start = Instant::now();
    assert_eq!(coordinator.run().await, Decision::JoinSelf);
    let took = start.elapsed();
    // At the margin itself, not at the next probe tick after it.
    assert!(took >= Duration::from_secs(5) && took < Duration::from_millis(5_050), "{took:?}");
    let status = status.borrow();
    assert_eq!(status.phase, Phase::FormingNew);
    assert!(status.verdict.as_ref().unwrap().1.self_in_contact_points);
}

#[tokio::test(start_paused = true)]
async fn a_node_expecting_another_to_form_probes_that_one_more_often_and_joins_it_soon_after() {
    let discovery = ScriptedDiscovery::new(|_, _| Ok(vec![cp(1), cp(2), cp(3)]));
    let start = Instant::now();
    // 10.0.0.1 forms its cluster 300 ms after the margin.
    let formed_at = Duration::from_millis(5_300);
    let prober = ScriptedProber::new(move |url| {
        if url.contains("10.0.0.1:") && start.elapsed() >= formed_at {
            Answer::Cluster
        } else {
            Answer::NoCluster
        }
    });
    let (coordinator, _status) = Coordinator::new(&settings(), local(2), discovery, prober.clone());
    let decision = coordinator.run().await;
    let took = start.elapsed();
    assert!(matches!(decision, Decision::JoinOthers(_)), "{decision:?}");
    // Probed every 100 ms (+ up to 20 % jitter) once the margin passed, not every second.
    assert!(took >= formed_at && took <= formed_at + Duration::from_millis(120), "{took:?}");
    let probes = prober.probes.lock().unwrap();
    let after_margin = |host: &str| {
        probes
            .iter()
            .filter(|(at, url)| url.contains(host) && *at - start >= Duration::from_secs(5))
            .count()
    };
    assert!(after_margin("10.0.0.1:") >= 3, "{probes:?}");
    assert!(after_margin("10.0.0.3:") <= 1, "only the expected one is hurried: {probes:?}");
}

#[tokio::test(start_paused = true)]
async fn the_stable_margin_restarts_when_the_discovered_set_changes() {
    // Three targets for the first 4 s, then a fourth appears.
    let discovery = ScriptedDiscovery::new(|_, t| {
        let mut targets = vec![cp(1), cp(2), cp(3)];
        if t >= Duration::from_secs(4) {
            targets.push(cp(4));
        }
        Ok(targets)
    });
    let (coordinator, status) = Coordinator::new(
        &settings(),
        local(1),
        discovery,
        ScriptedProber::new(|_| Answer::NoCluster),
    );
    let start = Instant::now();
    let mut watch = status.clone();
    let changed = tokio::spawn(async move {
        // The instant the status reports the new stable-since.
        let first = loop {
            watch.changed().await.unwrap();
            if let Some(at) = watch.borrow().stable_since {
                break at;
            }
        };
        loop {
            watch.changed().await.unwrap();
            if let Some(at) = watch.borrow().stable_since.filter(|at| *at != first) {
                return (first, at);
            }
        }
    });
    assert_eq!(coordinator.run().await, Decision::JoinSelf);
    let joined = start.elapsed();
    let (first, second) = changed.await.unwrap();
    assert!(second - first >= Duration::from_secs(4), "{:?}", second - first);
    assert!(
        joined >= (second - start.into_std()) + Duration::from_secs(5),
        "joined after {joined:?}"
    );
    assert!(
        joined <= (second - start.into_std()) + Duration::from_secs(7),
        "joined after {joined:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reported_cluster_is_joined_at_once_without_waiting_for_the_margin() {
    let discovery = ScriptedDiscovery::new(|_, _| Ok(vec![cp(1), cp(2), cp(3)]));
    let prober = ScriptedProber::new(|url| {
        if url.contains("10.0.0.3") { Answer::Cluster } else { Answer::NoCluster }
    });
    let (coordinator, _status) = Coordinator::new(&settings(), local(1), discovery, prober);
    let start = Instant::now();
    assert_eq!(
        coordinator.run().await,
        Decision::JoinOthers(vec!["convoke://convoke@10.0.0.3:25520".into()])
    );
    assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_probe_gives_up_only_after_its_deadline_and_a_slow_answer_costs_one_attempt() {
    let discovery = ScriptedDiscovery::new(|_, _| Ok(vec![cp(1), cp(2), cp(3)]));
    let prober = ScriptedProber::new(|url| {
        if url.contains("10.0.0.2") { Answer::Hang } else { Answer::NoCluster }
    });
    let (coordinator, status) = Coordinator::new(&settings(), local(1), discovery, prober.clone());
    let start = Instant::now();
    let mut watch = status.clone();
    let run = tokio::spawn(coordinator.run());
    let gave_up = loop {
        watch.changed().await.unwrap();
        if let Some(at) = watch.borrow().contact_points.get(&cp(2)).and_then(|p| p.gave_up_at) {
            break at;
        }
    };
    let attempts_before = prober
        .probes
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, url)| url.contains("10.0.0.2") && at.into_std() < gave_up)
        .count();
    run.abort();
    let settings = settings();
    assert!(
        gave_up - start.into_std() >= settings.contact_point.probing_failure_timeout,
        "gave up after {:?}",
        gave_up - start.into_std()
    );
    assert!(
        attempts_before >= 2,
        "a single timed-out request ended probing ({attempts_before} attempts)"
    );
    let status = status.borrow();
    let p = &status.contact_points[&cp(2)];
    assert!(
        matches!(&p.last, Some((_, ProbeOutcome::Failed(e))) if e.contains("timeout")),
        "{p:?}"
    );
    // Without every answer, no cluster was formed.
    assert_eq!(status.phase, Phase::Probing);
}

#[tokio::test(start_paused = true)]
async fn no_decision_is_made_without_a_current_observation() {
    // The first lookup succeeds; every later one fails.
    let discovery =
        ScriptedDiscovery::new(|n, _| if n == 0 { Ok(vec![cp(1), cp(2), cp(3)]) } else { Err(()) });
    let (coordinator, status) = Coordinator::new(
        &settings(),
        local(1),
        discovery,
        ScriptedProber::new(|_| Answer::NoCluster),
    );
    assert!(
        tokio::time::timeout(LONG / 10, coordinator.run()).await.is_err(),
        "decided without an observation"
    );
    let status = status.borrow();
    assert_eq!(status.phase, Phase::Probing);
    assert_eq!(status.stable_since, None);
    let reason = &status.verdict.as_ref().unwrap().1.reason;
    assert!(reason.contains("no current discovery observation"), "{reason}");
}

#[tokio::test(start_paused = true)]
async fn a_node_that_is_not_the_lowest_waits_and_joins_once_the_lowest_reports_a_cluster() {
    let formed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = formed.clone();
    let discovery = ScriptedDiscovery::new(move |_, t| {
        if t >= Duration::from_secs(20) {
            f.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(vec![cp(1), cp(2), cp(3)])
    });
    let flag = formed.clone();
    let prober = ScriptedProber::new(move |url| {
        if url.contains("10.0.0.1") && flag.load(std::sync::atomic::Ordering::SeqCst) {
            Answer::Cluster
        } else if url.contains("10.0.0.9") {
            Answer::Refused
        } else {
            Answer::NoCluster
        }
    });
    let (coordinator, status) = Coordinator::new(&settings(), local(2), discovery, prober);
    let start = Instant::now();
    assert_eq!(
        coordinator.run().await,
        Decision::JoinOthers(vec!["convoke://convoke@10.0.0.1:25520".into()])
    );
    assert!(start.elapsed() >= Duration::from_secs(20));
    assert_eq!(status.borrow().phase, Phase::JoiningExisting);
}

#[tokio::test(start_paused = true)]
async fn probe_urls_use_the_fallback_port_scheme_and_base_path_and_skip_the_transport_address() {
    // 10.0.0.2 without a port; 10.0.0.3 with one; 10.0.0.1:25520 is this node's transport.
    let targets = || {
        let ip = |o: u8| std::net::IpAddr::from([10, 0, 0, o]);
        vec![
            ContactPoint::new("10.0.0.1", Some(8558), Some(ip(1))),
            ContactPoint::new("10.0.0.1", Some(25520), Some(ip(1))),
            ContactPoint::new("10.0.0.2", None, Some(ip(2))),
            ContactPoint::new("10.0.0.3", Some(9000), Some(ip(3))),
        ]
    };
    let probed = |settings: BootstrapSettings, local: LocalNode| async move {
        let prober = ScriptedProber::new(|_| Answer::NoCluster);
        let discovery = ScriptedDiscovery::new(move |_, _| Ok(targets()));
        let (coordinator, _status) = Coordinator::new(&settings, local, discovery, prober.clone());
        let _ = tokio::time::timeout(Duration::from_secs(2), coordinator.run()).await;
        let probes = prober.probes.lock().unwrap();
        probes.iter().map(|(_, url)| url.clone()).collect::<BTreeSet<String>>()
    };

    // Unset fallback port: this node's management port; filtering off keeps both ports of
    // 10.0.0.1, but its transport port is never probed.
    let mut s = settings();
    s.contact_point.filter_on_fallback_port = false;
    let urls = probed(s.clone(), local(1)).await;
    let expected: BTreeSet<String> = [
        "http://10.0.0.1:8558/bootstrap/seed-nodes",
        "http://10.0.0.2:8558/bootstrap/seed-nodes",
        "http://10.0.0.3:9000/bootstrap/seed-nodes",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(urls, expected);

    // A set fallback port, HTTPS and a base path.
    s.contact_point.fallback_port = Some(7000);
    let mut l = local(1);
    l.https = true;
    l.base_path = "/admin/".into();
    let urls = probed(s, l).await;
    assert!(urls.contains("https://10.0.0.2:7000/admin/bootstrap/seed-nodes"), "{urls:?}");
    assert!(urls.iter().all(|u| u.starts_with("https://") && !u.contains(":25520")), "{urls:?}");
}

#[tokio::test(start_paused = true)]
async fn targets_that_are_not_probed_are_listed_with_the_reason() {
    // 10.0.0.9 answers on five ports (no port name, so the fallback-port filter keeps 8558), and
    // discovery also returns this node's own cluster transport port.
    let discovery = ScriptedDiscovery::new(|_, _| {
        let ip = std::net::IpAddr::from([10, 0, 0, 9]);
        let mut targets: Vec<ContactPoint> =
            (0..5).map(|i| ContactPoint::new(ip.to_string(), Some(8558 + i), Some(ip))).collect();
        targets.push(cp(1));
        targets.push(ContactPoint::new("10.0.0.2", Some(25520), None));
        Ok(targets)
    });
    let prober = ScriptedProber::new(|_| Answer::NoCluster);
    let (coordinator, status) = Coordinator::new(&settings(), local(2), discovery, prober.clone());
    assert!(tokio::time::timeout(Duration::from_secs(30), coordinator.run()).await.is_err());
    let view = status.borrow().view(Instant::now());
    assert_eq!(view.last_lookup.as_ref().unwrap().targets, Some(7));
    let dropped: Vec<(&str, &str)> =
        view.dropped_targets.iter().map(|d| (d.target.as_str(), d.reason.as_str())).collect();
    assert_eq!(dropped.len(), 5, "{dropped:#?}");
    for port in 8559..=8562 {
        let (_, why) = dropped
            .iter()
            .find(|(t, _)| *t == format!("10.0.0.9:{port}"))
            .unwrap_or_else(|| panic!("10.0.0.9:{port} not listed: {dropped:#?}"));
        assert!(why.contains("host 10.0.0.9 has 5 targets"), "{why}");
    }
    let (_, why) = dropped.iter().find(|(t, _)| *t == "10.0.0.2:25520").expect("own transport");
    assert!(why.contains("own cluster transport address"), "{why}");
    let probed: BTreeSet<String> =
        prober.probes.lock().unwrap().iter().map(|(_, u)| u.clone()).collect();
    assert!(probed.iter().all(|u| !u.contains(":25520") && !u.contains(":8559")), "{probed:?}");
    let reason = &view.verdict.as_ref().unwrap().reason;
    assert!(reason.contains("5 discovered targets are not probed"), "{reason}");
}

#[tokio::test(start_paused = true)]
async fn run_until_stops_when_told_and_shows_the_stopped_phase() {
    let discovery = ScriptedDiscovery::new(|_, _| Ok(vec![cp(1), cp(2), cp(3)]));
    let prober = ScriptedProber::new(|_| Answer::NoCluster);
    let (coordinator, status) = Coordinator::new(&settings(), local(1), discovery, prober.clone());
    let start = Instant::now();
    let stopped = coordinator.run_until(tokio::time::sleep(Duration::from_secs(2))).await;
    assert_eq!(stopped, None);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(status.borrow().phase, Phase::Stopped);
    // It probed meanwhile, and nothing after it stopped.
    let probes = prober.probes.lock().unwrap().len();
    assert!(probes >= 3, "{probes}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(prober.probes.lock().unwrap().len(), probes);
}
