//! A virtual-time network of membership cores for scenario tests: message delays, drops,
//! per-link blocking (partitions), crashes and restarts. Everything is driven by one seeded RNG,
//! so a test run is a pure function of its seed.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use convoke_membership::config::Config;
use convoke_membership::event::ClusterEvent;
use convoke_membership::gossip::WallMillis;
use convoke_membership::member::MemberStatus;
use convoke_membership::message::Message;
use convoke_membership::sbr::{DowningDecision, InMemoryLeaseTable};
use convoke_membership::{Address, Cluster, Uid, UniqueAddress};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const SYSTEM: &str = "test";

/// One node slot: a running core, or nothing after a crash.
pub struct Node {
    pub core: Option<Cluster>,
    pub events: Vec<(Duration, ClusterEvent)>,
    /// The split-brain resolver's decisions, for assertions and failure messages.
    pub decisions: Vec<(Duration, DowningDecision)>,
    /// A paused node processes nothing until resumed (messages to it are queued).
    pub paused: bool,
}

struct InFlight {
    at: Instant,
    seq: u64,
    from: UniqueAddress,
    to: Address,
    message: Message,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub struct Net {
    pub start: Instant,
    pub now: Instant,
    pub nodes: BTreeMap<Address, Node>,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    rng: ChaCha8Rng,
    /// Message delay is uniform in [min_delay, max_delay].
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Probability that a message is lost.
    pub drop_rate: f64,
    blocked: BTreeSet<(Address, Address)>,
    /// The lease every node's lease requests go to, answered at once; none answers nothing.
    pub lease: Option<InMemoryLeaseTable>,
    trace: DefaultHasher,
    pub delivered: u64,
    pub largest_gossip_members: usize,
    /// The last status each observer reported for each member, to check every change against the
    /// transition graph.
    last_status: BTreeMap<(Address, UniqueAddress), MemberStatus>,
}

/// Fast settings (short intervals and timeouts, as Akka's multi-node tests use), with automatic
/// downing off: these scenarios partition and crash nodes and expect only the downs they make
/// themselves.
pub fn test_config() -> Config {
    let mut c = Config::default();
    c.split_brain_resolver.active_strategy = "off".to_owned();
    c.system_name = SYSTEM.to_owned();
    c.gossip_interval = Duration::from_millis(200);
    c.leader_actions_interval = Duration::from_millis(200);
    c.unreachable_nodes_reaper_interval = Duration::from_millis(500);
    c.periodic_tasks_initial_delay = Duration::from_millis(300);
    c.failure_detector.heartbeat_interval = Duration::from_millis(500);
    c
}

pub fn addr(port: u16) -> Address {
    Address::new(SYSTEM, "127.0.0.1", port).unwrap()
}

impl Net {
    pub fn new(seed: u64) -> Self {
        // A fixed base instant: only differences from it matter.
        #[allow(clippy::disallowed_methods)]
        let start = Instant::now();
        Self {
            start,
            now: start,
            nodes: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(10),
            drop_rate: 0.0,
            blocked: BTreeSet::new(),
            lease: None,
            trace: DefaultHasher::new(),
            delivered: 0,
            largest_gossip_members: 0,
            last_status: BTreeMap::new(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Starts a node on `port` with `config` (its seed is set from the network's RNG).
    pub fn start_node(&mut self, port: u16, mut config: Config) -> UniqueAddress {
        let uid = Uid::new(self.rng.random_range(1..u64::MAX)).unwrap();
        config.seed = self.rng.random();
        let node = UniqueAddress::new(addr(port), uid);
        let core =
            Cluster::new(config, node.clone(), self.now, WallMillis(1_700_000_000_000)).unwrap();
        self.nodes.insert(
            node.address.clone(),
            Node { core: Some(core), events: Vec::new(), decisions: Vec::new(), paused: false },
        );
        node
    }

    pub fn core(&self, port: u16) -> &Cluster {
        self.nodes[&addr(port)].core.as_ref().expect("node is running")
    }

    pub fn core_mut(&mut self, port: u16) -> &mut Cluster {
        self.nodes.get_mut(&addr(port)).unwrap().core.as_mut().expect("node is running")
    }

    /// Runs a command on a node's core and drains its outputs.
    pub fn with<R>(&mut self, port: u16, f: impl FnOnce(&mut Cluster, Instant) -> R) -> R {
        let now = self.now;
        let r = f(self.core_mut(port), now);
        self.drain(&addr(port));
        r
    }

    pub fn join_seeds(&mut self, port: u16, seeds: &[u16]) {
        let seeds: Vec<Address> = seeds.iter().map(|p| addr(*p)).collect();
        self.with(port, |c, now| c.join_seed_nodes(now, seeds).unwrap());
    }

    pub fn join(&mut self, port: u16, to: u16) {
        self.with(port, |c, now| c.join(now, addr(to)).unwrap());
    }

    /// Stops a node abruptly: no more messages in or out.
    pub fn crash(&mut self, port: u16) {
        self.nodes.get_mut(&addr(port)).unwrap().core = None;
    }

    pub fn is_running(&self, port: u16) -> bool {
        self.nodes.get(&addr(port)).is_some_and(|n| n.core.is_some())
    }

    /// Blocks both directions between every node of `a` and every node of `b`.
    pub fn partition(&mut self, a: &[u16], b: &[u16]) {
        for x in a {
            for y in b {
                self.blocked.insert((addr(*x), addr(*y)));
                self.blocked.insert((addr(*y), addr(*x)));
            }
        }
    }

    /// Blocks one direction only.
    pub fn block(&mut self, from: u16, to: u16) {
        self.blocked.insert((addr(from), addr(to)));
    }

    /// Lets messages flow again between `a` and `b`, both ways.
    pub fn unblock(&mut self, a: u16, b: u16) {
        self.blocked.remove(&(addr(a), addr(b)));
        self.blocked.remove(&(addr(b), addr(a)));
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    fn drain(&mut self, at: &Address) {
        let elapsed = self.elapsed();
        let Some(node) = self.nodes.get_mut(at) else { return };
        let Some(core) = node.core.as_mut() else { return };
        let from = core.self_node().clone();
        if let Some(table) = &self.lease {
            while let Some(req) = core.poll_lease_request() {
                let granted = table.answer(&req, self.now, None);
                core.handle_lease_result(self.now, req.op, granted);
            }
        }
        while let Some(d) = core.poll_downing_decision() {
            node.decisions.push((elapsed, d));
        }
        let mut out = Vec::new();
        while let Some(t) = core.poll_transmit() {
            out.push(t);
        }
        while let Some(e) = core.poll_event() {
            if let Some(m) = e.member().filter(|_| {
                !matches!(e, ClusterEvent::UnreachableMember(_) | ClusterEvent::ReachableMember(_))
            }) {
                let key = (at.clone(), m.node().clone());
                if let Some(prev) = self.last_status.insert(key, m.status()) {
                    assert!(
                        prev.can_reach(m.status()),
                        "{at} saw {} move {prev} -> {} at {elapsed:?}",
                        m.node(),
                        m.status()
                    );
                }
            }
            e.type_name().hash(&mut self.trace);
            elapsed.hash(&mut self.trace);
            node.events.push((elapsed, e));
        }
        if core.shutdown_reason().is_some() {
            node.core = None;
        }
        for t in out {
            if let Message::Gossip { gossip, .. } | Message::Welcome { gossip, .. } = &t.message {
                self.largest_gossip_members = self.largest_gossip_members.max(gossip.len());
            }
            if self.blocked.contains(&(from.address.clone(), t.to.clone())) {
                continue;
            }
            if self.drop_rate > 0.0 && self.rng.random::<f64>() < self.drop_rate {
                continue;
            }
            let delay_ns =
                self.rng.random_range(self.min_delay.as_nanos()..=self.max_delay.as_nanos());
            let at = self.now + Duration::from_nanos(u64::try_from(delay_ns).unwrap());
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at,
                seq: self.seq,
                from: from.clone(),
                to: t.to,
                message: t.message,
            }));
        }
    }

    fn next_timer(&self) -> Option<(Instant, Address)> {
        self.nodes
            .iter()
            .filter(|(_, n)| !n.paused)
            .filter_map(|(a, n)| n.core.as_ref()?.poll_timeout().map(|t| (t, a.clone())))
            .min()
    }

    /// Processes every event up to `deadline`, in time order.
    pub fn run_until_time(&mut self, deadline: Instant) {
        loop {
            let msg_at = self.queue.peek().map(|Reverse(m)| m.at);
            let timer = self.next_timer();
            let next = match (msg_at, &timer) {
                (None, None) => break,
                (Some(m), None) => m,
                (None, Some((t, _))) => *t,
                (Some(m), Some((t, _))) => m.min(*t),
            };
            if next > deadline {
                break;
            }
            self.now = self.now.max(next);
            if msg_at == Some(next) {
                let Reverse(m) = self.queue.pop().unwrap();
                self.deliver(m);
            } else if let Some((_, a)) = timer {
                let now = self.now;
                if let Some(core) = self.nodes.get_mut(&a).and_then(|n| n.core.as_mut()) {
                    core.handle_timeout(now);
                }
                self.drain(&a);
            }
        }
        self.now = self.now.max(deadline);
    }

    fn deliver(&mut self, m: InFlight) {
        let now = self.now;
        let Some(node) = self.nodes.get_mut(&m.to) else { return };
        if node.paused {
            // Re-queue behind everything due now; it is handled on resume.
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at: now + Duration::from_millis(1),
                seq: self.seq,
                ..m
            }));
            return;
        }
        let Some(core) = node.core.as_mut() else { return };
        self.delivered += 1;
        // Every message crosses the wire codec, as it would between real nodes.
        let bytes = convoke_membership::wire::encode(&m.message);
        let message =
            convoke_membership::wire::decode(&bytes).expect("a message the core sent decodes");
        assert_eq!(message, m.message, "codec round trip");
        m.message.kind().hash(&mut self.trace);
        m.from.hash(&mut self.trace);
        core.handle_message(now, m.from, message);
        self.drain(&m.to);
    }

    pub fn run_for(&mut self, d: Duration) {
        let deadline = self.now + d;
        self.run_until_time(deadline);
    }

    /// Runs until `pred` holds (checked every 100 ms of virtual time) or `max` passes; returns
    /// whether it held.
    pub fn run_until(&mut self, max: Duration, mut pred: impl FnMut(&Net) -> bool) -> bool {
        let deadline = self.now + max;
        while self.now < deadline {
            if pred(self) {
                return true;
            }
            let step = (self.now + Duration::from_millis(100)).min(deadline);
            self.run_until_time(step);
        }
        pred(self)
    }

    /// The status of `subject` in `observer`'s view (None when not a member there).
    pub fn status(&self, observer: u16, subject: u16) -> Option<MemberStatus> {
        let core = self.nodes.get(&addr(observer))?.core.as_ref()?;
        core.gossip().members().find(|m| m.address() == &addr(subject)).map(|m| m.status())
    }

    /// Ports of the members in `observer`'s view.
    pub fn member_ports(&self, observer: u16) -> Vec<u16> {
        self.core(observer).gossip().members().map(|m| m.address().port()).collect()
    }

    /// Whether every running node in `ports` sees exactly `ports` as members, all Up, converged.
    pub fn all_up(&self, ports: &[u16]) -> bool {
        ports.iter().all(|p| {
            self.is_running(*p)
                && self.member_ports(*p) == sorted(ports)
                && ports.iter().all(|q| self.status(*p, *q) == Some(MemberStatus::Up))
                && self.core(*p).convergence()
        })
    }

    /// Whether every node in `observers` has no member at `subject` any more.
    pub fn removed_everywhere(&self, observers: &[u16], subject: u16) -> bool {
        observers.iter().all(|p| self.is_running(*p) && self.status(*p, subject).is_none())
    }

    pub fn unreachable_in(&self, observer: u16, subject: u16) -> bool {
        self.core(observer).state().unreachable.iter().any(|(m, _)| m.address() == &addr(subject))
    }

    pub fn leader(&self, observer: u16) -> Option<u16> {
        self.core(observer).state().leader.map(|a| a.port())
    }

    pub fn events(&self, port: u16) -> &[(Duration, ClusterEvent)] {
        &self.nodes[&addr(port)].events
    }

    /// Names of `port`'s events about `subject`.
    pub fn event_names_about(&self, port: u16, subject: u16) -> Vec<&'static str> {
        self.events(port)
            .iter()
            .filter(|(_, e)| e.member().is_some_and(|m| m.address() == &addr(subject)))
            .map(|(_, e)| e.type_name())
            .collect()
    }

    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }

    /// Starts `ports` with `config` and forms a cluster through the first as seed.
    pub fn form_cluster(&mut self, ports: &[u16], config: &Config) {
        for p in ports {
            self.start_node(*p, config.clone());
        }
        for p in ports {
            self.join_seeds(*p, &[ports[0]]);
        }
        assert!(
            self.run_until(Duration::from_secs(30), |n| n.all_up(ports)),
            "cluster did not form"
        );
    }
}

pub fn sorted(ports: &[u16]) -> Vec<u16> {
    let mut v = ports.to_vec();
    v.sort_unstable();
    v
}
