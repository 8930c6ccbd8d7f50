//! The bootstrap state machine: which lookups and probes to run and when, what their results mean,
//! and when to join. Sans-IO: no clock, no sockets, no tasks; every input carries the caller's
//! `now`, and the jitter comes from a ChaCha8 generator seeded by the caller, so the same inputs
//! give the same actions. The [`Coordinator`](crate::Coordinator) drives it with tokio, discovery
//! and HTTP probes; a simulator can drive it over modelled ones. `docs/architecture.md`,
//! "Bootstrap's state machine", describes it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use convoke_discovery::{DiscoveryError, Lookup, Resolved};
use convoke_membership::timers;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::contact_point::{ContactPoint, SelfContactPoint, select_hosts};
use crate::decider::{self, Decision, Observation, SeedNodesInformation, Verdict};
use crate::local_node::LocalNode;
use crate::probe::{ProbeError, SeedNodes};
use crate::settings::BootstrapSettings;
use crate::status::{BootstrapStatus, Dropped, Phase, ProbeOutcome};

/// The probe interval towards the contact point expected to form the cluster: a tenth of the
/// configured one, and no less than this (`docs/benchmarks.md`, "Formation").
pub const HURRIED_PROBE_INTERVAL_MIN: Duration = Duration::from_millis(100);

/// What the driver must do next, from [`BootstrapMachine::poll_action`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run one discovery lookup of [`BootstrapMachine::lookup`], with the timeout
    /// `bootstrap.resolve_timeout`, and pass its result to [`BootstrapMachine::handle_lookup`].
    /// At most one is asked for at a time.
    Lookup,
    /// Probe this contact point once, at [`BootstrapMachine::probe_url`] with the timeout
    /// `bootstrap.contact_point.probe_timeout`, and pass the result to
    /// [`BootstrapMachine::handle_probe`]. At most one probe per contact point is asked for at a
    /// time; the machine schedules the next one itself.
    Probe(ContactPoint),
    /// Form a new cluster by joining this node itself. Final: nothing follows.
    JoinSelf,
    /// Join these seed nodes (cluster addresses) of an existing cluster. Final: nothing follows.
    JoinOthers(Vec<String>),
}

/// The machine's timers, in a [`timers::Timers`] table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// The next discovery lookup; unset while one is in flight.
    Lookup,
    /// The earliest next probe of any contact point (each one's own time is in its [`Prober`]).
    Probe,
    /// The decider's regular run, every probe interval.
    Decide,
    /// The instant the discovered set will have been stable for the margin: the decider runs then
    /// rather than at the next regular run.
    StableMargin,
}

impl timers::Timer for Timer {
    fn index(self) -> usize {
        self as usize
    }
}

type Timers = timers::Timers<Timer, 4>;

/// The probing of one discovered contact point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Prober {
    /// When its next probe is due; `None` while one is in flight.
    next: Option<Instant>,
    /// A probe that fails at or after this gives the contact point up until the next lookup; each
    /// answer moves it to a probing failure timeout later.
    deadline: Instant,
}

/// The bootstrap of one node as a deterministic state machine.
///
/// # Call protocol
/// 1. Build it with [`BootstrapMachine::new`], passing the current time and a seed.
/// 2. Feed it inputs, each with the current time `now` (monotonic, never decreasing):
///    - [`handle_lookup`](Self::handle_lookup) with the result of every [`Action::Lookup`];
///    - [`handle_probe`](Self::handle_probe) with the result of every [`Action::Probe`];
///    - [`handle_timeout`](Self::handle_timeout) whenever the deadline from
///      [`poll_timeout`](Self::poll_timeout) has passed (right after `new`, it already has).
/// 3. After every input, drain [`poll_action`](Self::poll_action) until `None` and carry out each
///    action, then re-arm the timer with [`poll_timeout`](Self::poll_timeout).
///
/// Every [`Action::Lookup`] and [`Action::Probe`] must be answered, once: a lookup or probe that
/// gets no reply is answered with its timeout error (the coordinator's lookups and probes end at
/// their timeouts). Until the answer comes, the machine asks for no other lookup, or no other
/// probe of that contact point.
///
/// [`Action::JoinSelf`] or [`Action::JoinOthers`] ends it: the driver joins, and the machine
/// ignores further inputs. [`stop`](Self::stop) ends it without a join. [`status`](Self::status)
/// may be read at any time.
#[derive(Debug)]
pub struct BootstrapMachine {
    settings: BootstrapSettings,
    me: SelfContactPoint,
    /// This node's cluster transport `host:port`, never probed.
    transport: (String, u16),
    /// The scheme and base path of probe URLs: `http://` or `https://`, and `""` or `/path`.
    scheme: &'static str,
    base_path: String,
    lookup: Lookup,
    /// `bootstrap.contact_point.fallback_port`, or this node's management port when unset.
    fallback_port: u16,
    rng: ChaCha8Rng,
    timers: Timers,
    actions: VecDeque<Action>,
    lookup_in_flight: bool,
    /// Consecutive failed lookups.
    failures: u32,
    /// (When the discovered set last changed, the set); `None` before the first lookup and after
    /// a failed one.
    observation: Option<(Instant, BTreeSet<ContactPoint>)>,
    /// What the last successful lookup returned that is not probed, and why.
    dropped: Vec<Dropped>,
    /// The contact points being probed: the discovered ones except this node's transport address,
    /// less those given up until the next lookup.
    probers: BTreeMap<ContactPoint, Prober>,
    /// Every contact point with a probe in flight, also those no longer probed: the answer of
    /// such a probe is dropped, unless a lookup found the contact point again meanwhile, when it
    /// counts as that prober's first probe.
    in_flight: BTreeSet<ContactPoint>,
    /// The latest answer of every probed contact point.
    seeds: BTreeMap<ContactPoint, Observation>,
    /// The contact point the last verdict expects to form the cluster: probed more often.
    expecting: Option<ContactPoint>,
    /// The reason of the last verdict, so that a verdict is logged only when it changes.
    last_reason: String,
    status: BootstrapStatus,
    /// Joined or stopped: no more actions or timers.
    done: bool,
}

impl BootstrapMachine {
    /// The machine of `local`, configured by `settings` (used as given; check them first with
    /// [`BootstrapSettings::validate`]), with the jitter drawn from `seed` (`local.seed` is the
    /// [`Coordinator`](crate::Coordinator)'s, not read here). Its first lookup and first decider
    /// run are due at `now`.
    pub fn new(settings: &BootstrapSettings, local: &LocalNode, seed: u64, now: Instant) -> Self {
        let lookup = settings.lookup(&local.system_name);
        let status = BootstrapStatus::probing(lookup.to_string(), local.contact_point.to_string());
        tracing::info!(%lookup, self_contact_point = %local.contact_point, "bootstrap: looking for contact points");
        let mut timers = Timers::default();
        timers.set(Timer::Lookup, now);
        timers.set(Timer::Decide, now);
        Self {
            settings: settings.clone(),
            me: local.contact_point.clone(),
            transport: local.transport.clone(),
            scheme: local.scheme(),
            base_path: local.base_path.clone(),
            fallback_port: settings.contact_point.effective_fallback_port(local.contact_point.port),
            lookup,
            rng: ChaCha8Rng::seed_from_u64(seed),
            timers,
            actions: VecDeque::new(),
            lookup_in_flight: false,
            failures: 0,
            observation: None,
            dropped: Vec::new(),
            probers: BTreeMap::new(),
            in_flight: BTreeSet::new(),
            seeds: BTreeMap::new(),
            expecting: None,
            last_reason: String::new(),
            status,
            done: false,
        }
    }

    /// What [`Action::Lookup`] looks up.
    pub fn lookup(&self) -> &Lookup {
        &self.lookup
    }

    /// The URL [`Action::Probe`] of `target` asks:
    /// `<scheme>://<host>:<port><base path>/bootstrap/seed-nodes`, with the fallback port when
    /// discovery gave none.
    pub fn probe_url(&self, target: &ContactPoint) -> String {
        // `base_path` with one leading slash and none trailing, written either way (Akka writes
        // `base-path = "mgmt"`).
        let base = self.base_path.trim().trim_matches('/');
        format!(
            "{}://{}{}{base}/bootstrap/seed-nodes",
            self.scheme,
            target.authority(self.fallback_port),
            if base.is_empty() { "" } else { "/" },
        )
    }

    /// What bootstrap is doing and why, for `GET /bootstrap/status`.
    pub fn status(&self) -> &BootstrapStatus {
        &self.status
    }

    /// The next action, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next; `None` once the machine ended.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.done { None } else { self.timers.earliest() }
    }

    /// Ends bootstrap without a join (this node joined by other means, or stops): the status shows
    /// the `stopped` phase, and no action follows.
    pub fn stop(&mut self) {
        if self.done {
            return;
        }
        self.finish();
        self.status.phase = Phase::Stopped;
    }

    /// Runs what is due at `now`: the next lookup, the probes whose time has come, and the
    /// decider at its regular run or when the stable margin has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.done {
            return;
        }
        if !self.lookup_in_flight && self.timers.take_due(Timer::Lookup, now) {
            self.lookup_in_flight = true;
            self.actions.push_back(Action::Lookup);
        }
        if self.timers.take_due(Timer::Probe, now) {
            let due: Vec<ContactPoint> = self
                .probers
                .iter()
                .filter(|(_, p)| p.next.is_some_and(|at| at <= now))
                .map(|(t, _)| t.clone())
                .collect();
            for target in due {
                self.probe(target);
            }
            self.arm_probe_timer();
        }
        let tick = self.timers.take_due(Timer::Decide, now);
        if tick {
            self.timers.set(Timer::Decide, now + self.settings.contact_point.probe_interval);
        }
        let margin_passed = self.timers.take_due(Timer::StableMargin, now);
        if tick || margin_passed {
            self.decide(now);
        }
    }

    /// A lookup finished at `now`, with the targets found or the error.
    pub fn handle_lookup(&mut self, result: Result<Resolved, DiscoveryError>, now: Instant) {
        if self.done {
            return;
        }
        self.lookup_in_flight = false;
        match result {
            Ok(resolved) => self.discovered(resolved, now),
            Err(error) => {
                tracing::warn!(lookup = %self.lookup, %error, "bootstrap: lookup failed; no decision until a lookup succeeds");
                self.observation = None;
                self.timers.clear(Timer::StableMargin);
                self.failures = self.failures.saturating_add(1);
                let next = now + self.backoff(self.failures);
                self.timers.set(Timer::Lookup, next);
                self.status.lookups += 1;
                self.status.last_lookup = Some((now, Err(error.to_string())));
                self.status.stable_since = None;
            }
        }
    }

    /// A probe of `target` finished at `now`: it answered with seed nodes (an empty list when the
    /// node is in no cluster), or failed. A result of a probe this machine did not ask for, or of
    /// a contact point no longer probed, is dropped.
    pub fn handle_probe(
        &mut self,
        target: ContactPoint,
        outcome: Result<SeedNodes, ProbeError>,
        now: Instant,
    ) {
        if !self.in_flight.remove(&target) || self.done {
            return;
        }
        let failure_timeout = self.settings.contact_point.probing_failure_timeout;
        let Some(prober) = self.probers.get_mut(&target) else { return };
        match outcome {
            Ok(answer) => {
                prober.deadline = now + failure_timeout;
                let seed_nodes: Vec<String> =
                    answer.seed_nodes.iter().map(|s| s.node.clone()).collect();
                if let Some(p) = self.status.contact_points.get_mut(&target) {
                    p.last = Some((
                        now,
                        ProbeOutcome::Answered {
                            self_node: answer.self_node.clone(),
                            seed_nodes: seed_nodes.clone(),
                        },
                    ));
                    p.failures = 0;
                }
                self.schedule_probe(&target, now);
                // Answers of contact points outside the current observation are not used.
                if self.observation.as_ref().is_some_and(|(_, set)| set.contains(&target)) {
                    let decide_now = !seed_nodes.is_empty();
                    self.seeds.insert(
                        target,
                        Observation {
                            observed_at: now,
                            self_node: answer.self_node,
                            seed_nodes: seed_nodes.into_iter().collect(),
                        },
                    );
                    if decide_now {
                        self.decide(now);
                    }
                }
            }
            Err(error) => {
                let give_up = now >= prober.deadline;
                tracing::debug!(%target, %error, "bootstrap: probe failed");
                if let Some(p) = self.status.contact_points.get_mut(&target) {
                    p.last = Some((now, ProbeOutcome::Failed(error.to_string())));
                    p.failures = p.failures.saturating_add(1);
                }
                if give_up {
                    self.give_up(&target, now);
                } else {
                    self.schedule_probe(&target, now);
                }
            }
        }
        self.arm_probe_timer();
    }

    /// A successful lookup: the new observation, the probers that start and stop, and the status.
    fn discovered(&mut self, resolved: Resolved, now: Instant) {
        let found = resolved.targets.len() + resolved.dropped.len();
        let (targets, dropped) = self.select(resolved);
        let unchanged = self.observation.as_ref().filter(|(_, previous)| *previous == targets);
        let changed_at = unchanged.map_or(now, |(at, _)| *at);
        if unchanged.is_none() || self.dropped != dropped {
            if dropped.is_empty() {
                tracing::info!(targets = %list(&targets), "bootstrap: discovered contact points");
            } else {
                tracing::info!(
                    targets = %list(&targets),
                    not_probed = %dropped.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                    "bootstrap: discovered {found} targets; {} are not probed (see /bootstrap/status, droppedTargets)",
                    dropped.len()
                );
            }
            if targets.iter().any(|t| self.is_self_remoting(t)) {
                tracing::warn!(
                    "bootstrap: misconfiguration detected: a discovered contact point is this node's cluster transport address, not its management address; check bootstrap.port_name and bootstrap.contact_point.fallback_port"
                );
            }
        }
        self.dropped = dropped;
        self.seeds.retain(|t, _| targets.contains(t));
        self.probers.retain(|t, _| targets.contains(t));
        let failure_timeout = self.settings.contact_point.probing_failure_timeout;
        for target in &targets {
            if self.probers.contains_key(target) || self.is_self_remoting(target) {
                continue;
            }
            self.probers
                .insert(target.clone(), Prober { next: None, deadline: now + failure_timeout });
            // A probe still in flight from before the contact point was dropped counts as the
            // first one.
            if self.in_flight.insert(target.clone()) {
                self.actions.push_back(Action::Probe(target.clone()));
            }
        }
        self.arm_probe_timer();
        let s = &mut self.status;
        s.lookups += 1;
        s.last_lookup = Some((now, Ok(found)));
        s.dropped.clone_from(&self.dropped);
        s.stable_since = Some(changed_at);
        s.contact_points.retain(|t, _| targets.contains(t));
        for t in &targets {
            s.contact_points.entry(t.clone()).or_default();
        }
        match Some(changed_at + self.settings.stable_margin).filter(|at| *at > now) {
            Some(at) => self.timers.set(Timer::StableMargin, at),
            None => self.timers.clear(Timer::StableMargin),
        }
        self.observation = Some((changed_at, targets));
        self.failures = 0;
        let next = now + self.backoff(0);
        self.timers.set(Timer::Lookup, next);
    }

    /// No answer from `target` within the probing failure timeout: it is probed again after the
    /// next lookup, which comes a backoff from now.
    fn give_up(&mut self, target: &ContactPoint, now: Instant) {
        tracing::warn!(%target, timeout = ?self.settings.contact_point.probing_failure_timeout, "bootstrap: no answer from contact point within the probing failure timeout; it is probed again after the next lookup");
        self.seeds.remove(target);
        self.probers.remove(target);
        if !self.lookup_in_flight {
            let next = now + self.backoff(self.failures);
            self.timers.set(Timer::Lookup, next);
        }
        if let Some(p) = self.status.contact_points.get_mut(target) {
            p.gave_up_at = Some(now);
        }
    }

    /// Runs the decider at `now` on the current observation and the answers no older than the
    /// probing failure timeout; a decision to join ends the machine.
    fn decide(&mut self, now: Instant) {
        let failure_timeout = self.settings.contact_point.probing_failure_timeout;
        let mut verdict = match &self.observation {
            None => Verdict {
                decision: Decision::KeepProbing,
                reason: "no current discovery observation (no lookup has succeeded since the last failure)".into(),
                self_in_contact_points: false,
                expecting: None,
            },
            Some((changed_at, targets)) => {
                let fresh: BTreeMap<ContactPoint, Observation> = self
                    .seeds
                    .iter()
                    .filter(|(_, o)| now.saturating_duration_since(o.observed_at) <= failure_timeout)
                    .map(|(t, o)| (t.clone(), o.clone()))
                    .collect();
                let info = SeedNodesInformation {
                    now,
                    contact_points_changed_at: *changed_at,
                    contact_points: targets,
                    observations: &fresh,
                };
                decider::decide(&info, &self.settings, &self.me)
            }
        };
        if !self.dropped.is_empty() && verdict.decision == Decision::KeepProbing {
            let _ = write!(
                verdict.reason,
                "; {} discovered targets are not probed (see droppedTargets)",
                self.dropped.len()
            );
        }
        if verdict.reason != self.last_reason {
            self.log(&verdict);
            self.last_reason.clone_from(&verdict.reason);
        }
        if verdict.expecting != self.expecting {
            self.expecting.clone_from(&verdict.expecting);
            // Named as the one expected to form the cluster: probed at once, and from then on at
            // the hurried interval.
            if let Some(target) = self.expecting.clone()
                && self.probers.get(&target).is_some_and(|p| p.next.is_some())
            {
                self.probe(target);
                self.arm_probe_timer();
            }
        }
        self.status.phase = match verdict.decision {
            Decision::KeepProbing => Phase::Probing,
            Decision::JoinOthers(_) => Phase::JoiningExisting,
            Decision::JoinSelf => Phase::FormingNew,
        };
        let decision = verdict.decision.clone();
        self.status.verdict = Some((now, verdict));
        let action = match decision {
            Decision::KeepProbing => return,
            Decision::JoinOthers(seeds) => Action::JoinOthers(seeds),
            Decision::JoinSelf => Action::JoinSelf,
        };
        self.finish();
        self.actions.push_back(action);
    }

    fn log(&self, verdict: &Verdict) {
        match &verdict.decision {
            Decision::KeepProbing
                if self.observation.is_some() && !verdict.self_in_contact_points =>
            {
                tracing::warn!(
                    self_contact_point = %self.me,
                    reason = %verdict.reason,
                    "bootstrap: this node is not among the discovered contact points, so it cannot form a cluster"
                );
            }
            Decision::KeepProbing => {
                tracing::info!(reason = %verdict.reason, "bootstrap: keep probing");
            }
            Decision::JoinOthers(seeds) => {
                tracing::info!(seeds = %seeds.join(", "), reason = %verdict.reason, "bootstrap: joining an existing cluster");
            }
            Decision::JoinSelf => {
                tracing::info!(reason = %verdict.reason, "bootstrap: forming a new cluster");
            }
        }
    }

    /// No more actions, timers or probes.
    fn finish(&mut self) {
        self.done = true;
        self.timers = Timers::default();
        self.actions.clear();
        self.probers.clear();
    }

    /// Asks for a probe of `target` now.
    fn probe(&mut self, target: ContactPoint) {
        if let Some(p) = self.probers.get_mut(&target) {
            p.next = None;
            self.in_flight.insert(target.clone());
            self.actions.push_back(Action::Probe(target));
        }
    }

    /// Schedules the next probe of `target` after a probe that finished at `now`: a probe interval
    /// later, or a hurried one for the contact point expected to form the cluster, with jitter.
    fn schedule_probe(&mut self, target: &ContactPoint, now: Instant) {
        let cp = &self.settings.contact_point;
        let interval = if self.expecting.as_ref() == Some(target) {
            (cp.probe_interval / 10).max(HURRIED_PROBE_INTERVAL_MIN).min(cp.probe_interval)
        } else {
            cp.probe_interval
        };
        let delay = jitter(&mut self.rng, interval, cp.probe_interval_jitter);
        if let Some(p) = self.probers.get_mut(target) {
            p.next = Some(now + delay);
        }
    }

    /// Sets [`Timer::Probe`] to the earliest next probe.
    fn arm_probe_timer(&mut self) {
        match self.probers.values().filter_map(|p| p.next).min() {
            Some(at) => self.timers.set(Timer::Probe, at),
            None => self.timers.clear(Timer::Probe),
        }
    }

    /// The contact points to probe, and every target discovery returned that is not probed,
    /// with the reason: dropped by discovery itself (a pod not Running), by the fallback-port
    /// filter, or because it is this node's own cluster transport address (which stays among the
    /// contact points, so that the decider sees the misconfiguration, but is never probed).
    fn select(&self, resolved: Resolved) -> (BTreeSet<ContactPoint>, Vec<Dropped>) {
        let mut dropped: Vec<Dropped> = resolved
            .dropped
            .into_iter()
            .map(|d| Dropped { target: d.target, reason: d.reason })
            .collect();
        let (selected, filtered) = select_hosts(
            resolved.targets.into_iter().map(ContactPoint::from).collect(),
            self.lookup.port_name.is_some(),
            self.settings.contact_point.filter_on_fallback_port,
            self.fallback_port,
        );
        dropped.extend(
            filtered.into_iter().map(|(t, reason)| Dropped { target: t.to_string(), reason }),
        );
        for target in selected.iter().filter(|t| self.is_self_remoting(t)) {
            dropped.push(Dropped {
                target: target.to_string(),
                reason: "it is this node's own cluster transport address, not its management \
                         address, so it is not probed; check bootstrap.port_name and \
                         bootstrap.contact_point.fallback_port"
                    .into(),
            });
        }
        (selected, dropped)
    }

    fn is_self_remoting(&self, target: &ContactPoint) -> bool {
        let (host, port) = &self.transport;
        target.host == *host && target.probe_port(self.fallback_port) == *port
    }

    /// The delay before the next lookup after `failures` consecutive failures, with jitter.
    fn backoff(&mut self, failures: u32) -> Duration {
        let base = self.settings.backoff(failures);
        jitter(&mut self.rng, base, self.settings.discovery_backoff_random_factor)
    }
}

/// `base`, made up to `factor` longer at random.
fn jitter(rng: &mut ChaCha8Rng, base: Duration, factor: f64) -> Duration {
    if factor <= 0.0 {
        return base;
    }
    base.mul_f64(1.0 + rng.random::<f64>() * factor)
}

fn list(targets: &BTreeSet<ContactPoint>) -> String {
    targets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests;
