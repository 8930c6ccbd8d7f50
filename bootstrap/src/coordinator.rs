//! The coordinator: the tokio driver of the [`BootstrapMachine`]. It runs the lookups and probes
//! the machine asks for, feeds their results and the time back, publishes the machine's status,
//! and returns the machine's decision to join; the caller performs the join. Every decision (what
//! to probe, when, and when to join) is the machine's: `docs/architecture.md`, "Bootstrap's state
//! machine".

use std::future::{self, Future};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoke_discovery::{DiscoveryError, Lookup, Resolved, ServiceDiscovery};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::watch;

use crate::contact_point::ContactPoint;
use crate::decider::Decision;
use crate::local_node::LocalNode;
use crate::machine::{Action, BootstrapMachine};
use crate::probe::{ProbeError, Prober, SeedNodes};
use crate::settings::BootstrapSettings;
use crate::status::BootstrapStatus;

type LookupFuture = Pin<Box<dyn Future<Output = Result<Resolved, DiscoveryError>> + Send>>;
type ProbeFuture =
    Pin<Box<dyn Future<Output = (ContactPoint, Result<SeedNodes, ProbeError>)> + Send>>;

/// Runs bootstrap for one node until it decides to join.
#[derive(Debug)]
pub struct Coordinator {
    machine: BootstrapMachine,
    discovery: Arc<dyn ServiceDiscovery>,
    prober: Arc<dyn Prober>,
    resolve_timeout: Duration,
    probe_timeout: Duration,
    status: watch::Sender<BootstrapStatus>,
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
        let seed = local.seed.unwrap_or_else(|| getrandom::u64().unwrap_or(0x5eed));
        let machine = BootstrapMachine::new(settings, &local, seed, now());
        let (status, rx) = watch::channel(machine.status().clone());
        let coordinator = Self {
            machine,
            discovery,
            prober,
            resolve_timeout: settings.resolve_timeout,
            probe_timeout: settings.contact_point.probe_timeout,
            status,
        };
        (coordinator, rx)
    }

    /// Looks up, probes and decides until the decision is to join; returns that decision
    /// ([`Decision::JoinOthers`] or [`Decision::JoinSelf`]). Dropping the future stops every
    /// probe.
    pub async fn run(self) -> Decision {
        self.run_until(future::pending()).await.expect("bootstrap runs until it decides")
    }

    /// Like [`Coordinator::run`], but gives up when `stop` resolves first (the node joined by
    /// other means, or stopped): the status then shows the `stopped` phase and `None` is returned.
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) -> Option<Decision> {
        let mut stop = pin!(stop);
        let mut lookup: Option<LookupFuture> = None;
        let mut probes: FuturesUnordered<ProbeFuture> = FuturesUnordered::new();
        loop {
            while let Some(action) = self.machine.poll_action() {
                let decision = match action {
                    Action::Lookup => {
                        lookup = Some(self.lookup(self.machine.lookup().clone()));
                        continue;
                    }
                    Action::Probe(target) => {
                        probes.push(self.probe(target));
                        continue;
                    }
                    Action::JoinSelf => Decision::JoinSelf,
                    Action::JoinOthers(seeds) => Decision::JoinOthers(seeds),
                };
                self.publish();
                return Some(decision);
            }
            self.publish();
            let deadline = self.machine.poll_timeout();
            let timeout = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => future::pending().await,
                }
            };
            tokio::select! {
                () = &mut stop => {
                    self.machine.stop();
                    self.publish();
                    return None;
                }
                result = async { lookup.as_mut().expect("guarded").await }, if lookup.is_some() => {
                    lookup = None;
                    self.machine.handle_lookup(result, now());
                }
                Some((target, outcome)) = probes.next(), if !probes.is_empty() => {
                    self.machine.handle_probe(target, outcome, now());
                }
                () = timeout => self.machine.handle_timeout(now()),
            }
        }
    }

    fn lookup(&self, lookup: Lookup) -> LookupFuture {
        let discovery = self.discovery.clone();
        let timeout = self.resolve_timeout;
        Box::pin(async move {
            convoke_discovery::with_timeout(&lookup, timeout, discovery.lookup(&lookup, timeout))
                .await
        })
    }

    fn probe(&self, target: ContactPoint) -> ProbeFuture {
        let prober = self.prober.clone();
        let url = self.machine.probe_url(&target);
        let timeout = self.probe_timeout;
        Box::pin(async move {
            let outcome = prober.probe(&url, timeout).await;
            (target, outcome)
        })
    }

    /// Sends the machine's status to the watchers when it changed.
    fn publish(&self) {
        let current = self.machine.status();
        self.status.send_if_modified(|s| {
            let changed = s != current;
            if changed {
                s.clone_from(current);
            }
            changed
        });
    }
}

/// The driver's clock: tokio's, so that paused test time moves it too. The only clock read in
/// this crate; the machine sees only the instants passed in.
#[allow(clippy::disallowed_methods, reason = "the driver reads the clock for the machine")]
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[cfg(test)]
mod tests;
