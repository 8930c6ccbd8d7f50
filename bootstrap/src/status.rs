//! What bootstrap is doing and why, for `GET /bootstrap/status`: the
//! [`BootstrapMachine`](crate::BootstrapMachine) keeps it, the coordinator publishes it.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::contact_point::ContactPoint;
use crate::decider::{Decision, Verdict};

/// The phase of bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Bootstrap is not used (static seed nodes, disabled, or no management server).
    NotUsed,
    /// Looking up and probing.
    Probing,
    /// Decided to join an existing cluster.
    JoiningExisting,
    /// Decided to form a new cluster.
    FormingNew,
    /// The node joined a cluster by other means (an API call), so bootstrap stopped.
    Stopped,
}

/// The last result of one target's prober.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// It answered.
    Answered {
        /// The answering node.
        self_node: String,
        /// The seed nodes it advertised.
        seed_nodes: Vec<String>,
    },
    /// It failed.
    Failed(String),
}

/// One target's probing state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeState {
    /// The last outcome and when it happened.
    pub last: Option<(Instant, ProbeOutcome)>,
    /// Consecutive failures since the last answer.
    pub failures: u32,
    /// When the prober last gave up (its deadline passed without an answer).
    pub gave_up_at: Option<Instant>,
}

/// A target discovery returned that bootstrap does not probe, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// The target (`host:port`, or a pod name when discovery left it out).
    pub target: String,
    /// Why it is not probed.
    pub reason: String,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.target, self.reason)
    }
}

/// Bootstrap's state, with instants; [`BootstrapStatus::view`] turns it into JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapStatus {
    /// The phase.
    pub phase: Phase,
    /// Why bootstrap is not used, or any other note.
    pub note: Option<String>,
    /// What is looked up.
    pub lookup: String,
    /// This node's contact point.
    pub self_contact_point: String,
    /// Lookups performed.
    pub lookups: u64,
    /// The last lookup: when, and the number of targets or the error.
    pub last_lookup: Option<(Instant, Result<usize, String>)>,
    /// The current contact points and their probes.
    pub contact_points: BTreeMap<ContactPoint, ProbeState>,
    /// The targets of the last successful lookup that are not probed, with the reasons.
    pub dropped: Vec<Dropped>,
    /// Since when the discovered set has been unchanged; `None` without a current observation.
    pub stable_since: Option<Instant>,
    /// The decider's last verdict.
    pub verdict: Option<(Instant, Verdict)>,
}

impl BootstrapStatus {
    /// The status of a node that does not bootstrap, with the reason.
    pub fn not_used(reason: impl Into<String>) -> Self {
        Self {
            phase: Phase::NotUsed,
            note: Some(reason.into()),
            lookup: String::new(),
            self_contact_point: String::new(),
            lookups: 0,
            last_lookup: None,
            contact_points: BTreeMap::new(),
            dropped: Vec::new(),
            stable_since: None,
            verdict: None,
        }
    }

    /// The status of bootstrap as it starts looking up `lookup`.
    pub fn probing(lookup: impl Into<String>, self_contact_point: impl Into<String>) -> Self {
        Self {
            phase: Phase::Probing,
            note: None,
            lookup: lookup.into(),
            self_contact_point: self_contact_point.into(),
            ..Self::not_used("")
        }
    }

    /// The JSON view at `now` (ages in milliseconds). `now` is a [`std::time::Instant`] or a
    /// tokio one, from the clock the status's instants were read from.
    pub fn view(&self, now: impl Into<Instant>) -> StatusView {
        let now = now.into();
        let age = |at: Instant| {
            u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
        };
        StatusView {
            phase: self.phase,
            note: self.note.clone(),
            lookup: self.lookup.clone(),
            self_contact_point: self.self_contact_point.clone(),
            lookups: self.lookups,
            last_lookup: self.last_lookup.as_ref().map(|(at, result)| LookupView {
                age_ms: age(*at),
                targets: result.as_ref().ok().copied(),
                error: result.as_ref().err().cloned(),
            }),
            stable_for_ms: self.stable_since.map(age),
            contact_points: self
                .contact_points
                .iter()
                .map(|(target, probe)| ContactPointView {
                    host: target.host.clone(),
                    port: target.port,
                    address: target.address.map(|a| a.to_string()),
                    last_probe: probe.last.as_ref().map(|(at, outcome)| match outcome {
                        ProbeOutcome::Answered { self_node, seed_nodes } => ProbeView {
                            age_ms: age(*at),
                            self_node: Some(self_node.clone()),
                            seed_nodes: Some(seed_nodes.clone()),
                            error: None,
                        },
                        ProbeOutcome::Failed(e) => ProbeView {
                            age_ms: age(*at),
                            self_node: None,
                            seed_nodes: None,
                            error: Some(e.clone()),
                        },
                    }),
                    failures: probe.failures,
                    gave_up_ms_ago: probe.gave_up_at.map(age),
                })
                .collect(),
            dropped_targets: self.dropped.clone(),
            verdict: self.verdict.as_ref().map(|(at, v)| VerdictView {
                age_ms: age(*at),
                decision: v.decision.name().to_owned(),
                seed_nodes: match &v.decision {
                    Decision::JoinOthers(seeds) => Some(seeds.clone()),
                    _ => None,
                },
                reason: v.reason.clone(),
                self_in_contact_points: v.self_in_contact_points,
            }),
        }
    }
}

/// `GET /bootstrap/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// `not-used`, `probing`, `joining-existing`, `forming-new` or `stopped`.
    pub phase: Phase,
    /// Why bootstrap is not used, or another note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What is looked up.
    pub lookup: String,
    /// This node's contact point.
    pub self_contact_point: String,
    /// Lookups performed.
    pub lookups: u64,
    /// The last lookup.
    pub last_lookup: Option<LookupView>,
    /// How long the discovered set has been unchanged; null without a current observation.
    pub stable_for_ms: Option<u64>,
    /// The discovered contact points and their probes.
    pub contact_points: Vec<ContactPointView>,
    /// Targets the last lookup returned that are not probed, each with the reason.
    pub dropped_targets: Vec<Dropped>,
    /// The decider's last verdict.
    pub verdict: Option<VerdictView>,
}

/// The last lookup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LookupView {
    /// Its age.
    pub age_ms: u64,
    /// The number of targets found, probed or not (see `droppedTargets`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<usize>,
    /// The error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One contact point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContactPointView {
    /// Its host.
    pub host: String,
    /// Its port, if discovery gave one.
    pub port: Option<u16>,
    /// Its IP, if discovery gave one.
    pub address: Option<String>,
    /// Its last probe.
    pub last_probe: Option<ProbeView>,
    /// Consecutive failed probes.
    pub failures: u32,
    /// How long ago its prober last gave up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_up_ms_ago: Option<u64>,
}

/// One probe result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeView {
    /// Its age.
    pub age_ms: u64,
    /// The answering node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_node: Option<String>,
    /// The seed nodes it advertised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_nodes: Option<Vec<String>>,
    /// The error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The decider's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictView {
    /// Its age.
    pub age_ms: u64,
    /// `KeepProbing`, `JoinOthers` or `JoinSelf`.
    pub decision: String,
    /// The seed nodes joined, for `JoinOthers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_nodes: Option<Vec<String>>,
    /// Why.
    pub reason: String,
    /// Whether this node's contact point is among the discovered ones.
    pub self_in_contact_points: bool,
}
