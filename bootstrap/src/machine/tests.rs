//! The machine alone: the instants are made up by the tests, lookups and probes are answered by
//! a small model of discovery and of the other nodes, and nothing sleeps or reads a clock (but
//! once, for the base instant).

use convoke_discovery::ResolvedTarget;

use super::*;
use crate::probe::SeedNode;
use crate::settings::ContactPointSettings;

#[allow(clippy::disallowed_methods, reason = "the base instant; the tests use offsets from it")]
fn t0() -> Instant {
    Instant::now()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ip(octet: u8) -> std::net::IpAddr {
    std::net::IpAddr::from([10, 0, 0, octet])
}

/// The management contact point of node `10.0.0.<octet>`.
fn cp(octet: u8) -> ContactPoint {
    ContactPoint::new(ip(octet).to_string(), Some(8558), Some(ip(octet)))
}

/// The cluster address of node `10.0.0.<octet>`.
fn addr(octet: u8) -> String {
    format!("convoke://convoke@10.0.0.{octet}:25520")
}

/// Three contact points required; every other setting at its default (stable margin 5 s, probe
/// and lookup interval 1 s, jitter 0.2, probing failure timeout 3 s).
fn settings() -> BootstrapSettings {
    BootstrapSettings {
        service_name: "svc".into(),
        required_contact_point_nr: 3,
        ..BootstrapSettings::default()
    }
}

/// Node `10.0.0.<octet>`: management port 8558, cluster transport port 25520.
fn local(octet: u8) -> LocalNode {
    LocalNode::new(
        "convoke",
        SelfContactPoint::new(ip(octet).to_string(), 8558),
        (ip(octet).to_string(), 25520),
    )
}

fn machine(octet: u8, settings: &BootstrapSettings, now: Instant) -> BootstrapMachine {
    BootstrapMachine::new(settings, &local(octet), u64::from(octet), now)
}

fn found(targets: &[ContactPoint]) -> Result<Resolved, DiscoveryError> {
    let targets =
        targets.iter().map(|t| ResolvedTarget::new(t.host.clone(), t.port, t.address)).collect();
    Ok(Resolved::new("svc", targets))
}

fn lookup_failed() -> Result<Resolved, DiscoveryError> {
    Err(DiscoveryError::Failed { lookup: "svc".into(), reason: "modelled failure".into() })
}

/// The answer of a node that is in no cluster.
fn no_cluster(target: &ContactPoint) -> Result<SeedNodes, ProbeError> {
    Ok(SeedNodes {
        self_node: format!("convoke://convoke@{}:25520", target.host),
        seed_nodes: vec![],
    })
}

/// The answer of a node in the cluster of `seeds`.
fn in_cluster(target: &ContactPoint, seeds: &[String]) -> Result<SeedNodes, ProbeError> {
    let seed_nodes = seeds
        .iter()
        .map(|node| SeedNode {
            node: node.clone(),
            node_uid: 7,
            status: "Up".into(),
            roles: vec![],
        })
        .collect();
    Ok(SeedNodes { self_node: format!("convoke://convoke@{}:25520", target.host), seed_nodes })
}

fn refused(target: &ContactPoint) -> Result<SeedNodes, ProbeError> {
    Err(ProbeError::Request { url: target.to_string(), reason: "connection refused".into() })
}

fn drain(m: &mut BootstrapMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

const LOOKUP_LATENCY: Duration = Duration::from_millis(10);
const PROBE_LATENCY: Duration = Duration::from_millis(5);

type Discovery = dyn Fn(u8, Duration) -> Option<Vec<ContactPoint>>;
type Others = dyn Fn(&ContactPoint, Duration) -> Result<SeedNodes, ProbeError>;

/// One modelled node running a machine.
struct Node {
    starts_at: Duration,
    machine: Option<BootstrapMachine>,
    joined: Option<(Duration, Action)>,
}

/// Machines over modelled discovery and probes. A lookup by node `n` at elapsed time `t` answers
/// `discovery(n, t)` (`None`: it fails) after [`LOOKUP_LATENCY`]; a probe answers after
/// [`PROBE_LATENCY`]: a modelled node in no cluster until it joined, then in the cluster its join
/// named (itself for a self-join), and refused before it starts; any other contact point as
/// `others` says.
struct World {
    settings: BootstrapSettings,
    start: Instant,
    now: Instant,
    seed: u64,
    nodes: BTreeMap<u8, Node>,
    discovery: Box<Discovery>,
    others: Box<Others>,
    events: BTreeMap<(Instant, u64), (u8, Option<ContactPoint>)>,
    seq: u64,
    /// Every action, with its elapsed time and node.
    log: Vec<(Duration, u8, Action)>,
}

impl World {
    fn new(
        settings: BootstrapSettings,
        nodes: &[(u8, Duration)],
        discovery: impl Fn(u8, Duration) -> Option<Vec<ContactPoint>> + 'static,
    ) -> Self {
        let start = t0();
        Self {
            settings,
            start,
            now: start,
            seed: 0,
            nodes: nodes
                .iter()
                .map(|&(octet, starts_at)| (octet, Node { starts_at, machine: None, joined: None }))
                .collect(),
            discovery: Box::new(discovery),
            others: Box::new(|t, _| refused(t)),
            events: BTreeMap::new(),
            seq: 0,
            log: Vec::new(),
        }
    }

    fn others(
        mut self,
        others: impl Fn(&ContactPoint, Duration) -> Result<SeedNodes, ProbeError> + 'static,
    ) -> Self {
        self.others = Box::new(others);
        self
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn machine(&self, octet: u8) -> &BootstrapMachine {
        self.nodes[&octet].machine.as_ref().expect("started")
    }

    fn machine_mut(&mut self, octet: u8) -> &mut BootstrapMachine {
        self.nodes.get_mut(&octet).and_then(|n| n.machine.as_mut()).expect("started")
    }

    fn joined(&self, octet: u8) -> Option<(Duration, Action)> {
        self.nodes[&octet].joined.clone()
    }

    fn answer(&self, target: &ContactPoint) -> Result<SeedNodes, ProbeError> {
        let node = self.nodes.iter().find(|(o, _)| cp(**o) == *target).map(|(o, n)| (*o, n));
        match node {
            Some((_, Node { machine: None, .. })) => refused(target),
            Some((octet, Node { joined: Some((_, Action::JoinSelf)), .. })) => {
                in_cluster(target, &[addr(octet)])
            }
            Some((_, Node { joined: Some((_, Action::JoinOthers(seeds))), .. })) => {
                in_cluster(target, seeds)
            }
            Some(_) => no_cluster(target),
            None => (self.others)(target, self.elapsed()),
        }
    }

    /// Runs until `end` (elapsed) or until nothing is left to do.
    fn run_until(&mut self, end: Duration) {
        loop {
            self.collect();
            let next_event = self.events.keys().next().map(|(at, _)| *at);
            let next_start = self
                .nodes
                .values()
                .filter(|n| n.machine.is_none())
                .map(|n| self.start + n.starts_at)
                .min();
            let next_timeout =
                self.nodes.values().filter_map(|n| n.machine.as_ref()?.poll_timeout()).min();
            let Some(next) = [next_event, next_start, next_timeout].into_iter().flatten().min()
            else {
                return;
            };
            if next > self.start + end {
                return;
            }
            self.now = self.now.max(next);
            let now = self.now;
            for (octet, node) in &mut self.nodes {
                if node.machine.is_none() && self.start + node.starts_at <= now {
                    let seed = self.seed.wrapping_add(u64::from(*octet));
                    node.machine =
                        Some(BootstrapMachine::new(&self.settings, &local(*octet), seed, now));
                }
            }
            while let Some(entry) = self.events.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let (octet, probe) = entry.remove();
                let elapsed = self.elapsed();
                match probe {
                    None => {
                        let targets = (self.discovery)(octet, elapsed);
                        let result = targets.map_or_else(lookup_failed, |t| found(&t));
                        self.machine_mut(octet).handle_lookup(result, now);
                    }
                    Some(target) => {
                        let outcome = self.answer(&target);
                        self.machine_mut(octet).handle_probe(target, outcome, now);
                    }
                }
            }
            for node in self.nodes.values_mut() {
                if let Some(m) = node.machine.as_mut()
                    && m.poll_timeout().is_some_and(|at| at <= now)
                {
                    m.handle_timeout(now);
                }
            }
        }
    }

    /// Takes every machine's actions: lookups and probes become events, joins are recorded.
    fn collect(&mut self) {
        let elapsed = self.elapsed();
        for (octet, node) in &mut self.nodes {
            let Some(m) = node.machine.as_mut() else { continue };
            while let Some(action) = m.poll_action() {
                self.log.push((elapsed, *octet, action.clone()));
                let (latency, probe) = match action {
                    Action::Lookup => (LOOKUP_LATENCY, None),
                    Action::Probe(target) => (PROBE_LATENCY, Some(target)),
                    join @ (Action::JoinSelf | Action::JoinOthers(_)) => {
                        assert!(node.joined.is_none(), "node {octet} joined twice");
                        node.joined = Some((elapsed, join));
                        continue;
                    }
                };
                self.seq += 1;
                self.events.insert((self.now + latency, self.seq), (*octet, probe));
            }
        }
    }

    /// The elapsed times at which `octet` asked for `action`.
    fn times(&self, octet: u8, action: &Action) -> Vec<Duration> {
        self.log.iter().filter(|(_, o, a)| *o == octet && a == action).map(|(t, ..)| *t).collect()
    }
}

#[test]
fn nodes_seeing_the_same_contact_points_all_pick_the_lowest_and_only_it_joins_itself() {
    // The lowest address is neither the first listed nor the first started.
    let octets = [7u8, 3, 9, 5, 4];
    for seed in 0..20u64 {
        let starts: Vec<(u8, Duration)> = octets
            .iter()
            .enumerate()
            .map(|(i, &o)| (o, ms((i as u64 * 137 + seed * 61) % 900)))
            .collect();
        let all: Vec<ContactPoint> = octets.iter().map(|&o| cp(o)).collect();
        let mut world = World::new(
            BootstrapSettings { required_contact_point_nr: 5, ..settings() },
            &starts,
            move |_, _| Some(all.clone()),
        );
        world.seed = seed;
        world.run_until(secs(60));
        let (formed_at, formed) = world.joined(3).expect("the lowest joined");
        assert_eq!(formed, Action::JoinSelf, "seed {seed}");
        // Not before the set was stable for the margin since the lowest node's first lookup.
        assert!(formed_at >= starts[1].1 + LOOKUP_LATENCY + secs(5), "seed {seed}: {formed_at:?}");
        for &o in octets.iter().filter(|&&o| o != 3) {
            let (at, joined) = world.joined(o).unwrap_or_else(|| panic!("seed {seed}: {o} waits"));
            assert_eq!(joined, Action::JoinOthers(vec![addr(3)]), "seed {seed}: node {o}");
            assert!(at > formed_at, "seed {seed}: node {o} joined before the cluster existed");
        }
    }
}

#[test]
fn a_node_that_sees_an_existing_cluster_joins_it_at_once() {
    // Even when this node may not form a cluster itself, and long before the margin.
    let s = BootstrapSettings { new_cluster_enabled: false, ..settings() };
    let t = t0();
    let mut m = machine(1, &s, t);
    assert_eq!(m.poll_timeout(), Some(t), "the first lookup is due at once");
    m.handle_timeout(t);
    assert_eq!(drain(&mut m), [Action::Lookup]);
    m.handle_lookup(found(&[cp(3), cp(1), cp(2)]), t + ms(10));
    assert_eq!(drain(&mut m), [Action::Probe(cp(1)), Action::Probe(cp(2)), Action::Probe(cp(3))]);
    m.handle_probe(cp(1), no_cluster(&cp(1)), t + ms(15));
    assert_eq!(drain(&mut m), []);
    m.handle_probe(cp(2), in_cluster(&cp(2), &[addr(9), addr(8)]), t + ms(20));
    assert_eq!(drain(&mut m), [Action::JoinOthers(vec![addr(8), addr(9)])]);
    assert_eq!(m.status().phase, Phase::JoiningExisting);
    assert_eq!(m.poll_timeout(), None);
    // Finished: later inputs do nothing.
    m.handle_probe(cp(3), no_cluster(&cp(3)), t + ms(25));
    m.handle_timeout(t + secs(10));
    assert_eq!(drain(&mut m), []);
}

#[test]
fn the_stable_margin_restarts_when_the_discovered_set_changes_and_is_acted_on_when_it_passes() {
    let discovery = |_, t: Duration| {
        let mut targets = vec![cp(1), cp(2), cp(3)];
        if t >= secs(3) {
            targets.push(cp(4));
        }
        Some(targets)
    };
    let mut world =
        World::new(settings(), &[(1, Duration::ZERO)], discovery).others(|t, _| no_cluster(t));
    world.run_until(secs(60));
    let (joined_at, joined) = world.joined(1).expect("formed");
    assert_eq!(joined, Action::JoinSelf);
    let changed_at = world.machine(1).status().stable_since.expect("an observation") - world.start;
    assert!(changed_at >= secs(3) && changed_at < secs(5), "changed at {changed_at:?}");
    // At the margin after the change, to the instant: not at a regular decider run after it.
    assert_eq!(joined_at, changed_at + secs(5));
    // Without the change, the margin from the first lookup would have been enough.
    let mut unchanged =
        World::new(settings(), &[(1, Duration::ZERO)], |_, _| Some(vec![cp(1), cp(2), cp(3)]))
            .others(|t, _| no_cluster(t));
    unchanged.run_until(secs(60));
    assert_eq!(unchanged.joined(1), Some((LOOKUP_LATENCY + secs(5), Action::JoinSelf)));
}

#[test]
fn failed_lookups_back_off_exponentially_up_to_the_cap_and_a_success_resets_the_backoff() {
    let lookups = |s: BootstrapSettings, failing: usize| {
        let t = t0();
        let mut m = machine(1, &s, t);
        let mut at = Vec::new();
        while at.len() < failing + 2 {
            let now = m.poll_timeout().expect("a timer");
            m.handle_timeout(now);
            if drain(&mut m).contains(&Action::Lookup) {
                at.push(now);
                let result = if at.len() <= failing { lookup_failed() } else { found(&[cp(1)]) };
                m.handle_lookup(result, now);
            }
        }
        (m, at.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>())
    };
    let exact = BootstrapSettings { discovery_backoff_random_factor: 0.0, ..settings() };
    let (m, gaps) = lookups(exact, 6);
    assert_eq!(gaps, [secs(2), secs(4), secs(8), secs(15), secs(15), secs(15), secs(1)]);
    assert_eq!(m.status().lookups, 8);

    let (m, gaps) = lookups(settings(), 6);
    let bases = [2, 4, 8, 15, 15, 15, 1].map(secs);
    for (gap, base) in gaps.iter().zip(bases) {
        assert!(*gap >= base && *gap <= base.mul_f64(1.2), "{gap:?} vs {base:?}");
    }
    assert!(gaps.iter().zip(bases).any(|(g, b)| *g > b), "no jitter at all: {gaps:?}");
    assert_eq!(m.status().last_lookup.as_ref().map(|(_, r)| r.clone()), Some(Ok(1)));
}

#[test]
fn a_failed_lookup_withdraws_the_observation_so_no_cluster_is_formed() {
    // Only the first lookup succeeds; every contact point answers.
    let mut world = World::new(settings(), &[(1, Duration::ZERO)], |_, t| {
        (t < ms(500)).then(|| vec![cp(1), cp(2), cp(3)])
    })
    .others(|t, _| no_cluster(t));
    world.run_until(secs(120));
    assert_eq!(world.joined(1), None);
    let status = world.machine(1).status();
    assert_eq!(status.phase, Phase::Probing);
    assert_eq!(status.stable_since, None);
    let reason = &status.verdict.as_ref().expect("a verdict").1.reason;
    assert!(reason.contains("no current discovery observation"), "{reason}");
    assert!(matches!(&status.last_lookup, Some((_, Err(e))) if e.contains("modelled failure")));
}

#[test]
fn this_nodes_own_transport_address_is_never_probed_and_is_listed_as_not_probed() {
    let s = BootstrapSettings {
        contact_point: ContactPointSettings {
            filter_on_fallback_port: false,
            ..ContactPointSettings::default()
        },
        ..settings()
    };
    let t = t0();
    let mut m = machine(2, &s, t);
    m.handle_timeout(t);
    assert_eq!(drain(&mut m), [Action::Lookup]);
    let transport = ContactPoint::new("10.0.0.2", Some(25520), Some(ip(2)));
    m.handle_lookup(found(&[cp(1), cp(2), transport.clone(), cp(3)]), t);
    // Its own management contact point is probed like any other.
    assert_eq!(drain(&mut m), [Action::Probe(cp(1)), Action::Probe(cp(2)), Action::Probe(cp(3))]);
    assert_eq!(m.probe_url(&cp(3)), "http://10.0.0.3:8558/bootstrap/seed-nodes");
    let status = m.status();
    assert_eq!(status.dropped.len(), 1, "{:?}", status.dropped);
    assert_eq!(status.dropped[0].target, "10.0.0.2:25520");
    assert!(status.dropped[0].reason.contains("own cluster transport address"));
    // Answers from everyone probed; the transport address stays unanswered, so with every
    // contact point required no cluster is formed, and the transport address is never probed.
    for o in [1, 2, 3] {
        m.handle_probe(cp(o), no_cluster(&cp(o)), t + ms(5));
    }
    let mut now = t;
    while now < t + secs(30) {
        now = m.poll_timeout().expect("a timer");
        m.handle_timeout(now);
        for action in drain(&mut m) {
            match action {
                Action::Probe(target) => {
                    assert_ne!(target, transport);
                    m.handle_probe(target.clone(), no_cluster(&target), now);
                }
                Action::Lookup => {
                    m.handle_lookup(found(&[cp(1), cp(2), transport.clone(), cp(3)]), now);
                }
                join => panic!("{join:?}"),
            }
        }
    }
    let reason = &m.status().verdict.as_ref().unwrap().1.reason;
    assert!(
        reason.contains("missing seed-node information from contact points [10.0.0.2:25520]"),
        "{reason}"
    );
    assert!(reason.contains("1 discovered targets are not probed"), "{reason}");
}

#[test]
fn a_failed_probe_is_retried_each_probe_interval_until_the_deadline_then_given_up_until_the_next_lookup()
 {
    let refused_until = secs(20);
    // Lookups every 5 s, so that the one after giving up is told apart from the regular ones.
    let s = BootstrapSettings { discovery_interval: secs(5), ..settings() };
    let mut world = World::new(s, &[(1, Duration::ZERO)], |_, _| Some(vec![cp(1), cp(2), cp(3)]))
        .others(
            move |t, elapsed| {
                if *t == cp(2) && elapsed < refused_until { refused(t) } else { no_cluster(t) }
            },
        );
    // The first time it is given up.
    let mut step = Duration::ZERO;
    let gave_up = loop {
        step += ms(1);
        world.run_until(step);
        let status = world.machine(1).status();
        if let Some(at) = status.contact_points.get(&cp(2)).and_then(|p| p.gave_up_at) {
            break at - world.start;
        }
        assert!(step < secs(10), "never given up");
    };
    world.run_until(secs(10));
    let probes = world.times(1, &Action::Probe(cp(2)));
    let lookups = world.times(1, &Action::Lookup);
    // The first round: probed at once, then a probe interval (with jitter) after each failure.
    assert_eq!(probes[0], LOOKUP_LATENCY);
    let first_round: Vec<Duration> = probes.iter().copied().filter(|p| *p < gave_up).collect();
    for w in first_round.windows(2) {
        let gap = w[1] - w[0] - PROBE_LATENCY;
        assert!(gap >= secs(1) && gap <= secs(1).mul_f64(1.2), "{probes:?}");
    }
    // Given up by the first failure at or after the deadline, not by the first failure.
    assert!(first_round.len() >= 3, "{probes:?}");
    assert!(gave_up >= LOOKUP_LATENCY + secs(3), "gave up at {gave_up:?}");
    assert!(
        gave_up < LOOKUP_LATENCY + secs(3) + secs(1).mul_f64(1.2) + PROBE_LATENCY,
        "gave up at {gave_up:?}: {probes:?}"
    );
    // Probed again only once the next lookup found it, which came a backoff after giving up
    // (not at the regular lookup about 5 s after the first).
    let next_lookup = *lookups.iter().find(|l| **l >= gave_up).expect("a lookup after giving up");
    let backoff = next_lookup - gave_up;
    assert!(backoff >= secs(5) && backoff <= secs(5).mul_f64(1.2), "{gave_up:?} {lookups:?}");
    let after = *probes.iter().find(|p| **p > gave_up).expect("probed again");
    assert_eq!(after, next_lookup + LOOKUP_LATENCY);
    let failures = world.machine(1).status().contact_points[&cp(2)].failures;
    assert!(failures >= 3, "{failures}");
    // Once it answers, the failures are forgotten and the cluster is formed.
    world.run_until(secs(60));
    assert_eq!(world.joined(1).map(|(_, a)| a), Some(Action::JoinSelf));
    assert_eq!(world.machine(1).status().contact_points[&cp(2)].failures, 0);
}

#[test]
fn each_answer_moves_the_deadline_of_giving_a_contact_point_up() {
    // 10.0.0.2 answers for 5 s, then refuses; this node may not form a cluster, so it keeps probing.
    let s = BootstrapSettings { new_cluster_enabled: false, ..settings() };
    let mut world = World::new(s, &[(1, Duration::ZERO)], |_, _| Some(vec![cp(1), cp(2), cp(3)]))
        .others(
            |t, elapsed| if *t == cp(2) && elapsed >= secs(5) { refused(t) } else { no_cluster(t) },
        );
    world.run_until(secs(9));
    let probes = world.times(1, &Action::Probe(cp(2)));
    let last_answer =
        *probes.iter().rfind(|p| **p + PROBE_LATENCY < secs(5)).unwrap() + PROBE_LATENCY;
    let status = world.machine(1).status();
    let gave_up = status.contact_points[&cp(2)].gave_up_at.expect("gave up") - world.start;
    assert!(
        gave_up >= last_answer + secs(3),
        "{gave_up:?} after the last answer at {last_answer:?}"
    );
    assert!(gave_up <= last_answer + secs(3) + secs(1).mul_f64(1.2) + PROBE_LATENCY, "{gave_up:?}");
    assert_eq!(world.joined(1), None);
}

#[test]
fn the_contact_point_expected_to_form_the_cluster_is_probed_ten_times_as_often() {
    // 10.0.0.1 forms its cluster 300 ms after this node's margin passed.
    let formed_at = LOOKUP_LATENCY + ms(5_300);
    let mut world =
        World::new(settings(), &[(2, Duration::ZERO)], |_, _| Some(vec![cp(1), cp(2), cp(3)]))
            .others(move |t, elapsed| {
                if *t == cp(1) && elapsed >= formed_at {
                    in_cluster(t, &[addr(1)])
                } else {
                    no_cluster(t)
                }
            });
    world.run_until(secs(60));
    let (joined_at, joined) = world.joined(2).expect("joined");
    assert_eq!(joined, Action::JoinOthers(vec![addr(1)]));
    let margin = LOOKUP_LATENCY + secs(5);
    let hurried = world.times(2, &Action::Probe(cp(1)));
    let hurried: Vec<Duration> = hurried.into_iter().filter(|t| *t >= margin).collect();
    // Probed at the margin itself, then every 100 ms (+ up to 20 %).
    assert_eq!(hurried[0], margin, "{hurried:?}");
    for w in hurried.windows(2) {
        let gap = w[1] - w[0] - PROBE_LATENCY;
        assert!(gap >= ms(100) && gap <= ms(120), "{hurried:?}");
    }
    assert!(
        joined_at >= formed_at && joined_at <= formed_at + ms(125) + PROBE_LATENCY,
        "{joined_at:?}"
    );
    let others = world.times(2, &Action::Probe(cp(3))).into_iter().filter(|t| *t >= margin).count();
    assert!(others <= 1, "only the expected one is hurried");
}

#[test]
fn an_answer_from_a_contact_point_no_longer_discovered_is_dropped_and_no_probe_is_doubled() {
    let t = t0();
    let mut m = machine(1, &settings(), t);
    m.handle_timeout(t);
    drain(&mut m);
    m.handle_lookup(found(&[cp(1), cp(2), cp(3)]), t);
    assert_eq!(drain(&mut m).len(), 3);
    // 10.0.0.2 is gone from discovery while its probe is in flight: its report of a cluster is
    // not acted on, nor shown.
    m.handle_lookup(found(&[cp(1), cp(3)]), t + ms(1));
    m.handle_probe(cp(2), in_cluster(&cp(2), &[addr(2)]), t + ms(2));
    assert_eq!(drain(&mut m), []);
    assert!(!m.status().contact_points.contains_key(&cp(2)));
    // Back, gone and back again within one probe: that probe counts, and no second is sent.
    m.handle_lookup(found(&[cp(1), cp(2), cp(3)]), t + ms(3));
    assert_eq!(drain(&mut m), [Action::Probe(cp(2))]);
    m.handle_lookup(found(&[cp(1), cp(3)]), t + ms(4));
    m.handle_lookup(found(&[cp(1), cp(2), cp(3)]), t + ms(5));
    assert_eq!(drain(&mut m), []);
    // A result no probe was asked for is dropped.
    m.handle_probe(cp(9), in_cluster(&cp(9), &[addr(9)]), t + ms(6));
    assert_eq!(drain(&mut m), []);
    m.handle_probe(cp(2), in_cluster(&cp(2), &[addr(2)]), t + ms(7));
    assert_eq!(drain(&mut m), [Action::JoinOthers(vec![addr(2)])]);
}

#[test]
fn the_same_seed_gives_the_same_actions_at_the_same_instants_and_another_seed_other_jitter() {
    let run = |seed: u64| {
        let all = vec![cp(1), cp(2), cp(3)];
        let mut world = World::new(
            settings(),
            &[(1, Duration::ZERO), (2, ms(250)), (3, ms(400))],
            move |_, t| (t >= ms(1_500)).then(|| all.clone()),
        );
        world.seed = seed;
        world.run_until(secs(60));
        assert!(world.nodes.values().all(|n| n.joined.is_some()), "seed {seed}");
        world.log
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn stop_ends_the_machine_without_a_join_and_a_finished_machine_stays_finished() {
    let t = t0();
    let mut m = machine(1, &settings(), t);
    m.handle_timeout(t);
    m.handle_lookup(found(&[cp(1), cp(2), cp(3)]), t);
    m.stop();
    assert_eq!(m.status().phase, Phase::Stopped);
    assert_eq!(drain(&mut m), [], "the queued probes are dropped");
    assert_eq!(m.poll_timeout(), None);
    m.handle_timeout(t + secs(10));
    m.handle_lookup(found(&[cp(1), cp(2), cp(3)]), t + secs(10));
    assert_eq!(drain(&mut m), []);

    // Stopping after the decision keeps the decision's phase.
    let s = BootstrapSettings {
        required_contact_point_nr: 1,
        stable_margin: Duration::ZERO,
        ..settings()
    };
    let mut m = machine(1, &s, t);
    m.handle_timeout(t);
    assert_eq!(drain(&mut m), [Action::Lookup]);
    m.handle_lookup(found(&[cp(1)]), t);
    assert_eq!(drain(&mut m), [Action::Probe(cp(1))]);
    m.handle_probe(cp(1), no_cluster(&cp(1)), t);
    assert_eq!(drain(&mut m), [], "an answer without seed nodes waits for the decider's run");
    // The next lookup and probe are due as well, but are not asked for once the decision is made.
    m.handle_timeout(t + secs(2));
    assert_eq!(drain(&mut m), [Action::JoinSelf]);
    m.stop();
    assert_eq!(m.status().phase, Phase::FormingNew);
}

#[test]
fn the_machine_uses_neither_tokio_nor_async() {
    // The clock, thread and hash-map bans are clippy's (bootstrap/clippy.toml); this one is not
    // expressible there: the machine's source names no runtime at all.
    let code: Vec<&str> = include_str!("../machine.rs")
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    assert!(code.len() > 300, "the filter left too little: {}", code.len());
    for word in ["tokio", "async", ".await", "futures"] {
        assert!(!code.iter().any(|l| l.contains(word)), "bootstrap/src/machine.rs uses {word}");
    }
}
