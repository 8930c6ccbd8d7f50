//! The coordinator: a lookup loop with exponential backoff and jitter, one prober task per
//! discovered target (except this node's own cluster transport address), and the decider run on
//! a tick and whenever a probe reports an existing cluster. It returns the first decision to
//! join; the caller performs the join.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use convoke_discovery::{DiscoveryError, Lookup, Resolved, ServiceDiscovery};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::contact_point::{ContactPoint, select_hosts};
use crate::decider::{self, Decision, Observation, SeedNodesInformation, Verdict};
use crate::local_node::LocalNode;
use crate::probe::{ProbeError, Prober, SeedNodes};
use crate::settings::{BootstrapSettings, ContactPointSettings};
use crate::status::{BootstrapStatus, Dropped, Phase, ProbeOutcome};

type LookupFuture = Pin<Box<dyn Future<Output = Result<Resolved, DiscoveryError>> + Send>>;

enum ProbeEvent {
    Answered(ContactPoint, SeedNodes),
    Failed(ContactPoint, ProbeError),
    GaveUp(ContactPoint),
}

/// Runs bootstrap for one node until it decides to join.
#[derive(Debug)]
pub struct Coordinator {
    settings: BootstrapSettings,
    local: LocalNode,
    lookup: Lookup,
    /// `bootstrap.contact_point.fallback_port`, or this node's management port when unset.
    fallback_port: u16,
    discovery: Arc<dyn ServiceDiscovery>,
    prober: Arc<dyn Prober>,
    status: watch::Sender<BootstrapStatus>,
    rng: ChaCha8Rng,
}

impl Coordinator {
    /// A coordinator for `local`, configured by `settings`, and the receiver of its status.
    ///
    /// The settings are used as given; check them first with [`BootstrapSettings::validate`].
    /// `settings.enabled` and `settings.contact_point.ca_path` are the caller's: whether to run
    /// the coordinator at all, and the CA the `prober` trusts.
    pub fn new(
        settings: &BootstrapSettings,
        local: LocalNode,
        discovery: Arc<dyn ServiceDiscovery>,
        prober: Arc<dyn Prober>,
    ) -> (Self, watch::Receiver<BootstrapStatus>) {
        let lookup = settings.lookup(&local.system_name);
        let fallback_port =
            settings.contact_point.effective_fallback_port(local.contact_point.port);
        let status = BootstrapStatus::probing(lookup.to_string(), local.contact_point.to_string());
        let (tx, rx) = watch::channel(status);
        let seed = local.seed.unwrap_or_else(|| getrandom::u64().unwrap_or(0x5eed));
        let rng = ChaCha8Rng::seed_from_u64(seed);
        let coordinator = Self {
            settings: settings.clone(),
            local,
            lookup,
            fallback_port,
            discovery,
            prober,
            status: tx,
            rng,
        };
        (coordinator, rx)
    }

    /// Like [`Coordinator::run`], but gives up when `stop` resolves first (the node joined by
    /// other means, or stopped): the status then shows the `stopped` phase and `None` is returned.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Option<Decision> {
        let status = self.status.clone();
        tokio::select! {
            decision = self.run() => Some(decision),
            () = stop => {
                status.send_modify(|s| s.phase = Phase::Stopped);
                None
            }
        }
    }

    /// Looks up, probes and decides until the decision is to join; returns that decision
    /// ([`Decision::JoinOthers`] or [`Decision::JoinSelf`]). Dropping the future stops every
    /// prober.
    pub async fn run(mut self) -> Decision {
        let lookup = self.lookup.clone();
        tracing::info!(%lookup, self_contact_point = %self.local.contact_point, "bootstrap: looking for contact points");
        let (events_tx, mut events) = mpsc::channel::<ProbeEvent>(256);
        let mut probers: BTreeMap<ContactPoint, tokio::task::AbortHandle> = BTreeMap::new();
        let mut tasks = JoinSet::new();
        // (when the set last changed, the set); `None` after a failed lookup.
        let mut observation: Option<(Instant, BTreeSet<ContactPoint>)> = None;
        let mut seeds: BTreeMap<ContactPoint, Observation> = BTreeMap::new();
        // What the last successful lookup returned that is not probed, and why.
        let mut dropped: Vec<Dropped> = Vec::new();
        let mut failures = 0u32;
        let mut next_lookup = Instant::now();
        let mut in_flight: Option<LookupFuture> = None;
        let mut tick = tokio::time::interval(self.settings.contact_point.probe_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_reason = String::new();
        // The contact point expected to form the cluster, whose prober then asks more often.
        let (hurry, hurry_rx) = watch::channel(None::<ContactPoint>);
        // When the discovered set will have been stable for the margin: the decider runs then
        // rather than at the next tick (`docs/benchmarks.md`, "Formation").
        let mut margin_at: Option<Instant> = None;

        loop {
            let mut decide_now = false;
            tokio::select! {
                () = tokio::time::sleep_until(next_lookup), if in_flight.is_none() => {
                    let discovery = self.discovery.clone();
                    let lookup = lookup.clone();
                    let timeout = self.settings.resolve_timeout;
                    in_flight = Some(Box::pin(async move {
                        convoke_discovery::with_timeout(&lookup, timeout, discovery.lookup(&lookup, timeout)).await
                    }));
                }
                result = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                    in_flight = None;
                    let now = Instant::now();
                    match result {
                        Ok(resolved) => {
                            let found = resolved.targets.len() + resolved.dropped.len();
                            let (targets, now_dropped) = self.select(resolved);
                            let changed_at = match &observation {
                                Some((at, previous)) if *previous == targets => *at,
                                _ => now,
                            };
                            let dropped_changed = dropped != now_dropped;
                            dropped = now_dropped;
                            if observation.as_ref().is_none_or(|(_, previous)| *previous != targets) || dropped_changed {
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
                                    tracing::warn!("bootstrap: misconfiguration detected: a discovered contact point is this node's cluster transport address, not its management address; check bootstrap.port_name and bootstrap.contact_point.fallback_port");
                                }
                            }
                            seeds.retain(|t, _| targets.contains(t));
                            probers.retain(|t, handle| {
                                let keep = targets.contains(t);
                                if !keep { handle.abort(); }
                                keep
                            });
                            for target in &targets {
                                if !probers.contains_key(target) && !self.is_self_remoting(target) {
                                    let handle = tasks.spawn(probe_loop(
                                        target.clone(),
                                        self.url(target),
                                        self.prober.clone(),
                                        events_tx.clone(),
                                        self.settings.contact_point.clone(),
                                        self.rng.random(),
                                        hurry_rx.clone(),
                                    ));
                                    probers.insert(target.clone(), handle);
                                }
                            }
                            self.status.send_modify(|s| {
                                s.lookups += 1;
                                s.last_lookup = Some((now, Ok(found)));
                                s.dropped.clone_from(&dropped);
                                s.stable_since = Some(changed_at);
                                s.contact_points.retain(|t, _| targets.contains(t));
                                for t in &targets {
                                    s.contact_points.entry(t.clone()).or_default();
                                }
                            });
                            margin_at = Some(changed_at + self.settings.stable_margin).filter(|at| *at > now);
                            observation = Some((changed_at, targets));
                            failures = 0;
                            next_lookup = now + self.backoff(0);
                        }
                        Err(error) => {
                            tracing::warn!(%lookup, %error, "bootstrap: lookup failed; no decision until a lookup succeeds");
                            observation = None;
                            margin_at = None;
                            failures = failures.saturating_add(1);
                            next_lookup = now + self.backoff(failures);
                            self.status.send_modify(|s| {
                                s.lookups += 1;
                                s.last_lookup = Some((now, Err(error.to_string())));
                                s.stable_since = None;
                            });
                        }
                    }
                }
                Some(event) = events.recv() => {
                    let now = Instant::now();
                    match event {
                        ProbeEvent::Answered(target, answer) => {
                            let seed_nodes: Vec<String> = answer.seed_nodes.iter().map(|s| s.node.clone()).collect();
                            self.status.send_modify(|s| {
                                if let Some(p) = s.contact_points.get_mut(&target) {
                                    p.last = Some((now, ProbeOutcome::Answered { self_node: answer.self_node.clone(), seed_nodes: seed_nodes.clone() }));
                                    p.failures = 0;
                                }
                            });
                            // Answers for targets outside the current observation are ignored.
                            if observation.as_ref().is_some_and(|(_, set)| set.contains(&target)) {
                                decide_now = !seed_nodes.is_empty();
                                seeds.insert(target, Observation {
                                    observed_at: now,
                                    self_node: answer.self_node,
                                    seed_nodes: seed_nodes.into_iter().collect(),
                                });
                            }
                        }
                        ProbeEvent::Failed(target, error) => {
                            tracing::debug!(%target, %error, "bootstrap: probe failed");
                            self.status.send_modify(|s| {
                                if let Some(p) = s.contact_points.get_mut(&target) {
                                    p.last = Some((now, ProbeOutcome::Failed(error.to_string())));
                                    p.failures = p.failures.saturating_add(1);
                                }
                            });
                        }
                        ProbeEvent::GaveUp(target) => {
                            tracing::warn!(%target, timeout = ?self.settings.contact_point.probing_failure_timeout, "bootstrap: no answer from contact point within the probing failure timeout; it is probed again after the next lookup");
                            seeds.remove(&target);
                            probers.remove(&target);
                            next_lookup = now + self.backoff(failures);
                            self.status.send_modify(|s| {
                                if let Some(p) = s.contact_points.get_mut(&target) {
                                    p.gave_up_at = Some(now);
                                }
                            });
                        }
                    }
                }
                _ = tick.tick() => decide_now = true,
                () = tokio::time::sleep_until(margin_at.unwrap_or_else(Instant::now)), if margin_at.is_some() => {
                    margin_at = None;
                    decide_now = true;
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
            if !decide_now {
                continue;
            }
            let now = Instant::now();
            let mut verdict = match &observation {
                None => Verdict {
                    decision: Decision::KeepProbing,
                    reason: "no current discovery observation (no lookup has succeeded since the last failure)".into(),
                    self_in_contact_points: false,
                    expecting: None,
                },
                Some((changed_at, targets)) => {
                    let fresh: BTreeMap<ContactPoint, Observation> = seeds
                        .iter()
                        .filter(|(_, o)| now.saturating_duration_since(o.observed_at) <= self.settings.contact_point.probing_failure_timeout)
                        .map(|(t, o)| (t.clone(), o.clone()))
                        .collect();
                    decider::decide(
                        &SeedNodesInformation { now, contact_points_changed_at: *changed_at, contact_points: targets, observations: &fresh },
                        &self.settings,
                        &self.local.contact_point,
                    )
                }
            };
            if !dropped.is_empty() && verdict.decision == Decision::KeepProbing {
                verdict.reason.push_str(&format!(
                    "; {} discovered targets are not probed (see droppedTargets)",
                    dropped.len()
                ));
            }
            if verdict.reason != last_reason {
                match verdict.decision {
                    Decision::KeepProbing
                        if observation.is_some() && !verdict.self_in_contact_points =>
                    {
                        tracing::warn!(
                            self_contact_point = %self.local.contact_point,
                            reason = %verdict.reason,
                            "bootstrap: this node is not among the discovered contact points, so it cannot form a cluster"
                        );
                    }
                    Decision::KeepProbing => {
                        tracing::info!(reason = %verdict.reason, "bootstrap: keep probing")
                    }
                    Decision::JoinOthers(ref seeds) => {
                        tracing::info!(seeds = %seeds.join(", "), reason = %verdict.reason, "bootstrap: joining an existing cluster")
                    }
                    Decision::JoinSelf => {
                        tracing::info!(reason = %verdict.reason, "bootstrap: forming a new cluster")
                    }
                }
                last_reason.clone_from(&verdict.reason);
            }
            hurry.send_if_modified(|h| {
                let changed = *h != verdict.expecting;
                h.clone_from(&verdict.expecting);
                changed
            });
            let decision = verdict.decision.clone();
            self.status.send_modify(|s| {
                s.phase = match decision {
                    Decision::KeepProbing => Phase::Probing,
                    Decision::JoinOthers(_) => Phase::JoiningExisting,
                    Decision::JoinSelf => Phase::FormingNew,
                };
                s.verdict = Some((now, verdict));
            });
            if decision != Decision::KeepProbing {
                return decision;
            }
        }
    }

    /// The contact points to probe, and every target discovery returned that is not probed,
    /// with the reason: dropped by discovery itself (a pod not Running), by the fallback-port
    /// filter, or because it is this node's own cluster transport address.
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
        let (host, port) = &self.local.transport;
        target.host == *host && target.probe_port(self.fallback_port) == *port
    }

    fn url(&self, target: &ContactPoint) -> String {
        // `base_path` with one leading slash and none trailing, written either way (Akka writes
        // `base-path = "mgmt"`).
        let base = self.local.base_path.trim().trim_matches('/');
        format!(
            "{}://{}{}{base}/bootstrap/seed-nodes",
            self.local.scheme(),
            target.authority(self.fallback_port),
            if base.is_empty() { "" } else { "/" },
        )
    }

    /// The delay before the next lookup after `failures` consecutive failures, with jitter.
    fn backoff(&mut self, failures: u32) -> Duration {
        let base = self.settings.backoff(failures);
        jitter(&mut self.rng, base, self.settings.discovery_backoff_random_factor)
    }
}

fn jitter(rng: &mut ChaCha8Rng, base: Duration, factor: f64) -> Duration {
    if factor <= 0.0 {
        return base;
    }
    base.mul_f64(1.0 + rng.random::<f64>() * factor)
}

fn list(targets: &BTreeSet<ContactPoint>) -> String {
    targets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The probe interval towards the contact point expected to form the cluster: a tenth of the
/// configured one, and no less than this.
const HURRIED_PROBE_INTERVAL_MIN: Duration = Duration::from_millis(100);

/// Probes one target until its deadline passes without an answer. The request timeout is shorter
/// than the deadline, so a slow answer costs one attempt, not the whole prober. While `hurry`
/// names this target (the decider expects it to form the cluster), it is probed ten times as
/// often, so that this node learns within a fraction of the interval that the cluster exists.
async fn probe_loop(
    target: ContactPoint,
    url: String,
    prober: Arc<dyn Prober>,
    events: mpsc::Sender<ProbeEvent>,
    settings: ContactPointSettings,
    seed: u64,
    mut hurry: watch::Receiver<Option<ContactPoint>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut deadline = Instant::now() + settings.probing_failure_timeout;
    loop {
        let result = prober.probe(&url, settings.probe_timeout).await;
        let now = Instant::now();
        let event = match result {
            Ok(answer) => {
                deadline = now + settings.probing_failure_timeout;
                ProbeEvent::Answered(target.clone(), answer)
            }
            Err(error) => ProbeEvent::Failed(target.clone(), error),
        };
        let failed = matches!(event, ProbeEvent::Failed(..));
        if events.send(event).await.is_err() {
            return;
        }
        if failed && now >= deadline {
            let _ = events.send(ProbeEvent::GaveUp(target)).await;
            return;
        }
        let hurried = hurry.borrow_and_update().as_ref() == Some(&target);
        let interval = if hurried {
            (settings.probe_interval / 10)
                .max(HURRIED_PROBE_INTERVAL_MIN)
                .min(settings.probe_interval)
        } else {
            settings.probe_interval
        };
        tokio::select! {
            () = tokio::time::sleep(jitter(&mut rng, interval, settings.probe_interval_jitter)) => {}
            // Named as the one expected to form the cluster: probed at once.
            Ok(()) = hurry.changed(), if !hurried => {}
        }
    }
}

#[cfg(test)]
mod tests;
